//! The final report of a stopped dataplane: the worker counters summed (the
//! schema's names, `kvwire::counters`), the engine's and replication's figures, the
//! port and the service latency; printed, and written as JSON with `--stats-json`.

use crate::worker::Store;
use dataplane::repl::apply::ApplyStats;
use dataplane::repl::status::ReplStatus;
use dataplane::stats::WorkerStats;
use dpdk::{Mempool, Port};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// What replication leaves for the report: its status, the post-images the workers'
/// rings refused, the replica workers' apply counters and the link frames lost.
pub struct ReplFigures {
    pub status: Arc<ReplStatus>,
    pub lost: Arc<AtomicU64>,
    pub apply: Vec<Arc<ApplyStats>>,
    pub frames_lost: u64,
}

/// Everything the report reads.
pub struct Inputs<'a> {
    pub stats: &'a [Arc<WorkerStats>],
    pub stores: &'a [Store],
    pub repl: Option<&'a ReplFigures>,
    pub slab_merges: u64,
    pub port: &'a Port,
    pub pool: &'a Mempool,
    pub latency_sample_every: u32,
    pub stats_json: Option<&'a std::path::Path>,
}

/// The service-latency histogram summed over the workers: (samples, p50 bound,
/// p99 bound) in ns.
fn latency(stats: &[Arc<WorkerStats>]) -> (u64, u64, u64) {
    let mut lat = [0u64; dataplane::latency::BOUNDS + 1];
    for st in stats {
        for (c, x) in lat.iter_mut().zip(st.latency.counts()) {
            *c += x;
        }
    }
    let q = |q| dataplane::latency::LatencyHist::quantile_bound(&lat, q).unwrap_or(0);
    (lat.iter().sum(), q(0.5), q(0.99))
}

/// The counters summed over the workers, then the node's own figures, as (name,
/// value); and the order-independent digest of every stored KV (equal on two nodes
/// with the same contents: replication tests compare master and replicas with it).
fn figures(i: &Inputs<'_>) -> (Vec<(String, u64)>, u64) {
    let mut all: Vec<(String, u64)> = Vec::new();
    for st in i.stats {
        for (k, v) in st.snapshot() {
            match all.iter_mut().find(|(n, _)| *n == k) {
                Some(e) => e.1 += v,
                None => all.push((k, v)),
            }
        }
    }
    let nw = i.stores.len().max(1);
    let (mut kvs, mut util, mut digest) = (0u64, 0.0f64, 0u64);
    for s in i.stores {
        let es = s.server.engine().stats();
        kvs += es.stored_kvs;
        util += es.memory_utilization / nw as f64;
        digest = digest.wrapping_add(dataplane::repl::contents_digest(s.server.engine()));
    }
    all.push(("engine_kvs".into(), kvs));
    if let Some(r) = i.repl {
        let sum = |f: &dyn Fn(&ApplyStats) -> u64| r.apply.iter().map(|a| f(a)).sum::<u64>();
        all.push(("repl_log_lost".into(), r.lost.load(Relaxed)));
        all.push(("repl_link_frames_lost".into(), r.frames_lost));
        all.push(("repl_applied".into(), sum(&|a| a.applied.load(Relaxed))));
        all.push(("repl_apply_failed".into(), sum(&|a| a.failed.load(Relaxed))));
        all.push(("repl_applied_spans".into(), sum(&|a| a.spans.load(Relaxed))));
    }
    all.push(("slab_merges".into(), i.slab_merges));
    all.push(("engine_utilization_ppm".into(), (util * 1e6) as u64));
    (all, digest)
}

/// Prints the report and writes `--stats-json`.
pub fn final_report(i: &Inputs<'_>) -> Result<(), Box<dyn std::error::Error>> {
    println!("dataplane: final stats");
    let (all, digest) = figures(i);
    for (k, v) in &all {
        println!("  {k:<28} {v}");
    }
    let nw = i.stats.len();
    if nw > 1 {
        for (w, st) in i.stats.iter().enumerate() {
            println!(
                "  worker {w}: ops {} requests {} handed off {} handed in {}",
                st.ops(),
                st.requests.get(),
                st.handed_off.get(),
                st.handed_in.get()
            );
        }
    }
    if let Ok(ps) = i.port.stats() {
        println!(
            "  port: ipackets {} opackets {} imissed {} ierrors {} oerrors {} rx_nombuf {}",
            ps.ipackets, ps.opackets, ps.imissed, ps.ierrors, ps.oerrors, ps.rx_nombuf
        );
    }
    println!("  mbufs in use {}", i.pool.in_use_count());
    let (sampled, p50, p99) = latency(i.stats);
    if sampled > 0 {
        println!(
            "  service latency (1 in {} packets, {sampled} sampled): p50 <= {p50} ns, p99 <= {p99} ns",
            i.latency_sample_every
        );
    }
    let Some(path) = i.stats_json else {
        return Ok(());
    };
    let mut m = serde_json::Map::new();
    for (k, v) in &all {
        m.insert(k.clone(), (*v).into());
    }
    m.insert("mbufs_in_use".into(), i.pool.in_use_count().into());
    m.insert("engine_digest".into(), format!("{digest:016x}").into());
    m.insert("workers".into(), nw.into());
    let worker_ops: Vec<u64> = i.stats.iter().map(|s| s.ops()).collect();
    m.insert("worker_ops".into(), worker_ops.into());
    m.insert("latency_sampled".into(), sampled.into());
    m.insert("latency_p50_le_ns".into(), p50.into());
    m.insert("latency_p99_le_ns".into(), p99.into());
    if let Some(r) = i.repl {
        m.insert("replication".into(), r.status.to_json());
    }
    std::fs::write(path, serde_json::to_string_pretty(&m)?)?;
    Ok(())
}
