//! The run's phases over DPDK: the event loop that moves the generator's requests
//! through the client library's transport (or, in echo mode, raw frames) and the
//! port (send, receive, time out), and the phases built on it: connection set-up,
//! loop-back calibration, load, warm-up + measurement, read-back, and the
//! exactly-once check.

use crate::cost::GenCost;
use crate::gen::{tsc_to_ns, Counts, Gen, Phase};
use crate::io::PortIo;
use crate::spec::RunSpec;
use dpdk::{tsc, IdleBackoff, Mbuf};
use hdrhistogram::Histogram;
use kvclient::check::{ExactlyOnce, Report};
use kvclient::{Event, PacketIo, Transport};
use kvwire::request_frame_len;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Set by Ctrl-C / SIGTERM: every phase stops.
pub static QUIT: AtomicBool = AtomicBool::new(false);

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
    /// What the generator's own work cost in the window.
    pub cost: GenCost,
}

/// The generator on its port, through the transport.
pub struct Driver {
    gen: Gen,
    io: PortIo,
    /// The client library's transport (`None` in echo mode: raw frames, no
    /// connection, matched by batch id).
    transport: Option<Transport>,
    /// Indices of each partition's QPs in the transport, and the next to try.
    qps_of: Vec<Vec<usize>>,
    qp_cursor: Vec<usize>,
    /// A request payload before the transport frames it.
    scratch: Vec<u8>,
    idle_yield_polls: u32,
    timeout_ms: u64,
    /// Transport time.
    clock: Clock,
    /// The transport's failed-request count when failed QPs were last reconnected.
    revived_at_failed: u64,
    /// Following the master over several nodes' ports (`--follow-ports`).
    follow: Option<Follow>,
    /// The generator's cost in the last phase's measurement window.
    cost: GenCost,
}

/// Where pktgen sends in a replicated cluster (`--follow-ports`, docs/PROTOCOL.md
/// §6.6): node `cur` of `nodes`, moving on when it stops answering (a QP lost) or
/// refuses writes (NOT_MASTER).
#[derive(Debug, Default)]
struct Follow {
    nodes: usize,
    /// Each node's client-facing address (empty: they share the config's).
    addrs: Vec<kvclient::NodeAddr>,
    cur: usize,
    /// Transport time of the last move.
    last_move_ns: u64,
    /// NOT_MASTER results counted when last looked at.
    not_master_seen: u64,
    moves: u64,
}

/// After a move, NOT_MASTER answers for this long are the old node's (requests that
/// were in flight there): they do not make pktgen move again.
const FOLLOW_SETTLE_NS: u64 = 20_000_000;

/// Transport time: wall-clock ns at start, advanced by the TSC (so connection nonces
/// grow across pktgen runs, docs/PROTOCOL.md §6.1).
#[derive(Clone, Copy)]
struct Clock {
    t0: u64,
    wall0_ns: u64,
    hz: u64,
}

impl Clock {
    fn new(hz: u64) -> Clock {
        Clock {
            t0: tsc::now(),
            wall0_ns: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64),
            hz,
        }
    }

    /// Transport time at TSC `tsc`.
    fn at(&self, tsc: u64) -> u64 {
        self.wall0_ns + tsc_to_ns(tsc.wrapping_sub(self.t0), self.hz)
    }

    /// Transport time now.
    fn now(&self) -> u64 {
        self.at(tsc::now())
    }
}

impl Driver {
    /// `gen` sending through `transport` (None: echo mode) over `io`.
    pub fn new(gen: Gen, io: PortIo, transport: Option<Transport>, spec: &RunSpec) -> Driver {
        let n = spec.qps.partitions as usize;
        let scratch = vec![0; gen.payload_cap()];
        let hz = gen.hz();
        Driver {
            gen,
            io,
            transport,
            qps_of: spec.qps.by_partition.clone(),
            qp_cursor: vec![0; n],
            scratch,
            idle_yield_polls: spec.phases.idle_yield_polls,
            timeout_ms: spec.phases.timeout_ms,
            clock: Clock::new(hz),
            revived_at_failed: 0,
            follow: None,
            cost: GenCost::default(),
        }
    }

    /// Follows the master over `nodes` nodes (their queues side by side in the I/O) at
    /// `addrs` (each node's client-facing address; empty when they share one): the
    /// transport keeps a lost QP's requests for a RESUME on the next node.
    pub fn follow(&mut self, nodes: usize, addrs: Vec<kvclient::NodeAddr>) {
        if let Some(t) = self.transport.as_mut() {
            t.set_resume(true);
        }
        self.follow = Some(Follow {
            nodes,
            addrs,
            ..Follow::default()
        });
    }

