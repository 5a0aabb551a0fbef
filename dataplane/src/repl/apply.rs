//! A replica worker's side of replication: the records the replication lcore
//! received for this worker's partition, applied to its engine between bursts.
//!
//! The replication lcore pushes each record of the master's stream into the ring of
//! the worker that owns its key (`kvwire::partition`); the worker drains a bounded
//! number per loop iteration, applies them in order, and publishes how many ring
//! bytes it consumed, from which the replication lcore derives the stream offset all
//! workers have applied (the offset a replica acknowledges).
//!
//! A transaction whose keys span this node's partitions arrives whole in one
//! worker's ring behind a SPAN marker (`repl::group_route`), after WAITs for the
//! other partitions' rings: the worker waits until those workers applied what
//! precedes the transaction, then applies all of it with them parked
//! ([`Applier::pending_span`], [`apply_span`]) — no read on any partition sees part
//! of it. The others' rings wait for this one past the transaction.

use crate::mutation::MutationSink;
use crate::server::{Server, MAX_PARTITIONS};
use kvengine::Engine;
use kvrepl::log::{Drained, GroupWindow, LogConsumer, LogItem, SPAN_LEN};
use kvrepl::{Record, GROUP_RECORD_LEN, KIND_GROUP};
use kvwire::partition::partition_of_hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Records ahead of the one applied whose bucket is prefetched (a few cache misses
/// in flight, as the request path's batches keep).
const PREFETCH_AHEAD: usize = 8;

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
    /// Transactions applied over several partitions at once (their workers parked).
    pub spans: AtomicU64,
}

/// Where a replica worker's applier hands what its master's stream says about client
/// connections (`crate::repl::completion`; `Server::apply_parts`).
pub trait CompletionKeeper {
    /// One `QP_STATE` record: its QPN and blob.
    fn record(&mut self, qpn: u32, blob: &[u8]);
    /// A full sync begins: what earlier records said is dropped, as the data is (the
    /// sync carries the records that go with its data).
    fn full_sync(&mut self);
}

/// No keeper: completion records are skipped.
impl CompletionKeeper for () {
    fn record(&mut self, _: u32, _: &[u8]) {}
    fn full_sync(&mut self) {}
}

/// A replica worker's inbound record ring.
pub struct Applier {
    ring: LogConsumer,
    stats: Arc<ApplyStats>,
    /// Every worker's counters, by worker: a WAIT in the ring names one.
    peers: Vec<Arc<ApplyStats>>,
    /// The SPAN marker the ring stopped at: (partitions, group bytes).
    span: Option<(u64, u32)>,
}

impl Applier {
    /// An applier draining `ring` and counting into `stats`.
    pub fn new(ring: LogConsumer, stats: Arc<ApplyStats>) -> Applier {
        Applier {
            ring,
            stats,
            peers: Vec::new(),
            span: None,
        }
    }

    /// The counters of every worker of the node, by worker (for the WAITs of
    /// transactions spanning partitions; without them a WAIT is passed over).
    pub fn set_peers(&mut self, peers: Vec<Arc<ApplyStats>>) {
        self.peers = peers;
    }

    /// The partitions (a bit set) of the transaction at the head of the ring when
    /// all of it is there: apply it with [`apply_span`].
    pub fn pending_span(&self) -> Option<u64> {
        let (partitions, bytes) = self.span?;
        (self.ring.pending_bytes() >= SPAN_LEN + GROUP_RECORD_LEN + bytes as usize)
            .then_some(partitions)
    }

