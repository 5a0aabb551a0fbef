//! The index lookup: find a key in its bucket chain.
//!
//! [`find`] checks the primary bucket (inline entries by one SWAR compare
//! of key length and tag over the ten slot fields, then pointer entries by
//! secondary hash) and, out of line, the chained buckets. Every match is
//! confirmed by a full key compare. The answer is a [`Hit`]: where the entry
//! is (bucket, the bucket before it in the chain, start slot) and where its
//! value is (offset and length in the region).

use super::record::read_header;
use super::Engine;
use crate::accounting::Accounting;
use crate::bucket::{self, Entry, Meta, BUCKET_BYTES};
use crate::hash::secondary;
use crate::slab::UNIT_SHIFT;

/// "No bucket" for [`Hit::prev`] / [`Loc::prev`]: the entry is in the
/// primary bucket.
pub(crate) const NONE: usize = usize::MAX;

/// The 64-byte bucket at byte offset `off` (bounds-checked).
#[inline(always)]
pub(crate) fn bucket_ref(mem: &[u8], off: usize) -> &[u8; BUCKET_BYTES] {
    debug_assert!(off % BUCKET_BYTES == 0 && off + BUCKET_BYTES <= mem.len());
    <&[u8; BUCKET_BYTES]>::try_from(&mem[off..off + BUCKET_BYTES]).expect("64-byte slice")
}

/// The 64-byte bucket at byte offset `off`, writable (bounds-checked).
#[inline(always)]
pub(crate) fn bucket_mut(mem: &mut [u8], off: usize) -> &mut [u8; BUCKET_BYTES] {
    debug_assert!(off % BUCKET_BYTES == 0 && off + BUCKET_BYTES <= mem.len());
    <&mut [u8; BUCKET_BYTES]>::try_from(&mut mem[off..off + BUCKET_BYTES]).expect("64-byte slice")
}

/// The primary bucket at byte offset `off`, without a bounds check.
///
/// # Safety
///
/// `mem` must be the engine's region and `off` a value of
/// [`Engine::bucket_off`] for that engine.
#[inline(always)]
pub(crate) unsafe fn primary_bucket(mem: &[u8], off: usize) -> &[u8; BUCKET_BYTES] {
    debug_assert!(off % BUCKET_BYTES == 0 && off + BUCKET_BYTES <= mem.len());
    // `bucket_off` returns `bucket_index(h, nbuckets) * 64` with
    // `bucket_index < nbuckets` (the high word of a 64 x 64-bit product with
    // `nbuckets`), so `off + 64 <= nbuckets * 64`. `Engine::new` zeroed
    // `region[..nbuckets * 64]` through a checked slice, so that range lies
    // inside the region (which never shrinks).
    // SAFETY: `mem[off..off + 64]` is in bounds (above); `[u8; 64]` has alignment 1.
    unsafe { &*mem.as_ptr().add(off).cast::<[u8; BUCKET_BYTES]>() }
}

/// Key equality with a branch-light fast path for keys up to 16 bytes
/// (two overlapping word loads instead of a `memcmp` call).
#[inline(always)]
pub(crate) fn key_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    if (8..=16).contains(&n) {
        let w = |s: &[u8], at: usize| {
            u64::from_le_bytes(<[u8; 8]>::try_from(&s[at..at + 8]).expect("8 bytes"))
        };
        (w(a, 0) ^ w(b, 0)) | (w(a, n - 8) ^ w(b, n - 8)) == 0
    } else if (4..8).contains(&n) {
        let w = |s: &[u8], at: usize| {
            u32::from_le_bytes(<[u8; 4]>::try_from(&s[at..at + 4]).expect("4 bytes"))
        };
        (w(a, 0) ^ w(b, 0)) | (w(a, n - 4) ^ w(b, n - 4)) == 0
    } else {
        a == b
    }
}

/// A key found in one bucket: its entry's start slot and where its value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SlotMatch {
    /// Start slot of the entry.
    pub(crate) slot: u32,
    /// Byte offset of the value in the region (inside the bucket for an
    /// inline entry, inside the slab record for a pointer entry).
    pub(crate) val: usize,
    /// Value length.
    pub(crate) vlen: usize,
    /// Slot count of an inline entry, 0 for a pointer entry.
    pub(crate) inline_n: u32,
}

/// An entry found by [`find`]: where it is and where its value is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Hit {
    /// Byte offset of the bucket holding the entry.
    pub(crate) bucket: usize,
    /// Byte offset of the bucket before it in the chain ([`NONE`] for the
    /// primary bucket).
    pub(crate) prev: usize,
    /// Start slot of the entry.
    pub(crate) slot: u32,
    /// Byte offset of the value in the region.
    pub(crate) val: usize,
    /// Value length.
    pub(crate) vlen: usize,
    /// Slot count of an inline entry, 0 for a pointer entry.
    pub(crate) inline_n: u32,
}

