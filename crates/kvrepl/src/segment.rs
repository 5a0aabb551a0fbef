//! The stream segment: the payload of one RC RDMA WRITE Only with Immediate
//! (opcode 0x0B, framed by `kvwire::repl`).
//!
//! # Layout (all integers little-endian)
//!
//! ```text
//! offset size field
//! 0      1    magic        0x53 ('S')
//! 1      1    version      1
//! 2      1    kind         1 = LIVE, 2 = SYNC_DATA, 3 = SNAPSHOT_END
//! 3      1    reserved     0
//! 4      4    record_count records whose last byte is in this segment
//! 8      8    repl_id      the master's replication id
//! 16     8    epoch        the master's epoch
//! 24     8    start        offset of the first byte carried (see kind)
//! 32     8    live_offset  LIVE: = start; SYNC_DATA / SNAPSHOT_END: the live
//!                          offset the stream continues from after the sync
//! 40     …    bytes        stream bytes [start, start + len)
//! ```
//!
//! * `LIVE`: bytes of the live stream (offset space of the backlog).
//! * `SYNC_DATA`: bytes of a full sync's scan stream (its own offset space,
//!   starting at 0 for each sync session).
//! * `SNAPSHOT_END`: no bytes; `start` is the scan stream's end. The live
//!   stream follows from `live_offset`.
//!
//! The master cuts segments at record boundaries, except that a record longer
//! than a segment's capacity is carried in consecutive segments, each full;
//! the replica applies a record once all its bytes arrived.
//!
//! The frame's **immediate** is the low 32 bits of the segment's end offset
//! (`start + len`) in its offset space: a replica checks it against the
//! header (a mismatch is dropped as corrupt), and a receiver with a real RDMA
//! NIC learns from the completion alone how far the ring was written.

/// First byte of a segment.
pub const SEGMENT_MAGIC: u8 = 0x53;
/// Segment format version.
pub const SEGMENT_VERSION: u8 = 1;
/// Length of the segment header.
pub const SEGMENT_HEADER_LEN: usize = 40;

/// What a segment carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum SegmentKind {
    /// Bytes of the live stream.
    Live = 1,
    /// Bytes of a full sync's scan stream.
    SyncData = 2,
    /// The end of a full sync's scan stream; the live stream follows.
    SnapshotEnd = 3,
}

impl SegmentKind {
    fn from_u8(b: u8) -> Option<Self> {
        match b {
            1 => Some(Self::Live),
            2 => Some(Self::SyncData),
            3 => Some(Self::SnapshotEnd),
            _ => None,
        }
    }
}

/// A segment header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentHeader {
    /// What the segment carries.
    pub kind: SegmentKind,
    /// Records completed by this segment.
    pub record_count: u32,
    /// The master's replication id.
    pub repl_id: u64,
    /// The master's epoch.
    pub epoch: u64,
    /// Offset of the first byte carried.
    pub start: u64,
    /// See the module documentation.
    pub live_offset: u64,
}

/// Why a segment payload was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SegmentError {
    /// Shorter than the header.
    Truncated,
    /// Wrong magic or version, nonzero reserved byte, unknown kind, or a
    /// SNAPSHOT_END that carries bytes.
    BadHeader,
    /// The immediate is not the low 32 bits of the segment's end offset.
    BadImmediate,
    /// The offsets overflow.
    BadOffset,
}

impl core::fmt::Display for SegmentError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for SegmentError {}

impl SegmentHeader {
    /// Writes the header into `out[..SEGMENT_HEADER_LEN]`; `None` if `out`
    /// is shorter.
    pub fn encode(&self, out: &mut [u8]) -> Option<()> {
        let o = out.get_mut(..SEGMENT_HEADER_LEN)?;
        o[0] = SEGMENT_MAGIC;
        o[1] = SEGMENT_VERSION;
        o[2] = self.kind as u8;
        o[3] = 0;
        o[4..8].copy_from_slice(&self.record_count.to_le_bytes());
        o[8..16].copy_from_slice(&self.repl_id.to_le_bytes());
        o[16..24].copy_from_slice(&self.epoch.to_le_bytes());
        o[24..32].copy_from_slice(&self.start.to_le_bytes());
        o[32..40].copy_from_slice(&self.live_offset.to_le_bytes());
        Some(())
    }

