//! The snapshot file: every key of a store as post-image records, checksummed.
//!
//! # Format (version 1; all integers little-endian)
//!
//! ```text
//! header (64 B)
//!   0   8  magic           "KVDSNAP\0" (the replica log file, `crate::aof`: "KVDAOF\0\0")
//!   8   4  version         1
//!   12  4  header length   64
//!   16  8  replication id  of the stream the snapshot belongs to (0: none)
//!   24  8  epoch           (0: none)
//!   32  8  stream offset   the stream position the snapshot is consistent with
//!   40  4  partitions      of the store that wrote it (informational: a loader
//!                          re-partitions every key by its hash)
//!   44  4  flags           0 (others: refused)
//!   48  8  created         Unix time in milliseconds
//!   56  4  reserved        0
//!   60  4  crc32c          of bytes 0..60
//! block (any number)
//!   0   4  tag             "KVB\x01"
//!   4   4  records         number of records in the payload
//!   8   4  payload length  bytes, at most MAX_BLOCK_PAYLOAD
//!   12  8  stream end      the log file's stream offset after this block (snapshots: 0)
//!   20  4  crc32c          of bytes 0..20 (the header alone, so a damaged length is
//!                          caught before it is used)
//!   24  4  crc32c          of the payload
//!   28  .  payload         records back to back, in `crate::record`'s encoding
//! trailer (snapshots only; the log file has none)
//!   0   4  tag             "KVT\x01"
//!   4   4  reserved        0
//!   8   8  blocks          number of blocks
//!   16  8  records         number of records
//!   24  4  crc32c          of every byte of the file before this field
//! ```
//!
//! Records are applied in file order: a snapshot written while its store served
//! holds a key's scan record and the post-images of later writes to it, and the last
//! one wins (docs/OPERATIONS.md, "Snapshots and persistence").
//!
//! # Reading: verify first, then yield
//!
//! A snapshot is only ever used whole. [`SnapshotReader::open`] reads the *entire*
//! file once and checks everything (header, every block's checksum and records, the
//! trailer's counts, the file checksum, nothing after the trailer) before it returns;
//! only then does [`SnapshotReader::for_each`] read it again and hand out records,
//! re-checking every block before yielding any of its records and the trailer at the
//! end, so a file that changed between the two passes makes `for_each` fail. A caller
//! must therefore apply the records to a staging area that it discards when
//! `for_each` fails (the dataplane loads into engines that serve nothing until the
//! load returned `Ok`, and exits otherwise). Memory: one block.
//!
//! Errors are distinct ([`SnapshotError`]): not a snapshot (magic), an unsupported
//! version, truncated (the file ends early, also "ends before the trailer"), a
//! corrupt header, block or trailer (checksum, lengths, counts), data after the
//! trailer, and I/O errors.

use crate::record::{Record, RecordError, RecordReader};
use std::fmt;
use std::io::{self, Read, Seek, SeekFrom, Write};

/// Magic of a snapshot file.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"KVDSNAP\0";
/// The format version this code writes and reads.
pub const VERSION: u32 = 1;
/// Bytes of the file header.
pub const HEADER_LEN: usize = 64;
/// Bytes of a block header.
pub const BLOCK_HEADER_LEN: usize = 28;
/// Bytes of the trailer.
pub const TRAILER_LEN: usize = 28;
/// Largest block payload a reader accepts.
pub const MAX_BLOCK_PAYLOAD: usize = 1 << 20;
/// A writer closes a block once its payload reaches this size.
pub const BLOCK_TARGET: usize = 64 << 10;

pub(crate) const BLOCK_TAG: [u8; 4] = *b"KVB\x01";
pub(crate) const TRAILER_TAG: [u8; 4] = *b"KVT\x01";

/// The header fields of a snapshot (or replica log) file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotHeader {
    /// Replication id of the stream the file belongs to (0: none).
    pub repl_id: u64,
    /// Epoch (0: none).
    pub epoch: u64,
    /// Stream offset the file is consistent with (log file: where its stream starts).
    pub stream_offset: u64,
    /// Partitions of the store that wrote it.
    pub partitions: u32,
    /// Creation time, Unix milliseconds.
    pub created_unix_ms: u64,
}

