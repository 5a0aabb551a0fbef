//! `ctlplane`: the operator's tool (the paper's host daemon).
//!
//! It validates and shows configurations and talks to a running dataplane through
//! DPDK's telemetry socket ([`telemetry`]): live counters (`stats`, `watch`), engine
//! snapshots (`engine`), client QP admission (`clients`), slab merging (`slab`),
//! snapshots to a file while serving (`snapshot`), and a Prometheus exporter of all
//! that (`metrics`).

// The only unsafe code is the socket connect in `telemetry` and `restore_sigpipe`.
#![deny(unsafe_code)]

mod check;
mod clients;
mod latency;
mod metrics;
mod replication;
mod slab;
mod snapshot;
mod stats;
mod target;
mod telemetry;
mod tenants;
mod tenants_etcd;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use target::Target;

mod dispatch;
mod tune;

#[derive(Parser, Debug)]
#[command(version, about = "KV-Direct control plane")]
struct Args {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Configuration files.
    Config {
        #[command(subcommand)]
        cmd: ConfigCmd,
    },
    /// Parameter tuning: hash index (simulation) and DRAM load dispatch (model).
    Tune {
        #[command(subcommand)]
        cmd: tune::TuneCmd,
    },
    /// Counters of a running dataplane: a column per worker and the total.
    Stats {
        #[command(flatten)]
        target: Target,
        /// Print the raw `/kvd/stats` reply as JSON.
        #[arg(long)]
        json: bool,
        /// Check the accounting invariant (docs/OPERATIONS.md) on a quiescent
        /// dataplane: print each term and PASS/FAIL; exit 1 if it does not hold.
        #[arg(long)]
        check: bool,
        /// With --check: the expected mbufs in use (e.g. the "dataplane ready" figure).
        #[arg(long, requires = "check")]
        mbuf_baseline: Option<u64>,
        /// With --check: skip the tx identity (a dataplane run with --inject-*).
        #[arg(long, requires = "check")]
        no_tx_check: bool,
    },
    /// Counters refreshed every interval, with per-second rates.
    Watch {
        #[command(flatten)]
        target: Target,
        /// Seconds between samples.
        #[arg(long, default_value_t = 1.0)]
        interval: f64,
        /// Stop after this many samples (0: until Ctrl-C).
        #[arg(long, default_value_t = 0)]
        count: u64,
    },
    /// Engine snapshot per worker: stored KVs, utilization, slab levels.
    Engine {
        #[command(flatten)]
        target: Target,
        /// Print the raw `/kvd/engine` reply as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Prometheus exporter: serves the dataplane's counters, engine figures and
    /// service-latency histograms at http://LISTEN/metrics.
    Metrics(metrics::MetricsArgs),
    /// Client QP admission.
    Clients {
        #[command(subcommand)]
        cmd: clients::ClientsCmd,
    },
    /// Tenants: credentials, ACLs, quotas (docs/PROTOCOL.md §6.8).
    Tenants {
        #[command(subcommand)]
        cmd: tenants::TenantsCmd,
    },
    /// Slab allocator service.
    Slab {
        #[command(subcommand)]
        cmd: slab::SlabCmd,
    },
    /// Replication: status of a node, planned switchover.
    Replication {
        #[command(subcommand)]
        cmd: replication::ReplicationCmd,
    },
    /// Snapshots of a running dataplane (save while serving, status).
    Snapshot {
        #[command(subcommand)]
        cmd: snapshot::SnapshotCmd,
    },
}

#[derive(Subcommand, Debug)]
enum ConfigCmd {
    /// Validate a config file and print it with every default filled in.
    Show {
        /// The config file.
        #[arg(long, default_value = "configs/memif.json")]
        config: PathBuf,
    },
    /// Print the configuration a running dataplane uses (`/kvd/config`).
    Live {
        #[command(flatten)]
        target: Target,
    },
}

/// Prints a live command's error and exits 1.
fn exit_on_err(r: Result<(), String>) {
    if let Err(e) = r {
        eprintln!("ctlplane: {e}");
        std::process::exit(1);
    }
}

/// Lets the tool end quietly when its reader goes away (`ctlplane stats | head`), as
/// Unix tools do. Rust ignores SIGPIPE by default, so `println!` would then panic on
/// the broken pipe.
#[allow(unsafe_code)]
fn restore_sigpipe() {
    // SAFETY: runs first thing in `main`, before any other thread exists, and only
    // sets a signal's disposition back to the default (no handler code is involved).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() {
    restore_sigpipe();
    let args = Args::parse();
    match args.cmd {
        Cmd::Config {
            cmd: ConfigCmd::Show { config },
        } => match kvconf::Config::load(&config) {
            Ok(c) => match serde_json::to_string_pretty(&c) {
                Ok(s) => println!("{s}"),
                Err(e) => {
                    eprintln!("ctlplane: {e}");
                    std::process::exit(1);
                }
            },
            Err(e) => {
                eprintln!("ctlplane: {e}");
                std::process::exit(1);
            }
        },
        Cmd::Tune { cmd } => {
            if let Err(e) = cmd.run() {
                eprintln!("ctlplane: {e}");
                std::process::exit(1);
            }
        }
        Cmd::Config {
            cmd: ConfigCmd::Live { target },
        } => exit_on_err(target.connect().and_then(|mut t| {
            let v = t.query("/kvd/config")?;
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            Ok(())
        })),
        Cmd::Stats {
            target,
            check: true,
            mbuf_baseline,
            no_tx_check,
            ..
        } => exit_on_err(check::run(
            &target,
            check::Options {
                mbuf_baseline,
                skip_tx: no_tx_check,
            },
        )),
        Cmd::Stats { target, json, .. } => exit_on_err(stats::stats(&target, json)),
        Cmd::Watch {
            target,
            interval,
            count,
        } => exit_on_err(stats::watch(&target, interval, count)),
        Cmd::Engine { target, json } => exit_on_err(stats::engine(&target, json)),
        Cmd::Metrics(a) => exit_on_err(metrics::run(a)),
        Cmd::Clients { cmd } => exit_on_err(clients::run(cmd)),
        Cmd::Tenants { cmd } => exit_on_err(tenants::run(cmd)),
        Cmd::Slab { cmd } => exit_on_err(slab::run(cmd)),
        Cmd::Replication { cmd } => exit_on_err(replication::run(cmd)),
        Cmd::Snapshot { cmd } => exit_on_err(snapshot::run(cmd)),
    }
}
