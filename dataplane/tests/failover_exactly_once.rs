//! Exactly-once across a failover (docs/PROTOCOL.md §6.6): a real `kvclient::Client`
//! pipelines fetch-adds to a master (`Server`, no EAL) whose answers are lost; the
//! master dies; its replica — a `Server` fed the master's mutation tap (post-images
//! and completion records) up to a chosen point — takes writes; the client resumes
//! its connections there and resends. Depending on how much of the stream the
//! replica had:
//!
//! * everything: each fetch-add is answered with its original result, none runs again;
//! * all but the response frames: each is answered `OUTCOME_UNKNOWN`, none runs again;
//! * nothing past the connections: each runs once, on the replica.
//!
//! * a full sync instead of the stream (the replica had only the connections): the
//!   sync carries the master's completion records with its data, so each fetch-add
//!   is answered with its original result, none runs again.
//!
//! In every case the counter on the replica counts each fetch-add exactly once.
//! Without completion records the client's resends would either run again (double
//! counting) or be reported lost (`ConnectionLost`): each test fails then.

mod common;

use common::{engine, identity, request_params, VecSink, RKEY, SERVER_MAC};
use dataplane::mutation::MutationSink;
use dataplane::repl::apply::{Applier, ApplyStats};
use dataplane::repl::gate::WriteGate;
use dataplane::repl::scan::ScanShared;
use dataplane::repl::worker_log::ReplLog;
use dataplane::server::{Server, TenantRule};
use dataplane::stats::WorkerStats;
use kvclient::{Client, ClientConfig, Config, Credentials, Error, Op, PacketIo, Ticket};
use kvwire::{Atomic, MasterHint, Status};
use std::cell::Cell;
use std::net::Ipv4Addr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const STEP_NS: u64 = 10_000;
const MASTER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 9];
const MASTER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 9);
const QPS: [(u32, u32); 2] = [(100, RKEY), (101, RKEY)];
const ADDS: u64 = 100;
/// Fetch-adds the client batches into one request.
const OPS_PER_REQUEST: usize = 10;
/// The tenant of [`Qps::Tenant`], its secret and its window (`max_credits`).
const TENANT: u32 = 7;
const TENANT_SECRET: &[u8] = b"tenant-secret-0123456789";
const TENANT_WINDOW: u16 = 4;

/// The client's QPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Qps {
    /// The config's static QPs.
    Static,
    /// QPs the master opened for it.
    Opened,
    /// QPs the master opened for it as tenant [`TENANT`], whose window is
    /// [`TENANT_WINDOW`] (both nodes have the tenant).
    Tenant,
}

/// One record of the master's stream, as the replication log would carry it.
#[derive(Clone, Debug)]
enum Rec {
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Qp(u32, Vec<u8>),
}

/// The master's mutation tap: records the stream.
struct Capture(Arc<Mutex<Vec<Rec>>>);

impl MutationSink for Capture {
    fn room(&self) -> usize {
        1 << 30
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .push(Rec::Put(key.to_vec(), value.to_vec()));
    }
    fn delete(&mut self, key: &[u8]) {
        self.0.lock().unwrap().push(Rec::Delete(key.to_vec()));
    }
    fn qp_state(&mut self, qpn: u32, blob: &[u8]) {
        self.0.lock().unwrap().push(Rec::Qp(qpn, blob.to_vec()));
    }
}

struct Node {
    mac: [u8; 6],
    server: Server,
    gate: Arc<WriteGate>,
    inbox: Vec<Vec<u8>>,
    dead: bool,
    /// Answers are lost on the way back.
    mute: bool,
}

/// Node 0 the replica, node 1 the master; frames routed by destination MAC.
struct Switch {
    nodes: Vec<Node>,
    to_client: Vec<Vec<u8>>,
    stats: WorkerStats,
    clock: Rc<Cell<u64>>,
    /// The counter's key in the store (the tenant's namespace for its client).
    ctr: Vec<u8>,
}

impl Switch {
    /// Node `k`'s counter.
    fn counter(&mut self, k: usize) -> u64 {
        let mut b = [0u8; 8];
        self.nodes[k]
            .server
            .engine_mut()
            .get(&self.ctr, &mut b)
            .unwrap();
        u64::from_le_bytes(b)
    }
}

