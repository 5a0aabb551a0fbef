//! `pktgen`: the KV-Direct load generator (the paper's FPGA client, in software).
//!
//! Phases: loop-back calibration (empty batches, one at a time; the minimum round
//! trip is the transport floor subtracted from reported latency) → optional load
//! phase (PUT every key, progress on stderr) → warm-up → measurement. Closed loop
//! keeps `--window` packets outstanding; open loop (`--rate`) sends on a schedule and
//! measures latency from each packet's *intended* send time, so a stalled server is
//! charged for the queueing it causes (no coordinated omission).
//!
//! With `--partitions N` the dataplane runs N workers, each owning a key partition
//! and polling its own queue pair: every packet carries one partition's keys, from a
//! QP of that partition, on that partition's queue (`steer.rs` keeps the drawn key
//! sequence intact while doing so).
//!
//! Requests go through the client library's reliable transport (`kvclient`:
//! connections, credits, retransmission, reassembly; protocol v2), which `io` moves
//! over the DPDK port, with `--loss/--dup/--reorder` injected on both sides. In echo
//! mode (`--echo`) frames are raw: the dataplane bounces them, no transport.
//!
//! Modules: `cli` (flags) → `spec` (the checked run) → `gen` (building request
//! payloads, checking results, the verify model's bookkeeping; no DPDK) → `phases`
//! (the event loop and the phases, over kvclient's `Transport` and `io`'s `PortIo`)
//! → `report` (table, JSON, plot). `qp` frames echo mode's raw requests, `model` is
//! verify mode's model of the store, `steer` the per-partition steering. This file is
//! the wiring: flags, config, EAL and port, phases, report.

mod cli;
mod cost;
mod fuzz;
mod gen;
mod io;
mod model;
mod phases;
mod qp;
mod report;
mod spec;
mod steer;
mod txn_bench;
mod txn_shared;
mod ycsb;

use clap::Parser;
use cli::Args;
use dpdk::{tsc, Eal, Mempool, Port, PortConfig, PortQueues};
use gen::Gen;
use io::PortIo;
use kvclient::Transport;
use kvconf::{Config, Role};
use kvwire::frame::FrameParams;
use kvwire::{request_payload_capacity, DEFAULT_MTU};
use phases::{Driver, QUIT};
use qp::QpSet;
use spec::RunSpec;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn main() {
    let args = Args::parse();
    match run(args) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("pktgen: error: {e}");
            std::process::exit(2);
        }
    }
}

/// The client-facing address of each `--follow-ports` node (the config's
/// `replication.client_nodes`, in port order); empty for one port, or when the config
/// lists none (the nodes then share the config's `dataplane` address).
fn follow_nodes(cfg: &Config, ports: usize) -> Result<Vec<kvclient::NodeAddr>, String> {
    let listed = &cfg.replication.client_nodes;
    if ports < 2 || listed.is_empty() {
        return Ok(Vec::new());
    }
    if listed.len() != ports {
        return Err(format!(
            "--follow-ports names {ports} ports but replication.client_nodes lists {} nodes",
            listed.len()
        ));
    }
    listed
        .iter()
        .map(|n| {
            let mac = kvconf::parse_mac(&n.mac)
                .map_err(|e| format!("replication.client_nodes[].mac: {e}"))?;
            Ok((mac, n.ip))
        })
        .collect()
}

type Error = Box<dyn std::error::Error>;

