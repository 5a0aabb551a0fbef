//! The master's replication lcore (SKV's Nic-KV): drains the workers' log rings into
//! one ordered stream (the backlog), answers replicas' HELLOs with a partial or full
//! resync, ships the stream to each replica as RC WRITE WITH IMMEDIATE segments
//! (`kvrepl::shipper`), probes them, and opens or closes the write gate the workers
//! read (min-replicas within max-lag). The workers only ever push into their rings.
//!
//! One replica per replication link; the link index is the peer index.

use super::link::{send_control, LinkTx, ReplLogic};
use super::replica::{REPL_QPN, REPL_UDP_PORT};
use super::scan::ScanShared;
use super::status::{LinkDrop, PeerState, ReplStatus, RoleCode, MAX_PEERS};
use crate::repl::gate::WriteGate;
use kvrepl::backlog::Backlog;
use kvrepl::log::{GroupWindow, LogConsumer, LogItem};
use kvrepl::messages::{Control, Hello, Probe, Welcome, WelcomeMode};
use kvrepl::progress::{
    DurableCursor, GateConfig, Liveness, LivenessAction, Mode, ProbeConfig, ReplicaView,
};
use kvrepl::replica_state::{ReplicaEvent, ReplicaState};
use kvrepl::resync::{decide, Decision, FullSync, ReplIds};
use kvrepl::shipper::{ShipError, Shipper, ShipperConfig};
use kvwire::repl::{
    emit_write_imm_headers, parse_repl_frame, ReplFrame, WriteImmFields, WRITE_IMM_HEADER_LEN,
};
use kvwire::transport::{rnr_timer_micros, Syndrome};
use kvwire::{finalize, FrameParams, MacAddr};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Log items drained per worker per poll at most.
const DRAIN_PER_POLL: usize = 4096;
/// Worker rings a wait marker can name: the most partitions a cross-partition
/// transaction spans.
const MAX_WAIT_RINGS: usize = crate::server::MAX_PARTITIONS;
/// Drained batches remembered per worker for sync mode (older ones merge: a write
/// then waits a little longer, never less).
const DURABLE_DEPTH: usize = 4096;
/// Segments sent per replica per poll at most.
const SEGMENTS_PER_POLL: usize = 32;

/// Settings of a master node.
#[derive(Clone, Debug)]
pub struct MasterConfig {
    /// This node's id.
    pub node_id: u64,
    /// Its address on the replication links.
    pub mac: MacAddr,
    /// Its IPv4 address there.
    pub ip: Ipv4Addr,
    /// The epoch it is master at.
    pub epoch: u64,
    /// Its replication ids.
    pub ids: ReplIds,
    /// The stream offset it starts at: 0 for a new stream; a promoted replica
    /// continues its old master's offsets (`ids.previous`).
    pub start_offset: u64,
    /// Bytes of live stream kept for partial resyncs.
    pub backlog_bytes: usize,
    /// Bytes of a full sync's scan buffer.
    pub sync_bytes: usize,
    /// Write-gate rules.
    pub gate: GateConfig,
    /// Probe period and waiting time.
    pub probe: ProbeConfig,
    /// Segment size, window and retransmission.
    pub shipper: ShipperConfig,
    /// Chain topology: a replica counts for `min_replicas` and the sync quorum by
    /// the offset it reports applied (PROGRESS, which in a chain means its
    /// successors have it too), never by what it merely received.
    pub chain: bool,
    /// A master that started with nothing (fixed role, empty store: a crashed master
    /// restarted without `--load`): a replica holding data of another stream
    /// (replication id not 0 and not this master's, offset above 0) is left
    /// unanswered instead of fully resynced, which would replace the data it holds —
    /// writes the old master acknowledged — with this master's nothing
    /// (docs/REPLICATION.md §7.1).
    pub keep_foreign: bool,
}