impl Hit {
    #[inline(always)]
    fn new(bucket: usize, prev: usize, m: SlotMatch) -> Hit {
        Hit {
            bucket,
            prev,
            slot: m.slot,
            val: m.val,
            vlen: m.vlen,
            inline_n: m.inline_n,
        }
    }
}

/// A [`Hit`] with its entry decoded (what PUT's replace and DELETE need).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loc {
    /// Byte offset of the bucket holding the entry.
    pub(crate) bucket: usize,
    /// Byte offset of the bucket before it in the chain ([`NONE`] for the
    /// primary bucket).
    pub(crate) prev: usize,
    /// The entry.
    pub(crate) entry: Entry,
}

/// Decodes the entry of `hit`.
#[inline(always)]
pub(crate) fn locate(mem: &[u8], hit: Hit) -> Loc {
    let b = bucket_ref(mem, hit.bucket);
    Loc {
        bucket: hit.bucket,
        prev: hit.prev,
        entry: Meta::load(b).decode(b, hit.slot),
    }
}

/// Multi-slot inline entries of one bucket (at byte offset `off`): one
/// SWAR compare of key length and tag over the ten slot fields, then a key
/// compare per candidate.
#[inline(always)]
fn match_multi(
    b: &[u8; BUCKET_BYTES],
    off: usize,
    m: Meta,
    key: &[u8],
    probe: &bucket::Probe,
) -> Option<SlotMatch> {
    let klen = key.len();
    let mut inl = m.inline_multi(probe);
    while inl != 0 {
        let s = bucket::lane_slot(inl.trailing_zeros());
        inl &= inl - 1;
        let at = bucket::inline_offset(s);
        if bucket::slot_key_eq(b, at, key) {
            let n = m.entry_len(s);
            return Some(SlotMatch {
                slot: s,
                val: off + at + klen,
                vlen: m.multi_total_n(s, n).wrapping_sub(klen),
                inline_n: n,
            });
        }
    }
    None
}

/// One-slot entries of one bucket (pointers by secondary hash, short inline
/// KVs by length): the less common case for small KVs, kept out of line.
#[inline(never)]
fn match_singles(
    mem: &[u8],
    acct: &mut Accounting,
    b: &[u8; BUCKET_BYTES],
    off: usize,
    m: Meta,
    key: &[u8],
    sec: u16,
) -> Option<SlotMatch> {
    let klen = key.len();
    let mut single = m.single_starts();
    while single != 0 {
        let s = single.trailing_zeros();
        single &= single - 1;
        let f = m.field(s);
        if f < bucket::INLINE1_BASE {
            let word = bucket::read_slot_fast(b, s);
            if (word >> bucket::PTR_BITS) as u16 != sec {
                continue;
            }
            let r = ((word & ((1 << bucket::PTR_BITS) - 1)) as usize) << UNIT_SHIFT;
            let h = read_header(mem, r);
            acct.slab(r, h.len + klen);
            if h.klen == klen && key_eq(&mem[r + h.len..r + h.len + h.klen], key) {
                acct.slab(r, h.record_len());
                return Some(SlotMatch {
                    slot: s,
                    val: r + h.len + h.klen,
                    vlen: h.vlen,
                    inline_n: 0,
                });
            }
        } else if klen <= bucket::SLOT_BYTES
            && f.wrapping_sub(bucket::INLINE1_BASE + 6 * klen as u32) < 6
        {
            let at = bucket::inline_offset(s);
            if bucket::slot_key_eq(b, at, key) {
                let pad = (f - bucket::INLINE1_BASE) % 6;
                return Some(SlotMatch {
                    slot: s,
                    val: off + at + klen,
                    vlen: (bucket::SLOT_BYTES - klen).saturating_sub(pad as usize),
                    inline_n: 1,
                });
            }
        }
    }
    None
}

/// Looks for `key` in one bucket (at byte offset `off`, metadata `m`).
#[inline(always)]
fn match_bucket(
    mem: &[u8],
    acct: &mut Accounting,
    b: &[u8; BUCKET_BYTES],
    off: usize,
    m: Meta,
    key: &[u8],
    sec: u16,
) -> Option<SlotMatch> {
    if key.len() <= bucket::INLINE_MAX {
        let probe = bucket::Probe::new(key.len(), (sec & 7) as u8);
        if let Some(r) = match_multi(b, off, m, key, &probe) {
            return Some(r);
        }
    }
    if m.single_starts() != 0 {
        return match_singles(mem, acct, b, off, m, key, sec);
    }
    None
}

