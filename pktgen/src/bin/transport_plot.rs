//! Draws `results/transport.json` (from `scripts/bench.sh transport`) as HERD's
//! scaling figure: throughput and p99 latency of one server lcore against the number
//! of client QPs (connections), with the echo floor for reference.
//!
//! Usage: `transport_plot results/transport.json results/transport.png`

#[path = "common/chart.rs"]
mod chart;

use plotters::prelude::*;
use serde_json::Value;

/// (log2 QPs, value) points of a `{"4": x, "16": y, ...}` object, sorted.
fn points(obj: &Value) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = obj
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(q, v)| Some((q.parse::<f64>().ok()?.log2(), v.as_f64()?)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: transport_plot results/transport.json results/transport.png");
        std::process::exit(2);
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    let kv = points(&v["mops_by_qps"]);
    let mut tput = vec![("KV, 95% GET, protocol v2".to_string(), kv.clone())];
    if let (Some(echo), Some(first), Some(last)) = (v["echo_mops"].as_f64(), kv.first(), kv.last())
    {
        tput.push((
            "echo, 4 QPs (I/O floor)".to_string(),
            vec![(first.0, echo), (last.0, echo)],
        ));
    }
    let root = BitMapBackend::new(&args[2], (1400, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(700);
    let x = "client QPs (connections)";
    let ll = || SeriesLabelPosition::LowerLeft;
    let title = "Throughput, one server lcore (memif)";
    chart::panel(&left, title, x, "Mops", &tput, ll())?;
    let p99 = [("KV p99".to_string(), points(&v["p99_us_by_qps"]))];
    chart::panel(
        &right,
        "p99 latency (raw, closed loop)",
        x,
        "us",
        &p99,
        ll(),
    )?;
    root.present()?;
    println!("wrote {}", args[2]);
    Ok(())
}
