//! The post-image record codec shared by the replication stream, snapshots
//! and the replica's log file.
//!
//! A record says what a key *is* after a mutation, never which operation
//! made it, so applying a record twice gives the same state (a fetch-add
//! replicates as the value it produced).
//!
//! # Encoding
//!
//! Every record is a 4-byte header followed by two byte strings; all
//! integers are little-endian and nothing is padded or aligned:
//!
//! ```text
//! offset  size  field
//! 0       1     kind   1 = PUT, 2 = DELETE, 3 = QP_STATE, 4 = GROUP (others: invalid)
//! 1       1     klen   key length (0..=255)
//! 2       2     vlen   value length (0..=65535), u16 LE
//! 4       klen  key
//! 4+klen  vlen  value
//! ```
//!
//! * `PUT`: `key` → `value`. Empty keys and values are allowed.
//! * `DELETE`: `key` deleted; `vlen` must be 0.
//! * `QP_STATE`: an opaque per-QP completion blob for exactly-once retries
//!   across a failover; `klen` must be 4 and the "key" is the QPN (u32 LE,
//!   the upper 8 bits must be 0: QPNs are 24-bit), the "value" is the blob.
//! * `GROUP`: the records in the next `bytes` bytes (a u32 LE value, `klen` 0,
//!   `vlen` 4) are one transaction's post-images: a replica applies them
//!   together, so that no read sees part of them. They follow the GROUP record
//!   in its worker's order (other workers' records may come between them in the
//!   stream; a transaction's keys are all in one partition).
//!
//! The widths hold the wire's limits exactly: `kvwire::MAX_KEY_LEN` is 255
//! and `kvwire::MAX_VALUE_LEN` is 65535 (the engine's own limits are lower:
//! 255 and ~4 KiB; a reader can be given them with
//! [`RecordReader::with_limits`]). A record is therefore at most
//! [`MAX_RECORD_LEN`] = 4 + 255 + 65535 bytes.
//!
//! Records are concatenated back to back in a stream segment, a snapshot
//! body and the replica's log file.

use core::fmt;

/// Length of the fixed record header (kind, klen, vlen).
pub const RECORD_HEADER_LEN: usize = 4;
/// Longest key a record can carry (`kvwire::MAX_KEY_LEN`).
pub const MAX_RECORD_KEY_LEN: usize = kvwire::MAX_KEY_LEN;
/// Longest value a record can carry (`kvwire::MAX_VALUE_LEN`).
pub const MAX_RECORD_VALUE_LEN: usize = kvwire::MAX_VALUE_LEN;
/// Longest encoded record.
pub const MAX_RECORD_LEN: usize = RECORD_HEADER_LEN + MAX_RECORD_KEY_LEN + MAX_RECORD_VALUE_LEN;

/// Record kind byte: PUT.
pub const KIND_PUT: u8 = 1;
/// Record kind byte: DELETE.
pub const KIND_DELETE: u8 = 2;
/// Record kind byte: QP_STATE (opaque per-QP completion state).
pub const KIND_QP_STATE: u8 = 3;
/// Record kind byte: GROUP (the next records form one transaction).
pub const KIND_GROUP: u8 = 4;
/// Encoded length of a GROUP record.
pub const GROUP_RECORD_LEN: usize = RECORD_HEADER_LEN + 4;

/// Length of the QPN "key" of a QP_STATE record.
const QPN_LEN: usize = 4;
/// QPNs are 24-bit (BTH DestQP).
const QPN_MAX: u32 = 0x00FF_FFFF;

// The header's widths must hold the wire's limits.
const _: () = assert!(MAX_RECORD_KEY_LEN <= u8::MAX as usize);
const _: () = assert!(MAX_RECORD_VALUE_LEN <= u16::MAX as usize);

/// One post-image record, borrowing its bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Record<'a> {
    /// `key` now holds `value`.
    Put {
        /// The key.
        key: &'a [u8],
        /// Its new value.
        value: &'a [u8],
    },
    /// `key` was deleted.
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// Opaque completion state of one QP (exactly-once across failover).
    QpState {
        /// The QP number (24-bit).
        qpn: u32,
        /// The state blob; its format belongs to the transport.
        bytes: &'a [u8],
    },
    /// The records in the next `bytes` bytes of this partition's stream are one
    /// transaction: applied together or not yet at all.
    Group {
        /// Encoded bytes of the group's records (this record excluded).
        bytes: u32,
    },
}

