//! A node of an etcd-managed cluster (docs/FAILOVER.md): the replication lcore's
//! logic plays whichever role etcd gives the node, and changes role at run time.
//!
//! The node's control thread (`kvcluster`) writes the role, epoch, master and write
//! fence into a [`ClusterView`]; [`ClusterNode::poll`] reads it (atomics only) and
//!
//! * as a **replica** ([`ReplicaNode`]) refuses anything from a master older than the
//!   view's epoch, names the current master in `NOT_MASTER` answers, and publishes its
//!   applied offset for the election (highest offset wins);
//! * when the view says it was **elected** at epoch `e`, waits until its workers have
//!   applied every record already routed to them (the data is then exactly the old
//!   stream up to offset `o`), discards whatever its workers' log rings still hold
//!   from an earlier mastership, turns their logging on, and becomes a
//!   [`MasterNode`] at epoch `e` whose stream goes on from `o` under a new
//!   replication id, the old one kept as `previous` up to `o` — a replica of the old
//!   master that stands exactly at `o` resumes with a partial resync, any other
//!   (behind, or ahead with writes the new master never got) is fully resynced;
//! * as a **master**, copies the fence deadline into the write gate every poll (the
//!   workers compare it with the clock every burst, so a master frozen past its lease
//!   refuses writes from its first burst after it resumes) and closes the gate
//!   (`NOT_MASTER`) as soon as the view stops saying it is master at its epoch;
//! * when the view names **another master**, becomes a replica again: logging off, a
//!   new [`ReplicaNode`] with no position, so its first HELLO asks for a full sync —
//!   what it wrote after the new master's election point is discarded, never merged.
//!
//! Role changes are rare control events: they allocate (the master's backlog) on the
//! replication lcore, never on a worker.

use super::apply::ApplyStats;
use super::link::{LinkTx, ReplLogic};
use super::master::{MasterConfig, MasterNode};
use super::replica::{ReplicaConfig, ReplicaNode};
use super::replica_log::{LogFeed, LogStart};
use super::scan::ScanShared;
use super::status::{ReplStatus, RoleCode};
use crate::repl::gate::WriteGate;
use kvcluster::records::DataState;
use kvcluster::{ClusterView, Role};
use kvrepl::backlog::random_repl_id;
use kvrepl::log::{LogConsumer, LogProducer};
use kvrepl::resync::ReplIds;
use kvwire::MasterHint;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How long a fenced master's gate must have been closed before it may keep its
/// position when demoted: far longer than a worker's burst, so no write admitted
/// before the fence is still being executed.
const QUIET_NS: u64 = 10_000_000;
/// Records discarded per stale log ring per poll while a promotion waits.
const DISCARD_PER_POLL: usize = 1 << 16;

/// The role being played.
enum Node {
    Replica(ReplicaNode),
    Master(MasterNode),
    /// Only while switching.
    Switching,
}

/// What a [`ClusterNode`] is made of.
pub struct ClusterParts {
    /// The master's settings (its epoch, ids and start offset are set at promotion).
    pub master: MasterConfig,
    /// The replica's settings.
    pub replica: ReplicaConfig,
    /// Replication links.
    pub links: usize,
    /// Per worker: its log ring's consumer and scan state (used as master).
    pub logs: Vec<LogConsumer>,
    /// Per worker, with `logs`.
    pub scans: Vec<Arc<ScanShared>>,
    /// Per worker: the ring its records are routed into and its apply counters
    /// (used as replica).
    pub rings: Vec<LogProducer>,
    /// Per worker, with `rings`.
    pub consumed: Vec<Arc<ApplyStats>>,
    /// The workers' write gate.
    pub gate: Arc<WriteGate>,
    /// What the node publishes.
    pub status: Arc<ReplStatus>,
    /// The control thread's view.
    pub view: Arc<ClusterView>,
    /// The replica's log file feed, and the (id, epoch, offset) its loaded data
    /// stands at (config `replication.log_file`).
    pub log: Option<LogStart>,
    /// A chain node (`topology: chain`): as a replica it relays its stream to its
    /// successor through a relay over the log rings, with these settings and status.
    pub relay: Option<(MasterConfig, Arc<ReplStatus>)>,
}

