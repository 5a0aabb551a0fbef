//! One simulated node: a group member with its store, serving clients as the
//! dataplane does — a write runs on the leader's store at once and is answered when
//! its entry commits; a read is served within the lease and answered once everything
//! it could have seen committed; a leader logs scans.

use super::kv::{self, Kv};
use super::Reply;
use crate::durable::{FsyncPolicy, MemDisk, Recovered};
use crate::entry;
use crate::group::{Group, GroupConfig, Outbox};
use crate::lin::{KvInput, KvOutput};
use raft::eraftpb::Message;

/// A client's request.
#[derive(Clone, Copy, Debug)]
pub struct Request {
    /// The client.
    pub client: usize,
    /// Its op number.
    pub op: u64,
    /// The key.
    pub key: u64,
    /// What it asks.
    pub input: KvInput,
}

/// An answer held until the commit index covers what it depends on.
#[derive(Clone, Copy, Debug)]
struct Held {
    req: Request,
    output: KvOutput,
    /// The entry whose commit releases it, and its term.
    index: u64,
    term: u64,
}

/// A scan in progress: the keys left to log.
#[derive(Debug)]
struct Scan {
    id: u64,
    keys: Vec<u64>,
}

/// Keys per scan chunk.
const SCAN_CHUNK: usize = 8;

/// One simulated node (module docs).
pub struct SimNode {
    /// Its slot (network endpoint).
    pub slot: usize,
    /// The Raft id it runs as (a new one after a disk loss).
    pub id: u64,
    /// Its group member (`None` while down).
    pub group: Option<Group<MemDisk>>,
    /// What its disk holds across crashes.
    pub disk: MemDisk,
    /// Its store.
    pub kv: Kv,
    held: Vec<Held>,
    /// Records of this millisecond's writes, proposed as one entry.
    batch: Vec<u8>,
    batch_waiting: Vec<(Request, KvOutput)>,
    scan: Option<Scan>,
    /// Its tick period in ms (clock drift).
    pub tick_ms: u64,
    /// It processes nothing until then (a freeze).
    pub frozen_until: u64,
    next_tick: u64,
    fsync: FsyncPolicy,
    /// Writes answered when proposed (async mode) rather than committed.
    pub async_mode: bool,
    /// The run's seed (for the member's election timeouts).
    pub seed: u64,
    /// A leadership transfer asked for, done at the next step.
    pub transfer_to: Option<u64>,
    /// Its monotonic clock, µs: 10 ms per tick period of simulated time (so it drifts
    /// with the tick period), running while the node is frozen.
    clock_us: u64,
}

/// Messages a node sends in one step: Raft messages by id.
#[derive(Default)]
pub struct Sent {
    /// Raft messages.
    pub raft: Vec<Message>,
}

impl Outbox for Sent {
    fn send(&mut self, m: Message) {
        self.raft.push(m);
    }
}

impl SimNode {
    /// A node in `slot` with Raft id `id`, starting a group of `voters` (or, with
    /// none, joining one), with `fsync`.
    pub fn new(
        slot: usize,
        id: u64,
        voters: &[u64],
        fsync: FsyncPolicy,
        async_mode: bool,
        seed: u64,
    ) -> SimNode {
        let mut n = SimNode {
            slot,
            id,
            group: None,
            disk: MemDisk::default(),
            kv: Kv::default(),
            held: Vec::new(),
            batch: Vec::new(),
            batch_waiting: Vec::new(),
            scan: None,
            tick_ms: 10,
            frozen_until: 0,
            next_tick: 0,
            fsync,
            async_mode,
            seed,
            transfer_to: None,
            clock_us: 0,
        };
        n.start(Recovered::default(), voters);
        n
    }

    fn config(&self) -> GroupConfig {
        GroupConfig {
            seed: self.seed ^ self.id.wrapping_mul(0x9E37_79B9_7F4A_7C15),
            ..GroupConfig::new(self.id, self.fsync, 100)
        }
    }

    /// Starts the group member from `kept` (empty: a new member of `voters`).
    fn start(&mut self, kept: Recovered, voters: &[u64]) {
        self.kv = Kv::default();
        self.held.clear();
        self.batch.clear();
        self.batch_waiting.clear();
        self.scan = None;
        let disk = MemDisk {
            written: kept.clone(),
            synced: kept.clone(),
            syncs: 0,
        };
        self.group = Some(Group::new(self.config(), disk, kept, voters).expect("raft config"));
    }

