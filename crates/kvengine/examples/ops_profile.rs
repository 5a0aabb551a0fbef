//! Instruction-count harness for callgrind (not a timing benchmark).
//!
//! `ops_profile MODE --n KVS --ops N`: loads `KVS` 10 B KVs (8 B key, 2 B
//! value) at ~50% utilization (the engine_bench geometry), then runs `N`
//! batched GETs (`get`) or in-place PUTs (`put`) of uniform random keys,
//! 256 ops per `execute_batch` call; `none` runs no ops (the baseline to
//! subtract). Per-op instructions = Ir of `bench_get` / `bench_put` / N:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='ops_profile::bench_get' \
//!     target/release/examples/ops_profile get --n 200000 --ops 300000
//! ```
//!
//! (or, without `--toggle-collect`, (Ir(MODE) - Ir(none)) / N).

use kvengine::{BatchOp, Engine, EngineConfig, Region, ResultSink, Status};
use kvload::{scattered_key as key_of, RandomSource, SplitMix64};
use std::time::Instant;

#[derive(Default)]
struct Sink {
    hits: u64,
    sum: u64,
}
impl ResultSink for Sink {
    #[inline(always)]
    fn result(&mut self, _i: usize, status: Status, value: &[u8]) {
        if status == Status::Ok {
            self.hits += 1;
            if let Some(&b) = value.first() {
                self.sum += u64::from(b);
            }
        }
    }
}

const BATCH: usize = 256;

/// The measured phases: separate functions so that callgrind can collect
/// just one of them (`--toggle-collect='ops_profile::bench_get'`).
#[inline(never)]
fn bench_get(e: &mut Engine, keys: &[[u8; 8]]) -> Sink {
    run(e, keys, None)
}

#[inline(never)]
fn bench_put(e: &mut Engine, keys: &[[u8; 8]]) -> Sink {
    run(e, keys, Some(7))
}

#[inline(always)]
fn run(e: &mut Engine, keys: &[[u8; 8]], put: Option<u8>) -> Sink {
    let mut sink = Sink::default();
    let vals: [[u8; 2]; BATCH] = std::array::from_fn(|j| [put.unwrap_or(0), j as u8]);
    let mut ops: Vec<BatchOp<'_>> = Vec::with_capacity(BATCH);
    for chunk in keys.chunks(BATCH) {
        ops.clear();
        match put {
            None => ops.extend(chunk.iter().map(|k| BatchOp::get(k))),
            Some(_) => ops.extend(chunk.iter().zip(&vals).map(|(k, v)| BatchOp::put(k, v))),
        }
        e.execute_batch(&ops, &mut sink);
    }
    sink
}

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse().expect("number"))
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mode = args.get(1).map(String::as_str).unwrap_or("get").to_owned();
    let n = arg(&args, "--n", 200_000);
    let nops = arg(&args, "--ops", 1_000_000) as usize;
    let mem = ((n as f64 * 20.0) as usize).next_multiple_of(2 << 20);
    let cfg = EngineConfig {
        mem_bytes: mem,
        hash_index_ratio: 0.8,
        inline_threshold: 20,
        max_slab_class: 4096,
    };
    let mut e = Engine::new(Region::owned(mem), &cfg).unwrap();
    let all: Vec<[u8; 8]> = (0..n).map(key_of).collect();
    run(&mut e, &all, Some(1));
    let mut rng = SplitMix64::new(5);
    let seq: Vec<[u8; 8]> = (0..nops).map(|_| key_of(rng.below(n))).collect();
    let t = Instant::now();
    let s = match mode.as_str() {
        "get" => bench_get(&mut e, &seq),
        "put" => bench_put(&mut e, &seq),
        _ => Sink::default(),
    };
    let dt = t.elapsed().as_secs_f64();
    println!(
        "{mode} n={n} ops={} hits={} sum={} {:.2} Mops",
        if mode == "none" { 0 } else { nops },
        s.hits,
        s.sum,
        if mode == "none" {
            0.0
        } else {
            nops as f64 / dt / 1e6
        }
    );
}