/// A chain node's relay state: its stream is the one it receives, with the same
/// replication id and offsets ([`MasterNode::relay_append`]), so a successor can
/// resume from any node before it.
#[derive(Debug, Default)]
struct Relay {
    /// The live offset this node's workers applied (`None` while it is not
    /// streaming itself).
    applied: Option<u64>,
    /// The live offset the next full sync's scan starts at, once the workers
    /// applied that much: a scan must see everything before its start offset.
    sync_from: Option<u64>,
}

impl Relay {
    /// The live offset a scan session may start at now, `end` being the stream's end.
    fn scan_start(&mut self, end: u64) -> Option<u64> {
        let from = *self.sync_from.get_or_insert(end);
        match self.applied {
            Some(a) if a >= from => {
                self.sync_from = None;
                Some(from)
            }
            _ => None,
        }
    }
}

/// One replica (one link).
struct Peer {
    state: ReplicaState,
    shipper: Shipper,
    liveness: Liveness,
    /// The HELLO of its current connection.
    hello: Option<Hello>,
    /// Frame parameters toward it.
    params: Option<FrameParams>,
    /// Live offset its workers applied (PROGRESS), and when it said so.
    applied: u64,
    last_ack_ns: u64,
}

/// A master's replication logic.
pub struct MasterNode {
    cfg: MasterConfig,
    logs: Vec<LogConsumer>,
    scans: Vec<Arc<ScanShared>>,
    live: Backlog,
    sync: FullSync,
    session: u32,
    peers: Vec<Peer>,
    gate_rules: kvrepl::progress::GateRules,
    /// Sync mode: the workers' log positions the quorum has (`None`: async).
    durable: Option<DurableCursor>,
    gate: Arc<WriteGate>,
    status: Arc<ReplStatus>,
    /// `Some` on a chain node relaying its stream to its successor.
    relay: Option<Relay>,
    /// Records that could not enter the stream (a bug: never expected).
    pub stream_errors: u64,
}

impl MasterNode {
    /// A master over `links` links, draining `logs` (one per worker, whose scans
    /// `scans` drive).
    pub fn new(
        cfg: MasterConfig,
        links: usize,
        logs: Vec<LogConsumer>,
        scans: Vec<Arc<ScanShared>>,
        status: Arc<ReplStatus>,
        gate: Arc<WriteGate>,
        now_ns: u64,
    ) -> Result<MasterNode, String> {
        if links > MAX_PEERS {
            return Err(format!("at most {MAX_PEERS} replication links"));
        }
        if logs.len() != scans.len() || logs.is_empty() {
            return Err("one log ring and one scan state per worker".into());
        }
        status.set_role(RoleCode::Master);
        gate.set_following(false);
        status.epoch.store(cfg.epoch, Ordering::Relaxed);
        status.repl_id.store(cfg.ids.current, Ordering::Relaxed);
        status.links.store(links as u64, Ordering::Relaxed);
        let peers = (0..links)
            .map(|_| Peer {
                state: ReplicaState::Connecting,
                shipper: Shipper::new(cfg.shipper),
                liveness: Liveness::new(now_ns),
                hello: None,
                params: None,
                applied: 0,
                last_ack_ns: 0,
            })
            .collect();
        let nw = logs.len();
        let gate_rules = kvrepl::progress::GateRules::new(cfg.gate, links.max(1));
        // Scan sessions go on from the workers' last one (a node promoted twice).
        let session = scans
            .iter()
            .map(|s| s.request.load(Ordering::Acquire))
            .max()
            .unwrap_or(0);
        let mut m = MasterNode {
            live: Backlog::new(cfg.backlog_bytes, cfg.start_offset),
            sync: FullSync::new(cfg.sync_bytes, nw),
            session,
            logs,
            scans,
            peers,
            gate_rules,
            durable: (cfg.gate.mode == Mode::Sync).then(|| DurableCursor::new(nw, DURABLE_DEPTH)),
            gate,
            status,
            relay: None,
            stream_errors: 0,
            cfg,
        };
        m.update_gate(now_ns);
        Ok(m)
    }

