//! The generator core: builds request batches from the workload, matches responses
//! to the packets in flight, checks results against the verify model and expires
//! timeouts. No DPDK here: it reads and writes frames as byte slices (`phases.rs`
//! moves them through mbufs and queues), so tests feed it synthetic responses.
//!
//! Nothing here allocates per packet: slots, expectations and steering queues are
//! preallocated for the run.

use crate::model::{Expect, Model};
use crate::qp::QpSet;
use crate::report;
use crate::spec::RunSpec;
use crate::steer::{Drawn, Steer};
use hdrhistogram::Histogram;
use kvload::{KeyChooser, KeyPrefix, Mix, OpType, SizeDist, Xorshift64Star};
use kvwire::partition::partition_of_hash;
use kvwire::{
    parse_request_unverified, parse_response, BatchReader, BatchWriter, ResponseReader, Status,
    REQUEST_HEADER_LEN,
};
use plain::push_op;
use template::Templates;

mod plain;
mod template;

/// Function, width and signedness of the atomic/vector/reduce ops: unsigned u64 add.
const U64_ADD: kvwire::Atomic = kvwire::Atomic {
    func: kvwire::func::FETCH_ADD,
    width: kvwire::Width::W8,
    signed: false,
};

/// What the generator sends in a phase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Empty batches (calibration).
    Ping,
    /// PUTs of keys `next..keys` in order (load).
    Load,
    /// The workload mix.
    Run,
    /// GETs of keys `next..keys` in order (verify's final read-back).
    Readback,
}

impl Phase {
    /// Phases that sweep the keys in order.
    pub fn sweeps(self) -> bool {
        matches!(self, Phase::Load | Phase::Readback)
    }
}

/// Counters of a run phase.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Packets handed to the NIC.
    pub sent_pkts: u64,
    /// Packets completed (every result received).
    pub done_pkts: u64,
    /// Ops of completed packets counted in the phase.
    pub done_ops: u64,
    /// Packets timed out.
    pub timeouts_pkts: u64,
    /// Ops of timed-out packets.
    pub timeouts_ops: u64,
    /// Results that differ from the verify model's expectation.
    pub mismatches: u64,
    /// Error results and malformed responses.
    pub errors: u64,
    /// Responses to no packet in flight (late, duplicate or unknown batch id).
    pub stale: u64,
    /// Frames that are no response.
    pub rx_drops: u64,
    /// Results with a status other than OK / NOT_FOUND (or an expected BAD_LENGTH).
    pub status_not_ok: u64,
    /// Results with status WRONG_PARTITION (the op's key is not its QP's partition).
    pub wrong_partition: u64,
    /// Writes answered NOT_MASTER (a replica, or a master that lost its lease).
    pub not_master: u64,
    /// Writes answered NOT_ENOUGH_REPLICAS (fewer than min_replicas in sync).
    pub not_enough_replicas: u64,
    /// Ops answered DENIED (outside the tenant's ACL or namespace).
    pub denied: u64,
    /// PUTs answered OUT_OF_MEMORY.
    pub oom: u64,
    /// Ops answered OUTCOME_UNKNOWN: resent across a failover, begun by the old
    /// master, their outcome unknown to the new one (docs/PROTOCOL.md §6.6).
    pub outcome_unknown: u64,
    /// Results with status OK / NOT_FOUND (or an expected BAD_LENGTH), whenever they
    /// arrived, in every phase (`done_ops` counts only the measurement window's).
    pub results_ok: u64,
}

/// One operation's expectation, kept until its response arrives.
#[derive(Clone, Copy, Debug)]
struct ExpOp {
    key: u64,
    op: OpType,
    expect: Expect,
}

/// A packet in flight.
#[derive(Clone, Copy, Debug, Default)]
struct Slot {
    busy: bool,
    gen: u16,
    /// Send time (intended send time in open loop), TSC.
    sent: u64,
    nops: u16,
    /// Results received so far.
    got: u16,
    /// Count this packet in the measurement.
    record: bool,
}