impl SnapshotHeader {
    /// The 64-byte encoding with `magic`.
    pub(crate) fn encode(&self, magic: [u8; 8]) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&magic);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        h[16..24].copy_from_slice(&self.repl_id.to_le_bytes());
        h[24..32].copy_from_slice(&self.epoch.to_le_bytes());
        h[32..40].copy_from_slice(&self.stream_offset.to_le_bytes());
        h[40..44].copy_from_slice(&self.partitions.to_le_bytes());
        h[48..56].copy_from_slice(&self.created_unix_ms.to_le_bytes());
        let crc = crc32c::crc32c(&h[..60]);
        h[60..64].copy_from_slice(&crc.to_le_bytes());
        h
    }
}

/// What a verified file holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SnapshotInfo {
    /// Its header.
    pub header: SnapshotHeader,
    /// Blocks.
    pub blocks: u64,
    /// Records.
    pub records: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// Stream end of the last block (log files; 0 for an empty one or a snapshot).
    pub stream_end: u64,
}

/// Why a snapshot or log file was refused (or could not be written).
#[derive(Debug)]
pub enum SnapshotError {
    /// Reading or writing failed.
    Io(io::Error),
    /// The file does not start with the expected magic.
    WrongMagic {
        /// The magic expected.
        expected: [u8; 8],
        /// The first bytes found.
        found: [u8; 8],
    },
    /// A format version this code does not read.
    UnsupportedVersion(u32),
    /// The file ends early: `at` bytes read, `what` was being read.
    Truncated {
        /// Bytes of the file read.
        at: u64,
        /// What was being read.
        what: &'static str,
    },
    /// The header's checksum, length or flags are wrong.
    CorruptHeader(&'static str),
    /// Block `index` at byte `at` is corrupt.
    CorruptBlock {
        /// Block number (0: the first).
        index: u64,
        /// Its byte offset in the file.
        at: u64,
        /// What is wrong.
        why: BlockFault,
    },
    /// The trailer does not match the file.
    CorruptTrailer(&'static str),
    /// Bytes follow the trailer.
    TrailingData {
        /// Offset of the first byte after the trailer.
        at: u64,
    },
    /// The file changed between verification and reading.
    Changed,
    /// A record could not be written (writer side).
    BadRecord(RecordError),
}

/// What is wrong with a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BlockFault {
    /// Neither a block nor a trailer tag.
    UnknownTag([u8; 4]),
    /// The payload length is beyond [`MAX_BLOCK_PAYLOAD`].
    TooLong(u32),
    /// The block header's checksum does not match.
    HeaderChecksum,
    /// The payload's checksum does not match.
    Checksum,
    /// The payload does not decode as records.
    Record(RecordError),
    /// The payload holds another number of records than the header says.
    Count {
        /// Records the header says.
        header: u32,
        /// Records decoded.
        decoded: u32,
    },
    /// A stream end below the previous block's (log files).
    StreamEnd,
    /// A trailer where none belongs (log files).
    UnexpectedTrailer,
}

impl fmt::Display for BlockFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UnknownTag(t) => write!(f, "unknown tag {t:02x?}"),
            Self::TooLong(n) => write!(f, "payload of {n} B exceeds {MAX_BLOCK_PAYLOAD}"),
            Self::HeaderChecksum => f.write_str("block header checksum mismatch"),
            Self::Checksum => f.write_str("payload checksum mismatch"),
            Self::Record(e) => write!(f, "bad record: {e}"),
            Self::Count { header, decoded } => {
                write!(f, "header says {header} records, payload holds {decoded}")
            }
            Self::StreamEnd => f.write_str("stream offset goes backwards"),
            Self::UnexpectedTrailer => f.write_str("a trailer in a log file"),
        }
    }
}

