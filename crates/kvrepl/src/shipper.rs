//! The master's sender toward one replica: cuts the stream into segments,
//! keeps up to a window of them in flight, and resends go-back-N on NAK,
//! RNR NAK and timeout — the requester half of the reliable transport
//! (docs/PROTOCOL.md §6) with offsets instead of request slots.
//!
//! Segments are never stored: an in-flight entry remembers its PSN and byte
//! range, and a resend reads the same range from the backlog again (the
//! bytes at an offset never change). If the backlog evicted them meanwhile the
//! replica needs a full sync ([`ShipError::NeedFullSync`]).
//!
//! Drive it from the replication lcore: [`Shipper::poll`] with a frame's
//! payload area as `out` until it returns `Ok(None)`, then emit each segment
//! with `kvwire::repl::emit_write_imm_headers` + `finalize`; feed RC
//! Acknowledge frames to [`Shipper::on_ack`] / [`Shipper::on_nak`] /
//! [`Shipper::on_rnr`]. Nothing allocates after [`Shipper::new`].

use crate::backlog::{Backlog, ReadError};
use crate::segment::{SegmentHeader, SegmentKind, SEGMENT_HEADER_LEN};
use kvwire::psn;
use kvwire::transport::{Due, Recovery};
use std::collections::VecDeque;

/// Configuration of a [`Shipper`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShipperConfig {
    /// Largest segment payload (header included): the smaller of the frame's
    /// payload capacity and the replica's slot size.
    pub segment_payload: usize,
    /// Segments in flight at most (≤ the replica's credits).
    pub window: u16,
    /// First retransmission timeout.
    pub rto_ns: u64,
    /// Largest timeout after exponential back-off.
    pub rto_max_ns: u64,
    /// Consecutive timeouts without progress before giving up.
    pub max_retries: u8,
}

impl Default for ShipperConfig {
    fn default() -> Self {
        ShipperConfig {
            segment_payload: kvwire::repl::write_imm_payload_capacity(kvwire::DEFAULT_MTU),
            window: 32,
            rto_ns: 2_000_000,
            rto_max_ns: 100_000_000,
            max_retries: 10,
        }
    }
}

/// Why the shipper cannot go on; the connection must be set up again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShipError {
    /// The live bytes the replica needs were evicted from the backlog.
    NeedFullSync,
    /// The scan stream's bytes were evicted (its pin was not kept).
    SyncLost,
    /// `max_retries` timeouts in a row without an acknowledgement.
    Unreachable,
    /// `out` is shorter than the segment header plus one byte, or shorter
    /// than a segment being resent.
    BufferTooSmall,
    /// The stream holds something that is not records (a bug).
    Corrupt,
}

/// One segment to put on the wire; its payload is in `out[..len]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outgoing {
    /// BTH PSN.
    pub psn: u32,
    /// BTH AckReq.
    pub ack_req: bool,
    /// The immediate.
    pub imm: u32,
    /// Payload length (header included).
    pub len: usize,
    /// What it carries.
    pub kind: SegmentKind,
    /// First offset carried.
    pub start: u64,
    /// Offset after the last byte carried.
    pub end: u64,
    /// True for a retransmission.
    pub resend: bool,
}

/// Counters of a [`Shipper`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShipperStats {
    /// Segments sent the first time.
    pub segments: u64,
    /// Stream bytes sent the first time.
    pub bytes: u64,
    /// Segments retransmitted.
    pub resent: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// NAKs (sequence error) acted upon.
    pub naks: u64,
    /// RNR NAKs acted upon.
    pub rnr_naks: u64,
    /// ACKs, NAKs for nothing in flight.
    pub stale_acks: u64,
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    psn: u32,
    kind: SegmentKind,
    start: u64,
    end: u64,
    records: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    Idle,
    /// Shipping the scan stream from `next`; then SNAPSHOT_END, then live.
    Sync {
        next: u64,
    },
    /// Shipping the live stream from `next`.
    Live {
        next: u64,
    },
}

/// The master's sender toward one replica.
#[derive(Debug)]
pub struct Shipper {
    cfg: ShipperConfig,
    repl_id: u64,
    epoch: u64,
    phase: Phase,
    /// Where the live stream continues after a full sync.
    live_from: u64,
    /// Set while a record longer than a segment is being carried: its end.
    split_end: Option<u64>,
    inflight: VecDeque<Seg>,
    /// Go-back-N: index in `inflight` of the next segment to resend (where
    /// [`Recovery`] said the resend starts, walked one segment per poll).
    resend: Option<usize>,
    next_psn: u32,
    /// When to send again and from which PSN (IBA RC's requester rules, shared with
    /// the client: the timer, RNR hold-offs, NAKs taken once).
    rec: Recovery,
    /// Timeouts in a row without an acknowledgement.
    retries: u8,
    acked_live: u64,
    acked_sync: u64,
    sync_done: bool,
    stats: ShipperStats,
}