    /// The end of the live stream (the offset of the next record).
    pub fn offset(&self) -> u64 {
        self.live.end()
    }

    /// The epoch it is master at.
    pub fn epoch(&self) -> u64 {
        self.cfg.epoch
    }

    /// The replication ids it serves.
    pub fn ids(&self) -> ReplIds {
        self.cfg.ids
    }

    /// Makes this a chain node's relay: the live stream is what [`Self::relay_append`]
    /// appends (the workers' rings carry only their scans), it starts with
    /// [`Self::relay_restart`], and a full sync's scan waits until the workers
    /// applied the stream up to its start offset ([`Self::relay_applied`]).
    pub fn into_relay(mut self) -> MasterNode {
        self.relay = Some(Relay::default());
        self.status.set_role(RoleCode::Replica);
        self
    }

    /// A relay's upstream welcomed it: the stream is now `repl_id` at `epoch`, from
    /// `start`. Every successor is told to join again (WELCOME refused: it resumes
    /// from its offset when the new stream still has it).
    pub fn relay_restart(&mut self, repl_id: u64, epoch: u64, start: u64, tx: &mut dyn LinkTx) {
        let Some(r) = self.relay.as_mut() else { return };
        *r = Relay::default();
        self.cfg.ids = ReplIds {
            current: repl_id,
            previous: None,
        };
        self.cfg.epoch = epoch;
        self.live.reset(start);
        self.sync.end();
        self.status.epoch.store(epoch, Ordering::Relaxed);
        self.status.repl_id.store(repl_id, Ordering::Relaxed);
        for link in 0..self.peers.len() {
            let p = &mut self.peers[link];
            if p.hello.is_none() {
                continue;
            }
            p.shipper.stop();
            // Not connected: its next PROGRESS is answered with a refusal too.
            p.state = ReplicaState::Connecting;
            self.welcome(tx, link, WelcomeMode::Refused, 0);
        }
    }

    /// A relay's upstream is on `link`: nothing of the relay goes there (in an
    /// etcd-managed chain, the successor may have been elected head and welcomed
    /// this node: a node cannot be both).
    pub fn forget_peer(&mut self, link: usize) {
        let Some(p) = self.peers.get_mut(link) else {
            return;
        };
        if p.hello.is_none() && p.params.is_none() {
            return;
        }
        p.shipper.stop();
        p.state = ReplicaState::Connecting;
        p.hello = None;
        p.params = None;
        p.applied = 0;
    }

    /// A relay's record of the live stream, in stream order.
    pub fn relay_append(&mut self, rec: &kvrepl::Record<'_>) {
        if self.live.append_record(rec).is_err() {
            self.stream_errors += 1;
        }
        self.status.records.fetch_add(1, Ordering::Relaxed);
    }

    /// A relay's workers applied the live stream up to `offset` (`None`: this node is
    /// not streaming).
    pub fn relay_applied(&mut self, offset: Option<u64>) {
        if let Some(r) = self.relay.as_mut() {
            r.applied = offset;
        }
    }

    /// The least live offset the online successors acknowledged, `None` when none
    /// is online: what a chain node may acknowledge upstream.
    pub fn downstream_floor(&self) -> Option<u64> {
        self.peers
            .iter()
            .filter(|p| p.state.counted())
            .map(|p| p.applied)
            .min()
    }

    /// Gives back the workers' log rings and scan states (the node changes role).
    pub fn into_parts(self) -> (Vec<LogConsumer>, Vec<Arc<ScanShared>>) {
        (self.logs, self.scans)
    }

    /// A WELCOME `Refused` for connection `nonce`, to `params` (no HELLO of it here).
    fn refuse(&self, tx: &mut dyn LinkTx, link: usize, nonce: u64, params: &FrameParams) {
        let w = self.welcome_msg(nonce, WelcomeMode::Refused, 0, 0);
        send_control(tx, link, params, &w);
    }

