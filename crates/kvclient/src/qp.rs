//! Per-QP state of the [`crate::Transport`]: connection, PSN window, in-flight ring,
//! retransmission timer and RNR hold-off.
//!
//! # Memory per QP
//!
//! A [`Qp`] is 144 bytes on x86-64 (`size_of::<Qp>()`, checked by a test to stay under
//! 256) plus its ring: `W` slots of 40 bytes (`W` = the credits the server granted,
//! 32 by default: 1280 bytes). Frame bytes are not per QP: they live in the
//! transport's shared pool (`max_outstanding` buffers of one MTU frame each).

use kvwire::psn;
use kvwire::transport::Recovery;
use kvwire::FrameParams;

/// Connection state of a client QP.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Never connected.
    Idle,
    /// CONNECT sent, waiting for the ACCEPT with our nonce.
    Connecting,
    /// ACCEPT received: requests may be sent.
    Connected,
    /// The connection was lost (a request timed out after `max_retries`, or the
    /// server answered NAK "invalid request"): call `connect` again.
    Failed,
    /// With resuming on ([`crate::Transport::set_resume`]): a request timed out
    /// after `max_retries`; the requests in flight are kept for a RESUME
    /// ([`crate::Transport::resume`], normally on another node).
    Lost,
    /// RESUME sent, waiting for the ACCEPT with our nonce.
    Resuming,
}

/// One in-flight request (a slot of the ring, indexed by `psn mod W`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Slot {
    /// The caller's tag.
    pub tag: u64,
    /// Time of the first transmission.
    pub first_sent: u64,
    /// Time of the latest (re)transmission.
    pub last_sent: u64,
    /// PSN (= batch id).
    pub psn: u32,
    /// Frame buffer in the pool.
    pub buf: u32,
    /// Frame length.
    pub len: u16,
    /// Results received so far (the `first_index` the next frame must carry).
    pub received: u16,
    /// RTO-driven retransmissions.
    pub retries: u8,
    /// In flight (sent, not complete); false = free or done.
    pub busy: bool,
    /// Sent more than once (a go-back-N or timeout resend).
    pub resent: bool,
}

/// Which client QP a [`crate::Transport`] QP is: one the operator admitted, or one the
/// server opens for this client (docs/PROTOCOL.md §6.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpSpec {
    /// A static QP from the dataplane's `clients[]`: its QPN and R_Key.
    Static {
        /// QPN.
        qpn: u32,
        /// R_Key.
        rkey: u32,
    },
    /// A QP the server opens (an OPEN on each connect) in key partition `partition`.
    Opened {
        /// The key partition it serves.
        partition: u16,
    },
}

/// Per-QP state.
#[derive(Debug)]
pub(crate) struct Qp {
    /// Client QPN (BTH destination QP); for an opened QP the one its ACCEPT named
    /// (0 before the first).
    pub qpn: u32,
    /// R_Key (RETH).
    pub rkey: u32,
    /// An opened QP: the partition its OPENs ask for.
    pub open_partition: Option<u16>,
    /// An opened QP's connection secret (for RESUME and CLOSE).
    pub secret: u64,
    /// Addressing of this QP's frames.
    pub params: FrameParams,
    /// Connection state.
    pub state: QpState,
    /// Nonce of the current (or pending) incarnation.
    pub nonce: u64,
    /// Last CONNECT transmission.
    pub connect_sent: u64,
    /// Next request PSN.
    pub next_psn: u32,
    /// Oldest incomplete request PSN (`== next_psn` when nothing is in flight).
    pub una: u32,
    /// Window `W` (power of two) from the ACCEPT.
    pub credits: u16,
    /// Request slot bytes.
    pub slot_size: u32,
    /// Request ring start.
    pub region_va: u64,
    /// Requests in flight.
    pub in_flight: u16,
    /// `W` slots, indexed by `psn mod W`.
    pub ring: Vec<Slot>,
    /// When to send again and from which PSN (IBA RC's requester rules: the
    /// retransmission timer, an RNR NAK's hold-off, NAKs taken once).
    pub rec: Recovery,
    /// In-flight requests must be failed at the next poll (reconnect requested).
    pub abort: bool,
    /// Queued in the transport's urgent list.
    pub urgent: bool,
    /// Requests completed since `una` last moved (fast retransmit at 3).
    pub later_done: u8,
    /// RESUMEs sent without an ACCEPT in the current attempt.
    pub resume_tries: u8,
}

impl Qp {
    pub(crate) fn new(spec: QpSpec, params: FrameParams, rto_ns: u64) -> Qp {
        let (qpn, rkey, open_partition) = match spec {
            QpSpec::Static { qpn, rkey } => (qpn, rkey, None),
            QpSpec::Opened { partition } => (0, 0, Some(partition)),
        };
        Qp {
            qpn,
            rkey,
            open_partition,
            secret: 0,
            params,
            state: QpState::Idle,
            nonce: 0,
            connect_sent: 0,
            next_psn: 0,
            una: 0,
            credits: 0,
            slot_size: 0,
            region_va: 0,
            in_flight: 0,
            ring: Vec::with_capacity(usize::from(kvwire::transport::DEFAULT_CREDITS)),
            rec: Recovery::new(rto_ns),
            abort: false,
            urgent: false,
            later_done: 0,
            resume_tries: 0,
        }
    }

    /// Ring index of `psn`.
    #[inline]
    pub(crate) fn idx(&self, psn: u32) -> usize {
        (psn % u32::from(self.credits)) as usize
    }

    /// True if `psn` is in `[una, next_psn)`.
    #[inline]
    pub(crate) fn in_window(&self, p: u32) -> bool {
        psn::distance(self.una, p) >= 0 && psn::distance(p, self.next_psn) > 0
    }

    /// True if a request with PSN `next_psn` may be sent (the response to
    /// `next_psn − W` has fully arrived: every older request is complete).
    #[inline]
    pub(crate) fn has_credit(&self) -> bool {
        self.credits > 0 && psn::distance(self.una, self.next_psn) < i32::from(self.credits)
    }

    /// Moves `una` past completed requests.
    pub(crate) fn advance_una(&mut self) {
        while self.una != self.next_psn {
            let s = &self.ring[self.idx(self.una)];
            if s.busy && s.psn == self.una {
                break;
            }
            self.una = psn::add(self.una, 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(core::mem::size_of::<Slot>(), 40);
        assert!(
            core::mem::size_of::<Qp>() <= 256,
            "{}",
            core::mem::size_of::<Qp>()
        );
    }
}
