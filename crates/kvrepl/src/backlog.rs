//! The ordered replication stream and its bounded backlog.
//!
//! The replication lcore appends the records it drains from the workers'
//! rings, one after another, into one stream. Every byte of the stream has an
//! **offset** (u64, monotonic, never reused within a replication id): a
//! record's offset is that of its first byte, and its *end* is the offset
//! after its last byte. The backlog keeps the newest `capacity` bytes
//! (config `backlog_mb`), always starting at a record boundary: appending
//! evicts whole records from the front.
//!
//! The same type holds a full sync's scan stream ([`crate::resync`]), in its
//! own offset space starting at 0, where [`Backlog::room_above`] keeps unacked
//! bytes from being evicted.
//!
//! Nothing here allocates after [`Backlog::new`].

use crate::record::{Record, RecordError, MAX_RECORD_LEN, RECORD_HEADER_LEN};
use std::collections::VecDeque;
use std::hash::{BuildHasher, Hasher};

/// Distance between the record-boundary marks kept to check offsets quickly.
const MARK_INTERVAL: u64 = 64 * 1024;

/// A random, non-zero replication id (SipHash of the time with a key the
/// standard library draws from the OS's randomness). A master takes a new
/// one at start and on promotion; 0 means "no id" on the wire.
pub fn random_repl_id() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    h.write_u128(t);
    h.finish().max(1)
}

/// Why a read found nothing to return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadError {
    /// The offset was evicted (older than [`Backlog::start`]): the replica
    /// needs a full sync.
    TooOld {
        /// The oldest offset still held.
        oldest: u64,
    },
    /// The offset is beyond the stream's end.
    Future {
        /// The stream's end.
        end: u64,
    },
    /// The buffer given to [`Backlog::read_into`] is shorter than the first
    /// record: carry it in pieces with [`Backlog::read_raw`].
    RecordTooLarge {
        /// The record's end offset.
        end: u64,
    },
    /// The held bytes are not records (a caller passed an offset that is not
    /// a record boundary).
    Corrupt(RecordError),
}

/// Why an append was refused. Nothing was appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AppendError {
    /// The bytes are not exactly one valid record.
    NotARecord(RecordError),
    /// The record does not fit without evicting bytes at or above the pin
    /// (see [`Backlog::room_above`]).
    NoRoom,
}

/// What [`Backlog::read_into`] copied.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Chunk {
    /// Bytes copied (whole records).
    pub len: usize,
    /// Records copied.
    pub records: u32,
}

/// A bounded byte stream of records addressed by offset.
#[derive(Debug)]
pub struct Backlog {
    buf: Box<[u8]>,
    /// Oldest offset held (a record boundary).
    start: u64,
    /// Next offset to append.
    end: u64,
    /// Offsets of record starts, ≥ [`MARK_INTERVAL`] apart, ascending, all
    /// ≥ `start`.
    marks: VecDeque<u64>,
    /// Appends refused with [`AppendError::NoRoom`] are checked against this.
    pin: Option<u64>,
    /// Records evicted since creation.
    evicted_records: u64,
}

impl Backlog {
    /// A backlog of `capacity` bytes (raised to [`MAX_RECORD_LEN`]) whose
    /// stream starts at offset `start`. Allocates once, here.
    pub fn new(capacity: usize, start: u64) -> Self {
        let capacity = capacity.max(MAX_RECORD_LEN);
        let marks = capacity / MARK_INTERVAL as usize + 2;
        Backlog {
            buf: vec![0u8; capacity].into_boxed_slice(),
            start,
            end: start,
            marks: VecDeque::with_capacity(marks),
            pin: None,
            evicted_records: 0,
        }
    }

    /// Bytes the backlog holds at most.
    pub fn capacity(&self) -> usize {
        self.buf.len()
    }

    /// Oldest offset still held (a record boundary).
    pub fn start(&self) -> u64 {
        self.start
    }

    /// The stream's end: the offset the next record gets.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Records evicted from the front since creation.
    pub fn evicted_records(&self) -> u64 {
        self.evicted_records
    }

