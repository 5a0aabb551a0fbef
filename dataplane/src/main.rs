//! `dataplane`: the KV-Direct appliance.
//!
//! Start-up: config file + flags → EAL → mbuf pool → port → store memory (DPDK
//! hugepage memory when available) → engine → worker loop on the main lcore until
//! Ctrl-C/SIGTERM or `--duration`, then final stats.

mod telemetry;
mod worker;

use clap::Parser;
use dataplane::control::ControlState;
use dataplane::server::{Identity, Server};
use dataplane::stats::WorkerStats;
use dpdk::{Eal, Mempool, Port, PortConfig};
use kvconf::Config;
use kvengine::{Engine, EngineConfig, Region};
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
    /// Initialise DPDK's packet-capture framework so `dpdk-dumpcap` can attach.
    #[arg(long)]
    pdump: bool,
    /// Write the final stats as JSON to this file.
    #[arg(long)]
    stats_json: Option<PathBuf>,
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
    if let Some(l) = &args.lcores {
        cfg.dataplane.lcores = l.clone();
    }
    if let Some(v) = &args.vdev {
        if cfg.dataplane.vdevs.is_empty() {
            cfg.dataplane.vdevs.push(v.clone());
        } else {
            cfg.dataplane.vdevs[0] = v.clone();
        }
    }
    if let Some(p) = &args.file_prefix {
        cfg.dataplane.file_prefix = p.clone();
    }
    if let Some(m) = args.mem_mb {
        cfg.engine.mem_mb = m;
    }
    let engine_mb = cfg.engine.mem_mb as u32;
    let huge = !args.no_huge
        && kvconf::resolve_hugepages(cfg.dataplane.hugepages, cfg.dataplane.memory_mb + engine_mb)?;
    if huge {
        // The store is carved from EAL memory too.
        cfg.dataplane.memory_mb += engine_mb;
    }
    let p = &cfg.dataplane;
    let eal_args = p.eal_args("dataplane", huge);
    eprintln!("dataplane: EAL {}", eal_args[1..].join(" "));
    let eal = Eal::init(&eal_args[1..])?;

    ctrlc::set_handler(|| QUIT.store(true, Ordering::Relaxed))?;
    if args.pdump {
        dpdk::pdump::init()?;
    }

    let pool = Mempool::create_pktmbuf("kvd_pool", p.mbufs, 256, 2048 + 128, dpdk::SOCKET_ID_ANY)?;
    let port = Port::by_name(&p.port).map_err(|e| format!("port {:?}: {e}", p.port))?;
    let pcfg = PortConfig {
        nb_rxq: 1,
        nb_txq: 1,
        rxd: p.rxd,
        txd: p.txd,
        ..PortConfig::default()
    };
    let mut queues = port.configure(&pcfg, &pool)?;
    let (rxq, txq) = (queues.rx.remove(0), queues.tx.remove(0));

    // Store memory: DPDK hugepage memory when we run on hugepages, else the heap.
    let mem_bytes = cfg.engine.mem_mb << 20;
    let (region, dpdk_mem) = if huge {
        let mut m = dpdk::malloc::zmalloc_socket("kvd_store", mem_bytes, 2 << 20, port.socket_id())
            .ok_or("cannot allocate the store from DPDK hugepage memory")?;
        // SAFETY: `m` is a live DPDK allocation of `mem_bytes` bytes that nothing else
        // references; it is moved into `Store` below, declared after the engine, so it
        // is freed only after the engine that points into it is dropped.
        let r = unsafe { Region::from_raw(m.as_mut_ptr(), m.len()) };
        (r, Some(m))
    } else {
        (Region::owned(mem_bytes), None)
    };
    let ecfg = EngineConfig {
        mem_bytes,
        hash_index_ratio: cfg.engine.hash_index_ratio,
        inline_threshold: cfg.engine.inline_threshold,
        ..EngineConfig::default()
    };
    let engine = Engine::new(region, &ecfg).map_err(|e| format!("engine config: {e:?}"))?;
    let id = Identity {
        mac: p.mac_bytes(),
        ip: p.ip,
        qpn: cfg.server.qpn,
        qkey: cfg.server.qkey,
        region_va: cfg.server.request_region_va,
        region_len: cfg.server.request_region_len,
        mtu: kvwire::DEFAULT_MTU,
    };
    let clients: Vec<(u32, u32)> = cfg.clients.iter().map(|c| (c.qpn, c.rkey)).collect();
    let server = Server::new(id, &clients, engine);
    let store = worker::Store {
        server,
        _mem: dpdk_mem,
    };

    println!(
        "dataplane: port {} ({}) mac {} ip {} qpn {} clients {} store {} MiB on {} mode {}",
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
        if args.echo { "echo" } else { "kv" }
    );

    println!(
        "dataplane: server qpn {} qkey {:#x} request region va {:#x} len {}",
        cfg.server.qpn,
        cfg.server.qkey,
        cfg.server.request_region_va,
        cfg.server.request_region_len
    );
    for c in &cfg.clients {
        println!("dataplane: client qpn {} rkey {:#x}", c.qpn, c.rkey);
    }
    let stats = Arc::new(WorkerStats::default());
    // Control plane: telemetry commands over the state shared with the worker(s).
    let ctl = ControlState::new(vec![Arc::clone(&stats)], &clients);
    telemetry::register(&ctl, serde_json::to_value(&cfg)?)?;
    let mut worker_ctl = ctl.worker(0);
    let interval = args.stats_interval.unwrap_or(cfg.server.stats_interval_s);
    let deadline = (args.duration > 0).then(|| Instant::now() + Duration::from_secs(args.duration));
    println!("dataplane ready (mbufs in use {})", pool.in_use_count());
    let wcfg = worker::WorkerConfig {
        burst: p.burst,
        drain_us: cfg.server.tx_drain_us,
        echo: args.echo,
        stats_interval: Duration::from_secs(interval),
        deadline,
    };
    let store = worker::run(
        store,
        rxq,
        txq,
        &pool,
        &stats,
        &wcfg,
        &QUIT,
        &mut worker_ctl,
    );

    // Final stats.
    println!("dataplane: final stats");
    let mut all = stats.snapshot();
    let es = store.server.engine().stats();
    all.push(("engine_kvs".into(), es.stored_kvs));
    all.push((
        "engine_utilization_ppm".into(),
        (es.memory_utilization * 1e6) as u64,
    ));
    for (k, v) in &all {
        println!("  {k:<28} {v}");
    }
    if let Ok(ps) = port.stats() {
        println!(
            "  port: ipackets {} opackets {} imissed {} ierrors {} oerrors {} rx_nombuf {}",
            ps.ipackets, ps.opackets, ps.imissed, ps.ierrors, ps.oerrors, ps.rx_nombuf
        );
    }
    println!("  mbufs in use {}", pool.in_use_count());
    if let Some(path) = &args.stats_json {
        let mut m = serde_json::Map::new();
        for (k, v) in &all {
            m.insert(k.clone(), (*v).into());
        }
        m.insert("mbufs_in_use".into(), pool.in_use_count().into());
        std::fs::write(path, serde_json::to_string_pretty(&m)?)?;
    }
    drop(store);
    let _ = port.stop();
    drop(eal);
    Ok(())
}
