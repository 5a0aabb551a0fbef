//! Tenants (docs/PROTOCOL.md §6.8): the OPEN credential (proof, freshness, sender,
//! throttle), the namespace and ACL guard on every op and transaction, the quotas,
//! and revocation; then isolation as a property over random tenants, keys and ops
//! through the real client, which adds the namespace itself.

mod common;

use common::{request_params, results, run, Client, ServerIo, CLIENT_IP, CLIENT_MAC};
use dataplane::server::{Server, TenantRule, Transport, FAILED_OPENS_PER_S};
use dataplane::stats::WorkerStats;
use kvclient::sim::Faults;
use kvclient::{ClientConfig, Credentials};
use kvops::FunctionRegistry;
use kvwire::tenant::{self, namespace, prefixed, READ, TXN, WRITE};
use kvwire::transport::{
    emit_join, parse_server_frame, signed_open, Connect, Join, ServerFrame, CM_QPN,
    MAX_JOIN_FRAME_LEN,
};
use kvwire::{DropReason, KvOp, Status};
use proptest::prelude::*;
use std::collections::HashMap;
use std::time::{SystemTime, UNIX_EPOCH};

const SECRET_A: &[u8] = b"tenant-a-secret-0123456789";
const SECRET_B: &[u8] = b"tenant-b-secret-0123456789";

fn rule(id: u32, secret: &[u8], acl: u8) -> TenantRule {
    TenantRule {
        id,
        name: format!("t{id}"),
        secret: secret.to_vec(),
        acl,
        max_connections: 0,
        requests_per_s: 0,
        max_credits: 0,
        reserved_connections: 0,
    }
}

fn server(rules: Vec<TenantRule>, anonymous: bool) -> Server {
    let mut s = Server::with_transport(
        common::identity(),
        &[(17, common::RKEY)],
        common::engine(16 << 20),
        true,
        FunctionRegistry::new(),
        Transport::default(),
    )
    .expect("transport");
    s.set_tenants(rules, anonymous, &WorkerStats::default());
    s
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// An OPEN frame for `join` with `nonce`.
fn open_frame(nonce: u64, join: Join) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
    let c = Connect { rkey: 0, nonce };
    let n = emit_join(&mut buf, &request_params(), CM_QPN, &c, &join).unwrap();
    buf.truncate(n);
    buf
}

/// A tenant OPEN proved with `secret` at time `ms` for this test's client address.
fn tenant_open(nonce: u64, id: u32, secret: &[u8], ms: u64) -> Vec<u8> {
    open_frame(
        nonce,
        signed_open(0, nonce, id, ms, secret, &CLIENT_MAC, CLIENT_IP),
    )
}

/// Sends `frame`; the opened client if an ACCEPT came.
fn try_open(s: &mut Server, st: &WorkerStats, frame: Vec<u8>) -> Option<Client> {
    let out = run(s, st, &[frame]);
    let f = out.first()?;
    let Ok(ServerFrame::Accept(a)) = parse_server_frame(f) else {
        panic!("not an ACCEPT");
    };
    let o = a.accept.opened.expect("opened");
    Some(Client {
        qpn: o.qpn,
        rkey: o.rkey,
        accept: a.accept,
    })
}

fn drops(st: &WorkerStats, r: DropReason) -> u64 {
    st.drops[r.index()].get()
}

fn one(s: &mut Server, st: &WorkerStats, c: &Client, n: u32, op: KvOp<'_>) -> Status {
    let out = run(s, st, &[c.request(&[op], n, n)]);
    results(&out[0])[0].0
}