impl fmt::Display for SnapshotError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Io(e) => write!(f, "I/O error: {e}"),
            Self::WrongMagic { expected, found } => write!(
                f,
                "not a {} file (magic {:?}, expected {:?})",
                if *expected == SNAPSHOT_MAGIC {
                    "snapshot"
                } else {
                    "replica log"
                },
                String::from_utf8_lossy(found),
                String::from_utf8_lossy(expected)
            ),
            Self::UnsupportedVersion(v) => {
                write!(
                    f,
                    "unsupported format version {v} (this build reads {VERSION})"
                )
            }
            Self::Truncated { at, what } => {
                write!(f, "truncated: file ends at byte {at} inside the {what}")
            }
            Self::CorruptHeader(why) => write!(f, "corrupt header: {why}"),
            Self::CorruptBlock { index, at, why } => {
                write!(f, "corrupt block {index} at byte {at}: {why}")
            }
            Self::CorruptTrailer(why) => write!(f, "corrupt trailer: {why}"),
            Self::TrailingData { at } => write!(f, "data after the trailer at byte {at}"),
            Self::Changed => f.write_str("the file changed while it was read"),
            Self::BadRecord(e) => write!(f, "record not writable: {e}"),
        }
    }
}

impl std::error::Error for SnapshotError {}

impl From<io::Error> for SnapshotError {
    fn from(e: io::Error) -> Self {
        Self::Io(e)
    }
}

/// One item of a file after the header.
pub(crate) enum Item<'b> {
    /// A checked block's payload (whole records).
    Block { payload: &'b [u8] },
    /// A checked trailer (counts and file checksum match).
    Trailer,
    /// The file ends cleanly between two items.
    End,
}

/// Reads and checks a file item by item, keeping the running file checksum and counts.
pub(crate) struct Scanner<R> {
    r: R,
    /// Bytes read so far.
    pub at: u64,
    crc: u32,
    pub blocks: u64,
    pub records: u64,
    pub stream_end: u64,
    pub header: SnapshotHeader,
    buf: Vec<u8>,
}

