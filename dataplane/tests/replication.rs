//! Master and replica replication logic end to end, without DPDK: the master's
//! worker applies random writes to its engine and logs their post-images, the
//! replication lcores exchange real frames over a seeded lossy link, the replica's
//! worker applies what it receives. Checked key by key against the master's engine:
//! full sync of a replica that starts empty while writes go on, the live stream under
//! loss, partial resync after an outage longer than the waiting time, and the
//! min-replicas write gate.

mod common;

use common::repl::{master_config, replica_config};
use common::Rng;
use dataplane::repl::apply::{Applier, ApplyStats, CompletionKeeper};
use dataplane::repl::gate::WriteGate;
use dataplane::repl::link::{ReplLogic, VecLinks};
use dataplane::repl::master::MasterNode;
use dataplane::repl::replica::ReplicaNode;
use dataplane::repl::scan::{NoClients, ScanDriver, ScanShared};
use dataplane::repl::status::ReplStatus;
use kvengine::{Engine, EngineConfig, Region};
use kvrepl::log::{log_ring, LogProducer};
use kvrepl::progress::Mode;
use kvrepl::Record;
use kvwire::Status;
use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The completion records the replica's applier hands over, in order.
struct QpSeen(Vec<(u32, Vec<u8>)>);

impl CompletionKeeper for QpSeen {
    fn record(&mut self, q: u32, b: &[u8]) {
        self.0.push((q, b.to_vec()));
    }
    fn full_sync(&mut self) {}
}

const STEP_NS: u64 = 100_000;

