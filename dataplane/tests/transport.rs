//! Protocol v2's transport on the server, without DPDK: CONNECT/ACCEPT and
//! incarnations, NAKs (not connected, PSN gap), RNR NAKs when the tx side is
//! backlogged, the request slot check, and exactly-once execution with replays from
//! the response cache.

mod common;

use common::{
    accept_of, ack_of, connect, connect_frame, connect_nonce, identity, request, run, total_drops,
    Client, VecSink, REGION_LEN, RKEY, VA, W,
};
use dataplane::server::{first_psns, qp_state_bytes, Server, Transport, RNR_TIMER};
use dataplane::stats::WorkerStats;
use kvops::FunctionRegistry;
use kvwire::transport::{slot_size, NakCode, Syndrome, MAX_CREDITS};
use kvwire::{
    func, parse_response, Atomic, DropReason, KvOp, ResponseReader, Status, Width, DEFAULT_MTU,
};

const QPN: u32 = 17;

fn server() -> Server {
    Server::new(
        identity(),
        &[(QPN, RKEY), (18, 99)],
        common::engine(1 << 20),
    )
}

fn server_with(t: Transport) -> Server {
    Server::with_transport(
        identity(),
        &[(QPN, RKEY)],
        common::engine(4 << 20),
        true,
        FunctionRegistry::new(),
        t,
    )
    .expect("valid transport")
}

fn drops(st: &WorkerStats, r: DropReason) -> u64 {
    st.drops[r.index()].get()
}

/// A fetch-add of 1 on the u64 at "ctr".
fn fetch_add() -> KvOp<'static> {
    KvOp::UpdateS2S {
        key: b"ctr",
        atomic: Atomic {
            width: Width::W8,
            signed: false,
            func: func::FETCH_ADD,
        },
        param: 1,
        param2: 0,
    }
}

/// The results of a response frame.
fn results(frame: &[u8]) -> Vec<(Status, Vec<u8>)> {
    let r = parse_response(frame).expect("a response");
    ResponseReader::new(r.payload)
        .unwrap()
        .map(|x| x.map(|k| (k.status, k.value.to_vec())).unwrap())
        .collect()
}

/// The value of "ctr" read with the client's `n`-th request.
fn counter(s: &mut Server, c: &Client, n: u32) -> u64 {
    let out = run(
        s,
        &WorkerStats::default(),
        &[c.request(&[KvOp::Get { key: b"ctr" }], 0, n)],
    );
    let r = results(&out[0]);
    u64::from_le_bytes(r[0].1.as_slice().try_into().unwrap())
}