impl<R: Read> Scanner<R> {
    /// Reads and checks the header.
    pub fn new(r: R, magic: [u8; 8]) -> Result<Self, SnapshotError> {
        let mut s = Scanner {
            r,
            at: 0,
            crc: 0,
            blocks: 0,
            records: 0,
            stream_end: 0,
            header: SnapshotHeader::default(),
            buf: Vec::new(),
        };
        let mut h = [0u8; HEADER_LEN];
        let n = s.read_some(&mut h[..8])?;
        if n < 8 {
            return Err(SnapshotError::Truncated {
                at: s.at,
                what: "header",
            });
        }
        let found: [u8; 8] = h[..8].try_into().expect("8 bytes");
        if found != magic {
            return Err(SnapshotError::WrongMagic {
                expected: magic,
                found,
            });
        }
        s.fill(&mut h[8..12], "header")?;
        let version = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        if version != VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        s.fill(&mut h[12..], "header")?;
        let u32_at = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().expect("4 bytes"));
        let u64_at = |i: usize| u64::from_le_bytes(h[i..i + 8].try_into().expect("8 bytes"));
        if crc32c::crc32c(&h[..60]) != u32_at(60) {
            return Err(SnapshotError::CorruptHeader("checksum mismatch"));
        }
        if u32_at(12) as usize != HEADER_LEN {
            return Err(SnapshotError::CorruptHeader("header length is not 64"));
        }
        if u32_at(44) != 0 || u32_at(56) != 0 {
            return Err(SnapshotError::CorruptHeader("unknown flags"));
        }
        s.header = SnapshotHeader {
            repl_id: u64_at(16),
            epoch: u64_at(24),
            stream_offset: u64_at(32),
            partitions: u32_at(40),
            created_unix_ms: u64_at(48),
        };
        s.crc = crc32c::crc32c(&h);
        Ok(s)
    }

    /// Whether the file ends here (reads one byte to see).
    pub fn at_eof(&mut self) -> Result<bool, SnapshotError> {
        let mut probe = [0u8; 1];
        Ok(self.read_some(&mut probe)? == 0)
    }

    /// Whether every byte from here to the end of the file is zero.
    pub fn rest_is_zero(&mut self) -> Result<bool, SnapshotError> {
        let mut buf = [0u8; 4096];
        loop {
            let n = self.read_some(&mut buf)?;
            if buf[..n].iter().any(|&b| b != 0) {
                return Ok(false);
            }
            if n < buf.len() {
                return Ok(true);
            }
        }
    }

    /// Reads up to `buf.len()` bytes (fewer only at the end of the file).
    fn read_some(&mut self, buf: &mut [u8]) -> Result<usize, SnapshotError> {
        let mut n = 0;
        while n < buf.len() {
            match self.r.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        self.at += n as u64;
        Ok(n)
    }

    /// Reads exactly `buf.len()` bytes or fails as truncated inside `what`.
    fn fill(&mut self, buf: &mut [u8], what: &'static str) -> Result<(), SnapshotError> {
        if self.read_some(buf)? < buf.len() {
            return Err(SnapshotError::Truncated { at: self.at, what });
        }
        Ok(())
    }

    /// The next item, checked. `trailer`: this file kind ends with a trailer (a
    /// snapshot); else (a log file) a clean end between blocks is its end.
    pub fn next_item(&mut self, trailer: bool) -> Result<Item<'_>, SnapshotError> {
        let start = self.at;
        let index = self.blocks;
        let corrupt = |why| SnapshotError::CorruptBlock {
            index,
            at: start,
            why,
        };
        let mut tag = [0u8; 4];
        let n = self.read_some(&mut tag)?;
        if n == 0 && !trailer {
            return Ok(Item::End);
        }
        if n < 4 {
            let what = if n == 0 {
                "file: no trailer"
            } else {
                "block header"
            };
            return Err(SnapshotError::Truncated { at: self.at, what });
        }
        if tag == TRAILER_TAG {
            if !trailer {
                return Err(corrupt(BlockFault::UnexpectedTrailer));
            }
            return self.trailer(tag);
        }
        if tag != BLOCK_TAG {
            return Err(corrupt(BlockFault::UnknownTag(tag)));
        }
        let mut h = [0u8; BLOCK_HEADER_LEN];
        h[..4].copy_from_slice(&tag);
        self.fill(&mut h[4..], "block header")?;
        let records = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
        let len = u32::from_le_bytes(h[8..12].try_into().expect("4 bytes"));
        let stream_end = u64::from_le_bytes(h[12..20].try_into().expect("8 bytes"));
        let hcrc = u32::from_le_bytes(h[20..24].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(h[24..28].try_into().expect("4 bytes"));
        if crc32c::crc32c(&h[..20]) != hcrc {
            return Err(corrupt(BlockFault::HeaderChecksum));
        }
        if len as usize > MAX_BLOCK_PAYLOAD {
            return Err(corrupt(BlockFault::TooLong(len)));
        }
        let mut buf = std::mem::take(&mut self.buf);
        buf.resize(len as usize, 0);
        let filled = self.fill(&mut buf, "block payload");
        self.buf = buf;
        filled?;
        let payload = &self.buf[..];
        if crc32c::crc32c(payload) != crc {
            return Err(corrupt(BlockFault::Checksum));
        }
        let mut decoded = 0u32;
        for r in RecordReader::new(payload) {
            r.map_err(|e| corrupt(BlockFault::Record(e)))?;
            decoded += 1;
        }
        if decoded != records {
            return Err(corrupt(BlockFault::Count {
                header: records,
                decoded,
            }));
        }
        if !trailer && stream_end < self.stream_end.max(self.header.stream_offset) {
            return Err(corrupt(BlockFault::StreamEnd));
        }
        self.crc = crc32c::crc32c_append(crc32c::crc32c_append(self.crc, &h), payload);
        self.blocks += 1;
        self.records += u64::from(records);
        self.stream_end = stream_end;
        Ok(Item::Block { payload })
    }

    /// Checks the trailer (its tag already read) and that nothing follows it.
    fn trailer(&mut self, tag: [u8; 4]) -> Result<Item<'_>, SnapshotError> {
        let mut t = [0u8; TRAILER_LEN];
        t[..4].copy_from_slice(&tag);
        self.fill(&mut t[4..], "trailer")?;
        let crc = crc32c::crc32c_append(self.crc, &t[..24]);
        let u64_at = |i: usize| u64::from_le_bytes(t[i..i + 8].try_into().expect("8 bytes"));
        if u32::from_le_bytes(t[24..28].try_into().expect("4 bytes")) != crc {
            return Err(SnapshotError::CorruptTrailer("file checksum mismatch"));
        }
        if t[4..8] != [0; 4] {
            return Err(SnapshotError::CorruptTrailer("reserved bytes not zero"));
        }
        if u64_at(8) != self.blocks || u64_at(16) != self.records {
            return Err(SnapshotError::CorruptTrailer(
                "block or record count mismatch",
            ));
        }
        let end = self.at;
        if !self.at_eof()? {
            return Err(SnapshotError::TrailingData { at: end });
        }
        Ok(Item::Trailer)
    }

    /// What was verified so far.
    pub fn info(&self) -> SnapshotInfo {
        SnapshotInfo {
            header: self.header,
            blocks: self.blocks,
            records: self.records,
            bytes: self.at,
            stream_end: self.stream_end,
        }
    }

    /// The reader back.
    pub fn into_inner(self) -> R {
        self.r
    }
}

