//! Request processing without DPDK: frames built with kvwire go through
//! `Server::handle_burst`, responses are parsed back, and everything is checked
//! against a `HashMap` model and the drop counters.

mod common;

use common::{connect, identity, request, run, total_drops, Client, VecSink, RKEY, VA};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvengine::{Engine, EngineConfig, Region};
use kvwire::transport::{parse_server_frame, NakCode, ServerFrame, Syndrome};
use kvwire::{
    finalize, parse_response, DropReason, KvOp, ResponseReader, Status, REQUEST_HEADER_LEN,
};
use proptest::prelude::*;
use std::collections::HashMap;

const QPN: u32 = 17;

fn server(mem: usize) -> Server {
    Server::new(identity(), &[(QPN, RKEY), (18, 99)], common::engine(mem))
}

/// A server with QP `QPN` connected.
fn served(mem: usize) -> (Server, Client) {
    let mut s = server(mem);
    let c = connect(&mut s, QPN, RKEY);
    (s, c)
}

/// The `n`-th request of `c` with one PUT "a" = "1".
fn put_a(c: &Client, batch_id: u32, n: u32) -> Vec<u8> {
    c.request(
        &[KvOp::Put {
            key: b"a",
            value: b"1",
        }],
        batch_id,
        n,
    )
}

/// (batch id, first index, more, results) of a response frame.
type Decoded = (u32, u16, bool, Vec<(Status, Vec<u8>)>);

fn decode(frame: &[u8]) -> Decoded {
    let r = parse_response(frame).expect("valid response frame (ICRC included)");
    assert_eq!(r.dest_qp, QPN);
    assert_eq!(r.src_qp, 1);
    let rr = ResponseReader::new(r.payload).unwrap();
    let (id, first, more) = (rr.batch_id(), rr.first_index(), rr.more());
    let results = rr
        .map(|x| x.map(|k| (k.status, k.value.to_vec())))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (id, first, more, results)
}

#[test]
fn put_then_get_in_one_packet_and_across_packets() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let f1 = c.request(
        &[
            KvOp::Put {
                key: b"k1",
                value: b"v1",
            },
            KvOp::Get { key: b"k1" },
            KvOp::Get { key: b"nope" },
        ],
        7,
        0,
    );
    let f2 = c.request(
        &[KvOp::Delete { key: b"k1" }, KvOp::Get { key: b"k1" }],
        8,
        1,
    );
    let out = run(&mut s, &st, &[f1, f2]);
    assert_eq!(out.len(), 2);
    let (id, first, more, r) = decode(&out[0]);
    assert_eq!((id, first, more), (7, 0, false));
    assert_eq!(
        r,
        vec![
            (Status::Ok, vec![]),
            (Status::Ok, b"v1".to_vec()),
            (Status::NotFound, vec![])
        ]
    );
    let (id, _, _, r) = decode(&out[1]);
    assert_eq!(id, 8);
    assert_eq!(r, vec![(Status::Ok, vec![]), (Status::NotFound, vec![])]);
    assert_eq!(st.requests.get(), 2);
    assert_eq!(st.gets.get(), 3);
    assert_eq!(st.get_hits.get(), 1);
}

#[test]
fn access_checks_drop_and_count() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let get = [KvOp::Get { key: b"a" }];
    let mut wrong_mac = c.request(&get, 1, 0);
    wrong_mac[0..6].copy_from_slice(&[2, 9, 9, 9, 9, 9]);
    let frames = vec![
        request(&get, 1, 999, RKEY, c.va(0), c.psn(0)), // unknown QP
        request(&get, 1, QPN, RKEY ^ 1, c.va(0), c.psn(0)), // wrong R_Key
        request(&get, 1, QPN, RKEY, VA - 8, c.psn(0)),  // below the region
        request(&get, 1, QPN, RKEY, VA + (1 << 20), c.psn(0)), // past the region
        request(&get, 1, QPN, RKEY, c.va(1), c.psn(0)), // another PSN's slot
        wrong_mac,
    ];
    let out = run(&mut s, &st, &frames);
    assert!(out.is_empty());
    assert_eq!(st.drops[DropReason::UnknownQp.index()].get(), 1);
    assert_eq!(st.drops[DropReason::BadRKey.index()].get(), 1);
    assert_eq!(st.drops[DropReason::BadVa.index()].get(), 3);
    assert_eq!(st.drops[DropReason::WrongDestination.index()].get(), 1);
    assert_eq!(st.ops(), 0, "nothing reached the engine");
    // A valid request afterwards is still served.
    let out = run(&mut s, &st, &[c.request(&get, 2, 0)]);
    assert_eq!(decode(&out[0]).3, vec![(Status::NotFound, vec![])]);
}

