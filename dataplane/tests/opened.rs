//! Opened QPs (docs/PROTOCOL.md §6.1): the server allocates a QP per OPEN; nothing
//! but the holder of its secret can resume or close it, and no frame can take it
//! over. The hijack suite sends every forged, stale and replayed frame we could think
//! of and checks each is refused and counted while the owner's connection goes on;
//! the model tests run the real client over a lossy link with opened QPs.

mod common;

use common::{ack_of, request_params, results, run, Client, ServerIo};
use dataplane::packet::Identity;
use dataplane::server::{Server, Transport};
use dataplane::stats::WorkerStats;
use kvclient::check::ExactlyOnce;
use kvclient::sim::Faults;
use kvclient::{ClientConfig, Config, QpSpec};
use kvops::FunctionRegistry;
use kvwire::transport::{
    emit_join, parse_server_frame, Accept, Connect, Join, NakCode, ServerFrame, Syndrome, CM_QPN,
    MAX_JOIN_FRAME_LEN, OPENED_QPN_BASE,
};
use kvwire::{DropReason, KvOp, Status};

fn server_with(max_opened: usize, idle_close_s: u32) -> Server {
    let t = Transport {
        max_opened,
        idle_close_s,
        ..Transport::default()
    };
    let id: Identity = common::identity();
    Server::with_transport(
        id,
        &[],
        common::engine(16 << 20),
        true,
        FunctionRegistry::new(),
        t,
    )
    .expect("transport")
}

/// A connection frame to `qpn` with `rkey`, `nonce` and `join`.
fn join_frame(qpn: u32, rkey: u32, nonce: u64, join: Join) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
    let n = emit_join(
        &mut buf,
        &request_params(),
        qpn,
        &Connect { rkey, nonce },
        &join,
    )
    .expect("join");
    buf.truncate(n);
    buf
}

/// Opens a QP with `nonce`; the test client and its secret.
fn open(s: &mut Server, stats: &WorkerStats, nonce: u64) -> (Client, u64) {
    let out = run(
        s,
        stats,
        &[join_frame(
            CM_QPN,
            0,
            nonce,
            Join::Open {
                partition: 0,
                tenant: None,
            },
        )],
    );
    assert_eq!(out.len(), 1, "one ACCEPT");
    let a = accept(&out[0]);
    let o = a.opened.expect("an opened ACCEPT");
    assert_eq!(a.nonce, nonce);
    let c = Client {
        qpn: o.qpn,
        rkey: o.rkey,
        accept: a,
    };
    (c, o.secret)
}

fn accept(frame: &[u8]) -> Accept {
    match parse_server_frame(frame) {
        Ok(ServerFrame::Accept(a)) => {
            assert_eq!(a.dest_qp, a.accept.opened.map_or(a.dest_qp, |o| o.qpn));
            a.accept
        }
        other => panic!("not an ACCEPT: {other:?}"),
    }
}

fn put(c: &Client, n: u32, key: &[u8], value: &[u8]) -> Vec<u8> {
    c.request(&[KvOp::Put { key, value }], n, n)
}

/// The proof of `secret` a RESUME of `c`'s incarnation `nonce` at `next_psn` carries.
fn resume_proof(c: &Client, nonce: u64, next_psn: u32, secret: u64) -> u64 {
    let k = Connect {
        rkey: c.rkey,
        nonce,
    };
    k.resume_proof(next_psn, secret)
}

/// The proof of `secret` a CLOSE of `c`'s incarnation `nonce` carries.
fn close_proof(c: &Client, nonce: u64, secret: u64) -> u64 {
    Connect {
        rkey: c.rkey,
        nonce,
    }
    .close_proof(secret)
}

fn get(c: &Client, n: u32, key: &[u8]) -> Vec<u8> {
    c.request(&[KvOp::Get { key }], n, n)
}

fn drops(stats: &WorkerStats, r: DropReason) -> u64 {
    stats.drops[r.index()].get()
}

