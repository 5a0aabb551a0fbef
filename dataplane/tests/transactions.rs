//! Transactions through the real server state machine (`Server`, no EAL): bank
//! transfers with compare conditions, aborts that change nothing (stale condition,
//! failed op, refused writes, too many ops), ordering with the plain requests of the
//! same burst, post-images to the replication tap only on commit, and a retransmitted
//! transaction answered from the response cache instead of running twice.

mod common;

use common::{connect, identity, run, RKEY};
use dataplane::mutation::MutationSink;
use dataplane::repl::gate::WriteGate;
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvwire::payload::{write_tx, AbortReason, CondKind, Condition, TxAbort, MAX_TX_OPS};
use kvwire::{func, parse_response, Atomic, KvOp, MasterHint, ResponseReader, Status};
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};

const QPN: u32 = 17;

fn tx(conds: &[Condition<'_>], ops: &[KvOp<'_>], id: u32) -> Vec<u8> {
    let mut buf = vec![0u8; 1400];
    let n = write_tx(&mut buf, id, conds, ops).unwrap();
    buf.truncate(n);
    buf
}

/// (batch id, results) of a response frame.
fn results(frame: &[u8]) -> (u32, Vec<(Status, Vec<u8>)>) {
    let r = parse_response(frame).expect("valid response frame");
    let rd = ResponseReader::new(r.payload).unwrap();
    let id = rd.batch_id();
    let v = rd
        .map(|x| x.map(|k| (k.status, k.value.to_vec())))
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (id, v)
}

