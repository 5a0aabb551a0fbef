//! Protocol v2's connection and sequence rules on the server (docs/PROTOCOL.md §6):
//! CONNECT → ACCEPT, the request slot check, the PSN verdict (serve, NAK a gap once,
//! replay a duplicate, refuse with an RNR NAK when overloaded) and the RC Acknowledge
//! frames that go with them.

use super::resume::{self, Restored, ServeMark, INTENT_COST};
use super::Server;
use crate::chunk::Chunk;
use crate::packet::{Identity, PktCtx, RESPONSE_UDP_SRC_PORT};
use crate::repl::completion::NOT_RESUMING;
use crate::respond::Responder;
use crate::response_cache::{Entry, EntryState};
use crate::stats::WorkerStats;
use crate::tx::{TxFrame, TxSink};
use kvwire::frame::FrameParams;
use kvwire::psn::Arrival;
use kvwire::transport::{
    emit_accept, emit_ack, is_opened_qpn, slot_size, slot_va, Accept, ConnectFrame, Join, NakCode,
    Syndrome, DEFAULT_CREDITS, MAX_CREDITS,
};
use kvwire::{psn, request_payload_capacity, DropReason, EmitError, Request, Status};

pub use kvwire::transport::RNR_TIMER_OVERLOADED as RNR_TIMER;

/// Default opened QPs per worker (`server.max_connections`).
pub const DEFAULT_MAX_OPENED: usize = 16_384;
/// Default idle time before an opened QP is closed (`server.connection_idle_s`).
pub const DEFAULT_IDLE_CLOSE_S: u32 = 300;

/// Transport settings of a server (protocol v2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transport {
    /// The request window `W` per client QP (credits, replay entries per QP): a power
    /// of two in `1..=1024` (`server.credits`).
    pub credits: u16,
    /// Bytes of the worker's response cache (`server.replay_cache_kb` × 1024).
    pub replay_cache_bytes: usize,
    /// Seed of the PRNG that draws the starting PSNs of a QP's first connection.
    pub seed: u64,
    /// Opened QPs one worker keeps at most (`server.max_connections`).
    pub max_opened: usize,
    /// An opened QP without a frame from its client for this many seconds is closed
    /// (`server.connection_idle_s`; 0: never).
    pub idle_close_s: u32,
}

impl Default for Transport {
    /// `W` = 32, a 16 MiB response cache, seed 0, 16384 opened QPs per worker
    /// closed after 300 s idle.
    fn default() -> Self {
        Transport {
            credits: DEFAULT_CREDITS,
            replay_cache_bytes: 16 << 20,
            seed: 0,
            max_opened: DEFAULT_MAX_OPENED,
            idle_close_s: DEFAULT_IDLE_CLOSE_S,
        }
    }
}

impl Transport {
    /// Checks the settings against the server's identity; returns the slot size.
    pub fn check(&self, id: &Identity) -> Result<u64, String> {
        let w = self.credits;
        if w == 0 || w > MAX_CREDITS || !w.is_power_of_two() {
            return Err(format!(
                "credits must be a power of two in 1..={MAX_CREDITS}, not {w}"
            ));
        }
        let slot = slot_size(id.region_len, w);
        let need = request_payload_capacity(id.mtu) as u64;
        if slot < need || slot > u64::from(u32::MAX) {
            return Err(format!(
                "request region of {} B split into {w} slots gives {slot} B per slot; \
                 a request of MTU {} needs {need} B (and at most 4 GiB)",
                id.region_len, id.mtu
            ));
        }
        Ok(slot)
    }
}

/// Takes the worst case of `payload`'s post-images from `budget`; `false` (budget
/// unchanged) if it does not fit.
#[inline]
pub(super) fn reserve(budget: &mut usize, payload: &[u8], max_value_len: usize) -> bool {
    let need = crate::mutation::worst_case(payload, max_value_len);
    match budget.checked_sub(need) {
        Some(left) => {
            *budget = left;
            true
        }
        None => false,
    }
}

