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
use crate::clients::{OpenedQp, Origin};
use crate::packet::{PktCtx, RESPONSE_UDP_SRC_PORT};
use crate::respond::Responder;
use crate::stats::WorkerStats;
use crate::tx::TxSink;
use kvwire::tenant;
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
/// NAK "invalid request" answers to refused frames of opened QPNs per second per
/// worker ([`Server::refuse_opened`]): enough for every client of a worker to learn
/// its QP was reclaimed within seconds, too few to map QPNs at line rate.
pub const REFUSALS_PER_S: u32 = 1024;

/// The refusal answers left this second.
#[derive(Debug)]
pub(crate) struct RefusalBudget {
    sec: u32,
    left: u32,
}

impl Default for RefusalBudget {
    /// No second begun yet: the first `take` starts one.
    fn default() -> Self {
        RefusalBudget {
            sec: u32::MAX,
            left: 0,
        }
    }
}

impl RefusalBudget {
    /// Takes one answer in second `now_s`; `false` when this second's are spent.
    fn take(&mut self, now_s: u32) -> bool {
        if self.sec != now_s {
            *self = RefusalBudget {
                sec: now_s,
                left: REFUSALS_PER_S,
            };
        }
        self.left.checked_sub(1).is_some_and(|l| {
            self.left = l;
            true
        })
    }
}

/// One remembered OPEN: who sent it, when (wall-clock ms), and the QP it got.
#[derive(Clone, Copy, Debug, Default)]
struct RecentOpen {
    nonce: u64,
    mac: MacAddr,
    ip: Option<Ipv4Addr>,
    qpn: u32,
    at_ms: u64,
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
    /// The QP the OPEN `nonce` from `mac`/`ip` got, if it came within the proof window
    /// ([`tenant::PROOF_WINDOW_MS`]) before `now_ms`: after that, a repeat is a new
    /// OPEN (a captured OPEN replayed later never gets the live QP's ACCEPT).
    fn find(&self, nonce: u64, mac: MacAddr, ip: Ipv4Addr, now_ms: u64) -> Option<u32> {
        self.ring
            .iter()
            .find(|r| {
                r.ip == Some(ip)
                    && r.nonce == nonce
                    && r.mac == mac
                    && now_ms.saturating_sub(r.at_ms) <= tenant::PROOF_WINDOW_MS
            })
            .map(|r| r.qpn)
    }

    fn remember(&mut self, nonce: u64, mac: MacAddr, ip: Ipv4Addr, qpn: u32, at_ms: u64) {
        self.ring[self.next] = RecentOpen {
            nonce,
            mac,
            ip: Some(ip),
            qpn,
            at_ms,
        };
        self.next = (self.next + 1) % RECENT_OPENS;
    }
}

impl Server {
    /// Handles an OPEN (already checked to be for this host): a new opened QP, or the
    /// same ACCEPT again for a repeated OPEN whose QP is still in its first
    /// incarnation — only within the proof window of the first, and only when the
    /// repeat itself proves the QP's tenant (a credential checked again) or, for an
    /// anonymous QP, comes anonymous.
    pub(super) fn open<T: TxSink>(
        &mut self,
        cf: &ConnectFrame,
        partition: u16,
        cred: Option<&TenantCredential>,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        if cf.dest_qp != CM_QPN {
            self.tenants.note_failure(&cf.src_mac, cf.src_ip);
            return stats.drop(DropReason::BadConnect);
        }
        if u32::from(partition) != self.partition {
            return stats.drop(DropReason::NoFreeQp);
        }
        let nonce = cf.connect.nonce;
        let tenant = match self.tenants.check_credential(
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
        let now = self.tenants.now_ms();
        let again = self
            .recent_opens
            .find(nonce, cf.src_mac, cf.src_ip, now)
            .and_then(|q| self.clients.find(q))
            .filter(|&i| {
                let c = &self.clients.as_slice()[i];
                c.connected && c.nonce == nonce && c.tenant == tenant
            });
        let ci = match again {
            Some(i) => {
                stats.connect_repeats.inc();
                i
            }
            None => match self.open_new(cf, tenant, now, stats) {
                Ok(i) => i,
                Err(why) => return stats.drop(why),
            },
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
            opened: Some(self.opened_for(c, cred, nonce)),
        };
        let params = cf.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT);
        let (qpn, qkey, own) = (c.qpn, self.id.qkey, self.id.qpn);
        if super::conn::send_with(out.tx(), stats, |buf| {
            emit_accept(buf, &params, qpn, qkey, own, &accept)
        }) {
            stats.accepts_sent.inc();
        }
    }

