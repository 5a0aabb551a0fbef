//! Slab allocator: power-of-two classes from 32 B up to the configured
//! maximum (at most 4 KiB, eight classes, so a class fits the 3-bit slab type).
//!
//! Two levels, as in the paper:
//!
//! * [`WorkerCache`], the "NIC side": per class a bounded stack of free block
//!   addresses, kept in the engine struct (no heap, no sharing). An
//!   allocation pops, a free pushes. When the stack is empty it is refilled
//!   with [`BATCH`] blocks from the shared pool; when it is full, [`BATCH`]
//!   blocks are spilled back. Only these batch transfers touch the pool.
//! * [`SharedPool`], the "host side": per class an intrusive LIFO free list
//!   threaded through the free blocks themselves (the first 4 bytes of a free
//!   block hold the next block's address), plus a bump frontier of memory
//!   never handed out yet. A class that runs dry is refilled from the
//!   frontier, else by splitting a block of the next larger class.
//!
//! Lazy merging ([`SharedPool::merge`]) drains each class's list, radix-sorts
//! the addresses and moves aligned buddy pairs up one class. It only touches
//! the shared pool, so a worker keeps allocating from its cache meanwhile.
//! Today the pool is owned by the engine (one worker per region); the plan
//! for a service thread is to put the `SharedPool` behind a mutex that the
//! worker takes only inside `refill`/`spill`, never per operation.
//!
//! Addresses are `u32` in 32 B units from the region start; 0 is never a slab
//! address (bucket 0 of the hash index lives there), so it serves as "null".

use std::time::{Duration, Instant};

/// Smallest class in bytes.
pub const MIN_CLASS: usize = 32;
/// Most classes supported (32 B .. 4 KiB).
pub const MAX_CLASSES: usize = 8;
/// Worker cache capacity per class (the high watermark).
pub const CACHE_CAP: usize = 64;
/// Blocks moved per refill/spill transfer.
pub const BATCH: usize = 32;
/// Units (32 B) per byte shift.
pub const UNIT_SHIFT: u32 = 5;

/// Class index for a block of at least `bytes` bytes.
#[inline(always)]
pub fn class_for(bytes: usize) -> usize {
    let b = bytes.max(MIN_CLASS);
    (usize::BITS - (b - 1).leading_zeros()) as usize - MIN_CLASS.trailing_zeros() as usize
}

/// Bytes in class `c`.
#[inline(always)]
pub fn class_bytes(c: usize) -> usize {
    MIN_CLASS << c
}

#[inline(always)]
fn read_u32(mem: &[u8], unit: u32) -> u32 {
    let at = (unit as usize) << UNIT_SHIFT;
    let mut w = [0u8; 4];
    w.copy_from_slice(&mem[at..at + 4]);
    u32::from_le_bytes(w)
}

