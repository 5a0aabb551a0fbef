//! One replica group's Raft node, driven by its owner (the replication lcore, or the
//! simulation): raft-rs's `RawNode` with our storage and the rules of our state
//! machine around it.
//!
//! **A leader executes first.** The request path runs a write on the leader's store at
//! once (KV-Direct's run to completion) and logs its post-images; the entry is
//! proposed afterwards. So a leader's store holds the effects of every entry it
//! proposed (`spec`), committed or not, and a follower's those of what it applied.
//! What follows from it, and is enforced here:
//!
//! * the answers to a leader's writes (sync mode) and reads wait until the commit
//!   index reaches the entries whose effects they saw ([`Group::commit_index`]);
//! * a new leader takes writes only once it applied every entry before its own no-op
//!   ([`Group::writable`]): its store is then exactly its log;
//! * a leader serves reads only within its lease ([`Group::readable`]): a quorum
//!   confirmed it leader (ReadIndex) less than the lease ago, and with check-quorum no
//!   other node can be elected within an election timeout of hearing from it;
//! * a deposed leader whose proposed entries are truncated holds effects of entries
//!   that are no longer in the log: it rebuilds its store from its own log at once —
//!   empties it ([`Fsm::restore`]) and applies again every committed entry since the
//!   compaction point, which is the beginning of a completed scan, so the log from
//!   there holds every key ([`Progress::rebuilt`]; what it held for clients is void).
//!
//! **Persistence before dependence.** Each ready's entries and hard state are written
//! ([`Durable`]) and, under `FsyncPolicy::Always`, synced before the messages that
//! depend on them (votes, append acknowledgements) leave. A leader sends its appends at
//! once (raft-rs counts its own entries toward the commit only once persisted).
//!
//! Seeded integration bugs (cargo features `bug-*`) switch single rules off, so the
//! simulation can show that it catches each.

use crate::durable::{Durable, FsyncPolicy, Recovered};
use crate::entry::{self, Payload};
use crate::store::LogStore;
use raft::eraftpb::{ConfChangeV2, ConfState, Entry, EntryType, Message, SnapshotMetadata};
use raft::{Config, RawNode, ReadOnlyOption, StateRole};
use std::collections::{HashMap, VecDeque};

/// A group member's settings.
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// This node's Raft id (never 0).
    pub id: u64,
    /// Ticks without a leader before an election (raft-rs randomizes in
    /// `[election_tick, 2 × election_tick)`).
    pub election_tick: usize,
    /// Ticks between a leader's heartbeats.
    pub heartbeat_tick: usize,
    /// When written state is synced.
    pub fsync: FsyncPolicy,
    /// Ticks per second (for `FsyncPolicy::EverySec`).
    pub ticks_per_sec: u64,
    /// How long a confirmed leadership lets the leader serve reads, in ms of its
    /// monotonic clock (which runs while the process is stopped): below the election
    /// timeout (`election_tick` ticks) by the clocks' worst drift.
    pub lease_ms: u64,
    /// Bytes per append message at most.
    pub max_msg_bytes: u64,
    /// Append messages in flight per follower at most.
    pub max_inflight: usize,
    /// Seeds the draws of randomized election timeouts (raft-rs's own come from the
    /// thread's generator; these replace them, so a simulation replays exactly).
    pub seed: u64,
}

impl GroupConfig {
    /// Settings for node `id`: an election after 10 ticks, heartbeats every 2, a
    /// lease of 80 ms (for 10 ms ticks: clocks may drift by 10 %).
    pub fn new(id: u64, fsync: FsyncPolicy, ticks_per_sec: u64) -> GroupConfig {
        GroupConfig {
            id,
            election_tick: 10,
            heartbeat_tick: 2,
            fsync,
            ticks_per_sec,
            lease_ms: 80,
            max_msg_bytes: 1 << 20,
            max_inflight: 256,
            seed: id,
        }
    }
}

/// What the group's state machine (the store) is told.
pub trait Fsm {
    /// Apply committed entry `index`'s records (never one of this node's own
    /// proposals: their effects are in the store already).
    fn apply(&mut self, index: u64, records: &[u8]);
    /// The store is empty from now on: what the log holds after `index` rebuilds it (a
    /// snapshot installed, or the store rebuilt after a divergence).
    fn restore(&mut self, index: u64);
}

/// Where the group's messages go.
pub trait Outbox {
    /// Sends `m` to `m.to`.
    fn send(&mut self, m: Message);
}

