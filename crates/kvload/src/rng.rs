//! Pseudo-random number generators: small, fast and seeded explicitly so that runs
//! are reproducible.
//!
//! Two generators, because two sequences are in use and both must stay as they are:
//! [`Xorshift64Star`] is pktgen's (its key, op and value draws), [`SplitMix64`] the
//! engine benchmarks' (their key sequences). Both implement [`RandomSource`], whose
//! derived draws ([`RandomSource::next_f64`], [`RandomSource::below`]) are the same
//! functions of the 64-bit output for both.

/// A source of 64 random bits per call, and the draws derived from them.
pub trait RandomSource {
    /// The next 64 random bits.
    fn next_u64(&mut self) -> u64;

    /// A uniform float in [0, 1): the top 53 bits of [`RandomSource::next_u64`]
    /// scaled by 2^-53 (exact: every such float is representable).
    #[inline]
    fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// A uniform integer in `0..n` (n > 0), by multiply-shift (Lemire), bias < 2^-32.
    #[inline]
    fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }
}

/// SplitMix64 finaliser: a good 64-bit mixer, used for seeds, value bytes and to
/// scramble Zipf ranks.
#[inline]
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// xorshift64*: pktgen's generator (one per generator lcore).
#[derive(Clone, Debug)]
pub struct Xorshift64Star(u64);

impl Xorshift64Star {
    /// A generator from a seed, mixed by [`splitmix64`] (and made odd: xorshift has
    /// no zero state, so seed 0 works too).
    pub fn new(seed: u64) -> Xorshift64Star {
        Xorshift64Star(splitmix64(seed) | 1)
    }
}

impl RandomSource for Xorshift64Star {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// The SplitMix64 stream (Steele et al.): the state advances by the golden gamma and
/// each output is [`splitmix64`] of the previous state. The engine benchmarks'
/// generator; unlike [`Xorshift64Star::new`] the seed is the initial state as is.
#[derive(Clone, Debug)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A stream starting from state `seed`.
    pub fn new(seed: u64) -> SplitMix64 {
        SplitMix64(seed)
    }
}

impl RandomSource for SplitMix64 {
    #[inline]
    fn next_u64(&mut self) -> u64 {
        let out = splitmix64(self.0);
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Golden values: computed with the copies these generators replaced (pktgen's
    // workload.rs and the kvengine examples). Runs recorded in results/ depend on them.

    #[test]
    fn splitmix64_golden() {
        assert_eq!(splitmix64(0), 0xe220_a839_7b1d_cdaf);
        assert_eq!(splitmix64(1), 0x910a_2dec_8902_5cc1);
    }

    #[test]
    fn xorshift_golden() {
        let mut r = Xorshift64Star::new(1);
        let got: Vec<u64> = (0..4).map(|_| r.next_u64()).collect();
        assert_eq!(
            got,
            [
                0x4b46_a55d_f361_1b9b,
                0xd7e1_f141_0e76_3ef4,
                0x5f14_ec66_975f_9b06,
                0x3b2c_74fa_d44d_6cdb
            ]
        );
        assert_eq!(Xorshift64Star::new(0).next_u64(), 0x7bbc_b40d_5506_82d0);
        let mut r = Xorshift64Star::new(9);
        let below: Vec<u64> = (0..6).map(|_| r.below(1000)).collect();
        assert_eq!(below, [662, 404, 772, 197, 336, 985]);
        let mut r = Xorshift64Star::new(9);
        assert_eq!(r.next_f64(), 0.6626280855260314);
        assert_eq!(r.next_f64(), 0.40411819754139255);
    }

    #[test]
    fn splitmix_stream_golden() {
        let mut s = SplitMix64::new(42);
        let got: Vec<u64> = (0..3).map(|_| s.next_u64()).collect();
        assert_eq!(
            got,
            [
                0xbdd7_3226_2feb_6e95,
                0x28ef_e333_b266_f103,
                0x4752_6757_130f_9f52
            ]
        );
        let mut s = SplitMix64::new(2024);
        let below: Vec<u64> = (0..6).map(|_| s.below(1_000_000)).collect();
        assert_eq!(below, [622765, 97231, 298576, 116186, 830577, 552421]);
        let mut s = SplitMix64::new(7);
        assert_eq!(s.next_f64(), 0.3898297483912715);
        assert_eq!(s.next_f64(), 0.01678829452815611);
    }

    #[test]
    fn draws_are_in_range() {
        let mut r = Xorshift64Star::new(5);
        let mut s = SplitMix64::new(5);
        for n in [1u64, 2, 3, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(r.below(n) < n);
                assert!(s.below(n) < n);
            }
        }
        for _ in 0..10_000 {
            let (a, b) = (r.next_f64(), s.next_f64());
            assert!((0.0..1.0).contains(&a) && (0.0..1.0).contains(&b));
        }
    }

    #[test]
    fn below_is_roughly_uniform() {
        let mut r = Xorshift64Star::new(11);
        let mut hits = [0u32; 10];
        for _ in 0..100_000 {
            hits[r.below(10) as usize] += 1;
        }
        assert!(
            hits.iter().all(|&h| (9_000..11_000).contains(&h)),
            "{hits:?}"
        );
    }

    #[test]
    fn seeds_give_distinct_reproducible_streams() {
        let a: Vec<u64> = {
            let mut r = Xorshift64Star::new(3);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let b: Vec<u64> = {
            let mut r = Xorshift64Star::new(3);
            (0..8).map(|_| r.next_u64()).collect()
        };
        let c: Vec<u64> = {
            let mut r = Xorshift64Star::new(4);
            (0..8).map(|_| r.next_u64()).collect()
        };
        assert_eq!(a, b);
        assert_ne!(a, c);
    }
}
