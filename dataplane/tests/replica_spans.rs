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

use common::{engine, identity, RKEY};
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

/// A seeded xorshift: the stream is the same in every run.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
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
        let mut s = Server::new(identity(), &[(18 - p, RKEY)], engine(4 << 20));
        s.set_partition(p, 2);
        s.set_partition_table(table.clone()).unwrap();
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