#[test]
fn accept_values_and_incarnations() {
    let mut s = server();
    let st = WorkerStats::default();
    let out = run(&mut s, &st, &[connect_frame(QPN, RKEY, 10)]);
    assert_eq!(out.len(), 1);
    let a = accept_of(&out[0]);
    let (req, resp) = first_psns(0, QPN);
    assert_eq!(a.nonce, 10);
    assert_eq!(a.credits, W);
    assert_eq!((a.request_psn, a.response_psn), (req, resp));
    assert_eq!(u64::from(a.slot_size), slot_size(REGION_LEN, W));
    assert_eq!(a.region_va, VA);
    match kvwire::transport::parse_server_frame(&out[0]).unwrap() {
        kvwire::transport::ServerFrame::Accept(f) => {
            assert_eq!((f.dest_qp, f.qkey, f.src_qp), (QPN, identity().qkey, 1));
        }
        _ => unreachable!(),
    }
    assert_eq!((st.connects.get(), st.accepts_sent.get()), (1, 1));
    // Same nonce: the same ACCEPT (a lost ACCEPT), no new incarnation.
    let again = run(&mut s, &st, &[connect_frame(QPN, RKEY, 10)]);
    assert_eq!(again, out);
    assert_eq!((st.connects.get(), st.accepts_sent.get()), (1, 2));
    // Serve three requests (one response frame each).
    let c = Client {
        qpn: QPN,
        rkey: RKEY,
        accept: a,
    };
    let get = [KvOp::Get { key: b"x" }];
    let served = run(
        &mut s,
        &st,
        &[
            c.request(&get, 1, 0),
            c.request(&get, 2, 1),
            c.request(&get, 3, 2),
        ],
    );
    assert_eq!(served.len(), 3);
    // A larger nonce: a new incarnation half the PSN space away.
    let out = run(&mut s, &st, &[connect_frame(QPN, RKEY, 11)]);
    let b = accept_of(&out[0]);
    assert_eq!(b.request_psn, (a.request_psn + 3 + (1 << 23)) & 0xff_ffff);
    assert_eq!(b.response_psn, (a.response_psn + 3 + (1 << 23)) & 0xff_ffff);
    assert_eq!(st.connects.get(), 2);
    // Stale requests of the old incarnation are dropped, never served and never
    // answered: both lie outside the new window (one at the old `e` is 2^23 behind,
    // a retransmission from before it 2^23 − k ahead).
    let ops0 = st.requests.get();
    let stale = run(&mut s, &st, &[c.request(&get, 5, 3), c.request(&get, 4, 2)]);
    assert_eq!(st.requests.get(), ops0);
    assert_eq!(drops(&st, DropReason::PsnDuplicate), 2);
    assert_eq!(drops(&st, DropReason::PsnAhead), 0);
    assert!(stale.is_empty(), "no NAK for a stale incarnation's packet");
    // A smaller nonce: stale.
    let out = run(&mut s, &st, &[connect_frame(QPN, RKEY, 9)]);
    assert!(out.is_empty());
    assert_eq!(drops(&st, DropReason::StaleConnect), 1);
    // The new incarnation is served from its ACCEPT's PSNs.
    let c2 = Client { accept: b, ..c };
    let out = run(&mut s, &st, &[c2.request(&get, 6, 0)]);
    assert_eq!(parse_response(&out[0]).unwrap().psn, b.response_psn);
    // Unknown QP, wrong R_Key.
    let out = run(
        &mut s,
        &st,
        &[connect_frame(999, RKEY, 1), connect_frame(QPN, 1, 99)],
    );
    assert!(out.is_empty());
    assert_eq!(drops(&st, DropReason::UnknownQp), 1);
    assert_eq!(drops(&st, DropReason::BadRKey), 1);
    // Another seed draws other first PSNs.
    let t = Transport {
        seed: 7,
        ..Transport::default()
    };
    let c7 = connect(&mut server_with(t), QPN, RKEY);
    assert_eq!(
        (c7.accept.request_psn, c7.accept.response_psn),
        first_psns(7, QPN)
    );
    assert_ne!(first_psns(7, QPN), first_psns(0, QPN));
}

#[test]
fn request_before_connect_is_naked() {
    let mut s = server();
    let st = WorkerStats::default();
    let out = run(
        &mut s,
        &st,
        &[request(&[KvOp::Get { key: b"k" }], 1, QPN, RKEY, VA, 77)],
    );
    assert_eq!(out.len(), 1);
    let a = ack_of(&out[0]);
    assert_eq!(a.syndrome, Syndrome::Nak(NakCode::InvalidRequest));
    assert_eq!((a.dest_qp, a.psn), (QPN, 77));
    assert_eq!(drops(&st, DropReason::NotConnected), 1);
    assert_eq!(st.naks_sent.get(), 1);
    assert_eq!(st.ops(), 0);
}

#[test]
fn gap_is_naked_once_then_served_from_e() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let get = [KvOp::Get { key: b"x" }];
    // Requests 0 and 1 lost: 2, 3 and 4 are ahead.
    let out = run(&mut s, &st, &[c.request(&get, 2, 2), c.request(&get, 3, 3)]);
    let out2 = run(&mut s, &st, &[c.request(&get, 4, 4)]);
    assert!(out2.is_empty(), "one NAK per gap");
    assert_eq!(out.len(), 1);
    let a = ack_of(&out[0]);
    assert_eq!(a.syndrome, Syndrome::Nak(NakCode::PsnSequenceError));
    assert_eq!((a.dest_qp, a.psn), (QPN, c.psn(0)));
    assert_eq!(drops(&st, DropReason::PsnAhead), 3);
    assert_eq!(st.naks_sent.get(), 1);
    assert_eq!(st.requests.get(), 0);
    // The client resends from e: all served, in order.
    let frames: Vec<_> = (0..5).map(|n| c.request(&get, n, n)).collect();
    let out = run(&mut s, &st, &frames);
    assert_eq!(out.len(), 5);
    for (n, f) in out.iter().enumerate() {
        let r = parse_response(f).unwrap();
        assert_eq!(r.psn, (c.accept.response_psn + n as u32) & 0xff_ffff);
    }
    // A new gap is NAKed again.
    let out = run(&mut s, &st, &[c.request(&get, 7, 7)]);
    assert_eq!(ack_of(&out[0]).psn, c.psn(5));
    assert_eq!(st.naks_sent.get(), 2);
}

