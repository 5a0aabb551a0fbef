//! Batched execution with prefetching.
//!
//! [`Engine::execute_batch`] is a software pipeline over the batch:
//!
//! ```text
//!  op index:   i                 i + SECOND_AHEAD              i + BUCKET_AHEAD
//!              execute in order  peek bucket (cached by now);  hash key,
//!              (re-walk cached   prefetch chained bucket and   prefetch primary
//!              lines)            matching slab records         bucket
//! ```
//!
//! so about `BUCKET_AHEAD` bucket misses and `SECOND_AHEAD` second-stage
//! misses are in flight at any time, continuously. The alternative group
//! prefetching ([`Engine::execute_batch_grouped`]: per group of [`GROUP`],
//! hash + prefetch all, peek + prefetch next stage, execute) exposes one full
//! memory latency per group because stage 2 waits for the group's first
//! bucket; it measured slower (docs/ENGINE.md).
//!
//! Prefetches are hints only: execution runs exactly the sequential code, so
//! results equal in-order execution even when a batch repeats a key or an
//! earlier PUT changes a bucket that a later op prefetched.

use crate::bucket::{read_slot_fast, Meta, INLINE1_BASE, PTR_BITS};
use crate::engine::primary_bucket;
use crate::hash::{key_hash, secondary};
use crate::slab::UNIT_SHIFT;
use crate::{accounting::OpClass, BatchOp, Engine, OpKind, ResultSink, Status};

/// Operations per prefetch group (grouped variant).
pub const GROUP: usize = 16;
/// Pipelined variant: how many ops ahead the primary bucket is prefetched.
pub const BUCKET_AHEAD: usize = 32;
/// Pipelined variant: how many ops ahead the bucket is peeked and the
/// chained bucket / slab record prefetched.
pub const SECOND_AHEAD: usize = 12;
/// Ring of precomputed hashes (power of two > BUCKET_AHEAD).
const RING: usize = 64;
const _: () = assert!(RING.is_power_of_two() && RING > BUCKET_AHEAD && BUCKET_AHEAD > SECOND_AHEAD);

/// Issues a prefetch of the cache line holding `mem[off]` (no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch(mem: &[u8], off: usize) {
    // wrapping_add keeps the pointer arithmetic defined for any `off`; the
    // prefetch itself never faults.
    prefetch_addr(mem.as_ptr().wrapping_add(off));
}

/// Prefetches the cache line holding the start of `*r` (a hint for callers that
/// stage their own lookups, e.g. per-connection state before a burst is processed).
#[inline(always)]
pub fn prefetch_ref<T: ?Sized>(r: &T) {
    prefetch_addr((r as *const T).cast::<u8>());
}

/// Issues a prefetch of the cache line at `p` (no-op off x86-64). Any address is
/// allowed: a prefetch is a hint and never faults.
#[inline(always)]
fn prefetch_addr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: PREFETCHT0 is a hint that never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>(p.cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = p;
    }
}

/// Public prefetch hint (for benchmarks and callers that stage their own
/// lookups): a no-op off x86-64, never faults.
#[inline(always)]
pub fn prefetch_hint(mem: &[u8], off: usize) {
    prefetch(mem, off)
}

impl Engine {
    /// Stage 2: peek at the primary bucket (at byte offset `off`), prefetch
    /// candidate records and the next chained bucket.
    ///
    /// # Safety
    ///
    /// `off` must be `self.bucket_off(h)` (asserted in debug builds).
    #[inline(always)]
    unsafe fn prefetch_second(&self, h: u64, off: usize) {
        let mem = self.mem();
        debug_assert_eq!(off, self.bucket_off(h));
        // SAFETY: the caller guarantees `off == self.bucket_off(h)`.
        let b = unsafe { primary_bucket(mem, off) };
        let m = Meta::load(b);
        let sec = secondary(h);
        // Pointer entries whose secondary hash matches: their records.
        let mut single = m.single_starts();
        while single != 0 {
            let s = single.trailing_zeros();
            single &= single - 1;
            if m.field(s) < INLINE1_BASE {
                let word = read_slot_fast(b, s);
                if (word >> PTR_BITS) as u16 == sec {
                    prefetch(mem, ((word & ((1 << PTR_BITS) - 1)) as usize) << UNIT_SHIFT);
                }
            }
        }
        let c = m.chain();
        if c != 0 {
            prefetch(mem, (c as usize) << UNIT_SHIFT);
        }
    }

