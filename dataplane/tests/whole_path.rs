//! The whole write path in one model, without DPDK: a `kvclient::Client` over a seeded
//! link that drops, duplicates and reorders frames reaches a master `Server`, whose
//! mutation tap fills the replication log that the master's replication logic
//! (`MasterNode`: shipper, probes, write gate) ships over a second lossy link to a
//! `ReplicaNode`, whose applier writes the replica's engine. All four reliable
//! endpoints face loss at once: the client's sender, the server's receiver, the
//! shipper and the replica's receiver.
//!
//! Checked, for async and sync replication and several seeds:
//!
//! * every reply is what a `HashMap` model of the store answers, op by op (GET, PUT,
//!   DELETE, fetch-add, COMPARE_DELETE on a few keys);
//! * in sync mode, at the moment a write is acknowledged, the replica already holds
//!   it: with nothing more delivered, draining what it received gives the model's
//!   value for that key (the guarantee of docs/REPLICATION.md, "Write safety");
//! * once the links are quiet, the replica's store is the master's and the model's,
//!   key by key.
//!
//! Time is simulated: every poll of the client's link moves the clock one step, so
//! every timer fires after the same number of steps on any machine.

mod common;

use common::repl::{master_config, replica_config};
use common::{engine, identity, model_transport_config, request_params, Rng, VecSink, RKEY};
use dataplane::repl::apply::{Applier, ApplyStats, CompletionKeeper};
use dataplane::repl::gate::WriteGate;
use dataplane::repl::hold::HoldQueue;
use dataplane::repl::link::{ReplLogic, VecLinks};
use dataplane::repl::master::MasterNode;
use dataplane::repl::replica::ReplicaNode;
use dataplane::repl::scan::ScanShared;
use dataplane::repl::status::ReplStatus;
use dataplane::repl::worker_log::ReplLog;
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvclient::sim::{Faults, LinkEnd, LossyLink};
use kvclient::{Client, ClientConfig, PacketIo};
use kvengine::Engine;
use kvrepl::log::log_ring;
use kvrepl::progress::Mode;
use std::cell::Cell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Simulated time per poll of the client's link (the replication timers are
/// milliseconds: hundreds of polls).
const STEP_NS: u64 = 20_000;

/// The replica keeps no completion records here.
struct NoRecords;

impl CompletionKeeper for NoRecords {
    fn record(&mut self, _qpn: u32, _blob: &[u8]) {}
    fn full_sync(&mut self) {}
}

/// The client's link, the master, the replication link and the replica.
struct Path {
    client: LinkEnd,
    server_end: LinkEnd,
    master: Server,
    stats: WorkerStats,
    node: MasterNode,
    master_status: Arc<ReplStatus>,
    /// The master worker's sync state: `durable` releases held responses.
    shared: Arc<ScanShared>,
    /// Sync mode: responses held until the replica has their writes.
    hold: Option<HoldQueue<Vec<u8>>>,
    replica: ReplicaNode,
    applier: Applier,
    replica_engine: Engine,
    to_r: VecLinks,
    to_m: VecLinks,
    rng: Rng,
    /// Replication frames lost, per mille, each way.
    loss: u64,
    clock: Rc<Cell<u64>>,
}

impl Path {
    fn new(seed: u64, client_faults: Faults, loss: u64, mode: Mode) -> Path {
        let (client, server_end) = LossyLink::new(seed, client_faults, client_faults);
        server_end.set_burst(32);
        let mut master = Server::new(identity(), &qps(), engine(16 << 20));
        let (log, log_end) = log_ring(1 << 20);
        let shared = Arc::new(ScanShared::default());
        let lost = Arc::new(AtomicU64::new(0));
        master.set_mutation_sink(Some(Box::new(ReplLog::new(log, shared.clone(), lost))));
        let gate = Arc::new(WriteGate::writable());
        master.set_write_gate(gate.clone());
        let master_status = Arc::new(ReplStatus::default());
        let min_replicas = usize::from(mode == Mode::Sync);
        let cfg = master_config(mode, min_replicas, 0xabcd ^ seed, false);
        let node = MasterNode::new(
            cfg,
            1,
            vec![log_end],
            vec![shared.clone()],
            master_status.clone(),
            gate,
            0,
        )
        .unwrap();
        let (ring, ring_end) = log_ring(1 << 20);
        let apply = Arc::new(ApplyStats::default());
        let replica = ReplicaNode::new(
            replica_config(true),
            1,
            vec![ring],
            vec![apply.clone()],
            Arc::new(ReplStatus::default()),
            Arc::new(WriteGate::writable()),
        )
        .unwrap();
        Path {
            client,
            server_end,
            master,
            stats: WorkerStats::default(),
            node,
            master_status,
            shared,
            hold: (mode == Mode::Sync).then(|| HoldQueue::new(4096)),
            replica,
            applier: Applier::new(ring_end, apply),
            replica_engine: engine(16 << 20),
            to_r: VecLinks::new(1600),
            to_m: VecLinks::new(1600),
            rng: Rng(seed | 1),
            loss,
            clock: Rc::new(Cell::new(0)),
        }
    }