#[test]
fn a_proved_open_gets_a_qp_and_every_forgery_is_refused() {
    let mut s = server(vec![rule(7, SECRET_A, tenant::ALL)], true);
    let st = WorkerStats::default();
    let now = now_ms();
    assert!(try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).is_some());
    let forged = [
        tenant_open(2, 7, SECRET_B, now),          // another secret
        tenant_open(3, 8, SECRET_A, now),          // an unknown tenant
        tenant_open(4, 7, SECRET_A, now - 61_000), // stale
        tenant_open(5, 7, SECRET_A, now + 61_000), // from the future
        open_frame(
            6,
            signed_open(0, 6, 7, now, SECRET_A, &[2, 0, 0, 0, 0, 99], CLIENT_IP),
        ),
        // A proof for one nonce on another OPEN.
        {
            let mut f = tenant_open(7, 7, SECRET_A, now);
            let g = tenant_open(8, 7, SECRET_A, now);
            let at = f.len() - 4 - 32;
            f[at..at + 32].copy_from_slice(&g[at..at + 32]);
            f
        },
    ];
    for (k, f) in forged.into_iter().enumerate() {
        let f = if k == 5 {
            // The spliced frame needs its ICRC again to reach the credential check.
            let mut f = f;
            kvwire::frame::finalize(&mut f).unwrap();
            f
        } else {
            f
        };
        assert!(
            try_open(&mut s, &st, f).is_none(),
            "forgery {k} opened a QP"
        );
    }
    assert_eq!(drops(&st, DropReason::BadCredential), 6);
    assert_eq!((st.opens.get(), s.opened_qps()), (1, 1));
}

#[test]
fn failed_opens_are_throttled_per_source() {
    let mut s = server(vec![rule(7, SECRET_A, tenant::ALL)], true);
    let st = WorkerStats::default();
    let now = now_ms();
    let guesses = u64::from(FAILED_OPENS_PER_S) + 50;
    for n in 0..guesses {
        let secret = format!("guess-{n}");
        assert!(try_open(&mut s, &st, tenant_open(n, 7, secret.as_bytes(), now)).is_none());
    }
    let checked = drops(&st, DropReason::BadCredential);
    let throttled = drops(&st, DropReason::AuthThrottled);
    assert_eq!(checked + throttled, guesses);
    // At most one second's allowance checked per second (the run may straddle one
    // second boundary).
    assert!(
        checked <= 2 * u64::from(FAILED_OPENS_PER_S),
        "{checked} checked"
    );
    assert!(
        throttled >= 50 - u64::from(FAILED_OPENS_PER_S),
        "{throttled}"
    );
}

#[test]
fn namespaces_and_acls_guard_every_op() {
    let mut s = server(
        vec![rule(7, SECRET_A, tenant::ALL), rule(9, SECRET_B, READ)],
        true,
    );
    let st = WorkerStats::default();
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    let b = try_open(&mut s, &st, tenant_open(2, 9, SECRET_B, now)).unwrap();
    let anon = try_open(
        &mut s,
        &st,
        open_frame(
            3,
            Join::Open {
                partition: 0,
                tenant: None,
            },
        ),
    )
    .unwrap();
    let ka = prefixed(7, b"k");
    let kb = prefixed(9, b"k");
    assert_eq!(
        one(
            &mut s,
            &st,
            &a,
            0,
            KvOp::Put {
                key: &ka,
                value: b"a"
            }
        ),
        Status::Ok
    );
    // Outside its namespace: another tenant's key, a plain key, the bare prefix.
    assert_eq!(
        one(&mut s, &st, &a, 1, KvOp::Get { key: &kb }),
        Status::Denied
    );
    assert_eq!(
        one(&mut s, &st, &a, 2, KvOp::Get { key: b"k" }),
        Status::Denied
    );
    assert_eq!(
        one(&mut s, &st, &a, 3, KvOp::Get { key: &namespace(7) }),
        Status::Denied
    );
    // A read-only tenant reads its own keys and writes nothing.
    assert_eq!(
        one(&mut s, &st, &b, 0, KvOp::Get { key: &kb }),
        Status::NotFound
    );
    assert_eq!(
        one(
            &mut s,
            &st,
            &b,
            1,
            KvOp::Put {
                key: &kb,
                value: b"b"
            }
        ),
        Status::Denied
    );
    assert_eq!(
        one(&mut s, &st, &b, 2, KvOp::Delete { key: &kb }),
        Status::Denied
    );
    // A client without a tenant reaches no tenant's key, but its own.
    assert_eq!(
        one(&mut s, &st, &anon, 0, KvOp::Get { key: &ka }),
        Status::Denied
    );
    assert_eq!(
        one(
            &mut s,
            &st,
            &anon,
            1,
            KvOp::Put {
                key: b"k",
                value: b"x"
            }
        ),
        Status::Ok
    );
    // A static QP (the operator's) is not guarded.
    let stat = common::connect(&mut s, 17, common::RKEY);
    assert_eq!(
        one(&mut s, &st, &stat, 0, KvOp::Get { key: &ka }),
        Status::Ok
    );
    assert_eq!(st.denied.get(), 6);
    // A batch mixing allowed and refused ops: each answered on its own.
    let out = run(
        &mut s,
        &st,
        &[a.request(
            &[
                KvOp::Get { key: &ka },
                KvOp::Get { key: &kb },
                KvOp::Delete { key: &ka },
            ],
            4,
            4,
        )],
    );
    let r: Vec<Status> = results(&out[0]).into_iter().map(|(st, _)| st).collect();
    assert_eq!(r, vec![Status::Ok, Status::Denied, Status::Ok]);
}

