//! The run's phases over DPDK: the event loop that moves the generator's frames
//! through mbufs and queues (send bursts, receive, time out), and the phases built
//! on it: loop-back calibration, load, warm-up + measurement, read-back.

use crate::gen::{Counts, Gen, Phase};
use crate::spec::RunSpec;
use dpdk::{tsc, IdleBackoff, Mbuf, MbufBurst, Mempool, RxQueue, TxQueue};
use hdrhistogram::Histogram;
use kvwire::request_frame_len;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by Ctrl-C / SIGTERM: every phase stops.
pub static QUIT: AtomicBool = AtomicBool::new(false);

/// Packets per rx/tx burst.
const BURST: usize = 32;

/// The load phase's outcome.
#[derive(Clone, Copy, Debug)]
pub struct LoadSummary {
    /// Keys written (the sweep stops at the first OUT_OF_MEMORY).
    pub keys_loaded: u64,
    /// Wall time of the phase.
    pub seconds: f64,
    /// Its counters.
    pub counts: Counts,
}

/// The measurement's outcome.
#[derive(Debug)]
pub struct Measurement {
    /// Counters of the recorded window.
    pub counts: Counts,
    /// Latencies (ns) of the recorded ops.
    pub hist: Histogram<u64>,
    /// Ops per partition of N.
    pub part_ops: Vec<u64>,
    /// Ops per partition of K (`--count-partitions`).
    pub part_ops_k: Vec<u64>,
}

/// The generator on its queues.
pub struct Driver {
    gen: Gen,
    pool: Mempool,
    /// Rx queue p is partition p's (all are polled).
    rxqs: Vec<RxQueue>,
    txqs: Vec<TxQueue>,
    /// Tx queue of each partition (p, or (p+1) % N with --misdirect).
    tx_of: Vec<usize>,
    idle_yield_polls: u32,
    timeout_ms: u64,
}

impl Driver {
    /// `gen` sending on `txqs` (one per partition) and polling `rxqs`, mbufs from
    /// `pool`.
    pub fn new(
        gen: Gen,
        pool: Mempool,
        rxqs: Vec<RxQueue>,
        txqs: Vec<TxQueue>,
        spec: &RunSpec,
    ) -> Driver {
        let n = spec.qps.partitions as usize;
        Driver {
            gen,
            pool,
            rxqs,
            txqs,
            tx_of: (0..n)
                .map(|p| if spec.qps.misdirect { (p + 1) % n } else { p })
                .collect(),
            idle_yield_polls: spec.phases.idle_yield_polls,
            timeout_ms: spec.phases.timeout_ms,
        }
    }

    /// Loop-back calibration: `n` empty batches one at a time. Returns the minimum
    /// round trip in ns (the transport floor subtracted from reported latency).
    pub fn calibrate(&mut self, n: u32) -> Result<f64, String> {
        let (c, h) = self.run(Phase::Ping, 1, None, 0.0, 10.0, Some(u64::from(n)));
        if c.done_pkts == 0 {
            return Err("calibration: no response to empty batches (is the dataplane running, same config?)".into());
        }
        eprintln!(
            "pktgen: calibration: {} round trips, min {:.2} us, p50 {:.2} us (min subtracted below)",
            h.len(),
            h.min() as f64 / 1e3,
            h.value_at_quantile(0.5) as f64 / 1e3
        );
        Ok(h.min() as f64)
    }

    /// The load phase: PUT every key in order (progress on stderr).
    pub fn load(&mut self, spec: &RunSpec) -> LoadSummary {
        let t = Instant::now();
        let c = self.sweep(Phase::Load, spec);
        let secs = t.elapsed().as_secs_f64();
        let keys_loaded = self.gen.workload.sweep_next;
        eprintln!(
            "pktgen: load: {} keys in {:.1} s ({:.2} Mops){}",
            keys_loaded,
            secs,
            c.done_ops as f64 / secs / 1e6,
            if c.oom > 0 {
                ", stopped at the first OUT_OF_MEMORY"
            } else {
                ""
            }
        );
        if c.mismatches > 0 || c.timeouts_ops > 0 {
            eprintln!(
                "pktgen: load phase had {} mismatches, {} timeouts",
                c.mismatches, c.timeouts_ops
            );
        }
        LoadSummary {
            keys_loaded,
            seconds: secs,
            counts: c,
        }
    }

    /// Warm-up, then the measurement (recorded).
    pub fn measure(&mut self, spec: &RunSpec) -> Measurement {
        let ph = &spec.phases;
        let (counts, hist) = self.run(
            Phase::Run,
            ph.run_window(),
            ph.rate,
            ph.warmup,
            ph.duration,
            None,
        );
        // A later read-back resets the tallies: keep the measurement's.
        let t = &self.gen.tally;
        let part_ops = t.part_ops.clone();
        let part_ops_k = if spec.qps.count_partitions == spec.qps.partitions {
            part_ops.clone()
        } else {
            t.part_ops_k.clone()
        };
        Measurement {
            counts,
            hist,
            part_ops,
            part_ops_k,
        }
    }

    /// Verify's read-back: GET every key (after atomics this checks the final counts:
    /// Q QPs x M fetch-adds on a key must leave exactly Q x M on it).
    pub fn readback(&mut self, spec: &RunSpec) -> Counts {
        self.gen.workload.sweep_next = 0;
        self.gen.workload.sweep_stop = false;
        let rc = self.sweep(Phase::Readback, spec);
        eprintln!(
            "pktgen: read-back: {} keys, {} mismatches, {} errors, {} timeouts",
            rc.done_ops, rc.mismatches, rc.errors, rc.timeouts_ops
        );
        rc
    }

