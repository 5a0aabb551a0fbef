//! The engine: its state, construction and public API (get / put / delete /
//! `lookup_mut`, statistics, slab service hooks).
//!
//! Region layout (offsets from the region start):
//!
//! ```text
//!  0                      nbuckets * 64                                mem_bytes
//!  +----------------------+---------------------------------------------+
//!  | primary buckets      | slab memory: KV records (32 B .. 4 KiB      |
//!  | (64 B each)          | classes) and chained buckets (64 B class)   |
//!  +----------------------+---------------------------------------------+
//! ```
//!
//! The work is split by job:
//!
//! * `lookup`: finding a key in its bucket chain (a named `Hit`);
//! * `record`: the KV record format (slab record header, inline layout);
//! * `update`: PUT (insert / replace in place / relocate) and DELETE;
//! * `walk`: whole-index walks ([`Engine::for_each`],
//!   [`Engine::check_invariants`]);
//! * `scan`: the resumable, bounded scan ([`Engine::scan`]) a worker runs a
//!   few buckets at a time while serving;
//! * `crate::batch`: the prefetching batch pipeline over the same cores.

mod lookup;
mod record;
mod scan;
mod update;
mod walk;

pub(crate) use lookup::primary_bucket;
pub use record::{rec_hdr_len, KEY_LEN_LIMIT, REC_HDR};
pub use scan::{ScanCursor, ScanStep};

use crate::accounting::{Accounting, OpClass};
use crate::bucket::BUCKET_BYTES;
use crate::config::{ConfigError, EngineConfig};
use crate::hash::{bucket_index, key_hash};
use crate::region::{Region, RegionView};
use crate::service::{SlabService, SlabShared};
use crate::slab::{
    class_bytes, class_for, Links, MergeReport, SharedPool, SyncPool, WorkerCache, MAX_CLASSES,
    UNIT_SHIFT,
};
use crate::stats::{ClassStats, EngineStats, OpCounters};
use crate::Status;
use std::sync::Arc;

/// Slab class of a chained bucket (64 B).
const CHAIN_CLASS: usize = 1;

/// A KV-Direct storage engine over one [`Region`]. One per worker lcore:
/// `Send`, not `Sync`, every method takes `&mut self` or `&self`. Its
/// shared slab pool can be served from another thread through
/// [`Engine::slab_service`].
///
/// Limits: keys up to [`Engine::max_key_len`] bytes (empty keys are
/// allowed), values up to [`Engine::max_value_len`] bytes, and for records
/// in slab memory `header + key + value <= max_slab_class` (header 2 B
/// when key < 64 B and value < 512 B, else 4 B). Oversized input is
/// refused with [`Status::KeyTooLarge`] / [`Status::ValueTooLarge`].
pub struct Engine {
    region: RegionView,
    mem_bytes: usize,
    nbuckets: u64,
    inline_threshold: usize,
    nclasses: usize,
    max_key_len: usize,
    max_value_len: usize,
    max_class_bytes: usize,
    pub(crate) cache: WorkerCache,
    /// The shared pool and the region's owner, shared with service handles.
    slab: Arc<SlabShared>,
    pub(crate) ops: OpCounters,
    stored_kvs: u64,
    stored_bytes: u64,
    chained: u64,
    pub(crate) acct: Accounting,
}

