//! Following the master of a replicated cluster ([`crate::Client`]).
//!
//! A replica, or a master that lost its lease, answers every write `NOT_MASTER`
//! and changes nothing; with the master known, the answer's value names it (epoch,
//! IPv4, MAC: docs/PROTOCOL.md §4.2). The client then **redirects**: it stops sending,
//! lets every request in flight finish (all of them are answered by the old node —
//! writes refused, reads served), puts the refused operations back at the head of
//! their queues in their order, points every QP at the named node, connects there,
//! and sends on. An operation refused `NOT_MASTER` is therefore executed once, on the
//! master, and the caller never sees the refusal. A hint older than the newest epoch
//! seen is ignored (a stale replica), and so is one naming the node already in use.
//!
//! With **candidate nodes** ([`crate::Client::set_nodes`]), a node that stops
//! answering (a request given up after the transport's retries) makes the client try
//! the next candidate; that node serves, or names the master. Requests in flight on a
//! node that stopped answering are **resumed** there (a RESUME, docs/PROTOCOL.md §6.6):
//! the new master answers them from the completion records the old one replicated
//! (their original results), `OUTCOME_UNKNOWN` where only their start arrived, or
//! runs them if nothing of them arrived — never twice. A node that cannot continue
//! the connection starts a new one, and the requests fail (`ConnectionLost`: outcome
//! unknown) without being resent, since a write may have been applied.
//!
//! With candidate nodes, a refusal that names **no** master (the cluster is electing
//! one) is not reported either: nothing was written, so the client holds the operation
//! and asks again after a pause ([`HOLD_MIN_NS`] doubling to [`HOLD_MAX_NS`]) until a
//! node names the master or the operation's own deadline passes. Without candidates
//! (one server) the refusal is reported at once.

use kvwire::{MacAddr, MasterHint};
use std::net::Ipv4Addr;

/// A node's client-facing address.
pub type NodeAddr = (MacAddr, Ipv4Addr);

/// First pause before asking again when the cluster named no master.
pub const HOLD_MIN_NS: u64 = 10_000_000;
/// Longest such pause.
pub const HOLD_MAX_NS: u64 = 200_000_000;

/// What to do with an operation answered `NOT_MASTER`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Queue it again: it goes to the master once the client has moved.
    Requeue,
    /// Report the status to the caller (no usable hint, or not following).
    Report,
}

/// The client's view of where the master is.
#[derive(Debug)]
pub struct Follower {
    enabled: bool,
    /// Newest epoch a hint carried.
    epoch: u64,
    /// Where requests go now.
    current: Option<NodeAddr>,
    /// Where they go once nothing is in flight.
    pending: Option<NodeAddr>,
    /// Nodes to try when the current one stops answering.
    nodes: Vec<NodeAddr>,
    /// Redirects done.
    pub redirects: u64,
    /// Nothing is sent before this time (the cluster named no master).
    hold_until: u64,
    /// The next pause.
    hold_ns: u64,
    /// Pauses taken.
    pub holds: u64,
}

impl Follower {
    /// A follower starting at `current` (`enabled == false`: every `NOT_MASTER` is
    /// reported and nothing moves).
    pub fn new(enabled: bool, current: Option<NodeAddr>) -> Follower {
        Follower {
            enabled,
            epoch: 0,
            current,
            pending: None,
            nodes: Vec::new(),
            redirects: 0,
            hold_until: 0,
            hold_ns: HOLD_MIN_NS,
            holds: 0,
        }
    }

    /// Sets the candidate nodes.
    pub fn set_nodes(&mut self, nodes: &[NodeAddr]) {
        self.nodes = nodes.to_vec();
    }

    /// Where the client sends now.
    pub fn current(&self) -> Option<NodeAddr> {
        self.current
    }

    /// True while a move is waiting for the requests in flight (send nothing new).
    pub fn moving(&self) -> bool {
        self.pending.is_some()
    }

    /// True while sends wait for the cluster to elect a master.
    pub fn holding(&self, now_ns: u64) -> bool {
        now_ns < self.hold_until
    }

    /// An operation was answered `NOT_MASTER` with `value` (the hint, or empty) at
    /// `now_ns`.
    pub fn on_not_master(&mut self, value: &[u8], now_ns: u64) -> Verdict {
        if !self.enabled {
            return Verdict::Report;
        }
        if self.pending.is_some() {
            return Verdict::Requeue;
        }
        let Some(h) = MasterHint::decode(value) else {
            if self.nodes.is_empty() {
                return Verdict::Report;
            }
            // No master yet: ask again after a pause (one per burst of refusals).
            if !self.holding(now_ns) {
                self.hold_until = now_ns + self.hold_ns;
                self.hold_ns = (self.hold_ns * 2).min(HOLD_MAX_NS);
                self.holds += 1;
            }
            return Verdict::Requeue;
        };
        if h.epoch < self.epoch {
            return Verdict::Report;
        }
        self.epoch = h.epoch;
        let to = (h.mac, h.ip);
        if Some(to) == self.current {
            return Verdict::Report;
        }
        self.pending = Some(to);
        Verdict::Requeue
    }

