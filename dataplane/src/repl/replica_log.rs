//! A replica's log file (config `replication.log_file`, `fsync`): every record the
//! replica applies, appended by a control thread, so that a restarted replica loads
//! its data back and continues by partial resync instead of a full one.
//!
//! The replication lcore owns a [`LogFeed`]: it copies each record it routes to the
//! workers into a byte ring ([`kvrepl::log`]) and posts an event after each segment
//! (`Commit` with the stream offset reached), at a full sync's WELCOME (`Begin`) and
//! end (`SyncDone`), when the master's stream id changes (`Stream`), and when the node
//! becomes master (`Retire`). Nothing on the lcore allocates or blocks: a segment is
//! refused with RNR when either ring lacks room for it (as for the workers' rings).
//!
//! The writer thread ([`spawn_writer`]) drains both in order into
//! [`kvrepl::aof::AofWriter`]. A full sync is written to `FILE.sync` without syncs
//! and renamed over `FILE` once complete (then synced), so a crash mid-sync leaves
//! the previous file, which still describes a consistent earlier position. Under
//! `fsync: always` the replica acknowledges no offset beyond what the writer has
//! synced ([`LogFeed::durable`]); under `everysec`/`no` it acknowledges what it
//! applied and the file may lag (a restart then fetches the difference again).
//!
//! The file stops describing the node's data when it becomes master (it takes writes
//! of its own): `Retire` removes it; it is begun again by the next full sync.

use kvrepl::aof::{AofWriter, FsyncPolicy};
use kvrepl::log::{log_ring, LogConsumer, LogItem, LogProducer};
use kvrepl::snapshot::SnapshotHeader;
use kvrepl::Record;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Bytes of the record ring between the replication lcore and the writer.
pub const LOG_RING_BYTES: usize = 8 << 20;
/// Events in flight at most (about one per segment).
const EVENTS: usize = 8192;
/// A block is written once this much is buffered (blocks hold at most 1 MiB).
const BLOCK_BYTES: usize = 512 << 10;

/// What the replication lcore tells the writer; `pos` is the record ring position
/// (bytes pushed) the event follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Event {
    /// A full sync of stream `repl_id` at `epoch` begins: a new file.
    Begin { pos: u64, repl_id: u64, epoch: u64 },
    /// The records up to `pos` bring the stream to live offset `end`.
    Commit { pos: u64, end: u64 },
    /// The full sync is complete at live offset `live`: the new file replaces the old.
    SyncDone { pos: u64, live: u64 },
    /// The stream continues from `offset` under a new id or epoch (partial resync).
    Stream {
        pos: u64,
        repl_id: u64,
        epoch: u64,
        offset: u64,
    },
    /// The node's data no longer follows a stream it logs: remove the file.
    Retire { pos: u64 },
}

/// What the writer publishes.
#[derive(Debug, Default)]
pub struct LogShared {
    /// Live stream offset the file holds on stable storage (under `always`; under
    /// the other policies: written to the file).
    pub synced_end: AtomicU64,
    /// `Begin` events the writer has handled (see [`LogFeed::durable`]).
    pub begins_done: AtomicU64,
    /// Blocks written.
    pub blocks: AtomicU64,
    /// Write or sync errors (the log is then abandoned: it keeps its good prefix).
    pub errors: AtomicU64,
    /// Set to stop the writer (it closes the file, synced).
    pub stop: AtomicBool,
}

/// The replication lcore's end of the log.
pub struct LogFeed {
    records: LogProducer,
    events: rtrb::Producer<Event>,
    shared: Arc<LogShared>,
    always: bool,
    begins_sent: u64,
    /// An event did not fit (cannot happen after [`LogFeed::room`]): the file would
    /// miss a piece, so it is retired at once.
    broken: bool,
}

impl LogFeed {
    /// True when a segment of `bytes` and its events fit.
    pub fn room(&self, bytes: usize) -> bool {
        self.records.free_bytes() >= bytes && self.events.slots() >= 4
    }

    /// Copies a routed record into the log.
    pub fn record(&mut self, rec: &Record<'_>) {
        if self.records.try_push(rec).is_err() {
            self.lost();
        }
    }

    fn post(&mut self, ev: Event) {
        if self.broken {
            return;
        }
        if self.events.push(ev).is_err() {
            self.lost();
        }
    }

