//! The deterministic simulation of a replica group (FoundationDB's and TigerBeetle's
//! method): every node, the network and the clients in one process, every draw from
//! one seeded generator, time in simulated milliseconds — so a seed is a schedule that
//! replays exactly.
//!
//! A run has a fault phase — messages lost, duplicated and reordered, partitions,
//! crashes that keep what each fsync policy made durable (a process crash keeps what
//! was written, a machine crash what was synced), lost disks (the node comes back
//! empty under a new id and is added as a learner, then promoted, its old id removed),
//! freezes (a stopped process, a slow disk), clock drift, leadership transfers — then
//! a calm phase until the group settles, and final reads of every key. Clients send
//! PUT, GET, fetch-add and DELETE on a few keys and record every op's call, return and
//! answer (an op whose answer never came is pending: it may or may not have happened).
//!
//! Checks: the history is linearizable per key (`crate::lin`; so no acknowledged
//! write is lost and no read is stale), no term has two leaders, and every settled
//! member's store equals the leader's.

pub mod kv;
pub mod net;
pub mod node;

use crate::durable::FsyncPolicy;
use crate::lin::{self, KvInput, KvKey, KvOutput, Op, Verdict, PENDING};
use net::{Net, NetFaults};
use node::{Keep, Request, SimNode};
use raft::eraftpb::{ConfChangeSingle, ConfChangeType, ConfChangeV2, Message};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// An answer to a client.
#[derive(Clone, Copy, Debug)]
pub enum Reply {
    /// Done, with its answer.
    Done {
        /// The request.
        req: Request,
        /// Its answer.
        output: KvOutput,
    },
    /// Not executed here; the leader the node knows (0: none).
    Reject {
        /// The request.
        req: Request,
        /// The leader's id.
        leader: u64,
    },
}

/// What travels on the simulated network.
#[derive(Clone, Debug)]
enum Wire {
    Raft(Message),
    Req(Request),
    Rep(Reply),
}

/// How often faults strike (per simulated millisecond of the fault phase).
#[derive(Clone, Copy, Debug, Serialize)]
pub struct FaultRates {
    /// A partition begins (one node cut off, or a random split).
    pub partition: f64,
    /// A node crashes.
    pub crash: f64,
    /// A node freezes.
    pub freeze: f64,
    /// The leader is asked to hand leadership over.
    pub transfer: f64,
    /// A node's clock rate changes (within ±10 %).
    pub drift: f64,
    /// Share of crashes that are machine crashes (keep only what was synced).
    pub machine_crash: f64,
    /// Share of crashes that lose the disk.
    pub disk_loss: f64,
    /// Message loss during the fault phase.
    pub drop: f64,
    /// Message duplication during the fault phase.
    pub dup: f64,
}

impl Default for FaultRates {
    fn default() -> Self {
        FaultRates {
            partition: 0.0015,
            crash: 0.0015,
            freeze: 0.001,
            transfer: 0.0008,
            drift: 0.002,
            machine_crash: 0.4,
            disk_loss: 0.15,
            drop: 0.02,
            dup: 0.01,
        }
    }
}

/// A run's settings.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct SimConfig {
    /// Group members.
    pub nodes: usize,
    /// Clients.
    pub clients: usize,
    /// Keys the clients use.
    pub keys: u64,
    /// Milliseconds of the fault phase.
    pub fault_ms: u64,
    /// The members' fsync policy.
    #[serde(skip)]
    pub fsync: FsyncPolicy,
    /// Writes answered when proposed (not linearizable across failovers; documented).
    pub async_mode: bool,
    /// Fault rates.
    pub faults: FaultRates,
    /// Bytes logged after which a leader scans (compaction).
    pub scan_limit: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 3,
            clients: 8,
            keys: 5,
            fault_ms: 4_000,
            fsync: FsyncPolicy::Always,
            async_mode: false,
            faults: FaultRates::default(),
            scan_limit: 2_000,
        }
    }
}

