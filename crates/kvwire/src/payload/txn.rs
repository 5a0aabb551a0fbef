//! The transaction payload (docs/PROTOCOL.md §3.4): a KV batch whose operations
//! commit all together or not at all, with optional compare conditions on its reads.
//!
//! ```text
//! 0  magic 0x54 ('T')
//! 1  version 0x01
//! 2  condition count (0..=64)
//! 3  reserved, 0
//! 4  conditions, back to back: op index (1 B) | kind (1 B: 0 EQUALS, 1 ABSENT) |
//!    value length (2 B BE; 0 for ABSENT) | value
//!    then one KV batch (§3.1–3.2, magic 'K', 1..=64 ops): the transaction's ops, in
//!    order; its batch id names the transaction.
//! ```
//!
//! A condition names a GET of the batch: the transaction commits only if that GET
//! reads exactly `value` (EQUALS) or finds no key (ABSENT). The response is a normal
//! response for the batch id with `op count + 1` results: result 0 is the outcome
//! (OK = committed; ABORTED with a 3-byte [`TxAbort`] value, plus the master hint for
//! a write refused `NOT_MASTER`), results 1..=n the ops'.

use super::{BatchReader, PayloadError, Status, BATCH_HEADER_LEN, MASTER_HINT_LEN};

/// Magic byte of a transaction payload (`'T'`).
pub const TX_MAGIC: u8 = 0x54;
/// Transaction payload format version.
pub const TX_VERSION: u8 = 1;
/// Length of the transaction header (before the conditions).
pub const TX_HEADER_LEN: usize = 4;
/// Most operations (and most conditions) in one transaction.
pub const MAX_TX_OPS: usize = 64;
/// Length of a condition's fixed part.
pub const CONDITION_HEADER_LEN: usize = 4;
/// Length of the outcome value of an aborted transaction (before a master hint).
pub const TX_ABORT_LEN: usize = 3;

/// What a condition requires of its GET.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CondKind {
    /// The GET reads exactly the condition's value.
    Equals = 0,
    /// The GET finds no key.
    Absent = 1,
}

/// A compare condition on the GET at index `op` of the transaction's batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Condition<'a> {
    /// Index of the GET in the batch.
    pub op: u8,
    /// What it must read.
    pub kind: CondKind,
    /// The value (empty for [`CondKind::Absent`]).
    pub value: &'a [u8],
}

/// True when `payload` is a transaction (rather than a plain KV batch).
#[inline]
pub fn is_tx_payload(payload: &[u8]) -> bool {
    payload.first() == Some(&TX_MAGIC)
}

/// A decoded transaction payload: its conditions and its batch.
#[derive(Debug, Clone)]
pub struct TxReader<'a> {
    conds: &'a [u8],
    count: u8,
    batch: &'a [u8],
}

