//! Hash bucket layout: one 64-byte cache line.
//!
//! ```text
//!  byte 0         5        10                     45        50                     64
//!       +---------+---------+-- ... --+-----------+---------+----------------------+
//!       | slot 0  | slot 1  |          | slot 8    | slot 9  |  metadata (112 bits) |
//!       +---------+---------+-- ... --+-----------+---------+----------------------+
//!
//!  pointer slot (5 B, little endian u40):
//!       bits 0..31  record address in 32 B units from the region start
//!       bits 31..40 secondary hash (top 9 bits of key_hash)
//!
//!  inline KV: key bytes then value bytes, packed over n consecutive slots
//!       (n = ceil((klen + vlen) / 5), at least 1), no per-record header.
//!
//!  metadata (the u128 at bytes 48..64 shifted right by 16):
//!       bits   0..10   occupied bitmap  (slot i holds part of an entry)
//!       bits  10..20   start bitmap     (slot i is the first slot of an entry;
//!                                        an entry ends before the next start
//!                                        or the next unoccupied slot)
//!       bits  20..80   10 x 6-bit slot fields:
//!                        1-slot entry:  0..=7   pointer, slab class index (3 bits)
//!                                       8..=43  inline, 8 + klen * 6 + pad
//!                        n-slot inline: field[start]   = klen
//!                                       field[start+1] = pad | tag << 3
//!                      (pad = 5n - klen - vlen; tag = 3 bits of secondary hash)
//!       bits  80..111  chain: address of the chained bucket in 32 B units (0 = none)
//!       bit  111       unused
//! ```
//!
//! The slab class ("slab type") and the start/end bitmap of the paper live in
//! the metadata; 5-byte slots and 31-bit pointers at 32 B granularity cap the
//! region at 64 GiB.

/// Bytes per bucket (one cache line).
pub const BUCKET_BYTES: usize = 64;
/// Slots per bucket.
pub const SLOTS: usize = 10;
/// Bytes per slot.
pub const SLOT_BYTES: usize = 5;
/// Bytes available for inline KVs in one bucket.
pub const INLINE_MAX: usize = SLOTS * SLOT_BYTES;
/// Pointer bits in a slot (32 B granularity => 64 GiB).
pub const PTR_BITS: u32 = 31;
const PTR_MASK: u64 = (1 << PTR_BITS) - 1;
const SLOT_MASK: u32 = (1 << SLOTS) - 1;
const META_AT: usize = 48;
const FIELD0: u32 = 20;
const CHAIN_AT: u32 = 80;
/// First 1-slot field value that encodes an inline entry.
pub const INLINE1_BASE: u32 = 8;

/// A bucket's decoded metadata word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Meta(pub u128);

/// What one entry of a bucket is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntryKind {
    /// A slot pointing at a slab record.
    Ptr {
        /// Record address in 32 B units.
        unit: u32,
        /// Slab class index (0 = 32 B).
        class: u8,
        /// Secondary hash stored in the slot.
        sec: u16,
    },
    /// A KV stored in the slots themselves.
    Inline {
        /// Key length.
        klen: u8,
        /// Value length.
        vlen: u8,
        /// 3-bit hash tag (only meaningful when `n >= 2`).
        tag: u8,
    },
}

/// An entry: its first slot, its slot count and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// First slot.
    pub slot: u8,
    /// Number of slots.
    pub n: u8,
    /// Contents.
    pub kind: EntryKind,
}

impl Meta {
    /// Loads the metadata of a bucket.
    #[inline(always)]
    pub fn load(b: &[u8; BUCKET_BYTES]) -> Meta {
        let mut w = [0u8; 16];
        w.copy_from_slice(&b[META_AT..]);
        Meta(u128::from_le_bytes(w) >> 16)
    }

