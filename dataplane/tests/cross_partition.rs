//! Cross-partition transactions (docs/TRANSACTIONS.md) through two real servers on
//! two threads sharing a `PartitionTable`, as two workers of one node: each thread
//! coordinates transfers between accounts of both partitions and audits of every
//! account while the other serves its own plain requests and transactions on the
//! same keys. Checked: the bank total in every audit and at the end, no update lost
//! between a coordinator writing a parked partition and that partition's own
//! requests, and the replication streams of the two taps — a cross-partition
//! transaction whole in its coordinator's tap behind one group, after a wait for the
//! other tap, which waits for it past the transaction — merged in the order the waits
//! allow (as the replication lcore does), replaying to the final contents.

mod common;

use common::{connect, engine, identity, partition_server, results, run, RKEY};
use dataplane::mutation::{record_cost, MutationSink};
use dataplane::server::{PartitionTable, Server};
use dataplane::stats::WorkerStats;
use kvwire::partition::partition_of_hash;
use kvwire::payload::{write_tx, AbortReason, CondKind, Condition, TxAbort};
use kvwire::{func, Atomic, KvOp, Status};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

const ACCOUNTS: usize = 16;
const START: u64 = 1000;
const ROUNDS: u32 = 3000;

/// What a tap received.
#[derive(Clone, Debug, PartialEq)]
enum Ev {
    Put(Vec<u8>, Vec<u8>),
    Del(Vec<u8>),
    Group(u32),
    Wait(u32, u64),
}

/// A tap recording every call that reaches a replication stream, with a byte
/// position like a replication ring's (as `repl::worker_log::ReplLog`).
struct RecTap {
    evs: Arc<Mutex<Vec<Ev>>>,
    pos: u64,
}

impl RecTap {
    fn ev(&mut self, cost: usize, ev: Ev) {
        self.pos += cost as u64;
        self.evs.lock().unwrap().push(ev);
    }
}

impl MutationSink for RecTap {
    fn room(&self) -> usize {
        1 << 30
    }
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.pos += record_cost(key.len(), value.len()) as u64;
        self.evs
            .lock()
            .unwrap()
            .push(Ev::Put(key.to_vec(), value.to_vec()));
    }
    fn delete(&mut self, key: &[u8]) {
        self.pos += record_cost(key.len(), 0) as u64;
        self.evs.lock().unwrap().push(Ev::Del(key.to_vec()));
    }
    fn group(&mut self, bytes: u32) {
        self.pos += kvrepl::GROUP_RECORD_LEN as u64;
        self.evs.lock().unwrap().push(Ev::Group(bytes));
    }
    fn wait_for(&mut self, ring: u32, position: u64) {
        self.pos += kvrepl::log::WAIT_LEN as u64;
        self.evs.lock().unwrap().push(Ev::Wait(ring, position));
    }
    fn stream_put(&mut self, key: &[u8], value: &[u8]) {
        self.ev(
            record_cost(key.len(), value.len()),
            Ev::Put(key.to_vec(), value.to_vec()),
        );
    }
    fn stream_delete(&mut self, key: &[u8]) {
        self.ev(record_cost(key.len(), 0), Ev::Del(key.to_vec()));
    }
    // The record is in the coordinator's stream.
    fn local_put(&mut self, _key: &[u8], _value: &[u8]) {}
    fn local_delete(&mut self, _key: &[u8]) {}
    fn position(&self) -> u64 {
        self.pos
    }
}

fn part(k: &[u8]) -> u32 {
    partition_of_hash(kvengine::key_hash(k), 2)
}

/// `n` keys `{prefix}{i}` of partition `p`.
fn keys_of(prefix: &str, p: u32, n: usize) -> Vec<Vec<u8>> {
    (0..)
        .map(|i| format!("{prefix}{i}").into_bytes())
        .filter(|k| part(k) == p)
        .take(n)
        .collect()
}

fn tx(ops: &[KvOp<'_>], id: u32) -> Vec<u8> {
    let mut buf = vec![0u8; 1400];
    let n = write_tx(&mut buf, id, &[], ops).unwrap();
    buf.truncate(n);
    buf
}

fn add(key: &[u8], delta: u64) -> KvOp<'_> {
    KvOp::UpdateS2S {
        key,
        atomic: Atomic::from_attr(func::FETCH_ADD, 0x03).unwrap(),
        param: delta,
        param2: 0,
    }
}

