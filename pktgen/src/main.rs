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

mod model;
mod report;
mod steer;

use clap::{Parser, ValueEnum};
use dpdk::{tsc, Eal, IdleBackoff, Mbuf, MbufBurst, Mempool, Port, PortConfig, RxQueue, TxQueue};
use hdrhistogram::Histogram;
use kvconf::Config;
use kvwire::frame::FrameParams;
use kvwire::partition::{partition_of_hash, partition_of_qp};
use kvwire::{
    emit_request_headers, finalize, parse_request_unverified, parse_response, request_frame_len,
    request_payload_capacity, BatchReader, BatchWriter, KvOp, ResponseReader, Status, DEFAULT_MTU,
    REQUEST_HEADER_LEN,
};
use model::{Expect, Model};
use report::Percentiles;
use serde_json::json;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use steer::{Drawn, Steer};
use kvload::{Distribution, KeyChooser, Mix, OpType, SizeDist, Xorshift64Star as Rng};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Dist {
    Uniform,
    Zipf,
}

/// Workload and measurement flags; addresses and QPs come from the config file.
#[derive(Parser, Debug, Clone)]
#[command(
    version,
    args_override_self = true,
    about = "KV-Direct traffic generator: batched RoCEv2 KV load, latency percentiles"
)]
struct Args {
    /// Topology/config file (JSON) shared with the dataplane.
    #[arg(long, default_value = "configs/memif.json")]
    config: PathBuf,
    /// Override the first vdev of the config's pktgen section.
    #[arg(long)]
    vdev: Option<String>,
    /// Override the EAL file prefix.
    #[arg(long)]
    file_prefix: Option<String>,
    /// Override the EAL lcore list.
    #[arg(long)]
    lcores: Option<String>,
    /// Force --no-huge.
    #[arg(long)]
    no_huge: bool,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    keys: u64,
    /// Key size in bytes (>= 1; below 8 the key count must fit).
    #[arg(long, default_value_t = 8)]
    key_size: usize,
    /// Value size in bytes: `N` or `MIN-MAX` (uniform per key and version).
    #[arg(long, default_value = "2")]
    value_size: String,
    /// Share of GETs.
    #[arg(long, default_value_t = 0.95)]
    get: f64,
    /// Share of PUTs (the rest are DELETEs).
    #[arg(long, default_value_t = 0.05)]
    put: f64,
    /// Share of atomic fetch-adds (UPDATE_S2S, +1 to the value as one u64; needs
    /// 8-byte values, others get BAD_LENGTH).
    #[arg(long, default_value_t = 0.0)]
    atomic: f64,
    /// Share of vector updates (UPDATE_S2V, +1 to every u64 element; values must be a
    /// multiple of 8 bytes).
    #[arg(long, default_value_t = 0.0)]
    vector: f64,
    /// Share of REDUCEs (sum of the u64 elements).
    #[arg(long, default_value_t = 0.0)]
    reduce: f64,
    /// Key popularity.
    #[arg(long, value_enum, default_value_t = Dist::Uniform)]
    dist: Dist,
    /// Zipf skew.
    #[arg(long, default_value_t = 0.99)]
    theta: f64,
    /// KV operations per packet (client-side batching).
    #[arg(long, default_value_t = 8)]
    ops_per_packet: usize,
    /// Client QPs to spread packets over (from the config's clients list).
    #[arg(long, default_value_t = 1)]
    qps: usize,
    /// Index in the config's clients list of the first QP used (the run uses
    /// `--qps` QPs from there on).
    #[arg(long, default_value_t = 0)]
    qp_first: usize,
    /// Key partitions of the dataplane (its worker lcores). pktgen opens N rx/tx queue
    /// pairs and sends each packet with the keys of one partition p only, on queue p,
    /// from a QP with `qpn % N == p` (each partition needs one among the first --qps).
    #[arg(long, default_value_t = 1)]
    partitions: u32,
    /// Send partition p's packets on queue (p+1) % N instead of p (whole QPs, so
    /// per-QP order holds): the dataplane must hand them to their owner.
    #[arg(long)]
    misdirect: bool,
    /// Also tally the measured ops by key partition among K (default: --partitions),
    /// whatever N is: reports partition_ops_k and hottest_partition_ratio_k. With K
    /// different from N this hashes every op's key once more.
    #[arg(long)]
    count_partitions: Option<u32>,
    /// Load phase: PUT every key before the run.
    #[arg(long)]
    load: bool,
    /// Load phase to a target memory utilization of the server's store (sets --keys
    /// from engine.mem_mb and the KV size; implies --load).
    #[arg(long)]
    load_util: Option<f64>,
    /// Closed loop: packets outstanding.
    #[arg(long, default_value_t = 32)]
    window: usize,
    /// Open loop: target rate in Mops (overrides the closed loop).
    #[arg(long)]
    rate: Option<f64>,
    /// Warm-up seconds (not recorded).
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
    /// Measurement seconds.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// Check every response against the expected value; exit 1 on any mismatch.
    #[arg(long)]
    verify: bool,
    /// A response not back after this many ms is a timeout.
    #[arg(long, default_value_t = 200)]
    timeout_ms: u64,
    /// Empty batches sent one at a time to calibrate the transport floor (0: off).
    #[arg(long, default_value_t = 2000)]
    calibrate: u32,
    /// Yield the CPU on idle loop iterations (nothing sent or received) after this
    /// many in a row; 0 = pure busy polling. Lets a dataplane worker that shares this
    /// core run instead of waiting out a scheduler slice.
    #[arg(long, default_value_t = 64)]
    idle_yield_polls: u32,
    /// The dataplane runs in echo mode: count echoed requests as completions.
    #[arg(long)]
    echo: bool,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write results as JSON here (a latency plot goes beside it as .png).
    #[arg(long)]
    json: Option<PathBuf>,
    /// A label for the summary and JSON.
    #[arg(long)]
    label: Option<String>,
}

