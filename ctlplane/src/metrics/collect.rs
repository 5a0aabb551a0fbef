//! What `ctlplane metrics` exports: the `/kvd/stats` and `/kvd/engine` replies as
//! metric families, a series per worker (`worker="N"`). Totals are left to PromQL
//! (`sum without (worker) (...)`), so no series is counted twice.

use super::families::Families;
use crate::latency::Latency;
use kvwire::counters::Export;
use serde_json::{Map, Value};

/// Per-worker engine figures of `/kvd/engine` exported as gauges: (key, metric,
/// help).
const ENGINE_GAUGES: &[(&str, &str, &str)] = &[
    (
        "stored_kvs",
        "kvd_store_kvs",
        "Live keys in the worker's store.",
    ),
    (
        "stored_kv_bytes",
        "kvd_store_kv_bytes",
        "Key and value bytes of the live keys.",
    ),
    (
        "region_bytes",
        "kvd_store_region_bytes",
        "Bytes of the worker's store.",
    ),
    (
        "hash_buckets",
        "kvd_store_hash_buckets",
        "Primary hash buckets.",
    ),
    (
        "chained_buckets",
        "kvd_store_chained_buckets",
        "Chained (overflow) hash buckets allocated.",
    ),
    (
        "frontier_bytes",
        "kvd_slab_frontier_bytes",
        "Slab memory never handed out yet.",
    ),
];

/// Per-worker engine figures of `/kvd/engine` that only grow: (key, metric, help).
const ENGINE_COUNTERS: &[(&str, &str, &str)] = &[
    (
        "published",
        "kvd_engine_snapshots_total",
        "Engine snapshots the worker published (the engine figures are as of the last).",
    ),
    (
        "slab_allocs",
        "kvd_slab_allocs_total",
        "Slab allocations served by the worker cache.",
    ),
    (
        "slab_frees",
        "kvd_slab_frees_total",
        "Slab frees taken by the worker cache.",
    ),
    (
        "pool_refills",
        "kvd_slab_pool_refills_total",
        "Batch refills of the worker slab cache from the shared pool.",
    ),
    (
        "pool_spills",
        "kvd_slab_pool_spills_total",
        "Batch spills of the worker slab cache to the shared pool.",
    ),
];

/// Per slab class levels of `/kvd/engine` (blocks × block size): (array, metric,
/// help).
const SLAB_CLASSES: &[(&str, &str, &str)] = &[
    (
        "allocated",
        "kvd_slab_allocated_bytes",
        "Bytes of allocated slab blocks, by block size (class, bytes).",
    ),
    (
        "worker_cached",
        "kvd_slab_worker_cached_bytes",
        "Bytes of free slab blocks in the worker cache, by block size (class, bytes).",
    ),
    (
        "shared_free",
        "kvd_slab_shared_free_bytes",
        "Bytes of free slab blocks in the shared pool, by block size (class, bytes).",
    ),
];

/// `v[k]` as a u64: `None` when absent (a dataplane that does not report it), an
/// error when it is something else.
fn opt_u64(v: &Value, k: &str) -> Result<Option<u64>, String> {
    match v.get(k) {
        None => Ok(None),
        Some(x) => x
            .as_u64()
            .map(Some)
            .ok_or_else(|| format!("`{k}` is {x}, not an unsigned integer")),
    }
}

fn u64_array(v: &Value, k: &str) -> Result<Vec<u64>, String> {
    match v.get(k) {
        None => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| x.as_u64().ok_or_else(|| format!("`{k}` holds {x}")))
            .collect(),
        Some(x) => Err(format!("`{k}` is {x}, not an array")),
    }
}

/// The `per_worker` dict of a reply, by numeric worker id.
fn per_worker(reply: &Value) -> Result<Vec<(&String, &Value)>, String> {
    let pw = reply
        .get("per_worker")
        .and_then(Value::as_object)
        .ok_or("no `per_worker` dict")?;
    let mut ws: Vec<(&String, &Value)> = pw.iter().collect();
    ws.sort_by_key(|(id, _)| id.parse::<u64>().unwrap_or(u64::MAX));
    for (id, w) in &ws {
        if id.parse::<u64>().is_err() || !w.is_object() {
            return Err(format!("per_worker entry {id:?} is not a worker's dict"));
        }
    }
    Ok(ws)
}

/// One worker's `/kvd/stats` dict.
fn worker_stats(f: &mut Families<'_>, id: &str, s: &Value) -> Result<(), String> {
    let w = [("worker", id)];
    // Every counter of the schema and every derived figure (kvwire::counters).
    let schema = kvwire::counters::WORKER_COUNTERS
        .iter()
        .chain(kvwire::counters::DERIVED);
    for c in schema {
        let Some(x) = opt_u64(s, c.name)? else {
            continue;
        };
        match c.export {
            Export::Family(name) => f.counter(name, c.help, &w, x),
            Export::Series(name, label, value) => {
                f.counter(name, c.help, &[("worker", id), (label, value)], x);
            }
            Export::Skip(_) => {}
        }
    }
    let empty = Map::new();
    let drops = match s.get("drop") {
        None => &empty,
        Some(d) => d.as_object().ok_or("`drop` is not a dict")?,
    };
    for (reason, x) in drops {
        let x = x
            .as_u64()
            .ok_or_else(|| format!("drop `{reason}` is {x}, not an unsigned integer"))?;
        let help = "Packets dropped, by reason.";
        f.counter(
            "kvd_drops_total",
            help,
            &[("worker", id), ("reason", reason)],
            x,
        );
    }
    if let Some(l) = Latency::of_column(s).transpose()? {
        f.histogram_seconds(
            "kvd_service_latency_seconds",
            "Service time of sampled request packets, from their rx burst to the hand-off of their response to the NIC (1 of every kvd_latency_sample_every request packets).",
            &w,
            &l,
        );
        f.gauge(
            "kvd_latency_sample_every",
            "One request packet of this many is timed for kvd_service_latency_seconds (0: sampling off).",
            &w,
            l.sample_every as f64,
        );
    }
    Ok(())
}