    /// Its monotonic clock, ms.
    pub fn clock_ms(&self) -> u64 {
        self.clock_us / 1000
    }

    /// Whether it is up.
    pub fn is_up(&self) -> bool {
        self.group.is_some()
    }

    /// Crashes it: `keep` says what of its disk survives.
    pub fn crash(&mut self, keep: Keep) {
        if let Some(g) = self.group.take() {
            self.disk = g.disk().clone();
        }
        match keep {
            Keep::Written => {}
            Keep::Synced => self.disk.written = self.disk.synced.clone(),
            Keep::Nothing => self.disk = MemDisk::default(),
        }
        self.kv = Kv::default();
        self.held.clear();
    }

    /// Restarts it with what its disk kept; with nothing, as a new member `new_id`.
    pub fn restart(&mut self, new_id: u64) {
        let kept = self.disk.written.clone();
        if kept.is_empty() {
            self.id = new_id;
        }
        self.start(kept, &[]);
    }

    /// Takes a Raft message (dropped when addressed to an id it no longer runs as).
    pub fn on_raft(&mut self, m: Message) {
        if let Some(g) = self.group.as_mut() {
            if m.to == self.id {
                g.step(m);
            }
        }
    }

    /// Serves a request now: a rejection (not executed: try elsewhere, with the leader
    /// it knows), or nothing yet (held or batched).
    pub fn on_request(&mut self, req: Request) -> Option<Reply> {
        let g = self.group.as_ref()?;
        let reject = Some(Reply::Reject {
            req,
            leader: g.leader(),
        });
        match req.input {
            KvInput::Get => {
                if !g.readable(self.clock_us / 1000) {
                    return reject;
                }
                let output = KvOutput::Value(self.kv.map.get(&req.key).copied());
                trace(|| {
                    format!("slot {} id {} term {} serves c{} op{} GET k{} = {:?} (commit {} spec {} lease ok)", self.slot, self.id, g.term(), req.client, req.op, req.key, output, g.commit_index(), g.spec_index())
                });
                if !self.batch.is_empty() {
                    // It may see writes not logged yet: answered with them.
                    self.batch_waiting.push((req, output));
                    return None;
                }
                // It saw every proposed entry's effects: held until they commit.
                let index = g.spec_index().max(g.applied());
                let term = g.raw().raft.raft_log.term(index).unwrap_or(0);
                self.held.push(Held {
                    req,
                    output,
                    index,
                    term,
                });
                None
            }
            _ => {
                if !g.writable() {
                    return reject;
                }
                let (output, post) = self.execute(req.key, req.input);
                trace(|| {
                    format!(
                        "slot {} id {} term {} executes c{} op{} {:?} k{} -> {:?} post {:?}",
                        self.slot,
                        self.id,
                        self.group.as_ref().map_or(0, |g| g.term()),
                        req.client,
                        req.op,
                        req.input,
                        req.key,
                        output,
                        post
                    )
                });
                kv::record(&mut self.batch, req.key, post);
                self.batch_waiting.push((req, output));
                None
            }
        }
    }

    /// Runs a write on the store: its answer and the key's post-image.
    fn execute(&mut self, key: u64, input: KvInput) -> (KvOutput, Option<u64>) {
        let cur = self.kv.map.get(&key).copied();
        let (out, post) = match input {
            KvInput::Put(v) => (KvOutput::Done, Some(v)),
            KvInput::Add(d) => (KvOutput::Value(cur), cur.map(|c| c.wrapping_add(d))),
            KvInput::Delete => (KvOutput::Deleted(cur.is_some()), None),
            KvInput::Get => (KvOutput::Value(cur), cur),
        };
        match post {
            Some(v) => self.kv.map.insert(key, v),
            None => self.kv.map.remove(&key),
        };
        (out, post)
    }

