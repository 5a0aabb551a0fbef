//! KV-Direct storage engine (SOSP'17 §3.3.1–3.3.2), in pure Rust.
//!
//! One [`Engine`] per worker lcore owns one [`Region`] of memory, split at
//! start-up by the hash index ratio into an array of 64-byte hash buckets
//! and slab memory:
//!
//! * [`bucket`]: the bucket layout (10 slots of 5 B, inline KVs, chaining);
//! * [`slab`]: the slab allocator (worker cache + shared pool, split, merge);
//! * [`service`]: [`SlabService`], the shared pool served from another thread;
//! * [`engine`]: get / put / delete / `lookup_mut` over the index (split
//!   into lookup, record format, updates and whole-index walks);
//! * [`batch`]: group-prefetching batched execution;
//! * [`accounting`]: distinct-cache-line counting (feature `accounting`);
//! * [`hash`]: [`key_hash`], shared with clients for partition steering;
//! * [`config`], [`region`], [`stats`]: parameters, memory, counters;
//! * [`Status`]: operation outcomes, with their wire status
//!   (`From<Status> for kvwire::Status`).
//!
//! Layout, limits, the prefetch pipeline and measured figures are in
//! `docs/ENGINE.md`.
//!
//! ```
//! use kvengine::{Engine, EngineConfig, Region, Status};
//! let cfg = EngineConfig { mem_bytes: 1 << 20, ..EngineConfig::default() };
//! let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
//! assert_eq!(e.put(b"key", b"value"), Status::Ok);
//! let mut out = [0u8; 16];
//! assert_eq!(e.get(b"key", &mut out), Ok(5));
//! assert_eq!(&out[..5], b"value");
//! ```
//!
//! No operation panics on any key or value size and the hot path (get, put,
//! delete, `execute_batch`) does not allocate.
#![deny(unsafe_op_in_unsafe_fn)]
#![deny(clippy::undocumented_unsafe_blocks)]
#![warn(missing_docs)]

pub mod accounting;
pub mod batch;
pub mod bucket;
pub mod config;
pub mod engine;
pub mod hash;
pub mod region;
pub mod service;
pub mod slab;
pub mod stats;
mod status;

pub use accounting::{LineStats, OpClass};
pub use batch::prefetch_ref;
pub use config::{ConfigError, EngineConfig};
pub use engine::{Engine, ScanCursor, ScanStep};
pub use hash::key_hash;
pub use region::Region;
pub use service::SlabService;
pub use slab::{BalanceReport, MergeReport, PoolLevels, WorkerContention};
pub use stats::{ClassStats, EngineStats, OpCounters};
pub use status::Status;

/// Operation kind of a [`BatchOp`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// Read a value.
    Get,
    /// Insert or replace.
    Put,
    /// Remove.
    Delete,
}

/// One operation of a batch; `value` is ignored except for `Put`.
#[derive(Clone, Copy, Debug)]
pub struct BatchOp<'a> {
    /// What to do.
    pub kind: OpKind,
    /// The key.
    pub key: &'a [u8],
    /// The value (PUT only).
    pub value: &'a [u8],
}

impl<'a> BatchOp<'a> {
    /// A GET.
    pub fn get(key: &'a [u8]) -> Self {
        BatchOp {
            kind: OpKind::Get,
            key,
            value: &[],
        }
    }
    /// A PUT.
    pub fn put(key: &'a [u8], value: &'a [u8]) -> Self {
        BatchOp {
            kind: OpKind::Put,
            key,
            value,
        }
    }
    /// A DELETE.
    pub fn delete(key: &'a [u8]) -> Self {
        BatchOp {
            kind: OpKind::Delete,
            key,
            value: &[],
        }
    }
}

/// Receives batch results, once per op, in op order.
pub trait ResultSink {
    /// Result of op `index`; `value` is empty except for a successful GET.
    fn result(&mut self, index: usize, status: Status, value: &[u8]);
}

impl<F: FnMut(usize, Status, &[u8])> ResultSink for F {
    fn result(&mut self, index: usize, status: Status, value: &[u8]) {
        self(index, status, value)
    }
}
