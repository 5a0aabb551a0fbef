//! Seeded, deterministic fault injection for a packet stream: loss, duplication and
//! reordering.
//!
//! [`Faults::decide`] gives each packet a [`Fate`]: one uniform draw compared with
//! cumulative thresholds, so the three faults are mutually exclusive per packet and
//! each happens with exactly its configured probability:
//!
//! ```text
//!  draw: 0 ......... loss ......... loss+dup ......... loss+dup+reorder ......... 1
//!        |   Drop     |  Duplicate   |        Delay          |        Deliver        |
//! ```
//!
//! A delayed packet is the holder's business: [`Holdback`] is a small fixed-capacity
//! helper that keeps delayed items and releases each after k later packets have
//! passed (k in 1..=4, drawn with the decision: [`Faults::delay_span`]), or on
//! [`Holdback::flush`]. Nothing allocates after construction.
//!
//! The same [`FaultConfig`] (seed included) gives the same sequence of fates and
//! spans. A zero config never draws and always delivers.

use crate::rng::{RandomSource, Xorshift64Star};
use std::fmt;

/// What to do with one packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Fate {
    /// Send it as usual.
    Deliver,
    /// Do not send it (free it).
    Drop,
    /// Send it twice, back to back.
    Duplicate,
    /// Hold it back and send it after the next few packets ([`Faults::delay_span`]
    /// of them; see [`Holdback`]).
    Delay,
}

/// Fault probabilities and the seed of their draws.
///
/// The probabilities are per packet and mutually exclusive: each must be in [0, 1]
/// and their sum at most 1 (checked by [`FaultConfig::validate`]).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FaultConfig {
    /// Probability that a packet is dropped.
    pub loss: f64,
    /// Probability that a packet is sent twice.
    pub dup: f64,
    /// Probability that a packet is held back behind later ones.
    pub reorder: f64,
    /// Seed of the draws.
    pub seed: u64,
}

/// Why a [`FaultConfig`] was refused.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultConfigError(String);

impl fmt::Display for FaultConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FaultConfigError {}

/// 2^53: the resolution of a draw (as in [`crate::Mix`]).
const DRAW_ONE: f64 = (1u64 << 53) as f64;

impl FaultConfig {
    /// Checks that every probability is a number in [0, 1] and that they sum to at
    /// most 1.
    pub fn validate(&self) -> Result<(), FaultConfigError> {
        for (name, p) in [
            ("loss", self.loss),
            ("dup", self.dup),
            ("reorder", self.reorder),
        ] {
            if !(0.0..=1.0).contains(&p) {
                return Err(FaultConfigError(format!(
                    "fault probability {name} = {p} must be in [0, 1]"
                )));
            }
        }
        let sum = self.loss + self.dup + self.reorder;
        if sum > 1.0 + 1e-9 {
            return Err(FaultConfigError(format!(
                "fault probabilities loss {} + dup {} + reorder {} = {sum} must sum to at \
                 most 1 (a packet has one fate)",
                self.loss, self.dup, self.reorder
            )));
        }
        Ok(())
    }

    /// Whether no fault is configured (every packet is delivered).
    pub fn is_zero(&self) -> bool {
        self.loss == 0.0 && self.dup == 0.0 && self.reorder == 0.0
    }
}

/// How many packets met each fate so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// [`Fate::Deliver`] decisions.
    pub delivered: u64,
    /// [`Fate::Drop`] decisions.
    pub dropped: u64,
    /// [`Fate::Duplicate`] decisions.
    pub duplicated: u64,
    /// [`Fate::Delay`] decisions.
    pub delayed: u64,
}

impl FaultCounts {
    /// All decisions.
    pub fn total(&self) -> u64 {
        self.delivered + self.dropped + self.duplicated + self.delayed
    }
}

/// The fault plan of one packet stream: a seeded generator and the thresholds.
#[derive(Clone, Debug)]
pub struct Faults {
    cfg: FaultConfig,
    rng: Xorshift64Star,
    /// Cumulative thresholds (× 2^53) of Drop, Duplicate, Delay.
    cuts: [u64; 3],
    /// False for a zero config: `decide` does not draw.
    active: bool,
    /// The span drawn with the last [`Fate::Delay`].
    span: u32,
    counts: FaultCounts,
}

impl Faults {
    /// A plan from a config (validated).
    pub fn new(cfg: FaultConfig) -> Result<Faults, FaultConfigError> {
        cfg.validate()?;
        let cut = |p: f64| (p.min(1.0) * DRAW_ONE) as u64;
        let a = cfg.loss;
        let b = a + cfg.dup;
        let c = b + cfg.reorder;
        Ok(Faults {
            cfg,
            rng: Xorshift64Star::new(cfg.seed),
            cuts: [cut(a), cut(b), cut(c)],
            active: !cfg.is_zero(),
            span: 1,
            counts: FaultCounts::default(),
        })
    }

    /// The config this plan was made from.
    pub fn config(&self) -> &FaultConfig {
        &self.cfg
    }