    /// Moves made while following (`None` when not following).
    pub fn follow_moves(&self) -> Option<u64> {
        self.follow.as_ref().map(|f| f.moves)
    }

    /// Moves to the next node when the one in use stopped answering (a QP lost) or
    /// refused writes; requests in flight are resumed there, other QPs connect anew.
    fn follow_step(&mut self, now_ns: u64) {
        let Driver {
            io,
            transport,
            follow,
            gen,
            ..
        } = self;
        let (Some(f), Some(t)) = (follow.as_mut(), transport.as_mut()) else {
            return;
        };
        let lost = (0..t.qp_count()).any(|q| t.state(q) == kvclient::QpState::Lost);
        let nm = gen.tally.counts.not_master;
        let refused =
            nm > f.not_master_seen && now_ns.saturating_sub(f.last_move_ns) > FOLLOW_SETTLE_NS;
        f.not_master_seen = nm;
        if !lost && !refused {
            return;
        }
        // Where a refusal's hint points (each node at its own address), else the next.
        let named = gen
            .tally
            .master_hint
            .and_then(|h| f.addrs.iter().position(|a| a.0 == h.mac))
            .filter(|&k| refused && k != f.cur);
        let from = f.cur;
        f.cur = named.unwrap_or((f.cur + 1) % f.nodes);
        f.moves += 1;
        f.last_move_ns = now_ns;
        io.set_node(f.cur);
        if let Some(&(mac, ip)) = f.addrs.get(f.cur) {
            for qp in 0..t.qp_count() {
                let mut p = t.frame_params(qp);
                (p.dst_mac, p.dst_ip) = (mac, ip);
                t.set_frame_params(qp, p);
            }
        }
        for qp in 0..t.qp_count() {
            let st = t.state(qp);
            if t.in_flight(qp) > 0
                || matches!(st, kvclient::QpState::Lost | kvclient::QpState::Resuming)
            {
                t.resume(qp, io, now_ns);
            } else {
                t.connect(qp, io, now_ns);
            }
        }
        eprintln!(
            "pktgen: follow: node {} {}, now node {} (move {})",
            from,
            match (lost, named.is_some()) {
                (true, _) => "stopped answering",
                (false, true) => "refuses writes, naming the master",
                (false, false) => "refuses writes",
            },
            f.cur,
            f.moves
        );
    }

    /// The transport's counters and the injected faults, for the report.
    /// The live fuzzer's counters (`None` without `--fuzz`).
    pub fn fuzz_report(&self) -> Option<crate::fuzz::FuzzStats> {
        self.io.fuzz_report()
    }

    pub fn transport_stats(
        &self,
    ) -> Option<(
        kvclient::Stats,
        kvload::faults::FaultCounts,
        kvload::faults::FaultCounts,
    )> {
        let (tx, rx) = self.io.fault_counts();
        self.transport.as_ref().map(|t| (*t.stats(), tx, rx))
    }

    /// Connects every QP (CONNECT until ACCEPT); fails after `timeout`.
    pub fn connect(&mut self, timeout: Duration) -> Result<(), String> {
        let Some(t) = self.transport.as_mut() else {
            return Ok(());
        };
        let start = Instant::now();
        let clock = self.clock;
        t.connect_all(&mut self.io, clock.now());
        while !t.all_connected() {
            if start.elapsed() > timeout || QUIT.load(Ordering::Relaxed) {
                let n = (0..t.qp_count()).filter(|&q| t.is_connected(q)).count();
                return Err(format!(
                    "connect: {n} of {} QPs connected in {timeout:?} (is the dataplane running, same config, QPs admitted?)",
                    t.qp_count()
                ));
            }
            self.io.flush();
            t.poll(&mut self.io, clock.now(), &mut |_| {});
        }
        // The window each QP was granted (a tenant's may be smaller than the server's).
        let windows: Vec<u16> = (0..t.qp_count()).map(|q| t.credits(q)).collect();
        let (lo, hi) = (windows.iter().min(), windows.iter().max());
        eprintln!(
            "pktgen: {} QPs connected in {:.1} ms, window {}",
            t.qp_count(),
            start.elapsed().as_secs_f64() * 1e3,
            match (lo, hi) {
                (Some(l), Some(h)) if l != h => format!("{l}..{h}"),
                (Some(l), _) => l.to_string(),
                _ => "-".to_string(),
            }
        );
        Ok(())
    }

