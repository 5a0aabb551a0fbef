//! A replica's replication lcore: joins the master (HELLO until WELCOME), receives
//! the stream as RC WRITE WITH IMMEDIATE segments through `kvrepl`'s [`Applier`],
//! routes each record to the worker that owns its key, and reports what the workers
//! applied (PROGRESS every `ack_interval`, PROBE_REPLY to probes, RC ACKs for the
//! transport). The workers apply the records between their bursts (`repl::apply`).
//!
//! A segment is taken only when every worker's ring has room for all of it; when one
//! has not, the segment is refused with an RNR NAK and the master resends it later,
//! so no record is ever dropped between the link and the engines.

use super::apply::ApplyStats;
use super::group_route::{GroupBuf, Route};
use super::link::{send_control, LinkTx, ReplLogic};
use super::master::MasterNode;
use super::replica_log::LogFeed;
use super::status::{LinkDrop, PeerState, ReplStatus, RoleCode};
use crate::repl::gate::WriteGate;
use kvcluster::records::DataState;
use kvcluster::ClusterView;
use kvrepl::applier::{Applier, Outcome, Reply};
use kvrepl::log::LogProducer;
use kvrepl::messages::{Control, Hello, ProbeReply, Progress, ReplicaReport, Welcome, WelcomeMode};
use kvwire::repl::{parse_repl_frame, LinkHeader, ReplFrame};
use kvwire::transport::{emit_ack, Syndrome};
use kvwire::{FrameParams, MacAddr};
use std::collections::VecDeque;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use kvwire::repl::{REPL_QPN, REPL_UDP_PORT};
/// Ring slots (segments in flight) a replica offers.
pub const RING_CREDITS: u16 = 64;
/// RETH VA of the replica's receive ring, slot 0.
pub const RING_VA: u64 = 0x0002_0000_0000;
/// Progress checkpoints kept at most (each a segment end and the ring positions).
const CHECKPOINTS: usize = 1024;
/// REDIRECTs a replica follows in a row before it waits for its upstream to go
/// silent (a chain's length bounds the hops to its tail).
const MAX_REDIRECT_HOPS: u32 = 16;
/// Workers a replica routes to at most.
pub const MAX_WORKERS: usize = 16;
// A replica's workers are partitions: a transaction may span all of them.
const _: () = assert!(MAX_WORKERS <= crate::server::MAX_PARTITIONS);
/// Least gap between two PROGRESS reports sent because the applied offset moved
/// (a synchronous write waits for one: sending it at once instead of at the next
/// `ack_interval` takes milliseconds off a lone write; the gap bounds the reports to
/// 50 000/s under load).
const EAGER_PROGRESS_GAP_NS: u64 = 20_000;

/// Settings of a replica node.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// This node's id (a hash of its configured name).
    pub node_id: u64,
    /// This node's address on the replication links.
    pub mac: MacAddr,
    /// Its IPv4 address there.
    pub ip: Ipv4Addr,
    /// The master's link address, when known (else HELLO is broadcast). In a chain:
    /// the predecessor.
    pub master: Option<(MacAddr, Ipv4Addr)>,
    /// A chain node: the nodes before its predecessor, nearest first. The replica
    /// joins the next one when its upstream is silent for `waiting_time_ns`. The
    /// broadcast address stands for "whichever node answers" (an etcd-managed chain,
    /// whose head may have been elected anywhere).
    pub fallback: Vec<(MacAddr, Ipv4Addr)>,
    /// How long an upstream may be silent before a chain node tries the next one.
    pub waiting_time_ns: u64,
    /// PROGRESS period.
    pub ack_interval_ns: u64,
    /// HELLO period while not connected.
    pub hello_interval_ns: u64,
    /// Largest segment payload taken (the ring's slot size).
    pub slot_size: u32,
    /// The receive ring's R_Key.
    pub rkey: u32,
}

/// Which stream a checkpoint belongs to.
#[derive(Clone, Copy, PartialEq, Eq)]
enum StreamKind {
    Sync,
    Live,
}