/// Packets in flight: one slot per packet (its batch id is the slot index and the
/// slot's generation), the expectations of its ops, and the free slots.
#[derive(Debug)]
pub struct InFlight {
    slots: Vec<Slot>,
    /// `stride` expectations per slot.
    exp: Vec<ExpOp>,
    stride: usize,
    free: Vec<u16>,
}

impl InFlight {
    /// `slots` packet slots of up to `stride` ops each.
    fn new(slots: usize, stride: usize) -> InFlight {
        InFlight {
            slots: vec![Slot::default(); slots],
            exp: vec![
                ExpOp {
                    key: 0,
                    op: OpType::Get,
                    expect: Expect::Any
                };
                slots * stride
            ],
            stride,
            free: (0..slots as u16).rev().collect(),
        }
    }

    /// Whether a packet can be sent (a slot is free).
    #[inline]
    pub fn has_free(&self) -> bool {
        !self.free.is_empty()
    }

    /// Packets in flight.
    #[cfg(test)]
    pub fn busy(&self) -> usize {
        self.slots.len() - self.free.len()
    }
}

/// What is sent: the op and key draws, value sizes, the verify model, the sweep of
/// the load and read-back phases, and the steering of ops to partitions.
pub struct Workload {
    keys: u64,
    /// Key bytes on the wire: the prefix's and the key's own.
    key_size: usize,
    /// What every key begins with (a tenant's namespace, or nothing).
    key_prefix: KeyPrefix,
    sizes: SizeDist,
    /// Ops per packet of the current phase.
    pub ops_per_packet: usize,
    rng: Xorshift64Star,
    chooser: KeyChooser,
    mix: Mix,
    /// Verify mode's model of the store (kept current only with verify).
    model: Model,
    /// The next key of a sweep (load, read-back).
    pub sweep_next: u64,
    /// A load phase hit OUT_OF_MEMORY: the sweep stops.
    pub sweep_stop: bool,
    /// Parked ops per partition; `None` with one partition (no steering at all).
    steer: Option<Steer>,
    /// Pre-built packets of the run phase (template.rs), built at its first packet;
    /// `None` where they do not apply or are turned off.
    templates: Option<Templates>,
    /// Whether the run phase may use templates (`--no-templates` turns them off).
    use_templates: bool,
    /// A packet's key draws (template path).
    key_draws: Vec<u64>,
    /// A PUT's value bytes (plain path): kept across packets, never cleared.
    val: Vec<u8>,
}

impl Workload {
    /// The number of distinct keys.
    pub fn keys(&self) -> u64 {
        self.keys
    }
}

/// The measurement of the current phase: counters, latency histogram, ops per
/// partition.
#[derive(Debug)]
pub struct Tally {
    /// Counters.
    pub counts: Counts,
    /// Latencies in ns (one sample per op of a recorded packet; per packet when
    /// pinging).
    hist: Histogram<u64>,
    /// Ops recorded per partition of N.
    pub part_ops: Vec<u64>,
    /// Ops recorded per partition of K (`--count-partitions`), when K != N.
    pub part_ops_k: Vec<u64>,
    count_k: u32,
    /// Problem reports left to print on stderr.
    verbose_left: u32,
    /// TSC ticks per second.
    hz: u64,
    /// The newest master a `NOT_MASTER` answer named (highest epoch seen).
    pub master_hint: Option<kvwire::MasterHint>,
}

/// The generator: workload, packets in flight, measurement and the per-QP transport
/// state.
pub struct Gen {
    /// What is sent.
    pub workload: Workload,
    /// Packets in flight.
    pub flight: InFlight,
    /// The measurement.
    pub tally: Tally,
    /// Per-QP transport state: QP choice, PSNs, framing.
    pub qps: QpSet,
    verify: bool,
    echo: bool,
    /// Request payload bytes per packet.
    payload_cap: usize,
}

