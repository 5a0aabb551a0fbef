//! A node's durable Raft state in one append-only file ([`FileDisk`]): every change is
//! a record, and a restarted node replays them.
//!
//! ```text
//! record := len (u32 LE: kind + body) | crc32 (u32 LE, zlib's, of kind + body) | kind (u8) | body
//! kind   := 1 ENTRY    body = a raft Entry (protobuf); replaces every entry at or after its index
//!           2 HARD     body = HardState (protobuf)
//!           3 CONF     body = ConfState (protobuf)
//!           4 COMPACT  body = SnapshotMetadata (protobuf): entries up to its index dropped
//!           5 INSTALL  body = SnapshotMetadata (protobuf): every entry dropped, the log restarts after it
//! ```
//!
//! A record is durable once synced (`fdatasync`). After a machine crash the file may end
//! in a torn record; reading stops at the first record that is short or fails its CRC,
//! and the file is cut there. When the dropped records outweigh the live ones, the file
//! is rewritten (a new file, synced, renamed over the old one, the directory synced).

use crate::durable::{Durable, Recovered};
use protobuf::Message as _;
use raft::eraftpb::{ConfState, Entry, HardState, SnapshotMetadata};
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

const ENTRY: u8 = 1;
const HARD: u8 = 2;
const CONF: u8 = 3;
const COMPACT: u8 = 4;
const INSTALL: u8 = 5;
/// Bytes before a record's kind.
const HEADER: usize = 8;
/// Largest record body read back (a corrupt length is not trusted past it).
const MAX_RECORD: usize = 64 << 20;

/// The durable state in a file (module docs).
pub struct FileDisk {
    path: PathBuf,
    file: File,
    /// Bytes written since the last rewrite, and the live bytes (entries kept).
    written: u64,
    live: Recovered,
    live_bytes: u64,
    /// Writes are buffered here and written at `sync` or when large.
    buf: Vec<u8>,
    /// Syncs so far.
    pub syncs: u64,
}

fn crc(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn encode(out: &mut Vec<u8>, kind: u8, body: &[u8]) {
    let len = (1 + body.len()) as u32;
    let mut c = crc32fast::Hasher::new();
    c.update(&[kind]);
    c.update(body);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&c.finalize().to_le_bytes());
    out.push(kind);
    out.extend_from_slice(body);
}

/// Replays `bytes`; the state and the length of the intact prefix.
fn replay(bytes: &[u8]) -> (Recovered, usize) {
    let mut r = Recovered::default();
    let mut at = 0;
    while bytes.len() - at > HEADER {
        let len = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap_or_default()) as usize;
        let sum = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap_or_default());
        if len == 0 || len > MAX_RECORD || bytes.len() - at - HEADER < len {
            break;
        }
        let rec = &bytes[at + HEADER..at + HEADER + len];
        if crc(rec) != sum {
            break;
        }
        let body = &rec[1..];
        let ok = match rec[0] {
            ENTRY => Entry::parse_from_bytes(body)
                .map(|e| push_entry(&mut r, e))
                .is_ok(),
            HARD => HardState::parse_from_bytes(body)
                .map(|h| r.hard = h)
                .is_ok(),
            CONF => ConfState::parse_from_bytes(body)
                .map(|c| r.conf = c)
                .is_ok(),
            COMPACT => SnapshotMetadata::parse_from_bytes(body)
                .map(|m| compact(&mut r, m))
                .is_ok(),
            INSTALL => SnapshotMetadata::parse_from_bytes(body)
                .map(|m| {
                    r.entries.clear();
                    r.conf = m.get_conf_state().clone();
                    r.snap = m;
                })
                .is_ok(),
            _ => false,
        };
        if !ok {
            break;
        }
        at += HEADER + len;
    }
    (r, at)
}

fn push_entry(r: &mut Recovered, e: Entry) {
    let keep = e.index.saturating_sub(r.snap.index + 1) as usize;
    r.entries.truncate(keep.min(r.entries.len()));
    r.entries.push(e);
}

fn compact(r: &mut Recovered, m: SnapshotMetadata) {
    let drop = (m.index.saturating_sub(r.snap.index) as usize).min(r.entries.len());
    r.entries.drain(..drop);
    r.snap = m;
}

fn bytes_of(m: &impl protobuf::Message) -> Vec<u8> {
    m.write_to_bytes().unwrap_or_default()
}