/// A replica's replication logic.
pub struct ReplicaNode {
    cfg: ReplicaConfig,
    applier: Applier,
    rings: Vec<LogProducer>,
    consumed: Vec<Arc<ApplyStats>>,
    /// A transaction being received, routed once whole.
    group: GroupBuf,
    /// (stream, offset, ring positions): the offset is applied once every worker
    /// consumed its ring up to those positions.
    checkpoints: VecDeque<(StreamKind, u64, [u64; MAX_WORKERS])>,
    applied_live: u64,
    applied_sync: u64,
    nonce: u64,
    last_hello_ns: u64,
    last_progress_ns: u64,
    /// The applied offset the last PROGRESS reported.
    last_reported: u64,
    /// The link and frame parameters of the master, once welcomed.
    master_link: Option<(usize, FrameParams)>,
    /// A chain node: the relay shipping what it receives to its successor.
    relay: Option<Box<MasterNode>>,
    /// Which upstream it follows: 0 the configured master, then `fallback[i - 1]`.
    upstream: usize,
    /// When it last heard from its upstream (or started trying it).
    upstream_heard_ns: u64,
    /// Upstreams given up for silence (a chain closing over a failed node).
    pub upstream_switches: u64,
    /// A chain node sent down the chain: the node a REDIRECT named, followed
    /// instead of `upstream` until it goes silent.
    redirect: Option<(MacAddr, Ipv4Addr)>,
    /// REDIRECTs followed since the last WELCOME that admitted this node.
    redirect_hops: u32,
    /// A WELCOME admitted this node after it followed a REDIRECT: it joined behind
    /// the chain's tail (an etcd-managed node then ranks itself behind the others,
    /// `kvcluster::ClusterView::note_appended`).
    pub appended: bool,
    links: usize,
    epoch_seen: u64,
    /// The master refused our connection (it declared us invalid): join again from
    /// where our data stands.
    rejoin: bool,
    status: Arc<ReplStatus>,
    /// The log file's feed (config `replication.log_file`).
    log: Option<LogFeed>,
    /// Segments refused for want of ring room (those behind them are dropped:
    /// `LinkDrop::NoRoom`).
    pub rnr_sent: u64,
    /// What its data is worth to an election while it has a position
    /// (`kvcluster::records::DataState`; docs/FAILOVER.md "Election safety").
    data: DataState,
    /// An etcd-managed node's view, told the data's worth and offset.
    view: Option<Arc<ClusterView>>,
    /// Its engine holds data of the cluster's history that a full sync would
    /// discard (synced, resumed, or a demoted master's own stream).
    holds_data: bool,
}

impl ReplicaNode {
    /// A replica over `links` replication links, routing records into `rings` (one
    /// per worker, whose consumption `consumed` reports). Closes `gate` to writes
    /// (`NOT_MASTER`).
    pub fn new(
        cfg: ReplicaConfig,
        links: usize,
        rings: Vec<LogProducer>,
        consumed: Vec<Arc<ApplyStats>>,
        status: Arc<ReplStatus>,
        gate: Arc<WriteGate>,
    ) -> Result<ReplicaNode, String> {
        if rings.is_empty() || rings.len() > MAX_WORKERS || rings.len() != consumed.len() {
            return Err(format!(
                "a replica routes to 1..={MAX_WORKERS} workers, one ring each (got {} rings)",
                rings.len()
            ));
        }
        status.set_role(RoleCode::Replica);
        // A replica reports one peer: its master (slot 0).
        status.links.store(1, Ordering::Relaxed);
        gate.refuse_not_master();
        gate.set_following(true);
        Ok(ReplicaNode {
            applier: Applier::new(8),
            rings,
            consumed,
            group: GroupBuf::default(),
            checkpoints: VecDeque::with_capacity(CHECKPOINTS),
            applied_live: 0,
            applied_sync: 0,
            nonce: 0,
            last_hello_ns: 0,
            last_progress_ns: 0,
            last_reported: 0,
            master_link: None,
            relay: None,
            upstream: 0,
            upstream_heard_ns: 0,
            upstream_switches: 0,
            redirect: None,
            redirect_hops: 0,
            appended: false,
            links,
            epoch_seen: 0,
            rejoin: false,
            status,
            log: None,
            rnr_sent: 0,
            data: DataState::None,
            view: None,
            holds_data: false,
            cfg,
        })
    }

