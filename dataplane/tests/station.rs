//! Atomics, vector operations and the reservation station through the whole request
//! path: frames built with kvwire go through `Server::handle_burst` (out-of-order and
//! stall mode), responses are parsed back and compared with a sequential model written
//! here with native integer types (independent of kvops' arithmetic).

mod common;

use common::{connect, identity, Client, RKEY};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvops::FunctionRegistry;
use kvwire::{func, parse_response, pred, Atomic, KvOp, ResponseReader, Status, Width};
use proptest::prelude::*;
use std::collections::HashMap;

const QPNS: [u32; 4] = [17, 18, 19, 20];
const SAT_ADD: u8 = 200;

/// The connected clients, by index into `QPNS`.
type Clients = Vec<Client>;

fn server(ooo: bool) -> (Server, Clients) {
    server_kv(ooo, false)
}

/// A server; `station_kv`: GET/PUT/DELETE chunks with a repeated key go through the
/// station too.
fn server_kv(ooo: bool, station_kv: bool) -> (Server, Clients) {
    let engine = common::engine(1 << 20);
    let id = identity();
    let mut reg = FunctionRegistry::new();
    reg.load(
        [(SAT_ADD, "saturating_add")],
        kvops::registry::samples::CATALOG,
    )
    .expect("registry");
    let clients: Vec<(u32, u32)> = QPNS.iter().map(|&q| (q, RKEY)).collect();
    let mut s = Server::with_station(id, &clients, engine, ooo, reg);
    s.set_station_kv(station_kv);
    let c = QPNS.iter().map(|&q| connect(&mut s, q, RKEY)).collect();
    (s, c)
}

