//! The KV batch payload carried inside RoCEv2 frames.
//!
//! A request payload (the data of an RDMA WRITE) is a [batch header](req_field)
//! followed by `op_count` operations in the compact encoding of KV-Direct:
//!
//! ```text
//! op byte:  bit 7 COPY_SIZES | bit 6 COPY_VALUE | bit 5 reserved (0) | bits 4..0 opcode
//! [key_len   u8 ]   absent if COPY_SIZES
//! [value_len u16]   only for value-carrying ops (PUT, UPDATE_V2V), absent if COPY_SIZES or COPY_VALUE
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

use core::fmt;

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

/// Operation codes (low 5 bits of the op byte).
pub mod op {
    /// Read a value.
    pub const GET: u8 = 1;
    /// Insert or replace a value.
    pub const PUT: u8 = 2;
    /// Remove a key.
    pub const DELETE: u8 = 3;
    /// Atomic scalar-to-scalar update of the value as one element; returns the original.
    pub const UPDATE_S2S: u8 = 4;
    /// Apply a scalar to every element of a vector value.
    pub const UPDATE_S2V: u8 = 5;
    /// Apply a Δ vector element-wise to a vector value.
    pub const UPDATE_V2V: u8 = 6;
    /// Fold all elements into Σ; returns Σ.
    pub const REDUCE: u8 = 7;
    /// Return the elements passing a predicate.
    pub const FILTER: u8 = 8;
}

/// Op byte flag: take key length (and value length) from the previous op.
pub const FLAG_COPY_SIZES: u8 = 0x80;
/// Op byte flag: take the value bytes from the previous op.
pub const FLAG_COPY_VALUE: u8 = 0x40;
/// Reserved op byte bit, must be 0.
pub const FLAG_RESERVED: u8 = 0x20;
/// Mask of the opcode in the op byte.
pub const OPCODE_MASK: u8 = 0x1f;

/// Function IDs of UPDATE_S2S / UPDATE_S2V / UPDATE_V2V / REDUCE.
pub mod func {
    /// x + p (wrapping).
    pub const FETCH_ADD: u8 = 0;
    /// x − p (wrapping).
    pub const FETCH_SUB: u8 = 1;
    /// p.
    pub const SWAP: u8 = 2;
    /// if x == p1 { p2 } else { x } (two parameters).
    pub const CAS: u8 = 3;
    /// min(x, p), signedness from the attr byte.
    pub const MIN: u8 = 4;
    /// max(x, p), signedness from the attr byte.
    pub const MAX: u8 = 5;
    /// x & p.
    pub const AND: u8 = 6;
    /// x | p.
    pub const OR: u8 = 7;
    /// x ^ p.
    pub const XOR: u8 = 8;
    /// First user-defined function id (128..=255 are registered at start-up).
    pub const USER_MIN: u8 = 128;
}

/// Predicate IDs of FILTER.
pub mod pred {
    /// x == p.
    pub const EQ: u8 = 0;
    /// x != p.
    pub const NE: u8 = 1;
    /// x < p.
    pub const LT: u8 = 2;
    /// x <= p.
    pub const LE: u8 = 3;
    /// x > p.
    pub const GT: u8 = 4;
    /// x >= p.
    pub const GE: u8 = 5;
    /// x & p != 0.
    pub const ANY_BITS: u8 = 6;
    /// First user-defined predicate id.
    pub const USER_MIN: u8 = 128;
}

/// Element width of vector/atomic operations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Width {
    /// 1 byte.
    W1 = 0,
    /// 2 bytes.
    W2 = 1,
    /// 4 bytes.
    W4 = 2,
    /// 8 bytes.
    W8 = 3,
}

impl Width {
    /// All widths.
    pub const ALL: [Width; 4] = [Width::W1, Width::W2, Width::W4, Width::W8];
    /// Width in bytes.
    #[inline]
    pub const fn bytes(self) -> usize {
        1 << (self as u8)
    }
    /// Mask of the low `bytes()*8` bits.
    #[inline]
    pub const fn mask(self) -> u64 {
        match self {
            Width::W8 => u64::MAX,
            w => (1u64 << (w.bytes() * 8)) - 1,
        }
    }
    /// Width from a byte count (1, 2, 4, 8).
    pub const fn from_bytes(n: usize) -> Option<Width> {
        match n {
            1 => Some(Width::W1),
            2 => Some(Width::W2),
            4 => Some(Width::W4),
            8 => Some(Width::W8),
            _ => None,
        }
    }
}

/// Attr byte bit: elements are signed.
pub const ATTR_SIGNED: u8 = 0x04;
/// Attr byte mask of log2(width).
pub const ATTR_WIDTH_MASK: u8 = 0x03;

/// Function, element width and signedness of an atomic/vector operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Atomic {
    /// Function id ([`func`]) or predicate id ([`pred`]) for FILTER.
    pub func: u8,
    /// Element width.
    pub width: Width,
    /// Elements and parameters are two's-complement signed.
    pub signed: bool,
}

impl Atomic {
    /// Encodes the attr byte.
    #[inline]
    pub const fn attr(&self) -> u8 {
        (self.width as u8) | if self.signed { ATTR_SIGNED } else { 0 }
    }
    /// Decodes the attr byte (reserved bits must be 0).
    pub const fn from_attr(func: u8, attr: u8) -> Option<Atomic> {
        if attr & !(ATTR_WIDTH_MASK | ATTR_SIGNED) != 0 {
            return None;
        }
        let width = match attr & ATTR_WIDTH_MASK {
            0 => Width::W1,
            1 => Width::W2,
            2 => Width::W4,
            _ => Width::W8,
        };
        Some(Atomic {
            func,
            width,
            signed: attr & ATTR_SIGNED != 0,
        })
    }
    /// Interprets raw parameter bits as a signed value of this width.
    #[inline]
    pub const fn sign_extend(&self, raw: u64) -> i64 {
        let shift = 64 - 8 * self.width.bytes() as u32;
        ((raw << shift) as i64) >> shift
    }
}

/// One decoded KV operation; key and value borrow from the packet.
///
/// Parameters are the raw little-endian bits of `width` bytes, zero-extended
/// (use [`Atomic::sign_extend`] for signed operations). `param2` is only
/// carried by `CAS` (the swap value) and is 0 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOp<'a> {
    /// GET key.
    Get {
        /// Key.
        key: &'a [u8],
    },
    /// PUT key value.
    Put {
        /// Key.
        key: &'a [u8],
        /// Value.
        value: &'a [u8],
    },
    /// DELETE key.
    Delete {
        /// Key.
        key: &'a [u8],
    },
    /// Atomic scalar update of an element-sized value; returns the original.
    UpdateS2S {
        /// Key.
        key: &'a [u8],
        /// Function, width, signedness.
        atomic: Atomic,
        /// Parameter (CAS: compare value).
        param: u64,
        /// CAS: swap value; 0 otherwise.
        param2: u64,
    },
    /// Scalar applied to every element; returns the original vector.
    UpdateS2V {
        /// Key.
        key: &'a [u8],
        /// Function, width, signedness.
        atomic: Atomic,
        /// Parameter (CAS: compare value).
        param: u64,
        /// CAS: swap value; 0 otherwise.
        param2: u64,
    },
    /// Element-wise update with a Δ vector; returns the original vector.
    UpdateV2V {
        /// Key.
        key: &'a [u8],
        /// Function, width, signedness.
        atomic: Atomic,
        /// Δ vector, little-endian elements of `atomic.width`.
        delta: &'a [u8],
    },
    /// Fold all elements into Σ starting from `init`; returns Σ.
    Reduce {
        /// Key.
        key: &'a [u8],
        /// Function, width, signedness.
        atomic: Atomic,
        /// Initial Σ.
        init: u64,
    },
    /// Return the elements x with `pred(x, param)`.
    Filter {
        /// Key.
        key: &'a [u8],
        /// Predicate id (in `atomic.func`), width, signedness.
        atomic: Atomic,
        /// Predicate parameter.
        param: u64,
    },
}

