//! Draws `results/replication.json` (from `scripts/bench.sh replication`): saturated
//! throughput and latency of a master against its number of async replicas, the
//! value-size sweep (SKV Fig. 12 analog), and the replica-failure timeline (SKV
//! Fig. 14 analog: throughput per 100 ms, a replica killed and started again).
//!
//! Usage: `replication_plot results/replication.json results/replication.png
//! results/replica_fail_timeline.png`

#[path = "common/chart.rs"]
mod chart;

use plotters::prelude::*;
use serde_json::Value;

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Draws `data` (linear x) into `area`, with vertical marker lines `marks` (label, x).
fn linear(
    area: &Area<'_>,
    title: &str,
    xdesc: &str,
    ylabel: &str,
    data: &[chart::Series],
    marks: &[(String, f64)],
    markers: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let xs = || {
        data.iter()
            .flat_map(|s| s.1.iter().map(|p| p.0))
            .chain(marks.iter().map(|m| m.1))
    };
    let xmin = xs().fold(f64::INFINITY, f64::min).min(0.0);
    let xmax = xs().fold(0.0, f64::max).max(xmin + 1.0);
    let ymax = data
        .iter()
        .flat_map(|s| s.1.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1e-3)
        * 1.2;
    let mut c = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(10)
        .x_label_area_size(35)
        .y_label_area_size(55)
        .build_cartesian_2d(xmin..xmax, 0.0..ymax)?;
    // Counts (replicas) get a label per integer, never 0.5.
    let integral = xs().all(|x| x.fract() == 0.0) && xmax - xmin <= 12.0;
    let mut mesh = c.configure_mesh();
    mesh.x_desc(xdesc)
        .y_desc(ylabel)
        .x_label_formatter(&|x: &f64| chart::num(*x))
        .y_label_formatter(&|y: &f64| chart::num(*y))
        .bold_line_style(chart::GRID)
        .light_line_style(chart::LIGHT_GRID);
    if integral {
        mesh.x_labels((xmax - xmin) as usize + 1);
    }
    mesh.draw()?;
    for (i, (name, pts)) in data.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        c.draw_series(LineSeries::new(pts.clone(), color.stroke_width(2)))?
            .label(name.clone())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
        if markers {
            c.draw_series(pts.iter().map(|p| Circle::new(*p, 3, color.filled())))?;
        }
    }
    let palette = [
        BLACK,
        RGBColor(230, 140, 0),
        BLUE,
        RGBColor(150, 0, 200),
        RGBColor(0, 150, 0),
    ];
    for (i, (name, x)) in marks.iter().enumerate() {
        let color = palette[i % palette.len()];
        c.draw_series(DashedLineSeries::new(
            vec![(*x, 0.0), (*x, ymax)],
            6,
            4,
            color.stroke_width(2),
        ))?
        .label(name.clone())
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
    }
    c.configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// (replicas, field) points of `{"0": x, "1": y, ...}`, sorted.
fn by_replicas(obj: &Value, field: Option<&str>) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = obj
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, v)| {
            let x = k.parse::<f64>().ok()?;
            let y = match field {
                Some(f) => v.get(f)?.as_f64()?,
                None => v.as_f64()?,
            };
            Some((x, y))
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// (log2 value size, field) points of the sweep.
fn sweep(v: &Value, field: &str) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = v["value_size_sweep"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| Some((k.parse::<f64>().ok()?.log2(), e[field].as_f64()?)))
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

/// Latency by replica count from `{"put_1_replicas": {"p99_us": ..}, ...}`.
fn latency(v: &Value, op: &str, field: &str) -> Vec<(f64, f64)> {
    let mut pts: Vec<(f64, f64)> = v["latency_us"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(k, e)| {
            let n = k.strip_prefix(op)?.strip_suffix("_replicas")?;
            Some((n.parse::<f64>().ok()?, e[field].as_f64()?))
        })
        .collect();
    pts.sort_by(|a, b| a.0.total_cmp(&b.0));
    pts
}

fn summary(v: &Value, path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(500);
    let (tl, tr) = top.split_horizontally(700);
    let (bl, br) = bottom.split_horizontally(700);
    let tput = [
        ("PUT-only".to_string(), by_replicas(&v["put_mops"], None)),
        ("GET-only".to_string(), by_replicas(&v["get_mops"], None)),
    ];
    let x = "async replicas (0: standalone node)";
    linear(
        &tl,
        "Saturated throughput (8 B values, memif)",
        x,
        "Mops",
        &tput,
        &[],
        true,
    )?;
    let lat = [
        ("PUT p50".to_string(), latency(v, "put_", "p50_us")),
        ("PUT p99".to_string(), latency(v, "put_", "p99_us")),
        ("GET p50".to_string(), latency(v, "get_", "p50_us")),
        ("GET p99".to_string(), latency(v, "get_", "p99_us")),
    ];
    linear(
        &tr,
        "Latency at saturation (calibrated)",
        x,
        "us",
        &lat,
        &[],
        true,
    )?;
    let xs = "value size (B)";
    let ul = || SeriesLabelPosition::UpperRight;
    let sw = [
        ("standalone".to_string(), sweep(v, "none_mops")),
        ("1 async replica".to_string(), sweep(v, "async1_mops")),
    ];
    chart::panel(&bl, "PUT throughput by value size", xs, "Mops", &sw, ul())?;
    let r = [(
        "PUT Mops with 1 async replica / standalone".to_string(),
        sweep(v, "put_async1_vs_none"),
    )];
    chart::panel(&br, "PUT: 1 replica / standalone", xs, "ratio", &r, ul())?;
    root.present()?;
    println!("wrote {path}");
    Ok(())
}

fn timeline(v: &Value, path: &str) -> Result<(), Box<dyn std::error::Error>> {
    let t = &v["timeline"];
    let pts: Vec<(f64, f64)> = t["points"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| Some((p[0].as_f64()?, p[1].as_f64()?)))
        .collect();
    let mut marks = Vec::new();
    for (field, name) in [
        ("kill_s", "replica killed (SIGKILL)"),
        ("detected_s", "detected: peer invalid"),
        ("restart_s", "replica restarted (empty)"),
        ("replica_ready_s", "replica process up (EAL ready)"),
        ("online_s", "online again (full sync done)"),
    ] {
        if let Some(x) = t[field].as_f64() {
            marks.push((format!("{name} {x:.2} s"), x));
        }
    }
    let root = BitMapBackend::new(path, (1000, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let data = [("master throughput per 100 ms".to_string(), pts)];
    linear(
        &root,
        "Master + 1 async replica, PUT-only: a replica fails and returns",
        "time (s)",
        "Mops",
        &data,
        &marks,
        false,
    )?;
    root.present()?;
    println!("wrote {path}");
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: replication_plot results/replication.json results/replication.png results/replica_fail_timeline.png");
        std::process::exit(2);
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    summary(&v, &args[2])?;
    timeline(&v, &args[3])?;
    Ok(())
}