    /// Applies up to `max` records to `engine`, each also to `tap` (a snapshot being
    /// taken on this replica) when one is installed; stops early, leaving records in
    /// the ring, while the tap lacks room. Returns how many it applied.
    #[inline]
    pub fn apply(
        &mut self,
        engine: &mut Engine,
        tap: Option<&mut (dyn MutationSink + 'static)>,
        max: usize,
    ) -> usize {
        self.apply_with(engine, tap, max, &mut ())
    }

    /// [`Applier::apply`], handing each completion record (a `QP_STATE` record's
    /// QPN and blob) and each full sync's start to `keeper`, in ring order
    /// (`Server::apply_parts`).
    #[inline]
    pub fn apply_with(
        &mut self,
        engine: &mut Engine,
        mut tap: Option<&mut (dyn MutationSink + 'static)>,
        max: usize,
        keeper: &mut dyn CompletionKeeper,
    ) -> usize {
        if self.ring.pending_bytes() == 0 || self.span.is_some() {
            return 0;
        }
        let Applier {
            ring, peers, span, ..
        } = self;
        let (mut ok, mut failed) = (0u64, 0u64);
        // A transaction's records (after its GROUP record) are applied in one go, past
        // `max` if need be, and only once all of them are in the ring: between two
        // calls the worker serves reads, which must never see part of a transaction.
        let mut win = GroupWindow::new(ring.pending_bytes(), max);
        let r = ring.drain_ahead(usize::MAX, PREFETCH_AHEAD, |d| {
            let item = match d {
                // A later record's bucket, loaded while this one is applied.
                Drained::Upcoming(key) => {
                    engine.prefetch_key(key);
                    return true;
                }
                Drained::Item(item) => item,
            };
            match item {
                // Until that worker applied what precedes a transaction spanning it.
                LogItem::Wait { ring, position } => {
                    return peers
                        .get(ring as usize)
                        .is_none_or(|s| s.consumed.load(Ordering::Acquire) >= position)
                }
                // Stop: the worker applies it with the other partitions parked.
                LogItem::Span { partitions, bytes } => {
                    *span = Some((partitions, bytes));
                    return false;
                }
                _ => {}
            }
            // Outside a transaction, a record the tap cannot take waits; a transaction
            // enters only when the tap can take all of it.
            if let (false, LogItem::Live(b) | LogItem::Scan(b), Some(t)) =
                (win.in_group(), &item, tap.as_deref())
            {
                if b.first() != Some(&KIND_GROUP) && t.room() < b.len() {
                    return false;
                }
            }
            let room = |n: usize| tap.as_deref().is_none_or(|t| t.room() >= n);
            if !win.admit(&item, room) {
                return false;
            }
            let bytes = match item {
                LogItem::Live(b) | LogItem::Scan(b) => b,
                // A full sync begins: the replica's data is replaced by the master's.
                LogItem::ScanBegin(_) => {
                    clear(engine);
                    keeper.full_sync();
                    return true;
                }
                LogItem::ScanEnd(_) | LogItem::Wait { .. } | LogItem::Span { .. } => return true,
            };
            if bytes.first() == Some(&KIND_GROUP) {
                return true;
            }
            let status = match Record::decode(bytes) {
                // Completion records are the transport's (`crate::repl::completion`).
                Ok((Record::QpState { qpn, bytes }, _)) => {
                    keeper.record(qpn, bytes);
                    kvengine::Status::Ok
                }
                Ok((rec, _)) => apply_kv(engine, tap.as_deref_mut(), rec),
                Err(_) => kvengine::Status::ValueTooLarge,
            };
            if status == kvengine::Status::Ok {
                ok += 1;
            } else {
                failed += 1;
            }
            true
        });
        self.settle(r.is_err(), ok, failed)
    }

    /// After a drain: counts it and publishes the ring bytes consumed; returns the
    /// records applied.
    fn settle(&self, corrupt: bool, ok: u64, failed: u64) -> usize {
        if corrupt {
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

/// Applies a PUT or DELETE record to `engine` and, when it changed something, to
/// `tap` (a snapshot being taken on this replica); any other record changes nothing.
fn apply_kv(
    engine: &mut Engine,
    tap: Option<&mut (dyn MutationSink + 'static)>,
    rec: Record<'_>,
) -> kvengine::Status {
    match rec {
        Record::Put { key, value } => {
            let s = engine.put(key, value);
            if let (kvengine::Status::Ok, Some(t)) = (s, tap) {
                t.put(key, value);
            }
            s
        }
        Record::Delete { key } => match engine.delete(key) {
            // Deleting an absent key leaves the same state: idempotent replay.
            kvengine::Status::NotFound => kvengine::Status::Ok,
            kvengine::Status::Ok => {
                if let Some(t) = tap {
                    t.delete(key);
                }
                kvengine::Status::Ok
            }
            s => s,
        },
        Record::QpState { .. } | Record::Group { .. } => kvengine::Status::Ok,
    }
}

/// Applies the transaction at the head of `a`'s ring ([`Applier::pending_span`])
/// over `me` and the parked servers `parts` (by partition, as
/// [`Server::with_parked`] hands them out): each record to the engine and tap of
/// the partition owning its key. Returns the records applied.
pub fn apply_span(
    a: &mut Applier,
    me: &mut Server,
    mut parts: [Option<&mut Server>; MAX_PARTITIONS],
) -> usize {
    let Some((_, bytes)) = a.span else { return 0 };
    let (p, n) = me.partitioning();
    let mut sides: [Option<(&mut Engine, Option<&mut (dyn MutationSink + 'static)>)>;
        MAX_PARTITIONS] = std::array::from_fn(|_| None);
    if let Some(s) = sides.get_mut(p as usize) {
        *s = Some(me.engine_mut_and_tap());
    }
    for (q, s) in parts.iter_mut().enumerate() {
        if let Some(s) = s.as_deref_mut() {
            sides[q] = Some(s.engine_mut_and_tap());
        }
    }
    let (mut ok, mut failed) = (0u64, 0u64);
    // The marker, the group record, then `bytes` of records.
    let mut left = bytes as usize;
    let mut head = 2u8;
    let r = a.ring.drain(usize::MAX, |item| {
        if head > 0 {
            head -= 1;
            return true;
        }
        if left == 0 {
            return false;
        }
        let b = match item {
            LogItem::Live(b) | LogItem::Scan(b) => b,
            _ => {
                // Not a record inside a group: a routing bug; counted, skipped.
                failed += 1;
                return true;
            }
        };
        left = left.saturating_sub(b.len());
        let (rec, key) = match Record::decode(b) {
            Ok((rec @ (Record::Put { key, .. } | Record::Delete { key }), _)) => (rec, key),
            _ => {
                failed += 1;
                return true;
            }
        };
        let q = partition_of_hash(kvengine::key_hash(key), n) as usize;
        let Some(Some((engine, tap))) = sides.get_mut(q) else {
            failed += 1;
            return true;
        };
        let status = apply_kv(engine, tap.as_deref_mut(), rec);
        if status == kvengine::Status::Ok {
            ok += 1;
        } else {
            failed += 1;
        }
        true
    });
    a.span = None;
    a.stats.spans.fetch_add(1, Ordering::Relaxed);
    a.settle(r.is_err(), ok, failed)
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

    fn engine() -> Engine {
        let cfg = EngineConfig {
            mem_bytes: 1 << 20,
            ..EngineConfig::default()
        };
        Engine::new(Region::owned(1 << 20), &cfg).unwrap()
    }

    #[test]
    fn a_transaction_is_applied_whole_or_not_yet() {
        let mut e = engine();
        let (mut p, c) = log_ring(4096);
        let mut a = Applier::new(c, Arc::new(ApplyStats::default()));
        let recs = [
            Record::Put {
                key: b"alice",
                value: b"70",
            },
            Record::Put {
                key: b"bob",
                value: b"130",
            },
            Record::Delete { key: b"carol" },
        ];
        let bytes: usize = recs.iter().map(|r| r.encoded_len()).sum();
        p.try_push(&Record::Put {
            key: b"before",
            value: b"1",
        })
        .unwrap();
        p.try_push(&Record::Group {
            bytes: bytes as u32,
        })
        .unwrap();
        // Only part of the transaction has arrived: the record before it is applied,
        // nothing of the transaction.
        p.try_push(&recs[0]).unwrap();
        p.try_push(&recs[1]).unwrap();
        let mut out = [0u8; 16];
        assert_eq!(a.apply(&mut e, None, 100), 1);
        assert!(e.get(b"before", &mut out).is_ok());
        assert!(
            e.get(b"alice", &mut out).is_err(),
            "no part of the transaction"
        );
        // The rest arrives: all of it at once, even with a budget of one record.
        p.try_push(&recs[2]).unwrap();
        assert_eq!(a.apply(&mut e, None, 1), 3);
        assert_eq!(e.get(b"alice", &mut out), Ok(2));
        assert_eq!(e.get(b"bob", &mut out), Ok(3));
        assert_eq!(a.apply(&mut e, None, 100), 0);
    }

    #[test]
    fn completion_records_and_full_syncs_go_to_the_keeper_in_ring_order() {
        let mut e = engine();
        let (mut p, c) = log_ring(4096);
        let mut a = Applier::new(c, Arc::new(ApplyStats::default()));
        p.try_push(&Record::QpState {
            qpn: 7,
            bytes: b"intent",
        })
        .unwrap();
        p.try_push(&Record::Put {
            key: b"k",
            value: b"v",
        })
        .unwrap();
        p.try_push(&Record::QpState {
            qpn: 8,
            bytes: b"frame",
        })
        .unwrap();
        struct Seen(Vec<(u32, Vec<u8>)>);
        impl CompletionKeeper for Seen {
            fn record(&mut self, q: u32, b: &[u8]) {
                self.0.push((q, b.to_vec()));
            }
            fn full_sync(&mut self) {
                self.0.push((0, b"full sync".to_vec()));
            }
        }
        p.try_push_scan_begin(1).unwrap();
        let mut seen = Seen(Vec::new());
        let n = a.apply_with(&mut e, None, 100, &mut seen);
        assert_eq!(n, 3);
        assert_eq!(
            seen.0,
            vec![
                (7, b"intent".to_vec()),
                (8, b"frame".to_vec()),
                (0, b"full sync".to_vec())
            ]
        );
        assert!(
            e.get(b"k", &mut [0u8; 4]).is_err(),
            "a full sync starts empty"
        );
    }

    #[test]
    fn applies_in_order_and_publishes_progress() {
        let mut e = engine();
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
