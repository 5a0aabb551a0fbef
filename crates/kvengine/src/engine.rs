//! The engine: hash index walk, get/put/delete, in-place lookup.
//!
//! Region layout (offsets from the region start):
//!
//! ```text
//!  0                      nbuckets * 64                                mem_bytes
//!  +----------------------+---------------------------------------------+
//!  | primary buckets      | slab memory: KV records (32 B .. 4 KiB      |
//!  | (64 B each)          | classes) and chained buckets (64 B class)   |
//!  +----------------------+---------------------------------------------+
//!
//!  slab record, short header (klen < 64 and vlen < 512):
//!                +-------------------------------+-----------+-------------+
//!                | u16 LE: klen | vlen << 6 | 0<<15 | key bytes | value bytes |  (rest of the class unused)
//!                +-------------------------------+-----------+-------------+
//!  slab record, long header:
//!                +------+------+---------+-----------+-------------+
//!                | klen | 0x80 | vlen LE | key bytes | value bytes |
//!                +------+------+---------+-----------+-------------+
//!                  1 B    1 B     2 B
//! ```
//!
//! The 2-byte short header lets a 254 B KV with a short key fill a 256 B
//! block exactly (the paper's 254 B example).

use crate::accounting::{Accounting, OpClass};
use crate::bucket::{self, EntryKind, Meta, BUCKET_BYTES};
use crate::config::{ConfigError, EngineConfig};
use crate::hash::{bucket_index, key_hash, secondary};
use crate::region::{Region, RegionView};
use crate::service::{SlabService, SlabShared};
use crate::slab::{
    class_bytes, class_for, Links, MergeReport, SharedPool, SyncPool, WorkerCache, MAX_CLASSES,
    UNIT_SHIFT,
};
use crate::stats::{ClassStats, EngineStats, OpCounters};
use crate::Status;
use std::sync::Arc;

/// Bytes of the long slab record header (key length, flag, value length).
pub const REC_HDR: usize = 4;

/// Header bytes of a slab record holding `klen` + `vlen` bytes.
#[inline(always)]
pub fn rec_hdr_len(klen: usize, vlen: usize) -> usize {
    if klen < 64 && vlen < 512 {
        2
    } else {
        REC_HDR
    }
}
/// Largest key accepted (a record stores the key length in one byte).
pub const KEY_LEN_LIMIT: usize = 255;
const NONE: usize = usize::MAX;
/// Slab class of a chained bucket (64 B).
const CHAIN_CLASS: usize = 1;

/// Where an entry was found.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Loc {
    bucket: usize,
    prev: usize,
    entry: bucket::Entry,
}

#[inline(always)]
pub(crate) fn bucket_ref(mem: &[u8], off: usize) -> &[u8; BUCKET_BYTES] {
    debug_assert!(off % BUCKET_BYTES == 0 && off + BUCKET_BYTES <= mem.len());
    <&[u8; BUCKET_BYTES]>::try_from(&mem[off..off + BUCKET_BYTES]).expect("64-byte slice")
}

#[inline(always)]
fn bucket_mut(mem: &mut [u8], off: usize) -> &mut [u8; BUCKET_BYTES] {
    debug_assert!(off % BUCKET_BYTES == 0 && off + BUCKET_BYTES <= mem.len());
    <&mut [u8; BUCKET_BYTES]>::try_from(&mut mem[off..off + BUCKET_BYTES]).expect("64-byte slice")
}