// SAFETY: the engine is the worker's only access to the region's bytes
// outside the shared pool (`RegionView::new`'s contract), and the region
// stays alive in `slab` (an Arc, Send + Sync). Moving the engine, with that
// exclusive view, to another thread is sound; it stays !Sync (RegionView is).
unsafe impl Send for Engine {}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("mem_bytes", &self.mem_bytes)
            .field("nbuckets", &self.nbuckets)
            .field("inline_threshold", &self.inline_threshold)
            .field("stored_kvs", &self.stored_kvs)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Builds an engine in `region` (which must be at least
    /// `cfg.mem_bytes` long and 64-byte aligned). Zeroes the bucket array.
    pub fn new(mut region: Region, cfg: &EngineConfig) -> Result<Engine, ConfigError> {
        cfg.validate()?;
        if region.len() < cfg.mem_bytes {
            return Err(ConfigError::RegionTooSmall);
        }
        if region.as_ptr() as usize % BUCKET_BYTES != 0 {
            return Err(ConfigError::RegionMisaligned);
        }
        let nbuckets = cfg.num_buckets();
        let index_bytes = nbuckets * BUCKET_BYTES;
        region.as_mut_slice()[..index_bytes].fill(0);
        let nclasses = class_for(cfg.max_slab_class) + 1;
        let base = (index_bytes >> UNIT_SHIFT) as u32;
        let end = (cfg.mem_bytes >> UNIT_SHIFT) as u32;
        let max_class_bytes = class_bytes(nclasses - 1);
        // SAFETY: the region moves into `slab` just below and is never
        // accessed through `region` again; the view and the pool's links
        // touch disjoint bytes at any time (index and allocated blocks vs
        // blocks in the shared pool), ownership passing through the lock.
        let view = unsafe { RegionView::new(&mut region) };
        // SAFETY: `end` units lie inside `cfg.mem_bytes <= region.len()`;
        // the region lives as long as `slab` (which owns it) and so as long
        // as the pool and every copy of these links; only this pool uses
        // them, and the engine never touches a block while it is in the pool.
        let links = unsafe { Links::new(region.as_mut_ptr(), cfg.mem_bytes) };
        let pool = SyncPool::new(SharedPool::new(base, end, nclasses, links));
        Ok(Engine {
            region: view,
            mem_bytes: cfg.mem_bytes,
            nbuckets: nbuckets as u64,
            inline_threshold: cfg.inline_threshold,
            nclasses,
            max_key_len: KEY_LEN_LIMIT.min(max_class_bytes - REC_HDR),
            max_value_len: (max_class_bytes - REC_HDR).min(u16::MAX as usize),
            max_class_bytes,
            cache: WorkerCache::default(),
            slab: Arc::new(SlabShared::new(pool, region)),
            ops: OpCounters::default(),
            stored_kvs: 0,
            stored_bytes: 0,
            chained: 0,
            acct: Accounting::new(),
        })
    }

    /// Longest key accepted (255 B, or less with a small `max_slab_class`).
    pub fn max_key_len(&self) -> usize {
        self.max_key_len
    }

    /// Longest value accepted, reached with an empty key
    /// (`max_slab_class - 4`, i.e. 4092 B by default). In general a KV
    /// stored in slab memory needs `h + key.len() + value.len() <= max_slab_class`
    /// with a record header `h` of 2 bytes (key < 64 B and value < 512 B) or 4.
    pub fn max_value_len(&self) -> usize {
        self.max_value_len
    }

    /// The inline threshold in effect.
    pub fn inline_threshold(&self) -> usize {
        self.inline_threshold
    }

    /// Byte offset of the primary bucket for hash `h`.
    #[inline(always)]
    pub(crate) fn bucket_off(&self, h: u64) -> usize {
        bucket_index(h, self.nbuckets) as usize * BUCKET_BYTES
    }

    /// The region bytes (for prefetching and read-only inspection).
    #[inline(always)]
    pub(crate) fn mem(&self) -> &[u8] {
        self.region.as_slice()
    }

    #[inline(always)]
    pub(crate) fn check_key(&self, key: &[u8]) -> Result<(), Status> {
        if key.len() > self.max_key_len {
            Err(Status::KeyTooLarge)
        } else {
            Ok(())
        }
    }

    #[inline(always)]
    pub(crate) fn check_put(&self, key: &[u8], value: &[u8]) -> Result<(), Status> {
        self.check_key(key)?;
        let total = key.len() + value.len();
        if total > self.inline_threshold
            && rec_hdr_len(key.len(), value.len()) + total > self.max_class_bytes
        {
            return Err(Status::ValueTooLarge);
        }
        Ok(())
    }

    /// GET core: counts and returns the value's location.
    #[inline(always)]
    pub(crate) fn get_hashed(&mut self, key: &[u8], h: u64) -> Option<(usize, usize)> {
        let off = self.bucket_off(h);
        // SAFETY: `off` is `bucket_off(h)`, computed just above.
        unsafe { self.get_hashed_at(key, h, off) }
    }

    /// [`Engine::get_hashed`] with the primary bucket offset already known.
    ///
    /// # Safety
    ///
    /// `off` must be `self.bucket_off(h)` (asserted in debug builds).
    #[inline(always)]
    pub(crate) unsafe fn get_hashed_at(
        &mut self,
        key: &[u8],
        h: u64,
        off: usize,
    ) -> Option<(usize, usize)> {
        self.ops.gets += 1;
        // SAFETY: the caller guarantees `off == self.bucket_off(h)` (# Safety).
        let r = unsafe { self.find_value_at(key, h, off) };
        if r.is_some() {
            self.ops.get_hits += 1;
        }
        self.acct.finish(OpClass::Get);
        r
    }

    /// Copies the value of `key` into `out` and returns its length.
    ///
    /// Errors: [`Status::NotFound`]; [`Status::KeyTooLarge`] for a key longer
    /// than [`Engine::max_key_len`]; [`Status::BufferTooSmall`] when `out` is
    /// shorter than the value (nothing is copied; size `out` with
    /// [`Engine::max_value_len`] to never see it).
    pub fn get(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        if let Err(s) = self.check_key(key) {
            self.ops.gets += 1;
            self.ops.refused += 1;
            return Err(s);
        }
        let (off, len) = self
            .get_hashed(key, key_hash(key))
            .ok_or(Status::NotFound)?;
        if out.len() < len {
            self.ops.refused += 1;
            return Err(Status::BufferTooSmall);
        }
        out[..len].copy_from_slice(&self.region.as_slice()[off..off + len]);
        Ok(len)
    }

    /// Inserts or replaces `key`. Replaces in place when the new KV keeps
    /// the same inline slot count or the same slab class.
    ///
    /// Returns [`Status::Ok`], [`Status::OutOfMemory`] (nothing changed:
    /// the old value, if any, is still there), [`Status::KeyTooLarge`] or
    /// [`Status::ValueTooLarge`].
    pub fn put(&mut self, key: &[u8], value: &[u8]) -> Status {
        if let Err(s) = self.check_put(key, value) {
            self.ops.puts += 1;
            self.ops.refused += 1;
            return s;
        }
        let st = self.put_hashed(key, value, key_hash(key));
        self.acct.finish(OpClass::Put);
        st
    }

    /// Removes `key`. Returns [`Status::Ok`], [`Status::NotFound`] or
    /// [`Status::KeyTooLarge`]. An emptied chained bucket goes back to the slab.
    pub fn delete(&mut self, key: &[u8]) -> Status {
        if let Err(s) = self.check_key(key) {
            self.ops.deletes += 1;
            self.ops.refused += 1;
            return s;
        }
        let st = self.delete_hashed(key, key_hash(key));
        self.acct.finish(OpClass::Delete);
        st
    }

    /// The stored value of `key`, writable in place: the handle the
    /// reservation station uses for atomic read-modify-write. The length is
    /// fixed; to change it use [`Engine::put`]. Counted as a GET.
    pub fn lookup_mut(&mut self, key: &[u8]) -> Option<&mut [u8]> {
        if self.check_key(key).is_err() {
            return None;
        }
        let (off, len) = self.get_hashed(key, key_hash(key))?;
        Some(&mut self.region.as_mut_slice()[off..off + len])
    }

    /// Lazy merge of free slabs in the shared pool, on the calling thread
    /// (the same code as [`SlabService::merge_now`]). Off the hot path;
    /// allocates scratch memory. Blocks cached by the worker are left alone.
    pub fn merge_slabs(&mut self) -> MergeReport {
        self.slab.merge()
    }

    /// A handle for a service thread that merges and pre-splits the shared
    /// pool while this engine keeps serving (see [`SlabService`]). The
    /// handle keeps the engine's memory alive.
    pub fn slab_service(&self) -> SlabService {
        SlabService::new(Arc::clone(&self.slab))
    }

    /// Prefetches the primary bucket of `key` (a hint for callers that stage their own
    /// accesses, like the reservation station: prefetch a round of keys, then run them).
    #[inline]
    pub fn prefetch_key(&self, key: &[u8]) {
        crate::batch::prefetch_hint(self.mem(), self.bucket_off(key_hash(key)));
    }

    /// Returns every block cached by the worker to the shared pool (so a
    /// following [`Engine::merge_slabs`] sees all free memory). Waits for
    /// the pool lock.
    pub fn flush_slab_cache(&mut self) {
        self.cache.flush(&self.slab.pool);
    }

    /// Resets the line-accounting totals (no-op without the feature).
    pub fn reset_accounting(&mut self) {
        self.acct.reset();
    }

    /// The operation counters alone: a copy of a few words, cheap enough to take
    /// around every batch (unlike [`Engine::stats`], which locks the slab pool).
    #[inline]
    pub fn op_counters(&self) -> OpCounters {
        self.ops
    }

    /// A statistics snapshot.
    pub fn stats(&self) -> EngineStats {
        let pool = self.slab.pool.lock();
        let mut classes = [ClassStats::default(); MAX_CLASSES];
        for (c, cs) in classes.iter_mut().enumerate().take(self.nclasses) {
            *cs = ClassStats {
                class_bytes: class_bytes(c),
                worker_cached: self.cache.cached(c).len(),
                shared_free: pool.free_count(c),
                allocated: self.cache.allocated[c],
            };
        }
        EngineStats {
            ops: self.ops,
            stored_kvs: self.stored_kvs,
            stored_kv_bytes: self.stored_bytes,
            region_bytes: self.mem_bytes as u64,
            memory_utilization: self.stored_bytes as f64 / self.mem_bytes as f64,
            hash_buckets: self.nbuckets,
            chained_buckets: self.chained,
            nclasses: self.nclasses,
            classes,
            slab_allocs: self.cache.allocs,
            slab_frees: self.cache.frees,
            pool: pool.counters(),
            contention: self.cache.contention,
            frontier_bytes: pool.frontier_units() << UNIT_SHIFT,
            lines: self.acct.totals(),
        }
    }
}

