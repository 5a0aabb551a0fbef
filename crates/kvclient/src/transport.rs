//! The low-level reliable transport: [`Transport`] (see the crate documentation for
//! the design).

mod frames;
mod opened;
mod settings;

pub use settings::{Config, Stats};

use crate::pool::FramePool;
use crate::qp::{Qp, QpSpec, QpState, Slot};
use crate::{Credentials, Error, PacketIo};
use frames::{rehead, resend, send_close, send_join};
use hashbrown::HashMap;
use kvwire::payload::{req_field, ResponseReader};
use kvwire::psn;
use kvwire::transport::{
    parse_server_frame, rnr_timer_micros, slot_va, AcceptFrame, AckFrame, Due, NakCode, RtoPolicy,
    ServerFrame, Syndrome, MAX_CREDITS,
};
use kvwire::{
    emit_request_headers, finalize, request_frame_len, request_payload_capacity, FrameParams,
    Response, REQUEST_HEADER_LEN,
};
use opened::{not_executed, random_nonce};

/// Why [`Transport::send_with`] sent nothing. Nothing is consumed on an error:
/// the PSN, credit and frame buffer stay available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The QP is not connected.
    NotConnected,
    /// No credit: `W` requests are incomplete.
    NoCredit,
    /// Every frame buffer holds an in-flight request (`max_outstanding`).
    NoBuffer,
    /// The server answered RNR NAK: no transmission before its timer ran out.
    RnrHoldOff,
    /// The build closure returned `None`.
    Aborted,
    /// The build closure returned a length beyond the payload area, or a payload
    /// whose batch id is not the PSN.
    BadPayload,
    /// [`PacketIo::send`] refused the frame.
    IoBusy,
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for SendError {}

/// What [`Transport::poll`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event<'a> {
    /// The QP's ACCEPT arrived: requests may be sent.
    Connected {
        /// QP index.
        qp: usize,
    },
    /// One in-order, non-duplicate response frame of request `tag`: read it with
    /// [`ResponseReader`] (its `first_index` is the number of results delivered
    /// before for this request).
    Results {
        /// QP index.
        qp: usize,
        /// The request's tag.
        tag: u64,
        /// The response payload.
        payload: &'a [u8],
    },
    /// The last response frame of request `tag` arrived (after its `Results`).
    Complete {
        /// QP index.
        qp: usize,
        /// The request's tag.
        tag: u64,
        /// The request's PSN.
        psn: u32,
        /// Time of its first transmission (for latency).
        first_sent_ns: u64,
    },
    /// With resuming on: QP `qp`'s node stopped answering (a request given up after
    /// `max_retries`, or a RESUME unanswered as long). Its requests stay in flight
    /// for [`Transport::resume`], normally after pointing the QP at another node.
    Lost {
        /// QP index.
        qp: usize,
    },
    /// Request `tag` failed: its outcome is unknown (it may or may not have been
    /// executed, and some `Results` may have been delivered).
    Failed {
        /// QP index.
        qp: usize,
        /// The request's tag.
        tag: u64,
        /// Why.
        error: Error,
    },
}

/// The client half of protocol v2's reliable transport over many QPs.
///
/// Allocates at construction (frame pool, QP table) and when a connection is set
/// up (the ring of `W` slots, reused afterwards); nothing per packet.
///
/// Memory: per QP 144 bytes of state plus 40 bytes per window slot (`W` = 32:
/// 1424 bytes), and a shared pool of `max_outstanding` frame buffers of
/// `request_frame_len(request_payload_capacity(mtu))` bytes (1514 at MTU 1500).
#[derive(Debug)]
pub struct Transport {
    cfg: Config,
    qps: Vec<Qp>,
    by_qpn: HashMap<u32, usize>,
    pool: FramePool,
    stats: Stats,
    /// QPs with work for the next poll (an abort, or a resend asked for by a NAK):
    /// handled at once, whatever the number of QPs.
    urgent: Vec<usize>,
    /// When the next full scan of every QP's timers is due: timers are checked
    /// every [`Transport::scan_interval`], so a poll costs O(QPs) only that often.
    next_scan: u64,
    /// The timeout after progress, from the round-trip estimate over all QPs (they
    /// share the path to one server).
    rto: RtoPolicy,
    /// Keep requests for a RESUME when a node stops answering ([`Transport::set_resume`]).
    resume: bool,
    /// The tenant credential of this client's OPENs ([`Transport::set_credentials`]).
    creds: Option<Credentials>,
}