impl PacketIo for Switch {
    fn send(&mut self, frame: &[u8]) -> bool {
        for n in &mut self.nodes {
            if frame[..6] == n.mac {
                n.inbox.push(frame.to_vec());
            }
        }
        true
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        for n in &mut self.nodes {
            let frames = std::mem::take(&mut n.inbox);
            if frames.is_empty() || n.dead {
                continue;
            }
            let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
            let mut tx = VecSink::default();
            n.server.handle_burst(&views, &self.stats, &mut tx);
            if !n.mute {
                self.to_client.extend(tx.sent);
            }
        }
        self.clock.set(self.clock.get() + STEP_NS);
        let out = std::mem::take(&mut self.to_client);
        for fr in &out {
            f(fr);
        }
        out.len()
    }
}

/// A replica (node 0) and a master (node 1, with the capturing tap), both keeping
/// completion records, and a client connected to the master.
fn world(stream: &Arc<Mutex<Vec<Rec>>>, qps: Qps) -> Client<Switch> {
    let ctr = match qps {
        Qps::Tenant => kvwire::tenant::prefixed(TENANT, b"ctr"),
        _ => b"ctr".to_vec(),
    };
    let mut nodes = Vec::new();
    for (mac, ip) in [(SERVER_MAC, common::SERVER_IP), (MASTER_MAC, MASTER_IP)] {
        let mut id = identity();
        id.mac = mac;
        id.ip = ip;
        let mut server = Server::new(id, &QPS, engine(8 << 20));
        server.set_completion_records(true);
        let gate = Arc::new(WriteGate::writable());
        server.set_write_gate(gate.clone());
        server.engine_mut().put(&ctr, &0u64.to_le_bytes());
        if qps == Qps::Tenant {
            let rule = TenantRule {
                id: TENANT,
                name: "t".into(),
                secret: TENANT_SECRET.to_vec(),
                acl: kvwire::tenant::ALL,
                max_connections: 0,
                requests_per_s: 0,
                max_credits: TENANT_WINDOW,
                reserved_connections: 0,
            };
            server.set_tenants(vec![rule], true, &WorkerStats::default());
        }
        nodes.push(Node {
            mac,
            server,
            gate,
            inbox: Vec::new(),
            dead: false,
            mute: false,
        });
    }
    nodes[0].gate.set_master_hint(Some(MasterHint {
        epoch: 5,
        ip: MASTER_IP,
        mac: MASTER_MAC,
        qpn: 1,
    }));
    nodes[0].gate.refuse_not_master();
    nodes[0].gate.set_following(true);
    nodes[1]
        .server
        .set_mutation_sink(Some(Box::new(Capture(stream.clone()))));
    let clock = Rc::new(Cell::new(1));
    let sw = Switch {
        nodes,
        to_client: Vec::new(),
        stats: WorkerStats::default(),
        clock: clock.clone(),
        ctr,
    };
    let cfg = ClientConfig {
        transport: Config {
            rto_initial_ns: 300_000,
            rto_max_ns: 2_000_000,
            max_retries: 5,
            ..Config::default()
        },
        max_ops_per_packet: OPS_PER_REQUEST,
        ..ClientConfig::default()
    };
    let mut params = request_params();
    params.dst_mac = MASTER_MAC;
    params.dst_ip = MASTER_IP;
    let clock = Box::new(move || clock.get());
    let mut c = match qps {
        Qps::Static => Client::new(sw, cfg, &QPS, params, clock),
        Qps::Opened | Qps::Tenant => Client::opened(sw, cfg, params, clock),
    };
    if qps == Qps::Tenant {
        c.set_credentials(Some(Credentials {
            tenant: TENANT,
            secret: TENANT_SECRET.to_vec(),
        }));
    }
    c.set_nodes(&[(MASTER_MAC, MASTER_IP), (SERVER_MAC, common::SERVER_IP)]);
    c.connect().unwrap();
    c
}

fn fetch_add() -> Op {
    Op::UpdateS2S {
        key: b"ctr".to_vec(),
        atomic: Atomic::from_attr(kvwire::func::FETCH_ADD, 0x03).unwrap(),
        param: 1,
        param2: 0,
    }
}

/// Pipelines [`ADDS`] fetch-adds to the master with its answers lost, then kills
/// it and promotes the replica after shipping it the stream records `ship` keeps.
/// Returns each fetch-add's outcome (its original value, or the status), the
/// counter on the replica, and the client.
fn failover(ship: impl Fn(&Rec) -> bool) -> (Vec<Result<u64, Status>>, u64, Client<Switch>) {
    failover_on(ship, Qps::Static)
}