    /// The newest epoch this node knows from outside the stream (etcd): nothing from
    /// a master of an older epoch is taken any more, and a connection to such a
    /// master is dropped (the next HELLO goes to whoever answers at `epoch`).
    pub fn set_epoch_floor(&mut self, epoch: u64) {
        if epoch <= self.epoch_seen {
            return;
        }
        self.epoch_seen = epoch;
        if self.applier.master().1 < epoch {
            self.master_link = None;
            self.rejoin = true;
        }
    }

    /// True when the workers applied everything routed to them: the data is
    /// exactly the stream up to [`ReplicaNode::position`].
    pub fn drained(&mut self) -> bool {
        self.advance();
        self.checkpoints.is_empty()
            && self
                .rings
                .iter()
                .zip(&self.consumed)
                .all(|(r, c)| c.consumed.load(Ordering::Acquire) >= r.pushed())
    }

    /// The stream (replication id, live offset) the data stands at; `(0, 0)` when
    /// it has no consistent position (never synced, mid full sync).
    pub fn position(&self) -> (u64, u64) {
        self.applier.position()
    }

    /// The engine holds data that no position describes (a demoted master's own
    /// stream, beyond what the new master may have): a full sync from a master an
    /// operator forced is refused rather than let it discard that data.
    pub fn set_holds_data(&mut self) {
        self.holds_data = true;
    }

    /// Whether a full sync offered by `w` would replace our data with less of our
    /// own stream.
    fn would_roll_back(&self, w: &Welcome) -> bool {
        let (id, offset) = self.applier.position();
        id != 0 && w.repl_id == id && w.offset < offset
    }

    /// Whether a full sync offered by the master of `epoch` is refused: this node
    /// holds data and that master was force-elected, so it may lack acknowledged
    /// writes this node has (docs/FAILOVER.md "Election safety"). The operator
    /// restarts the node empty to follow it.
    fn refuses_full_sync(&self, epoch: u64) -> bool {
        self.holds_data
            && epoch != 0
            && self
                .view
                .as_ref()
                .is_some_and(|v| v.forced_epoch() == epoch)
    }

    /// An etcd-managed node: from now on its view is told the stream offset and the
    /// data's worth ([`ClusterView::set_data`]) whenever they may have changed, and
    /// told `None` before a full sync starts replacing the data.
    pub fn set_cluster_view(&mut self, view: Arc<ClusterView>) {
        self.view = Some(view);
        self.publish_data();
    }

    /// Tells the view (if any) where the data stands and what it is worth: no
    /// position (never synced, mid full sync) is `None`.
    fn publish_data(&self) {
        let Some(v) = &self.view else { return };
        let (id, offset) = self.applier.position();
        let state = if id == 0 { DataState::None } else { self.data };
        v.set_data(self.applier.master().1, state);
        v.set_offset(offset);
    }

    /// Starts from data that is exactly stream `repl_id` up to `offset` (a demoted
    /// master whose whole stream is in its engine, or a log file loaded at start): the
    /// next HELLO asks to continue from there, a partial resync when the new master's
    /// stream went on from it. `data` says whether the node still holds every write
    /// it acknowledged (`Live`: its own stream, a log file under `fsync: always`) or
    /// may not (`Loaded`: a file flushed less often).
    pub fn resume_at(&mut self, repl_id: u64, epoch: u64, offset: u64, data: DataState) {
        self.data = data;
        self.holds_data |= offset > 0;
        self.applier.resume_at(repl_id, epoch, offset);
        self.applied_live = offset;
        self.checkpoints.clear();
        self.master_link = None;
        self.rejoin = true;
    }

