//! Joining a replica: the master's answer to a HELLO (partial or full
//! resync) and the full sync's scan stream.
//!
//! # Partial or full
//!
//! [`decide`]: a replica whose data follows the master's current replication
//! id (or the id the master followed before its promotion, up to the offset
//! where it took over) at an offset the backlog still holds as a record
//! boundary continues from there (partial). Anything else — no id, another
//! id, an offset evicted, in the future or inside a record — gets a full sync.
//! A HELLO from a later epoch than the master's is refused: this master is
//! stale and must not feed anyone.
//!
//! # Full sync while serving
//!
//! The master fixes `live_from` = the stream's end and asks every worker to
//! scan: each worker pushes a `ScanBegin(session)` marker, one PUT per key it
//! holds (the value current when the scan reaches it), interleaved with its
//! live mutations, and a `ScanEnd(session)`. The replica applies the scan
//! stream, then the live stream from `live_from`. That is consistent because
//! records are post-images and the scan started after `live_from` was fixed:
//! for every key, the last record the replica applies is the last live
//! record at or after `live_from` if there is one (the newest value), and
//! otherwise the scan's, which no later mutation changed.
//!
//! Scan records travel in the same log rings as live ones, so the replication
//! lcore must never stop draining a ring: [`FullSync`] grants each worker scan
//! credit (cumulative bytes, compared with
//! [`crate::log::LogProducer::scan_pushed`]) only for room the scan buffer
//! surely has, and the buffer keeps every byte a member replica has not
//! acknowledged (its pin).

use crate::backlog::{AppendError, Backlog};
use crate::messages::Hello;
use crate::record::MAX_RECORD_LEN;

/// The replication ids a master answers for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplIds {
    /// Its own id.
    pub current: u64,
    /// The id it followed as a replica before its promotion, and the live
    /// offset up to which its stream equals that master's.
    pub previous: Option<(u64, u64)>,
}

/// The master's answer to a HELLO.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// The live stream from `from`.
    Partial {
        /// The replica's offset.
        from: u64,
    },
    /// A full sync.
    Full,
    /// This master's epoch is older than the replica's: refuse.
    Refuse,
}

/// Decides how replica `hello` joins a master at `epoch` with `ids` and
/// `backlog`.
pub fn decide(hello: &Hello, ids: &ReplIds, epoch: u64, backlog: &Backlog) -> Decision {
    if hello.epoch > epoch {
        return Decision::Refuse;
    }
    let known = hello.repl_id != 0
        && (hello.repl_id == ids.current
            || ids
                .previous
                .is_some_and(|(id, until)| hello.repl_id == id && hello.offset <= until));
    if known && backlog.is_boundary(hello.offset) {
        Decision::Partial { from: hello.offset }
    } else {
        Decision::Full
    }
}

/// Scan progress of one worker in the current session.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scan {
    NotStarted,
    Scanning,
    Done,
}

#[derive(Clone, Copy, Debug)]
struct Worker {
    /// Cumulative scan bytes granted (all sessions).
    granted: u64,
    /// Cumulative scan bytes drained (all sessions).
    received: u64,
    scan: Scan,
}

/// Why the scan stream failed; the session must be started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncError {
    /// A worker sent scan bytes beyond its grant (a bug in the worker).
    OverGrant,
    /// A worker index out of range.
    NoSuchWorker,
}

/// The full sync's scan stream and the workers' scan credit. Lives as long
/// as the master; one session at a time.
#[derive(Debug)]
pub struct FullSync {
    buffer: Backlog,
    workers: Vec<Worker>,
    session: u32,
    active: bool,
    live_from: u64,
    per_worker: u64,
}

impl FullSync {
    /// A scan buffer of `capacity` bytes (raised to two of the largest
    /// records per worker) for `workers` workers. Allocates once, here.
    pub fn new(capacity: usize, workers: usize) -> Self {
        let workers = workers.max(1);
        let capacity = capacity.max(2 * workers * MAX_RECORD_LEN);
        FullSync {
            buffer: Backlog::new(capacity, 0),
            workers: vec![
                Worker {
                    granted: 0,
                    received: 0,
                    scan: Scan::NotStarted,
                };
                workers
            ],
            session: 0,
            active: false,
            live_from: 0,
            per_worker: (capacity / (2 * workers)) as u64,
        }
    }