/// [`failover`] with the client on `qps`.
fn failover_on(
    ship: impl Fn(&Rec) -> bool,
    qps: Qps,
) -> (Vec<Result<u64, Status>>, u64, Client<Switch>) {
    let (mut c, tickets, stream) = run_on_master(qps);
    // The master dies; the replica gets (part of) its stream and is elected.
    let sw = c.io_mut();
    sw.nodes[1].dead = true;
    let recs = stream.lock().unwrap().clone();
    apply(&mut sw.nodes[0].server, recs.iter().filter(|r| ship(r)));
    let outcomes = promote(&mut c, tickets);
    let ctr = c.io_mut().counter(0);
    (outcomes, ctr, c)
}

/// A client that pipelined [`ADDS`] fetch-adds to the master (node 1), which ran them
/// all (a tenant's client: as many as its window) with its answers lost: the
/// client, its tickets and the master's stream.
fn run_on_master(qps: Qps) -> (Client<Switch>, Vec<Ticket>, Arc<Mutex<Vec<Rec>>>) {
    let stream = Arc::new(Mutex::new(Vec::new()));
    let mut c = world(&stream, qps);
    c.io_mut().nodes[1].mute = true;
    let tickets: Vec<Ticket> = (0..ADDS).map(|_| c.submit(fetch_add())).collect();
    c.flush();
    for _ in 0..4 {
        let _ = c.poll();
    }
    assert_eq!(
        c.io_mut().counter(1),
        ran_on_master(qps),
        "the master ran every fetch-add the client could send"
    );
    (c, tickets, stream)
}

/// The fetch-adds the master runs before it fails: all, or for a tenant's client one
/// window of requests (no answer returns a credit).
fn ran_on_master(qps: Qps) -> u64 {
    match qps {
        Qps::Tenant => u64::from(TENANT_WINDOW) * OPS_PER_REQUEST as u64,
        _ => ADDS,
    }
}

/// Applies stream records to a replica's server, as its worker would.
fn apply<'r>(server: &mut Server, recs: impl Iterator<Item = &'r Rec>) {
    for r in recs {
        match r {
            Rec::Put(k, v) => assert_eq!(server.engine_mut().put(k, v), kvengine::Status::Ok),
            Rec::Delete(k) => drop(server.engine_mut().delete(k)),
            Rec::Qp(q, b) => assert!(server.restore_completion(*q, b)),
        }
    }
}

/// Node 0 takes writes; each ticket's outcome: its value, or the status.
fn promote(c: &mut Client<Switch>, tickets: Vec<Ticket>) -> Vec<Result<u64, Status>> {
    let n = &c.io_mut().nodes[0];
    n.gate.set_master_hint(None);
    n.gate.set_following(false);
    n.gate.open();
    tickets
        .into_iter()
        .map(|t| match c.wait(t) {
            Ok(r) if r.status == Status::Ok => {
                Ok(u64::from_le_bytes(r.value[..8].try_into().unwrap()))
            }
            Ok(r) => Err(r.status),
            Err(Error::Status(s)) => Err(s),
            Err(e) => panic!("fetch-add failed: {e:?}"),
        })
        .collect()
}

/// Every outcome is an original answer, each value once.
fn assert_original_answers(outcomes: &[Result<u64, Status>]) {
    let mut originals: Vec<u64> = outcomes.iter().map(|o| o.expect("answered")).collect();
    originals.sort_unstable();
    assert_eq!(
        originals,
        (0..ADDS).collect::<Vec<_>>(),
        "each once, original values"
    );
}

/// The master (alive, its answers lost) hands the replica its state by a full sync
/// after the replica heard only of the connections (`connections`) or of nothing.
fn full_sync_to_replica(c: &mut Client<Switch>, stream: &Arc<Mutex<Vec<Rec>>>, connections: bool) {
    let sw = c.io_mut();
    let heard = stream.lock().unwrap().clone();
    for r in heard.iter().filter(|r| connections && kind(r) == Some(1)) {
        if let Rec::Qp(q, b) = r {
            assert!(sw.nodes[0].server.restore_completion(*q, b));
        }
    }
    let (replica, master) = sw.nodes.split_at_mut(1);
    full_sync(&mut master[0].server, &mut replica[0].server);
}