#[test]
fn transactions_need_the_txn_category_and_their_keys_in_the_namespace() {
    use kvwire::payload::{write_tx, AbortReason, TxAbort};
    let mut s = server(
        vec![
            rule(7, SECRET_A, tenant::ALL),
            rule(9, SECRET_B, READ | WRITE),
        ],
        true,
    );
    let st = WorkerStats::default();
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    let b = try_open(&mut s, &st, tenant_open(2, 9, SECRET_B, now)).unwrap();
    let tx = |key: &[u8], id: u32| {
        let mut buf = vec![0u8; 512];
        let n = write_tx(&mut buf, id, &[], &[KvOp::Put { key, value: b"v" }]).unwrap();
        buf.truncate(n);
        buf
    };
    let ka = prefixed(7, b"t");
    let kb = prefixed(9, b"t");
    let outcome = |s: &mut Server, c: &Client, payload: Vec<u8>, n: u32| {
        let out = run(s, &st, &[c.raw_request(&payload, n)]);
        results(&out[0])[0].clone()
    };
    assert_eq!(outcome(&mut s, &a, tx(&ka, 1), 0).0, Status::Ok);
    let (status, v) = outcome(&mut s, &a, tx(&kb, 2), 1);
    let abort = TxAbort::decode(&v).unwrap();
    assert_eq!(
        (status, abort.reason, abort.op, abort.status),
        (Status::Aborted, AbortReason::OpFailed, 0, Status::Denied)
    );
    let (_, v) = outcome(&mut s, &b, tx(&kb, 3), 0);
    let abort = TxAbort::decode(&v).unwrap();
    assert_eq!(
        (abort.op, abort.status),
        (255, Status::Denied),
        "no txn category"
    );
    assert_eq!(TXN & (READ | WRITE), 0);
}

