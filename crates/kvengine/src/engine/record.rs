//! The KV record format: how a key and its value are laid out, in a slab
//! block or inline in bucket slots.
//!
//! ```text
//!  slab record, short header (klen < 64 and vlen < 512):
//!                +-------------------------------+-----------+-------------+
//!                | u16 LE: klen | vlen << 6 | 0<<15 | key bytes | value bytes |  (rest of the class unused)
//!                +-------------------------------+-----------+-------------+
//!  slab record, long header:
//!                +------+------+---------+-----------+-------------+
//!                | klen | 0x80 | vlen LE | key bytes | value bytes |
//!                +------+------+---------+-----------+-------------+
//!                  1 B    1 B     2 B
//!
//!  inline KV (in bucket slots, see `crate::bucket`): key bytes then value
//!  bytes from the entry's first slot on, no header; the lengths live in the
//!  bucket metadata.
//! ```
//!
//! The 2-byte short header lets a 254 B KV with a short key fill a 256 B
//! block exactly (the paper's 254 B example). Bit 15 of the first header
//! word tells the two apart (`0x80` in byte 1 of the long header; a short
//! header has at most 9 value bits above the 6 key bits).

use super::Engine;
use crate::bucket::{self, Entry, EntryKind, BUCKET_BYTES};
use crate::slab::UNIT_SHIFT;

/// Bytes of the long slab record header (key length, flag, value length).
pub const REC_HDR: usize = 4;

/// Largest key accepted (a record stores the key length in one byte).
pub const KEY_LEN_LIMIT: usize = 255;

/// Header bytes of a slab record holding `klen` + `vlen` bytes.
#[inline(always)]
pub fn rec_hdr_len(klen: usize, vlen: usize) -> usize {
    if klen < 64 && vlen < 512 {
        2
    } else {
        REC_HDR
    }
}

/// A decoded slab record header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct RecHeader {
    /// Header bytes (2 or [`REC_HDR`]); the key starts there.
    pub(crate) len: usize,
    /// Key length.
    pub(crate) klen: usize,
    /// Value length.
    pub(crate) vlen: usize,
}

impl RecHeader {
    /// Header + key + value bytes: what the record occupies of its block.
    #[inline(always)]
    pub(crate) fn record_len(self) -> usize {
        self.len + self.klen + self.vlen
    }
}

/// Decodes the header of the record at byte offset `off` of `mem` (panics
/// if the header runs past `mem`).
#[inline(always)]
pub(crate) fn read_header(mem: &[u8], off: usize) -> RecHeader {
    let w = u16::from_le_bytes([mem[off], mem[off + 1]]);
    if w & 0x8000 == 0 {
        RecHeader {
            len: 2,
            klen: usize::from(w & 63),
            vlen: usize::from((w >> 6) & 511),
        }
    } else {
        RecHeader {
            len: REC_HDR,
            klen: usize::from(w & 0xff),
            vlen: usize::from(u16::from_le_bytes([mem[off + 2], mem[off + 3]])),
        }
    }
}

/// Encodes a record (header, key, value) into `dst`, which must be exactly
/// `hl + key.len() + value.len()` bytes with `hl = rec_hdr_len(key.len(),
/// value.len())`; `key.len() <= KEY_LEN_LIMIT` and `value.len() <=
/// u16::MAX` (the engine checks both before). `hl` is a parameter so that
/// the caller's `hl + key + value` and the slicing here share one
/// computation (the compiler then drops the bounds checks).
#[inline(always)]
pub(crate) fn encode(dst: &mut [u8], hl: usize, key: &[u8], value: &[u8]) {
    debug_assert_eq!(hl, rec_hdr_len(key.len(), value.len()));
    debug_assert_eq!(dst.len(), hl + key.len() + value.len());
    debug_assert!(key.len() <= KEY_LEN_LIMIT && value.len() <= usize::from(u16::MAX));
    if hl == 2 {
        let w = key.len() as u16 | ((value.len() as u16) << 6);
        dst[..2].copy_from_slice(&w.to_le_bytes());
    } else {
        dst[0] = key.len() as u8;
        dst[1] = 0x80;
        dst[2..4].copy_from_slice(&(value.len() as u16).to_le_bytes());
    }
    dst[hl..hl + key.len()].copy_from_slice(key);
    dst[hl + key.len()..].copy_from_slice(value);
}

/// Key and value of the slab record at byte offset `off` of `mem`.
#[inline]
pub(crate) fn record_kv(mem: &[u8], off: usize) -> (&[u8], &[u8]) {
    let h = read_header(mem, off);
    let k = off + h.len;
    (&mem[k..k + h.klen], &mem[k + h.klen..k + h.klen + h.vlen])
}

/// Key and value of the inline entry at slot `s` of bucket `b`, with the
/// lengths from its metadata.
#[inline]
pub(crate) fn inline_kv(
    b: &[u8; BUCKET_BYTES],
    s: u32,
    klen: usize,
    vlen: usize,
) -> (&[u8], &[u8]) {
    let at = bucket::inline_offset(s);
    (&b[at..at + klen], &b[at + klen..at + klen + vlen])
}