impl Gen {
    /// A generator for `spec` sending over `qps`, timestamps in TSC ticks of `hz`
    /// per second, payloads of at most `payload_cap` bytes.
    pub fn new(spec: &RunSpec, qps: QpSet, hz: u64, payload_cap: usize) -> Gen {
        let w = &spec.workload;
        let nparts = spec.qps.partitions;
        let stride = spec.ops_per_slot();
        Gen {
            workload: Workload {
                keys: w.keys,
                key_size: w.wire_key_size(),
                key_prefix: w.key_prefix,
                sizes: w.sizes,
                ops_per_packet: w.ops_per_packet,
                rng: Xorshift64Star::new(w.seed),
                chooser: KeyChooser::new(w.keys, w.distribution()),
                mix: w.mix,
                model: Model::new(w.keys),
                sweep_next: 0,
                sweep_stop: false,
                // Room for a few packets' worth per partition: a queue that fills
                // closes the packet being built, so it must not fill often.
                steer: (nparts > 1).then(|| Steer::new(nparts, 4 * stride)),
                templates: None,
                use_templates: spec.phases.templates,
                key_draws: vec![0; stride],
                // Any value one request of the largest MTU holds (`--value-size` is
                // checked against the server's MTU at start-up).
                val: vec![0; kvwire::request_payload_capacity(kvwire::MAX_MTU)],
            },
            flight: InFlight::new(spec.phases.slots, stride),
            tally: Tally {
                counts: Counts::default(),
                hist: report::new_histogram(),
                part_ops: vec![0; nparts as usize],
                part_ops_k: vec![0; spec.qps.count_partitions as usize],
                count_k: spec.qps.count_partitions,
                verbose_left: 10,
                hz,
                master_hint: None,
            },
            qps,
            verify: spec.phases.verify,
            echo: spec.phases.echo,
            payload_cap,
        }
    }

    /// TSC ticks per second.
    pub fn hz(&self) -> u64 {
        self.tally.hz
    }

    /// Whether the run phase's requests come from pre-built templates.
    pub fn templated(&self) -> bool {
        self.workload.templates.is_some()
    }

    /// Request payload bytes per packet.
    pub fn payload_cap(&self) -> usize {
        self.payload_cap
    }

    /// Resets the tallies (and the steering queues) for a new phase.
    pub fn begin_phase(&mut self) {
        self.tally.counts = Counts::default();
        self.tally.hist.reset();
        self.tally.part_ops.fill(0);
        self.tally.part_ops_k.fill(0);
        if let Some(s) = self.workload.steer.as_mut() {
            s.clear();
        }
    }

    /// Ends a phase: returns its counts and latency histogram (ns).
    pub fn end_phase(&mut self, phase: Phase) -> (Counts, Histogram<u64>) {
        if phase.sweeps() {
            if let Some(s) = self.workload.steer.as_mut() {
                // Keys parked when the sweep stopped early were drawn but never sent:
                // do not count them as loaded.
                self.workload.sweep_next -= s.total() as u64;
                s.clear();
            }
        }
        let mut h = report::new_histogram();
        std::mem::swap(&mut h, &mut self.tally.hist);
        (self.tally.counts, h)
    }

    /// Whether a sweep (load, read-back) has sent every key: none left to draw and
    /// none parked.
    pub fn sweep_done(&self) -> bool {
        self.workload.sweep_next >= self.workload.keys
            && self.workload.steer.as_ref().map_or(0, Steer::total) == 0
    }

    /// Builds one request frame (headers, payload, ICRC) into `buf` and returns its
    /// length and partition; `None` when no slot is free, a sweep has nothing left to
    /// send, or the frame does not fit `buf`. `intended` is the send time (TSC);
    /// `record`: the packet counts in the measurement.
    pub fn build(
        &mut self,
        buf: &mut [u8],
        phase: Phase,
        intended: u64,
        record: bool,
    ) -> Option<(usize, usize)> {
        let area = buf.get_mut(REQUEST_HEADER_LEN..)?;
        let (plen, part, slot) = self.build_payload(area, phase, intended, record)?;
        let Some(len) = self.qps.frame(buf, part, plen) else {
            self.release(slot);
            return None;
        };
        Some((len, part))
    }