impl Shipper {
    /// An idle shipper (nothing to send until a `start_*`).
    pub fn new(mut cfg: ShipperConfig) -> Self {
        cfg.window = cfg.window.max(1);
        Shipper {
            cfg,
            repl_id: 0,
            epoch: 0,
            phase: Phase::Idle,
            live_from: 0,
            split_end: None,
            inflight: VecDeque::with_capacity(usize::from(cfg.window)),
            resend: None,
            next_psn: 0,
            rec: Recovery::new(cfg.rto_ns),
            retries: 0,
            acked_live: 0,
            acked_sync: 0,
            sync_done: false,
            stats: ShipperStats::default(),
        }
    }

    fn reset(&mut self, repl_id: u64, epoch: u64, first_psn: u32) {
        self.repl_id = repl_id;
        self.epoch = epoch;
        self.split_end = None;
        self.inflight.clear();
        self.resend = None;
        self.next_psn = first_psn & kvwire::ib::MASK_24;
        self.rec.restart(self.cfg.rto_ns);
        self.retries = 0;
        self.sync_done = false;
    }

    /// Partial resync: the live stream from `from` (a boundary held by the
    /// backlog), first segment at PSN `first_psn`.
    pub fn start_partial(&mut self, repl_id: u64, epoch: u64, first_psn: u32, from: u64) {
        self.reset(repl_id, epoch, first_psn);
        self.phase = Phase::Live { next: from };
        self.acked_live = from;
        self.sync_done = true;
    }

    /// Full sync: the scan stream from 0, SNAPSHOT_END, then the live stream
    /// from `live_from`.
    pub fn start_full(&mut self, repl_id: u64, epoch: u64, first_psn: u32, live_from: u64) {
        self.reset(repl_id, epoch, first_psn);
        self.phase = Phase::Sync { next: 0 };
        self.live_from = live_from;
        self.acked_live = live_from;
        self.acked_sync = 0;
    }

    /// Stops shipping (the replica is gone or invalid).
    pub fn stop(&mut self) {
        self.phase = Phase::Idle;
        self.inflight.clear();
        self.resend = None;
        self.rec.restart(self.cfg.rto_ns);
    }

    /// True between a `start_*` and a `stop` or error.
    pub fn is_active(&self) -> bool {
        self.phase != Phase::Idle
    }

    /// Live offset the replica acknowledged (transport ACKs; a boundary).
    pub fn acked_live(&self) -> u64 {
        self.acked_live
    }

    /// Scan-stream offset the replica acknowledged (the full sync's pin).
    pub fn acked_sync(&self) -> u64 {
        self.acked_sync
    }

    /// True once the replica acknowledged the SNAPSHOT_END (or for a partial
    /// resync from the start).
    pub fn sync_done(&self) -> bool {
        self.sync_done
    }

    /// True while a full sync's scan stream is still being shipped.
    pub fn in_full_sync(&self) -> bool {
        matches!(self.phase, Phase::Sync { .. })
    }

    /// Live offset of the next fresh segment (`None` before the live phase).
    pub fn next_live(&self) -> Option<u64> {
        match self.phase {
            Phase::Live { next } => Some(next),
            _ => None,
        }
    }

    /// Segments in flight.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Counters.
    pub fn stats(&self) -> ShipperStats {
        self.stats
    }

