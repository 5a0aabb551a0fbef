//! Key popularity: YCSB's Zipfian generator and a key chooser over a distribution.

use crate::rng::{splitmix64, RandomSource};

/// Key popularity distribution.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Distribution {
    /// Every key equally likely.
    Uniform,
    /// YCSB's Zipfian with skew `theta` (0.99 in the paper), scrambled so that the
    /// hot keys are spread over the key space as YCSB does.
    Zipf(f64),
    /// YCSB's "latest" (workload D): Zipfian over recency with skew `theta`, the
    /// most recently inserted key hottest. Keys are inserted in index order (the
    /// load phase sweeps `0..keys`), so rank `r` is key `keys - 1 - r`, unscrambled.
    Latest(f64),
}

/// YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record
/// synthetic databases"), with `zeta(n, theta)` computed once at start-up (O(n)).
///
/// A draw maps one uniform `u` in [0, 1) to a rank by a `powf`. The map is monotone,
/// so where a whole slice of [0, 1) (1/65536 of it, picked by the top bits of the
/// draw) maps to one rank, a table made at start-up gives that rank without the
/// `powf`: the head ranks' slices, about 60 % of the draws at 1 M keys and skew 0.99.
/// The ranks are the formula's, draw for draw.
#[derive(Clone, Debug)]
pub struct Zipf {
    n: u64,
    alpha: f64,
    zetan: f64,
    eta: f64,
    /// `1 + 0.5^theta`: where rank 1's slice of `u * zetan` ends.
    rank1_end: f64,
    /// Per slice of [0, 1): its rank, or [`UNRESOLVED`] if it spans several.
    slices: Vec<u16>,
}

/// Slices of [0, 1) in [`Zipf`]'s table: 2^SLICE_BITS (128 KiB of `u16`).
const SLICE_BITS: u32 = 16;
/// A slice whose draws map to more than one rank (or a rank past `u16`).
const UNRESOLVED: u16 = u16::MAX;
/// Bits of a draw below the slice index: a draw is 53 bits.
const SLICE_SHIFT: u32 = 53 - SLICE_BITS;
/// 2^-53: a 53-bit draw to [0, 1), as [`RandomSource::next_f64`] does.
const DRAW_SCALE: f64 = 1.0 / (1u64 << 53) as f64;

impl Zipf {
    /// A generator over `0..n` with skew `theta` in (0, 1).
    ///
    /// # Panics
    /// When `n == 0` or `theta` is outside (0, 1).
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
        let mut z = Zipf {
            n,
            alpha,
            zetan,
            eta,
            rank1_end: 1.0 + 0.5f64.powf(theta),
            slices: Vec::new(),
        };
        z.slices = (0..1u64 << SLICE_BITS)
            .map(|j| {
                // The slice's first and last 53-bit draws: one rank at both ends is
                // one rank throughout, the map being monotone.
                let first = z.rank((j << SLICE_SHIFT) as f64 * DRAW_SCALE);
                let last = z.rank((((j + 1) << SLICE_SHIFT) - 1) as f64 * DRAW_SCALE);
                match u16::try_from(first) {
                    Ok(r) if first == last && r != UNRESOLVED => r,
                    _ => UNRESOLVED,
                }
            })
            .collect();
        z
    }

    /// The rank of uniform draw `u` in [0, 1) (0 is the most popular).
    #[inline]
    fn rank(&self, u: f64) -> u64 {
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < self.rank1_end {
            return 1.min(self.n - 1);
        }
        let r = (self.n as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64;
        r.min(self.n - 1)
    }

    /// The number of ranks, `n`.
    pub fn n(&self) -> u64 {
        self.n
    }

    /// The next rank in `0..n` (0 is the most popular), from one
    /// [`RandomSource::next_f64`] draw.
    #[inline]
    pub fn next<R: RandomSource>(&self, rng: &mut R) -> u64 {
        // The same 53 bits and scale as `RandomSource::next_f64`.
        let bits = rng.next_u64() >> 11;
        match self.slices[(bits >> SLICE_SHIFT) as usize] {
            UNRESOLVED => self.rank(bits as f64 * DRAW_SCALE),
            r => u64::from(r),
        }
    }
}