    /// Stores the metadata into a bucket, preserving the slot bytes.
    #[inline(always)]
    pub fn store(self, b: &mut [u8; BUCKET_BYTES]) {
        let keep = u128::from(u16::from_le_bytes([b[META_AT], b[META_AT + 1]]));
        b[META_AT..].copy_from_slice(&((self.0 << 16) | keep).to_le_bytes());
    }

    /// Occupied-slot bitmap.
    #[inline(always)]
    pub fn occupied(self) -> u32 {
        (self.0 as u32) & SLOT_MASK
    }

    /// Entry-start bitmap.
    #[inline(always)]
    pub fn starts(self) -> u32 {
        ((self.0 >> 10) as u32) & SLOT_MASK
    }

    /// The 6-bit field of slot `i`.
    #[inline(always)]
    pub fn field(self, i: u32) -> u32 {
        debug_assert!((i as usize) < SLOTS);
        ((self.0 >> (FIELD0 + 6 * i)) as u32) & 0x3f
    }

    #[inline(always)]
    fn set_field(&mut self, i: u32, v: u32) {
        debug_assert!((i as usize) < SLOTS && v < 64);
        let sh = FIELD0 + 6 * i;
        self.0 = (self.0 & !(0x3fu128 << sh)) | (u128::from(v) << sh);
    }

    /// Chained bucket address in 32 B units, 0 when there is none.
    #[inline(always)]
    pub fn chain(self) -> u32 {
        ((self.0 >> CHAIN_AT) as u64 & PTR_MASK) as u32
    }

    /// Sets the chained bucket address.
    #[inline(always)]
    pub fn set_chain(&mut self, unit: u32) {
        debug_assert!(u64::from(unit) <= PTR_MASK);
        self.0 = (self.0 & !(u128::from(PTR_MASK) << CHAIN_AT)) | (u128::from(unit) << CHAIN_AT);
    }

    /// Number of slots of the entry starting at `s`.
    #[inline(always)]
    pub fn entry_len(self, s: u32) -> u32 {
        let cont = self.occupied() & !self.starts();
        1 + (cont >> (s + 1)).trailing_ones()
    }

    /// Lowest slot `s` such that slots `s..s+n` are all free in `occupied`.
    #[inline(always)]
    pub fn find_run(occupied: u32, n: u32) -> Option<u32> {
        debug_assert!((1..=SLOTS as u32).contains(&n));
        let mut free = !occupied & SLOT_MASK;
        // After the loop bit s is set iff slots s..s+n are free.
        for _ in 1..n {
            free &= free >> 1;
        }
        if free == 0 {
            None
        } else {
            Some(free.trailing_zeros())
        }
    }

    /// Bitmap of the `n` slots starting at `s`.
    #[inline(always)]
    pub fn run_mask(s: u32, n: u32) -> u32 {
        ((1u32 << n) - 1) << s
    }

    /// Removes the entry at `s` spanning `n` slots.
    #[inline(always)]
    pub fn clear_entry(&mut self, s: u32, n: u32) {
        let m = u128::from(Self::run_mask(s, n));
        self.0 &= !(m | (m << 10));
    }

    #[inline(always)]
    fn mark(&mut self, s: u32, n: u32) {
        let m = Self::run_mask(s, n);
        debug_assert_eq!(self.occupied() & m, 0, "slots already taken");
        self.0 |= u128::from(m) | (u128::from(1u32 << s) << 10);
    }

    /// Key + value bytes of the inline entry starting at `s`.
    #[inline(always)]
    pub fn inline_total(self, s: u32) -> usize {
        let n = self.entry_len(s);
        let f = self.field(s);
        if n == 1 {
            let v = f - INLINE1_BASE;
            (5 - v % 6) as usize
        } else {
            (5 * n - (self.field(s + 1) & 7)) as usize
        }
    }

    /// Slots holding one-slot pointer entries (slot bitmap, not lanes).
    #[inline(always)]
    pub fn ptr_slots(self) -> u32 {
        let starts = self.starts();
        let cont = self.occupied() & !starts;
        let mut single = starts & !(cont >> 1);
        let mut ptrs = 0;
        while single != 0 {
            let s = single.trailing_zeros();
            single &= single - 1;
            if self.field(s) < INLINE1_BASE {
                ptrs |= 1 << s;
            }
        }
        ptrs
    }

