//! A resumable, bounded scan of the whole index: [`Engine::scan`] visits the
//! bucket chains of a few primary buckets per call and returns where to go
//! on, so a worker can walk its whole store a little per loop iteration
//! while it keeps serving (snapshots, full resync of a replica).
//!
//! # What a scan guarantees
//!
//! A key is always stored in the chain of its own primary bucket
//! (`bucket_index(key_hash(key))`, fixed for the engine's life: the index is
//! never resized, and a PUT that relocates an entry — another slot run, a
//! slab record of another class, a new chained bucket — keeps it in the same
//! chain; [`Engine::check_invariants`] audits exactly this). The cursor is
//! the next primary bucket index, and one call visits whole chains, so with
//! the owner mutating the engine only *between* calls (the engine is
//! `&mut self` for every mutation, so it cannot happen during one):
//!
//! * a key present from the scan's first call to its last is visited
//!   **exactly once**, with the value it had at that moment;
//! * a key inserted or deleted while the scan runs is visited at most once
//!   (depending on whether its bucket was behind or ahead of the cursor);
//! * nothing else is visited: every visit is a key that was stored, with
//!   its value, at the time of the visit.
//!
//! So a scan alone is *fuzzy*: a key written behind the cursor keeps the
//! value the scan saw. A consistent copy combines the scan with the
//! post-images of the mutations made while it ran, in order (the dataplane's
//! mutation tap, docs/OPERATIONS.md "Snapshots and persistence").

use super::lookup::bucket_ref;
use super::record::{inline_kv, record_kv};
use super::Engine;
use crate::bucket::{EntryKind, Meta, BUCKET_BYTES};
use crate::slab::UNIT_SHIFT;

/// Where a scan resumes: the next primary bucket to visit. Start with
/// [`ScanCursor::START`]; the only other cursors are the ones
/// [`Engine::scan`] returns.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ScanCursor(u64);

impl ScanCursor {
    /// The beginning of a scan.
    pub const START: ScanCursor = ScanCursor(0);

    /// Primary buckets visited so far (compare with [`Engine::scan_buckets`]
    /// for progress).
    pub fn buckets_done(self) -> u64 {
        self.0
    }
}

/// What [`Engine::scan`] says after a step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScanStep {
    /// More buckets remain: call again with this cursor.
    More(ScanCursor),
    /// Every bucket has been visited.
    Done,
}

impl Engine {
    /// Primary buckets a whole scan visits (the hash index size).
    pub fn scan_buckets(&self) -> u64 {
        self.nbuckets
    }

    /// Visits the chains of up to `max_buckets` primary buckets (at least
    /// one) from `cursor`, calling `f(key, value)` for every KV stored in
    /// them; returns where to resume, or [`ScanStep::Done`]. A cursor at or
    /// past the end answers `Done` without visiting anything. Does not
    /// allocate, does not count as operations; the guarantees under
    /// mutation between calls are in the module docs.
    pub fn scan(
        &self,
        cursor: ScanCursor,
        max_buckets: usize,
        mut f: impl FnMut(&[u8], &[u8]),
    ) -> ScanStep {
        let start = cursor.0;
        let end = start
            .saturating_add(max_buckets.max(1) as u64)
            .min(self.nbuckets);
        for i in start..end {
            self.visit_chain(i as usize, &mut f);
        }
        if end >= self.nbuckets {
            ScanStep::Done
        } else {
            ScanStep::More(ScanCursor(end))
        }
    }

