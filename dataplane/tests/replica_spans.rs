//! A replica with two workers applying a stream of transactions that span both of
//! its partitions (docs/REPLICATION.md §2): two real servers on two threads sharing
//! a `PartitionTable`, each draining its apply ring (`repl::apply`) fed by the
//! replication lcore's routing (`repl::group_route::Route`) on the test's thread.
//! Meanwhile each worker audits every account with the other parked, as a
//! read-only transaction over both partitions does. Checked: every audit sees the
//! bank total (no transfer half applied, whichever partition applies first), and at
//! the end both engines hold exactly the model's balances (every key's records in
//! stream order, across the transactions and the plain records between them).

mod common;

use common::{partition_server, Rng};
use dataplane::repl::apply::{apply_span, Applier, ApplyStats};
use dataplane::repl::group_route::{GroupBuf, Route};
use dataplane::server::{PartitionTable, Server};
use kvrepl::applier::Sink;
use kvrepl::log::log_ring;
use kvrepl::Record;
use kvwire::partition::partition_of_hash;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

const ACCOUNTS: usize = 16;
const START: u64 = 1000;
const TRANSFERS: usize = 20_000;

fn part(k: &[u8]) -> u32 {
    partition_of_hash(kvengine::key_hash(k), 2)
}

fn balance(s: &mut Server, k: &[u8]) -> u64 {
    let mut out = [0u8; 16];
    match s.engine_mut().get(k, &mut out) {
        Ok(8) => u64::from_le_bytes(out[..8].try_into().unwrap()),
        other => panic!("account {k:?}: {other:?}"),
    }
}

/// What the test's thread and the two workers share.
struct Shared {
    accounts: Vec<Vec<u8>>,
    /// The whole stream was routed.
    fed: AtomicBool,
    /// Workers done applying.
    done: AtomicUsize,
    /// Each worker's apply counters.
    stats: Vec<Arc<ApplyStats>>,
    /// Each ring's bytes routed so far.
    pushed: [AtomicU64; 2],
}

/// Worker `p`: applies its ring (a spanning transaction with the other worker
/// parked), audits now and then; returns its server, how many audits it made and
/// how many saw a wrong total (counted, not asserted here: a worker that panicked
/// would leave the other waiting to park it).
fn work(mut s: Server, mut a: Applier, p: usize, sh: Arc<Shared>) -> (Server, u64, u64) {
    let Shared {
        accounts,
        fed,
        done,
        stats,
        pushed,
    } = &*sh;
    let (mut audits, mut wrong) = (0u64, 0u64);
    let mut i = 0u64;
    loop {
        s.park_point();
        {
            let (e, t, mut r) = s.apply_parts();
            a.apply_with(e, t, 64, &mut r);
        }
        if let Some(parts) = a.pending_span() {
            s.with_parked(parts, |me, others| apply_span(&mut a, me, others));
        }
        i += 1;
        if i.is_multiple_of(4) {
            let total = s
                .with_parked(0b11, |me, mut others| {
                    accounts
                        .iter()
                        .map(|k| match others[part(k) as usize].as_deref_mut() {
                            Some(o) => balance(o, k),
                            None => balance(me, k),
                        })
                        .sum::<u64>()
                })
                .unwrap();
            wrong += u64::from(total != START * ACCOUNTS as u64);
            audits += 1;
        }
        if fed.load(Ordering::Acquire)
            && stats[p].consumed.load(Ordering::Acquire) == pushed[p].load(Ordering::Acquire)
        {
            break;
        }
        std::thread::yield_now();
    }
    done.fetch_add(1, Ordering::AcqRel);
    while done.load(Ordering::Acquire) < 2 {
        s.park_point();
        std::thread::yield_now();
    }
    s.leave_partition_table();
    (s, audits, wrong)
}