    /// Decodes the entry that starts at slot `s`.
    #[inline(always)]
    pub fn decode(self, b: &[u8; BUCKET_BYTES], s: u32) -> Entry {
        let n = self.entry_len(s);
        let f = self.field(s);
        let kind = if n == 1 {
            if f < INLINE1_BASE {
                let w = read_slot(b, s);
                EntryKind::Ptr {
                    unit: (w & PTR_MASK) as u32,
                    class: f as u8,
                    sec: (w >> PTR_BITS) as u16,
                }
            } else {
                let v = f - INLINE1_BASE;
                let (klen, pad) = (v / 6, v % 6);
                EntryKind::Inline {
                    klen: klen as u8,
                    vlen: (5 - pad - klen) as u8,
                    tag: 0,
                }
            }
        } else {
            let f1 = self.field(s + 1);
            let total = 5 * n - (f1 & 7);
            EntryKind::Inline {
                klen: f as u8,
                vlen: (total - f) as u8,
                tag: (f1 >> 3) as u8,
            }
        };
        Entry {
            slot: s as u8,
            n: n as u8,
            kind,
        }
    }
}

// ---- SWAR matching: the ten 6-bit slot fields as lanes of one u64 ----

/// `0b100000` in each of the ten 6-bit lanes.
const LANE_HI: u64 = 0x0820_8208_2082_0820;
/// `0b011111` in each lane.
const LANE_LO5: u64 = LANE_HI >> 1 | LANE_HI >> 2 | LANE_HI >> 3 | LANE_HI >> 4 | LANE_HI >> 5;
/// `0b111000` in each lane.
const LANE_TOP3: u64 = LANE_HI | LANE_HI >> 1 | LANE_HI >> 2;
/// `1` in each lane.
const LANE_ONE: u64 = LANE_HI >> 5;

/// Spreads a 5-bit slot bitmap to lane bit 5 positions.
const fn spread_table() -> [u64; 32] {
    let mut t = [0u64; 32];
    let mut i = 0;
    while i < 32 {
        let mut b = 0;
        while b < 5 {
            if i & (1 << b) != 0 {
                t[i] |= 1 << (6 * b + 5);
            }
            b += 1;
        }
        i += 1;
    }
    t
}
static SPREAD: [u64; 32] = spread_table();

/// Slot bitmap (10 bits) -> lane-space bitmap (bit `6s + 5` per slot `s`).
#[inline(always)]
fn spread(b: u32) -> u64 {
    SPREAD[(b & 31) as usize] | (SPREAD[((b >> 5) & 31) as usize] << 30)
}

/// Bit 5 of each lane set iff the lane of `x` is zero (exact, no borrows).
#[inline(always)]
fn zero_lanes(x: u64) -> u64 {
    !(((x & LANE_LO5) + LANE_LO5) | x) & LANE_HI
}

/// Slot of a lane-space bit index.
#[inline(always)]
pub fn lane_slot(bit: u32) -> u32 {
    bit / 6
}

/// Lane-space candidate masks for one bucket and one lookup.
#[derive(Clone, Copy, Debug)]
pub struct Candidates {
    /// Inline entries whose key length (and tag, when stored) match.
    pub inline: u64,
    /// Pointer entries (secondary hash still to be checked).
    pub ptr: u64,
}

