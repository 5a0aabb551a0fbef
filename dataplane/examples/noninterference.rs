//! The noninterference fuzzer's long run in process (`kviso`, docs/SECURITY.md): many
//! seeds against the dataplane's `Server` state machine, the figures as JSON on
//! stdout (`scripts/bench.sh tenants` runs it for `noninterference_ops`).
//!
//! Usage: `noninterference [--ops N] [--seeds S] [--first-seed K] [--stop-after F]`

#[path = "../tests/common/mod.rs"]
mod common;

use common::iso::InProcess;
use kviso::{Config, Figures, Fuzzer};
use std::time::Instant;

fn arg(args: &[String], name: &str, default: u64) -> u64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let ops = arg(&args, "--ops", 10_000_000);
    let seeds = arg(&args, "--seeds", 10).max(1);
    let first = arg(&args, "--first-seed", 1);
    // Failures a seed may show before it stops (0: stop at the first).
    let stop_after = arg(&args, "--stop-after", 0);
    let per_seed = ops.div_ceil(seeds);
    let t0 = Instant::now();
    let mut total = Figures::default();
    let mut failed = Vec::new();
    for seed in first..first + seeds {
        let cfg = Config {
            seed,
            ..Config::default()
        };
        let mut f = Fuzzer::new(InProcess::new(16 << 20), cfg).expect("tenants set");
        let fig = f.run(per_seed, stop_after).clone();
        if fig.failures() > 0 {
            eprintln!("seed {seed} failed: {fig:?}");
            failed.push(seed);
        }
        total.merge(&fig);
    }
    let secs = t0.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "mode": "in_process",
        "seeds": seeds,
        "first_seed": first,
        "seconds": secs,
        "ops_per_s": total.ops as f64 / secs,
        "failed_seeds": failed,
        "failures": total.failures(),
        "figures": total,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    if total.failures() > 0 {
        std::process::exit(1);
    }
}