/// A transaction refused DENIED carries its own op count of ABORTED results, never
/// the results of the last transaction that committed on the worker (issue 46: tenant
/// B's one-op `[GET FE]` was answered with tenant A's two secret values).
#[test]
fn a_refused_transaction_answers_its_own_results_and_no_value() {
    use kvwire::payload::{write_tx, TxAbort};
    let mut s = server(
        vec![
            rule(7, SECRET_A, tenant::ALL),
            rule(9, SECRET_B, tenant::ALL),
            rule(11, SECRET_B, READ | WRITE),
        ],
        true,
    );
    let st = WorkerStats::default();
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    let b = try_open(&mut s, &st, tenant_open(2, 9, SECRET_B, now)).unwrap();
    let ro = try_open(&mut s, &st, tenant_open(3, 11, SECRET_B, now)).unwrap();
    let anon = try_open(
        &mut s,
        &st,
        open_frame(
            4,
            Join::Open {
                partition: 0,
                tenant: None,
            },
        ),
    )
    .unwrap();
    let (card, pin) = (prefixed(7, b"card"), prefixed(7, b"pin"));
    let tx = |ops: &[KvOp<'_>], id: u32| {
        let mut buf = vec![0u8; 512];
        let n = write_tx(&mut buf, id, &[], ops).unwrap();
        buf.truncate(n);
        buf
    };
    let put = tx(
        &[
            KvOp::Put {
                key: &card,
                value: b"A-SECRET-4111",
            },
            KvOp::Put {
                key: &pin,
                value: b"A-PIN-0000",
            },
        ],
        1,
    );
    let out = run(&mut s, &st, &[a.raw_request(&put, 0)]);
    assert_eq!(results(&out[0])[0].0, Status::Ok);
    let read = tx(&[KvOp::Get { key: &card }, KvOp::Get { key: &pin }], 2);
    let out = run(&mut s, &st, &[a.raw_request(&read, 1)]);
    assert_eq!(results(&out[0]).len(), 3, "A reads its own");
    // Refused for a key outside the namespace, for a missing `txn`, for an anonymous
    // key in the tenant range: each one op, each answered with 2 results, no value.
    let fe = [0xFEu8];
    let cases = [(&b, 0u32, &fe[..]), (&ro, 0, b"k"), (&anon, 0, &fe[..])];
    for (k, (c, n, key)) in cases.into_iter().enumerate() {
        let out = run(
            &mut s,
            &st,
            &[c.raw_request(&tx(&[KvOp::Get { key }], 9), n)],
        );
        let r = results(&out[0]);
        assert_eq!(r.len(), 2, "case {k}: op count + 1 results, got {r:?}");
        let abort = TxAbort::decode(&r[0].1).unwrap();
        assert_eq!((r[0].0, abort.status), (Status::Aborted, Status::Denied));
        assert_eq!(r[1], (Status::Aborted, Vec::new()), "case {k}");
        for (_, v) in &r {
            for secret in [&b"A-SECRET"[..], b"A-PIN"] {
                assert!(
                    !v.windows(secret.len()).any(|w| w == secret),
                    "case {k} leaked"
                );
            }
        }
    }
}