#[test]
fn a_two_worker_replica_applies_each_spanning_transaction_at_once_and_in_order() {
    let table = PartitionTable::new(2).unwrap();
    let accounts: Vec<Vec<u8>> = (0..ACCOUNTS)
        .map(|i| format!("acct{i}").into_bytes())
        .collect();
    assert!(accounts.iter().any(|k| part(k) == 0) && accounts.iter().any(|k| part(k) == 1));
    let mut model = [START; ACCOUNTS];
    let (mut producers, mut workers) = (Vec::new(), Vec::new());
    let all: Vec<Arc<ApplyStats>> = (0..2).map(|_| Arc::new(ApplyStats::default())).collect();
    for p in 0..2u32 {
        let mut s = partition_server(p, 2, &table);
        for k in accounts.iter().filter(|k| part(k) == p) {
            s.engine_mut().put(k, &START.to_le_bytes());
        }
        let (prod, cons) = log_ring(256 << 10);
        let mut a = Applier::new(cons, all[p as usize].clone());
        a.set_peers(all.clone());
        producers.push(prod);
        workers.push((s, a));
    }
    let sh = Arc::new(Shared {
        accounts,
        fed: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        stats: all.clone(),
        pushed: Default::default(),
    });
    let accounts = &sh.accounts;
    let handles: Vec<_> = workers
        .into_iter()
        .enumerate()
        .map(|(p, (s, a))| {
            let sh = sh.clone();
            std::thread::spawn(move || work(s, a, p, sh))
        })
        .collect();

    // The stream: transfers as groups of two post-images (both partitions or one),
    // some of three (a transfer and a plain rewrite of a third account), and plain
    // records of single accounts between them (their value unchanged).
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut group = GroupBuf::default();
    let mut vals: Vec<[u8; 8]> = Vec::new();
    for _ in 0..TRANSFERS {
        // Room for the next transaction in both rings (as the replica's RNR check).
        while producers.iter().any(|p| p.free_bytes() < 4096) {
            std::thread::yield_now();
        }
        let from = rng.below(ACCOUNTS as u64) as usize;
        let to = (from + 1 + rng.below(ACCOUNTS as u64 - 1) as usize) % ACCOUNTS;
        let amount = rng.below(model[from].min(10) + 1);
        model[from] -= amount;
        model[to] += amount;
        let third = (rng.below(10) < 3).then(|| rng.below(ACCOUNTS as u64) as usize);
        vals.clear();
        let mut keys = vec![from, to];
        keys.extend(third);
        for &k in &keys {
            vals.push(model[k].to_le_bytes());
        }
        let recs: Vec<Record<'_>> = keys
            .iter()
            .zip(&vals)
            .map(|(&k, v)| Record::Put {
                key: &accounts[k],
                value: v,
            })
            .collect();
        let bytes: usize = recs.iter().map(Record::encoded_len).sum();
        let mut route = Route {
            rings: &mut producers,
            log: None,
            relay: None,
            group: &mut group,
        };
        route
            .apply(Record::Group {
                bytes: bytes as u32,
            })
            .unwrap();
        for r in recs {
            route.apply(r).unwrap();
        }
        if rng.below(2) == 0 {
            let k = rng.below(ACCOUNTS as u64) as usize;
            let v = model[k].to_le_bytes();
            route
                .apply(Record::Put {
                    key: &accounts[k],
                    value: &v,
                })
                .unwrap();
        }
        for (p, prod) in producers.iter().enumerate() {
            sh.pushed[p].store(prod.pushed(), Ordering::Release);
        }
    }
    sh.fed.store(true, Ordering::Release);
    let mut ends: Vec<(Server, u64, u64)> =
        handles.into_iter().map(|h| h.join().unwrap()).collect();
    for (p, (_, audits, wrong)) in ends.iter().enumerate() {
        assert!(*audits > 10, "worker {p}: {audits} audits");
        assert_eq!(
            *wrong, 0,
            "worker {p}: {wrong} of {audits} audits saw a wrong total"
        );
    }
    // About half the transfers span both partitions (coordinated by the lowest).
    let spans: u64 = all.iter().map(|s| s.spans.load(Ordering::Relaxed)).sum();
    assert!(
        spans > TRANSFERS as u64 / 4,
        "{spans} spanning transactions"
    );
    assert!(all.iter().all(|s| s.failed.load(Ordering::Relaxed) == 0));
    for (i, k) in accounts.iter().enumerate() {
        assert_eq!(
            balance(&mut ends[part(k) as usize].0, k),
            model[i],
            "account {i}"
        );
    }
}

mod routing_model {
    //! The routing protocol alone, against a sequential model: random streams of
    //! single records and transactions routed to 1–4 rings, drained by simulated
    //! workers in a random interleaving with the appliers' rules (a WAIT holds its
    //! ring until the named ring was consumed that far; a transaction after a GROUP
    //! is taken whole; after a SPAN, applied whole to every partition it names).
    //! Checked: the drain never deadlocks, no key ever goes back to an older value
    //! (values are stream sequence numbers), a record outside a SPAN is in its
    //! owner's ring, and the end equals the model.
    use super::*;
    use kvrepl::log::{LogConsumer, LogItem};
    use proptest::prelude::*;
    use std::collections::HashMap;

    /// The item at the head of a ring, copied out.
    enum Head {
        Wait(usize, u64),
        Span(u32),
        Group(u32),
        Put(Vec<u8>, u64),
    }

