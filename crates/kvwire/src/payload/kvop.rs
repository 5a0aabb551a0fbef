//! Operations: opcodes, op-byte flags, function and predicate ids, element
//! [`Width`], [`Atomic`] and the decoded op [`KvOp`].

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
    /// Delete the key if its value equals the op's value; returns the value it held.
    pub const COMPARE_DELETE: u8 = 9;
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

    /// The built-in functions' names, as every client spells them.
    pub const NAMES: &[(&str, u8)] = &[
        ("add", FETCH_ADD),
        ("sub", FETCH_SUB),
        ("swap", SWAP),
        ("cas", CAS),
        ("min", MIN),
        ("max", MAX),
        ("and", AND),
        ("or", OR),
        ("xor", XOR),
    ];

    /// A function by name (any case, [`NAMES`]) or decimal id 0–255.
    pub fn by_name(s: &str) -> Option<u8> {
        super::named_id(s, NAMES)
    }
}

/// An id by name from `table` (any case), or a decimal id 0–255.
fn named_id(s: &str, table: &[(&str, u8)]) -> Option<u8> {
    let t = s.trim();
    table
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(t))
        .map(|&(_, id)| id)
        .or_else(|| t.parse::<u8>().ok())
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

    /// The built-in predicates' names, as every client spells them.
    pub const NAMES: &[(&str, u8)] = &[
        ("eq", EQ),
        ("ne", NE),
        ("lt", LT),
        ("le", LE),
        ("gt", GT),
        ("ge", GE),
        ("any", ANY_BITS),
    ];

    /// A predicate by name (any case, [`NAMES`]) or decimal id 0–255.
    pub fn by_name(s: &str) -> Option<u8> {
        super::named_id(s, NAMES)
    }
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

/// Vector values: `width`-byte little-endian elements back to back (docs/PROTOCOL.md
/// §3.2), the one encoding every client reads and writes.
pub mod elems {
    use super::Width;

    /// The elements of vector `v`, or `None` if its length is not a multiple of the
    /// width.
    pub fn decode(v: &[u8], width: Width) -> Option<Vec<u64>> {
        let w = width.bytes();
        if !v.len().is_multiple_of(w) {
            return None;
        }
        let elem = |c: &[u8]| {
            let mut b = [0u8; 8];
            b[..w].copy_from_slice(c);
            u64::from_le_bytes(b)
        };
        Some(v.chunks_exact(w).map(elem).collect())
    }

    /// Vector bytes of `xs`, each element cut to the width's low bytes.
    pub fn encode(xs: &[u64], width: Width) -> Vec<u8> {
        let w = width.bytes();
        xs.iter()
            .flat_map(|x| x.to_le_bytes()[..w].to_vec())
            .collect()
    }

    /// Element `x` of `width` read as two's complement.
    pub fn signed(x: u64, width: Width) -> i64 {
        let shift = 64 - 8 * width.bytes() as u32;
        ((x << shift) as i64) >> shift
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

/// One KV operation, declared once for every form it takes: `B` holds its bytes —
/// borrowed from a packet ([`KvOp`], what the server decodes and the writer encodes)
/// or owned ([`OwnedKvOp`], what a client keeps to send again).
///
/// Parameters are the raw little-endian bits of `width` bytes, zero-extended
/// (use [`Atomic::sign_extend`] for signed operations). `param2` is only
/// carried by `CAS` (the swap value) and is 0 otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvOpOf<B> {
    /// GET key.
    Get {
        /// Key.
        key: B,
    },
    /// PUT key value.
    Put {
        /// Key.
        key: B,
        /// Value.
        value: B,
    },
    /// DELETE key.
    Delete {
        /// Key.
        key: B,
    },
    /// Atomic scalar update of an element-sized value; returns the original.
    UpdateS2S {
        /// Key.
        key: B,
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
        key: B,
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
        key: B,
        /// Function, width, signedness.
        atomic: Atomic,
        /// Δ vector, little-endian elements of `atomic.width`.
        delta: B,
    },
    /// Fold all elements into Σ starting from `init`; returns Σ.
    Reduce {
        /// Key.
        key: B,
        /// Function, width, signedness.
        atomic: Atomic,
        /// Initial Σ.
        init: u64,
    },
    /// Return the elements x with `pred(x, param)`.
    Filter {
        /// Key.
        key: B,
        /// Predicate id (in `atomic.func`), width, signedness.
        atomic: Atomic,
        /// Predicate parameter.
        param: u64,
    },
    /// Delete the key if its value is `expected`; returns the value it held (the key
    /// was deleted iff that equals `expected`).
    CompareDelete {
        /// Key.
        key: B,
        /// The value the key must hold to be deleted.
        expected: B,
    },
}

/// One decoded KV operation; key and value borrow from the packet.
pub type KvOp<'a> = KvOpOf<&'a [u8]>;

/// One KV operation owning its bytes (a client's: kept until answered, sent again
/// on another node).
pub type OwnedKvOp = KvOpOf<Vec<u8>>;

impl OwnedKvOp {
    /// The borrowed form (for a [`crate::BatchWriter`]).
    pub fn as_kv(&self) -> KvOp<'_> {
        match self {
            KvOpOf::Get { key } => KvOp::Get { key },
            KvOpOf::Put { key, value } => KvOp::Put { key, value },
            KvOpOf::Delete { key } => KvOp::Delete { key },
            KvOpOf::UpdateS2S {
                key,
                atomic,
                param,
                param2,
            } => KvOp::UpdateS2S {
                key,
                atomic: *atomic,
                param: *param,
                param2: *param2,
            },
            KvOpOf::UpdateS2V {
                key,
                atomic,
                param,
                param2,
            } => KvOp::UpdateS2V {
                key,
                atomic: *atomic,
                param: *param,
                param2: *param2,
            },
            KvOpOf::UpdateV2V { key, atomic, delta } => KvOp::UpdateV2V {
                key,
                atomic: *atomic,
                delta,
            },
            KvOpOf::Reduce { key, atomic, init } => KvOp::Reduce {
                key,
                atomic: *atomic,
                init: *init,
            },
            KvOpOf::Filter { key, atomic, param } => KvOp::Filter {
                key,
                atomic: *atomic,
                param: *param,
            },
            KvOpOf::CompareDelete { key, expected } => KvOp::CompareDelete { key, expected },
        }
    }