    /// Makes this node a chain node relaying its stream to its successor through
    /// `relay` (a [`MasterNode::into_relay`] over the same links).
    pub fn set_relay(&mut self, relay: MasterNode) {
        self.relay = Some(Box::new(relay));
    }

    /// Takes the relay back (a chain node promoted to head).
    pub fn take_relay(&mut self) -> Option<MasterNode> {
        self.relay.take().map(|r| *r)
    }

    /// The upstream it follows now (the master, or a fallback of a chain, or the
    /// node a chain redirected it to).
    fn upstream_addr(&self) -> Option<(MacAddr, Ipv4Addr)> {
        if let Some(r) = self.redirect {
            return Some(r);
        }
        match self.upstream {
            0 => self.cfg.master,
            i => self.cfg.fallback.get(i - 1).copied().or(self.cfg.master),
        }
    }

    /// Appends what the node applies to a log file through `feed` from now on.
    pub fn set_log(&mut self, feed: LogFeed) {
        self.log = Some(feed);
    }

    /// Takes the log file's feed back (the node changes role).
    pub fn take_log(&mut self) -> Option<LogFeed> {
        self.log.take()
    }

    /// Gives back the workers' rings and apply counters (the node changes role).
    pub fn into_parts(self) -> (Vec<LogProducer>, Vec<Arc<ApplyStats>>) {
        (self.rings, self.consumed)
    }

    fn params_to(&self, mac: MacAddr, ip: Ipv4Addr) -> FrameParams {
        FrameParams::new(self.cfg.mac, mac, self.cfg.ip, ip, REPL_UDP_PORT)
    }

    fn progress(&self) -> Progress {
        let (repl_id, epoch) = self.applier.master();
        // Under `fsync: always`, no more than the log file holds on disk.
        let own = self
            .log
            .as_ref()
            .map_or(self.applied_live, |l| l.durable(self.applied_live));
        // A chain node: no more than its online successors have (the head answers a
        // synchronous write only once the tail has it).
        let floor = self.relay.as_ref().and_then(|r| r.downstream_floor());
        Progress {
            nonce: self.nonce,
            repl_id,
            epoch,
            applied: floor.map_or(own, |f| own.min(f)),
            sync_applied: self.applied_sync,
            state: self.applier.report(),
        }
    }

    fn hello(&mut self, now_ns: u64, tx: &mut dyn LinkTx) {
        // Larger than any earlier attempt's, also across restarts (wall clock).
        self.nonce = (wall_ns()).max(self.nonce + 1);
        let (repl_id, offset) = self.applier.position();
        let h = Control::Hello(Hello {
            node_id: self.cfg.node_id,
            repl_id,
            offset,
            epoch: self.epoch_seen,
            nonce: self.nonce,
            region_va: RING_VA,
            rkey: self.cfg.rkey,
            slot_size: self.cfg.slot_size,
            credits: RING_CREDITS,
            first_psn: (self.nonce as u32) & kvwire::ib::MASK_24,
        });
        let (mac, ip) = self
            .upstream_addr()
            .unwrap_or(([0xff; 6], Ipv4Addr::BROADCAST));
        let params = self.params_to(mac, ip);
        for l in 0..self.links {
            send_control(tx, l, &params, &h);
        }
        self.last_hello_ns = now_ns;
        self.status.peers[0]
            .state
            .store(PeerState::Connecting as u64, Ordering::Relaxed);
    }

    /// Ring positions now (what the workers must consume for the data routed so far).
    fn positions(&self) -> [u64; MAX_WORKERS] {
        let mut p = [0u64; MAX_WORKERS];
        for (x, r) in p.iter_mut().zip(&self.rings) {
            *x = r.pushed();
        }
        p
    }

    /// Moves the applied offsets forward over the checkpoints every worker passed.
    fn advance(&mut self) {
        while let Some((kind, off, pos)) = self.checkpoints.front() {
            let done = pos
                .iter()
                .zip(&self.consumed)
                .all(|(&p, c)| c.consumed.load(Ordering::Acquire) >= p);
            if !done {
                break;
            }
            match kind {
                StreamKind::Live => self.applied_live = *off,
                StreamKind::Sync => self.applied_sync = *off,
            }
            self.checkpoints.pop_front();
        }
    }