    /// The current node gave up answering: move to the next candidate, if any.
    pub fn on_node_lost(&mut self) {
        if !self.enabled || self.pending.is_some() || self.nodes.is_empty() {
            return;
        }
        let at = self
            .current
            .and_then(|c| self.nodes.iter().position(|&n| n == c));
        let next = self.nodes[at.map_or(0, |i| (i + 1) % self.nodes.len())];
        if Some(next) != self.current {
            self.pending = Some(next);
        }
    }

    /// Nothing is in flight: the node to move to now, if a move is pending.
    pub fn take_move(&mut self) -> Option<NodeAddr> {
        let to = self.pending.take()?;
        self.current = Some(to);
        self.redirects += 1;
        self.hold_until = 0;
        self.hold_ns = HOLD_MIN_NS;
        Some(to)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hint(epoch: u64, last: u8) -> Vec<u8> {
        let h = MasterHint {
            epoch,
            ip: Ipv4Addr::new(10, 0, 0, last),
            mac: [2, 0, 0, 0, 0, last],
            qpn: 1,
        };
        h.encode().to_vec()
    }

    fn node(last: u8) -> NodeAddr {
        ([2, 0, 0, 0, 0, last], Ipv4Addr::new(10, 0, 0, last))
    }

    #[test]
    fn follows_newer_hints_only() {
        let mut f = Follower::new(true, Some(node(1)));
        assert_eq!(f.on_not_master(&[], 0), Verdict::Report);
        assert_eq!(f.on_not_master(&hint(3, 1), 0), Verdict::Report, "names us");
        assert_eq!(f.on_not_master(&hint(3, 2), 0), Verdict::Requeue);
        assert!(f.moving());
        // Everything refused meanwhile goes along.
        assert_eq!(f.on_not_master(&[], 0), Verdict::Requeue);
        assert_eq!(f.take_move(), Some(node(2)));
        assert_eq!(f.take_move(), None);
        assert_eq!(
            f.on_not_master(&hint(2, 3), 0),
            Verdict::Report,
            "older epoch"
        );
        assert_eq!(f.on_not_master(&hint(4, 3), 0), Verdict::Requeue);
        assert_eq!(f.take_move(), Some(node(3)));
        assert_eq!(f.redirects, 2);
        let mut off = Follower::new(false, Some(node(1)));
        assert_eq!(off.on_not_master(&hint(9, 2), 0), Verdict::Report);
    }

    #[test]
    fn no_master_named_holds_only_with_candidates() {
        let ms = 1_000_000;
        let mut one = Follower::new(true, Some(node(1)));
        assert_eq!(one.on_not_master(&[], 0), Verdict::Report, "one server");
        let mut f = Follower::new(true, Some(node(1)));
        f.set_nodes(&[node(1), node(2)]);
        assert_eq!(f.on_not_master(&[], 0), Verdict::Requeue);
        assert!(f.holding(HOLD_MIN_NS - 1) && !f.holding(HOLD_MIN_NS));
        // More refusals of the same burst do not stretch the pause...
        assert_eq!(f.on_not_master(&[], ms), Verdict::Requeue);
        assert!(!f.holding(HOLD_MIN_NS));
        // ...the next burst's pause is twice as long, up to the cap.
        let t = HOLD_MIN_NS;
        f.on_not_master(&[], t);
        assert!(f.holding(t + 2 * HOLD_MIN_NS - 1) && !f.holding(t + 2 * HOLD_MIN_NS));
        for i in 0..20 {
            f.on_not_master(&[], i * HOLD_MAX_NS * 4);
        }
        let t = 100 * HOLD_MAX_NS;
        f.on_not_master(&[], t);
        assert!(!f.holding(t + HOLD_MAX_NS), "capped");
        assert_eq!(f.holds, 22);
        // A master named: move there, and the pauses start small again.
        assert_eq!(f.on_not_master(&hint(5, 2), t), Verdict::Requeue);
        assert_eq!(f.take_move(), Some(node(2)));
        assert!(!f.holding(t));
        f.on_not_master(&[], t);
        assert!(!f.holding(t + HOLD_MIN_NS));
    }

    #[test]
    fn a_lost_node_moves_to_the_next_candidate() {
        let mut f = Follower::new(true, Some(node(1)));
        f.on_node_lost();
        assert!(!f.moving(), "no candidates");
        f.set_nodes(&[node(1), node(2), node(3)]);
        f.on_node_lost();
        assert_eq!(f.take_move(), Some(node(2)));
        f.on_node_lost();
        assert_eq!(f.take_move(), Some(node(3)));
        f.on_node_lost();
        assert_eq!(f.take_move(), Some(node(1)));
    }
}