fn run(args: Args) -> Result<i32, Error> {
    let mut cfg = Config::load(&args.config)?;
    cfg.apply_overrides(Role::Pktgen, &args.overrides());
    // Checked before EAL init: a bad flag is a usage error.
    let spec = RunSpec::new(&args, &cfg)?;
    for w in &spec.warnings {
        eprintln!("pktgen: {w}");
    }
    let p = &cfg.pktgen;
    let huge = !spec.no_huge && kvconf::resolve_hugepages(p.hugepages, p.memory_mb)?;
    let eal_args = p.eal_args("pktgen", huge, cfg.server.mtu);
    eprintln!("pktgen: EAL {}", eal_args[1..].join(" "));
    let eal = Eal::init(&eal_args[1..])?;
    ctrlc::set_handler(|| QUIT.store(true, Ordering::Relaxed))?;
    let Net {
        ports,
        io,
        params,
        nodes,
    } = open_net(&args, &cfg, &spec)?;
    let mtu = cfg.server.mtu;
    let tcfg = transport_config(&spec.phases, mtu);
    let code = if args.tx_audit {
        txn_bench::audit(io, &spec, tcfg, params, &nodes)?
    } else if let Some(t) = &args.tx {
        let mut tx = txn_bench::TxArgs::parse(t, args.tx_baseline)?;
        tx.shared = args.tx_shared;
        tx.inflight = args.tx_inflight;
        txn_bench::run(io, &spec, tcfg, params, &tx, &nodes)?
    } else {
        check_put_fits(&spec, mtu)?;
        let transport = (!spec.phases.echo).then(|| {
            let mut t = Transport::with_qps(tcfg, &spec.qps.client_qps(), params);
            t.set_credentials(spec.qps.credentials().cloned());
            t
        });
        let qps = QpSet::new(
            spec.qps.qps.clone(),
            spec.qps.by_partition.clone(),
            params,
            cfg.server.request_region_va,
            cfg.server.request_region_len,
            spec.workload.seed ^ now_nanos(),
        );
        let payload_cap = request_payload_capacity(usize::from(mtu));
        let gen = Gen::new(&spec, qps, tsc::hz(), payload_cap);
        let mut d = Driver::new(gen, io, transport, &spec);
        if ports.len() > 1 {
            if spec.phases.echo {
                return Err("--follow-ports needs the transport (not --echo)".into());
            }
            d.follow(ports.len(), nodes);
        }
        measure(&mut d, &spec, &args, huge, ports.len())?
    };
    stop_ports(&ports);
    drop(eal);
    Ok(code)
}

/// The generator's network: its ports, their queues as one I/O, the frame
/// addresses, and the cluster's nodes when following a master.
struct Net {
    ports: Vec<Port>,
    io: PortIo,
    params: FrameParams,
    nodes: Vec<kvclient::NodeAddr>,
}

/// The mbuf pool (every frame of the server's MTU fits one mbuf) and the ports: one,
/// or with --follow-ports one per node of a replicated cluster (their queues side
/// by side: node k's are k * partitions ..); the fuzzer set up on them.
fn open_net(args: &Args, cfg: &Config, spec: &RunSpec) -> Result<Net, Error> {
    let p = &cfg.pktgen;
    let mtu = cfg.server.mtu;
    let pool = Mempool::create_pktmbuf(
        "pktgen_pool",
        p.mbufs,
        256,
        kvconf::mbuf_data_room(mtu),
        dpdk::SOCKET_ID_ANY,
    )?;
    let names = if args.follow_ports.is_empty() {
        vec![p.port.clone()]
    } else {
        args.follow_ports.clone()
    };
    let (ports, rx, tx) = open_ports(&names, &pool, p, spec.qps.partitions, mtu)?;
    let params = FrameParams::new(
        p.mac_bytes(),
        cfg.dataplane.mac_bytes(),
        p.ip,
        cfg.dataplane.ip,
        0xC000,
    );
    let ph = &spec.phases;
    let n = spec.qps.partitions as usize;
    let tx_of = (0..n)
        .map(|p| if spec.qps.misdirect { (p + 1) % n } else { p })
        .collect();
    let mut io = PortIo::new(pool, rx, tx, tx_of, ph.tx_faults, ph.rx_faults)?;
    io.set_nodes(ports.len());
    let nodes = follow_nodes(cfg, ports.len())?;
    io.set_node_macs(nodes.iter().map(|n| n.0).collect());
    if args.fuzz > 0 {
        setup_fuzz(args, cfg, spec, params, &mut io);
    }
    Ok(Net {
        ports,
        io,
        params,
        nodes,
    })
}

