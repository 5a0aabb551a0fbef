//! `dataplane`: the KV-Direct appliance.
//!
//! Start-up: config file + flags → EAL → mbuf pool → port → store memory (DPDK
//! hugepage memory when available) → engine → worker loop on the main lcore until
//! Ctrl-C/SIGTERM or `--duration`, then final stats.

mod replication;
mod replicator;
mod report;
mod startup;
mod telemetry;
mod worker;

use clap::Parser;
use dataplane::control::ControlState;
use dataplane::slab_daemon::SlabDaemon;
use dataplane::stats::WorkerStats;
use dpdk::{Eal, Mempool};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// One worker's share: its partition, queues, hand-off rings and control.
type Work = (
    worker::Store,
    dpdk::RxQueue,
    dpdk::TxQueue,
    worker::Handoff,
    dataplane::control::WorkerControl,
);

/// Pairs each worker's partition with its queue pair, rings and control.
fn assign_work(
    stores: Vec<worker::Store>,
    queues: dpdk::PortQueues,
    rings: startup::HandoffRings,
    ctl: &Arc<ControlState>,
) -> Result<Vec<Work>, Box<dyn std::error::Error>> {
    let nw = stores.len();
    // A worker hands requests to a sleeping owner through its doorbell.
    let bells: Vec<_> = stores.iter().map(|s| s.bell.clone()).collect();
    let (mut rxs, mut txs) = (queues.rx.into_iter(), queues.tx.into_iter());
    let mut work = Vec::with_capacity(nw);
    for (w, (store, (inbox, outboxes))) in stores.into_iter().zip(rings).enumerate() {
        let (Some(rxq), Some(txq)) = (rxs.next(), txs.next()) else {
            return Err("port gave fewer queues than workers".into());
        };
        let handoff = worker::Handoff {
            me: w as u32,
            n: nw as u32,
            inbox,
            outboxes,
            bells: bells.clone(),
        };
        work.push((store, rxq, txq, handoff, ctl.worker(w)));
    }
    Ok(work)
}

/// The replication loop as it runs: on its lcore (`handle`) or inline in worker 0.
struct ReplRun {
    handle: Option<dpdk::LaunchHandle<u64>>,
    /// Its figures for the report (`frames_lost` set once it stopped).
    figures: Option<report::ReplFigures>,
}

/// Starts the replication loop: on its lcore, or (`--repl-inline`, a master without
/// etcd) polled by worker 0 between its bursts.
fn start_replication(
    repl: Option<replication::Replication>,
    work: &mut [Work],
    role: kvconf::ReplRole,
    inline: bool,
    pool: &Arc<Mempool>,
    deadline: Option<Instant>,
    (idle, rx_intr): (dpdk::IdlePolicy, bool),
) -> Result<ReplRun, Box<dyn std::error::Error>> {
    let mut run = ReplRun {
        handle: None,
        figures: None,
    };
    let Some(r) = repl else {
        return Ok(run);
    };
    run.figures = Some(report::ReplFigures {
        status: r.status.clone(),
        lost: r.lost.clone(),
        apply: r.apply.clone(),
        frames_lost: 0,
    });
    if inline {
        if role != kvconf::ReplRole::Master {
            return Err("--repl-inline needs a master without etcd".into());
        }
        println!("dataplane: replication inline on worker 0 (baseline: no offload)");
        let rep = replicator::Replicator::new(r.links, r.logic, pool.clone())
            .with_status(r.status.clone());
        work[0].0.inline_repl = Some(rep);
        return Ok(run);
    }
    let pool = pool.clone();
    let (links, logic, status, bell) = (r.links, r.logic, r.status.clone(), r.bell);
    run.handle = Some(dpdk::lcore::launch_on(r.lcore, move || {
        let rep = replicator::Replicator::new(links, logic, pool).with_status(status);
        replicator::run(rep, &QUIT, deadline, idle, bell, rx_intr)
    })?);
    Ok(run)
}

