//! Opened QPs (docs/PROTOCOL.md §6.1): the server allocates a QP per OPEN, with a
//! fresh QPN, R_Key and connection secret, so any number of client processes share
//! the appliance without an operator handing out QPNs; a CLOSE frees it, and one idle
//! for `server.connection_idle_s` is reclaimed.
//!
//! Rules, each enforced here or in `conn.rs`:
//!
//! * an OPEN never touches another client's QP: it always gets a free one (or, if
//!   its ACCEPT was lost, the one the same OPEN got: same nonce, same source);
//! * only the holder of the secret RESUMEs or CLOSEs an opened QP; a CONNECT on one
//!   is refused (`bad_secret`);
//! * a request or RESUME on an opened QPN that is not live is answered NAK "invalid
//!   request" (the client opens a new QP; the request was not executed here).

use super::Server;
use crate::chunk::Chunk;
use crate::clients::OpenedQp;
use crate::packet::{PktCtx, RESPONSE_UDP_SRC_PORT};
use crate::respond::Responder;
use crate::stats::WorkerStats;
use crate::tx::TxSink;
use kvwire::transport::{
    emit_accept, emit_ack, Accept, ConnectFrame, NakCode, Opened, Syndrome, TenantCredential,
    CM_QPN,
};
use kvwire::{DropReason, MacAddr};
use rand::RngCore;
use std::net::Ipv4Addr;

/// How many recent OPENs are remembered to answer a repeated one (its ACCEPT was
/// lost) with the same QP. A client repeats its OPEN within its connect timeout, far
/// sooner than this many other OPENs reach one worker.
const RECENT_OPENS: usize = 64;
/// Opened QPs looked at per maintenance tick by the idle sweep.
const SWEEP_PER_TICK: usize = 256;
/// Opened QPs closed per maintenance tick at most (each logs a record).
const RECLAIM_PER_TICK: usize = 16;

/// One remembered OPEN: who sent it and the QP it got.
#[derive(Clone, Copy, Debug, Default)]
struct RecentOpen {
    nonce: u64,
    mac: MacAddr,
    ip: Option<Ipv4Addr>,
    qpn: u32,
}

/// The last [`RECENT_OPENS`] OPENs of a worker, oldest overwritten first.
#[derive(Debug)]
pub(crate) struct RecentOpens {
    ring: Box<[RecentOpen; RECENT_OPENS]>,
    next: usize,
}

impl Default for RecentOpens {
    fn default() -> Self {
        RecentOpens {
            ring: Box::new([RecentOpen::default(); RECENT_OPENS]),
            next: 0,
        }
    }
}

impl RecentOpens {
    fn find(&self, nonce: u64, mac: MacAddr, ip: Ipv4Addr) -> Option<u32> {
        self.ring
            .iter()
            .find(|r| r.ip == Some(ip) && r.nonce == nonce && r.mac == mac)
            .map(|r| r.qpn)
    }

    fn remember(&mut self, nonce: u64, mac: MacAddr, ip: Ipv4Addr, qpn: u32) {
        self.ring[self.next] = RecentOpen {
            nonce,
            mac,
            ip: Some(ip),
            qpn,
        };
        self.next = (self.next + 1) % RECENT_OPENS;
    }
}