/// What a run found.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SimReport {
    /// The seed.
    pub seed: u64,
    /// Simulated milliseconds.
    pub simulated_ms: u64,
    /// Ops answered.
    pub ops_done: u64,
    /// Ops whose answer never came.
    pub ops_pending: u64,
    /// Keys whose history is not linearizable.
    pub nonlinearizable_keys: u64,
    /// Keys whose check ran out of budget.
    pub unknown_keys: u64,
    /// The most leaders seen in one term.
    pub leaders_per_term: u64,
    /// Settled members whose store differs from the leader's.
    pub divergent_stores: u64,
    /// The group never settled in the calm phase.
    pub unsettled: bool,
    /// Crashes (process, machine, disk lost), freezes, partitions, transfers.
    pub crashes: u64,
    /// Machine crashes among them.
    pub machine_crashes: u64,
    /// Disks lost among them.
    pub disks_lost: u64,
    /// Freezes.
    pub freezes: u64,
    /// Partitions.
    pub partitions: u64,
    /// Leadership transfers asked for.
    pub transfers: u64,
    /// Membership changes committed (learners added, promoted, old ids removed).
    pub conf_changes: u64,
    /// Milliseconds with no node taking writes.
    pub unavailable_ms: u64,
    /// Entries compacted away (scans completed).
    pub compactions: u64,
    /// Why the group did not settle (for a failing seed).
    pub unsettled_state: String,
    /// A node stopped on a broken invariant (raft-rs found its log contradicting what it
    /// had acknowledged): its message.
    pub panicked: Option<String>,
}

impl SimReport {
    /// Whether every property held.
    pub fn passed(&self) -> bool {
        self.panicked.is_none()
            && self.nonlinearizable_keys == 0
            && self.leaders_per_term <= 1
            && self.divergent_stores == 0
            && !self.unsettled
    }
}

/// A client's op in flight.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    req: Request,
    /// Its index in the history.
    at: usize,
    deadline: u64,
    tries: u32,
    resend_at: u64,
    to: usize,
}

struct Client {
    next_op: u64,
    inflight: Option<InFlight>,
    guess: Option<usize>,
}

/// Ms a client waits for an answer before it gives up (the op stays pending).
const CLIENT_TIMEOUT_MS: u64 = 400;
/// Rejections after which a client drops an op (never executed).
const MAX_TRIES: u32 = 40;

/// One simulation run.
pub struct Sim {
    cfg: SimConfig,
    rng: SmallRng,
    now: u64,
    nodes: Vec<SimNode>,
    clients: Vec<Client>,
    net: Net<Wire>,
    history: Vec<(u64, Op<KvInput, KvOutput>)>,
    /// Ops dropped after rejections (never executed): removed from the history.
    dropped: Vec<usize>,
    slot_of: HashMap<u64, usize>,
    /// The original id of each slot's first member (for replacement).
    leaders: BTreeMap<u64, std::collections::BTreeSet<u64>>,
    next_id: u64,
    report: SimReport,
    /// A node whose crash ends at that time, by slot.
    down_until: Vec<u64>,
    heal_at: u64,
    /// Membership: a pending change (slot, old id, new id, stage).
    replacing: Option<(usize, u64, u64, u8)>,
}

impl Sim {
    /// A run of `cfg` with `seed`.
    pub fn new(cfg: SimConfig, seed: u64) -> Sim {
        let ids: Vec<u64> = (1..=cfg.nodes as u64).collect();
        let nodes: Vec<SimNode> = ids
            .iter()
            .enumerate()
            .map(|(slot, &id)| SimNode::new(slot, id, &ids, cfg.fsync, cfg.async_mode, seed))
            .collect();
        let endpoints = cfg.nodes + cfg.clients;
        Sim {
            rng: SmallRng::seed_from_u64(seed),
            now: 0,
            slot_of: ids.iter().enumerate().map(|(s, &id)| (id, s)).collect(),
            nodes,
            clients: (0..cfg.clients)
                .map(|_| Client {
                    next_op: 0,
                    inflight: None,
                    guess: None,
                })
                .collect(),
            net: Net::new(endpoints),
            history: Vec::new(),
            dropped: Vec::new(),
            leaders: BTreeMap::new(),
            next_id: 100,
            report: SimReport {
                seed,
                ..SimReport::default()
            },
            down_until: vec![0; cfg.nodes],
            heal_at: 0,
            replacing: None,
            cfg,
        }
    }

