//! Progress, failure detection and the write gate.
//!
//! * [`Liveness`]: per replica, a PROBE every `probe_interval`; the replica
//!   is declared invalid when a probe got no answer — neither its PROBE_REPLY
//!   nor any other message from the replica sent after it — within
//!   `waiting_time`. A replica that dies is therefore detected at most
//!   `probe_interval + waiting_time` after its last message.
//! * [`GateRules`]: (a) writes are allowed iff at least `min_replicas`
//!   Online replicas acknowledged within `max_lag` (both modes); (b) the
//!   quorum offset is the `min_replicas`-th highest acknowledged offset among
//!   them: in sync mode a write whose record ends at `o` may be answered when
//!   `o ≤ quorum`.
//! * [`DurableCursor`]: turns the quorum offset into per-worker log
//!   positions, so a worker in sync mode knows which held writes to answer.
//!
//! All take `now_ns` from the caller; nothing allocates after construction.

use std::collections::VecDeque;

/// Probe timing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeConfig {
    /// Time between probes.
    pub probe_interval_ns: u64,
    /// Time a probe may stay unanswered.
    pub waiting_time_ns: u64,
}

/// What [`Liveness::poll`] asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LivenessAction {
    /// Nothing now.
    Idle,
    /// Send PROBE number `seq` (its `sent_ns` is `now_ns`).
    Probe {
        /// Its sequence number.
        seq: u64,
    },
    /// The replica is invalid (reported once per silence).
    Invalid,
}

/// Failure detection of one replica.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Liveness {
    next_probe_ns: u64,
    seq: u64,
    /// Sent time of the oldest probe not answered yet.
    unanswered_since: Option<u64>,
    last_heard_ns: u64,
    invalid: bool,
}

impl Liveness {
    /// A replica heard from at `now_ns` (e.g. its HELLO).
    pub fn new(now_ns: u64) -> Self {
        Liveness {
            next_probe_ns: now_ns,
            seq: 0,
            unanswered_since: None,
            last_heard_ns: now_ns,
            invalid: false,
        }
    }

    /// Any valid message from the replica (PROBE_REPLY, PROGRESS, ACK, HELLO)
    /// arrived: it answers every outstanding probe and makes the replica
    /// valid again. The probe schedule is not changed.
    pub fn on_heard(&mut self, now_ns: u64) {
        self.last_heard_ns = now_ns;
        self.unanswered_since = None;
        self.invalid = false;
    }

    /// Time of the last message from the replica.
    pub fn last_heard_ns(&self) -> u64 {
        self.last_heard_ns
    }

    /// True after [`LivenessAction::Invalid`] until the replica is heard again.
    pub fn is_invalid(&self) -> bool {
        self.invalid
    }

    /// Sequence number of the last probe sent.
    pub fn last_seq(&self) -> u64 {
        self.seq
    }

    /// Call on every loop (or timer tick).
    pub fn poll(&mut self, now_ns: u64, cfg: &ProbeConfig) -> LivenessAction {
        if let Some(t) = self.unanswered_since {
            if !self.invalid && now_ns.saturating_sub(t) >= cfg.waiting_time_ns {
                self.invalid = true;
                return LivenessAction::Invalid;
            }
        }
        if now_ns >= self.next_probe_ns {
            self.next_probe_ns = now_ns + cfg.probe_interval_ns.max(1);
            self.seq += 1;
            if self.unanswered_since.is_none() {
                self.unanswered_since = Some(now_ns);
            }
            return LivenessAction::Probe { seq: self.seq };
        }
        LivenessAction::Idle
    }
}

/// How writes are answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// At once (SKV).
    Async,
    /// Once `min_replicas` replicas acknowledged the write's offset.
    Sync,
}

/// Write-gate configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateConfig {
    /// Async or sync.
    pub mode: Mode,
    /// Replicas required (0: no requirement).
    pub min_replicas: usize,
    /// How old a replica's last acknowledgement may be and still count.
    pub max_lag_ns: u64,
}

