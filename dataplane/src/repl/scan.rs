//! A master worker's part in a full sync: on request of the replication lcore it
//! walks its whole engine a few buckets per loop iteration and pushes every KV as a
//! scan record into its log ring, between the live post-images of the writes it keeps
//! serving. The replica applies the scan stream, then the live stream from the offset
//! the master noted before asking: every write after that offset is in the live
//! stream, in order, as a post-image, so whatever the scan saw of a key, the key ends
//! with its last live value (docs/REPLICATION.md, "Full sync").
//!
//! Flow control: the replication lcore grants each worker a cumulative number of scan
//! bytes (what its scan backlog can take); the worker never pushes beyond it, so the
//! live records behind scan records in the ring can always be drained.

use kvengine::{Engine, ScanCursor, ScanStep};
use kvrepl::log::LogProducer;
use kvrepl::Record;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

/// Free ring bytes and grant a scan step needs before it starts: a step visits whole
/// bucket chains and must be able to push every KV it finds.
pub const STEP_RESERVE: usize = 256 << 10;
/// Primary buckets one step visits at most.
pub const STEP_BUCKETS: usize = 8;

/// What the replication lcore and one master worker share about full-sync scans.
#[derive(Debug, Default)]
pub struct ScanShared {
    /// The scan session requested (0: none). A new value starts a new scan.
    pub request: AtomicU32,
    /// Cumulative scan bytes the worker may push (compared with its
    /// `LogProducer::scan_pushed`).
    pub grant: AtomicU64,
    /// The last session this worker gave up (a chain larger than the reserve, or a
    /// ring that stayed full): the replication lcore starts another.
    pub failed: AtomicU32,
    /// The worker logs nothing (room unlimited): set while the node is a replica of
    /// an etcd-managed cluster, whose workers keep a log ring for when they are
    /// promoted.
    pub paused: AtomicBool,
    /// Sync mode: the worker's log position up to which the replicas required by
    /// `min_replicas` have the stream (published by the replication lcore): responses
    /// tagged at or below it may leave (`crate::hold`).
    pub durable: AtomicU64,
}

/// One worker's scan state.
#[derive(Debug, Default)]
pub struct ScanDriver {
    session: u32,
    /// `Some` while a scan runs; `begun` once its BEGIN marker is in the ring.
    cursor: Option<ScanCursor>,
    begun: bool,
    /// The scan visited everything; its END marker is still to be pushed.
    ending: bool,
}

impl ScanDriver {
    /// Does one bounded step of the requested scan; returns whether it did work.
    pub fn step(&mut self, shared: &ScanShared, engine: &Engine, log: &mut LogProducer) -> bool {
        let req = shared.request.load(Ordering::Acquire);
        if req != 0 && req != self.session {
            // A new session replaces whatever ran.
            *self = ScanDriver {
                session: req,
                cursor: Some(ScanCursor::START),
                begun: false,
                ending: false,
            };
        }
        let Some(cursor) = self.cursor else {
            return false;
        };
        if !self.begun {
            if log.try_push_scan_begin(self.session).is_err() {
                return false;
            }
            self.begun = true;
        }
        if self.ending {
            if log.try_push_scan_end(self.session).is_ok() {
                self.cursor = None;
                self.ending = false;
            }
            return true;
        }
        let grant = shared.grant.load(Ordering::Acquire);
        let granted = grant.saturating_sub(log.scan_pushed()) as usize;
        if log.free_bytes() < STEP_RESERVE || granted < STEP_RESERVE {
            return false;
        }
        let mut failed = false;
        let step = engine.scan(cursor, STEP_BUCKETS, |key, value| {
            if !failed
                && log
                    .try_push_scan(&Record::Put { key, value }, grant)
                    .is_err()
            {
                failed = true;
            }
        });
        if failed {
            shared.failed.store(self.session, Ordering::Release);
            self.cursor = None;
            return true;
        }
        match step {
            ScanStep::More(c) => self.cursor = Some(c),
            ScanStep::Done => {
                self.ending = true;
                if log.try_push_scan_end(self.session).is_ok() {
                    self.cursor = None;
                    self.ending = false;
                }
            }
        }
        true
    }

    /// True while a scan runs.
    pub fn active(&self) -> bool {
        self.cursor.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvengine::{EngineConfig, Region};
    use kvrepl::log::{log_ring, LogItem};
    use std::collections::HashMap;

    #[test]
    fn scan_pushes_every_kv_between_markers_within_the_grant() {
        let cfg = EngineConfig {
            mem_bytes: 1 << 20,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(Region::owned(1 << 20), &cfg).unwrap();
        let mut want = HashMap::new();
        for i in 0..500u32 {
            let k = format!("key{i}").into_bytes();
            let v = vec![i as u8; (i % 40) as usize];
            assert_eq!(e.put(&k, &v), kvengine::Status::Ok);
            want.insert(k, v);
        }
        let (mut p, mut c) = log_ring(2 << 20);
        let shared = ScanShared::default();
        let mut d = ScanDriver::default();
        assert!(!d.step(&shared, &e, &mut p), "nothing requested");
        shared.request.store(7, Ordering::Release);
        // No grant: the scan begins but pushes no record.
        d.step(&shared, &e, &mut p);
        assert_eq!(p.scan_pushed(), 0);
        shared.grant.store(u64::MAX / 2, Ordering::Release);
        while d.active() {
            d.step(&shared, &e, &mut p);
        }
        let mut got = HashMap::new();
        let (mut begin, mut end) = (None, None);
        c.drain(usize::MAX, |it| {
            match it {
                LogItem::ScanBegin(s) => begin = Some(s),
                LogItem::ScanEnd(s) => end = Some(s),
                LogItem::Scan(b) => {
                    if let Ok((Record::Put { key, value }, _)) = Record::decode(b) {
                        got.insert(key.to_vec(), value.to_vec());
                    }
                }
                LogItem::Live(_) | LogItem::Wait { .. } | LogItem::Span { .. } => {
                    panic!("no live record expected")
                }
            }
            true
        })
        .unwrap();
        assert_eq!((begin, end), (Some(7), Some(7)));
        assert_eq!(got, want);
    }
}