fn u64v(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

fn balance(s: &mut Server, k: &[u8]) -> Option<u64> {
    let mut out = [0u8; 64];
    let n = s.engine_mut().get(k, &mut out).ok()?;
    Some(u64::from_le_bytes(out[..n].try_into().unwrap()))
}

/// A transfer of `amount` from `a` to `b` whose balances the client read as `ba`, `bb`.
fn transfer(a: &[u8], b: &[u8], ba: u64, bb: u64, amount: u64, id: u32) -> Vec<u8> {
    let (va, vb) = (u64v(ba), u64v(bb));
    let (na, nb) = (u64v(ba - amount), u64v(bb + amount));
    tx(
        &[
            Condition {
                op: 0,
                kind: CondKind::Equals,
                value: &va,
            },
            Condition {
                op: 1,
                kind: CondKind::Equals,
                value: &vb,
            },
        ],
        &[
            KvOp::Get { key: a },
            KvOp::Get { key: b },
            KvOp::Put { key: a, value: &na },
            KvOp::Put { key: b, value: &nb },
        ],
        id,
    )
}

fn server() -> Server {
    let mut s = Server::new(identity(), &[(QPN, RKEY)], common::engine(4 << 20));
    s.engine_mut().put(b"alice", &u64v(100));
    s.engine_mut().put(b"bob", &u64v(100));
    s
}

#[test]
fn a_transfer_commits_once_and_a_stale_one_aborts_changing_nothing() {
    let mut s = server();
    let st = WorkerStats::default();
    let c = connect(&mut s, QPN, RKEY);
    let t = transfer(b"alice", b"bob", 100, 100, 30, 7);
    let out = run(&mut s, &st, &[c.raw_request(&t, 0)]);
    let (id, r) = results(&out[0]);
    assert_eq!(id, 7);
    assert_eq!(r.len(), 5, "outcome + 4 ops");
    assert_eq!(r[0], (Status::Ok, vec![]), "committed");
    assert_eq!(r[1], (Status::Ok, u64v(100).to_vec()));
    assert_eq!(
        (balance(&mut s, b"alice"), balance(&mut s, b"bob")),
        (Some(70), Some(130))
    );

    // The same transfer again (its reads are stale now): aborted, nothing changed, the
    // reads report what is there.
    let out = run(
        &mut s,
        &st,
        &[c.raw_request(&transfer(b"alice", b"bob", 100, 100, 30, 8), 1)],
    );
    let (_, r) = results(&out[0]);
    assert_eq!(r[0].0, Status::Aborted);
    let a = TxAbort::decode(&r[0].1).unwrap();
    assert_eq!((a.reason, a.op), (AbortReason::ConditionFailed, 0));
    assert_eq!(r[1], (Status::Ok, u64v(70).to_vec()));
    assert_eq!(r[3].0, Status::Aborted);
    assert_eq!(r[4].0, Status::Aborted);
    assert_eq!(
        (balance(&mut s, b"alice"), balance(&mut s, b"bob")),
        (Some(70), Some(130))
    );
    assert_eq!((st.tx_committed.get(), st.tx_aborted.get()), (1, 1));

    // Retransmitted (same PSN): answered from the response cache, not run again.
    let again = run(&mut s, &st, &[c.raw_request(&t, 0)]);
    assert!(!again.is_empty());
    assert_eq!(
        (balance(&mut s, b"alice"), balance(&mut s, b"bob")),
        (Some(70), Some(130))
    );
    assert_eq!(st.tx_committed.get(), 1);
}

#[test]
fn a_failed_op_refused_writes_and_too_many_ops_abort_with_their_reason() {
    let mut s = server();
    let st = WorkerStats::default();
    let gate = Arc::new(WriteGate::writable());
    s.set_write_gate(gate.clone());
    let c = connect(&mut s, QPN, RKEY);
    let add = |k: &'static [u8]| KvOp::UpdateS2S {
        key: k,
        atomic: Atomic::from_attr(func::FETCH_ADD, 0x03).unwrap(),
        param: 5,
        param2: 0,
    };
    // The second op fails (fetch-add of an absent key): the first is not applied.
    let t = tx(&[], &[add(b"alice"), add(b"nobody")], 1);
    let (_, r) = results(&run(&mut s, &st, &[c.raw_request(&t, 0)])[0]);
    let a = TxAbort::decode(&r[0].1).unwrap();
    assert_eq!(
        (a.reason, a.op, a.status),
        (AbortReason::OpFailed, 1, Status::NotFound)
    );
    assert_eq!(balance(&mut s, b"alice"), Some(100));

    // A replica: writes refused with the master named; a read-only transaction runs.
    gate.set_master_hint(Some(MasterHint {
        epoch: 3,
        ip: Ipv4Addr::new(10, 0, 0, 9),
        mac: [2, 0, 0, 0, 0, 9],
        qpn: 1,
    }));
    gate.refuse_not_master();
    let t = tx(&[], &[add(b"alice")], 2);
    let (_, r) = results(&run(&mut s, &st, &[c.raw_request(&t, 1)])[0]);
    let a = TxAbort::decode(&r[0].1).unwrap();
    assert_eq!(
        (a.reason, a.status),
        (AbortReason::WritesRefused, Status::NotMaster)
    );
    assert_eq!(TxAbort::hint(&r[0].1).unwrap().epoch, 3);
    let t = tx(
        &[],
        &[KvOp::Get { key: b"alice" }, KvOp::Get { key: b"bob" }],
        3,
    );
    let (_, r) = results(&run(&mut s, &st, &[c.raw_request(&t, 2)])[0]);
    assert_eq!(r[0], (Status::Ok, vec![]));
    assert_eq!(r[2], (Status::Ok, u64v(100).to_vec()));
    gate.open();

    // Over the limit: answered (outcome only), nothing runs.
    let gets = vec![KvOp::Get { key: b"alice" }; MAX_TX_OPS + 1];
    let t = tx(&[], &gets, 4);
    let (id, r) = results(&run(&mut s, &st, &[c.raw_request(&t, 3)])[0]);
    assert_eq!((id, r.len()), (4, 1));
    let a = TxAbort::decode(&r[0].1).unwrap();
    assert_eq!(a.reason, AbortReason::TooLarge);
    // Garbage after the magic: answered ABORTED (malformed) under batch id 0, so the
    // client's credit comes back; nothing changes.
    let out = run(&mut s, &st, &[c.raw_request(&[0x54, 1, 9], 4)]);
    let (id, r) = results(&out[0]);
    assert_eq!((id, r.len(), r[0].0), (0, 1, Status::Aborted));
    assert_eq!(
        TxAbort::decode(&r[0].1).unwrap().reason,
        AbortReason::Malformed
    );
    assert_eq!(balance(&mut s, b"alice"), Some(100));
}

