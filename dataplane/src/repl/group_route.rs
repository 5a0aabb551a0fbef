//! A replica's routing of its master's records to the workers' apply rings, with a
//! transaction (a GROUP record and the records it covers) routed whole.
//!
//! Every record goes to the ring of the worker owning its key (`kvwire::partition`),
//! so a key's records stay in order in one ring. A transaction is held back in a
//! buffer until all of its records arrived (it may straddle segments), then:
//!
//! * its keys all in one partition: GROUP and records into that worker's ring, which
//!   applies them in one go (`repl::apply`);
//! * its keys in several partitions (this node's partitions need not be the
//!   master's): into the ring of the lowest of them, the *coordinator*, behind a WAIT
//!   for each other one's ring at its current end and a SPAN marker naming them; each
//!   other ring gets a WAIT for the coordinator's ring past the transaction. The
//!   coordinator applies it once the others applied what came before, with their
//!   workers parked (`repl::apply::apply_span`); they apply what follows only after.
//!
//! The log file and a chain node's relay take every record as it arrives.
//!
//! A transaction larger than the buffer is routed record by record (counted in
//! [`GroupBuf::split`]): applied in order, not at once. A transaction cut short by a
//! new stream (a full sync, or another master's partial resync) is dropped: it was
//! never acknowledged, and its master did not apply it either.

use super::master::MasterNode;
use super::replica_log::LogFeed;
use kvrepl::applier::{Sink, SinkError};
use kvrepl::log::{LogProducer, SPAN_LEN, WAIT_LEN};
use kvrepl::{Record, GROUP_RECORD_LEN};
use kvwire::partition::partition_of_hash;

/// The largest transaction (bytes of records) routed whole.
pub const GROUP_BUF_BYTES: usize = 1 << 20;

/// A transaction's records held until the last one arrives.
pub struct GroupBuf {
    buf: Box<[u8]>,
    len: usize,
    /// Bytes of the transaction still to come (0: none is being held).
    left: usize,
    /// Its GROUP record's `bytes`.
    bytes: u32,
    /// The partitions of its keys (a bit set).
    partitions: u64,
    /// Too large for the buffer: its records go straight to their rings.
    spilled: bool,
    /// Transactions routed record by record (larger than the buffer).
    pub split: u64,
    /// Transactions dropped half received (their stream was replaced).
    pub dropped: u64,
}

impl Default for GroupBuf {
    fn default() -> Self {
        GroupBuf::new(GROUP_BUF_BYTES)
    }
}

impl GroupBuf {
    /// A buffer for transactions of up to `capacity` bytes (allocated here, once).
    pub fn new(capacity: usize) -> GroupBuf {
        GroupBuf {
            buf: vec![0u8; capacity].into_boxed_slice(),
            len: 0,
            left: 0,
            bytes: 0,
            partitions: 0,
            spilled: false,
            split: 0,
            dropped: 0,
        }
    }

    /// Ring bytes the held transaction will take, markers included, when it is
    /// routed to `rings` rings (on top of what a segment's records take).
    pub fn pending(&self, rings: usize) -> usize {
        if self.left == 0 && self.len == 0 {
            return 0;
        }
        self.len + SPAN_LEN + GROUP_RECORD_LEN + rings * WAIT_LEN
    }

    /// Forgets a transaction whose stream was replaced before its end.
    pub fn reset(&mut self) {
        if self.left > 0 {
            self.dropped += 1;
        }
        self.len = 0;
        self.left = 0;
        self.partitions = 0;
        self.spilled = false;
    }
}

/// Routes records to the workers' rings by key partition ([`GroupBuf`] for
/// transactions), and copies them into the log file's feed and (live records of a
/// chain node) the relay's stream.
pub struct Route<'a> {
    /// One apply ring per worker.
    pub rings: &'a mut [LogProducer],
    /// The log file's feed (config `replication.log_file`).
    pub log: Option<&'a mut LogFeed>,
    /// A chain node's relay.
    pub relay: Option<&'a mut MasterNode>,
    /// The transaction being received.
    pub group: &'a mut GroupBuf,
}

