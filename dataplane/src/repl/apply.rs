//! A replica worker's side of replication: the records the replication lcore
//! received for this worker's partition, applied to its engine between bursts.
//!
//! The replication lcore pushes each record of the master's stream into the ring of
//! the worker that owns its key (`kvwire::partition`); the worker drains a bounded
//! number per loop iteration, applies them in order, and publishes how many ring
//! bytes it consumed, from which the replication lcore derives the stream offset all
//! workers have applied (the offset a replica acknowledges).

use crate::mutation::MutationSink;
use kvengine::Engine;
use kvrepl::log::{LogConsumer, LogItem};
use kvrepl::Record;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Counters of one worker's applier (read by telemetry).
#[derive(Debug, Default)]
pub struct ApplyStats {
    /// Ring bytes consumed so far (compared with the producer's pushed bytes).
    pub consumed: AtomicU64,
    /// Records applied.
    pub applied: AtomicU64,
    /// Records the engine refused (out of memory, too large): the replica diverges
    /// from its master; counted so an operator sees it and re-syncs.
    pub failed: AtomicU64,
    /// Ring contents that were not records (a bug): draining stopped there.
    pub corrupt: AtomicU64,
}

/// A replica worker's inbound record ring.
pub struct Applier {
    ring: LogConsumer,
    stats: Arc<ApplyStats>,
}

impl Applier {
    /// An applier draining `ring` and counting into `stats`.
    pub fn new(ring: LogConsumer, stats: Arc<ApplyStats>) -> Applier {
        Applier { ring, stats }
    }

    /// Applies up to `max` records to `engine`, each also to `tap` (a snapshot being
    /// taken on this replica) when one is installed; stops early, leaving records in
    /// the ring, while the tap lacks room. Returns how many it applied.
    #[inline]
    pub fn apply(
        &mut self,
        engine: &mut Engine,
        mut tap: Option<&mut (dyn MutationSink + 'static)>,
        max: usize,
    ) -> usize {
        if self.ring.pending_bytes() == 0 {
            return 0;
        }
        let (mut ok, mut failed) = (0u64, 0u64);
        let r = self.ring.drain(max, |item| {
            let bytes = match item {
                LogItem::Live(b) | LogItem::Scan(b) => b,
                // A full sync begins: the replica's data is replaced by the master's.
                LogItem::ScanBegin(_) => {
                    clear(engine);
                    return true;
                }
                LogItem::ScanEnd(_) => return true,
            };
            if let Some(t) = tap.as_deref() {
                if t.room() < bytes.len() {
                    return false;
                }
            }
            let status = match Record::decode(bytes) {
                Ok((Record::Put { key, value }, _)) => {
                    let s = engine.put(key, value);
                    if let (kvengine::Status::Ok, Some(t)) = (s, tap.as_deref_mut()) {
                        t.put(key, value);
                    }
                    s
                }
                Ok((Record::Delete { key }, _)) => match engine.delete(key) {
                    // Deleting an absent key leaves the same state: idempotent replay.
                    kvengine::Status::NotFound => kvengine::Status::Ok,
                    kvengine::Status::Ok => {
                        if let Some(t) = tap.as_deref_mut() {
                            t.delete(key);
                        }
                        kvengine::Status::Ok
                    }
                    s => s,
                },
                // Completion records are the transport's business, not the engine's.
                Ok((Record::QpState { .. }, _)) => kvengine::Status::Ok,
                Err(_) => kvengine::Status::ValueTooLarge,
            };
            if status == kvengine::Status::Ok {
                ok += 1;
            } else {
                failed += 1;
            }
            true
        });
        if r.is_err() {
            self.stats.corrupt.fetch_add(1, Ordering::Relaxed);
        }
        self.stats.applied.fetch_add(ok, Ordering::Relaxed);
        self.stats.failed.fetch_add(failed, Ordering::Relaxed);
        self.stats
            .consumed
            .store(self.ring.popped(), Ordering::Release);
        (ok + failed) as usize
    }
}

/// Deletes every key of `engine`, one bucket chain at a time (a full sync starts
/// from nothing). Blocks the worker for the walk: a replica that needs a full sync
/// serves nothing current anyway.
pub fn clear(engine: &mut Engine) {
    const KEYS: usize = 64;
    let mut keys = [[0u8; kvwire::MAX_KEY_LEN]; KEYS];
    let mut lens = [0usize; KEYS];
    let mut cursor = kvengine::ScanCursor::START;
    loop {
        let mut n = 0usize;
        let mut more_in_chain = false;
        let step = engine.scan(cursor, 1, |k, _| {
            if n < KEYS && k.len() <= kvwire::MAX_KEY_LEN {
                keys[n][..k.len()].copy_from_slice(k);
                lens[n] = k.len();
                n += 1;
            } else {
                more_in_chain = true;
            }
        });
        for (k, &l) in keys.iter().zip(&lens).take(n) {
            engine.delete(&k[..l]);
        }
        if more_in_chain {
            // The chain held more keys than the buffer: visit it again.
            continue;
        }
        match step {
            kvengine::ScanStep::More(c) => cursor = c,
            kvengine::ScanStep::Done => break,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvengine::{EngineConfig, Region};
    use kvrepl::log::log_ring;

    #[test]
    fn applies_in_order_and_publishes_progress() {
        let cfg = EngineConfig {
            mem_bytes: 1 << 20,
            ..EngineConfig::default()
        };
        let mut e = Engine::new(Region::owned(1 << 20), &cfg).unwrap();
        let (mut p, c) = log_ring(4096);
        let stats = Arc::new(ApplyStats::default());
        let mut a = Applier::new(c, stats.clone());
        for (k, v) in [(&b"a"[..], &b"1"[..]), (b"b", b"2"), (b"a", b"3")] {
            p.try_push(&Record::Put { key: k, value: v }).unwrap();
        }
        p.try_push(&Record::Delete { key: b"b" }).unwrap();
        p.try_push(&Record::Delete { key: b"zz" }).unwrap();
        assert_eq!(a.apply(&mut e, None, 2), 2);
        assert_eq!(a.apply(&mut e, None, 100), 3);
        let mut out = [0u8; 16];
        assert_eq!(e.get(b"a", &mut out), Ok(1));
        assert_eq!(out[0], b'3');
        assert!(e.get(b"b", &mut out).is_err());
        assert_eq!(stats.applied.load(Ordering::Relaxed), 5);
        assert_eq!(stats.consumed.load(Ordering::Relaxed), p.pushed());
        // A full sync's BEGIN clears everything.
        for i in 0..300u32 {
            e.put(format!("k{i}").as_bytes(), b"v");
        }
        p.try_push_scan_begin(1).unwrap();
        p.try_push_scan(
            &Record::Put {
                key: b"new",
                value: b"x",
            },
            u64::MAX,
        )
        .unwrap();
        p.try_push_scan_end(1).unwrap();
        a.apply(&mut e, None, 100);
        assert_eq!(e.stats().stored_kvs, 1);
        assert_eq!(e.get(b"new", &mut out), Ok(1));
    }
}