/// The `n`-th request of the client with QPN `qpn`.
fn request(c: &Clients, ops: &[KvOp<'_>], batch_id: u32, qpn: u32, n: u32) -> Vec<u8> {
    let i = QPNS.iter().position(|&q| q == qpn).expect("a test QPN");
    c[i].request(ops, batch_id, n)
}

/// Results of each request by (client QPN, batch id), in op order.
type Results = HashMap<(u32, u32), Vec<(Status, Vec<u8>)>>;

/// Runs frames through the server; returns every result of every response, per
/// (qpn, batch id), in op order (MORE-split responses concatenated).
fn run(s: &mut Server, st: &WorkerStats, frames: &[Vec<u8>]) -> Results {
    let out = common::run(s, st, frames);
    let mut res = Results::new();
    for f in out {
        let r = parse_response(&f).expect("valid response");
        let rr = ResponseReader::new(r.payload).unwrap();
        let e = res.entry((r.dest_qp, rr.batch_id())).or_default();
        assert_eq!(
            rr.first_index() as usize,
            e.len(),
            "results arrive in order"
        );
        for x in rr {
            let x = x.unwrap();
            e.push((x.status, x.value.to_vec()));
        }
    }
    res
}

fn at(width: Width, signed: bool, f: u8) -> Atomic {
    Atomic {
        func: f,
        width,
        signed,
    }
}

/// A test operation on key `k` of a small key space.
#[derive(Clone, Debug)]
enum TOp {
    Get(u8),
    Put(u8, Vec<u8>),
    Del(u8),
    /// fetch_add on a u64.
    Add64(u8, u64),
    /// CAS on a u32: expected, new.
    Cas32(u8, u32, u32),
    /// fetch_add of a u16 to every element.
    AddVec16(u8, u16),
    /// element-wise xor with a Δ of u64s.
    XorV2V64(u8, Vec<u8>),
    /// sum of u32 elements from 0.
    Sum32(u8),
    /// bytes > p (unsigned).
    FilterGt8(u8, u8),
    /// the registered user function, saturating add on u8.
    SatAdd8(u8, u8),
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
            | TOp::SatAdd8(k, _) => *k,
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
                atomic: at(Width::W8, false, func::FETCH_ADD),
                param: *p,
                param2: 0,
            },
            TOp::Cas32(_, e, n) => KvOp::UpdateS2S {
                key,
                atomic: at(Width::W4, false, func::CAS),
                param: u64::from(*e),
                param2: u64::from(*n),
            },
            TOp::AddVec16(_, p) => KvOp::UpdateS2V {
                key,
                atomic: at(Width::W2, false, func::FETCH_ADD),
                param: u64::from(*p),
                param2: 0,
            },
            TOp::XorV2V64(_, d) => KvOp::UpdateV2V {
                key,
                atomic: at(Width::W8, false, func::XOR),
                delta: d,
            },
            TOp::Sum32(_) => KvOp::Reduce {
                key,
                atomic: at(Width::W4, false, func::FETCH_ADD),
                init: 0,
            },
            TOp::FilterGt8(_, p) => KvOp::Filter {
                key,
                atomic: at(Width::W1, false, pred::GT),
                param: u64::from(*p),
            },
            TOp::SatAdd8(_, p) => KvOp::UpdateS2S {
                key,
                atomic: at(Width::W1, false, SAT_ADD),
                param: u64::from(*p),
                param2: 0,
            },
        }
    }

    /// Executes on the model; returns the expected result.
    fn apply(&self, m: &mut HashMap<Vec<u8>, Vec<u8>>) -> (Status, Vec<u8>) {
        let key = self.key();
        let ok = |v: Vec<u8>| (Status::Ok, v);
        let nf = (Status::NotFound, vec![]);
        let bad = (Status::BadLength, vec![]);
        match self {
            TOp::Get(_) => m.get(&key).map_or(nf, |v| ok(v.clone())),
            TOp::Put(_, v) => {
                m.insert(key, v.clone());
                ok(vec![])
            }
            TOp::Del(_) => m.remove(&key).map_or(nf, |_| ok(vec![])),
            _ => {
                let Some(v) = m.get_mut(&key) else { return nf };
                let orig = v.clone();
                match self {
                    TOp::Add64(_, p) => {
                        let Ok(b) = <[u8; 8]>::try_from(v.as_slice()) else {
                            return bad;
                        };
                        v.copy_from_slice(&u64::from_le_bytes(b).wrapping_add(*p).to_le_bytes());
                        ok(orig)
                    }
                    TOp::Cas32(_, e, n) => {
                        let Ok(b) = <[u8; 4]>::try_from(v.as_slice()) else {
                            return bad;
                        };
                        if u32::from_le_bytes(b) == *e {
                            v.copy_from_slice(&n.to_le_bytes());
                        }
                        ok(orig)
                    }
                    TOp::SatAdd8(_, p) => {
                        if v.len() != 1 {
                            return bad;
                        }
                        v[0] = v[0].saturating_add(*p);
                        ok(orig)
                    }
                    TOp::AddVec16(_, p) => {
                        if v.len() % 2 != 0 {
                            return bad;
                        }
                        for c in v.chunks_exact_mut(2) {
                            let x = u16::from_le_bytes([c[0], c[1]]).wrapping_add(*p);
                            c.copy_from_slice(&x.to_le_bytes());
                        }
                        ok(orig)
                    }
                    TOp::XorV2V64(_, d) => {
                        if v.len() % 8 != 0 || d.len() != v.len() {
                            return bad;
                        }
                        for (a, b) in v.iter_mut().zip(d) {
                            *a ^= b;
                        }
                        ok(orig)
                    }
                    TOp::Sum32(_) => {
                        if v.len() % 4 != 0 {
                            return bad;
                        }
                        let s = v.chunks_exact(4).fold(0u32, |s, c| {
                            s.wrapping_add(u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                        });
                        ok(s.to_le_bytes().to_vec())
                    }
                    TOp::FilterGt8(_, p) => ok(v.iter().copied().filter(|b| b > p).collect()),
                    _ => unreachable!(),
                }
            }
        }
    }
}