impl<'a> TxReader<'a> {
    /// Checks the header, every condition, and the batch's header and op count
    /// (the ops decode as the batch is read).
    pub fn new(payload: &'a [u8]) -> Result<TxReader<'a>, PayloadError> {
        let h = payload
            .get(..TX_HEADER_LEN)
            .ok_or(PayloadError::Truncated)?;
        if h[0] != TX_MAGIC {
            return Err(PayloadError::BadMagic);
        }
        if h[1] != TX_VERSION {
            return Err(PayloadError::BadVersion);
        }
        if h[3] != 0 {
            return Err(PayloadError::BadFlags);
        }
        let count = h[2];
        if usize::from(count) > MAX_TX_OPS {
            return Err(PayloadError::TooManyOps);
        }
        let mut pos = TX_HEADER_LEN;
        for _ in 0..count {
            let c = payload
                .get(pos..pos + CONDITION_HEADER_LEN)
                .ok_or(PayloadError::Truncated)?;
            let len = usize::from(u16::from_be_bytes([c[2], c[3]]));
            match c[1] {
                0 => {}
                1 if len == 0 => {}
                _ => return Err(PayloadError::BadAttr),
            }
            pos += CONDITION_HEADER_LEN + len;
            if pos > payload.len() {
                return Err(PayloadError::Truncated);
            }
        }
        let batch = &payload[pos..];
        let r = BatchReader::new(batch)?;
        if r.op_count() == 0 {
            // A transaction of nothing: malformed (not over a limit).
            return Err(PayloadError::Truncated);
        }
        if usize::from(r.op_count()) > MAX_TX_OPS {
            return Err(PayloadError::TooManyOps);
        }
        let conds = &payload[TX_HEADER_LEN..pos];
        let me = TxReader {
            conds,
            count,
            batch,
        };
        if me
            .conditions()
            .any(|c| usize::from(c.op) >= usize::from(r.op_count()))
        {
            return Err(PayloadError::BadAttr);
        }
        Ok(me)
    }

    /// The conditions, in order (checked by [`TxReader::new`]).
    pub fn conditions(&self) -> impl Iterator<Item = Condition<'a>> + 'a {
        let mut pos = 0usize;
        let buf = self.conds;
        (0..self.count).map_while(move |_| {
            let c = buf.get(pos..pos + CONDITION_HEADER_LEN)?;
            let len = usize::from(u16::from_be_bytes([c[2], c[3]]));
            let value = buf.get(pos + CONDITION_HEADER_LEN..pos + CONDITION_HEADER_LEN + len)?;
            pos += CONDITION_HEADER_LEN + len;
            Some(Condition {
                op: c[0],
                kind: if c[1] == 1 {
                    CondKind::Absent
                } else {
                    CondKind::Equals
                },
                value,
            })
        })
    }

    /// Number of conditions.
    pub fn condition_count(&self) -> usize {
        usize::from(self.count)
    }

    /// The transaction's batch (ops in order; its batch id is the transaction's).
    pub fn batch(&self) -> BatchReader<'a> {
        // Checked in `new`.
        BatchReader::new(self.batch).unwrap_or_else(|_| unreachable_reader())
    }

    /// The batch's bytes (a plain KV batch).
    pub fn batch_bytes(&self) -> &'a [u8] {
        self.batch
    }
}

/// The batch id of a transaction payload whose header and conditions can be walked
/// (so that a transaction refused by [`TxReader::new`] can still be answered), else
/// `None`.
pub fn tx_batch_id(payload: &[u8]) -> Option<u32> {
    let h = payload.get(..TX_HEADER_LEN)?;
    if h[0] != TX_MAGIC {
        return None;
    }
    let mut pos = TX_HEADER_LEN;
    for _ in 0..h[2] {
        let c = payload.get(pos..pos + CONDITION_HEADER_LEN)?;
        pos += CONDITION_HEADER_LEN + usize::from(u16::from_be_bytes([c[2], c[3]]));
    }
    let b = payload.get(pos..pos + BATCH_HEADER_LEN)?;
    (b[0] == super::REQUEST_MAGIC).then(|| u32::from_be_bytes([b[4], b[5], b[6], b[7]]))
}

/// A reader of nothing (never used: `TxReader::new` checked the batch header).
fn unreachable_reader() -> BatchReader<'static> {
    const EMPTY: [u8; BATCH_HEADER_LEN] = [super::REQUEST_MAGIC, super::VERSION, 0, 0, 0, 0, 0, 0];
    BatchReader::new(&EMPTY).expect("a valid empty batch header")
}