impl<'a> KvOp<'a> {
    /// The opcode ([`op`]).
    pub const fn opcode(&self) -> u8 {
        match self {
            KvOp::Get { .. } => op::GET,
            KvOp::Put { .. } => op::PUT,
            KvOp::Delete { .. } => op::DELETE,
            KvOp::UpdateS2S { .. } => op::UPDATE_S2S,
            KvOp::UpdateS2V { .. } => op::UPDATE_S2V,
            KvOp::UpdateV2V { .. } => op::UPDATE_V2V,
            KvOp::Reduce { .. } => op::REDUCE,
            KvOp::Filter { .. } => op::FILTER,
        }
    }
    /// The key.
    pub const fn key(&self) -> &'a [u8] {
        match self {
            KvOp::Get { key }
            | KvOp::Put { key, .. }
            | KvOp::Delete { key }
            | KvOp::UpdateS2S { key, .. }
            | KvOp::UpdateS2V { key, .. }
            | KvOp::UpdateV2V { key, .. }
            | KvOp::Reduce { key, .. }
            | KvOp::Filter { key, .. } => key,
        }
    }
    /// The value bytes of PUT, the Δ vector of UPDATE_V2V, `None` otherwise.
    pub const fn value(&self) -> Option<&'a [u8]> {
        match self {
            KvOp::Put { value, .. } => Some(value),
            KvOp::UpdateV2V { delta, .. } => Some(delta),
            _ => None,
        }
    }
    /// Function/width/signedness of atomic and vector ops.
    pub const fn atomic(&self) -> Option<Atomic> {
        match self {
            KvOp::UpdateS2S { atomic, .. }
            | KvOp::UpdateS2V { atomic, .. }
            | KvOp::UpdateV2V { atomic, .. }
            | KvOp::Reduce { atomic, .. }
            | KvOp::Filter { atomic, .. } => Some(*atomic),
            _ => None,
        }
    }
}

/// Whether an opcode carries a value (value length + value bytes).
#[inline]
pub const fn opcode_has_value(opcode: u8) -> bool {
    matches!(opcode, op::PUT | op::UPDATE_V2V)
}

/// Number of scalar parameters an opcode/function carries.
#[inline]
pub const fn param_count(opcode: u8, func: u8) -> usize {
    match opcode {
        op::UPDATE_S2S | op::UPDATE_S2V if func == func::CAS || func >= func::USER_MIN => 2,
        op::UPDATE_S2S | op::UPDATE_S2V | op::REDUCE | op::FILTER => 1,
        _ => 0,
    }
}

/// Whether an opcode carries the func/attr bytes.
#[inline]
pub const fn opcode_has_atomic(opcode: u8) -> bool {
    matches!(
        opcode,
        op::UPDATE_S2S | op::UPDATE_S2V | op::UPDATE_V2V | op::REDUCE | op::FILTER
    )
}

/// Result status codes (first byte of each result).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// Success; the value (if any) follows.
    Ok = 0,
    /// Key not present (GET, DELETE, updates).
    NotFound = 1,
    /// No memory for the key/value (PUT).
    OutOfMemory = 2,
    /// Key longer than the server accepts.
    KeyTooLarge = 3,
    /// Value longer than the server accepts.
    ValueTooLarge = 4,
    /// The op could not be decoded; later ops of the batch are not executed.
    Malformed = 5,
    /// Unknown opcode; later ops of the batch are not executed.
    UnknownOpcode = 6,
    /// Function/predicate id not built in nor registered.
    UnknownFunction = 7,
    /// Value length is not a multiple of the width, Δ vector length differs
    /// from the stored vector, or S2S on a value that is not one element.
    BadLength = 8,
    /// Known but not supported by this server build.
    Unsupported = 9,
    /// Transient: the server could not take the op now (retry later).
    TryAgain = 10,
    /// The result does not fit in a response packet.
    ResponseTooLarge = 11,
    /// The key belongs to another partition than the request's client QP (see
    /// [`crate::partition`]); nothing was done.
    WrongPartition = 12,
    /// Internal server error.
    Internal = 255,
}

impl Status {
    /// All status codes.
    pub const ALL: [Status; 14] = [
        Status::Ok,
        Status::NotFound,
        Status::OutOfMemory,
        Status::KeyTooLarge,
        Status::ValueTooLarge,
        Status::Malformed,
        Status::UnknownOpcode,
        Status::UnknownFunction,
        Status::BadLength,
        Status::Unsupported,
        Status::TryAgain,
        Status::ResponseTooLarge,
        Status::WrongPartition,
        Status::Internal,
    ];
    /// Decodes a status byte.
    pub const fn from_u8(v: u8) -> Option<Status> {
        Some(match v {
            0 => Status::Ok,
            1 => Status::NotFound,
            2 => Status::OutOfMemory,
            3 => Status::KeyTooLarge,
            4 => Status::ValueTooLarge,
            5 => Status::Malformed,
            6 => Status::UnknownOpcode,
            7 => Status::UnknownFunction,
            8 => Status::BadLength,
            9 => Status::Unsupported,
            10 => Status::TryAgain,
            11 => Status::ResponseTooLarge,
            12 => Status::WrongPartition,
            255 => Status::Internal,
            _ => return None,
        })
    }
    /// Stable snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::NotFound => "not_found",
            Status::OutOfMemory => "out_of_memory",
            Status::KeyTooLarge => "key_too_large",
            Status::ValueTooLarge => "value_too_large",
            Status::Malformed => "malformed",
            Status::UnknownOpcode => "unknown_opcode",
            Status::UnknownFunction => "unknown_function",
            Status::BadLength => "bad_length",
            Status::Unsupported => "unsupported",
            Status::TryAgain => "try_again",
            Status::ResponseTooLarge => "response_too_large",
            Status::WrongPartition => "wrong_partition",
            Status::Internal => "internal",
        }
    }
}

/// Errors of the payload readers and writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PayloadError {
    /// The payload ends inside a header, op or result (includes an op
    /// count larger than what the payload contains).
    Truncated,
    /// Wrong magic byte.
    BadMagic,
    /// Unsupported version.
    BadVersion,
    /// Op count above [`MAX_OPS_PER_BATCH`] (reader or writer).
    TooManyOps,
    /// Unknown opcode.
    UnknownOpcode(u8),
    /// Reserved flag set, COPY_VALUE on an op without value, or a copy flag
    /// with no previous op to copy from.
    BadFlags,
    /// Key length 0.
    EmptyKey,
    /// Reserved attr bits set.
    BadAttr,
    /// Writer: key longer than [`MAX_KEY_LEN`].
    KeyTooLarge,
    /// Writer: value longer than [`MAX_VALUE_LEN`].
    ValueTooLarge,
    /// Writer: the op/result does not fit in the buffer.
    NoSpace,
    /// Reader: unknown status code.
    UnknownStatus(u8),
}

impl PayloadError {
    /// The status a server reports for an op that failed to decode this way.
    pub const fn status(self) -> Status {
        match self {
            PayloadError::UnknownOpcode(_) => Status::UnknownOpcode,
            PayloadError::KeyTooLarge => Status::KeyTooLarge,
            PayloadError::ValueTooLarge => Status::ValueTooLarge,
            _ => Status::Malformed,
        }
    }
}

impl fmt::Display for PayloadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for PayloadError {}

