//! Chain replication (`replication.topology: chain`) end to end without DPDK: a head
//! in sync mode, a middle that applies the stream and relays it, a tail; real frames
//! between the three replication logics, the workers' parts played by the test.
//!
//! Checked: the head acknowledges a write (its worker's durable position passes it)
//! only once the tail has applied it — also while the middle has it and the tail does
//! not; a tail cut off is dropped from the chain after the waiting time and writes go
//! on; when the middle dies, the tail joins the head and resumes from its offset (a
//! partial resync: the relay keeps the head's offsets), no acknowledged write is lost,
//! and the survivors end equal key by key; a middle that comes back is redirected by
//! the head to the tail and appended behind it (not a second follower of the head).

mod common;

use dataplane::repl::apply::{Applier, ApplyStats};
use dataplane::repl::gate::WriteGate;
use dataplane::repl::link::{ReplLogic, VecLinks};
use dataplane::repl::master::{MasterConfig, MasterNode};
use dataplane::repl::replica::{ReplicaConfig, ReplicaNode};
use dataplane::repl::scan::{NoClients, ScanDriver, ScanShared};
use dataplane::repl::status::ReplStatus;
use kvengine::{Engine, EngineConfig, Region};
use kvrepl::log::{log_ring, LogProducer};
use kvrepl::progress::{Mode, ProbeConfig};
use kvrepl::Record;
use kvwire::{MacAddr, Status};
use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

const MS: u64 = 1_000_000;
const STEP_NS: u64 = 100_000;
const WAITING_NS: u64 = 60 * MS;
/// Scan steps a worker does per test step.
const SCAN_STEPS: usize = 64;

const HEAD: usize = 0;
const MIDDLE: usize = 1;
const TAIL: usize = 2;

fn mac(k: usize) -> MacAddr {
    [2, 0, 0, 0, 0x10, k as u8]
}
fn ip(k: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 77, 0, k as u8 + 1)
}

fn engine() -> Engine {
    let cfg = EngineConfig {
        mem_bytes: 4 << 20,
        ..EngineConfig::default()
    };
    Engine::new(Region::owned(4 << 20), &cfg).unwrap()
}

fn master_config(k: usize, chain: bool, mode: Mode, min_replicas: usize) -> MasterConfig {
    let base = common::repl::master_config(mode, min_replicas, 0xc4a1, false);
    MasterConfig {
        node_id: k as u64 + 1,
        mac: mac(k),
        ip: ip(k),
        probe: ProbeConfig {
            waiting_time_ns: WAITING_NS,
            ..base.probe
        },
        chain,
        ..base
    }
}

fn replica_config(k: usize, upstream: usize, fallback: &[usize]) -> ReplicaConfig {
    ReplicaConfig {
        node_id: k as u64 + 1,
        mac: mac(k),
        ip: ip(k),
        master: Some((mac(upstream), ip(upstream))),
        fallback: fallback.iter().map(|&f| (mac(f), ip(f))).collect(),
        waiting_time_ns: WAITING_NS,
        rkey: 0x1234 + k as u32,
        ..common::repl::replica_config(true)
    }
}

/// One node: its worker (engine, apply ring, log ring for writes and scans) and its
/// replication logic.
struct Node {
    engine: Engine,
    /// A replica's apply ring (the worker's end).
    apply: Option<Applier>,
    /// The log ring a head's writes and any node's scans go into.
    log: LogProducer,
    scan: ScanDriver,
    shared: Arc<ScanShared>,
    logic: Box<dyn ReplLogic>,
    gate: Arc<WriteGate>,
    status: Arc<ReplStatus>,
    /// A relaying node's view of its successor.
    relay_status: Option<Arc<ReplStatus>>,
    out: VecLinks,
    alive: bool,
}

impl Node {
    fn head() -> Node {
        let (log, cons) = log_ring(1 << 20);
        let shared = Arc::new(ScanShared::default());
        let gate = Arc::new(WriteGate::writable());
        let status = Arc::new(ReplStatus::default());
        let m = MasterNode::new(
            master_config(HEAD, true, Mode::Sync, 1),
            2,
            vec![cons],
            vec![shared.clone()],
            status.clone(),
            gate.clone(),
            0,
        )
        .unwrap();
        Node {
            engine: engine(),
            apply: None,
            log,
            scan: ScanDriver::default(),
            shared,
            logic: Box::new(m),
            gate,
            status,
            relay_status: None,
            out: VecLinks::new(1600),
            alive: true,
        }
    }

