//! Client-level tests against the reference server over a lossy link.

mod common;

use common::*;
use kvclient::sim::Faults;
use kvclient::{Client, ClientConfig, Error, Op, Reply, Ticket};
use kvload::{RandomSource, Xorshift64Star};
use kvwire::payload::{func, Atomic, PayloadError, Width};
use kvwire::Status;
use std::collections::HashMap;

fn client(seed: u64, p: f64, srv: SrvCfg, nqp: u32, partitions: u32) -> Client<Sim> {
    let sim = Sim::new(seed, Faults::uniform(p), srv, &qps(nqp));
    let clock = sim.clock_fn();
    let cfg = ClientConfig {
        partitions,
        ..ClientConfig::default()
    };
    Client::new(sim, cfg, &qps(nqp), client_params(), clock)
}

const ADD: Atomic = Atomic {
    func: func::FETCH_ADD,
    width: Width::W8,
    signed: false,
};

/// Random ops on a few keys, pipelined through 4 QPs of 2 partitions; the replies
/// must be those of executing the ops once each, in submission order per key.
#[test]
fn pipelined_ops_match_a_sequential_model() {
    for seed in 0..12 {
        let srv = SrvCfg {
            partitions: 2,
            results_per_frame: 1 + seed as usize % 4,
            credits: 4,
            ..SrvCfg::default()
        };
        let mut c = client(seed, 0.05, srv, 4, 2);
        c.connect().unwrap();
        let mut rng = Xorshift64Star::new(seed);
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut expect: HashMap<Ticket, Reply> = HashMap::new();
        for i in 0..400u64 {
            let k = rng.below(12);
            let key = format!("key{k}").into_bytes();
            let op = match rng.below(4) {
                0 => Op::Put {
                    key: key.clone(),
                    value: (i * 7).to_le_bytes().to_vec(),
                },
                1 => Op::Get { key: key.clone() },
                2 if rng.below(3) == 0 => Op::Delete { key: key.clone() },
                _ => Op::UpdateS2S {
                    key: key.clone(),
                    atomic: ADD,
                    param: i,
                    param2: 0,
                },
            };
            let reply = |status, value: Vec<u8>| Reply { status, value };
            let want = match &op {
                Op::Put { value, .. } => {
                    model.insert(key, value.clone());
                    reply(Status::Ok, vec![])
                }
                Op::Get { .. } => match model.get(&key) {
                    Some(v) => reply(Status::Ok, v.clone()),
                    None => reply(Status::NotFound, vec![]),
                },
                Op::Delete { .. } => match model.remove(&key) {
                    Some(_) => reply(Status::Ok, vec![]),
                    None => reply(Status::NotFound, vec![]),
                },
                _ => match model.get_mut(&key) {
                    Some(v) => {
                        let orig = u64::from_le_bytes(v[..8].try_into().unwrap());
                        *v = orig.wrapping_add(i).to_le_bytes().to_vec();
                        reply(Status::Ok, orig.to_le_bytes().to_vec())
                    }
                    None => reply(Status::NotFound, vec![]),
                },
            };
            expect.insert(c.submit(op), want);
            if rng.below(8) == 0 {
                for (t, r) in c.poll() {
                    assert_eq!(r.as_ref(), Ok(&expect.remove(&t).unwrap()), "seed {seed}");
                }
            }
        }
        while !expect.is_empty() {
            for (t, r) in c.poll() {
                let want = expect.remove(&t).expect("one result per ticket");
                assert_eq!(r, Ok(want), "seed {seed} ticket {t:?}");
            }
            assert!(c.io_mut().now() < 3_600_000_000_000, "seed {seed}: stuck");
        }
        assert_eq!(c.pending(), 0);
        assert_eq!(c.io_mut().server.executed, 400, "seed {seed}");
        let st = c.transport().stats();
        assert_eq!(st.failed, 0);
        assert!(st.completed < 400, "ops were packed: {st:?}");
        let store = &c.io_mut().server.store;
        assert_eq!(store.len(), model.len());
        for (k, v) in &model {
            assert_eq!(store.get(k), Some(v), "seed {seed}");
        }
    }
}