    fn lost(&mut self) {
        if !self.broken {
            self.broken = true;
            // Room for one more was checked before the segment: the writer drains
            // the ring, then retires the file.
            let pos = self.records.pushed();
            let _ = self.events.push(Event::Retire { pos });
        }
    }

    /// A full sync of `repl_id` at `epoch` begins.
    pub fn begin(&mut self, repl_id: u64, epoch: u64) {
        // A new file: nothing lost so far matters any more.
        self.broken = false;
        self.begins_sent += 1;
        let pos = self.records.pushed();
        self.post(Event::Begin {
            pos,
            repl_id,
            epoch,
        });
    }

    /// The records so far bring the live stream to `end` (after a segment).
    pub fn commit(&mut self, end: u64) {
        let pos = self.records.pushed();
        self.post(Event::Commit { pos, end });
    }

    /// The full sync completed at live offset `live`.
    pub fn sync_done(&mut self, live: u64) {
        let pos = self.records.pushed();
        self.post(Event::SyncDone { pos, live });
    }

    /// The stream continues from `offset` as `repl_id` at `epoch` (partial resync).
    pub fn stream(&mut self, repl_id: u64, epoch: u64, offset: u64) {
        let pos = self.records.pushed();
        self.post(Event::Stream {
            pos,
            repl_id,
            epoch,
            offset,
        });
    }

    /// The node stops following a stream (it becomes master): the file goes.
    pub fn retire(&mut self) {
        let pos = self.records.pushed();
        self.post(Event::Retire { pos });
    }

    /// The live offset the replica may acknowledge given `applied`: under `always`
    /// no more than the file holds on stable storage (0 while a full sync's file is
    /// being begun), else `applied`.
    pub fn durable(&self, applied: u64) -> u64 {
        if !self.always {
            return applied;
        }
        if self.shared.begins_done.load(Ordering::Acquire) < self.begins_sent {
            return 0;
        }
        applied.min(self.shared.synced_end.load(Ordering::Acquire))
    }

    /// Whether the file is flushed before each acknowledgement (`fsync: always`).
    pub fn always(&self) -> bool {
        self.always
    }

    /// The writer's counters.
    pub fn shared(&self) -> &Arc<LogShared> {
        &self.shared
    }
}

/// The log a replica starts with: its feed, and the (replication id, epoch, live
/// offset) the data loaded from the file stands at (`None`: nothing loaded).
pub struct LogStart {
    /// The replication lcore's end.
    pub feed: LogFeed,
    /// Where to resume the stream from.
    pub resume: Option<(u64, u64, u64)>,
}

/// A log file opened at start-up: what it holds, to load into the engines, and where
/// the replica continues from.
pub struct Opened {
    /// The writer, positioned after the file's last good block.
    pub writer: AofWriter,
    /// (replication id, epoch, live offset) the data stands at when loaded.
    pub position: (u64, u64, u64),
    /// Bytes cut off a torn last block.
    pub truncated_bytes: u64,
}

/// The temporary file a full sync is written to.
pub fn sync_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".sync");
    PathBuf::from(p)
}

/// Opens the log file at `path` when there is one (recovering a torn tail; a corrupt
/// file is an error naming what is wrong) and removes a full sync's leftover.
pub fn open(path: &Path, policy: FsyncPolicy) -> Result<Option<Opened>, String> {
    let _ = std::fs::remove_file(sync_path(path));
    if !path.exists() {
        return Ok(None);
    }
    let (writer, rec) = AofWriter::open(path, policy, mono_ns())
        .map_err(|e| format!("replica log {}: {e}", path.display()))?;
    let h = rec.info.header;
    let position = (h.repl_id, h.epoch, writer.info().stream_end);
    Ok(Some(Opened {
        writer,
        position,
        truncated_bytes: rec.truncated_bytes,
    }))
}

