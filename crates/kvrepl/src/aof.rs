//! The replica's append-only log file: the replication stream's post-image records,
//! appended as they are applied, with Redis AOF's fsync policies.
//!
//! # Format
//!
//! The snapshot format of [`crate::snapshot`] with magic `"KVDAOF\0\0"`, the header's
//! stream offset = the stream position of the file's first record, and no trailer: the
//! file is the header followed by blocks, each carrying its `stream end` (the stream
//! offset after its last record), non-decreasing. Replaying the file in order onto the
//! state at the header's stream offset gives the state at the last block's stream end,
//! which is where a restarted replica asks the master to continue (partial resync).
//! A file begun by a full sync has stream offset 0 (its first records are the
//! master's snapshot, which has no stream position) and ends the sync with an empty
//! block ([`AofWriter::mark`]) carrying the live offset the sync reached.
//!
//! # Writing and fsync policy
//!
//! [`AofWriter::append`] buffers records; [`AofWriter::commit`] writes them as one
//! block (one `write`) and then, by policy (Redis `appendfsync`):
//!
//! * `always`: `fdatasync` before `commit` returns. A replica that acknowledges an
//!   offset only after its commit loses nothing it acknowledged, even on power loss.
//! * `everysec`: `fdatasync` when the last one is a second old or more, from `commit`
//!   or from [`AofWriter::tick`] (call it about every 100 ms): a power loss or kernel
//!   crash loses at most about the last second; a crash of the process alone loses
//!   nothing committed (it is in the page cache).
//! * `no`: never `fdatasync` while running (the kernel writes back, typically within
//!   30 s on Linux); [`AofWriter::close`] syncs.
//!
//! Commit returns whether the data is now on stable storage, so a caller can
//! acknowledge accordingly. File I/O belongs on a control thread, never on an lcore.
//!
//! # Recovery ([`recover`], done by [`AofWriter::open`])
//!
//! A crash can leave the last block incomplete. Recovery reads the file through the
//! snapshot reader's checks and truncates **only the last block, and only if** it is
//!
//! 1. incomplete: the file ends inside its block header or payload; or
//! 2. complete but failing its checksum with nothing after it (a write the disk got
//!    only partly, the rest zeros or old bytes); or
//! 3. a tail of zero bytes where a block header should start (a file system that
//!    extended the file before the data reached the disk).
//!
//! The file is cut at the end of the last good block and synced. Anything else —
//! a bad header, a corrupt block followed by more data, a trailer, a stream offset
//! going backwards — is corruption: refused with the reader's error, the file left
//! untouched. A bit flip inside the last block is indistinguishable from case 2 and
//! is truncated too; the replica then resumes from the previous block's stream end,
//! so the master sends those records again. A file shorter than its header is refused
//! (creation writes and syncs the header, and the directory entry, before any block).
//!
//! Reading ([`open_reader`]) applies the snapshot reader's rules (verify first, then
//! yield) with one difference: the file may end cleanly after any block. A torn tail
//! is an error there; recover first.

use crate::record::Record;
use crate::snapshot::{
    BlockBuf, BlockFault, Item, Scanner, SnapshotError, SnapshotHeader, SnapshotInfo,
    SnapshotReader, HEADER_LEN,
};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::Path;
use std::str::FromStr;

/// Magic of a replica log file.
pub const AOF_MAGIC: [u8; 8] = *b"KVDAOF\0\0";

/// Nanoseconds between two `fdatasync`s under [`FsyncPolicy::EverySec`].
const SECOND_NS: u64 = 1_000_000_000;

/// When the log file is synced to stable storage (Redis `appendfsync`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FsyncPolicy {
    /// After every commit.
    Always,
    /// At most once a second.
    EverySec,
    /// Never while running (the kernel decides); at close.
    No,
}

impl FromStr for FsyncPolicy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "always" => Ok(Self::Always),
            "everysec" => Ok(Self::EverySec),
            "no" => Ok(Self::No),
            _ => Err(format!(
                "fsync policy {s:?}: expected always, everysec or no"
            )),
        }
    }
}

impl fmt::Display for FsyncPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Always => "always",
            Self::EverySec => "everysec",
            Self::No => "no",
        })
    }
}

/// What recovery found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recovery {
    /// The good part of the file (what remains).
    pub info: SnapshotInfo,
    /// Bytes cut off the end (0: the file was whole).
    pub truncated_bytes: u64,
}