#[test]
fn every_open_gets_its_own_qp_and_a_lost_accept_gets_the_same_again() {
    let mut s = server_with(16, 0);
    let st = WorkerStats::default();
    let (a, sa) = open(&mut s, &st, 7);
    let (b, sb) = open(&mut s, &st, 8);
    assert!(a.qpn >= OPENED_QPN_BASE && b.qpn >= OPENED_QPN_BASE && a.qpn != b.qpn);
    assert!(sa != sb && a.rkey != b.rkey, "fresh keys and secrets");
    // The same OPEN again (its ACCEPT was lost): the same QP, the same ACCEPT.
    let (a2, sa2) = open(&mut s, &st, 7);
    assert_eq!((a2.qpn, a2.accept, sa2), (a.qpn, a.accept, sa));
    assert_eq!((st.opens.get(), st.connect_repeats.get()), (2, 1));
    assert_eq!(s.opened_qps(), 2);
    // Both serve requests, each its own.
    let out = run(&mut s, &st, &[put(&a, 0, b"k", b"a"), get(&b, 0, b"k")]);
    assert_eq!(out.len(), 2);
    assert_eq!(results(&out[1]), vec![(Status::Ok, b"a".to_vec())]);
}

/// Every forged connection frame for opened QP `a` (secret `secret`) of another
/// client `b` may send, with the drop reason it must be counted under.
fn forged_joins(a: &Client, b: &Client, secret: u64) -> Vec<(Vec<u8>, DropReason)> {
    vec![
        // A CONNECT on the QP, even with its R_Key: an opened QP has no CONNECT.
        (
            join_frame(a.qpn, a.rkey, 1 << 60, Join::Connect),
            DropReason::BadSecret,
        ),
        // A RESUME without the secret, and with a wrong one.
        (
            join_frame(
                a.qpn,
                a.rkey,
                100,
                Join::Resume {
                    next_psn: a.psn(0),
                    proof: None,
                },
            ),
            DropReason::BadSecret,
        ),
        (
            join_frame(
                a.qpn,
                a.rkey,
                100,
                Join::Resume {
                    next_psn: a.psn(0),
                    proof: Some(resume_proof(a, 100, a.psn(0), secret ^ 1)),
                },
            ),
            DropReason::BadSecret,
        ),
        // A CLOSE with another secret, and with the right secret but another R_Key.
        (
            join_frame(
                a.qpn,
                a.rkey,
                100,
                Join::Close {
                    proof: close_proof(a, 100, !secret),
                },
            ),
            DropReason::BadSecret,
        ),
        // The secret itself where its proof belongs (what an observer of an old
        // RESUME or CLOSE would have had): refused.
        (
            join_frame(a.qpn, a.rkey, 100, Join::Close { proof: secret }),
            DropReason::BadSecret,
        ),
        // A proof of the secret for another incarnation: refused.
        (
            join_frame(
                a.qpn,
                a.rkey,
                100,
                Join::Close {
                    proof: close_proof(a, 101, secret),
                },
            ),
            DropReason::BadSecret,
        ),
        (
            join_frame(
                a.qpn,
                b.rkey,
                100,
                Join::Close {
                    proof: close_proof(a, 100, secret),
                },
            ),
            DropReason::BadRKey,
        ),
        // An OPEN sent to a client QP instead of the connection manager.
        (
            join_frame(
                a.qpn,
                0,
                5,
                Join::Open {
                    partition: 0,
                    tenant: None,
                },
            ),
            DropReason::BadConnect,
        ),
        // An OPEN for a partition this worker does not serve.
        (
            join_frame(
                CM_QPN,
                0,
                5,
                Join::Open {
                    partition: 3,
                    tenant: None,
                },
            ),
            DropReason::NoFreeQp,
        ),
    ]
}

