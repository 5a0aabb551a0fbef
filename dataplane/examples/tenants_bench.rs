//! Connections and tenants on one server core, without the network (issue 32's
//! benchmark; `scripts/bench.sh tenants`). Everything goes through
//! `Server::handle_burst` as the worker loop feeds it, and only that call is timed:
//!
//! * `opens_per_s`, `opens_per_s_tenant`: OPENs (bursts of 32, each a new QP) without a
//!   credential and with a tenant's (its HMAC-SHA256 proof checked);
//! * `mops_10000_conns_vs_4`: the standard work (32 ops per packet, 95 % GET / 5 % PUT,
//!   uniform over 1 M KVs) spread over 10 000 opened QPs vs over 4 of them;
//! * `acl_namespace_cost`: the same work from a tenant's clients (ACL and namespace
//!   checked on every op) vs from the operator's static QPs on a server without
//!   tenants (nothing checked), same keys (in the tenant's namespace);
//!   `acl_namespace_cost_vs_anonymous`: the tenant's against clients without a tenant
//!   (whose keys are checked to be outside the tenant range);
//! * `purge_keys_per_s`: a removed tenant's namespace purged (`Server::purge_step`)
//!   from a store of 1 M of its keys and 1 M of another tenant's;
//! * `tenants_1000_vs_1`: the tenant's clients with 1000 tenants defined vs 1 (the
//!   per-request rule lookup; the clients are of one tenant).
//!
//! Variants of one figure alternate a quarter second at a time, so a drift of the
//! machine hits both alike. `cargo run --release -p dataplane --example tenants_bench
//! -- [SECONDS]` prints JSON.

mod burst_bench;

use burst_bench::{alternate, common, open_qp, Bench};
use dataplane::server::{Server, TenantRule, Transport};
use dataplane::stats::WorkerStats;
use kvops::FunctionRegistry;
use kvwire::tenant;
use std::time::{Duration, Instant};

const TENANT: u32 = 7;
const SECRET: &[u8] = b"bench-tenant-secret-0123456789ab";

fn rule(id: u32) -> TenantRule {
    TenantRule {
        id,
        name: format!("t{id}"),
        secret: SECRET.to_vec(),
        acl: tenant::ALL,
        max_connections: 0,
        requests_per_s: 0,
        max_credits: 0,
        reserved_connections: 0,
    }
}

fn server(tenants: u32) -> Server {
    server_with_static(tenants, 0)
}

/// [`server`] admitting `statics` static QPs (17, 18, ...).
fn server_with_static(tenants: u32, statics: u32) -> Server {
    let statics: Vec<(u32, u32)> = (0..statics).map(|i| (17 + i, common::RKEY)).collect();
    let t = Transport {
        max_opened: 20_000,
        idle_close_s: 0,
        ..Transport::default()
    };
    let mut s = Server::with_transport(
        common::identity(),
        &statics,
        common::engine(256 << 20),
        true,
        FunctionRegistry::new(),
        t,
    )
    .expect("transport");
    let rules = (0..tenants)
        .map(|i| rule(if i == 0 { TENANT } else { 1000 + i }))
        .collect();
    s.set_tenants(rules, true, &WorkerStats::default());
    s
}

/// `n` opened QPs (as tenant `TENANT` when `tenant`).
fn open_n(s: &mut Server, n: u32, tenant: bool, nonce0: u64) -> Vec<common::Client> {
    (0..n)
        .map(|i| {
            let cred = tenant.then_some((TENANT, SECRET));
            open_qp(s, nonce0 + u64::from(i), cred).expect("opened")
        })
        .collect()
}

/// OPENs per second: bursts of 32 OPENs (new nonces), `total` of them, timed in
/// `handle_burst` only.
fn opens_per_s(tenant: bool, total: u64) -> f64 {
    use kvwire::transport::{emit_join, signed_open, Connect, Join, CM_QPN, MAX_JOIN_FRAME_LEN};
    let mut s = server(1);
    let stats = WorkerStats::default();
    let mut tx = common::VecSink::default();
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let frames: Vec<Vec<u8>> = (0..total)
        .map(|nonce| {
            let join = if tenant {
                signed_open(
                    0,
                    nonce,
                    TENANT,
                    ms,
                    SECRET,
                    &common::CLIENT_MAC,
                    common::CLIENT_IP,
                )
            } else {
                Join::Open {
                    partition: 0,
                    tenant: None,
                }
            };
            let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
            let c = Connect { rkey: 0, nonce };
            let n = emit_join(&mut buf, &common::request_params(), CM_QPN, &c, &join).unwrap();
            buf.truncate(n);
            buf
        })
        .collect();
    let mut busy = Duration::ZERO;
    for burst in frames.chunks(32) {
        let views: Vec<&[u8]> = burst.iter().map(|f| f.as_slice()).collect();
        let t0 = Instant::now();
        s.handle_burst(&views, &stats, &mut tx);
        busy += t0.elapsed();
        tx.recycle();
    }
    assert_eq!(stats.opens.get(), total, "every OPEN opened a QP");
    total as f64 / busy.as_secs_f64()
}