    fn welcome(&self, tx: &mut dyn LinkTx, link: usize, mode: WelcomeMode, offset: u64) {
        let p = &self.peers[link];
        let (Some(h), Some(params)) = (p.hello, p.params) else {
            return;
        };
        let w = self.welcome_msg(h.nonce, mode, offset, h.first_psn);
        send_control(tx, link, &params, &w);
    }

    /// A WELCOME of this node's stream for connection `nonce`.
    fn welcome_msg(&self, nonce: u64, mode: WelcomeMode, offset: u64, first_psn: u32) -> Control {
        Control::Welcome(Welcome {
            nonce,
            mode,
            repl_id: self.cfg.ids.current,
            epoch: self.cfg.epoch,
            offset,
            first_psn,
            node_id: self.cfg.node_id,
        })
    }

    /// Moves the workers' records into the live stream and the scan buffer. A ring
    /// whose next item is a wait for another ring (a cross-partition transaction,
    /// `kvrepl::log::LogItem::Wait`) stops there until that ring was drained far
    /// enough; the rings are passed over again while one waits and another moved.
    fn drain_logs(&mut self) -> bool {
        let mut any = false;
        let mut broken = false;
        // Positions drained so far, by ring: what a wait is checked against.
        let mut popped = [0u64; MAX_WAIT_RINGS];
        for (p, log) in popped.iter_mut().zip(&self.logs) {
            *p = log.popped();
        }
        for _pass in 0..self.logs.len().max(2) {
            let mut waiting = false;
            let mut moved = false;
            for (w, log) in self.logs.iter_mut().enumerate() {
                let (live, sync, errors) =
                    (&mut self.live, &mut self.sync, &mut self.stream_errors);
                let records = &self.status.records;
                // A transaction's records stay together in the stream (a replica
                // applies them as one: docs/REPLICATION.md §2).
                let mut win = GroupWindow::new(log.pending_bytes(), DRAIN_PER_POLL);
                let r = log.drain(usize::MAX, |item| {
                    if let LogItem::Wait { ring, position } = item {
                        // A ring index beyond the table was never pushed: not waited.
                        let ready = popped.get(ring as usize).is_none_or(|&p| p >= position);
                        waiting |= !ready;
                        return ready;
                    }
                    if !win.admit(&item, |_| true) {
                        return false;
                    }
                    let r = match item {
                        LogItem::Live(b) => {
                            if live.append(b).is_err() {
                                *errors += 1;
                            }
                            records.fetch_add(1, Ordering::Relaxed);
                            Ok(())
                        }
                        LogItem::Scan(b) => sync.on_scan(w, b),
                        LogItem::ScanBegin(s) => sync.on_scan_begin(w, s),
                        LogItem::ScanEnd(s) => sync.on_scan_end(w, s),
                        // Only a replica's apply rings carry spans.
                        LogItem::Wait { .. } | LogItem::Span { .. } => Ok(()),
                    };
                    broken |= r.is_err();
                    true
                });
                match r {
                    Ok(n) => {
                        any |= n > 0;
                        moved |= n > 0;
                        if n > 0 {
                            if let Some(c) = self.durable.as_mut() {
                                c.on_drained(w, log.popped(), live.end());
                            }
                        }
                    }
                    Err(_) => self.stream_errors += 1,
                }
                if let Some(p) = popped.get_mut(w) {
                    *p = log.popped();
                }
                let failed = self.scans[w].failed.load(Ordering::Acquire);
                broken |= self.sync.is_active() && failed == self.session && failed != 0;
            }
            if !(waiting && moved) {
                break;
            }
        }
        if broken {
            self.abandon_sync();
        }
        any
    }

    /// The scan session failed: its members wait for the next one.
    fn abandon_sync(&mut self) {
        self.sync.end();
        for p in &mut self.peers {
            if p.state == ReplicaState::FullSync {
                p.shipper.stop();
                p.state = p
                    .state
                    .on(ReplicaEvent::NeedFullSync)
                    .unwrap_or(ReplicaState::WaitFullSync);
            }
        }
    }