/// Why a record could not be encoded or decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordError {
    /// Decoding: the buffer ends inside a record (`need` bytes from the
    /// record's start, `have` left).
    Truncated {
        /// Bytes the record needs from its start.
        need: usize,
        /// Bytes left in the buffer.
        have: usize,
    },
    /// Decoding: unknown kind byte.
    BadKind(u8),
    /// Key longer than the limit in force.
    KeyTooLong {
        /// The key's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Value (or QP blob) longer than the limit in force.
    ValueTooLong {
        /// The value's length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Decoding: a DELETE with a value, or a QP_STATE whose key is not a
    /// 4-byte QPN.
    BadLayout,
    /// A QPN above 24 bits.
    BadQpn(u32),
    /// Encoding: the output buffer is shorter than the record.
    BufferTooSmall {
        /// Bytes the record needs.
        need: usize,
        /// Bytes available.
        have: usize,
    },
}

impl fmt::Display for RecordError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Self::Truncated { need, have } => {
                write!(f, "record truncated: needs {need} bytes, {have} left")
            }
            Self::BadKind(k) => write!(f, "unknown record kind {k}"),
            Self::KeyTooLong { len, max } => write!(f, "record key of {len} bytes exceeds {max}"),
            Self::ValueTooLong { len, max } => {
                write!(f, "record value of {len} bytes exceeds {max}")
            }
            Self::BadLayout => write!(f, "record lengths do not fit its kind"),
            Self::BadQpn(q) => write!(f, "QPN {q:#x} is wider than 24 bits"),
            Self::BufferTooSmall { need, have } => {
                write!(f, "record needs {need} bytes, buffer has {have}")
            }
        }
    }
}

impl std::error::Error for RecordError {}

impl<'a> Record<'a> {
    /// The kind byte of this record.
    pub fn kind(&self) -> u8 {
        match self {
            Self::Put { .. } => KIND_PUT,
            Self::Delete { .. } => KIND_DELETE,
            Self::QpState { .. } => KIND_QP_STATE,
            Self::Group { .. } => KIND_GROUP,
        }
    }

    /// Key and value lengths as encoded (klen, vlen).
    fn lens(&self) -> (usize, usize) {
        match self {
            Self::Put { key, value } => (key.len(), value.len()),
            Self::Delete { key } => (key.len(), 0),
            Self::QpState { bytes, .. } => (QPN_LEN, bytes.len()),
            Self::Group { .. } => (0, 4),
        }
    }

    /// Bytes this record takes encoded (header included).
    pub fn encoded_len(&self) -> usize {
        let (k, v) = self.lens();
        RECORD_HEADER_LEN + k + v
    }

    /// Checks the record against the codec's limits.
    pub fn validate(&self) -> Result<(), RecordError> {
        let (k, v) = self.lens();
        if k > MAX_RECORD_KEY_LEN {
            return Err(RecordError::KeyTooLong {
                len: k,
                max: MAX_RECORD_KEY_LEN,
            });
        }
        if v > MAX_RECORD_VALUE_LEN {
            return Err(RecordError::ValueTooLong {
                len: v,
                max: MAX_RECORD_VALUE_LEN,
            });
        }
        if let Self::QpState { qpn, .. } = *self {
            if qpn > QPN_MAX {
                return Err(RecordError::BadQpn(qpn));
            }
        }
        Ok(())
    }

    /// Writes the 4-byte header of this record into `out[..4]`.
    /// The caller has validated the record and sized `out`.
    fn header(&self) -> [u8; RECORD_HEADER_LEN] {
        let (k, v) = self.lens();
        let v = (v as u16).to_le_bytes();
        [self.kind(), k as u8, v[0], v[1]]
    }