    /// A replica following `upstream`; with `relay`, it relays to its successor.
    fn replica(k: usize, upstream: usize, fallback: &[usize], relay: bool) -> Node {
        Node::replica_with(k, replica_config(k, upstream, fallback), relay)
    }

    /// A replica with configuration `cfg`.
    fn replica_with(k: usize, cfg: ReplicaConfig, relay: bool) -> Node {
        let (p, c) = log_ring(1 << 20);
        let stats = Arc::new(ApplyStats::default());
        let status = Arc::new(ReplStatus::default());
        let gate = Arc::new(WriteGate::writable());
        let mut r = ReplicaNode::new(
            cfg,
            2,
            vec![p],
            vec![stats.clone()],
            status.clone(),
            gate.clone(),
        )
        .unwrap();
        // The worker's log ring carries only scans: its live logging is paused.
        let (log, cons) = log_ring(1 << 20);
        let shared = Arc::new(ScanShared::default());
        shared.paused.store(true, Ordering::Relaxed);
        let relay_status = relay.then(|| Arc::new(ReplStatus::default()));
        if let Some(rs) = &relay_status {
            let m = MasterNode::new(
                master_config(k, false, Mode::Async, 0),
                2,
                vec![cons],
                vec![shared.clone()],
                rs.clone(),
                Arc::new(WriteGate::writable()),
                0,
            )
            .unwrap()
            .into_relay();
            r.set_relay(m);
        }
        Node {
            engine: engine(),
            apply: Some(Applier::new(c, stats)),
            log,
            scan: ScanDriver::default(),
            shared,
            logic: Box::new(r),
            gate,
            status,
            relay_status,
            out: VecLinks::new(1600),
            alive: true,
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

/// Where a frame sent on (node, link) arrives: the full mesh of the three nodes.
fn peer_of(node: usize, link: usize) -> (usize, usize) {
    match (node, link) {
        (HEAD, 0) => (MIDDLE, 0),
        (HEAD, _) => (TAIL, 1),
        (MIDDLE, 0) => (HEAD, 0),
        (MIDDLE, _) => (TAIL, 0),
        (_, 0) => (MIDDLE, 1),
        _ => (HEAD, 1),
    }
}

/// A write the head took: (sequence, key, value or deleted).
type Write = (u64, Vec<u8>, Option<Vec<u8>>);

struct World {
    n: Vec<Node>,
    now: u64,
    rng: u64,
    /// Links cut, as (from node, to node).
    cut: Vec<(usize, usize)>,
    /// The head's writes not yet acknowledged, with their log positions.
    pending: Vec<(u64, Write)>,
    /// Every write per key, in order (what the tail may hold for it).
    history: HashMap<Vec<u8>, Vec<Write>>,
    seq: u64,
    acked: u64,
    /// The newest write acknowledged.
    last_acked: u64,
    /// Acknowledged writes must be on the last node (else: on the middle, while the
    /// tail is not part of the chain yet).
    strict: bool,
    /// The chain's last node (the tail, until a returning node is appended).
    last: usize,
    /// Nodes whose HELLOs are lost (as a frozen node's: its peers answer them
    /// only once they are stale).
    mute_hellos: Vec<usize>,
}

/// Whether `f` is a HELLO.
fn is_hello(f: &[u8]) -> bool {
    match kvwire::repl::parse_repl_frame(f) {
        Ok(kvwire::repl::ReplFrame::Send(s)) => {
            matches!(
                kvrepl::messages::Control::decode(s.payload),
                Ok(kvrepl::messages::Control::Hello(_))
            )
        }
        _ => false,
    }
}

impl World {
    /// Head, middle, tail; the tail falls back to the head when `fallback`.
    fn new(fallback: bool) -> World {
        World::with_tail_relay(fallback, false)
    }

    /// [`World::new`]; with `tail_relay` the tail relays too (as every chain node of
    /// the dataplane does), so a node may join behind it.
    fn with_tail_relay(fallback: bool, tail_relay: bool) -> World {
        let fb: &[usize] = if fallback { &[HEAD] } else { &[] };
        World {
            n: vec![
                Node::head(),
                Node::replica(MIDDLE, HEAD, &[], true),
                Node::replica(TAIL, MIDDLE, fb, tail_relay),
            ],
            now: 0,
            rng: 0x9e37_79b9_7f4a_7c15,
            cut: Vec::new(),
            pending: Vec::new(),
            history: HashMap::new(),
            seq: 0,
            acked: 0,
            last_acked: 0,
            strict: false,
            last: TAIL,
            mute_hellos: Vec::new(),
        }
    }

    fn rand(&mut self, n: u64) -> u64 {
        self.rng ^= self.rng << 13;
        self.rng ^= self.rng >> 7;
        self.rng ^= self.rng << 17;
        self.rng % n
    }

    /// One write on the head, as its worker does it: applied, post-image logged.
    fn write(&mut self, keys: u64) {
        if self.n[HEAD].gate.write_status() != Status::Ok || self.n[HEAD].log.free_bytes() < 4096 {
            return;
        }
        let k = format!("key{}", self.rand(keys)).into_bytes();
        self.seq += 1;
        let h = &mut self.n[HEAD];
        let w: Write = if self.rng.is_multiple_of(8) {
            h.engine.delete(&k);
            h.log.try_push(&Record::Delete { key: &k }).unwrap();
            (self.seq, k.clone(), None)
        } else {
            let v = format!("v{}", self.seq).into_bytes();
            assert_eq!(h.engine.put(&k, &v), kvengine::Status::Ok);
            h.log.try_push(&Record::Put { key: &k, value: &v }).unwrap();
            (self.seq, k.clone(), Some(v))
        };
        self.pending.push((h.log.pushed(), w.clone()));
        self.history.entry(k).or_default().push(w);
    }

    /// Writes whose log position the head's quorum reached are acknowledged: each
    /// must be on the tail already (or superseded there by a later write of its key).
    fn check_acks(&mut self) {
        let durable = self.n[HEAD].shared.durable.load(Ordering::Acquire);
        let last = if self.strict { self.last } else { MIDDLE };
        let mut i = 0;
        while i < self.pending.len() {
            let (pos, (seq, ref key, _)) = self.pending[i];
            if pos > durable {
                i += 1;
                continue;
            }
            let mut buf = [0u8; 256];
            let got = self.n[last]
                .engine
                .get(key, &mut buf)
                .ok()
                .map(|n| buf[..n].to_vec());
            let ok = self.history[key]
                .iter()
                .filter(|w| w.0 >= seq)
                .any(|w| w.2 == got);
            assert!(
                ok,
                "write {seq} to {:?} acknowledged by the head but the {} has {got:?}",
                String::from_utf8_lossy(key),
                if self.strict && self.last == TAIL {
                    "tail"
                } else {
                    "middle"
                }
            );
            self.acked += 1;
            self.last_acked = self.last_acked.max(seq);
            self.pending.swap_remove(i);
        }
    }

    fn step(&mut self, writes: usize, keys: u64) {
        self.now += STEP_NS;
        for _ in 0..writes {
            self.write(keys);
        }
        for k in 0..3 {
            let node = &mut self.n[k];
            if !node.alive {
                continue;
            }
            if let Some(a) = node.apply.as_mut() {
                a.apply(&mut node.engine, None, 1024);
            }
            // A worker loops many times per step: several scan steps.
            for _ in 0..SCAN_STEPS {
                node.scan
                    .step(&node.shared, &node.engine, &mut NoClients, &mut node.log);
            }
            node.logic.poll(self.now, &mut node.out);
        }
        // Delivery, until no node has anything more to say this step.
        for _ in 0..4 {
            let mut moved = false;
            for k in 0..3 {
                let frames = std::mem::take(&mut self.n[k].out.frames);
                for (link, f) in frames {
                    let (to, to_link) = peer_of(k, link);
                    if !self.n[k].alive
                        || !self.n[to].alive
                        || self.cut.contains(&(k, to))
                        || (self.mute_hellos.contains(&k) && is_hello(&f))
                    {
                        continue;
                    }
                    moved = true;
                    let node = &mut self.n[to];
                    node.logic
                        .on_frames(to_link, &[&f], self.now, &mut node.out);
                }
            }
            if !moved {
                break;
            }
        }
        self.check_acks();
    }

    /// 2000 steps of writes: more than 1000 of them must be acknowledged.
    fn assert_flows(&mut self, what: &str) {
        let before = self.acked;
        for _ in 0..2000 {
            self.step(3, 400);
        }
        assert!(self.acked > before + 1000, "{what}: {}", self.acked);
    }

    /// Steps without writes until every write was acknowledged.
    fn assert_drains(&mut self) {
        for _ in 0..500 {
            self.step(0, 400);
        }
        assert!(
            self.pending.is_empty(),
            "{} writes never acknowledged",
            self.pending.len()
        );
    }

    fn peer(&self, k: usize, link: usize) -> serde_json::Value {
        self.n[k].status.to_json()["peers"][link.to_string()].clone()
    }

    /// The middle's relay's view of the tail (its link 1).
    fn relay_peer(&self) -> serde_json::Value {
        let rs = self.n[MIDDLE].relay_status.as_ref().unwrap();
        rs.to_json()["peers"]["1"].clone()
    }
}

#[test]
fn the_head_acknowledges_only_what_the_tail_has_and_the_chain_closes_over_a_dead_middle() {
    let mut w = World::new(true);
    // Start-up: the middle syncs from the head, the tail from the middle's relay.
    for _ in 0..3000 {
        w.step(3, 400);
    }
    assert_eq!(
        w.peer(HEAD, 0)["state"],
        "online",
        "{}\n{}\n{}",
        w.n[HEAD].status.to_json(),
        w.n[MIDDLE].status.to_json(),
        w.n[MIDDLE].relay_status.as_ref().unwrap().to_json()
    );
    assert_eq!(
        w.peer(HEAD, 1)["state"],
        "absent",
        "the tail follows the middle"
    );
    assert_eq!(w.relay_peer()["state"], "online", "{}", w.relay_peer());
    w.strict = true;
    w.assert_flows("writes flow through the chain");

    // The tail stops hearing the middle (and the middle the tail): while the relay
    // still counts the tail, the head acknowledges nothing new though the middle has
    // every write.
    w.cut = vec![(MIDDLE, TAIL), (TAIL, MIDDLE)];
    let last_sent = w.seq;
    for _ in 0..200 {
        w.step(3, 400);
    }
    assert!(w.seq > last_sent + 300);
    assert!(
        w.last_acked <= last_sent,
        "no write after the cut acknowledged without the tail (20 ms): {} > {last_sent}",
        w.last_acked
    );
    let before = w.acked;
    w.cut.clear();
    for _ in 0..3000 {
        w.step(3, 400);
    }
    assert!(w.acked > before + 1000, "the chain flows again");

    // The middle dies under load: the head drops it, the tail joins the head and
    // resumes from its offset; acknowledged writes were on the tail all along.
    w.n[MIDDLE].alive = false;
    for _ in 0..5000 {
        w.step(3, 400);
    }
    let st = w.peer(HEAD, 1);
    assert_eq!(st["state"], "online", "the tail follows the head: {st}");
    assert_eq!(st["full_syncs"], 0, "{st}");
    assert_eq!(st["partial_syncs"], 1, "resumed from its offset: {st}");
    assert_eq!(w.peer(HEAD, 0)["state"], "invalid");
    w.assert_flows("writes acknowledged again");
    w.assert_drains();
    assert_eq!(w.n[TAIL].contents(), w.n[HEAD].contents());
    assert!(w.n[HEAD].contents().len() > 300);
}

#[test]
fn a_relay_full_syncs_its_successor_from_its_own_engine() {
    // The middle joins the head and takes writes; then the tail joins the middle:
    // a full sync from the middle's own engine (its scan, then the live stream with
    // the head's offsets), all under writes; then the chain acknowledges through it.
    let mut w = World::new(false);
    w.cut = vec![(MIDDLE, TAIL), (TAIL, MIDDLE)];
    for _ in 0..3000 {
        w.step(3, 2000);
    }
    assert!(w.acked > 1000, "head and middle: {}", w.acked);
    assert_eq!(w.relay_peer()["state"], "absent");
    w.cut.clear();
    for _ in 0..6000 {
        w.step(2, 2000);
    }
    let rp = w.relay_peer();
    assert_eq!(rp["state"], "online", "{rp}");
    assert_eq!(rp["full_syncs"], 1, "{rp}");
    w.strict = true;
    let before = w.acked;
    for _ in 0..2000 {
        w.step(3, 2000);
    }
    assert!(w.acked > before + 1000);
    for _ in 0..500 {
        w.step(0, 2000);
    }
    assert_eq!(w.n[TAIL].contents(), w.n[HEAD].contents());
    assert_eq!(w.n[MIDDLE].contents(), w.n[HEAD].contents());
    assert!(w.n[HEAD].contents().len() > 1000);
    assert!(w.pending.is_empty());
}

#[test]
fn a_returning_node_is_appended_behind_the_tail() {
    // The middle dies, the tail joins the head; the middle comes back (empty, as a
    // restarted process) and asks its configured predecessor, the head, which
    // already streams to a live successor: it is redirected to the tail, full syncs
    // from the tail's relay and becomes the new tail. The head keeps one follower,
    // and acknowledged writes are on the returning node once it is in the chain.
    let mut w = World::with_tail_relay(true, true);
    for _ in 0..3000 {
        w.step(3, 400);
    }
    assert_eq!(w.peer(HEAD, 0)["state"], "online");
    assert_eq!(w.relay_peer()["state"], "online");
    w.strict = true;
    w.n[MIDDLE].alive = false;
    for _ in 0..5000 {
        w.step(3, 400);
    }
    assert_eq!(
        w.peer(HEAD, 1)["state"],
        "online",
        "the tail follows the head"
    );
    assert_eq!(w.peer(HEAD, 0)["state"], "invalid");

    w.n[MIDDLE] = Node::replica(MIDDLE, HEAD, &[], true);
    for _ in 0..8000 {
        w.step(2, 400);
    }
    let head = w.n[HEAD].status.to_json();
    let back = w.n[MIDDLE].status.to_json();
    let tail_relay = w.n[TAIL].relay_status.as_ref().unwrap().to_json();
    assert!(head["redirects_sent"].as_u64().unwrap() >= 1, "{head}");
    assert!(back["redirects_followed"].as_u64().unwrap() >= 1, "{back}");
    assert_ne!(
        w.peer(HEAD, 0)["state"],
        "online",
        "not a second follower of the head: {head}"
    );
    assert_eq!(w.peer(HEAD, 1)["state"], "online", "{head}");
    // The tail's relay ships to the returning node on its link 0.
    assert_eq!(tail_relay["peers"]["0"]["state"], "online", "{tail_relay}");
    assert_eq!(tail_relay["peers"]["0"]["full_syncs"], 1, "{tail_relay}");

    // From now on an acknowledged write must be on the returning node, the chain's end.
    w.last = MIDDLE;
    w.assert_flows("writes flow through the longer chain");
    w.assert_drains();
    assert_eq!(w.n[MIDDLE].contents(), w.n[HEAD].contents());
    assert_eq!(w.n[TAIL].contents(), w.n[HEAD].contents());
}

#[test]
fn a_relay_never_rolls_back_a_node_holding_more_of_the_stream() {
    // The nemesis schedule that lost acknowledged writes (seed 133): the tail stalls,
    // the head goes on with the middle alone (min-replicas 1) and dies; the middle
    // stalls while the tail comes back, then the middle comes back and asks every
    // link to resume. The tail's relay must not answer the middle — which holds
    // writes the head acknowledged and the tail never had — with a full sync of its
    // own, shorter data.
    let mut w = World::with_tail_relay(true, true);
    // The middle asks whoever hears it, as an etcd-managed node knowing no master.
    let mut cfg = replica_config(MIDDLE, HEAD, &[]);
    cfg.master = Some(([0xff; 6], Ipv4Addr::BROADCAST));
    w.n[MIDDLE] = Node::replica_with(MIDDLE, cfg, true);
    for _ in 0..3000 {
        w.step(3, 400);
    }
    assert_eq!(w.relay_peer()["state"], "online", "{}", w.relay_peer());
    w.n[TAIL].alive = false;
    let before = w.acked;
    for _ in 0..3000 {
        w.step(3, 400);
    }
    assert!(
        w.acked > before + 1000,
        "head and middle go on: {}",
        w.acked
    );
    w.assert_drains();
    w.n[HEAD].alive = false;
    let held = w.n[MIDDLE].contents();
    assert_ne!(held, w.n[TAIL].contents(), "the middle holds more");
    w.n[MIDDLE].alive = false;
    w.n[TAIL].alive = true;
    for _ in 0..2000 {
        w.step(0, 400);
    }
    // The HELLOs the tail sent the frozen middle are stale when it answers them.
    w.mute_hellos = vec![TAIL];
    w.n[MIDDLE].alive = true;
    for _ in 0..8000 {
        w.step(0, 400);
    }
    let middle = w.n[MIDDLE].status.to_json();
    let tail_relay = w.n[TAIL].relay_status.as_ref().unwrap().to_json();
    assert_eq!(
        w.n[MIDDLE].contents(),
        held,
        "the middle kept its data: {middle}\n{tail_relay}"
    );
    assert_eq!(
        middle["peers"]["0"]["full_syncs"], 1,
        "only its first: {middle}"
    );
    // Refused by the relay; and would be by the middle, were the relay to offer it.
    let refused = |st: &serde_json::Value| st["rollbacks_refused"].as_u64().unwrap();
    assert!(
        refused(&tail_relay) > 0,
        "{tail_relay}\n{middle}\n{}",
        w.n[TAIL].status.to_json()
    );
}

#[test]
fn a_replica_refuses_a_full_sync_that_would_roll_its_data_back() {
    // The replica's own guard, whatever offers it: a full sync of its own stream
    // from an offset behind its data (only a relay behind it can offer one: a
    // master's stream starts under a fresh id).
    let mut w = World::new(false);
    w.cut = vec![(MIDDLE, TAIL), (TAIL, MIDDLE)];
    for _ in 0..3000 {
        w.step(3, 400);
    }
    w.assert_drains();
    w.n[HEAD].alive = false;
    w.n[TAIL].alive = false;
    let held = w.n[MIDDLE].contents();
    let own = w.n[MIDDLE].status.to_json()["offset"].as_u64().unwrap();
    assert!(own > 0);
    // The middle asks again once its upstream went silent: take its HELLO.
    let mid = &mut w.n[MIDDLE];
    let hello = (0..2000)
        .find_map(|i| {
            mid.out.frames.clear();
            mid.logic.poll(w.now + i * STEP_NS, &mut mid.out);
            mid.out.frames.iter().find_map(|(_, f)| {
                let Ok(kvwire::repl::ReplFrame::Send(s)) = kvwire::repl::parse_repl_frame(f) else {
                    return None;
                };
                match kvrepl::messages::Control::decode(s.payload) {
                    Ok(kvrepl::messages::Control::Hello(h)) => Some(h),
                    _ => None,
                }
            })
        })
        .expect("the middle asks again");
    assert_eq!(hello.offset, own);
    let welcome = kvrepl::messages::Control::Welcome(kvrepl::messages::Welcome {
        nonce: hello.nonce,
        mode: kvrepl::messages::WelcomeMode::Full,
        repl_id: hello.repl_id,
        epoch: 1,
        offset: own / 2,
        first_psn: hello.first_psn,
        node_id: TAIL as u64 + 1,
    });
    let params = kvwire::FrameParams::new(mac(TAIL), mac(MIDDLE), ip(TAIL), ip(MIDDLE), 4791);
    let mut frame = VecLinks::new(1600);
    dataplane::repl::link::send_control(&mut frame, 1, &params, &welcome);
    let (_, f) = frame.frames.pop().unwrap();
    let now = w.now + 2000 * STEP_NS;
    mid.logic.on_frames(1, &[&f], now, &mut mid.out);
    let st = mid.status.to_json();
    assert_eq!(st["rollbacks_refused"], 1, "{st}");
    assert_eq!(st["peers"]["0"]["full_syncs"], 1, "only its first: {st}");
    assert_eq!(mid.contents(), held);
}