    /// The exactly-once check (`kvclient::check`) over every QP, `per_qp` fetch-adds
    /// each; keys tagged with `tag`, in tenant `tenant`'s namespace (0: none).
    pub fn exactly_once(&mut self, per_qp: u64, tag: u64, tenant: u32) -> Option<Report> {
        let t = self.transport.as_mut()?;
        let mut check = ExactlyOnce::new(t.qp_count(), per_qp, tag);
        if tenant != 0 {
            check = check.in_namespace(tenant);
        }
        let start = Instant::now();
        loop {
            let done = check.step(t, &mut self.io, self.clock.now());
            self.io.flush();
            if done || QUIT.load(Ordering::Relaxed) || start.elapsed() > Duration::from_secs(120) {
                break;
            }
        }
        let mut r = check.report().clone();
        if !check.done() {
            r.violations += 1;
            r.problems.push("the check did not finish in 120 s".into());
        }
        eprintln!("pktgen: exactly-once: {}", r.summary());
        Some(r)
    }

    /// A QP of partition `part` that can send now (round robin over them).
    fn pick_qp(&mut self, part: usize, now_ns: u64) -> Option<usize> {
        let t = self.transport.as_ref()?;
        let qps = &self.qps_of[part];
        let c = &mut self.qp_cursor[part];
        for _ in 0..qps.len() {
            let qp = qps[*c];
            *c = (*c + 1) % qps.len();
            if t.can_send(qp, now_ns) {
                // The next request goes to the next QP: start loading its state.
                t.prefetch(qps[*c]);
                return Some(qp);
            }
        }
        None
    }

    /// Sends one request through the transport; whether one went out.
    fn send_transport(&mut self, phase: Phase, intended: u64, record: bool, now_ns: u64) -> bool {
        if self.qps_of.len() == 1 {
            return self.send_transport_direct(phase, intended, record, now_ns);
        }
        // The payload's partition is known only once it is built: every partition
        // must have a QP that can take it.
        if (0..self.qps_of.len()).any(|p| self.pick_qp_peek(p, now_ns).is_none()) {
            return false;
        }
        let Some((plen, part, slot)) =
            self.gen
                .build_payload(&mut self.scratch, phase, intended, record)
        else {
            return false;
        };
        let Some(qp) = self.pick_qp(part, now_ns) else {
            self.gen.release(slot);
            return false;
        };
        let (Some(t), scratch) = (self.transport.as_mut(), &self.scratch) else {
            return false;
        };
        let sent = t.send_with(
            &mut self.io,
            qp,
            now_ns,
            u64::from(slot),
            |buf, batch_id| {
                let dst = buf.get_mut(..plen)?;
                dst.copy_from_slice(&scratch[..plen]);
                // The batch id is the transport's (the PSN); the rest of the payload
                // is the generator's.
                dst.get_mut(4..8)?.copy_from_slice(&batch_id.to_be_bytes());
                Some(plen)
            },
        );
        if sent.is_err() {
            self.gen.release(slot);
            return false;
        }
        true
    }

    /// [`Driver::send_transport`] with one partition: the payload is built straight
    /// into the transport's frame buffer (no copy through the scratch buffer).
    fn send_transport_direct(
        &mut self,
        phase: Phase,
        intended: u64,
        record: bool,
        now_ns: u64,
    ) -> bool {
        let Some(qp) = self.pick_qp(0, now_ns) else {
            return false;
        };
        let Some(slot) = self.gen.next_slot() else {
            return false;
        };
        let Driver {
            gen, io, transport, ..
        } = self;
        let Some(t) = transport.as_mut() else {
            return false;
        };
        let mut built = false;
        let sent = t.send_with(io, qp, now_ns, u64::from(slot), |buf, batch_id| {
            let (plen, _, s) = gen.build_payload(buf, phase, intended, record)?;
            debug_assert_eq!(s, slot, "build_payload takes the slot next_slot named");
            built = true;
            buf.get_mut(4..8)?.copy_from_slice(&batch_id.to_be_bytes());
            Some(plen)
        });
        if sent.is_err() && built {
            self.gen.release(slot);
        }
        sent.is_ok()
    }

