//! Control state shared by the worker lcores and the control plane's telemetry
//! callbacks (pure Rust, no DPDK types).
//!
//! One [`ControlState`] lives in an `Arc`; each worker holds a [`WorkerControl`]
//! handle with its worker id, the telemetry callbacks call the `ControlState`
//! methods directly. Nothing here ever makes a worker wait:
//!
//! * **Counters**: each worker's [`WorkerStats`] (single-writer atomics) is shared as
//!   is; readers just load it.
//! * **Engine snapshots**: only the worker may read its engine, so it publishes an
//!   [`EngineSnapshot`] from its slow path (the loop's ~10 ms check) with `try_lock`,
//!   skipping the round when a reader holds the lock.
//! * **Client admission**: the authoritative client list sits under a mutex together
//!   with a generation counter. A command changes the list and bumps the generation
//!   under the lock, then waits until every worker reports that generation as applied
//!   ([`ControlState::wait_applied`]). A worker loads the generation once per loop
//!   iteration (one acquire load) and, when it differs from the one it applied,
//!   `try_lock`s the list, hands it to its server and publishes the generation it
//!   read under the lock. A busy lock is retried on the next iteration.
//! * **Slab merge**: a request counter; a worker that sees it above the last request
//!   it served flushes its slab cache ([`merge_now`]) in its slow path and publishes a
//!   [`MergeSummary`]; the merge itself then runs off the worker (slab daemon).
//! * **Snapshots**: a job generation the worker loads in its control tick
//!   ([`SnapshotCtl`], `crate::snapshot`).

use crate::server::TenantRule;
use crate::snapshot::SnapshotCtl;
use crate::stats::WorkerStats;
use kvengine::{Engine, EngineStats};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

mod purge;
pub mod tenant_sync;
mod tenants;
pub use purge::{PurgeReport, PurgeStatus};
pub use tenants::TenantError;

/// One admitted client QP: (QPN, R_Key).
pub type ClientEntry = (u32, u32);

/// Levels of one slab class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassLevel {
    /// Block size in bytes.
    pub class_bytes: u64,
    /// Free blocks in the worker's cache (the paper's NIC-side stack).
    pub worker_cached: u64,
    /// Free blocks in the shared pool (the host-side stack).
    pub shared_free: u64,
    /// Blocks allocated.
    pub allocated: u64,
}

/// What only a worker can read about its engine, as of its last publication.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EngineSnapshot {
    /// Publications so far (0: the worker has not published yet).
    pub seq: u64,
    /// Live keys.
    pub stored_kvs: u64,
    /// Key + value bytes of the live keys.
    pub stored_kv_bytes: u64,
    /// Bytes of the store.
    pub region_bytes: u64,
    /// `stored_kv_bytes / region_bytes` in parts per million.
    pub utilization_ppm: u64,
    /// Primary hash buckets.
    pub hash_buckets: u64,
    /// Chained buckets allocated.
    pub chained_buckets: u64,
    /// Slab allocations served by the worker cache.
    pub slab_allocs: u64,
    /// Slab frees taken by the worker cache.
    pub slab_frees: u64,
    /// Batch refills of the worker cache from the shared pool.
    pub pool_refills: u64,
    /// Batch spills of the worker cache to the shared pool.
    pub pool_spills: u64,
    /// Slab memory never handed out yet (bytes).
    pub frontier_bytes: u64,
    /// Per slab class levels.
    pub classes: Vec<ClassLevel>,
    /// Mean memory lines per GET × 1000 (builds with engine accounting only).
    pub lines_per_get_milli: Option<u64>,
    /// Mean memory lines per PUT × 1000 (builds with engine accounting only).
    pub lines_per_put_milli: Option<u64>,
    /// Further per-worker figures by name, e.g. the reservation station's
    /// forwarded / merged / write-backs / stalls once it is wired in.
    pub extra: Vec<(&'static str, u64)>,
}