    /// Starts session `session` (ask the workers to scan after this): the
    /// scan stream restarts at 0 and the live stream continues from
    /// `live_from` (the backlog's end now).
    pub fn begin(&mut self, session: u32, live_from: u64) {
        self.session = session;
        self.active = true;
        self.live_from = live_from;
        self.buffer.reset(0);
        self.buffer.set_pin(Some(0));
        for w in &mut self.workers {
            w.scan = Scan::NotStarted;
        }
    }

    /// Ends the session (completed and shipped, or abandoned). Scan records
    /// of it still in the rings are dropped when drained.
    pub fn end(&mut self) {
        self.active = false;
    }

    /// True between [`FullSync::begin`] and [`FullSync::end`].
    pub fn is_active(&self) -> bool {
        self.active
    }

    /// The current session id.
    pub fn session(&self) -> u32 {
        self.session
    }

    /// Where the live stream continues after this session's scan.
    pub fn live_from(&self) -> u64 {
        self.live_from
    }

    /// The scan stream (for [`crate::shipper::Shipper::poll`]).
    pub fn stream(&self) -> &Backlog {
        &self.buffer
    }

    /// True when every worker's scan ended (and was drained).
    pub fn complete(&self) -> bool {
        self.active && self.workers.iter().all(|w| w.scan == Scan::Done)
    }

    /// Recomputes the grants: `pin` is the lowest scan offset a member
    /// replica has not acknowledged (bytes below it may be evicted). Publish
    /// [`FullSync::grant`] to each worker afterwards.
    pub fn refresh_grants(&mut self, pin: u64) {
        self.buffer.set_pin(Some(pin));
        let outstanding: u64 = self
            .workers
            .iter()
            .map(|w| w.granted.saturating_sub(w.received))
            .sum();
        let mut budget = (self.buffer.room_above(pin) as u64).saturating_sub(outstanding);
        for w in &mut self.workers {
            let have = w.granted.saturating_sub(w.received);
            let add = self.per_worker.saturating_sub(have).min(budget);
            w.granted += add;
            budget -= add;
        }
    }

    /// Worker `w`'s cumulative scan grant.
    pub fn grant(&self, w: usize) -> u64 {
        self.workers.get(w).map_or(0, |x| x.granted)
    }

    /// A `ScanBegin(session)` drained from worker `w`'s ring.
    pub fn on_scan_begin(&mut self, w: usize, session: u32) -> Result<(), SyncError> {
        let active = self.active && session == self.session;
        let x = self.workers.get_mut(w).ok_or(SyncError::NoSuchWorker)?;
        if active {
            x.scan = Scan::Scanning;
        }
        Ok(())
    }

    /// A scan record drained from worker `w`'s ring (its plain encoding).
    pub fn on_scan(&mut self, w: usize, record: &[u8]) -> Result<(), SyncError> {
        let active = self.active;
        let x = self.workers.get_mut(w).ok_or(SyncError::NoSuchWorker)?;
        x.received += record.len() as u64;
        if x.received > x.granted {
            return Err(SyncError::OverGrant);
        }
        if !(active && x.scan == Scan::Scanning) {
            return Ok(());
        }
        match self.buffer.append(record) {
            Ok(_) => Ok(()),
            Err(AppendError::NoRoom) => Err(SyncError::OverGrant),
            // Records from a log ring were validated when drained.
            Err(AppendError::NotARecord(_)) => Ok(()),
        }
    }

