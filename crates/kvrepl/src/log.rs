//! The per-worker SPSC log ring: worker lcore → replication lcore.
//!
//! Each worker owns a [`LogProducer`] and appends one post-image record per
//! applied mutation; the replication lcore owns the matching [`LogConsumer`]
//! and drains every worker's ring into the ordered stream
//! ([`crate::backlog::Backlog`]). The ring is a byte ring of the well-kept
//! [`rtrb`] crate (wait-free SPSC, cache-padded indices): records are written
//! in place in their [`crate::record`] encoding, split across the ring's wrap
//! when needed, and made visible to the consumer only once whole.
//!
//! # Full-ring policy
//!
//! [`LogProducer::try_push`] never blocks and never drops: when the record
//! does not fit it returns [`PushError::Full`] and writes nothing. The worker
//! must count it and **refuse the write** (status `TryAgain`) — applying a
//! mutation whose record cannot be logged would silently lose it on every
//! replica. A worker therefore pushes the record *before* it acknowledges the
//! write, and sizes its check so that a full ring refuses the write cleanly
//! (e.g. by checking [`LogProducer::free_bytes`] against the record's
//! [`crate::Record::encoded_len`] before applying the mutation).
//!
//! # Ring-only markers
//!
//! Inside the ring the top bit of the kind byte marks a record of a full-sync
//! scan ([`LogItem::Scan`]), and kind `0xFE`/`0xFF` with a 4-byte session id
//! as key mark a scan's begin and end. Kind `0xFD` with a 12-byte key (ring
//! index u32 LE, position u64 LE) is a [`LogItem::Wait`]: the records after it
//! may enter the stream only once that other ring was drained up to that
//! position (a cross-partition transaction's order, see
//! [`LogProducer::try_push_wait`]). Kind `0xFC` with a 12-byte key (partition
//! set u64 LE, group bytes u32 LE) is a [`LogItem::Span`]: a replica routed a
//! transaction spanning its partitions into this ring, to be applied with those
//! partitions' workers parked ([`LogProducer::try_push_span`]). These never leave
//! the ring: the consumer hands out the plain record encoding.

use crate::record::{
    Record, RecordError, KIND_DELETE, KIND_PUT, MAX_RECORD_LEN, RECORD_HEADER_LEN,
};
use rtrb::{Consumer, Producer, RingBuffer};

/// Kind-byte bit marking a scan record inside the ring.
const SCAN_BIT: u8 = 0x80;
/// Bytes a scan marker takes in the ring ([`LogItem::ScanBegin`], [`LogItem::ScanEnd`]).
pub const MARKER_LEN: usize = RECORD_HEADER_LEN + 4;
/// Ring-only kind: a scan session begins (key = session id, u32 LE).
const KIND_SCAN_BEGIN: u8 = 0xFE;
/// Ring-only kind: a scan session ended (key = session id, u32 LE).
const KIND_SCAN_END: u8 = 0xFF;
/// Ring-only kind: wait for another ring (key = ring u32 LE, position u64 LE).
const KIND_WAIT: u8 = 0xFD;
/// Bytes a wait marker takes in the ring ([`LogItem::Wait`]).
pub const WAIT_LEN: usize = RECORD_HEADER_LEN + 12;
/// Ring-only kind: a transaction over several partitions follows (key = partition
/// set u64 LE, group bytes u32 LE).
const KIND_SPAN: u8 = 0xFC;
/// Bytes a span marker takes in the ring ([`LogItem::Span`]).
pub const SPAN_LEN: usize = RECORD_HEADER_LEN + 12;
/// Smallest ring: the largest record must always fit.
pub const MIN_LOG_CAPACITY: usize = MAX_RECORD_LEN;

/// Why a record was not pushed. Nothing was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PushError {
    /// The ring has no room for the record: refuse the write (TryAgain).
    Full,
    /// A scan record beyond the replication lcore's grant (see
    /// [`crate::resync::FullSync`]).
    NoCredit,
    /// The record is not encodable.
    Invalid(RecordError),
}