    /// Runs the fault phase, the calm phase and the checks.
    pub fn run(mut self) -> SimReport {
        while self.now < self.cfg.fault_ms {
            self.faults();
            self.step(true);
        }
        self.calm();
        let settle_by = self.now + 20_000;
        while !self.settled() && self.now < settle_by {
            self.step(false);
        }
        self.report.unsettled = !self.settled();
        if self.report.unsettled {
            self.report.unsettled_state = self.describe();
        }
        if !self.report.unsettled {
            self.final_reads();
            self.compare_stores();
        }
        self.check_history();
        self.report.simulated_ms = self.now;
        self.report
    }

    // ---- one millisecond ---------------------------------------------------------

    fn step(&mut self, clients_active: bool) {
        self.now += 1;
        if std::env::var_os("KVRAFT_SIM_DEBUG").is_some() && self.now % 50 == 0 {
            eprintln!("t{}", self.now);
        }
        while let Some((to, w)) = self.net.due(self.now) {
            self.deliver(to, w);
        }
        for slot in 0..self.nodes.len() {
            if !self.nodes[slot].is_up()
                && self.down_until[slot] != 0
                && self.now >= self.down_until[slot]
            {
                self.restart(slot);
            }
            let (sent, replies) = self.nodes[slot].step(self.now, self.cfg.scan_limit);
            for m in sent.raft {
                if let Some(&to) = self.slot_of.get(&m.to) {
                    self.net
                        .send(&mut self.rng, self.now, slot, to, Wire::Raft(m), true);
                }
            }
            for r in replies {
                let c = match r {
                    Reply::Done { req, .. } | Reply::Reject { req, .. } => req.client,
                };
                let to = self.cfg.nodes + c;
                self.net
                    .send(&mut self.rng, self.now, slot, to, Wire::Rep(r), false);
            }
        }
        self.observe();
        self.membership();
        if clients_active {
            for c in 0..self.clients.len() {
                self.client_step(c);
            }
        } else {
            for c in 0..self.clients.len() {
                self.client_timeouts(c);
            }
        }
    }

    fn deliver(&mut self, to: usize, w: Wire) {
        match w {
            Wire::Raft(m) => {
                if to < self.nodes.len() && self.now >= self.nodes[to].frozen_until {
                    self.nodes[to].on_raft(m);
                }
            }
            Wire::Req(req) => {
                if to < self.nodes.len() && self.now >= self.nodes[to].frozen_until {
                    if let Some(r) = self.nodes[to].on_request(req) {
                        let c = self.cfg.nodes + req.client;
                        self.net
                            .send(&mut self.rng, self.now, to, c, Wire::Rep(r), false);
                    }
                }
            }
            Wire::Rep(r) => self.on_reply(r),
        }
    }

    /// Notes leaders per term and unavailability.
    fn observe(&mut self) {
        let mut writable = false;
        for n in &mut self.nodes {
            if let Some(g) = n.group.as_mut() {
                while let Some(t) = g.led_terms.pop_front() {
                    self.leaders.entry(t).or_default().insert(g.id());
                }
                writable |= g.writable();
            }
        }
        if !writable {
            self.report.unavailable_ms += 1;
        }
    }

    // ---- clients -----------------------------------------------------------------

    fn client_step(&mut self, c: usize) {
        self.client_timeouts(c);
        let now = self.now;
        match self.clients[c].inflight {
            Some(f) if f.resend_at != 0 && now >= f.resend_at => {
                let mut f = f;
                f.resend_at = 0;
                self.clients[c].inflight = Some(f);
                self.send_req(c, f.to, f.req);
            }
            None if self.rng.gen_bool(0.2) => self.new_op(c),
            _ => {}
        }
    }

    fn client_timeouts(&mut self, c: usize) {
        if let Some(f) = self.clients[c].inflight {
            if self.now >= f.deadline {
                // Its answer never came: pending (it may or may not have happened). The
                // next op tries anywhere (that node may be gone).
                self.report.ops_pending += 1;
                self.clients[c].inflight = None;
                self.clients[c].guess = None;
            }
        }
    }

