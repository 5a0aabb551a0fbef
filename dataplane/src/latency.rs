//! Server-side service latency: the time from the rx burst that brought a request
//! packet to the moment its response was handed to the NIC, sampled for one of every
//! `sample_every` packets into a per-worker histogram.
//!
//! The histogram has fixed log-linear buckets: one up to 256 ns, then four per power
//! of two up to 2^28 ns (268 ms), then one overflow bucket. Bucket `i` counts samples
//! `v` with `LE_NS[i-1] < v <= LE_NS[i]`, Prometheus' `le` semantics, so an exporter
//! turns the counts into cumulative buckets without loss.
//!
//! Cost on the worker: [`Sampler::on_rx`] is a subtraction and a branch per rx burst;
//! a burst that holds a sampled packet reads the TSC once at rx and once after its
//! responses were handed to the NIC, then bumps three counters. Nothing allocates.

use crate::stats::Counter;

/// Smallest bucket bound (ns): everything at or below it shares the first bucket.
const FIRST_NS: u64 = 256;
/// log2 of [`FIRST_NS`].
const FIRST_OCTAVE: u32 = 8;
/// Octaves covered with four sub-buckets each: up to 2^(8+20) = 2^28 ns.
const OCTAVES: usize = 20;
/// Number of finite bucket bounds.
pub const BOUNDS: usize = 1 + 4 * OCTAVES;

/// Upper bounds (inclusive, ns) of the finite buckets, increasing; the last bucket
/// (index [`BOUNDS`]) holds everything above `LE_NS[BOUNDS - 1]`.
pub const LE_NS: [u64; BOUNDS] = le_ns();

const fn le_ns() -> [u64; BOUNDS] {
    let mut le = [0u64; BOUNDS];
    le[0] = FIRST_NS;
    let mut o = 0;
    while o < OCTAVES {
        let base = 1u64 << (FIRST_OCTAVE as usize + o);
        let mut s = 1;
        while s <= 4 {
            le[1 + o * 4 + s - 1] = base + s as u64 * (base / 4);
            s += 1;
        }
        o += 1;
    }
    le
}

/// The bucket of a latency of `ns` nanoseconds (index into the counts, the last
/// being the overflow bucket).
#[inline]
pub fn bucket_of(ns: u64) -> usize {
    if ns <= FIRST_NS {
        return 0;
    }
    // v - 1 lies in [2^o, 2^(o+1)) with o >= 8; its two bits below the top pick the
    // quarter of the octave, so the bucket is (lo, hi] with hi = 2^o * (1 + (q+1)/4).
    let v = ns - 1;
    let o = 63 - v.leading_zeros();
    let octave = (o - FIRST_OCTAVE) as usize;
    if octave >= OCTAVES {
        return BOUNDS;
    }
    let quarter = ((v >> (o - 2)) & 3) as usize;
    1 + octave * 4 + quarter
}

/// One worker's latency histogram (single writer: the worker; readers: telemetry).
#[derive(Debug)]
pub struct LatencyHist {
    /// The worker's sampling period (set once at start; 0: sampling off).
    pub sample_every: Counter,
    /// Sum of the sampled latencies (ns).
    pub sum_ns: Counter,
    /// Samples per bucket ([`BOUNDS`] finite buckets, then the overflow bucket).
    pub counts: [Counter; BOUNDS + 1],
}

impl Default for LatencyHist {
    fn default() -> Self {
        LatencyHist {
            sample_every: Counter::default(),
            sum_ns: Counter::default(),
            counts: std::array::from_fn(|_| Counter::default()),
        }
    }
}

impl LatencyHist {
    /// Records `k` samples of `ns` nanoseconds each.
    #[inline]
    pub fn record(&self, ns: u64, k: u64) {
        self.counts[bucket_of(ns)].add(k);
        self.sum_ns.add(ns.saturating_mul(k));
    }

    /// Samples recorded (the sum of the counts).
    pub fn sampled(&self) -> u64 {
        self.counts.iter().map(Counter::get).sum()
    }

    /// The counts as plain numbers.
    pub fn counts(&self) -> [u64; BOUNDS + 1] {
        std::array::from_fn(|i| self.counts[i].get())
    }