/// Starts the writer thread for `path` (continuing `current` when the file was
/// opened at start-up); returns the lcore's feed and the thread.
pub fn spawn_writer(
    path: PathBuf,
    policy: FsyncPolicy,
    partitions: u32,
    current: Option<AofWriter>,
) -> std::io::Result<(LogFeed, std::thread::JoinHandle<()>)> {
    let (records, consumer) = log_ring(LOG_RING_BYTES);
    let (events, event_rx) = rtrb::RingBuffer::new(EVENTS);
    let shared = Arc::new(LogShared::default());
    if let Some(w) = &current {
        shared
            .synced_end
            .store(w.info().stream_end, Ordering::Release);
    }
    let mut writer = Writer {
        path,
        policy,
        partitions,
        current,
        syncing: None,
        pending_end: None,
        records: consumer,
        shared: shared.clone(),
    };
    let t = std::thread::Builder::new()
        .name("kvd-replica-log".into())
        .spawn(move || writer.run(event_rx))?;
    let feed = LogFeed {
        records,
        events,
        shared,
        always: policy == FsyncPolicy::Always,
        begins_sent: 0,
        broken: false,
    };
    Ok((feed, t))
}

/// The writer thread's state.
struct Writer {
    path: PathBuf,
    policy: FsyncPolicy,
    partitions: u32,
    /// The log file (absent before the first full sync, after a retire or an error).
    current: Option<AofWriter>,
    /// A full sync's file, while it is written.
    syncing: Option<AofWriter>,
    /// Live offset of the last Commit appended to `current` but not yet committed.
    pending_end: Option<u64>,
    records: LogConsumer,
    shared: Arc<LogShared>,
}

