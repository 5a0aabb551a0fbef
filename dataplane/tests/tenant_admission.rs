//! Who may hold a QP and for how long (docs/PROTOCOL.md §6.1, §6.8, docs/SECURITY.md):
//! a repeated OPEN gets the live QP's ACCEPT only within the proof window and only for
//! what it proves itself; the OPEN throttle is keyed on the source MAC and IP and
//! counts malformed OPENs, not quota refusals; tenants' reserves keep QPs from
//! anonymous clients; anonymous keys never enter the tenant range; static QPs are bound
//! to their configured source; a removed tenant's namespace is purged.

mod common;

use common::{request_params, results, run, Client, CLIENT_IP, CLIENT_MAC};
use dataplane::server::{Origin, Server, TenantRule, Transport, FAILED_OPENS_PER_S};
use dataplane::stats::WorkerStats;
use kvops::FunctionRegistry;
use kvwire::frame::FrameParams;
use kvwire::tenant::{self, prefixed, PROOF_WINDOW_MS};
use kvwire::transport::{
    emit_join, parse_server_frame, signed_open, Connect, Join, ServerFrame, CM_QPN,
    MAX_JOIN_FRAME_LEN,
};
use kvwire::{DropReason, KvOp, Status};
use std::net::Ipv4Addr;
use std::time::{SystemTime, UNIX_EPOCH};

const SECRET_A: &[u8] = b"tenant-a-secret-0123456789";
const SECRET_B: &[u8] = b"tenant-b-secret-0123456789";
const OTHER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x77];

fn rule(id: u32, secret: &[u8]) -> TenantRule {
    TenantRule {
        id,
        name: format!("t{id}"),
        secret: secret.to_vec(),
        acl: tenant::ALL,
        max_connections: 0,
        requests_per_s: 0,
        max_credits: 0,
        reserved_connections: 0,
    }
}