#[test]
fn response_psns_increase_per_client() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let get = [KvOp::Get { key: b"a" }];
    let out = run(&mut s, &st, &[c.request(&get, 1, 0), c.request(&get, 2, 1)]);
    let p0 = parse_response(&out[0]).unwrap().psn;
    let p1 = parse_response(&out[1]).unwrap().psn;
    assert_eq!(p0, c.accept.response_psn, "the ACCEPT's first response PSN");
    assert_eq!(p1, (p0 + 1) & 0xff_ffff);
}

#[test]
fn bad_op_answered_with_status_later_ops_not_run() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let mut f = c.request(
        &[
            KvOp::Put {
                key: b"a",
                value: b"1",
            },
            KvOp::Put {
                key: b"b",
                value: b"2",
            },
            KvOp::Put {
                key: b"c",
                value: b"3",
            },
        ],
        5,
        0,
    );
    // Second op's opcode byte → unknown opcode 0x1f. Ops: header 8 B; op1 = 1+1+2+1+1 = 6 B.
    let op2 = REQUEST_HEADER_LEN + 8 + 6;
    f[op2] = (f[op2] & 0xe0) | 0x1f;
    finalize(&mut f).unwrap();
    let out = run(&mut s, &st, &[f]);
    let (_, _, _, r) = decode(&out[0]);
    assert_eq!(
        r,
        vec![(Status::Ok, vec![]), (Status::UnknownOpcode, vec![])]
    );
    assert_eq!(st.op_errors.get(), 1);
    let out = run(
        &mut s,
        &st,
        &[c.request(&[KvOp::Get { key: b"a" }, KvOp::Get { key: b"c" }], 6, 1)],
    );
    assert_eq!(
        decode(&out[0]).3,
        vec![(Status::Ok, b"1".to_vec()), (Status::NotFound, vec![])]
    );
}

#[test]
fn op_count_larger_than_payload_is_malformed() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let mut f = put_a(&c, 5, 0);
    // Batch header op count (bytes 2..4 of the payload) → 3.
    f[REQUEST_HEADER_LEN + 2..REQUEST_HEADER_LEN + 4].copy_from_slice(&3u16.to_be_bytes());
    finalize(&mut f).unwrap();
    let out = run(&mut s, &st, &[f]);
    let (_, _, _, r) = decode(&out[0]);
    assert_eq!(r, vec![(Status::Ok, vec![]), (Status::Malformed, vec![])]);
}

#[test]
fn large_results_split_over_frames() {
    let (mut s, c) = served(4 << 20);
    let st = WorkerStats::default();
    let big = vec![0x5a; 900];
    let mut frames = Vec::new();
    for (i, k) in [b"k0", b"k1", b"k2"].iter().enumerate() {
        frames.push(c.request(
            &[KvOp::Put {
                key: *k,
                value: &big,
            }],
            i as u32,
            i as u32,
        ));
    }
    let gets = [
        KvOp::Get { key: b"k0" },
        KvOp::Get { key: b"k1" },
        KvOp::Get { key: b"k2" },
    ];
    frames.push(c.request(&gets, 77, 3));
    let out = run(&mut s, &st, &frames);
    let parts: Vec<Decoded> = out[3..].iter().map(|f| decode(f)).collect();
    assert_eq!(
        parts.len(),
        3,
        "900 B values: one per 1448 B response payload"
    );
    for (i, (id, first, more, r)) in parts.iter().enumerate() {
        assert_eq!(*id, 77);
        assert_eq!(*first as usize, i);
        assert_eq!(*more, i < 2);
        assert_eq!(r, &vec![(Status::Ok, big.clone())]);
    }
}

