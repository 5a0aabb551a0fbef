//! Hot-path properties: no heap allocation in get/put/delete/execute_batch,
//! and (with `--features accounting`) exact line counts for simple cases.

use kvengine::{BatchOp, Engine, EngineConfig, Region, Status};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    // Per thread: the test harness runs tests in parallel, and another test's
    // allocations must not count against this thread's hot path. A `const`
    // Cell needs no destructor, so touching it never allocates.
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

// SAFETY: forwards to the system allocator unchanged; only counts calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // `try_with`: during thread teardown the slot may be gone; skip counting then.
        let _ = ALLOCS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(p, l) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[test]
fn hot_path_does_not_allocate() {
    let cfg = EngineConfig {
        mem_bytes: 32 << 20,
        hash_index_ratio: 0.1,
        inline_threshold: 20,
        max_slab_class: 4096,
    };
    let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
    let keys: Vec<[u8; 8]> = (0..20_000u64)
        .map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes())
        .collect();
    let big = vec![7u8; 3000];
    let mut out = vec![0u8; 4096];
    let mut results = 0usize;
    let before = allocs();
    for (i, k) in keys.iter().enumerate() {
        let v = &big[..(i * 37) % 700];
        assert_eq!(e.put(k, v), Status::Ok);
    }
    for k in &keys {
        assert!(e.get(k, &mut out).is_ok());
    }
    for k in keys.iter().step_by(3) {
        assert_eq!(e.delete(k), Status::Ok);
    }
    for chunk in keys.chunks(64) {
        let ops: [BatchOp<'_>; 64] = std::array::from_fn(|j| match j % 3 {
            0 => BatchOp::get(&chunk[j % chunk.len()]),
            1 => BatchOp::put(&chunk[j % chunk.len()], &big[..j * 11]),
            _ => BatchOp::delete(&chunk[j % chunk.len()]),
        });
        e.execute_batch(
            &ops[..chunk.len()],
            &mut |_i: usize, _s: Status, _v: &[u8]| results += 1,
        );
    }
    let after = allocs();
    assert_eq!(after - before, 0, "hot path allocated");
    assert_eq!(results, keys.len());
    e.check_invariants().unwrap();
}

#[cfg(feature = "accounting")]
#[test]
fn line_counts_are_exact_for_simple_cases() {
    let cfg = EngineConfig {
        mem_bytes: 1 << 20,
        hash_index_ratio: 0.5,
        inline_threshold: 20,
        max_slab_class: 4096,
    };
    let mut e = Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap();
    let mut out = [0u8; 512];
    // Inline KV: PUT and GET touch exactly the bucket.
    e.reset_accounting();
    assert_eq!(e.put(b"k1", b"v1"), Status::Ok);
    assert_eq!(e.stats().lines_per_put(), Some(1.0));
    e.reset_accounting();
    assert_eq!(e.get(b"k1", &mut out), Ok(2));
    assert_eq!(e.stats().lines_per_get(), Some(1.0));
    // A 254 B KV (2 B header + 8 + 246 = 256 B record, 64 B aligned): bucket + 4 record lines.
    assert_eq!(e.put(b"12345678", &[1u8; 246]), Status::Ok);
    e.reset_accounting();
    assert_eq!(e.get(b"12345678", &mut out), Ok(246));
    let l = e.stats().lines.unwrap();
    assert_eq!((l.index_lines[0], l.slab_lines[0]), (1, 4));
    // A miss on an empty bucket: one line.
    e.reset_accounting();
    assert_eq!(e.get(b"absent", &mut out), Err(Status::NotFound));
    assert_eq!(e.stats().lines_per_get(), Some(1.0));
}