fn u64_of(v: &[u8]) -> u64 {
    u64::from_le_bytes(v[..8].try_into().unwrap())
}

/// What one thread counted.
#[derive(Default, Debug)]
struct Tally {
    cross_committed: u64,
    plain_adds: u64,
    audits: u64,
    optimistic: u64,
    conflicts: u64,
    coordinated: u64,
}

/// Thread `p`: transfers between an account of each partition (also adding 1 to the
/// other partition's counter), audits of all accounts, and plain fetch-adds on its
/// own counter, in a seeded mix.
fn drive(
    mut s: Server,
    p: u32,
    accounts: Vec<Vec<u8>>,
    counters: [Vec<u8>; 2],
    done: Arc<AtomicUsize>,
) -> (Server, Tally) {
    let st = WorkerStats::default();
    let qpn = 18 - p; // 18 % 2 = 0, 17 % 2 = 1: this partition's QP
    let c = connect(&mut s, qpn, RKEY);
    let mut t = Tally::default();
    let mut rng = 0x9e37_79b9_u64 ^ u64::from(p);
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut n_req = 0u32;
    for n in 0..ROUNDS {
        s.park_point();
        let r = next();
        let frame = match r % 4 {
            // An optimistic transfer: read two accounts, then move 1 if unchanged.
            1 => {
                let a = &accounts[(next() as usize) % ACCOUNTS];
                let b = loop {
                    let b = &accounts[(next() as usize) % ACCOUNTS];
                    if b != a {
                        break b;
                    }
                };
                let out = run(
                    &mut s,
                    &st,
                    &[c.raw_request(&tx(&[KvOp::Get { key: a }, KvOp::Get { key: b }], n), n_req)],
                );
                n_req += 1;
                let res = results(&out[0]);
                let (va, vb) = (res[1].1.clone(), res[2].1.clone());
                let (na, nb) = (
                    (u64_of(&va).wrapping_sub(1)).to_le_bytes(),
                    (u64_of(&vb) + 1).to_le_bytes(),
                );
                let conds = [
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
                ];
                let ops = [
                    KvOp::Get { key: a },
                    KvOp::Get { key: b },
                    KvOp::Put { key: a, value: &na },
                    KvOp::Put { key: b, value: &nb },
                ];
                let mut buf = vec![0u8; 1400];
                let len = write_tx(&mut buf, n, &conds, &ops).unwrap();
                c.raw_request(&buf[..len], n_req)
            }
            // A transfer: one account of each partition, and the other's counter.
            0 => {
                let a = &accounts[(next() as usize) % ACCOUNTS];
                let b = loop {
                    let b = &accounts[(next() as usize) % ACCOUNTS];
                    if part(b) != part(a) {
                        break b;
                    }
                };
                let other = &counters[1 - p as usize];
                let ops = [add(a, u64::MAX), add(b, 1), add(other, 1)];
                c.raw_request(&tx(&ops, n), n_req)
            }
            // An audit: every account in one read-only transaction.
            2 => {
                let ops: Vec<KvOp<'_>> = accounts.iter().map(|k| KvOp::Get { key: k }).collect();
                c.raw_request(&tx(&ops, n), n_req)
            }
            // A plain request on this partition's counter.
            _ => c.request(&[add(&counters[p as usize], 1)], n, n_req),
        };
        let out = run(&mut s, &st, &[frame]);
        n_req += 1;
        assert_eq!(out.len(), 1, "one response per request");
        let res = results(&out[0]);
        match r % 4 {
            1 => {
                if res[0].0 == Status::Ok {
                    t.optimistic += 1;
                } else {
                    t.conflicts += 1;
                }
            }
            0 => {
                assert_eq!(res[0].0, Status::Ok, "transfer {n}: {res:?}");
                t.cross_committed += 1;
            }
            2 => {
                assert_eq!(res[0].0, Status::Ok, "audit {n}");
                let total: u64 = res[1..]
                    .iter()
                    .map(|(_, v)| u64_of(v))
                    .fold(0, u64::wrapping_add);
                assert_eq!(total, START * ACCOUNTS as u64, "audit {n} of partition {p}");
                t.audits += 1;
            }
            _ => {
                assert_eq!(res[0].0, Status::Ok);
                t.plain_adds += 1;
            }
        }
    }
    // Stay parkable until the other thread is done too.
    done.fetch_add(1, Ordering::AcqRel);
    while done.load(Ordering::Acquire) < 2 {
        s.park_point();
        std::thread::yield_now();
    }
    s.leave_partition_table();
    t.coordinated = st.tx_cross_partition.get();
    assert!(t.coordinated >= t.cross_committed + t.audits);
    (s, t)
}

