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
//!
//! Before the KVs the scan carries the worker's completion records
//! ([`ClientRecords`], `crate::repl::completion`): the effects of every request it executed
//! are in the scan, so the requests must be known to the synced node too, or a client
//! resending one there after a failover would have it executed twice (the nemesis,
//! seed 409: a fetch-add counted twice by a node full-synced from a chain relay).

pub use crate::repl::completion::{ClientRecords, NoClients};
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
    /// tagged at or below it may leave (`crate::repl::hold`).
    pub durable: AtomicU64,
}

/// Encoded bytes of completion records one scan step pushes at most (well inside
/// [`STEP_RESERVE`], whose free ring bytes also pay the ring's framing).
const CLIENT_STEP_BYTES: usize = STEP_RESERVE / 2;

// A client's records as intents only (its incarnation and one INTENT per request of
// the window) always fit one step: a full sync never stalls on a client.
const _: () = {
    const QP_RECORD: usize = kvrepl::RECORD_HEADER_LEN + 4;
    let intent = QP_RECORD + crate::repl::completion::INTENT_LEN;
    let opened = QP_RECORD + crate::repl::completion::OPENED_LEN;
    assert!(opened + kvwire::transport::MAX_CREDITS as usize * intent <= CLIENT_STEP_BYTES);
};

/// One worker's scan state.
#[derive(Debug, Default)]
pub struct ScanDriver {
    session: u32,
    /// `Some` while a scan runs; `begun` once its BEGIN marker is in the ring.
    cursor: Option<ScanCursor>,
    /// The next client slot whose completion records are to be pushed (before the
    /// KVs); `None` once all are.
    client: Option<usize>,
    begun: bool,
    /// The scan visited everything; its END marker is still to be pushed.
    ending: bool,
}

impl ScanDriver {
    /// Does one bounded step of the requested scan (the completion records of
    /// `clients` first, then the engine's KVs); returns whether it did work.
    pub fn step(
        &mut self,
        shared: &ScanShared,
        engine: &Engine,
        clients: &mut dyn ClientRecords,
        log: &mut LogProducer,
    ) -> bool {
        let req = shared.request.load(Ordering::Acquire);
        if req != 0 && req != self.session {
            // A new session replaces whatever ran.
            *self = ScanDriver {
                session: req,
                cursor: Some(ScanCursor::START),
                client: Some(0),
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
        if let Some(first) = self.client {
            match push_clients(clients, first, grant, log) {
                Ok(next) => self.client = next,
                Err(()) => {
                    shared.failed.store(self.session, Ordering::Release);
                    self.cursor = None;
                }
            }
            return true;
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

/// Pushes the completion records of client slots `first..` as scan records until a
/// step's worth ([`CLIENT_STEP_BYTES`]); returns the next slot (`None`: all done), or
/// `Err` if the ring refused a record (the session is given up).
fn push_clients(
    clients: &mut dyn ClientRecords,
    first: usize,
    grant: u64,
    log: &mut LogProducer,
) -> Result<Option<usize>, ()> {
    let cost = |_: u32, b: &[u8]| Record::QpState { qpn: 0, bytes: b }.encoded_len();
    let mut used = 0usize;
    let mut i = first;
    while i < clients.slots() {
        let mut need = 0usize;
        clients.emit(i, true, &mut |q, b| need += cost(q, b));
        let frames = used + need <= CLIENT_STEP_BYTES;
        if !frames && used > 0 {
            break; // the next step
        }
        let mut failed = false;
        clients.emit(i, frames, &mut |qpn, bytes| {
            failed |= log
                .try_push_scan(&Record::QpState { qpn, bytes }, grant)
                .is_err();
        });
        if failed {
            return Err(());
        }
        used += need;
        i += 1;
    }
    Ok((i < clients.slots()).then_some(i))
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
        assert!(
            !d.step(&shared, &e, &mut NoClients, &mut p),
            "nothing requested"
        );
        shared.request.store(7, Ordering::Release);
        // No grant: the scan begins but pushes no record.
        d.step(&shared, &e, &mut NoClients, &mut p);
        assert_eq!(p.scan_pushed(), 0);
        shared.grant.store(u64::MAX / 2, Ordering::Release);
        while d.active() {
            d.step(&shared, &e, &mut NoClients, &mut p);
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

    /// Clients whose records are `(intents-only bytes, with-frames bytes)` long.
    struct Fake(Vec<(usize, usize)>);

    impl ClientRecords for Fake {
        fn slots(&self) -> usize {
            self.0.len()
        }
        fn emit(&mut self, i: usize, frames: bool, emit: &mut dyn FnMut(u32, &[u8])) {
            let (small, big) = self.0[i];
            emit(
                i as u32 + 1,
                &vec![frames as u8; if frames { big } else { small }],
            );
        }
    }

    #[test]
    fn client_records_come_first_a_step_at_a_time_and_intents_only_when_too_large() {
        let cfg = EngineConfig {
            mem_bytes: 1 << 20,
            ..EngineConfig::default()
        };
        let e = Engine::new(Region::owned(1 << 20), &cfg).unwrap();
        let (mut p, mut c) = log_ring(4 << 20);
        let shared = ScanShared::default();
        shared.grant.store(u64::MAX / 2, Ordering::Release);
        shared.request.store(1, Ordering::Release);
        // Clients of 1000-byte records: as many as fit one step, then one larger
        // than a step.
        let per_step = CLIENT_STEP_BYTES / (1000 + kvrepl::RECORD_HEADER_LEN + 4);
        let mut sizes = vec![(10, 1000); per_step + 1];
        sizes.push((20, 2 * CLIENT_STEP_BYTES));
        let mut clients = Fake(sizes);
        let mut d = ScanDriver::default();
        let mut steps = 0;
        while d.active() || steps == 0 {
            d.step(&shared, &e, &mut clients, &mut p);
            steps += 1;
        }
        let mut seen = Vec::new();
        c.drain(usize::MAX, |it| {
            if let LogItem::Scan(b) = it {
                if let Ok((Record::QpState { qpn, bytes }, _)) = Record::decode(b) {
                    seen.push((qpn, bytes.len(), bytes[0]));
                }
            }
            true
        })
        .unwrap();
        let mut want: Vec<_> = (1..=per_step as u32 + 1).map(|q| (q, 1000, 1)).collect();
        want.push((per_step as u32 + 2, 20, 0));
        assert_eq!(seen, want, "in order, the oversized one as intents only");
        assert!(
            steps >= 4,
            "three steps of client records, then the engine: {steps}"
        );
    }
}
