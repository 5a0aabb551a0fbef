//! What survives a crash: the durable copy of a node's Raft state (hard state,
//! compaction point and configuration, entries), written before the messages and
//! acknowledgements that depend on it, and synced according to the fsync policy.
//!
//! | policy | synced | a process crash (kill -9) keeps | a machine crash keeps |
//! |---|---|---|---|
//! | `always` | every ready that must be (entries, term, vote) before its messages go | everything written | everything a message or acknowledgement depended on |
//! | `everysec` | at most a second after it was written | everything written | what was synced: up to the last second may be lost |
//! | `no` | when the OS writes it back | everything written | an unknown suffix |
//!
//! Raft's safety needs the first row: only `always` keeps every acknowledged write
//! through a whole-cluster power loss. Under the others a group survives any process
//! crashes (the OS keeps what was written), but not machine crashes of a majority.

use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};

/// When written state is made durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Before any message or acknowledgement that depends on it (Raft's rule).
    Always,
    /// Once a second.
    EverySec,
    /// Never by us (the OS writes back when it likes).
    No,
}

/// The state a node restarts with.
#[derive(Clone, Debug, Default)]
pub struct Recovered {
    /// Term, vote, commit.
    pub hard: HardState,
    /// The configuration.
    pub conf: ConfState,
    /// The compaction point.
    pub snap: SnapshotMetadata,
    /// The entries after it.
    pub entries: Vec<Entry>,
}

impl Recovered {
    /// Whether anything was kept (a node that lost its disk restarts with nothing).
    pub fn is_empty(&self) -> bool {
        self.hard == HardState::default() && self.entries.is_empty() && self.snap.index == 0
    }
}

/// A node's durable Raft state.
pub trait Durable {
    /// Writes `ents` (consecutive), replacing everything from their first index on.
    fn append(&mut self, ents: &[Entry]);
    /// Writes the hard state.
    fn set_hard_state(&mut self, hs: &HardState);
    /// Writes a new compaction point within the log: the entries up to it are dropped.
    fn compact(&mut self, meta: &SnapshotMetadata);
    /// Writes an installed snapshot: every entry is dropped, the log restarts after it.
    fn install_snapshot(&mut self, meta: &SnapshotMetadata);
    /// Writes the configuration.
    fn set_conf_state(&mut self, cs: &ConfState);
    /// Makes everything written so far survive a machine crash.
    fn sync(&mut self);
}

/// The durable state in memory, with what a machine crash would keep kept apart: the
/// simulation's disk.
#[derive(Clone, Debug, Default)]
pub struct MemDisk {
    /// What is written (a process crash keeps it).
    pub written: Recovered,
    /// What is synced (a machine crash keeps it).
    pub synced: Recovered,
    /// Syncs so far.
    pub syncs: u64,
}

impl Durable for MemDisk {
    fn append(&mut self, ents: &[Entry]) {
        let Some(first) = ents.first() else { return };
        let w = &mut self.written;
        let keep = first.index.saturating_sub(w.snap.index + 1) as usize;
        w.entries.truncate(keep.min(w.entries.len()));
        w.entries.extend_from_slice(ents);
    }

    fn set_hard_state(&mut self, hs: &HardState) {
        self.written.hard = hs.clone();
    }

    fn compact(&mut self, meta: &SnapshotMetadata) {
        let w = &mut self.written;
        let drop = (meta.index.saturating_sub(w.snap.index) as usize).min(w.entries.len());
        w.entries.drain(..drop);
        w.snap = meta.clone();
    }

    fn install_snapshot(&mut self, meta: &SnapshotMetadata) {
        let w = &mut self.written;
        w.entries.clear();
        w.snap = meta.clone();
        w.conf = meta.get_conf_state().clone();
    }

    fn set_conf_state(&mut self, cs: &ConfState) {
        self.written.conf = cs.clone();
    }

    fn sync(&mut self) {
        self.synced = self.written.clone();
        self.syncs += 1;
    }
}
