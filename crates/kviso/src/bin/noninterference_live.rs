//! The noninterference fuzzer against a live dataplane (docs/SECURITY.md): run in the
//! network namespace of the dataplane's tap (`scripts/e2e/noninterference.sh`,
//! `scripts/bench.sh tenants`). Prints the figures as JSON; exit status 1 on any
//! failure.

use clap::Parser;
use kviso::live::Live;
use kviso::{Config, Fuzzer};
use std::path::PathBuf;
use std::time::Instant;

/// Tenant isolation as a property, against a live dataplane.
#[derive(Parser, Debug)]
#[command(name = "noninterference_live")]
struct Args {
    /// The dataplane's config (its `dataplane` section gives the server's address).
    #[arg(long, default_value = "configs/tap.json")]
    config: PathBuf,
    /// The interface the dataplane's tap shows up as.
    #[arg(long, default_value = "kvtap0")]
    iface: String,
    /// The dataplane's EAL file prefix (for `ctlplane tenants`).
    #[arg(long)]
    file_prefix: String,
    /// The ctlplane binary.
    #[arg(long, default_value = "target/release/ctlplane")]
    ctlplane: PathBuf,
    /// Ops to answer and check.
    #[arg(long, default_value_t = 1_000_000)]
    ops: u64,
    /// The seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where tenants' credentials files go (briefly).
    #[arg(long, default_value = "/tmp")]
    scratch: PathBuf,
}

fn main() {
    let a = Args::parse();
    if let Err(e) = run(&a) {
        eprintln!("noninterference_live: {e}");
        std::process::exit(2);
    }
}

fn run(a: &Args) -> Result<(), String> {
    let cfg = kvconf::Config::load(&a.config).map_err(|e| e.to_string())?;
    let mac = kvconf::parse_mac(&cfg.dataplane.mac).map_err(|e| e.to_string())?;
    let live = Live::new(
        &a.iface,
        (mac, cfg.dataplane.ip),
        a.ctlplane.clone(),
        a.file_prefix.clone(),
        a.scratch.clone(),
    )?;
    let fc = Config {
        seed: a.seed,
        // Admin changes spawn ctlplane: a few per run.
        admin_every: 20_000,
        ..Config::default()
    };
    let t0 = Instant::now();
    let mut f = Fuzzer::new(live, fc)?;
    let fig = f.run(a.ops, 0).clone();
    let secs = t0.elapsed().as_secs_f64();
    let out = serde_json::json!({
        "mode": "live",
        "seed": a.seed,
        "seconds": secs,
        "ops_per_s": fig.ops as f64 / secs,
        "late_exchanges": f.driver().late,
        "failures": fig.failures(),
        "figures": fig,
    });
    println!(
        "{}",
        serde_json::to_string_pretty(&out).map_err(|e| e.to_string())?
    );
    if fig.failures() > 0 {
        std::process::exit(1);
    }
    Ok(())
}
