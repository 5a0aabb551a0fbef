//! The dataplane's DPDK telemetry commands (`/kvd/...`), served on DPDK's telemetry
//! thread from the shared [`ControlState`]; `ctlplane` and `dpdk-telemetry.py` query
//! them over `/var/run/dpdk/<file-prefix>/dpdk_telemetry.v2`.
//!
//! Every reply is a dict; a refused command answers `{"error": "..."}` (and never
//! panics). Per-worker entries are dicts keyed by worker id (`"0"`, `"1"`, ...):
//! DPDK 22.11 arrays cannot hold dicts.

use dataplane::control::{ControlState, EngineSnapshot, MergeSummary};
use dataplane::latency;
use dataplane::slab_daemon::SlabDaemon;
use dataplane::snapshot::Outcome;
use dataplane::stats::{WorkerStats, TX_SIDE_DROPS};
use dpdk::telemetry::{register_cmd, TelDict};
use dpdk::Mempool;
use kvwire::DropReason;
use std::sync::Arc;
use std::time::Duration;

mod tenants;

/// How long an admission change may take to reach every worker.
pub const APPLY_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the workers may take to serve a slab merge request.
pub const MERGE_TIMEOUT: Duration = Duration::from_secs(20);

/// Registers every `/kvd/...` command. `config` is the configuration the dataplane
/// runs with (after command-line overrides); `pool` is the mbuf pool whose mbufs in
/// use `/kvd/stats` reports.
pub fn register(
    ctl: &Arc<ControlState>,
    config: serde_json::Value,
    slab: SlabDaemon,
    pool: Arc<Mempool>,
) -> dpdk::Result<()> {
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/stats",
        "Counters: total and per worker, mbufs in use. Param: a worker id (optional)",
        move |p, d| stats(&c, &pool, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/engine",
        "Engine snapshot per worker: stored KVs, utilization, slab levels",
        move |_, d| engine(&c, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/clients",
        "Admitted client QPs and the admission generation",
        move |_, d| clients(&c, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/clients/add",
        "Admit a client QP. Params: QPN,RKEY (decimal or 0x hex)",
        move |p, d| clients_add(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/clients/remove",
        "Revoke a client QP. Param: QPN",
        move |p, d| clients_remove(&c, p, d),
    )?;
    tenants::register(ctl)?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/slab_merge",
        "Flush the worker slab caches and merge free slabs (off the workers); per worker",
        move |_, d| slab_merge(&c, &slab, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/latency/sample_every",
        "Service-latency sampling: one in N request packets (0: off). Param: N to set it (optional)",
        move |p, d| latency_sample_every(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/snapshot/save",
        "Start a snapshot of every partition while serving. Param: an absolute file path",
        move |p, d| snapshot_save(&c, p, d),
    )?;
    let c = Arc::clone(ctl);
    register_cmd(
        "/kvd/snapshot/status",
        "The last snapshot: state, records, bytes, duration, scan progress per worker",
        move |_, d| snapshot_status(&c, d),
    )?;
    register_cmd(
        "/kvd/config",
        "The configuration the dataplane runs with",
        move |_, d| json_into(d, &config),
    )?;
    Ok(())
}

fn error(d: &mut TelDict<'_>, msg: &str) {
    let _ = d.add_str("error", msg);
}

/// A u32 in decimal or `0x` hex.
fn parse_u32(s: &str) -> Result<u32, String> {
    let t = s.trim();
    let r = match t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        Some(h) => u32::from_str_radix(h, 16),
        None => t.parse(),
    };
    r.map_err(|_| format!("{t:?} is not a 32-bit number (decimal or 0x hex)"))
}

/// The comma-separated parameters, exactly `n` of them.
fn params<const N: usize>(p: &str, usage: &str) -> Result<[u32; N], String> {
    let parts: Vec<&str> = p.split(',').filter(|s| !s.trim().is_empty()).collect();
    if parts.len() != N {
        return Err(format!("expected parameters {usage}, got {p:?}"));
    }
    let mut out = [0u32; N];
    for (o, s) in out.iter_mut().zip(parts) {
        *o = parse_u32(s)?;
    }
    Ok(out)
}

/// The counters of one worker (or the sum over all) as (name, value): every counter
/// of the schema, then the derived figures ([`kvwire::counters`]); and the drops by
/// reason.
fn counters(ws: &[&WorkerStats]) -> (Vec<(&'static str, u64)>, Vec<u64>) {
    let mut v: Vec<(&'static str, u64)> = kvwire::counters::WORKER_COUNTERS
        .iter()
        .map(|c| (c.name, 0))
        .collect();
    for s in ws {
        for (slot, (_, c)) in v.iter_mut().zip(s.counters()) {
            slot.1 += c.get();
        }
    }
    for d in kvwire::counters::DERIVED {
        let x = ws.iter().map(|s| s.derived(d.name).unwrap_or(0)).sum();
        v.push((d.name, x));
    }
    let drops = DropReason::ALL
        .iter()
        .map(|r| ws.iter().map(|s| s.drops[r.index()].get()).sum())
        .collect();
    (v, drops)
}

fn add_counters(d: &mut TelDict<'_>, ws: &[&WorkerStats]) {
    let (v, drops) = counters(ws);
    for (k, x) in v {
        let _ = d.add_u64(k, x);
    }
    let _ = d.add_dict("drop", |dd| {
        for (r, n) in DropReason::ALL.iter().zip(drops) {
            let _ = dd.add_u64(r.name(), n);
        }
    });
    add_latency(d, ws);
}

/// The service-latency histogram summed over `ws` (docs/OPERATIONS.md): the
/// sampling period (the largest of the workers'), samples, their sum, the finite
/// bucket bounds and the non-cumulative counts (one more: the overflow bucket).
fn add_latency(d: &mut TelDict<'_>, ws: &[&WorkerStats]) {
    let mut counts = [0u64; latency::BOUNDS + 1];
    let (mut every, mut sum) = (0, 0);
    for s in ws {
        for (c, x) in counts.iter_mut().zip(s.latency.counts()) {
            *c += x;
        }
        every = s.latency.sample_every.get().max(every);
        sum += s.latency.sum_ns.get();
    }
    let _ = d.add_dict("latency", |l| {
        let _ = l.add_u64("sample_every", every);
        // From the same reads as the counts, so the two always agree.
        let _ = l.add_u64("sampled", counts.iter().sum());
        let _ = l.add_u64("sum_ns", sum);
        let _ = l.add_u64_array("le_ns", &latency::LE_NS);
        let _ = l.add_u64_array("counts", &counts);
    });
}

fn stats(ctl: &ControlState, pool: &Mempool, p: &str, d: &mut TelDict<'_>) {
    let n = ctl.workers();
    let only = if p.trim().is_empty() {
        None
    } else {
        match parse_u32(p) {
            Ok(w) if (w as usize) < n => Some(w as usize),
            Ok(w) => return error(d, &format!("no worker {w} (there are {n})")),
            Err(e) => return error(d, &e),
        }
    };
    let all: Vec<&WorkerStats> = (0..n).map(|w| ctl.stats(w)).collect();
    let _ = d.add_u64("workers", n as u64);
    // The TSC now and its rate: two replies give each worker's busy share,
    // Δbusy_cycles / Δtsc (`ctlplane watch`, scripts/bench_e2e.py).
    let _ = d.add_u64("tsc", dpdk::tsc::now());
    let _ = d.add_u64("tsc_hz", dpdk::tsc::hz());
    // The pool is shared by all workers (and the NIC's rx rings): a process figure.
    let _ = d.add_u64("mbufs_in_use", u64::from(pool.in_use_count()));
    // Which `drop.<reason>` counters are tx-side terms of the accounting invariant
    // (docs/OPERATIONS.md), so `ctlplane stats --check` need not hard-code them.
    let tx_side: Vec<&str> = TX_SIDE_DROPS.iter().map(|r| r.name()).collect();
    let _ = d.add_str_array("tx_side_drops", &tx_side);
    if only.is_none() {
        let _ = d.add_dict("total", |t| add_counters(t, &all));
    }
    let _ = d.add_dict("per_worker", |pw| {
        for w in (0..n).filter(|w| only.is_none_or(|o| o == *w)) {
            let _ = pw.add_dict(&w.to_string(), |x| add_counters(x, &all[w..w + 1]));
        }
    });
}

/// Shows, or sets (param N), the sampling period the workers apply within 10 ms.
fn latency_sample_every(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    if !p.trim().is_empty() {
        match parse_u32(p) {
            Ok(every) => ctl.set_latency_sample_every(every),
            Err(e) => return error(d, &e),
        }
    }
    let _ = d.add_u64("sample_every", ctl.latency_sample_every() as u64);
}

fn add_engine(d: &mut TelDict<'_>, s: &EngineSnapshot) {
    for (k, v) in [
        ("published", s.seq),
        ("stored_kvs", s.stored_kvs),
        ("stored_kv_bytes", s.stored_kv_bytes),
        ("region_bytes", s.region_bytes),
        ("utilization_ppm", s.utilization_ppm),
        ("hash_buckets", s.hash_buckets),
        ("chained_buckets", s.chained_buckets),
        ("slab_allocs", s.slab_allocs),
        ("slab_frees", s.slab_frees),
        ("pool_refills", s.pool_refills),
        ("pool_spills", s.pool_spills),
        ("frontier_bytes", s.frontier_bytes),
    ] {
        let _ = d.add_u64(k, v);
    }
    if let Some(x) = s.lines_per_get_milli {
        let _ = d.add_u64("lines_per_get_milli", x);
    }
    if let Some(x) = s.lines_per_put_milli {
        let _ = d.add_u64("lines_per_put_milli", x);
    }
    let col = |f: fn(&dataplane::control::ClassLevel) -> u64| -> Vec<u64> {
        s.classes.iter().map(f).collect()
    };
    let _ = d.add_dict("slab", |sd| {
        let _ = sd.add_u64_array("class_bytes", &col(|c| c.class_bytes));
        let _ = sd.add_u64_array("worker_cached", &col(|c| c.worker_cached));
        let _ = sd.add_u64_array("shared_free", &col(|c| c.shared_free));
        let _ = sd.add_u64_array("allocated", &col(|c| c.allocated));
    });
    let _ = d.add_dict("extra", |e| {
        for (k, v) in &s.extra {
            let _ = e.add_u64(k, *v);
        }
    });
}

fn engine(ctl: &ControlState, d: &mut TelDict<'_>) {
    let n = ctl.workers();
    let _ = d.add_u64("workers", n as u64);
    let _ = d.add_dict("per_worker", |pw| {
        for w in 0..n {
            let s = ctl.engine_snapshot(w);
            let _ = pw.add_dict(&w.to_string(), |x| add_engine(x, &s));
        }
    });
}

fn clients(ctl: &ControlState, d: &mut TelDict<'_>) {
    let (generation, list) = ctl.clients();
    let _ = d.add_u64("generation", generation);
    let _ = d.add_u64("count", list.len() as u64);
    let qpn: Vec<u64> = list.iter().map(|c| c.0 as u64).collect();
    let rkey: Vec<u64> = list.iter().map(|c| c.1 as u64).collect();
    let _ = d.add_u64_array("qpn", &qpn);
    let _ = d.add_u64_array("rkey", &rkey);
    let applied: Vec<u64> = (0..ctl.workers())
        .map(|w| ctl.applied_generation(w))
        .collect();
    let _ = d.add_u64_array("applied_generation", &applied);
}

/// Waits for the workers to apply `generation` and reports it.
fn report_applied(ctl: &ControlState, generation: u64, d: &mut TelDict<'_>) {
    let _ = d.add_u64("generation", generation);
    match ctl.wait_applied(generation, APPLY_TIMEOUT) {
        Ok(()) => {
            let _ = d.add_u64("applied_by_workers", ctl.workers() as u64);
        }
        Err(lag) => error(
            d,
            &format!(
                "workers {lag:?} did not apply generation {generation} within {} ms",
                APPLY_TIMEOUT.as_millis()
            ),
        ),
    }
}

fn clients_add(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let [qpn, rkey] = match params::<2>(p, "QPN,RKEY") {
        Ok(x) => x,
        Err(e) => return error(d, &e),
    };
    match ctl.add_client(qpn, rkey) {
        Ok(g) => {
            let _ = d.add_str("action", "add");
            let _ = d.add_u64("qpn", qpn as u64);
            let _ = d.add_u64("rkey", rkey as u64);
            report_applied(ctl, g, d);
        }
        Err(e) => error(d, &e.to_string()),
    }
}

fn clients_remove(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let [qpn] = match params::<1>(p, "QPN") {
        Ok(x) => x,
        Err(e) => return error(d, &e),
    };
    match ctl.remove_client(qpn) {
        Ok((g, rkey)) => {
            let _ = d.add_str("action", "remove");
            let _ = d.add_u64("qpn", qpn as u64);
            let _ = d.add_u64("rkey", rkey as u64);
            report_applied(ctl, g, d);
        }
        Err(e) => error(d, &e.to_string()),
    }
}

fn add_merge(d: &mut TelDict<'_>, m: &MergeSummary) {
    let _ = d.add_u64("request", m.request);
    let _ = d.add_u64("scanned", m.scanned);
    let _ = d.add_u64("merged_total", m.merged.iter().sum());
    let _ = d.add_u64_array("class_bytes", &m.class_bytes);
    let _ = d.add_u64_array("merged", &m.merged);
    let _ = d.add_u64("elapsed_us", m.elapsed_us);
}

/// The workers return their cached slabs to their shared pools (a short step on each
/// worker's slow path), then the merges run here, on the telemetry thread, through the
/// slab daemon: the workers keep serving while the free lists are sorted and merged.
fn slab_merge(ctl: &ControlState, slab: &SlabDaemon, d: &mut TelDict<'_>) {
    let r = ctl.request_merge();
    let _ = d.add_u64("request", r);
    match ctl.wait_merged(r, MERGE_TIMEOUT) {
        Ok(mut all) => {
            for (m, svc) in all.iter_mut().zip(slab.services()) {
                let t0 = std::time::Instant::now();
                let rep = svc.merge_now();
                m.scanned = rep.scanned;
                for (dst, src) in m.merged.iter_mut().zip(rep.merged.iter()) {
                    *dst = *src;
                }
                m.elapsed_us += t0.elapsed().as_micros() as u64;
            }
            let _ = d.add_dict("per_worker", |pw| {
                for (w, m) in all.iter().enumerate() {
                    let _ = pw.add_dict(&w.to_string(), |x| add_merge(x, m));
                }
            });
        }
        Err(lag) => error(
            d,
            &format!(
                "workers {lag:?} did not merge within {} s",
                MERGE_TIMEOUT.as_secs()
            ),
        ),
    }
}

/// A string value within DPDK's limit for one (longer ones are cut, marked `...`).
fn add_text(d: &mut TelDict<'_>, k: &str, v: &str) {
    const MAX: usize = 120;
    if v.len() <= MAX {
        let _ = d.add_str(k, v);
    } else {
        let mut end = MAX - 3;
        while !v.is_char_boundary(end) {
            end -= 1;
        }
        let _ = d.add_str(k, &format!("{}...", &v[..end]));
    }
}

/// Starts a snapshot to the absolute path `p`.
fn snapshot_save(ctl: &ControlState, p: &str, d: &mut TelDict<'_>) {
    let path = std::path::PathBuf::from(p.trim());
    if !path.is_absolute() {
        return error(d, "expected an absolute file path (ctlplane resolves one)");
    }
    match ctl.snapshot().start(path) {
        Ok(id) => {
            let _ = d.add_u64("id", id);
            add_text(d, "path", p.trim());
            let _ = d.add_str("state", "running");
        }
        Err(e) => add_text(d, "error", &e),
    }
}

/// The last snapshot's status.
fn snapshot_status(ctl: &ControlState, d: &mut TelDict<'_>) {
    let Some(s) = ctl.snapshot().status() else {
        let _ = d.add_str("state", "none");
        return;
    };
    let _ = d.add_u64("id", s.id);
    add_text(d, "path", &s.path);
    let state = match &s.outcome {
        Outcome::Running => "running",
        Outcome::Done => "done",
        Outcome::Failed(why) => {
            add_text(d, "failure", why);
            "failed"
        }
    };
    let _ = d.add_str("state", state);
    let _ = d.add_u64("records", s.records);
    let _ = d.add_u64("bytes", s.bytes);
    let _ = d.add_u64("scanned", s.scanned);
    let _ = d.add_u64("duration_us", s.duration.as_micros() as u64);
    let _ = d.add_dict("per_worker", |pw| {
        for (w, (st, done, total)) in s.workers.iter().enumerate() {
            let _ = pw.add_dict(&w.to_string(), |x| {
                let _ = x.add_str("state", st.name());
                let _ = x.add_u64("buckets_done", *done);
                let _ = x.add_u64("buckets_total", *total);
            });
        }
    });
}

/// Renders a JSON object as telemetry dicts: objects nest, numbers that are u64
/// stay numbers, other scalars become strings, arrays of scalars become string
/// arrays and arrays holding objects become dicts keyed by index.
pub(crate) fn json_into(d: &mut TelDict<'_>, v: &serde_json::Value) {
    use serde_json::Value;
    let Value::Object(m) = v else {
        return error(d, "configuration is not an object");
    };
    let scalar = |x: &Value| match x {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    for (k, x) in m {
        let _ = match x {
            Value::Object(_) => d.add_dict(k, |c| json_into(c, x)),
            Value::Number(n) if n.is_u64() => d.add_u64(k, n.as_u64().unwrap_or_default()),
            Value::Array(a) if a.iter().any(|e| e.is_object() || e.is_array()) => {
                d.add_dict(k, |c| {
                    for (i, e) in a.iter().enumerate() {
                        let _ = match e {
                            Value::Object(_) => c.add_dict(&i.to_string(), |cc| json_into(cc, e)),
                            other => c.add_str(&i.to_string(), &scalar(other)),
                        };
                    }
                })
            }
            Value::Array(a) => d.add_str_array(k, &a.iter().map(scalar).collect::<Vec<_>>()),
            other => d.add_str(k, &scalar(other)),
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_reply_carries_every_counter_of_the_schema_summed() {
        let (a, b) = (WorkerStats::default(), WorkerStats::default());
        a.gets.add(3);
        a.get_hits.add(1);
        b.gets.add(2);
        b.station_forwarded.add(7);
        b.drop(DropReason::BadIcrc);
        let (v, drops) = counters(&[&a, &b]);
        let names: Vec<&str> = v.iter().map(|(n, _)| *n).collect();
        let schema: Vec<&str> = kvwire::counters::WORKER_COUNTERS
            .iter()
            .chain(kvwire::counters::DERIVED)
            .map(|c| c.name)
            .collect();
        assert_eq!(names, schema);
        let get = |n: &str| v.iter().find(|(k, _)| *k == n).unwrap().1;
        assert_eq!(get("gets"), 5);
        assert_eq!(get("get_misses"), 4);
        assert_eq!(get("station_forwarded"), 7);
        assert_eq!(get("ops"), 5);
        assert_eq!(get("drops"), 1);
        assert_eq!(drops[DropReason::BadIcrc.index()], 1);
    }

    #[test]
    fn params_parse_or_explain() {
        assert_eq!(
            params::<2>("17,0x12345678", "QPN,RKEY"),
            Ok([17, 0x1234_5678])
        );
        assert_eq!(params::<1>(" 20 ", "QPN"), Ok([20]));
        assert!(params::<2>("17", "QPN,RKEY")
            .unwrap_err()
            .contains("QPN,RKEY"));
        assert!(params::<1>("x", "QPN")
            .unwrap_err()
            .contains("not a 32-bit"));
        assert!(params::<1>("99999999999", "QPN").is_err());
    }
}