impl Server {
    /// Handles an OPEN (already checked to be for this host): a new opened QP, or the
    /// same ACCEPT again for a repeated OPEN whose QP is still in its first
    /// incarnation.
    pub(super) fn open<T: TxSink>(
        &mut self,
        cf: &ConnectFrame,
        partition: u16,
        cred: Option<&TenantCredential>,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        if cf.dest_qp != CM_QPN {
            return stats.drop(DropReason::BadConnect);
        }
        if u32::from(partition) != self.partition {
            return stats.drop(DropReason::NoFreeQp);
        }
        let nonce = cf.connect.nonce;
        let again = self
            .recent_opens
            .find(nonce, cf.src_mac, cf.src_ip)
            .and_then(|q| self.clients.find(q))
            .filter(|&i| {
                let c = &self.clients.as_slice()[i];
                c.connected && c.nonce == nonce
            });
        let ci = match again {
            Some(i) => {
                stats.connect_repeats.inc();
                i
            }
            None => {
                let tenant = match self.tenants.admit_open(
                    cred,
                    partition,
                    nonce,
                    &cf.src_mac,
                    cf.src_ip,
                    stats,
                ) {
                    Ok(t) => t,
                    Err(why) => return stats.drop(why),
                };
                let q = OpenedQp {
                    rkey: self.keys.next_u32(),
                    secret: self.keys.next_u64(),
                    tenant,
                    window: self.tenants.window(tenant, self.credits),
                };
                let Some((i, qpn)) = self.clients.open(q, self.now_s) else {
                    return stats.drop(DropReason::NoFreeQp);
                };
                self.tenants.count(tenant, 1);
                self.recent_opens
                    .remember(nonce, cf.src_mac, cf.src_ip, qpn);
                self.start_incarnation(i, nonce);
                stats.opens.inc();
                i
            }
        };
        let c = &self.clients.as_slice()[ci];
        let accept = Accept {
            nonce,
            credits: c.window,
            request_psn: c.start_psn,
            response_psn: c.start_resp_psn,
            slot_size: self.slot_size as u32,
            region_va: self.id.region_va,
            resumed: false,
            opened: Some(Opened {
                qpn: c.qpn,
                rkey: c.rkey,
                secret: c.secret,
            }),
        };
        let params = cf.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT);
        let (qpn, qkey, own) = (c.qpn, self.id.qkey, self.id.qpn);
        if super::conn::send_with(out.tx(), stats, |buf| {
            emit_accept(buf, &params, qpn, qkey, own, &accept)
        }) {
            stats.accepts_sent.inc();
        }
    }

    /// Handles a CLOSE of opened client `ci` carrying `secret` (not answered).
    pub(super) fn close<T: TxSink>(
        &mut self,
        ci: usize,
        secret: u64,
        chunk: &mut Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        let c = &self.clients.as_slice()[ci];
        if !c.is_opened() || c.secret != secret {
            return stats.drop(DropReason::BadSecret);
        }
        // Requests of this QP earlier in the burst are answered first.
        if pkts.iter().any(|p| usize::from(p.client) == ci) {
            self.finish_pending(chunk, pkts, stats, out);
        }
        self.close_opened(ci);
        stats.closes.inc();
    }

    /// Answers a frame to opened QPN `qpn` that is not live here with NAK "invalid
    /// request": the client learns its QP is gone (closed, reclaimed, or opened on a
    /// node it no longer talks to) and opens another.
    pub(super) fn nak_unknown_opened<T: TxSink>(
        &mut self,
        params: &kvwire::FrameParams,
        qpn: u32,
        psn: u32,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        let nak = Syndrome::Nak(NakCode::InvalidRequest);
        if super::conn::send_with(out.tx(), stats, |buf| {
            emit_ack(buf, params, qpn, psn, nak, 0)
        }) {
            stats.naks_sent.inc();
        }
        stats.drop(DropReason::UnknownQp);
    }

    /// Between bursts, about every 10 ms: takes the time (`now_s`, the worker's
    /// seconds), gives the tenants' counter slots to the current rules, and closes a few opened QPs idle for longer than
    /// `server.connection_idle_s` (counted `reclaims`). A client whose QP was
    /// reclaimed learns it from the NAK its next request gets.
    pub fn maintain(&mut self, now_s: u32, stats: &WorkerStats) {
        self.now_s = now_s;
        // The tenants' counter slots follow the rules (a no-op unless they changed).
        self.assign_tenant_slots(stats);
        self.tenants.publish_connections(stats);
        if self.idle_close_s == 0 {
            return;
        }
        for _ in 0..RECLAIM_PER_TICK {
            let Some(i) = self
                .clients
                .idle_opened(now_s, self.idle_close_s, SWEEP_PER_TICK)
            else {
                break;
            };
            self.close_opened(i);
            stats.reclaims.inc();
        }
    }

    /// Closes opened client `i`: logged for replicas, its tenant's count down.
    pub(super) fn close_opened(&mut self, i: usize) {
        self.log_closed(i);
        let tenant = self.clients.as_slice()[i].tenant;
        self.tenants.count(tenant, -1);
        self.clients.close(i);
    }

    /// Opened QPs live on this worker.
    pub fn opened_qps(&self) -> usize {
        self.clients.opened_count()
    }
}