/// Takes from `budget` the tap room request `payload` needs: its post-images' worst
/// case and, when it may write and `log_intent`, its INTENT. `Some(logged)` (whether
/// an INTENT is to be logged), or `None` (budget unchanged) when it does not fit.
fn reserve_request(
    budget: &mut usize,
    payload: &[u8],
    max_value_len: usize,
    log_intent: bool,
) -> Option<bool> {
    let mut need = crate::mutation::worst_case(payload, max_value_len);
    let logged = need > 0 && log_intent;
    if logged {
        need += INTENT_COST;
    }
    *budget = budget.checked_sub(need)?;
    Some(logged)
}

/// Request `p` of client `c`, whose connection was resumed from completion records:
/// `None` if it was answered from them (its response sent again, not to be
/// executed), else how it is to be served (`Plain`: executed; `Unknown`: the old
/// master began it, every op answered OUTCOME_UNKNOWN).
#[allow(clippy::too_many_arguments)]
fn resumed_request<T: TxSink>(
    c: &mut crate::clients::Client,
    restored: Option<&crate::repl::completion::RestoredQp>,
    p: u32,
    tx: &mut T,
    params: &FrameParams,
    id: &crate::packet::Identity,
    ring: &crate::response_cache::Arena,
    stats: &WorkerStats,
) -> Option<ServeMark> {
    if psn::distance(p, c.resume_until) <= 0 {
        c.resume_until = NOT_RESUMING;
        return Some(ServeMark::Plain);
    }
    match resume::lookup(restored, c.nonce, p) {
        Restored::Execute => Some(ServeMark::Plain),
        Restored::Replay(e) => {
            if resume::replay_restored(tx, params, c.qpn, id, ring, &e, stats) {
                // The replay stands for the expected request.
                c.rx.restart(psn::add(e.psn, 1));
                stats.replays.inc();
                stats.restored_replays.inc();
                return None;
            }
            Some(ServeMark::Unknown)
        }
        Restored::Unknown => Some(ServeMark::Unknown),
    }
}

/// Whether the RESUME or CLOSE in `cf` proves connection secret `secret` (a CONNECT
/// or an OPEN proves nothing: `false`).
fn proves_secret(cf: &ConnectFrame, secret: u64) -> bool {
    match cf.join {
        Join::Resume {
            next_psn,
            proof: Some(p),
        } => p == cf.connect.resume_proof(next_psn, secret),
        Join::Close { proof } => proof == cf.connect.close_proof(secret),
        _ => false,
    }
}

/// splitmix64's output function.
const fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The starting (request, response) PSNs the PRNG in state `state` draws for the first
/// connection of QP `qpn`: `splitmix64(state + qpn)`, bits 0–23 and 32–55. A fresh
/// server's state is its [`Transport::seed`]; each draw advances it (`splitmix64`),
/// so a re-admitted QPN does not get its earlier PSNs again.
pub fn first_psns(state: u64, qpn: u32) -> (u32, u32) {
    let x = splitmix64(state.wrapping_add(u64::from(qpn)));
    (psn::add(x as u32, 0), psn::add((x >> 32) as u32, 0))
}

/// Writes an RC Acknowledge (MSN 0: not tracked) into a new tx frame and sends it;
/// `false` (counted) if it could not be.
fn send_ack<T: TxSink>(
    tx: &mut T,
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    syndrome: Syndrome,
    stats: &WorkerStats,
) -> bool {
    send_with(tx, stats, |buf| {
        emit_ack(buf, params, dest_qp, psn, syndrome, 0)
    })
}

/// Writes one frame with `emit` into a new tx frame and sends it.
pub(super) fn send_with<T: TxSink>(
    tx: &mut T,
    stats: &WorkerStats,
    emit: impl FnOnce(&mut [u8]) -> Result<usize, EmitError>,
) -> bool {
    let Some(mut f) = tx.alloc() else {
        stats.drop(DropReason::NoMbuf);
        return false;
    };
    match emit(f.room()) {
        Ok(n) => {
            f.set_len(n);
            tx.send(f);
            true
        }
        Err(_) => {
            stats.drop(DropReason::TxBufferTooSmall);
            false
        }
    }
}

