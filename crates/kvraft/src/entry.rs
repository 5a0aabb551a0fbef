//! What a log entry carries (the first byte of a normal entry's data names it; an
//! empty entry is the no-op a new leader appends):
//!
//! | kind | name | rest |
//! |---|---|---|
//! | `0x01` | RECORDS | post-image records (docs/REPLICATION.md §2), opaque here |
//! | `0x02` | SCAN_BEGIN | scan id (8 bytes LE) |
//! | `0x03` | SCAN_END | scan id (8 bytes LE) |
//!
//! A scan's chunks are RECORDS entries between its SCAN_BEGIN and SCAN_END
//! (`crate::store`: snapshots are scans).

/// Kind byte of a RECORDS entry.
pub const RECORDS: u8 = 0x01;
/// Kind byte of a SCAN_BEGIN entry.
pub const SCAN_BEGIN: u8 = 0x02;
/// Kind byte of a SCAN_END entry.
pub const SCAN_END: u8 = 0x03;

/// A decoded entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A new leader's no-op.
    Noop,
    /// Records.
    Records(&'a [u8]),
    /// A scan begins.
    ScanBegin(u64),
    /// A scan ended: every key was logged since its SCAN_BEGIN.
    ScanEnd(u64),
    /// Anything else (ignored: a newer version's kind).
    Unknown,
}

/// Decodes an entry's data.
pub fn decode(data: &[u8]) -> Payload<'_> {
    let id = |d: &[u8]| -> Option<u64> { Some(u64::from_le_bytes(d.get(1..9)?.try_into().ok()?)) };
    match data.first() {
        None => Payload::Noop,
        Some(&RECORDS) => Payload::Records(&data[1..]),
        Some(&SCAN_BEGIN) => id(data).map_or(Payload::Unknown, Payload::ScanBegin),
        Some(&SCAN_END) => id(data).map_or(Payload::Unknown, Payload::ScanEnd),
        Some(_) => Payload::Unknown,
    }
}

/// A RECORDS entry's data.
pub fn records(recs: &[u8]) -> Vec<u8> {
    let mut d = Vec::with_capacity(1 + recs.len());
    d.push(RECORDS);
    d.extend_from_slice(recs);
    d
}

/// A SCAN_BEGIN or SCAN_END entry's data.
pub fn scan_marker(kind: u8, id: u64) -> Vec<u8> {
    let mut d = vec![kind];
    d.extend_from_slice(&id.to_le_bytes());
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        assert_eq!(decode(&records(b"abc")), Payload::Records(b"abc"));
        assert_eq!(decode(&scan_marker(SCAN_BEGIN, 7)), Payload::ScanBegin(7));
        assert_eq!(decode(&scan_marker(SCAN_END, 7)), Payload::ScanEnd(7));
        assert_eq!(decode(&[]), Payload::Noop);
        assert_eq!(decode(&[SCAN_END, 1]), Payload::Unknown);
        assert_eq!(decode(&[9]), Payload::Unknown);
    }
}