    /// The packet slot the next [`Gen::build_payload`] takes, if one is free.
    pub fn next_slot(&self) -> Option<u16> {
        self.flight.free.last().copied()
    }

    /// Builds one request payload (the KV batch, at most [`Gen::payload_cap`] bytes)
    /// into `payload` for a packet slot it takes, and returns the payload length, its
    /// partition and the slot (the transport's tag: [`Gen::on_results`],
    /// [`Gen::on_complete`], [`Gen::on_failed`]). The batch id written is the slot's
    /// own (echo mode matches on it; the transport replaces it with the PSN). `None`
    /// when no slot is free or a sweep has nothing left to send.
    pub fn build_payload(
        &mut self,
        payload: &mut [u8],
        phase: Phase,
        intended: u64,
        record: bool,
    ) -> Option<(usize, usize, u16)> {
        let slot_idx = self.flight.free.pop()?;
        let s = &mut self.flight.slots[slot_idx as usize];
        s.gen = s.gen.wrapping_add(1);
        let batch_id = (u32::from(s.gen) << 16) | u32::from(slot_idx);
        let payload_end = self.payload_cap.min(payload.len());
        let exp_base = slot_idx as usize * self.flight.stride;
        let verify = self.verify;
        let sizes = self.workload.sizes;
        let key_size = self.workload.key_size;
        // Tally ops by partition of K only when it differs from N (otherwise the
        // per-packet tally is the same thing): it costs a key hash per op.
        let tally_k = record && self.tally.count_k != self.tally.part_ops.len() as u32;
        let count_k = self.tally.count_k;
        let mut nops = 0usize;
        let mut part = 0usize;
        if phase == Phase::Run && self.templates_ready(payload_end) {
            let tally = tally_k.then_some((&mut self.tally.part_ops_k[..], count_k));
            let exp = &mut self.flight.exp[exp_base..];
            let area = &mut payload[..payload_end];
            if let Some((plen, n)) = self
                .workload
                .fill_template(verify, area, batch_id, exp, tally)
            {
                return Some(self.took_slot(slot_idx, plen, (0, n), intended, record));
            }
        }
        let plen = {
            let Some(Ok(mut w)) = payload
                .get_mut(..payload_end)
                .map(|p| BatchWriter::new(p, batch_id))
            else {
                self.flight.free.push(slot_idx);
                return None;
            };
            let mut key = [0u8; kvwire::MAX_KEY_LEN];
            let key = &mut key[..key_size];
            let wl = &mut self.workload;
            let mut model = verify.then_some(&mut wl.model);
            let target = if phase == Phase::Ping {
                0
            } else {
                wl.ops_per_packet
            };
            if phase == Phase::Ping {
                // Empty batches rotate over the partitions: every queue pair is used.
                part = self.qps.next_ping_partition();
            } else if let Some(steer) = wl.steer.as_mut() {
                let (keys, prefix) = (wl.keys, wl.key_prefix);
                let sweep_next = &mut wl.sweep_next;
                let rng = &mut wl.rng;
                let (mix, chooser) = (&wl.mix, &wl.chooser);
                let mut hkey = [0u8; kvwire::MAX_KEY_LEN];
                let hkey = &mut hkey[..key_size];
                let draw = || {
                    let (op, k) = match phase {
                        Phase::Load | Phase::Readback => {
                            if *sweep_next >= keys {
                                return None;
                            }
                            *sweep_next += 1;
                            let op = if phase == Phase::Load {
                                OpType::Put
                            } else {
                                OpType::Get
                            };
                            (op, *sweep_next - 1)
                        }
                        _ => (mix.next(rng), chooser.next(rng)),
                    };
                    prefix.write_key(k, hkey);
                    Some(Drawn {
                        key: k,
                        hash32: kvwire::hash::key_hash(hkey) as u32,
                        op,
                    })
                };
                let exp = &mut self.flight.exp;
                let val = &mut wl.val[..];
                let part_ops_k = &mut self.tally.part_ops_k;
                let nops = &mut nops;
                let emit = |d: &Drawn| {
                    prefix.write_key(d.key, key);
                    let Some(expect) =
                        push_op(&mut w, d.op, d.key, key, val, sizes, model.as_deref_mut())
                    else {
                        return false;
                    };
                    exp[exp_base + *nops] = ExpOp {
                        key: d.key,
                        op: d.op,
                        expect,
                    };
                    *nops += 1;
                    if tally_k {
                        part_ops_k[partition_of_hash(u64::from(d.hash32), count_k) as usize] += 1;
                    }
                    true
                };
                if let Some((p, _)) = steer.fill(target, draw, emit) {
                    part = p;
                }
            } else {
                let tally = tally_k.then_some((&mut self.tally.part_ops_k[..], count_k));
                let exp = &mut self.flight.exp[exp_base..];
                nops = wl.fill_plain(verify, phase, target, &mut w, key, exp, tally);
            }
            w.finish()
        };
        if nops == 0 && phase != Phase::Ping {
            self.flight.free.push(slot_idx);
            return None;
        }
        Some(self.took_slot(slot_idx, plen, (part, nops), intended, record))
    }

