//! The simulated network: every message is delivered after a random delay (so
//! messages reorder), or dropped, or delivered twice, or cut by a partition; all
//! draws from the run's seeded generator.

use rand::rngs::SmallRng;
use rand::Rng;
use std::collections::BinaryHeap;

/// The network's fault rates.
#[derive(Clone, Copy, Debug)]
pub struct NetFaults {
    /// Probability a message is lost.
    pub drop: f64,
    /// Probability a message is delivered twice.
    pub dup: f64,
    /// Delay range in ms (a wide range reorders).
    pub delay: (u64, u64),
}

impl NetFaults {
    /// A healthy network: 1 to 2 ms, nothing lost.
    pub const CALM: NetFaults = NetFaults {
        drop: 0.0,
        dup: 0.0,
        delay: (1, 2),
    };
}

/// A message in flight to node slot `to` (or to client `to` when `to_client`).
#[derive(Debug)]
struct InFlight<M> {
    at: u64,
    seq: u64,
    to: usize,
    msg: M,
}

impl<M> PartialEq for InFlight<M> {
    fn eq(&self, o: &Self) -> bool {
        (self.at, self.seq) == (o.at, o.seq)
    }
}
impl<M> Eq for InFlight<M> {}
impl<M> PartialOrd for InFlight<M> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<M> Ord for InFlight<M> {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        // A max-heap: the earliest first.
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}

/// A queue of messages to endpoints `0..n`, with faults.
pub struct Net<M> {
    queue: BinaryHeap<InFlight<M>>,
    seq: u64,
    /// The current fault rates.
    pub faults: NetFaults,
    /// `cut[a][b]`: messages from a to b are lost.
    cut: Vec<Vec<bool>>,
    /// Messages sent, lost, duplicated.
    pub sent: u64,
    /// Lost (faults and partitions).
    pub lost: u64,
}

impl<M: Clone> Net<M> {
    /// A network of `n` endpoints.
    pub fn new(n: usize) -> Net<M> {
        Net {
            queue: BinaryHeap::new(),
            seq: 0,
            faults: NetFaults::CALM,
            cut: vec![vec![false; n]; n],
            sent: 0,
            lost: 0,
        }
    }

    /// Sends `msg` from `from` to `to` at time `now`; `dup_ok`: it may be delivered
    /// twice (a client's transport delivers its requests once: the dataplane's PSNs).
    pub fn send(
        &mut self,
        rng: &mut SmallRng,
        now: u64,
        from: usize,
        to: usize,
        msg: M,
        dup_ok: bool,
    ) {
        self.sent += 1;
        if self.cut[from][to] || rng.gen_bool(self.faults.drop) {
            self.lost += 1;
            return;
        }
        let copies = if dup_ok && rng.gen_bool(self.faults.dup) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let at = now + rng.gen_range(self.faults.delay.0..=self.faults.delay.1);
            self.seq += 1;
            self.queue.push(InFlight {
                at,
                seq: self.seq,
                to,
                msg: msg.clone(),
            });
        }
    }

    /// The next message due at or before `now`: (endpoint, message).
    pub fn due(&mut self, now: u64) -> Option<(usize, M)> {
        if self.queue.peek()?.at > now {
            return None;
        }
        self.queue.pop().map(|f| (f.to, f.msg))
    }

    /// Cuts (or heals, `cut` false) both directions between `a` and `b`.
    pub fn set_cut(&mut self, a: usize, b: usize, cut: bool) {
        self.cut[a][b] = cut;
        self.cut[b][a] = cut;
    }

    /// Heals every partition.
    pub fn heal(&mut self) {
        for row in &mut self.cut {
            row.fill(false);
        }
    }
}