#[inline(always)]
fn rec_header(mem: &[u8], off: usize) -> (usize, usize, usize) {
    let w = u16::from_le_bytes([mem[off], mem[off + 1]]);
    if w & 0x8000 == 0 {
        (2, usize::from(w & 63), usize::from((w >> 6) & 511))
    } else {
        (
            REC_HDR,
            usize::from(w & 0xff),
            usize::from(u16::from_le_bytes([mem[off + 2], mem[off + 3]])),
        )
    }
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

/// The primary bucket at byte offset `off`, without a bounds check.
///
/// # Safety
///
/// `mem` must be the engine's region and `off` a value of
/// [`Engine::bucket_off`] for that engine.
#[inline(always)]
pub(crate) unsafe fn primary_bucket(mem: &[u8], off: usize) -> &[u8; BUCKET_BYTES] {
    debug_assert!(off % BUCKET_BYTES == 0 && off + BUCKET_BYTES <= mem.len());
    // SAFETY: `bucket_off` returns `bucket_index(h, nbuckets) * 64` with
    // `bucket_index < nbuckets` (the high word of a 64 x 64-bit product with
    // `nbuckets`), so `off + 64 <= nbuckets * 64`. `Engine::new` zeroed
    // `region[..nbuckets * 64]` through a checked slice, so that range lies
    // inside the region (which never shrinks). `[u8; 64]` has alignment 1.
    unsafe { &*mem.as_ptr().add(off).cast::<[u8; BUCKET_BYTES]>() }
}

/// An entry found by [`find`]: where it is and where its value is.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Hit {
    /// Byte offset of the bucket holding the entry.
    bucket: usize,
    /// Byte offset of the bucket before it in the chain ([`NONE`] for the
    /// primary bucket).
    prev: usize,
    /// Start slot of the entry.
    slot: u32,
    /// Byte offset of the value in the region.
    val: usize,
    /// Value length.
    vlen: usize,
    /// Slot count of an inline entry, 0 for a pointer entry.
    inline_n: u32,
}