    /// Whether the run phase's packets come from templates, building them for
    /// `cap` payload bytes if they are not built yet: one partition (no steering),
    /// a fixed value size, templates not turned off.
    fn templates_ready(&mut self, cap: usize) -> bool {
        let wl = &mut self.workload;
        let per = wl.ops_per_packet;
        if wl.templates.as_ref().is_some_and(|t| t.fits(per, cap)) {
            return true;
        }
        if !wl.use_templates || wl.steer.is_some() || wl.sizes.min != wl.sizes.max {
            return false;
        }
        let sizes = (wl.key_size, wl.sizes.min);
        wl.templates = Templates::build(&wl.mix, &mut wl.rng, per, sizes, cap);
        wl.key_draws.resize(per.max(wl.key_draws.len()), 0);
        wl.templates.is_some()
    }

    /// Marks slot `slot_idx` busy with the packet just built (`nops` ops of partition
    /// `part`, `plen` payload bytes) and returns what [`Gen::build_payload`] returns.
    fn took_slot(
        &mut self,
        slot_idx: u16,
        plen: usize,
        (part, nops): (usize, usize),
        intended: u64,
        record: bool,
    ) -> (usize, usize, u16) {
        if record {
            self.tally.part_ops[part] += nops as u64;
        }
        let s = &mut self.flight.slots[slot_idx as usize];
        *s = Slot {
            busy: true,
            gen: s.gen,
            sent: intended,
            nops: nops as u16,
            got: 0,
            record,
        };
        (plen, part, slot_idx)
    }

    /// Gives back a slot whose packet was never sent; the verify model forgets its
    /// writes.
    pub fn release(&mut self, slot: u16) {
        self.free_slot(usize::from(slot));
    }

    /// Frees a busy slot whose outcome is unknown; the verify model forgets its
    /// writes. Returns the slot as it was.
    fn free_slot(&mut self, i: usize) -> Slot {
        let f = &mut self.flight;
        let s = f.slots[i];
        f.slots[i].busy = false;
        f.free.push(i as u16);
        let base = i * f.stride;
        for k in 0..s.nops as usize {
            let e = f.exp[base + k];
            if e.op.writes() {
                self.workload.model.on_lost_write(e.key);
            }
        }
        s
    }