/// Key + value bytes of entry `e` (what `EngineStats::stored_kv_bytes`
/// counts); a pointer entry's record header is read from `mem`.
#[inline(always)]
pub(crate) fn entry_kv_len(mem: &[u8], e: &Entry) -> usize {
    match e.kind {
        EntryKind::Inline { klen, vlen, .. } => klen as usize + vlen as usize,
        EntryKind::Ptr { unit, .. } => {
            let h = read_header(mem, (unit as usize) << UNIT_SHIFT);
            h.klen + h.vlen
        }
    }
}

impl Engine {
    /// Writes the record of `key` / `value` into the slab block at `unit`
    /// (allocated by this engine, in a class that holds it).
    pub(super) fn write_record(&mut self, unit: u32, key: &[u8], value: &[u8]) {
        let r = (unit as usize) << UNIT_SHIFT;
        let hl = rec_hdr_len(key.len(), value.len());
        let total = hl + key.len() + value.len();
        self.acct.slab(r, total);
        encode(
            &mut self.region.as_mut_slice()[r..r + total],
            hl,
            key,
            value,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bucket::Meta;

    fn round_trip(klen: usize, vlen: usize) {
        let key: Vec<u8> = (0..klen).map(|i| (i * 7 + 1) as u8).collect();
        let value: Vec<u8> = (0..vlen).map(|i| (i * 13 + 5) as u8).collect();
        let hl = rec_hdr_len(klen, vlen);
        let total = hl + klen + vlen;
        // Garbage around the record: decoding must not depend on it.
        let mut mem = vec![0xeeu8; total + 64];
        encode(&mut mem[32..32 + total], hl, &key, &value);
        assert!(
            mem[..32].iter().all(|&b| b == 0xee),
            "wrote before the record"
        );
        assert!(
            mem[32 + total..].iter().all(|&b| b == 0xee),
            "wrote past the record"
        );
        let h = read_header(&mem, 32);
        assert_eq!(
            h,
            RecHeader {
                len: hl,
                klen,
                vlen
            },
            "klen {klen} vlen {vlen}"
        );
        assert_eq!(h.record_len(), total);
        let (k, v) = record_kv(&mem, 32);
        assert_eq!((k, v), (&key[..], &value[..]), "klen {klen} vlen {vlen}");
    }

    #[test]
    fn record_round_trip_both_headers() {
        for klen in [0, 1, 8, 62, 63, 64, 65, 200, 255] {
            for vlen in [0, 1, 2, 100, 510, 511, 512, 513, 1000, 4092, 65535] {
                round_trip(klen, vlen);
            }
        }
    }

    #[test]
    fn header_length_rule() {
        assert_eq!(rec_hdr_len(0, 0), 2);
        assert_eq!(rec_hdr_len(63, 511), 2);
        assert_eq!(rec_hdr_len(64, 0), REC_HDR);
        assert_eq!(rec_hdr_len(0, 512), REC_HDR);
        // The paper's 254 B KV (8 B key + 246 B value) + 2 B header = 256 B.
        assert_eq!(rec_hdr_len(8, 246) + 8 + 246, 256);
    }

    #[test]
    fn short_and_long_headers_are_told_apart() {
        let mut empty = [0xffu8; 2];
        encode(&mut empty, 2, &[], &[]);
        assert_eq!(empty, [0, 0]);
        assert_eq!(read_header(&empty, 0).len, 2);
        // Largest short header: every payload bit set, flag bit still clear.
        let key = [1u8; 63];
        let value = [2u8; 511];
        let mut big = vec![0u8; 2 + 63 + 511];
        encode(&mut big, 2, &key, &value);
        assert_eq!(big[1] & 0x80, 0);
        let mut long = vec![0u8; REC_HDR + 64];
        encode(&mut long, REC_HDR, &[3u8; 64], &[]);
        assert_eq!(long[1], 0x80);
        assert_eq!(read_header(&long, 0).klen, 64);
    }

    #[test]
    fn inline_kv_and_entry_len() {
        let mut b = [0u8; BUCKET_BYTES];
        bucket::write_inline(&mut b, 2, b"key", b"value!", 5);
        let m = Meta::load(&b);
        let e = m.decode(&b, 2);
        assert_eq!(e.n, 2);
        assert_eq!(entry_kv_len(&[], &e), 9);
        let EntryKind::Inline { klen, vlen, .. } = e.kind else {
            panic!("not inline: {e:?}")
        };
        assert_eq!(
            inline_kv(&b, 2, klen.into(), vlen.into()),
            (&b"key"[..], &b"value!"[..])
        );

        // A pointer entry's length comes from its record header.
        let mut mem = vec![0u8; 4096];
        let unit = 3u32;
        let r = (unit as usize) << UNIT_SHIFT;
        let (key, value) = ([9u8; 70], [8u8; 600]);
        encode(&mut mem[r..r + REC_HDR + 670], REC_HDR, &key, &value);
        let p = Entry {
            slot: 0,
            n: 1,
            kind: EntryKind::Ptr {
                unit,
                class: 5,
                sec: 0,
            },
        };
        assert_eq!(entry_kv_len(&mem, &p), 670);
    }
}