    fn note(&mut self, kind: StreamKind, off: u64) {
        if self.checkpoints.len() == CHECKPOINTS {
            // Keep memory bounded: the newest checkpoint replaces the last one
            // (the offset is only reported a little later).
            self.checkpoints.pop_back();
        }
        let pos = self.positions();
        self.checkpoints.push_back((kind, off, pos));
    }

    fn on_segment(
        &mut self,
        link: usize,
        hdr: &LinkHeader,
        imm: u32,
        payload: &[u8],
        tx: &mut dyn LinkTx,
    ) {
        let params = hdr.reply_params(self.cfg.mac, self.cfg.ip, REPL_UDP_PORT);
        // Room for every record of the segment in whichever ring it goes to.
        let need = payload.len() + 64 + self.group.pending(self.rings.len());
        if self.rings.iter().any(|r| r.free_bytes() < need)
            || self.log.as_ref().is_some_and(|l| !l.room(need))
        {
            // An RNR NAK for PSN p tells the master that every segment before p was
            // taken (it retires them): only the expected segment may get one. Those
            // after it are dropped silently; the master resends them after the wait.
            if hdr.psn & kvwire::ib::MASK_24 != self.applier.expected_psn() {
                self.status.drop_frame(LinkDrop::NoRoom);
                return;
            }
            self.rnr_sent += 1;
            let psn = hdr.psn;
            tx.send(link, &mut |buf| {
                emit_ack(
                    buf,
                    &params,
                    REPL_QPN,
                    psn,
                    Syndrome::RnrNak {
                        timer: kvwire::transport::RNR_TIMER_RINGS_FULL,
                    },
                    0,
                )
                .unwrap_or(0)
            });
            return;
        }
        // Only a chain node needs the kind (the applier parses the header itself).
        let live = self.relay.is_some()
            && kvrepl::parse_segment(payload, imm)
                .is_ok_and(|(h, _)| h.kind == kvrepl::SegmentKind::Live);
        let (outcome, reply) = {
            let mut sink = Route {
                rings: &mut self.rings,
                log: self.log.as_mut(),
                relay: self.relay.as_deref_mut().filter(|_| live),
                group: &mut self.group,
            };
            self.applier
                .on_segment(hdr.psn, hdr.ack_req, imm, payload, &mut sink)
        };
        match outcome {
            Outcome::Applied => {
                if let Some(off) = self.applier.applied_live() {
                    self.note(StreamKind::Live, off);
                    if let Some(l) = &mut self.log {
                        l.commit(off);
                    }
                } else if let Some(off) = self.applier.applied_sync() {
                    self.note(StreamKind::Sync, off);
                    if let Some(l) = &mut self.log {
                        // The full sync's file takes the records; no position yet.
                        l.commit(0);
                    }
                }
            }
            Outcome::SyncComplete => {
                // A whole copy of the master's data, kept from here on.
                self.data = DataState::Live;
                self.holds_data = true;
                self.checkpoints.clear();
                let off = self.applier.applied_live().unwrap_or(0);
                self.note(StreamKind::Live, off);
                if let Some(l) = &mut self.log {
                    l.sync_done(off);
                }
            }
            Outcome::Broken => {
                // Connect again from nothing: the next HELLO asks for a full sync.
                self.master_link = None;
            }
            _ => {}
        }
        let (psn, syndrome) = match reply {
            Reply::None => return,
            Reply::Ack(p) => (p, Syndrome::Ack { credits: 31 }),
            Reply::Nak(p) => (
                p,
                Syndrome::Nak(kvwire::transport::NakCode::PsnSequenceError),
            ),
        };
        tx.send(link, &mut |buf| {
            emit_ack(buf, &params, REPL_QPN, psn, syndrome, 0).unwrap_or(0)
        });
    }