#[inline(always)]
fn write_u32(mem: &mut [u8], unit: u32, v: u32) {
    let at = (unit as usize) << UNIT_SHIFT;
    mem[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Counters of the shared pool.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolCounters {
    /// Refill transfers (shared -> worker).
    pub refills: u64,
    /// Spill transfers (worker -> shared).
    pub spills: u64,
    /// Blocks moved by refills and spills.
    pub blocks_moved: u64,
    /// Blocks split into two halves.
    pub splits: u64,
    /// Blocks carved from the frontier.
    pub carved: u64,
    /// Free-list cache lines read or written (intrusive links).
    pub link_lines: u64,
}

/// The host-side pool: per-class intrusive free lists plus a frontier.
#[derive(Debug)]
pub struct SharedPool {
    heads: [u32; MAX_CLASSES],
    counts: [u64; MAX_CLASSES],
    nclasses: usize,
    /// First unit of slab memory (buddy alignment is relative to it).
    base: u32,
    /// One past the last usable unit.
    end: u32,
    /// Next never-used unit.
    frontier: u32,
    counters: PoolCounters,
}

/// Result of one [`SharedPool::merge`] pass.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeReport {
    /// Free blocks examined (sorted) over all classes.
    pub scanned: u64,
    /// Buddy pairs merged into class `c + 1`, indexed by the source class `c`.
    pub merged: [u64; MAX_CLASSES],
    /// Wall time of the pass.
    pub elapsed: Duration,
}

impl SharedPool {
    /// A pool over units `base..end` with `nclasses` classes. `base` must be
    /// non-zero and 2-unit (64 B) aligned.
    pub fn new(base: u32, end: u32, nclasses: usize) -> SharedPool {
        debug_assert!(base > 0 && (1..=MAX_CLASSES).contains(&nclasses) && base <= end);
        SharedPool {
            heads: [0; MAX_CLASSES],
            counts: [0; MAX_CLASSES],
            nclasses,
            base,
            end,
            frontier: base,
            counters: PoolCounters::default(),
        }
    }

    /// Number of classes.
    pub fn nclasses(&self) -> usize {
        self.nclasses
    }

    /// Counters.
    pub fn counters(&self) -> PoolCounters {
        self.counters
    }

    /// Free blocks in the list of class `c`.
    pub fn free_count(&self, c: usize) -> u64 {
        self.counts[c]
    }

    /// Units not carved from the frontier yet.
    pub fn frontier_units(&self) -> u64 {
        u64::from(self.end - self.frontier)
    }

    /// Slab capacity in units.
    pub fn capacity_units(&self) -> u64 {
        u64::from(self.end - self.base)
    }

    /// `(first, end)` units of the slab area.
    pub fn bounds(&self) -> (u32, u32) {
        (self.base, self.end)
    }

    /// Unit range of the frontier `(frontier, end)`.
    pub fn frontier_range(&self) -> (u32, u32) {
        (self.frontier, self.end)
    }

    /// Calls `f(class, unit)` for each block on the shared free lists.
    pub fn for_each_free(&self, mem: &[u8], mut f: impl FnMut(usize, u32)) {
        for c in 0..self.nclasses {
            let mut u = self.heads[c];
            while u != 0 {
                f(c, u);
                u = read_u32(mem, u);
            }
        }
    }

    #[inline]
    fn push(&mut self, mem: &mut [u8], c: usize, unit: u32) {
        write_u32(mem, unit, self.heads[c]);
        self.heads[c] = unit;
        self.counts[c] += 1;
        self.counters.link_lines += 1;
    }

    #[inline]
    fn pop(&mut self, mem: &[u8], c: usize) -> Option<u32> {
        let u = self.heads[c];
        if u == 0 {
            return None;
        }
        self.heads[c] = read_u32(mem, u);
        self.counts[c] -= 1;
        self.counters.link_lines += 1;
        Some(u)
    }

    /// Pushes the aligned power-of-two decomposition of `from..to` onto
    /// the free lists (used for frontier gaps and the frontier's tail).
    fn release_range(&mut self, mem: &mut [u8], mut from: u32, to: u32) {
        while from < to {
            let rel = from - self.base;
            let mut c = self.nclasses - 1;
            loop {
                let units = 1u32 << c;
                if rel % units == 0 && from + units <= to {
                    break;
                }
                c -= 1; // c = 0 always succeeds (1 unit, any alignment)
            }
            self.push(mem, c, from);
            from += 1 << c;
        }
    }

    /// Carves a class-`c` block from the frontier, if it fits.
    fn carve(&mut self, mem: &mut [u8], c: usize) -> Option<u32> {
        let units = 1u32 << c;
        let rel = self.frontier - self.base;
        let aligned = self.base + rel.div_ceil(units) * units;
        if u64::from(aligned) + u64::from(units) > u64::from(self.end) {
            return None;
        }
        if aligned != self.frontier {
            let f = self.frontier;
            self.release_range(mem, f, aligned);
        }
        self.frontier = aligned + units;
        self.counters.carved += 1;
        Some(aligned)
    }

    /// Obtains one class-`c` block: own list, frontier, then a split of a
    /// larger block; as a last resort the frontier's remainder is released
    /// into the small classes.
    fn obtain(&mut self, mem: &mut [u8], c: usize) -> Option<u32> {
        if let Some(u) = self.pop(mem, c) {
            return Some(u);
        }
        if let Some(u) = self.carve(mem, c) {
            return Some(u);
        }
        if let Some(u) = self.split_from_above(mem, c) {
            return Some(u);
        }
        if self.frontier < self.end {
            let (f, e) = (self.frontier, self.end);
            self.frontier = e;
            self.release_range(mem, f, e);
            if let Some(u) = self.pop(mem, c) {
                return Some(u);
            }
            return self.split_from_above(mem, c);
        }
        None
    }

    fn split_from_above(&mut self, mem: &mut [u8], c: usize) -> Option<u32> {
        // Find the smallest larger class with a free block (no carving here:
        // carve() already failed for c, so it fails for larger classes too).
        let mut from = (c + 1..self.nclasses).find(|&k| self.counts[k] > 0)?;
        let u = self.pop(mem, from)?;
        while from > c {
            from -= 1;
            self.push(mem, from, u + (1 << from)); // upper half stays free
            self.counters.splits += 1;
        }
        Some(u)
    }

    /// Moves up to `want` class-`c` blocks into `out`; returns how many.
    pub fn refill(&mut self, mem: &mut [u8], c: usize, out: &mut [u32]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.obtain(mem, c) {
                Some(u) => {
                    out[n] = u;
                    n += 1;
                }
                None => break,
            }
        }
        self.counters.refills += 1;
        self.counters.blocks_moved += n as u64;
        n
    }

    /// Takes back class-`c` blocks from a worker.
    pub fn spill(&mut self, mem: &mut [u8], c: usize, blocks: &[u32]) {
        for &u in blocks {
            self.push(mem, c, u);
        }
        self.counters.spills += 1;
        self.counters.blocks_moved += blocks.len() as u64;
    }

    /// Lazy merge: for each class from the smallest, radix-sort the free
    /// addresses and merge aligned buddy pairs into the next class (so merges
    /// cascade). Off the hot path; allocates scratch vectors.
    pub fn merge(&mut self, mem: &mut [u8]) -> MergeReport {
        let t0 = Instant::now();
        let mut rep = MergeReport::default();
        let mut addrs: Vec<u32> = Vec::new();
        let mut scratch: Vec<u32> = Vec::new();
        for c in 0..self.nclasses.saturating_sub(1) {
            addrs.clear();
            while let Some(u) = self.pop(mem, c) {
                addrs.push(u - self.base);
            }
            rep.scanned += addrs.len() as u64;
            radix_sort(&mut addrs, &mut scratch);
            let units = 1u32 << c;
            let mut keep: Vec<u32> = Vec::new();
            let mut i = 0;
            while i < addrs.len() {
                let a = addrs[i];
                if a % (2 * units) == 0 && i + 1 < addrs.len() && addrs[i + 1] == a + units {
                    self.push(mem, c + 1, self.base + a);
                    rep.merged[c] += 1;
                    i += 2;
                } else {
                    keep.push(a);
                    i += 1;
                }
            }
            // Push in descending order so that pops hand out ascending addresses.
            for &a in keep.iter().rev() {
                self.push(mem, c, self.base + a);
            }
        }
        rep.elapsed = t0.elapsed();
        rep
    }
}