// ---------------------------------------------------------------------------
// Cursor helpers (never panic).

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    #[inline]
    fn bytes(&mut self, n: usize) -> Result<&'a [u8], PayloadError> {
        let end = self.pos.checked_add(n).ok_or(PayloadError::Truncated)?;
        let s = self.buf.get(self.pos..end).ok_or(PayloadError::Truncated)?;
        self.pos = end;
        Ok(s)
    }
    #[inline]
    fn u8(&mut self) -> Result<u8, PayloadError> {
        let b = *self.buf.get(self.pos).ok_or(PayloadError::Truncated)?;
        self.pos += 1;
        Ok(b)
    }
    #[inline]
    fn u16(&mut self) -> Result<u16, PayloadError> {
        let s = self.bytes(2)?;
        Ok(u16::from_be_bytes([s[0], s[1]]))
    }
    #[inline]
    fn le(&mut self, w: Width) -> Result<u64, PayloadError> {
        let s = self.bytes(w.bytes())?;
        let mut a = [0u8; 8];
        a[..s.len()].copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }
}

#[inline]
fn rd16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

#[inline]
fn rd32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

// ---------------------------------------------------------------------------
// Request batch reader.

/// Iterator over the operations of a request payload.
///
/// Copy flags are resolved: a copied value borrows the previous op's bytes.
/// After the first `Err` the iterator is fused and yields `None`.
#[derive(Debug, Clone)]
pub struct BatchReader<'a> {
    buf: &'a [u8],
    pos: usize,
    batch_id: u32,
    op_count: u16,
    remaining: u16,
    /// Key length of the previous op, 0 before the first op.
    prev_key_len: usize,
    /// Value of the previous op, `None` if it had none (or no previous op).
    prev_value: Option<&'a [u8]>,
    /// Whether an op was decoded already.
    have_prev: bool,
    failed: bool,
}

impl<'a> BatchReader<'a> {
    /// Validates the batch header. Ops are decoded lazily by iteration.
    pub fn new(payload: &'a [u8]) -> Result<Self, PayloadError> {
        let h = payload
            .get(..BATCH_HEADER_LEN)
            .ok_or(PayloadError::Truncated)?;
        if h[req_field::MAGIC] != REQUEST_MAGIC {
            return Err(PayloadError::BadMagic);
        }
        if h[req_field::VERSION] != VERSION {
            return Err(PayloadError::BadVersion);
        }
        let op_count = rd16(h, req_field::OP_COUNT.start);
        if usize::from(op_count) > MAX_OPS_PER_BATCH {
            return Err(PayloadError::TooManyOps);
        }
        Ok(BatchReader {
            buf: payload,
            pos: BATCH_HEADER_LEN,
            batch_id: rd32(h, req_field::BATCH_ID.start),
            op_count,
            remaining: op_count,
            prev_key_len: 0,
            prev_value: None,
            have_prev: false,
            failed: false,
        })
    }
    /// Client batch id from the header.
    #[inline]
    pub fn batch_id(&self) -> u32 {
        self.batch_id
    }
    /// Op count from the header.
    #[inline]
    pub fn op_count(&self) -> u16 {
        self.op_count
    }
    /// Index of the next op to be decoded.
    #[inline]
    pub fn index(&self) -> u16 {
        self.op_count - self.remaining
    }
    /// Byte offset of the next op in the payload.
    #[inline]
    pub fn offset(&self) -> usize {
        self.pos
    }

    #[inline]
    fn decode(&mut self) -> Result<KvOp<'a>, PayloadError> {
        let opb = *self.buf.get(self.pos).ok_or(PayloadError::Truncated)?;
        let opcode = opb & OPCODE_MASK;
        if opb & (FLAG_RESERVED | FLAG_COPY_VALUE) == 0
            && matches!(opcode, op::GET | op::PUT | op::DELETE)
        {
            return self.decode_plain(opb);
        }
        self.decode_general()
    }

    /// GET, PUT or DELETE with at most `COPY_SIZES` (the bulk of real traffic): the
    /// same checks, in the same order, as [`Self::decode_general`], without the
    /// atomic fields.
    #[inline(always)]
    fn decode_plain(&mut self, opb: u8) -> Result<KvOp<'a>, PayloadError> {
        let opcode = opb & OPCODE_MASK;
        let copy_sizes = opb & FLAG_COPY_SIZES != 0;
        if copy_sizes && !self.have_prev {
            return Err(PayloadError::BadFlags);
        }
        let buf = self.buf;
        let mut p = self.pos + 1;
        let key_len = if copy_sizes {
            self.prev_key_len
        } else {
            let k = *buf.get(p).ok_or(PayloadError::Truncated)?;
            p += 1;
            usize::from(k)
        };
        let is_put = opcode == op::PUT;
        let value_len = if !is_put {
            0
        } else if copy_sizes {
            self.prev_value.map_or(0, <[u8]>::len)
        } else {
            let v = buf.get(p..p + 2).ok_or(PayloadError::Truncated)?;
            p += 2;
            usize::from(u16::from_be_bytes([v[0], v[1]]))
        };
        if key_len == 0 {
            return Err(PayloadError::EmptyKey);
        }
        let key = buf.get(p..p + key_len).ok_or(PayloadError::Truncated)?;
        p += key_len;
        let value = buf.get(p..p + value_len).ok_or(PayloadError::Truncated)?;
        p += value_len;
        self.pos = p;
        self.prev_key_len = key_len;
        self.prev_value = if is_put { Some(value) } else { None };
        self.have_prev = true;
        Ok(match opcode {
            op::GET => KvOp::Get { key },
            op::DELETE => KvOp::Delete { key },
            _ => KvOp::Put { key, value },
        })
    }

    /// Decodes the run of GET/PUT/DELETE ops (without `COPY_VALUE`) that starts at the
    /// next op, handing each to `f` in order, and stops before the first op that is
    /// anything else — another opcode, or any op the iterator would answer with an
    /// error — or at the end of the batch. Iterate on to get that op (or its error).
    ///
    /// The ops and errors seen are exactly those of iterating alone; this is the same
    /// decoding with the reader's state held in locals for the whole run, for the
    /// server's per-op loop.
    #[inline(always)]
    pub fn plain_ops(&mut self, mut f: impl FnMut(KvOp<'a>)) {
        if self.failed {
            return;
        }
        let buf = self.buf;
        let (mut pos, mut remaining) = (self.pos, self.remaining);
        let (mut prev_key_len, mut prev_value, mut have_prev) =
            (self.prev_key_len, self.prev_value, self.have_prev);
        while remaining != 0 {
            // The checks of `decode_plain`; on any failure, stop before the op and
            // leave it (and its error) to the iterator.
            let Some(&opb) = buf.get(pos) else { break };
            let opcode = opb & OPCODE_MASK;
            if opb & (FLAG_RESERVED | FLAG_COPY_VALUE) != 0
                || !matches!(opcode, op::GET | op::PUT | op::DELETE)
            {
                break;
            }
            let copy_sizes = opb & FLAG_COPY_SIZES != 0;
            if copy_sizes && !have_prev {
                break;
            }
            let mut p = pos + 1;
            let key_len = if copy_sizes {
                prev_key_len
            } else {
                let Some(&k) = buf.get(p) else { break };
                p += 1;
                usize::from(k)
            };
            let is_put = opcode == op::PUT;
            let value_len = if !is_put {
                0
            } else if copy_sizes {
                prev_value.map_or(0, <[u8]>::len)
            } else {
                let Some(v) = buf.get(p..p + 2) else { break };
                p += 2;
                usize::from(u16::from_be_bytes([v[0], v[1]]))
            };
            if key_len == 0 {
                break;
            }
            let Some(key) = buf.get(p..p + key_len) else {
                break;
            };
            p += key_len;
            let Some(value) = buf.get(p..p + value_len) else {
                break;
            };
            p += value_len;
            pos = p;
            remaining -= 1;
            prev_key_len = key_len;
            prev_value = if is_put { Some(value) } else { None };
            have_prev = true;
            f(match opcode {
                op::GET => KvOp::Get { key },
                op::DELETE => KvOp::Delete { key },
                _ => KvOp::Put { key, value },
            });
        }
        self.pos = pos;
        self.remaining = remaining;
        self.prev_key_len = prev_key_len;
        self.prev_value = prev_value;
        self.have_prev = have_prev;
    }

    /// Any op (the read-modify-write opcodes, `COPY_VALUE`, and every malformed case).
    #[inline(never)]
    fn decode_general(&mut self) -> Result<KvOp<'a>, PayloadError> {
        let mut c = Cursor {
            buf: self.buf,
            pos: self.pos,
        };
        let opb = c.u8()?;
        let opcode = opb & OPCODE_MASK;
        let copy_sizes = opb & FLAG_COPY_SIZES != 0;
        let copy_value = opb & FLAG_COPY_VALUE != 0;
        if !(op::GET..=op::FILTER).contains(&opcode) {
            return Err(PayloadError::UnknownOpcode(opcode));
        }
        let has_value = opcode_has_value(opcode);
        if opb & FLAG_RESERVED != 0 || (copy_value && !has_value) || (copy_sizes && !self.have_prev)
        {
            return Err(PayloadError::BadFlags);
        }
        let copied = if copy_value {
            Some(self.prev_value.ok_or(PayloadError::BadFlags)?)
        } else {
            None
        };
        let key_len = if copy_sizes {
            self.prev_key_len
        } else {
            usize::from(c.u8()?)
        };
        let value_len = if !has_value || copied.is_some() {
            0
        } else if copy_sizes {
            self.prev_value.map_or(0, <[u8]>::len)
        } else {
            usize::from(c.u16()?)
        };
        let mut atomic = None;
        let (mut p1, mut p2) = (0, 0);
        if opcode_has_atomic(opcode) {
            let f = c.u8()?;
            let attr = c.u8()?;
            let a = Atomic::from_attr(f, attr).ok_or(PayloadError::BadAttr)?;
            let n = param_count(opcode, f);
            if n >= 1 {
                p1 = c.le(a.width)?;
            }
            if n >= 2 {
                p2 = c.le(a.width)?;
            }
            atomic = Some(a);
        }
        if key_len == 0 {
            return Err(PayloadError::EmptyKey);
        }
        let key = c.bytes(key_len)?;
        let value = match copied {
            Some(v) => v,
            None if has_value => c.bytes(value_len)?,
            None => &[],
        };
        // The atomic is always Some for these opcodes; the fallback is never
        // taken but avoids an unwrap.
        let a = atomic.unwrap_or(Atomic {
            func: 0,
            width: Width::W1,
            signed: false,
        });
        let op = match opcode {
            op::GET => KvOp::Get { key },
            op::PUT => KvOp::Put { key, value },
            op::DELETE => KvOp::Delete { key },
            op::UPDATE_S2S => KvOp::UpdateS2S {
                key,
                atomic: a,
                param: p1,
                param2: p2,
            },
            op::UPDATE_S2V => KvOp::UpdateS2V {
                key,
                atomic: a,
                param: p1,
                param2: p2,
            },
            op::UPDATE_V2V => KvOp::UpdateV2V {
                key,
                atomic: a,
                delta: value,
            },
            op::REDUCE => KvOp::Reduce {
                key,
                atomic: a,
                init: p1,
            },
            _ => KvOp::Filter {
                key,
                atomic: a,
                param: p1,
            },
        };
        self.pos = c.pos;
        self.prev_key_len = key_len;
        self.prev_value = if has_value { Some(value) } else { None };
        self.have_prev = true;
        Ok(op)
    }
}