    fn new_op(&mut self, c: usize) {
        let key = self.rng.gen_range(0..self.cfg.keys);
        let op = self.clients[c].next_op;
        self.clients[c].next_op += 1;
        let unique = ((c as u64) << 40) | op;
        let input = match self.rng.gen_range(0..10) {
            0..=2 => KvInput::Put(unique),
            3..=5 => KvInput::Get,
            6..=8 => KvInput::Add(1 + self.rng.gen_range(0..3)),
            _ => KvInput::Delete,
        };
        let req = Request {
            client: c,
            op,
            key,
            input,
        };
        self.history.push((
            key,
            Op {
                call: self.now,
                ret: PENDING,
                input,
                output: None,
            },
        ));
        let to = self.clients[c]
            .guess
            .unwrap_or_else(|| self.rng.gen_range(0..self.nodes.len()));
        self.clients[c].inflight = Some(InFlight {
            req,
            at: self.history.len() - 1,
            deadline: self.now + CLIENT_TIMEOUT_MS,
            tries: 0,
            resend_at: 0,
            to,
        });
        self.send_req(c, to, req);
    }

    fn send_req(&mut self, c: usize, to: usize, req: Request) {
        let from = self.cfg.nodes + c;
        self.net
            .send(&mut self.rng, self.now, from, to, Wire::Req(req), false);
    }

    fn on_reply(&mut self, r: Reply) {
        let req = match r {
            Reply::Done { req, .. } | Reply::Reject { req, .. } => req,
        };
        let Some(f) = self.clients[req.client].inflight else {
            return;
        };
        if f.req.op != req.op {
            return; // an answer to an op given up on
        }
        match r {
            Reply::Done { output, .. } => {
                let h = &mut self.history[f.at].1;
                h.ret = self.now;
                h.output = Some(output);
                self.report.ops_done += 1;
                self.clients[req.client].inflight = None;
            }
            Reply::Reject { leader, .. } => {
                let to = self
                    .slot_of
                    .get(&leader)
                    .copied()
                    .unwrap_or_else(|| self.rng.gen_range(0..self.nodes.len()));
                self.clients[req.client].guess = Some(to);
                let mut f = f;
                f.tries += 1;
                f.to = to;
                f.resend_at = self.now + 2;
                if f.tries > MAX_TRIES {
                    // Never executed anywhere: not part of the history.
                    self.dropped.push(f.at);
                    self.clients[req.client].inflight = None;
                } else {
                    self.clients[req.client].inflight = Some(f);
                }
            }
        }
    }

    // ---- faults ------------------------------------------------------------------

    fn faults(&mut self) {
        let f = self.cfg.faults;
        self.net.faults = NetFaults {
            drop: f.drop,
            dup: f.dup,
            delay: (1, 6),
        };
        if self.heal_at != 0 && self.now >= self.heal_at {
            self.net.heal();
            self.heal_at = 0;
        }
        let n = self.nodes.len();
        if self.rng.gen_bool(f.partition) && self.heal_at == 0 {
            self.report.partitions += 1;
            // Half of the partitions cut the leader off (the schedule stale reads and
            // lost writes need).
            let cut_off = match self.leader_slot() {
                Some(l) if self.rng.gen_bool(0.5) => l,
                _ => self.rng.gen_range(0..n),
            };
            let split = self.rng.gen_bool(0.5);
            for a in 0..n {
                for b in 0..n {
                    let side = |x: usize| {
                        if split {
                            x % 2 == cut_off % 2
                        } else {
                            x == cut_off
                        }
                    };
                    if a != b && side(a) != side(b) {
                        self.net.set_cut(a, b, true);
                    }
                }
            }
            self.heal_at = self.now + self.rng.gen_range(100..1_500);
            node::trace(|| {
                format!(
                    "t{} partition (slot {cut_off}, split {split}) until {}",
                    self.now, self.heal_at
                )
            });
        }
        if self.rng.gen_bool(f.crash) {
            let slot = self.rng.gen_range(0..n);
            if self.nodes[slot].is_up() && self.replacing.is_none() {
                self.crash(slot);
            }
        }
        if self.rng.gen_bool(f.freeze) {
            let slot = match self.leader_slot() {
                Some(l) if self.rng.gen_bool(0.5) => l,
                _ => self.rng.gen_range(0..n),
            };
            self.nodes[slot].frozen_until = self.now + self.rng.gen_range(50..800);
            self.report.freezes += 1;
        }
        if self.rng.gen_bool(f.drift) {
            let slot = self.rng.gen_range(0..n);
            self.nodes[slot].tick_ms = self.rng.gen_range(9..=11);
        }
        if self.rng.gen_bool(f.transfer) {
            self.transfer();
        }
    }

