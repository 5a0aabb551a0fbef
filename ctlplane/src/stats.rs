//! `ctlplane stats`, `watch` and `engine`: live counters of a running dataplane.

use crate::latency::Latency;
use crate::target::Target;
use serde_json::{Map, Value};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Counter rows in display order: the schema's counters and derived figures marked
/// for the table (`kvwire::counters`).
fn rows() -> impl Iterator<Item = &'static str> {
    kvwire::counters::WORKER_COUNTERS
        .iter()
        .chain(kvwire::counters::DERIVED)
        .filter(|c| c.table)
        .map(|c| c.name)
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

/// The columns of a `/kvd/stats` reply: (label, counters) per worker, then the total.
fn columns(v: &Value) -> Vec<(String, &Value)> {
    let mut cols: Vec<(String, &Value)> = Vec::new();
    if let Some(pw) = v["per_worker"].as_object() {
        let mut ids: Vec<&String> = pw.keys().collect();
        ids.sort_by_key(|k| k.parse::<u64>().unwrap_or(u64::MAX));
        for id in ids {
            cols.push((format!("worker{id}"), &pw[id]));
        }
    }
    if !v["total"].is_null() {
        cols.push(("total".into(), &v["total"]));
    }
    cols
}

/// Row names: the fixed counters, then `drop.<reason>` for every reason any column
/// counted.
fn row_names(cols: &[(String, &Value)]) -> Vec<String> {
    let mut rows: Vec<String> = rows().map(str::to_string).collect();
    let mut reasons: Vec<String> = Vec::new();
    for (_, c) in cols {
        if let Some(d) = c["drop"].as_object() {
            for (k, x) in d {
                if num(x) > 0 && !reasons.contains(k) {
                    reasons.push(k.clone());
                }
            }
        }
    }
    reasons.sort();
    rows.extend(reasons.into_iter().map(|r| format!("drop.{r}")));
    rows
}

fn cell<'a>(c: &'a Value, row: &str) -> &'a Value {
    match row.strip_prefix("drop.") {
        Some(r) => &c["drop"][r],
        None => &c[row],
    }
}

/// Latency quantiles shown by `ctlplane stats`: (row name, q).
const QUANTILES: &[(&str, f64)] = &[
    ("latency.p50", 0.5),
    ("latency.p90", 0.9),
    ("latency.p99", 0.99),
    ("latency.p99.9", 0.999),
];

/// The latency rows of the table, as (row, a cell per column): the samples taken,
/// then each quantile of [`QUANTILES`]. A quantile is shown as the upper bound of
/// the histogram bucket that holds it (`<=1.2us`; `>268ms` for the overflow
/// bucket): the bucket bounds are the histogram's only resolution. `-` marks a
/// column without samples. No rows when the reply has no latency histograms (a
/// dataplane from before latency sampling); a malformed one is an error.
fn latency_rows(cols: &[(String, &Value)]) -> Result<Vec<(String, Vec<String>)>, String> {
    let mut hists = Vec::with_capacity(cols.len());
    for (name, c) in cols {
        hists.push(
            Latency::of_column(c)
                .transpose()
                .map_err(|e| format!("{name}: {e}"))?,
        );
    }
    if hists.iter().all(Option::is_none) {
        return Ok(Vec::new());
    }
    let sampled = hists
        .iter()
        .map(|h| h.as_ref().map_or("-".into(), |h| h.sampled.to_string()))
        .collect();
    let mut rows = vec![("latency.sampled".to_string(), sampled)];
    for (row, q) in QUANTILES {
        let cells = hists
            .iter()
            .map(|h| match h.as_ref().and_then(|h| h.quantile(*q)) {
                Some(b) => b.to_string(),
                None => "-".into(),
            })
            .collect();
        rows.push((row.to_string(), cells));
    }
    Ok(rows)
}

/// `ctlplane stats`: one table, a column per worker plus the total; the counters,
/// then the service-latency samples and percentiles.
pub fn stats(target: &Target, json: bool) -> Result<(), String> {
    let v = target.connect()?.query("/kvd/stats")?;
    if json {
        println!("{v}");
        return Ok(());
    }
    let cols = columns(&v);
    let latency = latency_rows(&cols)?;
    print!("{:<24}", "counter");
    for (name, _) in &cols {
        print!(" {name:>16}");
    }
    println!();
    for row in row_names(&cols) {
        print!("{row:<24}");
        for (_, c) in &cols {
            print!(" {:>16}", num(cell(c, &row)));
        }
        println!();
    }
    for (row, cells) in latency {
        print!("{row:<24}");
        for x in cells {
            print!(" {x:>16}");
        }
        println!();
    }
    Ok(())
}

