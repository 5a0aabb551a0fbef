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
//!
//! A run as a tenant's client writes [`KeyPrefix`] (the tenant's namespace) before
//! each key's own bytes.

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

/// The bytes every key of a run begins with, before its own ([`write_key`]) bytes:
/// none, or a tenant's namespace (docs/PROTOCOL.md §6.8). A key of such a run is
/// `len()` bytes longer on the wire than its own size.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyPrefix {
    bytes: [u8; KeyPrefix::MAX],
    len: u8,
}

impl KeyPrefix {
    /// The longest prefix.
    pub const MAX: usize = 4;

    /// No prefix.
    pub const NONE: KeyPrefix = KeyPrefix {
        bytes: [0; KeyPrefix::MAX],
        len: 0,
    };

    /// The prefix `bytes` (`None` beyond [`KeyPrefix::MAX`] bytes).
    pub fn new(bytes: &[u8]) -> Option<KeyPrefix> {
        let mut p = KeyPrefix::NONE;
        p.bytes.get_mut(..bytes.len())?.copy_from_slice(bytes);
        p.len = bytes.len() as u8;
        Some(p)
    }

    /// The prefix's length in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// True for no prefix.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Writes key `index` into `out` (its length is the prefix's plus the key's own
    /// size, which must be >= 1): the prefix, then [`write_key`].
    #[inline]
    pub fn write_key(&self, index: u64, out: &mut [u8]) {
        let n = self.len();
        out[..n].copy_from_slice(&self.bytes[..n]);
        write_key(index, &mut out[n..]);
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
    fn a_prefix_goes_before_the_key() {
        let p = KeyPrefix::new(&[0xFE, 0, 0, 7]).unwrap();
        let mut k = [0u8; 6];
        p.write_key(0x0102, &mut k);
        assert_eq!(k, [0xFE, 0, 0, 7, 2, 1]);
        let mut plain = [0u8; 2];
        KeyPrefix::NONE.write_key(0x0102, &mut plain);
        assert_eq!(plain, [2, 1]);
        assert!(KeyPrefix::new(&[0; 5]).is_none());
        assert!(KeyPrefix::NONE.is_empty() && p.len() == 4);
    }

    #[test]
    fn scattered_keys_are_distinct() {
        let mut seen = std::collections::HashSet::new();
        for i in 0..10_000 {
            assert!(seen.insert(scattered_key(i)));
        }
    }
}