    /// Encodes the record at the start of `out`; returns the bytes written.
    /// Never panics: an invalid record or a short buffer is an error and
    /// leaves `out` untouched.
    pub fn encode_into(&self, out: &mut [u8]) -> Result<usize, RecordError> {
        self.validate()?;
        let need = self.encoded_len();
        let Some(out) = out.get_mut(..need) else {
            return Err(RecordError::BufferTooSmall {
                need,
                have: out.len(),
            });
        };
        out[..RECORD_HEADER_LEN].copy_from_slice(&self.header());
        let body = &mut out[RECORD_HEADER_LEN..];
        match *self {
            Self::Put { key, value } => {
                body[..key.len()].copy_from_slice(key);
                body[key.len()..].copy_from_slice(value);
            }
            Self::Delete { key } => body.copy_from_slice(key),
            Self::QpState { qpn, bytes } => {
                body[..QPN_LEN].copy_from_slice(&qpn.to_le_bytes());
                body[QPN_LEN..].copy_from_slice(bytes);
            }
            Self::Group { bytes } => body.copy_from_slice(&bytes.to_le_bytes()),
        }
        Ok(need)
    }

    /// The record as its header plus two body pieces (key, value; for
    /// QP_STATE the QPN bytes, written into `qpn`, and the blob; for GROUP
    /// nothing and its length, written into `qpn`), for writers
    /// that scatter it without an intermediate copy (e.g. across a ring's
    /// wrap). The record must be valid ([`Record::validate`]).
    pub fn parts<'s>(&'s self, qpn: &'s mut [u8; 4]) -> ([u8; RECORD_HEADER_LEN], [&'s [u8]; 2]) {
        let hdr = self.header();
        match *self {
            Self::Put { key, value } => (hdr, [key, value]),
            Self::Delete { key } => (hdr, [key, &[]]),
            Self::QpState { qpn: q, bytes } => {
                *qpn = q.to_le_bytes();
                (hdr, [&qpn[..], bytes])
            }
            Self::Group { bytes } => {
                *qpn = bytes.to_le_bytes();
                (hdr, [&[], &qpn[..]])
            }
        }
    }

    /// Decodes one record at the start of `buf` with the codec's limits;
    /// returns it and its encoded length.
    pub fn decode(buf: &'a [u8]) -> Result<(Record<'a>, usize), RecordError> {
        decode_with(buf, MAX_RECORD_KEY_LEN, MAX_RECORD_VALUE_LEN)
    }
}

/// Decodes one record at the start of `buf`, enforcing the given limits.
fn decode_with(
    buf: &[u8],
    max_key: usize,
    max_value: usize,
) -> Result<(Record<'_>, usize), RecordError> {
    let Some(hdr) = buf.get(..RECORD_HEADER_LEN) else {
        return Err(RecordError::Truncated {
            need: RECORD_HEADER_LEN,
            have: buf.len(),
        });
    };
    let kind = hdr[0];
    let klen = usize::from(hdr[1]);
    let vlen = usize::from(u16::from_le_bytes([hdr[2], hdr[3]]));
    if !matches!(kind, KIND_PUT | KIND_DELETE | KIND_QP_STATE | KIND_GROUP) {
        return Err(RecordError::BadKind(kind));
    }
    match kind {
        KIND_DELETE if vlen != 0 => return Err(RecordError::BadLayout),
        KIND_QP_STATE if klen != QPN_LEN => return Err(RecordError::BadLayout),
        KIND_GROUP if klen != 0 || vlen != 4 => return Err(RecordError::BadLayout),
        _ => {}
    }
    if kind != KIND_QP_STATE && klen > max_key {
        return Err(RecordError::KeyTooLong {
            len: klen,
            max: max_key,
        });
    }
    if vlen > max_value {
        return Err(RecordError::ValueTooLong {
            len: vlen,
            max: max_value,
        });
    }
    let need = RECORD_HEADER_LEN + klen + vlen;
    let Some(body) = buf.get(RECORD_HEADER_LEN..need) else {
        return Err(RecordError::Truncated {
            need,
            have: buf.len(),
        });
    };
    let (key, value) = body.split_at(klen);
    let rec = match kind {
        KIND_PUT => Record::Put { key, value },
        KIND_DELETE => Record::Delete { key },
        KIND_GROUP => Record::Group {
            bytes: u32::from_le_bytes([value[0], value[1], value[2], value[3]]),
        },
        _ => {
            let qpn = u32::from_le_bytes([key[0], key[1], key[2], key[3]]);
            if qpn > QPN_MAX {
                return Err(RecordError::BadQpn(qpn));
            }
            Record::QpState { qpn, bytes: value }
        }
    };
    Ok((rec, need))
}

