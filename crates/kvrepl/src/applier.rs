//! The replica's receiver: the responder half of the segment stream.
//!
//! It accepts a segment only at the expected PSN *and* the expected offset,
//! applies its records through a [`Sink`] (reassembling a record carried in
//! several segments), and answers like an RC responder (docs/PROTOCOL.md
//! §6.3): duplicates are re-acknowledged, the first segment after a gap gets a
//! NAK "PSN sequence error", later ones are dropped silently.
//!
//! Nothing allocates after [`Applier::new`] (the reassembly buffer is
//! allocated there).

use crate::messages::{ReplicaReport, Welcome, WelcomeMode};
use crate::record::{Record, RecordError, MAX_RECORD_LEN, RECORD_HEADER_LEN};
use crate::segment::{parse_segment, SegmentError, SegmentKind};
use kvwire::psn::{self, Arrival, Receiver};

/// Where the replica's records go (its engine, its log file).
pub trait Sink {
    /// A full sync begins: forget every key.
    fn clear(&mut self);
    /// Applies one record. An error stops the applier (the replica then
    /// needs a full sync).
    fn apply(&mut self, rec: Record<'_>) -> Result<(), SinkError>;
}

/// A record the sink could not apply (e.g. the engine is out of memory).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkError;

/// What the replica sends back for a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reply {
    /// Nothing (yet).
    None,
    /// RC ACK with this BTH PSN (everything up to it is applied).
    Ack(u32),
    /// NAK "PSN sequence error" with this BTH PSN (the one expected).
    Nak(u32),
}

/// What happened to a segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Applied (maybe nothing if it only carried part of a record).
    Applied,
    /// The SNAPSHOT_END: the full sync is complete, the live stream follows.
    SyncComplete,
    /// A duplicate (already applied).
    Duplicate,
    /// Ahead of the expected PSN: not applied.
    Gap,
    /// Not for this connection: no WELCOME yet, another replication id, an
    /// older epoch, or a malformed segment. Not applied, not answered.
    Dropped(DropCause),
    /// The stream broke (a sink error, an offset mismatch at the expected
    /// PSN, a corrupt record): the replica must connect again with no
    /// replication id (full sync).
    Broken,
}

/// Why a segment was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropCause {
    /// No WELCOME accepted (or the applier is broken).
    NotConnected,
    /// The segment payload did not parse.
    Malformed(SegmentError),
    /// Another replication id.
    WrongReplId,
    /// An epoch other than the WELCOME's (a fenced master).
    WrongEpoch,
}

/// Counters of an [`Applier`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ApplierStats {
    /// Segments applied.
    pub segments: u64,
    /// Records applied.
    pub records: u64,
    /// Duplicates re-acknowledged.
    pub duplicates: u64,
    /// Segments after a gap.
    pub gaps: u64,
    /// NAKs sent.
    pub naks: u64,
    /// Segments dropped.
    pub dropped: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Idle,
    Syncing,
    Streaming,
    Broken,
}

/// The replica's receiver.
#[derive(Debug)]
pub struct Applier {
    state: State,
    repl_id: u64,
    epoch: u64,
    /// The segments' PSNs (the go-back-N receiver rules shared with the server's
    /// client QPs).
    rx: Receiver,
    /// Next offset expected, in the current stream (scan or live).
    next: u64,
    /// Offset after the last record applied, in the current stream.
    applied: u64,
    /// Where the live stream starts after a full sync (learnt from the first
    /// scan-stream segment).
    live_from: Option<u64>,
    carry: Box<[u8]>,
    carry_len: usize,
    ack_every: u32,
    since_ack: u32,
    stats: ApplierStats,
}

impl Applier {
    /// An applier that acknowledges at least every `ack_every` segments
    /// (and whenever the master sets AckReq).
    pub fn new(ack_every: u32) -> Self {
        Applier {
            state: State::Idle,
            repl_id: 0,
            epoch: 0,
            rx: Receiver::new(0),
            next: 0,
            applied: 0,
            live_from: None,
            carry: vec![0u8; MAX_RECORD_LEN].into_boxed_slice(),
            carry_len: 0,
            ack_every: ack_every.max(1),
            since_ack: 0,
            stats: ApplierStats::default(),
        }
    }