#[test]
fn no_mbuf_is_counted_not_fatal() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let f = put_a(&c, 1, 0);
    let mut tx = VecSink::with_budget(0);
    s.handle_burst(&[&f], &st, &mut tx);
    assert!(tx.sent.is_empty());
    assert_eq!(st.drops[DropReason::NoMbuf.index()].get(), 1);
    assert_eq!(st.puts.get(), 1, "the op ran; only its answer was lost");
}

/// Every way a response can fail to go out has its own drop reason, and the op it
/// answers has run all the same.
#[test]
fn response_failures_have_distinct_reasons() {
    // A tx buffer shorter than the response frame.
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let mut tx = VecSink {
        frame_size: 40,
        ..VecSink::default()
    };
    s.handle_burst(&[&put_a(&c, 1, 0)], &st, &mut tx);
    assert!(tx.sent.is_empty());
    assert_eq!(st.drops[DropReason::TxBufferTooSmall.index()].get(), 1);
    assert_eq!(total_drops(&st), 1);
    assert_eq!(st.puts.get(), 1);
    // An MTU too small for a response header and one bare result.
    let mut id = identity();
    id.mtu = 40;
    let mut s = Server::new(id, &[(QPN, RKEY)], common::engine(1 << 20));
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let out = run(&mut s, &st, &[put_a(&c, 1, 0)]);
    assert!(out.is_empty());
    assert_eq!(st.drops[DropReason::MtuTooSmall.index()].get(), 1);
    assert_eq!(total_drops(&st), 1);
    assert_eq!(st.puts.get(), 1);
}

/// A request to the broadcast MAC (accepted, docs/PROTOCOL.md §5) is answered from
/// the server's own MAC and IP, never from the group address it was sent to.
#[test]
fn broadcast_request_answered_from_own_address() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let params = kvwire::frame::FrameParams::new(
        common::CLIENT_MAC,
        [0xff; 6],
        common::CLIENT_IP,
        common::SERVER_IP,
        0xC000,
    );
    let f = c.request_to(&params, &[KvOp::Get { key: b"k" }], 1, 0);
    let out = run(&mut s, &st, &[f]);
    assert_eq!(out.len(), 1);
    let r = parse_response(&out[0]).unwrap();
    assert_eq!(r.src_mac, common::SERVER_MAC);
    assert_eq!(r.dst_mac, common::CLIENT_MAC);
    assert_eq!(r.src_ip, common::SERVER_IP);
    assert_eq!(r.dst_ip, common::CLIENT_IP);
}