impl EngineSnapshot {
    /// Overwrites the engine figures from `es` (keeps `seq` and `extra`; reuses the
    /// class vector's memory).
    pub fn fill_from(&mut self, es: &EngineStats) {
        self.stored_kvs = es.stored_kvs;
        self.stored_kv_bytes = es.stored_kv_bytes;
        self.region_bytes = es.region_bytes;
        self.utilization_ppm = (es.memory_utilization * 1e6) as u64;
        self.hash_buckets = es.hash_buckets;
        self.chained_buckets = es.chained_buckets;
        self.slab_allocs = es.slab_allocs;
        self.slab_frees = es.slab_frees;
        self.pool_refills = es.pool.refills;
        self.pool_spills = es.pool.spills;
        self.frontier_bytes = es.frontier_bytes;
        self.classes.clear();
        self.classes
            .extend(es.classes[..es.nclasses].iter().map(|c| ClassLevel {
                class_bytes: c.class_bytes as u64,
                worker_cached: c.worker_cached as u64,
                shared_free: c.shared_free,
                allocated: c.allocated,
            }));
        self.lines_per_get_milli = es.lines_per_get().map(|x| (x * 1000.0) as u64);
        self.lines_per_put_milli = es.lines_per_put().map(|x| (x * 1000.0) as u64);
    }
}

/// The result of one slab merge pass on one worker.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MergeSummary {
    /// The merge request this pass served (requests that arrive while a pass is
    /// pending are served by the same pass).
    pub request: u64,
    /// Free blocks examined.
    pub scanned: u64,
    /// Buddy pairs merged, indexed by source class.
    pub merged: Vec<u64>,
    /// Block size of each class (same index as `merged`).
    pub class_bytes: Vec<u64>,
    /// Wall time of the pass in microseconds (cache flush included).
    pub elapsed_us: u64,
}

/// The worker's part of a slab merge: returns its cached slabs to its shared pool so
/// the merge sees all free memory. The merge itself runs off the worker (the telemetry
/// thread, through the slab daemon), which fills in `scanned` and `merged`.
pub fn merge_now(engine: &mut Engine) -> MergeSummary {
    let t0 = Instant::now();
    engine.flush_slab_cache();
    let st = engine.stats();
    MergeSummary {
        request: 0,
        scanned: 0,
        merged: vec![0; st.nclasses],
        class_bytes: st.classes[..st.nclasses]
            .iter()
            .map(|c| c.class_bytes as u64)
            .collect(),
        elapsed_us: t0.elapsed().as_micros() as u64,
    }
}

/// Why an admission change was refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdmissionError {
    /// The QPN is already admitted (with this R_Key).
    AlreadyAdmitted(u32, u32),
    /// The QPN is not admitted.
    NotAdmitted(u32),
    /// The QPN does not fit in 24 bits.
    BadQpn(u32),
}

impl std::fmt::Display for AdmissionError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdmissionError::AlreadyAdmitted(q, k) => {
                write!(
                    f,
                    "QPN {q} is already admitted (R_Key {k:#x}); remove it first"
                )
            }
            AdmissionError::NotAdmitted(q) => write!(f, "QPN {q} is not admitted"),
            AdmissionError::BadQpn(q) => write!(
                f,
                "QPN {q} is not a static client QPN (2..{}: QP 1 is the connection \
                 manager's, the QPNs above are opened by the server)",
                kvconf::FIRST_OPENED_QPN
            ),
        }
    }
}

impl std::error::Error for AdmissionError {}

/// The shared part of one worker.
#[derive(Debug)]
struct WorkerShared {
    stats: Arc<WorkerStats>,
    /// The client-list generation this worker's server runs with.
    applied_generation: AtomicU64,
    engine: Mutex<EngineSnapshot>,
    /// The last merge request this worker served.
    merges_done: AtomicU64,
    merge: Mutex<Option<MergeSummary>>,
    /// The purges this worker finished and has not yet had collected.
    purged: Mutex<Vec<crate::server::PurgeDone>>,
}

/// The authoritative client list and tenant rules, and their generation.
#[derive(Debug, Default)]
struct Admission {
    /// Sorted by QPN.
    clients: Vec<ClientEntry>,
    /// Sorted by id (`tenants.rs`).
    tenants: Vec<TenantRule>,
    /// Whether clients may OPEN without a tenant.
    anonymous: bool,
    /// The ids of the tenants that came from the cluster (etcd, `tenant_sync`).
    cluster_tenants: Vec<u32>,
    /// Purges of removed tenants' namespaces the workers are to run (`purge.rs`):
    /// (sequence number, tenant id), oldest first.
    purges: Vec<(u64, u32)>,
    /// The last purge sequence number given.
    purge_seq: u64,
    /// Purges every worker finished, newest last (a bounded history).
    finished_purges: Vec<PurgeReport>,
}

