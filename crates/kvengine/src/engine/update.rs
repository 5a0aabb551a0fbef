//! Index updates: PUT (insert, replace in place, relocate) and DELETE, with
//! the slot search, chain growth and slab allocation they need.
//!
//! PUT order of work: allocate the new storage first (record block, free
//! slot run, chained bucket), so that running out of memory leaves the
//! store unchanged; then write the new entry, clear the old one and free
//! its record.

use super::lookup::{bucket_mut, bucket_ref, find, locate, primary_bucket, Hit, Loc, NONE};
use super::record::{entry_kv_len, rec_hdr_len};
use super::{Engine, CHAIN_CLASS};
use crate::bucket::{self, EntryKind, Meta};
use crate::hash::secondary;
use crate::slab::{class_for, UNIT_SHIFT};
use crate::Status;

/// The shape of the entry a PUT stores: inline (how many slots) or a slab
/// record (which class), plus the hash bits kept in the bucket.
#[derive(Clone, Copy, Debug)]
struct NewEntry {
    /// Key + value bytes.
    total: usize,
    /// Stored inline in bucket slots (else in a slab record).
    inline: bool,
    /// Slots needed: the inline slot count, or 1 for a pointer.
    need: u32,
    /// Slab class of the record (0, unused, when inline).
    class: usize,
    /// Secondary hash (kept in a pointer slot).
    sec: u16,
    /// 3-bit tag (kept in a multi-slot inline entry).
    tag: u8,
}

impl NewEntry {
    #[inline(always)]
    fn new(inline_threshold: usize, key: &[u8], value: &[u8], h: u64) -> NewEntry {
        let total = key.len() + value.len();
        let inline = total <= inline_threshold;
        let sec = secondary(h);
        NewEntry {
            total,
            inline,
            need: if inline {
                bucket::inline_slots(total)
            } else {
                1
            },
            class: if inline {
                0
            } else {
                class_for(rec_hdr_len(key.len(), value.len()) + total)
            },
            sec,
            tag: (sec & 7) as u8,
        }
    }
}

impl Engine {
    #[inline(always)]
    fn alloc(&mut self, c: usize) -> Option<u32> {
        self.cache.alloc(&self.slab.pool, c)
    }

    #[inline(always)]
    fn free(&mut self, c: usize, unit: u32) {
        self.cache.free(&self.slab.pool, c, unit)
    }

    /// PUT core; sizes already checked: the lookup and the common in-place
    /// update of an inline KV; everything else is in [`Engine::put_slow`].
    /// Out of line: inlining it into the batch loop measured more
    /// instructions per GET (register pressure) for fewer per PUT.
    #[inline(never)]
    pub(crate) fn put_hashed(&mut self, key: &[u8], value: &[u8], h: u64) -> Status {
        self.ops.puts += 1;
        let total = key.len() + value.len();
        let primary = self.bucket_off(h);
        let mem = self.region.as_slice();
        // SAFETY: `primary` is `bucket_off(h)`, computed above.
        let pb = unsafe { primary_bucket(mem, primary) };
        let hit = find(mem, &mut self.acct, primary, pb, key, h);
        if let Some(hit) = hit {
            if total <= self.inline_threshold && hit.inline_n == bucket::inline_slots(total) {
                // Same inline slot count: rewrite the value in place (the
                // common update; `replace_in_place` does the same).
                let old_total = key.len() + hit.vlen;
                self.count_replace(old_total, total);
                bucket::rewrite_inline(
                    bucket_mut(self.region.as_mut_slice(), hit.bucket),
                    hit.slot,
                    hit.inline_n,
                    key,
                    value,
                    (secondary(h) & 7) as u8,
                );
                return Status::Ok;
            }
        }
        self.put_slow(key, value, h, primary, hit)
    }

    /// The rest of PUT after the lookup (`hit`, from the primary bucket at
    /// `primary`): inserts and every replace but the in-place inline one.
    /// Kept out of line so the batch loop stays small in the instruction cache.
    #[inline(never)]
    fn put_slow(
        &mut self,
        key: &[u8],
        value: &[u8],
        h: u64,
        primary: usize,
        hit: Option<Hit>,
    ) -> Status {
        let new = NewEntry::new(self.inline_threshold, key, value, h);
        match hit {
            None => self.insert(key, value, primary, &new),
            Some(hit) => {
                let loc = locate(self.region.as_slice(), hit);
                self.replace(key, value, primary, loc, &new)
            }
        }
    }

    /// PUT of a key not stored yet.
    #[inline(always)]
    fn insert(&mut self, key: &[u8], value: &[u8], primary: usize, new: &NewEntry) -> Status {
        let Some(rec) = self.alloc_storage(new) else {
            return self.oom();
        };
        let Some((b, s)) = self.free_run_or_new_bucket(primary, primary, new.need) else {
            self.release_storage(new, rec);
            return self.oom();
        };
        self.store_entry(b, s, key, value, new, rec);
        self.stored_kvs += 1;
        self.stored_bytes += new.total as u64;
        self.ops.put_inserts += 1;
        Status::Ok
    }