fn top() -> impl Strategy<Value = TOp> {
    let k = || 0u8..6;
    let val = prop_oneof![
        Just(vec![0u8; 8]),
        prop::collection::vec(any::<u8>(), 8),
        prop::collection::vec(any::<u8>(), 4),
        prop::collection::vec(any::<u8>(), 16),
        prop::collection::vec(any::<u8>(), 1),
        prop::collection::vec(any::<u8>(), 3),
    ];
    prop_oneof![
        2 => k().prop_map(TOp::Get),
        2 => (k(), val).prop_map(|(k, v)| TOp::Put(k, v)),
        1 => k().prop_map(TOp::Del),
        4 => (k(), any::<u64>()).prop_map(|(k, p)| TOp::Add64(k, p)),
        2 => (k(), 0u32..3, any::<u32>()).prop_map(|(k, e, n)| TOp::Cas32(k, e, n)),
        1 => (k(), any::<u16>()).prop_map(|(k, p)| TOp::AddVec16(k, p)),
        1 => (k(), prop_oneof![prop::collection::vec(any::<u8>(), 8), prop::collection::vec(any::<u8>(), 16)])
            .prop_map(|(k, d)| TOp::XorV2V64(k, d)),
        1 => k().prop_map(TOp::Sum32),
        1 => (k(), any::<u8>()).prop_map(|(k, p)| TOp::FilterGt8(k, p)),
        1 => (k(), any::<u8>()).prop_map(|(k, p)| TOp::SatAdd8(k, p)),
    ]
}

/// Runs bursts of batches (each batch on a QP of its own PSN sequence) through a
/// server and the model; every result must match.
fn check(
    ooo: bool,
    station_kv: bool,
    bursts: &[Vec<Vec<TOp>>],
) -> Result<WorkerStats, TestCaseError> {
    let (mut s, c) = server_kv(ooo, station_kv);
    let st = WorkerStats::default();
    let mut model = HashMap::new();
    let mut psn = [0u32; 4];
    let mut batch_id = 0u32;
    for burst in bursts {
        let mut frames = Vec::new();
        let mut expected = Vec::new();
        for (i, batch) in burst.iter().enumerate() {
            let qi = i % QPNS.len();
            let keys: Vec<Vec<u8>> = batch.iter().map(TOp::key).collect();
            let ops: Vec<KvOp<'_>> = batch.iter().zip(&keys).map(|(o, k)| o.wire(k)).collect();
            // Requests of a burst are executed in frame order, so the model runs them
            // in that order too.
            let exp: Vec<(Status, Vec<u8>)> = batch.iter().map(|o| o.apply(&mut model)).collect();
            frames.push(request(&c, &ops, batch_id, QPNS[qi], psn[qi]));
            expected.push(((QPNS[qi], batch_id), exp));
            psn[qi] += 1;
            batch_id += 1;
        }
        let got = run(&mut s, &st, &frames);
        for (k, exp) in expected {
            prop_assert_eq!(got.get(&k), Some(&exp), "batch {:?}", k);
        }
    }
    Ok(st)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    /// Mixed GET/PUT/DELETE/atomic/vector/user-function batches on 6 keys, out of order.
    #[test]
    fn ooo_matches_sequential_model(
        bursts in prop::collection::vec(prop::collection::vec(prop::collection::vec(top(), 0..40), 1..6), 1..5)
    ) {
        check(true, false, &bursts)?;
        check(true, true, &bursts)?;
    }

    /// The same in stall mode.
    #[test]
    fn stall_matches_sequential_model(
        bursts in prop::collection::vec(prop::collection::vec(prop::collection::vec(top(), 0..40), 1..6), 1..5)
    ) {
        check(false, false, &bursts)?;
        check(false, true, &bursts)?;
    }
}