/// Iterator over the records packed back to back in a byte slice.
///
/// Yields `Ok(record)` for each whole record; on the first malformed or
/// truncated record it yields that error once and then stops (a stream
/// cannot be resynchronised past a bad length). [`RecordReader::offset`]
/// tells how many bytes were consumed by good records.
#[derive(Clone, Debug)]
pub struct RecordReader<'a> {
    buf: &'a [u8],
    pos: usize,
    max_key: usize,
    max_value: usize,
    failed: bool,
}

impl<'a> RecordReader<'a> {
    /// Reader with the codec's limits (255-byte keys, 65535-byte values).
    pub fn new(buf: &'a [u8]) -> Self {
        Self::with_limits(buf, MAX_RECORD_KEY_LEN, MAX_RECORD_VALUE_LEN)
    }

    /// Reader that also rejects keys longer than `max_key` and values longer
    /// than `max_value` (e.g. the engine's limits), as errors.
    pub fn with_limits(buf: &'a [u8], max_key: usize, max_value: usize) -> Self {
        Self {
            buf,
            pos: 0,
            max_key,
            max_value,
            failed: false,
        }
    }

    /// Bytes consumed by the records yielded so far.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// Bytes not yet consumed.
    pub fn remaining(&self) -> &'a [u8] {
        &self.buf[self.pos..]
    }
}

impl<'a> Iterator for RecordReader<'a> {
    type Item = Result<Record<'a>, RecordError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        match decode_with(&self.buf[self.pos..], self.max_key, self.max_value) {
            Ok((rec, n)) => {
                self.pos += n;
                Some(Ok(rec))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Owned record for proptest strategies.
    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Owned {
        Put(Vec<u8>, Vec<u8>),
        Delete(Vec<u8>),
        Qp(u32, Vec<u8>),
        Group(u32),
    }

    impl Owned {
        fn as_record(&self) -> Record<'_> {
            match self {
                Owned::Put(k, v) => Record::Put { key: k, value: v },
                Owned::Delete(k) => Record::Delete { key: k },
                Owned::Qp(q, b) => Record::QpState { qpn: *q, bytes: b },
                Owned::Group(n) => Record::Group { bytes: *n },
            }
        }
    }

    fn owned() -> impl Strategy<Value = Owned> {
        prop_oneof![
            (
                prop::collection::vec(any::<u8>(), 0..=255),
                prop::collection::vec(any::<u8>(), 0..600)
            )
                .prop_map(|(k, v)| Owned::Put(k, v)),
            prop::collection::vec(any::<u8>(), 0..=255).prop_map(Owned::Delete),
            (0..=QPN_MAX, prop::collection::vec(any::<u8>(), 0..100))
                .prop_map(|(q, b)| Owned::Qp(q, b)),
            any::<u32>().prop_map(Owned::Group),
        ]
    }