impl Meta {
    /// Finds, without branching per slot, the entries that may hold a key of
    /// length `klen` with 3-bit tag `tag`. Returned masks use bit `6s + 5`
    /// for slot `s` (see [`lane_slot`]).
    #[inline(always)]
    pub fn candidates(self, klen: usize, tag: u8) -> Candidates {
        let f = ((self.0 >> FIELD0) as u64) & ((1u64 << 60) - 1);
        let starts = self.starts();
        let cont = self.occupied() & !starts;
        let st = spread(starts);
        let multi = spread(cont >> 1) & st; // entries spanning >= 2 slots
        let single = st & !multi;
        let ptr = single & zero_lanes(f & LANE_TOP3);
        let mut inline = 0;
        if klen <= INLINE_MAX {
            let l = klen as u64 * LANE_ONE;
            let t = u64::from(tag & 7) * (LANE_ONE << 3);
            inline = multi & zero_lanes(f ^ l) & zero_lanes(((f >> 6) & LANE_TOP3) ^ t);
            if klen <= SLOT_BYTES {
                // One-slot inline entries: field in 8 + 6 * klen ..= 8 + 6 * klen + 5.
                let mut ones = single & !ptr;
                while ones != 0 {
                    let bit = ones.trailing_zeros();
                    ones &= ones - 1;
                    let v = self.field(lane_slot(bit));
                    if v.wrapping_sub(INLINE1_BASE + 6 * klen as u32) < 6 {
                        inline |= 1 << bit;
                    }
                }
            }
        }
        Candidates { inline, ptr }
    }
}

/// Per-lookup lane patterns for [`Meta::inline_multi`]: the key length and
/// the 3-bit tag replicated into every 6-bit lane (computed once per key).
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    len_lanes: u64,
    tag_lanes: u64,
}

impl Probe {
    /// Patterns for a key of `klen <= INLINE_MAX` bytes with tag `tag`.
    #[inline(always)]
    pub fn new(klen: usize, tag: u8) -> Probe {
        debug_assert!(klen <= INLINE_MAX);
        Probe {
            len_lanes: (klen as u64 & 63) * LANE_ONE,
            tag_lanes: u64::from(tag & 7) * (LANE_ONE << 3),
        }
    }
}

impl Meta {
    /// Start slots (slot bitmap) of entries spanning two or more slots.
    #[inline(always)]
    pub fn multi_starts(self) -> u32 {
        let starts = self.starts();
        starts & ((self.occupied() & !starts) >> 1)
    }

    /// Start slots (slot bitmap) of one-slot entries (pointers and short
    /// inline KVs).
    #[inline(always)]
    pub fn single_starts(self) -> u32 {
        let starts = self.starts();
        starts & !((self.occupied() & !starts) >> 1)
    }

    /// Key + value bytes of the multi-slot inline entry starting at `s`
    /// (same as [`Meta::inline_total`] for an entry of two or more slots).
    #[inline(always)]
    pub fn multi_total(self, s: u32) -> usize {
        self.multi_total_n(s, self.entry_len(s))
    }

    /// [`Meta::multi_total`] with the entry's slot count `n` known.
    #[inline(always)]
    pub fn multi_total_n(self, s: u32, n: u32) -> usize {
        debug_assert!((s as usize) < SLOTS - 1 && n == self.entry_len(s));
        let f = (self.0 >> FIELD0) as u64;
        let pad = (f >> ((6 * (s + 1)) & 63)) as u32 & 7;
        (5 * n).wrapping_sub(pad) as usize
    }

    /// Lane-space mask (bit `6s + 5` for slot `s`, see [`lane_slot`]) of the
    /// multi-slot inline entries whose key length and tag match `p`: one
    /// SWAR compare over all ten fields. Same answer as the multi-slot part
    /// of [`Meta::candidates`].
    #[inline(always)]
    pub fn inline_multi(self, p: &Probe) -> u64 {
        let f = ((self.0 >> FIELD0) as u64) & ((1u64 << 60) - 1);
        // A lane of `x` is zero iff field[s] == klen and field[s+1] >> 3 == tag.
        let x = (f ^ p.len_lanes) | (((f >> 6) & LANE_TOP3) ^ p.tag_lanes);
        spread(self.multi_starts()) & zero_lanes(x)
    }
}

