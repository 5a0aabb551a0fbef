//! Results: latency percentiles from HdrHistogram, the summary table, the JSON file
//! and the latency plot.

use hdrhistogram::Histogram;
use plotters::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

/// Latency percentiles in microseconds.
#[derive(Clone, Copy, Debug, Default)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Largest recorded value.
    pub max: f64,
}

impl Percentiles {
    /// Reads percentiles from a histogram of nanoseconds, subtracting `offset_ns`
    /// (the loop-back calibration) and flooring at zero.
    pub fn from_hist(h: &Histogram<u64>, offset_ns: f64) -> Percentiles {
        let at = |q: f64| {
            if h.is_empty() {
                0.0
            } else {
                ((h.value_at_quantile(q) as f64 - offset_ns).max(0.0)) / 1000.0
            }
        };
        Percentiles {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            p999: at(0.999),
            p9999: at(0.9999),
            max: if h.is_empty() {
                0.0
            } else {
                ((h.max() as f64 - offset_ns).max(0.0)) / 1000.0
            },
        }
    }

    /// As a JSON object with keys p50, p90, p99, p999, p9999, max.
    pub fn to_json(self) -> Value {
        json!({
            "p50": self.p50, "p90": self.p90, "p99": self.p99,
            "p999": self.p999, "p9999": self.p9999, "max": self.max,
        })
    }
}

/// Share of recorded latencies at most `limit_ns` after subtracting `offset_ns` (the
/// loop-back calibration), i.e. raw values `<= limit_ns + offset_ns`; 0 when empty.
pub fn share_within(h: &Histogram<u64>, limit_ns: f64, offset_ns: f64) -> f64 {
    if h.is_empty() {
        return 0.0;
    }
    let bound = (limit_ns + offset_ns).max(0.0) as u64;
    let within: u64 = h
        .iter_recorded()
        .filter(|v| v.value_iterated_to() <= bound)
        .map(|v| v.count_at_value())
        .sum();
    within as f64 / h.len() as f64
}

/// A new latency histogram in nanoseconds: 1 ns .. 60 s, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("static histogram bounds are valid")
}

/// Prints the summary table to stdout.
pub fn print_table(
    title: &str,
    mops: f64,
    ops: u64,
    lat: &Percentiles,
    raw: &Percentiles,
    calib_us: f64,
) {
    println!("{title}");
    println!("  {:<22} {:>12.3}", "throughput (Mops)", mops);
    println!("  {:<22} {:>12}", "operations", ops);
    println!(
        "  {:<22} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "latency (us)", "p50", "p90", "p99", "p99.9", "p99.99", "max"
    );
    let row = |name: &str, p: &Percentiles| {
        println!(
            "  {:<22} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>9.2}",
            name, p.p50, p.p90, p.p99, p.p999, p.p9999, p.max
        );
    };
    row(&format!("calibrated (-{calib_us:.2})"), lat);
    row("raw", raw);
}

/// Draws the latency distribution (percentile vs latency, log-scaled tail) as PNG.
pub fn plot_latency(
    path: &Path,
    title: &str,
    h: &Histogram<u64>,
    offset_ns: f64,
) -> Result<(), String> {
    if h.is_empty() {
        return Err("no latency samples to plot".into());
    }
    // x = number of nines: 0 (p0) .. 5 (p99.999); y = latency in us.
    let mut pts = Vec::new();
    let mut x = 0.0f64;
    while x <= 5.0 {
        let q = 1.0 - 10f64.powf(-x);
        let v = ((h.value_at_quantile(q) as f64 - offset_ns).max(0.0)) / 1000.0;
        pts.push((x, v));
        x += 0.02;
    }
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.1;
    let root = BitMapBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..5.0, 0.0..ymax)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (us)")
        .x_label_formatter(&|x: &f64| match x.round() as i32 {
            0 => "0".into(),
            1 => "90".into(),
            2 => "99".into(),
            3 => "99.9".into(),
            4 => "99.99".into(),
            _ => "99.999".into(),
        })
        .x_labels(6)
        .draw()
        .map_err(|e| e.to_string())?;
    chart
        .draw_series(LineSeries::new(pts, &BLUE))
        .map_err(|e| e.to_string())?;
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn share_within_counts_calibrated_values() {
        let mut h = new_histogram();
        assert_eq!(share_within(&h, 10_000.0, 0.0), 0.0);
        for v in [1_000u64, 5_000, 11_000, 20_000] {
            h.record(v).unwrap();
        }
        assert_eq!(share_within(&h, 10_000.0, 0.0), 0.5);
        // With 2 us of calibration, 11 us raw is 9 us calibrated: within.
        assert_eq!(share_within(&h, 10_000.0, 2_000.0), 0.75);
        assert_eq!(share_within(&h, 100_000.0, 0.0), 1.0);
    }

    #[test]
    fn percentiles_subtract_calibration() {
        let mut h = new_histogram();
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let raw = Percentiles::from_hist(&h, 0.0);
        let cal = Percentiles::from_hist(&h, 100_000.0);
        assert!((raw.p50 - 500.0).abs() < 1.0, "{}", raw.p50);
        assert!((raw.p50 - cal.p50 - 100.0).abs() < 0.01);
        assert!(raw.max >= raw.p9999 && raw.p9999 >= raw.p99 && raw.p99 >= raw.p50);
        let empty = new_histogram();
        assert_eq!(Percentiles::from_hist(&empty, 5.0).max, 0.0);
    }
}