    /// Calls `f` for every KV in the chain of primary bucket `i`.
    fn visit_chain(&self, i: usize, f: &mut impl FnMut(&[u8], &[u8])) {
        let mem = self.region.as_slice();
        let mut off = i * BUCKET_BYTES;
        loop {
            let b = bucket_ref(mem, off);
            let m = Meta::load(b);
            let mut starts = m.starts();
            while starts != 0 {
                let s = starts.trailing_zeros();
                starts &= starts - 1;
                let (k, v) = match m.decode(b, s).kind {
                    EntryKind::Inline { klen, vlen, .. } => {
                        inline_kv(b, s, klen as usize, vlen as usize)
                    }
                    EntryKind::Ptr { unit, .. } => record_kv(mem, (unit as usize) << UNIT_SHIFT),
                };
                f(k, v);
            }
            match m.chain() {
                0 => return,
                c => off = (c as usize) << UNIT_SHIFT,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::test_engine;
    use crate::Status;
    use proptest::prelude::*;
    use std::collections::{BTreeMap, BTreeSet};

    /// Runs a scan to its end in steps of `step` buckets, without mutations.
    fn scan_all(e: &Engine, step: usize) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out = Vec::new();
        let mut c = ScanCursor::START;
        loop {
            match e.scan(c, step, |k, v| out.push((k.to_vec(), v.to_vec()))) {
                ScanStep::More(n) => {
                    assert!(n > c, "the cursor advances");
                    c = n;
                }
                ScanStep::Done => return out,
            }
        }
    }

    #[test]
    fn a_quiet_scan_visits_every_kv_once_in_any_step_size() {
        // Four buckets: inline, slab and chained entries.
        let mut e = test_engine(1 << 16, 0.004);
        assert_eq!(e.scan_buckets(), 4);
        let mut model = BTreeMap::new();
        for i in 0..48u32 {
            let key = format!("k{i}").into_bytes();
            let value = vec![i as u8; [1, 7, 40, 300][i as usize % 4]];
            assert_eq!(e.put(&key, &value), Status::Ok);
            model.insert(key, value);
        }
        assert!(e.chained > 0, "the test needs chained buckets");
        for step in [0, 1, 2, 3, 4, 100] {
            let got = scan_all(&e, step);
            let set: BTreeMap<_, _> = got.iter().cloned().collect();
            assert_eq!(got.len(), set.len(), "a key visited twice (step {step})");
            assert_eq!(set, model, "step {step}");
        }
        // Past the end: nothing.
        let mut n = 0;
        assert_eq!(e.scan(ScanCursor(4), 10, |_, _| n += 1), ScanStep::Done);
        assert_eq!(
            e.scan(ScanCursor(u64::MAX), 10, |_, _| n += 1),
            ScanStep::Done
        );
        assert_eq!(n, 0);
    }

    #[test]
    fn an_empty_engine_scans_to_done() {
        let e = test_engine(1 << 16, 0.004);
        assert!(scan_all(&e, 1).is_empty());
    }

    /// One mutation between scan steps.
    #[derive(Clone, Debug)]
    enum Mut {
        Put(u8, usize),
        Delete(u8),
    }

    fn muts() -> impl Strategy<Value = Vec<Mut>> {
        prop::collection::vec(
            prop_oneof![
                3 => (any::<u8>(), prop::sample::select(vec![0usize, 1, 3, 9, 30, 45, 60, 200, 900]))
                    .prop_map(|(k, l)| Mut::Put(k, l)),
                1 => any::<u8>().prop_map(Mut::Delete),
            ],
            0..12,
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// The guarantees of the module docs, checked against a HashMap model with
        /// mutations (inserts, in-place and relocating replaces, deletes that free
        /// chained buckets) interleaved between scan steps.
        #[test]
        fn scan_under_mutation_keeps_its_guarantees(
            initial in prop::collection::vec((any::<u8>(), 0usize..400), 0..200),
            rounds in prop::collection::vec(muts(), 1..40),
            step in 1usize..5,
            seed in any::<u64>(),
        ) {
            let mut e = test_engine(1 << 17, 0.004);
            let key = |k: u8| vec![b'k', k, (seed as u8) ^ k];
            let val = |k: u8, l: usize, gen: u32| {
                let mut v = vec![k ^ gen as u8; l];
                if l >= 4 { v[..4].copy_from_slice(&gen.to_le_bytes()); }
                v
            };
            let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
            for (i, &(k, l)) in initial.iter().enumerate() {
                let v = val(k, l, i as u32);
                if e.put(&key(k), &v) == Status::Ok { model.insert(key(k), v); }
            }
            // Keys present since the start and never deleted so far.
            let mut stable: BTreeSet<Vec<u8>> = model.keys().cloned().collect();
            let mut visits: BTreeMap<Vec<u8>, u32> = BTreeMap::new();
            let mut c = ScanCursor::START;
            let mut gen = 1_000u32;
            let mut rounds = rounds.into_iter();
            loop {
                let mut bad = None;
                let step_result = e.scan(c, step, |k, v| {
                    *visits.entry(k.to_vec()).or_default() += 1;
                    // Every visit is a stored key with its current value.
                    if model.get(k).map(Vec::as_slice) != Some(v) { bad = Some(k.to_vec()); }
                });
                prop_assert!(bad.is_none(), "visited {:?} with a value not stored", bad);
                for m in rounds.next().unwrap_or_default() {
                    gen += 1;
                    match m {
                        Mut::Put(k, l) => {
                            let v = val(k, l, gen);
                            if e.put(&key(k), &v) == Status::Ok { model.insert(key(k), v); }
                        }
                        Mut::Delete(k) => {
                            if e.delete(&key(k)) == Status::Ok { model.remove(&key(k)); }
                            stable.remove(&key(k));
                        }
                    }
                }
                match step_result {
                    ScanStep::More(n) => c = n,
                    ScanStep::Done => break,
                }
            }
            e.check_invariants().map_err(TestCaseError::fail)?;
            for (k, n) in &visits {
                prop_assert!(*n == 1, "{:?} visited {} times", k, n);
            }
            for k in &stable {
                prop_assert!(visits.contains_key(k), "{:?} present throughout, never visited", k);
            }
        }
    }
}