impl<'a> Iterator for BatchReader<'a> {
    type Item = Result<KvOp<'a>, PayloadError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining == 0 {
            return None;
        }
        match self.decode() {
            Ok(op) => {
                self.remaining -= 1;
                Some(Ok(op))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        if self.failed {
            (0, Some(0))
        } else {
            (0, Some(usize::from(self.remaining)))
        }
    }
}

impl core::iter::FusedIterator for BatchReader<'_> {}

// ---------------------------------------------------------------------------
// Request batch writer.

/// Encodes operations into a request payload buffer.
///
/// By default the writer sets the copy flags itself whenever an op has the
/// same key/value sizes or the same value bytes as the previous op
/// ([`BatchWriter::with_compression`] turns this off).
#[derive(Debug)]
pub struct BatchWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    count: u16,
    prev_key_len: Option<usize>,
    /// Range in `buf` of the previous op's value bytes, `None` if it had none.
    prev_value: Option<(usize, usize)>,
    compress: bool,
}

impl<'b> BatchWriter<'b> {
    /// Starts a batch; writes the header (count is filled in by [`Self::finish`]).
    pub fn new(buf: &'b mut [u8], batch_id: u32) -> Result<Self, PayloadError> {
        let h = buf
            .get_mut(..BATCH_HEADER_LEN)
            .ok_or(PayloadError::NoSpace)?;
        h[req_field::MAGIC] = REQUEST_MAGIC;
        h[req_field::VERSION] = VERSION;
        h[req_field::OP_COUNT].fill(0);
        h[req_field::BATCH_ID].copy_from_slice(&batch_id.to_be_bytes());
        Ok(BatchWriter {
            buf,
            pos: BATCH_HEADER_LEN,
            count: 0,
            prev_key_len: None,
            prev_value: None,
            compress: true,
        })
    }
    /// Enables/disables automatic use of the copy flags.
    pub fn with_compression(mut self, on: bool) -> Self {
        self.compress = on;
        self
    }
    /// Bytes written so far (header included).
    #[inline]
    pub fn len(&self) -> usize {
        self.pos
    }
    /// True if no op was pushed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Number of ops pushed.
    #[inline]
    pub fn op_count(&self) -> u16 {
        self.count
    }
    /// Free bytes left in the buffer.
    #[inline]
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// Appends one op. On error nothing is written and the writer is unchanged.
    #[inline]
    pub fn push(&mut self, kv: &KvOp<'_>) -> Result<(), PayloadError> {
        if usize::from(self.count) >= MAX_OPS_PER_BATCH {
            return Err(PayloadError::TooManyOps);
        }
        let opcode = kv.opcode();
        let key = kv.key();
        if key.is_empty() {
            return Err(PayloadError::EmptyKey);
        }
        if key.len() > MAX_KEY_LEN {
            return Err(PayloadError::KeyTooLarge);
        }
        let value = kv.value();
        if value.is_some_and(|v| v.len() > MAX_VALUE_LEN) {
            return Err(PayloadError::ValueTooLarge);
        }
        let prev_value = self.prev_value.map(|(s, e)| &self.buf[s..e]);
        let copy_value = self.compress
            && match (value, prev_value) {
                (Some(v), Some(p)) => v == p,
                _ => false,
            };
        let copy_sizes = self.compress
            && self.prev_key_len == Some(key.len())
            && match value {
                Some(v) => copy_value || prev_value.map_or(0, <[u8]>::len) == v.len(),
                None => true,
            };
        let atomic = kv.atomic();
        let (p1, p2) = match *kv {
            KvOp::UpdateS2S { param, param2, .. } | KvOp::UpdateS2V { param, param2, .. } => {
                (param, param2)
            }
            KvOp::Reduce { init, .. } => (init, 0),
            KvOp::Filter { param, .. } => (param, 0),
            _ => (0, 0),
        };
        let nparams = atomic.map_or(0, |a| param_count(opcode, a.func));
        let wbytes = atomic.map_or(0, |a| a.width.bytes());
        let vlen = value.map_or(0, <[u8]>::len);
        let need = 1
            + usize::from(!copy_sizes)
            + if value.is_some() && !copy_sizes && !copy_value {
                2
            } else {
                0
            }
            + if atomic.is_some() { 2 } else { 0 }
            + nparams * wbytes
            + key.len()
            + if copy_value { 0 } else { vlen };
        if need > self.remaining() {
            return Err(PayloadError::NoSpace);
        }
        let mut p = self.pos;
        let b = &mut *self.buf;
        b[p] = opcode
            | if copy_sizes { FLAG_COPY_SIZES } else { 0 }
            | if copy_value { FLAG_COPY_VALUE } else { 0 };
        p += 1;
        if !copy_sizes {
            b[p] = key.len() as u8;
            p += 1;
        }
        if value.is_some() && !copy_sizes && !copy_value {
            b[p..p + 2].copy_from_slice(&(vlen as u16).to_be_bytes());
            p += 2;
        }
        if let Some(a) = atomic {
            b[p] = a.func;
            b[p + 1] = a.attr();
            p += 2;
            for v in [p1, p2].iter().take(nparams) {
                b[p..p + wbytes].copy_from_slice(&v.to_le_bytes()[..wbytes]);
                p += wbytes;
            }
        }
        copy_small(&mut b[p..p + key.len()], key);
        p += key.len();
        let new_prev_value = match value {
            Some(_) if copy_value => self.prev_value,
            Some(v) => {
                copy_small(&mut b[p..p + v.len()], v);
                let r = (p, p + v.len());
                p += v.len();
                Some(r)
            }
            None => None,
        };
        self.pos = p;
        self.count += 1;
        self.prev_key_len = Some(key.len());
        self.prev_value = new_prev_value;
        Ok(())
    }