    /// PUT over the stored entry at `loc`: in place when the storage fits
    /// unchanged, else relocated.
    #[inline(always)]
    fn replace(
        &mut self,
        key: &[u8],
        value: &[u8],
        primary: usize,
        loc: Loc,
        new: &NewEntry,
    ) -> Status {
        let old_total = entry_kv_len(self.region.as_slice(), &loc.entry);
        self.count_replace(old_total, new.total);
        if self.replace_in_place(key, value, loc, new) {
            return Status::Ok;
        }
        self.relocate(key, value, primary, loc, old_total, new)
    }

    /// Rewrites the entry at `loc` where it is when the new KV needs the
    /// same slab class or the same inline slot count. Returns whether it did.
    #[inline(always)]
    fn replace_in_place(&mut self, key: &[u8], value: &[u8], loc: Loc, new: &NewEntry) -> bool {
        let e = loc.entry;
        match e.kind {
            EntryKind::Ptr { unit, class, .. } if !new.inline && class as usize == new.class => {
                self.write_record(unit, key, value);
                true
            }
            EntryKind::Inline { .. } if new.inline && u32::from(e.n) == new.need => {
                bucket::rewrite_inline(
                    bucket_mut(self.region.as_mut_slice(), loc.bucket),
                    u32::from(e.slot),
                    u32::from(e.n),
                    key,
                    value,
                    new.tag,
                );
                true
            }
            _ => false,
        }
    }

    /// Replace with new storage: new record block and/or slot run (in the
    /// same bucket when the run fits there once the old entry is gone, else
    /// the first free run of the chain, else a new chained bucket); then the
    /// old entry is cleared and its record freed. Out of memory: nothing
    /// changes and the replace is not counted.
    #[inline(always)]
    fn relocate(
        &mut self,
        key: &[u8],
        value: &[u8],
        primary: usize,
        loc: Loc,
        old_total: usize,
        new: &NewEntry,
    ) -> Status {
        let e = loc.entry;
        let (s_old, n_old) = (u32::from(e.slot), u32::from(e.n));
        let Some(rec) = self.alloc_storage(new) else {
            self.undo_replace_count(old_total, new.total);
            return self.oom();
        };
        let occ = Meta::load(bucket_ref(self.region.as_slice(), loc.bucket)).occupied()
            & !Meta::run_mask(s_old, n_old);
        let run = match Meta::find_run(occ, new.need) {
            Some(s) => Some((loc.bucket, s)),
            // The first run in the chain: the same one a walk that also
            // tracked free runs would have picked.
            None => self.free_run_or_new_bucket(primary, loc.bucket, new.need),
        };
        let Some((b, s)) = run else {
            self.release_storage(new, rec);
            self.undo_replace_count(old_total, new.total);
            return self.oom();
        };
        self.clear_slots(loc.bucket, s_old, n_old);
        self.store_entry(b, s, key, value, new, rec);
        if let EntryKind::Ptr { unit, class, .. } = e.kind {
            self.free(class as usize, unit);
        }
        Status::Ok
    }

    /// A record block for `new` (`Some(0)`, nothing allocated, when inline).
    #[inline(always)]
    fn alloc_storage(&mut self, new: &NewEntry) -> Option<u32> {
        if new.inline {
            Some(0)
        } else {
            self.alloc(new.class)
        }
    }

    /// Gives back what [`Engine::alloc_storage`] returned.
    #[inline(always)]
    fn release_storage(&mut self, new: &NewEntry, rec: u32) {
        if !new.inline {
            self.free(new.class, rec);
        }
    }

    /// The first run of `need` free slots in the chain from `primary`, or
    /// slot 0 of a new chained bucket linked at the tail (walked from
    /// `tail_from`, a bucket of the same chain).
    #[inline(always)]
    fn free_run_or_new_bucket(
        &mut self,
        primary: usize,
        tail_from: usize,
        need: u32,
    ) -> Option<(usize, u32)> {
        match self.find_free(primary, need) {
            Some(p) => Some(p),
            None => self.new_chained(tail_from).map(|b| (b, 0)),
        }
    }

    /// Writes the new entry at slot `s` of bucket `b` (and its record into
    /// block `rec` when it is not inline).
    #[inline(always)]
    fn store_entry(
        &mut self,
        b: usize,
        s: u32,
        key: &[u8],
        value: &[u8],
        new: &NewEntry,
        rec: u32,
    ) {
        if new.inline {
            bucket::write_inline(
                bucket_mut(self.region.as_mut_slice(), b),
                s,
                key,
                value,
                new.tag,
            );
        } else {
            self.write_record(rec, key, value);
            bucket::write_ptr(
                bucket_mut(self.region.as_mut_slice(), b),
                s,
                rec,
                new.class as u8,
                new.sec,
            );
        }
        self.acct.index(b);
    }