    /// Starts a scan session for the replicas waiting for one; ends a session no
    /// replica takes part in any more; refreshes the workers' scan grants.
    fn manage_sync(&mut self, tx: &mut dyn LinkTx) {
        let members = self
            .peers
            .iter()
            .filter(|p| p.state == ReplicaState::FullSync)
            .count();
        if self.sync.is_active() && members == 0 {
            self.sync.end();
        }
        let waiting = self
            .peers
            .iter()
            .any(|p| p.state == ReplicaState::WaitFullSync && p.hello.is_some());
        let live_from = match (&mut self.relay, !self.sync.is_active() && waiting) {
            (_, false) => None,
            (None, true) => Some(self.live.end()),
            (Some(r), true) => r.scan_start(self.live.end()),
        };
        if let Some(live_from) = live_from {
            self.session = self.session.wrapping_add(1).max(1);
            self.sync.begin(self.session, live_from);
            for w in &self.scans {
                w.request.store(self.session, Ordering::Release);
            }
            for link in 0..self.peers.len() {
                let p = &mut self.peers[link];
                if p.state != ReplicaState::WaitFullSync {
                    continue;
                }
                let Some(h) = p.hello else { continue };
                p.state = p
                    .state
                    .on(ReplicaEvent::FullSyncStarted)
                    .unwrap_or(ReplicaState::FullSync);
                p.shipper
                    .start_full(self.cfg.ids.current, self.cfg.epoch, h.first_psn, live_from);
                self.status.peers[link]
                    .full_syncs
                    .fetch_add(1, Ordering::Relaxed);
                self.welcome(tx, link, WelcomeMode::Full, live_from);
            }
        }
        if self.sync.is_active() {
            let pin = self
                .peers
                .iter()
                .filter(|p| p.state == ReplicaState::FullSync)
                .map(|p| p.shipper.acked_sync())
                .min()
                .unwrap_or(0);
            self.sync.refresh_grants(pin);
            for (w, s) in self.scans.iter().enumerate() {
                s.grant.store(self.sync.grant(w), Ordering::Release);
            }
        }
    }