impl core::fmt::Display for PushError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::Full => f.write_str("log ring full"),
            Self::NoCredit => f.write_str("scan record beyond the granted credit"),
            Self::Invalid(e) => write!(f, "record not encodable: {e}"),
        }
    }
}

impl std::error::Error for PushError {}

/// Creates a worker's log ring of `capacity` bytes (raised to
/// [`MIN_LOG_CAPACITY`]). Allocates once, here.
pub fn log_ring(capacity: usize) -> (LogProducer, LogConsumer) {
    let (p, c) = RingBuffer::<u8>::new(capacity.max(MIN_LOG_CAPACITY));
    (
        LogProducer {
            ring: p,
            pushed: 0,
            scan_pushed: 0,
            notified: 0,
            waker: None,
        },
        LogConsumer {
            ring: c,
            popped: 0,
            scratch: vec![0u8; MAX_RECORD_LEN].into_boxed_slice(),
        },
    )
}

/// Wakes a ring's consumer (e.g. rings its idle loop's doorbell).
pub type Waker = std::sync::Arc<dyn Fn() + Send + Sync>;

/// The worker's end of a log ring.
pub struct LogProducer {
    ring: Producer<u8>,
    /// Bytes pushed since creation (records and markers).
    pushed: u64,
    /// Bytes of scan records pushed since creation.
    scan_pushed: u64,
    /// `pushed` at the last [`LogProducer::notify`].
    notified: u64,
    /// Called by `notify` when something was pushed since the last one.
    waker: Option<Waker>,
}

impl std::fmt::Debug for LogProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogProducer")
            .field("pushed", &self.pushed)
            .field("scan_pushed", &self.scan_pushed)
            .field("waker", &self.waker.is_some())
            .finish()
    }
}

impl LogProducer {
    /// Sets what [`LogProducer::notify`] calls (the consumer's doorbell).
    pub fn set_waker(&mut self, w: Option<Waker>) {
        self.waker = w;
    }

    /// Wakes the consumer if anything was pushed since the last call: the producer
    /// calls it once per loop iteration, not per record.
    #[inline]
    pub fn notify(&mut self) {
        if self.pushed != self.notified {
            self.notified = self.pushed;
            if let Some(w) = &self.waker {
                w();
            }
        }
    }

    /// Appends a live post-image record; `Err(Full)` writes nothing.
    pub fn try_push(&mut self, rec: &Record<'_>) -> Result<(), PushError> {
        self.push_with(rec, 0)
    }

    /// Appends a record of a full-sync scan. `granted` is the replication
    /// lcore's cumulative grant for this worker: the push is refused with
    /// [`PushError::NoCredit`] when [`LogProducer::scan_pushed`] plus this
    /// record would exceed it.
    pub fn try_push_scan(&mut self, rec: &Record<'_>, granted: u64) -> Result<(), PushError> {
        let len = rec.encoded_len() as u64;
        if self.scan_pushed + len > granted {
            return Err(PushError::NoCredit);
        }
        self.push_with(rec, SCAN_BIT)?;
        self.scan_pushed += len;
        Ok(())
    }

    /// Marks the start of scan session `session` (before its first record).
    pub fn try_push_scan_begin(&mut self, session: u32) -> Result<(), PushError> {
        self.push_marker(KIND_SCAN_BEGIN, session)
    }

    /// Marks the end of scan session `session` (after its last record).
    pub fn try_push_scan_end(&mut self, session: u32) -> Result<(), PushError> {
        self.push_marker(KIND_SCAN_END, session)
    }

    /// Marks that what this ring holds from here on must enter the stream after
    /// everything ring `ring` held up to its position `position`
    /// ([`LogProducer::pushed`] there). A worker that wrote into other workers'
    /// rings for a cross-partition transaction pushes one per such ring, so that
    /// its own later records (and the responses held for them in sync mode)
    /// cannot overtake theirs. Takes [`WAIT_LEN`] bytes.
    pub fn try_push_wait(&mut self, ring: u32, position: u64) -> Result<(), PushError> {
        let mut key = [0u8; 12];
        key[..4].copy_from_slice(&ring.to_le_bytes());
        key[4..].copy_from_slice(&position.to_le_bytes());
        self.write_parts([KIND_WAIT, 12, 0, 0], [&key, &[]])
    }

