//! A fault injector for a stream of frames: [`Faults`] decides each frame's fate and a
//! [`Holdback`] keeps the delayed ones, released after their span of later frames or
//! when the oldest has waited too long. Generic over the frame type, so the dataplane
//! (mbufs it transmits) and pktgen (mbufs it sends and receives) share it and the
//! tests run it on integers.

use crate::faults::{Fate, FaultConfig, FaultCounts, Faults, Holdback};

/// Fault injection state of one frame stream, holding back at most `N` frames.
pub struct Injector<T, const N: usize> {
    /// The seeded plan (and its per-fate counts).
    faults: Faults,
    /// Delayed frames, each released after its span of later frames.
    held: Holdback<T, N>,
    /// Time at which the holdback last went from empty to holding a frame: every
    /// frame held was held at or after it, so the timer may release a frame early,
    /// never late.
    held_since: u64,
    /// Duplicates not sent because no copy could be made.
    dup_failed: u64,
    /// Delays not done because the holdback was full (sent at once).
    hold_full: u64,
}

impl<T, const N: usize> Injector<T, N> {
    /// An injector drawing from `cfg`; `None` when it injects nothing (a zero or
    /// invalid config: callers validate flags up front).
    pub fn new(cfg: FaultConfig) -> Option<Injector<T, N>> {
        if cfg.is_zero() {
            return None;
        }
        let faults = Faults::new(cfg).ok()?;
        Some(Injector {
            faults,
            held: Holdback::new(),
            held_since: 0,
            dup_failed: 0,
            hold_full: 0,
        })
    }

    /// How many frames of each fate were drawn.
    pub fn counts(&self) -> FaultCounts {
        self.faults.counts()
    }

    /// Duplicates not sent because `copy` gave nothing.
    pub fn dup_failed(&self) -> u64 {
        self.dup_failed
    }

    /// Delays not done because the holdback was full.
    pub fn hold_full(&self) -> u64 {
        self.hold_full
    }

    /// Frames held back now.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Passes `item` on as its drawn fate says: to `out` (once, or twice with a copy
    /// made by `copy`), nowhere (dropped), or into the holdback (`now` gives the time
    /// if it is the first held). Each frame passed to `out` counts as one later frame
    /// for the held ones, which follow it to `out` when their span is over.
    #[inline]
    pub fn route(
        &mut self,
        item: T,
        now: impl FnOnce() -> u64,
        copy: impl FnOnce(&T) -> Option<T>,
        mut out: impl FnMut(T),
    ) {
        let passed = match self.faults.decide() {
            Fate::Deliver => {
                out(item);
                1
            }
            Fate::Drop => {
                drop(item);
                0
            }
            Fate::Duplicate => {
                let second = copy(&item);
                out(item);
                match second {
                    Some(c) => {
                        out(c);
                        2
                    }
                    None => {
                        self.dup_failed += 1;
                        1
                    }
                }
            }
            Fate::Delay => {
                let was_empty = self.held.is_empty();
                match self.held.hold(item, self.faults.delay_span()) {
                    Ok(()) => {
                        if was_empty {
                            self.held_since = now();
                        }
                        0
                    }
                    Err(item) => {
                        self.hold_full += 1;
                        out(item);
                        1
                    }
                }
            }
        };
        for _ in 0..passed {
            self.held.passed(&mut out);
        }
    }

    /// Passes every held frame to `out` when the oldest has waited `max_ticks`.
    #[inline]
    pub fn release_stale(&mut self, now: u64, max_ticks: u64, out: impl FnMut(T)) {
        if !self.held.is_empty() && now.wrapping_sub(self.held_since) >= max_ticks {
            self.held.flush(out);
        }
    }

    /// Passes every held frame to `out` (at exit).
    pub fn flush(&mut self, out: impl FnMut(T)) {
        self.held.flush(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOLD: usize = 16;

    fn injector(loss: f64, dup: f64, reorder: f64, seed: u64) -> Injector<u32, HOLD> {
        Injector::new(FaultConfig {
            loss,
            dup,
            reorder,
            seed,
        })
        .expect("faults configured")
    }

    /// Frames 0..n through `inj`, then a final flush: what went out, in order.
    fn run(inj: &mut Injector<u32, HOLD>, n: u32) -> Vec<u32> {
        let mut out = Vec::new();
        for f in 0..n {
            inj.route(f, || 0, |&f| Some(f), |f| out.push(f));
        }
        inj.flush(|f| out.push(f));
        out
    }

    #[test]
    fn no_faults_no_injector() {
        assert!(Injector::<u32, HOLD>::new(FaultConfig::default()).is_none());
    }

    #[test]
    fn fates_reach_the_output() {
        let mut inj = injector(0.1, 0.1, 0.2, 3);
        let out = run(&mut inj, 10_000);
        let c = inj.counts();
        assert_eq!(c.total(), 10_000);
        assert!(c.dropped > 0 && c.duplicated > 0 && c.delayed > 0);
        assert_eq!(inj.dup_failed(), 0);
        assert_eq!(out.len() as u64, c.delivered + 2 * c.duplicated + c.delayed);
        // Every frame that was not dropped comes out, reordered by at most a few places
        // (a delay is at most 4 frames, a full holdback sends at once).
        let mut sorted = out.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len() as u64, 10_000 - c.dropped);
        assert!(out.windows(2).any(|w| w[0] > w[1]));
    }

    #[test]
    fn failed_copy_sends_the_original_once() {
        let mut inj = injector(0.0, 1.0, 0.0, 3);
        let mut out = Vec::new();
        for f in 0..10 {
            inj.route(f, || 0, |_| None, |f| out.push(f));
        }
        assert_eq!(out, (0..10).collect::<Vec<_>>());
        assert_eq!(inj.dup_failed(), 10);
    }

    #[test]
    fn held_frames_leave_on_the_timer() {
        let mut inj = injector(0.0, 0.0, 1.0, 3);
        let mut out = Vec::new();
        inj.route(7, || 100, |&f| Some(f), |f| out.push(f));
        inj.route(8, || 999, |&f| Some(f), |f| out.push(f));
        assert!(out.is_empty());
        assert_eq!(inj.held_since, 100);
        inj.release_stale(149, 50, |f| out.push(f));
        assert!(out.is_empty());
        inj.release_stale(150, 50, |f| out.push(f));
        assert_eq!(out, [7, 8]);
        assert_eq!(inj.held(), 0);
        // A full holdback sends the next delayed frame at once (which lets the held
        // ones count it).
        out.clear();
        for f in 0..HOLD as u32 {
            inj.route(f, || 0, |&f| Some(f), |f| out.push(f));
        }
        assert!(out.is_empty() && inj.held() == HOLD);
        inj.route(99, || 0, |&f| Some(f), |f| out.push(f));
        assert_eq!(inj.hold_full(), 1);
        assert_eq!(out[0], 99);
        assert_eq!(out.len() + inj.held(), HOLD + 1);
    }

    #[test]
    fn seeds_draw_different_sequences() {
        let (ra, rb, ra2) = (
            run(&mut injector(0.5, 0.0, 0.0, 10), 200),
            run(&mut injector(0.5, 0.0, 0.0, 11), 200),
            run(&mut injector(0.5, 0.0, 0.0, 10), 200),
        );
        assert_eq!(ra, ra2);
        assert_ne!(ra, rb);
    }
}