    /// The key.
    pub fn key(&self) -> &[u8] {
        self.as_kv().key()
    }

    /// The op with its key in tenant `tenant`'s namespace (docs/PROTOCOL.md §6.8;
    /// unchanged for 0, no tenant).
    pub fn in_namespace(mut self, tenant: u32) -> OwnedKvOp {
        if tenant != 0 {
            let k = match &mut self {
                KvOpOf::Get { key }
                | KvOpOf::Put { key, .. }
                | KvOpOf::Delete { key }
                | KvOpOf::UpdateS2S { key, .. }
                | KvOpOf::UpdateS2V { key, .. }
                | KvOpOf::UpdateV2V { key, .. }
                | KvOpOf::Reduce { key, .. }
                | KvOpOf::Filter { key, .. }
                | KvOpOf::CompareDelete { key, .. } => key,
            };
            *k = crate::tenant::prefixed(tenant, k);
        }
        self
    }
}

impl<'a> KvOp<'a> {
    /// The op of `opcode` from decoded parts, each variant taking the fields its
    /// encoding carries (`value`: PUT's value, UPDATE_V2V's Δ, COMPARE_DELETE's
    /// expected value; `p1`, `p2`: the parameters, REDUCE's initial Σ): the one place
    /// an opcode becomes a variant. `None` for an undefined opcode.
    pub const fn from_parts(
        opcode: u8,
        key: &'a [u8],
        value: &'a [u8],
        atomic: Atomic,
        p1: u64,
        p2: u64,
    ) -> Option<KvOp<'a>> {
        Some(match opcode {
            op::GET => KvOp::Get { key },
            op::PUT => KvOp::Put { key, value },
            op::DELETE => KvOp::Delete { key },
            op::UPDATE_S2S => KvOp::UpdateS2S {
                key,
                atomic,
                param: p1,
                param2: p2,
            },
            op::UPDATE_S2V => KvOp::UpdateS2V {
                key,
                atomic,
                param: p1,
                param2: p2,
            },
            op::UPDATE_V2V => KvOp::UpdateV2V {
                key,
                atomic,
                delta: value,
            },
            op::REDUCE => KvOp::Reduce {
                key,
                atomic,
                init: p1,
            },
            op::FILTER => KvOp::Filter {
                key,
                atomic,
                param: p1,
            },
            op::COMPARE_DELETE => KvOp::CompareDelete {
                key,
                expected: value,
            },
            _ => return None,
        })
    }

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
            KvOp::CompareDelete { .. } => op::COMPARE_DELETE,
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
            | KvOp::Filter { key, .. }
            | KvOp::CompareDelete { key, .. } => key,
        }
    }
    /// Whether the op may change the store (the op table's `writes`): the ops
    /// a replica or a fenced master refuses (`NOT_MASTER`).
    pub const fn is_write(&self) -> bool {
        match super::optable::spec(self.opcode()) {
            Some(s) => s.writes,
            None => true,
        }
    }
    /// The value bytes of PUT, the Δ vector of UPDATE_V2V, the expected value of
    /// COMPARE_DELETE; `None` otherwise.
    pub const fn value(&self) -> Option<&'a [u8]> {
        match self {
            KvOp::Put { value, .. } => Some(value),
            KvOp::UpdateV2V { delta, .. } => Some(delta),
            KvOp::CompareDelete { expected, .. } => Some(expected),
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
    match super::optable::spec(opcode) {
        Some(s) => s.value,
        None => false,
    }
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
    match super::optable::spec(opcode) {
        Some(s) => s.atomic,
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_ids() {
        assert_eq!(func::by_name("MAX"), Some(func::MAX));
        assert_eq!(func::by_name(" add "), Some(func::FETCH_ADD));
        assert_eq!(func::by_name("200"), Some(200));
        assert_eq!(func::by_name("mul"), None);
        assert_eq!(func::by_name("256"), None);
        assert_eq!(pred::by_name("ge"), Some(pred::GE));
        assert_eq!(pred::by_name("any"), Some(pred::ANY_BITS));
        // Every built-in has exactly one name.
        for table in [func::NAMES, pred::NAMES] {
            let mut ids: Vec<u8> = table.iter().map(|&(_, id)| id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), table.len());
        }
    }

    #[test]
    fn elements_round_trip_and_sign_extend() {
        let v = elems::encode(&[1, 0xffff, 0x1_0002], Width::W2);
        assert_eq!(v, [1, 0, 0xff, 0xff, 2, 0]);
        assert_eq!(elems::decode(&v, Width::W2), Some(vec![1, 0xffff, 2]));
        assert_eq!(
            elems::decode(&v, Width::W4),
            None,
            "6 bytes are no 4-byte vector"
        );
        assert_eq!(elems::signed(0xffff, Width::W2), -1);
        assert_eq!(elems::signed(0x7fff, Width::W2), 0x7fff);
        assert_eq!(elems::signed(u64::MAX, Width::W8), -1);
        assert_eq!(elems::decode(&[], Width::W8), Some(vec![]));
    }
}