static QUIT: AtomicBool = AtomicBool::new(false);

const BURST: usize = 32;
/// Largest number of packets in flight (batch ids carry a 16-bit slot index).
const MAX_SLOTS: usize = 8192;
const MAX_OPS: usize = kvwire::MAX_OPS_PER_BATCH;
/// Ops per packet of the load phase (at most; fewer when values are large).
const LOAD_OPS: usize = 64;
/// Function, width and signedness of the atomic/vector/reduce ops: unsigned u64 add.
const U64_ADD: kvwire::Atomic = kvwire::Atomic {
    func: kvwire::func::FETCH_ADD,
    width: kvwire::Width::W8,
    signed: false,
};

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

/// One operation's expectation, kept until its response arrives.
#[derive(Clone, Copy, Debug)]
struct ExpOp {
    key: u64,
    op: OpType,
    expect: Expect,
}

/// A packet in flight.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    busy: bool,
    gen: u16,
    /// Send time (intended send time in open loop), TSC.
    sent: u64,
    nops: u16,
    /// Results received so far.
    got: u16,
    /// Count this packet in the measurement.
    record: bool,
}

/// Counters of a run phase.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    sent_pkts: u64,
    done_pkts: u64,
    done_ops: u64,
    timeouts_pkts: u64,
    timeouts_ops: u64,
    mismatches: u64,
    errors: u64,
    stale: u64,
    rx_drops: u64,
    status_not_ok: u64,
    /// Results with status WRONG_PARTITION (the op's key is not its QP's partition).
    wrong_partition: u64,
    oom: u64,
}

/// What the generator sends in a phase.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Empty batches (calibration).
    Ping,
    /// PUTs of keys `next..keys` in order (load).
    Load,
    /// The workload mix.
    Run,
    /// GETs of keys `next..keys` in order (verify's final read-back).
    Readback,
}

impl Phase {
    /// Phases that sweep the keys in order.
    fn sweeps(self) -> bool {
        matches!(self, Phase::Load | Phase::Readback)
    }
}

/// The client QPs of each partition: indices into `qps` with `qpn % N == p`, in
/// config order. Errors when a partition has none.
fn qps_by_partition(qps: &[(u32, u32)], n: u32) -> Result<Vec<Vec<usize>>, String> {
    let mut by: Vec<Vec<usize>> = vec![Vec::new(); n as usize];
    for (i, &(qpn, _)) in qps.iter().enumerate() {
        by[partition_of_qp(qpn, n) as usize].push(i);
    }
    if let Some(p) = by.iter().position(Vec::is_empty) {
        let qpns: Vec<u32> = qps.iter().map(|q| q.0).collect();
        return Err(format!(
            "--partitions {n}: no client QP for partition {p} among the first --qps {} \
             (qpns {qpns:?}); partition p needs a qpn with qpn % {n} == {p}: raise --qps \
             or add clients to the config",
            qps.len()
        ));
    }
    Ok(by)
}

/// Largest over mean of per-partition counts (1.0 is perfectly even); `None` when
/// nothing was counted.
fn hottest_ratio(counts: &[u64]) -> Option<f64> {
    let sum: u64 = counts.iter().sum();
    let max = counts.iter().copied().max()?;
    (sum > 0).then(|| max as f64 * counts.len() as f64 / sum as f64)
}

struct Gen<'a> {
    args: &'a Args,
    pool: Mempool,
    /// Rx queue p is partition p's (all are polled).
    rxqs: Vec<RxQueue>,
    txqs: Vec<TxQueue>,
    /// Tx queue of each partition (p, or (p+1) % N with --misdirect).
    tx_of: Vec<usize>,
    qps: Vec<(u32, u32)>,
    /// `qps` indices per partition, and the next one to use.
    part_qps: Vec<Vec<usize>>,
    part_qp_next: Vec<usize>,
    /// Parked ops per partition; `None` with one partition (no steering at all).
    steer: Option<Steer>,
    /// Partition of the next empty (calibration) batch: they rotate over all.
    ping_next: usize,
    /// Ops sent in the measurement per partition of N, and per partition of K.
    part_ops: Vec<u64>,
    part_ops_k: Vec<u64>,
    /// K of --count-partitions.
    count_k: u32,
    params: FrameParams,
    region_va: u64,
    region_len: u64,
    psn: Vec<u32>,
    slots: Vec<Slot>,
    exp: Vec<ExpOp>,
    /// Expectations per slot (the largest ops per packet of any phase).
    exp_stride: usize,
    free: Vec<u16>,
    model: Model,
    rng: Rng,
    chooser: KeyChooser,
    mix: Mix,
    sizes: SizeDist,
    ops_per_packet: usize,
    payload_cap: usize,
    hist: Histogram<u64>,
    counts: Counts,
    load_next: u64,
    load_stop: bool,
    verbose_left: u32,
    hz: u64,
}