/// A connection frame `join` to `qpn` with `rkey` and `nonce`.
fn join_frame(qpn: u32, rkey: u32, nonce: u64, join: &kvwire::transport::Join) -> Vec<u8> {
    use kvwire::transport::{emit_join, Connect, MAX_JOIN_FRAME_LEN};
    let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
    let c = Connect { rkey, nonce };
    let n = emit_join(&mut buf, &common::request_params(), qpn, &c, join).unwrap();
    buf.truncate(n);
    buf
}

/// Hijack attempts on a victim's opened QP: CONNECTs with its R_Key, RESUMEs and
/// CLOSEs with guessed secrets, OPENs of its tenant with guessed secrets. Returns
/// (attempts, successes): an attempt succeeds if it is answered with an ACCEPT or
/// the victim's connection stops serving.
fn hijacks(n: u64) -> (u64, u64) {
    use kvwire::transport::{signed_open, Join, CM_QPN};
    let mut s = server(1);
    let victim = open_qp(&mut s, 1, Some((TENANT, SECRET))).unwrap();
    let stats = WorkerStats::default();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let mut rnd = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let (mut tried, mut won) = (0u64, 0u64);
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let key = tenant::prefixed(TENANT, b"k");
    for i in 0..n {
        let q = victim.qpn;
        let frames = [
            join_frame(q, victim.rkey, 1 << 40 | i, &Join::Connect),
            join_frame(
                q,
                victim.rkey,
                1,
                &Join::Resume {
                    next_psn: victim.psn(0),
                    proof: Some(rnd()),
                },
            ),
            join_frame(q, victim.rkey, 1, &Join::Close { proof: rnd() }),
            {
                let guess = rnd().to_le_bytes();
                let j = signed_open(
                    0,
                    1 << 50 | i,
                    TENANT,
                    ms,
                    &guess,
                    &common::CLIENT_MAC,
                    common::CLIENT_IP,
                );
                join_frame(CM_QPN, 0, 1 << 50 | i, &j)
            },
        ];
        for f in frames {
            tried += 1;
            if !common::run(&mut s, &stats, &[f]).is_empty() {
                won += 1;
            }
        }
    }
    // The victim's connection still serves, at the PSN its ACCEPT gave.
    let out = common::run(
        &mut s,
        &stats,
        &[victim.request(&[kvwire::KvOp::Get { key: &key }], 0, 0)],
    );
    if kvwire::parse_response(out.first().map_or(&[][..], |f| f)).is_err() {
        won += 1;
    }
    (tried, won)
}

/// Isolation: tenants 1..=`t` each PUT application keys `k0..k(n-1)` with their own
/// value, then each GETs them and tries every other tenant's prefixed keys. Returns
/// (reads, violations): a violation is a read of another tenant's value or a
/// foreign key not answered DENIED.
fn isolation(t: u32, n: u32) -> (u64, u64) {
    use kvwire::{KvOp, Status};
    let mut s = server(0);
    s.set_tenants((1..=t).map(rule).collect(), true, &WorkerStats::default());
    let stats = WorkerStats::default();
    let clients: Vec<common::Client> = (1..=t)
        .map(|id| open_qp(&mut s, u64::from(id), Some((id, SECRET))).unwrap())
        .collect();
    let (mut reads, mut bad) = (0u64, 0u64);
    for (i, c) in clients.iter().enumerate() {
        let id = i as u32 + 1;
        for k in 0..n {
            let key = tenant::prefixed(id, format!("k{k}").as_bytes());
            let v = id.to_le_bytes();
            common::run(
                &mut s,
                &stats,
                &[c.request(
                    &[KvOp::Put {
                        key: &key,
                        value: &v,
                    }],
                    k,
                    k,
                )],
            );
        }
    }
    for (i, c) in clients.iter().enumerate() {
        let id = i as u32 + 1;
        for k in 0..n {
            for other in 1..=t {
                let key = tenant::prefixed(other, format!("k{k}").as_bytes());
                let p = n + k * t + other - 1;
                let out = common::run(
                    &mut s,
                    &stats,
                    &[c.request(&[KvOp::Get { key: &key }], p, p)],
                );
                let r = common::results(&out[0]);
                reads += 1;
                let ok = if other == id {
                    r[0] == (Status::Ok, id.to_le_bytes().to_vec())
                } else {
                    r[0].0 == Status::Denied
                };
                bad += u64::from(!ok);
            }
        }
    }
    (reads, bad)
}