/// Checks a whole snapshot read from `r` (any `Read`, constant memory).
pub fn verify<R: Read>(r: R) -> Result<SnapshotInfo, SnapshotError> {
    let mut s = Scanner::new(r, SNAPSHOT_MAGIC)?;
    loop {
        match s.next_item(true)? {
            Item::Block { .. } => {}
            Item::Trailer | Item::End => return Ok(s.info()),
        }
    }
}

/// A verified snapshot (or replica log file, `crate::aof::open_reader`), ready to
/// be read (see the module docs: verify first, then yield).
#[derive(Debug)]
pub struct SnapshotReader<R> {
    r: R,
    info: SnapshotInfo,
    magic: [u8; 8],
    trailer: bool,
}

impl<R: Read + Seek> SnapshotReader<R> {
    /// Verifies the whole snapshot from its start, then rewinds.
    pub fn open(r: R) -> Result<Self, SnapshotError> {
        Self::open_as(r, SNAPSHOT_MAGIC, true)
    }

    /// [`SnapshotReader::open`] for a file kind: its magic and whether it ends with a
    /// trailer.
    pub(crate) fn open_as(mut r: R, magic: [u8; 8], trailer: bool) -> Result<Self, SnapshotError> {
        r.seek(SeekFrom::Start(0))?;
        let mut s = Scanner::new(r, magic)?;
        while let Item::Block { .. } = s.next_item(trailer)? {}
        let info = s.info();
        let mut r = s.into_inner();
        r.seek(SeekFrom::Start(0))?;
        Ok(SnapshotReader {
            r,
            info,
            magic,
            trailer,
        })
    }

    /// What the verified file holds.
    pub fn info(&self) -> &SnapshotInfo {
        &self.info
    }

    /// Hands every record to `f` in file order, re-checking each block before any of
    /// its records is yielded; an error from `f` stops the read and is returned as
    /// `Err(Ok(e))`; a file that no longer verifies (or differs from what `open`
    /// verified) is `Err(Err(..))` — discard what was applied.
    pub fn for_each<E>(
        self,
        mut f: impl FnMut(Record<'_>) -> Result<(), E>,
    ) -> Result<SnapshotInfo, Result<E, SnapshotError>> {
        let mut s = Scanner::new(self.r, self.magic).map_err(Err)?;
        if s.header != self.info.header {
            return Err(Err(SnapshotError::Changed));
        }
        while let Item::Block { payload } = s.next_item(self.trailer).map_err(Err)? {
            for r in RecordReader::new(payload) {
                // Checked by next_item.
                let Ok(r) = r else {
                    return Err(Err(SnapshotError::Changed));
                };
                f(r).map_err(Ok)?;
            }
        }
        let info = s.info();
        if info != self.info {
            return Err(Err(SnapshotError::Changed));
        }
        Ok(info)
    }
}

/// Block framing shared by the snapshot writer and the log file writer: records
/// collected into a payload, written as one checksummed block.
#[derive(Debug, Default)]
pub(crate) struct BlockBuf {
    pub payload: Vec<u8>,
    pub records: u32,
}

impl BlockBuf {
    /// Appends one record (validated).
    pub fn push(&mut self, rec: &Record<'_>) -> Result<(), SnapshotError> {
        rec.validate().map_err(SnapshotError::BadRecord)?;
        let at = self.payload.len();
        self.payload.resize(at + rec.encoded_len(), 0);
        rec.encode_into(&mut self.payload[at..])
            .map_err(SnapshotError::BadRecord)?;
        self.records += 1;
        Ok(())
    }