/// Checks the log file at `path` and cuts a torn last block off (module docs);
/// refuses a corrupt file without touching it.
pub fn recover(path: &Path) -> Result<Recovery, SnapshotError> {
    let file = OpenOptions::new().read(true).write(true).open(path)?;
    let len = file.metadata()?.len();
    let mut s = Scanner::new(std::io::BufReader::new(&file), AOF_MAGIC)?;
    let mut good = s.info();
    let torn = loop {
        let start = s.at;
        let index = s.blocks;
        // The item's borrow of the scanner ends here.
        let step = match s.next_item(false) {
            Ok(Item::Block { .. }) => Ok(true),
            Ok(Item::End | Item::Trailer) => Ok(false),
            Err(e) => Err(e),
        };
        match step {
            Ok(true) => good = s.info(),
            Ok(false) => break false,
            Err(SnapshotError::Truncated { .. }) => break true,
            Err(SnapshotError::CorruptBlock {
                why: BlockFault::Checksum,
                ..
            }) if s.at_eof()? => break true,
            Err(SnapshotError::CorruptBlock {
                why: BlockFault::UnknownTag(tag),
                ..
            }) if tag == [0; 4] && s.rest_is_zero()? => break true,
            Err(e) => {
                return Err(match e {
                    // Name the block by where it starts.
                    SnapshotError::CorruptBlock { why, .. } => SnapshotError::CorruptBlock {
                        index,
                        at: start,
                        why,
                    },
                    e => e,
                });
            }
        }
    };
    drop(s);
    let mut truncated_bytes = 0;
    if torn {
        truncated_bytes = len - good.bytes;
        file.set_len(good.bytes)?;
        file.sync_all()?;
    }
    Ok(Recovery {
        info: good,
        truncated_bytes,
    })
}

/// A reader of a whole log file (verify first, then yield; see the module docs).
pub fn open_reader<R: Read + Seek>(r: R) -> Result<SnapshotReader<R>, SnapshotError> {
    SnapshotReader::open_as(r, AOF_MAGIC, false)
}

/// Appends records to a log file (module docs).
#[derive(Debug)]
pub struct AofWriter {
    file: File,
    policy: FsyncPolicy,
    block: BlockBuf,
    out: Vec<u8>,
    info: SnapshotInfo,
    /// Time of the last fdatasync (or of opening).
    last_sync_ns: u64,
    /// Written since the last fdatasync.
    dirty: bool,
    syncs: u64,
}