/// ACLs mean what they say: a tenant without `read` learns an op's outcome, never a
/// stored value — COMPARE_DELETE answers the expected value or nothing, CAS `p1` or
/// `!p1`, every other update nothing — alone and inside a transaction.
#[test]
fn a_tenant_without_read_gets_outcomes_not_values() {
    use kvwire::payload::write_tx;
    use kvwire::{func, Atomic, Width};
    let mut s = server(
        vec![
            rule(7, SECRET_A, tenant::ALL),
            rule(9, SECRET_B, WRITE | tenant::ATOMIC | TXN),
        ],
        true,
    );
    let st = WorkerStats::default();
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    let w = try_open(&mut s, &st, tenant_open(2, 9, SECRET_B, now)).unwrap();
    let k = prefixed(9, b"k");
    let n = prefixed(9, b"n");
    let put = |s: &mut Server, c: &Client, i: u32, key: &[u8], value: &[u8]| {
        assert_eq!(one(s, &st, c, i, KvOp::Put { key, value }), Status::Ok);
    };
    put(&mut s, &w, 0, &k, b"hidden-value");
    put(&mut s, &w, 1, &n, &41u64.to_le_bytes());
    let got = |s: &mut Server, c: &Client, i: u32, op: KvOp<'_>| {
        let out = run(s, &st, &[c.request(&[op], i, i)]);
        results(&out[0]).remove(0)
    };
    let cad = |e: &'static [u8]| KvOp::CompareDelete {
        key: &k,
        expected: e,
    };
    assert_eq!(got(&mut s, &w, 2, cad(b"guess")), (Status::Ok, Vec::new()));
    assert_eq!(got(&mut s, &w, 3, cad(b"")), (Status::Ok, vec![0]));
    let add = KvOp::UpdateS2S {
        key: &n,
        atomic: Atomic {
            func: func::FETCH_ADD,
            width: Width::W8,
            signed: false,
        },
        param: 1,
        param2: 0,
    };
    assert_eq!(got(&mut s, &w, 4, add), (Status::Ok, Vec::new()));
    let cas = |p1: u64| KvOp::UpdateS2S {
        key: &n,
        atomic: Atomic {
            func: func::CAS,
            width: Width::W8,
            signed: false,
        },
        param: p1,
        param2: 100,
    };
    assert_eq!(
        got(&mut s, &w, 5, cas(3)),
        (Status::Ok, (!3u64).to_le_bytes().to_vec())
    );
    assert_eq!(
        got(&mut s, &w, 6, cas(42)),
        (Status::Ok, 42u64.to_le_bytes().to_vec())
    );
    assert_eq!(
        got(&mut s, &w, 7, cad(b"hidden-value")).1,
        b"hidden-value".to_vec()
    );
    // Inside a transaction: the same.
    put(&mut s, &w, 8, &k, b"hidden-again");
    let mut buf = vec![0u8; 256];
    let len = write_tx(&mut buf, 9, &[], &[cad(b"nope"), add]).unwrap();
    let out = run(&mut s, &st, &[w.raw_request(&buf[..len], 9)]);
    let r = results(&out[0]);
    assert_eq!(r[0].0, Status::Ok);
    assert_eq!(r[1], (Status::Ok, Vec::new()));
    assert_eq!(r[2], (Status::Ok, Vec::new()));
    // A tenant with `read` still gets the values of its own keys.
    let ka = prefixed(7, b"k");
    put(&mut s, &a, 0, &ka, b"visible");
    let cad_a = KvOp::CompareDelete {
        key: &ka,
        expected: b"other",
    };
    assert_eq!(got(&mut s, &a, 1, cad_a), (Status::Ok, b"visible".to_vec()));
}

#[test]
fn quotas_limit_connections_and_requests() {
    let mut r = rule(7, SECRET_A, tenant::ALL);
    r.max_connections = 2;
    r.requests_per_s = 5;
    let mut s = server(vec![r], true);
    let st = WorkerStats::default();
    s.maintain(0, &st); // as the worker does at start: the tenant slots follow the rules
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    assert!(try_open(&mut s, &st, tenant_open(2, 7, SECRET_A, now)).is_some());
    assert!(
        try_open(&mut s, &st, tenant_open(3, 7, SECRET_A, now)).is_none(),
        "3rd QP"
    );
    let k = prefixed(7, b"q");
    // A burst of 20 requests in one burst: the bucket holds 5.
    let frames: Vec<Vec<u8>> = (0..20)
        .map(|n| a.request(&[KvOp::Get { key: &k }], n, n))
        .collect();
    let out = run(&mut s, &st, &frames);
    let served = out
        .iter()
        .filter(|f| kvwire::parse_response(f).is_ok())
        .count();
    assert_eq!(served, 5);
    assert!(drops(&st, DropReason::OverQuota) >= 1);
    assert_eq!(st.rnr_naks_sent.get(), 1, "one RNR NAK for the refused run");
    // The tenant's own series: 2 opens, 1 refused, 5 requests, the rest over quota.
    let t = &st.tenants.0[0];
    assert_eq!(t.id.load(std::sync::atomic::Ordering::Relaxed), 7);
    assert_eq!(
        (t.opens.get(), t.bad_credentials.get(), t.requests.get()),
        (2, 1, 5)
    );
    assert_eq!(t.over_quota.get(), drops(&st, DropReason::OverQuota));
    let frame = a.request(&[KvOp::Get { key: &k }], 0, 0);
    let get_bytes = kvwire::parse_request(&frame).unwrap().payload.len() as u64;
    assert_eq!(t.request_bytes.get(), 5 * get_bytes);
    // The live QPs, published at the worker's control tick.
    s.maintain(1, &st);
    assert_eq!(t.connections.get(), 2);
}