/// Walks the chain from the primary bucket at byte offset `primary` (whose
/// bucket is `pb`) looking for `key` with hash `h`.
#[inline(always)]
pub(crate) fn find(
    mem: &[u8],
    acct: &mut Accounting,
    primary: usize,
    pb: &[u8; BUCKET_BYTES],
    key: &[u8],
    h: u64,
) -> Option<Hit> {
    acct.index(primary);
    let m = Meta::load(pb);
    if let Some(sm) = match_bucket(mem, acct, pb, primary, m, key, secondary(h)) {
        return Some(Hit::new(primary, NONE, sm));
    }
    match m.chain() {
        0 => None,
        c => find_chained(mem, acct, primary, c, key, h),
    }
}

/// The rest of [`find`]: the chained buckets after the primary bucket at
/// `primary`, the first at `chain` (32 B units). Out of line: most lookups
/// end in the primary bucket.
#[inline(never)]
fn find_chained(
    mem: &[u8],
    acct: &mut Accounting,
    primary: usize,
    chain: u32,
    key: &[u8],
    h: u64,
) -> Option<Hit> {
    let sec = secondary(h);
    let mut prev = primary;
    let mut c = chain;
    loop {
        let off = (c as usize) << UNIT_SHIFT;
        acct.index(off);
        let b = bucket_ref(mem, off);
        let m = Meta::load(b);
        if let Some(sm) = match_bucket(mem, acct, b, off, m, key, sec) {
            return Some(Hit::new(off, prev, sm));
        }
        c = m.chain();
        if c == 0 {
            return None;
        }
        prev = off;
    }
}

impl Engine {
    /// Finds `key` (hash `h`, primary bucket at byte offset `off`) and
    /// returns `(offset, len)` of its value.
    ///
    /// # Safety
    ///
    /// `off` must be `self.bucket_off(h)` (asserted in debug builds).
    #[inline(always)]
    pub(crate) unsafe fn find_value_at(
        &mut self,
        key: &[u8],
        h: u64,
        off: usize,
    ) -> Option<(usize, usize)> {
        debug_assert_eq!(off, self.bucket_off(h));
        let mem = self.region.as_slice();
        // SAFETY: the caller guarantees `off == self.bucket_off(h)`.
        let pb = unsafe { primary_bucket(mem, off) };
        find(mem, &mut self.acct, off, pb, key, h).map(|hit| (hit.val, hit.vlen))
    }

    /// Finds `key` (hash `h`) from its primary bucket.
    #[inline(always)]
    pub(crate) fn find_hit(&mut self, key: &[u8], h: u64) -> Option<Hit> {
        let primary = self.bucket_off(h);
        let mem = self.region.as_slice();
        // SAFETY: `primary` is `bucket_off(h)`, computed just above.
        let pb = unsafe { primary_bucket(mem, primary) };
        find(mem, &mut self.acct, primary, pb, key, h)
    }

