//! The executor against a model: random transactions (GET with conditions, PUT,
//! DELETE, 8-byte fetch-add) on a few keys, run by `TxExecutor` on a HashMap store and
//! by a plain sequential interpreter on a copy of the model; results, outcome and the
//! store after each transaction must agree. Plus the rollback when the store fails
//! half way through a commit, and the limits.

use kvops::FunctionRegistry;
use kvtx::{Outcome, TxExecutor, TxStore};
use kvwire::payload::{write_tx_header, AbortReason, CondKind, Condition, TxReader, MAX_TX_OPS};
use kvwire::{func, Atomic, BatchWriter, KvOp, Status};
use proptest::prelude::*;
use std::collections::HashMap;

/// A HashMap store that can be told to fail its `fail_after`-th put from now.
#[derive(Default, Clone)]
struct MapStore {
    map: HashMap<Vec<u8>, Vec<u8>>,
    fail_after: Option<usize>,
}

impl TxStore for MapStore {
    fn get(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        let v = self.map.get(key).ok_or(Status::NotFound)?;
        out.get_mut(..v.len())
            .ok_or(Status::ValueTooLarge)?
            .copy_from_slice(v);
        Ok(v.len())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Status {
        if let Some(n) = &mut self.fail_after {
            if *n == 0 {
                self.fail_after = None;
                return Status::OutOfMemory;
            }
            *n -= 1;
        }
        self.map.insert(key.to_vec(), value.to_vec());
        Status::Ok
    }
    fn delete(&mut self, key: &[u8]) -> Status {
        match self.map.remove(key) {
            Some(_) => Status::Ok,
            None => Status::NotFound,
        }
    }
    fn max_value_len(&self) -> usize {
        4096
    }
}

#[derive(Clone, Debug)]
enum MOp {
    Get(u8, Option<Option<Vec<u8>>>),
    Put(u8, Vec<u8>),
    Del(u8),
    Add(u8, u64),
    Cad(u8, Vec<u8>),
}

fn key(k: u8) -> Vec<u8> {
    format!("key{k}").into_bytes()
}

fn encode(ops: &[MOp]) -> Vec<u8> {
    let keys: Vec<Vec<u8>> = (0..8).map(key).collect();
    let mut conds = Vec::new();
    for (i, o) in ops.iter().enumerate() {
        if let MOp::Get(_, Some(c)) = o {
            conds.push(Condition {
                op: i as u8,
                kind: if c.is_some() {
                    CondKind::Equals
                } else {
                    CondKind::Absent
                },
                value: c.as_deref().unwrap_or(&[]),
            });
        }
    }
    let mut buf = vec![0u8; 16384];
    let n = write_tx_header(&mut buf, &conds).unwrap();
    let mut w = BatchWriter::new(&mut buf[n..], 9).unwrap();
    for o in ops {
        let op = match o {
            MOp::Get(k, _) => KvOp::Get {
                key: &keys[*k as usize],
            },
            MOp::Put(k, v) => KvOp::Put {
                key: &keys[*k as usize],
                value: v,
            },
            MOp::Del(k) => KvOp::Delete {
                key: &keys[*k as usize],
            },
            MOp::Add(k, d) => KvOp::UpdateS2S {
                key: &keys[*k as usize],
                atomic: Atomic::from_attr(func::FETCH_ADD, 0x03).unwrap(),
                param: *d,
                param2: 0,
            },
            MOp::Cad(k, v) => KvOp::CompareDelete {
                key: &keys[*k as usize],
                expected: v,
            },
        };
        w.push(&op).unwrap();
    }
    let m = w.finish();
    buf.truncate(n + m);
    buf
}

type Map = HashMap<Vec<u8>, Vec<u8>>;
type Results = Vec<(Status, Vec<u8>)>;

/// The reference: ops in order on a copy; (committed?, results, new state).
fn model(state: &Map, ops: &[MOp]) -> (bool, Results, Map) {
    let mut s = state.clone();
    let mut res = Vec::new();
    let mut ok = true;
    for o in ops {
        match o {
            MOp::Get(k, c) => {
                let cur = s.get(&key(*k)).cloned();
                res.push(match &cur {
                    Some(v) => (Status::Ok, v.clone()),
                    None => (Status::NotFound, vec![]),
                });
                if let Some(want) = c {
                    if *want != cur {
                        ok = false;
                        break;
                    }
                }
            }
            MOp::Put(k, v) => {
                s.insert(key(*k), v.clone());
                res.push((Status::Ok, vec![]));
            }
            MOp::Del(k) => {
                let st = if s.remove(&key(*k)).is_some() {
                    Status::Ok
                } else {
                    Status::NotFound
                };
                res.push((st, vec![]));
            }
            MOp::Add(k, d) => match s.get(&key(*k)).cloned() {
                Some(v) if v.len() == 8 => {
                    let old = u64::from_le_bytes(v[..].try_into().unwrap());
                    s.insert(key(*k), old.wrapping_add(*d).to_le_bytes().to_vec());
                    res.push((Status::Ok, v));
                }
                _ => {
                    ok = false;
                    break;
                }
            },
            // A missing key fails the op, which aborts the transaction.
            MOp::Cad(k, want) => match s.get(&key(*k)).cloned() {
                Some(v) => {
                    if v == *want {
                        s.remove(&key(*k));
                    }
                    res.push((Status::Ok, v));
                }
                None => {
                    ok = false;
                    break;
                }
            },
        }
    }
    if ok {
        (true, res, s)
    } else {
        (false, res, state.clone())
    }
}

fn mop() -> impl Strategy<Value = MOp> {
    let val = prop_oneof![
        prop::collection::vec(any::<u8>(), 8),
        prop::collection::vec(any::<u8>(), 0..20),
    ];
    prop_oneof![
        (0..6u8).prop_map(|k| MOp::Get(k, None)),
        (0..6u8, prop::option::of(prop::collection::vec(0..2u8, 8)))
            .prop_map(|(k, c)| MOp::Get(k, Some(c))),
        (0..6u8, val).prop_map(|(k, v)| MOp::Put(k, v)),
        (0..6u8).prop_map(MOp::Del),
        (0..6u8, 0..5u64).prop_map(|(k, d)| MOp::Add(k, d)),
        (
            0..6u8,
            prop::sample::select(vec![vec![0u8; 8], vec![1u8; 8]])
        )
            .prop_map(|(k, v)| MOp::Cad(k, v)),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn transactions_match_the_sequential_model(txs in prop::collection::vec(prop::collection::vec(mop(), 1..12), 1..30)) {
        let reg = FunctionRegistry::new();
        let mut ex = TxExecutor::new();
        let mut store = MapStore::default();
        // Counters that fetch-adds can hit, and values conditions can match.
        for k in 0..6u8 {
            store.map.insert(key(k), vec![k % 2; 8]);
        }
        for ops in &txs {
            let (ok, want, next) = model(&store.map, ops);
            let p = encode(ops);
            let r = TxReader::new(&p).unwrap();
            let out = ex.execute(&r, &mut store, &reg, |_| true, Status::Ok);
            prop_assert_eq!(matches!(out, Outcome::Committed), ok, "{:?}", ops);
            prop_assert_eq!(&store.map, &next);
            let got: Vec<(Status, Vec<u8>)> = ex.results().map(|(s, v)| (s, v.to_vec())).collect();
            prop_assert_eq!(got.len(), ops.len());
            if ok {
                prop_assert_eq!(&got, &want);
                let mut changed: HashMap<Vec<u8>, Option<Vec<u8>>> = HashMap::new();
                for (k, v) in ex.post_images() {
                    changed.insert(k.to_vec(), v.map(<[u8]>::to_vec));
                }
                for (k, v) in &changed {
                    prop_assert_eq!(next.get(k), v.as_ref());
                }
            } else {
                // Reads keep what they read; everything else is ABORTED.
                for (i, (s, v)) in got.iter().enumerate() {
                    match (&ops[i], want.get(i)) {
                        (MOp::Get(..), Some(w)) => prop_assert_eq!((s, v), (&w.0, &w.1)),
                        _ => prop_assert_eq!(*s, Status::Aborted),
                    }
                }
            }
        }
    }
}

#[test]
fn a_store_failure_during_commit_undoes_every_write() {
    let reg = FunctionRegistry::new();
    let mut ex = TxExecutor::new();
    let mut store = MapStore::default();
    store.map.insert(key(0), 5u64.to_le_bytes().to_vec());
    store.map.insert(key(2), b"keep".to_vec());
    let before = store.map.clone();
    let ops = [
        MOp::Add(0, 1),
        MOp::Del(2),
        MOp::Put(1, b"new".to_vec()),
        MOp::Put(3, b"also".to_vec()),
    ];
    // The third put of the commit fails: the first two and the delete are undone.
    store.fail_after = Some(2);
    let p = encode(&ops);
    let out = ex.execute(
        &TxReader::new(&p).unwrap(),
        &mut store,
        &reg,
        |_| true,
        Status::Ok,
    );
    let Outcome::Aborted(a) = out else {
        panic!("committed")
    };
    assert_eq!(
        (a.reason, a.status),
        (AbortReason::OpFailed, Status::OutOfMemory)
    );
    assert_eq!(store.map, before);
    // The same transaction commits when the store has room.
    let out = ex.execute(
        &TxReader::new(&p).unwrap(),
        &mut store,
        &reg,
        |_| true,
        Status::Ok,
    );
    assert_eq!(out, Outcome::Committed);
    assert_eq!(store.map[&key(0)], 6u64.to_le_bytes().to_vec());
    assert!(!store.map.contains_key(&key(2)));
    assert_eq!(ex.post_images().count(), 4);
}

#[test]
fn refused_writes_foreign_keys_and_bad_ops_abort_with_their_reason() {
    let reg = FunctionRegistry::new();
    let mut ex = TxExecutor::new();
    let mut store = MapStore::default();
    store.map.insert(key(1), b"v".to_vec());
    let before = store.map.clone();
    let run = |ex: &mut TxExecutor, store: &mut MapStore, ops: &[MOp], own: u8, writes: Status| {
        let p = encode(ops);
        let r = TxReader::new(&p).unwrap();
        let own_key = key(own);
        ex.execute(&r, store, &reg, |k| k <= &own_key[..], writes)
    };
    // A replica: a transaction with a write is refused, a read-only one runs.
    let out = run(
        &mut ex,
        &mut store,
        &[MOp::Get(1, None), MOp::Put(1, b"x".to_vec())],
        9,
        Status::NotMaster,
    );
    assert!(
        matches!(out, Outcome::Aborted(a) if a.reason == AbortReason::WritesRefused && a.status == Status::NotMaster && a.op == 1)
    );
    let out = run(
        &mut ex,
        &mut store,
        &[MOp::Get(1, None)],
        9,
        Status::NotMaster,
    );
    assert_eq!(out, Outcome::Committed);
    assert_eq!(ex.results().next().unwrap(), (Status::Ok, &b"v"[..]));
    // A key of another partition.
    let out = run(
        &mut ex,
        &mut store,
        &[MOp::Put(1, b"x".to_vec()), MOp::Put(5, b"y".to_vec())],
        3,
        Status::Ok,
    );
    assert!(
        matches!(out, Outcome::Aborted(a) if a.reason == AbortReason::CrossPartition && a.op == 1)
    );
    // A fetch-add of a value that is not 8 bytes fails the op.
    let out = run(
        &mut ex,
        &mut store,
        &[MOp::Put(2, b"z".to_vec()), MOp::Add(1, 1)],
        9,
        Status::Ok,
    );
    assert!(
        matches!(out, Outcome::Aborted(a) if a.reason == AbortReason::OpFailed && a.status == Status::BadLength && a.op == 1)
    );
    assert_eq!(store.map, before);
    assert_eq!(ex.aborted, 3);
    // The reader refuses more than MAX_TX_OPS ops.
    let many: Vec<MOp> = (0..=MAX_TX_OPS).map(|_| MOp::Get(1, None)).collect();
    assert!(TxReader::new(&encode(&many)).is_err());
}