/// LSD radix sort of `u32`s, 8 bits per pass, skipping passes above the
/// largest value.
pub fn radix_sort(v: &mut Vec<u32>, scratch: &mut Vec<u32>) {
    let max = v.iter().copied().max().unwrap_or(0);
    scratch.clear();
    scratch.resize(v.len(), 0);
    let mut shift = 0;
    while shift < 32 && (max >> shift) != 0 {
        let mut count = [0usize; 257];
        for &x in v.iter() {
            count[((x >> shift) & 0xff) as usize + 1] += 1;
        }
        for i in 0..256 {
            count[i + 1] += count[i];
        }
        for &x in v.iter() {
            let d = ((x >> shift) & 0xff) as usize;
            scratch[count[d]] = x;
            count[d] += 1;
        }
        std::mem::swap(v, scratch);
        shift += 8;
    }
}

/// The worker-side per-class caches (bounded stacks).
#[derive(Debug)]
pub struct WorkerCache {
    stacks: [[u32; CACHE_CAP]; MAX_CLASSES],
    lens: [u8; MAX_CLASSES],
    /// Blocks currently handed out per class.
    pub allocated: [u64; MAX_CLASSES],
    /// Allocations served.
    pub allocs: u64,
    /// Frees taken.
    pub frees: u64,
}