impl Transport {
    /// A transport for client QPs `qps` (`(qpn, rkey)` as admitted by the
    /// operator), all sending with `params` (see [`Transport::set_frame_params`]).
    pub fn new(cfg: Config, qps: &[(u32, u32)], params: FrameParams) -> Transport {
        let specs: Vec<QpSpec> = qps
            .iter()
            .map(|&(qpn, rkey)| QpSpec::Static { qpn, rkey })
            .collect();
        Self::with_qps(cfg, &specs, params)
    }

    /// A transport for client QPs `qps`: static ones, and ones the server opens on
    /// each connect (docs/PROTOCOL.md §6.1), all sending with `params`.
    pub fn with_qps(cfg: Config, qps: &[QpSpec], params: FrameParams) -> Transport {
        let frame_cap = request_frame_len(request_payload_capacity(cfg.mtu));
        let qps: Vec<Qp> = qps
            .iter()
            .map(|&spec| Qp::new(spec, params, cfg.rto_initial_ns))
            .collect();
        let n = qps.len();
        Transport {
            cfg,
            by_qpn: qps
                .iter()
                .enumerate()
                .filter(|(_, q)| q.open_partition.is_none())
                .map(|(i, q)| (q.qpn, i))
                .collect(),
            qps,
            pool: FramePool::new(cfg.max_outstanding, frame_cap),
            stats: Stats::default(),
            urgent: Vec::with_capacity(n),
            next_scan: 0,
            rto: RtoPolicy::adaptive(cfg.rto_initial_ns, cfg.rto_min_ns, cfg.rto_max_ns),
            resume: false,
            creds: None,
        }
    }

    /// Opens QPs for tenant `creds` (docs/PROTOCOL.md §6.8): every OPEN carries its
    /// id and a proof made with its secret.
    pub fn set_credentials(&mut self, creds: Option<Credentials>) {
        self.creds = creds;
    }

    /// With `on`, a QP whose request times out after `max_retries` is not failed:
    /// it becomes [`QpState::Lost`] (an [`Event::Lost`]) with its requests kept, for
    /// [`Transport::resume`] on another node of a replicated cluster
    /// (docs/PROTOCOL.md §6.6).
    pub fn set_resume(&mut self, on: bool) {
        self.resume = on;
    }

    /// Continues QP `qp`'s incarnation where its frame parameters now point: a
    /// RESUME (same nonce) naming the oldest request in flight (or the next PSN),
    /// retransmitted every `connect_timeout_ns` until an ACCEPT comes. The ACCEPT
    /// says whether the node went on (the requests in flight are resent there, to be
    /// answered from completion records or executed) or started a new incarnation
    /// (they fail with [`Error::ConnectionLost`]: outcome unknown). After
    /// `max_retries` unanswered RESUMEs the QP is lost again.
    pub fn resume<I: PacketIo + ?Sized>(&mut self, qp: usize, io: &mut I, now_ns: u64) {
        let q = &mut self.qps[qp];
        if q.credits == 0 {
            // Never connected: nothing to continue.
            return self.connect(qp, io, now_ns);
        }
        q.state = QpState::Resuming;
        q.resume_tries = 0;
        q.abort = false;
        send_join(q, io, now_ns, &mut self.stats, true, self.creds.as_ref());
    }

    /// The retransmission timeout after progress: from the round-trip estimate once
    /// there is one, else the configured initial timeout.
    fn rto_base(&self) -> u64 {
        self.rto.base_ns()
    }

    /// The current retransmission timeout after progress (for reports and tests).
    pub fn rto_ns(&self) -> u64 {
        self.rto_base()
    }