    /// Finds `key` (hash `h`) and decodes its entry.
    #[inline(always)]
    pub(crate) fn find_at(&mut self, key: &[u8], h: u64) -> Option<Loc> {
        let hit = self.find_hit(key, h)?;
        Some(locate(self.region.as_slice(), hit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::EntryKind;
    use crate::hash::key_hash;
    use crate::Status;

    use crate::engine::test_engine as engine;

    fn lookup(e: &mut Engine, key: &[u8]) -> Option<Hit> {
        e.find_hit(key, key_hash(key))
    }

    fn value_of<'a>(e: &'a Engine, hit: &Hit) -> &'a [u8] {
        &e.mem()[hit.val..hit.val + hit.vlen]
    }

    #[test]
    fn key_eq_every_length_and_position() {
        let a: Vec<u8> = (0..40u8).collect();
        for n in 0..=40 {
            assert!(key_eq(&a[..n], &a[..n]));
            // One differing byte anywhere (the overlapping word loads must
            // cover every position, including the middle of 9..16).
            for i in 0..n {
                let mut b = a[..n].to_vec();
                b[i] ^= 0x40;
                assert!(!key_eq(&a[..n], &b), "len {n} pos {i}");
            }
            if n > 0 {
                assert!(!key_eq(&a[..n], &a[..n - 1]));
            }
        }
    }

    #[test]
    fn inline_hit_multi_and_single_slot() {
        let mut e = engine(1 << 20, 0.5);
        // 3 + 6 = 9 B: a two-slot entry; 2 + 1 = 3 B: a one-slot entry.
        assert_eq!(e.put(b"abc", b"value1"), Status::Ok);
        assert_eq!(e.put(b"xy", b"z"), Status::Ok);
        for (key, value, n) in [(&b"abc"[..], &b"value1"[..], 2), (b"xy", b"z", 1)] {
            let hit = lookup(&mut e, key).expect("inline hit");
            assert_eq!(hit.bucket, e.bucket_off(key_hash(key)));
            assert_eq!(hit.prev, NONE);
            assert_eq!(hit.inline_n, n, "slot count of {key:?}");
            // The value is inside the primary bucket, right after the key.
            assert!(hit.val >= hit.bucket && hit.val + hit.vlen <= hit.bucket + BUCKET_BYTES);
            assert_eq!(value_of(&e, &hit), value);
            let loc = locate(e.mem(), hit);
            assert_eq!(u32::from(loc.entry.slot), hit.slot);
            assert!(matches!(loc.entry.kind, EntryKind::Inline { .. }));
        }
    }

    #[test]
    fn slab_hit_points_into_the_record() {
        let mut e = engine(1 << 20, 0.5);
        let value = [0x5au8; 300];
        assert_eq!(e.put(b"a slab key", &value), Status::Ok);
        let hit = lookup(&mut e, b"a slab key").expect("slab hit");
        assert_eq!(hit.inline_n, 0);
        assert_eq!(hit.prev, NONE);
        let index_end = e.nbuckets as usize * BUCKET_BYTES;
        assert!(hit.val >= index_end, "value not in slab memory");
        assert_eq!(value_of(&e, &hit), &value[..]);
        let loc = locate(e.mem(), hit);
        let EntryKind::Ptr { unit, .. } = loc.entry.kind else {
            panic!("not a pointer entry: {:?}", loc.entry)
        };
        // Record: 2 B header, then the key, then the value.
        assert_eq!(hit.val, ((unit as usize) << UNIT_SHIFT) + 2 + 10);
    }

    #[test]
    fn miss_same_length_and_same_bucket() {
        let mut e = engine(1 << 20, 0.5);
        assert_eq!(lookup(&mut e, b"nothing"), None);
        assert_eq!(e.put(b"key-0001", b"v"), Status::Ok);
        assert_eq!(e.put(b"slab-key", &[1u8; 100]), Status::Ok);
        // Same lengths as stored keys (the SWAR length match hits), other bytes.
        assert_eq!(lookup(&mut e, b"key-0002"), None);
        assert_eq!(lookup(&mut e, b"slab-kez"), None);
        assert_eq!(lookup(&mut e, b""), None);
        assert!(lookup(&mut e, b"key-0001").is_some());
    }

    #[test]
    fn chained_buckets_are_walked() {
        // One primary bucket: 5 two-slot KVs fill it, the rest chain.
        let mut e = engine(1 << 16, 0.001);
        assert_eq!(e.nbuckets, 1);
        let keys: Vec<[u8; 8]> = (0..40u64)
            .map(|i| (i * 0x9e37_79b9).to_le_bytes())
            .collect();
        for (i, k) in keys.iter().enumerate() {
            let v = [i as u8; 2];
            assert_eq!(e.put(k, &v), Status::Ok);
        }
        assert!(e.chained >= 7, "expected a chain, got {}", e.chained);
        let mut seen_chained = 0;
        for (i, k) in keys.iter().enumerate() {
            let hit = lookup(&mut e, k).expect("chained hit");
            assert_eq!(value_of(&e, &hit), &[i as u8; 2]);
            if hit.bucket != 0 {
                seen_chained += 1;
                // `prev` links to the bucket whose chain pointer is `bucket`.
                let prev = bucket_ref(e.mem(), hit.prev);
                assert_eq!(
                    (Meta::load(prev).chain() as usize) << UNIT_SHIFT,
                    hit.bucket
                );
            } else {
                assert_eq!(hit.prev, NONE);
            }
        }
        assert!(
            seen_chained >= 30,
            "{seen_chained} keys found in chained buckets"
        );
        // A miss walks the whole chain and still answers None.
        assert_eq!(lookup(&mut e, b"absent!!"), None);
    }

    #[test]
    fn secondary_hash_filters_but_key_decides() {
        // Pointer entries are matched by secondary hash first; keys with a
        // matching length but a different secondary hash must not match.
        let mut e = engine(1 << 16, 0.001);
        let keys: Vec<Vec<u8>> = (0..20u32)
            .map(|i| format!("long key {i:03}").into_bytes())
            .collect();
        for k in &keys {
            assert_eq!(e.put(k, &[7u8; 40]), Status::Ok);
        }
        for k in &keys {
            let hit = lookup(&mut e, k).expect("hit");
            assert_eq!(hit.inline_n, 0);
            let loc = locate(e.mem(), hit);
            let EntryKind::Ptr { sec, .. } = loc.entry.kind else {
                panic!("not a pointer")
            };
            assert_eq!(sec, secondary(key_hash(k)));
        }
        assert_eq!(lookup(&mut e, b"long key 999"), None);
    }
}