impl Default for WorkerCache {
    fn default() -> Self {
        WorkerCache {
            stacks: [[0; CACHE_CAP]; MAX_CLASSES],
            lens: [0; MAX_CLASSES],
            allocated: [0; MAX_CLASSES],
            allocs: 0,
            frees: 0,
        }
    }
}

impl WorkerCache {
    /// Allocates a class-`c` block, refilling from `pool` in a batch when
    /// the stack is empty. `None` when memory is exhausted.
    #[inline]
    pub fn alloc(&mut self, pool: &mut SharedPool, mem: &mut [u8], c: usize) -> Option<u32> {
        debug_assert!(c < pool.nclasses());
        let c = c.min(MAX_CLASSES - 1);
        if self.lens[c] == 0 {
            let n = pool.refill(mem, c, &mut self.stacks[c][..BATCH]);
            self.lens[c] = n as u8;
            if n == 0 {
                return None;
            }
        }
        self.lens[c] -= 1;
        self.allocated[c] += 1;
        self.allocs += 1;
        Some(self.stacks[c][self.lens[c] as usize])
    }

    /// Returns a class-`c` block, spilling a batch to `pool` at the high
    /// watermark.
    #[inline]
    pub fn free(&mut self, pool: &mut SharedPool, mem: &mut [u8], c: usize, unit: u32) {
        let c = c.min(MAX_CLASSES - 1);
        if self.lens[c] as usize == CACHE_CAP {
            // Spill the bottom half (the oldest blocks), keep the hot top.
            pool.spill(mem, c, &self.stacks[c][..BATCH]);
            self.stacks[c].copy_within(BATCH.., 0);
            self.lens[c] -= BATCH as u8;
        }
        self.stacks[c][self.lens[c] as usize] = unit;
        self.lens[c] += 1;
        self.allocated[c] -= 1;
        self.frees += 1;
    }

    /// Free blocks cached for class `c`.
    pub fn cached(&self, c: usize) -> &[u32] {
        &self.stacks[c][..self.lens[c] as usize]
    }

    /// Top of the class-`c` stack (the next block `alloc` returns), if any.
    #[inline(always)]
    pub fn peek(&self, c: usize) -> Option<u32> {
        let l = self.lens[c] as usize;
        if l == 0 {
            None
        } else {
            Some(self.stacks[c][l - 1])
        }
    }