    /// How often every QP's timers are checked: a quarter of the smallest RTO (at
    /// least 10 µs), so a retransmission is late by at most that much.
    fn scan_interval(&self) -> u64 {
        (self.cfg.rto_min_ns.min(self.cfg.rto_initial_ns) / 4).max(10_000)
    }

    /// Queues QP `i` for the next poll's urgent work (once).
    fn mark_urgent(&mut self, i: usize) {
        let q = &mut self.qps[i];
        if !q.urgent {
            q.urgent = true;
            self.urgent.push(i);
        }
    }

    /// Starts loading QP `qp`'s state (and the ring slot of its next request) into
    /// the cache: a caller spreading requests over thousands of QPs calls it for the
    /// QP it will use next, so that miss overlaps the current request's work.
    #[inline]
    pub fn prefetch(&self, qp: usize) {
        if let Some(q) = self.qps.get(qp) {
            crate::hint::prefetch_ref(q);
            if !q.ring.is_empty() {
                crate::hint::prefetch_ref(&q.ring[q.idx(q.next_psn)]);
            }
        }
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Number of QPs.
    pub fn qp_count(&self) -> usize {
        self.qps.len()
    }

    /// QPN of QP `qp`.
    pub fn qpn(&self, qp: usize) -> u32 {
        self.qps[qp].qpn
    }

    /// The addressing of QP `qp`'s frames.
    pub fn frame_params(&self, qp: usize) -> FrameParams {
        self.qps[qp].params
    }

    /// Sets the addressing of QP `qp`'s frames (e.g. its own UDP source port).
    pub fn set_frame_params(&mut self, qp: usize, params: FrameParams) {
        self.qps[qp].params = params;
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Connection state of QP `qp`.
    pub fn state(&self, qp: usize) -> QpState {
        self.qps[qp].state
    }

    /// True if QP `qp` is connected.
    pub fn is_connected(&self, qp: usize) -> bool {
        self.qps[qp].state == QpState::Connected
    }

    /// True if every QP is connected.
    pub fn all_connected(&self) -> bool {
        self.qps.iter().all(|q| q.state == QpState::Connected)
    }

    /// Requests of QP `qp` in flight.
    pub fn in_flight(&self, qp: usize) -> usize {
        usize::from(self.qps[qp].in_flight)
    }

    /// Requests in flight on all QPs.
    pub fn total_in_flight(&self) -> usize {
        self.cfg.max_outstanding - self.pool.available()
    }

    /// Window `W` granted to QP `qp` (0 before its first ACCEPT).
    pub fn credits(&self, qp: usize) -> u16 {
        self.qps[qp].credits
    }

    /// The PSN the next request of QP `qp` will carry.
    pub fn next_psn(&self, qp: usize) -> u32 {
        self.qps[qp].next_psn
    }

    /// Largest request payload of QP `qp`: the MTU's request capacity, at most its
    /// slot size (0 before its first ACCEPT).
    pub fn payload_capacity(&self, qp: usize) -> usize {
        let q = &self.qps[qp];
        request_payload_capacity(self.cfg.mtu).min(q.slot_size as usize)
    }

    /// Sends a CONNECT on every QP that is not connected or connecting.
    pub fn connect_all<I: PacketIo + ?Sized>(&mut self, io: &mut I, now_ns: u64) {
        for i in 0..self.qps.len() {
            if matches!(self.qps[i].state, QpState::Idle | QpState::Failed) {
                self.connect(i, io, now_ns);
            }
        }
    }

    /// Starts a new incarnation of QP `qp`: a CONNECT with a nonce larger than the
    /// previous one (`now_ns`, or previous + 1). Requests still in flight are
    /// reported [`Error::ConnectionLost`] at the next [`Transport::poll`]. A lost
    /// CONNECT is retransmitted by `poll` every `connect_timeout_ns`.
    pub fn connect<I: PacketIo + ?Sized>(&mut self, qp: usize, io: &mut I, now_ns: u64) {
        let q = &mut self.qps[qp];
        if q.in_flight > 0 {
            q.abort = true;
            self.mark_urgent(qp);
        }
        let q = &mut self.qps[qp];
        if q.open_partition.is_some() {
            // A new QP replaces the old one, which is closed.
            self.by_qpn.remove(&q.qpn);
            send_close(q, io);
            q.qpn = 0;
            q.nonce = random_nonce(now_ns, qp);
        } else {
            q.nonce = now_ns.max(q.nonce + 1);
        }
        q.state = QpState::Connecting;
        send_join(q, io, now_ns, &mut self.stats, false, self.creds.as_ref());
    }

    /// True if a request may be sent on QP `qp` now: connected, a credit and a
    /// frame buffer free, not in an RNR hold-off.
    pub fn can_send(&self, qp: usize, now_ns: u64) -> bool {
        let q = &self.qps[qp];
        q.state == QpState::Connected
            && !q.abort
            && q.has_credit()
            && self.pool.available() > 0
            && !q.rec.blocks_new(now_ns)
    }

    /// Frames and sends one request on QP `qp`. `build` gets the payload area
    /// (at most [`Transport::payload_capacity`] bytes) and the batch id to use (=
    /// the PSN), writes the KV batch and returns its length, or `None` to send
    /// nothing. The frame is kept for retransmission until the request
    /// completes. Returns the PSN.
    pub fn send_with<I: PacketIo + ?Sized>(
        &mut self,
        io: &mut I,
        qp: usize,
        now_ns: u64,
        tag: u64,
        build: impl FnOnce(&mut [u8], u32) -> Option<usize>,
    ) -> Result<u32, SendError> {
        let cap = self.payload_capacity(qp);
        let q = &mut self.qps[qp];
        if q.state != QpState::Connected || q.abort {
            return Err(SendError::NotConnected);
        }
        if q.rec.blocks_new(now_ns) {
            return Err(SendError::RnrHoldOff);
        }
        if !q.has_credit() {
            return Err(SendError::NoCredit);
        }
        let b = self.pool.alloc().ok_or(SendError::NoBuffer)?;
        let psn = q.next_psn;
        let frame = self.pool.buf_mut(b);
        let built = build(
            &mut frame[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + cap],
            psn,
        );
        let len = match built {
            None => Err(SendError::Aborted),
            Some(n) if n > cap || n < req_field::BATCH_ID.end => Err(SendError::BadPayload),
            Some(n) => {
                let payload = &frame[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + n];
                // A transaction's batch id is in its embedded batch (PROTOCOL.md §3.4).
                let id = if kvwire::payload::is_tx_payload(payload) {
                    kvwire::payload::tx_batch_id(payload)
                } else {
                    let b = &payload[req_field::BATCH_ID];
                    Some(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
                };
                if id != Some(psn) {
                    Err(SendError::BadPayload)
                } else {
                    let va = slot_va(q.region_va, u64::from(q.slot_size), q.credits, psn);
                    emit_request_headers(frame, &q.params, q.qpn, psn, va, q.rkey, n)
                        .and_then(|_| finalize(frame))
                        .map_err(|_| SendError::BadPayload)
                }
            }
        };
        let len = match len {
            Ok(l) => l,
            Err(e) => {
                self.pool.release(b);
                return Err(e);
            }
        };
        if !io.send(self.pool.frame(b, len)) {
            self.pool.release(b);
            return Err(SendError::IoBusy);
        }
        q.rec.on_send(now_ns, q.in_flight == 0);
        let i = q.idx(psn);
        q.ring[i] = Slot {
            tag,
            first_sent: now_ns,
            last_sent: now_ns,
            psn,
            buf: b,
            len: len as u16,
            received: 0,
            retries: 0,
            busy: true,
            resent: false,
        };
        q.in_flight += 1;
        q.next_psn = psn::add(psn, 1);
        self.stats.sent += 1;
        Ok(psn)
    }

    /// Receives one burst from `io` and handles it (ACCEPTs, responses, ACKs and
    /// NAKs), then runs the timers: CONNECT retransmission, resends asked for by
    /// NAKs once any RNR hold-off is over, and retransmission timeouts.
    pub fn poll<I: PacketIo + ?Sized>(
        &mut self,
        io: &mut I,
        now_ns: u64,
        on_event: &mut impl FnMut(Event<'_>),
    ) {
        self.run_urgent(io, now_ns, on_event);
        io.recv(&mut |frame| self.handle_frame(frame, now_ns, on_event));
        self.run_urgent(io, now_ns, on_event);
        if now_ns >= self.next_scan {
            self.next_scan = now_ns + self.scan_interval();
            for i in 0..self.qps.len() {
                self.run_timers(i, io, now_ns, on_event);
            }
        }
    }

    /// Aborts and NAK-driven resends queued since the last poll.
    fn run_urgent<I: PacketIo + ?Sized>(
        &mut self,
        io: &mut I,
        now_ns: u64,
        on_event: &mut impl FnMut(Event<'_>),
    ) {
        while let Some(i) = self.urgent.pop() {
            self.qps[i].urgent = false;
            if self.qps[i].abort {
                self.fail_all(i, Error::ConnectionLost, on_event);
            }
            self.run_timers(i, io, now_ns, on_event);
        }
    }

    fn run_timers<I: PacketIo + ?Sized>(
        &mut self,
        i: usize,
        io: &mut I,
        now: u64,
        on_event: &mut impl FnMut(Event<'_>),
    ) {
        let cfg = self.cfg;
        let q = &mut self.qps[i];
        match q.state {
            QpState::Connecting => {
                if now >= q.connect_sent + cfg.connect_timeout_ns {
                    send_join(q, io, now, &mut self.stats, false, self.creds.as_ref());
                }
                return;
            }
            QpState::Resuming => {
                if now >= q.connect_sent + cfg.connect_timeout_ns {
                    if q.resume_tries >= cfg.max_retries {
                        q.state = QpState::Lost;
                        on_event(Event::Lost { qp: i });
                    } else {
                        send_join(q, io, now, &mut self.stats, true, self.creds.as_ref());
                    }
                }
                return;
            }
            QpState::Connected => {}
            _ => return,
        }
        match q.rec.due(now, q.in_flight > 0) {
            Due::Wait | Due::Nothing => return,
            Due::Resend(from) => {
                resend(q, &self.pool, &mut self.stats, io, now, from, false);
                return;
            }
            Due::Timeout => {}
        }
        self.stats.timeouts += 1;
        let oldest = q.ring[q.idx(q.una)];
        if oldest.retries >= cfg.max_retries
            && now.saturating_sub(oldest.first_sent) >= cfg.give_up_ns
        {
            if self.resume {
                // Kept for a RESUME (normally on another node).
                q.state = QpState::Lost;
                on_event(Event::Lost { qp: i });
                return;
            }
            self.fail_all(i, Error::Timeout, on_event);
            return;
        }
        q.rec.back_off(now, cfg.rto_max_ns);
        let una = q.una;
        resend(q, &self.pool, &mut self.stats, io, now, una, true);
    }

    /// Fails every in-flight request of QP `i` (the oldest with `first`, the others
    /// with [`Error::ConnectionLost`]) and marks the QP failed.
    fn fail_all(&mut self, i: usize, first: Error, on_event: &mut impl FnMut(Event<'_>)) {
        let q = &mut self.qps[i];
        q.abort = false;
        if q.state != QpState::Connecting {
            q.state = QpState::Failed;
        }
        let mut error = first;
        let mut p = q.una;
        while q.in_flight > 0 && p != q.next_psn {
            let k = q.idx(p);
            let s = &mut q.ring[k];
            if s.busy && s.psn == p {
                s.busy = false;
                q.in_flight -= 1;
                self.pool.release(s.buf);
                self.stats.failed += 1;
                on_event(Event::Failed {
                    qp: i,
                    tag: s.tag,
                    error,
                });
                if error != Error::NotExecuted {
                    error = Error::ConnectionLost;
                }
            }
            p = psn::add(p, 1);
        }
        q.una = q.next_psn;
        q.rec.clear();
    }

    fn handle_frame(&mut self, frame: &[u8], now: u64, on_event: &mut impl FnMut(Event<'_>)) {
        match parse_server_frame(frame) {
            Ok(ServerFrame::Response(r)) => self.on_response(&r, now, on_event),
            Ok(ServerFrame::Accept(a)) => self.on_accept(&a, on_event),
            Ok(ServerFrame::Ack(a)) => self.on_ack(&a, now, on_event),
            Err(_) => self.stats.bad_frames += 1,
        }
    }

    fn qp_of(&mut self, qpn: u32) -> Option<usize> {
        let i = self.by_qpn.get(&qpn).copied();
        if i.is_none() {
            self.stats.stale_frames += 1;
        }
        i
    }

    fn on_accept(&mut self, a: &AcceptFrame, on_event: &mut impl FnMut(Event<'_>)) {
        let Some(i) = self
            .by_qpn
            .get(&a.dest_qp)
            .copied()
            .or_else(|| self.opening(a))
        else {
            self.stats.stale_frames += 1;
            return;
        };
        let rto_base = self.rto_base();
        let q = &mut self.qps[i];
        let acc = a.accept;
        if acc.nonce != q.nonce {
            self.stats.stale_frames += 1;
            return;
        }
        if q.state != QpState::Connecting && q.state != QpState::Resuming {
            self.stats.dup_frames += 1;
            return;
        }
        let w = acc.credits;
        if !w.is_power_of_two() || w > MAX_CREDITS || acc.slot_size < 64 {
            self.stats.bad_frames += 1;
            return;
        }
        if q.state == QpState::Resuming {
            let from = if q.in_flight > 0 { q.una } else { q.next_psn };
            if acc.resumed && w == q.credits && acc.request_psn == from {
                // The incarnation goes on at this node: the requests in flight are
                // re-addressed and resent (answered from completion records there,
                // or executed).
                q.slot_size = acc.slot_size;
                q.region_va = acc.region_va;
                rehead(q, &mut self.pool);
                q.rec.restart(rto_base);
                if q.in_flight > 0 {
                    q.rec.resend_from(q.una, q.una);
                }
                q.state = QpState::Connected;
                self.stats.resumed += 1;
                self.mark_urgent(i);
                on_event(Event::Connected { qp: i });
                return;
            }
            self.stats.resume_refused += 1;
        }
        // Failures of the previous incarnation first.
        if q.in_flight > 0 {
            self.fail_all(i, Error::ConnectionLost, on_event);
        }
        let q = &mut self.qps[i];
        q.credits = w;
        q.slot_size = acc.slot_size;
        q.region_va = acc.region_va;
        q.next_psn = acc.request_psn;
        q.una = acc.request_psn;
        q.ring.clear();
        q.ring.resize(usize::from(w), Slot::default());
        q.rec.restart(rto_base);
        q.abort = false;
        q.state = QpState::Connected;
        on_event(Event::Connected { qp: i });
    }

    fn on_ack(&mut self, a: &AckFrame, now: u64, on_event: &mut impl FnMut(Event<'_>)) {
        let Some(i) = self.qp_of(a.dest_qp) else {
            return;
        };
        let q = &mut self.qps[i];
        if let Syndrome::Ack { .. } = a.syndrome {
            self.stats.acks += 1;
            return;
        }
        if q.state == QpState::Resuming
            && q.open_partition.is_some()
            && a.syndrome == Syndrome::Nak(NakCode::InvalidRequest)
        {
            // The node does not know the opened QP (no completion records of it): a
            // new one is opened; the requests in flight have an unknown outcome.
            self.stats.resume_refused += 1;
            self.fail_all(i, Error::ConnectionLost, on_event);
            return;
        }
        if q.state != QpState::Connected || q.abort || !q.in_window(a.psn) {
            self.stats.stale_frames += 1;
            return;
        }
        match a.syndrome {
            Syndrome::Ack { .. } => {}
            Syndrome::RnrNak { timer } => {
                self.stats.rnr_naks += 1;
                let wait = u64::from(rnr_timer_micros(timer)) * 1000;
                q.rec.on_rnr(q.una, a.psn, wait, now);
                // The resend waits for the hold-off: the periodic scan does it.
            }
            Syndrome::Nak(NakCode::PsnSequenceError) => {
                if !q.rec.on_nak(q.una, a.psn) {
                    self.stats.dup_frames += 1;
                    return;
                }
                self.stats.naks_seq += 1;
                self.mark_urgent(i);
            }
            Syndrome::Nak(_) => {
                self.stats.naks_invalid += 1;
                let error = if not_executed(q, a.psn) {
                    Error::NotExecuted
                } else {
                    Error::ConnectionLost
                };
                self.fail_all(i, error, on_event);
            }
        }
    }

    fn on_response(&mut self, r: &Response<'_>, now: u64, on_event: &mut impl FnMut(Event<'_>)) {
        let Some(i) = self.qp_of(r.dest_qp) else {
            return;
        };
        let Ok(rd) = ResponseReader::new(r.payload) else {
            self.stats.bad_frames += 1;
            return;
        };
        let q = &mut self.qps[i];
        let b = rd.batch_id();
        if q.state != QpState::Connected || b > kvwire::ib::MASK_24 {
            self.stats.stale_frames += 1;
            return;
        }
        if !q.in_window(b) {
            // Behind `una` by at most W: a duplicate of a completed request.
            let behind = psn::distance(b, q.una);
            if behind > 0 && behind <= i32::from(q.credits) {
                self.stats.dup_frames += 1;
            } else {
                self.stats.stale_frames += 1;
            }
            return;
        }
        let k = q.idx(b);
        let s = &mut q.ring[k];
        if !s.busy || s.psn != b {
            self.stats.dup_frames += 1;
            return;
        }
        let first = rd.first_index();
        if first < s.received {
            self.stats.dup_frames += 1;
            return;
        }
        if first > s.received {
            self.stats.gap_frames += 1;
            return;
        }
        s.received = s.received.wrapping_add(rd.result_count());
        // Progress on this request: its retry budget starts again.
        s.retries = 0;
        let (tag, first_sent, sent_once) = (s.tag, s.first_sent, s.last_sent == s.first_sent);
        if sent_once && !rd.more() {
            self.rto.sample(now.saturating_sub(first_sent));
        }
        // Progress: the timer restarts from the current estimate.
        let rto = self.rto_base();
        let q = &mut self.qps[i];
        let (una, in_flight) = (q.una, q.in_flight > 0);
        q.rec.on_progress(una, rto, now, in_flight);
        on_event(Event::Results {
            qp: i,
            tag,
            payload: r.payload,
        });
        if rd.more() {
            return;
        }
        let s = &mut q.ring[k];
        s.busy = false;
        self.pool.release(s.buf);
        q.in_flight -= 1;
        let una = q.una;
        q.advance_una();
        if q.una != una {
            q.later_done = 0;
        } else if q.in_flight > 0 {
            // Fast retransmit: the server answers in PSN order, so later requests
            // completing while the oldest does not means its response (or a frame
            // of it) was lost. After FAST_RETRANSMIT of them, resend from the
            // oldest at once (the server replays what it answered) instead of
            // waiting for the timer.
            q.later_done = q.later_done.saturating_add(1);
            if q.later_done == FAST_RETRANSMIT {
                self.stats.fast_retransmits += 1;
                q.rec.resend_from(q.una, una);
                self.mark_urgent(i);
            }
        }
        self.stats.completed += 1;
        on_event(Event::Complete {
            qp: i,
            tag,
            psn: b,
            first_sent_ns: first_sent,
        });
    }
}

/// Later requests completed while the oldest stays incomplete before it is resent
/// without waiting for the timer (TCP's duplicate-ACK threshold).
const FAST_RETRANSMIT: u8 = 3;