    /// The master worker's turn: one burst, its post-images logged, its responses
    /// sent (sync mode: held until the replica has their writes).
    fn serve(&mut self) {
        let mut frames: Vec<Vec<u8>> = Vec::new();
        self.server_end.recv(&mut |f| frames.push(f.to_vec()));
        let mut tx = VecSink::default();
        if !frames.is_empty() {
            let views: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
            self.master.handle_burst(&views, &self.stats, &mut tx);
        }
        self.master.tick_mutation_sink();
        let Some(h) = self.hold.as_mut() else {
            for f in tx.sent {
                self.server_end.send(&f);
            }
            return;
        };
        for f in tx.sent {
            let qp = kvwire::partition::peek_dest_qp(&f).unwrap_or(0);
            assert!(h.push(f, qp).is_ok(), "the hold queue is full");
        }
        if !frames.is_empty() {
            let m = &self.master;
            h.tag(if m.took_writes() {
                m.write_position()
            } else {
                0
            });
        }
        let durable = self.shared.durable.load(Ordering::Acquire);
        let end = &mut self.server_end;
        h.release(durable, |f| {
            end.send(&f);
        });
    }

    /// Both replication lcores, the replica's worker, and the replication link.
    fn replicate(&mut self) {
        let now = self.clock.get();
        self.node.poll(now, &mut self.to_r);
        self.replica.poll(now, &mut self.to_m);
        self.applier
            .apply_with(&mut self.replica_engine, None, 1024, &mut NoRecords);
        for to_replica in [true, false] {
            let frames = if to_replica {
                std::mem::take(&mut self.to_r.frames)
            } else {
                std::mem::take(&mut self.to_m.frames)
            };
            for (_, f) in frames {
                if self.rng.below(1000) < self.loss {
                    continue;
                }
                if to_replica {
                    self.replica.on_frames(0, &[&f], now, &mut self.to_m);
                } else {
                    self.node.on_frames(0, &[&f], now, &mut self.to_r);
                }
            }
        }
    }

    /// One step with no client: the clock, the master, the replication.
    fn idle(&mut self) {
        self.clock.set(self.clock.get() + STEP_NS);
        self.serve();
        self.replicate();
    }

    /// The replica is online and has acknowledged the whole stream.
    fn caught_up(&self) -> bool {
        let m = self.master_status.to_json();
        m["peers"]["0"]["state"] == "online" && m["peers"]["0"]["acked_offset"] == m["offset"]
    }

    /// Steps until the replica caught up (then applies what it has).
    fn settle(&mut self) {
        for _ in 0..200_000 {
            if self.caught_up() {
                self.drain_replica();
                return;
            }
            self.idle();
        }
        panic!(
            "the replica did not catch up: {}",
            self.master_status.to_json()
        );
    }

    /// Applies everything the replica has received, delivering nothing more.
    fn drain_replica(&mut self) {
        while self
            .applier
            .apply_with(&mut self.replica_engine, None, 1 << 20, &mut NoRecords)
            > 0
        {}
    }
}

impl PacketIo for Path {
    fn send(&mut self, frame: &[u8]) -> bool {
        self.client.send(frame)
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        self.idle();
        self.client.recv(f)
    }
}

fn qps() -> Vec<(u32, u32)> {
    (0..4).map(|i| (100 + i, RKEY)).collect()
}

fn contents(e: &Engine) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    e.for_each(|k, v| {
        m.insert(k.to_vec(), v.to_vec());
    });
    m
}