    /// Writes the op count into the header and returns the payload length.
    pub fn finish(self) -> usize {
        self.buf[req_field::OP_COUNT].copy_from_slice(&self.count.to_be_bytes());
        self.pos
    }
}

// ---------------------------------------------------------------------------
// Response writer / reader.

/// One decoded result of a response payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KvResult<'a> {
    /// Status code.
    pub status: Status,
    /// Returned value (GET value, original value of updates, Σ, filtered elements).
    pub value: &'a [u8],
}

/// Appends results into a response payload buffer.
#[derive(Debug)]
pub struct ResponseWriter<'b> {
    buf: &'b mut [u8],
    pos: usize,
    count: u16,
}

impl<'b> ResponseWriter<'b> {
    /// Starts a response for `batch_id`; `first_index` is the index within the
    /// request batch of the first result written here (0 unless the server
    /// split the results over several packets).
    pub fn new(buf: &'b mut [u8], batch_id: u32, first_index: u16) -> Result<Self, PayloadError> {
        let h = buf
            .get_mut(..RESPONSE_BATCH_HEADER_LEN)
            .ok_or(PayloadError::NoSpace)?;
        h[resp_field::MAGIC] = RESPONSE_MAGIC;
        h[resp_field::VERSION] = VERSION;
        h[resp_field::COUNT].fill(0);
        h[resp_field::BATCH_ID].copy_from_slice(&batch_id.to_be_bytes());
        h[resp_field::FIRST_INDEX].copy_from_slice(&first_index.to_be_bytes());
        h[resp_field::FLAGS] = 0;
        h[resp_field::RESERVED] = 0;
        Ok(ResponseWriter {
            buf,
            pos: RESPONSE_BATCH_HEADER_LEN,
            count: 0,
        })
    }
    /// Continues a response started by [`ResponseWriter::new`] on the same `buf`
    /// that holds `len` bytes (header included) and `count` results: lets a server
    /// keep only `(len, count)` between results instead of a borrow of the frame.
    /// Fails with `Truncated` if `len` is not within `buf` or below the header.
    pub fn resume(buf: &'b mut [u8], len: usize, count: u16) -> Result<Self, PayloadError> {
        if len < RESPONSE_BATCH_HEADER_LEN || len > buf.len() {
            return Err(PayloadError::Truncated);
        }
        Ok(ResponseWriter {
            buf,
            pos: len,
            count,
        })
    }
    /// Bytes written so far (header included).
    #[inline]
    pub fn len(&self) -> usize {
        self.pos
    }
    /// True if no result was pushed.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }
    /// Number of results pushed.
    #[inline]
    pub fn count(&self) -> u16 {
        self.count
    }
    /// Whether a result with a value of `value_len` bytes still fits.
    #[inline]
    pub fn fits(&self, value_len: usize) -> bool {
        RESULT_HEADER_LEN + value_len <= self.buf.len() - self.pos
    }
    /// Sets the MORE flag (further response packets follow for this batch).
    pub fn set_more(&mut self, more: bool) {
        self.buf[resp_field::FLAGS] = if more { RESP_FLAG_MORE } else { 0 };
    }
    /// Appends a result. On `NoSpace` nothing is written.
    pub fn push(&mut self, status: Status, value: &[u8]) -> Result<(), PayloadError> {
        if value.len() > MAX_VALUE_LEN {
            return Err(PayloadError::ValueTooLarge);
        }
        if self.count == u16::MAX {
            return Err(PayloadError::TooManyOps);
        }
        self.pos = put_result(self.buf, self.pos, status, value).ok_or(PayloadError::NoSpace)?;
        self.count += 1;
        Ok(())
    }
    /// Appends a result whose `value_len` value bytes are written in place by `fill`.
    pub fn push_with(
        &mut self,
        status: Status,
        value_len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), PayloadError> {
        if value_len > MAX_VALUE_LEN {
            return Err(PayloadError::ValueTooLarge);
        }
        if self.count == u16::MAX {
            return Err(PayloadError::TooManyOps);
        }
        if !self.fits(value_len) {
            return Err(PayloadError::NoSpace);
        }
        let p = self.pos;
        self.buf[p] = status as u8;
        self.buf[p + 1..p + 3].copy_from_slice(&(value_len as u16).to_be_bytes());
        fill(&mut self.buf[p + 3..p + 3 + value_len]);
        self.pos = p + 3 + value_len;
        self.count += 1;
        Ok(())
    }
    /// Writes the count and returns the payload length.
    pub fn finish(self) -> usize {
        self.buf[resp_field::COUNT].copy_from_slice(&self.count.to_be_bytes());
        self.pos
    }
}

/// Encodes one result (`status`, `value_len` BE, `value`) at byte `pos` of a response
/// payload `buf` and returns the position after it, or `None` (nothing written) when it
/// does not fit or the value is longer than [`MAX_VALUE_LEN`]. The result count in the
/// header is the caller's to keep ([`ResponseWriter`] does it for you); this is the
/// per-result step of a server that keeps only `(pos, count)` between results.
#[inline(always)]
pub fn put_result(buf: &mut [u8], pos: usize, status: Status, value: &[u8]) -> Option<usize> {
    let n = value.len();
    if n > MAX_VALUE_LEN {
        return None;
    }
    let end = pos.checked_add(RESULT_HEADER_LEN + n)?;
    let dst = buf.get_mut(pos..end)?;
    let (hdr, val) = dst.split_at_mut(RESULT_HEADER_LEN);
    hdr[0] = status as u8;
    hdr[1..3].copy_from_slice(&(n as u16).to_be_bytes());
    copy_small(val, value);
    Some(end)
}