fn run(mut args: Args) -> Result<i32, Box<dyn std::error::Error>> {
    let mut cfg = Config::load(&args.config)?;
    cfg.apply_overrides(
        kvconf::Role::Pktgen,
        &kvconf::Overrides {
            vdev: args.vdev.clone(),
            file_prefix: args.file_prefix.clone(),
            lcores: args.lcores.clone(),
            mem_mb: None,
        },
    );
    let sizes = SizeDist::parse(&args.value_size)?;
    let mix = Mix::new(args.get, args.put, args.atomic, args.vector, args.reduce)?;
    if let Some(u) = args.load_util {
        if !(0.0..1.0).contains(&u) {
            return Err("--load-util must be in [0, 1)".into());
        }
        let kv = args.key_size as f64 + (sizes.min + sizes.max) as f64 / 2.0;
        args.keys = ((cfg.engine.mem_mb << 20) as f64 * u / kv) as u64;
        args.load = true;
    }
    if args.key_size == 0 || args.key_size > kvwire::MAX_KEY_LEN {
        return Err(format!("--key-size must be 1..={}", kvwire::MAX_KEY_LEN).into());
    }
    if args.key_size < 8 && args.keys > 1u64 << (8 * args.key_size) {
        return Err(format!(
            "{} keys do not fit in {}-byte keys",
            args.keys, args.key_size
        )
        .into());
    }
    if args.keys == 0 {
        return Err("--keys must be > 0".into());
    }
    if args.ops_per_packet == 0 || args.ops_per_packet > MAX_OPS {
        return Err(format!("--ops-per-packet must be 1..={MAX_OPS}").into());
    }
    if args.qps == 0 || args.qp_first + args.qps > cfg.clients.len() {
        return Err(format!(
            "--qp-first + --qps must be 1..={} (clients in the config)",
            cfg.clients.len()
        )
        .into());
    }
    // memif supports up to 255 queue pairs; far more than the workers we run.
    if !(1..=64).contains(&args.partitions) {
        return Err("--partitions must be 1..=64".into());
    }
    let nparts = args.partitions;
    let count_k = args.count_partitions.unwrap_or(nparts);
    if !(1..=1024).contains(&count_k) {
        return Err("--count-partitions must be 1..=1024".into());
    }
    if args.misdirect && nparts == 1 {
        eprintln!("pktgen: --misdirect has no effect with one partition");
    }
    let qps: Vec<(u32, u32)> = cfg
        .clients
        .iter()
        .skip(args.qp_first)
        .take(args.qps)
        .map(|c| (c.qpn, c.rkey))
        .collect();
    // Checked before EAL init: a missing QP is a usage error.
    let part_qps = qps_by_partition(&qps, nparts)?;
    let window = args.window.clamp(1, MAX_SLOTS);
    let p = &cfg.pktgen;
    let huge = !args.no_huge && kvconf::resolve_hugepages(p.hugepages, p.memory_mb)?;
    let eal_args = p.eal_args("pktgen", huge);
    eprintln!("pktgen: EAL {}", eal_args[1..].join(" "));
    let eal = Eal::init(&eal_args[1..])?;
    ctrlc::set_handler(|| QUIT.store(true, Ordering::Relaxed))?;

    let pool =
        Mempool::create_pktmbuf("pktgen_pool", p.mbufs, 256, 2048 + 128, dpdk::SOCKET_ID_ANY)?;
    let port = Port::by_name(&p.port).map_err(|e| format!("port {:?}: {e}", p.port))?;
    // One queue pair per partition; memif negotiates the ring count with the server.
    let pcfg = PortConfig {
        nb_rxq: nparts as u16,
        nb_txq: nparts as u16,
        rxd: p.rxd,
        txd: p.txd,
        ..PortConfig::default()
    };
    // A memif server still tearing down the previous client refuses the connection
    // for a moment (port start fails): retry for a few seconds.
    let mut tries = 0;
    let mut q = loop {
        match port.configure(&pcfg, &pool) {
            Ok(q) => break q,
            Err(e) if tries < 25 => {
                tries += 1;
                eprintln!("pktgen: port start failed ({e}), retrying");
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => return Err(e.into()),
        }
    };
    let (rxqs, txqs) = (std::mem::take(&mut q.rx), std::mem::take(&mut q.tx));
    let t0 = Instant::now();
    while !port.link()?.up {
        if t0.elapsed() > Duration::from_secs(30) || QUIT.load(Ordering::Relaxed) {
            // A memif server with fewer queue pairs than we ask for refuses the rings.
            let hint = if nparts > 1 {
                format!(", with {nparts} queue pairs as --partitions {nparts} needs?")
            } else {
                "?".to_string()
            };
            return Err(
                format!("link did not come up in 30 s (is the dataplane running{hint})").into(),
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }

    let params = FrameParams::new(
        p.mac_bytes(),
        cfg.dataplane.mac_bytes(),
        p.ip,
        cfg.dataplane.ip,
        0xC000,
    );
    let dist = match args.dist {
        Dist::Uniform => Distribution::Uniform,
        Dist::Zipf => Distribution::Zipf(args.theta),
    };
    let slots_n = window.max(if args.rate.is_some() {
        MAX_SLOTS
    } else {
        window
    });
    let seed = args.seed;
    let exp_stride = args.ops_per_packet.max(LOAD_OPS);
    let n = nparts as usize;
    let mut g = Gen {
        args: &args,
        pool,
        rxqs,
        txqs,
        tx_of: (0..n)
            .map(|p| if args.misdirect { (p + 1) % n } else { p })
            .collect(),
        psn: (0..qps.len())
            .map(|i| (splitmix(seed ^ i as u64 ^ now_nanos()) & 0xff_ffff) as u32)
            .collect(),
        qps,
        part_qp_next: vec![0; n],
        part_qps,
        // Room for a few packets' worth per partition: a queue that fills closes the
        // packet being built, so it must not fill often.
        steer: (nparts > 1).then(|| Steer::new(nparts, 4 * exp_stride)),
        ping_next: 0,
        part_ops: vec![0; n],
        part_ops_k: vec![0; count_k as usize],
        count_k,
        params,
        region_va: cfg.server.request_region_va,
        region_len: cfg.server.request_region_len,
        slots: vec![Slot::default(); slots_n],
        exp: vec![
            ExpOp {
                key: 0,
                op: OpType::Get,
                expect: Expect::Any
            };
            slots_n * exp_stride
        ],
        exp_stride,
        free: (0..slots_n as u16).rev().collect(),
        model: Model::new(args.keys),
        rng: Rng::new(seed),
        chooser: KeyChooser::new(args.keys, dist),
        mix,
        sizes,
        ops_per_packet: args.ops_per_packet,
        payload_cap: request_payload_capacity(DEFAULT_MTU),
        hist: report::new_histogram(),
        counts: Counts::default(),
        load_next: 0,
        load_stop: false,
        verbose_left: 10,
        hz: tsc::hz(),
    };

    // 1. Loop-back calibration: empty batches one at a time.
    let mut calib_ns = 0.0;
    if args.calibrate > 0 {
        let (c, h) = g.phase(Phase::Ping, 1, None, 0.0, 10.0, Some(args.calibrate as u64))?;
        if c.done_pkts == 0 {
            return Err("calibration: no response to empty batches (is the dataplane running, same config?)".into());
        }
        calib_ns = h.min() as f64;
        eprintln!(
            "pktgen: calibration: {} round trips, min {:.2} us, p50 {:.2} us (min subtracted below)",
            h.len(),
            h.min() as f64 / 1e3,
            h.value_at_quantile(0.5) as f64 / 1e3
        );
    }

    // 2. Load phase.
    let mut load_summary = json!(null);
    if args.load {
        let t = Instant::now();
        let opp = g.ops_per_packet;
        g.ops_per_packet = (g.payload_cap / (args.key_size + sizes.max + 4)).clamp(1, LOAD_OPS);
        let (c, _) = g.phase(
            Phase::Load,
            window.max(32).min(slots_n),
            None,
            0.0,
            3600.0,
            None,
        )?;
        g.ops_per_packet = opp;
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "pktgen: load: {} keys in {:.1} s ({:.2} Mops){}",
            g.load_next,
            secs,
            c.done_ops as f64 / secs / 1e6,
            if c.oom > 0 {
                ", stopped at the first OUT_OF_MEMORY"
            } else {
                ""
            }
        );
        load_summary = json!({"keys_loaded": g.load_next, "seconds": secs, "oom": c.oom,
            "timeouts": c.timeouts_ops, "mismatches": c.mismatches});
        if c.mismatches > 0 || c.timeouts_ops > 0 {
            eprintln!(
                "pktgen: load phase had {} mismatches, {} timeouts",
                c.mismatches, c.timeouts_ops
            );
        }
    }

    // 3. Warm-up + measurement. Open loop is bounded only by the slots: a slow
    // server must show up as latency (from the intended send time), not as a
    // sender that politely waits.
    let run_window = if args.rate.is_some() { slots_n } else { window };
    let (c, hist) = g.phase(
        Phase::Run,
        run_window,
        args.rate,
        args.warmup,
        args.duration,
        None,
    )?;
    // The read-back below resets the tallies: keep the measurement's.
    let part_ops = g.part_ops.clone();
    let part_ops_k = if count_k == nparts {
        part_ops.clone()
    } else {
        g.part_ops_k.clone()
    };
    // 4. Verify: read every key back (after atomics this checks the final counts:
    // Q QPs x M fetch-adds on a key must leave exactly Q x M on it).
    let mut readback = json!(null);
    let mut readback_bad = 0;
    if args.verify && !QUIT.load(Ordering::Relaxed) {
        g.load_next = 0;
        g.load_stop = false;
        let opp = g.ops_per_packet;
        g.ops_per_packet = (g.payload_cap / (args.key_size + sizes.max + 4)).clamp(1, LOAD_OPS);
        let (rc, _) = g.phase(
            Phase::Readback,
            window.max(32).min(slots_n),
            None,
            0.0,
            3600.0,
            None,
        )?;
        g.ops_per_packet = opp;
        readback_bad = rc.mismatches + rc.errors;
        eprintln!(
            "pktgen: read-back: {} keys, {} mismatches, {} errors, {} timeouts",
            rc.done_ops, rc.mismatches, rc.errors, rc.timeouts_ops
        );
        readback = json!({"keys": rc.done_ops, "mismatches": rc.mismatches,
            "errors": rc.errors, "timeouts": rc.timeouts_ops});
    }
    let mops = c.done_ops as f64 / args.duration / 1e6;
    let lat = Percentiles::from_hist(&hist, calib_ns);
    let raw = Percentiles::from_hist(&hist, 0.0);
    let label = args.label.clone().unwrap_or_else(|| {
        format!(
            "{} {:.0}% GET {:.0}% PUT{} {}, {} B keys, {} B values, {} ops/packet, {}",
            if args.echo { "echo" } else { "kv" },
            args.get * 100.0,
            args.put * 100.0,
            [
                ("atomic", args.atomic),
                ("vector", args.vector),
                ("reduce", args.reduce)
            ]
            .iter()
            .filter(|(_, s)| *s > 0.0)
            .map(|(n, s)| format!(" {:.0}% {n}", s * 100.0))
            .collect::<String>(),
            match args.dist {
                Dist::Uniform => "uniform".to_string(),
                Dist::Zipf => format!("zipf {}", args.theta),
            },
            args.key_size,
            args.value_size,
            args.ops_per_packet,
            match args.rate {
                Some(r) => format!("open loop {r} Mops"),
                None => format!("closed loop window {window}"),
            }
        ) + &match (nparts, args.misdirect) {
            (1, _) => String::new(),
            (n, false) => format!(", {n} partitions"),
            (n, true) => format!(", {n} partitions misdirected"),
        }
    });
    report::print_table(&label, mops, c.done_ops, &lat, &raw, calib_ns / 1e3);
    println!(
        "  timeouts {} ops, mismatches {}, errors {}, stale {}, rx drops {}",
        c.timeouts_ops, c.mismatches, c.errors, c.stale, c.rx_drops
    );
    let hot = hottest_ratio(&part_ops);
    let hot_k = hottest_ratio(&part_ops_k);
    if nparts > 1 || count_k > 1 {
        println!(
            "  ops per partition (of {nparts}): {part_ops:?}, hottest/mean {:.3}",
            hot.unwrap_or(0.0)
        );
        if count_k != nparts {
            println!(
                "  ops per partition (of {count_k}): {part_ops_k:?}, hottest/mean {:.3}",
                hot_k.unwrap_or(0.0)
            );
        }
    }
    if c.wrong_partition > 0 {
        println!("  WRONG_PARTITION results: {}", c.wrong_partition);
    }

    if let Some(path) = &args.json {
        let mut out = json!({
            "label": label,
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "config_file": args.config.display().to_string(),
            "throughput_mops": mops,
            "ops": c.done_ops,
            "packets": c.done_pkts,
            "mismatches": c.mismatches,
            "timeouts": c.timeouts_ops,
            "errors": c.errors,
            "stale_responses": c.stale,
            "rx_drops": c.rx_drops,
            "latency_us": lat.to_json(),
            "latency_raw_us": raw.to_json(),
            "share_within_10us": report::share_within(&hist, 10_000.0, calib_ns),
            "calibration_us": calib_ns / 1e3,
            "hugepages": huge,
            "load": load_summary,
            "readback": readback,
            "workload": {
                "keys": args.keys, "key_size": args.key_size, "value_size": args.value_size,
                "get": args.get, "put": args.put, "atomic": args.atomic, "vector": args.vector,
                "reduce": args.reduce, "delete": mix.delete_share(),
                "dist": format!("{:?}", args.dist).to_lowercase(), "theta": args.theta,
                "ops_per_packet": args.ops_per_packet, "qps": args.qps,
                "window": window, "rate_mops": args.rate,
                "warmup_s": args.warmup, "duration_s": args.duration, "verify": args.verify,
                "echo": args.echo, "seed": args.seed,
            },
        });
        // Top-level keys of their own (one json! call would exceed the macro
        // recursion limit).
        let parts = json!({
            "wrong_partition": c.wrong_partition,
            "partitions": nparts,
            "misdirect": args.misdirect,
            "partition_ops": part_ops,
            "hottest_partition_ratio": hot,
            "count_partitions": count_k,
            "partition_ops_k": part_ops_k,
            "hottest_partition_ratio_k": hot_k,
        });
        if let (Some(o), serde_json::Value::Object(p)) = (out.as_object_mut(), parts) {
            o.extend(p);
        }
        std::fs::write(path, serde_json::to_string_pretty(&out)?)?;
        let png = path.with_extension("png");
        if let Err(e) = report::plot_latency(&png, &label, &hist, calib_ns) {
            eprintln!("pktgen: plot: {e}");
        }
    }
    drop(g);
    let _ = port.stop();
    drop(eal);
    Ok(
        if args.verify && (c.mismatches > 0 || c.errors > 0 || readback_bad > 0) {
            1
        } else {
            0
        },
    )
}

fn splitmix(x: u64) -> u64 {
    kvload::splitmix64(x)
}

fn now_nanos() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

impl Gen<'_> {
    /// Runs one phase and returns its counts and latency histogram (ns).
    ///
    /// `warmup` seconds are run but not recorded; then `duration` seconds (or until
    /// `max_pkts` packets completed, or the load finished) are recorded. Outstanding
    /// packets are drained (or timed out) at the end.
    fn phase(
        &mut self,
        phase: Phase,
        window: usize,
        rate_mops: Option<f64>,
        warmup: f64,
        duration: f64,
        max_pkts: Option<u64>,
    ) -> Result<(Counts, Histogram<u64>), Box<dyn std::error::Error>> {
        self.counts = Counts::default();
        self.hist.reset();
        self.part_ops.fill(0);
        self.part_ops_k.fill(0);
        if let Some(s) = self.steer.as_mut() {
            s.clear();
        }
        let hz = self.hz as f64;
        let start = tsc::now();
        let rec_start = start + (warmup * hz) as u64;
        let end = rec_start + (duration * hz) as u64;
        let timeout = self.hz / 1000 * self.args.timeout_ms;
        let interval =
            rate_mops.map(|r| ((self.ops_per_packet as f64 / (r * 1e6)) * hz).max(1.0) as u64);
        let mut next_send = start;
        let mut last_scan = start;
        let mut last_progress = Instant::now();
        // One tx burst per queue: a queue's packets leave in build order, which keeps
        // per-partition (so per-key) order for the verify model.
        let mut txb: Vec<MbufBurst<BURST>> =
            (0..self.txqs.len()).map(|_| MbufBurst::new()).collect();
        let mut rx = MbufBurst::<BURST>::new();
        let mut in_flight = 0usize;
        let mut sending = true;
        let mut idle = IdleBackoff::new(self.args.idle_yield_polls);
        loop {
            let now = tsc::now();
            if QUIT.load(Ordering::Relaxed) {
                break;
            }
            let done_by_count =
                max_pkts.is_some_and(|m| self.counts.done_pkts + self.counts.timeouts_pkts >= m);
            let done_by_load = phase.sweeps() && (self.sweep_done() || self.load_stop);
            if now >= end || done_by_count || done_by_load {
                sending = false;
            }
            if !sending && in_flight == 0 {
                break;
            }
            let mut moved = false;
            // Send.
            if sending {
                // Every burst must have room: the next packet's queue is not known yet.
                while txb.iter().all(|b| b.remaining() > 0)
                    && in_flight < window
                    && !self.free.is_empty()
                {
                    let intended = match interval {
                        Some(_) if now < next_send => break,
                        Some(_) => next_send,
                        None => now,
                    };
                    if phase.sweeps() && self.sweep_done() {
                        break;
                    }
                    let record = intended >= rec_start && intended < end;
                    match self.build(phase, intended, record) {
                        Some((m, p)) => {
                            if let Some(iv) = interval {
                                next_send += iv;
                            }
                            // Cannot fail: remaining() > 0 was checked.
                            let _ = txb[self.tx_of[p]].push(m);
                            in_flight += 1;
                        }
                        None => break,
                    }
                    if max_pkts.is_some() {
                        break; // calibration: one at a time
                    }
                }
                for (b, q) in txb.iter_mut().zip(self.txqs.iter_mut()) {
                    if !b.is_empty() {
                        let sent = q.tx_burst(b);
                        self.counts.sent_pkts += sent as u64;
                        moved |= sent > 0;
                    }
                }
            }
            // Receive (responses come back on the queue the request was served from).
            for q in 0..self.rxqs.len() {
                let n = self.rxqs[q].rx_burst(&mut rx);
                if n > 0 {
                    moved = true;
                    let now = tsc::now();
                    for m in rx.drain() {
                        in_flight -= self.complete(m.data(), now, phase, rec_start, end);
                    }
                }
            }
            idle.poll(!moved);
            // Timeouts, every ~1 ms.
            if now.wrapping_sub(last_scan) > self.hz / 1000 {
                last_scan = now;
                in_flight -= self.expire(now, timeout);
                if phase == Phase::Load && last_progress.elapsed() > Duration::from_secs(1) {
                    last_progress = Instant::now();
                    eprintln!(
                        "pktgen: load {:5.1}% ({}/{} keys)",
                        self.load_next as f64 * 100.0 / self.args.keys as f64,
                        self.load_next,
                        self.args.keys
                    );
                }
            }
        }
        // Anything the NIC did not take is freed with `txb`; count those slots lost.
        for b in txb.iter_mut() {
            for m in b.drain() {
                drop(m);
            }
        }
        if phase.sweeps() {
            if let Some(s) = self.steer.as_mut() {
                // Keys parked when the sweep stopped early were drawn but never sent:
                // do not count them as loaded.
                self.load_next -= s.total() as u64;
                s.clear();
            }
        }
        let mut h = report::new_histogram();
        std::mem::swap(&mut h, &mut self.hist);
        Ok((self.counts, h))
    }

    /// Whether a sweep (load, read-back) has sent every key: none left to draw and
    /// none parked.
    fn sweep_done(&self) -> bool {
        self.load_next >= self.args.keys && self.steer.as_ref().map_or(0, Steer::total) == 0
    }

    /// Builds one request packet and returns it with its partition; `None` when no
    /// mbuf or slot is available (or a sweep has nothing left to send).
    fn build(&mut self, phase: Phase, intended: u64, record: bool) -> Option<(Mbuf, usize)> {
        let mut m = Mbuf::alloc(&self.pool)?;
        let slot_idx = self.free.pop()?;
        let s = &mut self.slots[slot_idx as usize];
        s.gen = s.gen.wrapping_add(1);
        let batch_id = (u32::from(s.gen) << 16) | u32::from(slot_idx);
        let frame_cap = request_frame_len(self.payload_cap).min(m.tailroom());
        if !m.set_len(frame_cap) {
            self.free.push(slot_idx);
            return None;
        }
        let buf = m.data_mut();
        let payload_end = (REQUEST_HEADER_LEN + self.payload_cap).min(buf.len());
        let exp_base = slot_idx as usize * self.exp_stride;
        let verify = self.args.verify;
        let sizes = self.sizes;
        let key_size = self.args.key_size;
        // Tally ops by partition of K only when it differs from N (otherwise the
        // per-packet tally is the same thing): it costs a key hash per op.
        let tally_k = record && self.count_k != self.part_ops.len() as u32;
        let count_k = self.count_k;
        let mut nops = 0usize;
        let mut part = 0usize;
        let plen = {
            let Ok(mut w) = BatchWriter::new(&mut buf[REQUEST_HEADER_LEN..payload_end], batch_id)
            else {
                self.free.push(slot_idx);
                return None;
            };
            let mut key = [0u8; kvwire::MAX_KEY_LEN];
            let key = &mut key[..key_size];
            let mut val = [0u8; 2048];
            let mut model = verify.then_some(&mut self.model);
            let target = if phase == Phase::Ping {
                0
            } else {
                self.ops_per_packet
            };
            if phase == Phase::Ping {
                // Empty batches rotate over the partitions: every queue pair is used.
                part = self.ping_next;
                self.ping_next = (part + 1) % self.part_qps.len();
            } else if let Some(steer) = self.steer.as_mut() {
                let keys = self.args.keys;
                let load_next = &mut self.load_next;
                let rng = &mut self.rng;
                let (mix, chooser) = (&self.mix, &self.chooser);
                let mut hkey = [0u8; kvwire::MAX_KEY_LEN];
                let hkey = &mut hkey[..key_size];
                let draw = || {
                    let (op, k) = match phase {
                        Phase::Load | Phase::Readback => {
                            if *load_next >= keys {
                                return None;
                            }
                            *load_next += 1;
                            let op = if phase == Phase::Load {
                                OpType::Put
                            } else {
                                OpType::Get
                            };
                            (op, *load_next - 1)
                        }
                        _ => (mix.next(rng), chooser.next(rng)),
                    };
                    kvload::write_key(k, hkey);
                    Some(Drawn {
                        key: k,
                        hash32: kvengine::key_hash(hkey) as u32,
                        op,
                    })
                };
                let exp = &mut self.exp;
                let part_ops_k = &mut self.part_ops_k;
                let nops = &mut nops;
                let emit = |d: &Drawn| {
                    let Some(expect) = push_op(
                        &mut w,
                        d.op,
                        d.key,
                        key,
                        &mut val,
                        sizes,
                        model.as_deref_mut(),
                    ) else {
                        return false;
                    };
                    exp[exp_base + *nops] = ExpOp {
                        key: d.key,
                        op: d.op,
                        expect,
                    };
                    *nops += 1;
                    if tally_k {
                        part_ops_k[partition_of_hash(u64::from(d.hash32), count_k) as usize] += 1;
                    }
                    true
                };
                if let Some((p, _)) = steer.fill(target, draw, emit) {
                    part = p;
                }
            } else {
                // One partition: no steering, no per-op partition work. A drawn op
                // that does not fit the packet is dropped (a sweep retries its key).
                while nops < target {
                    let (op, k) = match phase {
                        Phase::Load | Phase::Readback => {
                            if self.load_next >= self.args.keys {
                                break;
                            }
                            let op = if phase == Phase::Load {
                                OpType::Put
                            } else {
                                OpType::Get
                            };
                            (op, self.load_next)
                        }
                        _ => (
                            self.mix.next(&mut self.rng),
                            self.chooser.next(&mut self.rng),
                        ),
                    };
                    let Some(expect) =
                        push_op(&mut w, op, k, key, &mut val, sizes, model.as_deref_mut())
                    else {
                        break; // packet full
                    };
                    self.exp[exp_base + nops] = ExpOp { key: k, op, expect };
                    nops += 1;
                    if phase.sweeps() {
                        self.load_next += 1;
                    }
                    if tally_k {
                        let h = kvengine::key_hash(key);
                        self.part_ops_k[partition_of_hash(h, count_k) as usize] += 1;
                    }
                }
            }
            w.finish()
        };
        if nops == 0 && phase != Phase::Ping {
            self.free.push(slot_idx);
            return None;
        }
        if record {
            self.part_ops[part] += nops as u64;
        }
        // Round robin over the partition's QPs (over all QPs with one partition).
        let qps_of = &self.part_qps[part];
        let cursor = &mut self.part_qp_next[part];
        let qi = qps_of[*cursor];
        *cursor = (*cursor + 1) % qps_of.len();
        let (qpn, rkey) = self.qps[qi];
        let psn = self.psn[qi];
        self.psn[qi] = (psn + 1) & 0xff_ffff;
        let va = self.region_va + (qi as u64 * 4096) % self.region_len.max(4096);
        let va = if va + plen as u64 > self.region_va + self.region_len {
            self.region_va
        } else {
            va
        };
        if emit_request_headers(buf, &self.params, qpn, psn, va, rkey, plen).is_err() {
            self.free.push(slot_idx);
            return None;
        }
        let len = finalize(buf).ok()?;
        m.set_len(len);
        let s = &mut self.slots[slot_idx as usize];
        *s = Slot {
            busy: true,
            gen: s.gen,
            sent: intended,
            nops: nops as u16,
            got: 0,
            record,
        };
        Some((m, part))
    }

    /// Handles one received frame; returns 1 if it completed a packet in flight.
    fn complete(
        &mut self,
        frame: &[u8],
        now: u64,
        phase: Phase,
        rec_start: u64,
        end: u64,
    ) -> usize {
        let (batch_id, first, count, more, payload) = if self.args.echo {
            match parse_request_unverified(frame)
                .ok()
                .and_then(|r| BatchReader::new(r.payload).ok())
            {
                Some(b) => (b.batch_id(), 0u16, b.op_count(), false, None),
                None => {
                    self.counts.rx_drops += 1;
                    return 0;
                }
            }
        } else {
            let resp = match parse_response(frame) {
                Ok(r) => r,
                Err(_) => {
                    self.counts.rx_drops += 1;
                    return 0;
                }
            };
            match ResponseReader::new(resp.payload) {
                Ok(r) => (
                    r.batch_id(),
                    r.first_index(),
                    r.result_count(),
                    r.more(),
                    Some(resp.payload),
                ),
                Err(_) => {
                    self.counts.rx_drops += 1;
                    return 0;
                }
            }
        };
        let slot_idx = (batch_id & 0xffff) as usize;
        let gen = (batch_id >> 16) as u16;
        let Some(s) = self.slots.get(slot_idx).copied() else {
            self.counts.stale += 1;
            return 0;
        };
        if !s.busy || s.gen != gen {
            self.counts.stale += 1;
            return 0;
        }
        if let Some(payload) = payload {
            let reader = ResponseReader::new(payload).expect("parsed above");
            let base = slot_idx * self.exp_stride;
            let verify = self.args.verify;
            for (k, r) in reader.enumerate() {
                let idx = first as usize + k;
                let Ok(r) = r else {
                    self.counts.errors += 1;
                    break;
                };
                if idx >= s.nops as usize {
                    self.counts.errors += 1;
                    continue;
                }
                // Without verify, `check` has nothing to do for OK / NOT_FOUND: skip
                // the expectation lookup (the common case, per op).
                if !verify && matches!(r.status, Status::Ok | Status::NotFound) {
                    continue;
                }
                let e = self.exp[base + idx];
                self.check(phase, &e, r.status, r.value);
            }
        }
        let got = s.got.saturating_add(count);
        let finished = got >= s.nops && !more;
        if !finished {
            self.slots[slot_idx].got = got;
            return 0;
        }
        self.slots[slot_idx].busy = false;
        self.free.push(slot_idx as u16);
        self.counts.done_pkts += 1;
        if s.record || phase == Phase::Ping {
            let ops = u64::from(s.nops).max(1);
            let done_in_window = now < end || phase == Phase::Ping;
            if done_in_window && (s.sent >= rec_start || phase == Phase::Ping) {
                self.counts.done_ops += u64::from(s.nops);
                let ns = tsc_to_ns(now.saturating_sub(s.sent), self.hz);
                let _ = self
                    .hist
                    .record_n(ns.max(1), if phase == Phase::Ping { 1 } else { ops });
            }
        } else if phase.sweeps() {
            self.counts.done_ops += u64::from(s.nops);
        }
        1
    }

    /// Checks one result against its expectation.
    fn check(&mut self, phase: Phase, e: &ExpOp, status: Status, value: &[u8]) {
        if status == Status::OutOfMemory && e.op == OpType::Put {
            self.counts.oom += 1;
            if phase == Phase::Load {
                self.load_stop = true;
            }
            // The key was not written: the model must not expect the new version.
            self.model.on_lost_write(e.key);
            return;
        }
        let expected_error = e.expect == Expect::BadLength && status == Status::BadLength;
        if !matches!(status, Status::Ok | Status::NotFound) && !expected_error {
            self.counts.status_not_ok += 1;
            if status == Status::WrongPartition {
                self.counts.wrong_partition += 1;
            }
            self.counts.errors += 1;
            if self.verbose_left > 0 {
                self.verbose_left -= 1;
                eprintln!(
                    "pktgen: key {} {:?}: error status {:?}",
                    e.key, e.op, status
                );
            }
            return;
        }
        if !self.args.verify {
            return;
        }
        let ok = match e.expect {
            Expect::Any => true,
            Expect::Absent | Expect::DeleteAbsent => status == Status::NotFound && value.is_empty(),
            Expect::Done => status == Status::Ok && value.is_empty(),
            Expect::BadLength => expected_error && value.is_empty(),
            Expect::Value { version, adds } => {
                status == Status::Ok && {
                    let len = self.sizes.len_of(e.key, version);
                    if e.op == OpType::Reduce {
                        value == kvload::reduce_sum(e.key, version, len, adds).to_le_bytes()
                    } else {
                        kvload::value_matches_adds(e.key, version, len, adds, value)
                    }
                }
            }
        };
        if !ok {
            self.counts.mismatches += 1;
            if self.verbose_left > 0 {
                self.verbose_left -= 1;
                eprintln!(
                    "pktgen: MISMATCH key {} {:?}: expected {:?}, got {:?} with {} value bytes",
                    e.key,
                    e.op,
                    e.expect,
                    status,
                    value.len()
                );
            }
        }
    }

    /// Times out packets in flight longer than `timeout` ticks; returns how many.
    fn expire(&mut self, now: u64, timeout: u64) -> usize {
        let mut n = 0;
        for i in 0..self.slots.len() {
            let s = self.slots[i];
            if s.busy && now.saturating_sub(s.sent) > timeout {
                self.slots[i].busy = false;
                self.free.push(i as u16);
                self.counts.timeouts_pkts += 1;
                self.counts.timeouts_ops += u64::from(s.nops);
                let base = i * self.exp_stride;
                for k in 0..s.nops as usize {
                    let e = self.exp[base + k];
                    if e.op.writes() {
                        self.model.on_lost_write(e.key);
                    }
                }
                n += 1;
            }
        }
        n
    }
}

/// Writes one op into the batch: key `k`'s bytes into `key`, a PUT's value into `val`.
/// With a `model` (verify mode) the op is applied to it and its expected answer
/// returned, else `Expect::Any`. `None` when the packet is full (nothing recorded).
#[inline(always)]
fn push_op(
    w: &mut BatchWriter<'_>,
    op: OpType,
    k: u64,
    key: &mut [u8],
    val: &mut [u8],
    sizes: SizeDist,
    model: Option<&mut Model>,
) -> Option<Expect> {
    kvload::write_key(k, key);
    let key = &*key;
    let pushed = match op {
        OpType::Get => w.push(&KvOp::Get { key }),
        OpType::Delete => w.push(&KvOp::Delete { key }),
        OpType::Atomic => w.push(&KvOp::UpdateS2S {
            key,
            atomic: U64_ADD,
            param: 1,
            param2: 0,
        }),
        OpType::Vector => w.push(&KvOp::UpdateS2V {
            key,
            atomic: U64_ADD,
            param: 1,
            param2: 0,
        }),
        OpType::Reduce => w.push(&KvOp::Reduce {
            key,
            atomic: U64_ADD,
            init: 0,
        }),
        OpType::Put => {
            // Without verify the model is not kept: no per-op cache miss.
            let v = model.as_ref().map_or(1, |m| m.peek_version());
            let len = sizes.len_of(k, v).min(val.len());
            kvload::write_value(k, v, &mut val[..len]);
            w.push(&KvOp::Put {
                key,
                value: &val[..len],
            })
        }
    };
    if pushed.is_err() {
        return None;
    }
    Some(match model {
        Some(m) => m.on_send(op, k, |v| sizes.len_of(k, v)).1,
        None => Expect::Any,
    })
}

#[inline]
fn tsc_to_ns(ticks: u64, hz: u64) -> u64 {
    (ticks as u128 * 1_000_000_000 / hz as u128) as u64
}