/// What changed in one [`Group::handle_ready`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// The commit index moved.
    pub committed: bool,
    /// This node's role or term changed.
    pub role_changed: bool,
    /// The store was rebuilt from the log (a divergence): every answer that depended on
    /// it is void.
    pub rebuilt: bool,
}

/// One node of a replica group (module docs).
pub struct Group<D: Durable> {
    raw: RawNode<LogStore>,
    disk: D,
    cfg: GroupConfig,
    /// The store holds the effects of the entries up to here.
    spec: u64,
    /// The last entry applied (committed and in the store).
    applied: u64,
    /// This leadership's no-op (0: not leader).
    lead_from: u64,
    /// Rebuilds so far.
    pub rebuilds: u64,
    /// Ticks so far.
    ticks: u64,
    /// The monotonic clock at the last tick, ms.
    clock_ms: u64,
    last_sync: u64,
    unsynced: bool,
    /// Reads may be served until this tick (a leader's lease).
    lease_until: u64,
    /// Confirmations asked before this tick renew nothing (a transfer ended the lease).
    lease_floor: u64,
    /// Scans begun (by id) whose end is not committed: their SCAN_BEGIN's index.
    scans: HashMap<u64, u64>,
    /// The index of the last completed scan's SCAN_BEGIN.
    scan_base: u64,
    /// Bytes logged since `scan_base` (to decide a new scan).
    logged_bytes: u64,
    next_scan: u64,
    /// The configurations since the compaction point: (index applied at, conf), the
    /// first the compaction point's — so a compaction records the configuration as of
    /// its index.
    confs: Vec<(u64, ConfState)>,
    /// Terms in which this node saw itself leader (for the one-leader check).
    pub led_terms: VecDeque<u64>,
    /// Draws election timeouts.
    rng: rand::rngs::SmallRng,
}

fn raft_config(c: &GroupConfig, applied: u64) -> Config {
    Config {
        id: c.id,
        election_tick: c.election_tick,
        heartbeat_tick: c.heartbeat_tick,
        applied,
        max_size_per_msg: c.max_msg_bytes,
        max_inflight_msgs: c.max_inflight,
        check_quorum: true,
        pre_vote: true,
        read_only_option: ReadOnlyOption::Safe,
        ..Config::default()
    }
}

fn logger() -> slog::Logger {
    slog::Logger::root(slog::Discard, slog::o!())
}

impl<D: Durable> Group<D> {
    /// A node restarting with what `disk` kept (`kept`), or — when it kept nothing —
    /// a new node: with `voters` a founding member of a new group, with none one that
    /// waits to be added (a learner first) and caught up by the leader.
    pub fn new(
        cfg: GroupConfig,
        mut disk: D,
        kept: Recovered,
        voters: &[u64],
    ) -> raft::Result<Group<D>> {
        let (store, applied) = if kept.is_empty() {
            if voters.is_empty() {
                // A member to be: it waits for the leader's snapshot.
                (LogStore::default(), 0)
            } else {
                let cs = ConfState {
                    voters: voters.to_vec(),
                    ..ConfState::default()
                };
                let store = LogStore::founding(cs);
                // The founding state is durable before anything else.
                disk.install_snapshot(store.compacted());
                disk.set_hard_state(store.hard_state());
                disk.sync();
                let applied = store.compacted().index;
                (store, applied)
            }
        } else {
            // The store restarts empty and replays the log from the compaction point:
            // what the state machine held is rebuilt from the log alone.
            let applied = kept.snap.index;
            let mut conf = kept.conf.clone();
            if conf == ConfState::default() {
                conf = kept.snap.get_conf_state().clone();
            }
            (
                LogStore::restore(kept.hard, conf, kept.snap, kept.entries),
                applied,
            )
        };
        let confs = vec![(applied, store.compacted().get_conf_state().clone())];
        let raw = RawNode::new(&raft_config(&cfg, applied), store, &logger())?;
        let mut g = Group {
            confs,
            raw,
            disk,
            spec: applied,
            applied,
            lead_from: 0,
            rebuilds: 0,
            ticks: 0,
            clock_ms: 0,
            last_sync: 0,
            unsynced: false,
            lease_until: 0,
            lease_floor: 0,
            scans: HashMap::new(),
            scan_base: applied + 1,
            logged_bytes: 0,
            next_scan: 1,
            led_terms: VecDeque::new(),
            rng: rand::SeedableRng::seed_from_u64(cfg.seed),
            cfg,
        };
        g.derandomize();
        Ok(g)
    }

    /// This node's id.
    pub fn id(&self) -> u64 {
        self.cfg.id
    }