/// Writes a transaction's header and conditions into `buf`; the caller then writes
/// the batch (e.g. with [`super::BatchWriter`]) into `buf[returned..]`. Returns the
/// bytes written.
pub fn write_tx_header(buf: &mut [u8], conds: &[Condition<'_>]) -> Result<usize, PayloadError> {
    if conds.len() > MAX_TX_OPS {
        return Err(PayloadError::TooManyOps);
    }
    let need = TX_HEADER_LEN
        + conds
            .iter()
            .map(|c| CONDITION_HEADER_LEN + c.value.len())
            .sum::<usize>();
    if need > buf.len() {
        return Err(PayloadError::NoSpace);
    }
    buf[..TX_HEADER_LEN].copy_from_slice(&[TX_MAGIC, TX_VERSION, conds.len() as u8, 0]);
    let mut pos = TX_HEADER_LEN;
    for c in conds {
        if c.value.len() > usize::from(u16::MAX)
            || (c.kind == CondKind::Absent && !c.value.is_empty())
        {
            return Err(PayloadError::ValueTooLarge);
        }
        buf[pos] = c.op;
        buf[pos + 1] = c.kind as u8;
        buf[pos + 2..pos + 4].copy_from_slice(&(c.value.len() as u16).to_be_bytes());
        buf[pos + 4..pos + 4 + c.value.len()].copy_from_slice(c.value);
        pos += CONDITION_HEADER_LEN + c.value.len();
    }
    Ok(pos)
}

/// Writes a whole transaction — header, `conds`, and the batch of `ops` with batch id
/// `batch_id` — into `buf`; returns its length.
pub fn write_tx(
    buf: &mut [u8],
    batch_id: u32,
    conds: &[Condition<'_>],
    ops: &[super::KvOp<'_>],
) -> Result<usize, PayloadError> {
    let n = write_tx_header(buf, conds)?;
    let mut w = super::BatchWriter::new(&mut buf[n..], batch_id)?;
    for op in ops {
        w.push(op)?;
    }
    Ok(n + w.finish())
}

/// Why a transaction aborted.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortReason {
    /// A condition did not hold (`op`: its GET).
    ConditionFailed = 1,
    /// An op failed (`op`, and its `status`: e.g. NOT_FOUND for an update of an absent
    /// key, BAD_LENGTH, UNKNOWN_FUNCTION, OUT_OF_MEMORY at commit).
    OpFailed = 2,
    /// The node takes no writes (`status`: NOT_MASTER, with the master hint after the
    /// 3 bytes when known, or NOT_ENOUGH_REPLICAS).
    WritesRefused = 3,
    /// A key of another partition than the request's QP (`op`: the first one).
    CrossPartition = 4,
    /// Over a limit (more than [`MAX_TX_OPS`] ops or conditions, or a result too
    /// large for the response).
    TooLarge = 5,
    /// The payload or an op does not decode (`op`: the op, 255 for the header or
    /// the conditions; `status`: the decode status).
    Malformed = 6,
}

impl AbortReason {
    /// The reason's name as clients show it (`condition_failed`, ...).
    pub fn name(self) -> &'static str {
        match self {
            AbortReason::ConditionFailed => "condition_failed",
            AbortReason::OpFailed => "op_failed",
            AbortReason::WritesRefused => "writes_refused",
            AbortReason::CrossPartition => "cross_partition",
            AbortReason::TooLarge => "too_large",
            AbortReason::Malformed => "malformed",
        }
    }

    /// Decodes a reason byte.
    pub fn from_u8(v: u8) -> Option<AbortReason> {
        Some(match v {
            1 => AbortReason::ConditionFailed,
            2 => AbortReason::OpFailed,
            3 => AbortReason::WritesRefused,
            4 => AbortReason::CrossPartition,
            5 => AbortReason::TooLarge,
            6 => AbortReason::Malformed,
            _ => return None,
        })
    }
}

/// The outcome value of an aborted transaction: reason, op index, status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxAbort {
    /// Why.
    pub reason: AbortReason,
    /// The op concerned (255: none, or the header).
    pub op: u8,
    /// The status concerned.
    pub status: Status,
}

impl TxAbort {
    /// The 3-byte encoding.
    pub fn encode(&self) -> [u8; TX_ABORT_LEN] {
        [self.reason as u8, self.op, self.status as u8]
    }

    /// Decodes the outcome value of an aborted transaction (a master hint may follow
    /// the 3 bytes: [`TxAbort::hint`]).
    pub fn decode(v: &[u8]) -> Option<TxAbort> {
        let b = v.get(..TX_ABORT_LEN)?;
        Some(TxAbort {
            reason: AbortReason::from_u8(b[0])?,
            op: b[1],
            status: Status::from_u8(b[2])?,
        })
    }

    /// The master hint after the 3 bytes (a write refused `NOT_MASTER`).
    pub fn hint(v: &[u8]) -> Option<super::MasterHint> {
        v.get(TX_ABORT_LEN..TX_ABORT_LEN + MASTER_HINT_LEN)
            .and_then(super::MasterHint::decode)
    }
}

#[cfg(test)]
mod tests {
    use super::super::KvOp;
    use super::*;

