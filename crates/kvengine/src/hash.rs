//! Key hashing: a fixed-seed wyhash-style 64-bit mix.
//!
//! The engine and the clients must agree on [`key_hash`]: the top
//! [`SECONDARY_BITS`] bits are the secondary hash stored in a slot, the
//! remaining low bits pick the bucket (and, later, the partition).

const P0: u64 = 0xa076_1d64_78bd_642f;
const P1: u64 = 0xe703_7ed1_a0b4_28db;
const SEED: u64 = 0x4b56_2d44_6972_6563; // "KV-Direc"

/// Number of secondary-hash bits kept in a pointer slot.
pub const SECONDARY_BITS: u32 = 9;

#[inline(always)]
fn mum(a: u64, b: u64) -> u64 {
    let r = u128::from(a) * u128::from(b);
    (r as u64) ^ ((r >> 64) as u64)
}

/// A little-endian `u32` of `k` at `at`, without a bounds check.
///
/// # Safety
///
/// `at + 4 <= k.len()`.
#[inline(always)]
unsafe fn r4u(k: &[u8], at: usize) -> u64 {
    debug_assert!(at + 4 <= k.len());
    // SAFETY: the caller guarantees `at + 4 <= k.len()`.
    let w = unsafe { k.as_ptr().add(at).cast::<u32>().read_unaligned() };
    u64::from(u32::from_le(w))
}

/// A little-endian `u64` of `k` at `at`, without a bounds check.
///
/// # Safety
///
/// `at + 8 <= k.len()`.
#[inline(always)]
unsafe fn r8u(k: &[u8], at: usize) -> u64 {
    debug_assert!(at + 8 <= k.len());
    // SAFETY: the caller guarantees `at + 8 <= k.len()`.
    let w = unsafe { k.as_ptr().add(at).cast::<u64>().read_unaligned() };
    u64::from_le(w)
}

#[inline(always)]
fn r8(k: &[u8], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&k[at..at + 8]);
    u64::from_le_bytes(b)
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
            // SAFETY: 8 <= len, so both 8-byte reads, at 0 and at len - 8,
            // lie inside `key`.
            unsafe {
                a = r8u(key, 0).rotate_left(32);
                b = r8u(key, len - 8);
            }
        } else if len >= 4 {
            let q = (len >> 3) << 2;
            // SAFETY: 4 <= len <= 16 here, so q = 0 (len < 8), 4 (len < 16)
            // or 8 (len = 16) and q <= len - 4: every offset read, 0, q,
            // len - 4 and len - 4 - q, is in 0..=len - 4.
            unsafe {
                a = (r4u(key, 0) << 32) | r4u(key, q);
                b = (r4u(key, len - 4) << 32) | r4u(key, len - 4 - q);
            }
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

/// The 9-bit secondary hash of a key hash.
#[inline(always)]
pub fn secondary(h: u64) -> u16 {
    (h >> (64 - SECONDARY_BITS)) as u16
}

/// Maps a hash onto `0..n` (Lemire's multiply-shift on the bits below the
/// secondary hash, so bucket choice and secondary hash stay independent).
#[inline(always)]
pub fn bucket_index(h: u64, n: u64) -> u64 {
    let low = h << SECONDARY_BITS; // drop the secondary bits, keep 55 bits at the top
    ((u128::from(low) * u128::from(n)) >> 64) as u64
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

    #[test]
    fn bucket_index_in_range() {
        for i in 0..10_000u64 {
            let h = key_hash(&i.to_le_bytes());
            assert!(bucket_index(h, 7) < 7);
            assert!(secondary(h) < 512);
        }
    }

    #[test]
    fn spreads_sequential_keys() {
        let n = 1024u64;
        let mut counts = vec![0u32; n as usize];
        for i in 0..(n * 64) {
            counts[bucket_index(key_hash(&i.to_le_bytes()), n) as usize] += 1;
        }
        let max = *counts.iter().max().unwrap();
        assert!(max < 64 * 2, "max bucket load {max}");
    }
}