#[test]
fn a_transaction_sees_the_plain_writes_before_it_in_the_same_burst() {
    let mut s = server();
    let st = WorkerStats::default();
    let c = connect(&mut s, QPN, RKEY);
    let put = c.request(
        &[KvOp::Put {
            key: b"alice",
            value: &u64v(55),
        }],
        1,
        0,
    );
    let t = tx(&[], &[KvOp::Get { key: b"alice" }], 2);
    let out = run(&mut s, &st, &[put, c.raw_request(&t, 1)]);
    let r = out
        .iter()
        .map(|f| results(f))
        .find(|(id, _)| *id == 2)
        .unwrap()
        .1;
    assert_eq!(r[1], (Status::Ok, u64v(55).to_vec()));
}

/// A post-image: key, new value (`None`: deleted).
type PostImage = (Vec<u8>, Option<Vec<u8>>);

/// Post-images the tap received.
#[derive(Clone, Default)]
struct Tap(Arc<Mutex<Vec<PostImage>>>);

impl MutationSink for Tap {
    fn room(&self) -> usize {
        1 << 20
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .push((key.to_vec(), Some(value.to_vec())));
    }
    fn delete(&mut self, key: &[u8]) {
        self.0.lock().unwrap().push((key.to_vec(), None));
    }
}

#[test]
fn only_committed_transactions_reach_the_replication_tap() {
    let mut s = server();
    let st = WorkerStats::default();
    let tap = Tap::default();
    s.set_mutation_sink(Some(Box::new(tap.clone())));
    let c = connect(&mut s, QPN, RKEY);
    let ok = transfer(b"alice", b"bob", 100, 100, 10, 1);
    let stale = transfer(b"alice", b"bob", 100, 100, 10, 2);
    let del = tx(&[], &[KvOp::Delete { key: b"bob" }], 3);
    run(
        &mut s,
        &st,
        &[
            c.raw_request(&ok, 0),
            c.raw_request(&stale, 1),
            c.raw_request(&del, 2),
        ],
    );
    let got = tap.0.lock().unwrap().clone();
    assert_eq!(
        got,
        vec![
            (b"alice".to_vec(), Some(u64v(90).to_vec())),
            (b"bob".to_vec(), Some(u64v(110).to_vec())),
            (b"bob".to_vec(), None),
        ]
    );
}

/// A client (patient retransmission) of a server over a link with `faults`, whose
/// engine holds accounts `acct0..acct{n}` with `balance` each.
fn lossy_client(
    seed: u64,
    faults: kvclient::sim::Faults,
    qps: &[(u32, u32)],
    n: u64,
    balance: u64,
) -> kvclient::Client<common::ServerIo> {
    let mut io = common::ServerIo::new(seed, faults, qps);
    for i in 0..n {
        io.server
            .engine_mut()
            .put(format!("acct{i}").as_bytes(), &u64v(balance));
    }
    let clock = io.clock.clone();
    let cfg = kvclient::ClientConfig {
        transport: kvclient::Config {
            rto_initial_ns: 300_000,
            rto_max_ns: 5_000_000,
            max_retries: 30,
            ..kvclient::Config::default()
        },
        ..kvclient::ClientConfig::default()
    };
    kvclient::Client::new(
        io,
        cfg,
        qps,
        common::request_params(),
        Box::new(move || clock.get()),
    )
}

