//! The key hash: a fixed-seed wyhash-style 64-bit mix, a contract between the
//! server and its clients (partition steering: `kvwire::partition`), so it lives
//! with the wire formats; the engine also picks buckets and secondary hashes from it
//! (`kvengine::hash`). Clients use it without linking the storage engine.

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const SEED: u64 = 0x4b56_2d44_6972_6563; // "KV-Direc"

#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// The little-endian `u32` of `k` at `at`. Panics if `at + 4 > k.len()`;
/// [`key_hash`] reads only at offsets its length tests put in bounds (a
/// constant offset into a key of known length, or 0 and `len - 4` with
/// `len >= 4`), so the compiler drops the check.
#[inline(always)]
fn r4(k: &[u8], at: usize) -> u64 {
    u64::from(u32::from_le_bytes(
        <[u8; 4]>::try_from(&k[at..at + 4]).expect("4 bytes"),
    ))
}

/// The little-endian `u64` of `k` at `at`. Panics if `at + 8 > k.len()`
/// (checks dropped as for [`r4`], except in the loop over long keys).
#[inline(always)]
fn r8(k: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(<[u8; 8]>::try_from(&k[at..at + 8]).expect("8 bytes"))
}

/// 64-bit hash of a key (wyhash final-v4 structure, fixed seed).
///
/// Stable across runs and processes: clients may steer partitions by it.
/// Never panics; the empty key is hashed like any other.
#[inline(always)]
pub fn key_hash(key: &[u8]) -> u64 {
    let len = key.len();
    let mut seed = SEED ^ mum(SEED ^ P0, P1);
    let (mut a, mut b);
    if len <= 16 {
        if (8..16).contains(&len) {
            // The general 4..=16 case below with q = 4, as two 8-byte loads:
            // r4(0) << 32 | r4(4) is the word at 0 rotated by 32, and
            // r4(len - 4) << 32 | r4(len - 8) is the word at len - 8.
            // 8 <= len: both reads, at 0 and at len - 8, are in bounds.
            a = r8(key, 0).rotate_left(32);
            b = r8(key, len - 8);
        } else if len == 16 {
            // The general case with q = (len >> 3) << 2 = 8: reads at 0, q,
            // len - 4 and len - 4 - q, constant offsets of a 16-byte key.
            a = (r4(key, 0) << 32) | r4(key, 8);
            b = (r4(key, 12) << 32) | r4(key, 4);
        } else if len >= 4 {
            // 4 <= len < 8: q = 0, so the reads are at 0 and len - 4 (twice).
            let (x, y) = (r4(key, 0), r4(key, len - 4));
            a = (x << 32) | x;
            b = (y << 32) | y;
        } else if len > 0 {
            a = (u64::from(key[0]) << 16)
                | (u64::from(key[len >> 1]) << 8)
                | u64::from(key[len - 1]);
            b = 0;
        } else {
            a = 0;
            b = 0;
        }
    } else {
        let mut p = 0;
        let mut i = len;
        while i > 16 {
            seed = mum(r8(key, p) ^ P1, r8(key, p + 8) ^ seed);
            p += 16;
            i -= 16;
        }
        a = r8(key, len - 16);
        b = r8(key, len - 8);
    }
    a ^= P1;
    b ^= seed;
    let r = u128::from(a) * u128::from(b);
    a = r as u64;
    b = (r >> 64) as u64;
    mum(a ^ P0 ^ len as u64, b ^ P1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lengths_hash_without_panic_and_differ() {
        let buf: Vec<u8> = (0..200u8).collect();
        let mut seen = std::collections::HashSet::new();
        for l in 0..buf.len() {
            assert!(seen.insert(key_hash(&buf[..l])), "collision at len {l}");
        }
    }

    /// The hash as first written (bounds-checked 4-byte reads for every
    /// short key): `key_hash` must keep returning exactly these values.
    fn reference_hash(key: &[u8]) -> u64 {
        let r4 =
            |k: &[u8], at: usize| u64::from(u32::from_le_bytes(k[at..at + 4].try_into().unwrap()));
        let len = key.len();
        let mut seed = SEED ^ mum(SEED ^ P0, P1);
        let (mut a, mut b);
        if len <= 16 {
            if len >= 4 {
                let q = (len >> 3) << 2;
                a = (r4(key, 0) << 32) | r4(key, q);
                b = (r4(key, len - 4) << 32) | r4(key, len - 4 - q);
            } else if len > 0 {
                a = (u64::from(key[0]) << 16)
                    | (u64::from(key[len >> 1]) << 8)
                    | u64::from(key[len - 1]);
                b = 0;
            } else {
                a = 0;
                b = 0;
            }
        } else {
            let mut p = 0;
            let mut i = len;
            while i > 16 {
                seed = mum(r8(key, p) ^ P1, r8(key, p + 8) ^ seed);
                p += 16;
                i -= 16;
            }
            a = r8(key, len - 16);
            b = r8(key, len - 8);
        }
        a ^= P1;
        b ^= seed;
        let r = u128::from(a) * u128::from(b);
        a = r as u64;
        b = (r >> 64) as u64;
        mum(a ^ P0 ^ len as u64, b ^ P1)
    }

    #[test]
    fn matches_reference_and_known_values() {
        let buf: Vec<u8> = (0..300u32).map(|i| (i * 37 + 11) as u8).collect();
        for l in 0..buf.len() {
            for start in [0, 1, 3] {
                let k = &buf[start..start + l.min(buf.len() - start)];
                assert_eq!(key_hash(k), reference_hash(k), "len {}", k.len());
            }
        }
    }
}