    /// Marks that the GROUP record after it and the `bytes` of records it covers
    /// are one transaction over the partitions in `partitions` (a bit set): a
    /// replica with several workers routes such a transaction whole into one
    /// worker's ring, which applies it with the other partitions' workers parked.
    /// Takes [`SPAN_LEN`] bytes.
    pub fn try_push_span(&mut self, partitions: u64, bytes: u32) -> Result<(), PushError> {
        let mut key = [0u8; 12];
        key[..8].copy_from_slice(&partitions.to_le_bytes());
        key[8..].copy_from_slice(&bytes.to_le_bytes());
        self.write_parts([KIND_SPAN, 12, 0, 0], [&key, &[]])
    }

    /// Free bytes in the ring now (the consumer may free more meanwhile).
    pub fn free_bytes(&self) -> usize {
        self.ring.slots()
    }

    /// Bytes pushed since creation: a worker-local position in its log. A
    /// worker in sync mode notes it after pushing a write's record and answers
    /// the write once [`crate::progress::DurableCursor`] publishes a position
    /// at or beyond it.
    pub fn pushed(&self) -> u64 {
        self.pushed
    }

    /// Bytes of scan records pushed since creation (compare with the grant).
    pub fn scan_pushed(&self) -> u64 {
        self.scan_pushed
    }

    /// True when the consumer was dropped.
    pub fn is_abandoned(&self) -> bool {
        self.ring.is_abandoned()
    }

    fn push_marker(&mut self, kind: u8, session: u32) -> Result<(), PushError> {
        // MARKER_LEN bytes: the header and the session.
        let s = session.to_le_bytes();
        self.write_parts([kind, 4, 0, 0], [&s, &[]])
    }

    fn push_with(&mut self, rec: &Record<'_>, bit: u8) -> Result<(), PushError> {
        rec.validate().map_err(PushError::Invalid)?;
        let mut qpn = [0u8; 4];
        let (mut hdr, body) = rec.parts(&mut qpn);
        hdr[0] |= bit;
        self.write_parts(hdr, body)
    }

    /// Writes header + two body pieces as one chunk (all or nothing).
    fn write_parts(
        &mut self,
        hdr: [u8; RECORD_HEADER_LEN],
        body: [&[u8]; 2],
    ) -> Result<(), PushError> {
        let n = RECORD_HEADER_LEN + body[0].len() + body[1].len();
        let mut chunk = self.ring.write_chunk(n).map_err(|_| PushError::Full)?;
        let (a, b) = chunk.as_mut_slices();
        let mut w = SplitWriter { a, b, at: 0 };
        w.put(&hdr);
        w.put(body[0]);
        w.put(body[1]);
        chunk.commit_all();
        self.pushed += n as u64;
        Ok(())
    }
}

/// Copies consecutive pieces into the two halves of a ring chunk.
struct SplitWriter<'a> {
    a: &'a mut [u8],
    b: &'a mut [u8],
    at: usize,
}

impl SplitWriter<'_> {
    fn put(&mut self, src: &[u8]) {
        let mut src = src;
        if self.at < self.a.len() {
            let n = src.len().min(self.a.len() - self.at);
            self.a[self.at..self.at + n].copy_from_slice(&src[..n]);
            self.at += n;
            src = &src[n..];
        }
        if !src.is_empty() {
            let off = self.at - self.a.len();
            self.b[off..off + src.len()].copy_from_slice(src);
            self.at += src.len();
        }
    }
}