/// The statuses the server decides itself, apart from the engine and the station:
/// a key of another partition (`WRONG_PARTITION`, nothing done) and a result that does
/// not fit one response frame (`RESPONSE_TOO_LARGE`, the op applied).
#[test]
fn wrong_partition_and_response_too_large() {
    // Partition 0 of 2: find a key of each partition.
    let (mut s, c) = served(1 << 20);
    s.set_partition(0, 2);
    let part = |k: &[u8]| kvwire::partition::partition_of_hash(kvengine::key_hash(k), 2);
    let keys: Vec<[u8; 1]> = (b'a'..=b'z').map(|c| [c]).collect();
    let mine = keys.iter().find(|k| part(&k[..]) == 0).unwrap();
    let other = keys.iter().find(|k| part(&k[..]) == 1).unwrap();
    let st = WorkerStats::default();
    let ops = [
        KvOp::Put {
            key: other,
            value: b"x",
        },
        KvOp::Put {
            key: mine,
            value: b"y",
        },
        KvOp::Get { key: other },
    ];
    let out = run(&mut s, &st, &[c.request(&ops, 1, 0)]);
    assert_eq!(
        decode(&out[0]).3,
        vec![
            (Status::WrongPartition, vec![]),
            (Status::Ok, vec![]),
            (Status::WrongPartition, vec![])
        ]
    );
    assert_eq!(st.puts.get(), 1, "the foreign PUT was not executed");

    // A server whose MTU is smaller than the client's: a 1000 B value is stored, but
    // reading it back cannot fit one of the server's response frames.
    let mut id = identity();
    id.mtu = 600;
    let mut s = Server::new(id, &[(QPN, RKEY)], common::engine(1 << 20));
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let big = vec![7u8; 1000];
    let ops = [
        KvOp::Put {
            key: b"big",
            value: &big,
        },
        KvOp::Get { key: b"big" },
    ];
    let out = run(&mut s, &st, &[c.request(&ops, 2, 0)]);
    let results: Vec<_> = out.iter().flat_map(|f| decode(f).3).collect();
    assert_eq!(
        results,
        vec![(Status::Ok, vec![]), (Status::ResponseTooLarge, vec![])]
    );
    assert!(
        out.iter().all(|f| f.len() <= 600 + 14),
        "frames within the MTU"
    );
    assert_eq!(st.op_errors.get(), 1);
}

#[test]
fn empty_batch_gets_empty_response() {
    let (mut s, c) = served(1 << 20);
    let st = WorkerStats::default();
    let out = run(&mut s, &st, &[c.request(&[], 42, 0)]);
    let (id, _, more, r) = decode(&out[0]);
    assert_eq!((id, more, r.len()), (42, false, 0));
}

#[derive(Clone, Debug)]
enum MOp {
    Get(u8),
    Put(u8, usize),
    Del(u8),
}