impl Route<'_> {
    fn partition(&self, key: &[u8]) -> usize {
        partition_of_hash(kvengine::key_hash(key), self.rings.len() as u32) as usize
    }

    fn copy_out(&mut self, rec: &Record<'_>) {
        // Completion records too: a node restarted from its log file must know the
        // requests whose effects it loads (docs/REPLICATION.md §2).
        if let Some(l) = self.log.as_deref_mut() {
            l.record(rec);
        }
        if let Some(r) = self.relay.as_deref_mut() {
            r.relay_append(rec);
        }
    }

    /// Holds `key`'s record `rec`, of the transaction being received; routes the
    /// whole transaction once it is complete.
    fn hold(&mut self, key: &[u8], rec: &Record<'_>) -> Result<(), SinkError> {
        let p = self.partition(key);
        let g = &mut *self.group;
        if g.spilled {
            self.rings[p].try_push(rec).map_err(|_| SinkError)?;
        } else {
            let n = rec
                .encode_into(&mut g.buf[g.len..])
                .map_err(|_| SinkError)?;
            g.len += n;
            g.partitions |= 1 << p;
        }
        g.left = g.left.saturating_sub(rec.encoded_len());
        if g.left == 0 {
            if g.spilled {
                g.spilled = false;
            } else {
                self.flush()?;
            }
        }
        Ok(())
    }

    /// A GROUP record: a transaction of `bytes` of records begins.
    fn begin(&mut self, bytes: u32) -> Result<(), SinkError> {
        if self.group.left > 0 && !self.group.spilled {
            // The one before was shorter than announced (not expected): what arrived
            // of it goes on record by record.
            self.group.split += 1;
            let held = std::mem::take(&mut self.group.len);
            let mut at = 0;
            while at < held {
                let (r, n) = Record::decode(&self.group.buf[at..held]).map_err(|_| SinkError)?;
                if let Record::Put { key, .. } | Record::Delete { key } = r {
                    let p = self.partition(key);
                    self.rings[p].try_push(&r).map_err(|_| SinkError)?;
                }
                at += n;
            }
        }
        let g = &mut *self.group;
        g.left = bytes as usize;
        g.bytes = bytes;
        g.len = 0;
        g.partitions = 0;
        g.spilled = bytes as usize > g.buf.len();
        if g.spilled {
            g.split += 1;
        }
        Ok(())
    }

    /// Routes the complete transaction held (module doc).
    fn flush(&mut self) -> Result<(), SinkError> {
        let g = &mut *self.group;
        let (len, bytes, parts) = (g.len, g.bytes, g.partitions);
        g.len = 0;
        g.partitions = 0;
        let c = parts.trailing_zeros().min(63) as usize;
        let others = parts & !(1u64 << c);
        let rings = &mut *self.rings;
        if c >= rings.len() {
            return Err(SinkError);
        }
        for q in bits(others) {
            let at = rings[q].pushed();
            rings[c]
                .try_push_wait(q as u32, at)
                .map_err(|_| SinkError)?;
        }
        if others != 0 {
            rings[c]
                .try_push_span(parts, bytes)
                .map_err(|_| SinkError)?;
        }
        rings[c]
            .try_push(&Record::Group { bytes })
            .map_err(|_| SinkError)?;
        let mut at = 0;
        while at < len {
            let (rec, n) = Record::decode(&g.buf[at..len]).map_err(|_| SinkError)?;
            rings[c].try_push(&rec).map_err(|_| SinkError)?;
            at += n;
        }
        let end = rings[c].pushed();
        for q in bits(others) {
            rings[q]
                .try_push_wait(c as u32, end)
                .map_err(|_| SinkError)?;
        }
        Ok(())
    }
}

/// The bits set in `m`, lowest first, as indices.
fn bits(mut m: u64) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (m != 0).then(|| {
            let b = m.trailing_zeros() as usize;
            m &= m - 1;
            b
        })
    })
}