/// One item drained from a log ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogItem<'a> {
    /// A live mutation's record, in its plain encoding.
    Live(&'a [u8]),
    /// A full-sync scan record, in its plain encoding.
    Scan(&'a [u8]),
    /// The worker started scan session `0`.
    ScanBegin(u32),
    /// The worker finished scan session `0`.
    ScanEnd(u32),
    /// Take nothing more from this ring until ring `ring` was drained up to
    /// `position` ([`LogConsumer::popped`] there); see
    /// [`LogProducer::try_push_wait`].
    Wait {
        /// The ring waited for (the worker's index).
        ring: u32,
        /// Its position that must have been drained.
        position: u64,
    },
    /// A GROUP record and `bytes` of records follow: one transaction over the
    /// partitions in `partitions`; see [`LogProducer::try_push_span`].
    Span {
        /// The partitions the transaction's keys belong to (a bit set).
        partitions: u64,
        /// The GROUP record's `bytes`.
        bytes: u32,
    },
}

impl LogItem<'_> {
    /// Bytes the item takes in the ring.
    pub fn ring_len(&self) -> usize {
        match self {
            LogItem::Live(b) | LogItem::Scan(b) => b.len(),
            LogItem::ScanBegin(_) | LogItem::ScanEnd(_) => MARKER_LEN,
            LogItem::Wait { .. } => WAIT_LEN,
            LogItem::Span { .. } => SPAN_LEN,
        }
    }
}

/// Why draining stopped with an error: the ring holds bytes that are not a
/// record. Only a bug (or memory corruption) in the producer can cause it; the
/// ring is left as it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CorruptLog(pub RecordError);

impl core::fmt::Display for CorruptLog {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "corrupt log ring: {}", self.0)
    }
}

impl std::error::Error for CorruptLog {}

/// The replication lcore's end of a log ring.
#[derive(Debug)]
pub struct LogConsumer {
    ring: Consumer<u8>,
    /// Bytes popped since creation (comparable with [`LogProducer::pushed`]).
    popped: u64,
    /// Reassembly of a record that straddles the ring's wrap.
    scratch: Box<[u8]>,
}

impl LogConsumer {
    /// Bytes waiting in the ring.
    pub fn pending_bytes(&self) -> usize {
        self.ring.slots()
    }

    /// Bytes popped since creation: the worker-local log position up to which
    /// everything has been handed out (see [`LogProducer::pushed`]).
    pub fn popped(&self) -> u64 {
        self.popped
    }

    /// True when the producer was dropped.
    pub fn is_abandoned(&self) -> bool {
        self.ring.is_abandoned()
    }

