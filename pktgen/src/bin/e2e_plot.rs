//! Draws `results/e2e.json` (from `scripts/bench.sh e2e`) as the paper's Fig. 15:
//! throughput and latency against ops per packet, one line per workload plus echo.
//!
//! Usage: `e2e_plot results/e2e.json results/e2e.png`

use plotters::prelude::*;
use serde_json::Value;

type Series = (String, Vec<(f64, f64)>);

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
            add(name, s);
        }
    }
    add("echo (I/O limit)", &v["echo"]);
    out
}

fn panel(
    area: &DrawingArea<BitMapBackend, plotters::coord::Shift>,
    title: &str,
    ylabel: &str,
    data: &[Series],
) -> Result<(), Box<dyn std::error::Error>> {
    let xmax = data
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.0))
        .fold(0.0, f64::max)
        .max(1.0);
    let ymax = data
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("ops per packet")
        .y_desc(ylabel)
        .x_labels(xmax as usize + 1)
        .x_label_formatter(&|x: &f64| format!("{}", 2f64.powf(x.round()) as u32))
        .draw()?;
    for (i, (name, pts)) in data.iter().enumerate() {
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
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
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
    panel(
        &left,
        "Throughput (memif, 1 lcore each)",
        "Mops",
        &series(&v, "throughput_mops"),
    )?;
    panel(&right, "Latency p50 / p99 (raw, closed loop)", "us", &{
        let mut s = series(&v, "p99_raw_us");
        for x in s.iter_mut() {
            x.0 = format!("{} p99", x.0);
        }
        s.retain(|x| !x.0.starts_with("echo"));
        let mut p50 = series(&v, "p50_raw_us");
        p50.retain(|x| x.0 == "get95_uniform");
        for x in p50.iter_mut() {
            x.0 = format!("{} p50", x.0);
        }
        s.extend(p50);
        s
    })?;
    root.present()?;
    println!("wrote {}", args[2]);
    Ok(())
}
