//! Opened QPs on the client side (docs/PROTOCOL.md §6.1): taking the QP an OPEN's
//! ACCEPT names, closing opened QPs, the OPEN nonce, and when a NAK proves that
//! nothing in flight was executed.

use super::frames::send_close;
use super::Transport;
use crate::qp::{Qp, QpState};
use crate::PacketIo;
use kvwire::transport::AcceptFrame;

impl Transport {
    /// Closes every opened QP (a CLOSE each, not answered: best effort) and forgets
    /// it; requests still in flight on them are abandoned. For a client that exits.
    pub fn close_opened<I: PacketIo + ?Sized>(&mut self, io: &mut I) {
        for q in &mut self.qps {
            if q.open_partition.is_some() && q.qpn != 0 {
                send_close(q, io);
                self.by_qpn.remove(&q.qpn);
                q.qpn = 0;
                q.state = QpState::Idle;
            }
        }
    }

    /// The QP waiting for the ACCEPT of an OPEN: its nonce, and the QP the ACCEPT
    /// names taken as its own.
    pub(super) fn opening(&mut self, a: &AcceptFrame) -> Option<usize> {
        let o = a.accept.opened?;
        let i = self.qps.iter().position(|q| {
            q.open_partition.is_some()
                && q.state == QpState::Connecting
                && q.nonce == a.accept.nonce
        })?;
        let q = &mut self.qps[i];
        // A tenant's ACCEPT seals the secret under the tenant's (a sealed one
        // without credentials here cannot be ours: it stays sealed, and the QP's
        // RESUMEs and CLOSE are refused, as they should be).
        let secret = match &self.creds {
            Some(c) => o.unsealed(a.accept.nonce, &c.secret),
            None => o.secret,
        };
        (q.qpn, q.rkey, q.secret) = (o.qpn, o.rkey, secret);
        self.by_qpn.insert(o.qpn, i);
        Some(i)
    }
}

/// A nonce for an OPEN: unpredictable and distinct across processes (std's
/// `RandomState` keys come from the OS's random source), so two clients behind one
/// address never take each other's ACCEPT.
pub(super) fn random_nonce(now_ns: u64, qp: usize) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ns);
    h.write_usize(qp);
    h.finish()
}

/// Whether a NAK "invalid request" for PSN `nak_psn` on QP `q` proves that none of its
/// requests in flight was executed: an opened QP (the server answers a frame to one
/// it no longer has so, executing nothing), the NAK names the oldest request in
/// flight, and every request in flight was sent once. The QP was gone when that
/// request arrived; a later one that arrived earlier (reordered) would have made the
/// QP active, and an opened QP only goes away by its own CLOSE or after idling
/// (docs/PROTOCOL.md §6.1).
pub(super) fn not_executed(q: &Qp, nak_psn: u32) -> bool {
    q.open_partition.is_some()
        && q.in_flight > 0
        && nak_psn == q.una
        && q.ring.iter().all(|s| !s.busy || !s.resent)
}