#[test]
fn blocking_api() {
    let srv = SrvCfg {
        results_per_frame: 1,
        ..SrvCfg::default()
    };
    let mut c = client(3, 0.05, srv, 2, 1);
    assert_eq!(c.get(b"a"), Ok(None));
    assert_eq!(c.put(b"a", b"hello"), Ok(()));
    assert_eq!(c.get(b"a"), Ok(Some(b"hello".to_vec())));
    assert_eq!(c.delete(b"a"), Ok(true));
    assert_eq!(c.delete(b"a"), Ok(false));
    assert_eq!(c.put(b"lock", b"owner-1"), Ok(()));
    assert_eq!(c.compare_delete(b"lock", b"owner-2"), Ok(false));
    assert_eq!(c.get(b"lock"), Ok(Some(b"owner-1".to_vec())));
    assert_eq!(c.compare_delete(b"lock", b"owner-1"), Ok(true));
    assert_eq!(c.compare_delete(b"lock", b"owner-1"), Ok(false));
    assert_eq!(c.get(b"lock"), Ok(None));
    assert_eq!(c.put(b"n", &5u64.to_le_bytes()), Ok(()));
    assert_eq!(c.fetch_add(b"n", Width::W8, 10), Ok(5));
    assert_eq!(c.cas(b"n", Width::W8, 15, 1), Ok(15));
    assert_eq!(c.cas(b"n", Width::W8, 15, 2), Ok(1));
    assert_eq!(
        c.update(b"n", func::SWAP, Width::W8, 0, 0),
        Err(Error::Status(Status::UnknownFunction))
    );
    assert_eq!(
        c.fetch_add(b"missing", Width::W8, 1),
        Err(Error::Status(Status::NotFound))
    );
    assert_eq!(
        c.reduce(b"n", func::FETCH_ADD, Width::W8, 0),
        Err(Error::Status(Status::Unsupported))
    );
    assert_eq!(c.put(b"big", &[0; 2000]), Err(Error::TooLarge));
    assert_eq!(c.get(b""), Err(Error::Invalid(PayloadError::EmptyKey)));
    assert!(c.transport().all_connected());
}

#[test]
fn connection_loss_is_reported_then_the_qp_reconnects() {
    let mut c = client(1, 0.0, SrvCfg::default(), 1, 1);
    c.put(b"k", &1u64.to_le_bytes()).unwrap();
    c.io_mut().server.disconnect(16);
    // The server never executed it: the client cannot know, and says so.
    assert_eq!(c.fetch_add(b"k", Width::W8, 1), Err(Error::ConnectionLost));
    assert_eq!(c.io_mut().server.executed, 1);
    // The next op reconnects (a second incarnation) and runs.
    assert_eq!(c.fetch_add(b"k", Width::W8, 1), Ok(1));
    assert_eq!(c.io_mut().server.connects.len(), 2);
    assert_eq!(c.transport().stats().naks_invalid, 1);
}

#[test]
fn connect_times_out_without_a_server() {
    let sim = Sim::new(1, Faults::NONE, SrvCfg::default(), &[]);
    let clock = sim.clock_fn();
    let mut c = Client::new(
        sim,
        ClientConfig::default(),
        &qps(1),
        client_params(),
        clock,
    );
    assert_eq!(c.connect(), Err(Error::ConnectTimeout));
    // An op waits for the connection up to the op timeout.
    assert_eq!(c.get(b"k"), Err(Error::Deadline));
    assert_eq!(c.pending(), 0);
}

#[test]
fn a_partition_without_qp_is_an_error() {
    // QPs 16 and 18 serve partition 0 of 2: keys of partition 1 have no QP.
    let sim = Sim::new(1, Faults::NONE, SrvCfg::default(), &[(16, 1), (18, 2)]);
    let clock = sim.clock_fn();
    let cfg = ClientConfig {
        partitions: 2,
        ..ClientConfig::default()
    };
    let mut c = Client::new(sim, cfg, &[(16, 1), (18, 2)], client_params(), clock);
    let key = (0..)
        .map(|i: u32| format!("k{i}").into_bytes())
        .find(|k| kvwire::partition::partition_of_hash(kvwire::hash::key_hash(k), 2) == 1)
        .unwrap();
    assert_eq!(c.qp_for_key(&key), None);
    assert_eq!(c.get(&key), Err(Error::NoQp));
}