impl FileDisk {
    /// Opens (or creates) the log at `path`; what it held.
    pub fn open(path: &Path) -> io::Result<(FileDisk, Recovered)> {
        let mut bytes = Vec::new();
        if path.exists() {
            File::open(path)?.read_to_end(&mut bytes)?;
        }
        let (r, intact) = replay(&bytes);
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .open(path)?;
        // A torn tail (a crash mid-write) is cut off.
        file.set_len(intact as u64)?;
        let mut file = file;
        io::Seek::seek(&mut file, io::SeekFrom::End(0))?;
        let live_bytes = r.entries.iter().map(|e| e.data.len() as u64 + 32).sum();
        let d = FileDisk {
            path: path.to_path_buf(),
            file,
            written: intact as u64,
            live: r.clone(),
            live_bytes,
            buf: Vec::with_capacity(1 << 20),
            syncs: 0,
        };
        Ok((d, r))
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            self.file.write_all(&self.buf)?;
            self.written += self.buf.len() as u64;
            self.buf.clear();
        }
        Ok(())
    }

    fn put(&mut self, kind: u8, body: &[u8]) {
        encode(&mut self.buf, kind, body);
        if self.buf.len() >= 1 << 20 {
            // Errors surface at the next sync.
            let _ = self.flush();
        }
    }

    /// Rewrites the file with the live state alone (atomically: a new file, synced,
    /// renamed over this one, the directory synced).
    fn rewrite(&mut self) -> io::Result<()> {
        self.flush()?;
        let tmp = self.path.with_extension("rewrite");
        let mut out = Vec::new();
        encode(&mut out, INSTALL, &bytes_of(&self.live.snap));
        encode(&mut out, CONF, &bytes_of(&self.live.conf));
        encode(&mut out, HARD, &bytes_of(&self.live.hard));
        for e in &self.live.entries {
            encode(&mut out, ENTRY, &bytes_of(e));
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_data()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            File::open(dir)?.sync_all()?;
        }
        self.file = OpenOptions::new().read(true).write(true).open(&self.path)?;
        io::Seek::seek(&mut self.file, io::SeekFrom::End(0))?;
        self.written = out.len() as u64;
        Ok(())
    }
}

impl Durable for FileDisk {
    fn append(&mut self, ents: &[Entry]) {
        for e in ents {
            self.live_bytes += e.data.len() as u64 + 32;
            push_entry(&mut self.live, e.clone());
            self.put(ENTRY, &bytes_of(e));
        }
    }

    fn set_hard_state(&mut self, hs: &HardState) {
        self.live.hard = hs.clone();
        self.put(HARD, &bytes_of(hs));
    }

    fn compact(&mut self, meta: &SnapshotMetadata) {
        compact(&mut self.live, meta.clone());
        self.live_bytes = self
            .live
            .entries
            .iter()
            .map(|e| e.data.len() as u64 + 32)
            .sum();
        self.put(COMPACT, &bytes_of(meta));
    }

    fn install_snapshot(&mut self, meta: &SnapshotMetadata) {
        self.live.entries.clear();
        self.live.conf = meta.get_conf_state().clone();
        self.live.snap = meta.clone();
        self.live_bytes = 0;
        self.put(INSTALL, &bytes_of(meta));
    }

    fn set_conf_state(&mut self, cs: &ConfState) {
        self.live.conf = cs.clone();
        self.put(CONF, &bytes_of(cs));
    }

    fn sync(&mut self) {
        // A failed write or sync cannot be acknowledged: the node stops rather than
        // promise what its disk does not hold.
        if let Err(e) = self.flush().and_then(|_| self.file.sync_data()) {
            panic!(
                "raft log {}: {e}: cannot keep what was acknowledged",
                self.path.display()
            );
        }
        self.syncs += 1;
        if self.written > 64 << 20 && self.written > 4 * self.live_bytes {
            if let Err(e) = self.rewrite() {
                panic!("raft log {}: rewrite: {e}", self.path.display());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64, data: &[u8]) -> Entry {
        Entry {
            index,
            term,
            data: data.to_vec().into(),
            ..Entry::default()
        }
    }

    #[test]
    fn what_was_synced_comes_back_and_a_torn_tail_is_cut() {
        let dir = std::env::temp_dir().join(format!("kvraft-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("raft.log");
        let _ = std::fs::remove_file(&path);
        {
            let (mut d, r) = FileDisk::open(&path).unwrap();
            assert!(r.is_empty());
            d.append(&[entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")]);
            d.append(&[entry(3, 2, b"C")]); // replaces index 3
            d.set_hard_state(&HardState {
                term: 2,
                vote: 7,
                commit: 2,
                ..HardState::default()
            });
            let m = SnapshotMetadata {
                index: 1,
                term: 1,
                ..SnapshotMetadata::default()
            };
            d.compact(&m);
            d.sync();
        }
        // A torn record at the end (a crash mid-write).
        OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap()
            .write_all(&[9, 0, 0, 0, 1, 2])
            .unwrap();
        let (_, r) = FileDisk::open(&path).unwrap();
        assert_eq!((r.hard.term, r.hard.vote, r.snap.index), (2, 7, 1));
        let got: Vec<(u64, u64, Vec<u8>)> = r
            .entries
            .iter()
            .map(|e| (e.index, e.term, e.data.to_vec()))
            .collect();
        assert_eq!(got, vec![(2, 1, b"b".to_vec()), (3, 2, b"C".to_vec())]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