impl Sink for Route<'_> {
    fn clear(&mut self) {
        self.group.reset();
        // The workers clear their engines when they reach this marker.
        for r in self.rings.iter_mut() {
            let _ = r.try_push_scan_begin(0);
        }
    }

    fn apply(&mut self, rec: Record<'_>) -> Result<(), SinkError> {
        match rec {
            // A transaction's records follow, contiguous in the stream.
            Record::Group { bytes } => self.begin(bytes)?,
            Record::Put { key, .. } | Record::Delete { key } if self.group.left > 0 => {
                self.hold(key, &rec)?
            }
            Record::Put { key, .. } | Record::Delete { key } => {
                let p = self.partition(key);
                self.rings[p].try_push(&rec).map_err(|_| SinkError)?
            }
            Record::QpState { qpn, .. } => {
                // To the worker that serves that QP (docs/PROTOCOL.md §7), which
                // keeps it for a RESUME after a failover (`crate::repl::completion`).
                let n = self.rings.len() as u32;
                let i = (qpn % n.max(1)) as usize;
                self.rings
                    .get_mut(i)
                    .ok_or(SinkError)?
                    .try_push(&rec)
                    .map_err(|_| SinkError)?
            }
        }
        self.copy_out(&rec);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvrepl::log::{log_ring, LogConsumer, LogItem};

    /// `n` keys `{prefix}{i}` of partition `p` of 2.
    fn keys_of(prefix: &str, p: u32, n: usize) -> Vec<Vec<u8>> {
        (0..)
            .map(|i| format!("{prefix}{i}").into_bytes())
            .filter(|k| partition_of_hash(kvengine::key_hash(k), 2) == p)
            .take(n)
            .collect()
    }

    fn items(c: &mut LogConsumer) -> Vec<String> {
        let mut out = Vec::new();
        c.drain(usize::MAX, |it| {
            out.push(match it {
                LogItem::Live(b) => match Record::decode(b).unwrap().0 {
                    Record::Put { key, .. } => format!("put {}", String::from_utf8_lossy(key)),
                    Record::Delete { key } => format!("del {}", String::from_utf8_lossy(key)),
                    Record::Group { bytes } => format!("group {bytes}"),
                    Record::QpState { qpn, .. } => format!("qp {qpn}"),
                },
                LogItem::Wait { ring, position } => format!("wait {ring}@{position}"),
                LogItem::Span { partitions, bytes } => format!("span {partitions:b} {bytes}"),
                other => format!("{other:?}"),
            });
            true
        })
        .unwrap();
        out
    }

    fn put(k: &[u8]) -> Record<'_> {
        Record::Put {
            key: k,
            value: b"v",
        }
    }

    #[test]
    fn transactions_are_routed_whole_once_complete() {
        let (a, b) = (keys_of("a", 0, 3), keys_of("b", 1, 2));
        let (p0, mut c0) = log_ring(1 << 16);
        let (p1, mut c1) = log_ring(1 << 16);
        let mut rings = [p0, p1];
        let mut group = GroupBuf::new(4096);
        let route = |r: Record<'_>, rings: &mut [LogProducer], g: &mut GroupBuf| {
            Route {
                rings,
                log: None,
                relay: None,
                group: g,
            }
            .apply(r)
            .unwrap()
        };
        // Outside a transaction: each record to its owner at once.
        route(put(&a[0]), &mut rings, &mut group);
        route(put(&b[0]), &mut rings, &mut group);
        let before1 = rings[1].pushed();
        // One partition's transaction: held until whole, then GROUP and records there.
        let one = put(&a[1]).encoded_len() + put(&a[2]).encoded_len();
        route(Record::Group { bytes: one as u32 }, &mut rings, &mut group);
        route(put(&a[1]), &mut rings, &mut group);
        assert_eq!(c0.pending_bytes(), put(&a[0]).encoded_len(), "held");
        route(put(&a[2]), &mut rings, &mut group);
        // A transaction over both partitions, arriving in two segments.
        let both = put(&a[0]).encoded_len() + put(&b[1]).encoded_len();
        route(Record::Group { bytes: both as u32 }, &mut rings, &mut group);
        route(put(&b[1]), &mut rings, &mut group);
        assert!(group.pending(2) > 0);
        route(put(&a[0]), &mut rings, &mut group);
        route(put(&b[0]), &mut rings, &mut group);
        let end0 = rings[0].pushed() as usize;
        let s0 = items(&mut c0);
        let s1 = items(&mut c1);
        assert_eq!(
            s0,
            [
                format!("put {}", String::from_utf8_lossy(&a[0])),
                format!("group {one}"),
                format!("put {}", String::from_utf8_lossy(&a[1])),
                format!("put {}", String::from_utf8_lossy(&a[2])),
                format!("wait 1@{before1}"),
                format!("span 11 {both}"),
                format!("group {both}"),
                format!("put {}", String::from_utf8_lossy(&b[1])),
                format!("put {}", String::from_utf8_lossy(&a[0])),
            ]
        );
        assert_eq!(
            s1,
            [
                format!("put {}", String::from_utf8_lossy(&b[0])),
                format!("wait 0@{end0}"),
                format!("put {}", String::from_utf8_lossy(&b[0])),
            ]
        );
    }

    #[test]
    fn a_cut_transaction_is_dropped_and_a_huge_one_goes_record_by_record() {
        let (a, b) = (keys_of("a", 0, 2), keys_of("b", 1, 2));
        let (p0, mut c0) = log_ring(1 << 16);
        let (p1, mut c1) = log_ring(1 << 16);
        let mut rings = [p0, p1];
        let mut group = GroupBuf::new(24);
        let mut r = Route {
            rings: &mut rings,
            log: None,
            relay: None,
            group: &mut group,
        };
        r.apply(Record::Group { bytes: 20 }).unwrap();
        r.apply(put(&a[0])).unwrap();
        r.group.reset();
        assert_eq!(r.group.dropped, 1);
        let two = (put(&a[1]).encoded_len() + put(&b[1]).encoded_len()) as u32;
        // Larger than the buffer (24 bytes): routed as it comes, without the group.
        r.apply(Record::Group { bytes: 2 * two }).unwrap();
        r.apply(put(&a[1])).unwrap();
        r.apply(put(&b[1])).unwrap();
        r.apply(put(&a[1])).unwrap();
        r.apply(put(&b[1])).unwrap();
        assert_eq!(r.group.split, 1);
        // After it, the next record is routed at once again.
        r.apply(put(&b[0])).unwrap();
        assert_eq!(r.group.pending(2), 0);
        assert_eq!(items(&mut c0).len(), 2);
        assert_eq!(items(&mut c1).len(), 3);
    }
}