    /// Whether any fault can happen (false for a zero config).
    #[inline]
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The fate of the next packet. For [`Fate::Delay`], [`Faults::delay_span`] then
    /// tells how many later packets it waits for.
    ///
    /// One 64-bit draw per call (none for a zero config): its top 53 bits pick the
    /// fate, its two low bits the delay span.
    #[inline]
    pub fn decide(&mut self) -> Fate {
        if !self.active {
            self.counts.delivered += 1;
            return Fate::Deliver;
        }
        let x = self.rng.next_u64();
        let u = x >> 11;
        if u < self.cuts[0] {
            self.counts.dropped += 1;
            Fate::Drop
        } else if u < self.cuts[1] {
            self.counts.duplicated += 1;
            Fate::Duplicate
        } else if u < self.cuts[2] {
            self.counts.delayed += 1;
            self.span = 1 + (x & 3) as u32;
            Fate::Delay
        } else {
            self.counts.delivered += 1;
            Fate::Deliver
        }
    }

    /// How many later packets the last delayed packet waits for: 1..=4, drawn
    /// uniformly with the [`Fate::Delay`] decision (1 before any delay).
    #[inline]
    pub fn delay_span(&self) -> u32 {
        self.span
    }

    /// The decisions so far, per fate.
    pub fn counts(&self) -> FaultCounts {
        self.counts
    }
}

/// Delayed items waiting for later packets to pass: up to `N`, no allocation.
///
/// [`Holdback::hold`] keeps an item for `k` later packets; the holder calls
/// [`Holdback::passed`] after each packet it sends, which releases (in the order they
/// were held) the items whose `k` packets have now gone by; [`Holdback::flush`]
/// releases everything (a timer, or the end of the stream, so nothing is held
/// forever).
pub struct Holdback<T, const N: usize> {
    /// Held items in the order they were held (`0..len` are `Some`).
    items: [Option<T>; N],
    /// Packets each item still waits for.
    left: [u32; N],
    len: usize,
}

impl<T, const N: usize> Default for Holdback<T, N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T, const N: usize> fmt::Debug for Holdback<T, N> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Holdback")
            .field("len", &self.len)
            .field("left", &&self.left[..self.len])
            .finish()
    }
}

impl<T, const N: usize> Holdback<T, N> {
    /// An empty holdback.
    pub const fn new() -> Self {
        Holdback {
            items: [const { None }; N],
            left: [0; N],
            len: 0,
        }
    }

