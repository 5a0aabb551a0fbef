//! The mutation tap through the whole request path: request frames of random mixes of
//! PUT/DELETE/GET, atomics, vector updates, user functions, reduce and filter go
//! through `Server::handle_burst` (out of order and stall mode, with and without
//! `station_kv`, one or two partitions); the tap's post-images, replayed in order into
//! a HashMap and into a second engine, must equal the engine's contents. A tap with
//! little room refuses requests with an RNR NAK (the test client retries them) and is
//! never handed more than it said it had room for.

mod common;

use common::{ack_of, connect, identity, Client, RKEY};
use dataplane::mutation::{record_cost, worst_case, MutationSink};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvengine::Engine;
use kvops::FunctionRegistry;
use kvwire::transport::{parse_server_frame, ServerFrame, Syndrome};
use kvwire::{func, pred, Atomic, KvOp, ResponseReader, Width};
use proptest::prelude::*;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

const QPNS: [u32; 4] = [17, 18, 19, 20];
const SAT_ADD: u8 = 200;

/// One post-image: key → Some(value) or None (deleted).
type PostImage = (Vec<u8>, Option<Vec<u8>>);

/// The test's sink: records post-images into a shared log; `cap` bytes of room, of
/// which `used` are taken until the test "drains" it. Taking more than it had room
/// for is recorded as an overflow (a lost record in a real ring).
#[derive(Default)]
struct Log {
    records: Vec<PostImage>,
    cap: usize,
    used: usize,
    overflows: usize,
}

struct Tap(Arc<Mutex<Log>>);

impl Tap {
    fn take(&self, cost: usize, rec: PostImage) {
        let mut l = self.0.lock().unwrap();
        if l.used + cost > l.cap {
            l.overflows += 1;
        }
        l.used += cost;
        l.records.push(rec);
    }
}

impl MutationSink for Tap {
    fn room(&self) -> usize {
        let l = self.0.lock().unwrap();
        l.cap.saturating_sub(l.used)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.take(
            record_cost(key.len(), value.len()),
            (key.to_vec(), Some(value.to_vec())),
        );
    }
    fn delete(&mut self, key: &[u8]) {
        self.take(record_cost(key.len(), 0), (key.to_vec(), None));
    }
}

fn at(width: Width, f: u8) -> Atomic {
    Atomic {
        func: f,
        width,
        signed: false,
    }
}

/// A test op on key `k` of a small key space (so chains and repeats are common).
#[derive(Clone, Debug)]
enum TOp {
    Get(u8),
    Put(u8, Vec<u8>),
    Del(u8),
    Add64(u8, u64),
    Cas32(u8, u32, u32),
    AddVec16(u8, u16),
    XorV2V64(u8, Vec<u8>),
    Sum32(u8),
    FilterGt8(u8, u8),
    SatAdd8(u8, u8),
    Cad(u8, Vec<u8>),
}

impl TOp {
    fn key(&self) -> Vec<u8> {
        let k = match self {
            TOp::Get(k)
            | TOp::Put(k, _)
            | TOp::Del(k)
            | TOp::Add64(k, _)
            | TOp::Cas32(k, ..)
            | TOp::AddVec16(k, _)
            | TOp::XorV2V64(k, _)
            | TOp::Sum32(k)
            | TOp::FilterGt8(k, _)
            | TOp::SatAdd8(k, _)
            | TOp::Cad(k, _) => *k,
        };
        vec![b'k', k]
    }

    fn wire<'a>(&'a self, key: &'a [u8]) -> KvOp<'a> {
        match self {
            TOp::Get(_) => KvOp::Get { key },
            TOp::Put(_, v) => KvOp::Put { key, value: v },
            TOp::Del(_) => KvOp::Delete { key },
            TOp::Add64(_, p) => KvOp::UpdateS2S {
                key,
                atomic: at(Width::W8, func::FETCH_ADD),
                param: *p,
                param2: 0,
            },
            TOp::Cas32(_, e, n) => KvOp::UpdateS2S {
                key,
                atomic: at(Width::W4, func::CAS),
                param: u64::from(*e),
                param2: u64::from(*n),
            },
            TOp::AddVec16(_, p) => KvOp::UpdateS2V {
                key,
                atomic: at(Width::W2, func::FETCH_ADD),
                param: u64::from(*p),
                param2: 0,
            },
            TOp::XorV2V64(_, d) => KvOp::UpdateV2V {
                key,
                atomic: at(Width::W8, func::XOR),
                delta: d,
            },
            TOp::Sum32(_) => KvOp::Reduce {
                key,
                atomic: at(Width::W4, func::FETCH_ADD),
                init: 0,
            },
            TOp::FilterGt8(_, p) => KvOp::Filter {
                key,
                atomic: at(Width::W1, pred::GT),
                param: u64::from(*p),
            },
            TOp::SatAdd8(_, p) => KvOp::UpdateS2S {
                key,
                atomic: at(Width::W1, SAT_ADD),
                param: u64::from(*p),
                param2: 0,
            },
            TOp::Cad(_, v) => KvOp::CompareDelete { key, expected: v },
        }
    }
}