fn engine() -> Engine {
    let cfg = EngineConfig {
        mem_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    Engine::new(Region::owned(4 << 20), &cfg).unwrap()
}

/// The master side: one worker (engine, log, scan) and the replication logic.
struct Master {
    engine: Engine,
    log: LogProducer,
    scan: ScanDriver,
    shared: Arc<ScanShared>,
    node: MasterNode,
    gate: Arc<WriteGate>,
    status: Arc<ReplStatus>,
    /// A second worker (its engine stays empty unless a test writes it): log, scan.
    second: Option<(Engine, LogProducer, ScanDriver, Arc<ScanShared>)>,
}

impl Master {
    fn new(min_replicas: usize) -> Master {
        Master::with_workers(min_replicas, 1)
    }

    /// A master of 1 or 2 workers.
    fn with_workers(min_replicas: usize, workers: usize) -> Master {
        Master::build(min_replicas, workers, 0xabcd, false)
    }

    /// A master restarted with an empty store: a new stream id, `keep_foreign` as a
    /// fixed-role master that started empty has it.
    fn restarted(keep_foreign: bool) -> Master {
        Master::build(0, 1, 0xbeef, keep_foreign)
    }

    fn build(min_replicas: usize, workers: usize, stream: u64, keep_foreign: bool) -> Master {
        let (log, cons) = log_ring(1 << 20);
        let shared = Arc::new(ScanShared::default());
        let mut logs = vec![cons];
        let mut scans = vec![shared.clone()];
        let second = (workers > 1).then(|| {
            let (log, cons) = log_ring(1 << 20);
            let shared = Arc::new(ScanShared::default());
            logs.push(cons);
            scans.push(shared.clone());
            (engine(), log, ScanDriver::default(), shared)
        });
        let gate = Arc::new(WriteGate::writable());
        let status = Arc::new(ReplStatus::default());
        let cfg = master_config(Mode::Async, min_replicas, stream, keep_foreign);
        let node = MasterNode::new(cfg, 1, logs, scans, status.clone(), gate.clone(), 0).unwrap();
        Master {
            engine: engine(),
            log,
            scan: ScanDriver::default(),
            shared,
            node,
            gate,
            status,
            second,
        }
    }

    /// One random write, as a worker does it: applied, then its post-image logged.
    fn write(&mut self, rng: &mut Rng, keys: u64) {
        if self.gate.write_status() != Status::Ok || self.log.free_bytes() < 4096 {
            return;
        }
        let k = format!("key{}", rng.below(keys)).into_bytes();
        if rng.below(10) == 0 {
            if self.engine.delete(&k) == kvengine::Status::Ok {
                self.log.try_push(&Record::Delete { key: &k }).unwrap();
            }
        } else {
            let v = vec![rng.below(256) as u8; 1 + rng.below(60) as usize];
            assert_eq!(self.engine.put(&k, &v), kvengine::Status::Ok);
            self.log
                .try_push(&Record::Put { key: &k, value: &v })
                .unwrap();
        }
    }

    fn contents(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        self.engine.for_each(|k, v| {
            m.insert(k.to_vec(), v.to_vec());
        });
        m
    }
}

/// The replica side: one worker (engine, applier) and the replication logic.
struct Replica {
    engine: Engine,
    applier: Applier,
    node: ReplicaNode,
    status: Arc<ReplStatus>,
}

impl Replica {
    fn new() -> Replica {
        Replica::with_ring(1 << 20)
    }

    /// A replica whose worker ring holds `ring_bytes`.
    fn with_ring(ring_bytes: usize) -> Replica {
        Replica::build(ring_bytes, true)
    }

    /// A replica that asks by broadcast (no configured master: an etcd-managed node
    /// that was the configured head, or whose master the election named).
    fn asking_by_broadcast() -> Replica {
        Replica::build(1 << 20, false)
    }

    fn build(ring_bytes: usize, configured_master: bool) -> Replica {
        let (p, c) = log_ring(ring_bytes);
        let stats = Arc::new(ApplyStats::default());
        let status = Arc::new(ReplStatus::default());
        let cfg = replica_config(configured_master);
        let node = ReplicaNode::new(
            cfg,
            1,
            vec![p],
            vec![stats.clone()],
            status.clone(),
            Arc::new(WriteGate::writable()),
        )
        .unwrap();
        Replica {
            engine: engine(),
            applier: Applier::new(c, stats),
            node,
            status,
        }
    }

    fn contents(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = BTreeMap::new();
        self.engine.for_each(|k, v| {
            m.insert(k.to_vec(), v.to_vec());
        });
        m
    }
}

/// Both nodes and the link between them.
struct World {
    m: Master,
    r: Replica,
    now: u64,
    rng: Rng,
    /// Frame loss in both directions, per mille.
    loss: u64,
    /// While set, nothing crosses the link (an outage).
    cut: bool,
    /// While set, nothing goes from the replica to the master (a one-way outage).
    cut_to_master: bool,
    to_r: VecLinks,
    to_m: VecLinks,
    /// Records the replica's worker applies per step (a slow worker: few).
    apply_per_step: usize,
    /// The completion records (`QP_STATE`) the replica's worker was handed, in order.
    qp_seen: QpSeen,
}

impl World {
    fn new(seed: u64, min_replicas: usize) -> World {
        World {
            m: Master::new(min_replicas),
            r: Replica::new(),
            now: 0,
            rng: Rng(seed | 1),
            loss: 0,
            cut: false,
            cut_to_master: false,
            to_r: VecLinks::new(1600),
            to_m: VecLinks::new(1600),
            apply_per_step: 1024,
            qp_seen: QpSeen(Vec::new()),
        }
    }

    /// One step: `writes` writes on the master, both lcores, both workers, delivery.
    fn step(&mut self, writes: usize, keys: u64) {
        self.now += STEP_NS;
        for _ in 0..writes {
            self.m.write(&mut self.rng, keys);
        }
        self.m.scan.step(
            &self.m.shared,
            &self.m.engine,
            &mut NoClients,
            &mut self.m.log,
        );
        if let Some((e, log, scan, shared)) = self.m.second.as_mut() {
            scan.step(shared, e, &mut NoClients, log);
        }
        self.m.node.poll(self.now, &mut self.to_r);
        self.r.node.poll(self.now, &mut self.to_m);
        self.r.applier.apply_with(
            &mut self.r.engine,
            None,
            self.apply_per_step,
            &mut self.qp_seen,
        );
        for (to_r, frames) in [
            (true, std::mem::take(&mut self.to_r.frames)),
            (false, std::mem::take(&mut self.to_m.frames)),
        ] {
            for (_, f) in frames {
                if self.cut || (!to_r && self.cut_to_master) || self.rng.below(1000) < self.loss {
                    continue;
                }
                if to_r {
                    self.r.node.on_frames(0, &[&f], self.now, &mut self.to_m);
                } else {
                    self.m.node.on_frames(0, &[&f], self.now, &mut self.to_r);
                }
            }
        }
    }

    fn online(&self) -> bool {
        let m = self.m.status.to_json();
        m["peers"]["0"]["state"] == "online" && m["peers"]["0"]["acked_offset"] == m["offset"]
    }

    /// Steps without writes until the replica acknowledged the whole stream.
    fn settle(&mut self, max_steps: usize) {
        for _ in 0..max_steps {
            self.step(0, 1);
            if self.online() {
                // One more round so the replica's worker applied the last records.
                for _ in 0..50 {
                    self.step(0, 1);
                }
                return;
            }
        }
        panic!(
            "replica did not catch up: master {} replica {}",
            self.m.status.to_json(),
            self.r.status.to_json()
        );
    }
}

/// A cross-partition transaction's wait marker (`MutationSink::wait_for`): what a
/// worker's ring holds after a wait for another worker's ring enters the stream
/// only once that ring was drained up to the position waited for — here the second
/// worker's write of a key reaches the ring after the first worker's later write of
/// it, and the replica still ends with the later one. Without the wait the stream
/// would carry them in the other order.
#[test]
fn a_wait_marker_orders_two_workers_rings_in_the_stream() {
    let mut w = World::new(5, 0);
    w.m = Master::with_workers(0, 2);
    w.settle(20_000);
    let first = Record::Put {
        key: b"k",
        value: b"first",
    };
    let (_, second_log, _, _) = w.m.second.as_mut().unwrap();
    let at = second_log.pushed() + first.encoded_len() as u64;
    w.m.log.try_push_wait(1, at).unwrap();
    w.m.log
        .try_push(&Record::Put {
            key: b"k",
            value: b"later",
        })
        .unwrap();
    for _ in 0..200 {
        w.step(0, 1);
    }
    let mut out = [0u8; 16];
    assert!(
        w.r.engine.get(b"k", &mut out).is_err(),
        "nothing after the wait left the first ring before the second ring got there"
    );
    let (_, second_log, _, _) = w.m.second.as_mut().unwrap();
    second_log.try_push(&first).unwrap();
    w.settle(20_000);
    let n = w.r.engine.get(b"k", &mut out).unwrap();
    assert_eq!(&out[..n], b"later");
}

/// Waits in both directions, over a lossy link: rounds of a two-ring "transaction"
/// — version `v` of a key into one ring, then in the other a wait for it and version
/// `v + 1` — alternate at random between the rings, several per step. Every version
/// follows the one before by ring order or by a wait, so the replica must see the
/// versions only ever grow, and end at the last.
#[test]
fn waits_in_both_directions_keep_a_total_order_under_loss() {
    let mut w = World::new(11, 0);
    w.m = Master::with_workers(0, 2);
    w.settle(20_000);
    w.loss = 30;
    // One record applied per step: the replica's every intermediate value is seen.
    w.apply_per_step = 1;
    let mut version = 0u64;
    let mut seen = 0u64;
    let mut out = [0u8; 16];
    for _ in 0..3000 {
        for _ in 0..w.rng.below(2) {
            let c = w.rng.below(2) as usize;
            let m = &mut w.m;
            let (_, second, _, _) = m.second.as_mut().unwrap();
            let (own, other) = if c == 0 {
                (&mut m.log, second)
            } else {
                (second, &mut m.log)
            };
            let v1 = (version + 1).to_le_bytes();
            other
                .try_push(&Record::Put {
                    key: b"k",
                    value: &v1,
                })
                .unwrap();
            own.try_push_wait(1 - c as u32, other.pushed()).unwrap();
            let v2 = (version + 2).to_le_bytes();
            own.try_push(&Record::Put {
                key: b"k",
                value: &v2,
            })
            .unwrap();
            version += 2;
        }
        w.step(0, 1);
        if let Ok(n) = w.r.engine.get(b"k", &mut out) {
            let v = u64::from_le_bytes(out[..n].try_into().unwrap());
            assert!(
                v >= seen,
                "the replica went back from version {seen} to {v}"
            );
            seen = v;
        }
    }
    w.loss = 0;
    w.apply_per_step = 1024;
    w.settle(50_000);
    let n = w.r.engine.get(b"k", &mut out).unwrap();
    assert_eq!(u64::from_le_bytes(out[..n].try_into().unwrap()), version);
    assert!(version > 1000, "{version} versions");
    assert!(
        seen > version / 2,
        "the replica kept up ({seen} of {version} seen)"
    );
}

/// Completion records (`QP_STATE`, docs/PROTOCOL.md §6.6) cross the real stream —
/// log ring, backlog, lossy shipping, the replica's routing — and reach the worker
/// serving their QP in the order the master wrote them, between the post-images.
#[test]
fn completion_records_reach_the_replica_worker_in_order_under_loss() {
    let mut w = World::new(23, 0);
    w.loss = 20;
    w.settle(20_000);
    let mut sent = Vec::new();
    for i in 0..300u32 {
        w.step(3, 500);
        if w.m.log.free_bytes() > 4096 {
            let blob = format!("record {i}").into_bytes();
            w.m.log
                .try_push(&Record::QpState {
                    qpn: 100 + i % 3,
                    bytes: &blob,
                })
                .unwrap();
            sent.push((100 + i % 3, blob));
        }
    }
    w.loss = 0;
    w.settle(50_000);
    assert_eq!(w.qp_seen.0, sent);
    assert_eq!(w.r.contents(), w.m.contents());
}

#[test]
fn full_sync_under_load_then_live_stream_under_loss() {
    let mut w = World::new(7, 0);
    // The master has data before the replica is heard of; the replica's link is cut.
    w.cut = true;
    for _ in 0..200 {
        w.step(20, 3000);
    }
    w.cut = false;
    // Full sync while writes go on, then the live stream, with 2 % loss both ways.
    w.loss = 20;
    for _ in 0..3000 {
        w.step(5, 3000);
    }
    w.loss = 0;
    w.settle(20_000);
    assert_eq!(
        w.r.contents(),
        w.m.contents(),
        "replica equals master key by key"
    );
    let st = w.m.status.to_json();
    assert_eq!(st["peers"]["0"]["full_syncs"], 1, "{st}");
    assert!(
        st["peers"]["0"]["resent"].as_u64().unwrap() > 0,
        "loss forced resends: {st}"
    );
    assert!(w.m.contents().len() > 1000);
}

#[test]
fn partial_resync_after_an_outage_and_the_min_replicas_gate() {
    let mut w = World::new(11, 1);
    // min_replicas 1: no write is taken before the replica is online.
    for _ in 0..100 {
        w.step(10, 500);
    }
    assert_eq!(w.m.gate.write_status(), Status::NotEnoughReplicas);
    w.settle(20_000);
    assert_eq!(w.m.gate.write_status(), Status::Ok);
    for _ in 0..500 {
        w.step(10, 500);
    }
    // An outage longer than probe interval + waiting time: the replica is invalid,
    // writes are refused (min_replicas unmet), reads would go on.
    w.cut = true;
    for _ in 0..2000 {
        w.step(10, 500);
    }
    let st = w.m.status.to_json();
    assert_eq!(st["peers"]["0"]["state"], "invalid", "{st}");
    assert_eq!(w.m.gate.write_status(), Status::NotEnoughReplicas);
    // Back: it resumes from its offset (partial), catches up, writes flow again.
    w.cut = false;
    w.settle(20_000);
    assert_eq!(w.m.gate.write_status(), Status::Ok);
    for _ in 0..500 {
        w.step(10, 500);
    }
    w.settle(20_000);
    let st = w.m.status.to_json();
    assert_eq!(st["peers"]["0"]["full_syncs"], 1, "{st}");
    assert!(
        st["peers"]["0"]["partial_syncs"].as_u64().unwrap() >= 1,
        "{st}"
    );
    assert_eq!(w.r.contents(), w.m.contents());
    let _ = Ordering::Relaxed;
}

/// A one-way outage: the replica's answers are lost for longer than the waiting time
/// while the master's frames (its probes) still reach it. The master declares it
/// invalid; once its answers get through again it is back online (by a partial
/// resync) and holds the master's data. The replica asks by broadcast, as an
/// etcd-managed node does.
#[test]
fn a_one_way_outage_heals() {
    let mut w = World::new(21, 1);
    w.r = Replica::asking_by_broadcast();
    w.settle(20_000);
    for _ in 0..200 {
        w.step(10, 500);
    }
    w.cut_to_master = true;
    for _ in 0..2000 {
        w.step(10, 500);
    }
    let st = w.m.status.to_json();
    assert_eq!(st["peers"]["0"]["state"], "invalid", "{st}");
    w.cut_to_master = false;
    w.settle(20_000);
    assert_eq!(w.m.gate.write_status(), Status::Ok);
    assert_eq!(w.r.contents(), w.m.contents());
}

/// A replica that follows the master over a connection the master does not know
/// (its HELLO was another one, or lost: the state the nemesis's unhealed chain of seed
/// 317 left, a node hearing its upstream's probes while the upstream held it invalid)
/// is told to join again: its PROGRESS or PROBE_REPLY is answered with a WELCOME
/// `Refused` for its nonce. Before, the master ignored it and the two stayed so.
#[test]
fn a_progress_over_an_unknown_connection_is_refused() {
    use kvrepl::messages::{Control, Progress, ReplicaReport, WelcomeMode};
    let mut w = World::new(23, 1);
    w.settle(20_000);
    let params = kvwire::FrameParams::new(
        [2, 0, 0, 0, 0x10, 1],
        [2, 0, 0, 0, 0x10, 0],
        Ipv4Addr::new(10, 77, 0, 2),
        Ipv4Addr::new(10, 77, 0, 1),
        kvwire::repl::REPL_UDP_PORT,
    );
    let progress = |nonce| {
        Control::Progress(Progress {
            nonce,
            repl_id: 0xabcd,
            epoch: 1,
            applied: 0,
            sync_applied: 0,
            state: ReplicaReport::Streaming,
        })
    };
    let refusals = |w: &mut World, nonce| {
        let mut inbox = VecLinks::new(1600);
        dataplane::repl::link::send_control(&mut inbox, 0, &params, &progress(nonce));
        let mut out = VecLinks::new(1600);
        let frames: Vec<&[u8]> = inbox.frames.iter().map(|(_, f)| f.as_slice()).collect();
        w.m.node.on_frames(0, &frames, w.now, &mut out);
        out.frames
            .iter()
            .filter(|(_, f)| match kvwire::repl::parse_repl_frame(f) {
                Ok(kvwire::repl::ReplFrame::Send(s)) => matches!(
                    Control::decode(s.payload),
                    Ok(Control::Welcome(x)) if x.nonce == nonce && x.mode == WelcomeMode::Refused
                ),
                _ => false,
            })
            .count()
    };
    assert_eq!(
        refusals(&mut w, 0x5eed),
        1,
        "an unknown connection is told to join again"
    );
    let st = w.m.status.to_json();
    assert_eq!(
        st["peers"]["0"]["state"], "online",
        "the known one goes on: {st}"
    );
}

/// Every frame a link brings is taken or counted under a drop reason, on the master
/// and on the replica (`link_drops` in `/kvd/replication`).
#[test]
fn frames_a_link_drops_are_counted_by_reason() {
    use dataplane::repl::status::LinkDrop;
    use kvrepl::messages::{Control, Probe};
    let mut w = World::new(29, 0);
    w.settle(20_000);
    let mut out = VecLinks::new(1600);
    // Not a replication frame at all.
    w.m.node.on_frames(0, &[&[0u8; 60][..]], w.now, &mut out);
    w.r.node.on_frames(0, &[&[0xffu8; 80][..]], w.now, &mut out);
    // A control message for another node.
    let elsewhere = kvwire::FrameParams::new(
        [2, 0, 0, 0, 0x10, 1],
        [2, 0, 0, 0, 0x10, 9],
        Ipv4Addr::new(10, 77, 0, 2),
        Ipv4Addr::new(10, 77, 0, 9),
        kvwire::repl::REPL_UDP_PORT,
    );
    let mut inbox = VecLinks::new(1600);
    let probe = Control::Probe(Probe {
        seq: 1,
        sent_ns: 0,
        epoch: 1,
    });
    dataplane::repl::link::send_control(&mut inbox, 0, &elsewhere, &probe);
    let frames: Vec<&[u8]> = inbox.frames.iter().map(|(_, f)| f.as_slice()).collect();
    w.m.node.on_frames(0, &frames, w.now, &mut out);
    assert_eq!(w.m.status.dropped(LinkDrop::Malformed), 1);
    assert_eq!(w.m.status.dropped(LinkDrop::WrongDestination), 1);
    assert_eq!(w.r.status.dropped(LinkDrop::Malformed), 1);
    let st = w.r.status.to_json();
    assert_eq!(st["link_drops"]["malformed"], 1, "{st}");
    assert_eq!(
        st["link_drops"].as_object().unwrap().len(),
        LinkDrop::ALL.len()
    );
}

#[test]
fn a_slow_replica_worker_is_paced_by_rnr_without_breaking_the_link() {
    let mut w = World::new(5, 0);
    w.r = Replica::with_ring(kvrepl::log::MIN_LOG_CAPACITY);
    w.settle(20_000);
    // The replica's worker applies 3 records per step while the master takes 10
    // writes per step: its ring fills and the replica refuses segments (RNR NAK).
    // Only the expected segment may be refused so: an RNR for a later one would
    // tell the master the earlier ones were taken, and the link would stall.
    w.apply_per_step = 3;
    for _ in 0..3000 {
        w.step(10, 2000);
    }
    w.apply_per_step = 1024;
    w.settle(50_000);
    assert!(w.r.node.rnr_sent > 0, "the ring never filled");
    assert_eq!(w.r.contents(), w.m.contents());
    let st = w.m.status.to_json();
    assert_eq!(st["peers"]["0"]["invalidations"], 0, "{st}");
    assert_eq!(st["peers"]["0"]["partial_syncs"], 0, "{st}");
    assert_eq!(st["peers"]["0"]["full_syncs"], 1, "{st}");
}

/// A fixed-role master that crashed and restarted empty must not erase its replica,
/// whether the replica kept running (it asks the silent master again after the
/// waiting time) or restarted from its log file: with `keep_foreign` (set when the
/// master starts with an empty store) the replica's HELLO, which carries data of the
/// old stream, is left unanswered and the replica keeps every write the old master
/// had; without it the replica is fully resynced to the new master's nothing (what
/// the flag prevents).
#[test]
fn a_master_restarted_empty_does_not_erase_its_replica() {
    // The replica restarted from its log, or still running (it asks the silent
    // master again after the waiting time).
    for (keep, restart_replica) in [(true, true), (false, true), (true, false), (false, false)] {
        let mut w = World::new(11, 0);
        for _ in 0..3000 {
            w.step(4, 300);
        }
        w.settle(20_000);
        let before = w.r.contents();
        assert!(before.len() > 100);
        assert_eq!(before, w.m.contents());
        // The master crashes; a new process starts empty with a new stream. The
        // replica restarts too, from its log file: exactly the old stream up to the
        // offset it had applied (what `replication.log_file` gives back), so its
        // HELLO asks to continue that stream.
        let offset = w.r.status.to_json()["offset"].as_u64().unwrap();
        assert!(offset > 0);
        w.m = Master::restarted(keep);
        if restart_replica {
            w.r.node
                .resume_at(0xabcd, 1, offset, kvcluster::records::DataState::Loaded);
        }
        for _ in 0..2000 {
            w.step(0, 1);
        }
        let st = w.m.status.to_json();
        if keep {
            assert_eq!(w.r.contents(), before, "the replica kept its data");
            assert!(st["foreign_refused"].as_u64().unwrap() > 0, "{st}");
            assert_ne!(st["peers"]["0"]["state"], "online", "{st}");
        } else {
            assert!(w.r.contents().is_empty(), "fully resynced to nothing");
            assert_eq!(st["peers"]["0"]["full_syncs"], 1, "{st}");
        }
    }
}