    proptest! {
        #[test]
        fn round_trip_stream(recs in prop::collection::vec(owned(), 0..40)) {
            let total: usize = recs.iter().map(|r| r.as_record().encoded_len()).sum();
            let mut buf = vec![0u8; total];
            let mut at = 0;
            for r in &recs {
                at += r.as_record().encode_into(&mut buf[at..]).unwrap();
            }
            prop_assert_eq!(at, total);
            let back: Vec<Record<'_>> = RecordReader::new(&buf).map(|r| r.unwrap()).collect();
            let want: Vec<Record<'_>> = recs.iter().map(|r| r.as_record()).collect();
            prop_assert_eq!(back, want);
        }

        #[test]
        fn every_truncation_is_an_error(r in owned(), cut in 0usize..1000) {
            let rec = r.as_record();
            let mut buf = vec![0u8; rec.encoded_len()];
            rec.encode_into(&mut buf).unwrap();
            let cut = cut % buf.len();
            let mut rd = RecordReader::new(&buf[..cut]);
            match rd.next() {
                None => prop_assert_eq!(cut, 0),
                Some(Err(RecordError::Truncated { .. })) => {}
                Some(other) => prop_assert!(false, "{:?}", other),
            }
            prop_assert!(rd.next().is_none());
        }

        #[test]
        fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2000)) {
            let mut consumed = 0;
            let mut rd = RecordReader::new(&bytes);
            for r in rd.by_ref() {
                match r {
                    Ok(rec) => consumed += rec.encoded_len(),
                    Err(_) => break,
                }
            }
            prop_assert_eq!(rd.offset(), consumed);
            prop_assert!(rd.offset() <= bytes.len());
        }

        #[test]
        fn short_output_is_an_error(r in owned(), short in 1usize..300) {
            let rec = r.as_record();
            let n = rec.encoded_len().saturating_sub(short);
            let mut buf = vec![0xAAu8; n];
            prop_assert!(
                matches!(rec.encode_into(&mut buf), Err(RecordError::BufferTooSmall { .. })),
                "short buffer must fail"
            );
            prop_assert!(buf.iter().all(|&b| b == 0xAA));
        }
    }

    #[test]
    fn layout_is_as_documented() {
        let mut buf = [0u8; 16];
        let n = Record::Put {
            key: b"ab",
            value: b"xyz",
        }
        .encode_into(&mut buf)
        .unwrap();
        assert_eq!(&buf[..n], &[1, 2, 3, 0, b'a', b'b', b'x', b'y', b'z']);
        let n = Record::Delete { key: b"k" }.encode_into(&mut buf).unwrap();
        assert_eq!(&buf[..n], &[2, 1, 0, 0, b'k']);
        let n = Record::QpState {
            qpn: 0x12_3456,
            bytes: &[9],
        }
        .encode_into(&mut buf)
        .unwrap();
        assert_eq!(&buf[..n], &[3, 4, 1, 0, 0x56, 0x34, 0x12, 0, 9]);
    }

    #[test]
    fn bad_inputs_are_errors() {
        let mut buf = [0u8; 8];
        let long_key = [0u8; 256];
        assert!(matches!(
            Record::Delete { key: &long_key }.encode_into(&mut buf),
            Err(RecordError::KeyTooLong { len: 256, .. })
        ));
        let long_val = vec![0u8; 65536];
        assert!(matches!(
            Record::Put {
                key: b"",
                value: &long_val
            }
            .encode_into(&mut buf),
            Err(RecordError::ValueTooLong { .. })
        ));
        assert_eq!(
            Record::QpState {
                qpn: 1 << 24,
                bytes: b""
            }
            .encode_into(&mut buf),
            Err(RecordError::BadQpn(1 << 24))
        );
        assert_eq!(Record::decode(&[0, 0, 0, 0]), Err(RecordError::BadKind(0)));
        assert_eq!(Record::decode(&[9, 0, 0, 0]), Err(RecordError::BadKind(9)));
        assert_eq!(
            Record::decode(&[2, 0, 1, 0, 7]),
            Err(RecordError::BadLayout)
        );
        assert_eq!(
            Record::decode(&[3, 3, 0, 0, 1, 2, 3]),
            Err(RecordError::BadLayout)
        );
        assert_eq!(
            Record::decode(&[3, 4, 0, 0, 0, 0, 0, 1]),
            Err(RecordError::BadQpn(1 << 24))
        );
        let mut rd = RecordReader::with_limits(&[1, 1, 5, 0, 0, 1, 2, 3, 4, 5], 255, 4);
        assert!(matches!(
            rd.next(),
            Some(Err(RecordError::ValueTooLong { len: 5, max: 4 }))
        ));
        assert!(rd.next().is_none());
        assert_eq!(rd.offset(), 0);
    }

    #[test]
    fn largest_record_fits() {
        let key = [7u8; MAX_RECORD_KEY_LEN];
        let value = vec![8u8; MAX_RECORD_VALUE_LEN];
        let rec = Record::Put {
            key: &key,
            value: &value,
        };
        assert_eq!(rec.encoded_len(), MAX_RECORD_LEN);
        let mut buf = vec![0u8; MAX_RECORD_LEN];
        assert_eq!(rec.encode_into(&mut buf), Ok(MAX_RECORD_LEN));
        assert_eq!(Record::decode(&buf), Ok((rec, MAX_RECORD_LEN)));
    }
}