    /// What an ACCEPT says of opened QP `c`: for a tenant's OPEN (`cred`, nonce
    /// `nonce`) its connection secret sealed under the tenant's secret, so only the
    /// tenant's client learns it (docs/PROTOCOL.md §6.8).
    fn opened_for(
        &self,
        c: &crate::clients::Client,
        cred: Option<&TenantCredential>,
        nonce: u64,
    ) -> Opened {
        let pad = cred
            .and_then(|cr| self.tenants.secret_of(cr.id))
            .map(|s| tenant::seal_pad(s, nonce, c.qpn));
        Opened {
            qpn: c.qpn,
            rkey: c.rkey,
            secret: c.secret ^ pad.unwrap_or(0),
            sealed: pad.is_some(),
        }
    }

    /// Opens a new QP for tenant `tenant` (0: none; its credential checked) from
    /// `cf`'s source, bound to that source: its index, or why not (the tenant's
    /// quota, the reserves of others, no free QP).
    fn open_new(
        &mut self,
        cf: &ConnectFrame,
        tenant: u32,
        now_ms: u64,
        stats: &WorkerStats,
    ) -> Result<usize, DropReason> {
        let (live, total) = (self.clients.opened_count(), self.clients.opened_capacity());
        self.tenants
            .admit_connection(tenant, total.saturating_sub(live), total, stats)?;
        let q = OpenedQp {
            rkey: self.keys.next_u32(),
            secret: self.keys.next_u64(),
            tenant,
            window: self.tenants.window(tenant, self.credits),
            origin: Some(Origin {
                mac: cf.src_mac,
                ip: cf.src_ip,
            }),
        };
        let (i, qpn) = self
            .clients
            .open(q, self.now_s)
            .ok_or(DropReason::NoFreeQp)?;
        self.tenants.count(tenant, 1);
        self.recent_opens
            .remember(cf.connect.nonce, cf.src_mac, cf.src_ip, qpn, now_ms);
        self.start_incarnation(i, cf.connect.nonce);
        stats.opens.inc();
        Ok(i)
    }

    /// Handles a CLOSE of opened client `ci` (its proof of the secret checked; not
    /// answered).
    pub(super) fn close<T: TxSink>(
        &mut self,
        ci: usize,
        chunk: &mut Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        if !self.clients.as_slice()[ci].is_opened() {
            return stats.drop(DropReason::BadSecret);
        }
        // Requests of this QP earlier in the burst are answered first.
        if pkts.iter().any(|p| usize::from(p.client) == ci) {
            self.finish_pending(chunk, pkts, stats, out);
        }
        self.close_opened(ci);
        stats.closes.inc();
    }

    /// Answers a refused frame to opened QPN `qpn` — not live here, or with a wrong
    /// R_Key or source (`why`) — with NAK "invalid request", the same for every reason
    /// so that no answer tells a live QPN from a closed one; a client whose QP is gone
    /// learns it so and opens another. At most [`REFUSALS_PER_S`] such answers a
    /// second per worker; beyond them the frame is dropped unanswered
    /// (`refusal_throttled`).
    pub(super) fn refuse_opened<T: TxSink>(
        &mut self,
        params: &kvwire::FrameParams,
        qpn: u32,
        psn: u32,
        why: DropReason,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        if !self.refusals.take(self.now_s) {
            return stats.drop(DropReason::RefusalThrottled);
        }
        let nak = Syndrome::Nak(NakCode::InvalidRequest);
        if super::conn::send_with(out.tx(), stats, |buf| {
            emit_ack(buf, params, qpn, psn, nak, 0)
        }) {
            stats.naks_sent.inc();
        }
        stats.drop(why);
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