    /// Connects again every QP whose connection the transport gave up (a request
    /// unanswered after its retries): its requests were counted failed, and without a
    /// new connection the QP would never send again (a sweep would never end). Scans
    /// only when the transport's failure count moved.
    fn revive_failed(&mut self, now_ns: u64) {
        let Driver {
            io,
            transport,
            revived_at_failed,
            ..
        } = self;
        let Some(t) = transport.as_mut() else { return };
        let failed = t.stats().failed;
        if failed == *revived_at_failed {
            return;
        }
        *revived_at_failed = failed;
        for qp in 0..t.qp_count() {
            if t.state(qp) == kvclient::QpState::Failed {
                t.connect(qp, io, now_ns);
            }
        }
    }

    /// Whether partition `part` has a QP that can send (without moving the cursor
    /// past it).
    fn pick_qp_peek(&self, part: usize, now_ns: u64) -> Option<usize> {
        let t = self.transport.as_ref()?;
        let qps = &self.qps_of[part];
        let c = self.qp_cursor[part];
        (0..qps.len())
            .map(|k| qps[(c + k) % qps.len()])
            .find(|&qp| t.can_send(qp, now_ns))
    }

    /// Adds one loop iteration to the generator's cost: send work from `start` to
    /// `sent_at` if it sent `sent` packets, receive work from `sent_at` to now if
    /// anything moved.
    #[inline]
    fn count_cost(&mut self, start: u64, sent_at: u64, sent: u64, moved: bool) {
        let c = &mut self.cost;
        if sent > 0 {
            c.send_cycles += sent_at.wrapping_sub(start);
            c.packets += sent;
        }
        if sent > 0 || moved {
            c.recv_cycles += tsc::now().wrapping_sub(sent_at);
        }
    }

    /// Echo mode: builds one raw request frame and queues it; whether one went out.
    fn send_raw(&mut self, phase: Phase, intended: u64, record: bool) -> bool {
        let Some(mut m) = Mbuf::alloc(self.io.pool()) else {
            return false;
        };
        let frame_cap = request_frame_len(self.gen.payload_cap()).min(m.tailroom());
        if !m.set_len(frame_cap) {
            return false;
        }
        let Some((len, part)) = self.gen.build(m.data_mut(), phase, intended, record) else {
            return false;
        };
        m.set_len(len);
        let q = self.io.tx_queue(part);
        self.io.queue(q, m);
        true
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
            cost: self.cost,
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
    /// packets are drained at the end (the transport completes or gives up on each).
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
        let span = Span {
            rec_start,
            end: rec_start + (duration * hz) as u64,
        };
        let timeout = hz_ticks / 1000 * self.timeout_ms;
        let mut pace = Pace {
            interval: rate_mops.map(|r| {
                ((self.gen.workload.ops_per_packet as f64 / (r * 1e6)) * hz).max(1.0) as u64
            }),
            next_send: start,
            // Calibration: one packet at a time.
            one_at_a_time: max_pkts.is_some(),
        };
        let mut last_scan = start;
        let mut last_progress = Instant::now();
        let mut in_flight = 0usize;
        let mut sending = true;
        let mut idle = IdleBackoff::new(self.idle_yield_polls);
        self.cost = GenCost {
            window_cycles: span.end - span.rec_start,
            hz: hz_ticks,
            ..GenCost::default()
        };
        loop {
            let now = tsc::now();
            let now_ns = self.clock.at(now);
            if QUIT.load(Ordering::Relaxed) {
                break;
            }
            if now >= span.end || self.finished(phase, max_pkts) {
                sending = false;
            }
            if !sending && in_flight == 0 {
                break;
            }
            let mut sent_n = 0;
            if sending {
                let room = window.saturating_sub(in_flight);
                sent_n = self.send_some(phase, room, span, &mut pace, now, now_ns);
                in_flight += sent_n as usize;
            }
            let mut moved = self.io.flush();
            // The generator's cost is counted in the measurement window only: outside
            // it, no extra TSC read per iteration.
            let in_window = span.contains(now);
            let sent_at = if in_window { tsc::now() } else { 0 };
            let (done, got) = self.receive(phase, span, now_ns);
            moved |= got;
            in_flight -= done.min(in_flight);
            if in_window {
                self.count_cost(now, sent_at, sent_n, moved);
            }
            if self.follow.is_some() {
                self.follow_step(now_ns);
            }
            idle.poll(!moved);
            // Timeouts (echo mode; the transport times out its own), every ~1 ms.
            if now.wrapping_sub(last_scan) > hz_ticks / 1000 {
                last_scan = now;
                in_flight -= self.scan(now, now_ns, timeout).min(in_flight);
                if phase == Phase::Load && last_progress.elapsed() > Duration::from_secs(1) {
                    last_progress = Instant::now();
                    self.report_load_progress();
                }
            }
        }
        self.cost.templates = self.gen.templated();
        self.gen.end_phase(phase)
    }

