//! Results: latency percentiles from HdrHistogram, the summary table, the JSON file
//! and the latency plot.

use crate::cli::Dist;
use crate::gen::Counts;
use crate::phases::{LoadSummary, Measurement};
use crate::spec::RunSpec;
use hdrhistogram::Histogram;
use kvload::faults::FaultCounts;
use plotters::prelude::*;
use serde_json::{json, Value};
use std::path::Path;

/// Everything a run reports.
pub struct Outcome<'a> {
    /// The run.
    pub spec: &'a RunSpec,
    /// The summary label (`--label`, or [`label`]).
    pub label: String,
    /// The loop-back calibration (min round trip) in ns; 0 without calibration.
    pub calib_ns: f64,
    /// Whether DPDK memory is on hugepages.
    pub huge: bool,
    /// The load phase, if run.
    pub load: Option<LoadSummary>,
    /// The measurement.
    pub measurement: Measurement,
    /// The read-back of verify mode, if run.
    pub readback: Option<Counts>,
    /// The transport's counters and the faults injected on pktgen's transmit and
    /// receive sides (None in echo mode).
    pub transport: Option<(kvclient::Stats, FaultCounts, FaultCounts)>,
    /// The exactly-once check, if run.
    pub exactly_once: Option<kvclient::check::Report>,
}