/// An engine over `mem_bytes` of heap memory with hash index ratio `ratio`, the other
/// parameters default: the engine modules' unit tests share it.
#[cfg(test)]
pub(crate) fn test_engine(mem_bytes: usize, ratio: f64) -> Engine {
    let cfg = EngineConfig {
        mem_bytes,
        hash_index_ratio: ratio,
        ..EngineConfig::default()
    };
    Engine::new(Region::owned(mem_bytes), &cfg).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn engine() -> Engine {
        test_engine(1 << 20, EngineConfig::default().hash_index_ratio)
    }

    #[test]
    fn get_errors_copy_nothing_and_count() {
        let mut e = engine();
        assert_eq!(e.put(b"k", b"twelve bytes"), Status::Ok);
        let mut out = [0xaau8; 11];
        assert_eq!(e.get(b"k", &mut out), Err(Status::BufferTooSmall));
        assert_eq!(out, [0xaa; 11], "copied into a short buffer");
        assert_eq!(e.get(b"other", &mut out), Err(Status::NotFound));
        let long = [1u8; KEY_LEN_LIMIT + 1];
        assert_eq!(e.get(&long, &mut out), Err(Status::KeyTooLarge));
        let mut exact = [0u8; 12];
        assert_eq!(e.get(b"k", &mut exact), Ok(12));
        assert_eq!(&exact, b"twelve bytes");
        let ops = e.op_counters();
        assert_eq!((ops.gets, ops.get_hits, ops.refused), (4, 2, 2));
    }

    #[test]
    fn size_limits() {
        let mut e = engine();
        assert_eq!((e.max_key_len(), e.max_value_len()), (255, 4092));
        let key = [7u8; 255];
        assert_eq!(e.put(&key, b"v"), Status::Ok);
        assert_eq!(e.put(&[7u8; 256], b"v"), Status::KeyTooLarge);
        assert_eq!(e.delete(&[7u8; 256]), Status::KeyTooLarge);
        // Long header (4 B) + key + value must fit the 4 KiB class.
        assert_eq!(e.put(b"", &[1u8; 4092]), Status::Ok);
        assert_eq!(e.put(b"", &[1u8; 4093]), Status::ValueTooLarge);
        assert_eq!(e.put(b"ab", &[1u8; 4091]), Status::ValueTooLarge);
        assert_eq!(e.put(b"ab", &[1u8; 4090]), Status::Ok);
        e.check_invariants().unwrap();
    }

    #[test]
    fn lookup_mut_writes_in_place() {
        let mut e = engine();
        for (key, len) in [(&b"inline"[..], 4), (b"slab", 100)] {
            assert_eq!(e.put(key, &vec![0u8; len]), Status::Ok);
            let v = e.lookup_mut(key).expect("stored");
            assert_eq!(v.len(), len);
            v.fill(9);
            let mut out = [0u8; 128];
            assert_eq!(e.get(key, &mut out), Ok(len));
            assert!(out[..len].iter().all(|&b| b == 9));
        }
        assert!(e.lookup_mut(b"missing").is_none());
        assert!(e.lookup_mut(&[0u8; 300]).is_none());
    }
}