/// What a worker applies from the admission state ([`WorkerControl::poll_clients`]).
#[derive(Clone, Copy, Debug)]
pub struct Admitted<'a> {
    /// The static client QPs (QPN, R_Key), sorted by QPN.
    pub clients: &'a [ClientEntry],
    /// The tenant rules, sorted by id.
    pub tenants: &'a [TenantRule],
    /// Whether clients may OPEN without a tenant.
    pub anonymous: bool,
    /// Purges of removed tenants' namespaces to run (sequence number, tenant id).
    pub purges: &'a [(u64, u32)],
}

/// State shared by the workers and the telemetry callbacks (see the module docs).
#[derive(Debug)]
pub struct ControlState {
    workers: Vec<WorkerShared>,
    admission: Mutex<Admission>,
    /// Bumped under the `admission` lock on every change.
    generation: AtomicU64,
    merge_requests: AtomicU64,
    /// Service-latency sampling period the workers apply at their next control tick.
    latency_sample_every: AtomicU32,
    /// Snapshots while serving (`crate::snapshot`).
    snapshot: SnapshotCtl,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Polls `done` every millisecond until it holds or `timeout` passes.
fn poll_until(timeout: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if done() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

impl ControlState {
    /// State for one worker per entry of `stats` (worker id = index), admitting
    /// `clients` at generation 0 (the servers must start with the same list).
    pub fn new(stats: Vec<Arc<WorkerStats>>, clients: &[ClientEntry]) -> Arc<ControlState> {
        let mut list = clients.to_vec();
        list.sort_unstable_by_key(|c| c.0);
        list.dedup_by_key(|c| c.0);
        let workers = stats.len();
        Arc::new(ControlState {
            workers: stats
                .into_iter()
                .map(|stats| WorkerShared {
                    stats,
                    applied_generation: AtomicU64::new(0),
                    engine: Mutex::new(EngineSnapshot::default()),
                    merges_done: AtomicU64::new(0),
                    merge: Mutex::new(None),
                    purged: Mutex::new(Vec::new()),
                })
                .collect(),
            admission: Mutex::new(Admission {
                clients: list,
                anonymous: true,
                ..Admission::default()
            }),
            generation: AtomicU64::new(0),
            merge_requests: AtomicU64::new(0),
            latency_sample_every: AtomicU32::new(0),
            snapshot: SnapshotCtl::new(workers),
        })
    }

    /// The worker-side handle of worker `id` (panics if `id` is out of range).
    pub fn worker(self: &Arc<Self>, id: usize) -> WorkerControl {
        assert!(id < self.workers.len(), "worker id {id} out of range");
        WorkerControl {
            ctl: Arc::clone(self),
            id,
            seen_generation: self.workers[id].applied_generation.load(Ordering::Relaxed),
        }
    }

    /// Sets the service-latency sampling period (one in `every` packets, 0: off);
    /// the workers apply it within a control tick (10 ms).
    pub fn set_latency_sample_every(&self, every: u32) {
        self.latency_sample_every.store(every, Ordering::Relaxed);
    }

    /// The service-latency sampling period last set.
    pub fn latency_sample_every(&self) -> u32 {
        self.latency_sample_every.load(Ordering::Relaxed)
    }

    /// The snapshot control (`crate::snapshot`).
    pub fn snapshot(&self) -> &SnapshotCtl {
        &self.snapshot
    }

    /// Number of workers.
    pub fn workers(&self) -> usize {
        self.workers.len()
    }

    /// Counters of worker `id`.
    pub fn stats(&self, id: usize) -> &WorkerStats {
        &self.workers[id].stats
    }

    /// The last engine snapshot worker `id` published.
    pub fn engine_snapshot(&self, id: usize) -> EngineSnapshot {
        lock(&self.workers[id].engine).clone()
    }

    /// The current client generation and list (sorted by QPN).
    pub fn clients(&self) -> (u64, Vec<ClientEntry>) {
        let a = lock(&self.admission);
        (self.generation.load(Ordering::Relaxed), a.clients.clone())
    }

    /// The client generation worker `id` runs with.
    pub fn applied_generation(&self, id: usize) -> u64 {
        self.workers[id].applied_generation.load(Ordering::Acquire)
    }

    /// Admits `qpn` with `rkey`; returns the new generation (not yet applied: see
    /// [`ControlState::wait_applied`]).
    pub fn add_client(&self, qpn: u32, rkey: u32) -> Result<u64, AdmissionError> {
        if !(2..kvconf::FIRST_OPENED_QPN).contains(&qpn) {
            return Err(AdmissionError::BadQpn(qpn));
        }
        let mut a = lock(&self.admission);
        match a.clients.binary_search_by_key(&qpn, |c| c.0) {
            Ok(i) => Err(AdmissionError::AlreadyAdmitted(qpn, a.clients[i].1)),
            Err(i) => {
                a.clients.insert(i, (qpn, rkey));
                Ok(self.generation.fetch_add(1, Ordering::AcqRel) + 1)
            }
        }
    }

    /// Revokes `qpn`; returns the new generation and the R_Key it had.
    pub fn remove_client(&self, qpn: u32) -> Result<(u64, u32), AdmissionError> {
        let mut a = lock(&self.admission);
        match a.clients.binary_search_by_key(&qpn, |c| c.0) {
            Ok(i) => {
                let (_, rkey) = a.clients.remove(i);
                Ok((self.generation.fetch_add(1, Ordering::AcqRel) + 1, rkey))
            }
            Err(_) => Err(AdmissionError::NotAdmitted(qpn)),
        }
    }

    /// Waits until every worker runs with generation `generation` or later; on
    /// timeout returns the ids of the workers that lag.
    pub fn wait_applied(&self, generation: u64, timeout: Duration) -> Result<(), Vec<usize>> {
        let lagging = || {
            (0..self.workers.len())
                .filter(|&w| self.applied_generation(w) < generation)
                .collect::<Vec<_>>()
        };
        if poll_until(timeout, || lagging().is_empty()) {
            Ok(())
        } else {
            Err(lagging())
        }
    }

    /// Asks every worker for a slab merge; returns the request number.
    pub fn request_merge(&self) -> u64 {
        self.merge_requests.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// Waits until every worker served merge request `request` (or a later one) and
    /// returns their summaries by worker id; on timeout the ids of the lagging workers.
    pub fn wait_merged(
        &self,
        request: u64,
        timeout: Duration,
    ) -> Result<Vec<MergeSummary>, Vec<usize>> {
        let lagging = || {
            (0..self.workers.len())
                .filter(|&w| self.workers[w].merges_done.load(Ordering::Acquire) < request)
                .collect::<Vec<_>>()
        };
        if !poll_until(timeout, || lagging().is_empty()) {
            return Err(lagging());
        }
        Ok(self
            .workers
            .iter()
            .map(|w| lock(&w.merge).clone().unwrap_or_default())
            .collect())
    }
}

/// A worker's handle on the [`ControlState`].
#[derive(Debug)]
pub struct WorkerControl {
    ctl: Arc<ControlState>,
    id: usize,
    seen_generation: u64,
}

impl WorkerControl {
    /// This worker's id.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The snapshot control (`crate::snapshot`).
    pub fn snapshot(&self) -> &SnapshotCtl {
        &self.ctl.snapshot
    }

    /// This worker's counters.
    pub fn stats(&self) -> &WorkerStats {
        &self.ctl.workers[self.id].stats
    }

    /// Hot path, once per loop iteration: when the client list changed since the
    /// last call, hands the new list to `apply` and returns true. Costs one atomic
    /// load when nothing changed; never blocks (a busy list is retried next call).
    #[inline]
    pub fn poll_clients<F: FnOnce(Admitted<'_>)>(&mut self, apply: F) -> bool {
        if self.ctl.generation.load(Ordering::Acquire) == self.seen_generation {
            return false;
        }
        self.apply_clients(apply)
    }

    #[cold]
    #[inline(never)]
    fn apply_clients<F: FnOnce(Admitted<'_>)>(&mut self, apply: F) -> bool {
        let Ok(a) = self.ctl.admission.try_lock() else {
            return false;
        };
        // Changes bump the generation under the lock: this one matches the list.
        let generation = self.ctl.generation.load(Ordering::Relaxed);
        apply(Admitted {
            clients: &a.clients,
            tenants: &a.tenants,
            anonymous: a.anonymous,
            purges: &a.purges,
        });
        drop(a);
        self.seen_generation = generation;
        self.ctl.workers[self.id]
            .applied_generation
            .store(generation, Ordering::Release);
        true
    }

    /// Slow path: publishes an engine snapshot filled by `fill` unless a reader holds
    /// the snapshot right now (then nothing happens and false is returned).
    pub fn publish_engine<F: FnOnce(&mut EngineSnapshot)>(&self, fill: F) -> bool {
        let Ok(mut s) = self.ctl.workers[self.id].engine.try_lock() else {
            return false;
        };
        fill(&mut s);
        s.seq += 1;
        true
    }

    /// Slow path: the service-latency sampling period the control plane asks for.
    pub fn latency_sample_every(&self) -> u32 {
        self.ctl.latency_sample_every()
    }

    /// Slow path: the pending slab merge request, if any.
    pub fn merge_requested(&self) -> Option<u64> {
        let r = self.ctl.merge_requests.load(Ordering::Acquire);
        let done = self.ctl.workers[self.id]
            .merges_done
            .load(Ordering::Relaxed);
        (r > done).then_some(r)
    }

    /// Slow path: publishes the result of serving merge request `request`. Takes the
    /// summary lock (readers hold it only to copy the summary).
    pub fn merge_done(&self, request: u64, mut summary: MergeSummary) {
        let w = &self.ctl.workers[self.id];
        summary.request = request;
        *lock(&w.merge) = Some(summary);
        w.merges_done.store(request, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(workers: usize) -> Arc<ControlState> {
        ControlState::new(
            (0..workers)
                .map(|_| Arc::new(WorkerStats::default()))
                .collect(),
            &[(18, 2), (17, 1), (17, 9)],
        )
    }

    #[test]
    fn initial_list_sorted_deduplicated_generation_zero() {
        let c = state(1);
        assert_eq!(c.clients(), (0, vec![(17, 1), (18, 2)]));
        let mut w = c.worker(0);
        assert!(!w.poll_clients(|_| panic!("nothing changed")));
        assert_eq!(c.applied_generation(0), 0);
    }

    #[test]
    fn generation_protocol_add_remove_apply() {
        let c = state(2);
        let (mut w0, mut w1) = (c.worker(0), c.worker(1));
        let g = c.add_client(20, 4).unwrap();
        assert_eq!(g, 1);
        assert_eq!(
            c.add_client(20, 5),
            Err(AdmissionError::AlreadyAdmitted(20, 4))
        );
        assert_eq!(
            c.add_client(1 << 24, 5),
            Err(AdmissionError::BadQpn(1 << 24))
        );
        // Not applied by anyone yet.
        assert_eq!(c.wait_applied(g, Duration::from_millis(5)), Err(vec![0, 1]));
        let mut seen = Vec::new();
        assert!(w0.poll_clients(|a| seen = a.clients.to_vec()));
        assert_eq!(seen, vec![(17, 1), (18, 2), (20, 4)]);
        assert!(!w0.poll_clients(|_| panic!("applied already")));
        assert_eq!(c.wait_applied(g, Duration::from_millis(5)), Err(vec![1]));
        // Two changes before worker 1 looks: it applies the latest list at once.
        let (g2, rkey) = c.remove_client(17).unwrap();
        assert_eq!((g2, rkey), (2, 1));
        assert_eq!(c.remove_client(17), Err(AdmissionError::NotAdmitted(17)));
        assert!(w1.poll_clients(|a| seen = a.clients.to_vec()));
        assert_eq!(seen, vec![(18, 2), (20, 4)]);
        assert_eq!(c.applied_generation(1), 2);
        assert!(w0.poll_clients(|_| {}));
        assert_eq!(c.wait_applied(g2, Duration::from_millis(5)), Ok(()));
    }

    #[test]
    fn busy_list_is_retried_not_waited_for() {
        let c = state(1);
        let mut w = c.worker(0);
        let g = c.add_client(30, 3).unwrap();
        let held = c.admission.lock().unwrap();
        assert!(!w.poll_clients(|_| panic!("list is locked")));
        drop(held);
        assert!(w.poll_clients(|a| assert!(a.clients.contains(&(30, 3)))));
        assert_eq!(c.applied_generation(0), g);
    }

    #[test]
    fn waiting_command_returns_once_worker_thread_applies() {
        let c = state(1);
        let mut w = c.worker(0);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = Arc::clone(&stop);
        let worker = std::thread::spawn(move || {
            let mut list = Vec::new();
            while !s2.load(Ordering::Relaxed) {
                w.poll_clients(|a| list = a.clients.to_vec());
                std::hint::spin_loop();
            }
            list
        });
        let (g, _) = c.remove_client(18).unwrap();
        c.wait_applied(g, Duration::from_secs(10)).unwrap();
        stop.store(true, Ordering::Relaxed);
        assert_eq!(worker.join().unwrap(), vec![(17, 1)]);
    }

    #[test]
    fn engine_snapshot_published_unless_busy() {
        let c = state(1);
        let w = c.worker(0);
        assert_eq!(c.engine_snapshot(0).seq, 0);
        assert!(w.publish_engine(|s| s.stored_kvs = 7));
        let s = c.engine_snapshot(0);
        assert_eq!((s.seq, s.stored_kvs), (1, 7));
        let held = c.workers[0].engine.lock().unwrap();
        assert!(!w.publish_engine(|s| s.stored_kvs = 8));
        drop(held);
        assert_eq!(c.engine_snapshot(0).stored_kvs, 7);
    }

    #[test]
    fn merge_requests_coalesce_and_report() {
        let c = state(1);
        let w = c.worker(0);
        assert_eq!(w.merge_requested(), None);
        let r1 = c.request_merge();
        let r2 = c.request_merge();
        assert_eq!(w.merge_requested(), Some(r2));
        assert_eq!(c.wait_merged(r1, Duration::from_millis(5)), Err(vec![0]));
        let cfg = kvengine::EngineConfig {
            mem_bytes: 1 << 20,
            ..kvengine::EngineConfig::default()
        };
        let mut e = Engine::new(kvengine::Region::owned(cfg.mem_bytes), &cfg).unwrap();
        for i in 0u32..200 {
            assert_eq!(e.put(&i.to_le_bytes(), &[7; 40]), kvengine::Status::Ok);
        }
        for i in 0u32..200 {
            assert_eq!(e.delete(&i.to_le_bytes()), kvengine::Status::Ok);
        }
        // The worker's part only flushes its cache; the merge runs off the worker.
        let cached_before: usize = e.stats().classes.iter().map(|c| c.worker_cached).sum();
        assert!(cached_before > 0);
        let s = merge_now(&mut e);
        let cached_after: usize = e.stats().classes.iter().map(|c| c.worker_cached).sum();
        assert_eq!(cached_after, 0);
        assert_eq!(s.merged.len(), s.class_bytes.len());
        w.merge_done(r2, s);
        assert_eq!(w.merge_requested(), None);
        let got = c.wait_merged(r1, Duration::from_millis(5)).unwrap();
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].request, r2);
        let r = e.slab_service().merge_now();
        assert!(r.scanned > 0);
    }

    #[test]
    fn snapshot_fill_from_engine() {
        let cfg = kvengine::EngineConfig {
            mem_bytes: 1 << 20,
            ..kvengine::EngineConfig::default()
        };
        let mut e = Engine::new(kvengine::Region::owned(cfg.mem_bytes), &cfg).unwrap();
        assert_eq!(e.put(b"key", &[1; 100]), kvengine::Status::Ok);
        let mut s = EngineSnapshot::default();
        s.fill_from(&e.stats());
        assert_eq!(s.stored_kvs, 1);
        assert_eq!(s.stored_kv_bytes, 103);
        assert!(!s.classes.is_empty());
        assert!(s.classes.iter().map(|c| c.allocated).sum::<u64>() >= 1);
        let n = s.classes.len();
        s.fill_from(&e.stats());
        assert_eq!(s.classes.len(), n);
    }
}