/// A tenant's `max_credits` is the window its QPs are granted: its requests are served
/// at the slots of that window; one addressed as for the server's larger window (a
/// client ignoring its ACCEPT) is dropped `bad_va`, one a window ahead or more is not
/// its connection's (dropped, unanswered).
#[test]
fn a_tenants_credits_quota_is_its_window() {
    let mut r = rule(7, SECRET_A, tenant::ALL);
    r.max_credits = 4;
    let mut s = server(vec![r, rule(8, SECRET_B, tenant::ALL)], true);
    let st = WorkerStats::default();
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    let b = try_open(&mut s, &st, tenant_open(2, 8, SECRET_B, now)).unwrap();
    let anonymous = Join::Open {
        partition: 0,
        tenant: None,
    };
    let anon = try_open(&mut s, &st, open_frame(3, anonymous)).unwrap();
    assert_eq!(a.accept.credits, 4);
    assert_eq!(
        (b.accept.credits, anon.accept.credits),
        (common::W, common::W)
    );
    let k = prefixed(7, b"w");
    let get = [KvOp::Get { key: &k }];
    let served = |out: &[Vec<u8>]| {
        out.iter()
            .filter(|f| kvwire::parse_response(f).is_ok())
            .count()
    };
    let frames: Vec<Vec<u8>> = (0..4).map(|n| a.request(&get, n, n)).collect();
    assert_eq!(
        served(&run(&mut s, &st, &frames)),
        4,
        "a window of requests"
    );
    // Request 4 at the slot the server's window would give it.
    let mut wide = a;
    wide.accept.credits = common::W;
    let n = (4..4 + u32::from(common::W))
        .find(|&n| wide.va(n) != a.va(n))
        .unwrap();
    let bad_va = drops(&st, DropReason::BadVa);
    assert!(run(&mut s, &st, &[wide.request(&get, n, n)]).is_empty());
    assert_eq!(drops(&st, DropReason::BadVa), bad_va + 1);
    // A request a whole window ahead of the next expected one (PSN + 4).
    assert!(run(&mut s, &st, &[a.request(&get, 8, 8)]).is_empty());
    // The next expected request at its own slot is served.
    assert_eq!(served(&run(&mut s, &st, &[a.request(&get, 4, 4)])), 1);
}

