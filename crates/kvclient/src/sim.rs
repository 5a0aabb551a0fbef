//! A seeded, lossy, in-memory duplex link for deterministic tests.
//!
//! [`LossyLink::new`] returns the two ends of a link, each a [`PacketIo`]: what one
//! end sends, the other receives. Each direction has its own [`Faults`]: the
//! probability that a frame is dropped, duplicated, or held back and released
//! after `1..=reorder_depth` later frames of that direction. All draws come from one
//! xorshift64* stream seeded by the caller, so a run is a function of the seed and
//! of the order of the calls.
//!
//! A frame held back is released only by later frames (or [`LinkEnd::release_held`]):
//! if nothing follows it, it is delayed until something does — like a loss that
//! retransmissions repair.

use crate::PacketIo;
use kvload::{RandomSource, Xorshift64Star};
use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

/// Fault probabilities of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Faults {
    /// Probability that a frame is lost.
    pub drop: f64,
    /// Probability that a frame is delivered twice.
    pub duplicate: f64,
    /// Probability that a frame is held back and delivered after later frames.
    pub reorder: f64,
    /// Largest number of later frames a held frame waits for (at least 1).
    pub reorder_depth: u32,
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        drop: 0.0,
        duplicate: 0.0,
        reorder: 0.0,
        reorder_depth: 1,
    };

    /// Drop, duplicate and reorder, each with probability `p` (reorder depth 4).
    pub const fn uniform(p: f64) -> Faults {
        Faults {
            drop: p,
            duplicate: p,
            reorder: p,
            reorder_depth: 4,
        }
    }
}

/// Counters of one direction.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames sent into the link.
    pub sent: u64,
    /// Frames dropped (by chance or by the filter).
    pub dropped: u64,
    /// Extra copies made.
    pub duplicated: u64,
    /// Frames held back.
    pub reordered: u64,
    /// Frames delivered.
    pub delivered: u64,
}

/// A drop filter: `true` drops the frame (before the random faults).
pub type Filter = Box<dyn FnMut(&[u8]) -> bool>;

struct Direction {
    faults: Faults,
    queue: VecDeque<Vec<u8>>,
    /// Held frames with the number of later frames they still wait for.
    held: Vec<(u32, Vec<u8>)>,
    filter: Option<Filter>,
    stats: LinkStats,
    capacity: usize,
}

impl Direction {
    fn new(faults: Faults) -> Direction {
        Direction {
            faults,
            queue: VecDeque::new(),
            held: Vec::new(),
            filter: None,
            stats: LinkStats::default(),
            capacity: usize::MAX,
        }
    }

    fn send(&mut self, rng: &mut Xorshift64Star, frame: &[u8]) -> bool {
        if self.queue.len() >= self.capacity {
            return false;
        }
        self.stats.sent += 1;
        // Frames held back move one step closer to release.
        let mut released = Vec::new();
        self.held.retain_mut(|(k, f)| {
            *k -= 1;
            if *k == 0 {
                released.push(core::mem::take(f));
                false
            } else {
                true
            }
        });
        let f = &self.faults;
        let filtered = self.filter.as_mut().is_some_and(|flt| flt(frame));
        if filtered || rng.next_f64() < f.drop {
            self.stats.dropped += 1;
        } else {
            let copies = if rng.next_f64() < f.duplicate { 2 } else { 1 };
            self.stats.duplicated += copies - 1;
            for _ in 0..copies {
                if rng.next_f64() < f.reorder {
                    self.stats.reordered += 1;
                    let k = 1 + rng.below(u64::from(f.reorder_depth.max(1))) as u32;
                    self.held.push((k, frame.to_vec()));
                } else {
                    self.queue.push_back(frame.to_vec());
                }
            }
        }
        self.queue.extend(released);
        true
    }
}

struct Inner {
    rng: Xorshift64Star,
    /// `dirs[0]`: A → B, `dirs[1]`: B → A.
    dirs: [Direction; 2],
    burst: usize,
}

/// Constructor of the two ends of a lossy link.
pub struct LossyLink;

impl LossyLink {
    /// A link between end A and end B (returned in that order) with faults
    /// `a_to_b` on frames A sends and `b_to_a` on frames B sends, all draws from
    /// `seed`. Receiving delivers at most 32 frames per call ([`LinkEnd::set_burst`]).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(seed: u64, a_to_b: Faults, b_to_a: Faults) -> (LinkEnd, LinkEnd) {
        let inner = Rc::new(RefCell::new(Inner {
            rng: Xorshift64Star::new(seed),
            dirs: [Direction::new(a_to_b), Direction::new(b_to_a)],
            burst: 32,
        }));
        (
            LinkEnd {
                inner: inner.clone(),
                side: 0,
            },
            LinkEnd { inner, side: 1 },
        )
    }
}