/// Runs `ops` random ops through the path; returns the model and the client (which
/// owns the path).
fn run(seed: u64, mode: Mode, ops: usize) -> (BTreeMap<Vec<u8>, Vec<u8>>, Client<Path>) {
    let faults = Faults {
        drop: 0.03,
        duplicate: 0.03,
        reorder: 0.03,
        ..Faults::NONE
    };
    let mut path = Path::new(seed, faults, 30, mode);
    // The replica joins first (sync mode takes no write before it has one).
    path.settle();
    let clock = path.clock.clone();
    let cfg = ClientConfig {
        transport: model_transport_config(),
        partitions: 1,
        ..ClientConfig::default()
    };
    let mut c = Client::new(
        path,
        cfg,
        &qps(),
        request_params(),
        Box::new(move || clock.get()),
    );
    c.connect().expect("connect");
    let mut model = BTreeMap::new();
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9) | 1);
    for i in 0..ops {
        let r = rng.next();
        let key = format!("k{}", r % 24).into_bytes();
        let wrote = step(&mut c, &mut model, &key, r, seed, i);
        if wrote && mode == Mode::Sync {
            // Acknowledged: the replica has it, whatever happens to the master now.
            let p = c.io_mut();
            p.drain_replica();
            let at_replica = contents(&p.replica_engine).remove(&key);
            assert_eq!(
                at_replica.as_ref(),
                model.get(&key),
                "seed {seed} op {i}: an acknowledged write is not on the replica"
            );
        }
    }
    (model, c)
}

/// One random op through the client, checked against `model`; whether it wrote.
fn step(
    c: &mut Client<Path>,
    model: &mut BTreeMap<Vec<u8>, Vec<u8>>,
    key: &[u8],
    r: u64,
    seed: u64,
    i: usize,
) -> bool {
    let at = |what: &str| format!("seed {seed} op {i}: {what}");
    match (r >> 32) % 5 {
        0 => {
            let got = c.get(key).expect("get");
            assert_eq!(got.as_ref(), model.get(key), "{}", at("GET"));
            false
        }
        1 => {
            let v = (r >> 8).to_le_bytes().to_vec();
            c.put(key, &v).expect("put");
            model.insert(key.to_vec(), v);
            true
        }
        2 => {
            let existed = c.delete(key).expect("delete");
            assert_eq!(existed, model.remove(key).is_some(), "{}", at("DELETE"));
            existed
        }
        3 => {
            let Some(old) = model.get(key).filter(|v| v.len() == 8).cloned() else {
                return false;
            };
            let orig = c.fetch_add(key, kvwire::Width::W8, 3).expect("fetch-add");
            let was = u64::from_le_bytes(old.try_into().unwrap());
            assert_eq!(orig, was, "{}", at("fetch-add original"));
            model.insert(key.to_vec(), was.wrapping_add(3).to_le_bytes().to_vec());
            true
        }
        _ => {
            // Half the time the key's own value (it deletes), else another.
            let expected = match model.get(key) {
                Some(v) if r & 1 == 0 => v.clone(),
                _ => b"someone else".to_vec(),
            };
            let deleted = c.compare_delete(key, &expected).expect("compare-delete");
            let should = model.get(key) == Some(&expected);
            assert_eq!(deleted, should, "{}", at("COMPARE_DELETE"));
            if deleted {
                model.remove(key);
            }
            deleted
        }
    }
}

fn converges(seed: u64, mode: Mode) {
    let (model, mut c) = run(seed, mode, 300);
    let path = c.io_mut();
    path.settle();
    let master = contents(path.master.engine());
    assert_eq!(master, model, "seed {seed}: the master is not the model");
    assert_eq!(
        contents(&path.replica_engine),
        master,
        "seed {seed}: the replica is not the master"
    );
    // The faults reached every endpoint's recovery: the server replayed or NAKed,
    // the shipper retransmitted.
    let repl = path.master_status.to_json();
    assert!(
        path.stats.replays.get() + path.stats.naks_sent.get() > 0,
        "seed {seed}: no client-side loss was repaired"
    );
    assert!(
        repl["peers"]["0"]["resent"].as_u64().unwrap_or(0) > 0,
        "seed {seed}: no replication segment was retransmitted: {repl}"
    );
}

#[test]
fn async_replication_converges_under_loss_on_both_links() {
    for seed in 0..4 {
        converges(seed, Mode::Async);
    }
}

#[test]
fn sync_replication_acknowledges_only_what_the_replica_has() {
    for seed in 10..14 {
        converges(seed, Mode::Sync);
    }
}