    /// Next segment to send, written into `out` (the frame's payload area):
    /// a pending resend first, then fresh bytes from `sync` (during a full
    /// sync; `sync_complete` once every worker's scan ended and was drained)
    /// or `live`. `Ok(None)`: nothing to send now.
    pub fn poll(
        &mut self,
        now_ns: u64,
        live: &Backlog,
        sync: Option<&Backlog>,
        sync_complete: bool,
        out: &mut [u8],
    ) -> Result<Option<Outgoing>, ShipError> {
        if self.phase == Phase::Idle {
            return Ok(None);
        }
        let cap = out.len().min(self.cfg.segment_payload);
        if cap <= SEGMENT_HEADER_LEN {
            return Err(ShipError::BufferTooSmall);
        }
        match self.rec.due(now_ns, !self.inflight.is_empty()) {
            Due::Wait => return Ok(None),
            Due::Nothing => {}
            Due::Resend(from) => {
                let i = psn::distance(self.oldest_psn(), from).max(0) as usize;
                self.resend = Some(i);
            }
            Due::Timeout => {
                self.stats.timeouts += 1;
                self.retries += 1;
                if self.retries > self.cfg.max_retries {
                    self.stop();
                    return Err(ShipError::Unreachable);
                }
                self.rec.back_off(now_ns, self.cfg.rto_max_ns);
                self.resend = Some(0);
            }
        }
        if let Some(i) = self.resend {
            if let Some(&seg) = self.inflight.get(i) {
                let r = self.write_seg(&seg, live, sync, &mut out[..cap]);
                let len = r?;
                self.resend = (i + 1 < self.inflight.len()).then_some(i + 1);
                self.stats.resent += 1;
                let last = self.resend.is_none();
                return Ok(Some(self.outgoing(&seg, len, last, true)));
            }
            self.resend = None;
        }
        if self.inflight.len() >= usize::from(self.cfg.window) {
            return Ok(None);
        }
        let Some(seg) = self.next_fresh(live, sync, sync_complete, cap)? else {
            return Ok(None);
        };
        let len = self.write_seg(&seg, live, sync, &mut out[..cap])?;
        let first = self.inflight.is_empty();
        self.inflight.push_back(seg);
        self.next_psn = psn::add(self.next_psn, 1);
        self.stats.segments += 1;
        self.stats.bytes += seg.end - seg.start;
        self.rec.on_send(now_ns, first);
        // Ask for an ACK when the window fills or nothing more is ready.
        let more = match self.phase {
            Phase::Live { next } => next < live.end(),
            Phase::Sync { next } => sync.is_some_and(|s| next < s.end()) || sync_complete,
            Phase::Idle => false,
        };
        let full = self.inflight.len() >= usize::from(self.cfg.window);
        Ok(Some(self.outgoing(&seg, len, full || !more, false)))
    }

    fn outgoing(&self, seg: &Seg, len: usize, ack_req: bool, resend: bool) -> Outgoing {
        Outgoing {
            psn: seg.psn,
            ack_req,
            imm: seg.end as u32,
            len,
            kind: seg.kind,
            start: seg.start,
            end: seg.end,
            resend,
        }
    }

    /// Decides the next fresh segment's range (and advances the phase).
    fn next_fresh(
        &mut self,
        live: &Backlog,
        sync: Option<&Backlog>,
        sync_complete: bool,
        cap: usize,
    ) -> Result<Option<Seg>, ShipError> {
        let room = cap - SEGMENT_HEADER_LEN;
        let (kind, src, next) = match self.phase {
            Phase::Idle => return Ok(None),
            Phase::Live { next } => (SegmentKind::Live, live, next),
            Phase::Sync { next } => {
                let Some(s) = sync else { return Ok(None) };
                if next >= s.end() && self.split_end.is_none() {
                    if !sync_complete {
                        return Ok(None);
                    }
                    let seg = Seg {
                        psn: self.next_psn,
                        kind: SegmentKind::SnapshotEnd,
                        start: next,
                        end: next,
                        records: 0,
                    };
                    self.phase = Phase::Live {
                        next: self.live_from,
                    };
                    return Ok(Some(seg));
                }
                (SegmentKind::SyncData, s, next)
            }
        };
        let lost = |e: ReadError| match e {
            ReadError::TooOld { .. } if kind == SegmentKind::Live => ShipError::NeedFullSync,
            ReadError::TooOld { .. } => ShipError::SyncLost,
            _ => ShipError::Corrupt,
        };
        let (end, records) = if let Some(split) = self.split_end {
            // The rest of a long record, a segment's worth at a time.
            let end = split.min(next + room as u64);
            if end > src.end() {
                return Err(ShipError::Corrupt);
            }
            if end == split {
                self.split_end = None;
            }
            (end, u32::from(end == split))
        } else {
            if next >= src.end() {
                return Ok(None);
            }
            match src.record_end(next).map_err(lost)? {
                e if e - next > room as u64 => {
                    self.split_end = Some(e);
                    (next + room as u64, 0)
                }
                _ => {
                    // Whole records: count them without copying yet.
                    let (end, n) = whole_records(src, next, room).map_err(lost)?;
                    (end, n)
                }
            }
        };
        match &mut self.phase {
            Phase::Live { next } | Phase::Sync { next } => *next = end,
            Phase::Idle => {}
        }
        Ok(Some(Seg {
            psn: self.next_psn,
            kind,
            start: next,
            end,
            records,
        }))
    }