/// Bank transfers through `kvclient::Client::transact` over a link that drops,
/// duplicates and reorders frames: each transfer reads both balances with conditions
/// and moves 1 when the source has money; the client retries a stale read. Every
/// committed transfer is applied exactly once: the final balances are exactly those
/// the committed outcomes imply, and their sum never changes.
#[test]
fn bank_transfers_over_a_lossy_link_commit_exactly_once() {
    use kvclient::sim::Faults;
    use kvclient::{Op, TxCondition};
    const ACCOUNTS: u64 = 6;
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        reorder_depth: 4,
    };
    let acct = |i: u64| format!("acct{i}").into_bytes();
    let mut c = lossy_client(3, faults, &[(100, RKEY), (101, RKEY)], ACCOUNTS, 10);
    let mut model = vec![10u64; ACCOUNTS as usize];
    let (mut committed, mut stale) = (0, 0);
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..300 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let (a, b) = (x % ACCOUNTS, (x >> 8) % ACCOUNTS);
        if a == b {
            continue;
        }
        // What the client believes (its model); sometimes deliberately stale.
        let believed = if x.is_multiple_of(7) {
            model[a as usize] + 1
        } else {
            model[a as usize]
        };
        if believed == 0 {
            continue;
        }
        let ops = [
            Op::Get { key: acct(a) },
            Op::Get { key: acct(b) },
            Op::Put {
                key: acct(a),
                value: u64v(believed - 1).to_vec(),
            },
            Op::Put {
                key: acct(b),
                value: u64v(model[b as usize] + 1).to_vec(),
            },
        ];
        let conds = [
            TxCondition {
                op: 0,
                expect: Some(u64v(believed).to_vec()),
            },
            TxCondition {
                op: 1,
                expect: Some(u64v(model[b as usize]).to_vec()),
            },
        ];
        let out = c.transact(&conds, &ops).expect("transaction outcome");
        assert_eq!(out.results.len(), 4);
        if out.committed() {
            model[a as usize] -= 1;
            model[b as usize] += 1;
            committed += 1;
        } else {
            let why = out.abort.unwrap();
            assert_eq!((why.reason, why.op), (AbortReason::ConditionFailed, 0));
            // The read shows the truth.
            assert_eq!(out.results[0].value, u64v(model[a as usize]).to_vec());
            stale += 1;
        }
    }
    assert!(
        committed > 100 && stale > 10,
        "committed {committed}, stale {stale}"
    );
    let io = c.io_mut();
    let mut total = 0;
    for i in 0..ACCOUNTS {
        let b = balance(&mut io.server, &acct(i)).unwrap();
        assert_eq!(b, model[i as usize], "account {i}");
        total += b;
    }
    assert_eq!(total, 10 * ACCOUNTS);
    assert!(
        io.stats.replays.get() > 0,
        "some transactions were answered from the cache"
    );
}