    /// Clears the `n` slots of the entry starting at `s` in bucket `b`.
    #[inline(always)]
    fn clear_slots(&mut self, b: usize, s: u32, n: u32) {
        let bk = bucket_mut(self.region.as_mut_slice(), b);
        let mut m = Meta::load(bk);
        m.clear_entry(s, n);
        m.store(bk);
    }

    /// Counts a replace of `old_total` key + value bytes by `total`.
    #[inline(always)]
    fn count_replace(&mut self, old_total: usize, total: usize) {
        self.ops.put_replaces += 1;
        self.stored_bytes = self.stored_bytes - old_total as u64 + total as u64;
    }

    fn undo_replace_count(&mut self, old_total: usize, total: usize) {
        self.ops.put_replaces -= 1;
        self.stored_bytes = self.stored_bytes + old_total as u64 - total as u64;
    }

    fn oom(&mut self) -> Status {
        self.ops.put_oom += 1;
        Status::OutOfMemory
    }

    /// First run of `need` free slots in the chain from bucket `from` on.
    fn find_free(&mut self, from: usize, need: u32) -> Option<(usize, u32)> {
        let mem = self.region.as_slice();
        let mut off = from;
        loop {
            self.acct.index(off);
            let m = Meta::load(bucket_ref(mem, off));
            if let Some(s) = Meta::find_run(m.occupied(), need) {
                return Some((off, s));
            }
            let c = m.chain();
            if c == 0 {
                return None;
            }
            off = (c as usize) << UNIT_SHIFT;
        }
    }

    /// Appends a zeroed chained bucket at the tail of the chain through `from`.
    fn new_chained(&mut self, from: usize) -> Option<usize> {
        let unit = self.alloc(CHAIN_CLASS)?;
        let off = (unit as usize) << UNIT_SHIFT;
        let mem = self.region.as_mut_slice();
        let mut tail = from;
        loop {
            let c = Meta::load(bucket_ref(mem, tail)).chain();
            if c == 0 {
                break;
            }
            tail = (c as usize) << UNIT_SHIFT;
        }
        bucket_mut(mem, off).fill(0);
        let tb = bucket_mut(mem, tail);
        let mut m = Meta::load(tb);
        m.set_chain(unit);
        m.store(tb);
        self.acct.index(tail);
        self.acct.index(off);
        self.chained += 1;
        Some(off)
    }

    /// DELETE core (out of line, like `put_hashed`).
    #[inline(never)]
    pub(crate) fn delete_hashed(&mut self, key: &[u8], h: u64) -> Status {
        self.ops.deletes += 1;
        let Some(loc) = self.find_at(key, h) else {
            return Status::NotFound;
        };
        let e = loc.entry;
        let total = entry_kv_len(self.region.as_slice(), &e);
        let mem = self.region.as_mut_slice();
        let b = bucket_mut(mem, loc.bucket);
        let mut m = Meta::load(b);
        m.clear_entry(u32::from(e.slot), u32::from(e.n));
        m.store(b);
        let unlink = loc.prev != NONE && m.occupied() == 0;
        if unlink {
            let next = m.chain();
            let pb = bucket_mut(mem, loc.prev);
            let mut pm = Meta::load(pb);
            pm.set_chain(next);
            pm.store(pb);
            self.acct.index(loc.prev);
        }
        if let EntryKind::Ptr { unit, class, .. } = e.kind {
            self.free(class as usize, unit);
        }
        if unlink {
            self.free(CHAIN_CLASS, (loc.bucket >> UNIT_SHIFT) as u32);
            self.chained -= 1;
        }
        self.stored_kvs -= 1;
        self.stored_bytes -= total as u64;
        self.ops.delete_hits += 1;
        Status::Ok
    }
}

#[cfg(test)]
mod tests {
    use crate::bucket::EntryKind;
    use crate::hash::key_hash;
    use crate::slab::class_for;
    use crate::{Engine, Status};

    use crate::engine::test_engine as engine;

    fn read(e: &mut Engine, key: &[u8]) -> Option<Vec<u8>> {
        let mut out = vec![0u8; e.max_value_len()];
        let n = e.get(key, &mut out).ok()?;
        out.truncate(n);
        Some(out)
    }

    fn kind(e: &mut Engine, key: &[u8]) -> EntryKind {
        e.find_at(key, key_hash(key)).expect("stored").entry.kind
    }

    fn allocated(e: &Engine) -> Vec<u64> {
        e.cache.allocated[..e.nclasses].to_vec()
    }