/// Chooses key indices in `0..keys` according to a [`Distribution`].
#[derive(Clone, Debug)]
pub struct KeyChooser {
    keys: u64,
    zipf: Option<Zipf>,
    /// Ranks count back from the last key ([`Distribution::Latest`]).
    latest: bool,
}

impl KeyChooser {
    /// A chooser over `keys` (> 0) keys.
    pub fn new(keys: u64, dist: Distribution) -> KeyChooser {
        let zipf = match dist {
            Distribution::Uniform => None,
            Distribution::Zipf(theta) | Distribution::Latest(theta) => Some(Zipf::new(keys, theta)),
        };
        let latest = matches!(dist, Distribution::Latest(_));
        KeyChooser { keys, zipf, latest }
    }

    /// The next key index: one [`RandomSource::below`] draw (uniform), one Zipf
    /// rank scrambled by [`splitmix64`], or (latest) one Zipf rank counted back from
    /// the last key.
    #[inline]
    pub fn next<R: RandomSource>(&self, rng: &mut R) -> u64 {
        match &self.zipf {
            None => rng.below(self.keys),
            Some(z) if self.latest => self.keys - 1 - z.next(rng),
            // Scramble the rank (as YCSB's ScrambledZipfian) so hot keys are not
            // neighbours; the map is a permutation only up to collisions, which YCSB
            // accepts too.
            Some(z) => splitmix64(z.next(rng)) % self.keys,
        }
    }