    /// One millisecond at `now`: the tick if due, the batch proposed, a scan chunk,
    /// the ready handled; returns what it sends and the answers released.
    pub fn step(&mut self, now: u64, scan_limit: u64) -> (Sent, Vec<Reply>) {
        let mut sent = Sent::default();
        let mut replies = Vec::new();
        self.clock_us += 10_000 / self.tick_ms;
        if self.group.is_none() || now < self.frozen_until {
            return (sent, replies);
        }
        if now >= self.next_tick {
            self.next_tick = now + self.tick_ms;
            let clock = self.clock_us / 1000;
            if let Some(g) = self.group.as_mut() {
                g.tick(clock);
            }
        }
        self.propose_batch(&mut replies);
        if let Some(to) = self.transfer_to.take() {
            // At a batch boundary: everything executed is logged first.
            if let Some(g) = self.group.as_mut() {
                g.transfer(to);
            }
        }
        self.scan_step(scan_limit);
        let g = self.group.as_mut().expect("up");
        let p = g.handle_ready(&mut self.kv, &mut sent);
        if p.role_changed {
            trace(|| {
                format!(
                    "slot {} id {} now {:?} term {} commit {} applied {} last {}",
                    self.slot,
                    self.id,
                    g.raw().raft.state,
                    g.term(),
                    g.commit_index(),
                    g.applied(),
                    g.raw().raft.raft_log.last_index()
                )
            });
        }
        if p.rebuilt {
            trace(|| format!("slot {} id {} rebuilt its store", self.slot, self.id));
            // Nothing it held may be answered: it saw entries no longer in the log.
            self.held.clear();
            self.scan = None;
        }
        self.release(&mut replies);
        (sent, replies)
    }

    fn propose_batch(&mut self, replies: &mut Vec<Reply>) {
        if self.batch.is_empty() {
            return;
        }
        let g = self.group.as_mut().expect("up");
        let data = entry::records(&self.batch);
        self.batch.clear();
        let waiting = std::mem::take(&mut self.batch_waiting);
        match g.propose(data) {
            Some(index) => {
                let term = g.term();
                for (req, output) in waiting {
                    if self.async_mode {
                        replies.push(Reply::Done { req, output });
                    } else {
                        self.held.push(Held {
                            req,
                            output,
                            index,
                            term,
                        });
                    }
                }
            }
            // Leadership went between the writes' execution and now: their effects are
            // in the store but in no entry. The store is rebuilt from the log, and
            // nothing that saw them is answered.
            None => {
                g.rebuild_now(&mut self.kv);
                self.held.clear();
                self.scan = None;
            }
        }
    }

    /// The leader's scan: begins when the group says one is due, logs a chunk of keys
    /// per step with their current values, ends.
    fn scan_step(&mut self, limit: u64) {
        let g = self.group.as_mut().expect("up");
        if self.scan.is_none() {
            if let Some(id) = g.scan_due(limit) {
                if g.propose(entry::scan_marker(entry::SCAN_BEGIN, id))
                    .is_some()
                {
                    self.scan = Some(Scan {
                        id,
                        keys: self.kv.map.keys().rev().copied().collect(),
                    });
                }
            }
            return;
        }
        if !g.writable() {
            self.scan = None;
            return;
        }
        let s = self.scan.as_mut().expect("a scan");
        let mut recs = Vec::new();
        for _ in 0..SCAN_CHUNK {
            let Some(k) = s.keys.pop() else { break };
            if let Some(&v) = self.kv.map.get(&k) {
                kv::record(&mut recs, k, Some(v));
            }
        }
        let done = s.keys.is_empty();
        let id = s.id;
        if !recs.is_empty() {
            g.propose(entry::records(&recs));
        }
        if done {
            g.propose(entry::scan_marker(entry::SCAN_END, id));
            self.scan = None;
        }
    }

    /// Answers whose entry committed (in the term it was written in).
    fn release(&mut self, replies: &mut Vec<Reply>) {
        let g = self.group.as_ref().expect("up");
        let commit = g.commit_index();
        let log = &g.raw().raft.raft_log;
        self.held.retain(|h| {
            if h.index > commit {
                return true;
            }
            // A compacted index was committed here long ago (a replaced entry would
            // have diverged the store and dropped what it held).
            if log.term(h.index).map_or(true, |t| t == h.term) {
                replies.push(Reply::Done {
                    req: h.req,
                    output: h.output,
                });
            }
            // Released, or its entry was replaced: never answered (the client times
            // out: outcome unknown).
            false
        });
    }
}

/// Prints a trace line when `KVRAFT_SIM_DEBUG` is set.
pub fn trace(f: impl FnOnce() -> String) {
    if std::env::var_os("KVRAFT_SIM_DEBUG").is_some() {
        eprintln!("{}", f());
    }
}

/// What a crash keeps of the disk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keep {
    /// A process crash: what was written (the OS keeps it).
    Written,
    /// A machine crash: what was synced.
    Synced,
    /// A lost disk.
    Nothing,
}