#[test]
fn conflicting_transactions_on_one_hot_key_run_one_at_a_time_in_arrival_order() {
    // Eight QPs, each with one transaction "read the hot key, write my id into it",
    // all in one burst in a scrambled QP order: each must read the id written by the
    // transaction that arrived just before it (FIFO, one at a time, no lost update).
    let qps: Vec<(u32, u32)> = (0..8).map(|i| (QPN + i, RKEY)).collect();
    let mut s = Server::new(identity(), &qps, common::engine(4 << 20));
    s.engine_mut().put(b"hot", &u64v(1000));
    let st = WorkerStats::default();
    let clients: Vec<_> = (0..8).map(|i| connect(&mut s, QPN + i, RKEY)).collect();
    let order = [5usize, 2, 7, 0, 3, 6, 1, 4];
    let mut psn = [0u32; 8];
    let mut burst = |ids: &dyn Fn(usize) -> u32, s: &mut Server| {
        let frames: Vec<Vec<u8>> = order
            .iter()
            .map(|&q| {
                let me = ids(q);
                let v = u64v(u64::from(me));
                let t = tx(
                    &[],
                    &[
                        KvOp::Get { key: b"hot" },
                        KvOp::Put {
                            key: b"hot",
                            value: &v,
                        },
                    ],
                    me,
                );
                psn[q] += 1;
                clients[q].raw_request(&t, psn[q] - 1)
            })
            .collect();
        let out = run(s, &st, &frames);
        let mut seen = std::collections::HashMap::new();
        for f in &out {
            let (id, r) = results(f);
            assert_eq!(r[0].0, Status::Ok, "committed: {r:?}");
            seen.insert(id, u64::from_le_bytes(r[1].1[..8].try_into().unwrap()));
        }
        seen
    };
    let seen = burst(&|q| 100 + q as u32, &mut s);
    let mut prev = 1000u64;
    for &q in &order {
        let id = 100 + q as u32;
        assert_eq!(
            seen[&id], prev,
            "transaction {id} read its predecessor's write"
        );
        prev = u64::from(id);
    }
    assert_eq!(
        balance(&mut s, b"hot"),
        Some(prev),
        "the last one's write stands"
    );

    // The same eight, each now conditional on the value the key had before the burst:
    // the first to arrive commits, every later one aborts (CONDITION_FAILED) and
    // changes nothing.
    let start = prev;
    let frames: Vec<Vec<u8>> = order
        .iter()
        .map(|&q| {
            let me = 200 + q as u32;
            let v = u64v(u64::from(me));
            let want = u64v(start);
            let t = tx(
                &[Condition {
                    op: 0,
                    kind: CondKind::Equals,
                    value: &want,
                }],
                &[
                    KvOp::Get { key: b"hot" },
                    KvOp::Put {
                        key: b"hot",
                        value: &v,
                    },
                ],
                me,
            );
            psn[q] += 1;
            clients[q].raw_request(&t, psn[q] - 1)
        })
        .collect();
    let out = run(&mut s, &st, &frames);
    let mut committed = Vec::new();
    for f in &out {
        let (id, r) = results(f);
        if r[0].0 == Status::Ok {
            committed.push(id);
        } else {
            assert_eq!(r[0].0, Status::Aborted, "{id}: {r:?}");
            let a = TxAbort::decode(&r[0].1).unwrap();
            assert_eq!(a.reason, AbortReason::ConditionFailed, "{id}");
        }
    }
    assert_eq!(
        committed,
        vec![200 + order[0] as u32],
        "only the first arrival commits"
    );
    assert_eq!(balance(&mut s, b"hot"), Some(200 + order[0] as u64));
}

