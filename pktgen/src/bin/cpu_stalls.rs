//! Measures how often this CPU is taken away from a busy-polling thread.
//!
//! A poll-mode loop assumes it owns its core. On a shared or virtualised machine the
//! kernel or the hypervisor still takes it away now and then, and every operation in
//! flight during such a gap waits it out: in an open-loop run, gaps that cover 1% of
//! the time put the p99 latency at the gap length, whatever the KV path does. This
//! tool spins reading the clock, as the dataplane and pktgen loops do, and reports the
//! gaps between consecutive reads, so a latency benchmark can record the platform's
//! stall rate beside its percentiles (scripts/bench_e2e.py runs it on every core).
//!
//! `cpu_stalls SECONDS` (pin it with `taskset -c N`) prints one JSON object:
//! `stalled_share` (time in gaps of at least 10 us / wall time), gap counts per
//! threshold and the longest gap.

use std::time::{Duration, Instant};

/// Gap thresholds in microseconds, counted separately.
const THRESHOLDS_US: [u64; 5] = [10, 100, 500, 1000, 2000];

fn main() {
    let secs: f64 = match std::env::args().nth(1).map(|s| s.parse::<f64>()) {
        None => 5.0,
        Some(Ok(s)) if s > 0.0 && s.is_finite() => s,
        Some(_) => {
            eprintln!("usage: cpu_stalls [SECONDS > 0]");
            std::process::exit(2);
        }
    };
    let run = Duration::from_secs_f64(secs);
    let mut counts = [0u64; THRESHOLDS_US.len()];
    let mut stalled = Duration::ZERO;
    let mut longest = Duration::ZERO;
    let start = Instant::now();
    let mut prev = start;
    loop {
        let now = Instant::now();
        let gap = now - prev;
        prev = now;
        if gap >= Duration::from_micros(THRESHOLDS_US[0]) {
            stalled += gap;
            longest = longest.max(gap);
            let us = gap.as_micros() as u64;
            for (c, t) in counts.iter_mut().zip(THRESHOLDS_US) {
                *c += u64::from(us >= t);
            }
        }
        if now - start >= run {
            break;
        }
    }
    let wall = start.elapsed().as_secs_f64();
    let per_threshold: serde_json::Map<String, serde_json::Value> = THRESHOLDS_US
        .iter()
        .zip(counts)
        .map(|(t, c)| (format!("gaps_ge_{t}us"), c.into()))
        .collect();
    let out = serde_json::json!({
        "seconds": wall,
        "stalled_share": stalled.as_secs_f64() / wall,
        "longest_gap_us": longest.as_secs_f64() * 1e6,
        "counts": per_threshold,
    });
    println!("{out}");
}