    /// The block (header + payload) as bytes for one write; empties the buffer.
    pub fn take_block(&mut self, stream_end: u64, out: &mut Vec<u8>) {
        out.clear();
        out.extend_from_slice(&BLOCK_TAG);
        out.extend_from_slice(&self.records.to_le_bytes());
        out.extend_from_slice(&(self.payload.len() as u32).to_le_bytes());
        out.extend_from_slice(&stream_end.to_le_bytes());
        let hcrc = crc32c::crc32c(out);
        out.extend_from_slice(&hcrc.to_le_bytes());
        out.extend_from_slice(&crc32c::crc32c(&self.payload).to_le_bytes());
        out.extend_from_slice(&self.payload);
        self.payload.clear();
        self.records = 0;
    }
}

/// Writes a snapshot to any `Write`: the header at once, records in blocks of about
/// [`BLOCK_TARGET`] bytes, the trailer at [`SnapshotWriter::finish`]. A file without
/// its trailer is refused by every reader, so a writer that stops early (a crash, an
/// error) never leaves a file that loads.
pub struct SnapshotWriter<W: Write> {
    w: W,
    crc: u32,
    block: BlockBuf,
    out: Vec<u8>,
    info: SnapshotInfo,
}

impl<W: Write> SnapshotWriter<W> {
    /// Writes the header.
    pub fn new(mut w: W, header: &SnapshotHeader) -> Result<Self, SnapshotError> {
        let h = header.encode(SNAPSHOT_MAGIC);
        w.write_all(&h)?;
        Ok(SnapshotWriter {
            w,
            crc: crc32c::crc32c(&h),
            block: BlockBuf::default(),
            out: Vec::new(),
            info: SnapshotInfo {
                header: *header,
                bytes: HEADER_LEN as u64,
                ..SnapshotInfo::default()
            },
        })
    }

    /// Appends a record.
    pub fn push(&mut self, rec: &Record<'_>) -> Result<(), SnapshotError> {
        self.block.push(rec)?;
        self.info.records += 1;
        if self.block.payload.len() >= BLOCK_TARGET {
            self.write_block()?;
        }
        Ok(())
    }

    /// Appends one record given in its encoding (e.g. as drained from a log ring).
    pub fn push_encoded(&mut self, bytes: &[u8]) -> Result<(), SnapshotError> {
        let (rec, n) = Record::decode(bytes).map_err(SnapshotError::BadRecord)?;
        if n != bytes.len() {
            return Err(SnapshotError::BadRecord(RecordError::BadLayout));
        }
        self.push(&rec)
    }

    /// Records written so far (blocks still buffered included).
    pub fn records(&self) -> u64 {
        self.info.records
    }

    /// Bytes written so far (the open block not included).
    pub fn bytes(&self) -> u64 {
        self.info.bytes
    }

    fn write_block(&mut self) -> Result<(), SnapshotError> {
        if self.block.records == 0 {
            return Ok(());
        }
        self.block.take_block(0, &mut self.out);
        self.w.write_all(&self.out)?;
        self.crc = crc32c::crc32c_append(self.crc, &self.out);
        self.info.blocks += 1;
        self.info.bytes += self.out.len() as u64;
        Ok(())
    }

    /// Writes the last block and the trailer, flushes; returns the writer and what
    /// the file holds. (A file on disk still needs `sync_all` and, to appear whole,
    /// a rename from a temporary name: the dataplane does both.)
    pub fn finish(mut self) -> Result<(W, SnapshotInfo), SnapshotError> {
        self.write_block()?;
        let mut t = [0u8; TRAILER_LEN];
        t[..4].copy_from_slice(&TRAILER_TAG);
        t[8..16].copy_from_slice(&self.info.blocks.to_le_bytes());
        t[16..24].copy_from_slice(&self.info.records.to_le_bytes());
        let crc = crc32c::crc32c_append(self.crc, &t[..24]);
        t[24..28].copy_from_slice(&crc.to_le_bytes());
        self.w.write_all(&t)?;
        self.w.flush()?;
        self.info.bytes += TRAILER_LEN as u64;
        Ok((self.w, self.info))
    }
}

#[cfg(test)]
mod tests;