    /// Handles one received frame at TSC `now` (echo mode: the echoed request, matched
    /// by its batch id); returns 1 if it completed a packet in flight. Packets sent
    /// from `rec_start` on and completed before `end` are recorded (all of them when
    /// pinging).
    pub fn complete(
        &mut self,
        frame: &[u8],
        now: u64,
        phase: Phase,
        rec_start: u64,
        end: u64,
    ) -> usize {
        let (batch_id, count, more, payload) = if self.echo {
            match parse_request_unverified(frame)
                .ok()
                .and_then(|r| BatchReader::new(r.payload).ok())
            {
                Some(b) => (b.batch_id(), b.op_count(), false, None),
                None => {
                    self.tally.counts.rx_drops += 1;
                    return 0;
                }
            }
        } else {
            let resp = match parse_response(frame) {
                Ok(r) => r,
                Err(_) => {
                    self.tally.counts.rx_drops += 1;
                    return 0;
                }
            };
            match ResponseReader::new(resp.payload) {
                Ok(r) => (r.batch_id(), r.result_count(), r.more(), Some(resp.payload)),
                Err(_) => {
                    self.tally.counts.rx_drops += 1;
                    return 0;
                }
            }
        };
        let slot_idx = (batch_id & 0xffff) as usize;
        let gen = (batch_id >> 16) as u16;
        match self.flight.slots.get(slot_idx) {
            Some(s) if s.busy && s.gen == gen => {}
            _ => {
                self.tally.counts.stale += 1;
                return 0;
            }
        }
        if let Some(payload) = payload {
            self.results(slot_idx, payload, phase);
        }
        let s = &mut self.flight.slots[slot_idx];
        s.got = s.got.saturating_add(count);
        if s.got < s.nops || more {
            return 0;
        }
        self.finish(slot_idx, now, phase, rec_start, end)
    }

    /// One response frame of the packet in slot `tag` (delivered by the transport in
    /// order, without duplicates): checks its results.
    pub fn on_results(&mut self, tag: u64, payload: &[u8], phase: Phase) {
        let i = tag as usize;
        if !self.flight.slots.get(i).is_some_and(|s| s.busy) {
            self.tally.counts.stale += 1;
            return;
        }
        self.results(i, payload, phase);
    }

    /// The packet in slot `tag` got its last response frame at TSC `now`; returns 1
    /// (a packet completed) or 0 (no such packet).
    pub fn on_complete(
        &mut self,
        tag: u64,
        now: u64,
        phase: Phase,
        rec_start: u64,
        end: u64,
    ) -> usize {
        let i = tag as usize;
        if !self.flight.slots.get(i).is_some_and(|s| s.busy) {
            return 0;
        }
        self.finish(i, now, phase, rec_start, end)
    }

    /// The transport gave up on the packet in slot `tag` (its outcome is unknown):
    /// counted as timed out. Returns 1, or 0 for no such packet.
    pub fn on_failed(&mut self, tag: u64) -> usize {
        let i = tag as usize;
        if !self.flight.slots.get(i).is_some_and(|s| s.busy) {
            return 0;
        }
        let s = self.free_slot(i);
        self.tally.counts.timeouts_pkts += 1;
        self.tally.counts.timeouts_ops += u64::from(s.nops);
        1
    }

    /// Checks the results of one response payload of slot `i`.
    fn results(&mut self, i: usize, payload: &[u8], phase: Phase) {
        let Ok(reader) = ResponseReader::new(payload) else {
            self.tally.counts.errors += 1;
            return;
        };
        let first = usize::from(reader.first_index());
        let nops = usize::from(self.flight.slots[i].nops);
        let base = i * self.flight.stride;
        let verify = self.verify;
        for (k, r) in reader.enumerate() {
            let idx = first + k;
            let Ok(r) = r else {
                self.tally.counts.errors += 1;
                break;
            };
            if idx >= nops {
                self.tally.counts.errors += 1;
                continue;
            }
            // Without verify, `check` has nothing to do for OK / NOT_FOUND: skip
            // the expectation lookup (the common case, per op).
            if matches!(r.status, Status::Ok | Status::NotFound) {
                self.tally.counts.results_ok += 1;
                if !verify {
                    continue;
                }
            }
            let e = self.flight.exp[base + idx];
            self.check(phase, &e, r.status, r.value);
        }
    }