/// Runs every worker: 1.. on their lcores, 0 here (it alone prints, one labelled line
/// per worker); returns their partitions once all stopped.
fn run_workers(
    work: Vec<Work>,
    lcores: &[Option<dpdk::LcoreId>],
    pool: &Arc<Mempool>,
    stats: &[Arc<WorkerStats>],
    wcfg: worker::WorkerConfig,
) -> Result<Vec<worker::Store>, Box<dyn std::error::Error>> {
    let mut handles = Vec::new();
    let mut main_work = None;
    for (w, (store, rxq, txq, handoff, mut wctl)) in work.into_iter().enumerate() {
        match lcores[w] {
            None => main_work = Some((store, rxq, txq, handoff, wctl)),
            Some(lcore) => {
                let (pool, st, wc) = (pool.clone(), stats[w].clone(), wcfg.clone());
                handles.push(dpdk::lcore::launch_on(lcore, move || {
                    worker::run(store, rxq, txq, handoff, &pool, &st, &wc, &QUIT, &mut wctl)
                })?);
            }
        }
    }
    let (store0, rxq, txq, handoff, mut wctl) = main_work.ok_or("no worker on the main lcore")?;
    let main_cfg = worker::WorkerConfig {
        printed: stats.to_vec(),
        ..wcfg
    };
    let mut stores = vec![worker::run(
        store0, rxq, txq, handoff, pool, &stats[0], &main_cfg, &QUIT, &mut wctl,
    )];
    // The main worker stopped (Ctrl-C or deadline): make sure the others stop too.
    QUIT.store(true, Ordering::Relaxed);
    for h in handles {
        stores.push(h.wait().map_err(|e| format!("worker lcore: {e}"))?);
    }
    Ok(stores)
}

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let plan = startup::plan(&args)?;
    let cfg = &plan.cfg;
    let eal_args = cfg
        .dataplane
        .eal_args("dataplane", plan.huge, cfg.server.mtu);
    eprintln!("dataplane: EAL {}", eal_args[1..].join(" "));
    let eal = Eal::init(&eal_args[1..])?;
    ctrlc::set_handler(|| QUIT.store(true, Ordering::Relaxed))?;
    if args.pdump {
        dpdk::pdump::init()?;
    }

    // The node: workers and their partitions, the port, replication.
    let repl_lcore = replication::lcore(plan.role)?;
    let worker_lcores = startup::worker_lcores(repl_lcore);
    let nw = worker_lcores.len();
    let pool = Arc::new(startup::mbuf_pool(cfg)?);
    let sleeping = matches!(
        startup::idle_policy(&plan, &args),
        dpdk::IdlePolicy::Sleep { .. }
    );
    let (port, queues) = startup::open_port(cfg, nw, &pool, sleeping && !args.no_rx_intr)?;
    if sleeping && !args.no_rx_intr {
        startup::report_rx_intr(&port, &queues.rx);
    }
    let registry = startup::functions(cfg)?;
    let ooo = args.ooo.unwrap_or(cfg.server.ooo);
    let spec = startup::PartitionSpec {
        cfg,
        args: &args,
        huge: plan.huge,
        socket: port.socket_id(),
        registry: &registry,
        ooo,
    };
    let mut stores = spec.stores(nw)?;
    if nw > 1 && sleeping && !args.no_doorbells {
        // Idle workers sleep on a doorbell the others ring when they hand them requests.
        for s in &mut stores {
            let bell = dpdk::Doorbell::new()?;
            let ring = bell.clone();
            // A cross-partition transaction's coordinator wakes the workers it parks.
            s.server.set_park_waker(Box::new(move || ring.ring()));
            s.bell = Some(bell);
        }
    }
    let rings = startup::handoff_rings(nw, port.socket_id())?;
    startup::print_banner(&plan, &args, &port, nw, ooo, &registry);
    let sleeps = !args.no_doorbells && sleeping;
    let mut repl = replication::setup(cfg, plan.role, repl_lcore, &mut stores, &pool, sleeps)?;
    if let Some(r) = &repl {
        let (role, lcore, links) = (plan.role, r.lcore.0, r.links.len());
        println!("dataplane: replication {role:?} on lcore {lcore}, {links} link(s)");
    }

    // Control: counters, the slab daemon, telemetry.
    let stats: Vec<Arc<WorkerStats>> = (0..nw).map(|_| Arc::new(WorkerStats::default())).collect();
    let slab = SlabDaemon::new(
        stores
            .iter()
            .map(|s| s.server.engine().slab_service())
            .collect(),
    );
    let clients: Vec<(u32, u32)> = cfg.clients.iter().map(|c| (c.qpn, c.rkey)).collect();
    let ctl = ControlState::new(stats.clone(), &clients);
    ctl.set_initial_tenants(startup::tenant_rules(&cfg.tenants)?, cfg.server.anonymous);
    ctl.set_latency_sample_every(cfg.server.latency_sample_every);
    let cfg_json = serde_json::to_value(cfg)?;
    telemetry::register(&ctl, cfg_json, slab.clone(), Arc::clone(&pool))?;
    let deadline = (args.duration > 0).then(|| Instant::now() + Duration::from_secs(args.duration));
    println!("dataplane ready (mbufs in use {})", pool.in_use_count());
    let wcfg = startup::worker_config(&plan, &args, deadline)?;
    let merge_every = (args.merge_every_ms > 0).then(|| Duration::from_millis(args.merge_every_ms));
    let slab_thread = slab.spawn(Duration::from_millis(50), merge_every, &QUIT)?;

    // Run until Ctrl-C or the deadline.
    let mut work = assign_work(stores, queues, rings, &ctl)?;
    let repl_ports = repl.as_mut().map(|r| std::mem::take(&mut r.ports));
    let repl_log = repl.as_mut().and_then(|r| r.log_writer.take());
    let idle = (wcfg.idle, wcfg.rx_intr);
    let inline = args.repl_inline;
    // The cluster's control side (etcd): role changes logged, its tenants applied.
    let cluster = repl.as_mut().and_then(|r| r.cluster.take());
    if inline && cluster.is_some() {
        return Err("--repl-inline needs a master without etcd".into());
    }
    let cluster_thread = cluster
        .map(|(handle, view)| replication::spawn_cluster_thread(handle, view, ctl.clone(), &QUIT))
        .transpose()?;
    let rr = start_replication(repl, &mut work, plan.role, inline, &pool, deadline, idle)?;
    let stores = run_workers(work, &worker_lcores, &pool, &stats, wcfg)?;
    let frames_lost = match rr.handle {
        Some(h) => h.wait().map_err(|e| format!("replication lcore: {e}"))?,
        None => 0,
    };
    // The replication lcore stopped feeding it: the log file ends synced.
    if let Some((shared, t)) = repl_log {
        shared.stop.store(true, Ordering::Release);
        let _ = t.join();
    }
    let _ = slab_thread.join();
    // Leaves the cluster (a master's lease is revoked: its successor is elected at
    // once instead of after the lease's TTL).
    if let Some(t) = cluster_thread {
        let _ = t.join();
    }
    ctl.snapshot().abort("the dataplane stopped");

    let mut repl_figures = rr.figures;
    if let Some(f) = repl_figures.as_mut() {
        f.frames_lost = frames_lost;
    }

    report::final_report(&report::Inputs {
        stats: &stats,
        stores: &stores,
        repl: repl_figures.as_ref(),
        slab_merges: slab.merges(),
        port: &port,
        pool: &pool,
        latency_sample_every: cfg.server.latency_sample_every,
        stats_json: args.stats_json.as_deref(),
    })?;
    drop(stores);
    let _ = port.stop();
    for p in repl_ports.into_iter().flatten() {
        let _ = p.stop();
    }
    drop(eal);
    Ok(())
}