    /// Forgets everything and restarts the stream at `start` (e.g. a replica
    /// that completed a full sync continues from the master's offset).
    pub fn reset(&mut self, start: u64) {
        self.start = start;
        self.end = start;
        self.marks.clear();
        self.pin = None;
    }

    /// Keeps offsets at or above `pin` from being evicted: an append that
    /// would evict them fails with [`AppendError::NoRoom`]. `None` (the
    /// default) lets appends evict freely, as the live backlog does.
    pub fn set_pin(&mut self, pin: Option<u64>) {
        self.pin = pin;
    }

    /// Bytes that can be appended without evicting offsets at or above `pin`.
    pub fn room_above(&self, pin: u64) -> usize {
        let held = self.end.saturating_sub(pin.max(self.start));
        self.buf.len().saturating_sub(held as usize)
    }

    /// Appends one record given as its encoding; returns its offset.
    pub fn append(&mut self, record: &[u8]) -> Result<u64, AppendError> {
        let (_, len) = Record::decode(record).map_err(AppendError::NotARecord)?;
        if len != record.len() {
            return Err(AppendError::NotARecord(RecordError::BadLayout));
        }
        self.make_room(len)?;
        let at = self.end;
        self.write_at(at, record);
        self.note_start(at);
        self.end += len as u64;
        Ok(at)
    }

    /// Appends a record, encoding it in place; returns its offset.
    pub fn append_record(&mut self, rec: &Record<'_>) -> Result<u64, AppendError> {
        rec.validate().map_err(AppendError::NotARecord)?;
        let len = rec.encoded_len();
        self.make_room(len)?;
        let at = self.end;
        let mut qpn = [0u8; 4];
        let (hdr, body) = rec.parts(&mut qpn);
        self.write_at(at, &hdr);
        self.write_at(at + RECORD_HEADER_LEN as u64, body[0]);
        self.write_at(at + (RECORD_HEADER_LEN + body[0].len()) as u64, body[1]);
        self.note_start(at);
        self.end += len as u64;
        Ok(at)
    }

    /// True when `offset` is held and is a record boundary (or the end).
    /// Walks at most 64 KiB (the distance between its marks) plus one record.
    pub fn is_boundary(&self, offset: u64) -> bool {
        if offset < self.start || offset > self.end {
            return false;
        }
        let i = self.marks.partition_point(|&m| m <= offset);
        let mut pos = if i == 0 {
            self.start
        } else {
            self.marks[i - 1]
        };
        while pos < offset {
            match self.record_len_at(pos) {
                Ok(len) => pos += len as u64,
                Err(_) => return false,
            }
        }
        pos == offset
    }

    /// Copies the whole records starting at boundary `from` that fit into
    /// `out`. An empty chunk means `from` is the end. A first record longer
    /// than `out` gives [`ReadError::RecordTooLarge`].
    pub fn read_into(&self, from: u64, out: &mut [u8]) -> Result<Chunk, ReadError> {
        self.check_range(from)?;
        let mut pos = from;
        let mut records = 0u32;
        while pos < self.end {
            let len = self.record_len_at(pos).map_err(ReadError::Corrupt)?;
            let used = (pos - from) as usize;
            if used + len > out.len() {
                if records == 0 {
                    return Err(ReadError::RecordTooLarge {
                        end: pos + len as u64,
                    });
                }
                break;
            }
            pos += len as u64;
            records += 1;
        }
        let len = (pos - from) as usize;
        self.read_at(from, &mut out[..len]);
        Ok(Chunk { len, records })
    }

    /// Copies exactly the bytes `[from, from + out.len())`, record boundaries
    /// or not (resends, and the pieces of a record split across segments).
    pub fn read_raw(&self, from: u64, out: &mut [u8]) -> Result<(), ReadError> {
        self.check_range(from)?;
        if from + out.len() as u64 > self.end {
            return Err(ReadError::Future { end: self.end });
        }
        self.read_at(from, out);
        Ok(())
    }