/// Compares `key` with the `key.len()` bytes at `at` (a slot start, so
/// `at <= 45`) of a bucket: fixed-size word loads for keys of 4..=16 bytes.
///
/// The loads are unchecked unaligned reads on purpose: the safe form
/// (fixed-size array loads, whose bounds checks do fold away) measured more
/// instructions per lookup in callgrind (different register allocation in
/// the inlined batch loop; docs/ENGINE.md, "Unsafe code").
#[inline(always)]
pub fn slot_key_eq(b: &[u8; BUCKET_BYTES], at: usize, key: &[u8]) -> bool {
    let n = key.len();
    debug_assert!(at <= INLINE_MAX - SLOT_BYTES);
    let p = b.as_ptr();
    if (8..=16).contains(&n) && at <= INLINE_MAX - SLOT_BYTES {
        // SAFETY: this branch tests at <= 45 and 8 <= n <= 16, so both
        // 8-byte reads, at `at` and at `at + n - 8`, lie in bytes 0..61 of
        // the 64-byte bucket `p` points to (read_unaligned: no alignment).
        let (x0, x1) = unsafe {
            (
                p.add(at).cast::<u64>().read_unaligned(),
                p.add(at + n - 8).cast::<u64>().read_unaligned(),
            )
        };
        let k0 = u64::from_ne_bytes(key[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_ne_bytes(key[n - 8..].try_into().expect("8 bytes"));
        (x0 ^ k0) | (x1 ^ k1) == 0
    } else if (4..8).contains(&n) && at <= INLINE_MAX - SLOT_BYTES {
        // SAFETY: this branch tests at <= 45 and 4 <= n < 8, so both
        // 4-byte reads lie in bytes 0..53 of the 64-byte bucket.
        let (x0, x1) = unsafe {
            (
                p.add(at).cast::<u32>().read_unaligned(),
                p.add(at + n - 4).cast::<u32>().read_unaligned(),
            )
        };
        let k0 = u32::from_ne_bytes(key[..4].try_into().expect("4 bytes"));
        let k1 = u32::from_ne_bytes(key[n - 4..].try_into().expect("4 bytes"));
        (x0 ^ k0) | (x1 ^ k1) == 0
    } else {
        b.get(at..at + n) == Some(key)
    }
}

/// Reads slot `s` (`s < SLOTS`) as a 40-bit word with one 8-byte load.
/// Unchecked for the same reason as [`slot_key_eq`]: the safe array load
/// measured about one more instruction per pointer-entry lookup.
#[inline(always)]
pub fn read_slot_fast(b: &[u8; BUCKET_BYTES], s: u32) -> u64 {
    debug_assert!((s as usize) < SLOTS);
    let at = (s as usize).min(SLOTS - 1) * SLOT_BYTES;
    // SAFETY: at = min(s, 9) * 5 <= 45, so the 8-byte read lies in bytes
    // 0..53 of the 64-byte bucket (read_unaligned: no alignment needed).
    let w = unsafe { b.as_ptr().add(at).cast::<u64>().read_unaligned() };
    u64::from_le(w) & ((1 << 40) - 1)
}

/// Reads slot `s` as a little-endian 40-bit word.
#[inline(always)]
pub fn read_slot(b: &[u8; BUCKET_BYTES], s: u32) -> u64 {
    let at = s as usize * SLOT_BYTES;
    debug_assert!(at + SLOT_BYTES <= INLINE_MAX);
    let mut w = [0u8; 8];
    w[..5].copy_from_slice(&b[at..at + SLOT_BYTES]);
    u64::from_le_bytes(w)
}

/// Slots an inline KV of `total` key+value bytes needs.
#[inline(always)]
pub fn inline_slots(total: usize) -> u32 {
    debug_assert!(total <= INLINE_MAX);
    (total.div_ceil(SLOT_BYTES)).max(1) as u32
}

/// Writes a pointer entry at slot `s` (which must be free).
#[inline(always)]
pub fn write_ptr(b: &mut [u8; BUCKET_BYTES], s: u32, unit: u32, class: u8, sec: u16) {
    debug_assert!(u64::from(unit) <= PTR_MASK && class < 8 && sec < 512);
    let mut m = Meta::load(b);
    let w = u64::from(unit) | (u64::from(sec) << PTR_BITS);
    let at = s as usize * SLOT_BYTES;
    b[at..at + SLOT_BYTES].copy_from_slice(&w.to_le_bytes()[..SLOT_BYTES]);
    m.mark(s, 1);
    m.set_field(s, u32::from(class));
    m.store(b);
}

/// Rewrites the pointer of an existing pointer entry at `s`.
#[inline(always)]
pub fn rewrite_ptr(b: &mut [u8; BUCKET_BYTES], s: u32, unit: u32, class: u8, sec: u16) {
    let mut m = Meta::load(b);
    m.clear_entry(s, 1);
    m.store(b);
    write_ptr(b, s, unit, class, sec);
}

/// Writes an inline entry (key then value) at slot `s`; the slots must be
/// free and `key.len() + value.len() <= INLINE_MAX`.
#[inline(always)]
pub fn write_inline(b: &mut [u8; BUCKET_BYTES], s: u32, key: &[u8], value: &[u8], tag: u8) {
    let total = key.len() + value.len();
    let n = inline_slots(total);
    debug_assert!(s + n <= SLOTS as u32);
    let at = s as usize * SLOT_BYTES;
    copy_small(&mut b[at..at + key.len()], key);
    copy_small(&mut b[at + key.len()..at + total], value);
    let mut m = Meta::load(b);
    m.mark(s, n);
    let pad = 5 * n - total as u32;
    if n == 1 {
        m.set_field(s, INLINE1_BASE + key.len() as u32 * 6 + pad);
    } else {
        m.set_field(s, key.len() as u32);
        m.set_field(s + 1, pad | (u32::from(tag & 7) << 3));
    }
    m.store(b);
}

/// Overwrites the value of an inline entry in place (same key, same slot
/// count): only the value bytes and the padding field change.
#[inline(always)]
pub fn rewrite_inline(
    b: &mut [u8; BUCKET_BYTES],
    s: u32,
    n: u32,
    key: &[u8],
    value: &[u8],
    tag: u8,
) {
    let total = key.len() + value.len();
    debug_assert_eq!(inline_slots(total), n);
    debug_assert!(s + n <= SLOTS as u32);
    let at = s as usize * SLOT_BYTES + key.len();
    copy_small(&mut b[at..at + value.len()], value);
    let pad = (5 * n).wrapping_sub(total as u32);
    if n == 1 {
        set_field_in_place(b, s, INLINE1_BASE + key.len() as u32 * 6 + pad);
    } else {
        set_field_in_place(b, s + 1, pad | (u32::from(tag & 7) << 3));
    }
}

/// Sets the 6-bit field of slot `i` directly in the bucket bytes (one
/// 64-bit read-modify-write instead of a 128-bit metadata round trip).
#[inline(always)]
fn set_field_in_place(b: &mut [u8; BUCKET_BYTES], i: u32, v: u32) {
    debug_assert!((i as usize) < SLOTS && v < 64);
    // The fields start at bit 16 + FIELD0 = 36 of the 128-bit word at byte
    // META_AT, i.e. at bit 4 of the 64-bit word at byte META_AT + 4.
    const AT: usize = META_AT + 4;
    const _: () = assert!(16 + FIELD0 == 8 * 4 + 4 && AT + 8 <= BUCKET_BYTES);
    let sh = 4 + 6 * (i.min(SLOTS as u32 - 1));
    let mut w = u64::from_le_bytes(b[AT..AT + 8].try_into().expect("8 bytes"));
    w = (w & !(0x3f << sh)) | (u64::from(v & 0x3f) << sh);
    b[AT..AT + 8].copy_from_slice(&w.to_le_bytes());
}

/// `dst.copy_from_slice(src)` for short slices with fixed-size (possibly
/// overlapping) word moves instead of a `memcpy` call.
#[inline(always)]
pub fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_small: length mismatch");
    let (d, p) = (dst.as_mut_ptr(), src.as_ptr());
    if (8..=16).contains(&n) {
        // SAFETY: both slices are n bytes long (asserted above) and
        // 8 <= n here, so the 8-byte moves at 0 and at n - 8 stay inside
        // them; unaligned reads/writes; `&mut dst` and `&src` cannot overlap.
        unsafe {
            let (a, z) = (
                p.cast::<u64>().read_unaligned(),
                p.add(n - 8).cast::<u64>().read_unaligned(),
            );
            d.cast::<u64>().write_unaligned(a);
            d.add(n - 8).cast::<u64>().write_unaligned(z);
        }
    } else if (4..8).contains(&n) {
        // SAFETY: as above with n >= 4 and 4-byte moves.
        unsafe {
            let (a, z) = (
                p.cast::<u32>().read_unaligned(),
                p.add(n - 4).cast::<u32>().read_unaligned(),
            );
            d.cast::<u32>().write_unaligned(a);
            d.add(n - 4).cast::<u32>().write_unaligned(z);
        }
    } else if (2..4).contains(&n) {
        // SAFETY: as above with n >= 2 and 2-byte moves.
        unsafe {
            let (a, z) = (
                p.cast::<u16>().read_unaligned(),
                p.add(n - 2).cast::<u16>().read_unaligned(),
            );
            d.cast::<u16>().write_unaligned(a);
            d.add(n - 2).cast::<u16>().write_unaligned(z);
        }
    } else if n == 1 {
        dst[0] = src[0];
    } else if n > 16 {
        dst.copy_from_slice(src);
    }
}

/// Byte offset inside the bucket of the inline entry starting at `s`.
#[inline(always)]
pub fn inline_offset(s: u32) -> usize {
    s as usize * SLOT_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meta_roundtrip_preserves_slot_bytes() {
        let mut b = [0xa5u8; 64];
        let mut m = Meta(0);
        m.set_chain((1 << 31) - 1);
        m.set_field(9, 63);
        m.store(&mut b);
        assert_eq!(b[48], 0xa5);
        assert_eq!(b[49], 0xa5);
        let l = Meta::load(&b);
        assert_eq!(l.chain(), (1 << 31) - 1);
        assert_eq!(l.field(9), 63);
        assert_eq!(l.occupied(), 0);
    }

    #[test]
    fn inline_and_ptr_entries_decode() {
        let mut b = [0u8; 64];
        write_inline(&mut b, 0, b"abc", b"", 0); // 1 slot
        write_ptr(&mut b, 1, 12345, 3, 511);
        write_inline(&mut b, 2, b"12345678", b"xy", 5); // 2 slots
        write_inline(&mut b, 4, b"", b"", 0); // empty KV, 1 slot
        write_inline(&mut b, 5, &[9u8; 20], &[8u8; 5], 7); // 5 slots
        let m = Meta::load(&b);
        assert_eq!(m.occupied(), 0b11_1111_1111);
        assert_eq!(m.starts(), 0b11_0111);
        let e = m.decode(&b, 0);
        assert_eq!(
            (e.n, e.kind),
            (
                1,
                EntryKind::Inline {
                    klen: 3,
                    vlen: 0,
                    tag: 0
                }
            )
        );
        let e = m.decode(&b, 1);
        assert_eq!(
            (e.n, e.kind),
            (
                1,
                EntryKind::Ptr {
                    unit: 12345,
                    class: 3,
                    sec: 511
                }
            )
        );
        let e = m.decode(&b, 2);
        assert_eq!(
            (e.n, e.kind),
            (
                2,
                EntryKind::Inline {
                    klen: 8,
                    vlen: 2,
                    tag: 5
                }
            )
        );
        let e = m.decode(&b, 4);
        assert_eq!(
            (e.n, e.kind),
            (
                1,
                EntryKind::Inline {
                    klen: 0,
                    vlen: 0,
                    tag: 0
                }
            )
        );
        let e = m.decode(&b, 5);
        assert_eq!(
            (e.n, e.kind),
            (
                5,
                EntryKind::Inline {
                    klen: 20,
                    vlen: 5,
                    tag: 7
                }
            )
        );
        assert_eq!(&b[10..20], b"12345678xy");
    }

    #[test]
    fn candidates_match_decode() {
        let mut b = [0u8; 64];
        write_inline(&mut b, 0, b"abc", b"", 0); // 1 slot, klen 3
        write_ptr(&mut b, 1, 12345, 3, 511);
        write_inline(&mut b, 2, b"12345678", b"xy", 5); // 2 slots
        write_inline(&mut b, 4, b"", b"", 0);
        write_inline(&mut b, 5, &[9u8; 8], &[8u8; 17], 5); // 5 slots, klen 8, tag 5
        let m = Meta::load(&b);
        let c = m.candidates(8, 5);
        assert_eq!(c.inline, 1 << (6 * 2 + 5) | 1 << (6 * 5 + 5));
        assert_eq!(c.ptr, 1 << (6 + 5));
        assert_eq!(m.candidates(8, 4).inline, 0);
        assert_eq!(m.candidates(3, 0).inline, 1 << 5);
        assert_eq!(m.candidates(0, 0).inline, 1 << (6 * 4 + 5));
        assert_eq!(m.candidates(200, 0).inline, 0);
        for s in 0..10 {
            assert_eq!(lane_slot(6 * s + 5), s);
        }
    }

    #[test]
    fn find_run_works() {
        assert_eq!(Meta::find_run(0, 10), Some(0));
        assert_eq!(Meta::find_run(0b1, 9), Some(1));
        assert_eq!(Meta::find_run(0b1, 10), None);
        assert_eq!(Meta::find_run(0b10_0100_0000, 3), Some(0));
        assert_eq!(Meta::find_run(0b00_0100_0111, 3), Some(3));
        assert_eq!(Meta::find_run(0b11_1111_1111, 1), None);
        assert_eq!(Meta::find_run(0b01_1111_1111, 1), Some(9));
    }

    /// The unchecked reads of `slot_key_eq`: every slot start, every key
    /// length around the word-load paths, equal and one byte off.
    #[test]
    fn slot_key_eq_every_slot_and_length() {
        let b: [u8; BUCKET_BYTES] = std::array::from_fn(|i| (i * 31 + 7) as u8);
        for s in 0..SLOTS as u32 {
            let at = inline_offset(s);
            for n in 0..=(INLINE_MAX - at).min(20) {
                let key = &b[at..at + n];
                assert!(slot_key_eq(&b, at, key), "slot {s} len {n}");
                for i in 0..n {
                    let mut k = key.to_vec();
                    k[i] ^= 1;
                    assert!(!slot_key_eq(&b, at, &k), "slot {s} len {n} byte {i}");
                }
            }
        }
    }

    /// `read_slot_fast` (one unchecked 8-byte load) equals `read_slot`.
    #[test]
    fn read_slot_fast_equals_read_slot() {
        let b: [u8; BUCKET_BYTES] = std::array::from_fn(|i| (i * 57 + 3) as u8);
        for s in 0..SLOTS as u32 {
            assert_eq!(read_slot_fast(&b, s), read_slot(&b, s), "slot {s}");
        }
    }

    /// `copy_small`'s overlapping word moves copy exactly `n` bytes.
    #[test]
    fn copy_small_every_length() {
        let src: Vec<u8> = (1..=40u8).collect();
        for n in 0..=40 {
            let mut dst = [0u8; 48];
            copy_small(&mut dst[3..3 + n], &src[..n]);
            assert_eq!(&dst[3..3 + n], &src[..n], "len {n}");
            assert!(
                dst[..3].iter().chain(&dst[3 + n..]).all(|&x| x == 0),
                "len {n}"
            );
        }
    }
}