fn server(max_opened: usize, rules: Vec<TenantRule>, anonymous: bool) -> Server {
    let t = Transport {
        max_opened,
        ..Transport::default()
    };
    let mut s = Server::with_transport(
        common::identity(),
        &[(17, common::RKEY)],
        common::engine(16 << 20),
        true,
        FunctionRegistry::new(),
        t,
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

fn params_from(mac: [u8; 6], ip: Ipv4Addr) -> FrameParams {
    FrameParams::new(mac, common::SERVER_MAC, ip, common::SERVER_IP, 0xC000)
}

/// An OPEN frame from `params` with `nonce` and `join`, sent to `qpn`.
fn join_to(params: &FrameParams, qpn: u32, nonce: u64, join: &Join) -> Vec<u8> {
    let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
    let n = emit_join(&mut buf, params, qpn, &Connect { rkey: 0, nonce }, join).unwrap();
    buf.truncate(n);
    buf
}

fn anonymous() -> Join {
    Join::Open {
        partition: 0,
        tenant: None,
    }
}

/// A tenant OPEN from the test client's address, proved with `secret` at `ms`.
fn tenant_open(nonce: u64, id: u32, secret: &[u8], ms: u64) -> Vec<u8> {
    let j = signed_open(0, nonce, id, ms, secret, &CLIENT_MAC, CLIENT_IP);
    join_to(&request_params(), CM_QPN, nonce, &j)
}

/// The opened QP (QPN, R_Key, secret) an ACCEPT in `out` names, if any.
fn accepted(out: &[Vec<u8>]) -> Option<(Client, u64)> {
    let Ok(ServerFrame::Accept(a)) = parse_server_frame(out.first()?) else {
        return None;
    };
    let o = a.accept.opened?;
    Some((
        Client {
            qpn: o.qpn,
            rkey: o.rkey,
            accept: a.accept,
        },
        o.secret,
    ))
}

fn drops(st: &WorkerStats, r: DropReason) -> u64 {
    st.drops[r.index()].get()
}

/// Issue 46, defect 2: an OPEN replayed after the proof window — the victim's QP still
/// open — never gets that QP's ACCEPT. Within the window a repeat (its ACCEPT was lost)
/// still does, but only for the tenant it proves.
#[test]
fn a_replayed_open_gets_the_live_qp_only_within_the_window() {
    let mut s = server(16, vec![rule(7, SECRET_A), rule(9, SECRET_B)], true);
    let st = WorkerStats::default();
    let t0 = now_ms();
    let open = tenant_open(1, 7, SECRET_A, t0);
    let (victim, secret) =
        accepted(&run(&mut s, &st, std::slice::from_ref(&open))).expect("opened");
    // A repeat within the window: the same ACCEPT (a lost one).
    s.skew_clock_ms(1_000);
    let (again, secret2) = accepted(&run(&mut s, &st, std::slice::from_ref(&open))).unwrap();
    assert_eq!(
        (again.qpn, again.rkey, secret2),
        (victim.qpn, victim.rkey, secret)
    );
    // The same nonce and source proving another tenant: a QP of its own, not the
    // victim's.
    let other = tenant_open(1, 9, SECRET_B, t0);
    let (b, _) = accepted(&run(&mut s, &st, &[other])).unwrap();
    assert_ne!(b.qpn, victim.qpn);
    // 62 s after the first: the captured OPEN proves nothing any more.
    s.skew_clock_ms(61_000);
    assert!(
        accepted(&run(&mut s, &st, &[open])).is_none(),
        "stale replay answered"
    );
    assert!(drops(&st, DropReason::BadCredential) >= 1);
    // An anonymous OPEN replayed after the window gets a QP of its own.
    let anon = join_to(&request_params(), CM_QPN, 5, &anonymous());
    let (first, fs) = accepted(&run(&mut s, &st, std::slice::from_ref(&anon))).unwrap();
    s.skew_clock_ms(PROOF_WINDOW_MS + 1);
    let (late, ls) = accepted(&run(&mut s, &st, &[anon])).unwrap();
    assert!(
        late.qpn != first.qpn && ls != fs,
        "the live anonymous QP given out again"
    );
}

/// The OPEN throttle is keyed on (MAC, IP): a sender spoofing a victim's IP from its
/// own MAC throttles only itself. Malformed OPENs count as failures; OPENs refused
/// for a quota do not.
#[test]
fn the_open_throttle_is_per_source_and_counts_what_fails() {
    let mut r = rule(7, SECRET_A);
    r.max_connections = 1;
    let mut s = server(64, vec![r, rule(9, SECRET_B)], true);
    let st = WorkerStats::default();
    let now = now_ms();
    let spoofer = params_from(OTHER_MAC, CLIENT_IP);
    for n in 0..u64::from(FAILED_OPENS_PER_S) + 20 {
        let j = signed_open(
            0,
            n,
            7,
            now,
            b"a-guess-of-the-secret",
            &OTHER_MAC,
            CLIENT_IP,
        );
        assert!(accepted(&run(&mut s, &st, &[join_to(&spoofer, CM_QPN, n, &j)])).is_none());
    }
    assert!(
        drops(&st, DropReason::AuthThrottled) > 0,
        "the guesser is throttled"
    );
    // The victim, same IP, its own MAC: not throttled.
    assert!(accepted(&run(&mut s, &st, &[tenant_open(100, 7, SECRET_A, now)])).is_some());
    // Over its quota: refused `connection_quota`, again and again, never throttled.
    for n in 0..u64::from(FAILED_OPENS_PER_S) + 5 {
        assert!(accepted(&run(&mut s, &st, &[tenant_open(200 + n, 7, SECRET_A, now)])).is_none());
    }
    assert_eq!(
        drops(&st, DropReason::ConnectionQuota),
        u64::from(FAILED_OPENS_PER_S) + 5
    );
    assert!(accepted(&run(&mut s, &st, &[tenant_open(300, 9, SECRET_B, now)])).is_some());
    // Malformed OPENs (sent to a client QP) from a source count toward its throttle.
    let third = params_from([2, 0, 0, 0, 0, 0x33], Ipv4Addr::new(10, 9, 9, 9));
    for n in 0..u64::from(FAILED_OPENS_PER_S) {
        run(&mut s, &st, &[join_to(&third, 17, n, &anonymous())]);
    }
    let j = signed_open(
        0,
        1,
        9,
        now,
        SECRET_B,
        &[2, 0, 0, 0, 0, 0x33],
        Ipv4Addr::new(10, 9, 9, 9),
    );
    let before = drops(&st, DropReason::AuthThrottled);
    assert!(accepted(&run(&mut s, &st, &[join_to(&third, CM_QPN, 1, &j)])).is_none());
    assert_eq!(drops(&st, DropReason::AuthThrottled), before + 1);
}

/// Anonymous clients cannot take the QPs tenants' reserves hold (at most half the
/// worker's): a tenant below its reserve still opens when anonymous clients took
/// every other QP.
#[test]
fn anonymous_clients_leave_the_tenants_reserves_free() {
    let mut a = rule(7, SECRET_A);
    a.reserved_connections = 2;
    let mut b = rule(9, SECRET_B);
    b.reserved_connections = 2;
    let mut s = server(8, vec![a, b], true);
    let st = WorkerStats::default();
    let mut anon = 0;
    for n in 0..8 {
        if accepted(&run(
            &mut s,
            &st,
            &[join_to(&request_params(), CM_QPN, 1000 + n, &anonymous())],
        ))
        .is_some()
        {
            anon += 1;
        }
    }
    assert_eq!(anon, 4, "8 QPs, 4 held for the two tenants");
    let now = now_ms();
    for n in 0..2 {
        assert!(accepted(&run(&mut s, &st, &[tenant_open(n, 7, SECRET_A, now)])).is_some());
        assert!(accepted(&run(&mut s, &st, &[tenant_open(10 + n, 9, SECRET_B, now)])).is_some());
    }
    assert!(accepted(&run(&mut s, &st, &[tenant_open(20, 7, SECRET_A, now)])).is_none());
    assert_eq!(s.opened_qps(), 8);
}

/// A client without a tenant never writes into the tenant range (`0xFE…`), even before
/// any tenant exists: no key can be planted for a future tenant.
#[test]
fn anonymous_keys_never_enter_the_tenant_range() {
    let mut s = server(8, Vec::new(), true);
    let st = WorkerStats::default();
    let (c, _) = accepted(&run(
        &mut s,
        &st,
        &[join_to(&request_params(), CM_QPN, 1, &anonymous())],
    ))
    .unwrap();
    let planted = prefixed(7, b"card");
    let out = run(
        &mut s,
        &st,
        &[c.request(
            &[
                KvOp::Put {
                    key: &planted,
                    value: b"x",
                },
                KvOp::Put {
                    key: b"mine",
                    value: b"y",
                },
            ],
            0,
            0,
        )],
    );
    let r: Vec<Status> = results(&out[0]).into_iter().map(|(s, _)| s).collect();
    assert_eq!(r, vec![Status::Denied, Status::Ok]);
    // The tenant arrives: it finds nothing.
    s.set_tenants(vec![rule(7, SECRET_A)], true, &st);
    let (t, _) = accepted(&run(&mut s, &st, &[tenant_open(2, 7, SECRET_A, now_ms())])).unwrap();
    let out = run(
        &mut s,
        &st,
        &[t.request(&[KvOp::Get { key: &planted }], 0, 0)],
    );
    assert_eq!(results(&out[0])[0].0, Status::NotFound);
}

/// A static QP bound to its configured source serves only frames from there (others
/// dropped `wrong_source`, unanswered as any frame of a static QP with a wrong key);
/// an unbound one is refused where anonymous clients are.
#[test]
fn static_qps_are_bound_to_their_source() {
    let mut s = server(8, Vec::new(), true);
    let st = WorkerStats::default();
    let c = common::connect(&mut s, 17, common::RKEY);
    assert!(s.bind_static(
        17,
        Some(Origin {
            mac: CLIENT_MAC,
            ip: CLIENT_IP
        })
    ));
    let get = [KvOp::Get { key: b"k" }];
    let out = run(&mut s, &st, &[c.request(&get, 0, 0)]);
    assert_eq!(results(&out[0])[0].0, Status::NotFound);
    let elsewhere = params_from(OTHER_MAC, CLIENT_IP);
    assert!(run(&mut s, &st, &[c.request_to(&elsewhere, &get, 1, 1)]).is_empty());
    assert_eq!(drops(&st, DropReason::WrongSource), 1);
    // Unbound, on a server that refuses anonymous clients: refused from anywhere.
    assert!(s.bind_static(17, None));
    s.set_tenants(Vec::new(), false, &st);
    assert!(run(&mut s, &st, &[c.request(&get, 1, 1)]).is_empty());
    assert_eq!(drops(&st, DropReason::WrongSource), 2);
}

/// Removing a tenant purges its namespace, and nothing else: every key of the tenant
/// is gone (a tenant of the same id added again reads nothing), the others' stay; the
/// purge reports what it deleted.
#[test]
fn a_removed_tenants_namespace_is_purged() {
    let mut s = server(8, vec![rule(7, SECRET_A), rule(9, SECRET_B)], true);
    let st = WorkerStats::default();
    let now = now_ms();
    let (a, _) = accepted(&run(&mut s, &st, &[tenant_open(1, 7, SECRET_A, now)])).unwrap();
    let (b, _) = accepted(&run(&mut s, &st, &[tenant_open(2, 9, SECRET_B, now)])).unwrap();
    let keys: Vec<Vec<u8>> = (0..300u32).map(|i| format!("k{i}").into_bytes()).collect();
    for (n, k) in keys.iter().enumerate() {
        let n = n as u32;
        let ka = prefixed(7, k);
        let kb = prefixed(9, k);
        run(
            &mut s,
            &st,
            &[a.request(
                &[KvOp::Put {
                    key: &ka,
                    value: b"A",
                }],
                n,
                n,
            )],
        );
        run(
            &mut s,
            &st,
            &[b.request(
                &[KvOp::Put {
                    key: &kb,
                    value: b"B",
                }],
                n,
                n,
            )],
        );
    }
    s.set_tenants(vec![rule(9, SECRET_B)], true, &st);
    s.request_purges(&[(1, 7)]);
    let mut done = None;
    for _ in 0..1_000_000 {
        if let Some(d) = s.purge_step(&st) {
            done = Some(d);
            break;
        }
    }
    let done = done.expect("the purge finished");
    assert_eq!((done.seq, done.id, done.deleted), (1, 7, 300));
    assert!(!s.purge_active());
    assert_eq!(st.purged_keys.get(), 300);
    s.set_tenants(vec![rule(7, SECRET_A), rule(9, SECRET_B)], true, &st);
    let (a2, _) = accepted(&run(&mut s, &st, &[tenant_open(3, 7, SECRET_A, now)])).unwrap();
    let n = keys.len() as u32;
    for (i, k) in keys.iter().step_by(37).enumerate() {
        let i = i as u32;
        let out = run(
            &mut s,
            &st,
            &[a2.request(
                &[KvOp::Get {
                    key: &prefixed(7, k),
                }],
                i,
                i,
            )],
        );
        assert_eq!(results(&out[0])[0].0, Status::NotFound);
        let out = run(
            &mut s,
            &st,
            &[b.request(
                &[KvOp::Get {
                    key: &prefixed(9, k),
                }],
                n + i,
                n + i,
            )],
        );
        assert_eq!(results(&out[0])[0], (Status::Ok, b"B".to_vec()));
    }
}
