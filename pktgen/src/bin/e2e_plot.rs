//! Draws `results/e2e.json` (from `scripts/bench.sh e2e`) as the paper's Fig. 15:
//! throughput and latency against ops per packet, one line per workload plus echo.
//!
//! Usage: `e2e_plot results/e2e.json results/e2e.png`

use plotters::prelude::*;
use serde_json::Value;

#[path = "common/chart.rs"]
mod chart;

use chart::Series;

fn series(v: &Value, field: &str) -> Vec<Series> {
    let mut out = Vec::new();
    let mut add = |name: &str, obj: &Value| {
        let mut pts: Vec<(f64, f64)> = obj
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(b, p)| Some((b.parse::<f64>().ok()?.log2(), p[field].as_f64()?)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        out.push((name.to_string(), pts));
    };
    if let Some(kv) = v["kv"].as_object() {
        for (name, s) in kv {
            add(&workload(name), s);
        }
    }
    // Echo mode bounces frames unparsed: the server idles, the generator sets the pace.
    add("echo (generator-bound)", &v["echo"]);
    out
}

/// A workload's name in words (`get95_zipf` → `95 % GET, Zipf 0.99`).
fn workload(id: &str) -> String {
    let Some((get, dist)) = id.strip_prefix("get").and_then(|r| r.split_once('_')) else {
        return id.to_string();
    };
    let dist = if dist == "zipf" { "Zipf 0.99" } else { dist };
    format!("{get} % GET, {dist}")
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: e2e_plot results/e2e.json results/e2e.png");
        std::process::exit(2);
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    let root = BitMapBackend::new(&args[2], (1400, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(700);
    chart::panel(
        &left,
        "Throughput (memif, 1 lcore each)",
        "ops per packet",
        "Mops",
        &series(&v, "throughput_mops"),
        SeriesLabelPosition::UpperLeft,
    )?;
    let lat = {
        let mut s = series(&v, "p99_raw_us");
        for x in s.iter_mut() {
            x.0 = format!("{}: p99", x.0);
        }
        s.retain(|x| !x.0.starts_with("echo"));
        let mut p50 = series(&v, "p50_raw_us");
        p50.retain(|x| x.0 == workload("get95_uniform"));
        for x in p50.iter_mut() {
            x.0 = format!("{}: p50", x.0);
        }
        s.extend(p50);
        s
    };
    chart::panel(
        &right,
        "Latency p50 / p99 (raw, closed loop)",
        "ops per packet",
        "us",
        &lat,
        SeriesLabelPosition::UpperLeft,
    )?;
    root.present()?;
    println!("wrote {}", args[2]);
    Ok(())
}