/// `ctlplane watch`: the totals and per-second rates (total and per worker),
/// refreshed every `interval`; `count` samples (0: until interrupted).
pub fn watch(target: &Target, interval: f64, count: u64) -> Result<(), String> {
    if !(interval.is_finite() && interval >= 0.05) {
        return Err("--interval must be at least 0.05 s".into());
    }
    let mut t = target.connect()?;
    let tty = std::io::stdout().is_terminal();
    let mut prev: Option<(Instant, Value)> = None;
    let mut n = 0u64;
    loop {
        let v = t.query("/kvd/stats")?;
        let now = Instant::now();
        let cols = columns(&v);
        if tty {
            print!("\x1b[2J\x1b[H");
        }
        println!(
            "dataplane pid {} — {} worker(s){}",
            t.pid,
            v["workers"],
            if prev.is_some() {
                ""
            } else {
                " (rates from the next sample)"
            }
        );
        print!("{:<24} {:>16}", "counter", "total");
        let per_s: Vec<String> = cols.iter().map(|(c, _)| format!("{c}/s")).collect();
        for c in &per_s {
            print!(" {c:>16}");
        }
        println!();
        for row in row_names(&cols) {
            let total = cols.last().map(|(_, c)| num(cell(c, &row))).unwrap_or(0);
            print!("{row:<24} {total:>16}");
            for (name, c) in &cols {
                let rate = prev.as_ref().map(|(t0, pv)| {
                    let pc = columns(pv)
                        .into_iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, x)| num(cell(x, &row)))
                        .unwrap_or(0);
                    let dt = now.duration_since(*t0).as_secs_f64();
                    num(cell(c, &row)).saturating_sub(pc) as f64 / dt
                });
                match rate {
                    Some(r) => print!(" {r:>16.0}"),
                    None => print!(" {:>16}", "-"),
                }
            }
            println!();
        }
        if let Some((_, pv)) = &prev {
            print_busy_shares(pv, &v, &cols);
        }
        n += 1;
        if count > 0 && n >= count {
            return Ok(());
        }
        prev = Some((now, v));
        std::thread::sleep(Duration::from_secs_f64(interval));
    }
}

/// The `busy share` row of `ctlplane watch`: per column, the share of the TSC cycles
/// between two replies that its workers spent in loop iterations that did work.
fn print_busy_shares(prev: &Value, cur: &Value, cols: &[(String, &Value)]) {
    print!("{:<24} {:>16}", "busy share", "");
    let prev_cols = columns(prev);
    let d_tsc = num(&cur["tsc"]).saturating_sub(num(&prev["tsc"]));
    for (name, c) in cols {
        let before = prev_cols
            .iter()
            .find(|(n, _)| n == name)
            .map_or(0, |(_, x)| num(&x["busy_cycles"]));
        let workers = if name == "total" {
            num(&cur["workers"])
        } else {
            1
        };
        match busy_share(
            num(&c["busy_cycles"]).saturating_sub(before),
            d_tsc,
            workers,
        ) {
            Some(s) => print!(" {:>15.1}%", 100.0 * s),
            None => print!(" {:>16}", "-"),
        }
    }
    println!();
}

/// `d_busy` busy cycles of `workers` workers over `d_tsc` TSC cycles, as a share of
/// their time; `None` without an interval (or from a dataplane that reports no TSC).
fn busy_share(d_busy: u64, d_tsc: u64, workers: u64) -> Option<f64> {
    (d_tsc > 0 && workers > 0).then(|| d_busy as f64 / (d_tsc * workers) as f64)
}