    /// Hands out up to `max_items` items, in order, to `f`; stops early (the
    /// item stays in the ring) when `f` returns `false`. Returns the number of
    /// items consumed. A record that straddles the wrap is reassembled in a
    /// buffer allocated at construction: nothing allocates here.
    pub fn drain<F>(&mut self, max_items: usize, mut f: F) -> Result<usize, CorruptLog>
    where
        F: FnMut(LogItem<'_>) -> bool,
    {
        self.drain_ahead(max_items, 0, |d| match d {
            Drained::Item(item) => f(item),
            Drained::Upcoming(_) => true,
        })
    }

    /// [`LogConsumer::drain`] that also shows `f`, before each item, the key of the
    /// PUT or DELETE record `ahead` items later ([`Drained::Upcoming`], once each;
    /// a key that straddles the ring's wrap is skipped): an applier prefetches its
    /// bucket so that the record finds it in cache, as the request path's batches
    /// do. What `f` returns for an upcoming key is ignored.
    pub fn drain_ahead<F>(
        &mut self,
        max_items: usize,
        ahead: usize,
        mut f: F,
    ) -> Result<usize, CorruptLog>
    where
        F: FnMut(Drained<'_>) -> bool,
    {
        let avail = self.ring.slots();
        let Ok(mut chunk) = self.ring.read_chunk(avail) else {
            return Ok(0);
        };
        let (a, b) = chunk.as_mut_slices();
        let mut at = 0usize;
        let mut items = 0usize;
        // The lookahead: the next record not shown yet, and how many were shown.
        let (mut la, mut la_items) = (0usize, 0usize);
        let mut err = None;
        while items < max_items && at < avail {
            while la_items < items + ahead && la < avail {
                let Some(n) = upcoming_key(a, b, la, &mut |k| {
                    f(Drained::Upcoming(k));
                }) else {
                    break;
                };
                la += n;
                la_items += 1;
            }
            let mut hdr = [0u8; RECORD_HEADER_LEN];
            if copy_out(a, b, at, &mut hdr).is_err() {
                err = Some(CorruptLog(RecordError::Truncated {
                    need: RECORD_HEADER_LEN,
                    have: avail - at,
                }));
                break;
            }
            let len = RECORD_HEADER_LEN
                + usize::from(hdr[1])
                + usize::from(u16::from_le_bytes([hdr[2], hdr[3]]));
            // A scan record: clear its ring-only bit in place, so that what is
            // handed out is the plain encoding.
            let scan = hdr[0] & SCAN_BIT != 0 && !is_marker(hdr[0]);
            if scan {
                hdr[0] &= !SCAN_BIT;
                match at.checked_sub(a.len()) {
                    None => a[at] = hdr[0],
                    Some(off) => b[off] = hdr[0],
                }
            }
            let bytes: &[u8] = if at + len <= a.len() {
                &a[at..at + len]
            } else {
                let s = &mut self.scratch[..len.min(MAX_RECORD_LEN)];
                if s.len() != len || copy_out(a, b, at, s).is_err() {
                    err = Some(CorruptLog(RecordError::Truncated {
                        need: len,
                        have: avail - at,
                    }));
                    break;
                }
                s
            };
            let item = match classify(bytes, scan) {
                Ok(item) => item,
                Err(e) => {
                    err = Some(CorruptLog(e));
                    break;
                }
            };
            if !f(Drained::Item(item)) {
                if scan {
                    // Leave the entry as the producer wrote it.
                    match at.checked_sub(a.len()) {
                        None => a[at] |= SCAN_BIT,
                        Some(off) => b[off] |= SCAN_BIT,
                    }
                }
                break;
            }
            at += len;
            items += 1;
        }
        chunk.commit(at);
        self.popped += at as u64;
        match err {
            Some(e) => Err(e),
            None => Ok(items),
        }
    }
}

/// What [`LogConsumer::drain_ahead`] shows its callback.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Drained<'a> {
    /// The next item, to be consumed (or left, when the callback returns `false`).
    Item(LogItem<'a>),
    /// The key of a PUT or DELETE record some items later (a prefetch hint).
    Upcoming(&'a [u8]),
}

/// The length of the ring entry at logical position `at` of the halves `a` then
/// `b`, after showing its key to `key` when it is a PUT or DELETE whose key lies in
/// one half; `None` when not even its header is there.
fn upcoming_key<'a>(
    a: &'a [u8],
    b: &'a [u8],
    at: usize,
    key: &mut dyn FnMut(&'a [u8]),
) -> Option<usize> {
    let mut hdr = [0u8; RECORD_HEADER_LEN];
    copy_out(a, b, at, &mut hdr).ok()?;
    let klen = usize::from(hdr[1]);
    let len = RECORD_HEADER_LEN + klen + usize::from(u16::from_le_bytes([hdr[2], hdr[3]]));
    let kind = if is_marker(hdr[0]) {
        hdr[0]
    } else {
        hdr[0] & !SCAN_BIT
    };
    if matches!(kind, KIND_PUT | KIND_DELETE) {
        let (half, off) = match at.checked_sub(a.len()) {
            None => (a, at),
            Some(off) => (b, off),
        };
        if let Some(k) = half.get(off + RECORD_HEADER_LEN..off + RECORD_HEADER_LEN + klen) {
            key(k);
        }
    }
    Some(len)
}

/// True for the ring-only marker kinds.
fn is_marker(kind: u8) -> bool {
    matches!(
        kind,
        KIND_SCAN_BEGIN | KIND_SCAN_END | KIND_WAIT | KIND_SPAN
    )
}

/// Copies `out.len()` bytes starting at logical position `at` of the two
/// halves `a` then `b`.
fn copy_out(a: &[u8], b: &[u8], at: usize, out: &mut [u8]) -> Result<(), ()> {
    let n = out.len();
    if at + n > a.len() + b.len() {
        return Err(());
    }
    if at >= a.len() {
        let off = at - a.len();
        out.copy_from_slice(&b[off..off + n]);
    } else {
        let first = n.min(a.len() - at);
        out[..first].copy_from_slice(&a[at..at + first]);
        out[first..].copy_from_slice(&b[..n - first]);
    }
    Ok(())
}

/// Turns a whole ring entry (scan bit already cleared) into a [`LogItem`].
fn classify(bytes: &[u8], scan: bool) -> Result<LogItem<'_>, RecordError> {
    let kind = bytes[0];
    if kind == KIND_WAIT || kind == KIND_SPAN {
        // A 12-byte key: (u32, u64) for a wait, (u64, u32) for a span.
        let k: [u8; 12] = bytes
            .get(RECORD_HEADER_LEN..)
            .and_then(|k| k.try_into().ok())
            .ok_or(RecordError::BadLayout)?;
        let [a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10, a11] = k;
        return Ok(if kind == KIND_WAIT {
            LogItem::Wait {
                ring: u32::from_le_bytes([a0, a1, a2, a3]),
                position: u64::from_le_bytes([a4, a5, a6, a7, a8, a9, a10, a11]),
            }
        } else {
            LogItem::Span {
                partitions: u64::from_le_bytes([a0, a1, a2, a3, a4, a5, a6, a7]),
                bytes: u32::from_le_bytes([a8, a9, a10, a11]),
            }
        });
    }
    if is_marker(kind) {
        let k: [u8; 4] = bytes
            .get(RECORD_HEADER_LEN..)
            .and_then(|s| s.try_into().ok())
            .ok_or(RecordError::BadLayout)?;
        let id = u32::from_le_bytes(k);
        return Ok(if kind == KIND_SCAN_BEGIN {
            LogItem::ScanBegin(id)
        } else {
            LogItem::ScanEnd(id)
        });
    }
    Record::decode(bytes)?;
    Ok(if scan {
        LogItem::Scan(bytes)
    } else {
        LogItem::Live(bytes)
    })
}

/// Drains a log ring without splitting a transaction: the GROUP record of one
/// ([`Record::Group`]) and the records it covers are taken together, past the
/// item budget if need be, and only once all of them are in the ring. Feed it
/// every item [`LogConsumer::drain`] hands out; it says whether to take it.
#[derive(Clone, Copy, Debug)]
pub struct GroupWindow {
    avail: usize,
    max: usize,
    seen: usize,
    group_end: usize,
    items: usize,
}

impl GroupWindow {
    /// A window over `avail` pending bytes ([`LogConsumer::pending_bytes`], read
    /// before the drain) taking about `max` items.
    pub fn new(avail: usize, max: usize) -> GroupWindow {
        GroupWindow {
            avail,
            max,
            seen: 0,
            group_end: 0,
            items: 0,
        }
    }

    /// True while the items taken are inside a transaction.
    pub fn in_group(&self) -> bool {
        self.seen < self.group_end
    }

    /// Whether to take `item` now (`false`: stop, it stays in the ring).
    /// `room(bytes)` says whether the consumer can take a whole group of that
    /// many bytes.
    pub fn admit(&mut self, item: &LogItem<'_>, room: impl FnOnce(usize) -> bool) -> bool {
        if self.items >= self.max && !self.in_group() {
            return false;
        }
        let len = item.ring_len();
        if let LogItem::Live(b) = item {
            if b.first() == Some(&crate::record::KIND_GROUP) {
                if let Ok((Record::Group { bytes }, _)) = Record::decode(b) {
                    let end = self.seen + len + bytes as usize;
                    if end > self.avail || !room(bytes as usize) {
                        return false;
                    }
                    self.group_end = end;
                }
            }
        }
        self.seen += len;
        self.items += 1;
        true
    }
}

#[cfg(test)]
mod tests;