fn top() -> impl Strategy<Value = TOp> {
    let k = || 0u8..12;
    let val = prop_oneof![
        Just(vec![0u8; 8]),
        prop::collection::vec(any::<u8>(), 8),
        prop::collection::vec(any::<u8>(), 4),
        prop::collection::vec(any::<u8>(), 16),
        prop::collection::vec(any::<u8>(), 1),
        prop::collection::vec(any::<u8>(), 0..300),
    ];
    prop_oneof![
        2 => k().prop_map(TOp::Get),
        3 => (k(), val).prop_map(|(k, v)| TOp::Put(k, v)),
        1 => k().prop_map(TOp::Del),
        3 => (k(), any::<u64>()).prop_map(|(k, p)| TOp::Add64(k, p)),
        1 => (k(), 0u32..3, any::<u32>()).prop_map(|(k, e, n)| TOp::Cas32(k, e, n)),
        1 => (k(), any::<u16>()).prop_map(|(k, p)| TOp::AddVec16(k, p)),
        1 => (k(), prop_oneof![prop::collection::vec(any::<u8>(), 8), prop::collection::vec(any::<u8>(), 16)])
            .prop_map(|(k, d)| TOp::XorV2V64(k, d)),
        1 => k().prop_map(TOp::Sum32),
        1 => (k(), any::<u8>()).prop_map(|(k, p)| TOp::FilterGt8(k, p)),
        1 => (k(), any::<u8>()).prop_map(|(k, p)| TOp::SatAdd8(k, p)),
        // Mostly the value PUTs store most often, so it often deletes.
        2 => (k(), prop_oneof![3 => Just(vec![0u8; 8]), 1 => prop::collection::vec(any::<u8>(), 8)])
            .prop_map(|(k, v)| TOp::Cad(k, v)),
    ]
}

/// How the server under test runs.
#[derive(Clone, Copy, Debug)]
struct Mode {
    ooo: bool,
    station_kv: bool,
    /// Partitions (1 or 2); the server is partition 0.
    partitions: u32,
    /// The tap's room in bytes.
    cap: usize,
}

fn server(mode: Mode, log: &Arc<Mutex<Log>>) -> (Server, Vec<Client>) {
    let mut reg = FunctionRegistry::new();
    reg.load(
        [(SAT_ADD, "saturating_add")],
        kvops::registry::samples::CATALOG,
    )
    .expect("registry");
    let clients: Vec<(u32, u32)> = QPNS.iter().map(|&q| (q, RKEY)).collect();
    let mut s = Server::with_station(identity(), &clients, common::engine(1 << 20), mode.ooo, reg);
    s.set_station_kv(mode.station_kv);
    s.set_partition(0, mode.partitions);
    log.lock().unwrap().cap = mode.cap;
    assert!(s
        .set_mutation_sink(Some(Box::new(Tap(Arc::clone(log)))))
        .is_none());
    let c = QPNS.iter().map(|&q| connect(&mut s, q, RKEY)).collect();
    (s, c)
}

/// The engine's contents.
fn contents(e: &Engine) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    e.for_each(|k, v| {
        assert!(m.insert(k.to_vec(), v.to_vec()).is_none());
    });
    m
}

/// Post-images replayed in order from an empty store.
fn replay(records: &[PostImage]) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut m = BTreeMap::new();
    for (k, v) in records {
        match v {
            Some(v) => m.insert(k.clone(), v.clone()),
            None => m.remove(k),
        };
    }
    m
}

