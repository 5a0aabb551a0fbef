//! Value sizes and bytes: a pure function of (key, version, length), so a client in
//! verify mode needs no copy of the data, only the current version of each key.

use crate::rng::splitmix64;

/// Value sizes: fixed, or uniform over an inclusive range (a function of key and
/// version, so verify mode can recompute it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeDist {
    /// Smallest value size in bytes.
    pub min: usize,
    /// Largest value size in bytes.
    pub max: usize,
}

impl SizeDist {
    /// Parses `N` or `MIN-MAX`.
    pub fn parse(s: &str) -> Result<SizeDist, String> {
        let num = |t: &str| {
            t.trim()
                .parse::<usize>()
                .map_err(|_| format!("bad size {s:?}"))
        };
        let d = match s.split_once('-') {
            Some((a, b)) => SizeDist {
                min: num(a)?,
                max: num(b)?,
            },
            None => {
                let n = num(s)?;
                SizeDist { min: n, max: n }
            }
        };
        if d.min > d.max {
            return Err(format!("bad size range {s:?}"));
        }
        Ok(d)
    }

    /// The value length of `key` at `version`.
    #[inline]
    pub fn len_of(&self, key: u64, version: u32) -> usize {
        if self.min == self.max {
            return self.min;
        }
        let span = (self.max - self.min + 1) as u64;
        self.min + (splitmix64(key ^ ((version as u64) << 40) ^ 0x5EED) % span) as usize
    }
}

/// The state the value bytes of (`key`, `version`) are drawn from, 8 at a time.
#[inline]
fn value_seed(key: u64, version: u32) -> u64 {
    splitmix64(key.wrapping_mul(0x100_0000_01B3) ^ version as u64)
}

/// Writes the value of (`key`, `version`) into `out` (its length is the value size).
#[inline]
pub fn write_value(key: u64, version: u32, out: &mut [u8]) {
    let mut state = value_seed(key, version);
    for chunk in out.chunks_mut(8) {
        state = splitmix64(state);
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Element `i` of a vector value: the 8-byte little-endian chunk of (`key`, `version`)
/// plus `adds` (wrapping), as fetch-adds of 1 leave it.
#[inline]
fn elem_with_adds(chunk: &[u8], adds: u32) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(chunk);
    u64::from_le_bytes(b).wrapping_add(u64::from(adds))
}

/// True when `got` is the value of (`key`, `version`) of length `len` after `adds`
/// fetch-adds of 1 to each of its 8-byte elements (`len` a multiple of 8 when
/// `adds > 0`).
#[inline]
pub fn value_matches_adds(key: u64, version: u32, len: usize, adds: u32, got: &[u8]) -> bool {
    if adds == 0 {
        return value_matches(key, version, len, got);
    }
    if got.len() != len || len % 8 != 0 {
        return false;
    }
    let mut state = value_seed(key, version);
    got.chunks_exact(8).all(|g| {
        state = splitmix64(state);
        elem_with_adds(&state.to_le_bytes(), adds).to_le_bytes() == *g
    })
}

/// The wrapping sum of the 8-byte elements of (`key`, `version`) of length `len` (a
/// multiple of 8) after `adds` fetch-adds of 1 to each.
#[inline]
pub fn reduce_sum(key: u64, version: u32, len: usize, adds: u32) -> u64 {
    let mut state = value_seed(key, version);
    (0..len / 8).fold(0u64, |s, _| {
        state = splitmix64(state);
        s.wrapping_add(elem_with_adds(&state.to_le_bytes(), adds))
    })
}

/// True when `got` is exactly the value of (`key`, `version`) of length `len`.
#[inline]
pub fn value_matches(key: u64, version: u32, len: usize, got: &[u8]) -> bool {
    if got.len() != len {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut off = 0;
    let mut state = value_seed(key, version);
    while off < len {
        state = splitmix64(state);
        let b = state.to_le_bytes();
        let n = (len - off).min(8);
        buf[..n].copy_from_slice(&b[..n]);
        if got[off..off + n] != buf[..n] {
            return false;
        }
        off += n;
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_deterministic_and_checkable() {
        let mut a = [0u8; 37];
        write_value(5, 3, &mut a);
        assert!(value_matches(5, 3, 37, &a));
        assert!(!value_matches(5, 4, 37, &a));
        assert!(!value_matches(6, 3, 37, &a));
        assert!(!value_matches(5, 3, 37, &a[..36]), "truncated value");
        let mut b = a;
        b[20] ^= 1;
        assert!(!value_matches(5, 3, 37, &b), "corrupted byte");
    }

    #[test]
    fn value_golden() {
        let mut v = [0u8; 20];
        write_value(5, 3, &mut v);
        assert_eq!(
            v,
            [
                193, 185, 100, 96, 249, 229, 22, 40, 97, 65, 142, 118, 194, 100, 178, 182, 170,
                162, 1, 238
            ]
        );
        // A shorter value is a prefix of a longer one of the same key and version.
        let mut w = [0u8; 5];
        write_value(5, 3, &mut w);
        assert_eq!(w, v[..5]);
        assert_eq!(reduce_sum(7, 3, 24, 5), 0x64a7_1b6c_8ed4_2af4);
    }

    #[test]
    fn empty_values() {
        let mut e = [0u8; 0];
        write_value(1, 1, &mut e);
        assert!(value_matches(1, 1, 0, &[]));
        assert!(!value_matches(1, 1, 0, &[0]));
        assert_eq!(reduce_sum(1, 1, 0, 3), 0);
    }

    #[test]
    fn sizes() {
        let d = SizeDist::parse("4-100").unwrap();
        assert!((0..1000).all(|k| (4..=100).contains(&d.len_of(k, 1))));
        let lens: Vec<usize> = (0..6).map(|k| d.len_of(k, 1)).collect();
        assert_eq!(lens, [14, 57, 57, 5, 29, 64], "golden");
        assert!(SizeDist::parse("9-3").is_err());
        assert!(SizeDist::parse("x").is_err());
        assert!(SizeDist::parse("1-").is_err());
        assert_eq!(
            SizeDist::parse("10").unwrap(),
            SizeDist { min: 10, max: 10 }
        );
        assert_eq!(
            SizeDist::parse(" 2 - 8 ").unwrap(),
            SizeDist { min: 2, max: 8 }
        );
        assert_eq!(SizeDist::parse("10").unwrap().len_of(99, 7), 10);
    }

    #[test]
    fn adds_and_sums_follow_fetch_adds() {
        let mut v = [0u8; 24];
        write_value(7, 3, &mut v);
        assert!(value_matches_adds(7, 3, 24, 0, &v));
        let mut sum = 0u64;
        for c in v.chunks_exact_mut(8) {
            let x = u64::from_le_bytes(c.try_into().unwrap()).wrapping_add(5);
            c.copy_from_slice(&x.to_le_bytes());
            sum = sum.wrapping_add(x);
        }
        assert!(value_matches_adds(7, 3, 24, 5, &v));
        assert!(!value_matches_adds(7, 3, 24, 4, &v));
        assert!(!value_matches_adds(7, 4, 24, 5, &v));
        assert!(
            value_matches_adds(7, 3, 16, 5, &v[..16]),
            "a prefix is the shorter value"
        );
        assert!(
            !value_matches_adds(7, 3, 12, 5, &v[..12]),
            "not whole elements"
        );
        assert!(!value_matches_adds(7, 3, 24, 5, &v[..23]), "length differs");
        assert_eq!(reduce_sum(7, 3, 24, 5), sum);
    }
}
