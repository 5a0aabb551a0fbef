//! Snapshots while serving, and loading one at start-up.
//!
//! `ctlplane snapshot save FILE` (telemetry `/kvd/snapshot/save,FILE`) starts a
//! [`Job`]: one SPSC record ring per worker (`kvrepl::log`, on `rtrb`) and a writer
//! thread (a plain thread, not an lcore: file I/O never runs on a worker). Each worker,
//! at its next control tick, installs the ring as its server's mutation tap
//! (`crate::mutation`) and starts a scan of its engine (`kvengine::Engine::scan`);
//! from then on, every loop iteration it scans a few buckets into the same ring
//! ([`worker::WorkerSnap::step`]), while every mutation it applies puts its post-image
//! into the ring too. When its scan is done it removes the tap. The writer drains the
//! rings into `FILE.tmp` (`kvrepl::snapshot` format) and, once every worker finished,
//! writes the trailer, syncs, and renames the file to `FILE`.
//!
//! # Consistency
//!
//! For one partition, the records in the ring are in the order the worker produced
//! them: scan records (a key with its value at the moment its bucket chain was
//! visited) and post-images (a key's value right after a mutation), interleaved. Let
//! `T` be the moment the worker's scan finished. For every key `k`:
//!
//! * not mutated during the scan: it was stored throughout, so the scan visited it
//!   exactly once, with its value at `T` (`Engine::scan`'s guarantee);
//! * mutated during the scan: the ring holds the post-image of its last mutation
//!   before `T`. A scan record of `k` either comes before that post-image, or after
//!   it — and then it carries the value written by that last mutation, which is the
//!   value at `T`. A deleted key's last record is its DELETE, or (deleted before the
//!   scan reached it) it has no record at all.
//!
//! So replaying the partition's records in order onto an empty store gives exactly the
//! partition's contents at `T`. The file interleaves the partitions' records; their
//! keys are disjoint, so the file replayed in order gives every partition's state at
//! its own `T`. Partitions finish at slightly different times: the snapshot is
//! consistent per partition, not one instant across partitions (no operation spans
//! partitions).
//!
//! Nothing is lost: a worker serves a request only if its ring has room for the
//! request's worst-case post-images (else the request gets an RNR NAK and is retried,
//! `crate::mutation`), and scans a bucket only if the ring has room for the whole
//! chain. A record that still could not be pushed fails the snapshot.

mod load;
mod worker;

pub use load::{load_into, load_log_into, LoadReport};
pub use worker::WorkerSnap;

use kvrepl::log::{log_ring, LogConsumer, LogItem, LogProducer};
use kvrepl::snapshot::{SnapshotHeader, SnapshotInfo, SnapshotWriter};
use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Bytes of each worker's snapshot ring. It must hold the worst case of the largest
/// request (a few hundred KiB, `crate::mutation::worst_case`) and of the largest
/// bucket chain; the rest lets the writer fall behind by that much before requests
/// are refused.
pub const RING_BYTES: usize = 8 << 20;
/// How long the workers may take to pick a new job up.
const PICKUP_TIMEOUT: Duration = Duration::from_secs(5);

/// A worker's state within a job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// Not started yet.
    Pending = 0,
    /// Scanning (its tap installed).
    Scanning = 1,
    /// Scan finished, tap removed.
    Done = 2,
    /// Stopped without finishing (aborted, stopped, a lost record).
    Failed = 3,
}

impl WorkerState {
    fn from_u8(v: u8) -> WorkerState {
        match v {
            0 => WorkerState::Pending,
            1 => WorkerState::Scanning,
            2 => WorkerState::Done,
            _ => WorkerState::Failed,
        }
    }

    /// Its name in status replies.
    pub fn name(self) -> &'static str {
        match self {
            WorkerState::Pending => "pending",
            WorkerState::Scanning => "scanning",
            WorkerState::Done => "done",
            WorkerState::Failed => "failed",
        }
    }
}

/// One worker's part of a job, shared with the writer and the status command.
#[derive(Debug)]
pub(crate) struct WorkerPart {
    /// The ring's producer until the worker takes it.
    producer: Mutex<Option<LogProducer>>,
    state: AtomicU8,
    buckets_done: AtomicU64,
    buckets_total: AtomicU64,
    /// KVs the scan emitted.
    scanned: AtomicU64,
    /// Records that could not be pushed (fails the job).
    lost: AtomicU64,
}

/// How a job ended, or that it runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still running.
    Running,
    /// The file is complete.
    Done,
    /// It failed; nothing was left at the path (a partial `.tmp` is removed).
    Failed(String),
}

/// One snapshot: its rings' producers (for the workers), progress and outcome.
#[derive(Debug)]
pub struct Job {
    id: u64,
    path: PathBuf,
    started: Instant,
    parts: Vec<WorkerPart>,
    /// Set on failure: workers stop at their next step.
    abort: AtomicBool,
    records: AtomicU64,
    bytes: AtomicU64,
    finished: Mutex<Option<(Outcome, Duration)>>,
}

