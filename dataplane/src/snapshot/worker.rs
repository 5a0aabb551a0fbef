//! A worker's side of a snapshot: pick the job up, tap the server into the ring, scan
//! the engine a few buckets per loop iteration, finish.

use super::{Job, SnapshotCtl, WorkerState, RING_BYTES};
use crate::mutation::{record_cost, MutationSink};
use crate::repl::completion::ClientRecords;
use crate::server::Server;
use kvengine::{ScanCursor, ScanStep};
use kvrepl::log::LogProducer;
use kvrepl::Record;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Buckets scanned per loop iteration at most: sequential cache lines, an empty one
/// read once and a full one twice (its cost, then its records), a few microseconds per
/// iteration, so serving goes on in between. A store of N buckets is scanned in N/64
/// iterations (1 M buckets, a 128 MiB partition at ratio 0.5: ~0.1 s under load).
pub const SCAN_BUCKETS: usize = 64;

/// The snapshot ring as a mutation tap: every post-image as a record.
struct RingTap {
    ring: LogProducer,
    job: Arc<Job>,
    w: usize,
}

impl RingTap {
    #[cold]
    fn lost(&self) {
        if let Some(p) = self.job.part(self.w) {
            p.lost.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl MutationSink for RingTap {
    #[inline]
    fn room(&self) -> usize {
        // A record costs its encoding exactly (`record_cost`), and the ring stores it
        // across the wrap: the free bytes are the room.
        self.ring.free_bytes()
    }

    #[inline]
    fn put(&mut self, key: &[u8], value: &[u8]) {
        if self.ring.try_push(&Record::Put { key, value }).is_err() {
            self.lost();
        }
    }

    #[inline]
    fn delete(&mut self, key: &[u8]) {
        if self.ring.try_push(&Record::Delete { key }).is_err() {
            self.lost();
        }
    }
}

/// The snapshot ring in front of the tap that was installed before (a master's
/// replication log): live post-images go to both, scan records to the ring only; the
/// inner tap is put back when the snapshot ends.
struct SnapTee {
    ring: RingTap,
    inner: Option<Box<dyn MutationSink>>,
}

impl MutationSink for SnapTee {
    #[inline]
    fn room(&self) -> usize {
        let r = self.ring.room();
        self.inner.as_ref().map_or(r, |i| r.min(i.room()))
    }

    #[inline]
    fn put(&mut self, key: &[u8], value: &[u8]) {
        self.ring.put(key, value);
        if let Some(i) = self.inner.as_mut() {
            i.put(key, value);
        }
    }

    #[inline]
    fn delete(&mut self, key: &[u8]) {
        self.ring.delete(key);
        if let Some(i) = self.inner.as_mut() {
            i.delete(key);
        }
    }

    // A transaction's group marker, a cross-partition wait and a completion record
    // are the replication stream's (the snapshot file has no use for them).
    fn group(&mut self, bytes: u32) {
        if let Some(i) = self.inner.as_mut() {
            i.group(bytes);
        }
    }

    fn wait_for(&mut self, ring: u32, position: u64) {
        if let Some(i) = self.inner.as_mut() {
            i.wait_for(ring, position);
        }
    }

    // A cross-partition transaction's post-images: the snapshot keeps each with the
    // partition owning its key, the stream takes them where the coordinator logs.
    fn stream_put(&mut self, key: &[u8], value: &[u8]) {
        if let Some(i) = self.inner.as_mut() {
            i.stream_put(key, value);
        }
    }

    fn stream_delete(&mut self, key: &[u8]) {
        if let Some(i) = self.inner.as_mut() {
            i.stream_delete(key);
        }
    }

    fn local_put(&mut self, key: &[u8], value: &[u8]) {
        self.ring.put(key, value);
        if let Some(i) = self.inner.as_mut() {
            i.local_put(key, value);
        }
    }

    fn local_delete(&mut self, key: &[u8]) {
        self.ring.delete(key);
        if let Some(i) = self.inner.as_mut() {
            i.local_delete(key);
        }
    }

    fn qp_state(&mut self, qpn: u32, blob: &[u8]) {
        if let Some(i) = self.inner.as_mut() {
            i.qp_state(qpn, blob);
        }
    }

    fn tick(&mut self, engine: &kvengine::Engine, clients: &mut dyn ClientRecords) -> bool {
        self.inner.as_mut().is_some_and(|i| i.tick(engine, clients))
    }

    fn position(&self) -> u64 {
        self.inner.as_ref().map_or(0, |i| i.position())
    }

    fn snapshot_ring(&mut self) -> Option<&mut dyn MutationSink> {
        Some(&mut self.ring)
    }

    fn into_inner(self: Box<Self>) -> Option<Box<dyn MutationSink>> {
        self.inner
    }
}

/// The snapshot in progress on this worker.
struct Active {
    job: Arc<Job>,
    cursor: ScanCursor,
    scanned: u64,
}

/// One worker's snapshot state: [`WorkerSnap::poll`] in the control tick picks a new
/// job up, [`WorkerSnap::step`] every loop iteration scans while one is active.
#[derive(Default)]
pub struct WorkerSnap {
    /// Worker id (the job's part).
    w: usize,
    seen_generation: u64,
    active: Option<Active>,
}

impl WorkerSnap {
    /// The state of worker `w`.
    pub fn new(w: usize) -> WorkerSnap {
        WorkerSnap {
            w,
            ..WorkerSnap::default()
        }
    }

    /// Whether a scan is in progress (then call [`WorkerSnap::step`] every loop
    /// iteration).
    #[inline]
    pub fn active(&self) -> bool {
        self.active.is_some()
    }

    /// Slow path: picks up a new job — installs the ring as `server`'s mutation tap and
    /// starts the scan. Costs one atomic load when there is none. Allocates (the tap's
    /// box) once per job.
    pub fn poll(&mut self, ctl: &SnapshotCtl, server: &mut Server) {
        let g = ctl.generation();
        if g == self.seen_generation || self.active.is_some() {
            return;
        }
        let Some((job, ring)) = ctl.take(self.w) else {
            // Busy lock (retried next tick) or nothing for this worker.
            if ctl
                .status()
                .is_some_and(|s| s.outcome != super::Outcome::Running)
            {
                self.seen_generation = g;
            }
            return;
        };
        self.seen_generation = g;
        let Some(part) = job.part(self.w) else { return };
        let tap = RingTap {
            ring,
            job: Arc::clone(&job),
            w: self.w,
        };
        // In front of the replication log, if there is one (a master).
        let inner = server.set_mutation_sink(None);
        server.set_mutation_sink(Some(Box::new(SnapTee { ring: tap, inner })));
        part.buckets_total
            .store(server.engine().scan_buckets(), Ordering::Relaxed);
        part.state
            .store(WorkerState::Scanning as u8, Ordering::SeqCst);
        self.active = Some(Active {
            job,
            cursor: ScanCursor::START,
            scanned: 0,
        });
    }

    /// Every loop iteration while [`WorkerSnap::active`]: scans up to
    /// [`SCAN_BUCKETS`] bucket chains into the ring, each only if the ring has room for
    /// the whole chain; finishes (removes the tap) when the scan is done or the job was
    /// aborted. Returns whether it did anything (for the idle back-off).
    pub fn step(&mut self, server: &mut Server) -> bool {
        let Some(a) = self.active.as_mut() else {
            return false;
        };
        if a.job.abort.load(Ordering::Relaxed) {
            self.finish(server, WorkerState::Failed);
            return true;
        }
        let (engine, tap) = server.engine_and_tap();
        let Some(tap) = tap.and_then(|t| t.snapshot_ring()) else {
            // Someone removed the tap: the snapshot cannot be complete.
            a.job
                .fail(format!("worker {}: the mutation tap was removed", self.w));
            self.finish(server, WorkerState::Failed);
            return true;
        };
        let mut room = tap.room();
        let mut worked = false;
        let mut done = false;
        for _ in 0..SCAN_BUCKETS {
            let mut cost = 0usize;
            let after = engine.scan(a.cursor, 1, |k, v| cost += record_cost(k.len(), v.len()));
            if cost > room {
                if cost > RING_BYTES {
                    a.job.fail(format!(
                        "worker {}: a bucket chain of {cost} B does not fit the ring",
                        self.w
                    ));
                    done = true;
                }
                break;
            }
            let mut n = 0u64;
            // An empty chain (most buckets of a sparse index) needs no second pass.
            let next = if cost == 0 {
                after
            } else {
                engine.scan(a.cursor, 1, |k, v| {
                    tap.put(k, v);
                    n += 1;
                })
            };
            room -= cost;
            a.scanned += n;
            worked = true;
            match next {
                ScanStep::More(c) => a.cursor = c,
                ScanStep::Done => {
                    a.cursor = ScanCursor::START;
                    done = true;
                    break;
                }
            }
        }
        if let Some(p) = a.job.part(self.w) {
            let buckets = if done && !a.job.abort.load(Ordering::Relaxed) {
                engine.scan_buckets()
            } else {
                a.cursor.buckets_done()
            };
            p.buckets_done.store(buckets, Ordering::Relaxed);
            p.scanned.store(a.scanned, Ordering::Relaxed);
        }
        if done {
            let ok = !a.job.abort.load(Ordering::Relaxed);
            self.finish(
                server,
                if ok {
                    WorkerState::Done
                } else {
                    WorkerState::Failed
                },
            );
        }
        worked || done
    }

    /// Ends this worker's part: the state first, then the tap (and with it the ring's
    /// producer: the writer sees the ring abandoned only after the state is final).
    fn finish(&mut self, server: &mut Server, state: WorkerState) {
        let Some(a) = self.active.take() else { return };
        if let Some(p) = a.job.part(self.w) {
            p.state.store(state as u8, Ordering::SeqCst);
        }
        // The snapshot's ring producer goes with its tee; the tap behind comes back.
        let tee = server.set_mutation_sink(None);
        server.set_mutation_sink(tee.and_then(|t| t.into_inner()));
    }

    /// At exit: a scan still in progress fails its job.
    pub fn stop(&mut self, server: &mut Server) {
        if let Some(a) = self.active.as_ref() {
            a.job
                .fail(format!("worker {} stopped during the snapshot", self.w));
            self.finish(server, WorkerState::Failed);
        }
    }
}
