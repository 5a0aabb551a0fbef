//! Walks over the whole index, off the hot path: [`Engine::for_each`]
//! (inspection) and [`Engine::check_invariants`] (the full consistency
//! audit the tests run).

use super::lookup::bucket_ref;
use super::record::{inline_kv, read_header, rec_hdr_len, record_kv};
use super::{Engine, CHAIN_CLASS};
use crate::bucket::{self, EntryKind, Meta, BUCKET_BYTES};
use crate::hash::key_hash;
use crate::slab::{class_bytes, MAX_CLASSES, UNIT_SHIFT};

impl Engine {
    /// Calls `f(key, value)` for every stored KV (off the hot path; order
    /// unspecified).
    pub fn for_each(&self, mut f: impl FnMut(&[u8], &[u8])) {
        let mem = self.region.as_slice();
        for i in 0..self.nbuckets as usize {
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
                        EntryKind::Ptr { unit, .. } => {
                            record_kv(mem, (unit as usize) << UNIT_SHIFT)
                        }
                    };
                    f(k, v);
                }
                let c = m.chain();
                if c == 0 {
                    break;
                }
                off = (c as usize) << UNIT_SHIFT;
            }
        }
    }

    /// Full consistency audit (tests, debugging; allocates): every slab unit
    /// is exactly one of live record, chained bucket, worker-cached, shared
    /// free or frontier; free blocks are aligned; counters match the index;
    /// every key sits in the chain of its own hash. Holds the pool lock
    /// (taken when no merge has blocks detached) for the whole audit.
    pub fn check_invariants(&self) -> Result<(), String> {
        let mem = self.region.as_slice();
        let pool = self.slab.pool.lock_quiescent();
        let (base, end) = pool.bounds();
        let mut spans: Vec<(u32, u32, &'static str)> = Vec::new();
        let (mut kvs, mut bytes, mut chained) = (0u64, 0u64, 0u64);
        let mut allocated = [0u64; MAX_CLASSES];
        for i in 0..self.nbuckets as usize {
            let mut off = i * BUCKET_BYTES;
            let mut hops = 0u64;
            loop {
                let b = bucket_ref(mem, off);
                let m = Meta::load(b);
                if m.starts() & !m.occupied() != 0 {
                    return Err(format!("bucket {off}: start bit on a free slot"));
                }
                let cont = m.occupied() & !m.starts();
                if cont & !(m.occupied() << 1) != 0 {
                    return Err(format!(
                        "bucket {off}: continuation slot without an entry start"
                    ));
                }
                let mut starts = m.starts();
                while starts != 0 {
                    let s = starts.trailing_zeros();
                    starts &= starts - 1;
                    let e = m.decode(b, s);
                    let key = match e.kind {
                        EntryKind::Inline { klen, vlen, .. } => {
                            if bucket::inline_slots(klen as usize + vlen as usize) != u32::from(e.n)
                            {
                                return Err(format!(
                                    "bucket {off} slot {s}: inline length mismatch"
                                ));
                            }
                            bytes += u64::from(klen) + u64::from(vlen);
                            inline_kv(b, s, klen as usize, vlen as usize).0
                        }
                        EntryKind::Ptr { unit, class, .. } => {
                            let c = class as usize;
                            if c >= self.nclasses || unit < base || unit + (1 << c) > end {
                                return Err(format!(
                                    "bucket {off} slot {s}: bad pointer {unit} class {c}"
                                ));
                            }
                            let r = (unit as usize) << UNIT_SHIFT;
                            let h = read_header(mem, r);
                            if h.len != rec_hdr_len(h.klen, h.vlen)
                                || h.record_len() > class_bytes(c)
                            {
                                return Err(format!("record at {r} overflows its class"));
                            }
                            spans.push((unit, unit + (1 << c), "record"));
                            allocated[c] += 1;
                            bytes += (h.klen + h.vlen) as u64;
                            record_kv(mem, r).0
                        }
                    };
                    if self.bucket_off(key_hash(key)) != i * BUCKET_BYTES {
                        return Err(format!("key in bucket chain {i} hashes elsewhere"));
                    }
                    kvs += 1;
                }
                let c = m.chain();
                if c == 0 {
                    break;
                }
                if c < base || c + 2 > end || (c - base) % 2 != 0 {
                    return Err(format!("bad chain pointer {c}"));
                }
                spans.push((c, c + 2, "chained bucket"));
                allocated[CHAIN_CLASS] += 1;
                chained += 1;
                hops += 1;
                if hops > u64::from(end) {
                    return Err("chain cycle".into());
                }
                off = (c as usize) << UNIT_SHIFT;
            }
        }
        let mut misaligned = None;
        pool.for_each_free(|c, u| {
            if (u - base) % (1 << c) != 0 {
                misaligned = Some(u);
            }
            spans.push((u, u + (1 << c), "shared free"));
        });
        if let Some(u) = misaligned {
            return Err(format!("misaligned free block {u}"));
        }
        for c in 0..self.nclasses {
            for &u in self.cache.cached(c) {
                spans.push((u, u + (1 << c), "worker cache"));
            }
        }
        let (f, e) = pool.frontier_range();
        if f < e {
            spans.push((f, e, "frontier"));
        }
        spans.sort_unstable();
        let mut total = 0u64;
        for w in spans.windows(2) {
            if w[0].1 > w[1].0 {
                return Err(format!("overlap: {:?} and {:?}", w[0], w[1]));
            }
        }
        for s in &spans {
            if s.0 < base || s.1 > end {
                return Err(format!("span outside slab: {s:?}"));
            }
            total += u64::from(s.1 - s.0);
        }
        if total != pool.capacity_units() {
            return Err(format!(
                "slab units accounted {total} != capacity {}",
                pool.capacity_units()
            ));
        }
        if kvs != self.stored_kvs || bytes != self.stored_bytes || chained != self.chained {
            return Err(format!(
                "counters: kvs {kvs}/{} bytes {bytes}/{} chained {chained}/{}",
                self.stored_kvs, self.stored_bytes, self.chained
            ));
        }
        if allocated[..self.nclasses] != self.cache.allocated[..self.nclasses] {
            return Err(format!(
                "allocated per class {:?} != {:?}",
                &allocated[..self.nclasses],
                &self.cache.allocated[..self.nclasses]
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::lookup::{bucket_mut, locate};
    use super::*;
    use crate::Status;
    use std::collections::BTreeMap;

    /// An engine with four primary buckets holding inline, slab and
    /// chained entries, and the model of its content.
    fn filled() -> (Engine, BTreeMap<Vec<u8>, Vec<u8>>) {
        let mut e = crate::engine::test_engine(1 << 16, 0.004);
        assert_eq!(e.nbuckets, 4);
        let mut model = BTreeMap::new();
        for i in 0..48u32 {
            let key = format!("k{i}").into_bytes();
            let value = vec![i as u8; [1, 7, 40, 300][i as usize % 4]];
            assert_eq!(e.put(&key, &value), Status::Ok);
            model.insert(key, value);
        }
        assert!(e.chained > 0);
        (e, model)
    }

    /// Byte offsets of every bucket, primary and chained.
    fn buckets(e: &Engine) -> Vec<usize> {
        let mut all = Vec::new();
        for i in 0..e.nbuckets as usize {
            let mut off = i * BUCKET_BYTES;
            loop {
                all.push(off);
                match Meta::load(bucket_ref(e.mem(), off)).chain() {
                    0 => break,
                    c => off = (c as usize) << UNIT_SHIFT,
                }
            }
        }
        all
    }

    #[test]
    fn for_each_visits_every_kv_once() {
        let (e, model) = filled();
        let mut seen = BTreeMap::new();
        e.for_each(|k, v| {
            assert!(
                seen.insert(k.to_vec(), v.to_vec()).is_none(),
                "visited twice: {k:?}"
            );
        });
        assert_eq!(seen, model);
    }

    #[test]
    fn audit_passes_on_a_consistent_engine() {
        let (e, _) = filled();
        assert_eq!(buckets(&e).len() as u64, e.nbuckets + e.chained);
        e.check_invariants().unwrap();
    }

    /// Each corruption must be reported (the audit is what the other tests
    /// rely on, so it has to be able to fail).
    #[test]
    fn audit_catches_corruption() {
        let err = |f: &dyn Fn(&mut Engine)| {
            let (mut e, _) = filled();
            f(&mut e);
            e.check_invariants().expect_err("corruption not detected")
        };
        // Counters off by one.
        assert!(err(&|e| e.stored_kvs += 1).starts_with("counters"));
        assert!(err(&|e| e.stored_bytes -= 1).starts_with("counters"));
        assert!(err(&|e| e.chained += 1).starts_with("counters"));
        // A record block leaked (allocated, referenced by nothing).
        let leak = err(&|e| {
            e.cache.alloc(&e.slab.pool, 3).unwrap();
        });
        assert!(leak.starts_with("slab units accounted"), "{leak}");
        // A start bit on a free slot.
        let start = err(&|e| {
            let off = buckets(e)
                .into_iter()
                .find(|&off| Meta::load(bucket_ref(e.mem(), off)).occupied() != 0x3ff)
                .expect("a bucket with a free slot");
            let b = bucket_mut(e.region.as_mut_slice(), off);
            let mut m = Meta::load(b);
            let free = !m.occupied() & 0x3ff;
            m.0 |= u128::from(free & free.wrapping_neg()) << 10;
            m.store(b);
        });
        assert!(start.contains("start bit on a free slot"), "{start}");
        // A record's key rewritten so that it hashes to another bucket.
        let moved = err(&|e| {
            let hit = e.find_hit(b"k2", key_hash(b"k2")).unwrap();
            let EntryKind::Ptr { unit, .. } = locate(e.mem(), hit).entry.kind else {
                panic!("k2 is a slab record")
            };
            let primary = e.bucket_off(key_hash(b"k2"));
            let other = (0..=255u8)
                .find(|&c| e.bucket_off(key_hash(&[c, b'2'])) != primary)
                .unwrap();
            let r = (unit as usize) << UNIT_SHIFT;
            e.region.as_mut_slice()[r + 2] = other; // first key byte
        });
        assert!(moved.contains("hashes elsewhere"), "{moved}");
    }
}