impl Outcome<'_> {
    /// Measured throughput in Mops (ops completed in the measurement window).
    pub fn mops(&self) -> f64 {
        self.measurement.counts.done_ops as f64 / self.spec.phases.duration / 1e6
    }

    /// The process exit code: 1 when verify found mismatches or errors, or the
    /// exactly-once check a violation, else 0.
    pub fn exit_code(&self) -> i32 {
        let c = &self.measurement.counts;
        let readback_bad = self.readback.map_or(0, |r| r.mismatches + r.errors);
        let eo_bad = self.exactly_once.as_ref().is_some_and(|r| r.violations > 0);
        if eo_bad
            || self.spec.phases.verify && (c.mismatches > 0 || c.errors > 0 || readback_bad > 0)
        {
            1
        } else {
            0
        }
    }

    /// Prints the summary table and the counters to stdout.
    pub fn print(&self) {
        let m = &self.measurement;
        let c = &m.counts;
        let lat = Percentiles::from_hist(&m.hist, self.calib_ns);
        let raw = Percentiles::from_hist(&m.hist, 0.0);
        print_table(
            &self.label,
            self.mops(),
            c.done_ops,
            &lat,
            &raw,
            self.calib_ns / 1e3,
        );
        println!(
            "  timeouts {} ops, mismatches {}, errors {}, stale {}, rx drops {}",
            c.timeouts_ops, c.mismatches, c.errors, c.stale, c.rx_drops
        );
        let (nparts, count_k) = (self.spec.qps.partitions, self.spec.qps.count_partitions);
        if nparts > 1 || count_k > 1 {
            println!(
                "  ops per partition (of {nparts}): {:?}, hottest/mean {:.3}",
                m.part_ops,
                hottest_ratio(&m.part_ops).unwrap_or(0.0)
            );
            if count_k != nparts {
                println!(
                    "  ops per partition (of {count_k}): {:?}, hottest/mean {:.3}",
                    m.part_ops_k,
                    hottest_ratio(&m.part_ops_k).unwrap_or(0.0)
                );
            }
        }
        if c.not_master + c.not_enough_replicas > 0 {
            println!(
                "  writes refused: NOT_MASTER {}, NOT_ENOUGH_REPLICAS {}",
                c.not_master, c.not_enough_replicas
            );
        }
        if c.denied > 0 {
            println!(
                "  ops refused DENIED (outside the tenant's ACL or namespace): {}",
                c.denied
            );
        }
        if c.outcome_unknown > 0 {
            println!(
                "  OUTCOME_UNKNOWN results (begun by a failed master): {}",
                c.outcome_unknown
            );
        }
        if c.wrong_partition > 0 {
            println!("  WRONG_PARTITION results: {}", c.wrong_partition);
        }
        println!("  {}", m.cost.summary(c.done_ops));
        if let Some((t, ftx, frx)) = &self.transport {
            println!(
                "  transport: {} requests, {} retransmitted ({} NAKs, {} RNR NAKs, {} fast, {} timer firings), {} given up, {} duplicate frames",
                t.sent, t.retransmitted, t.naks_seq, t.rnr_naks, t.fast_retransmits, t.timeouts, t.failed, t.dup_frames
            );
            if ftx.total() > 0 || frx.total() > 0 {
                println!(
                    "  injected: tx dropped {} duplicated {} delayed {}; rx dropped {} duplicated {} delayed {}",
                    ftx.dropped, ftx.duplicated, ftx.delayed, frx.dropped, frx.duplicated, frx.delayed
                );
            }
        }
        if let Some(r) = &self.exactly_once {
            println!("  exactly-once: {}", r.summary());
        }
    }

    /// The results as the JSON object of `--json` (`command`: the command line).
    pub fn to_json(&self, command: &str) -> Value {
        let (spec, m) = (self.spec, &self.measurement);
        let (c, w) = (&m.counts, &spec.workload);
        let load = match &self.load {
            Some(l) => json!({"keys_loaded": l.keys_loaded, "seconds": l.seconds,
                "oom": l.counts.oom, "timeouts": l.counts.timeouts_ops,
                "mismatches": l.counts.mismatches}),
            None => json!(null),
        };
        let readback = match &self.readback {
            Some(rc) => json!({"keys": rc.done_ops, "mismatches": rc.mismatches,
                "errors": rc.errors, "timeouts": rc.timeouts_ops}),
            None => json!(null),
        };
        let mut out = json!({
            "label": self.label,
            "command": command,
            "config_file": spec.config_file.display().to_string(),
            "throughput_mops": self.mops(),
            "ops": c.done_ops,
            "packets": c.done_pkts,
            "mismatches": c.mismatches,
            "timeouts": c.timeouts_ops,
            "errors": c.errors,
            "stale_responses": c.stale,
            "rx_drops": c.rx_drops,
            "latency_us": Percentiles::from_hist(&m.hist, self.calib_ns).to_json(),
            "latency_raw_us": Percentiles::from_hist(&m.hist, 0.0).to_json(),
            "share_within_10us": share_within(&m.hist, 10_000.0, self.calib_ns),
            "calibration_us": self.calib_ns / 1e3,
            "hugepages": self.huge,
            "load": load,
            "readback": readback,
            "workload": {
                "keys": w.keys, "key_size": w.key_size, "value_size": w.value_size,
                "get": w.get, "put": w.put, "atomic": w.atomic, "vector": w.vector,
                "reduce": w.reduce, "delete": w.mix.delete_share(),
                "dist": format!("{:?}", w.dist).to_lowercase(), "theta": w.theta,
                "ops_per_packet": w.ops_per_packet, "qps": spec.qps.count,
                "window": spec.phases.window, "rate_mops": spec.phases.rate,
                "warmup_s": spec.phases.warmup, "duration_s": spec.phases.duration,
                "verify": spec.phases.verify, "echo": spec.phases.echo, "seed": w.seed,
            },
        });
        // Top-level keys of their own (one json! call would exceed the macro
        // recursion limit).
        let parts = json!({
            "ycsb": spec.workload.ycsb.map(|y| format!("{y:?}").to_lowercase()),
            "wrong_partition": c.wrong_partition,
            "not_master": c.not_master,
            "not_enough_replicas": c.not_enough_replicas,
            "outcome_unknown": c.outcome_unknown,
            "denied": c.denied,
            "qps_opened": spec.qps.source != crate::spec::QpSource::Config,
            "tenant": spec.qps.credentials().map(|c| c.tenant),
            "results_ok": c.results_ok,
            "partitions": spec.qps.partitions,
            "misdirect": spec.qps.misdirect,
            "partition_ops": m.part_ops,
            "hottest_partition_ratio": hottest_ratio(&m.part_ops),
            "count_partitions": spec.qps.count_partitions,
            "partition_ops_k": m.part_ops_k,
            "hottest_partition_ratio_k": hottest_ratio(&m.part_ops_k),
        });
        if let (Some(o), Value::Object(p)) = (out.as_object_mut(), parts) {
            o.extend(p);
        }
        let faults = |f: &FaultCounts| json!({"dropped": f.dropped, "duplicated": f.duplicated, "delayed": f.delayed});
        let transport = match &self.transport {
            Some((t, ftx, frx)) => json!({
                "sent": t.sent, "retransmitted": t.retransmitted, "connects_sent": t.connects_sent,
                "naks_seq": t.naks_seq, "rnr_naks": t.rnr_naks, "naks_invalid": t.naks_invalid,
                "timer_firings": t.timeouts, "dup_frames": t.dup_frames,
                "stale_frames": t.stale_frames, "gap_frames": t.gap_frames,
                "bad_frames": t.bad_frames, "completed": t.completed, "failed": t.failed,
                "fast_retransmits": t.fast_retransmits,
                "resumes_sent": t.resumes_sent, "resumed": t.resumed,
                "resume_refused": t.resume_refused,
                "rto_us": spec.phases.rto_us, "rto_min_us": spec.phases.rto_min_us,
                "injected_tx": faults(ftx), "injected_rx": faults(frx),
                "loss": spec.phases.tx_faults.loss, "dup": spec.phases.tx_faults.dup,
                "reorder": spec.phases.tx_faults.reorder,
            }),
            None => Value::Null,
        };
        let exactly_once = match &self.exactly_once {
            Some(r) => json!({
                "violations": r.violations, "fetch_adds": r.adds, "final_add": r.final_add,
                "cas_tries": r.cas_tries, "cas_successes": r.cas_successes,
                "final_cas": r.final_cas, "failed": r.failed, "problems": r.problems,
                "summary": r.summary(),
            }),
            None => Value::Null,
        };
        if let Some(o) = out.as_object_mut() {
            o.insert("generator".into(), m.cost.to_json(c.done_ops));
            o.insert("transport".into(), transport);
            o.insert("exactly_once".into(), exactly_once);
        }
        out
    }

    /// Writes the JSON to `path` and the latency plot beside it (`.png`; a plot
    /// failure is reported on stderr only).
    pub fn write(&self, path: &Path) -> Result<(), Box<dyn std::error::Error>> {
        let command = std::env::args().collect::<Vec<_>>().join(" ");
        std::fs::write(path, serde_json::to_string_pretty(&self.to_json(&command))?)?;
        let png = path.with_extension("png");
        if let Err(e) = plot_latency(&png, &self.label, &self.measurement.hist, self.calib_ns) {
            eprintln!("pktgen: plot: {e}");
        }
        Ok(())
    }
}