impl Writer {
    fn run(&mut self, mut events: rtrb::Consumer<Event>) {
        let mut last_tick = mono_ns();
        loop {
            let mut handled = 0;
            while let Ok(ev) = events.pop() {
                if let Err(e) = self.handle(ev) {
                    self.fail(&e);
                }
                handled += 1;
                if handled == 256 {
                    break;
                }
            }
            // Nothing more queued (or a batch done): what was appended becomes a block.
            if let Err(e) = self.flush() {
                self.fail(&e);
            }
            let now = mono_ns();
            if now.saturating_sub(last_tick) >= 100_000_000 {
                last_tick = now;
                if let Some(w) = &mut self.current {
                    match w.tick(now) {
                        Ok(true) => self.publish_synced(),
                        Ok(false) => {}
                        Err(e) => self.fail(&e.to_string()),
                    }
                }
            }
            if handled == 0 {
                if self.shared.stop.load(Ordering::Acquire) && events.is_empty() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        if let Some(w) = self.current.take() {
            let end = w.info().stream_end;
            if let Err(e) = w.close(end, mono_ns()) {
                eprintln!("dataplane: replica log {}: {e}", self.path.display());
            }
        }
        if self.syncing.take().is_some() {
            let _ = std::fs::remove_file(sync_path(&self.path));
        }
    }

    /// Appends the ring's records up to position `pos` to the file being written
    /// (`keep == false`: discards them).
    fn take_records(&mut self, pos: u64, keep: bool) -> Result<(), String> {
        let Writer {
            records,
            syncing,
            current,
            ..
        } = self;
        let mut target = if keep {
            syncing.as_mut().or(current.as_mut())
        } else {
            None
        };
        let mut err = None;
        while records.popped() < pos && err.is_none() {
            let r = records.drain(1, |item| {
                if let (LogItem::Live(b), Some(w)) = (item, target.as_deref_mut()) {
                    match Record::decode(b) {
                        Ok((rec, _)) => {
                            if let Err(e) = w.append(&rec) {
                                err = Some(e.to_string());
                            }
                        }
                        Err(e) => err = Some(format!("record ring: {e}")),
                    }
                }
                true
            });
            match r {
                Ok(0) => {
                    return Err(format!(
                        "record ring holds less than the event says ({} < {pos})",
                        records.popped()
                    ))
                }
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        err.map_or(Ok(()), Err)
    }

    fn handle(&mut self, ev: Event) -> Result<(), String> {
        match ev {
            Event::Begin {
                pos,
                repl_id,
                epoch,
            } => {
                self.take_records(pos, false)?;
                self.syncing = None;
                let tmp = sync_path(&self.path);
                let _ = std::fs::remove_file(&tmp);
                let header = SnapshotHeader {
                    repl_id,
                    epoch,
                    stream_offset: 0,
                    partitions: self.partitions,
                    created_unix_ms: unix_ms(),
                };
                let w = AofWriter::create(&tmp, &header, FsyncPolicy::No, mono_ns())
                    .map_err(|e| format!("{}: {e}", tmp.display()))?;
                self.syncing = Some(w);
                self.shared.synced_end.store(0, Ordering::Release);
                self.shared.begins_done.fetch_add(1, Ordering::AcqRel);
            }
            Event::Commit { pos, end } => {
                self.take_records(pos, true)?;
                if self.syncing.is_none() && self.current.is_some() {
                    self.pending_end = Some(end);
                    let big = self
                        .current
                        .as_ref()
                        .is_some_and(|w| w.buffered_bytes() >= BLOCK_BYTES);
                    if big {
                        self.flush()?;
                    }
                } else if let Some(w) = &mut self.syncing {
                    if w.buffered_bytes() >= BLOCK_BYTES {
                        w.commit(0, mono_ns()).map_err(|e| e.to_string())?;
                    }
                }
            }
            Event::SyncDone { pos, live } => {
                self.take_records(pos, true)?;
                let Some(mut w) = self.syncing.take() else {
                    return Ok(());
                };
                let now = mono_ns();
                w.commit(0, now).map_err(|e| e.to_string())?;
                w.mark(live, now).map_err(|e| e.to_string())?;
                w.sync(now).map_err(|e| e.to_string())?;
                std::fs::rename(sync_path(&self.path), &self.path)
                    .map_err(|e| format!("{}: {e}", self.path.display()))?;
                sync_dir(&self.path).map_err(|e| format!("{}: {e}", self.path.display()))?;
                w.set_policy(self.policy);
                self.current = Some(w);
                self.pending_end = None;
                self.shared.synced_end.store(live, Ordering::Release);
            }
            Event::Stream {
                pos,
                repl_id,
                epoch,
                offset,
            } => {
                self.take_records(pos, true)?;
                self.flush()?;
                if let Some(w) = &mut self.current {
                    if w.info().stream_end != offset {
                        // Not where the file ends: it no longer describes the data.
                        return Err(format!(
                            "the stream continues at {offset}, the file ends at {}",
                            w.info().stream_end
                        ));
                    }
                    let h = w.info().header;
                    if (h.repl_id, h.epoch) != (repl_id, epoch) {
                        w.set_stream(repl_id, epoch).map_err(|e| e.to_string())?;
                    }
                }
            }
            Event::Retire { pos } => {
                self.take_records(pos, false)?;
                self.retire();
            }
        }
        Ok(())
    }

    /// Writes what `current` buffered as a block ending at the last Commit's offset.
    fn flush(&mut self) -> Result<(), String> {
        let (Some(w), Some(end)) = (&mut self.current, self.pending_end.take()) else {
            return Ok(());
        };
        let before = w.info().blocks;
        w.commit(end, mono_ns()).map_err(|e| e.to_string())?;
        let blocks = w.info().blocks - before;
        self.shared.blocks.fetch_add(blocks, Ordering::Relaxed);
        self.publish_synced();
        Ok(())
    }

    /// Publishes how far the file is synced (under `always`; else written).
    fn publish_synced(&self) {
        if let Some(w) = &self.current {
            self.shared
                .synced_end
                .store(w.info().stream_end, Ordering::Release);
        }
    }

    /// Removes the file (and a full sync's), after withdrawing what it made durable:
    /// nothing is acknowledged as on stable storage from a file being removed.
    fn retire(&mut self) {
        self.shared.synced_end.store(0, Ordering::Release);
        self.current = None;
        self.syncing = None;
        self.pending_end = None;
        let _ = std::fs::remove_file(sync_path(&self.path));
        let _ = std::fs::remove_file(&self.path);
    }

    /// A write failed: the log is abandoned (the file keeps its good prefix, which a
    /// restart loads; the replica then resumes from there).
    fn fail(&mut self, why: &str) {
        self.shared.errors.fetch_add(1, Ordering::Relaxed);
        eprintln!(
            "dataplane: replica log {}: {why}; the log stops here",
            self.path.display()
        );
        self.current = None;
        self.pending_end = None;
        if self.syncing.take().is_some() {
            let _ = std::fs::remove_file(sync_path(&self.path));
        }
    }
}

fn sync_dir(path: &Path) -> std::io::Result<()> {
    match path.parent().filter(|d| !d.as_os_str().is_empty()) {
        Some(d) => std::fs::File::open(d)?.sync_all(),
        None => std::fs::File::open(".")?.sync_all(),
    }
}

fn mono_ns() -> u64 {
    kvcluster::mono_now_ns()
}

fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