    fn crash(&mut self, slot: usize) {
        let f = self.cfg.faults;
        let x: f64 = self.rng.gen();
        // A lost disk only while every other member's is whole (a majority that lost
        // its disks cannot know what was committed: the group would rightly wait).
        let loss_ok = self.down_until.iter().all(|&d| d == 0) && self.all_members_whole();
        let keep = if x < f.disk_loss {
            if !loss_ok {
                return; // this crash would lose a second disk: not now
            }
            self.report.disks_lost += 1;
            Keep::Nothing
        } else if x < f.disk_loss + f.machine_crash {
            self.report.machine_crashes += 1;
            Keep::Synced
        } else {
            Keep::Written
        };
        self.report.crashes += 1;
        node::trace(|| format!("t{} crash slot {} keep {:?}", self.now, slot, keep));
        self.nodes[slot].crash(keep);
        self.down_until[slot] = self.now + self.rng.gen_range(20..1_000);
    }

    /// Whether every voter of the leader's configuration runs as its id (no lost disk
    /// awaits its replacement).
    fn all_members_whole(&self) -> bool {
        let Some(l) = self.leader_slot() else {
            return false;
        };
        let g = self.nodes[l].group.as_ref().expect("up");
        self.replacing.is_none()
            && g.conf_state()
                .voters
                .iter()
                .all(|v| self.slot_of.get(v).is_some_and(|&s| self.nodes[s].id == *v))
    }

    fn restart(&mut self, slot: usize) {
        node::trace(|| format!("t{} restart slot {}", self.now, slot));
        self.down_until[slot] = 0;
        let new_id = self.next_id;
        let old = self.nodes[slot].id;
        self.nodes[slot].restart(new_id);
        if self.nodes[slot].id != old {
            // A lost disk: a new member under a new id; the old one is replaced.
            self.next_id += 1;
            self.slot_of.insert(new_id, slot);
        }
    }

    fn transfer(&mut self) {
        let Some(l) = self.leader_slot() else { return };
        let to = self.rng.gen_range(0..self.nodes.len());
        let id = self.nodes[to].id;
        if to != l {
            self.report.transfers += 1;
            node::trace(|| format!("t{} transfer {} -> {}", self.now, l, to));
            self.nodes[l].transfer_to = Some(id);
        }
    }

    fn leader_slot(&self) -> Option<usize> {
        (0..self.nodes.len()).find(|&s| self.nodes[s].group.as_ref().is_some_and(|g| g.is_leader()))
    }

