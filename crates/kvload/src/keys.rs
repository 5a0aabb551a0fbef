//! Key bytes from key indices.
//!
//! Keys are numbered `0..keys`. Two encodings are in use:
//!
//! * [`write_key`] (pktgen): key `i`'s bytes are `i` little-endian, padded with a
//!   fixed pattern up to any key size, so every key is distinct and a response can
//!   be matched back to its index.
//! * [`scattered_key`] (engine benchmarks): 8 bytes, `i` multiplied by an odd
//!   constant (a bijection on u64) and xored with another, so consecutive indices
//!   land far apart in the key space.

/// Writes key `index`'s bytes into `out` (its length is the key size, >= 1).
///
/// The first up-to-8 bytes are the index little-endian; the rest a fixed pattern.
/// Key sizes below 8 bytes require `index < 256^size`, checked by the caller.
#[inline]
pub fn write_key(index: u64, out: &mut [u8]) {
    let le = index.to_le_bytes();
    let n = out.len().min(8);
    out[..n].copy_from_slice(&le[..n]);
    for (i, b) in out.iter_mut().enumerate().skip(8) {
        *b = 0x4b ^ (i as u8);
    }
}

/// The 8-byte key of index `i`, scattered over the key space (distinct for distinct
/// `i`: an odd multiplier is a bijection on u64).
#[inline(always)]
pub fn scattered_key(i: u64) -> [u8; 8] {
    (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0x5bd1_e995_1234_5678).to_le_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_distinct() {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        write_key(1, &mut a);
        write_key(256, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn key_layout_golden() {
        let mut k = [0u8; 10];
        write_key(258, &mut k);
        assert_eq!(k, [2, 1, 0, 0, 0, 0, 0, 0, 67, 66]);
        // Short keys keep the low bytes of the index.
        let mut s = [0u8; 2];
        write_key(0x0304, &mut s);
        assert_eq!(s, [4, 3]);
        assert_eq!(scattered_key(3), [71, 34, 235, 111, 185, 132, 119, 129]);
    }

    #[test]
    fn scattered_keys_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            assert!(seen.insert(scattered_key(i)));
        }
    }
}