/// The replication logic of a node whose role etcd decides.
pub struct ClusterNode {
    node: Node,
    /// The master-side parts while a replica.
    logs: Option<(Vec<LogConsumer>, Vec<Arc<ScanShared>>)>,
    /// The replica-side parts while a master.
    rings: Option<(Vec<LogProducer>, Vec<Arc<ApplyStats>>)>,
    master_cfg: MasterConfig,
    replica_cfg: ReplicaConfig,
    links: usize,
    gate: Arc<WriteGate>,
    status: Arc<ReplStatus>,
    view: Arc<ClusterView>,
    /// (master id, epoch) of the hint in the gate.
    hint: Option<(u32, u64)>,
    /// The log file's feed while a master (retired: a master logs nothing).
    log: Option<LogFeed>,
    /// While master: when its gate was closed because the view stopped saying "master
    /// at my epoch" (lease not renewed, handover); `None` while open.
    fenced_since_ns: Option<u64>,
    /// A chain node's relay settings and status (`ClusterParts::relay`).
    relay: Option<(MasterConfig, Arc<ReplStatus>)>,
}

impl ClusterNode {
    /// A node that starts as a replica with no master known (writes refused) and
    /// waits for etcd to say what it is.
    pub fn new(p: ClusterParts) -> Result<ClusterNode, String> {
        for s in &p.scans {
            s.paused.store(true, Ordering::Release);
        }
        p.gate.set_fence_deadline(1);
        let mut replica = ReplicaNode::new(
            p.replica.clone(),
            p.links,
            p.rings,
            p.consumed,
            p.status.clone(),
            p.gate.clone(),
        )?;
        if let Some(LogStart { feed, resume }) = p.log {
            // Under `fsync: always` the file holds every write the node acknowledged.
            let data = if feed.always() {
                DataState::Live
            } else {
                DataState::Loaded
            };
            replica.set_log(feed);
            if let Some((id, epoch, offset)) = resume {
                replica.resume_at(id, epoch, offset, data);
            }
        }
        replica.set_cluster_view(p.view.clone());
        let mut node = ClusterNode {
            node: Node::Switching,
            logs: Some((p.logs, p.scans)),
            rings: None,
            master_cfg: p.master,
            replica_cfg: p.replica,
            links: p.links,
            gate: p.gate,
            status: p.status,
            view: p.view,
            hint: None,
            log: None,
            fenced_since_ns: None,
            relay: p.relay,
        };
        node.attach_relay(&mut replica)?;
        node.node = Node::Replica(replica);
        Ok(node)
    }

    /// A chain node's replica relays its stream to its successor: the relay takes
    /// the log rings (their live logging paused; they carry a successor's full-sync
    /// scan) until the node is promoted.
    fn attach_relay(&mut self, r: &mut ReplicaNode) -> Result<(), String> {
        let Some((cfg, status)) = self.relay.clone() else {
            return Ok(());
        };
        let Some((logs, scans)) = self.logs.take() else {
            return Err("no log rings for the relay".into());
        };
        let relay = MasterNode::new(
            cfg,
            self.links,
            logs,
            scans,
            status,
            Arc::new(WriteGate::writable()),
            0,
        )?
        .into_relay();
        r.set_relay(relay);
        Ok(())
    }

    /// Takes a replica apart for a promotion: its log feed, its apply rings, and (a
    /// chain node) the log rings back from its relay.
    fn dismantle(&mut self, mut r: ReplicaNode) {
        self.take_log(&mut r);
        if let Some(relay) = r.take_relay() {
            self.logs = Some(relay.into_parts());
        }
        let (rings, consumed) = r.into_parts();
        self.rings = Some((rings, consumed));
    }

