//! Bucket and secondary hash: the engine's use of the key hash
//! ([`kvwire::hash::key_hash`], shared with the clients): the top
//! [`SECONDARY_BITS`] bits are the secondary hash stored in a slot, the remaining
//! low bits pick the bucket.

pub use kvwire::hash::key_hash;

/// Number of secondary-hash bits kept in a pointer slot.
pub const SECONDARY_BITS: u32 = 9;

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