    /// Takes the master's WELCOME for the HELLO whose `first_psn` it echoes
    /// (the caller takes only the first WELCOME carrying its HELLO's nonce).
    /// `Full` clears the sink (the segments tell where the live stream
    /// continues); `Partial` continues from the WELCOME's offset (the
    /// HELLO's). `Refused` leaves the applier idle. `Redirect` changes nothing:
    /// the replica asks another node with the same position.
    pub fn on_welcome(&mut self, w: &Welcome, sink: &mut dyn Sink) {
        if w.mode == WelcomeMode::Redirect {
            return;
        }
        self.carry_len = 0;
        self.since_ack = 0;
        self.rx.restart(w.first_psn);
        self.repl_id = w.repl_id;
        self.epoch = w.epoch;
        match w.mode {
            WelcomeMode::Partial => {
                self.state = State::Streaming;
                self.next = w.offset;
                self.applied = w.offset;
            }
            WelcomeMode::Full => {
                sink.clear();
                self.state = State::Syncing;
                self.next = 0;
                self.applied = 0;
                self.live_from = None;
            }
            WelcomeMode::Refused => self.state = State::Idle,
            WelcomeMode::Redirect => {}
        }
    }

    /// Starts from data that is exactly stream `repl_id` (of `epoch`) up to live
    /// offset `offset` — a demoted master's own stream, complete up to there — so
    /// the next HELLO asks to continue from it. Nothing is accepted before a WELCOME
    /// (no master ships this id and PSN state; the replica must send HELLO).
    pub fn resume_at(&mut self, repl_id: u64, epoch: u64, offset: u64) {
        self.state = State::Streaming;
        self.repl_id = repl_id;
        self.epoch = epoch;
        self.next = offset;
        self.applied = offset;
        self.live_from = None;
        self.carry_len = 0;
        self.rx.restart(self.rx.expected());
        self.since_ack = 0;
    }

    /// What the replica puts in its next HELLO: the replication id and live
    /// offset its data stands at, or `(0, 0)` when it has no consistent
    /// position (never synced, mid full sync, broken).
    pub fn position(&self) -> (u64, u64) {
        match self.state {
            State::Streaming => (self.repl_id, self.applied),
            _ => (0, 0),
        }
    }

    /// Live offset applied (a record boundary), when streaming.
    pub fn applied_live(&self) -> Option<u64> {
        (self.state == State::Streaming).then_some(self.applied)
    }

    /// Scan-stream offset applied, during a full sync.
    pub fn applied_sync(&self) -> Option<u64> {
        (self.state == State::Syncing).then_some(self.applied)
    }

    /// The state to report in PROGRESS.
    pub fn report(&self) -> ReplicaReport {
        match self.state {
            State::Syncing => ReplicaReport::FullSync,
            State::Streaming => ReplicaReport::Streaming,
            State::Idle | State::Broken => ReplicaReport::Connecting,
        }
    }

    /// True when the applier needs a new HELLO (never welcomed, refused, or
    /// broken).
    pub fn needs_hello(&self) -> bool {
        matches!(self.state, State::Idle | State::Broken)
    }

    /// The first PSN for the replica's next HELLO: half the PSN space away
    /// from where this connection stands, so that no stray segment of it can
    /// fall in the new connection's window.
    pub fn next_first_psn(&self) -> u32 {
        psn::add(self.rx.expected(), psn::HALF)
    }

    /// The PSN of the next segment it takes (24 bits).
    pub fn expected_psn(&self) -> u32 {
        self.rx.expected()
    }

    /// The epoch and replication id it follows.
    pub fn master(&self) -> (u64, u64) {
        (self.repl_id, self.epoch)
    }

    /// Counters.
    pub fn stats(&self) -> ApplierStats {
        self.stats
    }