/// One worker's `/kvd/engine` dict.
fn worker_engine(f: &mut Families<'_>, id: &str, e: &Value) -> Result<(), String> {
    let w = [("worker", id)];
    for &(k, name, help) in ENGINE_GAUGES {
        if let Some(x) = opt_u64(e, k)? {
            f.gauge(name, help, &w, x as f64);
        }
    }
    if let Some(ppm) = opt_u64(e, "utilization_ppm")? {
        let help = "Store utilization: key and value bytes of the live keys over the store's bytes (0..1).";
        f.gauge("kvd_store_utilization_ratio", help, &w, ppm as f64 / 1e6);
    }
    for (k, name, help) in [
        (
            "lines_per_get_milli",
            "kvd_engine_lines_per_get",
            "Mean memory lines per GET (engines built with accounting only).",
        ),
        (
            "lines_per_put_milli",
            "kvd_engine_lines_per_put",
            "Mean memory lines per PUT (engines built with accounting only).",
        ),
    ] {
        if let Some(x) = opt_u64(e, k)? {
            f.gauge(name, help, &w, x as f64 / 1e3);
        }
    }
    for &(k, name, help) in ENGINE_COUNTERS {
        if let Some(x) = opt_u64(e, k)? {
            f.counter(name, help, &w, x);
        }
    }
    let Some(slab) = e.get("slab") else {
        return Ok(());
    };
    let class_bytes = u64_array(slab, "class_bytes")?;
    let classes: Vec<String> = class_bytes.iter().map(u64::to_string).collect();
    for &(k, name, help) in SLAB_CLASSES {
        let blocks = u64_array(slab, k)?;
        if blocks.is_empty() {
            continue;
        }
        if blocks.len() != class_bytes.len() {
            return Err(format!(
                "slab `{k}` has {} entries for {} classes",
                blocks.len(),
                class_bytes.len()
            ));
        }
        for ((class, b), n) in classes.iter().zip(&class_bytes).zip(blocks) {
            let bytes = n.saturating_mul(*b) as f64;
            f.gauge(name, help, &[("worker", id), ("class", class)], bytes);
        }
    }
    Ok(())
}

/// Adds the series of one scrape from the `/kvd/stats` reply `stats` and the
/// `/kvd/engine` reply `engine`. A reply that breaks the format is an error (the
/// families added so far are then to be dropped).
pub fn collect(f: &mut Families<'_>, stats: &Value, engine: &Value) -> Result<(), String> {
    if let Some(n) = opt_u64(stats, "workers").map_err(|e| format!("/kvd/stats: {e}"))? {
        f.gauge(
            "kvd_workers",
            "Dataplane workers (lcores serving requests).",
            &[],
            n as f64,
        );
    }
    if let Some(hz) = opt_u64(stats, "tsc_hz").map_err(|e| format!("/kvd/stats: {e}"))? {
        f.gauge(
            "kvd_tsc_hz",
            "TSC cycles per second: rate(kvd_busy_cycles_total) / kvd_tsc_hz is a worker's busy share.",
            &[],
            hz as f64,
        );
    }
    for (id, s) in per_worker(stats).map_err(|e| format!("/kvd/stats: {e}"))? {
        worker_stats(f, id, s).map_err(|e| format!("/kvd/stats worker {id}: {e}"))?;
    }
    for (id, e) in per_worker(engine).map_err(|e| format!("/kvd/engine: {e}"))? {
        worker_engine(f, id, e).map_err(|e| format!("/kvd/engine worker {id}: {e}"))?;
    }
    if let Some(t) = stats.get("tenant_stats").filter(|t| !t.is_null()) {
        tenant_stats(f, t).map_err(|e| format!("/kvd/tenants/stats: {e}"))?;
    }
    if let Some(r) = stats.get("replication").filter(|r| !r.is_null()) {
        super::replication::collect(f, r).map_err(|e| format!("/kvd/replication: {e}"))?;
    }
    Ok(())
}

/// The per-tenant families of a `/kvd/tenants/stats` reply: one series per tenant id
/// (the first 64 tenants; `other` for the rest), summed over the workers.
fn tenant_stats(f: &mut Families<'_>, t: &Value) -> Result<(), String> {
    let ids = u64_array(t, "id")?;
    for fam in kvwire::counters::TENANT_FAMILIES {
        let (key, name, help) = (fam.key, fam.family, fam.help);
        let v = u64_array(t, key)?;
        if v.len() != ids.len() {
            return Err(format!(
                "`{key}` has {} entries for {} tenants",
                v.len(),
                ids.len()
            ));
        }
        for (id, x) in ids.iter().zip(v) {
            let label = if *id == 0 {
                "other".to_string()
            } else {
                id.to_string()
            };
            if fam.gauge {
                f.gauge(name, help, &[("tenant", &label)], x as f64);
            } else {
                f.counter(name, help, &[("tenant", &label)], x);
            }
        }
    }
    Ok(())
}