fn get(s: &mut Server, k: &[u8]) -> Option<Vec<u8>> {
    let mut out = [0u8; 64];
    let n = s.engine_mut().get(k, &mut out).ok()?;
    Some(out[..n].to_vec())
}

#[test]
fn transfers_across_partitions_from_two_workers_keep_every_invariant() {
    let table = PartitionTable::new(2).unwrap();
    let accounts: Vec<Vec<u8>> = keys_of("acct", 0, ACCOUNTS / 2)
        .into_iter()
        .chain(keys_of("acct", 1, ACCOUNTS / 2))
        .collect();
    let counters = [
        keys_of("ctr", 0, 1).remove(0),
        keys_of("ctr", 1, 1).remove(0),
    ];
    let mut servers = Vec::new();
    let mut taps = Vec::new();
    for p in 0..2u32 {
        let mut s = partition_server(p, 2, &table);
        for k in accounts.iter().filter(|k| part(k) == p) {
            s.engine_mut().put(k, &START.to_le_bytes());
        }
        s.engine_mut()
            .put(&counters[p as usize], &0u64.to_le_bytes());
        let evs = Arc::new(Mutex::new(Vec::new()));
        s.set_mutation_sink(Some(Box::new(RecTap {
            evs: evs.clone(),
            pos: 0,
        })));
        taps.push(evs);
        servers.push(s);
    }
    // The contents before the taps saw anything.
    let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
    for k in &accounts {
        model.insert(k.clone(), START.to_le_bytes().to_vec());
    }
    for k in &counters {
        model.insert(k.clone(), 0u64.to_le_bytes().to_vec());
    }
    let done = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = servers
        .into_iter()
        .enumerate()
        .map(|(p, s)| {
            let (a, c, d) = (accounts.clone(), counters.clone(), done.clone());
            std::thread::spawn(move || drive(s, p as u32, a, c, d))
        })
        .collect();
    let mut ends: Vec<(Server, Tally)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let t1 = ends.pop().unwrap();
    let t0 = ends.pop().unwrap();
    let (mut s0, t0) = t0;
    let (mut s1, t1) = t1;
    assert!(
        t0.cross_committed > 500 && t1.cross_committed > 500,
        "{t0:?} {t1:?}"
    );
    assert!(t0.audits > 100 && t1.audits > 100);

    // The total, and no update lost on either counter: each counts its own plain
    // adds and the other partition's transfers.
    let mut total = 0u64;
    for k in &accounts {
        let s = if part(k) == 0 { &mut s0 } else { &mut s1 };
        total = total.wrapping_add(u64_of(&get(s, k).unwrap()));
    }
    assert_eq!(total, START * ACCOUNTS as u64);
    assert_eq!(
        u64_of(&get(&mut s0, &counters[0]).unwrap()),
        t0.plain_adds + t1.cross_committed
    );
    assert_eq!(
        u64_of(&get(&mut s1, &counters[1]).unwrap()),
        t1.plain_adds + t0.cross_committed
    );

    // Each tap: its own partition's keys, and the other's only inside a group (a
    // transaction it coordinated); each group covering the records after it; at
    // least one wait per coordinated transaction, always for the other ring.
    let evs: Vec<Vec<Ev>> = taps.iter().map(|t| t.lock().unwrap().clone()).collect();
    let cost = |e: &Ev| match e {
        Ev::Put(k, v) => record_cost(k.len(), v.len()) as u64,
        Ev::Del(k) => record_cost(k.len(), 0) as u64,
        Ev::Group(_) => kvrepl::GROUP_RECORD_LEN as u64,
        Ev::Wait(..) => kvrepl::log::WAIT_LEN as u64,
    };
    for (p, evs) in evs.iter().enumerate() {
        let (mut waits, mut foreign, mut group_left) = (0u64, 0u64, 0u64);
        for e in evs {
            match e {
                Ev::Put(k, _) | Ev::Del(k) => {
                    if part(k) != p as u32 {
                        assert!(group_left > 0, "another partition's key outside a group");
                        foreign += 1;
                    }
                    group_left = group_left.saturating_sub(cost(e));
                }
                Ev::Group(bytes) => {
                    assert_eq!(group_left, 0, "a group inside a group");
                    group_left = u64::from(*bytes);
                }
                Ev::Wait(ring, _) => {
                    assert_eq!(group_left, 0, "a wait inside a group");
                    assert_eq!(*ring, 1 - p as u32);
                    waits += 1;
                }
            }
        }
        assert_eq!(group_left, 0, "a group covers exactly the records after it");
        let mine = if p == 0 { &t0 } else { &t1 };
        assert!(
            waits >= mine.coordinated,
            "one wait per coordinated transaction"
        );
        assert!(
            foreign >= mine.cross_committed,
            "{foreign} records of the other partition"
        );
    }
    // Merged as the replication lcore drains the rings: a wait holds its tap until
    // the other tap was taken up to the position named; replayed in that order, the
    // streams give the final contents.
    let (mut at, mut pos) = ([0usize; 2], [0u64; 2]);
    while at[0] < evs[0].len() || at[1] < evs[1].len() {
        let mut moved = false;
        for p in 0..2 {
            while let Some(e) = evs[p].get(at[p]) {
                match e {
                    Ev::Wait(ring, w) if pos[*ring as usize] < *w => break,
                    Ev::Put(k, v) => {
                        model.insert(k.clone(), v.clone());
                    }
                    Ev::Del(k) => {
                        model.remove(k);
                    }
                    Ev::Group(_) | Ev::Wait(..) => {}
                }
                pos[p] += cost(e);
                at[p] += 1;
                moved = true;
            }
        }
        assert!(
            moved,
            "the waits of the two taps wait for each other at {at:?}"
        );
    }
    for (k, v) in &model {
        let s = if part(k) == 0 { &mut s0 } else { &mut s1 };
        assert_eq!(get(s, k).as_ref(), Some(v), "key {k:?}");
    }
}