/// `dst.copy_from_slice(src)` that stays inline for short slices (values of a few
/// bytes are the common case; a call into `memcpy` costs more than the copy). Two
/// overlapping fixed-size moves cover every length in a size class.
///
/// Panics if the lengths differ, like `copy_from_slice`.
#[inline(always)]
pub fn copy_small(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    assert_eq!(dst.len(), n, "copy_small: length mismatch");
    if n > 16 {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else if n >= 2 {
        dst[..2].copy_from_slice(&src[..2]);
        dst[n - 2..].copy_from_slice(&src[n - 2..]);
    } else if n == 1 {
        dst[0] = src[0];
    }
}

/// Iterator over the results of a response payload (fused after an error).
#[derive(Debug, Clone)]
pub struct ResponseReader<'a> {
    buf: &'a [u8],
    pos: usize,
    batch_id: u32,
    count: u16,
    first_index: u16,
    flags: u8,
    remaining: u16,
    failed: bool,
}

impl<'a> ResponseReader<'a> {
    /// Validates the response header.
    pub fn new(payload: &'a [u8]) -> Result<Self, PayloadError> {
        let h = payload
            .get(..RESPONSE_BATCH_HEADER_LEN)
            .ok_or(PayloadError::Truncated)?;
        if h[resp_field::MAGIC] != RESPONSE_MAGIC {
            return Err(PayloadError::BadMagic);
        }
        if h[resp_field::VERSION] != VERSION {
            return Err(PayloadError::BadVersion);
        }
        let count = rd16(h, resp_field::COUNT.start);
        Ok(ResponseReader {
            buf: payload,
            pos: RESPONSE_BATCH_HEADER_LEN,
            batch_id: rd32(h, resp_field::BATCH_ID.start),
            count,
            first_index: rd16(h, resp_field::FIRST_INDEX.start),
            flags: h[resp_field::FLAGS],
            remaining: count,
            failed: false,
        })
    }
    /// Echoed batch id.
    #[inline]
    pub fn batch_id(&self) -> u32 {
        self.batch_id
    }
    /// Number of results in this packet (header field).
    #[inline]
    pub fn result_count(&self) -> u16 {
        self.count
    }
    /// Index of the first result within the request batch.
    #[inline]
    pub fn first_index(&self) -> u16 {
        self.first_index
    }
    /// True if more response packets follow for this batch.
    #[inline]
    pub fn more(&self) -> bool {
        self.flags & RESP_FLAG_MORE != 0
    }

    #[inline]
    fn decode(&mut self) -> Result<KvResult<'a>, PayloadError> {
        let mut c = Cursor {
            buf: self.buf,
            pos: self.pos,
        };
        let s = c.u8()?;
        let status = Status::from_u8(s).ok_or(PayloadError::UnknownStatus(s))?;
        let n = usize::from(c.u16()?);
        let value = c.bytes(n)?;
        self.pos = c.pos;
        Ok(KvResult { status, value })
    }
}

impl<'a> Iterator for ResponseReader<'a> {
    type Item = Result<KvResult<'a>, PayloadError>;