/// One replica as the gate sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicaView {
    /// Online ([`crate::replica_state::ReplicaState::counted`]).
    pub online: bool,
    /// Live offset it acknowledged.
    pub acked: u64,
    /// When it last acknowledged (ACK, PROGRESS or PROBE_REPLY).
    pub last_ack_ns: u64,
}

/// The gate's verdict.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gate {
    /// Writes may be executed (otherwise refused with NOT_ENOUGH_REPLICAS).
    pub writes_allowed: bool,
    /// Sync mode: writes whose record ends at or below it may be answered
    /// (`u64::MAX` with `min_replicas` 0; 0 when writes are not allowed).
    pub quorum_offset: u64,
    /// Replicas counted.
    pub good_replicas: usize,
}

/// The write gate.
#[derive(Debug)]
pub struct GateRules {
    cfg: GateConfig,
    offsets: Vec<u64>,
}

impl GateRules {
    /// A gate for at most `max_replicas` replicas (allocates once, here).
    pub fn new(cfg: GateConfig, max_replicas: usize) -> Self {
        GateRules {
            cfg,
            offsets: Vec::with_capacity(max_replicas),
        }
    }

    /// The configuration.
    pub fn config(&self) -> GateConfig {
        self.cfg
    }

    /// Evaluates the gate over `replicas` (at most `max_replicas` are
    /// looked at).
    pub fn evaluate<I>(&mut self, now_ns: u64, replicas: I) -> Gate
    where
        I: IntoIterator<Item = ReplicaView>,
    {
        self.offsets.clear();
        let cap = self.offsets.capacity();
        for r in replicas.into_iter().take(cap) {
            if r.online && now_ns.saturating_sub(r.last_ack_ns) <= self.cfg.max_lag_ns {
                self.offsets.push(r.acked);
            }
        }
        let good = self.offsets.len();
        let n = self.cfg.min_replicas;
        if n == 0 {
            return Gate {
                writes_allowed: true,
                quorum_offset: u64::MAX,
                good_replicas: good,
            };
        }
        if good < n {
            return Gate {
                writes_allowed: false,
                quorum_offset: 0,
                good_replicas: good,
            };
        }
        // The n-th highest: sort descending (a handful of replicas).
        self.offsets.sort_unstable_by(|a, b| b.cmp(a));
        Gate {
            writes_allowed: true,
            quorum_offset: self.offsets[n - 1],
            good_replicas: good,
        }
    }
}

/// Per-worker log positions made durable by the quorum (sync mode).
///
/// After draining a batch from worker `w`'s ring, the replication lcore calls
/// [`DurableCursor::on_drained`] with the ring's [`crate::log::LogConsumer::popped`]
/// and the stream's end; when the quorum offset reaches that end, the
/// worker's position becomes durable ([`DurableCursor::durable`]): every write
/// whose record the worker pushed at or below it
/// ([`crate::log::LogProducer::pushed`]) may be answered.
#[derive(Debug)]
pub struct DurableCursor {
    pending: Vec<VecDeque<(u64, u64)>>,
    durable: Vec<u64>,
}

impl DurableCursor {
    /// For `workers` workers, remembering up to `depth` drained batches each
    /// (older ones merge into the newest: a write then waits a little longer,
    /// never less). Allocates once, here.
    pub fn new(workers: usize, depth: usize) -> Self {
        let depth = depth.max(1);
        DurableCursor {
            pending: (0..workers)
                .map(|_| VecDeque::with_capacity(depth))
                .collect(),
            durable: vec![0; workers],
        }
    }

    /// True while a drained batch waits for the quorum (a sync write is held).
    pub fn waiting(&self) -> bool {
        self.pending.iter().any(|q| !q.is_empty())
    }

    /// Worker `w`'s ring was drained up to `worker_pos`, and its records are
    /// in the stream below `stream_end`.
    pub fn on_drained(&mut self, w: usize, worker_pos: u64, stream_end: u64) {
        let Some(q) = self.pending.get_mut(w) else {
            return;
        };
        if q.len() == q.capacity() {
            if let Some(last) = q.back_mut() {
                *last = (stream_end, worker_pos);
            }
        } else {
            q.push_back((stream_end, worker_pos));
        }
    }