#[test]
fn without_a_table_or_with_a_worker_gone_a_cross_partition_transaction_aborts() {
    let a = keys_of("k", 0, 1).remove(0);
    let b = keys_of("k", 1, 1).remove(0);
    let ops = [
        KvOp::Put {
            key: &a,
            value: b"1",
        },
        KvOp::Put {
            key: &b,
            value: b"2",
        },
    ];
    let st = WorkerStats::default();

    // No table: CROSS_PARTITION at the first foreign key, nothing written.
    let mut s = Server::new(identity(), &[(18, RKEY)], engine(1 << 20));
    s.set_partition(0, 2);
    let c = connect(&mut s, 18, RKEY);
    let res = results(&run(&mut s, &st, &[c.raw_request(&tx(&ops, 1), 0)])[0]);
    let ab = TxAbort::decode(&res[0].1).unwrap();
    assert_eq!(
        (ab.reason, ab.op, ab.status),
        (AbortReason::CrossPartition, 1, Status::WrongPartition)
    );
    assert_eq!(get(&mut s, &a), None);

    // A table whose other worker has stopped: TRY_AGAIN, nothing written.
    let table = PartitionTable::new(2).unwrap();
    let mut other = Server::new(identity(), &[(17, RKEY)], engine(1 << 20));
    other.set_partition(1, 2);
    other.set_partition_table(table.clone()).unwrap();
    other.leave_partition_table();
    s.set_partition_table(table).unwrap();
    let res = results(&run(&mut s, &st, &[c.raw_request(&tx(&ops, 2), 1)])[0]);
    let ab = TxAbort::decode(&res[0].1).unwrap();
    assert_eq!(
        (ab.reason, ab.op, ab.status),
        (AbortReason::CrossPartition, 255, Status::TryAgain)
    );
    assert_eq!((get(&mut s, &a), get(&mut other, &b)), (None, None));
    assert!(res[1..].iter().all(|(s, _)| *s == Status::Aborted));
}