    #[inline]
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.remaining == 0 {
            return None;
        }
        match self.decode() {
            Ok(r) => {
                self.remaining -= 1;
                Some(Ok(r))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

impl core::iter::FusedIterator for ResponseReader<'_> {}

#[cfg(test)]
mod tests {

    #[test]
    fn copy_small_copies_every_length() {
        for n in 0..=40usize {
            let src: Vec<u8> = (0..n as u8).map(|b| b.wrapping_mul(37) ^ 0x5a).collect();
            let mut dst = vec![0u8; n + 2];
            copy_small(&mut dst[1..n + 1], &src);
            assert_eq!(&dst[1..n + 1], &src[..], "length {n}");
            assert_eq!((dst[0], dst[n + 1]), (0, 0), "length {n} wrote outside");
        }
    }

    #[test]
    fn put_result_matches_response_writer() {
        let mut a = [0u8; 64];
        let mut b = [0u8; 64];
        let mut w = ResponseWriter::new(&mut a, 9, 0).unwrap();
        w.push(Status::Ok, &[1, 2, 3, 4, 5]).unwrap();
        w.push(Status::NotFound, &[]).unwrap();
        let len = w.finish();
        let h = RESPONSE_BATCH_HEADER_LEN;
        ResponseWriter::new(&mut b, 9, 0).unwrap().finish();
        let p = put_result(&mut b, h, Status::Ok, &[1, 2, 3, 4, 5]).unwrap();
        let p = put_result(&mut b, p, Status::NotFound, &[]).unwrap();
        b[2..4].copy_from_slice(&2u16.to_be_bytes());
        assert_eq!(p, len);
        assert_eq!(a[..len], b[..len]);
        // Does not fit: nothing written, None.
        let before = b;
        assert_eq!(put_result(&mut b, 60, Status::Ok, &[7; 2]), None);
        assert_eq!(before, b);
        assert_eq!(put_result(&mut b, 61, Status::Ok, &[]), Some(64));
    }

    #[test]
    fn resume_continues_a_response() {
        let mut buf = [0xa5u8; 64];
        let (len, count) = {
            let mut w = ResponseWriter::new(&mut buf, 7, 0).unwrap();
            w.push(Status::Ok, b"ab").unwrap();
            (w.len(), w.count())
        };
        let mut w = ResponseWriter::resume(&mut buf, len, count).unwrap();
        w.push(Status::NotFound, &[]).unwrap();
        let n = w.finish();
        let results: Vec<_> = ResponseReader::new(&buf[..n])
            .unwrap()
            .map(|r| r.unwrap())
            .collect();
        assert_eq!(results.len(), 2);
        assert_eq!(results[0].value, b"ab");
        assert_eq!(results[1].status, Status::NotFound);
        assert!(ResponseWriter::resume(&mut buf, 3, 0).is_err());
        assert!(ResponseWriter::resume(&mut buf, 65, 0).is_err());
    }
    use super::*;
    use proptest::prelude::*;

    /// PUT "hello"="world!", GET "hello" (COPY_SIZES), batch 0x01020304.
    static BATCH: [u8; 29] = [
        0x4b, 0x01, 0x00, 0x02, 0x01, 0x02, 0x03, 0x04, 0x02, 0x05, 0x00, 0x06, b'h', b'e', b'l',
        b'l', b'o', b'w', b'o', b'r', b'l', b'd', b'!', 0x81, b'h', b'e', b'l', b'l', b'o',
    ];

    const A: Atomic = Atomic {
        func: func::CAS,
        width: Width::W4,
        signed: true,
    };

    /// A request payload with a valid header (0..40 ops announced) over a body biased
    /// to GET/PUT/DELETE opcode bytes, flags and short lengths: mostly plain ops, with
    /// every kind of malformed op mixed in.
    fn plain_heavy_payload() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            4 => prop::sample::select(vec![1u8, 2, 3, 0x81, 0x82, 0x83, 0x42, 0xc2, 0x21, 4, 0]),
            1 => any::<u8>(),
            3 => 0u8..12,
        ];
        (prop::collection::vec(byte, 0..200), 0u16..40).prop_map(|(body, count)| {
            let mut payload = vec![REQUEST_MAGIC, VERSION];
            payload.extend_from_slice(&count.to_be_bytes());
            payload.extend_from_slice(&7u32.to_be_bytes());
            payload.extend_from_slice(&body);
            payload
        })
    }

    fn encode(ops: &[KvOp<'_>], buf: &mut [u8]) -> usize {
        let mut w = BatchWriter::new(buf, 0x0102_0304).unwrap();
        for o in ops {
            w.push(o).unwrap();
        }
        w.finish()
    }

    #[test]
    fn decode_static() {
        let r = BatchReader::new(&BATCH).unwrap();
        assert_eq!(r.batch_id(), 0x0102_0304);
        assert_eq!(r.op_count(), 2);
        let ops: Vec<_> = r.collect();
        assert_eq!(
            ops,
            vec![
                Ok(KvOp::Put {
                    key: b"hello",
                    value: b"world!"
                }),
                Ok(KvOp::Get { key: b"hello" })
            ]
        );
    }

    #[test]
    fn encode_static() {
        let mut buf = [0xa5u8; 29];
        let n = encode(
            &[
                KvOp::Put {
                    key: b"hello",
                    value: b"world!",
                },
                KvOp::Get { key: b"hello" },
            ],
            &mut buf,
        );
        assert_eq!(n, 29);
        assert_eq!(buf, BATCH);
    }

    #[test]
    fn put_same_value_costs_no_value_bytes() {
        let v = [7u8; 100];
        let mut buf = [0u8; 512];
        let ops = [
            KvOp::Put {
                key: b"k1",
                value: &v,
            },
            KvOp::Put {
                key: b"k2",
                value: &v,
            },
            KvOp::Put {
                key: b"k33",
                value: &v,
            },
        ];
        let n = encode(&ops, &mut buf);
        // header + (1+1+2+2+100) + (1+2) + (1+1+3)
        assert_eq!(n, 8 + 106 + 3 + 5);
        assert_eq!(buf[8 + 106], op::PUT | FLAG_COPY_SIZES | FLAG_COPY_VALUE);
        assert_eq!(buf[8 + 106 + 3], op::PUT | FLAG_COPY_VALUE);
        let back: Vec<_> = BatchReader::new(&buf[..n])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, ops);
    }

    #[test]
    fn atomics_layout() {
        let mut buf = [0xa5u8; 64];
        let ops = [
            KvOp::UpdateS2S {
                key: b"c",
                atomic: A,
                param: 5,
                param2: 0xffff_fffe,
            },
            KvOp::Reduce {
                key: b"v",
                atomic: Atomic {
                    func: func::FETCH_ADD,
                    width: Width::W2,
                    signed: false,
                },
                init: 0x1234,
            },
        ];
        let n = encode(&ops, &mut buf);
        assert_eq!(
            &buf[8..n],
            &[
                0x04,
                1,
                func::CAS,
                0x06,
                5,
                0,
                0,
                0,
                0xfe,
                0xff,
                0xff,
                0xff,
                b'c', // S2S
                0x87,
                0x00,
                0x01,
                0x34,
                0x12,
                b'v', // REDUCE, COPY_SIZES
            ]
        );
        assert_eq!(A.sign_extend(0xffff_fffe), -2);
        let back: Vec<_> = BatchReader::new(&buf[..n])
            .unwrap()
            .map(Result::unwrap)
            .collect();
        assert_eq!(back, ops);
    }

    #[test]
    fn reader_errors() {
        let hdr = |count: u16| {
            let mut h = vec![REQUEST_MAGIC, VERSION];
            h.extend_from_slice(&count.to_be_bytes());
            h.extend_from_slice(&[0, 0, 0, 9]);
            h
        };
        assert_eq!(
            BatchReader::new(&BATCH[..7]).unwrap_err(),
            PayloadError::Truncated
        );
        let mut b = BATCH;
        b[0] = 0;
        assert_eq!(BatchReader::new(&b).unwrap_err(), PayloadError::BadMagic);
        b = BATCH;
        b[1] = 2;
        assert_eq!(BatchReader::new(&b).unwrap_err(), PayloadError::BadVersion);
        assert_eq!(
            BatchReader::new(&hdr(1025)).unwrap_err(),
            PayloadError::TooManyOps
        );
        let first_err = |body: &[u8], count: u16| {
            let mut p = hdr(count);
            p.extend_from_slice(body);
            BatchReader::new(&p).unwrap().find_map(Result::err)
        };
        // Op count larger than the payload holds.
        assert_eq!(
            first_err(&[0x01, 1, b'k'], 2),
            Some(PayloadError::Truncated)
        );
        assert_eq!(first_err(&[], 1), Some(PayloadError::Truncated));
        assert_eq!(
            first_err(&[0x09, 1, b'k'], 1),
            Some(PayloadError::UnknownOpcode(9))
        );
        assert_eq!(first_err(&[0x00], 1), Some(PayloadError::UnknownOpcode(0)));
        assert_eq!(first_err(&[0x81, b'k'], 1), Some(PayloadError::BadFlags));
        assert_eq!(first_err(&[0x21, 1, b'k'], 1), Some(PayloadError::BadFlags));
        assert_eq!(first_err(&[0x41, 1, b'k'], 1), Some(PayloadError::BadFlags));
        // COPY_VALUE after an op without value.
        assert_eq!(
            first_err(&[0x01, 1, b'k', 0x42, 1, b'k'], 2),
            Some(PayloadError::BadFlags)
        );
        assert_eq!(first_err(&[0x01, 0], 1), Some(PayloadError::EmptyKey));
        assert_eq!(
            first_err(&[0x04, 1, 0, 0x08, 1, b'k'], 1),
            Some(PayloadError::BadAttr)
        );
        // Lying value length.
        assert_eq!(
            first_err(&[0x02, 1, 0xff, 0xff, b'k', 1, 2], 1),
            Some(PayloadError::Truncated)
        );
        // Fused after an error.
        let mut p = hdr(3);
        p.extend_from_slice(&[0x01, 1, b'k', 0x1f]);
        let mut r = BatchReader::new(&p).unwrap();
        assert!(r.next().unwrap().is_ok());
        assert!(r.next().unwrap().is_err());
        assert!(r.next().is_none());
        assert_eq!(
            PayloadError::UnknownOpcode(9).status(),
            Status::UnknownOpcode
        );
        assert_eq!(PayloadError::Truncated.status(), Status::Malformed);
    }

    #[test]
    fn truncation_at_every_offset() {
        let mut buf = [0u8; 128];
        let n = encode(
            &[
                KvOp::Put {
                    key: b"a",
                    value: b"xyz",
                },
                KvOp::UpdateS2V {
                    key: b"b",
                    atomic: A,
                    param: 1,
                    param2: 2,
                },
                KvOp::Filter {
                    key: b"b",
                    atomic: A,
                    param: 3,
                },
                KvOp::UpdateV2V {
                    key: b"cc",
                    atomic: A,
                    delta: &[1, 2, 3, 4],
                },
                KvOp::Delete { key: b"dd" },
            ],
            &mut buf,
        );
        for cut in 0..n {
            match BatchReader::new(&buf[..cut]) {
                Err(e) => assert_eq!(e, PayloadError::Truncated),
                Ok(r) => assert!(r.clone().any(|x| x.is_err()), "cut {cut}"),
            }
        }
        assert_eq!(
            BatchReader::new(&buf[..n])
                .unwrap()
                .filter(Result::is_ok)
                .count(),
            5
        );
    }

    #[test]
    fn writer_limits() {
        let mut buf = [0u8; 21];
        let mut w = BatchWriter::new(&mut buf, 1).unwrap();
        assert_eq!(w.push(&KvOp::Get { key: b"" }), Err(PayloadError::EmptyKey));
        assert_eq!(
            w.push(&KvOp::Get { key: &[0; 256] }),
            Err(PayloadError::KeyTooLarge)
        );
        w.push(&KvOp::Put {
            key: b"abc",
            value: b"de",
        })
        .unwrap();
        assert_eq!(w.len(), 8 + 9);
        assert_eq!(
            w.push(&KvOp::Put {
                key: b"xyz",
                value: b"fg"
            }),
            Err(PayloadError::NoSpace)
        );
        assert_eq!(w.len(), 8 + 9);
        // Same sizes and value: op byte + key only.
        w.push(&KvOp::Put {
            key: b"xyz",
            value: b"de",
        })
        .unwrap();
        let n = w.finish();
        assert_eq!(n, 21);
        assert_eq!(
            BatchReader::new(&buf[..n])
                .unwrap()
                .filter(Result::is_ok)
                .count(),
            2
        );
        assert!(BatchWriter::new(&mut [0u8; 7], 1).is_err());
        let mut big = vec![0u8; 8 + 2 * 1025];
        let mut w = BatchWriter::new(&mut big, 1).unwrap();
        for _ in 0..MAX_OPS_PER_BATCH {
            w.push(&KvOp::Get { key: b"k" }).unwrap();
        }
        assert_eq!(
            w.push(&KvOp::Get { key: b"k" }),
            Err(PayloadError::TooManyOps)
        );
    }

    #[test]
    fn response_roundtrip_and_full() {
        let mut buf = [0xa5u8; 30];
        let mut w = ResponseWriter::new(&mut buf, 77, 5).unwrap();
        w.push(Status::Ok, &[]).unwrap();
        w.push(Status::NotFound, &[]).unwrap();
        w.push_with(Status::Ok, 4, |d| d.copy_from_slice(&[1, 2, 3, 4]))
            .unwrap();
        assert!(!w.fits(6));
        assert_eq!(w.push(Status::Ok, &[0; 6]), Err(PayloadError::NoSpace));
        w.set_more(true);
        let n = w.finish();
        assert_eq!(n, 12 + 3 + 3 + 7);
        assert_eq!(
            &buf[..n],
            &[0x52, 1, 0, 3, 0, 0, 0, 77, 0, 5, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 4, 1, 2, 3, 4]
        );
        let r = ResponseReader::new(&buf[..n]).unwrap();
        assert_eq!(
            (r.batch_id(), r.result_count(), r.first_index(), r.more()),
            (77, 3, 5, true)
        );
        let v: Vec<_> = r.map(Result::unwrap).collect();
        assert_eq!(v[1].status, Status::NotFound);
        assert_eq!(v[2].value, &[1, 2, 3, 4]);
        for cut in 0..n {
            if let Ok(r) = ResponseReader::new(&buf[..cut]) {
                assert!(r.clone().any(|x| x.is_err()));
            }
        }
        let mut bad = buf;
        bad[12] = 42;
        assert_eq!(
            ResponseReader::new(&bad[..n]).unwrap().next(),
            Some(Err(PayloadError::UnknownStatus(42)))
        );
        for s in Status::ALL {
            assert_eq!(Status::from_u8(s as u8), Some(s));
        }
    }

    /// Owned form of an op for proptest.
    #[derive(Debug, Clone)]
    struct Owned {
        opcode: u8,
        key: Vec<u8>,
        value: Vec<u8>,
        atomic: Atomic,
        p1: u64,
        p2: u64,
    }

    impl Owned {
        fn view(&self) -> KvOp<'_> {
            let (key, atomic) = (&self.key[..], self.atomic);
            let m = atomic.width.mask();
            let (param, param2) = (
                self.p1 & m,
                if atomic.func == func::CAS {
                    self.p2 & m
                } else {
                    0
                },
            );
            match self.opcode {
                op::GET => KvOp::Get { key },
                op::PUT => KvOp::Put {
                    key,
                    value: &self.value,
                },
                op::DELETE => KvOp::Delete { key },
                op::UPDATE_S2S => KvOp::UpdateS2S {
                    key,
                    atomic,
                    param,
                    param2,
                },
                op::UPDATE_S2V => KvOp::UpdateS2V {
                    key,
                    atomic,
                    param,
                    param2,
                },
                op::UPDATE_V2V => KvOp::UpdateV2V {
                    key,
                    atomic,
                    delta: &self.value,
                },
                op::REDUCE => KvOp::Reduce {
                    key,
                    atomic,
                    init: param,
                },
                _ => KvOp::Filter { key, atomic, param },
            }
        }
    }