    /// Writes header + bytes of `seg` into `out`; returns the payload length.
    fn write_seg(
        &self,
        seg: &Seg,
        live: &Backlog,
        sync: Option<&Backlog>,
        out: &mut [u8],
    ) -> Result<usize, ShipError> {
        let n = (seg.end - seg.start) as usize;
        let len = SEGMENT_HEADER_LEN + n;
        if out.len() < len {
            return Err(ShipError::BufferTooSmall);
        }
        let hdr = SegmentHeader {
            kind: seg.kind,
            record_count: seg.records,
            repl_id: self.repl_id,
            epoch: self.epoch,
            start: seg.start,
            live_offset: match seg.kind {
                SegmentKind::Live => seg.start,
                _ => self.live_from,
            },
        };
        hdr.encode(out).ok_or(ShipError::BufferTooSmall)?;
        if n > 0 {
            let src = match seg.kind {
                SegmentKind::Live => live,
                _ => sync.ok_or(ShipError::SyncLost)?,
            };
            src.read_raw(seg.start, &mut out[SEGMENT_HEADER_LEN..len])
                .map_err(|e| match e {
                    ReadError::TooOld { .. } if seg.kind == SegmentKind::Live => {
                        ShipError::NeedFullSync
                    }
                    ReadError::TooOld { .. } => ShipError::SyncLost,
                    _ => ShipError::Corrupt,
                })?;
        }
        Ok(len)
    }

    /// Retires every in-flight segment up to and including `psn`.
    fn retire_through(&mut self, psn_acked: u32) -> usize {
        let mut n = 0;
        while let Some(s) = self.inflight.front() {
            if psn::distance(s.psn, psn_acked) < 0 {
                break;
            }
            match s.kind {
                SegmentKind::Live => self.acked_live = self.acked_live.max(s.end),
                SegmentKind::SyncData => self.acked_sync = self.acked_sync.max(s.end),
                SegmentKind::SnapshotEnd => {
                    self.acked_sync = self.acked_sync.max(s.end);
                    self.sync_done = true;
                }
            }
            self.inflight.pop_front();
            n += 1;
        }
        if n > 0 {
            self.resend = self.resend.and_then(|i| i.checked_sub(n));
            self.retries = 0;
        }
        n
    }

    /// The PSN of the oldest segment in flight (the next one's when none is).
    fn oldest_psn(&self) -> u32 {
        self.inflight.front().map_or(self.next_psn, |s| s.psn)
    }

    /// True when `p` is the PSN of an in-flight segment or the one just
    /// before the oldest (an ACK/NAK about this window).
    fn in_window(&self, p: u32) -> bool {
        let d = psn::distance(self.oldest_psn(), p);
        d >= -1 && d <= self.inflight.len() as i32
    }

    /// Retires the segments up to `p`; progress restarts the timer (from `now_ns`,
    /// while segments remain in flight).
    fn acknowledge_through(&mut self, p: u32, now_ns: u64) {
        if self.retire_through(p) > 0 {
            let (oldest, in_flight) = (self.oldest_psn(), !self.inflight.is_empty());
            self.rec
                .on_progress(oldest, self.cfg.rto_ns, now_ns, in_flight);
        }
    }

    /// RC ACK with BTH PSN `p`: every segment up to `p` arrived and was applied.
    pub fn on_ack(&mut self, p: u32, now_ns: u64) {
        if !self.in_window(p) {
            self.stats.stale_acks += 1;
            return;
        }
        self.acknowledge_through(p, now_ns);
    }

    /// NAK "PSN sequence error" with BTH PSN `p`: the replica expects `p`;
    /// everything before it arrived; resend from `p` (go-back-N), once per NAK.
    pub fn on_nak(&mut self, p: u32, now_ns: u64) {
        if !self.in_window(p) {
            self.stats.stale_acks += 1;
            return;
        }
        self.stats.naks += 1;
        self.acknowledge_through(psn::add(p, kvwire::ib::MASK_24), now_ns);
        self.rec.on_nak(self.oldest_psn(), p);
    }

    /// RNR NAK with BTH PSN `p` and a wait of `wait_ns`: resend from `p` once
    /// the wait is over.
    pub fn on_rnr(&mut self, p: u32, wait_ns: u64, now_ns: u64) {
        if !self.in_window(p) {
            self.stats.stale_acks += 1;
            return;
        }
        self.stats.rnr_naks += 1;
        self.acknowledge_through(psn::add(p, kvwire::ib::MASK_24), now_ns);
        self.rec.on_rnr(self.oldest_psn(), p, wait_ns, now_ns);
    }
}

/// End and count of the whole records from boundary `from` within `room`
/// bytes (at least one record, which the caller checked fits).
fn whole_records(src: &Backlog, from: u64, room: usize) -> Result<(u64, u32), ReadError> {
    let mut pos = from;
    let mut n = 0u32;
    while pos < src.end() {
        let e = src.record_end(pos)?;
        if e - from > room as u64 {
            break;
        }
        pos = e;
        n += 1;
    }
    Ok((pos, n))
}

#[cfg(test)]
mod tests;