/// The summary label of a run without `--label`: mode, mix, popularity, sizes,
/// batching and pacing.
pub fn label(spec: &RunSpec) -> String {
    let w = &spec.workload;
    let (nparts, misdirect) = (spec.qps.partitions, spec.qps.misdirect);
    format!(
        "{} {:.0}% GET {:.0}% PUT{} {}, {} B keys, {} B values, {} ops/packet, {}",
        if spec.phases.echo { "echo" } else { "kv" },
        w.get * 100.0,
        w.put * 100.0,
        [
            ("atomic", w.atomic),
            ("vector", w.vector),
            ("reduce", w.reduce)
        ]
        .iter()
        .filter(|(_, s)| *s > 0.0)
        .map(|(n, s)| format!(" {:.0}% {n}", s * 100.0))
        .collect::<String>(),
        match w.dist {
            Dist::Uniform => "uniform".to_string(),
            Dist::Zipf => format!("zipf {}", w.theta),
            Dist::Latest => format!("latest {}", w.theta),
        },
        w.key_size,
        w.value_size,
        w.ops_per_packet,
        match spec.phases.rate {
            Some(r) => format!("open loop {r} Mops"),
            None => format!("closed loop window {}", spec.phases.window),
        }
    ) + &match (nparts, misdirect) {
        (1, _) => String::new(),
        (n, false) => format!(", {n} partitions"),
        (n, true) => format!(", {n} partitions misdirected"),
    }
}