/// The phases (connect, calibrate, load, measure, read back, exactly-once), then the
/// report: printed, and written as JSON with `--json`. The exit code.
fn measure(
    d: &mut Driver,
    spec: &RunSpec,
    args: &Args,
    huge: bool,
    ports: usize,
) -> Result<i32, Error> {
    d.connect(Duration::from_millis(spec.phases.connect_timeout_ms))?;
    let calib_ns = match spec.phases.calibrate {
        0 => 0.0,
        n => d.calibrate(n)?,
    };
    let load = spec.phases.load.then(|| d.load(spec));
    let measurement = d.measure(spec);
    let readback = (spec.phases.verify && !QUIT.load(Ordering::Relaxed)).then(|| d.readback(spec));
    let exactly_once = (spec.phases.exactly_once > 0 && !QUIT.load(Ordering::Relaxed))
        .then(|| {
            let tenant = spec.qps.credentials().map_or(0, |c| c.tenant);
            d.exactly_once(spec.phases.exactly_once, now_nanos(), tenant)
        })
        .flatten();
    let outcome = report::Outcome {
        spec,
        label: spec.label.clone().unwrap_or_else(|| report::label(spec)),
        calib_ns,
        huge,
        load,
        measurement,
        readback,
        transport: d.transport_stats(),
        exactly_once,
    };
    outcome.print();
    let fuzz = d.fuzz_report();
    if let Some(f) = &fuzz {
        print_fuzz(f, args.fuzz);
    }
    let follow = d
        .follow_moves()
        .map(|m| serde_json::json!({"nodes": ports, "moves": m}));
    if let Some(f) = &follow {
        println!("follow: {} nodes, moved {} times", ports, f["moves"]);
    }
    if let Some(path) = &spec.json {
        outcome.write(path)?;
        add_to_json(path, fuzz.as_ref(), follow)?;
    }
    Ok(outcome.exit_code())
}

/// Ports, and all their rx and tx queues.
type OpenedPorts = (Vec<Port>, Vec<dpdk::RxQueue>, Vec<dpdk::TxQueue>);

/// The ports of `names` with `partitions` queue pairs each, their queues side by
/// side (node k's are k * partitions ..).
fn open_ports(
    names: &[String],
    pool: &Mempool,
    p: &kvconf::ProcessConfig,
    partitions: u32,
    mtu: u16,
) -> Result<OpenedPorts, Box<dyn std::error::Error>> {
    let mut ports = Vec::new();
    let (mut rx, mut tx) = (Vec::new(), Vec::new());
    for name in names {
        let port = Port::by_name(name).map_err(|e| format!("port {name:?}: {e}"))?;
        let q: PortQueues = open_port(&port, pool, p, partitions, mtu)?;
        rx.extend(q.rx);
        tx.extend(q.tx);
        ports.push(port);
    }
    Ok((ports, rx, tx))
}

/// `--fuzz N`: malformed frames on the config's clients the workload does not use,
/// never on the workload's QPs.
fn setup_fuzz(args: &Args, cfg: &Config, spec: &RunSpec, params: FrameParams, io: &mut PortIo) {
    let seed = args.fuzz_seed.unwrap_or_else(now_nanos);
    let fuzz_qps: Vec<(u32, u32)> = cfg
        .clients
        .iter()
        .map(|c| (c.qpn, c.rkey))
        .filter(|c| !spec.qps.qps.iter().any(|w| w.0 == c.0))
        .collect();
    let guard = fuzz::Guard {
        protected: spec.qps.qps.iter().map(|q| q.0).collect(),
        key_len: spec.workload.key_size,
    };
    eprintln!(
        "pktgen: fuzz {} frames, seed {seed} (--fuzz-seed {seed}), fuzz QPs {:?}, workload QPs {:?}",
        args.fuzz,
        fuzz_qps.iter().map(|q| q.0).collect::<Vec<_>>(),
        guard.protected
    );
    let f = fuzz::Fuzzer::new(args.fuzz, seed, params, &fuzz_qps, guard);
    io.set_fuzz(f, args.fuzz_per_flush);
}

/// The client transport's settings from the run's phases.
fn transport_config(ph: &spec::PhaseSpec, mtu: u16) -> kvclient::Config {
    kvclient::Config {
        mtu: usize::from(mtu),
        rto_initial_ns: ph.rto_us * 1000,
        rto_min_ns: ph.rto_min_us * 1000,
        rto_max_ns: (ph.timeout_ms * 1_000_000).max(ph.rto_us * 1000),
        max_retries: 8,
        give_up_ns: ph.timeout_ms * 1_000_000,
        connect_timeout_ns: 20_000_000,
        max_outstanding: ph.slots,
    }
}

/// One PUT (batch header, op header, key, value) must fit a request of the MTU.
fn check_put_fits(spec: &RunSpec, mtu: u16) -> Result<(), String> {
    let cap = request_payload_capacity(usize::from(mtu));
    let need = 8 + 4 + spec.workload.key_size + spec.workload.sizes.max;
    if need > cap {
        return Err(format!(
            "--value-size {}: a PUT of a {}-byte key and {}-byte value needs {need} B, one \
             request holds {cap} B at server.mtu {mtu} (up to 9000: jumbo frames)",
            spec.workload.value_size, spec.workload.key_size, spec.workload.sizes.max
        ));
    }
    Ok(())
}