    /// The phase has what it needs: `max_pkts` packets done, or the sweep finished.
    fn finished(&self, phase: Phase, max_pkts: Option<u64>) -> bool {
        let c = &self.gen.tally.counts;
        max_pkts.is_some_and(|m| c.done_pkts + c.timeouts_pkts >= m)
            || (phase.sweeps() && (self.gen.sweep_done() || self.gen.workload.sweep_stop))
    }

    /// Sends up to `room` packets while the free slots and the pacing allow; each
    /// partition's packets leave in build order on one queue, which keeps per-key
    /// order for the verify model. The packets sent.
    #[inline]
    fn send_some(
        &mut self,
        phase: Phase,
        room: usize,
        span: Span,
        pace: &mut Pace,
        now: u64,
        now_ns: u64,
    ) -> u64 {
        let mut sent_n = 0u64;
        while (sent_n as usize) < room && self.gen.flight.has_free() {
            let intended = match pace.interval {
                Some(_) if now < pace.next_send => break,
                Some(_) => pace.next_send,
                None => now,
            };
            if phase.sweeps() && self.gen.sweep_done() {
                break;
            }
            let record = span.contains(intended);
            let sent = if self.transport.is_some() {
                self.send_transport(phase, intended, record, now_ns)
            } else {
                self.send_raw(phase, intended, record)
            };
            if !sent {
                break;
            }
            self.gen.tally.counts.sent_pkts += 1;
            sent_n += 1;
            if let Some(iv) = pace.interval {
                pace.next_send += iv;
            }
            if pace.one_at_a_time {
                break;
            }
        }
        sent_n
    }

    /// Takes what came back (responses come back on the queue the request was served
    /// from): through the transport's events, or raw frames in echo mode. The
    /// packets completed and whether anything moved.
    #[inline]
    fn receive(&mut self, phase: Phase, span: Span, now_ns: u64) -> (usize, bool) {
        let Driver {
            gen, io, transport, ..
        } = self;
        let (rec_start, end) = (span.rec_start, span.end);
        let mut done = 0;
        match transport.as_mut() {
            Some(t) => {
                let before = t.stats().completed + t.stats().failed;
                t.poll(io, now_ns, &mut |ev| match ev {
                    Event::Results { tag, payload, .. } => gen.on_results(tag, payload, phase),
                    Event::Complete { tag, .. } => {
                        done += gen.on_complete(tag, tsc::now(), phase, rec_start, end)
                    }
                    Event::Failed { tag, .. } => done += gen.on_failed(tag),
                    // pktgen talks to one node and never turns resuming on.
                    Event::Connected { .. } | Event::Lost { .. } => {}
                });
                (done, t.stats().completed + t.stats().failed != before)
            }
            None => {
                let now = tsc::now();
                let n = io.recv(&mut |frame| {
                    done += gen.complete(frame, now, phase, rec_start, end);
                });
                (done, n > 0)
            }
        }
    }

    /// The ~1 ms scan: failed QPs revived; in echo mode, packets unanswered for
    /// `timeout` ticks expired (their count returned).
    fn scan(&mut self, now: u64, now_ns: u64, timeout: u64) -> usize {
        self.revive_failed(now_ns);
        if self.transport.is_none() {
            return self.gen.expire(now, timeout);
        }
        0
    }

    /// The load phase's progress line (every second).
    fn report_load_progress(&self) {
        let (next, keys) = (self.gen.workload.sweep_next, self.gen.workload.keys());
        eprintln!(
            "pktgen: load {:5.1}% ({}/{} keys)",
            next as f64 * 100.0 / keys as f64,
            next,
            keys
        );
    }
}

/// A phase's measurement window, in TSC ticks: what happens in it is recorded.
#[derive(Clone, Copy)]
struct Span {
    rec_start: u64,
    end: u64,
}

impl Span {
    #[inline]
    fn contains(&self, t: u64) -> bool {
        t >= self.rec_start && t < self.end
    }
}

/// Open-loop pacing of a phase's sends (`interval` ticks apart from `next_send`;
/// `None`: as fast as the window allows).
struct Pace {
    interval: Option<u64>,
    next_send: u64,
    /// Calibration: one packet per loop iteration.
    one_at_a_time: bool,
}