/// Largest over mean of per-partition counts (1.0 is perfectly even); `None` when
/// nothing was counted.
pub fn hottest_ratio(counts: &[u64]) -> Option<f64> {
    let sum: u64 = counts.iter().sum();
    let max = counts.iter().copied().max()?;
    (sum > 0).then(|| max as f64 * counts.len() as f64 / sum as f64)
}

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
    // A log latency axis: the body of the distribution (microseconds) and its tail
    // (up to milliseconds) both readable.
    let ymax = pts.iter().map(|p| p.1).fold(0.0, f64::max).max(1e-3) * 1.5;
    let ymin = pts
        .iter()
        .map(|p| p.1)
        .filter(|&v| v > 0.0)
        .fold(f64::MAX, f64::min)
        .min(ymax / 10.0)
        * 0.7;
    for p in &mut pts {
        p.1 = p.1.max(ymin);
    }
    let root = BitMapBackend::new(path, (900, 540)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..5.0, (ymin..ymax).log_scale())
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .x_desc("percentile")
        .y_desc("latency (us)")
        .y_label_formatter(&|y: &f64| {
            format!("{y:.3}")
                .trim_end_matches('0')
                .trim_end_matches('.')
                .to_string()
        })
        .x_label_formatter(&|x: &f64| match x.round() as i32 {
            0 => "min".into(),
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
    use crate::spec::tests::spec;

    fn outcome(spec: &RunSpec, counts: Counts) -> Outcome<'_> {
        let mut hist = new_histogram();
        hist.record_n(5_000, counts.done_ops).unwrap();
        Outcome {
            spec,
            label: label(spec),
            calib_ns: 1_000.0,
            huge: false,
            load: None,
            measurement: Measurement {
                counts,
                hist,
                part_ops: vec![counts.done_ops],
                part_ops_k: vec![counts.done_ops],
                cost: crate::cost::GenCost::default(),
            },
            readback: None,
            transport: None,
            exactly_once: None,
        }
    }

    #[test]
    fn latency_plot_has_a_log_axis_from_body_to_tail() {
        let mut h = new_histogram();
        h.record_n(32_000, 100_000).unwrap();
        h.record_n(60_000, 1_000).unwrap();
        h.record_n(6_300_000, 3).unwrap();
        let path = std::env::temp_dir().join(format!("kvd-latency-{}.png", std::process::id()));
        plot_latency(&path, "test", &h, 0.0).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        let _ = std::fs::remove_file(&path);
        assert!(plot_latency(&path, "empty", &new_histogram(), 0.0).is_err());
    }

    #[test]
    fn exactly_once_violation_fails_the_run() {
        let s = spec(&[]).unwrap();
        let mut o = outcome(&s, Counts::default());
        o.exactly_once = Some(kvclient::check::Report::default());
        assert_eq!(o.exit_code(), 0);
        o.exactly_once = Some(kvclient::check::Report {
            violations: 1,
            ..Default::default()
        });
        assert_eq!(o.exit_code(), 1);
        let j = o.to_json("pktgen");
        assert_eq!(j["exactly_once"]["violations"], 1);
        assert!(j["transport"].is_null());
    }

    #[test]
    fn default_labels() {
        let s = spec(&["--dist", "zipf", "--ops-per-packet", "8", "--window", "64"]).unwrap();
        assert_eq!(
            label(&s),
            "kv 95% GET 5% PUT zipf 0.99, 8 B keys, 2 B values, 8 ops/packet, closed loop window 64"
        );
        let s = spec(&[
            "--echo", "--get", "0.5", "--put", "0.2", "--atomic", "0.3", "--rate", "2",
        ])
        .unwrap();
        assert_eq!(
            label(&s),
            "echo 50% GET 20% PUT 30% atomic uniform, 8 B keys, 2 B values, 8 ops/packet, open loop 2 Mops"
        );
    }

    #[test]
    fn json_has_every_field() {
        let s = spec(&["--duration", "2"]).unwrap();
        let c = Counts {
            done_ops: 4_000_000,
            done_pkts: 500_000,
            ..Counts::default()
        };
        let mut o = outcome(&s, c);
        o.readback = Some(Counts::default());
        let v = o.to_json("pktgen --duration 2");
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "calibration_us",
                "command",
                "config_file",
                "count_partitions",
                "denied",
                "errors",
                "exactly_once",
                "generator",
                "hottest_partition_ratio",
                "hottest_partition_ratio_k",
                "hugepages",
                "label",
                "latency_raw_us",
                "latency_us",
                "load",
                "misdirect",
                "mismatches",
                "not_enough_replicas",
                "not_master",
                "ops",
                "outcome_unknown",
                "packets",
                "partition_ops",
                "partition_ops_k",
                "partitions",
                "qps_opened",
                "readback",
                "results_ok",
                "rx_drops",
                "share_within_10us",
                "stale_responses",
                "tenant",
                "throughput_mops",
                "timeouts",
                "transport",
                "workload",
                "wrong_partition",
                "ycsb"
            ]
        );
        let mut wk: Vec<&str> = v["workload"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        wk.sort_unstable();
        assert_eq!(
            wk,
            [
                "atomic",
                "delete",
                "dist",
                "duration_s",
                "echo",
                "get",
                "key_size",
                "keys",
                "ops_per_packet",
                "put",
                "qps",
                "rate_mops",
                "reduce",
                "seed",
                "theta",
                "value_size",
                "vector",
                "verify",
                "warmup_s",
                "window"
            ]
        );
        assert_eq!(v["throughput_mops"], 2.0);
        assert_eq!(v["workload"]["dist"], "uniform");
        assert_eq!(v["load"], Value::Null);
        assert_eq!(v["readback"]["mismatches"], 0);
        assert_eq!(v["calibration_us"], 1.0);
        let (raw, cal) = (
            v["latency_raw_us"]["p50"].as_f64().unwrap(),
            v["latency_us"]["p50"].as_f64().unwrap(),
        );
        assert!((raw - 5.0).abs() < 0.01 && (raw - cal - 1.0).abs() < 1e-9);
        assert_eq!(v["hottest_partition_ratio"], 1.0);
    }

    #[test]
    fn exit_code_follows_verify() {
        let bad = Counts {
            mismatches: 1,
            ..Counts::default()
        };
        let s = spec(&[]).unwrap();
        assert_eq!(outcome(&s, bad).exit_code(), 0, "without --verify");
        let s = spec(&["--verify"]).unwrap();
        assert_eq!(outcome(&s, bad).exit_code(), 1);
        assert_eq!(outcome(&s, Counts::default()).exit_code(), 0);
        let mut o = outcome(&s, Counts::default());
        o.readback = Some(Counts {
            errors: 2,
            ..Counts::default()
        });
        assert_eq!(o.exit_code(), 1, "read-back errors");
    }

    #[test]
    fn hottest_partition_ratio() {
        assert_eq!(hottest_ratio(&[]), None);
        assert_eq!(hottest_ratio(&[0, 0]), None);
        assert_eq!(hottest_ratio(&[5, 5]), Some(1.0));
        assert_eq!(hottest_ratio(&[3, 1]), Some(1.5));
    }

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