/// A job's status as the telemetry command reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobStatus {
    /// Job number (1: the first of this process).
    pub id: u64,
    /// The file.
    pub path: String,
    /// Running, done or failed.
    pub outcome: Outcome,
    /// Records written (so far).
    pub records: u64,
    /// Bytes written (so far).
    pub bytes: u64,
    /// KVs the scans emitted.
    pub scanned: u64,
    /// Since the start, or until the end.
    pub duration: Duration,
    /// Per worker: state, buckets scanned, buckets in all.
    pub workers: Vec<(WorkerState, u64, u64)>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Job {
    pub(crate) fn part(&self, w: usize) -> Option<&WorkerPart> {
        self.parts.get(w)
    }

    fn fail(&self, why: String) {
        self.abort.store(true, Ordering::SeqCst);
        let mut f = lock(&self.finished);
        if f.is_none() {
            *f = Some((Outcome::Failed(why), self.started.elapsed()));
        }
    }

    /// The job's status now.
    pub fn status(&self) -> JobStatus {
        let (outcome, duration) = lock(&self.finished)
            .clone()
            .unwrap_or((Outcome::Running, self.started.elapsed()));
        JobStatus {
            id: self.id,
            path: self.path.display().to_string(),
            outcome,
            records: self.records.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            scanned: self
                .parts
                .iter()
                .map(|p| p.scanned.load(Ordering::Relaxed))
                .sum(),
            duration,
            workers: self
                .parts
                .iter()
                .map(|p| {
                    (
                        WorkerState::from_u8(p.state.load(Ordering::Acquire)),
                        p.buckets_done.load(Ordering::Relaxed),
                        p.buckets_total.load(Ordering::Relaxed),
                    )
                })
                .collect(),
        }
    }
}

/// The snapshot control shared by the workers and the telemetry commands: at most one
/// job at a time. Workers look at it in their control tick (one atomic load).
#[derive(Debug)]
pub struct SnapshotCtl {
    workers: usize,
    /// Bumped when a job starts; a worker whose last seen value differs picks it up.
    generation: AtomicU64,
    job: Mutex<Option<Arc<Job>>>,
}

impl SnapshotCtl {
    /// Control for `workers` workers, no job yet.
    pub fn new(workers: usize) -> SnapshotCtl {
        SnapshotCtl {
            workers,
            generation: AtomicU64::new(0),
            job: Mutex::new(None),
        }
    }

    /// Starts a snapshot to `path` (refused while one runs): allocates the rings and
    /// spawns the writer thread; returns the job id. The header's created time is now.
    pub fn start(&self, path: PathBuf) -> Result<u64, String> {
        let mut slot = lock(&self.job);
        if let Some(j) = slot.as_ref() {
            if j.status().outcome == Outcome::Running {
                return Err(format!(
                    "snapshot {} to {} is running",
                    j.id,
                    j.path.display()
                ));
            }
        }
        if path.as_os_str().is_empty() {
            return Err("no file given".into());
        }
        let created_unix_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        let header = SnapshotHeader {
            partitions: self.workers as u32,
            created_unix_ms,
            ..SnapshotHeader::default()
        };
        // Open the file first, so a bad path is refused at once.
        let tmp = tmp_path(&path);
        let file = File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut consumers = Vec::with_capacity(self.workers);
        let mut parts = Vec::with_capacity(self.workers);
        for _ in 0..self.workers {
            let (p, c) = log_ring(RING_BYTES);
            consumers.push(c);
            parts.push(WorkerPart {
                producer: Mutex::new(Some(p)),
                state: AtomicU8::new(WorkerState::Pending as u8),
                buckets_done: AtomicU64::new(0),
                buckets_total: AtomicU64::new(0),
                scanned: AtomicU64::new(0),
                lost: AtomicU64::new(0),
            });
        }
        let id = slot.as_ref().map_or(1, |j| j.id + 1);
        let job = Arc::new(Job {
            id,
            path,
            started: Instant::now(),
            parts,
            abort: AtomicBool::new(false),
            records: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            finished: Mutex::new(None),
        });
        let j = Arc::clone(&job);
        std::thread::Builder::new()
            .name("kvd-snapshot".into())
            .spawn(move || write_job(&j, file, &tmp, header, consumers))
            .map_err(|e| format!("cannot start the writer thread: {e}"))?;
        *slot = Some(job);
        drop(slot);
        self.generation.fetch_add(1, Ordering::AcqRel);
        Ok(id)
    }

    /// The last job's status (`None`: no job yet).
    pub fn status(&self) -> Option<JobStatus> {
        lock(&self.job).as_ref().map(|j| j.status())
    }