    /// Fills `out` with the next `out.len()` key indices: the same sequence as as many
    /// [`KeyChooser::next`] calls, with the distribution's branch taken once per call
    /// instead of once per key (a generator draws a packet's keys in one go).
    #[inline]
    pub fn fill<R: RandomSource>(&self, rng: &mut R, out: &mut [u64]) {
        match &self.zipf {
            None => out.iter_mut().for_each(|k| *k = rng.below(self.keys)),
            Some(z) if self.latest => out
                .iter_mut()
                .for_each(|k| *k = self.keys - 1 - z.next(rng)),
            Some(z) => out
                .iter_mut()
                .for_each(|k| *k = splitmix64(z.next(rng)) % self.keys),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::{SplitMix64, Xorshift64Star};

    #[test]
    fn the_slice_table_gives_the_formula_s_ranks() {
        for (n, theta) in [(1_000_000, 0.99), (1000, 0.5), (3, 0.9), (1, 0.99)] {
            let z = Zipf::new(n, theta);
            let (mut a, mut b) = (Xorshift64Star::new(9), Xorshift64Star::new(9));
            let mut hits = 0;
            for _ in 0..200_000 {
                let bits = b.next_u64() >> 11;
                hits += usize::from(z.slices[(bits >> SLICE_SHIFT) as usize] != UNRESOLVED);
                assert_eq!(z.next(&mut a), z.rank(bits as f64 * DRAW_SCALE), "n {n}");
            }
            if n == 1_000_000 {
                assert!(hits > 100_000, "{hits} of 200000 draws from the table");
            }
        }
        // Every slice boundary, from both sides.
        let z = Zipf::new(100_000, 0.99);
        for j in 1..1u64 << SLICE_BITS {
            let at = j << SLICE_SHIFT;
            for bits in [at - 1, at] {
                let r = z.slices[(bits >> SLICE_SHIFT) as usize];
                if r != UNRESOLVED {
                    assert_eq!(u64::from(r), z.rank(bits as f64 * DRAW_SCALE));
                }
            }
        }
    }

    #[test]
    fn fill_draws_the_same_keys_as_next() {
        for dist in [
            Distribution::Uniform,
            Distribution::Zipf(0.99),
            Distribution::Latest(0.99),
        ] {
            let c = KeyChooser::new(1000, dist);
            let (mut a, mut b) = (Xorshift64Star::new(5), Xorshift64Star::new(5));
            let one: Vec<u64> = (0..300).map(|_| c.next(&mut a)).collect();
            let mut bulk = vec![0u64; 300];
            c.fill(&mut b, &mut bulk[..17]);
            c.fill(&mut b, &mut bulk[17..]);
            assert_eq!(one, bulk, "{dist:?}");
        }
    }

    #[test]
    fn zipf_is_skewed_and_in_range() {
        let n = 10_000;
        let z = Zipf::new(n, 0.99);
        let mut rng = Xorshift64Star::new(7);
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
    fn zipf_golden() {
        // pktgen's sequence (xorshift64*) and engine_bench's (SplitMix64 stream):
        // computed with the copies this module replaced.
        let z = Zipf::new(10_000, 0.99);
        let mut r = Xorshift64Star::new(7);
        let got: Vec<u64> = (0..12).map(|_| z.next(&mut r)).collect();
        assert_eq!(got, [0, 6, 16, 126, 337, 209, 31, 250, 516, 20, 8, 3]);
        let z = Zipf::new(100_000, 0.99);
        let mut s = SplitMix64::new(2024);
        let got: Vec<u64> = (0..12).map(|_| z.next(&mut s)).collect();
        assert_eq!(
            got,
            [1129, 1, 20, 1, 13686, 478, 2, 818, 3, 101, 156, 14766]
        );
    }

    #[test]
    fn zipf_with_one_or_two_ranks() {
        let mut r = Xorshift64Star::new(1);
        let one = Zipf::new(1, 0.5);
        assert!((0..1000).all(|_| one.next(&mut r) == 0));
        let two = Zipf::new(2, 0.99);
        assert_eq!(two.n(), 2);
        let ones = (0..10_000).filter(|_| two.next(&mut r) == 1).count();
        // P(rank 1) = 2^-0.99 / (1 + 2^-0.99), about 0.332.
        assert!((3_000..3_650).contains(&ones), "{ones}");
    }

    #[test]
    #[should_panic(expected = "zipf needs")]
    fn zipf_rejects_theta_one() {
        Zipf::new(10, 1.0);
    }

    #[test]
    fn uniform_covers_keys() {
        let c = KeyChooser::new(16, Distribution::Uniform);
        let mut rng = Xorshift64Star::new(1);
        let mut seen = [false; 16];
        for _ in 0..1000 {
            seen[c.next(&mut rng) as usize] = true;
        }
        assert!(seen.iter().all(|&s| s));
    }

    #[test]
    fn chooser_golden() {
        let c = KeyChooser::new(1000, Distribution::Zipf(0.99));
        let mut r = Xorshift64Star::new(3);
        let got: Vec<u64> = (0..10).map(|_| c.next(&mut r)).collect();
        assert_eq!(got, [129, 978, 246, 941, 465, 592, 352, 370, 465, 346]);
        let c = KeyChooser::new(1000, Distribution::Uniform);
        let mut r = Xorshift64Star::new(3);
        let got: Vec<u64> = (0..10).map(|_| c.next(&mut r)).collect();
        assert_eq!(got, [876, 282, 702, 455, 184, 352, 675, 476, 166, 503]);
    }

    #[test]
    fn latest_makes_the_last_keys_hottest() {
        let n = 10_000;
        let c = KeyChooser::new(n, Distribution::Latest(0.99));
        let z = Zipf::new(n, 0.99);
        let (mut a, mut b) = (Xorshift64Star::new(9), Xorshift64Star::new(9));
        let mut hits = vec![0u32; n as usize];
        for _ in 0..100_000 {
            let k = c.next(&mut a);
            // The same draw as the plain Zipf rank, counted back from the last key.
            assert_eq!(k, n - 1 - z.next(&mut b));
            hits[k as usize] += 1;
        }
        let hottest = (0..n as usize).max_by_key(|&i| hits[i]).unwrap();
        assert_eq!(hottest as u64, n - 1);
        assert!(hits[n as usize - 1] > 30 * hits[n as usize - 101].max(1));
        let one = KeyChooser::new(1, Distribution::Latest(0.5));
        assert!((0..100).all(|_| one.next(&mut a) == 0));
    }

    #[test]
    fn scrambled_zipf_spreads_hot_keys() {
        // The hottest ranks must not land on neighbouring key indices.
        let c = KeyChooser::new(1_000_000, Distribution::Zipf(0.99));
        let mut r = Xorshift64Star::new(2);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..50_000 {
            *counts.entry(c.next(&mut r)).or_insert(0u32) += 1;
        }
        let mut hot: Vec<(u64, u32)> = counts.into_iter().collect();
        hot.sort_by_key(|&(k, n)| (std::cmp::Reverse(n), k));
        let top: Vec<u64> = hot.iter().take(4).map(|h| h.0).collect();
        assert!(top.windows(2).all(|w| w[0].abs_diff(w[1]) > 1), "{top:?}");
    }
}