/// A full sync from `src` to `dst` through the real path: `src`'s worker scan
/// (`repl::scan`, fed the worker's completion records) into a log ring, `dst`'s
/// applier draining it.
fn full_sync(src: &mut Server, dst: &mut Server) {
    let (p, ring) = kvrepl::log::log_ring(8 << 20);
    let shared = Arc::new(ScanShared::default());
    shared.grant.store(u64::MAX / 2, Ordering::Release);
    shared.request.store(1, Ordering::Release);
    let log = ReplLog::new(p, shared.clone(), Arc::new(AtomicU64::new(0)));
    let before = src.set_mutation_sink(Some(Box::new(log)));
    for _ in 0..10_000 {
        src.tick_mutation_sink();
    }
    src.set_mutation_sink(before);
    let mut a = Applier::new(ring, Arc::new(ApplyStats::default()));
    let (e, t, mut keeper) = dst.apply_parts();
    assert!(
        a.apply_with(e, t, usize::MAX, &mut keeper) > 0,
        "the sync arrived"
    );
}

/// Kind byte of a completion blob (crate::repl::completion: 1 incarnation, 2 intent,
/// 3 response frame).
fn kind(r: &Rec) -> Option<u8> {
    match r {
        Rec::Qp(_, b) => b.first().copied(),
        _ => None,
    }
}

#[test]
fn resent_requests_get_their_original_answers_and_do_not_run_again() {
    let (outcomes, ctr, mut c) = failover(|_| true);
    assert_original_answers(&outcomes);
    assert_eq!(ctr, ADDS, "not one applied twice on the new master");
    assert_eq!(c.node(), Some((SERVER_MAC, common::SERVER_IP)));
    let t = c.transport().stats();
    assert!(t.resumed >= 1, "{t:?}");
    let s = &c.io_mut().stats;
    assert!(
        s.restored_replays.get() >= ADDS / 10,
        "answered from completion records"
    );
    assert_eq!(s.outcome_unknown.get(), 0);
}

/// An opened QP is carried across the failover like a static one: its OPEN (R_Key,
/// secret) reached the replica with the stream, the client RESUMEs with its secret,
/// and every resent request gets its original answer.
#[test]
fn an_opened_qp_resumes_on_the_new_master() {
    let (outcomes, ctr, mut c) = failover_on(|_| true, Qps::Opened);
    assert_original_answers(&outcomes);
    assert_eq!(ctr, ADDS, "not one applied twice on the new master");
    assert!(c.transport().stats().resumed >= 1);
    assert_eq!(
        c.io_mut().nodes[0].server.opened_qps(),
        1,
        "installed from the stream"
    );
    assert!(c.io_mut().stats.restored_replays.get() >= ADDS / 10);
}

/// A tenant's opened QP keeps its window (`max_credits`) across the failover: the
/// OPENED record carries it, the new master's RESUME ACCEPT grants the same, so the
/// client goes on with its requests in flight (a different window would start a new
/// incarnation and fail them); each fetch-add counts once.
#[test]
fn a_tenants_window_is_carried_to_the_new_master() {
    let (outcomes, ctr, c) = failover_on(|_| true, Qps::Tenant);
    assert_original_answers(&outcomes);
    assert_eq!(ctr, ADDS, "not one applied twice on the new master");
    let t = c.transport();
    assert!(t.stats().resumed >= 1);
    assert_eq!(t.stats().resume_refused, 0);
    assert_eq!(t.credits(0), TENANT_WINDOW);
}

/// Both ways a full sync carries a tenant's window too.
#[test]
fn a_full_sync_carries_a_tenants_window() {
    full_sync_failover(Qps::Tenant, WriteGate::open);
}

#[test]
fn requests_whose_answers_were_not_replicated_are_reported_unknown_not_rerun() {
    // The post-images and intents reached the replica, the response frames did not.
    let (outcomes, ctr, mut c) = failover(|r| kind(r) != Some(3));
    assert!(
        outcomes.iter().all(|o| *o == Err(Status::OutcomeUnknown)),
        "{outcomes:?}"
    );
    assert_eq!(
        ctr, ADDS,
        "the old master's effects, once; nothing ran again"
    );
    assert!(c.io_mut().stats.outcome_unknown.get() >= ADDS / 10);
}

#[test]
fn requests_the_replica_never_heard_of_run_there_once() {
    // Only the connections reached the replica (the client's incarnations).
    let (outcomes, ctr, mut c) = failover(|r| kind(r) == Some(1));
    assert_original_answers(&outcomes);
    assert_eq!(ctr, ADDS);
    assert_eq!(c.io_mut().stats.restored_replays.get(), 0);
}

/// The nemesis's seed 409: a node that took a full sync (from a chain relay) after
/// requests ran on the master was elected; it had their effects (in the scan) and
/// the client's connection (from before) but no record of the requests, and ran a
/// resent fetch-add again. The full sync now carries the records with the data.
#[test]
fn a_full_sync_carries_the_completion_records_with_the_data() {
    full_sync_failover(Qps::Static, WriteGate::open);
}