/// Sends the batches of `bursts` (each a list of (client index, ops)), one burst at a
/// time; requests refused with an RNR NAK (a full tap) are resent in the next burst,
/// after the tap is drained, until every batch was served. Returns the stats and the
/// number of RNR NAKs seen.
fn drive(
    s: &mut Server,
    c: &[Client],
    log: &Arc<Mutex<Log>>,
    bursts: &[Vec<(usize, Vec<TOp>)>],
) -> Result<(WorkerStats, usize), TestCaseError> {
    let st = WorkerStats::default();
    let mut next = [0u32; QPNS.len()];
    let mut pending: Vec<Vec<Vec<TOp>>> = vec![Vec::new(); QPNS.len()];
    let mut batch_id = 0u32;
    let mut rnr = 0;
    let mut bursts = bursts.iter();
    let mut rounds = 0;
    loop {
        if let Some(b) = bursts.next() {
            for (ci, ops) in b {
                pending[ci % QPNS.len()].push(ops.clone());
            }
        } else if pending.iter().all(Vec::is_empty) {
            break;
        }
        rounds += 1;
        prop_assert!(rounds < 10_000, "no progress");
        // Each client sends its pending batches in PSN order.
        let mut frames = Vec::new();
        let mut sent: Vec<(usize, u32)> = Vec::new();
        let mut costs: HashMap<u32, usize> = HashMap::new();
        let max_value_len = s.engine().max_value_len();
        for (ci, batches) in pending.iter().enumerate() {
            for (j, ops) in batches.iter().enumerate() {
                let keys: Vec<Vec<u8>> = ops.iter().map(TOp::key).collect();
                let wire: Vec<KvOp<'_>> = ops.iter().zip(&keys).map(|(o, k)| o.wire(k)).collect();
                frames.push(c[ci].request(&wire, batch_id, next[ci] + j as u32));
                costs.insert(batch_id, packet_cost(ops, max_value_len));
                sent.push((ci, batch_id));
                batch_id += 1;
            }
        }
        let out = common::run(s, &st, &frames);
        let mut served = [0usize; QPNS.len()];
        let mut answered = HashSet::new();
        for f in &out {
            match parse_server_frame(f).expect("a valid server frame") {
                ServerFrame::Response(r) => {
                    let rr = ResponseReader::new(r.payload).unwrap();
                    answered.insert(rr.batch_id());
                }
                ServerFrame::Ack(_) => {
                    let a = ack_of(f);
                    prop_assert!(
                        matches!(a.syndrome, Syndrome::RnrNak { .. }),
                        "unexpected {:?}",
                        a.syndrome
                    );
                    rnr += 1;
                }
                ServerFrame::Accept(_) => prop_assert!(false, "unexpected ACCEPT"),
            }
        }
        // What was served is a prefix of each client's batches.
        let mut refused = [false; QPNS.len()];
        for &(ci, id) in &sent {
            if answered.contains(&id) {
                prop_assert!(!refused[ci], "served after a refused request");
                served[ci] += 1;
            } else {
                refused[ci] = true;
            }
        }
        for (ci, n) in served.iter().enumerate() {
            pending[ci].drain(..*n);
            next[ci] += *n as u32;
        }
        // The burst logged no more than the worst cases of the packets it served.
        let reserved: usize = answered.iter().map(|id| costs[id]).sum();
        let used = log.lock().unwrap().used;
        prop_assert!(
            used <= reserved,
            "logged {} > worst case {}",
            used,
            reserved
        );
        // The consumer drains the tap between bursts.
        log.lock().unwrap().used = 0;
    }
    Ok((st, rnr))
}

fn check(mode: Mode, bursts: &[Vec<(usize, Vec<TOp>)>]) -> Result<(usize, usize), TestCaseError> {
    let log = Arc::new(Mutex::new(Log::default()));
    let (mut s, c) = server(mode, &log);
    let (st, rnr) = drive(&mut s, &c, &log, bursts)?;
    let l = log.lock().unwrap();
    prop_assert_eq!(l.overflows, 0, "the tap got more than its room");
    let engine = contents(s.engine());
    prop_assert_eq!(&replay(&l.records), &engine);
    // Replayed into a second engine, the same contents.
    let mut e2 = common::engine(1 << 20);
    for (k, v) in &l.records {
        let status = match v {
            Some(v) => e2.put(k, v),
            None => e2.delete(k),
        };
        prop_assert_eq!(status, kvengine::Status::Ok);
    }
    prop_assert_eq!(&contents(&e2), &engine);
    // Every refusal is counted; the RNR NAK goes once per refused PSN.
    prop_assert!(st.tap_full.get() as usize >= rnr);
    prop_assert_eq!(st.tap_full.get() > 0, rnr > 0);
    Ok((l.records.len(), rnr))
}