    fn owned() -> impl Strategy<Value = Owned> {
        // Small pools so that equal sizes and equal values repeat often.
        let key = prop_oneof![
            prop::sample::select(vec![b"k1".to_vec(), b"k2".to_vec(), b"key-3".to_vec()]),
            prop::collection::vec(any::<u8>(), 1..=255),
        ];
        let value = prop_oneof![
            prop::sample::select(vec![vec![], b"v1".to_vec(), vec![9u8; 64]]),
            prop::collection::vec(any::<u8>(), 0..300),
        ];
        let atomic = (
            prop_oneof![0u8..=9, Just(func::CAS), 128u8..=255],
            prop::sample::select(Width::ALL.to_vec()),
            any::<bool>(),
        )
            .prop_map(|(func, width, signed)| Atomic {
                func,
                width,
                signed,
            });
        (1u8..=8, key, value, atomic, any::<u64>(), any::<u64>()).prop_map(
            |(opcode, key, value, atomic, p1, p2)| Owned {
                opcode,
                key,
                value,
                atomic,
                p1,
                p2,
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn batch_roundtrip(ops in prop::collection::vec(owned(), 0..40), compress: bool, id: u32) {
            let views: Vec<KvOp<'_>> = ops.iter().map(Owned::view).collect();
            let mut buf = vec![0u8; 20_000];
            let mut w = BatchWriter::new(&mut buf, id).unwrap().with_compression(compress);
            for v in &views {
                w.push(v).unwrap();
            }
            let n = w.finish();
            let r = BatchReader::new(&buf[..n]).unwrap();
            prop_assert_eq!(r.batch_id(), id);
            let back: Result<Vec<_>, _> = r.collect();
            prop_assert_eq!(back.unwrap(), views);
        }

        /// The GET/PUT/DELETE fast path decodes exactly as the general decoder, on
        /// any bytes: same ops, same error at the same op, same position after each.
        #[test]
        fn plain_fast_path_matches_general(payload in plain_heavy_payload()) {
            let count = BatchReader::new(&payload).unwrap().op_count();
            let mut fast = BatchReader::new(&payload).unwrap();
            let mut general = fast.clone();
            for _ in 0..count {
                let a = fast.decode();
                let b = general.decode_general();
                prop_assert_eq!(&a, &b);
                prop_assert_eq!(fast.pos, general.pos);
                if a.is_err() {
                    break;
                }
            }
        }

        /// `plain_ops` runs interleaved with iteration give exactly the ops and the
        /// error of iterating alone, in the same order, on any bytes.
        #[test]
        fn plain_runs_match_iteration(payload in plain_heavy_payload()) {
            let alone: Vec<_> = BatchReader::new(&payload).unwrap().collect();
            let mut mixed = Vec::new();
            let mut r = BatchReader::new(&payload).unwrap();
            loop {
                r.plain_ops(|op| mixed.push(Ok(op)));
                match r.next() {
                    Some(item) => mixed.push(item),
                    None => break,
                }
            }
            r.plain_ops(|op| mixed.push(Ok(op)));
            prop_assert_eq!(mixed, alone);
        }

        #[test]
        fn response_roundtrip(vals in prop::collection::vec((0usize..13, prop::collection::vec(any::<u8>(), 0..100)), 0..30)) {
            let mut buf = vec![0u8; 4000];
            let mut w = ResponseWriter::new(&mut buf, 3, 0).unwrap();
            for (s, v) in &vals {
                w.push(Status::ALL[*s], v).unwrap();
            }
            let n = w.finish();
            let back: Vec<_> = ResponseReader::new(&buf[..n]).unwrap().map(Result::unwrap).collect();
            prop_assert_eq!(back.len(), vals.len());
            for (b, (s, v)) in back.iter().zip(&vals) {
                prop_assert_eq!(b.status, Status::ALL[*s]);
                prop_assert_eq!(b.value, &v[..]);
            }
        }

        #[test]
        fn reader_never_panics(data in prop::collection::vec(any::<u8>(), 0..200)) {
            let mut d = data;
            if d.len() >= 2 { d[0] = REQUEST_MAGIC; d[1] = VERSION; }
            if let Ok(r) = BatchReader::new(&d) {
                for x in r { let _ = x; }
            }
        }
    }
}