#[test]
fn rotating_or_removing_a_tenant_closes_its_live_connections() {
    let mut s = server(
        vec![
            rule(7, SECRET_A, tenant::ALL),
            rule(9, SECRET_B, tenant::ALL),
        ],
        true,
    );
    let st = WorkerStats::default();
    let now = now_ms();
    let a = try_open(&mut s, &st, tenant_open(1, 7, SECRET_A, now)).unwrap();
    let b = try_open(&mut s, &st, tenant_open(2, 9, SECRET_B, now)).unwrap();
    // Tenant 7's secret rotates: its QP goes at once; tenant 9's stays.
    s.set_tenants(
        vec![
            rule(7, SECRET_B, tenant::ALL),
            rule(9, SECRET_B, tenant::ALL),
        ],
        true,
        &st,
    );
    let out = run(
        &mut s,
        &st,
        &[a.request(
            &[KvOp::Get {
                key: &prefixed(7, b"k"),
            }],
            0,
            0,
        )],
    );
    assert!(
        kvwire::parse_response(&out[0]).is_err(),
        "a NAK, not a response"
    );
    assert_eq!(
        one(
            &mut s,
            &st,
            &b,
            0,
            KvOp::Get {
                key: &prefixed(9, b"k")
            }
        ),
        Status::NotFound
    );
    // The old secret opens nothing; the new one does.
    assert!(try_open(&mut s, &st, tenant_open(3, 7, SECRET_A, now)).is_none());
    assert!(try_open(&mut s, &st, tenant_open(4, 7, SECRET_B, now)).is_some());
    // Removing tenant 9 closes its QP; anonymous OPENs can be refused too.
    s.set_tenants(vec![rule(7, SECRET_B, tenant::ALL)], false, &st);
    let out = run(
        &mut s,
        &st,
        &[b.request(
            &[KvOp::Get {
                key: &prefixed(9, b"k"),
            }],
            1,
            1,
        )],
    );
    assert!(kvwire::parse_response(&out[0]).is_err());
    assert!(try_open(
        &mut s,
        &st,
        open_frame(
            5,
            Join::Open {
                partition: 0,
                tenant: None
            }
        )
    )
    .is_none());
    assert_eq!(st.reclaims.get(), 2);
}

fn client_config() -> ClientConfig {
    ClientConfig {
        transport: common::model_transport_config(),
        partitions: 1,
        ..ClientConfig::default()
    }
}

/// One step of the isolation property: a client of `tenant` (0: none) runs `op` on
/// application key `key`.
#[derive(Clone, Debug)]
struct Step {
    tenant: u32,
    key: u8,
    op: u8,
    value: u8,
}

fn step() -> impl Strategy<Value = Step> {
    (0u32..4, 0u8..6, 0u8..3, any::<u8>()).prop_map(|(tenant, key, op, value)| Step {
        tenant,
        key,
        op,
        value,
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Isolation: tenants 1–3 and a client without a tenant use the same application
    /// keys through the real client; each sees exactly its own writes, as a HashMap
    /// per tenant says — never another's.
    #[test]
    fn tenants_never_see_each_others_keys(steps in proptest::collection::vec(step(), 1..40), seed in 0u64..1000) {
        let mut io = ServerIo::new(seed, Faults::NONE, &[]);
        let secrets: Vec<Vec<u8>> = (0..4).map(|t| format!("secret-of-tenant-{t}-xxxxxxx").into_bytes()).collect();
        let rules = (1..4).map(|t| rule(t, &secrets[t as usize], tenant::ALL)).collect();
        io.server.set_tenants(rules, true, &WorkerStats::default());
        let clock = io.clock.clone();
        let mut model: HashMap<(u32, u8), Vec<u8>> = HashMap::new();
        for s in steps {
            let clock = clock.clone();
            let mut c = kvclient::Client::opened(&mut io, client_config(), request_params(), Box::new(move || clock.get()));
            if s.tenant != 0 {
                c.set_credentials(Some(Credentials { tenant: s.tenant, secret: secrets[s.tenant as usize].clone() }));
            }
            let key = [b'k', s.key];
            match s.op {
                0 => {
                    let got = c.get(&key).expect("get");
                    prop_assert_eq!(got.as_ref(), model.get(&(s.tenant, s.key)), "tenant {} key {}", s.tenant, s.key);
                }
                1 => {
                    c.put(&key, &[s.value]).expect("put");
                    model.insert((s.tenant, s.key), vec![s.value]);
                }
                _ => {
                    let had = c.delete(&key).expect("delete");
                    prop_assert_eq!(had, model.remove(&(s.tenant, s.key)).is_some());
                }
            }
        }
        let st = &io.stats;
        prop_assert_eq!(st.denied.get(), 0, "the client kept every key in its namespace");
        prop_assert_eq!(st.drops[DropReason::BadCredential.index()].get(), 0);
    }
}
