//! Engine statistics snapshot.

use crate::accounting::{LineStats, OpClass};
use crate::slab::{PoolCounters, WorkerContention, MAX_CLASSES};

/// Operation counters kept by the engine (plain `u64`s, one writer).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct OpCounters {
    /// GETs executed (including refused ones).
    pub gets: u64,
    /// GETs that found the key.
    pub get_hits: u64,
    /// PUTs executed.
    pub puts: u64,
    /// PUTs that inserted a new key.
    pub put_inserts: u64,
    /// PUTs that replaced a value.
    pub put_replaces: u64,
    /// PUTs answered with `OutOfMemory`.
    pub put_oom: u64,
    /// DELETEs executed.
    pub deletes: u64,
    /// DELETEs that removed a key.
    pub delete_hits: u64,
    /// Operations refused for key/value/buffer size.
    pub refused: u64,
}

/// Per slab class levels.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassStats {
    /// Block size in bytes.
    pub class_bytes: usize,
    /// Free blocks in the worker cache.
    pub worker_cached: usize,
    /// Free blocks in the shared pool's list.
    pub shared_free: u64,
    /// Blocks currently allocated (records and chained buckets).
    pub allocated: u64,
}

/// A snapshot returned by [`crate::Engine::stats`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct EngineStats {
    /// Operation counters.
    pub ops: OpCounters,
    /// Live keys.
    pub stored_kvs: u64,
    /// Sum of `key.len() + value.len()` over live keys.
    pub stored_kv_bytes: u64,
    /// Bytes of the region the engine manages (`mem_bytes`).
    pub region_bytes: u64,
    /// `stored_kv_bytes / region_bytes`.
    pub memory_utilization: f64,
    /// Primary buckets.
    pub hash_buckets: u64,
    /// Chained buckets currently allocated from the slab.
    pub chained_buckets: u64,
    /// Number of slab classes in use.
    pub nclasses: usize,
    /// Per-class levels (first `nclasses` entries valid).
    pub classes: [ClassStats; MAX_CLASSES],
    /// Slab allocations served by the worker cache.
    pub slab_allocs: u64,
    /// Slab frees taken by the worker cache.
    pub slab_frees: u64,
    /// Shared-pool transfer counters.
    pub pool: PoolCounters,
    /// What the worker did when a slab service held the pool lock.
    pub contention: WorkerContention,
    /// Slab memory never handed out yet (bytes).
    pub frontier_bytes: u64,
    /// Lines touched, with the `accounting` feature.
    pub lines: Option<LineStats>,
}

impl EngineStats {
    /// Shared-pool transfers (refills + spills) per slab allocation.
    pub fn transfers_per_alloc(&self) -> f64 {
        if self.slab_allocs == 0 {
            0.0
        } else {
            (self.pool.refills + self.pool.spills) as f64 / self.slab_allocs as f64
        }
    }

    /// Mean lines per GET (accounting builds only).
    pub fn lines_per_get(&self) -> Option<f64> {
        self.lines.map(|l| l.lines_per_op(OpClass::Get))
    }

    /// Mean lines per PUT (accounting builds only).
    pub fn lines_per_put(&self) -> Option<f64> {
        self.lines.map(|l| l.lines_per_op(OpClass::Put))
    }
}
