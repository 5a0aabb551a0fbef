//! The model test of protocol v2: the real server-side state machine (`Server`,
//! without EAL) behind the real client library (`kvclient`) over a seeded in-memory
//! link that drops, duplicates and reorders frames in both directions.
//!
//! * The exactly-once check (`kvclient::check`): N QPs × M fetch-adds on one key must
//!   return every original in `0..N×M` once and leave `N×M`; CAS chains must succeed
//!   from every value once and leave the number of successes. Many seeds.
//! * A random mix of GET/PUT/DELETE/fetch-add through `kvclient::Client` must answer
//!   exactly as a `HashMap` model of the store does, op by op.
//!
//! Time is simulated: every poll of the link advances the clock, so the client's
//! retransmission timers fire after the same number of steps on any machine.

mod common;

use common::{request_params, ServerIo, RKEY};
use dataplane::stats::WorkerStats;
use kvclient::check::ExactlyOnce;
use kvclient::sim::Faults;
use kvclient::{Client, ClientConfig, Config, Op, Transport};
use std::collections::HashMap;

fn qps(n: u32) -> Vec<(u32, u32)> {
    (0..n).map(|i| (100 + i, RKEY)).collect()
}

fn client_config() -> Config {
    common::model_transport_config()
}

/// Runs the exactly-once check over `n` QPs × `m` fetch-adds with `faults` both
/// ways; returns the server's counters for the caller's checks.
fn exactly_once(seed: u64, faults: Faults, n: u32, m: u64) -> WorkerStats {
    let qps = qps(n);
    let mut io = ServerIo::new(seed, faults, &qps);
    let mut t = Transport::new(client_config(), &qps, request_params());
    t.connect_all(&mut io, 0);
    let mut check = ExactlyOnce::new(n as usize, m, seed);
    let mut steps = 0u64;
    let clock = io.clock.clone();
    while !check.step(&mut t, &mut io, clock.get()) {
        steps += 1;
        assert!(
            steps < 2_000_000,
            "seed {seed}: the check did not finish: {}",
            check.report().summary()
        );
    }
    let r = check.report();
    assert_eq!(r.violations, 0, "seed {seed}: {}", r.summary());
    assert_eq!(r.final_add, Some(u64::from(n) * m), "seed {seed}");
    assert!(r.cas_successes >= u64::from(n) * m, "seed {seed}");
    assert_eq!(t.stats().failed, 0, "seed {seed}: requests given up");
    io.stats
}

#[test]
fn exactly_once_without_faults() {
    let stats = exactly_once(1, Faults::NONE, 4, 50);
    assert_eq!(stats.replays.get(), 0, "nothing lost, nothing replayed");
}

#[test]
fn exactly_once_under_loss_duplication_and_reordering() {
    let mut replays = 0;
    let mut naks = 0;
    for seed in 0..24 {
        let faults = Faults {
            drop: 0.05,
            duplicate: 0.05,
            reorder: 0.05,
            ..Faults::NONE
        };
        let stats = exactly_once(seed, faults, 3 + (seed as u32 % 3), 40);
        replays += stats.replays.get();
        naks += stats.naks_sent.get();
    }
    // The faults did reach the transport's recovery paths.
    assert!(
        replays > 0,
        "no duplicate request was answered from the cache"
    );
    assert!(naks > 0, "no PSN gap was NAKed");
}

#[test]
fn exactly_once_under_heavy_loss() {
    for seed in 100..104 {
        let faults = Faults {
            drop: 0.2,
            ..Faults::NONE
        };
        exactly_once(seed, faults, 2, 30);
    }
}

/// A HashMap model against the real server through `kvclient::Client`: every reply
/// must be the model's, whatever the link does.
#[test]
fn client_ops_match_a_hashmap_model_under_faults() {
    for seed in 0..6u64 {
        let qps = qps(4);
        let faults = Faults {
            drop: 0.03,
            duplicate: 0.03,
            reorder: 0.03,
            ..Faults::NONE
        };
        let io = ServerIo::new(seed, faults, &qps);
        let clock = io.clock.clone();
        let cfg = ClientConfig {
            transport: client_config(),
            partitions: 1,
            ..ClientConfig::default()
        };
        let mut c = Client::new(
            io,
            cfg,
            &qps,
            request_params(),
            Box::new(move || clock.get()),
        );
        c.connect().expect("connect");
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut rng = kvload::Xorshift64Star::new(seed + 1);
        for i in 0..400 {
            let r = kvload::RandomSource::next_u64(&mut rng);
            let key = format!("k{}", r % 40).into_bytes();
            match r % 4 {
                0 => {
                    let got = c.get(&key).expect("get");
                    assert_eq!(got.as_ref(), model.get(&key), "seed {seed} op {i}: GET");
                }
                1 => {
                    let v = (r >> 8).to_le_bytes().to_vec();
                    c.put(&key, &v).expect("put");
                    model.insert(key, v);
                }
                2 => {
                    let existed = c.delete(&key).expect("delete");
                    assert_eq!(
                        existed,
                        model.remove(&key).is_some(),
                        "seed {seed} op {i}: DELETE"
                    );
                }
                _ => {
                    let Some(old) = model.get(&key).filter(|v| v.len() == 8).cloned() else {
                        continue;
                    };
                    let orig = c.fetch_add(&key, kvwire::Width::W8, 3).expect("fetch-add");
                    let was = u64::from_le_bytes(old.try_into().unwrap());
                    assert_eq!(orig, was, "seed {seed} op {i}: fetch-add original");
                    model.insert(key, was.wrapping_add(3).to_le_bytes().to_vec());
                }
            }
        }
        // And a pipelined burst: every ticket answered once.
        let tickets: Vec<_> = (0..64u64)
            .map(|k| {
                c.submit(Op::Put {
                    key: format!("p{k}").into_bytes(),
                    value: k.to_le_bytes().to_vec(),
                })
            })
            .collect();
        c.flush();
        for t in tickets {
            c.wait(t).expect("pipelined put");
        }
        for k in 0..64u64 {
            let v = c
                .get(format!("p{k}").as_bytes())
                .expect("get")
                .expect("present");
            assert_eq!(v, k.to_le_bytes(), "seed {seed}: pipelined put {k}");
        }
    }
}