    /// A sweep over the keys (load or read-back), packets as full as the largest KVs
    /// allow.
    fn sweep(&mut self, phase: Phase, spec: &RunSpec) -> Counts {
        let opp = self.gen.workload.ops_per_packet;
        self.gen.workload.ops_per_packet =
            spec.workload.sweep_ops_per_packet(self.gen.payload_cap());
        let (c, _) = self.run(phase, spec.phases.sweep_window(), None, 0.0, 3600.0, None);
        self.gen.workload.ops_per_packet = opp;
        c
    }

    /// Runs one phase and returns its counts and latency histogram (ns).
    ///
    /// `warmup` seconds are run but not recorded; then `duration` seconds (or until
    /// `max_pkts` packets completed, or the sweep finished) are recorded. Outstanding
    /// packets are drained (or timed out) at the end.
    fn run(
        &mut self,
        phase: Phase,
        window: usize,
        rate_mops: Option<f64>,
        warmup: f64,
        duration: f64,
        max_pkts: Option<u64>,
    ) -> (Counts, Histogram<u64>) {
        self.gen.begin_phase();
        let hz_ticks = self.gen.hz();
        let hz = hz_ticks as f64;
        let start = tsc::now();
        let rec_start = start + (warmup * hz) as u64;
        let end = rec_start + (duration * hz) as u64;
        let timeout = hz_ticks / 1000 * self.timeout_ms;
        let interval = rate_mops
            .map(|r| ((self.gen.workload.ops_per_packet as f64 / (r * 1e6)) * hz).max(1.0) as u64);
        let mut next_send = start;
        let mut last_scan = start;
        let mut last_progress = Instant::now();
        // One tx burst per queue: a queue's packets leave in build order, which keeps
        // per-partition (so per-key) order for the verify model.
        let mut txb: Vec<MbufBurst<BURST>> =
            (0..self.txqs.len()).map(|_| MbufBurst::new()).collect();
        let mut rx = MbufBurst::<BURST>::new();
        let mut in_flight = 0usize;
        let mut sending = true;
        let mut idle = IdleBackoff::new(self.idle_yield_polls);
        loop {
            let now = tsc::now();
            if QUIT.load(Ordering::Relaxed) {
                break;
            }
            let c = &self.gen.tally.counts;
            let done_by_count = max_pkts.is_some_and(|m| c.done_pkts + c.timeouts_pkts >= m);
            let done_by_sweep =
                phase.sweeps() && (self.gen.sweep_done() || self.gen.workload.sweep_stop);
            if now >= end || done_by_count || done_by_sweep {
                sending = false;
            }
            if !sending && in_flight == 0 {
                break;
            }
            let mut moved = false;
            // Send.
            if sending {
                // Every burst must have room: the next packet's queue is not known yet.
                while txb.iter().all(|b| b.remaining() > 0)
                    && in_flight < window
                    && self.gen.flight.has_free()
                {
                    let intended = match interval {
                        Some(_) if now < next_send => break,
                        Some(_) => next_send,
                        None => now,
                    };
                    if phase.sweeps() && self.gen.sweep_done() {
                        break;
                    }
                    let record = intended >= rec_start && intended < end;
                    match self.build(phase, intended, record) {
                        Some((m, p)) => {
                            if let Some(iv) = interval {
                                next_send += iv;
                            }
                            // Cannot fail: remaining() > 0 was checked.
                            let _ = txb[self.tx_of[p]].push(m);
                            in_flight += 1;
                        }
                        None => break,
                    }
                    if max_pkts.is_some() {
                        break; // calibration: one at a time
                    }
                }
                for (b, q) in txb.iter_mut().zip(self.txqs.iter_mut()) {
                    if !b.is_empty() {
                        let sent = q.tx_burst(b);
                        self.gen.tally.counts.sent_pkts += sent as u64;
                        moved |= sent > 0;
                    }
                }
            }
            // Receive (responses come back on the queue the request was served from).
            for q in 0..self.rxqs.len() {
                let n = self.rxqs[q].rx_burst(&mut rx);
                if n > 0 {
                    moved = true;
                    let now = tsc::now();
                    for m in rx.drain() {
                        in_flight -= self.gen.complete(m.data(), now, phase, rec_start, end);
                    }
                }
            }
            idle.poll(!moved);
            // Timeouts, every ~1 ms.
            if now.wrapping_sub(last_scan) > hz_ticks / 1000 {
                last_scan = now;
                in_flight -= self.gen.expire(now, timeout);
                if phase == Phase::Load && last_progress.elapsed() > Duration::from_secs(1) {
                    last_progress = Instant::now();
                    let (next, keys) = (self.gen.workload.sweep_next, self.gen.workload.keys());
                    eprintln!(
                        "pktgen: load {:5.1}% ({}/{} keys)",
                        next as f64 * 100.0 / keys as f64,
                        next,
                        keys
                    );
                }
            }
        }
        // Anything the NIC did not take is freed with `txb`; count those slots lost.
        for b in txb.iter_mut() {
            for m in b.drain() {
                drop(m);
            }
        }
        self.gen.end_phase(phase)
    }

    /// Builds one request packet and returns it with its partition; `None` when no
    /// mbuf or slot is available (or a sweep has nothing left to send).
    fn build(&mut self, phase: Phase, intended: u64, record: bool) -> Option<(Mbuf, usize)> {
        let mut m = Mbuf::alloc(&self.pool)?;
        let frame_cap = request_frame_len(self.gen.payload_cap()).min(m.tailroom());
        if !m.set_len(frame_cap) {
            return None;
        }
        let (len, part) = self.gen.build(m.data_mut(), phase, intended, record)?;
        m.set_len(len);
        Some((m, part))
    }
}