/// Q client QPs × M fetch-adds on one key, in bursts of many packets: exactly Q×M, every
/// original value seen exactly once, and the station forwarded and merged them.
#[test]
fn q_clients_times_m_fetch_adds_on_one_key() {
    for ooo in [true, false] {
        let (mut s, c) = server(ooo);
        let st = WorkerStats::default();
        let key = b"counter".as_slice();
        let zero = 0u64.to_le_bytes();
        run(
            &mut s,
            &st,
            &[request(
                &c,
                &[KvOp::Put { key, value: &zero }],
                0,
                QPNS[0],
                0,
            )],
        );
        let add = KvOp::UpdateS2S {
            key,
            atomic: at(Width::W8, false, func::FETCH_ADD),
            param: 1,
            param2: 0,
        };
        let (q, m_per_pkt, pkts_per_q) = (4usize, 50usize, 8usize);
        let mut seen = Vec::new();
        let mut psn = [1u32, 0, 0, 0];
        for round in 0..pkts_per_q {
            let frames: Vec<Vec<u8>> = (0..q)
                .map(|qi| {
                    let f = request(&c, &vec![add; m_per_pkt], round as u32, QPNS[qi], psn[qi]);
                    psn[qi] += 1;
                    f
                })
                .collect();
            for (_, r) in run(&mut s, &st, &frames) {
                for (status, v) in r {
                    assert_eq!(status, Status::Ok);
                    seen.push(u64::from_le_bytes(v.try_into().unwrap()));
                }
            }
        }
        let total = (q * m_per_pkt * pkts_per_q) as u64;
        seen.sort_unstable();
        assert_eq!(seen, (0..total).collect::<Vec<_>>(), "ooo={ooo}");
        let r = run(
            &mut s,
            &st,
            &[request(&c, &[KvOp::Get { key }], 99, QPNS[1], psn[1])],
        );
        assert_eq!(
            r[&(QPNS[1], 99)],
            vec![(Status::Ok, total.to_le_bytes().to_vec())]
        );
        assert_eq!(st.atomics.get(), total);
        if ooo {
            assert!(st.station_forwarded.get() >= total - 4 * pkts_per_q as u64);
            assert!(st.station_merged.get() > 0);
            assert_eq!(st.station_stalls.get(), 0);
        } else {
            assert_eq!(st.station_forwarded.get(), 0);
            assert!(st.station_stalls.get() >= total - 4 * pkts_per_q as u64);
        }
    }
}

/// CAS loops of several clients on one key never lose an update: each client retries
/// its increment with the value it last saw until its CAS succeeds.
#[test]
fn cas_loops_never_lose_an_update() {
    let (mut s, c) = server(true);
    let st = WorkerStats::default();
    let key = b"cas".as_slice();
    run(
        &mut s,
        &st,
        &[request(
            &c,
            &[KvOp::Put {
                key,
                value: &0u32.to_le_bytes(),
            }],
            0,
            QPNS[0],
            0,
        )],
    );
    let mut psn = [1u32, 0, 0, 0];
    let mut view = [0u32; 4]; // each client's last seen value
    let mut done = [0u32; 4];
    let goal = 25;
    let mut bid = 1;
    while done.iter().any(|&d| d < goal) {
        let mut frames = Vec::new();
        let mut who = Vec::new();
        for qi in 0..4 {
            if done[qi] < goal {
                let op = KvOp::UpdateS2S {
                    key,
                    atomic: at(Width::W4, false, func::CAS),
                    param: u64::from(view[qi]),
                    param2: u64::from(view[qi] + 1),
                };
                frames.push(request(&c, &[op], bid, QPNS[qi], psn[qi]));
                who.push((qi, bid));
                psn[qi] += 1;
                bid += 1;
            }
        }
        let r = run(&mut s, &st, &frames);
        for (qi, b) in who {
            let (status, v) = &r[&(QPNS[qi], b)][0];
            assert_eq!(*status, Status::Ok);
            let orig = u32::from_le_bytes(v.as_slice().try_into().unwrap());
            if orig == view[qi] {
                done[qi] += 1;
                view[qi] += 1;
            } else {
                view[qi] = orig;
            }
        }
    }
    let r = run(
        &mut s,
        &st,
        &[request(&c, &[KvOp::Get { key }], 0, QPNS[1], psn[1])],
    );
    assert_eq!(
        r[&(QPNS[1], 0)],
        vec![(Status::Ok, (4 * goal).to_le_bytes().to_vec())]
    );
}

