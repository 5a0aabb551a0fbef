//! Workload generation: key choice (uniform or YCSB Zipfian), operation mix, and
//! deterministic key and value bytes so that verify mode can predict every answer.
//!
//! Keys are numbered `0..keys`. Key `i`'s bytes are `i` little-endian, padded with
//! a fixed pattern up to the key size, so every key is distinct. Values are a pure
//! function of (key, version, length): verify mode needs no copy of the data, only
//! the current version of each key (see `model.rs`).

/// A small, fast PRNG (xorshift64*): one per generator lcore, seeded explicitly so
/// runs are reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed (0 is remapped: xorshift has no zero state).
    pub fn new(seed: u64) -> Rng {
        Rng(splitmix64(seed) | 1)
    }

    /// The next 64 random bits.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A uniform float in [0, 1).
    #[inline]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (n > 0), by multiply-shift (Lemire), bias < 2^-32.
    #[inline]
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// SplitMix64 finaliser: a good 64-bit mixer, used for seeds and value bytes.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Key popularity distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// YCSB's Zipfian with skew `theta` (0.99 in the paper), scrambled so that the
    /// hot keys are spread over the key space as YCSB does.
    Zipf(f64),
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
/// synthetic databases"), with `zeta(n, theta)` computed once at start-up.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    theta: f64,
    alpha: f64,
    zetan: f64,
    eta: f64,
}

impl Zipf {
    /// A generator over `0..n` with skew `theta` in (0, 1).
    pub fn new(n: u64, theta: f64) -> Zipf {
        assert!(
            n > 0 && theta > 0.0 && theta < 1.0,
            "zipf needs n > 0, 0 < theta < 1"
        );
        let zeta = |k: u64| (1..=k).map(|i| 1.0 / (i as f64).powf(theta)).sum::<f64>();
        let zetan = zeta(n);
        let zeta2 = zeta(2.min(n));
        let alpha = 1.0 / (1.0 - theta);
        let eta = (1.0 - (2.0 / n as f64).powf(1.0 - theta)) / (1.0 - zeta2 / zetan);
        Zipf {
            n,
            theta,
            alpha,
            zetan,
            eta,
        }
    }

    /// The next rank in `0..n` (0 is the most popular).
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        let u = rng.next_f64();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }
}

/// Chooses keys according to a [`Distribution`].
#[derive(Clone, Debug)]
pub struct KeyChooser {
    keys: u64,
    zipf: Option<Zipf>,
}

impl KeyChooser {
    /// A chooser over `keys` keys.
    pub fn new(keys: u64, dist: Distribution) -> KeyChooser {
        let zipf = match dist {
            Distribution::Uniform => None,
            Distribution::Zipf(theta) => Some(Zipf::new(keys, theta)),
        };
        KeyChooser { keys, zipf }
    }

    /// The next key index.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> u64 {
        match &self.zipf {
            None => rng.below(self.keys),
            // Scramble the rank (as YCSB's ScrambledZipfian) so hot keys are not
            // neighbours; the map is a permutation only up to collisions, which YCSB
            // accepts too.
            Some(z) => splitmix64(z.next(rng)) % self.keys,
        }
    }
}

/// The kinds of operation pktgen issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpType {
    /// Read a key.
    Get,
    /// Insert or replace a key.
    Put,
    /// Remove a key.
    Delete,
    /// UPDATE_S2S fetch-add of 1 to the value as one unsigned 8-byte element; returns
    /// the original.
    Atomic,
    /// UPDATE_S2V fetch-add of 1 to every 8-byte element of the value; returns the
    /// original vector.
    Vector,
    /// REDUCE: the wrapping sum of the value's 8-byte elements.
    Reduce,
}

impl OpType {
    /// Whether the op changes the stored value.
    pub fn writes(self) -> bool {
        !matches!(self, OpType::Get | OpType::Reduce)
    }
}

/// The operation mix, as cumulative thresholds over [0, 1).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// (cumulative share × 2^53, op), DELETE is the rest: a draw compares the 53 random
    /// bits of [`Rng::next_f64`] as an integer, with no conversion to floating point.
    cuts: [(u64, OpType); 5],
    /// The cumulative share of all ops but DELETE.
    non_delete: f64,
}

/// 2^53: the resolution of a draw.
const DRAW_ONE: f64 = (1u64 << 53) as f64;

impl Mix {
    /// A mix with the given GET, PUT, atomic, vector-update and reduce shares; the rest
    /// are DELETEs.
    pub fn new(get: f64, put: f64, atomic: f64, vector: f64, reduce: f64) -> Result<Mix, String> {
        let shares = [get, put, atomic, vector, reduce];
        let sum: f64 = shares.iter().sum();
        if shares.iter().any(|s| !(0.0..=1.0).contains(s)) || sum > 1.0 + 1e-9 {
            return Err(format!(
                "bad mix: get {get} put {put} atomic {atomic} vector {vector} reduce {reduce} \
                 must each be in [0, 1] and sum to at most 1"
            ));
        }
        let ops = [
            OpType::Get,
            OpType::Put,
            OpType::Atomic,
            OpType::Vector,
            OpType::Reduce,
        ];
        let mut cuts = [(0, OpType::Get); 5];
        let mut acc = 0.0;
        for (c, (s, op)) in cuts.iter_mut().zip(shares.iter().zip(ops)) {
            acc += s;
            // u / 2^53 < acc  <=>  u < acc * 2^53 for the integer u of a draw.
            *c = ((acc * DRAW_ONE).ceil().min(DRAW_ONE) as u64, op);
        }
        Ok(Mix {
            cuts,
            non_delete: acc,
        })
    }