    /// A WELCOME answering this node's HELLO (`link`, reply `params`): a REDIRECT
    /// down a chain, a refusal, or the start of a stream (partial resync or full sync).
    fn on_welcome(
        &mut self,
        link: usize,
        w: &Welcome,
        params: FrameParams,
        now_ns: u64,
        tx: &mut dyn LinkTx,
    ) {
        match w.mode {
            WelcomeMode::Redirect => {
                // A chain node that has a successor already: join behind it (hop by
                // hop to the tail), keeping our position. A bounded number of hops: a
                // chain is a path, but views may disagree while it reconfigures.
                let own = (self.cfg.mac, self.cfg.ip);
                if let Some(to) = w.redirect_to() {
                    if to != own && self.redirect_hops < MAX_REDIRECT_HOPS {
                        self.redirect = Some(to);
                        self.redirect_hops += 1;
                        self.upstream_heard_ns = now_ns;
                        self.status
                            .redirects_followed
                            .fetch_add(1, Ordering::Relaxed);
                        self.rejoin = true;
                    }
                }
            }
            // Our data is consistent: ask to resume from it.
            WelcomeMode::Refused if self.applier.applied_live().is_some() => self.rejoin = true,
            // Mid full sync: start again (HELLO at the next interval).
            WelcomeMode::Refused => self.master_link = None,
            _ if w.epoch < self.epoch_seen => self.status.drop_frame(LinkDrop::StaleEpoch),
            WelcomeMode::Full if self.would_roll_back(w) => {
                // Only a chain relay behind us can offer this (a master's stream
                // starts under a fresh id): keep the data, ask again.
                self.status
                    .rollbacks_refused
                    .fetch_add(1, Ordering::Relaxed);
                self.master_link = None;
            }
            WelcomeMode::Full if self.refuses_full_sync(w.epoch) => {
                // Keep the data; ask again later (the operator decides).
                self.status.diverged.fetch_add(1, Ordering::Relaxed);
                self.master_link = None;
            }
            _ => self.start_stream(link, w, params, now_ns, tx),
        }
    }

    /// A master's stream begins: a partial resync from our position or a full sync.
    fn start_stream(
        &mut self,
        link: usize,
        w: &Welcome,
        params: FrameParams,
        now_ns: u64,
        tx: &mut dyn LinkTx,
    ) {
        let partial = w.mode == WelcomeMode::Partial;
        self.appended |= self.redirect_hops > 0;
        self.redirect_hops = 0;
        self.epoch_seen = self.epoch_seen.max(w.epoch);
        if let Some(l) = &mut self.log {
            if partial {
                l.stream(w.repl_id, w.epoch, w.offset);
            } else {
                l.begin(w.repl_id, w.epoch);
            }
        }
        // A transaction half received is dropped unless this stream goes on right
        // after it.
        let continues = partial && self.applier.position() == (w.repl_id, w.offset);
        if !partial {
            // A full sync replaces the data: say so before any of it is routed (the
            // election must not count it).
            self.data = DataState::None;
            self.holds_data = false;
            if let Some(v) = &self.view {
                v.set_data(0, DataState::None);
            }
        }
        if !continues {
            self.group.reset();
        }
        let mut sink = Route {
            rings: &mut self.rings,
            log: None,
            relay: None,
            group: &mut self.group,
        };
        self.applier.on_welcome(w, &mut sink);
        self.upstream_heard_ns = now_ns;
        if let Some(r) = &mut self.relay {
            r.forget_peer(link);
            r.relay_restart(w.repl_id, w.epoch, w.offset, tx);
        }
        self.checkpoints.clear();
        let peer = &self.status.peers[0];
        if partial {
            self.applied_live = w.offset;
            peer.partial_syncs.fetch_add(1, Ordering::Relaxed);
        } else {
            self.applied_sync = 0;
            peer.full_syncs.fetch_add(1, Ordering::Relaxed);
        }
        self.master_link = Some((link, params));
    }