    /// The immediate a segment with this header and `len` bytes carries.
    pub fn immediate(&self, len: usize) -> u32 {
        self.start.wrapping_add(len as u64) as u32
    }

    /// End offset of a segment with this header and `len` bytes.
    pub fn end(&self, len: usize) -> u64 {
        self.start.saturating_add(len as u64)
    }
}

/// Parses a segment payload; returns its header and its stream bytes.
/// Checks the immediate against the header.
pub fn parse_segment(payload: &[u8], imm: u32) -> Result<(SegmentHeader, &[u8]), SegmentError> {
    let h = payload
        .get(..SEGMENT_HEADER_LEN)
        .ok_or(SegmentError::Truncated)?;
    if h[0] != SEGMENT_MAGIC || h[1] != SEGMENT_VERSION || h[3] != 0 {
        return Err(SegmentError::BadHeader);
    }
    let kind = SegmentKind::from_u8(h[2]).ok_or(SegmentError::BadHeader)?;
    let le64 = |o: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[o..o + 8]);
        u64::from_le_bytes(b)
    };
    let hdr = SegmentHeader {
        kind,
        record_count: u32::from_le_bytes([h[4], h[5], h[6], h[7]]),
        repl_id: le64(8),
        epoch: le64(16),
        start: le64(24),
        live_offset: le64(32),
    };
    let bytes = &payload[SEGMENT_HEADER_LEN..];
    if kind == SegmentKind::SnapshotEnd && !bytes.is_empty() {
        return Err(SegmentError::BadHeader);
    }
    if hdr.start.checked_add(bytes.len() as u64).is_none() {
        return Err(SegmentError::BadOffset);
    }
    if hdr.immediate(bytes.len()) != imm {
        return Err(SegmentError::BadImmediate);
    }
    Ok((hdr, bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn header() -> SegmentHeader {
        SegmentHeader {
            kind: SegmentKind::Live,
            record_count: 3,
            repl_id: 0x1122_3344_5566_7788,
            epoch: 7,
            start: 0x1_0000_0010,
            live_offset: 0x1_0000_0010,
        }
    }

    #[test]
    fn layout_and_round_trip() {
        let h = header();
        let mut p = vec![0u8; SEGMENT_HEADER_LEN + 5];
        h.encode(&mut p).unwrap();
        p[SEGMENT_HEADER_LEN..].copy_from_slice(b"abcde");
        assert_eq!(&p[..8], &[0x53, 1, 1, 0, 3, 0, 0, 0]);
        assert_eq!(&p[24..32], &0x1_0000_0010u64.to_le_bytes());
        let imm = h.immediate(5);
        assert_eq!(imm, 0x15);
        assert_eq!(parse_segment(&p, imm), Ok((h, &b"abcde"[..])));
        assert_eq!(parse_segment(&p, imm + 1), Err(SegmentError::BadImmediate));
        assert_eq!(parse_segment(&p[..39], imm), Err(SegmentError::Truncated));
        assert!(h.encode(&mut [0u8; 39]).is_none());
        let mut bad = p.clone();
        bad[2] = 4;
        assert_eq!(parse_segment(&bad, imm), Err(SegmentError::BadHeader));
        let mut end = p.clone();
        end[2] = SegmentKind::SnapshotEnd as u8;
        assert_eq!(parse_segment(&end, imm), Err(SegmentError::BadHeader));
        assert!(parse_segment(&end[..SEGMENT_HEADER_LEN], h.immediate(0)).is_ok());
        let mut over = p.clone();
        over[24..32].copy_from_slice(&u64::MAX.to_le_bytes());
        assert_eq!(parse_segment(&over, 0), Err(SegmentError::BadOffset));
    }

    proptest! {
        #[test]
        fn random_payloads_never_panic(p in prop::collection::vec(any::<u8>(), 0..100), imm in any::<u32>()) {
            let _ = parse_segment(&p, imm);
        }
    }
}
