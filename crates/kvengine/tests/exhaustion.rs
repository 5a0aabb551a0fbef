//! Out of memory with free blocks in the worker cache (regression test).
//!
//! Freed blocks go to the worker's cache first (up to `CACHE_CAP` per class) and
//! reach the shared pool only when a spill happens. When the pool has nothing left
//! for a class, an allocation must still be served by splitting a larger block the
//! worker caches, instead of answering `OutOfMemory` while the engine holds free
//! memory. Before the fix the worker split a cached block only when the pool's lock
//! was busy, so a small store refused every smaller-class PUT here.

use kvengine::{Engine, EngineConfig, Region, Status};

fn key(i: u32) -> [u8; 8] {
    u64::from(i)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .to_le_bytes()
}

#[test]
fn cached_larger_blocks_serve_a_smaller_class_when_the_pool_is_dry() {
    // 64 KiB: 256 primary buckets, 48 KiB of slab = 192 blocks of 256 B.
    let cfg = EngineConfig {
        mem_bytes: 64 << 10,
        hash_index_ratio: 0.25,
        ..EngineConfig::default()
    };
    let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
    // 8 B key + 2 B header + 240 B value: a 256 B record.
    let big = [7u8; 240];
    let mut n = 0;
    while e.put(&key(n), &big) == Status::Ok {
        n += 1;
    }
    assert_eq!(n, 192, "the 256 B class fills the slab");
    assert_eq!(e.stats().chained_buckets, 0);
    // Ten frees stay in the worker cache (below the spill watermark).
    for i in 0..10 {
        assert_eq!(e.delete(&key(i)), Status::Ok);
    }
    let st = e.stats();
    assert_eq!(
        (st.classes[3].worker_cached, st.classes[3].shared_free),
        (10, 0)
    );
    // 8 B key + 2 B header + 100 B value: a 128 B record; two per cached 256 B block.
    let small = [9u8; 100];
    let stored = (1000..1100)
        .take_while(|&i| e.put(&key(i), &small) == Status::Ok)
        .count();
    assert_eq!(stored, 20);
    let st = e.stats();
    assert_eq!(
        (st.classes[3].worker_cached, st.classes[2].worker_cached),
        (0, 0)
    );
    let mut out = [0u8; 256];
    for i in (10..192).chain(1000..1020) {
        let want: &[u8] = if i < 1000 { &big } else { &small };
        assert_eq!(e.get(&key(i), &mut out), Ok(want.len()));
        assert_eq!(&out[..want.len()], want);
    }
    e.check_invariants().unwrap();
}
