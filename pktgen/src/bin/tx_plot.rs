//! Draws `results/tx.json` (from `scripts/bench_tx.py`) in the style of Orca's
//! latency comparison: per set-up (one node, chains of 2 and 3) and per case, the
//! average and p99 latency of a transaction in one request (design) and of the
//! HyperLoop-style baseline (one round trip per op), on a log scale: as dots, since a
//! bar's length means nothing on a log axis.
//!
//! Usage: `tx_plot results/tx.json results/tx.png`

use plotters::prelude::*;
use serde_json::Value;

// Only the tick labels and grid colours of the shared chart code are used here.
#[allow(dead_code)]
#[path = "common/chart.rs"]
mod chart;

/// (JSON key, label) of the cases, in drawing order.
const CASES: [(&str, &str); 4] = [
    ("0_1_64", "(0,1) 64 B"),
    ("4_2_64", "(4,2) 64 B"),
    ("0_1_1024", "(0,1) 1 KiB"),
    ("4_2_1024", "(4,2) 1 KiB*"),
];
/// (field, label, colour) of the values of one case.
const BARS: [(&str, &str, RGBColor); 4] = [
    ("design_avg_us", "design avg", RGBColor(31, 119, 180)),
    ("design_p99_us", "design p99", RGBColor(120, 170, 220)),
    ("baseline_avg_us", "baseline avg", RGBColor(214, 39, 40)),
    ("baseline_p99_us", "baseline p99", RGBColor(240, 140, 140)),
];

fn panel(
    area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>,
    title: &str,
    setup: &Value,
) -> Result<(), Box<dyn std::error::Error>> {
    let max = CASES
        .iter()
        .flat_map(|(k, _)| BARS.iter().map(move |(f, _, _)| setup[*k][*f].as_f64()))
        .flatten()
        .fold(1.0f64, f64::max);
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(56)
        .build_cartesian_2d(0f64..CASES.len() as f64, (0.5f64..max * 3.0).log_scale())?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(CASES.len() * 2 + 1)
        .x_label_formatter(&|x| {
            let i = (x - 0.5).round();
            if (x - 0.5 - i).abs() < 1e-6 && i >= 0.0 {
                CASES
                    .get(i as usize)
                    .map_or(String::new(), |c| c.1.to_string())
            } else {
                String::new()
            }
        })
        .y_desc("latency, us (log)")
        .y_label_formatter(&|y: &f64| chart::num(*y))
        .bold_line_style(chart::GRID)
        .light_line_style(chart::LIGHT_GRID)
        .draw()?;
    let w = 0.8 / BARS.len() as f64;
    for (b, (field, label, colour)) in BARS.iter().enumerate() {
        let dots: Vec<_> = CASES
            .iter()
            .enumerate()
            .filter_map(|(i, (k, _))| {
                let v = setup[*k][*field].as_f64()?;
                let x = i as f64 + 0.1 + (b as f64 + 0.5) * w;
                Some(Circle::new((x, v), 6, colour.filled()))
            })
            .collect();
        chart
            .draw_series(dots)?
            .label(*label)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 12, y + 5)], colour.filled()));
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
        eprintln!("usage: tx_plot results/tx.json results/tx.png");
        std::process::exit(2);
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    let setups = [
        ("chain_2", "Chain of 2 (sync: head answers after the tail)"),
        ("chain_3", "Chain of 3"),
        ("one_node", "One node"),
    ];
    let root = BitMapBackend::new(&args[2], (1800, 550)).into_drawing_area();
    root.fill(&WHITE)?;
    let (panels, foot) = root.split_vertically(520);
    foot.draw(&Text::new(
        "* at MTU 9000 (jumbo frames): its ~6 KiB request does not fit one 1500-MTU packet",
        (12, 6),
        ("sans-serif", 16),
    ))?;
    for (area, (key, title)) in panels.split_evenly((1, setups.len())).iter().zip(setups) {
        if v["setups"][key].is_object() {
            panel(area, title, &v["setups"][key])?;
        }
    }
    root.present()?;
    println!("wrote {}", args[2]);
    Ok(())
}