/// A tenant's `n` keys purged from a store that also holds `n` of another tenant's:
/// (keys deleted, keys per second of `purge_step`).
fn purge_rate(n: u64) -> (u64, f64) {
    let mut s = server(2);
    s.set_tenants(
        vec![rule(TENANT), rule(TENANT + 1)],
        true,
        &WorkerStats::default(),
    );
    for i in 0..n {
        for t in [TENANT, TENANT + 1] {
            let key = tenant::prefixed(t, &i.to_le_bytes());
            assert_eq!(s.engine_mut().put(&key, b"vv"), kvengine::Status::Ok);
        }
    }
    let stats = WorkerStats::default();
    s.set_tenants(vec![rule(TENANT + 1)], true, &stats);
    s.request_purges(&[(1, TENANT)]);
    let t0 = Instant::now();
    let deleted = loop {
        if let Some(d) = s.purge_step(&stats) {
            break d.deleted;
        }
    };
    let secs = t0.elapsed().as_secs_f64();
    assert_eq!(deleted, n, "every key of the tenant, none of the other's");
    (deleted, deleted as f64 / secs)
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(4.0);
    let opens = opens_per_s(false, 10_000);
    let opens_tenant = opens_per_s(true, 10_000);

    // 10 000 opened QPs vs 4 of them.
    let stats = WorkerStats::default();
    let mut s = server(0);
    let clients = open_n(&mut s, 10_000, false, 1);
    let live = s.opened_qps();
    let mut b = Bench::with_clients(s, clients, &[], &stats);
    let (conns, _) = alternate(secs, &stats, 2, |slot| {
        let active = if slot == 0 { 4 } else { 10_000 };
        b.run(active, &stats, &mut |s, v, st, tx| {
            s.handle_burst(v, st, tx)
        })
    });
    drop(b);

    // Tenant checks on vs off, the same keys; then 1000 tenants defined vs 1.
    let ns = tenant::namespace(TENANT);
    let stats = WorkerStats::default();
    let mut s_off = server_with_static(0, 4);
    let c_off: Vec<common::Client> = (0..4)
        .map(|i| common::connect(&mut s_off, 17 + i, common::RKEY))
        .collect();
    let mut off = Bench::with_clients(s_off, c_off, &ns, &stats);
    let mut s_on = server(1);
    let c_on = open_n(&mut s_on, 4, true, 1);
    let mut on = Bench::with_clients(s_on, c_on, &ns, &stats);
    // Clients without a tenant carry the one-byte guard of the tenant range: keys of
    // the same length just outside it.
    let mut s_anon = server(0);
    let c_anon = open_n(&mut s_anon, 4, false, 1);
    let outside = [0xFD, ns[1], ns[2], ns[3]];
    let mut anon = Bench::with_clients(s_anon, c_anon, &outside, &stats);
    let (acl, _) = alternate(secs, &stats, 3, |slot| {
        let b = match slot {
            0 => &mut off,
            1 => &mut on,
            _ => &mut anon,
        };
        b.run(4, &stats, &mut |s, v, st, tx| s.handle_burst(v, st, tx))
    });
    drop(anon);
    let denied = stats.denied.get();
    drop(off);
    let many: Vec<TenantRule> = (0..1000)
        .map(|i| rule(if i == 0 { TENANT } else { 1000 + i }))
        .collect();
    let one = vec![rule(TENANT)];
    let (tenants, _) = alternate(secs, &stats, 2, |slot| {
        let rules = if slot == 0 { one.clone() } else { many.clone() };
        on.server().set_tenants(rules, true, &stats);
        on.run(4, &stats, &mut |s, v, st, tx| s.handle_burst(v, st, tx))
    });
    let (hijacks_tried, hijacks_succeeded) = hijacks(1000);
    let (purged, purge_rate) = purge_rate(1_000_000);
    let (isolation_reads, isolation_violations) = isolation(20, 20);
    let out = serde_json::json!({
        "hijacks_tried": hijacks_tried,
        "hijacks_succeeded": hijacks_succeeded,
        "isolation_reads": isolation_reads,
        "isolation_violations": isolation_violations,
        "what": "Server::handle_burst in process, one core, no network (dataplane/examples/tenants_bench.rs)",
        "seconds_per_figure": secs,
        "opens_per_s": opens.round(),
        "opens_per_s_tenant": opens_tenant.round(),
        "connections": live,
        "mops_4_conns": conns[0],
        "mops_10000_conns": conns[1],
        "mops_10000_conns_vs_4": conns[1] / conns[0],
        "mops_tenant_checks_off": acl[0],
        "mops_tenant_checks_on": acl[1],
        "acl_namespace_cost": acl[1] / acl[0],
        "mops_anonymous_guard": acl[2],
        "acl_namespace_cost_vs_anonymous": acl[1] / acl[2],
        "mops_1_tenant": tenants[0],
        "mops_1000_tenants": tenants[1],
        "tenants_1000_vs_1": tenants[1] / tenants[0],
        "denied_ops": denied + stats.denied.get(),
        "purged_keys": purged,
        "purge_keys_per_s": purge_rate.round(),
        "reclaims": stats.reclaims.get(),
    });
    println!("{out}");
}