    /// Completes the packet of slot `i` at `now`: frees the slot, counts and records
    /// its latency. Returns 1.
    fn finish(&mut self, i: usize, now: u64, phase: Phase, rec_start: u64, end: u64) -> usize {
        let s = self.flight.slots[i];
        self.flight.slots[i].busy = false;
        self.flight.free.push(i as u16);
        let t = &mut self.tally;
        t.counts.done_pkts += 1;
        if s.record || phase == Phase::Ping {
            let ops = u64::from(s.nops).max(1);
            let done_in_window = now < end || phase == Phase::Ping;
            if done_in_window && (s.sent >= rec_start || phase == Phase::Ping) {
                t.counts.done_ops += u64::from(s.nops);
                let ns = tsc_to_ns(now.saturating_sub(s.sent), t.hz);
                let _ = t
                    .hist
                    .record_n(ns.max(1), if phase == Phase::Ping { 1 } else { ops });
            }
        } else if phase.sweeps() {
            t.counts.done_ops += u64::from(s.nops);
        }
        1
    }

    /// Checks one result against its expectation.
    fn check(&mut self, phase: Phase, e: &ExpOp, status: Status, value: &[u8]) {
        let c = &mut self.tally.counts;
        if status == Status::OutOfMemory && e.op == OpType::Put {
            c.oom += 1;
            if phase == Phase::Load {
                self.workload.sweep_stop = true;
            }
            // The key was not written: the model must not expect the new version.
            self.workload.model.on_lost_write(e.key);
            return;
        }
        let expected_error = e.expect == Expect::BadLength && status == Status::BadLength;
        if !matches!(status, Status::Ok | Status::NotFound) && !expected_error {
            c.status_not_ok += 1;
            match status {
                Status::WrongPartition => c.wrong_partition += 1,
                Status::NotMaster => {
                    c.not_master += 1;
                    let newer = |h: &kvwire::MasterHint| {
                        self.tally.master_hint.is_none_or(|m| h.epoch > m.epoch)
                    };
                    if let Some(h) = kvwire::MasterHint::decode(value).filter(newer) {
                        self.tally.master_hint = Some(h);
                    }
                }
                Status::NotEnoughReplicas => c.not_enough_replicas += 1,
                Status::OutcomeUnknown => c.outcome_unknown += 1,
                Status::Denied => c.denied += 1,
                _ => {}
            }
            c.errors += 1;
            if self.tally.verbose_left > 0 {
                self.tally.verbose_left -= 1;
                eprintln!(
                    "pktgen: key {} {:?}: error status {:?}",
                    e.key, e.op, status
                );
            }
            return;
        }
        if expected_error {
            c.results_ok += 1;
        }
        if !self.verify {
            return;
        }
        let ok = match e.expect {
            Expect::Any => true,
            Expect::Absent | Expect::DeleteAbsent => status == Status::NotFound && value.is_empty(),
            Expect::Done => status == Status::Ok && value.is_empty(),
            Expect::BadLength => expected_error && value.is_empty(),
            Expect::Value { version, adds } => {
                status == Status::Ok && {
                    let len = self.workload.sizes.len_of(e.key, version);
                    if e.op == OpType::Reduce {
                        value == kvload::reduce_sum(e.key, version, len, adds).to_le_bytes()
                    } else {
                        kvload::value_matches_adds(e.key, version, len, adds, value)
                    }
                }
            }
        };
        if !ok {
            c.mismatches += 1;
            if self.tally.verbose_left > 0 {
                self.tally.verbose_left -= 1;
                eprintln!(
                    "pktgen: MISMATCH key {} {:?}: expected {:?}, got {:?} with {} value bytes",
                    e.key,
                    e.op,
                    e.expect,
                    status,
                    value.len()
                );
            }
        }
    }

    /// Times out packets in flight longer than `timeout` ticks at TSC `now` (echo
    /// mode; the transport times out its own requests); returns how many.
    pub fn expire(&mut self, now: u64, timeout: u64) -> usize {
        let mut n = 0;
        for i in 0..self.flight.slots.len() {
            let s = self.flight.slots[i];
            if s.busy && now.saturating_sub(s.sent) > timeout {
                n += self.on_failed(i as u64);
            }
        }
        n
    }
}

/// TSC ticks to nanoseconds.
#[inline]
pub fn tsc_to_ns(ticks: u64, hz: u64) -> u64 {
    (ticks as u128 * 1_000_000_000 / hz as u128) as u64
}

#[cfg(test)]
mod tests;