#[test]
fn duplicate_is_replayed_byte_for_byte_and_not_executed_again() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let zero = 0u64.to_le_bytes();
    run(
        &mut s,
        &st,
        &[c.request(
            &[KvOp::Put {
                key: b"ctr",
                value: &zero,
            }],
            0,
            0,
        )],
    );
    let first = run(&mut s, &st, &[c.request(&[fetch_add()], 1, 1)]);
    assert_eq!(results(&first[0]), vec![(Status::Ok, zero.to_vec())]);
    // The response was lost; the client retransmits request 1.
    let replay = run(&mut s, &st, &[c.request(&[fetch_add()], 1, 1)]);
    assert_eq!(replay, first, "the same bytes");
    assert_eq!((st.replays.get(), st.replayed_frames.get()), (1, 1));
    assert_eq!(st.atomics.get(), 1, "executed once");
    assert_eq!(counter(&mut s, &c, 2), 1);
    // A duplicate in the burst of its original: answered once.
    let out = run(
        &mut s,
        &st,
        &[
            c.request(&[fetch_add()], 3, 3),
            c.request(&[fetch_add()], 3, 3),
        ],
    );
    assert_eq!(out.len(), 1);
    assert_eq!(drops(&st, DropReason::PsnDuplicate), 1);
    assert_eq!(counter(&mut s, &c, 4), 2);
    // Up to W behind is replayed; farther is an old duplicate.
    let frames: Vec<_> = (5..5 + u32::from(W))
        .map(|n| c.request(&[], n, n))
        .collect();
    run(&mut s, &st, &frames);
    let e = 5 + u32::from(W); // the expected request
    let out = run(&mut s, &st, &[c.request(&[fetch_add()], 3, 3)]); // d = 3 - e < -W
    assert!(out.is_empty());
    assert_eq!(drops(&st, DropReason::PsnDuplicate), 2);
    let out = run(
        &mut s,
        &st,
        &[c.request(&[], e - u32::from(W), e - u32::from(W))],
    );
    assert_eq!(out.len(), 1, "d = -W: still replayed");
    assert_eq!(counter(&mut s, &c, e), 2);
}

#[test]
fn evicted_response_is_replay_missing() {
    let mut s = server_with(Transport {
        replay_cache_bytes: 4096,
        ..Transport::default()
    });
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let big = vec![9u8; 900];
    run(
        &mut s,
        &st,
        &[c.request(
            &[KvOp::Put {
                key: b"big",
                value: &big,
            }],
            0,
            0,
        )],
    );
    // Three ~950 B responses and more fill the 4 KiB ring past request 0's response.
    for n in 1..6 {
        let out = run(
            &mut s,
            &st,
            &[c.request(&[KvOp::Get { key: b"big" }], n, n)],
        );
        assert_eq!(out.len(), 1);
    }
    let out = run(
        &mut s,
        &st,
        &[c.request(
            &[KvOp::Put {
                key: b"big",
                value: &big,
            }],
            0,
            0,
        )],
    );
    assert!(out.is_empty());
    assert_eq!(drops(&st, DropReason::ReplayMissing), 1);
    // The latest one is still there.
    let out = run(
        &mut s,
        &st,
        &[c.request(&[KvOp::Get { key: b"big" }], 5, 5)],
    );
    assert_eq!(out.len(), 1);
    assert_eq!(st.replays.get(), 1);
}

#[test]
fn multi_frame_response_replayed_whole() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let big = vec![0x5a; 900];
    let keys: [&[u8]; 3] = [b"k0", b"k1", b"k2"];
    let puts: Vec<_> = keys
        .iter()
        .map(|k| KvOp::Put {
            key: k,
            value: &big,
        })
        .collect();
    run(&mut s, &st, &[c.request(&puts, 0, 0)]);
    let gets: Vec<_> = keys.iter().map(|k| KvOp::Get { key: k }).collect();
    let first = run(&mut s, &st, &[c.request(&gets, 1, 1)]);
    assert_eq!(first.len(), 3);
    let again = run(&mut s, &st, &[c.request(&gets, 1, 1)]);
    assert_eq!(again, first);
    assert_eq!((st.replays.get(), st.replayed_frames.get()), (1, 3));
    // A response that could not be sent (no tx frame) is replayed all the same.
    let f = c.request(&gets, 2, 2);
    let mut tx = VecSink::with_budget(1);
    s.handle_burst(&[&f], &st, &mut tx);
    assert_eq!(tx.sent.len(), 1);
    assert_eq!(drops(&st, DropReason::NoMbuf), 2);
    let again = run(&mut s, &st, &[f]);
    assert_eq!(again.len(), 3);
    assert_eq!(again[0], tx.sent[0]);
}