    /// Names the view's master in `NOT_MASTER` answers (when it changed).
    fn update_hint(&mut self) {
        let m = self.view.master();
        let key = m.map(|m| (m.id, m.epoch));
        if key == self.hint {
            return;
        }
        self.hint = key;
        self.gate.set_master_hint(m.map(|m| MasterHint {
            epoch: m.epoch,
            ip: m.addr.ip,
            mac: m.addr.mac,
            qpn: m.addr.qpn as u16,
        }));
    }

    /// Becomes master at `epoch`, continuing stream `prev` (id, offset) when there is
    /// one. The caller checked that the workers applied everything routed to them.
    fn become_master(&mut self, epoch: u64, prev: (u64, u64), now_ns: u64) -> Result<(), String> {
        let Some((mut logs, scans)) = self.logs.take() else {
            return Err("no log rings".into());
        };
        // What the rings hold was pushed before the workers' logging was paused
        // (an earlier mastership): not part of the new stream.
        for (log, s) in logs.iter_mut().zip(&scans) {
            while matches!(log.drain(DISCARD_PER_POLL, |_| true), Ok(n) if n > 0) {}
            // Sync mode: every response tagged so far (reads while a replica) may go.
            s.durable.store(log.popped(), Ordering::Release);
        }
        for s in &scans {
            s.paused.store(false, Ordering::Release);
        }
        let mut cfg = self.master_cfg.clone();
        cfg.epoch = epoch;
        cfg.ids = ReplIds {
            current: random_repl_id(),
            previous: (prev.0 != 0).then_some(prev),
        };
        cfg.start_offset = prev.1;
        // Fence first: the gate opens in MasterNode::new.
        self.gate
            .set_fence_deadline(self.view.fence_deadline_ns().max(1));
        let m = MasterNode::new(
            cfg,
            self.links,
            logs,
            scans,
            self.status.clone(),
            self.gate.clone(),
            now_ns,
        )?;
        self.status.promotions.fetch_add(1, Ordering::Relaxed);
        self.node = Node::Master(m);
        Ok(())
    }

    /// Stops being master: writes refused, logging off, and a replica with no
    /// position — or, when the master had been fenced for a while with its whole log
    /// drained into the stream (a planned switchover), one that stands at its own
    /// stream's end, so the new master can resume it by partial resync.
    fn become_replica(&mut self, master: MasterNode, now_ns: u64) -> Result<(), String> {
        self.gate.refuse_not_master();
        self.gate.set_fence_deadline(1);
        let quiet = self
            .fenced_since_ns
            .is_some_and(|t| now_ns.saturating_sub(t) >= QUIET_NS);
        let own = (master.ids().current, master.epoch(), master.offset());
        let (logs, scans) = master.into_parts();
        let drained = logs.iter().all(|l| l.pending_bytes() == 0);
        self.fenced_since_ns = None;
        for s in &scans {
            s.paused.store(true, Ordering::Release);
        }
        self.logs = Some((logs, scans));
        let Some((rings, consumed)) = self.rings.take() else {
            return Err("no apply rings".into());
        };
        let mut r = ReplicaNode::new(
            self.replica_cfg.clone(),
            self.links,
            rings,
            consumed,
            self.status.clone(),
            self.gate.clone(),
        )?;
        r.set_cluster_view(self.view.clone());
        if quiet && drained {
            r.resume_at(own.0, own.1, own.2, DataState::Live);
        } else if own.2 > 0 {
            r.set_holds_data();
        }
        if let Some(f) = self.log.take() {
            // Retired at promotion: a new file begins with the next full sync.
            r.set_log(f);
        }
        r.set_epoch_floor(self.view.epoch());
        self.attach_relay(&mut r)?;
        self.hint = None;
        self.status.demotions.fetch_add(1, Ordering::Relaxed);
        self.node = Node::Replica(r);
        Ok(())
    }

    /// Keeps the replica's log feed across a promotion, the file retired: the node's
    /// data will hold writes of its own that no stream carries.
    fn take_log(&mut self, r: &mut ReplicaNode) {
        if let Some(mut f) = r.take_log() {
            f.retire();
            self.log = Some(f);
        }
    }

