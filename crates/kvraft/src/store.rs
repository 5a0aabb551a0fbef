//! The Raft log as raft-rs reads it ([`raft::Storage`]): the entries after the
//! compaction point, the hard state (term, vote, commit) and the configuration.
//!
//! What a snapshot is here (docs/FAILOVER.md, "Snapshots are scans"): the state
//! machine is rebuilt from the log alone. A leader periodically logs a **scan** of
//! its store — SCAN_BEGIN, chunks of the keys' current values as entries among the
//! live writes, SCAN_END — and once a scan's end is committed, everything before its
//! beginning is no longer needed: a node that lacks it starts empty and replays the
//! log from that scan's beginning. So a snapshot carries no data: its index is the
//! entry before the last completed scan's SCAN_BEGIN, and installing it means "empty
//! the store". A snapshot asked for at a later index (a node whose own state went
//! wrong) waits for a new scan ([`LogStore::snapshot`] answers "temporarily
//! unavailable" and flags it).

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot, SnapshotMetadata};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};
use std::cell::Cell;

/// The data of every snapshot (it carries no state: see the module docs).
pub const SNAPSHOT_DATA: &[u8] = b"KVD-SCAN-SNAPSHOT";

/// The log, in memory.
#[derive(Debug, Default)]
pub struct LogStore {
    hard: HardState,
    conf: ConfState,
    /// The compaction point: index and term of the last entry dropped.
    snap: SnapshotMetadata,
    /// `entries[i].index == snap.index + 1 + i`.
    entries: Vec<Entry>,
    /// A snapshot was asked for beyond the compaction point: a new scan is needed.
    scan_wanted: Cell<bool>,
}

impl LogStore {
    /// A log restored from durable state: hard state, configuration, compaction point
    /// and the entries after it.
    pub fn restore(
        hard: HardState,
        conf: ConfState,
        snap: SnapshotMetadata,
        entries: Vec<Entry>,
    ) -> LogStore {
        debug_assert!(entries.iter().take(1).all(|e| e.index == snap.index + 1));
        LogStore {
            hard,
            conf,
            snap,
            entries,
            scan_wanted: Cell::new(false),
        }
    }

    /// A founding member's log: a compaction point at index 1, term 1, with the
    /// founding configuration (as raft-rs groups bootstrap: every founding member
    /// starts from the same snapshot, and a node added later gets one too, so the
    /// configuration it starts from is always in it).
    pub fn founding(conf: ConfState) -> LogStore {
        let mut s = LogStore::default();
        s.snap.index = 1;
        s.snap.term = 1;
        s.snap.set_conf_state(conf.clone());
        s.conf = conf;
        s.hard.term = 1;
        s.hard.commit = 1;
        s
    }

    /// The hard state.
    pub fn hard_state(&self) -> &HardState {
        &self.hard
    }

    /// Sets the hard state.
    pub fn set_hard_state(&mut self, hs: HardState) {
        self.hard = hs;
    }

    /// Sets the commit index (a light ready's).
    pub fn set_commit(&mut self, commit: u64) {
        self.hard.commit = commit;
    }

    /// The configuration.
    pub fn conf_state(&self) -> &ConfState {
        &self.conf
    }

    /// Sets the configuration (an applied conf change).
    pub fn set_conf_state(&mut self, cs: ConfState) {
        self.conf = cs;
    }

    /// The compaction point.
    pub fn compacted(&self) -> &SnapshotMetadata {
        &self.snap
    }

    /// The last index.
    pub fn last(&self) -> u64 {
        self.entries.last().map_or(self.snap.index, |e| e.index)
    }

    /// Appends `ents` (consecutive), dropping every entry at or after their first
    /// index; the first index dropped, if any was.
    pub fn append(&mut self, ents: &[Entry]) -> Option<u64> {
        let first = ents.first()?;
        assert!(
            first.index > self.snap.index,
            "append below the compaction point"
        );
        assert!(first.index <= self.last() + 1, "a gap in the log");
        let keep = (first.index - self.snap.index - 1) as usize;
        let truncated = (keep < self.entries.len()).then_some(first.index);
        self.entries.truncate(keep);
        self.entries.extend_from_slice(ents);
        truncated
    }

    /// Installs snapshot `meta`: the log restarts after it.
    pub fn apply_snapshot(&mut self, meta: &SnapshotMetadata) {
        self.entries.clear();
        self.snap = meta.clone();
        self.conf = meta.get_conf_state().clone();
        if self.hard.commit < meta.index {
            self.hard.commit = meta.index;
        }
        if self.hard.term < meta.term {
            self.hard.term = meta.term;
        }
    }

    /// Drops the entries up to and including `index` (which must be applied): the new
    /// compaction point. Its configuration is `conf`.
    pub fn compact(&mut self, index: u64, conf: &ConfState) {
        if index <= self.snap.index {
            return;
        }
        assert!(index <= self.last(), "compaction past the log");
        let term = self.term_of(index).unwrap_or(0);
        let n = (index - self.snap.index) as usize;
        self.entries.drain(..n);
        self.snap.index = index;
        self.snap.term = term;
        self.snap.set_conf_state(conf.clone());
    }

    /// The entries, for persistence and tests.
    pub fn entries_all(&self) -> &[Entry] {
        &self.entries
    }

    /// Whether a snapshot was asked for that the compaction point cannot give (and
    /// clears the flag): a new scan is needed.
    pub fn take_scan_wanted(&self) -> bool {
        self.scan_wanted.replace(false)
    }

    fn term_of(&self, idx: u64) -> Option<u64> {
        if idx == self.snap.index {
            return Some(self.snap.term);
        }
        let off = idx.checked_sub(self.snap.index + 1)?;
        self.entries.get(off as usize).map(|e| e.term)
    }
}

impl Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard.clone(),
            conf_state: self.conf.clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low <= self.snap.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let lo = (low - self.snap.index - 1) as usize;
        let hi = (high - self.snap.index - 1) as usize;
        let mut out = self.entries[lo..hi].to_vec();
        raft::util::limit_size(&mut out, max_size.into());
        Ok(out)
    }

    fn term(&self, idx: u64) -> raft::Result<u64> {
        if idx < self.snap.index {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        self.term_of(idx)
            .ok_or(raft::Error::Store(StorageError::Unavailable))
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.snap.index + 1)
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, to: u64) -> raft::Result<Snapshot> {
        let cs = self.snap.get_conf_state();
        let member = cs.voters.contains(&to) || cs.learners.contains(&to);
        // A node added after the compaction point is not in its configuration (raft-rs
        // refuses such a snapshot): only a newer scan can give it one.
        if request_index > self.snap.index || !member {
            // Only a newer scan can give it.
            self.scan_wanted.set(true);
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        let mut s = Snapshot::default();
        s.set_metadata(self.snap.clone());
        s.data = SNAPSHOT_DATA.to_vec().into();
        Ok(s)
    }
}