    /// Fails a running job (e.g. the dataplane stops).
    pub fn abort(&self, why: &str) {
        if let Some(j) = lock(&self.job).as_ref() {
            if j.status().outcome == Outcome::Running {
                j.fail(why.to_string());
            }
        }
    }

    /// Waits until the current job ends; its status (`None`: no job, or timeout).
    pub fn wait(&self, timeout: Duration) -> Option<JobStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let st = self.status()?;
            if st.outcome != Outcome::Running {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Slow path (a worker's control tick): the job generation, to compare with the
    /// last one the worker handled.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The current job, if its producer for worker `w` is still to be taken;
    /// `try_lock`: `None` when busy (retried next tick).
    pub(crate) fn take(&self, w: usize) -> Option<(Arc<Job>, LogProducer)> {
        let slot = self.job.try_lock().ok()?;
        let job = Arc::clone(slot.as_ref()?);
        drop(slot);
        let p = job.part(w)?.producer.try_lock().ok()?.take()?;
        Some((job, p))
    }
}

/// `FILE.tmp`: where a snapshot is written until it is complete.
fn tmp_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".tmp");
    PathBuf::from(s)
}

/// The writer thread: drains the rings into the file until every worker finished,
/// then completes it; on any failure fails the job and removes the partial file.
fn write_job(job: &Job, file: File, tmp: &Path, header: SnapshotHeader, rings: Vec<LogConsumer>) {
    let outcome = match write_rings(job, file, tmp, header, rings) {
        Ok(info) => {
            job.records.store(info.records, Ordering::Relaxed);
            job.bytes.store(info.bytes, Ordering::Relaxed);
            Outcome::Done
        }
        Err(why) => {
            let _ = std::fs::remove_file(tmp);
            Outcome::Failed(why)
        }
    };
    match outcome {
        Outcome::Failed(why) => job.fail(why),
        o => *lock(&job.finished) = Some((o, job.started.elapsed())),
    }
}

fn write_rings(
    job: &Job,
    file: File,
    tmp: &Path,
    header: SnapshotHeader,
    mut rings: Vec<LogConsumer>,
) -> Result<SnapshotInfo, String> {
    let io = |e: &dyn std::fmt::Display| format!("{}: {e}", tmp.display());
    let mut w = SnapshotWriter::new(BufWriter::with_capacity(1 << 20, file), &header)
        .map_err(|e| io(&e))?;
    let mut err = None;
    loop {
        let mut moved = 0;
        let mut all_done = true;
        for c in &mut rings {
            // Abandoned (the worker dropped its tap) before the drain: what the drain
            // leaves behind is all there will ever be.
            let abandoned = c.is_abandoned();
            moved += c
                .drain(usize::MAX, |item| match item {
                    LogItem::Live(b) | LogItem::Scan(b) => match w.push_encoded(b) {
                        Ok(()) => true,
                        Err(e) => {
                            err = Some(io(&e));
                            false
                        }
                    },
                    LogItem::ScanBegin(_)
                    | LogItem::ScanEnd(_)
                    | LogItem::Wait { .. }
                    | LogItem::Span { .. } => true,
                })
                .map_err(|e| format!("worker ring: {e}"))?;
            if let Some(e) = err.take() {
                return Err(e);
            }
            all_done &= abandoned && c.pending_bytes() == 0;
        }
        job.records.store(w.records(), Ordering::Relaxed);
        job.bytes.store(w.bytes(), Ordering::Relaxed);
        if all_done {
            break;
        }
        if job.abort.load(Ordering::SeqCst) {
            return Err(lock(&job.finished)
                .as_ref()
                .and_then(|(o, _)| match o {
                    Outcome::Failed(w) => Some(w.clone()),
                    _ => None,
                })
                .unwrap_or_else(|| "aborted".into()));
        }
        let waiting = job
            .parts
            .iter()
            .any(|p| WorkerState::from_u8(p.state.load(Ordering::Acquire)) == WorkerState::Pending);
        if waiting && job.started.elapsed() > PICKUP_TIMEOUT {
            return Err("a worker did not start its scan (is the dataplane serving?)".into());
        }
        if moved == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    for (i, p) in job.parts.iter().enumerate() {
        let state = WorkerState::from_u8(p.state.load(Ordering::SeqCst));
        if state != WorkerState::Done {
            return Err(format!(
                "worker {i} stopped before its scan finished ({})",
                state.name()
            ));
        }
        let lost = p.lost.load(Ordering::SeqCst);
        if lost > 0 {
            return Err(format!("worker {i} could not log {lost} records"));
        }
    }
    let (bw, info) = w.finish().map_err(|e| io(&e))?;
    let f = bw.into_inner().map_err(|e| io(&e.into_error()))?;
    f.sync_all().map_err(|e| io(&e))?;
    std::fs::rename(tmp, &job.path)
        .map_err(|e| format!("rename to {}: {e}", job.path.display()))?;
    if let Some(dir) = job.path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(info)
}