    /// The durable state (the simulation reads what a crash keeps).
    pub fn disk(&self) -> &D {
        &self.disk
    }

    /// raft-rs's node (status, progress).
    pub fn raw(&self) -> &RawNode<LogStore> {
        &self.raw
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    /// The leader this node knows (0: none).
    pub fn leader(&self) -> u64 {
        self.raw.raft.leader_id
    }

    /// Whether this node is the leader.
    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The commit index.
    pub fn commit_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// The last entry whose effects the store holds.
    pub fn spec_index(&self) -> u64 {
        self.spec
    }

    /// The last entry applied.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// The configuration.
    pub fn conf_state(&self) -> &ConfState {
        self.raw.store().conf_state()
    }

    /// Whether this node may take writes now: the leader, not handing leadership
    /// over, and its store is exactly its log (module docs).
    pub fn writable(&self) -> bool {
        let r = &self.raw.raft;
        let caught_up =
            cfg!(feature = "bug-write-before-catch-up") || self.applied >= self.lead_from;
        r.state == StateRole::Leader
            && self.lead_from > 0
            && caught_up
            && r.lead_transferee.is_none()
    }

    /// Whether this node may serve reads at `now_ms` of its monotonic clock: writable
    /// and within its lease. The clock, not the tick count: a process stopped past its
    /// lease must not serve once it runs again.
    pub fn readable(&self, now_ms: u64) -> bool {
        self.writable() && (cfg!(feature = "bug-stale-read") || now_ms < self.lease_until)
    }

    /// Replaces raft-rs's draw of the randomized election timeout, right after a reset
    /// (`election_elapsed` 0), with one of this node's seeded generator.
    fn derandomize(&mut self) {
        use rand::Rng;
        let r = &mut self.raw.raft;
        if r.election_elapsed == 0 {
            let et = r.election_timeout();
            let t = self.rng.gen_range(et..2 * et);
            r.set_randomized_election_timeout(t);
        }
    }

    /// One tick, at `now_ms` of the node's monotonic clock: raft-rs's timers, the
    /// lease's renewal (a ReadIndex each heartbeat, stamped with the clock), a
    /// periodic sync.
    pub fn tick(&mut self, now_ms: u64) {
        self.ticks += 1;
        self.clock_ms = now_ms;
        self.raw.tick();
        self.derandomize();
        if self.raw.raft.state == StateRole::Leader
            && self.ticks % self.cfg.heartbeat_tick as u64 == 0
        {
            self.raw.read_index(now_ms.to_le_bytes().to_vec());
        }
        if self.cfg.fsync == FsyncPolicy::EverySec
            && self.unsynced
            && self.ticks - self.last_sync >= self.cfg.ticks_per_sec
        {
            self.sync();
        }
    }

    fn sync(&mut self) {
        self.disk.sync();
        self.unsynced = false;
        self.last_sync = self.ticks;
    }

    /// Takes a message from another node.
    pub fn step(&mut self, m: Message) {
        // Messages of unknown peers or stale terms are dropped by raft-rs's rules.
        let _ = self.raw.step(m);
        self.derandomize();
    }

    /// Proposes `data` (an entry's, `crate::entry`) whose effects the store already
    /// holds (or that has none: a scan marker); its index, or `None` when this node
    /// cannot take it now.
    pub fn propose(&mut self, data: Vec<u8>) -> Option<u64> {
        if !self.writable() {
            return None;
        }
        let n = data.len() as u64;
        self.raw.propose(Vec::new(), data).ok()?;
        let idx = self.raw.raft.raft_log.last_index();
        self.spec = idx;
        self.logged_bytes += n;
        Some(idx)
    }

    /// Hands leadership to `to`: raft-rs sends it the go-ahead only once it has every
    /// entry, and gives up after an election timeout. No writes meanwhile.
    pub fn transfer(&mut self, to: u64) {
        self.end_lease();
        self.raw.transfer_leader(to);
        self.derandomize();
    }

    /// Ends the lease for good: a transfer's target campaigns at once, without waiting
    /// for the followers' election timeouts that the lease counts on; confirmations
    /// asked until now do not renew it.
    fn end_lease(&mut self) {
        self.lease_until = 0;
        self.lease_floor = self.clock_ms + 1;
    }

    /// Proposes a configuration change (leader only); whether it was taken.
    pub fn propose_conf_change(&mut self, cc: ConfChangeV2) -> bool {
        let ok = self.raw.raft.state == StateRole::Leader
            && self.raw.propose_conf_change(Vec::new(), cc).is_ok();
        self.derandomize();
        ok
    }

    /// Whether a new scan should begin (a snapshot was asked for that the last one
    /// cannot give, or the log since the last one outgrew `limit` bytes); the id to
    /// give it. The caller logs SCAN_BEGIN, the chunks and SCAN_END.
    pub fn scan_due(&mut self, limit: u64) -> Option<u64> {
        let wanted = self.raw.store().take_scan_wanted();
        if !self.writable() || !(wanted || self.logged_bytes > limit) {
            return None;
        }
        self.logged_bytes = 0;
        self.next_scan += 1;
        Some((self.raw.raft.term << 32) | self.next_scan)
    }

    /// Handles everything raft-rs has ready: persist, send, apply (module docs).
    pub fn handle_ready<F: Fsm, O: Outbox>(&mut self, fsm: &mut F, out: &mut O) -> Progress {
        let mut progress = Progress::default();
        let mut snapshots_sent = Vec::new();
        while self.raw.has_ready() {
            let before = self.commit_index();
            let mut rd = self.raw.ready();
            if let Some(ss) = rd.ss() {
                progress.role_changed = true;
                if ss.raft_state == StateRole::Leader {
                    self.lead_from = self.raw.raft.raft_log.last_index();
                    self.led_terms.push_back(self.raw.raft.term);
                } else {
                    self.lead_from = 0;
                    self.lease_until = 0;
                }
            }
            for m in rd.take_messages() {
                match m.get_msg_type() {
                    raft::eraftpb::MessageType::MsgSnapshot => snapshots_sent.push(m.to),
                    raft::eraftpb::MessageType::MsgTimeoutNow => self.end_lease(),
                    _ => {}
                }
                out.send(m);
            }
            if !rd.snapshot().is_empty() {
                let meta = rd.snapshot().get_metadata().clone();
                self.install(&meta, fsm);
            }
            let ents = rd.take_entries();
            progress.rebuilt |= self.persist_entries(&ents, fsm);
            if let Some(hs) = rd.hs() {
                self.raw.mut_store().set_hard_state(hs.clone());
                if !cfg!(feature = "bug-term-not-persisted") {
                    self.disk.set_hard_state(hs);
                }
            }
            let ack_first = cfg!(feature = "bug-ack-before-persist");
            if ack_first {
                for m in rd.take_persisted_messages() {
                    out.send(m);
                }
            }
            if rd.must_sync() && self.cfg.fsync == FsyncPolicy::Always && !ack_first {
                self.sync();
            } else if rd.must_sync() {
                self.unsynced = true;
            }
            for m in rd.take_persisted_messages() {
                out.send(m);
            }
            let committed = rd.take_committed_entries();
            self.apply_committed(&committed, fsm);
            for rs in rd.take_read_states() {
                self.confirmed(&rs.request_ctx);
            }
            let mut light = self.raw.advance_append(rd);
            if let Some(c) = light.commit_index() {
                self.raw.mut_store().set_commit(c);
                self.disk.set_hard_state(self.raw.store().hard_state());
            }
            for m in light.take_messages() {
                match m.get_msg_type() {
                    raft::eraftpb::MessageType::MsgSnapshot => snapshots_sent.push(m.to),
                    raft::eraftpb::MessageType::MsgTimeoutNow => self.end_lease(),
                    _ => {}
                }
                out.send(m);
            }
            let committed = light.take_committed_entries();
            self.apply_committed(&committed, fsm);
            self.raw.advance_apply_to(self.applied);
            progress.committed |= self.commit_index() > before;
        }
        // A snapshot carries no data (it is "replay the log from here"): reported sent
        // at once, so a lost one is sent again once the follower's next answer shows it
        // still lacks the entries.
        for to in snapshots_sent {
            self.raw.report_snapshot(to, raft::SnapshotStatus::Finish);
        }
        progress
    }

    /// A quorum confirmed this leader as of tick `ctx`: reads may be served for the
    /// lease from then.
    fn confirmed(&mut self, ctx: &[u8]) {
        let Ok(b) = <[u8; 8]>::try_from(ctx) else {
            return;
        };
        let at = u64::from_le_bytes(b);
        if at >= self.lease_floor {
            self.lease_until = self.lease_until.max(at + self.cfg.lease_ms);
        }
    }

    /// Writes a ready's new entries; one that replaces an entry whose effects the store
    /// holds makes it rebuild the store (module docs). Whether it did.
    fn persist_entries<F: Fsm>(&mut self, ents: &[Entry], fsm: &mut F) -> bool {
        if ents.is_empty() {
            return false;
        }
        let truncated = self.raw.mut_store().append(ents);
        self.disk.append(ents);
        if cfg!(feature = "bug-apply-before-commit") && !self.is_leader() {
            // Applied as they arrive, not when committed.
            for e in ents {
                if e.index > self.spec {
                    if let Payload::Records(r) = entry::decode(&e.data) {
                        fsm.apply(e.index, r);
                    }
                    self.spec = e.index;
                }
            }
        }
        match truncated {
            Some(from) if from <= self.spec => {
                self.rebuild(fsm);
                true
            }
            _ => false,
        }
    }

    /// The store holds effects of writes that could not be logged (leadership went
    /// between their execution and their proposal): rebuilt from the log as after a
    /// divergence.
    pub fn rebuild_now<F: Fsm>(&mut self, fsm: &mut F) {
        self.rebuild(fsm);
    }

    /// Empties the store and applies again every committed entry since the compaction
    /// point (the beginning of a completed scan: the log from there holds every key).
    fn rebuild<F: Fsm>(&mut self, fsm: &mut F) {
        self.rebuilds += 1;
        let store = self.raw.store();
        let first = store.compacted().index + 1;
        fsm.restore(first - 1);
        let upto = self.applied.min(store.last());
        if upto >= first {
            let ents = raft::Storage::entries(
                store,
                first,
                upto + 1,
                None,
                raft::GetEntriesContext::empty(false),
            )
            .unwrap_or_default();
            for e in &ents {
                if let Payload::Records(r) = entry::decode(&e.data) {
                    fsm.apply(e.index, r);
                }
            }
        }
        self.spec = self.applied;
    }

    /// Installs snapshot `meta`: the store empties, the log restarts after it.
    fn install<F: Fsm>(&mut self, meta: &SnapshotMetadata, fsm: &mut F) {
        self.raw.mut_store().apply_snapshot(meta);
        self.disk.install_snapshot(meta);
        fsm.restore(meta.index);
        self.applied = meta.index;
        self.spec = meta.index;
        self.scans.clear();
        self.scan_base = meta.index + 1;
        self.confs = vec![(meta.index, meta.get_conf_state().clone())];
    }

    fn apply_committed<F: Fsm>(&mut self, ents: &[Entry], fsm: &mut F) {
        for e in ents {
            if e.index <= self.applied {
                continue;
            }
            match e.get_entry_type() {
                EntryType::EntryNormal => self.apply_normal(e, fsm),
                EntryType::EntryConfChange | EntryType::EntryConfChangeV2 => self.apply_conf(e),
            }
            self.applied = e.index;
            if self.spec < e.index {
                self.spec = e.index;
            }
        }
    }

    fn apply_normal<F: Fsm>(&mut self, e: &Entry, fsm: &mut F) {
        match entry::decode(&e.data) {
            // This node's own proposals are in its store already.
            Payload::Records(r) if e.index > self.spec => fsm.apply(e.index, r),
            Payload::ScanBegin(id) => {
                self.scans.insert(id, e.index);
            }
            Payload::ScanEnd(id) => {
                if let Some(b) = self.scans.remove(&id) {
                    self.scan_base = b;
                    self.compact(b - 1);
                }
            }
            _ => {}
        }
    }

    /// Drops the log up to `index` (everything before the last completed scan), with
    /// the configuration as of `index`.
    fn compact(&mut self, index: u64) {
        if index == 0 || index > self.applied {
            return;
        }
        let at = self
            .confs
            .iter()
            .rposition(|(i, _)| *i <= index)
            .unwrap_or(0);
        let cs = self.confs[at].1.clone();
        self.confs.drain(..at);
        self.confs[0].0 = index;
        self.raw.mut_store().compact(index, &cs);
        let meta = self.raw.store().compacted().clone();
        self.disk.compact(&meta);
    }

    fn apply_conf(&mut self, e: &Entry) {
        use protobuf::Message as _;
        let cc = if e.get_entry_type() == EntryType::EntryConfChangeV2 {
            ConfChangeV2::parse_from_bytes(&e.data).ok()
        } else {
            raft::eraftpb::ConfChange::parse_from_bytes(&e.data)
                .ok()
                .map(raft_proto::ConfChangeI::into_v2)
        };
        let Some(cc) = cc else { return };
        if let Ok(cs) = self.raw.apply_conf_change(&cc) {
            self.raw.mut_store().set_conf_state(cs.clone());
            self.disk.set_conf_state(&cs);
            self.confs.push((e.index, cs));
        }
    }
}