    /// Handles one segment frame (its BTH PSN and AckReq, the immediate and
    /// the payload); returns what happened and what to answer.
    pub fn on_segment(
        &mut self,
        psn_in: u32,
        ack_req: bool,
        imm: u32,
        payload: &[u8],
        sink: &mut dyn Sink,
    ) -> (Outcome, Reply) {
        if matches!(self.state, State::Idle | State::Broken) {
            return self.drop(DropCause::NotConnected);
        }
        let (hdr, bytes) = match parse_segment(payload, imm) {
            Ok(x) => x,
            Err(e) => return self.drop(DropCause::Malformed(e)),
        };
        if hdr.repl_id != self.repl_id {
            return self.drop(DropCause::WrongReplId);
        }
        if hdr.epoch != self.epoch {
            return self.drop(DropCause::WrongEpoch);
        }
        match self.rx.arrival(psn_in, psn::HALF) {
            Arrival::Expected => {}
            Arrival::Duplicate | Arrival::Stale => {
                self.stats.duplicates += 1;
                self.since_ack = 0;
                return (Outcome::Duplicate, Reply::Ack(self.rx.last()));
            }
            Arrival::Ahead => {
                self.stats.gaps += 1;
                if !self.rx.nak_due() {
                    return (Outcome::Gap, Reply::None);
                }
                self.rx.naked();
                self.stats.naks += 1;
                return (Outcome::Gap, Reply::Nak(self.rx.expected()));
            }
        }
        // The expected PSN: it must continue the current stream exactly.
        let in_sync = self.state == State::Syncing;
        let kind_ok = match hdr.kind {
            SegmentKind::Live => !in_sync,
            SegmentKind::SyncData | SegmentKind::SnapshotEnd => {
                in_sync && *self.live_from.get_or_insert(hdr.live_offset) == hdr.live_offset
            }
        };
        if !kind_ok || hdr.start != self.next {
            return self.broken();
        }
        let outcome = if hdr.kind == SegmentKind::SnapshotEnd {
            if self.carry_len != 0 {
                return self.broken();
            }
            let live = hdr.live_offset;
            self.state = State::Streaming;
            self.next = live;
            self.applied = live;
            Outcome::SyncComplete
        } else {
            match self.apply_bytes(bytes, sink) {
                Ok(n) => {
                    self.stats.records += u64::from(n);
                    if n != hdr.record_count {
                        return self.broken();
                    }
                }
                Err(()) => return self.broken(),
            }
            Outcome::Applied
        };
        self.stats.segments += 1;
        self.rx.accept();
        self.since_ack += 1;
        let reply = if ack_req || self.since_ack >= self.ack_every {
            self.since_ack = 0;
            Reply::Ack(psn_in & kvwire::ib::MASK_24)
        } else {
            Reply::None
        };
        (outcome, reply)
    }

    /// An ACK for everything applied so far (for a periodic or idle ACK);
    /// `None` before any segment of this connection or when nothing is
    /// unacknowledged.
    pub fn pending_ack(&mut self) -> Option<u32> {
        if self.since_ack == 0 || matches!(self.state, State::Idle | State::Broken) {
            return None;
        }
        self.since_ack = 0;
        Some(self.rx.last())
    }

    fn drop(&mut self, cause: DropCause) -> (Outcome, Reply) {
        self.stats.dropped += 1;
        (Outcome::Dropped(cause), Reply::None)
    }

    fn broken(&mut self) -> (Outcome, Reply) {
        self.state = State::Broken;
        self.carry_len = 0;
        (Outcome::Broken, Reply::None)
    }

    /// Applies the stream bytes at `self.next`; returns the records
    /// completed. On error the applier is left for [`Applier::broken`].
    fn apply_bytes(&mut self, mut bytes: &[u8], sink: &mut dyn Sink) -> Result<u32, ()> {
        let mut n = 0u32;
        self.next += bytes.len() as u64;
        // First finish a record carried over from earlier segments.
        if self.carry_len > 0 {
            if self.carry_len < RECORD_HEADER_LEN {
                let take = (RECORD_HEADER_LEN - self.carry_len).min(bytes.len());
                self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&bytes[..take]);
                self.carry_len += take;
                bytes = &bytes[take..];
                if self.carry_len < RECORD_HEADER_LEN {
                    return Ok(0);
                }
            }
            let h = &self.carry[..RECORD_HEADER_LEN];
            let need = RECORD_HEADER_LEN
                + usize::from(h[1])
                + usize::from(u16::from_le_bytes([h[2], h[3]]));
            let take = need.saturating_sub(self.carry_len).min(bytes.len());
            self.carry[self.carry_len..self.carry_len + take].copy_from_slice(&bytes[..take]);
            self.carry_len += take;
            bytes = &bytes[take..];
            if self.carry_len < need {
                return Ok(0);
            }
            let (rec, _) = Record::decode(&self.carry[..need]).map_err(|_| ())?;
            sink.apply(rec).map_err(|_| ())?;
            self.applied += need as u64;
            self.carry_len = 0;
            n += 1;
        }
        // Whole records in place; a partial one at the end is carried.
        while !bytes.is_empty() {
            match Record::decode(bytes) {
                Ok((rec, len)) => {
                    sink.apply(rec).map_err(|_| ())?;
                    self.applied += len as u64;
                    bytes = &bytes[len..];
                    n += 1;
                }
                Err(RecordError::Truncated { .. }) => {
                    self.carry[..bytes.len()].copy_from_slice(bytes);
                    self.carry_len = bytes.len();
                    break;
                }
                Err(_) => return Err(()),
            }
        }
        Ok(n)
    }
}
