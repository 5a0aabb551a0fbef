//! The slab service on another thread while the engine serves: the engine
//! must still equal a `HashMap` model and the slab invariants must hold.

use kvengine::{Engine, EngineConfig, Region, Status};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn value_of(len: usize, fill: u8) -> Vec<u8> {
    (0..len).map(|i| fill.wrapping_add(i as u8)).collect()
}

/// Random put / size-class-changing replace / delete / get on a worker
/// thread while a service thread loops `merge_now` + `balance`.
fn churn_against_service(seed: u64, mem_bytes: usize, ratio: f64, keys: u32, ops: usize) {
    let cfg = EngineConfig {
        mem_bytes,
        hash_index_ratio: ratio,
        inline_threshold: 12,
        max_slab_class: 2048,
    };
    let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
    let svc = e.slab_service();
    let stop = Arc::new(AtomicBool::new(false));
    let service = {
        let (svc, stop) = (svc.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            let (mut merged, mut splits) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                merged += svc.merge_now().merged.iter().sum::<u64>();
                splits += svc.balance().splits;
                let l = svc.levels();
                assert_eq!(l.nclasses, 7);
            }
            (merged, splits)
        })
    };
    let worker = std::thread::spawn(move || {
        let mut rng = SmallRng::seed_from_u64(seed);
        let mut model: HashMap<Vec<u8>, Vec<u8>> = HashMap::new();
        let mut out = vec![0u8; 4096];
        let mut oom = 0u64;
        for i in 0..ops {
            let key = format!("key{}", rng.gen_range(0..keys)).into_bytes();
            match rng.gen_range(0..10u32) {
                0..=3 => {
                    // Sizes on both sides of the inline threshold and across
                    // classes, so replaces change class.
                    let len = match rng.gen_range(0..4u32) {
                        0 => rng.gen_range(0..8),
                        1 => rng.gen_range(8..60),
                        2 => rng.gen_range(60..500),
                        _ => rng.gen_range(500..1000),
                    };
                    let val = value_of(len, rng.gen());
                    match e.put(&key, &val) {
                        Status::Ok => {
                            model.insert(key, val);
                        }
                        Status::OutOfMemory => oom += 1,
                        s => panic!("put: {s:?}"),
                    }
                }
                4..=7 => {
                    let want = if model.remove(&key).is_some() {
                        Status::Ok
                    } else {
                        Status::NotFound
                    };
                    assert_eq!(e.delete(&key), want);
                }
                _ => match model.get(&key) {
                    Some(v) => {
                        assert_eq!(e.get(&key, &mut out), Ok(v.len()));
                        assert_eq!(&out[..v.len()], &v[..]);
                    }
                    None => assert_eq!(e.get(&key, &mut out), Err(Status::NotFound)),
                },
            }
            if i % 20_000 == 0 {
                e.check_invariants().unwrap();
            }
        }
        (e, model, oom)
    });
    let (mut e, model, oom) = worker.join().unwrap();
    stop.store(true, Ordering::Relaxed);
    let (merged, _splits) = service.join().unwrap();
    e.check_invariants().unwrap();
    let mut seen = HashMap::new();
    e.for_each(|k, v| {
        seen.insert(k.to_vec(), v.to_vec());
    });
    assert_eq!(seen, model);
    assert!(svc.merges_completed() > 0 && svc.balances_completed() > 0);
    eprintln!(
        "merges {} merged {merged} oom {oom} stats {:?} levels {:?}",
        svc.merges_completed(),
        e.stats().pool,
        svc.levels()
    );
    assert!(merged > 0, "the service merged nothing");
    assert!(
        oom > 0,
        "the region never filled: the test would not stress splits"
    );
    // Everything deleted, flushed and merged gives the memory back.
    for k in model.keys() {
        assert_eq!(e.delete(k), Status::Ok);
    }
    e.flush_slab_cache();
    std::thread::spawn(move || svc.merge_now()).join().unwrap();
    e.check_invariants().unwrap();
    let st = e.stats();
    assert_eq!(st.stored_kvs, 0);
    assert_eq!(st.chained_buckets, 0);
}

#[test]
fn engine_matches_model_while_service_merges_and_balances() {
    churn_against_service(1, 2 << 20, 0.1, 10_000, 400_000);
}

#[test]
fn engine_matches_model_with_deep_chains_while_service_runs() {
    churn_against_service(2, 1 << 20, 0.01, 5_000, 200_000);
}

/// A merge run from another thread merges: freed 32 B records become 64 B
/// blocks (and further up) in the shared pool.
#[test]
fn merge_on_service_thread_moves_blocks_up() {
    let cfg = EngineConfig {
        mem_bytes: 1 << 20,
        hash_index_ratio: 0.05,
        inline_threshold: 0,
        max_slab_class: 1024,
    };
    let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
    // 4 B keys + 20 B values + 2 B header = 26 B: class 0 (32 B).
    for i in 0..4000u32 {
        assert_eq!(e.put(&i.to_le_bytes(), &[3u8; 20]), Status::Ok);
    }
    for i in 0..4000u32 {
        assert_eq!(e.delete(&i.to_le_bytes()), Status::Ok);
    }
    e.flush_slab_cache();
    let svc = e.slab_service();
    let before = svc.levels();
    assert!(before.free[0] >= 3000, "{before:?}");
    let rep = std::thread::spawn({
        let svc = svc.clone();
        move || svc.merge_now()
    })
    .join()
    .unwrap();
    let after = svc.levels();
    assert!(rep.merged[0] >= 1500, "{rep:?}");
    assert!(
        after.free[0] < before.free[0] / 4,
        "{before:?} -> {after:?}"
    );
    assert!(after.free[1..].iter().sum::<u64>() > before.free[1..].iter().sum::<u64>());
    assert_eq!(after.detached_units, 0);
    // Two O(1) holds per class below the top, one for the top splice.
    assert!((10..=11).contains(&rep.lock_holds), "{rep:?}");
    assert_eq!(svc.merges_completed(), 1);
    e.check_invariants().unwrap();
    // The engine still works, and a service handle outlives it.
    assert_eq!(e.put(b"k", &[1u8; 100]), Status::Ok);
    drop(e);
    assert_eq!(svc.levels().nclasses, 6);
}
