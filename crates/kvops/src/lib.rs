//! KV-Direct operation core (SOSP'17 §3.3.3 and §3.3.4), pure Rust, no DPDK types.
//!
//! The vocabulary is the wire's (`kvwire`): operations are [`kvwire::KvOp`], statuses
//! [`kvwire::Status`], element widths [`kvwire::Width`], function and predicate IDs the
//! `u8` tables [`kvwire::func`] and [`kvwire::pred`]. This crate adds their behaviour:
//!
//! * [`functions`]: the element functions ([`functions::Builtin`], one per
//!   `kvwire::func` ID: fetch-add, CAS, min, …), applied to little-endian elements of 1,
//!   2, 4 or 8 bytes, plus the vector operations (`update_s2v`, `update_v2v`, `reduce`,
//!   `filter`) and the filter [`Predicate`]s.
//! * [`registry`]: maps function IDs to built-in or user functions; user functions are
//!   registered at start-up.
//! * [`semantics`]: what each read-modify-write op does to a value ([`semantics::run`]),
//!   the one interpreter of op meaning the station and the transaction executor share.
//! * [`station`]: the per-lcore reservation station that orders dependent operations,
//!   forwards cached values to operations on the same key and merges their updates into
//!   one write-back; or, with `ooo = false`, stalls on every conflict (the baseline).
//!
//! Nothing here allocates on the apply paths: every result is written into a caller
//! buffer or into buffers the station allocated at construction. No function panics on
//! any input. See `docs/OPERATIONS.md` for the operator-facing description.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod functions;
pub mod registry;
pub mod semantics;
pub mod station;

pub use functions::{ElemFn, OpError, Predicate};
pub use registry::{FunctionRegistry, RegistryError, UserFn};
pub use station::{
    CompletionSink, MemoryStage, Station, StationConfig, StationConfigError, StationStats,
};