    fn publish(&self, now_ns: u64) {
        let s = &self.status;
        s.records
            .store(self.applier.stats().records, Ordering::Relaxed);
        let (repl_id, epoch) = self.applier.master();
        s.repl_id.store(repl_id, Ordering::Relaxed);
        s.epoch.store(epoch.max(self.epoch_seen), Ordering::Relaxed);
        s.offset.store(self.applied_live, Ordering::Relaxed);
        s.now_ns.store(now_ns, Ordering::Relaxed);
        let p = &s.peers[0];
        p.acked.store(self.applied_live, Ordering::Relaxed);
        p.state.store(
            match self.applier.report() {
                ReplicaReport::Connecting => PeerState::Connecting,
                ReplicaReport::FullSync => PeerState::FullSync,
                ReplicaReport::Streaming => PeerState::Online,
            } as u64,
            Ordering::Relaxed,
        );
    }
}

impl ReplLogic for ReplicaNode {
    fn on_frames(&mut self, link: usize, frames: &[&[u8]], now_ns: u64, tx: &mut dyn LinkTx) {
        for f in frames {
            let Ok(frame) = parse_repl_frame(f) else {
                self.status.drop_frame(LinkDrop::Malformed);
                continue;
            };
            let upstream_link = self.master_link.as_ref().map(|(l, _)| *l);
            match frame {
                // Segments only from the node that welcomed us.
                ReplFrame::WriteImm(_) if upstream_link.is_some_and(|l| l != link) => {
                    self.status.drop_frame(LinkDrop::ForeignSegment);
                }
                ReplFrame::WriteImm(w) => {
                    // Ours, into our ring: the R_Key and the slot of its PSN.
                    let slot = u64::from(w.link.psn % u32::from(RING_CREDITS));
                    let va = RING_VA + slot * u64::from(self.cfg.slot_size);
                    if w.link.dst_mac != self.cfg.mac || w.rkey != self.cfg.rkey || w.va != va {
                        self.status.drop_frame(LinkDrop::ForeignSegment);
                        continue;
                    }
                    if self.applier.master().1 < self.epoch_seen {
                        self.status.drop_frame(LinkDrop::StaleEpoch);
                        continue;
                    }
                    self.status.peers[0]
                        .last_heard_ns
                        .store(now_ns, Ordering::Relaxed);
                    self.upstream_heard_ns = now_ns;
                    self.on_segment(link, &w.link, w.imm, w.payload, tx);
                }
                ReplFrame::Send(s) => {
                    let Ok(msg) = Control::decode(s.payload) else {
                        self.status.drop_frame(LinkDrop::BadControl);
                        continue;
                    };
                    let params = s
                        .link
                        .reply_params(self.cfg.mac, self.cfg.ip, REPL_UDP_PORT);
                    match msg {
                        // A HELLO goes out on every link: once one node welcomed it,
                        // a stream offered from another link is ignored (two nodes
                        // streaming to one replica, or a chain closing into a cycle).
                        // A REDIRECT is followed from any link: the head sends this
                        // node behind its successor, which is how a node returning to
                        // a chain learns it was appended (its election rank moves).
                        Control::Welcome(w)
                            if w.nonce == self.nonce
                                && (w.mode == WelcomeMode::Redirect
                                    || upstream_link.is_none_or(|l| l == link)) =>
                        {
                            self.on_welcome(link, &w, params, now_ns, tx);
                        }
                        Control::Hello(_) | Control::Progress(_) | Control::ProbeReply(_) => {
                            // A successor's: the relay's business (never from the
                            // upstream's link).
                            if let (Some(r), false) = (&mut self.relay, upstream_link == Some(link))
                            {
                                r.on_frames(link, &[*f], now_ns, tx);
                            }
                        }
                        // Only the upstream's probes are answered: another node
                        // probing this one (it sent a WELCOME that lost) must not
                        // count it as its live successor.
                        Control::Probe(_) if upstream_link.is_some_and(|l| l != link) => {}
                        Control::Probe(p) => {
                            // From the upstream it asked, or (having asked by
                            // broadcast) from the node that welcomed it.
                            let src = s.link.src_mac;
                            if self.upstream_addr().is_some_and(|(m, _)| m == src)
                                || self
                                    .master_link
                                    .as_ref()
                                    .is_some_and(|(_, p)| p.dst_mac == src)
                            {
                                self.upstream_heard_ns = now_ns;
                            }
                            self.epoch_seen = self.epoch_seen.max(p.epoch);
                            self.status.peers[0]
                                .last_heard_ns
                                .store(now_ns, Ordering::Relaxed);
                            let r = Control::ProbeReply(ProbeReply {
                                seq: p.seq,
                                sent_ns: p.sent_ns,
                                progress: self.progress(),
                            });
                            send_control(tx, link, &params, &r);
                        }
                        _ => {}
                    }
                }
                ReplFrame::Ack(_) => {
                    // Acknowledgements of the relay's segments by its successor.
                    if let (Some(r), false) = (&mut self.relay, upstream_link == Some(link)) {
                        r.on_frames(link, &[*f], now_ns, tx);
                    }
                }
            }
        }
        // Before the acknowledgements queued above leave (the burst is sent after
        // this returns): the election must see at least what was acknowledged.
        self.publish_data();
    }