/// `ctlplane engine`: each worker's published engine snapshot.
pub fn engine(target: &Target, json: bool) -> Result<(), String> {
    let v = target.connect()?.query("/kvd/engine")?;
    if json {
        println!("{v}");
        return Ok(());
    }
    let empty = Map::new();
    for (w, e) in v["per_worker"].as_object().unwrap_or(&empty) {
        println!("worker {w} (snapshot #{})", e["published"]);
        for k in [
            "stored_kvs",
            "stored_kv_bytes",
            "region_bytes",
            "hash_buckets",
            "chained_buckets",
            "slab_allocs",
            "slab_frees",
            "pool_refills",
            "pool_spills",
            "frontier_bytes",
        ] {
            println!("  {k:<22} {}", num(&e[k]));
        }
        println!(
            "  {:<22} {:.4} %",
            "memory_utilization",
            num(&e["utilization_ppm"]) as f64 / 1e4
        );
        for k in ["lines_per_get_milli", "lines_per_put_milli"] {
            if let Some(x) = e[k].as_u64() {
                println!(
                    "  {:<22} {:.3}",
                    k.trim_end_matches("_milli"),
                    x as f64 / 1e3
                );
            }
        }
        let col = |k: &str| -> Vec<u64> {
            e["slab"][k]
                .as_array()
                .map(|a| a.iter().map(num).collect())
                .unwrap_or_default()
        };
        println!(
            "  {:>8} {:>14} {:>14} {:>14}",
            "class B", "worker_cached", "shared_free", "allocated"
        );
        let (b, wc, sf, al) = (
            col("class_bytes"),
            col("worker_cached"),
            col("shared_free"),
            col("allocated"),
        );
        for (i, b) in b.iter().enumerate() {
            let at = |c: &[u64]| c.get(i).copied().unwrap_or(0);
            println!("  {b:>8} {:>14} {:>14} {:>14}", at(&wc), at(&sf), at(&al));
        }
        if let Some(x) = e["extra"].as_object().filter(|x| !x.is_empty()) {
            for (k, n) in x {
                println!("  {k:<22} {}", num(n));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_share_of_a_worker_and_of_all() {
        assert_eq!(busy_share(750, 1_000, 1), Some(0.75));
        assert_eq!(busy_share(750, 1_000, 2), Some(0.375));
        assert_eq!(busy_share(5, 0, 1), None, "no interval");
    }

    #[test]
    fn table_columns_and_rows_from_a_reply() {
        let v: Value = serde_json::from_str(
            r#"{"workers":2,
                "total":{"rx_packets":5,"drop":{"unknown_qp":2,"bad_icrc":0}},
                "per_worker":{"1":{"rx_packets":2,"drop":{"unknown_qp":0}},
                              "0":{"rx_packets":3,"drop":{"unknown_qp":2}}}}"#,
        )
        .unwrap();
        let cols = columns(&v);
        let names: Vec<&str> = cols.iter().map(|c| c.0.as_str()).collect();
        assert_eq!(names, ["worker0", "worker1", "total"]);
        let rows = row_names(&cols);
        assert_eq!(rows.last().unwrap(), "drop.unknown_qp");
        assert!(!rows.iter().any(|r| r == "drop.bad_icrc"));
        assert_eq!(num(cell(cols[0].1, "drop.unknown_qp")), 2);
        assert_eq!(num(cell(cols[2].1, "rx_packets")), 5);
        assert!(latency_rows(&cols).unwrap().is_empty());
    }

    #[test]
    fn latency_rows_per_column() {
        let v: Value = serde_json::from_str(
            r#"{"workers":2,
                "total":{"latency":{"sample_every":64,"sampled":4,"sum_ns":1500,
                                    "le_ns":[256,304],"counts":[1,2,1]}},
                "per_worker":{"0":{"latency":{"sample_every":64,"sampled":4,"sum_ns":1500,
                                              "le_ns":[256,304],"counts":[1,2,1]}},
                              "1":{"latency":{"sample_every":64,"sampled":0,"sum_ns":0,
                                              "le_ns":[256,304],"counts":[0,0,0]}}}}"#,
        )
        .unwrap();
        let rows = latency_rows(&columns(&v)).unwrap();
        let names: Vec<&str> = rows.iter().map(|r| r.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "latency.sampled",
                "latency.p50",
                "latency.p90",
                "latency.p99",
                "latency.p99.9"
            ]
        );
        assert_eq!(rows[0].1, ["4", "0", "4"]);
        assert_eq!(rows[1].1, ["<=304ns", "-", "<=304ns"]);
        assert_eq!(rows[4].1, [">304ns", "-", ">304ns"]);

        let bad: Value = serde_json::from_str(
            r#"{"per_worker":{"0":{"latency":{"sample_every":64,"sampled":1,"sum_ns":1,
                                              "le_ns":[256],"counts":[1]}}}}"#,
        )
        .unwrap();
        let e = latency_rows(&columns(&bad)).unwrap_err();
        assert!(e.starts_with("worker0: latency:"), "{e}");
    }
}