/// Multi-slot inline entries of one bucket (at byte offset `off`): one
/// SWAR compare of key length and tag over the ten slot fields, then a key
/// compare per candidate. Returns the start slot, the value's offset and
/// length.
#[inline(always)]
fn match_multi(
    b: &[u8; BUCKET_BYTES],
    off: usize,
    m: Meta,
    key: &[u8],
    probe: &bucket::Probe,
) -> Option<(u32, usize, usize, u32)> {
    let klen = key.len();
    let mut inl = m.inline_multi(probe);
    while inl != 0 {
        let s = bucket::lane_slot(inl.trailing_zeros());
        inl &= inl - 1;
        let at = bucket::inline_offset(s);
        if bucket::slot_key_eq(b, at, key) {
            let n = m.entry_len(s);
            let vlen = m.multi_total_n(s, n).wrapping_sub(klen);
            return Some((s, off + at + klen, vlen, n));
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
) -> Option<(u32, usize, usize, u32)> {
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
            let (hl, k, v) = rec_header(mem, r);
            acct.slab(r, hl + klen);
            if k == klen && key_eq(&mem[r + hl..r + hl + k], key) {
                acct.slab(r, hl + k + v);
                return Some((s, r + hl + k, v, 0));
            }
        } else if klen <= bucket::SLOT_BYTES
            && f.wrapping_sub(bucket::INLINE1_BASE + 6 * klen as u32) < 6
        {
            let at = bucket::inline_offset(s);
            if bucket::slot_key_eq(b, at, key) {
                let pad = (f - bucket::INLINE1_BASE) % 6;
                let vlen = (bucket::SLOT_BYTES - klen).saturating_sub(pad as usize);
                return Some((s, off + at + klen, vlen, 1));
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
) -> Option<(u32, usize, usize, u32)> {
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
    if let Some((slot, val, vlen, inline_n)) =
        match_bucket(mem, acct, pb, primary, m, key, secondary(h))
    {
        return Some(Hit {
            bucket: primary,
            prev: NONE,
            slot,
            val,
            vlen,
            inline_n,
        });
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
        if let Some((slot, val, vlen, inline_n)) = match_bucket(mem, acct, b, off, m, key, sec) {
            return Some(Hit {
                bucket: off,
                prev,
                slot,
                val,
                vlen,
                inline_n,
            });
        }
        c = m.chain();
        if c == 0 {
            return None;
        }
        prev = off;
    }
}

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

    /// Finds `key` (hash `h`) and decodes its entry.
    #[inline(always)]
    fn find_at(&mut self, key: &[u8], h: u64) -> Option<Loc> {
        let primary = self.bucket_off(h);
        let mem = self.region.as_slice();
        // SAFETY: `primary` is `bucket_off(h)`, computed just above.
        let pb = unsafe { primary_bucket(mem, primary) };
        let hit = find(mem, &mut self.acct, primary, pb, key, h)?;
        let b = bucket_ref(mem, hit.bucket);
        Some(Loc {
            bucket: hit.bucket,
            prev: hit.prev,
            entry: Meta::load(b).decode(b, hit.slot),
        })
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
        // SAFETY: forwarded from the caller.
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

    #[inline(always)]
    fn alloc(&mut self, c: usize) -> Option<u32> {
        self.cache.alloc(&self.slab.pool, c)
    }

    #[inline(always)]
    fn free(&mut self, c: usize, unit: u32) {
        self.cache.free(&self.slab.pool, c, unit)
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

    fn write_record(&mut self, unit: u32, key: &[u8], value: &[u8]) {
        let r = (unit as usize) << UNIT_SHIFT;
        let hl = rec_hdr_len(key.len(), value.len());
        let total = hl + key.len() + value.len();
        self.acct.slab(r, total);
        let mem = &mut self.region.as_mut_slice()[r..r + total];
        if hl == 2 {
            let w = key.len() as u16 | ((value.len() as u16) << 6);
            mem[..2].copy_from_slice(&w.to_le_bytes());
        } else {
            mem[0] = key.len() as u8;
            mem[1] = 0x80;
            mem[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
        }
        mem[hl..hl + key.len()].copy_from_slice(key);
        mem[hl + key.len()..].copy_from_slice(value);
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
                // common update; put_slow's replace ends the same way).
                let old_total = key.len() + hit.vlen;
                self.ops.put_replaces += 1;
                self.stored_bytes = self.stored_bytes - old_total as u64 + total as u64;
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
        let total = key.len() + value.len();
        let inline = total <= self.inline_threshold;
        let sec = secondary(h);
        let tag = (sec & 7) as u8;
        let need = if inline {
            bucket::inline_slots(total)
        } else {
            1
        };
        let class = if inline {
            0
        } else {
            class_for(rec_hdr_len(key.len(), value.len()) + total)
        };
        let found = hit.map(|hit| {
            let b = bucket_ref(self.region.as_slice(), hit.bucket);
            Loc {
                bucket: hit.bucket,
                prev: hit.prev,
                entry: Meta::load(b).decode(b, hit.slot),
            }
        });

        let Some(loc) = found else {
            let rec = if inline {
                0
            } else {
                match self.alloc(class) {
                    Some(u) => u,
                    None => return self.oom(),
                }
            };
            let (b, s) = match self.find_free(primary, need) {
                Some(p) => p,
                None => match self.new_chained(primary) {
                    Some(b) => (b, 0),
                    None => {
                        if !inline {
                            self.free(class, rec);
                        }
                        return self.oom();
                    }
                },
            };
            if inline {
                bucket::write_inline(
                    bucket_mut(self.region.as_mut_slice(), b),
                    s,
                    key,
                    value,
                    tag,
                );
            } else {
                self.write_record(rec, key, value);
                bucket::write_ptr(
                    bucket_mut(self.region.as_mut_slice(), b),
                    s,
                    rec,
                    class as u8,
                    sec,
                );
            }
            self.acct.index(b);
            self.stored_kvs += 1;
            self.stored_bytes += total as u64;
            self.ops.put_inserts += 1;
            return Status::Ok;
        };

        // Replace.
        let e = loc.entry;
        let (s_old, n_old) = (u32::from(e.slot), u32::from(e.n));
        let old_total = match e.kind {
            EntryKind::Inline { klen, vlen, .. } => klen as usize + vlen as usize,
            EntryKind::Ptr { unit, .. } => {
                let (_, k, v) = rec_header(self.region.as_slice(), (unit as usize) << UNIT_SHIFT);
                k + v
            }
        };
        self.ops.put_replaces += 1;
        self.stored_bytes = self.stored_bytes - old_total as u64 + total as u64;
        match e.kind {
            EntryKind::Ptr {
                unit, class: oc, ..
            } if !inline && oc as usize == class => {
                self.write_record(unit, key, value);
                return Status::Ok;
            }
            EntryKind::Inline { .. } if inline && n_old == need => {
                bucket::rewrite_inline(
                    bucket_mut(self.region.as_mut_slice(), loc.bucket),
                    s_old,
                    n_old,
                    key,
                    value,
                    tag,
                );
                return Status::Ok;
            }
            _ => {}
        }
        let rec = if inline {
            0
        } else {
            match self.alloc(class) {
                Some(u) => u,
                None => {
                    self.undo_replace_count(old_total, total);
                    return self.oom();
                }
            }
        };
        let occ = Meta::load(bucket_ref(self.region.as_slice(), loc.bucket)).occupied()
            & !Meta::run_mask(s_old, n_old);
        let (b, s) = if let Some(s) = Meta::find_run(occ, need) {
            (loc.bucket, s)
        } else if let Some(p) = self.find_free(primary, need) {
            // The first run in the chain: the same one a walk that also
            // tracked free runs would have picked.
            p
        } else {
            match self.new_chained(loc.bucket) {
                Some(b) => (b, 0),
                None => {
                    if !inline {
                        self.free(class, rec);
                    }
                    self.undo_replace_count(old_total, total);
                    return self.oom();
                }
            }
        };
        if !inline {
            self.write_record(rec, key, value);
        }
        let mem = self.region.as_mut_slice();
        {
            let ob = bucket_mut(mem, loc.bucket);
            let mut m = Meta::load(ob);
            m.clear_entry(s_old, n_old);
            m.store(ob);
        }
        let nb = bucket_mut(mem, b);
        if inline {
            bucket::write_inline(nb, s, key, value, tag);
        } else {
            bucket::write_ptr(nb, s, rec, class as u8, sec);
        }
        self.acct.index(b);
        if let EntryKind::Ptr {
            unit, class: oc, ..
        } = e.kind
        {
            self.free(oc as usize, unit);
        }
        Status::Ok
    }

    fn undo_replace_count(&mut self, old_total: usize, total: usize) {
        self.ops.put_replaces -= 1;
        self.stored_bytes = self.stored_bytes + old_total as u64 - total as u64;
    }

    fn oom(&mut self) -> Status {
        self.ops.put_oom += 1;
        Status::OutOfMemory
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

    /// DELETE core (out of line, like `put_hashed`).
    #[inline(never)]
    pub(crate) fn delete_hashed(&mut self, key: &[u8], h: u64) -> Status {
        self.ops.deletes += 1;
        let Some(loc) = self.find_at(key, h) else {
            return Status::NotFound;
        };
        let e = loc.entry;
        let mem = self.region.as_mut_slice();
        let total = match e.kind {
            EntryKind::Inline { klen, vlen, .. } => klen as usize + vlen as usize,
            EntryKind::Ptr { unit, .. } => {
                let (_, k, v) = rec_header(mem, (unit as usize) << UNIT_SHIFT);
                k + v
            }
        };
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
                    match m.decode(b, s).kind {
                        EntryKind::Inline { klen, vlen, .. } => {
                            let at = bucket::inline_offset(s);
                            let (k, v) = (klen as usize, vlen as usize);
                            f(&b[at..at + k], &b[at + k..at + k + v]);
                        }
                        EntryKind::Ptr { unit, .. } => {
                            let r = (unit as usize) << UNIT_SHIFT;
                            let (hl, k, v) = rec_header(mem, r);
                            f(&mem[r + hl..r + hl + k], &mem[r + hl + k..r + hl + k + v]);
                        }
                    }
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
                    let (k, key) = match e.kind {
                        EntryKind::Inline { klen, vlen, .. } => {
                            let at = bucket::inline_offset(s);
                            if bucket::inline_slots(klen as usize + vlen as usize) != u32::from(e.n)
                            {
                                return Err(format!(
                                    "bucket {off} slot {s}: inline length mismatch"
                                ));
                            }
                            bytes += u64::from(klen) + u64::from(vlen);
                            (klen as usize, &b[at..at + klen as usize])
                        }
                        EntryKind::Ptr { unit, class, .. } => {
                            let c = class as usize;
                            if c >= self.nclasses || unit < base || unit + (1 << c) > end {
                                return Err(format!(
                                    "bucket {off} slot {s}: bad pointer {unit} class {c}"
                                ));
                            }
                            let r = (unit as usize) << UNIT_SHIFT;
                            let (hl, k, v) = rec_header(mem, r);
                            if hl != rec_hdr_len(k, v) || hl + k + v > class_bytes(c) {
                                return Err(format!("record at {r} overflows its class"));
                            }
                            spans.push((unit, unit + (1 << c), "record"));
                            allocated[c] += 1;
                            bytes += (k + v) as u64;
                            (k, &mem[r + hl..r + hl + k])
                        }
                    };
                    debug_assert_eq!(k, key.len());
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