    fn poll(&mut self, now_ns: u64, tx: &mut dyn LinkTx) -> bool {
        // After this pass's frames were routed (`on_frames` runs first): sleeping
        // workers wake for the records they got.
        for r in &mut self.rings {
            r.notify();
        }
        self.advance();
        self.publish_data();
        let mut busy = false;
        // A chain node whose upstream went silent joins the next one before it (or,
        // when it followed a REDIRECT, the upstream it had before). A replica of a
        // configured master (a live one probes it every probe interval) asks it
        // again: a master that restarted knows nothing of the old connection.
        let silent = now_ns.saturating_sub(self.upstream_heard_ns) > self.cfg.waiting_time_ns;
        if silent && (!self.cfg.fallback.is_empty() || self.redirect.is_some()) {
            if self.redirect.take().is_none() {
                self.upstream = (self.upstream + 1) % (1 + self.cfg.fallback.len());
            }
            self.redirect_hops = 0;
            self.upstream_heard_ns = now_ns;
            self.upstream_switches += 1;
            self.master_link = None;
            self.rejoin = true;
        } else if silent && self.cfg.master.is_some() && self.master_link.is_some() {
            self.upstream_heard_ns = now_ns;
            self.upstream_switches += 1;
            self.master_link = None;
            self.rejoin = true;
        }
        if let Some(r) = &mut self.relay {
            let streaming = self.applier.applied_live().is_some();
            r.relay_applied(streaming.then_some(self.applied_live));
            busy |= r.poll(now_ns, tx);
        }
        // Not welcomed yet (or the master changed): HELLO again every interval until
        // a master answers — the node that will answer may not be master yet.
        if self.rejoin || self.applier.needs_hello() || self.master_link.is_none() {
            self.master_link = None;
            if self.rejoin
                || now_ns.saturating_sub(self.last_hello_ns) >= self.cfg.hello_interval_ns
                || self.last_hello_ns == 0
            {
                self.rejoin = false;
                self.hello(now_ns, tx);
                busy = true;
            }
        } else if let Some((link, params)) = self.master_link {
            if let Some(psn) = self.applier.pending_ack() {
                tx.send(link, &mut |buf| {
                    emit_ack(
                        buf,
                        &params,
                        REPL_QPN,
                        psn,
                        Syndrome::Ack { credits: 31 },
                        0,
                    )
                    .unwrap_or(0)
                });
            }
            let since = now_ns.saturating_sub(self.last_progress_ns);
            let p = self.progress();
            let moved = p.applied != self.last_reported;
            if since >= self.cfg.ack_interval_ns || (moved && since >= EAGER_PROGRESS_GAP_NS) {
                self.last_progress_ns = now_ns;
                self.last_reported = p.applied;
                send_control(tx, link, &params, &Control::Progress(p));
                busy |= moved;
            }
        }
        self.publish(now_ns);
        busy
    }
}

/// Wall-clock nanoseconds (HELLO nonces grow across restarts of the process).
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
}