#[test]
fn psns_and_slots_wrap_at_2_pow_24() {
    // A seed whose first request PSN is a few before the wrap.
    let seed = (0u64..)
        .find(|&x| first_psns(x, QPN).0 >= (1 << 24) - 3)
        .unwrap();
    let mut s = server_with(Transport {
        seed,
        ..Transport::default()
    });
    let c = connect(&mut s, QPN, RKEY);
    assert!(c.accept.request_psn >= (1 << 24) - 3);
    let st = WorkerStats::default();
    let frames: Vec<_> = (0..8)
        .map(|n| c.request(&[KvOp::Get { key: b"x" }], n, n))
        .collect();
    assert!(c.psn(7) < 8, "wrapped");
    let out = run(&mut s, &st, &frames);
    assert_eq!(out.len(), 8);
    assert_eq!(c.va(4), common::slot(c.psn(4)));
    // A duplicate from before the wrap is replayed after it.
    let again = run(&mut s, &st, &[frames[1].clone()]);
    assert_eq!(again, vec![out[1].clone()]);
    assert_eq!(total_drops(&st), 0);
}

#[test]
fn backlogged_tx_gets_one_rnr_nak_then_serves() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let zero = 0u64.to_le_bytes();
    let put = [KvOp::Put {
        key: b"ctr",
        value: &zero,
    }];
    let frames = [c.request(&put, 0, 0), c.request(&[fetch_add()], 1, 1)];
    let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let mut tx = VecSink {
        backlogged: true,
        ..VecSink::default()
    };
    s.handle_burst(&views, &st, &mut tx);
    s.handle_burst(&views, &st, &mut tx);
    assert_eq!(tx.sent.len(), 1, "one RNR NAK");
    let a = ack_of(&tx.sent[0]);
    assert_eq!(a.syndrome, Syndrome::RnrNak { timer: RNR_TIMER });
    assert_eq!(a.psn, c.psn(0));
    assert_eq!(st.rnr_naks_sent.get(), 1);
    assert_eq!(drops(&st, DropReason::Overloaded), 2);
    assert_eq!(drops(&st, DropReason::PsnAhead), 2);
    assert_eq!(st.ops(), 0, "nothing executed");
    // The backlog clears: the client's retry is served.
    let out = run(&mut s, &st, &frames);
    assert_eq!(out.len(), 2);
    assert_eq!(results(&out[1]), vec![(Status::Ok, zero.to_vec())]);
}

#[test]
fn request_outside_its_slot_is_bad_va() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let get = [KvOp::Get { key: b"x" }];
    let frames = [
        request(&get, 1, QPN, RKEY, c.va(1), c.psn(0)), // the next PSN's slot
        request(&get, 1, QPN, RKEY, c.va(0) + 64, c.psn(0)), // inside, not at the start
        // Past the last slot.
        request(
            &get,
            1,
            QPN,
            RKEY,
            c.va(0) + u64::from(c.accept.slot_size) * 32,
            c.psn(0),
        ),
    ];
    let out = run(&mut s, &st, &frames);
    assert!(out.is_empty(), "no answer");
    assert_eq!(drops(&st, DropReason::BadVa), 3);
    let out = run(&mut s, &st, &[c.request(&get, 2, 0)]);
    assert_eq!(out.len(), 1, "the expected PSN is still e");
}

