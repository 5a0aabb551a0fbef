//! A master worker's replication log: its mutation tap writes every post-image into
//! the ring the replication lcore drains, and between bursts it runs its part of a
//! full sync (the scan, `repl::scan`) into the same ring.

use super::scan::{ScanDriver, ScanShared};
use crate::mutation::MutationSink;
use crate::repl::completion::ClientRecords;
use kvengine::Engine;
use kvrepl::log::LogProducer;
use kvrepl::Record;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Ring bytes kept free for scan markers (a post-image never takes them).
const MARKER_SLACK: usize = 64;

/// A master worker's end of its replication log ring.
pub struct ReplLog {
    log: LogProducer,
    scan: ScanDriver,
    shared: Arc<ScanShared>,
    /// Post-images the ring refused (never expected: the server reserves room
    /// before serving a request; counted so a bug cannot hide).
    lost: Arc<AtomicU64>,
    /// Ring position right after the last post-image pushed (scan records excluded).
    live_end: u64,
}

impl ReplLog {
    /// A log over `log`, scanning on `shared`'s requests, counting losses in `lost`.
    pub fn new(log: LogProducer, shared: Arc<ScanShared>, lost: Arc<AtomicU64>) -> ReplLog {
        ReplLog {
            log,
            scan: ScanDriver::default(),
            shared,
            lost,
            live_end: 0,
        }
    }

    fn push(&mut self, rec: &Record<'_>) {
        if self.shared.paused.load(Ordering::Relaxed) {
            return;
        }
        if self.log.try_push(rec).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        self.live_end = self.log.pushed();
    }
}

impl MutationSink for ReplLog {
    fn room(&self) -> usize {
        if self.shared.paused.load(Ordering::Relaxed) {
            return usize::MAX;
        }
        self.log.free_bytes().saturating_sub(MARKER_SLACK)
    }

    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.push(&Record::Put { key, value });
    }

    fn delete(&mut self, key: &[u8]) {
        self.push(&Record::Delete { key });
    }

    fn group(&mut self, bytes: u32) {
        self.push(&Record::Group { bytes });
    }

    fn stream_put(&mut self, key: &[u8], value: &[u8]) {
        self.push(&Record::Put { key, value });
    }

    fn stream_delete(&mut self, key: &[u8]) {
        self.push(&Record::Delete { key });
    }

    // The record is in the coordinator's ring.
    fn local_put(&mut self, _key: &[u8], _value: &[u8]) {}

    fn local_delete(&mut self, _key: &[u8]) {}

    fn qp_state(&mut self, qpn: u32, blob: &[u8]) {
        self.push(&Record::QpState { qpn, bytes: blob });
    }

    fn wait_for(&mut self, ring: u32, position: u64) {
        if self.shared.paused.load(Ordering::Relaxed) {
            return;
        }
        if self.log.try_push_wait(ring, position).is_err() {
            self.lost.fetch_add(1, Ordering::Relaxed);
        }
        // A response held for this position is released only after the wait.
        self.live_end = self.log.pushed();
    }

    fn position(&self) -> u64 {
        self.live_end
    }

    fn tick(&mut self, engine: &Engine, clients: &mut dyn ClientRecords) -> bool {
        let busy = self.scan.step(&self.shared, engine, clients, &mut self.log);
        // Once per worker iteration: a sleeping replication lcore wakes for what this
        // iteration pushed (its requests' post-images and this scan step's records).
        self.log.notify();
        busy
    }
}