impl Server {
    /// Handles a connection payload: OPEN and CLOSE (`open.rs`), CONNECT and RESUME.
    pub(super) fn connect<T: TxSink>(
        &mut self,
        cf: &ConnectFrame,
        chunk: &mut Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        if !self.for_us(cf.dst_mac, cf.dst_ip) {
            return stats.drop(DropReason::WrongDestination);
        }
        if let Join::Open { partition, tenant } = &cf.join {
            return self.open(cf, *partition, tenant.as_ref(), stats, out);
        }
        let ci = match self.clients.find(cf.dest_qp) {
            None => Err(DropReason::UnknownQp),
            Some(ci) => {
                let c = &self.clients.as_slice()[ci];
                if c.rkey != cf.connect.rkey {
                    Err(DropReason::BadRKey)
                } else if !self.source_ok(c, cf.src_mac, cf.src_ip) {
                    Err(DropReason::WrongSource)
                } else {
                    Ok(ci)
                }
            }
        };
        let ci = match ci {
            Ok(ci) => ci,
            // An opened QPN not live, or with a wrong R_Key or source: answered alike
            // (a CLOSE never is; a RESUME only where writes are taken).
            Err(why)
                if is_opened_qpn(cf.dest_qp)
                    && !(cf.resume().is_some() && self.write_status != Status::Ok)
                    && !matches!(cf.join, Join::Close { .. }) =>
            {
                let params = cf.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT);
                return self.refuse_opened(&params, cf.dest_qp, 0, why, stats, out);
            }
            Err(why) => return stats.drop(why),
        };
        let c = &self.clients.as_slice()[ci];
        // An opened QP is only resumed or closed, and only with a proof of its
        // secret (the secret itself never travels after the ACCEPT).
        if c.is_opened() && !proves_secret(cf, c.secret) {
            return stats.drop(DropReason::BadSecret);
        }
        self.clients.as_mut_slice()[ci].last_active = self.now_s;
        match cf.join {
            Join::Close { .. } => self.close(ci, chunk, pkts, stats, out),
            _ => self.join(ci, cf, chunk, pkts, stats, out),
        }
    }

    /// A CONNECT or RESUME of client `ci` (checked): a new incarnation (larger nonce,
    /// the QP's first, or a RESUME with nothing to continue), the incarnation going on
    /// (RESUME), a lost ACCEPT (same nonce: the same ACCEPT again) or a stale one
    /// (dropped).
    fn join<T: TxSink>(
        &mut self,
        ci: usize,
        cf: &ConnectFrame,
        chunk: &mut Chunk<'_>,
        pkts: &[PktCtx],
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) {
        let nonce = cf.connect.nonce;
        // A RESUME (docs/PROTOCOL.md §6.6): the connection goes on, or (no state for
        // it here) a new incarnation starts as for a CONNECT.
        let mut resumed = false;
        if let Some(next) = cf.resume() {
            if pkts.iter().any(|p| usize::from(p.client) == ci) {
                self.finish_pending(chunk, pkts, stats, out);
            }
            match self.resume(ci, nonce, next) {
                None if self.write_status != Status::Ok => {
                    return stats.drop(DropReason::ResumeNotMaster);
                }
                None => return stats.drop(DropReason::StaleConnect),
                Some(true) => {
                    resumed = true;
                    stats.resumes.inc();
                }
                // An opened QP has one incarnation: a RESUME that would begin
                // another (its nonce is not the QP's) is refused.
                Some(false) if self.clients.as_slice()[ci].is_opened() => {
                    return stats.drop(DropReason::BadSecret);
                }
                Some(false) => {}
            }
        }
        let c = &self.clients.as_slice()[ci];
        if !resumed && c.connected && nonce < c.nonce {
            return stats.drop(DropReason::StaleConnect);
        }
        if resumed {
            // Answered below with the PSNs it goes on at.
        } else if !c.connected || nonce > c.nonce || cf.resume().is_some() {
            // Requests of the old incarnation earlier in this burst are answered
            // first, under the old incarnation's response PSNs.
            if pkts.iter().any(|p| usize::from(p.client) == ci) {
                self.finish_pending(chunk, pkts, stats, out);
            }
            self.start_incarnation(ci, nonce);
            stats.connects.inc();
        } else {
            // The same nonce again: its ACCEPT was lost; the same ACCEPT goes again.
            stats.connect_repeats.inc();
        }
        let c = &self.clients.as_slice()[ci];
        let accept = Accept {
            nonce,
            credits: c.window,
            // A resumed connection goes on at the client's next PSN, with this
            // node's next response PSN.
            request_psn: match (resumed, cf.resume()) {
                (true, Some(next)) => next,
                _ => c.start_psn,
            },
            response_psn: if resumed {
                c.resp_psn
            } else {
                c.start_resp_psn
            },
            slot_size: self.slot_size as u32,
            region_va: self.id.region_va,
            resumed,
            opened: None,
        };
        let params = cf.reply_params(self.id.mac, self.id.ip, RESPONSE_UDP_SRC_PORT);
        let (qpn, qkey, own) = (c.qpn, self.id.qkey, self.id.qpn);
        if send_with(out.tx(), stats, |buf| {
            emit_accept(buf, &params, qpn, qkey, own, &accept)
        }) {
            stats.accepts_sent.inc();
        }
    }

    /// Starts incarnation `nonce` of client `ci`: the old one's state and saved
    /// responses are discarded; the starting PSNs move half the PSN space from where
    /// the old incarnation stood, or are drawn for the QP's first; logged for
    /// replicas (completion records).
    pub(super) fn start_incarnation(&mut self, ci: usize, nonce: u64) {
        let c = &self.clients.as_slice()[ci];
        let (req, resp) = if c.connected {
            (
                psn::add(c.rx.expected(), psn::HALF),
                psn::add(c.resp_psn, psn::HALF),
            )
        } else {
            let psns = first_psns(self.rng, c.qpn);
            self.rng = splitmix64(self.rng);
            psns
        };
        let c = &mut self.clients.as_mut_slice()[ci];
        c.nonce = nonce;
        c.connected = true;
        c.rx.restart(req);
        c.start_psn = req;
        c.resp_psn = resp;
        c.start_resp_psn = resp;
        c.resume_until = NOT_RESUMING;
        c.last_active = self.now_s;
        c.replay.fill(Entry::EMPTY);
        self.log_incarnation(ci);
    }

    /// The connection, slot and PSN rules for a request of client `ci`: `true` to
    /// serve it (the expected PSN has advanced past it); otherwise it was answered
    /// (replay, NAK) and/or counted under a drop reason.
    #[inline]
    pub(super) fn sequence<T: TxSink>(
        &mut self,
        req: &Request<'_>,
        ci: usize,
        stats: &WorkerStats,
        out: &mut Responder<'_, '_, T>,
    ) -> bool {
        self.serve = ServeMark::Plain;
        let id = &self.id;
        let (c, restored) = self.clients.with_restored(ci);
        let params = || req.reply_params(id.mac, id.ip, RESPONSE_UDP_SRC_PORT);
        if !c.connected {
            let nak = Syndrome::Nak(NakCode::InvalidRequest);
            if send_ack(out.tx(), &params(), c.qpn, req.psn, nak, stats) {
                stats.naks_sent.inc();
            }
            stats.drop(DropReason::NotConnected);
            return false;
        }
        // The client's window: the server's credits, or its tenant's smaller one.
        let slot = slot_va(id.region_va, self.slot_size, c.window, req.psn);
        if req.va != slot || req.payload.len() as u64 > self.slot_size {
            stats.drop(DropReason::BadVa);
            return false;
        }
        let e = c.rx.expected();
        let arrival = c.rx.arrival(req.psn, u32::from(c.window));
        if arrival == Arrival::Expected {
            // A connection resumed across a failover: a request the old master
            // executed is answered from its completion records, never executed again.
            let mut mark = ServeMark::Plain;
            if c.resume_until != NOT_RESUMING && self.write_status == Status::Ok {
                let ring = &self.restored_ring;
                match resumed_request(c, restored, req.psn, out.tx(), &params(), id, ring, stats) {
                    Some(m) => mark = m,
                    None => return false,
                }
            }
            // A tap without room for this packet's post-images refuses it like a tx
            // backlog (crate::mutation): nothing is executed that it could not log.
            // A request that may write also logs its INTENT on a master that keeps
            // completion records.
            let mut tap_full = false;
            if mark != ServeMark::Unknown && self.tap.is_some() && !out.tx().backlogged() {
                let log = self.completions && self.write_status == Status::Ok;
                let max = self.engine.max_value_len();
                match reserve_request(&mut self.tap_budget, req.payload, max, log) {
                    Some(true) => mark = ServeMark::Logged,
                    Some(false) => {}
                    None => {
                        tap_full = true;
                        stats.tap_full.inc();
                    }
                }
            }
            let refused = if tap_full || out.tx().backlogged() {
                Some(DropReason::Overloaded)
            } else if c.tenant != 0 && !self.tenants.take_request(c.tenant, self.burst_ms, stats) {
                // Over its tenant's rate: refused like an overload, served on resend.
                Some(DropReason::OverQuota)
            } else {
                None
            };
            if let Some(why) = refused {
                if c.rx.nak_due() {
                    let rnr = Syndrome::RnrNak { timer: RNR_TIMER };
                    if send_ack(out.tx(), &params(), c.qpn, e, rnr, stats) {
                        stats.rnr_naks_sent.inc();
                        c.rx.naked();
                    }
                }
                stats.drop(why);
                return false;
            }
            c.rx.accept();
            c.last_active = self.now_s;
            if mark == ServeMark::Logged {
                self.log_intent(ci, req.psn);
            }
            self.serve = mark;
            return true;
        }
        if arrival == Arrival::Stale {
            // Outside the window both ways: an old duplicate, or a stale packet of an
            // earlier incarnation (its PSNs are 2^23 away). A live client never sends
            // beyond its credits, so nothing legitimate is lost here.
            stats.drop(DropReason::PsnDuplicate);
            return false;
        }
        if arrival == Arrival::Ahead {
            if c.rx.nak_due() {
                let nak = Syndrome::Nak(NakCode::PsnSequenceError);
                if send_ack(out.tx(), &params(), c.qpn, e, nak, stats) {
                    stats.naks_sent.inc();
                    c.rx.naked();
                }
            }
            stats.drop(DropReason::PsnAhead);
            return false;
        }
        let entry = *c.entry(req.psn);
        match entry.state {
            EntryState::Ready if entry.psn == req.psn => {
                if !out.replay(&entry, stats) {
                    stats.drop(DropReason::ReplayMissing);
                }
            }
            // Its original is in this burst and not answered yet: that answer is the
            // one the client gets.
            EntryState::Pending if entry.psn == req.psn => stats.drop(DropReason::PsnDuplicate),
            // A request answered from completion records is answered from them again.
            _ => match resume::lookup(restored, c.nonce, req.psn) {
                Restored::Replay(e)
                    if resume::replay_restored(
                        out.tx(),
                        &params(),
                        c.qpn,
                        id,
                        &self.restored_ring,
                        &e,
                        stats,
                    ) =>
                {
                    stats.replays.inc();
                    stats.restored_replays.inc();
                }
                _ => stats.drop(DropReason::ReplayMissing),
            },
        }
        false
    }
}