/// Every way of reaching another client's opened QP is refused and counted, and
/// the owner's connection goes on untouched.
#[test]
fn hijack_attempts_are_refused_and_counted() {
    let mut s = server_with(16, 0);
    let st = WorkerStats::default();
    let (a, secret) = open(&mut s, &st, 100);
    let (b, _) = open(&mut s, &st, 200);
    let attempts = forged_joins(&a, &b, secret);
    for (frame, why) in &attempts {
        let before = drops(&st, *why);
        let out = run(&mut s, &st, std::slice::from_ref(frame));
        assert!(out.is_empty(), "{why:?}: answered");
        assert_eq!(drops(&st, *why), before + 1, "{why:?}: not counted");
    }
    // The owner's connection is the same one: its first request is served at the
    // PSN its ACCEPT gave.
    let out = run(&mut s, &st, &[put(&a, 0, b"x", b"1")]);
    assert_eq!(results(&out[0]), vec![(Status::Ok, vec![])]);
    assert_eq!(st.connects.get(), 0, "no incarnation began");
    // The owner's RESUME (live connection: the same node) goes on at its next PSN.
    let out = run(
        &mut s,
        &st,
        &[join_frame(
            a.qpn,
            a.rkey,
            100,
            Join::Resume {
                next_psn: a.psn(1),
                proof: Some(resume_proof(&a, 100, a.psn(1), secret)),
            },
        )],
    );
    let acc = accept(&out[0]);
    assert!(acc.resumed && acc.request_psn == a.psn(1));
    // The owner's CLOSE frees the QP: a request on it is answered NAK invalid
    // request (not executed), and a replayed CLOSE finds nothing.
    let close = join_frame(
        a.qpn,
        a.rkey,
        100,
        Join::Close {
            proof: close_proof(&a, 100, secret),
        },
    );
    assert!(run(&mut s, &st, std::slice::from_ref(&close)).is_empty());
    assert_eq!((st.closes.get(), s.opened_qps()), (1, 1));
    let out = run(&mut s, &st, &[put(&a, 1, b"x", b"2")]);
    let nak = ack_of(&out[0]);
    assert_eq!((nak.dest_qp, nak.psn), (a.qpn, a.psn(1)));
    assert_eq!(nak.syndrome, Syndrome::Nak(NakCode::InvalidRequest));
    assert!(run(&mut s, &st, &[close]).is_empty());
    assert_eq!(st.closes.get(), 1);
    // The value was written once, by the owner's request before the CLOSE.
    let out = run(&mut s, &st, &[get(&b, 0, b"x")]);
    assert_eq!(results(&out[0]), vec![(Status::Ok, b"1".to_vec())]);
}

/// A request on an opened QP with another client's R_Key, or with its R_Key from
/// another source, is answered as a request to a closed QPN is: NAK invalid request,
/// nothing executed — no answer tells a live QPN from a closed one.
#[test]
fn refused_frames_to_opened_qpns_are_answered_alike() {
    let mut s = server_with(16, 0);
    let st = WorkerStats::default();
    let (a, _) = open(&mut s, &st, 100);
    let (b, _) = open(&mut s, &st, 200);
    let other_src = kvwire::frame::FrameParams::new(
        [2, 0, 0, 0, 0, 0x66],
        common::SERVER_MAC,
        common::CLIENT_IP,
        common::SERVER_IP,
        0xC000,
    );
    let wrong = [
        (
            common::request(
                &[KvOp::Get { key: b"k" }],
                0,
                a.qpn,
                b.rkey,
                a.va(0),
                a.psn(0),
            ),
            DropReason::BadRKey,
        ),
        (
            a.request_to(
                &other_src,
                &[KvOp::Put {
                    key: b"x",
                    value: b"evil",
                }],
                0,
                0,
            ),
            DropReason::WrongSource,
        ),
        (
            common::request(
                &[KvOp::Get { key: b"k" }],
                0,
                a.qpn + 64,
                a.rkey,
                a.va(0),
                a.psn(0),
            ),
            DropReason::UnknownQp,
        ),
    ];
    let mut naks = Vec::new();
    for (frame, why) in &wrong {
        let before = drops(&st, *why);
        let out = run(&mut s, &st, std::slice::from_ref(frame));
        assert_eq!(out.len(), 1, "{why:?}: one answer");
        let nak = ack_of(&out[0]);
        assert_eq!(
            nak.syndrome,
            Syndrome::Nak(NakCode::InvalidRequest),
            "{why:?}"
        );
        naks.push((nak.psn, nak.syndrome));
        assert_eq!(drops(&st, *why), before + 1, "{why:?}: not counted");
    }
    assert!(
        naks.windows(2).all(|w| w[0] == w[1]),
        "the answers differ: {naks:?}"
    );
    // Nothing ran: the key the wrong-source request would have written is absent.
    let out = run(&mut s, &st, &[get(&b, 0, b"x")]);
    assert_eq!(results(&out[0]), vec![(Status::NotFound, vec![])]);
}

