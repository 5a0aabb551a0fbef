//! The hot-path cost of the server-side latency histogram, without the network: one
//! `Server` with 4 connected QPs serves the same pre-built request bursts (32 ops per
//! packet, 95 % GET / 5 % PUT) three ways, a quarter second each in turn so a drift
//! of the machine hits all alike:
//!
//! 0. no sampling code at all (the worker loop before sampling existed);
//! 1. the worker loop's sampling code at the default, one in 64 packets: `on_rx`
//!    before the burst, and after it the TSC read and histogram update when a
//!    sample is pending;
//! 2. the same at one in every packet.
//!
//! Each variant's time covers the same steps (handle_burst plus its sampling code).
//! `cargo run --release -p dataplane --example sampling_overhead -- [SECONDS]` prints
//! JSON: the Mops of each and `overhead_64` / `overhead_1` = 1 - sampled / unsampled.

mod burst_bench;

use burst_bench::{alternate, Bench};
use dataplane::latency::Sampler;
use dataplane::stats::WorkerStats;

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(6.0);
    let stats = WorkerStats::default();
    let mut b = Bench::new(4, &stats);
    // EAL is not running here: the TSC frequency only scales the recorded values.
    let hz = 2_000_000_000;
    let mut samplers = [Sampler::new(64, hz), Sampler::new(1, hz)];
    let (mops, round) = alternate(secs, &stats, 3, |slot| {
        if slot == 0 {
            return b.run(4, &stats, &mut |s, v, st, tx| s.handle_burst(v, st, tx));
        }
        let sampler = &mut samplers[slot - 1];
        b.run(4, &stats, &mut |s, v, st, tx| {
            sampler.on_rx(v.len(), dpdk::tsc::now);
            s.handle_burst(v, st, tx);
            if sampler.pending() {
                sampler.on_tx_done(dpdk::tsc::now(), &st.latency);
            }
        })
    });
    println!(
        "{{\"mops_unsampled\": {:.3}, \"mops_sample_64\": {:.3}, \"mops_sample_1\": {:.3}, \"overhead_64\": {:.4}, \"overhead_1\": {:.4}, \"samples\": {}, \"seconds\": {secs}, \"rounds\": {round}}}",
        mops[0],
        mops[1],
        mops[2],
        1.0 - mops[1] / mops[0],
        1.0 - mops[2] / mops[0],
        stats.latency.sampled()
    );
}
