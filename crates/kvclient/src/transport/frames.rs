//! The frames a [`Transport`](super::Transport) sends on its own: CONNECT and RESUME,
//! go-back-N resends, and the re-addressing of kept requests for a resumed connection.

use super::Stats;
use crate::pool::FramePool;
use crate::qp::Qp;
use crate::Credentials;
use crate::PacketIo;
use kvwire::psn;
use kvwire::transport::{
    emit_join, signed_open, slot_va, Connect, Join, CM_QPN, MAX_JOIN_FRAME_LEN,
};
use kvwire::{emit_request_headers, finalize, REQUEST_HEADER_LEN};
use std::time::{SystemTime, UNIX_EPOCH};

/// Sends QP `q`'s CONNECT (a new incarnation; an OPEN to the connection manager for
/// an opened QP), or with `resume` its RESUME (the incarnation goes on at its oldest
/// request in flight, or its next PSN; with the secret on an opened QP), with the
/// QP's nonce; notes the time for the retransmission timer.
pub(super) fn send_join<I: PacketIo + ?Sized>(
    q: &mut Qp,
    io: &mut I,
    now: u64,
    stats: &mut Stats,
    resume: bool,
    creds: Option<&Credentials>,
) {
    let mut buf = [0u8; MAX_JOIN_FRAME_LEN];
    let c = Connect {
        rkey: q.rkey,
        nonce: q.nonce,
    };
    q.connect_sent = now;
    let (dest, join) = if resume {
        q.resume_tries = q.resume_tries.saturating_add(1);
        let next_psn = if q.in_flight > 0 { q.una } else { q.next_psn };
        // An opened QP's RESUME proves its secret (never carries it).
        let proof = q.open_partition.map(|_| c.resume_proof(next_psn, q.secret));
        (q.qpn, Join::Resume { next_psn, proof })
    } else {
        match (q.open_partition, creds) {
            (Some(partition), Some(c)) => {
                let time_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                let p = &q.params;
                let join = signed_open(
                    partition, q.nonce, c.tenant, time_ms, &c.secret, &p.src_mac, p.src_ip,
                );
                (CM_QPN, join)
            }
            (Some(partition), None) => (
                CM_QPN,
                Join::Open {
                    partition,
                    tenant: None,
                },
            ),
            (None, _) => (q.qpn, Join::Connect),
        }
    };
    if let Ok(n) = emit_join(&mut buf, &q.params, dest, &c, &join) {
        if io.send(&buf[..n]) {
            if resume {
                stats.resumes_sent += 1;
            } else {
                stats.connects_sent += 1;
            }
        }
    }
}

/// Sends a CLOSE for opened QP `q`'s current connection (best effort: not
/// answered; the server reclaims a QP whose CLOSE was lost when it idles).
pub(super) fn send_close<I: PacketIo + ?Sized>(q: &Qp, io: &mut I) {
    if q.open_partition.is_none() || q.qpn == 0 {
        return;
    }
    let mut buf = [0u8; MAX_JOIN_FRAME_LEN];
    let c = Connect {
        rkey: q.rkey,
        nonce: q.nonce,
    };
    let join = Join::Close {
        proof: c.close_proof(q.secret),
    };
    if let Ok(n) = emit_join(&mut buf, &q.params, q.qpn, &c, &join) {
        io.send(&buf[..n]);
    }
}

/// Re-addresses every request in flight of `q` for its current frame parameters and
/// request ring (a resumed connection on another node), and resets their retry
/// counts: same payloads, same PSNs.
pub(super) fn rehead(q: &mut Qp, pool: &mut FramePool) {
    for k in 0..q.ring.len() {
        let s = q.ring[k];
        if !s.busy {
            continue;
        }
        let va = slot_va(q.region_va, u64::from(q.slot_size), q.credits, s.psn);
        let frame = &mut pool.buf_mut(s.buf)[..usize::from(s.len)];
        // The payload length is the RETH's DMA length (the RETH ends the headers).
        let dma = &frame[REQUEST_HEADER_LEN - 4..REQUEST_HEADER_LEN];
        let n = u32::from_be_bytes([dma[0], dma[1], dma[2], dma[3]]) as usize;
        let ok = emit_request_headers(frame, &q.params, q.qpn, s.psn, va, q.rkey, n)
            .and_then(|_| finalize(frame));
        debug_assert!(ok.is_ok(), "a frame that was sent re-addresses");
        q.ring[k].retries = 0;
    }
}

/// Go-back-N: resends every incomplete request of `q` from PSN `from` on, oldest
/// first, same bytes. Stops at the first frame `io` refuses (the timer resends it).
pub(super) fn resend<I: PacketIo + ?Sized>(
    q: &mut Qp,
    pool: &FramePool,
    stats: &mut Stats,
    io: &mut I,
    now: u64,
    from: u32,
    rto: bool,
) {
    let mut p = from;
    while p != q.next_psn {
        let k = q.idx(p);
        let s = &mut q.ring[k];
        if s.busy && s.psn == p {
            if !io.send(pool.frame(s.buf, usize::from(s.len))) {
                return;
            }
            stats.retransmitted += 1;
            s.last_sent = now;
            s.resent = true;
            if rto {
                s.retries = s.retries.saturating_add(1);
            }
        }
        p = psn::add(p, 1);
    }
}