#[test]
fn transport_settings_checked_and_sizes() {
    let bad = |credits| {
        Server::with_transport(
            identity(),
            &[],
            common::engine(1 << 20),
            true,
            FunctionRegistry::new(),
            Transport {
                credits,
                ..Transport::default()
            },
        )
        .err()
    };
    assert!(bad(0).is_some() && bad(3).is_some() && bad(2048).is_some());
    // 1 MiB / 1024 = 1 KiB slots: too small for a 1440 B request.
    assert!(bad(MAX_CREDITS).unwrap().contains("slot"));
    assert!(bad(512).is_none());
    assert_eq!(qp_state_bytes(32), 88 + 32 * 24);
    // kvconf's copies of kvwire's limits agree with it.
    assert_eq!(
        kvconf::REQUEST_PAYLOAD_CAPACITY,
        kvwire::request_payload_capacity(DEFAULT_MTU) as u64
    );
    assert_eq!(kvconf::MAX_CREDITS, MAX_CREDITS);
    assert_eq!(kvconf::FIRST_OPENED_QPN, kvwire::transport::OPENED_QPN_BASE);
    for (len, w) in [(1u64 << 20, 32u16), (100_000, 8), (5000, 1024), (1, 1)] {
        assert_eq!(kvconf::slot_size(len, w), slot_size(len, w));
    }
    // A fresh connection with a reconnect to the same nonce: no new incarnation.
    let mut s = server();
    let a = connect_nonce(&mut s, QPN, RKEY, 5);
    let b = connect_nonce(&mut s, QPN, RKEY, 5);
    assert_eq!(a.accept, b.accept);
}

#[test]
fn a_window_of_duplicates_is_replayed_and_never_executed() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let zero = 0u64.to_le_bytes();
    run(
        &mut s,
        &st,
        &[c.request(
            &[KvOp::Put {
                key: b"ctr",
                value: &zero,
            }],
            0,
            0,
        )],
    );
    // W fetch-adds (PSNs 1..=W), every response lost: the client resends all of them.
    let w = u32::from(W);
    let reqs: Vec<_> = (1..=w).map(|n| c.request(&[fetch_add()], n, n)).collect();
    let mut first = Vec::new();
    for chunk in reqs.chunks(16) {
        first.extend(run(&mut s, &st, chunk));
    }
    assert_eq!(first.len(), w as usize);
    let mut again = Vec::new();
    for chunk in reqs.chunks(16) {
        again.extend(run(&mut s, &st, chunk));
    }
    assert_eq!(
        again, first,
        "every duplicate answered with its original bytes"
    );
    assert_eq!(st.replays.get(), u64::from(w));
    assert_eq!(
        st.atomics.get(),
        u64::from(w),
        "each fetch-add executed once"
    );
    assert_eq!(counter(&mut s, &c, w + 1), u64::from(w));
}

/// A request whose batch header is malformed takes its PSN and is answered with one
/// MALFORMED result (its batch id from bytes 4–7), so the client's credit returns;
/// its resend is replayed byte for byte, not executed and not `replay_missing`.
#[test]
fn a_malformed_batch_is_answered_and_its_resend_replayed() {
    let mut s = server();
    let st = WorkerStats::default();
    let c = connect(&mut s, QPN, RKEY);
    let mut bad = vec![0x4C, 1, 0, 1, 0, 0, 0x12, 0x34];
    bad.extend_from_slice(&[1, 1, b'k']);
    let req = c.raw_request(&bad, 0);
    let out = run(&mut s, &st, std::slice::from_ref(&req));
    assert_eq!(out.len(), 1);
    let (id, r) = results_with_id(&out[0]);
    assert_eq!((id, r), (0x1234, vec![(Status::Malformed, vec![])]));
    assert_eq!((st.bad_batches.get(), st.requests.get()), (1, 1));
    let again = run(&mut s, &st, std::slice::from_ref(&req));
    assert_eq!(again, out, "replayed, byte for byte");
    assert_eq!(st.drops[DropReason::ReplayMissing.index()].get(), 0);
    // Too short for a batch id: batch id 0. The connection goes on.
    let out = run(&mut s, &st, &[c.raw_request(&[0x4B, 1], 1)]);
    assert_eq!(results_with_id(&out[0]).0, 0);
    let out = run(&mut s, &st, &[c.request(&[KvOp::Get { key: b"k" }], 7, 2)]);
    assert_eq!(results(&out[0]), vec![(Status::NotFound, vec![])]);
}

/// The batch id and results of a response frame.
fn results_with_id(frame: &[u8]) -> (u32, Vec<(Status, Vec<u8>)>) {
    let r = parse_response(frame).expect("a response");
    let id = ResponseReader::new(r.payload).unwrap().batch_id();
    (id, results(frame))
}