    /// The DELETE share.
    pub fn delete_share(&self) -> f64 {
        (1.0 - self.non_delete).max(0.0)
    }

    /// Draws an operation type.
    #[inline]
    pub fn next(&self, rng: &mut Rng) -> OpType {
        let u = rng.next_u64() >> 11;
        for &(cut, op) in &self.cuts {
            if u < cut {
                return op;
            }
        }
        OpType::Delete
    }
}

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

/// Writes the value of (`key`, `version`) into `out` (its length is the value size).
#[inline]
pub fn write_value(key: u64, version: u32, out: &mut [u8]) {
    let mut state = splitmix64(key.wrapping_mul(0x100_0000_01B3) ^ version as u64);
    for chunk in out.chunks_mut(8) {
        state = splitmix64(state);
        let b = state.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// Element `i` of a vector value: the 8-byte little-endian chunk of (`key`, `version`)
/// plus `adds` (wrapping), as fetch-adds of 1 leave it.
fn elem_with_adds(chunk: &[u8], adds: u32) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(chunk);
    u64::from_le_bytes(b).wrapping_add(u64::from(adds))
}

/// True when `got` is the value of (`key`, `version`) of length `len` after `adds`
/// fetch-adds of 1 to each of its 8-byte elements (`len` a multiple of 8 when
/// `adds > 0`).
pub fn value_matches_adds(key: u64, version: u32, len: usize, adds: u32, got: &[u8]) -> bool {
    if adds == 0 {
        return value_matches(key, version, len, got);
    }
    if got.len() != len || !len.is_multiple_of(8) {
        return false;
    }
    let mut state = splitmix64(key.wrapping_mul(0x100_0000_01B3) ^ version as u64);
    got.chunks_exact(8).all(|g| {
        state = splitmix64(state);
        elem_with_adds(&state.to_le_bytes(), adds).to_le_bytes() == *g
    })
}

/// The wrapping sum of the 8-byte elements of (`key`, `version`) of length `len` (a
/// multiple of 8) after `adds` fetch-adds of 1 to each.
pub fn reduce_sum(key: u64, version: u32, len: usize, adds: u32) -> u64 {
    let mut state = splitmix64(key.wrapping_mul(0x100_0000_01B3) ^ version as u64);
    (0..len / 8).fold(0u64, |s, _| {
        state = splitmix64(state);
        s.wrapping_add(elem_with_adds(&state.to_le_bytes(), adds))
    })
}

/// True when `got` is exactly the value of (`key`, `version`) of length `len`.
pub fn value_matches(key: u64, version: u32, len: usize, got: &[u8]) -> bool {
    if got.len() != len {
        return false;
    }
    let mut buf = [0u8; 64];
    let mut off = 0;
    let mut state = splitmix64(key.wrapping_mul(0x100_0000_01B3) ^ version as u64);
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
    fn zipf_is_skewed_and_in_range() {
        let n = 10_000;
        let z = Zipf::new(n, 0.99);
        let mut rng = Rng::new(7);
        let mut hits = vec![0u32; n as usize];
        for _ in 0..200_000 {
            let r = z.next(&mut rng);
            assert!(r < n);
            hits[r as usize] += 1;
        }
        // Rank 0 dominates rank 100 by roughly 100^0.99.
        assert!(
            hits[0] > 30 * hits[100].max(1),
            "{} vs {}",
            hits[0],
            hits[100]
        );
    }

    #[test]
    fn uniform_covers_keys() {
        let c = KeyChooser::new(16, Distribution::Uniform);
        let mut rng = Rng::new(1);
        let mut seen = [false; 16];
        for _ in 0..1000 {
            seen[c.next(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

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
    fn keys_are_distinct() {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        write_key(1, &mut a);
        write_key(256, &mut b);
        assert_ne!(a, b);
    }

    #[test]
    fn mix_and_sizes() {
        assert!(Mix::new(0.9, 0.2, 0.0, 0.0, 0.0).is_err());
        assert!(Mix::new(0.5, 0.2, 0.2, 0.1, 0.1).is_err());
        let m = Mix::new(0.5, 0.5, 0.0, 0.0, 0.0).unwrap();
        let mut rng = Rng::new(3);
        assert!((0..100).all(|_| m.next(&mut rng) != OpType::Delete));
        let d = SizeDist::parse("4-100").unwrap();
        assert!((0..1000).all(|k| (4..=100).contains(&d.len_of(k, 1))));
        assert!(SizeDist::parse("9-3").is_err());
        assert_eq!(
            SizeDist::parse("10").unwrap(),
            SizeDist { min: 10, max: 10 }
        );
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
        assert_eq!(reduce_sum(7, 3, 24, 5), sum);
        let m = Mix::new(0.0, 0.0, 1.0, 0.0, 0.0).unwrap();
        let mut rng = Rng::new(1);
        assert!((0..100).all(|_| m.next(&mut rng) == OpType::Atomic));
        assert_eq!(m.delete_share(), 0.0);
    }
}