    /// The operator of membership: a member that came back empty under a new id is
    /// added as a learner, promoted once caught up, and its old id removed.
    fn membership(&mut self) {
        let Some(l) = self.leader_slot() else { return };
        let g = self.nodes[l].group.as_ref().expect("up");
        let conf = g.conf_state().clone();
        if self.replacing.is_none() {
            for slot in 0..self.nodes.len() {
                let id = self.nodes[slot].id;
                if self.nodes[slot].is_up()
                    && !conf.voters.contains(&id)
                    && !conf.learners.contains(&id)
                {
                    let old = conf
                        .voters
                        .iter()
                        .copied()
                        .find(|v| self.slot_of.get(v) == Some(&slot) && *v != id);
                    if let Some(old) = old {
                        self.replacing = Some((slot, old, id, 0));
                    }
                    break;
                }
            }
        }
        let Some((slot, old, new, _)) = self.replacing else {
            return;
        };
        let commit = g.commit_index();
        let caught_up = g
            .raw()
            .raft
            .prs()
            .get(new)
            .is_some_and(|p| p.matched + 2 >= commit);
        let change = |id: u64, ty: ConfChangeType| {
            let mut cc = ConfChangeV2::default();
            let mut s = ConfChangeSingle::default();
            s.set_change_type(ty);
            s.node_id = id;
            cc.mut_changes().push(s);
            cc
        };
        let g = self.nodes[l].group.as_mut().expect("up");
        if g.raw().raft.pending_conf_index > g.applied() {
            return; // one change at a time
        }
        // What to do next follows from the configuration as it is (a proposal may
        // have been lost with a leader).
        let (is_voter, is_learner) = (conf.voters.contains(&new), conf.learners.contains(&new));
        if !is_voter && !is_learner {
            g.propose_conf_change(change(new, ConfChangeType::AddLearnerNode));
        } else if is_learner && caught_up {
            g.propose_conf_change(change(new, ConfChangeType::AddNode));
        } else if is_voter && conf.voters.contains(&old) {
            g.propose_conf_change(change(old, ConfChangeType::RemoveNode));
        } else if is_voter {
            self.report.conf_changes += 3;
            self.slot_of.remove(&old);
            self.replacing = None;
            node::trace(|| format!("t{} slot {slot}: {old} replaced by {new}", self.now));
        }
    }

    // ---- the calm phase and the checks --------------------------------------------

    fn calm(&mut self) {
        self.net.faults = NetFaults::CALM;
        self.net.heal();
        self.heal_at = 0;
        for slot in 0..self.nodes.len() {
            self.nodes[slot].frozen_until = 0;
            self.nodes[slot].tick_ms = 10;
            if !self.nodes[slot].is_up() {
                self.down_until[slot] = self.now + 1;
            }
        }
    }

    /// Settled: every node up, no membership change pending, a writable leader whose
    /// commit every member applied, nothing held or in flight.
    fn settled(&self) -> bool {
        let Some(l) = self.leader_slot() else {
            return false;
        };
        let g = self.nodes[l].group.as_ref().expect("up");
        if !g.readable(self.nodes[l].clock_ms()) || self.replacing.is_some() {
            return false;
        }
        let commit = g.commit_index();
        let members: Vec<u64> = g.conf_state().voters.clone();
        self.nodes.iter().all(|n| {
            n.group
                .as_ref()
                .is_some_and(|m| !members.contains(&n.id) || m.applied() >= commit)
        }) && self.clients.iter().all(|c| c.inflight.is_none())
    }

    /// Every node's state, for a report.
    fn describe(&self) -> String {
        let mut out = format!("replacing {:?}; ", self.replacing);
        for n in &self.nodes {
            match n.group.as_ref() {
                None => out += &format!("[slot {} id {} down] ", n.slot, n.id),
                Some(g) => {
                    out += &format!(
                        "[slot {} id {} term {} leader {} role {:?} commit {} applied {} spec {} last {} rebuilds {} conf {:?}/{:?} writable {} readable {}] ",
                        n.slot,
                        n.id,
                        g.term(),
                        g.leader(),
                        g.raw().raft.state,
                        g.commit_index(),
                        g.applied(),
                        g.spec_index(),
                        g.raw().raft.raft_log.last_index(),
                        g.rebuilds,
                        g.conf_state().voters,
                        g.conf_state().learners,
                        g.writable(),
                        g.readable(n.clock_ms()),
                    )
                }
            }
        }
        out
    }

    /// Reads every key at the leader (linearizable reads), into the history.
    fn final_reads(&mut self) {
        let Some(l) = self.leader_slot() else { return };
        for key in 0..self.cfg.keys {
            let call = self.now;
            let v = self.nodes[l].kv.map.get(&key).copied();
            self.history.push((
                key,
                Op {
                    call,
                    ret: call,
                    input: KvInput::Get,
                    output: Some(KvOutput::Value(v)),
                },
            ));
        }
    }