/// Several transfers in flight at once (`Client::submit_tx`, on the QPs of their first
/// keys) over a lossy link, on accounts the client does not track: each reads its two
/// accounts, then commits only if both are unchanged. Transfers in flight together
/// conflict; whatever interleaving the server saw, no committed transfer is lost or
/// applied twice: the final total equals the start, and each account's balance is the
/// start plus what the committed transfers moved in and out of it.
#[test]
fn concurrent_optimistic_transfers_over_a_lossy_link_keep_the_total() {
    use kvclient::sim::Faults;
    use kvclient::{Op, TxCondition, TxTicket};
    const ACCOUNTS: u64 = 5;
    const INFLIGHT: usize = 6;
    let faults = Faults {
        drop: 0.03,
        duplicate: 0.03,
        reorder: 0.03,
        reorder_depth: 4,
    };
    let acct = |i: u64| format!("acct{i}").into_bytes();
    let qps = [(100, RKEY), (101, RKEY), (102, RKEY), (103, RKEY)];
    let mut c = lossy_client(9, faults, &qps, ACCOUNTS, 50);
    enum Slot {
        Idle,
        Reading(TxTicket, u64, u64),
        Moving(TxTicket, u64, u64),
    }
    let mut slots: Vec<Slot> = (0..INFLIGHT).map(|_| Slot::Idle).collect();
    let mut moved = vec![0i64; ACCOUNTS as usize];
    let (mut started, mut committed, mut conflicts) = (0, 0, 0);
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    while started < 400 || slots.iter().any(|s| !matches!(s, Slot::Idle)) {
        c.poll();
        for s in slots.iter_mut() {
            match s {
                Slot::Idle if started < 400 => {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    let (a, b) = (x % ACCOUNTS, (x >> 16) % ACCOUNTS);
                    if a == b {
                        continue;
                    }
                    let ops = [Op::Get { key: acct(a) }, Op::Get { key: acct(b) }];
                    *s = Slot::Reading(c.submit_tx(&[], &ops).unwrap(), a, b);
                    started += 1;
                }
                Slot::Idle => {}
                Slot::Reading(t, a, b) => {
                    let Some(o) = c.tx_outcome(*t) else { continue };
                    let o = o.expect("read outcome");
                    assert!(o.committed());
                    let va = o.results[0].value.clone();
                    let vb = o.results[1].value.clone();
                    let ba = u64::from_le_bytes(va[..8].try_into().unwrap());
                    let bb = u64::from_le_bytes(vb[..8].try_into().unwrap());
                    if ba == 0 {
                        *s = Slot::Idle;
                        continue;
                    }
                    let conds = [
                        TxCondition {
                            op: 0,
                            expect: Some(va),
                        },
                        TxCondition {
                            op: 1,
                            expect: Some(vb),
                        },
                    ];
                    let ops = [
                        Op::Get { key: acct(*a) },
                        Op::Get { key: acct(*b) },
                        Op::Put {
                            key: acct(*a),
                            value: u64v(ba - 1).to_vec(),
                        },
                        Op::Put {
                            key: acct(*b),
                            value: u64v(bb + 1).to_vec(),
                        },
                    ];
                    *s = Slot::Moving(c.submit_tx(&conds, &ops).unwrap(), *a, *b);
                }
                Slot::Moving(t, a, b) => {
                    let Some(o) = c.tx_outcome(*t) else { continue };
                    let o = o.expect("transfer outcome");
                    if o.committed() {
                        moved[*a as usize] -= 1;
                        moved[*b as usize] += 1;
                        committed += 1;
                    } else {
                        let why = o.abort.unwrap();
                        assert_eq!(why.reason, AbortReason::ConditionFailed);
                        conflicts += 1;
                    }
                    *s = Slot::Idle;
                }
            }
        }
    }
    assert!(
        committed > 100 && conflicts > 10,
        "committed {committed}, conflicts {conflicts}"
    );
    let io = c.io_mut();
    let mut total = 0;
    for i in 0..ACCOUNTS {
        let b = balance(&mut io.server, &acct(i)).unwrap();
        assert_eq!(b as i64, 50 + moved[i as usize], "account {i}");
        total += b;
    }
    assert_eq!(total, 50 * ACCOUNTS);
}

/// `Client::incr` (Redis's INCR) over a link that drops, duplicates and reorders:
/// a missing counter is created with the delta by a transaction that commits only
/// while the key is absent, an existing one is added to, each exactly once; a value
/// that is no 8-byte counter stays BAD_LENGTH and unchanged.
#[test]
fn incr_creates_a_missing_counter_and_adds_exactly_once() {
    use kvclient::sim::Faults;
    let faults = Faults {
        drop: 0.05,
        duplicate: 0.05,
        reorder: 0.05,
        reorder_depth: 4,
    };
    let mut c = lossy_client(5, faults, &[(100, RKEY), (101, RKEY)], 0, 0);
    let mut model: Vec<Option<u64>> = vec![None; 5];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    for _ in 0..400 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let i = (x % 5) as usize;
        let key = format!("ctr{i}").into_bytes();
        if x.is_multiple_of(11) {
            assert_eq!(c.delete(&key).unwrap(), model[i].is_some());
            model[i] = None;
            continue;
        }
        let delta = (x >> 20) % 1000;
        let old = c.incr(&key, delta).expect("incr");
        assert_eq!(old, model[i].unwrap_or(0), "counter {i}");
        model[i] = Some(old.wrapping_add(delta));
    }
    assert!(model.iter().any(Option::is_some));
    for (i, m) in model.iter().enumerate() {
        let got = balance(&mut c.io_mut().server, format!("ctr{i}").as_bytes());
        assert_eq!(got, *m, "counter {i}");
    }
    c.put(b"text", b"7").unwrap();
    assert_eq!(
        c.incr(b"text", 1),
        Err(kvclient::Error::Status(Status::BadLength))
    );
    let mut out = [0u8; 8];
    let n = c
        .io_mut()
        .server
        .engine_mut()
        .get(b"text", &mut out)
        .unwrap();
    assert_eq!(&out[..n], b"7");
}