    fn tx(conds: &[Condition<'_>], ops: &[KvOp<'_>], id: u32) -> Vec<u8> {
        let mut buf = vec![0u8; 4096];
        let n = write_tx(&mut buf, id, conds, ops).unwrap();
        buf.truncate(n);
        buf
    }

    #[test]
    fn roundtrip() {
        let conds = [
            Condition {
                op: 0,
                kind: CondKind::Equals,
                value: b"100",
            },
            Condition {
                op: 1,
                kind: CondKind::Absent,
                value: b"",
            },
        ];
        let ops = [
            KvOp::Get { key: b"a" },
            KvOp::Get { key: b"b" },
            KvOp::Put {
                key: b"a",
                value: b"90",
            },
            KvOp::Put {
                key: b"b",
                value: b"10",
            },
        ];
        let p = tx(&conds, &ops, 77);
        assert!(is_tx_payload(&p));
        let r = TxReader::new(&p).unwrap();
        assert_eq!(r.conditions().collect::<Vec<_>>(), conds);
        let b = r.batch();
        assert_eq!(b.batch_id(), 77);
        let got: Vec<_> = b.map(|o| o.unwrap()).collect();
        assert_eq!(got, ops);
    }

    #[test]
    fn limits_and_malformed_headers_are_refused() {
        let get = KvOp::Get { key: b"k" };
        // No ops, too many ops.
        assert_eq!(
            TxReader::new(&tx(&[], &[], 1)).unwrap_err(),
            PayloadError::Truncated
        );
        let many = vec![get; MAX_TX_OPS + 1];
        assert_eq!(
            TxReader::new(&tx(&[], &many, 1)).unwrap_err(),
            PayloadError::TooManyOps
        );
        // Still answerable: its batch id is found.
        assert_eq!(tx_batch_id(&tx(&[], &many, 42)), Some(42));
        assert_eq!(tx_batch_id(&[TX_MAGIC, 1, 3, 0]), None);
        // A condition on an op that does not exist.
        let c = Condition {
            op: 1,
            kind: CondKind::Equals,
            value: b"x",
        };
        assert_eq!(
            TxReader::new(&tx(&[c], &[get], 1)).unwrap_err(),
            PayloadError::BadAttr
        );
        // ABSENT with a value, unknown kind, reserved byte, version, truncation.
        let mut p = tx(
            &[Condition {
                op: 0,
                kind: CondKind::Absent,
                value: b"",
            }],
            &[get],
            1,
        );
        p[7] = 1;
        assert!(TxReader::new(&p).is_err());
        let ok = tx(&[c.clone_with_op(0)], &[get], 1);
        for (at, v) in [(5usize, 9u8), (3, 1), (1, 2), (0, 0x4b)] {
            let mut q = ok.clone();
            q[at] = v;
            assert!(TxReader::new(&q).is_err(), "byte {at} = {v}");
        }
        // Cut before the ops: refused at once; inside them: the op fails to decode
        // (ops decode lazily, as in a plain batch).
        for cut in 0..ok.len() {
            match TxReader::new(&ok[..cut]) {
                Err(_) => {}
                Ok(r) => assert!(r.batch().any(|o| o.is_err()), "cut at {cut}"),
            }
        }
        assert!(TxReader::new(&ok).is_ok());
    }

    impl<'a> Condition<'a> {
        fn clone_with_op(&self, op: u8) -> Condition<'a> {
            Condition { op, ..*self }
        }
    }

    #[test]
    fn abort_values_roundtrip() {
        let a = TxAbort {
            reason: AbortReason::OpFailed,
            op: 3,
            status: Status::NotFound,
        };
        assert_eq!(TxAbort::decode(&a.encode()), Some(a));
        assert_eq!(TxAbort::decode(&[9, 0, 0]), None);
        assert_eq!(TxAbort::decode(&[1, 0]), None);
        for r in 1..=6 {
            assert_eq!(AbortReason::from_u8(r).map(|x| x as u8), Some(r));
        }
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        for len in 0..400 {
            let mut p: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            if len > 0 {
                p[0] = TX_MAGIC;
            }
            if let Ok(r) = TxReader::new(&p) {
                let _ = r.conditions().count();
                let _ = r.batch().count();
            }
        }
    }
}