/// One end of a [`LossyLink`].
pub struct LinkEnd {
    inner: Rc<RefCell<Inner>>,
    side: usize,
}

impl LinkEnd {
    /// Counters of the frames this end sent.
    pub fn tx_stats(&self) -> LinkStats {
        self.inner.borrow().dirs[self.side].stats
    }

    /// Sets the faults of the frames this end sends.
    pub fn set_tx_faults(&self, faults: Faults) {
        self.inner.borrow_mut().dirs[self.side].faults = faults;
    }

    /// Installs a filter on the frames this end sends (`true` drops the frame).
    pub fn set_tx_filter(&self, filter: Option<Filter>) {
        self.inner.borrow_mut().dirs[self.side].filter = filter;
    }

    /// Frames queued towards this end (`held` ones not counted).
    pub fn rx_pending(&self) -> usize {
        self.inner.borrow().dirs[1 - self.side].queue.len()
    }

    /// Largest number of frames waiting to be received by the other end: beyond it
    /// [`PacketIo::send`] refuses frames (unbounded by default).
    pub fn set_tx_capacity(&self, frames: usize) {
        self.inner.borrow_mut().dirs[self.side].capacity = frames;
    }

    /// Frames delivered per [`PacketIo::recv`] call (both ends).
    pub fn set_burst(&self, burst: usize) {
        self.inner.borrow_mut().burst = burst.max(1);
    }

    /// Delivers every frame held back towards this end now (after those queued).
    pub fn release_held(&self) {
        let mut g = self.inner.borrow_mut();
        let d = &mut g.dirs[1 - self.side];
        let held: Vec<_> = d.held.drain(..).map(|(_, f)| f).collect();
        d.queue.extend(held);
    }
}

impl PacketIo for LinkEnd {
    fn send(&mut self, frame: &[u8]) -> bool {
        let mut g = self.inner.borrow_mut();
        let Inner { rng, dirs, .. } = &mut *g;
        dirs[self.side].send(rng, frame)
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut n = 0;
        loop {
            // Not borrowed while `f` runs: `f` may send on either end.
            let frame = {
                let mut g = self.inner.borrow_mut();
                if n >= g.burst {
                    break;
                }
                let d = &mut g.dirs[1 - self.side];
                match d.queue.pop_front() {
                    Some(fr) => {
                        d.stats.delivered += 1;
                        fr
                    }
                    None => break,
                }
            };
            f(&frame);
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seed: u64, faults: Faults) -> (Vec<u8>, LinkStats) {
        let (mut a, mut b) = LossyLink::new(seed, faults, Faults::NONE);
        for i in 0..200u8 {
            assert!(a.send(&[i]));
        }
        a.release_held();
        b.release_held();
        let mut got = Vec::new();
        while b.recv(&mut |f| got.push(f[0])) > 0 {}
        (got, a.tx_stats())
    }

    #[test]
    fn clean_link_delivers_in_order() {
        let (got, st) = run(1, Faults::NONE);
        assert_eq!(got, (0..200).collect::<Vec<u8>>());
        assert_eq!(st.delivered, 200);
    }

    #[test]
    fn faults_happen_and_are_seeded() {
        let (got, st) = run(7, Faults::uniform(0.1));
        assert!(
            st.dropped > 5 && st.duplicated > 5 && st.reordered > 5,
            "{st:?}"
        );
        assert_eq!(got.len() as u64, st.delivered);
        assert!(got.windows(2).any(|w| w[0] > w[1]), "no reordering");
        assert_eq!(run(7, Faults::uniform(0.1)).0, got);
        assert_ne!(run(8, Faults::uniform(0.1)).0, got);
    }

    #[test]
    fn filter_and_reverse_direction() {
        let (mut a, mut b) = LossyLink::new(3, Faults::NONE, Faults::NONE);
        a.set_tx_filter(Some(Box::new(|f| f[0] == 2)));
        for i in 0..4u8 {
            a.send(&[i]);
        }
        b.send(&[9]);
        let mut got = Vec::new();
        b.recv(&mut |f| got.push(f[0]));
        assert_eq!(got, [0, 1, 3]);
        got.clear();
        a.recv(&mut |f| got.push(f[0]));
        assert_eq!(got, [9]);
    }
}