    /// Sends what each connected replica's shipper has ready.
    fn ship(&mut self, now_ns: u64, tx: &mut dyn LinkTx) -> bool {
        let mut any = false;
        let complete = self.sync.complete();
        for link in 0..self.peers.len() {
            let p = &mut self.peers[link];
            let (Some(h), Some(params)) = (p.hello, p.params) else {
                continue;
            };
            if !p.state.connected() {
                continue;
            }
            let sync = self.sync.is_active().then(|| self.sync.stream());
            for _ in 0..SEGMENTS_PER_POLL {
                let mut result = Ok(None);
                let shipper = &mut p.shipper;
                let live = &self.live;
                tx.send(link, &mut |buf| {
                    let Some(out) = buf.get_mut(WRITE_IMM_HEADER_LEN..) else {
                        return 0;
                    };
                    result = shipper.poll(now_ns, live, sync, complete, out);
                    let Ok(Some(o)) = result else { return 0 };
                    let slot = u64::from(o.psn % u32::from(h.credits.max(1)));
                    let f = WriteImmFields {
                        dest_qp: REPL_QPN,
                        psn: o.psn,
                        ack_req: o.ack_req,
                        va: h.region_va + slot * u64::from(h.slot_size),
                        rkey: h.rkey,
                        imm: o.imm,
                    };
                    if emit_write_imm_headers(buf, &params, &f, o.len).is_err() {
                        return 0;
                    }
                    finalize(buf).unwrap_or(0)
                });
                match result {
                    Ok(Some(o)) => {
                        any = true;
                        if o.resend {
                            self.status.peers[link]
                                .resent
                                .fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let ev = match e {
                            ShipError::Unreachable => ReplicaEvent::Timeout,
                            _ => ReplicaEvent::NeedFullSync,
                        };
                        p.shipper.stop();
                        p.state = p.state.on(ev).unwrap_or(ReplicaState::Invalid);
                        break;
                    }
                }
            }
            if p.state == ReplicaState::FullSync && p.shipper.sync_done() {
                let end = self.live.end();
                p.state = p
                    .state
                    .on(ReplicaEvent::SnapshotAcked { stream_end: end })
                    .unwrap_or(p.state);
            }
            self.status.peers[link]
                .sent
                .store(p.shipper.next_live().unwrap_or(0), Ordering::Relaxed);
        }
        any
    }

    /// Probes; declares replicas that stopped answering invalid.
    fn probe(&mut self, now_ns: u64, tx: &mut dyn LinkTx) {
        for link in 0..self.peers.len() {
            let p = &mut self.peers[link];
            let Some(params) = p.params else { continue };
            match p.liveness.poll(now_ns, &self.cfg.probe) {
                LivenessAction::Idle => {}
                LivenessAction::Probe { seq } => {
                    let m = Control::Probe(Probe {
                        seq,
                        sent_ns: now_ns,
                        epoch: self.cfg.epoch,
                    });
                    send_control(tx, link, &params, &m);
                }
                LivenessAction::Invalid => {
                    p.shipper.stop();
                    p.state = p
                        .state
                        .on(ReplicaEvent::Timeout)
                        .unwrap_or(ReplicaState::Invalid);
                    if p.state == ReplicaState::Invalid {
                        self.status.peers[link]
                            .invalidations
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    fn update_gate(&mut self, now_ns: u64) -> usize {
        let sync = self.durable.is_some();
        let views = self.peers.iter().map(|p| ReplicaView {
            online: p.state.counted(),
            // Sync mode counts what a replica has *received*: it acknowledges a
            // segment (RC ACK) only once its records are in its workers' rings, in
            // its memory; PROGRESS (what they applied) comes only every ack interval.
            acked: if sync && !self.cfg.chain {
                p.applied.max(p.shipper.acked_live())
            } else {
                p.applied
            },
            last_ack_ns: p.last_ack_ns,
        });
        let g = self.gate_rules.evaluate(now_ns, views);
        if let Some(c) = self.durable.as_mut() {
            if c.advance(g.quorum_offset) {
                for (w, s) in self.scans.iter().enumerate() {
                    s.durable.store(c.durable(w), Ordering::Release);
                }
            }
        }
        if g.writes_allowed {
            self.gate.open();
        } else {
            self.gate.refuse_not_enough_replicas();
        }
        self.status
            .short_of_replicas
            .store(u64::from(!g.writes_allowed), Ordering::Relaxed);
        g.good_replicas
    }

    fn on_hello(
        &mut self,
        link: usize,
        h: Hello,
        params: FrameParams,
        now_ns: u64,
        tx: &mut dyn LinkTx,
    ) {
        if let Some((mac, ip)) = self.successor_elsewhere(link, h.node_id, now_ns) {
            // A chain has one successor per node: a second one (a node returning
            // after the chain closed over it) is sent down the chain, to its tail.
            let w = Control::Welcome(Welcome::redirect(
                h.nonce,
                self.cfg.epoch,
                self.cfg.node_id,
                mac,
                ip,
            ));
            send_control(tx, link, &params, &w);
            self.status.redirects_sent.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let d = decide(&h, &self.cfg.ids, self.cfg.epoch, &self.live);
        if d == Decision::Full && self.relay.is_some() && self.ahead(&h) {
            // A relay is no authority: its data is a prefix of the master's stream.
            // A node holding more of that stream, or a newer one, may be the only
            // holder of acknowledged writes; a full sync from here would roll it
            // back to this relay's data. Left unanswered (a refusal would have it
            // ask again at once), it asks again at its HELLO interval and finds its
            // master.
            self.status
                .rollbacks_refused
                .fetch_add(1, Ordering::Relaxed);
            return;
        }
        if d == Decision::Full && self.cfg.keep_foreign && self.foreign(&h) {
            if self.status.foreign_refused.fetch_add(1, Ordering::Relaxed) == 0 {
                eprintln!(
                    "dataplane: replica {:016x} holds stream {:016x} up to offset {}, which this \
                     master (started empty) does not have: not resyncing it (that would \
                     erase its data); restore this master from it (docs/REPLICATION.md §7.1)",
                    h.node_id, h.repl_id, h.offset
                );
            }
            return;
        }
        let end = self.live.end();
        let p = &mut self.peers[link];
        p.hello = Some(h);
        p.params = Some(params);
        p.liveness.on_heard(now_ns);
        p.shipper.stop();
        p.state = p
            .state
            .on(ReplicaEvent::Hello {
                decision: d,
                stream_end: end,
            })
            .unwrap_or(ReplicaState::Connecting);
        match d {
            Decision::Partial { from } => {
                p.shipper
                    .start_partial(self.cfg.ids.current, self.cfg.epoch, h.first_psn, from);
                p.applied = from;
                p.last_ack_ns = now_ns;
                self.status.peers[link]
                    .partial_syncs
                    .fetch_add(1, Ordering::Relaxed);
                self.welcome(tx, link, WelcomeMode::Partial, from);
            }
            // The WELCOME goes out when the scan session starts (manage_sync).
            Decision::Full => {}
            Decision::Refuse => self.welcome(tx, link, WelcomeMode::Refused, 0),
        }
    }

    /// Whether `h` comes from a node holding data this node's stream lacks: later in
    /// the same stream, or of a newer epoch.
    fn ahead(&self, h: &Hello) -> bool {
        let holds = h.repl_id != 0 && h.offset > 0;
        holds
            && (h.epoch > self.cfg.epoch
                || (h.repl_id == self.cfg.ids.current && h.offset > self.live.end()))
    }

    /// Whether `h` comes from a replica holding data of a stream this master never had.
    fn foreign(&self, h: &Hello) -> bool {
        let ids = &self.cfg.ids;
        h.repl_id != 0
            && h.offset > 0
            && h.repl_id != ids.current
            && ids.previous.is_none_or(|(id, _)| id != h.repl_id)
    }

    /// On a chain node (head or relay): the link address of a successor other than
    /// node `node_id` that is connected on another link than `link` and was heard
    /// within half the waiting time (one that went silent is being replaced: the
    /// node asking may be its own successor, falling back past it).
    fn successor_elsewhere(
        &self,
        link: usize,
        node_id: u64,
        now_ns: u64,
    ) -> Option<(MacAddr, Ipv4Addr)> {
        if !self.cfg.chain && self.relay.is_none() {
            return None;
        }
        let fresh = self.cfg.probe.waiting_time_ns / 2;
        self.peers.iter().enumerate().find_map(|(l, p)| {
            let (h, params) = (p.hello?, p.params?);
            (l != link
                && h.node_id != node_id
                && p.state.connected()
                && now_ns.saturating_sub(p.liveness.last_heard_ns()) <= fresh)
                .then_some((params.dst_mac, params.dst_ip))
        })
    }

    fn on_progress(
        &mut self,
        link: usize,
        nonce: u64,
        applied: u64,
        now_ns: u64,
        params: &FrameParams,
        tx: &mut dyn LinkTx,
    ) {
        let p = &mut self.peers[link];
        if p.hello.is_none_or(|h| h.nonce != nonce) {
            // A replica following this node over a connection it does not know (its
            // HELLO was another, or never arrived): it takes this node for its live
            // upstream — it hears its probes — and would never ask again, while this
            // node never ships to it. Tell it to join again.
            self.refuse(tx, link, nonce, params);
            return;
        }
        p.liveness.on_heard(now_ns);
        if !p.state.connected() {
            // Back after being declared invalid: it must join again (HELLO), which
            // resumes from its offset when the backlog still has it.
            self.welcome(tx, link, WelcomeMode::Refused, 0);
            return;
        }
        if p.state == ReplicaState::FullSync {
            return;
        }
        p.applied = applied;
        p.last_ack_ns = now_ns;
        p.state = p
            .state
            .on(ReplicaEvent::Acked { offset: applied })
            .unwrap_or(p.state);
    }

    fn publish(&self, now_ns: u64, good: usize) {
        let s = &self.status;
        s.offset.store(self.live.end(), Ordering::Relaxed);
        s.backlog_start.store(self.live.start(), Ordering::Relaxed);
        s.now_ns.store(now_ns, Ordering::Relaxed);
        s.good_replicas.store(good as u64, Ordering::Relaxed);
        for (p, ps) in self.peers.iter().zip(&s.peers) {
            let st = match p.state {
                ReplicaState::Connecting if p.hello.is_none() => PeerState::Absent,
                ReplicaState::Connecting => PeerState::Connecting,
                ReplicaState::WaitFullSync | ReplicaState::FullSync => PeerState::FullSync,
                ReplicaState::PartialSync { .. } => PeerState::PartialSync,
                ReplicaState::Online => PeerState::Online,
                ReplicaState::Invalid => PeerState::Invalid,
            };
            ps.state.store(st as u64, Ordering::Relaxed);
            ps.acked.store(p.applied, Ordering::Relaxed);
            ps.last_heard_ns
                .store(p.liveness.last_heard_ns(), Ordering::Relaxed);
        }
    }
}

impl ReplLogic for MasterNode {
    fn waiting(&self) -> bool {
        self.durable.as_ref().is_some_and(DurableCursor::waiting)
    }

    fn on_frames(&mut self, link: usize, frames: &[&[u8]], now_ns: u64, tx: &mut dyn LinkTx) {
        if link >= self.peers.len() {
            return;
        }
        for f in frames {
            let Ok(frame) = parse_repl_frame(f) else {
                self.status.drop_frame(LinkDrop::Malformed);
                continue;
            };
            match frame {
                ReplFrame::Ack(a) => {
                    let p = &mut self.peers[link];
                    p.liveness.on_heard(now_ns);
                    match a.syndrome {
                        Syndrome::Ack { .. } => p.shipper.on_ack(a.psn, now_ns),
                        Syndrome::Nak(_) => p.shipper.on_nak(a.psn, now_ns),
                        Syndrome::RnrNak { timer } => p.shipper.on_rnr(
                            a.psn,
                            u64::from(rnr_timer_micros(timer)) * 1000,
                            now_ns,
                        ),
                    }
                }
                ReplFrame::Send(s) => {
                    if s.link.dst_mac != self.cfg.mac && s.link.dst_mac != [0xff; 6] {
                        self.status.drop_frame(LinkDrop::WrongDestination);
                        continue;
                    }
                    let params = s
                        .link
                        .reply_params(self.cfg.mac, self.cfg.ip, REPL_UDP_PORT);
                    match Control::decode(s.payload) {
                        Ok(Control::Hello(h)) => self.on_hello(link, h, params, now_ns, tx),
                        Ok(Control::Progress(p)) => {
                            self.on_progress(link, p.nonce, p.applied, now_ns, &params, tx)
                        }
                        Ok(Control::ProbeReply(r)) => {
                            let (nonce, applied) = (r.progress.nonce, r.progress.applied);
                            self.on_progress(link, nonce, applied, now_ns, &params, tx)
                        }
                        Err(_) => self.status.drop_frame(LinkDrop::BadControl),
                        // A WELCOME or PROBE is a replica's business.
                        Ok(_) => {}
                    }
                }
                // A master receives no segments.
                ReplFrame::WriteImm(_) => {}
            }
        }
    }

    fn poll(&mut self, now_ns: u64, tx: &mut dyn LinkTx) -> bool {
        let drained = self.drain_logs();
        self.manage_sync(tx);
        let shipped = self.ship(now_ns, tx);
        self.probe(now_ns, tx);
        let good = self.update_gate(now_ns);
        self.publish(now_ns, good);
        drained || shipped
    }
}