/// The synced node never heard of an opened QP (it joined after the OPEN): the sync
/// installs it (R_Key, secret) with its records, and the client resumes there.
#[test]
fn a_full_sync_carries_opened_qps() {
    full_sync_failover(Qps::Opened, WriteGate::open);
}

/// The nemesis's seed 5: the master (frozen, then fenced: its lease had lapsed)
/// full-synced a replica that had joined it; it took its refusal of writes for "not
/// the master" and sent only the records it had restored from the master before
/// it, none of the requests it had run itself — the synced node, elected, ran a
/// resent fetch-add again. A master's cache is the truth whatever its write
/// permission: fenced ...
#[test]
fn a_full_sync_from_a_fenced_master_carries_what_it_ran() {
    full_sync_failover(Qps::Static, |g| {
        g.set_fence_deadline(1);
        g.refuse_not_master();
    });
}

/// ... or short of replicas in sync (as while one joins).
#[test]
fn a_full_sync_from_a_master_short_of_replicas_carries_what_it_ran() {
    full_sync_failover(Qps::Static, WriteGate::refuse_not_enough_replicas);
}

/// Runs [`ADDS`] fetch-adds on the master, answers lost; with its gate set by
/// `gate` the master full-syncs the replica, dies, and the replica is elected:
/// every resend must get its original answer, none run twice.
fn full_sync_failover(qps: Qps, gate: fn(&WriteGate)) {
    let (mut c, tickets, stream) = run_on_master(qps);
    let sw = c.io_mut();
    gate(&sw.nodes[1].gate);
    // A burst reads the gate (an empty one: the client's frames were lost).
    let mut tx = VecSink::default();
    sw.nodes[1].server.handle_burst(&[], &sw.stats, &mut tx);
    full_sync_to_replica(&mut c, &stream, qps == Qps::Static);
    let sw = c.io_mut();
    assert_eq!(
        sw.counter(0),
        ran_on_master(qps),
        "the data came with the sync"
    );
    sw.nodes[1].dead = true;
    assert_original_answers(&promote(&mut c, tickets));
    assert_eq!(
        c.io_mut().counter(0),
        ADDS,
        "not one applied twice on the synced node"
    );
    // Each request the master ran is answered from the records it synced.
    let requests = ran_on_master(qps) / OPS_PER_REQUEST as u64;
    assert!(c.io_mut().stats.restored_replays.get() >= requests);
}

/// A chain relay's full sync carries what it restored from its master: the replica
/// that followed the stream syncs a fresh node (its records, not a live cache, are
/// the source), which is then elected; every resend gets its original answer.
#[test]
fn a_relay_full_sync_carries_the_records_it_restored() {
    let (mut c, tickets, stream) = run_on_master(Qps::Static);
    let sw = c.io_mut();
    sw.nodes[1].dead = true;
    apply(&mut sw.nodes[0].server, stream.lock().unwrap().iter());
    let mut id = identity();
    id.mac = SERVER_MAC;
    let mut fresh = Server::new(id, &QPS, engine(8 << 20));
    fresh.set_completion_records(true);
    fresh.set_write_gate(sw.nodes[0].gate.clone());
    full_sync(&mut sw.nodes[0].server, &mut fresh);
    sw.nodes[0].server = fresh;
    assert_eq!(sw.counter(0), ADDS, "the data came with the sync");
    assert_original_answers(&promote(&mut c, tickets));
    assert_eq!(c.io_mut().counter(0), ADDS, "not one applied twice");
}

#[test]
fn a_resume_at_a_node_that_is_not_master_is_not_answered() {
    let stream = Arc::new(Mutex::new(Vec::new()));
    let mut c = world(&stream, Qps::Static);
    c.io_mut().nodes[1].mute = true;
    let t = c.submit(fetch_add());
    c.flush();
    for _ in 0..4 {
        let _ = c.poll();
    }
    c.io_mut().nodes[1].dead = true;
    // The replica is never promoted: the RESUMEs go unanswered (no unknown outcome
    // is invented, nothing is resent as a new request); the operation times out at
    // the client, its outcome unknown.
    let mut polls = 0;
    while polls < 2000 && c.poll().is_empty() {
        polls += 1;
    }
    let drops = c.io_mut().stats.drops[kvwire::DropReason::ResumeNotMaster.index()].get();
    assert!(drops > 0, "RESUMEs refused by the replica");
    assert_eq!(c.io_mut().counter(0), 0, "nothing ran on the replica");
    let _ = t;
}