/// The fuzzer's summary lines.
fn print_fuzz(f: &fuzz::FuzzStats, planned: u64) {
    println!(
        "fuzz: seed {} frames sent {} (of {planned}) refused by the guard {} fuzz ACCEPTs {}",
        f.seed, f.sent, f.refused, f.accepts
    );
    let kinds: Vec<String> = f
        .mutations
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    println!("fuzz: mutations {}", kinds.join(", "));
}

/// Adds the fuzz and follow reports to the JSON report at `path`.
fn add_to_json(
    path: &std::path::Path,
    fuzz: Option<&fuzz::FuzzStats>,
    follow: Option<serde_json::Value>,
) -> Result<(), Box<dyn std::error::Error>> {
    if fuzz.is_none() && follow.is_none() {
        return Ok(());
    }
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path)?)?;
    if let Some(f) = fuzz {
        v["fuzz"] = serde_json::to_value(f)?;
    }
    if let Some(f) = follow {
        v["follow"] = f;
    }
    std::fs::write(path, serde_json::to_string_pretty(&v)?)?;
    Ok(())
}

/// How long pktgen leaves the link up after its last request before disconnecting:
/// longer than the scheduling stalls of a loaded 2-core host (a dataplane worker
/// descheduled in the middle of a copy must have finished it).
const QUIESCE: Duration = Duration::from_millis(200);

/// Stops the ports once the server had time to finish sending. A memif server whose
/// client disconnects while it is copying a frame into the shared memory crashes
/// (DPDK 22.11's memif unmaps the regions from its interrupt thread without waiting
/// for the datapath; seen with 8 KiB responses at MTU 9000, and once in a CI run of
/// the partitions test after 50 ms): every request is answered or given up by now,
/// so after a pause the server's queue is idle.
fn stop_ports(ports: &[Port]) {
    std::thread::sleep(QUIESCE);
    for p in ports {
        let _ = p.stop();
    }
}

/// Configures and starts `port` with one queue pair per partition and waits for its
/// link.
fn open_port(
    port: &Port,
    pool: &Mempool,
    p: &kvconf::ProcessConfig,
    nparts: u32,
    mtu: u16,
) -> Result<PortQueues, Box<dyn std::error::Error>> {
    // One queue pair per partition; memif negotiates the ring count with the server.
    let pcfg = PortConfig {
        nb_rxq: nparts as u16,
        nb_txq: nparts as u16,
        rxd: p.rxd,
        txd: p.txd,
        mtu: (usize::from(mtu) != DEFAULT_MTU).then_some(mtu),
        ..PortConfig::default()
    };
    // A memif server still tearing down the previous client refuses the connection
    // for a moment (port start fails): retry for a few seconds. A server that was
    // still setting up its port when we connected may leave the link down for good:
    // after 5 s down, connect again (port stopped and started), until 30 s.
    let t0 = Instant::now();
    let mut tries = 0;
    loop {
        let q = loop {
            match port.configure(&pcfg, pool) {
                Ok(q) => break q,
                Err(e) if e.op == "rte_eth_dev_set_mtu" => {
                    return Err(kvconf::mtu_refused(&p.port, mtu, e).into())
                }
                Err(e) if tries < 25 => {
                    tries += 1;
                    eprintln!("pktgen: port start failed ({e}), retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => return Err(e.into()),
            }
        };
        let attempt = Instant::now();
        while !port.link()?.up {
            if t0.elapsed() > Duration::from_secs(30) || QUIT.load(Ordering::Relaxed) {
                // A memif server with fewer queue pairs than we ask for refuses the rings.
                let hint = if nparts > 1 {
                    format!(", with {nparts} queue pairs as --partitions {nparts} needs?")
                } else {
                    "?".to_string()
                };
                return Err(format!(
                    "link did not come up in 30 s (is the dataplane running{hint})"
                )
                .into());
            }
            if attempt.elapsed() > Duration::from_secs(5) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if port.link()?.up {
            return Ok(q);
        }
        eprintln!("pktgen: link still down after 5 s, connecting again");
        drop(q);
        port.stop()?;
    }
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}