fn bursts() -> impl Strategy<Value = Vec<Vec<(usize, Vec<TOp>)>>> {
    prop::collection::vec(
        prop::collection::vec((0usize..4, prop::collection::vec(top(), 0..24)), 1..6),
        1..6,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Replayed post-images equal the engine, in every server mode, with a roomy tap.
    #[test]
    fn post_images_replay_to_the_engine(
        b in bursts(), ooo in any::<bool>(), station_kv in any::<bool>(), two in any::<bool>()
    ) {
        let partitions = if two { 2 } else { 1 };
        check(Mode { ooo, station_kv, partitions, cap: 1 << 24 }, &b)?;
    }

    /// A tap with little room (the largest packet's worst case and a little more):
    /// requests are refused and retried, the tap never overflows, and the replay still
    /// equals the engine.
    #[test]
    fn a_small_tap_refuses_instead_of_losing(
        b in bursts(), ooo in any::<bool>(), extra in 0usize..3_000
    ) {
        let max_value_len = common::engine(1 << 20).max_value_len();
        let largest = b.iter().flatten().map(|(_, ops)| packet_cost(ops, max_value_len)).max();
        let cap = largest.unwrap_or(0) + extra;
        check(Mode { ooo, station_kv: false, partitions: 1, cap }, &b)?;
    }
}

/// A tap with no room at all: the request is refused with an RNR NAK and nothing is
/// executed; with room it is served and logged.
#[test]
fn no_room_refuses_the_request_and_executes_nothing() {
    let log = Arc::new(Mutex::new(Log::default()));
    let mode = Mode {
        ooo: true,
        station_kv: false,
        partitions: 1,
        cap: 0,
    };
    let (mut s, c) = server(mode, &log);
    let st = WorkerStats::default();
    let put = [KvOp::Put {
        key: b"k",
        value: b"v",
    }];
    let out = common::run(&mut s, &st, &[c[0].request(&put, 1, 0)]);
    assert_eq!(out.len(), 1);
    assert!(matches!(ack_of(&out[0]).syndrome, Syndrome::RnrNak { .. }));
    assert_eq!(st.tap_full.get(), 1);
    assert!(contents(s.engine()).is_empty());
    assert!(log.lock().unwrap().records.is_empty());
    // Exactly the worst case is enough.
    log.lock().unwrap().cap = record_cost(1, 1);
    let out = common::run(&mut s, &st, &[c[0].request(&put, 2, 0)]);
    assert!(matches!(
        parse_server_frame(&out[0]),
        Ok(ServerFrame::Response(_))
    ));
    assert_eq!(
        log.lock().unwrap().records,
        vec![(b"k".to_vec(), Some(b"v".to_vec()))]
    );
    // A GET-only request needs no room.
    log.lock().unwrap().used = record_cost(1, 1);
    let out = common::run(
        &mut s,
        &st,
        &[c[0].request(&[KvOp::Get { key: b"k" }], 3, 1)],
    );
    assert!(matches!(
        parse_server_frame(&out[0]),
        Ok(ServerFrame::Response(_))
    ));
    assert_eq!(st.tap_full.get(), 1);
}

/// Fetch-adds replicate as the values they produced, never as the operation, and a
/// merged chain of them as one write-back.
#[test]
fn atomics_log_values_not_operations() {
    let log = Arc::new(Mutex::new(Log::default()));
    let mode = Mode {
        ooo: true,
        station_kv: false,
        partitions: 1,
        cap: 1 << 20,
    };
    let (mut s, c) = server(mode, &log);
    let st = WorkerStats::default();
    let add = |p| TOp::Add64(1, p);
    let key = TOp::Get(1).key();
    let ops = [TOp::Put(1, 5u64.to_le_bytes().to_vec()), add(1), add(2)];
    let wire: Vec<KvOp<'_>> = ops.iter().map(|o| o.wire(&key)).collect();
    common::run(&mut s, &st, &[c[0].request(&wire, 1, 0)]);
    let recs = log.lock().unwrap().records.clone();
    assert_eq!(
        recs.first(),
        Some(&(key.clone(), Some(5u64.to_le_bytes().to_vec())))
    );
    assert_eq!(
        recs.last(),
        Some(&(key.clone(), Some(8u64.to_le_bytes().to_vec())))
    );
    assert!(recs.len() <= 3);
    // A worst case that bounds what was logged.
    let logged: usize = recs
        .iter()
        .map(|(k, v)| record_cost(k.len(), v.as_ref().map_or(0, Vec::len)))
        .sum();
    assert!(logged <= packet_cost(&ops, s.engine().max_value_len()));
}

/// The worst case of a request carrying `ops`.
fn packet_cost(ops: &[TOp], max_value_len: usize) -> usize {
    let keys: Vec<Vec<u8>> = ops.iter().map(TOp::key).collect();
    let mut buf = vec![0u8; 1440];
    let mut w = kvwire::BatchWriter::new(&mut buf, 1).unwrap();
    for (o, k) in ops.iter().zip(&keys) {
        w.push(&o.wire(k)).unwrap();
    }
    let n = w.finish();
    worst_case(&buf[..n], max_value_len)
}
