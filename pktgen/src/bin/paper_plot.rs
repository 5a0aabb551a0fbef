//! Draws a figure of `scripts/reproduce.sh` from the `plot` object of its JSON, so
//! every PNG in the results index can be redrawn from its JSON alone.
//!
//! Usage: `paper_plot FIG.json FIG.png`
//!
//! The `plot` object: `{"title": T, "panels": [P, ...]}`, panels side by side (two
//! per row). A panel is either
//! `{"kind": "line", "title", "x_label", "y_label", "x_log2": bool, "y_log": bool,
//!   "series": [{"name", "points": [[x, y], ...]}]}` or
//! `{"kind": "bar", "title", "y_label", "y_log": bool, "categories": [C, ...],
//!   "series": [{"name", "values": [v, ...]}]}` (grouped bars, one group per category).
//! Either kind may set `"legend"` to upper_left, upper_right, lower_left or lower_right.
//! A series may carry `"errors": [[lo, hi] or null, ...]` (one per point or value): an
//! error bar, the spread of the repetitions. Points or values that are not finite (or
//! not positive on a log axis) are skipped.
//!
//! Axes: numbers without trailing zeros; a log axis labelled at 1, 2 and 5 of each
//! decade only; grouped values on a log axis are dots, never bars (a bar's length
//! means nothing on a log scale).

use plotters::coord::Shift;
use plotters::prelude::*;
use serde_json::Value;

// Only the tick labels and grid colours of the shared chart code are used here.
#[allow(dead_code)]
#[path = "common/chart.rs"]
mod chart;

use chart::{num, GRID, LIGHT_GRID};

type Area<'a> = DrawingArea<BitMapBackend<'a>, Shift>;
type Res = Result<(), Box<dyn std::error::Error>>;

const PANEL_W: u32 = 720;
const PANEL_H: u32 = 500;

fn text<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or("")
}

/// The ticks of a log axis over `lo..hi`: (1, 2 and 5 times each power of ten, the
/// labelled grid lines; the other digits, faint lines).
fn log_ticks(lo: f64, hi: f64) -> (Vec<f64>, Vec<f64>) {
    let (mut bold, mut light) = (Vec::new(), Vec::new());
    let first = lo.max(1e-12).log10().floor() as i32;
    let last = hi.max(1e-12).log10().ceil() as i32;
    for e in first..=last {
        let decade = 10f64.powi(e);
        for m in 1..10 {
            let v = decade * f64::from(m);
            if (lo..=hi).contains(&v) {
                if [1, 2, 5].contains(&m) {
                    bold.push(v);
                } else {
                    light.push(v);
                }
            }
        }
    }
    (bold, light)
}

/// The error bars of a series (`"errors"`), one slot per point or value.
fn errors(s: &Value, n: usize) -> Vec<Option<(f64, f64)>> {
    let e = s["errors"].as_array();
    (0..n)
        .map(|i| {
            let pair = e?.get(i)?.as_array()?;
            let (lo, hi) = (pair.first()?.as_f64()?, pair.get(1)?.as_f64()?);
            (lo.is_finite() && hi.is_finite() && lo <= hi).then_some((lo, hi))
        })
        .collect()
}

/// An error bar at `x` from `lo` to `hi` with caps `cap` wide on each side.
fn error_bar(x: f64, (lo, hi): (f64, f64), cap: f64, c: RGBAColor) -> PathElement<(f64, f64)> {
    PathElement::new(
        vec![
            (x - cap, lo),
            (x + cap, lo),
            (x, lo),
            (x, hi),
            (x - cap, hi),
            (x + cap, hi),
        ],
        c.stroke_width(1),
    )
}