    /// End offset of the record starting at boundary `at`.
    pub fn record_end(&self, at: u64) -> Result<u64, ReadError> {
        self.check_range(at)?;
        if at == self.end {
            return Err(ReadError::Future { end: self.end });
        }
        let len = self.record_len_at(at).map_err(ReadError::Corrupt)?;
        Ok(at + len as u64)
    }

    fn check_range(&self, from: u64) -> Result<(), ReadError> {
        if from < self.start {
            return Err(ReadError::TooOld { oldest: self.start });
        }
        if from > self.end {
            return Err(ReadError::Future { end: self.end });
        }
        Ok(())
    }

    /// Length of the record starting at `pos` (held), from its header.
    fn record_len_at(&self, pos: u64) -> Result<usize, RecordError> {
        if pos + RECORD_HEADER_LEN as u64 > self.end {
            return Err(RecordError::Truncated {
                need: RECORD_HEADER_LEN,
                have: (self.end - pos) as usize,
            });
        }
        let mut h = [0u8; RECORD_HEADER_LEN];
        self.read_at(pos, &mut h);
        let len =
            RECORD_HEADER_LEN + usize::from(h[1]) + usize::from(u16::from_le_bytes([h[2], h[3]]));
        if pos + len as u64 > self.end {
            return Err(RecordError::Truncated {
                need: len,
                have: (self.end - pos) as usize,
            });
        }
        Ok(len)
    }

    /// Evicts whole records until `len` more bytes fit.
    fn make_room(&mut self, len: usize) -> Result<(), AppendError> {
        if len > self.buf.len() {
            return Err(AppendError::NoRoom);
        }
        if let Some(pin) = self.pin {
            if self.room_above(pin) < len {
                return Err(AppendError::NoRoom);
            }
        }
        while self.buf.len() - ((self.end - self.start) as usize) < len {
            match self.record_len_at(self.start) {
                Ok(n) => {
                    self.start += n as u64;
                    self.evicted_records += 1;
                }
                // Unreachable for bytes appended by this type; recover by
                // dropping everything rather than panicking.
                Err(_) => self.start = self.end,
            }
        }
        while self.marks.front().is_some_and(|&m| m < self.start) {
            self.marks.pop_front();
        }
        Ok(())
    }

    /// Records a mark when the record at `at` is far enough from the last.
    fn note_start(&mut self, at: u64) {
        let far = self
            .marks
            .back()
            .map_or(at >= self.start + MARK_INTERVAL, |&m| {
                at >= m + MARK_INTERVAL
            });
        if far {
            if self.marks.len() == self.marks.capacity() {
                self.marks.pop_front();
            }
            self.marks.push_back(at);
        }
    }

    fn write_at(&mut self, at: u64, src: &[u8]) {
        let cap = self.buf.len();
        let i = (at % cap as u64) as usize;
        let first = src.len().min(cap - i);
        self.buf[i..i + first].copy_from_slice(&src[..first]);
        self.buf[..src.len() - first].copy_from_slice(&src[first..]);
    }