/// A guessed secret is as good as a random 64-bit number: 10 000 guesses at one QP
/// all fail.
#[test]
fn guessing_the_secret_fails() {
    let mut s = server_with(4, 0);
    let st = WorkerStats::default();
    let (a, secret) = open(&mut s, &st, 1);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let frames: Vec<Vec<u8>> = (0..10_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let guess = if x == secret { x ^ 1 } else { x };
            join_frame(a.qpn, a.rkey, 1, Join::Close { proof: guess })
        })
        .collect();
    for chunk in frames.chunks(32) {
        assert!(run(&mut s, &st, chunk).is_empty());
    }
    assert_eq!(drops(&st, DropReason::BadSecret), 10_000);
    assert_eq!(s.opened_qps(), 1);
}

#[test]
fn a_full_worker_refuses_opens_and_idle_qps_are_reclaimed() {
    let mut s = server_with(2, 60);
    let st = WorkerStats::default();
    s.maintain(0, &st);
    let (a, _) = open(&mut s, &st, 1);
    let (b, _) = open(&mut s, &st, 2);
    let out = run(
        &mut s,
        &st,
        &[join_frame(
            CM_QPN,
            0,
            3,
            Join::Open {
                partition: 0,
                tenant: None,
            },
        )],
    );
    assert!(out.is_empty());
    assert_eq!(drops(&st, DropReason::NoFreeQp), 1);
    // b stays active, a idles past the limit: a is reclaimed, b is not.
    s.maintain(50, &st);
    run(&mut s, &st, &[get(&b, 0, b"k")]);
    for _ in 0..4 {
        s.maintain(100, &st);
    }
    assert_eq!((st.reclaims.get(), s.opened_qps()), (1, 1));
    let out = run(&mut s, &st, &[get(&a, 0, b"k")]);
    assert_eq!(
        ack_of(&out[0]).syndrome,
        Syndrome::Nak(NakCode::InvalidRequest)
    );
    // Its slot is free again.
    let (c, _) = open(&mut s, &st, 4);
    assert_ne!(c.rkey, a.rkey);
}

fn client_config() -> Config {
    common::model_transport_config()
}

/// The exactly-once check over opened QPs, with loss, duplication and reordering.
#[test]
fn exactly_once_over_opened_qps_under_faults() {
    for seed in 0..8 {
        let faults = Faults {
            drop: 0.05,
            duplicate: 0.05,
            reorder: 0.05,
            ..Faults::NONE
        };
        let mut io = ServerIo::new(seed, faults, &[]);
        let specs = vec![QpSpec::Opened { partition: 0 }; 3];
        let mut t = kvclient::Transport::with_qps(client_config(), &specs, request_params());
        t.connect_all(&mut io, 0);
        let mut check = ExactlyOnce::new(3, 30, seed);
        let clock = io.clock.clone();
        let mut steps = 0u64;
        while !check.step(&mut t, &mut io, clock.get()) {
            steps += 1;
            assert!(
                steps < 2_000_000,
                "seed {seed}: {}",
                check.report().summary()
            );
        }
        let r = check.report();
        assert_eq!(r.violations, 0, "seed {seed}: {}", r.summary());
        assert_eq!(r.final_add, Some(90), "seed {seed}");
        assert_eq!(
            io.server.opened_qps(),
            3,
            "seed {seed}: one QP per connection"
        );
    }
}

/// A client whose QP was reclaimed while it idled opens another on its next
/// operation and the operation succeeds (it was not executed on the old QP).
#[test]
fn a_client_reopens_after_its_qp_was_reclaimed() {
    let io = ServerIo::new(1, Faults::NONE, &[]);
    let clock = io.clock.clone();
    let cfg = ClientConfig {
        transport: client_config(),
        partitions: 1,
        ..ClientConfig::default()
    };
    let mut c = kvclient::Client::opened(io, cfg, request_params(), Box::new(move || clock.get()));
    c.put(b"k", b"v1").expect("put");
    let stats = WorkerStats::default();
    // The sweep looks at a few hundred slots per tick: a pass takes some ticks.
    for _ in 0..100 {
        c.io_mut().server.maintain(1_000, &stats);
    }
    assert_eq!(c.io_mut().server.opened_qps(), 0, "reclaimed");
    c.put(b"k", b"v2").expect("the put goes again on a new QP");
    assert_eq!(c.get(b"k").expect("get"), Some(b"v2".to_vec()));
    assert_eq!(c.io_mut().server.opened_qps(), 1);
    c.close();
    c.io_mut().serve();
    assert_eq!(c.io_mut().server.opened_qps(), 0, "closed");
}
