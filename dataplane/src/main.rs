//! `dataplane`: the KV-Direct appliance.
//!
//! Start-up: config file + flags → EAL → mbuf pool → port → store memory (DPDK
//! hugepage memory when available) → engine → worker loop on the main lcore until
//! Ctrl-C/SIGTERM or `--duration`, then final stats.

mod node;
mod replication;
mod report;
mod startup;
mod telemetry;
mod worker;

use clap::Parser;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

/// Command-line flags; everything else comes from the config file.
#[derive(Parser, Debug)]
#[command(
    version,
    about = "KV-Direct dataplane: a DPDK KV server speaking RoCEv2"
)]
struct Args {
    /// Topology/config file (JSON), see configs/.
    #[arg(long, default_value = "configs/memif.json")]
    config: PathBuf,
    /// Debug echo mode: bounce every frame back (MACs swapped) without parsing it or
    /// touching the engine, to measure the I/O limit.
    #[arg(long)]
    echo: bool,
    /// Force `--no-huge` even when hugepages are available.
    #[arg(long)]
    no_huge: bool,
    /// Override the EAL lcore list of the config (`-l`).
    #[arg(long)]
    lcores: Option<String>,
    /// Override the first vdev of the config (e.g. another memif socket path).
    #[arg(long)]
    vdev: Option<String>,
    /// Override the EAL file prefix.
    #[arg(long)]
    file_prefix: Option<String>,
    /// Store size in MiB (overrides engine.mem_mb).
    #[arg(long)]
    mem_mb: Option<usize>,
    /// Exit by itself after this many seconds (0 = run until Ctrl-C).
    #[arg(long, default_value_t = 0)]
    duration: u64,
    /// Print stats every N seconds (overrides server.stats_interval_s; 0 = only at exit).
    #[arg(long)]
    stats_interval: Option<u64>,
    /// Yield the CPU on empty polls after this many in a row (overrides
    /// server.idle_yield_polls; 0 = pure busy polling).
    #[arg(long)]
    idle_yield_polls: Option<u32>,
    /// What idle lcores do: poll, yield or adaptive (overrides server.idle;
    /// docs/OPERATIONS.md "Idle lcores").
    #[arg(long, value_parser = parse_idle)]
    idle: Option<kvconf::IdleMode>,
    /// With `adaptive`: sleep timed only, without the doorbells between the workers
    /// and the replication lcore (the A/B baseline of `scripts/bench_doorbell.py`).
    #[arg(long)]
    no_doorbells: bool,
    /// With `adaptive`: sleep timed only, without waking on the port's Rx interrupts
    /// (net_tap's, memif's ring signals; the A/B baseline of `scripts/bench_idle_tap.py`
    /// and `scripts/bench_idle.py`).
    #[arg(long)]
    no_rx_intr: bool,
    /// With `adaptive`: the longest sleep of a worker that only a packet wakes, µs
    /// (overrides server.idle_sleep_max_rx_us).
    #[arg(long)]
    idle_sleep_max_rx_us: Option<u32>,
    /// Initialise DPDK's packet-capture framework so `dpdk-dumpcap` can attach.
    #[arg(long)]
    pdump: bool,
    /// Write the final stats as JSON to this file.
    #[arg(long)]
    stats_json: Option<PathBuf>,
    /// Reservation station mode (overrides server.ooo): `true` out of order with data
    /// forwarding, `false` stall on every key conflict (the baseline).
    #[arg(long)]
    ooo: Option<bool>,
    /// The slab daemon also runs a lazy merge of every partition this often (ms; 0 =
    /// only on request from the control plane). Small values are a load test: the
    /// workers' throughput while merges run.
    #[arg(long, default_value_t = 0)]
    merge_every_ms: u64,
    /// Also route GET/PUT/DELETE chunks with a repeated key through the reservation
    /// station (overrides server.station_kv; default off: the engine's batch is faster).
    #[arg(long)]
    station_kv: Option<bool>,
    /// Fault injection (testing): drop each transmitted frame with this probability.
    /// The `--inject-*` probabilities are exclusive per frame and sum to at most 1.
    #[arg(long, default_value_t = 0.0, value_parser = parse_probability)]
    inject_loss: f64,
    /// Fault injection: send each transmitted frame twice with this probability.
    #[arg(long, default_value_t = 0.0, value_parser = parse_probability)]
    inject_dup: f64,
    /// Fault injection: hold each transmitted frame back behind the next 1 to 4 frames
    /// (at most one tx drain period) with this probability.
    #[arg(long, default_value_t = 0.0, value_parser = parse_probability)]
    inject_reorder: f64,
    /// Seed of the fault draws (worker w uses seed + w).
    #[arg(long, default_value_t = 1)]
    inject_seed: u64,
    /// Overload threshold: while more than this many response frames wait for the
    /// NIC, new requests are refused with an RNR NAK (protocol v2) instead of being
    /// executed and their answers dropped. Default: 3/4 of the worker's tx queue
    /// (192 frames); a small value makes overload easy to reach in tests.
    #[arg(long)]
    rnr_backlog: Option<usize>,
    /// Sample the service latency of one in this many request packets (overrides
    /// server.latency_sample_every; 0 = off). See telemetry `/kvd/stats` `latency`.
    #[arg(long)]
    latency_sample_every: Option<u32>,
    /// Replication role (overrides replication.role): standalone, master or replica.
    /// A master or replica runs one more lcore than workers: the replication lcore.
    #[arg(long)]
    role: Option<kvconf::ReplRole>,
    /// Benchmark baseline: worker 0 runs the replication loop itself between its
    /// bursts (replication on the request path, as a master without SKV's offload);
    /// the replication lcore stays idle. A master without etcd only.
    #[arg(long)]
    repl_inline: bool,
    /// Load this snapshot (`ctlplane snapshot save`) before serving: the whole file is
    /// verified first; a bad file is refused (exit 1) and nothing is served. The
    /// worker count may differ from the saver's.
    #[arg(long)]
    load: Option<PathBuf>,
}