    fn compare_stores(&mut self) {
        let Some(l) = self.leader_slot() else { return };
        let leader = self.nodes[l].kv.map.clone();
        let members = self.nodes[l]
            .group
            .as_ref()
            .expect("up")
            .conf_state()
            .voters
            .clone();
        for n in &self.nodes {
            if members.contains(&n.id) && n.kv.map != leader {
                self.report.divergent_stores += 1;
                if std::env::var_os("KVRAFT_SIM_DEBUG").is_some() {
                    eprintln!(
                        "store of slot {} id {}: {:?}\nleader slot {}: {:?}",
                        n.slot, n.id, n.kv.map, l, leader
                    );
                }
            }
        }
        for (t, ids) in &self.leaders {
            let _ = t;
            self.report.leaders_per_term = self.report.leaders_per_term.max(ids.len() as u64);
        }
    }

    fn check_history(&mut self) {
        for (t, ids) in &self.leaders {
            let _ = t;
            self.report.leaders_per_term = self.report.leaders_per_term.max(ids.len() as u64);
        }
        let mut dropped = std::mem::take(&mut self.dropped);
        dropped.sort_unstable();
        let ops: Vec<(u64, Op<KvInput, KvOutput>)> = self
            .history
            .drain(..)
            .enumerate()
            .filter(|(i, _)| dropped.binary_search(i).is_err())
            .map(|(_, o)| o)
            .collect();
        if std::env::var_os("KVRAFT_SIM_DEBUG").is_some() {
            let bad = lin::check_keys(&KvKey, ops.clone(), 5_000_000);
            for (k, _) in &bad {
                let mut h: Vec<_> = ops
                    .iter()
                    .filter(|(kk, _)| kk == k)
                    .map(|(_, o)| o.clone())
                    .collect();
                h.sort_by_key(|o| o.call);
                eprintln!("key {k}:");
                for o in h {
                    eprintln!(
                        "  [{} .. {}] {:?} -> {:?}",
                        o.call,
                        if o.ret == PENDING { -1 } else { o.ret as i64 },
                        o.input,
                        o.output
                    );
                }
            }
        }
        for (_, v) in lin::check_keys(&KvKey, ops, 5_000_000) {
            match v {
                Verdict::Unknown => self.report.unknown_keys += 1,
                _ => self.report.nonlinearizable_keys += 1,
            }
        }
    }
}

/// Runs `seeds` seeds of `cfg`; the reports of those that failed, and the totals.
pub fn run_seeds(cfg: SimConfig, seeds: std::ops::Range<u64>) -> (Vec<SimReport>, SimReport) {
    let mut failed = Vec::new();
    let mut total = SimReport::default();
    // A node that finds its state broken stops the run (raft-rs panics on an invariant
    // it can no longer keep): reported as the seed's failure, quietly.
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    for seed in seeds {
        let r = match std::panic::catch_unwind(|| Sim::new(cfg, seed).run()) {
            Ok(r) => r,
            Err(e) => SimReport {
                seed,
                panicked: Some(
                    e.downcast_ref::<String>()
                        .cloned()
                        .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_else(|| "a panic".into()),
                ),
                ..SimReport::default()
            },
        };
        total.simulated_ms += r.simulated_ms;
        total.ops_done += r.ops_done;
        total.ops_pending += r.ops_pending;
        total.crashes += r.crashes;
        total.machine_crashes += r.machine_crashes;
        total.disks_lost += r.disks_lost;
        total.freezes += r.freezes;
        total.partitions += r.partitions;
        total.transfers += r.transfers;
        total.conf_changes += r.conf_changes;
        total.unavailable_ms += r.unavailable_ms;
        total.nonlinearizable_keys += r.nonlinearizable_keys;
        total.unknown_keys += r.unknown_keys;
        total.divergent_stores += r.divergent_stores;
        total.leaders_per_term = total.leaders_per_term.max(r.leaders_per_term);
        if r.panicked.is_some() {
            total.panicked = Some(format!(
                "{} seed(s)",
                failed
                    .iter()
                    .filter(|f: &&SimReport| f.panicked.is_some())
                    .count()
                    + 1
            ));
        }
        if !r.passed() {
            failed.push(r);
        }
    }
    std::panic::set_hook(hook);
    (failed, total)
}