    /// Items held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing is held.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Whether no further item can be held.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// Capacity `N`.
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Holds `item` until `k` later packets have passed (`k` is clamped to at least
    /// 1); gives it back when the holdback is full (send it now instead).
    #[inline]
    pub fn hold(&mut self, item: T, k: u32) -> Result<(), T> {
        if self.len == N {
            return Err(item);
        }
        self.items[self.len] = Some(item);
        self.left[self.len] = k.max(1);
        self.len += 1;
        Ok(())
    }

    /// Records that one later packet has passed and hands `release` every item that
    /// has now waited for its packets, in the order they were held.
    #[inline]
    pub fn passed(&mut self, mut release: impl FnMut(T)) {
        if self.len == 0 {
            return;
        }
        let mut w = 0;
        for r in 0..self.len {
            self.left[r] -= 1;
            if self.left[r] == 0 {
                if let Some(item) = self.items[r].take() {
                    release(item);
                }
            } else {
                if w != r {
                    self.items[w] = self.items[r].take();
                    self.left[w] = self.left[r];
                }
                w += 1;
            }
        }
        self.len = w;
    }

    /// Hands `release` every held item, in the order they were held.
    pub fn flush(&mut self, mut release: impl FnMut(T)) {
        let n = self.len;
        self.len = 0;
        for slot in &mut self.items[..n] {
            if let Some(item) = slot.take() {
                release(item);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(loss: f64, dup: f64, reorder: f64, seed: u64) -> FaultConfig {
        FaultConfig {
            loss,
            dup,
            reorder,
            seed,
        }
    }

    #[test]
    fn rates_converge() {
        const DRAWS: u64 = 100_000;
        for (loss, dup, reorder) in [(0.1, 0.05, 0.2), (0.01, 0.0, 0.5), (0.3, 0.3, 0.4)] {
            let mut f = Faults::new(cfg(loss, dup, reorder, 7)).unwrap();
            let mut spans = [0u64; 5];
            for _ in 0..DRAWS {
                if f.decide() == Fate::Delay {
                    spans[f.delay_span() as usize] += 1;
                }
            }
            let c = f.counts();
            assert_eq!(c.total(), DRAWS);
            let rate = |n: u64| n as f64 / DRAWS as f64;
            // Binomial sd at p = 0.5 and n = 1e5 is 0.0016: 0.008 is 5 sd.
            let tol = 0.008;
            assert!((rate(c.dropped) - loss).abs() < tol, "{c:?}");
            assert!((rate(c.duplicated) - dup).abs() < tol, "{c:?}");
            assert!((rate(c.delayed) - reorder).abs() < tol, "{c:?}");
            let deliver = 1.0 - loss - dup - reorder;
            assert!((rate(c.delivered) - deliver).abs() < tol, "{c:?}");
            // Spans 1..=4, roughly uniform.
            assert_eq!(spans[0], 0);
            for &s in &spans[1..] {
                let share = s as f64 / c.delayed as f64;
                assert!((share - 0.25).abs() < 0.03, "{spans:?}");
            }
        }
    }

    #[test]
    fn same_seed_same_sequence() {
        let run = |seed| {
            let mut f = Faults::new(cfg(0.1, 0.1, 0.1, seed)).unwrap();
            (0..1000)
                .map(|_| {
                    let fate = f.decide();
                    (fate, (fate == Fate::Delay).then(|| f.delay_span()))
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(42), run(42));
        assert_ne!(run(42), run(43));
    }

    #[test]
    fn zero_config_always_delivers() {
        let mut f = Faults::new(FaultConfig {
            seed: 99,
            ..FaultConfig::default()
        })
        .unwrap();
        assert!(!f.is_active());
        for _ in 0..10_000 {
            assert_eq!(f.decide(), Fate::Deliver);
        }
        assert_eq!(f.counts().delivered, 10_000);
        assert_eq!(f.counts().total(), 10_000);
    }

    #[test]
    fn certain_faults() {
        let mut f = Faults::new(cfg(1.0, 0.0, 0.0, 1)).unwrap();
        assert!((0..1000).all(|_| f.decide() == Fate::Drop));
        let mut f = Faults::new(cfg(0.0, 1.0, 0.0, 1)).unwrap();
        assert!((0..1000).all(|_| f.decide() == Fate::Duplicate));
        let mut f = Faults::new(cfg(0.0, 0.0, 1.0, 1)).unwrap();
        assert!((0..1000).all(|_| f.decide() == Fate::Delay));
    }

    #[test]
    fn validation() {
        assert!(cfg(0.0, 0.0, 0.0, 0).validate().is_ok());
        assert!(cfg(0.3, 0.3, 0.4, 0).validate().is_ok());
        for bad in [
            cfg(-0.1, 0.0, 0.0, 0),
            cfg(0.0, 1.5, 0.0, 0),
            cfg(0.0, 0.0, f64::NAN, 0),
            cfg(0.5, 0.5, 0.1, 0),
        ] {
            let e = Faults::new(bad).unwrap_err().to_string();
            assert!(e.contains("must"), "{e}");
        }
        assert!(cfg(0.0, 0.0, f64::NAN, 0)
            .validate()
            .unwrap_err()
            .to_string()
            .contains("reorder"));
    }

    #[test]
    fn holdback_releases_after_k_packets() {
        let mut h = Holdback::<u32, 4>::new();
        let mut out = Vec::new();
        h.hold(100, 2).unwrap();
        h.hold(200, 1).unwrap();
        // Packet 1 passes: 200 (k = 1) is released behind it.
        out.push(1);
        h.passed(|x| out.push(x));
        // Packet 2 passes: 100 (k = 2) follows.
        out.push(2);
        h.passed(|x| out.push(x));
        assert_eq!(out, [1, 200, 2, 100]);
        assert!(h.is_empty());
        // Order of holding is kept among items released together.
        h.hold(7, 3).unwrap();
        h.hold(8, 3).unwrap();
        h.hold(9, 1).unwrap();
        let mut out = Vec::new();
        for p in 0..3 {
            out.push(p);
            h.passed(|x| out.push(x));
        }
        assert_eq!(out, [0, 9, 1, 2, 7, 8]);
    }

    #[test]
    fn holdback_full_and_flush() {
        let mut h = Holdback::<String, 2>::default();
        assert_eq!(h.capacity(), 2);
        h.hold("a".into(), 4).unwrap();
        h.hold("b".into(), 0).unwrap(); // clamped to 1
        assert!(h.is_full());
        assert_eq!(h.hold("c".into(), 1), Err("c".to_string()));
        let mut out = Vec::new();
        h.passed(|x| out.push(x));
        assert_eq!(out, ["b"]);
        assert_eq!(h.len(), 1);
        h.flush(|x| out.push(x));
        assert_eq!(out, ["b", "a"]);
        assert!(h.is_empty());
        h.flush(|_| panic!("empty"));
        h.passed(|_| panic!("empty"));
    }

    #[test]
    fn holdback_with_faults_loses_nothing() {
        // Every packet either is dropped or comes out exactly as often as its fate says.
        let mut f = Faults::new(cfg(0.1, 0.1, 0.3, 5)).unwrap();
        let mut h = Holdback::<u32, 8>::new();
        let mut out = Vec::new();
        for p in 0..10_000u32 {
            match f.decide() {
                Fate::Deliver => out.push(p),
                Fate::Drop => continue,
                Fate::Duplicate => {
                    out.push(p);
                    out.push(p);
                }
                Fate::Delay => match h.hold(p, f.delay_span()) {
                    Ok(()) => continue,
                    Err(p) => out.push(p),
                },
            }
            h.passed(|x| out.push(x));
        }
        h.flush(|x| out.push(x));
        let c = f.counts();
        assert_eq!(out.len() as u64, c.delivered + 2 * c.duplicated + c.delayed);
        // Reordered, not sorted.
        assert!(out.windows(2).any(|w| w[0] > w[1]));
    }
}