fn mop() -> impl Strategy<Value = MOp> {
    prop_oneof![
        (0u8..12).prop_map(MOp::Get),
        ((0u8..12), 0usize..80).prop_map(|(k, n)| MOp::Put(k, n)),
        (0u8..12).prop_map(MOp::Del),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Random bursts of random batches against a HashMap model.
    #[test]
    fn matches_hashmap_model(bursts in prop::collection::vec(prop::collection::vec(prop::collection::vec(mop(), 0..12), 1..6), 1..6)) {
        let (mut s, c) = served(1 << 20);
        let st = WorkerStats::default();
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut psn = 0;
        for burst in bursts {
            let mut frames = Vec::new();
            let mut expected = Vec::new();
            for (bi, batch) in burst.iter().enumerate() {
                let keys: Vec<Vec<u8>> = batch.iter().map(|o| match o { MOp::Get(k) | MOp::Put(k, _) | MOp::Del(k) => vec![b'k', *k] }).collect();
                let vals: Vec<Vec<u8>> = batch.iter().enumerate().map(|(i, o)| match o { MOp::Put(_, n) => vec![(i as u8) ^ (psn as u8); *n], _ => vec![] }).collect();
                let mut ops = Vec::new();
                let mut exp = Vec::new();
                for (i, o) in batch.iter().enumerate() {
                    let k = &keys[i];
                    match o {
                        MOp::Get(_) => {
                            ops.push(KvOp::Get { key: k });
                            exp.push(match model.get(k) { Some(v) => (Status::Ok, v.clone()), None => (Status::NotFound, vec![]) });
                        }
                        MOp::Put(_, _) => {
                            ops.push(KvOp::Put { key: k, value: &vals[i] });
                            model.insert(k.clone(), vals[i].clone());
                            exp.push((Status::Ok, vec![]));
                        }
                        MOp::Del(_) => {
                            ops.push(KvOp::Delete { key: k });
                            exp.push(if model.remove(k).is_some() { (Status::Ok, vec![]) } else { (Status::NotFound, vec![]) });
                        }
                    }
                }
                frames.push(c.request(&ops, bi as u32, psn));
                psn += 1;
                expected.push(exp);
            }
            let out = run(&mut s, &st, &frames);
            prop_assert_eq!(out.len(), frames.len());
            for (bi, f) in out.iter().enumerate() {
                let (id, _, _, r) = decode(f);
                prop_assert_eq!(id as usize, bi);
                prop_assert_eq!(&r, &expected[bi]);
            }
        }
    }

    /// The op counters agree with the statuses answered, op by op: GET/PUT/DELETE
    /// counts, GET hits, and errors (engine refusals for an oversized value, mixed
    /// with valid ops across packets, chunks and split responses).
    #[test]
    fn op_counters_match_answered_statuses(batches in prop::collection::vec(prop::collection::vec((mop(), any::<bool>()), 1..40), 1..12)) {
        // Slab classes up to 64 B: a PUT of more than ~60 B is refused (VALUE_TOO_LARGE).
        let cfg = EngineConfig { mem_bytes: 1 << 20, max_slab_class: 64, ..EngineConfig::default() };
        let engine = Engine::new(Region::owned(cfg.mem_bytes), &cfg).expect("engine");
        let id = identity();
        let mut s = Server::new(id, &[(QPN, RKEY)], engine);
        let c = connect(&mut s, QPN, RKEY);
        let st = WorkerStats::default();
        let big = vec![7u8; 70];
        let mut frames = Vec::new();
        let mut kinds = Vec::new();
        for (bi, batch) in batches.iter().enumerate() {
            let keys: Vec<Vec<u8>> = batch.iter().map(|(o, _)| match o { MOp::Get(k) | MOp::Put(k, _) | MOp::Del(k) => vec![b'k', *k] }).collect();
            let mut ops = Vec::new();
            for (i, (o, large)) in batch.iter().enumerate() {
                let k = &keys[i];
                ops.push(match o {
                    MOp::Get(_) => KvOp::Get { key: k },
                    MOp::Put(_, n) => KvOp::Put { key: k, value: if *large { &big } else { &big[..n % 8] } },
                    MOp::Del(_) => KvOp::Delete { key: k },
                });
                kinds.push(match o { MOp::Get(_) => 0usize, MOp::Put(..) => 1, MOp::Del(_) => 2 });
            }
            frames.push(c.request(&ops, bi as u32, bi as u32));
        }
        let out = run(&mut s, &st, &frames);
        let statuses: Vec<Status> = out.iter().flat_map(|f| decode(f).3).map(|(s, _)| s).collect();
        prop_assert_eq!(statuses.len(), kinds.len());
        let count = |k: usize| kinds.iter().filter(|&&x| x == k).count() as u64;
        prop_assert_eq!(st.gets.get(), count(0));
        prop_assert_eq!(st.puts.get(), count(1));
        prop_assert_eq!(st.deletes.get(), count(2));
        let hits = kinds.iter().zip(&statuses).filter(|(&k, &s)| k == 0 && s == Status::Ok).count() as u64;
        prop_assert_eq!(st.get_hits.get(), hits);
        let errors = statuses.iter().filter(|s| !matches!(s, Status::Ok | Status::NotFound)).count() as u64;
        prop_assert!(statuses.contains(&Status::ValueTooLarge) || errors == 0);
        prop_assert_eq!(st.op_errors.get(), errors);
    }

    /// Arbitrary bytes never panic and never produce a response.
    #[test]
    fn garbage_never_panics(frames in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..200), 1..8)) {
        let mut s = server(1 << 20);
        let st = WorkerStats::default();
        let out = run(&mut s, &st, &frames);
        prop_assert!(out.is_empty());
        let drops = total_drops(&st);
        prop_assert_eq!(drops, frames.len() as u64);
    }

    /// Any single-byte corruption or truncation of a valid frame is handled: each frame
    /// is either dropped and counted under exactly one reason, or (for bytes the ICRC
    /// does not cover) served and answered with exactly one response.
    #[test]
    fn corrupted_frames_never_panic(pos in 0usize..120, byte in any::<u8>(), cut in 0usize..130) {
        let (mut s, c) = served(1 << 20);
        let st = WorkerStats::default();
        let mut f = c.request(&[KvOp::Put { key: b"key", value: b"value" }, KvOp::Get { key: b"key" }], 1, 0);
        let p = pos % f.len();
        f[p] ^= byte | 1;
        let mut g = c.request(&[KvOp::Get { key: b"key" }], 2, 1);
        g.truncate(cut.min(g.len()));
        let out = run(&mut s, &st, &[f, g]);
        let drops = total_drops(&st);
        prop_assert_eq!(st.rx_packets.get(), 2);
        prop_assert_eq!(st.requests.get() + drops, 2, "every frame served or dropped once");
        let mut responses = 0;
        for r in &out {
            match parse_server_frame(r) {
                Ok(ServerFrame::Response(_)) => responses += 1,
                // The first request lost: the second is ahead of the expected PSN.
                Ok(ServerFrame::Ack(a)) => {
                    prop_assert_eq!(a.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
                    prop_assert_eq!(a.psn, c.psn(0));
                }
                other => prop_assert!(false, "a response or a NAK, not {:?}", other),
            }
        }
        prop_assert_eq!(responses, st.requests.get(), "every served request answered");
    }
}