/// Error statuses change nothing: wrong length, Δ of the wrong length, unknown function
/// and predicate, a function not defined for the opcode (docs/PROTOCOL.md §3.2 matrix:
/// CAS with REDUCE and UPDATE_V2V), missing key.
#[test]
fn errors_change_nothing() {
    let (mut s, c) = server(true);
    let st = WorkerStats::default();
    let key = b"vec".as_slice();
    let v: Vec<u8> = (1..=12).collect();
    let ops = [
        KvOp::Put { key, value: &v },
        KvOp::UpdateS2S {
            key,
            atomic: at(Width::W8, false, func::FETCH_ADD),
            param: 1,
            param2: 0,
        },
        KvOp::UpdateS2V {
            key,
            atomic: at(Width::W8, false, func::FETCH_ADD),
            param: 1,
            param2: 0,
        },
        KvOp::UpdateV2V {
            key,
            atomic: at(Width::W4, false, func::FETCH_ADD),
            delta: &[1; 8],
        },
        KvOp::UpdateS2V {
            key,
            atomic: at(Width::W4, false, 77),
            param: 1,
            param2: 0,
        },
        KvOp::UpdateS2V {
            key,
            atomic: at(Width::W4, false, 201),
            param: 1,
            param2: 0,
        },
        KvOp::Filter {
            key,
            atomic: at(Width::W4, false, 9),
            param: 0,
        },
        KvOp::Reduce {
            key: b"missing",
            atomic: at(Width::W4, false, func::FETCH_ADD),
            init: 0,
        },
        KvOp::Reduce {
            key,
            atomic: at(Width::W4, false, func::CAS),
            init: 0,
        },
        KvOp::UpdateV2V {
            key,
            atomic: at(Width::W4, false, func::CAS),
            delta: &v,
        },
        KvOp::Get { key },
    ];
    let r = run(&mut s, &st, &[request(&c, &ops, 5, QPNS[0], 0)]);
    let got: Vec<Status> = r[&(QPNS[0], 5)].iter().map(|x| x.0).collect();
    assert_eq!(
        got,
        vec![
            Status::Ok,
            Status::BadLength,
            Status::BadLength,
            Status::BadLength,
            Status::UnknownFunction,
            Status::UnknownFunction,
            Status::UnknownFunction,
            Status::NotFound,
            Status::UnknownFunction,
            Status::UnknownFunction,
            Status::Ok,
        ]
    );
    assert_eq!(r[&(QPNS[0], 5)][10].1, v);
    assert_eq!(st.op_errors.get(), 8);
}

/// GET/PUT/DELETE only, few keys: with `station_kv` the repeated keys go through the
/// station (and some GETs are served by forwarding); without, through the engine's
/// batch; both match the model.
#[test]
fn plain_ops_with_and_without_station_kv() {
    for station_kv in [false, true] {
        let ops: Vec<TOp> = (0..200u32)
            .map(|i| match i % 5 {
                0 | 1 => TOp::Get((i % 3) as u8),
                2 | 3 => TOp::Put((i % 3) as u8, vec![i as u8; 8]),
                _ => TOp::Del((i % 3) as u8),
            })
            .collect();
        let bursts = vec![vec![ops[..100].to_vec(), ops[100..].to_vec()]];
        let st = check(true, station_kv, &bursts).expect("matches the model");
        if station_kv {
            assert!(st.station_chunks.get() > 0 && st.station_forwarded.get() > 0);
        } else {
            assert_eq!(st.station_chunks.get(), 0);
        }
    }
}