/// `(lo, hi)` of `ys` with headroom; log axes keep positive values only.
fn y_range(ys: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for y in ys.filter(|y| y.is_finite() && (!log || *y > 0.0)) {
        lo = lo.min(y);
        hi = hi.max(y);
    }
    if !hi.is_finite() {
        return if log { (0.1, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        (lo / 2.0, hi * 2.0)
    } else {
        (lo.min(0.0), if hi > 0.0 { hi * 1.15 } else { 1.0 })
    }
}

/// Ten well-separated colours (the "tab10" set), then plotters' palette.
const COLORS: [(u8, u8, u8); 10] = [
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (255, 127, 14),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
    (23, 190, 207),
    (188, 189, 34),
];

/// The legend corner of a panel (`"legend"`: upper_left, upper_right, lower_left,
/// lower_right), or `default`.
fn legend(p: &Value, default: SeriesLabelPosition) -> SeriesLabelPosition {
    match p["legend"].as_str() {
        Some("upper_left") => SeriesLabelPosition::UpperLeft,
        Some("upper_right") => SeriesLabelPosition::UpperRight,
        Some("lower_left") => SeriesLabelPosition::LowerLeft,
        Some("lower_right") => SeriesLabelPosition::LowerRight,
        _ => default,
    }
}

fn color(i: usize) -> RGBAColor {
    match COLORS.get(i) {
        Some(&(r, g, b)) => RGBColor(r, g, b).to_rgba(),
        None => Palette99::pick(i).to_rgba(),
    }
}

/// A line panel's series: its name, and its points with finite coordinates, each
/// with its error bar if any.
type LineData = (String, Vec<((f64, f64), Option<(f64, f64)>)>);

/// The series of a line panel.
fn line_series(p: &Value, x_log2: bool, y_log: bool) -> Vec<LineData> {
    let empty = Vec::new();
    p["series"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|s| {
            let raw = s["points"].as_array().unwrap_or(&empty);
            let errs = errors(s, raw.len());
            let pts = raw
                .iter()
                .zip(errs)
                .filter_map(|(pt, e)| {
                    let (x, y) = (pt.get(0)?.as_f64()?, pt.get(1)?.as_f64()?);
                    let x = if x_log2 { x.log2() } else { x };
                    let e = e.filter(|(lo, _)| !y_log || *lo > 0.0);
                    (x.is_finite() && y.is_finite() && (!y_log || y > 0.0)).then_some(((x, y), e))
                })
                .collect();
            (text(s, "name").to_string(), pts)
        })
        .collect()
}

fn line_panel(area: &Area<'_>, p: &Value) -> Res {
    let (x_log2, y_log) = (p["x_log2"] == true, p["y_log"] == true);
    let data = line_series(p, x_log2, y_log);
    let xs = || data.iter().flat_map(|s| s.1.iter().map(|q| q.0 .0));
    let (mut xmin, mut xmax) = (
        xs().fold(f64::INFINITY, f64::min),
        xs().fold(f64::NEG_INFINITY, f64::max),
    );
    if !xmin.is_finite() {
        (xmin, xmax) = (0.0, 1.0);
    }
    if xmax - xmin < 1e-9 {
        (xmin, xmax) = (xmin - 0.5, xmax + 0.5);
    }
    let pad = if x_log2 { 0.2 } else { (xmax - xmin) * 0.03 };
    let (xmin, xmax) = (xmin - pad, xmax + pad);
    let ys = data.iter().flat_map(|s| {
        s.1.iter().flat_map(|(q, e)| {
            [Some(q.1), e.map(|e| e.0), e.map(|e| e.1)]
                .into_iter()
                .flatten()
        })
    });
    let (ylo, yhi) = y_range(ys, y_log);
    let mut b = ChartBuilder::on(area);
    b.caption(text(p, "title"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(60);
    let x_fmt = move |x: &f64| {
        if x_log2 {
            format!("{}", 2f64.powf(*x).round())
        } else {
            num(*x)
        }
    };
    let y_fmt = |y: &f64| num(*y);
    let cap = (xmax - xmin) * 0.008;
    macro_rules! draw {
        ($chart:expr) => {{
            let mut chart = $chart;
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(text(p, "x_label"))
                .y_desc(text(p, "y_label"))
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .bold_line_style(GRID)
                .light_line_style(LIGHT_GRID);
            if x_log2 {
                mesh.x_labels(((xmax - xmin) as usize + 1).max(2));
            }
            mesh.draw()?;
            for (i, (name, pts)) in data.iter().enumerate() {
                let c = color(i);
                let line = pts.iter().map(|(q, _)| *q);
                chart
                    .draw_series(LineSeries::new(line, c.stroke_width(2)))?
                    .label(name.clone())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 18, y)], c.stroke_width(2))
                    });
                chart.draw_series(pts.iter().map(|(q, _)| Circle::new(*q, 3, c.filled())))?;
                let bars = pts
                    .iter()
                    .filter_map(|(q, e)| Some(error_bar(q.0, (*e)?, cap, c)));
                chart.draw_series(bars)?;
            }
            chart
                .configure_series_labels()
                .position(legend(p, SeriesLabelPosition::UpperLeft))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if y_log {
        let (bold, light) = log_ticks(ylo, yhi);
        let y = (ylo..yhi).log_scale().with_key_points(bold);
        draw!(b.build_cartesian_2d(xmin..xmax, y.with_light_points(light))?);
    } else {
        draw!(b.build_cartesian_2d(xmin..xmax, ylo..yhi)?);
    }
    Ok(())
}

fn bar_panel(area: &Area<'_>, p: &Value) -> Res {
    let empty = Vec::new();
    let cats: Vec<String> = p["categories"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|c| c.as_str().map_or_else(|| c.to_string(), str::to_string))
        .collect();
    type BarData = (String, Vec<f64>, Vec<Option<(f64, f64)>>);
    let series: Vec<BarData> = p["series"]
        .as_array()
        .unwrap_or(&empty)
        .iter()
        .map(|s| {
            let vals = s["values"].as_array().unwrap_or(&empty);
            let errs = errors(s, vals.len());
            let vals = vals.iter().map(|v| v.as_f64().unwrap_or(f64::NAN));
            (text(s, "name").to_string(), vals.collect(), errs)
        })
        .collect();
    let y_log = p["y_log"] == true;
    let ys = series.iter().flat_map(|s| {
        s.1.iter()
            .copied()
            .chain(s.2.iter().flatten().flat_map(|e| [e.0, e.1]))
    });
    let (ylo, yhi) = y_range(ys, y_log);
    let ylo = if y_log { ylo } else { 0.0 };
    let n = cats.len().max(1);
    let labels = cats.clone();
    let x_fmt = move |x: &f64| {
        let i = x.floor();
        if (x - i - 0.5).abs() < 1e-6 && i >= 0.0 {
            labels.get(i as usize).cloned().unwrap_or_default()
        } else {
            String::new()
        }
    };
    let mut b = ChartBuilder::on(area);
    b.caption(text(p, "title"), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(38)
        .y_label_area_size(60);
    let k = series.len().max(1) as f64;
    let width = 0.8 / k;
    let y_fmt = |y: &f64| num(*y);
    macro_rules! draw {
        ($chart:expr, $base:expr) => {{
            let mut chart = $chart;
            chart
                .configure_mesh()
                .disable_x_mesh()
                .y_desc(text(p, "y_label"))
                .x_labels(2 * n + 1)
                .x_label_formatter(&x_fmt)
                .y_label_formatter(&y_fmt)
                .bold_line_style(GRID)
                .light_line_style(LIGHT_GRID)
                .draw()?;
            for (si, (name, vals, errs)) in series.iter().enumerate() {
                let c = color(si);
                let shown = |ci: usize| {
                    let v = vals[ci];
                    (v.is_finite() && (!y_log || v > 0.0)).then_some(v)
                };
                let mid = |ci: usize| ci as f64 + 0.1 + (si as f64 + 0.5) * width;
                // A log axis gets dots: a bar's length means nothing there.
                let legend = move |(x, y): (i32, i32)| {
                    Rectangle::new([(x, y - 5), (x + 14, y + 5)], c.filled())
                };
                let shown_at = (0..vals.len()).filter_map(|ci| Some((ci, shown(ci)?)));
                if y_log {
                    let dots = shown_at.map(|(ci, v)| Circle::new((mid(ci), v), 5, c.filled()));
                    chart.draw_series(dots)?.label(name.clone()).legend(legend);
                } else {
                    let rects = shown_at.map(|(ci, v)| {
                        let x0 = mid(ci) - width / 2.0;
                        Rectangle::new([(x0, $base), (x0 + width, v)], c.filled())
                    });
                    chart.draw_series(rects)?.label(name.clone()).legend(legend);
                }
                let bars = (0..vals.len()).filter_map(|ci| {
                    shown(ci)?;
                    Some(error_bar(mid(ci), errs[ci]?, width / 6.0, BLACK.to_rgba()))
                });
                chart.draw_series(bars)?;
            }
            chart
                .configure_series_labels()
                .position(legend(p, SeriesLabelPosition::UpperRight))
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .draw()?;
        }};
    }
    if y_log {
        let (bold, light) = log_ticks(ylo, yhi);
        let y = (ylo..yhi).log_scale().with_key_points(bold);
        draw!(
            b.build_cartesian_2d(0.0..n as f64, y.with_light_points(light))?,
            ylo
        );
    } else {
        draw!(b.build_cartesian_2d(0.0..n as f64, ylo..yhi)?, 0.0);
    }
    Ok(())
}

fn main() -> Res {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: paper_plot FIG.json FIG.png");
        std::process::exit(2);
    }
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&args[1])?)?;
    let plot = &v["plot"];
    let panels = plot["panels"]
        .as_array()
        .filter(|p| !p.is_empty())
        .ok_or("the JSON has no plot.panels")?;
    let cols = panels.len().min(2);
    let rows = panels.len().div_ceil(cols);
    let title_h = 40;
    let root = BitMapBackend::new(
        &args[2],
        (PANEL_W * cols as u32, PANEL_H * rows as u32 + title_h),
    )
    .into_drawing_area();
    root.fill(&WHITE)?;
    let (top, body) = root.split_vertically(title_h);
    top.titled(text(plot, "title"), ("sans-serif", 22))?;
    let areas = body.split_evenly((rows, cols));
    for (p, area) in panels.iter().zip(areas.iter()) {
        match p["kind"].as_str() {
            Some("bar") => bar_panel(area, p)?,
            Some("line") => line_panel(area, p)?,
            other => return Err(format!("unknown panel kind {other:?}").into()),
        }
    }
    root.present()?;
    println!("wrote {}", args[2]);
    Ok(())
}
