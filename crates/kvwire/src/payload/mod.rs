//! The KV batch payload carried inside RoCEv2 frames.
//!
//! A request payload (the data of an RDMA WRITE) is a [batch header](req_field)
//! followed by `op_count` operations in the compact encoding of KV-Direct:
//!
//! ```text
//! op byte:  bit 7 COPY_SIZES | bit 6 COPY_VALUE | bit 5 reserved (0) | bits 4..0 opcode
//! [key_len   u8 ]   absent if COPY_SIZES
//! [value_len u16]   only for value-carrying ops (PUT, UPDATE_V2V, COMPARE_DELETE), absent if COPY_SIZES or COPY_VALUE
//! [func u8][attr u8][param 1..2 × width bytes]   only for UPDATE_*, REDUCE, FILTER
//! key bytes
//! [value bytes]     only for value-carrying ops, absent if COPY_VALUE
//! ```
//!
//! A response payload (the data of a UD SEND) is a [response header](resp_field)
//! followed by `count` results: `status u8, value_len u16, value bytes`.
//!
//! Byte order: framing integers (counts, lengths, batch id) are big-endian;
//! operands (atomic parameters, returned scalars, vector elements) are
//! little-endian, the byte order of stored values. `docs/PROTOCOL.md` is the
//! normative description.
//!
//! Neither the readers nor the writers allocate or panic on any input.
//!
//! # Layout
//!
//! * `kvop` — opcodes, op-byte flags, function and predicate ids, [`Width`],
//!   [`Atomic`] and the decoded op [`KvOp`];
//! * `optable` — every opcode's properties, declared once ([`OPS`]);
//! * `status` — result [`Status`] codes and [`PayloadError`];
//! * `batch_reader` — [`BatchReader`], the request decoder;
//! * `batch_writer` — [`BatchWriter`], the request encoder;
//! * `response` — [`ResponseWriter`], [`put_result`], [`copy_small`],
//!   [`ResponseReader`] and [`KvResult`];
//! * `txn` — the transaction payload ([`TxReader`], [`write_tx_header`], [`TxAbort`]);
//! * `cursor` — the bounds-checked byte readers shared by the decoders.
//!
//! Everything public is re-exported here: the paths are `kvwire::payload::X`.

mod batch_reader;
mod batch_writer;
mod cursor;
mod kvop;
mod master_hint;
mod optable;
mod response;
mod status;
mod txn;

pub use batch_reader::BatchReader;
pub use batch_writer::BatchWriter;
pub use kvop::{
    elems, func, op, opcode_has_atomic, opcode_has_value, param_count, pred, Atomic, KvOp, KvOpOf,
    OwnedKvOp, Width, ATTR_SIGNED, ATTR_WIDTH_MASK, FLAG_COPY_SIZES, FLAG_COPY_VALUE,
    FLAG_RESERVED, OPCODE_MASK,
};
pub use master_hint::{MasterHint, MASTER_HINT_LEN};
pub use optable::{OpSpec, OPCOUNT, OPS};
/// An opcode's properties ([`OpSpec`]) and its lookup by name.
pub mod ops {
    pub use super::optable::{by_name, spec};
}
pub use response::{copy_small, put_result, KvResult, ResponseReader, ResponseWriter};
pub use status::{PayloadError, Status};
pub use txn::{
    is_tx_payload, tx_batch_id, write_tx, write_tx_header, AbortReason, CondKind, Condition,
    TxAbort, TxReader, CONDITION_HEADER_LEN, MAX_TX_OPS, TX_ABORT_LEN, TX_HEADER_LEN, TX_MAGIC,
    TX_VERSION,
};

/// Magic byte of a request batch (`'K'`).
pub const REQUEST_MAGIC: u8 = 0x4b;
/// Magic byte of a response batch (`'R'`).
pub const RESPONSE_MAGIC: u8 = 0x52;
/// Payload format version.
pub const VERSION: u8 = 1;
/// Length of the request batch header.
pub const BATCH_HEADER_LEN: usize = 8;
/// Length of the response batch header.
pub const RESPONSE_BATCH_HEADER_LEN: usize = 12;
/// Length of the per-result header (status + value length).
pub const RESULT_HEADER_LEN: usize = 3;
/// Largest number of operations in one request batch.
pub const MAX_OPS_PER_BATCH: usize = 1024;
/// Largest key (the key length field is one byte; 0 is invalid).
pub const MAX_KEY_LEN: usize = 255;
/// Largest value the encoding can express (u16 length); the frame MTU
/// limits it further (see [`crate::request_payload_capacity`]).
pub const MAX_VALUE_LEN: usize = u16::MAX as usize;

/// Byte offsets of the request batch header.
pub mod req_field {
    use crate::view::Field;
    /// Magic, [`super::REQUEST_MAGIC`].
    pub const MAGIC: usize = 0;
    /// Version, [`super::VERSION`].
    pub const VERSION: usize = 1;
    /// Number of operations (u16 BE).
    pub const OP_COUNT: Field = 2..4;
    /// Client batch id (u32 BE), echoed in the response.
    pub const BATCH_ID: Field = 4..8;
}

/// Byte offsets of the response batch header.
pub mod resp_field {
    use crate::view::Field;
    /// Magic, [`super::RESPONSE_MAGIC`].
    pub const MAGIC: usize = 0;
    /// Version, [`super::VERSION`].
    pub const VERSION: usize = 1;
    /// Number of results in this packet (u16 BE).
    pub const COUNT: Field = 2..4;
    /// Echoed batch id (u32 BE).
    pub const BATCH_ID: Field = 4..8;
    /// Index of the first result within the request batch (u16 BE).
    pub const FIRST_INDEX: Field = 8..10;
    /// Flags, bit 0 = [`super::RESP_FLAG_MORE`].
    pub const FLAGS: usize = 10;
    /// Reserved, 0.
    pub const RESERVED: usize = 11;
}

/// Response flag: more response packets follow for this batch.
pub const RESP_FLAG_MORE: u8 = 0x01;

/// Shared fixtures of the payload tests.
#[cfg(test)]
mod fixtures {
    use super::*;

    /// PUT "hello"="world!", GET "hello" (COPY_SIZES), batch 0x01020304.
    pub(super) static BATCH: [u8; 29] = [
        0x4b, 0x01, 0x00, 0x02, 0x01, 0x02, 0x03, 0x04, 0x02, 0x05, 0x00, 0x06, b'h', b'e', b'l',
        b'l', b'o', b'w', b'o', b'r', b'l', b'd', b'!', 0x81, b'h', b'e', b'l', b'l', b'o',
    ];

    pub(super) const A: Atomic = Atomic {
        func: func::CAS,
        width: Width::W4,
        signed: true,
    };

    /// Encodes `ops` (with compression) as batch 0x01020304; returns the length.
    pub(super) fn encode(ops: &[KvOp<'_>], buf: &mut [u8]) -> usize {
        let mut w = BatchWriter::new(buf, 0x0102_0304).unwrap();
        for o in ops {
            w.push(o).unwrap();
        }
        w.finish()
    }
}
