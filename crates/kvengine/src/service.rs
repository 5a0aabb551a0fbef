//! The slab service: the engine's shared pool as a handle another thread
//! (the dataplane's control thread or a service lcore) uses to merge and
//! pre-split free blocks while the worker keeps running (KV-Direct §3.3.2:
//! the host daemon keeps the slab pools balanced).
//!
//! ```
//! use kvengine::{Engine, EngineConfig, Region};
//! let cfg = EngineConfig { mem_bytes: 1 << 20, ..EngineConfig::default() };
//! let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
//! let svc = e.slab_service();
//! let t = std::thread::spawn(move || {
//!     let rep = svc.merge_now();
//!     svc.balance();
//!     (rep.scanned, svc.levels().nclasses)
//! });
//! e.put(b"k", &[7u8; 100]);
//! e.delete(b"k");
//! assert_eq!(t.join().unwrap().1, 8);
//! ```

use crate::region::Region;
use crate::slab::{BalanceReport, MergeReport, PoolLevels, SyncPool};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Keeps the engine's region alive (and frees an owned one) until the
/// engine and every [`SlabService`] handle are gone.
struct KeepAlive(#[allow(dead_code)] Region);

// SAFETY: a KeepAlive is never read: no `&Region` is ever formed through
// it, so sharing `&KeepAlive` between threads gives access to nothing. Its
// only effect is dropping the Region, which happens once, on whichever
// thread drops the last `Arc<SlabShared>` (Region is Send).
unsafe impl Sync for KeepAlive {}

/// What the worker (engine) and the service handles share.
pub(crate) struct SlabShared {
    pub(crate) pool: SyncPool,
    merges: AtomicU64,
    balances: AtomicU64,
    _region: KeepAlive,
}

impl SlabShared {
    /// Shares `pool`, whose links live in `region`.
    pub(crate) fn new(pool: SyncPool, region: Region) -> SlabShared {
        SlabShared {
            pool,
            merges: AtomicU64::new(0),
            balances: AtomicU64::new(0),
            _region: KeepAlive(region),
        }
    }

    pub(crate) fn merge(&self) -> MergeReport {
        let r = self.pool.merge();
        self.merges.fetch_add(1, Ordering::Relaxed);
        r
    }
}

/// A handle to an engine's shared slab pool for a service thread:
/// `Send + Sync + Clone`. It keeps the engine's memory alive, so it may
/// outlive the engine. None of its methods ever makes the worker wait for
/// longer than one short lock hold (see `docs/ENGINE.md`, "Slab service").
#[derive(Clone)]
pub struct SlabService {
    shared: Arc<SlabShared>,
}

impl std::fmt::Debug for SlabService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlabService")
            .field("levels", &self.levels())
            .finish_non_exhaustive()
    }
}

impl SlabService {
    pub(crate) fn new(shared: Arc<SlabShared>) -> SlabService {
        SlabService { shared }
    }

    /// Lazy merge now: per class, detach the free list, radix-sort the
    /// addresses, merge buddy pairs into the next class (cascading), splice
    /// the rest back. Blocks in the worker's cache are not seen. Allocates
    /// scratch memory; holds the pool lock only for O(1) steps.
    pub fn merge_now(&self) -> MergeReport {
        self.shared.merge()
    }

    /// Pre-splits larger free blocks into classes the worker has been
    /// refilling and that run low (see [`SyncPool::balance`]).
    pub fn balance(&self) -> BalanceReport {
        let r = self.shared.pool.balance();
        self.shared.balances.fetch_add(1, Ordering::Relaxed);
        r
    }

    /// Free blocks per class in the shared pool, without taking the lock.
    /// The worker cache's levels are in [`crate::Engine::stats`].
    pub fn levels(&self) -> PoolLevels {
        self.shared.pool.levels()
    }

    /// Merge passes completed so far (by any handle or the engine).
    pub fn merges_completed(&self) -> u64 {
        self.shared.merges.load(Ordering::Relaxed)
    }

    /// Balance passes completed so far (by any handle).
    pub fn balances_completed(&self) -> u64 {
        self.shared.balances.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handle_is_send_sync_clone() {
        fn check<T: Send + Sync + Clone + 'static>() {}
        check::<SlabService>();
    }
}