    /// A `ScanEnd(session)` drained from worker `w`'s ring.
    pub fn on_scan_end(&mut self, w: usize, session: u32) -> Result<(), SyncError> {
        let active = self.active && session == self.session;
        let x = self.workers.get_mut(w).ok_or(SyncError::NoSuchWorker)?;
        if active && x.scan == Scan::Scanning {
            x.scan = Scan::Done;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::{log_ring, LogItem, PushError};
    use crate::record::Record;

    fn hello(repl_id: u64, offset: u64, epoch: u64) -> Hello {
        Hello {
            node_id: 2,
            repl_id,
            offset,
            epoch,
            nonce: 1,
            region_va: 0,
            rkey: 0,
            slot_size: 1500,
            credits: 32,
            first_psn: 0,
        }
    }

    #[test]
    fn partial_or_full() {
        let mut b = Backlog::new(0, 100);
        for i in 0..1000u32 {
            b.append_record(&Record::Put {
                key: &i.to_le_bytes(),
                value: &[0u8; 100],
            })
            .unwrap();
        }
        let start = b.start();
        assert!(start > 100, "the backlog evicted its oldest records");
        let ids = ReplIds {
            current: 9,
            previous: Some((8, start + 108)),
        };
        let d = |h: Hello| decide(&h, &ids, 5, &b);
        assert_eq!(d(hello(9, start, 5)), Decision::Partial { from: start });
        assert_eq!(d(hello(9, b.end(), 4)), Decision::Partial { from: b.end() });
        assert_eq!(
            d(hello(9, start + 108, 5)),
            Decision::Partial { from: start + 108 }
        );
        assert_eq!(d(hello(9, start + 1, 5)), Decision::Full, "inside a record");
        assert_eq!(d(hello(9, start - 108, 5)), Decision::Full, "evicted");
        assert_eq!(d(hello(9, b.end() + 108, 5)), Decision::Full, "future");
        assert_eq!(d(hello(0, start, 5)), Decision::Full, "no id");
        assert_eq!(d(hello(7, start, 5)), Decision::Full, "other id");
        assert_eq!(
            d(hello(8, start + 108, 5)),
            Decision::Partial { from: start + 108 }
        );
        assert_eq!(
            d(hello(8, start + 216, 5)),
            Decision::Full,
            "past the takeover"
        );
        assert_eq!(d(hello(9, start, 6)), Decision::Refuse);
    }

    #[test]
    fn grants_bound_the_scan_buffer() {
        let mut fs = FullSync::new(0, 2);
        let cap = fs.stream().capacity() as u64;
        fs.begin(1, 500);
        fs.refresh_grants(0);
        assert_eq!(fs.grant(0), cap / 4);
        assert_eq!(fs.grant(1), cap / 4);
        let (mut p, mut c) = log_ring(1 << 20);
        let v = vec![1u8; 1000];
        p.try_push_scan_begin(1).unwrap();
        let mut pushed = 0;
        let mut i = 0u32;
        loop {
            let key = i.to_le_bytes();
            let rec = Record::Put {
                key: &key,
                value: &v,
            };
            match p.try_push_scan(&rec, fs.grant(0)) {
                Ok(()) => pushed += 1,
                Err(PushError::NoCredit) => break,
                Err(e) => panic!("{e}"),
            }
            i += 1;
        }
        p.try_push_scan_end(1).unwrap();
        assert_eq!(pushed, (cap / 4) / 1008);
        c.drain(usize::MAX, |item| {
            match item {
                LogItem::ScanBegin(s) => fs.on_scan_begin(0, s).unwrap(),
                LogItem::Scan(b) => fs.on_scan(0, b).unwrap(),
                LogItem::ScanEnd(s) => fs.on_scan_end(0, s).unwrap(),
                LogItem::Live(_) | LogItem::Wait { .. } | LogItem::Span { .. } => panic!(),
            }
            true
        })
        .unwrap();
        assert!(!fs.complete(), "worker 1 has not scanned");
        fs.on_scan_begin(1, 1).unwrap();
        fs.on_scan_end(1, 1).unwrap();
        assert!(fs.complete());
        assert_eq!(fs.stream().end(), pushed * 1008);
        // Nothing acknowledged: worker 0 gets only what the buffer surely has.
        fs.refresh_grants(0);
        let outstanding = fs.grant(1) + (fs.grant(0) - pushed * 1008);
        assert!(outstanding <= fs.stream().room_above(0) as u64);
        // A stale session's records are counted but not kept.
        fs.on_scan_begin(0, 0).unwrap();
        assert_eq!(fs.on_scan(0, &[1, 0, 0, 0, 7]), Ok(()));
        assert_eq!(fs.stream().end(), pushed * 1008);
        assert_eq!(fs.on_scan(5, &[]), Err(SyncError::NoSuchWorker));
    }
}