    /// Copies the election's view of this node into the status: its data's worth,
    /// and whether the cluster waits for a quorum (docs/FAILOVER.md).
    fn publish_election(&self) {
        let (hist, data) = self.view.data();
        self.status.data.store(data.code(), Ordering::Relaxed);
        self.status.hist.store(hist, Ordering::Relaxed);
        let w = self
            .view
            .quorum_wait()
            .map_or(0, |(have, need)| u64::from(have) << 32 | u64::from(need));
        self.status.quorum_wait.store(w, Ordering::Relaxed);
    }

    /// Applies the view's role: promotion, demotion, fencing.
    fn follow_view(&mut self, now_ns: u64) {
        let (role, epoch) = self.view.state();
        let node = std::mem::replace(&mut self.node, Node::Switching);
        self.node = match node {
            Node::Replica(mut r) => {
                r.set_epoch_floor(epoch);
                if role == Role::Master && r.drained() {
                    let prev = r.position();
                    self.dismantle(r);
                    if let Err(e) = self.become_master(epoch, prev, now_ns) {
                        eprintln!("dataplane: promotion at epoch {epoch} failed: {e}");
                    }
                    return;
                }
                if r.appended {
                    self.view.note_appended();
                }
                self.update_hint();
                Node::Replica(r)
            }
            Node::Master(m) => {
                let mine = role == Role::Master && epoch == m.epoch();
                if role == Role::Replica || (role == Role::Master && epoch > m.epoch()) {
                    // Another master, or re-elected at a new epoch after losing the
                    // lease: what was written since may not be anywhere else.
                    let prev = (m.ids().current, m.offset());
                    if let Err(e) = self.become_replica(m, now_ns) {
                        eprintln!("dataplane: demotion failed: {e}");
                        return;
                    }
                    if role == Role::Master {
                        let Node::Replica(r) = std::mem::replace(&mut self.node, Node::Switching)
                        else {
                            return;
                        };
                        self.dismantle(r);
                        if let Err(e) = self.become_master(epoch, prev, now_ns) {
                            eprintln!("dataplane: promotion at epoch {epoch} failed: {e}");
                        }
                    }
                    return;
                }
                self.view.set_data(m.epoch(), DataState::Live);
                self.view.set_offset(m.offset());
                if mine {
                    self.fenced_since_ns = None;
                    self.gate
                        .set_fence_deadline(self.view.fence_deadline_ns().max(1));
                } else {
                    self.fenced_since_ns.get_or_insert(now_ns);
                    // Fenced (lease not renewed in time, handing over): no writes,
                    // whatever min-replicas says, until the view says master again.
                    self.gate.set_fence_deadline(1);
                    self.gate.refuse_not_master();
                    self.status.set_role(RoleCode::Fenced);
                }
                Node::Master(m)
            }
            Node::Switching => Node::Switching,
        };
    }
}

impl ReplLogic for ClusterNode {
    fn waiting(&self) -> bool {
        matches!(&self.node, Node::Master(m) if m.waiting())
    }

    fn on_frames(&mut self, link: usize, frames: &[&[u8]], now_ns: u64, tx: &mut dyn LinkTx) {
        match &mut self.node {
            Node::Replica(r) => r.on_frames(link, frames, now_ns, tx),
            Node::Master(m) => m.on_frames(link, frames, now_ns, tx),
            Node::Switching => {}
        }
    }

    fn poll(&mut self, now_ns: u64, tx: &mut dyn LinkTx) -> bool {
        self.follow_view(now_ns);
        self.publish_election();
        let busy = match &mut self.node {
            Node::Replica(r) => r.poll(now_ns, tx),
            Node::Master(m) => m.poll(now_ns, tx),
            Node::Switching => false,
        };
        // The master's poll re-evaluates min-replicas and may reopen the gate: the
        // view has the last word.
        if let Node::Master(m) = &self.node {
            let (role, epoch) = self.view.state();
            if role != Role::Master || epoch != m.epoch() {
                self.gate.refuse_not_master();
                self.gate.set_fence_deadline(1);
            } else {
                self.status.set_role(RoleCode::Master);
            }
        }
        busy
    }
}
