//! Draws `results/transport.json` (from `scripts/bench.sh transport`) as HERD's
//! scaling figure: throughput and p99 latency of one server lcore against the number
//! of client QPs (connections), with the echo floor for reference.
//!
//! Usage: `transport_plot results/transport.json results/transport.png`

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

fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    ylabel: &str,
    series: &[(String, Vec<(f64, f64)>)],
) -> Result<(), Box<dyn std::error::Error>> {
    let all = || series.iter().flat_map(|s| s.1.iter());
    let xmin = all().map(|p| p.0).fold(f64::INFINITY, f64::min).min(2.0);
    let xmax = all().map(|p| p.0).fold(0.0, f64::max).max(xmin + 1.0);
    let ymax = all().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(xmin..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("client QPs (connections)")
        .y_desc(ylabel)
        .x_labels((xmax - xmin) as usize + 1)
        .x_label_formatter(&|x: &f64| format!("{}", 2f64.powf(x.round()) as u32))
        .draw()?;
    for (i, (name, pts)) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
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
    panel(&left, "Throughput, one server lcore (memif)", "Mops", &tput)?;
    panel(
        &right,
        "p99 latency (raw, closed loop)",
        "us",
        &[("KV p99".to_string(), points(&v["p99_us_by_qps"]))],
    )?;
    root.present()?;
    println!("wrote {}", args[2]);
    Ok(())
}
