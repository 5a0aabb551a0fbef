//! `dataplane`: the KV-Direct appliance.
//!
//! Start-up: config file + flags → EAL → mbuf pool → port → store memory (DPDK
//! hugepage memory when available) → engine → worker loop on the main lcore until
//! Ctrl-C/SIGTERM or `--duration`, then final stats.

mod replication;
mod replicator;
mod telemetry;
mod worker;

use clap::Parser;
use dataplane::control::ControlState;
use dataplane::packet::Identity;
use dataplane::server::Server;
use dataplane::slab_daemon::SlabDaemon;
use dataplane::stats::WorkerStats;
use dpdk::{Eal, Mempool, Port, PortConfig};
use kvconf::Config;
use kvengine::{Engine, EngineConfig, Region};
use kvops::FunctionRegistry;
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

fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = Config::load(&args.config)?;
    cfg.apply_overrides(
        kvconf::Role::Dataplane,
        &kvconf::Overrides {
            vdev: args.vdev.clone(),
            file_prefix: args.file_prefix.clone(),
            lcores: args.lcores.clone(),
            mem_mb: args.mem_mb,
        },
    );
    if let Some(every) = args.latency_sample_every {
        cfg.server.latency_sample_every = every;
    }
    let role = args.role.unwrap_or(cfg.replication.role);
    cfg.replication.role = role;
    cfg.replication.validate(role)?;
    if role != kvconf::ReplRole::Standalone {
        // The replication links are ports of this process too.
        let links = cfg.replication.vdevs.clone();
        cfg.dataplane.vdevs.extend(links);
    }
    let engine_mb = cfg.engine.mem_mb as u32;
    let huge = !args.no_huge
        && kvconf::resolve_hugepages(cfg.dataplane.hugepages, cfg.dataplane.memory_mb + engine_mb)?;
    if huge {
        // The store is carved from EAL memory too.
        cfg.dataplane.memory_mb += engine_mb;
    }
    let p = &cfg.dataplane;
    let eal_args = p.eal_args("dataplane", huge, cfg.server.mtu);
    eprintln!("dataplane: EAL {}", eal_args[1..].join(" "));
    let eal = Eal::init(&eal_args[1..])?;

    ctrlc::set_handler(|| QUIT.store(true, Ordering::Relaxed))?;
    if args.pdump {
        dpdk::pdump::init()?;
    }

    // One worker per EAL lcore (the main lcore is worker 0), each owning a key partition:
    // its own engine shard, station, and rx/tx queue pair (kvwire::partition).
    // A replicated node keeps its last lcore for the replication lcore.
    let repl_lcore = replication::lcore(role)?;
    let worker_lcores: Vec<Option<dpdk::LcoreId>> = std::iter::once(None)
        .chain(
            dpdk::lcore::workers()
                .filter(|l| Some(*l) != repl_lcore)
                .map(Some),
        )
        .collect();
    let nw = worker_lcores.len();
    let mtu = cfg.server.mtu;
    // Every frame of the MTU fits one mbuf (jumbo frames: 9 KiB mbufs).
    let pool = Arc::new(Mempool::create_pktmbuf(
        "kvd_pool",
        p.mbufs,
        256,
        kvconf::mbuf_data_room(mtu),
        dpdk::SOCKET_ID_ANY,
    )?);
    let port = Port::by_name(&p.port).map_err(|e| format!("port {:?}: {e}", p.port))?;
    let pcfg = PortConfig {
        nb_rxq: nw as u16,
        nb_txq: nw as u16,
        rxd: p.rxd,
        txd: p.txd,
        mtu: (usize::from(mtu) != kvwire::DEFAULT_MTU).then_some(mtu),
        ..PortConfig::default()
    };
    let queues = port.configure(&pcfg, &pool).map_err(|e| match e.op {
        "rte_eth_dev_set_mtu" => kvconf::mtu_refused(&p.port, mtu, e),
        _ => e.to_string(),
    })?;

    let id = Identity {
        mac: p.mac_bytes(),
        ip: p.ip,
        qpn: cfg.server.qpn,
        qkey: cfg.server.qkey,
        region_va: cfg.server.request_region_va,
        region_len: cfg.server.request_region_len,
        mtu: usize::from(mtu),
    };
    let clients: Vec<(u32, u32)> = cfg.clients.iter().map(|c| (c.qpn, c.rkey)).collect();
    let mut registry = FunctionRegistry::new();
    registry
        .load(
            cfg.server.functions.iter().map(|f| (f.id, f.name.as_str())),
            kvops::registry::samples::CATALOG,
        )
        .map_err(|e| format!("server.functions: {e}"))?;
    let ooo = args.ooo.unwrap_or(cfg.server.ooo);

    // Store memory per partition: DPDK hugepage memory when we run on hugepages, else
    // the heap.
    let mem_bytes = (cfg.engine.mem_mb << 20) / nw;
    let ecfg = EngineConfig {
        mem_bytes,
        hash_index_ratio: cfg.engine.hash_index_ratio,
        inline_threshold: cfg.engine.inline_threshold,
        ..EngineConfig::default()
    };
    let mut stores = Vec::with_capacity(nw);
    for w in 0..nw {
        let (region, dpdk_mem) = if huge {
            let mut m = dpdk::malloc::zmalloc_socket(
                &format!("kvd_store{w}"),
                mem_bytes,
                2 << 20,
                port.socket_id(),
            )
            .ok_or("cannot allocate the store from DPDK hugepage memory")?;
            // SAFETY: `m` is a live DPDK allocation of `mem_bytes` bytes that nothing
            // else references; it is moved into `Store` below, declared after the
            // engine, so it is freed only after the engine that points into it.
            let r = unsafe { Region::from_raw(m.as_mut_ptr(), m.len()) };
            (r, Some(m))
        } else {
            (Region::owned(mem_bytes), None)
        };
        let engine = Engine::new(region, &ecfg).map_err(|e| format!("engine config: {e:?}"))?;
        // Starting PSNs of first connections: a per-worker seed from the clock, so a
        // restarted dataplane does not repeat the previous run's PSNs.
        let seed = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64)
            ^ ((w as u64) << 56);
        let transport = dataplane::server::Transport {
            credits: cfg.server.credits,
            replay_cache_bytes: (cfg.server.replay_cache_kb as usize) << 10,
            seed,
        };
        let mut server = Server::with_transport(
            id.clone(),
            &clients,
            engine,
            ooo,
            registry.clone(),
            transport,
        )
        .map_err(|e| format!("server transport config: {e}"))?;
        server.set_partition(w as u32, nw as u32);
        server.set_station_kv(args.station_kv.unwrap_or(cfg.server.station_kv));
        stores.push(worker::Store {
            server,
            _mem: dpdk_mem,
            apply: None,
            inline_repl: None,
            sync: None,
        });
    }
    // Several partitions: transactions may span them (docs/TRANSACTIONS.md).
    if nw > 1 && nw <= dataplane::server::MAX_PARTITIONS {
        let table = dataplane::server::PartitionTable::new(nw)?;
        for s in &mut stores {
            s.server.set_partition_table(table.clone())?;
        }
    }
    if let Some(path) = &args.load {
        let t0 = Instant::now();
        let mut engines: Vec<&mut Engine> =
            stores.iter_mut().map(|s| s.server.engine_mut()).collect();
        let r = dataplane::snapshot::load_into(path, &mut engines)
            .map_err(|e| format!("--load: {e}"))?;
        println!(
            "dataplane: loaded {} records ({} keys, {} B, saved by {} partitions) from {} in {} ms",
            r.records,
            r.keys,
            r.bytes,
            r.saved_partitions,
            path.display(),
            t0.elapsed().as_millis()
        );
    }
    // Hand-off rings: one multi-producer inbox per worker.
    let mut inboxes = Vec::new();
    let mut producers: Vec<Vec<Option<dpdk::RingProducer<dpdk::Mbuf>>>> =
        (0..nw).map(|_| Vec::new()).collect();
    if nw > 1 {
        for w in 0..nw {
            let ring = dpdk::Ring::<dpdk::Mbuf>::create(
                &format!("kvd_handoff{w}"),
                4096,
                port.socket_id(),
                dpdk::RingMode::MpSc,
            )?;
            for (from, prods) in producers.iter_mut().enumerate() {
                prods.push((from != w).then(|| ring.producer()).transpose()?);
            }
            inboxes.push(Some(ring.consumer()?));
        }
    } else {
        inboxes.push(None);
    }

    println!(
        "dataplane: port {} ({}) mac {} ip {} qpn {} clients {} store {} MiB on {} mode {} workers {}",
        port.id().0,
        p.port,
        p.mac,
        p.ip,
        cfg.server.qpn,
        clients.len(),
        cfg.engine.mem_mb,
        if huge {
            "hugepages"
        } else {
            "heap (--no-huge)"
        },
        if args.echo { "echo" } else { "kv" },
        nw
    );

    println!(
        "dataplane: server qpn {} qkey {:#x} request region va {:#x} len {}",
        cfg.server.qpn,
        cfg.server.qkey,
        cfg.server.request_region_va,
        cfg.server.request_region_len
    );
    for c in &cfg.clients {
        println!(
            "dataplane: client qpn {} rkey {:#x} partition {}",
            c.qpn,
            c.rkey,
            kvwire::partition::partition_of_qp(c.qpn, nw as u32)
        );
    }
    println!(
        "dataplane: reservation station {}, functions: {}",
        if ooo {
            "out of order (data forwarding)"
        } else {
            "stall on conflict (ooo = false)"
        },
        registry
            .iter()
            .map(|(id, name)| format!("{id}={name}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let mut repl = replication::setup(&cfg, role, repl_lcore, &mut stores, &pool)?;
    if let Some(r) = &repl {
        println!(
            "dataplane: replication {:?} on lcore {}, {} link(s)",
            role,
            r.lcore.0,
            r.links.len()
        );
    }
    let stats: Vec<Arc<WorkerStats>> = (0..nw).map(|_| Arc::new(WorkerStats::default())).collect();
    // The slab daemon services every partition's pool off the worker lcores.
    let slab = SlabDaemon::new(
        stores
            .iter()
            .map(|s| s.server.engine().slab_service())
            .collect(),
    );
    // Control plane: telemetry commands over the state shared with the workers.
    let ctl = ControlState::new(stats.clone(), &clients);
    ctl.set_latency_sample_every(cfg.server.latency_sample_every);
    telemetry::register(
        &ctl,
        serde_json::to_value(&cfg)?,
        slab.clone(),
        Arc::clone(&pool),
    )?;
    let interval = args.stats_interval.unwrap_or(cfg.server.stats_interval_s);
    let deadline = (args.duration > 0).then(|| Instant::now() + Duration::from_secs(args.duration));
    println!("dataplane ready (mbufs in use {})", pool.in_use_count());
    let wcfg = worker::WorkerConfig {
        burst: p.burst,
        drain_us: cfg.server.tx_drain_us,
        echo: args.echo,
        stats_interval: Duration::from_secs(interval),
        printed: Vec::new(),
        deadline,
        idle_yield_polls: args.idle_yield_polls.unwrap_or(cfg.server.idle_yield_polls),
        inject: inject_config(&args)?,
        rnr_backlog: args.rnr_backlog.unwrap_or(worker::TX_BACKLOG),
        latency_sample_every: cfg.server.latency_sample_every,
        mtu: usize::from(mtu),
    };

    let merge_every = (args.merge_every_ms > 0).then(|| Duration::from_millis(args.merge_every_ms));
    let slab_thread = slab.spawn(Duration::from_millis(50), merge_every, &QUIT)?;

    // Launch workers 1.. on their lcores, run worker 0 here, then join.
    let mut rxs = queues.rx.into_iter();
    let mut txs = queues.tx.into_iter();
    let mut work = Vec::with_capacity(nw);
    for (w, ((store, inbox), outboxes)) in
        stores.into_iter().zip(inboxes).zip(producers).enumerate()
    {
        let (Some(rxq), Some(txq)) = (rxs.next(), txs.next()) else {
            return Err("port gave fewer queues than workers".into());
        };
        let handoff = worker::Handoff {
            me: w as u32,
            n: nw as u32,
            inbox,
            outboxes,
        };
        work.push((store, rxq, txq, handoff, ctl.worker(w)));
    }
    let idle_polls = wcfg.idle_yield_polls;
    let mut cluster_thread = None;
    let repl_ports = repl.as_mut().map(|r| std::mem::take(&mut r.ports));
    let repl_log = repl.as_mut().and_then(|r| r.log_writer.take());
    let (repl_handle, repl_view) = match repl {
        Some(r) if args.repl_inline => {
            if role != kvconf::ReplRole::Master || r.cluster.is_some() {
                return Err("--repl-inline needs a master without etcd".into());
            }
            println!("dataplane: replication inline on worker 0 (baseline: no offload)");
            let rep = replicator::Replicator::new(r.links, r.logic, pool.clone())
                .with_status(r.status.clone());
            work[0].0.inline_repl = Some(rep);
            (None, Some((r.status, r.lost, r.apply)))
        }
        Some(mut r) => {
            if let Some((handle, _view)) = r.cluster.take() {
                cluster_thread = Some(replication::spawn_event_log(handle, &QUIT)?);
            }
            let pool = pool.clone();
            let (links, logic, status) = (r.links, r.logic, r.status.clone());
            let h = dpdk::lcore::launch_on(r.lcore, move || {
                let rep = replicator::Replicator::new(links, logic, pool).with_status(status);
                replicator::run(rep, &QUIT, deadline, idle_polls)
            })?;
            (Some(h), Some((r.status, r.lost, r.apply)))
        }
        None => (None, None),
    };
    let mut handles = Vec::new();
    let mut main_work = None;
    for (w, (store, rxq, txq, handoff, mut wctl)) in work.into_iter().enumerate() {
        match worker_lcores[w] {
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
    // Only the main lcore prints, one labelled line per worker.
    let main_cfg = worker::WorkerConfig {
        printed: stats.clone(),
        ..wcfg
    };
    let mut stores = vec![worker::run(
        store0, rxq, txq, handoff, &pool, &stats[0], &main_cfg, &QUIT, &mut wctl,
    )];
    // The main worker stopped (Ctrl-C or deadline): make sure the others stop too.
    QUIT.store(true, Ordering::Relaxed);
    for h in handles {
        stores.push(h.wait().map_err(|e| format!("worker lcore: {e}"))?);
    }
    let repl_lost_frames = match repl_handle {
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

    // Final stats: totals over the workers, then per worker.
    println!("dataplane: final stats");
    let mut all: Vec<(String, u64)> = Vec::new();
    for st in &stats {
        for (k, v) in st.snapshot() {
            match all.iter_mut().find(|(n, _)| *n == k) {
                Some(e) => e.1 += v,
                None => all.push((k, v)),
            }
        }
    }
    let (mut kvs, mut util) = (0u64, 0.0f64);
    let mut digest = 0u64;
    for s in &stores {
        let es = s.server.engine().stats();
        kvs += es.stored_kvs;
        util += es.memory_utilization / nw as f64;
        digest = digest.wrapping_add(dataplane::repl::contents_digest(s.server.engine()));
    }
    all.push(("engine_kvs".into(), kvs));
    if let Some((_, lost, apply)) = &repl_view {
        use std::sync::atomic::Ordering::Relaxed;
        all.push(("repl_log_lost".into(), lost.load(Relaxed)));
        all.push(("repl_link_frames_lost".into(), repl_lost_frames));
        all.push((
            "repl_applied".into(),
            apply.iter().map(|a| a.applied.load(Relaxed)).sum(),
        ));
        all.push((
            "repl_apply_failed".into(),
            apply.iter().map(|a| a.failed.load(Relaxed)).sum(),
        ));
        all.push((
            "repl_applied_spans".into(),
            apply.iter().map(|a| a.spans.load(Relaxed)).sum(),
        ));
    }
    all.push(("slab_merges".into(), slab.merges()));
    all.push(("engine_utilization_ppm".into(), (util * 1e6) as u64));
    for (k, v) in &all {
        println!("  {k:<28} {v}");
    }
    let worker_ops: Vec<u64> = stats.iter().map(|s| s.ops()).collect();
    if nw > 1 {
        for (w, st) in stats.iter().enumerate() {
            println!(
                "  worker {w}: ops {} requests {} handed off {} handed in {}",
                st.ops(),
                st.requests.get(),
                st.handed_off.get(),
                st.handed_in.get()
            );
        }
    }
    if let Ok(ps) = port.stats() {
        println!(
            "  port: ipackets {} opackets {} imissed {} ierrors {} oerrors {} rx_nombuf {}",
            ps.ipackets, ps.opackets, ps.imissed, ps.ierrors, ps.oerrors, ps.rx_nombuf
        );
    }
    println!("  mbufs in use {}", pool.in_use_count());
    let mut lat = [0u64; dataplane::latency::BOUNDS + 1];
    for st in &stats {
        for (c, x) in lat.iter_mut().zip(st.latency.counts()) {
            *c += x;
        }
    }
    let sampled: u64 = lat.iter().sum();
    let q = |q| dataplane::latency::LatencyHist::quantile_bound(&lat, q).unwrap_or(0);
    let (p50, p99) = (q(0.5), q(0.99));
    if sampled > 0 {
        println!(
            "  service latency (1 in {} packets, {sampled} sampled): p50 <= {p50} ns, p99 <= {p99} ns",
            cfg.server.latency_sample_every
        );
    }
    if let Some(path) = &args.stats_json {
        let mut m = serde_json::Map::new();
        for (k, v) in &all {
            m.insert(k.clone(), (*v).into());
        }
        m.insert("mbufs_in_use".into(), pool.in_use_count().into());
        // Order-independent digest of every stored KV: equal on two nodes with the
        // same contents (replication tests compare master and replicas with it).
        m.insert("engine_digest".into(), format!("{digest:016x}").into());
        m.insert("workers".into(), nw.into());
        m.insert("worker_ops".into(), worker_ops.clone().into());
        m.insert("latency_sampled".into(), sampled.into());
        m.insert("latency_p50_le_ns".into(), p50.into());
        m.insert("latency_p99_le_ns".into(), p99.into());
        if let Some((status, _, _)) = &repl_view {
            m.insert("replication".into(), status.to_json());
        }
        std::fs::write(path, serde_json::to_string_pretty(&m)?)?;
    }
    drop(stores);
    let _ = port.stop();
    for p in repl_ports.into_iter().flatten() {
        let _ = p.stop();
    }
    drop(eal);
    Ok(())
}