    /// The quorum offset moved: publishes what became durable; returns true
    /// if any worker's position advanced.
    pub fn advance(&mut self, quorum_offset: u64) -> bool {
        let mut moved = false;
        for (q, d) in self.pending.iter_mut().zip(self.durable.iter_mut()) {
            while let Some(&(end, pos)) = q.front() {
                if end > quorum_offset {
                    break;
                }
                *d = (*d).max(pos);
                moved = true;
                q.pop_front();
            }
        }
        moved
    }

    /// Worker `w`'s durable log position.
    pub fn durable(&self, w: usize) -> u64 {
        self.durable.get(w).copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn dead_replica_detected_within_interval_plus_waiting_time() {
        let cfg = ProbeConfig {
            probe_interval_ns: 100 * MS,
            waiting_time_ns: 300 * MS,
        };
        for death in [0u64, 17, 99, 100, 250, 1234] {
            let mut l = Liveness::new(0);
            let mut now = 0;
            let mut detected = None;
            while now < 5000 * MS {
                match l.poll(now, &cfg) {
                    LivenessAction::Probe { .. } if now < death * MS => l.on_heard(now + MS),
                    LivenessAction::Invalid => {
                        detected = Some(now);
                        break;
                    }
                    _ => {}
                }
                now += MS;
            }
            let t = detected.expect("detected");
            let last_heard = l.last_heard_ns();
            assert!(t > death * MS, "not before it died");
            assert!(
                t - last_heard <= cfg.probe_interval_ns + cfg.waiting_time_ns,
                "death {death}: detected {t}, last heard {last_heard}"
            );
            assert!(l.is_invalid());
            // Heard again: valid, probed on schedule.
            l.on_heard(t);
            assert!(!l.is_invalid());
        }
    }

    #[test]
    fn gate_counts_online_fresh_replicas() {
        let cfg = GateConfig {
            mode: Mode::Sync,
            min_replicas: 2,
            max_lag_ns: 10 * MS,
        };
        let mut g = GateRules::new(cfg, 8);
        let r = |online, acked, t| ReplicaView {
            online,
            acked,
            last_ack_ns: t * MS,
        };
        let now = 100 * MS;
        let v = g.evaluate(now, [r(true, 500, 95), r(true, 700, 99), r(true, 900, 80)]);
        assert_eq!(
            v,
            Gate {
                writes_allowed: true,
                quorum_offset: 500,
                good_replicas: 2
            }
        );
        let v = g.evaluate(now, [r(true, 500, 95), r(true, 700, 99), r(true, 600, 91)]);
        assert_eq!((v.quorum_offset, v.good_replicas), (600, 3));
        let v = g.evaluate(now, [r(true, 500, 95), r(false, 700, 99)]);
        assert!(!v.writes_allowed);
        assert_eq!(v.quorum_offset, 0);
        let mut g0 = GateRules::new(
            GateConfig {
                min_replicas: 0,
                ..cfg
            },
            8,
        );
        let v = g0.evaluate(now, []);
        assert!(v.writes_allowed);
        assert_eq!(v.quorum_offset, u64::MAX);
    }

    #[test]
    fn durable_cursor_follows_the_quorum() {
        let mut c = DurableCursor::new(2, 2);
        c.on_drained(0, 100, 1000);
        c.on_drained(1, 50, 1200);
        c.on_drained(0, 180, 1500);
        c.on_drained(0, 260, 1700); // merges into the newest entry
        assert!(!c.advance(999));
        assert!(c.advance(1000));
        assert_eq!((c.durable(0), c.durable(1)), (100, 0));
        assert!(c.advance(1600));
        assert_eq!((c.durable(0), c.durable(1)), (100, 50));
        assert!(c.advance(1700));
        assert_eq!(c.durable(0), 260);
        assert_eq!(c.durable(7), 0);
    }
}