    /// The smallest bucket bound at or below which at least `q` (0..=1) of the
    /// samples lie (`u64::MAX` for the overflow bucket), or `None` without samples.
    pub fn quantile_bound(counts: &[u64], q: f64) -> Option<u64> {
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, c) in counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(LE_NS.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

/// The worker's sampling state: which rx bursts hold a sampled packet, and the rx
/// time of the one being measured.
#[derive(Debug)]
pub struct Sampler {
    /// Sample one of this many packets (0: off).
    every: u64,
    /// Packets until the next sample.
    countdown: u64,
    /// TSC of the rx burst being measured and the samples it stands for.
    pending: Option<(u64, u64)>,
    /// ns per TSC tick as a 32.32 fixed-point number.
    ns_per_tick_q32: u64,
}

impl Sampler {
    /// A sampler of one in `every` packets (0: never) for a TSC of `hz` ticks/s.
    pub fn new(every: u32, hz: u64) -> Sampler {
        Sampler {
            every: every as u64,
            countdown: every as u64,
            pending: None,
            ns_per_tick_q32: ((1_000_000_000u128 << 32) / hz.max(1) as u128) as u64,
        }
    }

    /// Counts `n` packets of an rx burst that this worker serves itself. When the
    /// burst holds sampled packets (and none is being measured) it reads the clock
    /// with `now` and starts a measurement standing for each of them.
    #[inline]
    pub fn on_rx(&mut self, n: usize, now: impl FnOnce() -> u64) {
        if self.every == 0 || n == 0 {
            return;
        }
        let n = n as u64;
        if n < self.countdown {
            self.countdown -= n;
            return;
        }
        // Sampling points crossed by this burst: the one due, then one per `every`.
        let crossed = 1 + (n - self.countdown) / self.every;
        self.countdown = self.every - (n - self.countdown) % self.every;
        if self.pending.is_none() {
            self.pending = Some((now(), crossed));
        }
    }

    /// Whether a measurement waits for its responses to reach the NIC.
    #[inline]
    pub fn pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Ends the measurement: every response queued so far was handed to the NIC at
    /// TSC `now`.
    #[inline]
    pub fn on_tx_done(&mut self, now: u64, hist: &LatencyHist) {
        if let Some((rx, k)) = self.pending.take() {
            let ticks = now.wrapping_sub(rx) as u128;
            let ns = ((ticks * self.ns_per_tick_q32 as u128) >> 32) as u64;
            hist.record(ns, k);
        }
    }

    /// The sampling period.
    pub fn every(&self) -> u32 {
        self.every as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_are_log_linear() {
        assert_eq!(&LE_NS[..6], &[256, 320, 384, 448, 512, 640]);
        assert_eq!(LE_NS[BOUNDS - 1], 1 << 28);
        assert!(LE_NS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn bucket_of_matches_the_bounds_exactly() {
        // Every bound and its neighbours land where `le` semantics say.
        for (i, &le) in LE_NS.iter().enumerate() {
            assert_eq!(bucket_of(le), i, "v = le[{i}]");
            assert_eq!(bucket_of(le + 1), i + 1, "v = le[{i}] + 1");
            if i > 0 {
                assert_eq!(bucket_of(LE_NS[i - 1] + 1), i);
            }
        }
        assert_eq!(bucket_of(0), 0);
        assert_eq!(bucket_of(u64::MAX), BOUNDS);
    }

    #[test]
    fn brute_force_agrees() {
        let slow = |v: u64| LE_NS.iter().position(|&le| v <= le).unwrap_or(BOUNDS);
        let mut v = 0u64;
        while v < (1 << 29) {
            assert_eq!(bucket_of(v), slow(v), "v = {v}");
            v = v * 17 / 16 + 1;
        }
    }

    #[test]
    fn sampler_counts_one_in_every() {
        let hist = LatencyHist::default();
        let mut s = Sampler::new(64, 1_000_000_000);
        let mut packets = 0u64;
        let mut t = 0u64;
        for burst in [1usize, 32, 7, 64, 200, 3, 31, 129]
            .iter()
            .cycle()
            .take(400)
        {
            packets += *burst as u64;
            s.on_rx(*burst, || t);
            t += 1000;
            if s.pending() {
                s.on_tx_done(t, &hist);
            }
        }
        assert_eq!(hist.sampled(), packets / 64);
        assert_eq!(hist.counts().iter().sum::<u64>(), hist.sampled());
        // Every sample measured 1000 ticks = 1000 ns at 1 GHz.
        assert_eq!(hist.sum_ns.get(), 1000 * hist.sampled());
        assert_eq!(hist.counts()[bucket_of(1000)], hist.sampled());
    }

    #[test]
    fn sampler_off_and_tick_conversion() {
        let hist = LatencyHist::default();
        let mut s = Sampler::new(0, 2_000_000_000);
        s.on_rx(1000, || {
            panic!("the clock is not read when sampling is off")
        });
        assert!(!s.pending());
        let mut s = Sampler::new(1, 2_000_000_000);
        s.on_rx(1, || 10);
        s.on_tx_done(10 + 2_000_000, &hist); // 2 M ticks at 2 GHz = 1 ms
        assert_eq!(hist.sum_ns.get(), 1_000_000);
    }

    #[test]
    fn quantiles() {
        let mut c = [0u64; BOUNDS + 1];
        assert_eq!(LatencyHist::quantile_bound(&c, 0.5), None);
        c[3] = 90;
        c[10] = 10;
        assert_eq!(LatencyHist::quantile_bound(&c, 0.5), Some(LE_NS[3]));
        assert_eq!(LatencyHist::quantile_bound(&c, 0.9), Some(LE_NS[3]));
        assert_eq!(LatencyHist::quantile_bound(&c, 0.91), Some(LE_NS[10]));
        c[BOUNDS] = 1000;
        assert_eq!(LatencyHist::quantile_bound(&c, 0.99), Some(u64::MAX));
    }
}