    /// Executes `ops` with software-pipelined prefetching. Results equal
    /// in-order sequential execution; `sink.result(i, status, value)` is
    /// called exactly once per op, in op order `i = 0, 1, ..`; `value` is
    /// empty except for a successful GET, where it borrows the stored bytes.
    /// Statuses are those of [`Engine::get`], [`Engine::put`] and
    /// [`Engine::delete`] (a batch GET never answers `BufferTooSmall`).
    ///
    /// While op `i` executes, op `i + BUCKET_AHEAD` is hashed and its bucket
    /// prefetched, and op `i + SECOND_AHEAD` has its bucket peeked so its
    /// chained bucket / slab record can be prefetched. Larger batches amortize
    /// the pipeline fill (the first `BUCKET_AHEAD` ops).
    pub fn execute_batch<S: ResultSink>(&mut self, ops: &[BatchOp<'_>], sink: &mut S) {
        self.execute_pipelined::<BUCKET_AHEAD, SECOND_AHEAD, S>(ops, sink)
    }

    /// [`Engine::execute_batch`] with explicit prefetch distances (`A`: bucket,
    /// `B`: second stage; `B < A < 32`), for tuning experiments.
    #[doc(hidden)]
    #[inline(always)]
    pub fn execute_pipelined<const A: usize, const B: usize, S: ResultSink>(
        &mut self,
        ops: &[BatchOp<'_>],
        sink: &mut S,
    ) {
        const { assert!(B < A && A < RING) };
        let n = ops.len();
        // Per op in flight: its hash `h` and `bucket_off(h)`. Every entry
        // keeps `off == bucket_off(h)` (also the initial (0, 0):
        // `bucket_index(0, n) == 0`), which the `unsafe` calls below rely on.
        let mut hs = [(0u64, 0usize); RING];
        for (j, op) in ops.iter().enumerate().take(A) {
            let h = key_hash(op.key);
            let off = self.bucket_off(h);
            hs[j] = (h, off);
            prefetch(self.mem(), off);
        }
        for &(h, off) in hs.iter().take(B.min(n)) {
            // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
            unsafe { self.prefetch_second(h, off) };
        }
        // Three phases so that the steady state has no per-op range tests:
        // all stages, then no more hashing, then execution only.
        let (n1, n2) = (n.saturating_sub(A), n.saturating_sub(B));
        for i in 0..n1 {
            let h = key_hash(ops[i + A].key);
            let off = self.bucket_off(h);
            hs[(i + A) % RING] = (h, off);
            prefetch(self.mem(), off);
            let (h, off) = hs[(i + B) % RING];
            // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
            unsafe { self.prefetch_second(h, off) };
            let (h, off) = hs[i % RING];
            // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
            unsafe { self.execute_one(i, &ops[i], h, off, sink) };
        }
        for i in n1..n2 {
            let (h, off) = hs[(i + B) % RING];
            // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
            unsafe { self.prefetch_second(h, off) };
            let (h, off) = hs[i % RING];
            // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
            unsafe { self.execute_one(i, &ops[i], h, off, sink) };
        }
        for (i, op) in ops.iter().enumerate().skip(n2) {
            let (h, off) = hs[i % RING];
            // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
            unsafe { self.execute_one(i, op, h, off, sink) };
        }
    }

    /// Executes `ops` with group prefetching (groups of [`GROUP`]: hash and
    /// prefetch all buckets, peek and prefetch the next stage, execute in
    /// order). Same results as [`Engine::execute_batch`]; kept for comparison.
    pub fn execute_batch_grouped<S: ResultSink>(&mut self, ops: &[BatchOp<'_>], sink: &mut S) {
        let mut base = 0;
        for group in ops.chunks(GROUP) {
            let mut hs = [(0u64, 0usize); GROUP];
            for (j, op) in group.iter().enumerate() {
                let h = key_hash(op.key);
                let off = self.bucket_off(h);
                hs[j] = (h, off);
                prefetch(self.mem(), off);
            }
            for &(h, off) in &hs[..group.len()] {
                // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
                unsafe { self.prefetch_second(h, off) };
            }
            for (j, op) in group.iter().enumerate() {
                let (h, off) = hs[j];
                // SAFETY: `hs` entries satisfy `off == bucket_off(h)`.
                unsafe { self.execute_one(base + j, op, h, off, sink) };
            }
            base += group.len();
        }
    }

    /// Executes `ops` one by one without prefetching (the baseline the
    /// batched path is measured against). Same results as `execute_batch`.
    pub fn execute_sequential<S: ResultSink>(&mut self, ops: &[BatchOp<'_>], sink: &mut S) {
        for (i, op) in ops.iter().enumerate() {
            let h = key_hash(op.key);
            let off = self.bucket_off(h);
            // SAFETY: `off` is `bucket_off(h)`, computed just above.
            unsafe { self.execute_one(i, op, h, off, sink) };
        }
    }

    /// Executes op `i` (hash `h`, primary bucket at byte offset `off`).
    ///
    /// # Safety
    ///
    /// `off` must be `self.bucket_off(h)`.
    #[inline(always)]
    unsafe fn execute_one<S: ResultSink>(
        &mut self,
        i: usize,
        op: &BatchOp<'_>,
        h: u64,
        off: usize,
        sink: &mut S,
    ) {
        match op.kind {
            OpKind::Get => {
                if let Err(s) = self.check_key(op.key) {
                    self.ops.gets += 1;
                    self.ops.refused += 1;
                    return sink.result(i, s, &[]);
                }
                // SAFETY: the caller guarantees `off == self.bucket_off(h)` (# Safety).
                match unsafe { self.get_hashed_at(op.key, h, off) } {
                    Some((off, len)) => sink.result(i, Status::Ok, &self.mem()[off..off + len]),
                    None => sink.result(i, Status::NotFound, &[]),
                }
            }
            OpKind::Put => {
                if let Err(s) = self.check_put(op.key, op.value) {
                    self.ops.puts += 1;
                    self.ops.refused += 1;
                    return sink.result(i, s, &[]);
                }
                let st = self.put_hashed(op.key, op.value, h);
                self.acct.finish(OpClass::Put);
                sink.result(i, st, &[]);
            }
            OpKind::Delete => {
                if let Err(s) = self.check_key(op.key) {
                    self.ops.deletes += 1;
                    self.ops.refused += 1;
                    return sink.result(i, s, &[]);
                }
                let st = self.delete_hashed(op.key, h);
                self.acct.finish(OpClass::Delete);
                sink.result(i, st, &[]);
            }
        }
    }
}