    #[test]
    fn replace_moves_between_size_classes() {
        let mut e = engine(1 << 20, 0.25);
        const REC: usize = super::super::REC_HDR;
        let key = b"resized key";
        // Each step: value length, expected slab class (None = inline).
        let steps: [(usize, Option<usize>); 7] = [
            (4, None),
            (100, Some(class_for(2 + 11 + 100))),
            (1000, Some(class_for(REC + 11 + 1000))),
            (1001, Some(class_for(REC + 11 + 1000))), // same class: in place
            (30, Some(class_for(2 + 11 + 30))),
            (9, None),
            (2, None), // inline, fewer slots
        ];
        let base = allocated(&e);
        let mut prev_unit = None;
        for (i, &(vlen, class)) in steps.iter().enumerate() {
            let value = vec![i as u8 + 1; vlen];
            assert_eq!(e.put(key, &value), Status::Ok, "step {i}");
            assert_eq!(read(&mut e, key).as_deref(), Some(&value[..]), "step {i}");
            let mut want = base.clone();
            match (kind(&mut e, key), class) {
                (EntryKind::Inline { vlen: v, .. }, None) => assert_eq!(v as usize, vlen),
                (EntryKind::Ptr { unit, class: c, .. }, Some(class)) => {
                    assert_eq!(c as usize, class, "step {i}");
                    want[class] += 1;
                    if i == 3 {
                        assert_eq!(Some(unit), prev_unit, "same class must stay in place");
                    }
                    prev_unit = Some(unit);
                }
                (k, c) => panic!("step {i}: entry {k:?}, expected class {c:?}"),
            }
            // Exactly one record allocated (or none when inline): the old
            // one went back to the allocator.
            assert_eq!(allocated(&e), want, "step {i}");
            let st = e.stats();
            assert_eq!(
                (st.stored_kvs, st.stored_kv_bytes),
                (1, 11 + vlen as u64),
                "step {i}"
            );
            e.check_invariants().unwrap();
        }
        assert_eq!(e.stats().ops.put_inserts, 1);
        assert_eq!(e.stats().ops.put_replaces, steps.len() as u64 - 1);
    }

    #[test]
    fn delete_then_reinsert() {
        let mut e = engine(1 << 16, 0.001); // one primary bucket: chains
        let keys: Vec<[u8; 8]> = (0..30u64)
            .map(|i| (i * 0x9e37_79b9_7f4a).to_le_bytes())
            .collect();
        let value = |i: usize| vec![i as u8; if i % 3 == 0 { 60 } else { 2 }];
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(e.put(k, &value(i)), Status::Ok);
        }
        let chained = e.stats().chained_buckets;
        assert!(chained > 0);
        let base = allocated(&e);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(e.delete(k), Status::Ok);
            assert_eq!(e.delete(k), Status::NotFound, "deleted twice");
            assert_eq!(read(&mut e, k), None);
            e.check_invariants().unwrap();
            assert_eq!(e.put(k, &value(i + 1)), Status::Ok);
            assert_eq!(read(&mut e, k), Some(value(i + 1)));
            e.check_invariants().unwrap();
        }
        assert_eq!(e.stats().stored_kvs, keys.len() as u64);
        for k in &keys {
            assert_eq!(e.delete(k), Status::Ok);
        }
        // Everything gone: no KV, no record, no chained bucket left.
        let st = e.stats();
        assert_eq!(
            (st.stored_kvs, st.stored_kv_bytes, st.chained_buckets),
            (0, 0, 0)
        );
        assert!(
            allocated(&e).iter().all(|&a| a == 0),
            "{:?} (before {base:?})",
            allocated(&e)
        );
        e.check_invariants().unwrap();
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(e.put(k, &value(i)), Status::Ok);
        }
        assert_eq!(e.stats().chained_buckets, chained);
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(read(&mut e, k), Some(value(i)));
        }
        e.check_invariants().unwrap();
    }

    #[test]
    fn out_of_memory_replace_keeps_the_old_value() {
        let mut e = engine(1 << 13, 0.5);
        let mut stored = Vec::new();
        for i in 0u32.. {
            let k = i.to_le_bytes();
            if e.put(&k, &[3u8; 200]) != Status::Ok {
                break;
            }
            stored.push(k);
        }
        assert!(!stored.is_empty());
        let before = e.stats();
        // Growing into a larger class needs a new block: none left.
        assert_eq!(e.put(&stored[0], &[4u8; 2000]), Status::OutOfMemory);
        assert_eq!(read(&mut e, &stored[0]), Some(vec![3u8; 200]));
        let after = e.stats();
        assert_eq!(after.stored_kv_bytes, before.stored_kv_bytes);
        assert_eq!(after.ops.put_replaces, before.ops.put_replaces);
        assert_eq!(after.ops.put_oom, before.ops.put_oom + 1);
        e.check_invariants().unwrap();
    }
}