#[test]
fn set_clients_keeps_connections_of_staying_clients() {
    let (mut s, c) = served(1 << 20);
    let c18 = connect(&mut s, 18, 99);
    let st = WorkerStats::default();
    let get = [KvOp::Get { key: b"a" }];
    let out = run(
        &mut s,
        &st,
        &[
            c.request(&get, 1, 0),
            c.request(&get, 2, 1),
            c18.request(&get, 3, 0),
        ],
    );
    assert_eq!(out.len(), 3);
    let resp_psn = parse_response(&out[1]).unwrap().psn;
    // QPN 17 stays, 18 goes, 20 comes.
    s.set_clients(&[(20, 5), (QPN, RKEY)]);
    let dup = run(&mut s, &st, &[c.request(&get, 4, 1)]);
    assert_eq!(
        dup,
        vec![out[1].clone()],
        "expected PSN and cache kept: a replay"
    );
    assert_eq!(st.replays.get(), 1);
    let out = run(&mut s, &st, &[c.request(&get, 5, 2)]);
    assert_eq!(
        parse_response(&out[0]).unwrap().psn,
        (resp_psn + 1) & 0xff_ffff,
        "response PSN continues"
    );
    let out = run(&mut s, &st, &[c18.request(&get, 6, 1)]);
    assert!(out.is_empty());
    assert_eq!(st.drops[DropReason::UnknownQp.index()].get(), 1);
    // A new client starts unconnected.
    let out = run(&mut s, &st, &[request(&get, 7, 20, 5, VA, 0)]);
    assert_eq!(
        common::ack_of(&out[0]).syndrome,
        Syndrome::Nak(NakCode::InvalidRequest)
    );
    assert_eq!(st.drops[DropReason::NotConnected.index()].get(), 1);
    let c20 = connect(&mut s, 20, 5);
    let out = run(&mut s, &st, &[c20.request(&get, 8, 0)]);
    let r = parse_response(&out[0]).unwrap();
    assert_eq!((r.dest_qp, r.psn), (20, c20.accept.response_psn));
    // Re-admitted later, 18 starts unconnected too, and connects afresh.
    s.set_clients(&[(18, 99), (20, 5), (QPN, RKEY)]);
    let out = run(&mut s, &st, &[c18.request(&get, 9, 1)]);
    assert_eq!(
        common::ack_of(&out[0]).syndrome,
        Syndrome::Nak(NakCode::InvalidRequest)
    );
    let c18b = connect(&mut s, 18, 99);
    let out = run(&mut s, &st, &[c18b.request(&get, 10, 0)]);
    assert_eq!(
        parse_response(&out[0]).unwrap().psn,
        c18b.accept.response_psn
    );
    assert_eq!(st.drops[DropReason::NotConnected.index()].get(), 2);
    assert_eq!(st.drops[DropReason::PsnDuplicate.index()].get(), 0);
}