/// A `--inject-*` probability: a number in [0, 1].
fn parse_idle(s: &str) -> Result<kvconf::IdleMode, String> {
    match s {
        "poll" => Ok(kvconf::IdleMode::Poll),
        "yield" => Ok(kvconf::IdleMode::Yield),
        "adaptive" => Ok(kvconf::IdleMode::Adaptive),
        _ => Err(format!("{s:?}: expected poll, yield or adaptive")),
    }
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|e| format!("{s:?}: {e}"))?;
    if (0.0..=1.0).contains(&p) {
        Ok(p)
    } else {
        Err(format!("{p} is not a probability in [0, 1]"))
    }
}

/// The fault injection of the `--inject-*` flags: `None` when they inject nothing.
fn inject_config(args: &Args) -> Result<Option<kvload::FaultConfig>, String> {
    let f = kvload::FaultConfig {
        loss: args.inject_loss,
        dup: args.inject_dup,
        reorder: args.inject_reorder,
        seed: args.inject_seed,
    };
    f.validate().map_err(|e| format!("--inject-*: {e}"))?;
    if !f.is_zero() {
        eprintln!(
            "dataplane: injecting faults into transmitted frames: loss {} dup {} reorder {} seed {}",
            f.loss, f.dup, f.reorder, f.seed
        );
    }
    Ok((!f.is_zero()).then_some(f))
}

static QUIT: AtomicBool = AtomicBool::new(false);

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("dataplane: error: {e}");
        std::process::exit(1);
    }
}

/// The node's phases (`node`): open it, start its control side, run it until
/// Ctrl-C or the deadline, then stop it and report.
fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut node = node::Node::open(&args)?;
    let control = node::Control::start(&node, &args)?;
    let ran = node.run(&control, &args)?;
    node.finish(control, ran, &args)
}