impl AofWriter {
    /// Creates a new log file (refusing an existing one) whose stream starts at
    /// `header.stream_offset`; the header and the directory entry are synced.
    pub fn create(
        path: &Path,
        header: &SnapshotHeader,
        policy: FsyncPolicy,
        now_ns: u64,
    ) -> Result<Self, SnapshotError> {
        let mut file = OpenOptions::new().write(true).create_new(true).open(path)?;
        file.write_all(&header.encode(AOF_MAGIC))?;
        file.sync_all()?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            File::open(dir)?.sync_all()?;
        }
        Ok(AofWriter {
            file,
            policy,
            block: BlockBuf::default(),
            out: Vec::new(),
            info: SnapshotInfo {
                header: *header,
                bytes: HEADER_LEN as u64,
                stream_end: header.stream_offset,
                ..SnapshotInfo::default()
            },
            last_sync_ns: now_ns,
            dirty: false,
            syncs: 0,
        })
    }

    /// Opens an existing log file to append to it, after [`recover`].
    pub fn open(
        path: &Path,
        policy: FsyncPolicy,
        now_ns: u64,
    ) -> Result<(Self, Recovery), SnapshotError> {
        let rec = recover(path)?;
        let mut file = OpenOptions::new().write(true).open(path)?;
        file.seek(SeekFrom::Start(rec.info.bytes))?;
        let mut info = rec.info;
        info.stream_end = info.stream_end.max(info.header.stream_offset);
        Ok((
            AofWriter {
                file,
                policy,
                block: BlockBuf::default(),
                out: Vec::new(),
                info,
                last_sync_ns: now_ns,
                dirty: false,
                syncs: 0,
            },
            rec,
        ))
    }

    /// Buffers a record for the next commit.
    pub fn append(&mut self, rec: &Record<'_>) -> Result<(), SnapshotError> {
        self.block.push(rec)
    }

    /// Writes the buffered records as one block ending at stream offset `stream_end`
    /// (not below the last one's) and syncs by policy; returns whether everything
    /// committed so far is on stable storage. Nothing buffered: only the policy's sync.
    pub fn commit(&mut self, stream_end: u64, now_ns: u64) -> Result<bool, SnapshotError> {
        if self.block.records > 0 {
            if stream_end < self.info.stream_end {
                return Err(SnapshotError::CorruptBlock {
                    index: self.info.blocks,
                    at: self.info.bytes,
                    why: BlockFault::StreamEnd,
                });
            }
            let records = self.block.records;
            self.block.take_block(stream_end, &mut self.out);
            self.file.write_all(&self.out)?;
            self.info.blocks += 1;
            self.info.records += u64::from(records);
            self.info.bytes += self.out.len() as u64;
            self.info.stream_end = stream_end;
            self.dirty = true;
        }
        match self.policy {
            FsyncPolicy::Always => self.sync(now_ns)?,
            FsyncPolicy::EverySec => {
                self.tick(now_ns)?;
            }
            FsyncPolicy::No => {}
        }
        Ok(!self.dirty)
    }

    /// Like [`AofWriter::commit`], but writes a block even when nothing is buffered
    /// (then an empty one), so that the file records that the stream reached
    /// `stream_end` — e.g. the end of a full sync, whose last records may be in an
    /// earlier block.
    pub fn mark(&mut self, stream_end: u64, now_ns: u64) -> Result<bool, SnapshotError> {
        if self.block.records == 0 && stream_end > self.info.stream_end {
            self.block.take_block(stream_end, &mut self.out);
            self.file.write_all(&self.out)?;
            self.info.blocks += 1;
            self.info.bytes += self.out.len() as u64;
            self.info.stream_end = stream_end;
            self.dirty = true;
        }
        self.commit(stream_end, now_ns)
    }

    /// Rewrites the header's replication id and epoch in place and syncs (the replica
    /// now follows a new master that continues the same stream under a new id). The
    /// 64-byte header is one sector: a crash leaves the old or the new one.
    pub fn set_stream(&mut self, repl_id: u64, epoch: u64) -> Result<(), SnapshotError> {
        use std::os::unix::fs::FileExt;
        let mut h = self.info.header;
        h.repl_id = repl_id;
        h.epoch = epoch;
        self.file.write_all_at(&h.encode(AOF_MAGIC), 0)?;
        self.file.sync_data()?;
        self.info.header = h;
        Ok(())
    }

    /// Changes the fsync policy (e.g. a file written without syncs during a full sync
    /// becomes the replica's log under the configured policy).
    pub fn set_policy(&mut self, policy: FsyncPolicy) {
        self.policy = policy;
    }

    /// Bytes buffered for the next commit (a block's payload is at most 1 MiB).
    pub fn buffered_bytes(&self) -> usize {
        self.block.payload.len()
    }

    /// Under `everysec`, syncs what was written when the last sync is a second old;
    /// returns whether it synced.
    pub fn tick(&mut self, now_ns: u64) -> Result<bool, SnapshotError> {
        if self.policy == FsyncPolicy::EverySec
            && self.dirty
            && now_ns.saturating_sub(self.last_sync_ns) >= SECOND_NS
        {
            self.sync(now_ns)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// `fdatasync` now, whatever the policy.
    pub fn sync(&mut self, now_ns: u64) -> Result<(), SnapshotError> {
        if self.dirty {
            self.file.sync_data()?;
            self.syncs += 1;
            self.dirty = false;
        }
        self.last_sync_ns = now_ns;
        Ok(())
    }

    /// Commits what is buffered and syncs (every policy).
    pub fn close(mut self, stream_end: u64, now_ns: u64) -> Result<SnapshotInfo, SnapshotError> {
        self.commit(stream_end, now_ns)?;
        self.sync(now_ns)?;
        Ok(self.info)
    }

    /// What the file holds (committed blocks).
    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }

    /// `fdatasync` calls so far.
    pub fn syncs(&self) -> u64 {
        self.syncs
    }

    /// The policy.
    pub fn policy(&self) -> FsyncPolicy {
        self.policy
    }
}

#[cfg(test)]
mod tests;
