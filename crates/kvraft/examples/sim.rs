//! The deterministic simulation over many seeds (`scripts/bench.sh sim`): prints the
//! totals and every failing seed as JSON.
//!
//! Usage: `sim [--seeds N] [--first K] [--nodes 3|5] [--fsync always|everysec|no]
//! [--async] [--fault-ms MS] [--crash-kinds all|process]`

use kvraft::sim::{run_seeds, SimConfig};
use kvraft::FsyncPolicy;
use std::time::Instant;

fn arg<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let num = |n: &str, d: u64| arg(&args, n).and_then(|v| v.parse().ok()).unwrap_or(d);
    let mut cfg = SimConfig {
        nodes: num("--nodes", 3) as usize,
        fault_ms: num("--fault-ms", 4_000),
        async_mode: args.iter().any(|a| a == "--async"),
        ..SimConfig::default()
    };
    cfg.fsync = match arg(&args, "--fsync").unwrap_or("always") {
        "everysec" => FsyncPolicy::EverySec,
        "no" => FsyncPolicy::No,
        _ => FsyncPolicy::Always,
    };
    if args.iter().any(|a| a == "--no-faults") {
        cfg.faults = kvraft::sim::FaultRates {
            partition: 0.0,
            crash: 0.0,
            freeze: 0.0,
            transfer: 0.0,
            drift: 0.0,
            drop: 0.0,
            dup: 0.0,
            ..cfg.faults
        };
    }
    for (flag, set) in [
        ("--only-crash", 0u8),
        ("--only-partition", 1),
        ("--only-freeze", 2),
        ("--only-transfer", 3),
        ("--only-net", 4),
    ] {
        if args.iter().any(|a| a == flag) {
            let f = cfg.faults;
            cfg.faults = kvraft::sim::FaultRates {
                partition: if set == 1 { f.partition } else { 0.0 },
                crash: if set == 0 { f.crash } else { 0.0 },
                freeze: if set == 2 { f.freeze } else { 0.0 },
                transfer: if set == 3 { f.transfer } else { 0.0 },
                drop: if set == 4 { f.drop } else { 0.0 },
                dup: if set == 4 { f.dup } else { 0.0 },
                ..f
            };
        }
    }
    if arg(&args, "--crash-kinds") == Some("process") {
        cfg.faults.machine_crash = 0.0;
    }
    let first = num("--first", 1);
    let seeds = num("--seeds", 100);
    let t0 = Instant::now();
    let (failed, total) = run_seeds(cfg, first..first + seeds);
    let out = serde_json::json!({
        "config": cfg,
        "fsync": arg(&args, "--fsync").unwrap_or("always"),
        "seeds": seeds,
        "first_seed": first,
        "seconds": t0.elapsed().as_secs_f64(),
        "failed_seeds": failed.iter().map(|r| r.seed).collect::<Vec<_>>(),
        "failures": failed,
        "totals": total,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
    if !failed.is_empty() {
        std::process::exit(1);
    }
}