    fn head(ring: &mut LogConsumer) -> Option<Head> {
        let mut h = None;
        ring.drain(1, |it| {
            h = Some(match it {
                LogItem::Wait { ring, position } => Head::Wait(ring as usize, position),
                LogItem::Span { bytes, .. } => Head::Span(bytes),
                LogItem::Live(b) => match Record::decode(b).unwrap().0 {
                    Record::Group { bytes } => Head::Group(bytes),
                    Record::Put { key, value } => {
                        Head::Put(key.to_vec(), u64::from_le_bytes(value.try_into().unwrap()))
                    }
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            });
            false
        })
        .unwrap();
        h
    }

    fn take(ring: &mut LogConsumer) {
        ring.drain(1, |_| true).unwrap();
    }

    fn owner(k: &[u8], n: usize) -> usize {
        partition_of_hash(kvengine::key_hash(k), n as u32) as usize
    }

    fn apply(kv: &mut [HashMap<Vec<u8>, u64>], k: Vec<u8>, v: u64) {
        let p = owner(&k, kv.len());
        let old = kv[p].insert(k.clone(), v);
        assert!(
            old.is_none_or(|o| o < v),
            "key {k:?} went back from {old:?} to {v}"
        );
    }

    /// One step of worker `w`; returns whether it moved.
    fn step(rings: &mut [LogConsumer], kv: &mut [HashMap<Vec<u8>, u64>], w: usize) -> bool {
        let n = rings.len();
        let Some(h) = head(&mut rings[w]) else {
            return false;
        };
        let (bytes, span) = match h {
            Head::Wait(r, pos) => {
                if rings[r].popped() < pos {
                    return false;
                }
                take(&mut rings[w]);
                return true;
            }
            Head::Put(k, v) => {
                assert_eq!(
                    owner(&k, n),
                    w,
                    "a record outside a span in its owner's ring"
                );
                take(&mut rings[w]);
                apply(kv, k, v);
                return true;
            }
            Head::Span(bytes) => {
                take(&mut rings[w]);
                assert!(matches!(head(&mut rings[w]), Some(Head::Group(b)) if b == bytes));
                (bytes, true)
            }
            Head::Group(bytes) => (bytes, false),
        };
        take(&mut rings[w]);
        let mut left = bytes as usize;
        while left > 0 {
            let Some(Head::Put(k, v)) = head(&mut rings[w]) else {
                panic!("not a record inside a group");
            };
            left -= Record::Put {
                key: &k,
                value: &[0; 8],
            }
            .encoded_len();
            take(&mut rings[w]);
            assert!(
                span || owner(&k, n) == w,
                "a group outside a span in one partition"
            );
            apply(kv, k, v);
        }
        true
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn routed_streams_drain_in_order_without_deadlock(
            n in 1usize..=4,
            txs in proptest::collection::vec(proptest::collection::vec(0u8..24, 1..6), 1..120),
            order in proptest::collection::vec(0usize..4, 0..4000),
        ) {
            let (mut producers, mut rings) = (Vec::new(), Vec::new());
            for _ in 0..n {
                let (p, c) = log_ring(1 << 20);
                producers.push(p);
                rings.push(c);
            }
            let mut kv = vec![HashMap::new(); n];
            let mut group = GroupBuf::default();
            let mut model = HashMap::new();
            let mut seq = 0u64;
            for keys in &txs {
                let vals: Vec<(Vec<u8>, [u8; 8])> = keys
                    .iter()
                    .map(|k| {
                        seq += 1;
                        (format!("k{k}").into_bytes(), seq.to_le_bytes())
                    })
                    .collect();
                let mut route = Route {
                    rings: &mut producers,
                    log: None,
                    relay: None,
                    group: &mut group,
                };
                if vals.len() > 1 {
                    let bytes: usize = vals
                        .iter()
                        .map(|(k, v)| Record::Put { key: k, value: v }.encoded_len())
                        .sum();
                    route.apply(Record::Group { bytes: bytes as u32 }).unwrap();
                }
                for (k, v) in &vals {
                    route.apply(Record::Put { key: k, value: v }).unwrap();
                    model.insert(k.clone(), u64::from_le_bytes(*v));
                }
            }
            // Drain in the given interleaving, then round robin to the end.
            for &w in &order {
                step(&mut rings, &mut kv, w % n);
            }
            while rings.iter().any(|r| r.pending_bytes() > 0) {
                let mut moved = false;
                for w in 0..n {
                    moved |= step(&mut rings, &mut kv, w);
                }
                prop_assert!(moved, "the rings' waits wait for each other");
            }
            let got: HashMap<Vec<u8>, u64> = kv.into_iter().flatten().collect();
            prop_assert_eq!(got, model);
        }
    }
}