    fn read_at(&self, at: u64, out: &mut [u8]) {
        let cap = self.buf.len();
        let i = (at % cap as u64) as usize;
        let first = out.len().min(cap - i);
        out[..first].copy_from_slice(&self.buf[i..i + first]);
        let rest = out.len() - first;
        out[first..].copy_from_slice(&self.buf[..rest]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::RecordReader;
    use proptest::prelude::*;

    fn put(k: u8, vlen: usize) -> Vec<u8> {
        let v = vec![k; vlen];
        let r = Record::Put {
            key: &[k],
            value: &v,
        };
        let mut b = vec![0; r.encoded_len()];
        r.encode_into(&mut b).unwrap();
        b
    }

    proptest! {
        /// Against a model (the whole stream kept in a Vec): offsets, eviction
        /// at record boundaries, reads of whole records, TooOld and Future.
        #[test]
        fn model(sizes in prop::collection::vec(0usize..3000, 1..200),
                 cap in 0usize..200_000, base in 0u64..1_000_000,
                 reads in prop::collection::vec((0u64..400_000, 1usize..9000), 1..30)) {
            let mut b = Backlog::new(cap, base);
            let mut all: Vec<u8> = Vec::new();
            let mut starts = Vec::new();
            for (i, &s) in sizes.iter().enumerate() {
                let rec = put(i as u8, s);
                let at = b.append(&rec).unwrap();
                prop_assert_eq!(at, base + all.len() as u64);
                starts.push(at);
                all.extend_from_slice(&rec);
            }
            prop_assert_eq!(b.end(), base + all.len() as u64);
            prop_assert!(b.end() - b.start() <= b.capacity() as u64);
            prop_assert!(starts.contains(&b.start()) || b.start() == b.end());
            // Every held boundary is one; a byte inside a record is not.
            for &s in &starts {
                prop_assert_eq!(b.is_boundary(s), s >= b.start());
                if s >= b.start() && s + 5 < b.end() && !starts.contains(&(s + 1)) {
                    prop_assert!(!b.is_boundary(s + 1));
                }
            }
            prop_assert!(b.is_boundary(b.end()));
            let mut out = vec![0u8; 9000];
            for &(pick, max) in &reads {
                let from = starts[(pick as usize) % starts.len()];
                match b.read_into(from, &mut out[..max]) {
                    Err(ReadError::TooOld { oldest }) => {
                        prop_assert!(from < b.start());
                        prop_assert_eq!(oldest, b.start());
                    }
                    Err(ReadError::RecordTooLarge { end }) => {
                        prop_assert!(end - from > max as u64);
                    }
                    Ok(c) => {
                        let off = (from - base) as usize;
                        prop_assert_eq!(&out[..c.len], &all[off..off + c.len]);
                        prop_assert_eq!(RecordReader::new(&out[..c.len]).count(), c.records as usize);
                        let next = from + c.len as u64;
                        prop_assert!(next == b.end() || starts.contains(&next));
                        if next < b.end() {
                            prop_assert!(b.record_end(next).unwrap() - from > max as u64);
                        }
                    }
                    Err(e) => prop_assert!(false, "{:?}", e),
                }
            }
            prop_assert_eq!(b.read_into(b.end() + 1, &mut out), Err(ReadError::Future { end: b.end() }));
        }
    }

    #[test]
    fn pin_keeps_unacked_bytes() {
        let mut b = Backlog::new(0, 0);
        let big = put(1, 30_000);
        b.set_pin(Some(0));
        b.append(&big).unwrap();
        b.append(&big).unwrap();
        assert_eq!(b.room_above(0), b.capacity() - 2 * big.len());
        assert_eq!(b.append(&big), Err(AppendError::NoRoom));
        b.set_pin(Some(big.len() as u64));
        assert_eq!(b.append(&big), Ok(2 * big.len() as u64));
        assert_eq!(b.start(), big.len() as u64);
        assert_eq!(b.evicted_records(), 1);
    }

    #[test]
    fn append_refuses_non_records() {
        let mut b = Backlog::new(0, 0);
        let mut rec = put(1, 3);
        rec.push(0);
        assert!(matches!(b.append(&rec), Err(AppendError::NotARecord(_))));
        assert!(matches!(
            b.append(&[9, 0, 0, 0]),
            Err(AppendError::NotARecord(_))
        ));
        assert_eq!(b.end(), 0);
        let at = b
            .append_record(&Record::QpState {
                qpn: 3,
                bytes: b"xy",
            })
            .unwrap();
        assert_eq!(b.record_end(at), Ok(10));
        let mut raw = [0u8; 10];
        b.read_raw(0, &mut raw).unwrap();
        assert_eq!(raw, [3, 4, 2, 0, 3, 0, 0, 0, b'x', b'y']);
        assert_eq!(b.read_raw(1, &mut raw), Err(ReadError::Future { end: 10 }));
        assert_ne!(random_repl_id(), 0);
    }
}