    /// Spills every cached block to the pool (e.g. before a full merge).
    pub fn flush(&mut self, pool: &mut SharedPool, mem: &mut [u8]) {
        for c in 0..pool.nclasses() {
            let l = self.lens[c] as usize;
            if l > 0 {
                pool.spill(mem, c, &self.stacks[c][..l]);
                self.lens[c] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    #[test]
    fn class_mapping() {
        assert_eq!(class_for(0), 0);
        assert_eq!(class_for(32), 0);
        assert_eq!(class_for(33), 1);
        assert_eq!(class_for(64), 1);
        assert_eq!(class_for(4096), 7);
        assert_eq!(class_bytes(7), 4096);
    }

    #[test]
    fn radix_sorts() {
        let mut v: Vec<u32> = (0..5000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) >> 3)
            .collect();
        let mut e = v.clone();
        e.sort_unstable();
        radix_sort(&mut v, &mut Vec::new());
        assert_eq!(v, e);
    }

    /// Checks the pool + cache + live set partition the slab area exactly.
    fn audit(pool: &SharedPool, cache: &WorkerCache, mem: &[u8], live: &BTreeMap<u32, usize>) {
        let mut spans: Vec<(u32, u32, &str)> = Vec::new();
        for (&u, &c) in live {
            spans.push((u, u + (1 << c), "live"));
        }
        pool.for_each_free(mem, |c, u| {
            assert_eq!((u - pool.base) % (1 << c), 0, "misaligned free block");
            spans.push((u, u + (1 << c), "shared"));
        });
        for c in 0..pool.nclasses() {
            for &u in cache.cached(c) {
                spans.push((u, u + (1 << c), "cache"));
            }
        }
        let (f, e) = pool.frontier_range();
        if f < e {
            spans.push((f, e, "frontier"));
        }
        spans.sort_unstable();
        let mut total = 0u64;
        for w in spans.windows(2) {
            assert!(w[0].1 <= w[1].0, "overlap {:?} {:?}", w[0], w[1]);
        }
        for s in &spans {
            assert!(s.0 >= pool.base && s.1 <= pool.end);
            total += u64::from(s.1 - s.0);
        }
        assert_eq!(total, pool.capacity_units(), "allocated + free != capacity");
    }

    proptest! {
        #[test]
        fn slab_invariants(ops in prop::collection::vec((0usize..4, 0usize..16, any::<bool>()), 1..600),
                           end_units in 40u32..400) {
            let mut mem = vec![0u8; (end_units as usize + 2) * 32];
            let mut pool = SharedPool::new(2, end_units, 4);
            let mut cache = WorkerCache::default();
            let mut live: BTreeMap<u32, usize> = BTreeMap::new();
            let mut order: Vec<u32> = Vec::new();
            for (i, &(c, pick, merge)) in ops.iter().enumerate() {
                if i % 3 == 2 && !order.is_empty() {
                    let u = order.swap_remove(pick % order.len());
                    let c = live.remove(&u).unwrap();
                    cache.free(&mut pool, &mut mem, c, u);
                } else if let Some(u) = cache.alloc(&mut pool, &mut mem, c) {
                    prop_assert!(live.insert(u, c).is_none(), "address handed out twice");
                    order.push(u);
                }
                if merge && i % 50 == 0 {
                    pool.merge(&mut mem);
                }
                if i % 37 == 0 {
                    audit(&pool, &cache, &mem, &live);
                }
            }
            audit(&pool, &cache, &mem, &live);
            // Free everything, merge: all memory must come back in usable form.
            for (u, c) in std::mem::take(&mut live) {
                cache.free(&mut pool, &mut mem, c, u);
            }
            cache.flush(&mut pool, &mut mem);
            audit(&pool, &cache, &mem, &live);
            pool.merge(&mut mem);
            audit(&pool, &cache, &mem, &live);
            // After a full merge no two free buddies remain below the top class.
            let mut per_class: Vec<Vec<u32>> = vec![Vec::new(); 4];
            pool.for_each_free(&mem, |c, u| per_class[c].push(u - pool.base));
            for (c, v) in per_class.iter_mut().enumerate().take(3) {
                v.sort_unstable();
                for w in v.windows(2) {
                    prop_assert!(!(w[0] % (2 << c) == 0 && w[1] == w[0] + (1 << c)), "unmerged buddies");
                }
            }
        }
    }

    #[test]
    fn exhaustion_then_reuse() {
        let mut mem = vec![0u8; 130 * 32];
        let mut pool = SharedPool::new(2, 130, 3);
        let mut cache = WorkerCache::default();
        let mut got = Vec::new();
        while let Some(u) = cache.alloc(&mut pool, &mut mem, 0) {
            got.push(u);
        }
        assert_eq!(got.len(), 128);
        assert!(cache.alloc(&mut pool, &mut mem, 2).is_none());
        for u in got.drain(..) {
            cache.free(&mut pool, &mut mem, 0, u);
        }
        cache.flush(&mut pool, &mut mem);
        let rep = pool.merge(&mut mem);
        assert_eq!(rep.merged[0], 64);
        assert_eq!(rep.merged[1], 32);
        assert_eq!(pool.free_count(2), 32);
        assert!(cache.alloc(&mut pool, &mut mem, 2).is_some());
    }
}
