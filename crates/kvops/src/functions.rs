//! Element functions and vector operations (KV-Direct §3.3.3, Table 2).
//!
//! A value is seen either as one scalar or as an array of fixed-width elements. Elements
//! are little-endian, 1, 2, 4 or 8 bytes wide ([`Width`]). All arithmetic wraps at the
//! element width (two's complement); `signed` only changes the functions that compare:
//! `min`, `max` and the ordering predicates of [`filter`].
//!
//! Parameters are passed as `u64` and truncated to the element width (the low `width`
//! bytes), so a client sends them at any width it likes.
//!
//! # Panic and allocation contract
//!
//! No function here panics, whatever the lengths of its inputs, and none allocates. Every
//! function checks all its inputs before it writes anything: on error the value is left
//! unchanged.

use core::cmp::Ordering;

use kvwire::{func, op, pred, Width};

/// Why an operation was refused. The value is unchanged whenever one is returned.
///
/// This is the functions' own error; the station answers it as the wire status of
/// `From<OpError> for kvwire::Status`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OpError {
    /// The value length is not a multiple of the width, a scalar value is not exactly one
    /// element, or a Δ-vector's length differs from the value's.
    BadLength,
    /// The function or predicate ID names nothing for this operation: reserved, not
    /// registered, or not defined for the opcode (docs/PROTOCOL.md §3.2).
    UnknownFunction,
    /// A caller-provided output buffer is shorter than the value (a caller bug, never a
    /// client error: the reservation station sizes its buffers so this cannot happen).
    BufferTooSmall,
}

impl core::fmt::Display for OpError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let s = match self {
            OpError::BadLength => "value or delta length does not fit the element width",
            OpError::UnknownFunction => "function or predicate id not defined for this op",
            OpError::BufferTooSmall => "output buffer shorter than the value",
        };
        f.write_str(s)
    }
}

impl std::error::Error for OpError {}

impl From<OpError> for kvwire::Status {
    /// `BadLength` and `UnknownFunction` are the wire statuses of the same name;
    /// `BufferTooSmall` is `ValueTooLarge` (the station sizes its buffers to the largest
    /// value it caches, so it only means a value larger than that buffer).
    #[inline]
    fn from(e: OpError) -> kvwire::Status {
        match e {
            OpError::BadLength => kvwire::Status::BadLength,
            OpError::UnknownFunction => kvwire::Status::UnknownFunction,
            OpError::BufferTooSmall => kvwire::Status::ValueTooLarge,
        }
    }
}

/// Sign-extends the low `8 * width` bits of `v`.
const fn sign_extend(width: Width, v: u64) -> i64 {
    let shift = 64 - 8 * width.bytes() as u32;
    ((v << shift) as i64) >> shift
}

/// Reads a little-endian element of up to 8 bytes (longer inputs: the first 8 bytes).
pub fn load_le(elem: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    for (d, s) in b.iter_mut().zip(elem) {
        *d = *s;
    }
    u64::from_le_bytes(b)
}

/// Writes the low `elem.len()` bytes of `v` little-endian (at most 8).
pub fn store_le(elem: &mut [u8], v: u64) {
    for (d, s) in elem.iter_mut().zip(v.to_le_bytes()) {
        *d = s;
    }
}

/// Compares two width-masked elements, signed or unsigned.
fn compare(width: Width, signed: bool, a: u64, b: u64) -> Ordering {
    if signed {
        sign_extend(width, a).cmp(&sign_extend(width, b))
    } else {
        (a & width.mask()).cmp(&(b & width.mask()))
    }
}

/// The built-in element functions; each one's discriminant is its wire ID
/// (`kvwire::func`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Builtin {
    /// `old + param` (wrapping); returns the original value.
    FetchAdd = func::FETCH_ADD,
    /// `old - param` (wrapping); returns the original value.
    FetchSub = func::FETCH_SUB,
    /// `param`; returns the original value.
    Swap = func::SWAP,
    /// `if old == param { param2 } else { old }`; returns the original value.
    CompareSwap = func::CAS,
    /// `min(old, param)`, signed or unsigned.
    Min = func::MIN,
    /// `max(old, param)`, signed or unsigned.
    Max = func::MAX,
    /// `old & param`.
    And = func::AND,
    /// `old | param`.
    Or = func::OR,
    /// `old ^ param`.
    Xor = func::XOR,
}

impl Builtin {
    /// Every built-in function, in ID order.
    pub const ALL: [Builtin; 9] = [
        Builtin::FetchAdd,
        Builtin::FetchSub,
        Builtin::Swap,
        Builtin::CompareSwap,
        Builtin::Min,
        Builtin::Max,
        Builtin::And,
        Builtin::Or,
        Builtin::Xor,
    ];

    /// The built-in function with this wire ID, if any.
    pub const fn from_id(id: u8) -> Option<Builtin> {
        match id {
            func::FETCH_ADD => Some(Builtin::FetchAdd),
            func::FETCH_SUB => Some(Builtin::FetchSub),
            func::SWAP => Some(Builtin::Swap),
            func::CAS => Some(Builtin::CompareSwap),
            func::MIN => Some(Builtin::Min),
            func::MAX => Some(Builtin::Max),
            func::AND => Some(Builtin::And),
            func::OR => Some(Builtin::Or),
            func::XOR => Some(Builtin::Xor),
            _ => None,
        }
    }

    /// This function's wire ID (`kvwire::func`).
    pub const fn id(self) -> u8 {
        self as u8
    }

    /// Whether this function is defined for `opcode` (`kvwire::op`; the function ×
    /// opcode matrix of docs/PROTOCOL.md §3.2). CAS takes its new value from `param2`,
    /// which only UPDATE_S2S and UPDATE_S2V carry, so it is not defined for UPDATE_V2V
    /// and REDUCE; every other built-in is defined for all four function opcodes.
    /// FILTER takes predicates, not functions: no built-in is defined for it.
    pub const fn defined_for(self, opcode: u8) -> bool {
        match opcode {
            op::UPDATE_S2S | op::UPDATE_S2V => true,
            op::UPDATE_V2V | op::REDUCE => !matches!(self, Builtin::CompareSwap),
            _ => false,
        }
    }

    /// A short lower-case name (`fetch_add`, `cas`, …).
    pub const fn name(self) -> &'static str {
        match self {
            Builtin::FetchAdd => "fetch_add",
            Builtin::FetchSub => "fetch_sub",
            Builtin::Swap => "swap",
            Builtin::CompareSwap => "cas",
            Builtin::Min => "min",
            Builtin::Max => "max",
            Builtin::And => "and",
            Builtin::Or => "or",
            Builtin::Xor => "xor",
        }
    }

    /// The new element value from the old one; the result is masked to the width.
    pub fn compute(self, width: Width, signed: bool, old: u64, param: u64, param2: u64) -> u64 {
        let m = width.mask();
        let (old, param, param2) = (old & m, param & m, param2 & m);
        let new = match self {
            Builtin::FetchAdd => old.wrapping_add(param),
            Builtin::FetchSub => old.wrapping_sub(param),
            Builtin::Swap => param,
            Builtin::CompareSwap if old == param => param2,
            Builtin::CompareSwap => old,
            Builtin::Min if compare(width, signed, param, old).is_lt() => param,
            Builtin::Max if compare(width, signed, param, old).is_gt() => param,
            Builtin::Min | Builtin::Max => old,
            Builtin::And => old & param,
            Builtin::Or => old | param,
            Builtin::Xor => old ^ param,
        };
        new & m
    }
}

/// A user function: updates one element in place. `elem` is exactly one element (its
/// length is the width: 1, 2, 4 or 8), little-endian; `param`/`param2` are the operation's
/// parameters, untruncated. It must not panic; it cannot fail.
pub type UserFn = fn(elem: &mut [u8], param: u64, param2: u64);

/// A resolved element function: built in or user-defined.
#[derive(Clone, Copy, Debug)]
pub enum ElemFn {
    /// One of the built-ins.
    Builtin(Builtin),
    /// A registered user function.
    User(UserFn),
}

impl From<Builtin> for ElemFn {
    fn from(b: Builtin) -> Self {
        ElemFn::Builtin(b)
    }
}

impl ElemFn {
    /// Applies the function to one element; returns the original element value.
    ///
    /// `elem.len()` must equal `width`, else [`OpError::BadLength`] and no change.
    pub fn apply(
        self,
        width: Width,
        signed: bool,
        elem: &mut [u8],
        param: u64,
        param2: u64,
    ) -> Result<u64, OpError> {
        if elem.len() != width.bytes() {
            return Err(OpError::BadLength);
        }
        let old = load_le(elem);
        match self {
            ElemFn::Builtin(b) => store_le(elem, b.compute(width, signed, old, param, param2)),
            ElemFn::User(f) => f(elem, param, param2),
        }
        Ok(old)
    }
}

/// `update_scalar2scalar` with a built-in function: applies `func` to the scalar `elem`
/// and returns its original value.
///
/// Errors: [`OpError::UnknownFunction`] unless `func` is built in (resolve user IDs with
/// [`FunctionRegistry::resolve`](crate::FunctionRegistry::resolve) and call
/// [`ElemFn::apply`]); [`OpError::BadLength`] unless `elem.len() == width`.
pub fn apply_scalar(
    func: u8,
    width: Width,
    signed: bool,
    elem: &mut [u8],
    param: u64,
    param2: u64,
) -> Result<u64, OpError> {
    let b = Builtin::from_id(func).ok_or(OpError::UnknownFunction)?;
    ElemFn::Builtin(b).apply(width, signed, elem, param, param2)
}

fn check_vector(width: Width, value: &[u8], out: &[u8]) -> Result<(), OpError> {
    if value.len() % width.bytes() != 0 {
        return Err(OpError::BadLength);
    }
    if out.len() < value.len() {
        return Err(OpError::BufferTooSmall);
    }
    Ok(())
}

/// `update_scalar2vector`: applies `f(elem, param, param2)` to every element of `value`.
///
/// The original vector is copied into `original[..value.len()]`; returns `value.len()`.
/// Errors: [`OpError::BadLength`] if `value.len()` is not a multiple of `width`;
/// [`OpError::BufferTooSmall`] if `original` is shorter than `value`.
pub fn update_s2v(
    f: ElemFn,
    width: Width,
    signed: bool,
    value: &mut [u8],
    param: u64,
    param2: u64,
    original: &mut [u8],
) -> Result<usize, OpError> {
    check_vector(width, value, original)?;
    let n = value.len();
    original
        .iter_mut()
        .zip(value.iter())
        .for_each(|(d, s)| *d = *s);
    for elem in value.chunks_exact_mut(width.bytes()) {
        f.apply(width, signed, elem, param, param2)?;
    }
    Ok(n)
}

/// `update_vector2vector`: applies `f(value[i], delta[i], param2)` element-wise.
///
/// The original vector is copied into `original[..value.len()]`; returns `value.len()`.
/// Errors: [`OpError::BadLength`] if `value.len()` is not a multiple of `width` or
/// `delta.len() != value.len()`; [`OpError::BufferTooSmall`] if `original` is short.
pub fn update_v2v(
    f: ElemFn,
    width: Width,
    signed: bool,
    value: &mut [u8],
    delta: &[u8],
    param2: u64,
    original: &mut [u8],
) -> Result<usize, OpError> {
    check_vector(width, value, original)?;
    if delta.len() != value.len() {
        return Err(OpError::BadLength);
    }
    let n = value.len();
    original
        .iter_mut()
        .zip(value.iter())
        .for_each(|(d, s)| *d = *s);
    let w = width.bytes();
    for (elem, d) in value.chunks_exact_mut(w).zip(delta.chunks_exact(w)) {
        f.apply(width, signed, elem, load_le(d), param2)?;
    }
    Ok(n)
}

/// `reduce`: folds the elements into Σ, starting from `init`: for each element `e` in
/// order, `Σ = f(Σ, e, param2)`. Returns Σ masked to the width (zero-extended).
///
/// So fetch-add gives the sum, min/max the extremum (`init` should be the neutral
/// element, e.g. the maximum for min), and/or/xor the bitwise reductions; user functions
/// work the same way. Errors: [`OpError::BadLength`] if `value.len()` is not a multiple
/// of `width`.
pub fn reduce(
    f: ElemFn,
    width: Width,
    signed: bool,
    value: &[u8],
    init: u64,
    param2: u64,
) -> Result<u64, OpError> {
    if value.len() % width.bytes() != 0 {
        return Err(OpError::BadLength);
    }
    let mut acc_buf = [0u8; 8];
    // Cannot fail: an element is at most 8 bytes.
    let acc = acc_buf
        .get_mut(..width.bytes())
        .ok_or(OpError::BufferTooSmall)?;
    store_le(acc, init);
    for e in value.chunks_exact(width.bytes()) {
        f.apply(width, signed, acc, load_le(e), param2)?;
    }
    Ok(load_le(acc))
}

/// A filter predicate: an element `e` passes if `e <op> param` holds. The IDs are the
/// wire table `kvwire::pred`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Predicate {
    /// ID 0: `e == param`.
    Eq = pred::EQ,
    /// ID 1: `e != param`.
    Ne = pred::NE,
    /// ID 2: `e < param`.
    Lt = pred::LT,
    /// ID 3: `e <= param`.
    Le = pred::LE,
    /// ID 4: `e > param`.
    Gt = pred::GT,
    /// ID 5: `e >= param`.
    Ge = pred::GE,
    /// ID 6: `e & param != 0` (with `param` all ones: "nonzero").
    AnyBits = pred::ANY_BITS,
}

impl Predicate {
    /// Every predicate, in ID order.
    pub const ALL: [Predicate; 7] = [
        Predicate::Eq,
        Predicate::Ne,
        Predicate::Lt,
        Predicate::Le,
        Predicate::Gt,
        Predicate::Ge,
        Predicate::AnyBits,
    ];

    /// The predicate with this wire ID; [`OpError::UnknownFunction`] otherwise.
    pub const fn from_id(id: u8) -> Result<Predicate, OpError> {
        match id {
            pred::EQ => Ok(Predicate::Eq),
            pred::NE => Ok(Predicate::Ne),
            pred::LT => Ok(Predicate::Lt),
            pred::LE => Ok(Predicate::Le),
            pred::GT => Ok(Predicate::Gt),
            pred::GE => Ok(Predicate::Ge),
            pred::ANY_BITS => Ok(Predicate::AnyBits),
            _ => Err(OpError::UnknownFunction),
        }
    }

    /// Whether element `e` passes against `param`, both width-masked.
    pub fn test(self, width: Width, signed: bool, e: u64, param: u64) -> bool {
        let ord = compare(width, signed, e, param);
        match self {
            Predicate::Eq => ord.is_eq(),
            Predicate::Ne => ord.is_ne(),
            Predicate::Lt => ord.is_lt(),
            Predicate::Le => ord.is_le(),
            Predicate::Gt => ord.is_gt(),
            Predicate::Ge => ord.is_ge(),
            Predicate::AnyBits => e & param & width.mask() != 0,
        }
    }
}

/// `filter`: copies the elements of `value` that pass `pred` (in order) into `out`.
///
/// Returns the number of bytes written (a multiple of the width; divide by it for the
/// element count). `out` must be at least `value.len()` long (the worst case), else
/// [`OpError::BufferTooSmall`]; [`OpError::BadLength`] if `value.len()` is not a multiple
/// of `width`.
pub fn filter(
    pred: Predicate,
    width: Width,
    signed: bool,
    param: u64,
    value: &[u8],
    out: &mut [u8],
) -> Result<usize, OpError> {
    check_vector(width, value, out)?;
    let w = width.bytes();
    let mut n = 0;
    for e in value.chunks_exact(w) {
        if pred.test(width, signed, load_le(e), param) {
            if let Some(dst) = out.get_mut(n..n + w) {
                dst.copy_from_slice(e);
            }
            n += w;
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip() {
        for b in Builtin::ALL {
            assert_eq!(Builtin::from_id(b.id()), Some(b));
        }
        assert_eq!(Builtin::from_id(9), None);
        assert_eq!(Builtin::from_id(10), None);
        for p in Predicate::ALL {
            assert_eq!(Predicate::from_id(p as u8), Ok(p));
        }
        assert_eq!(Predicate::from_id(7), Err(OpError::UnknownFunction));
        assert_eq!(Predicate::from_id(8), Err(OpError::UnknownFunction));
    }

    #[test]
    fn sign_extension() {
        assert_eq!(sign_extend(Width::W1, 0x80), -128);
        assert_eq!(sign_extend(Width::W2, 0x7fff), 0x7fff);
        assert_eq!(sign_extend(Width::W4, 0xffff_ffff), -1);
        assert_eq!(sign_extend(Width::W8, u64::MAX), -1);
    }

    #[test]
    fn wraps_at_width() {
        let mut e = [0xff];
        assert_eq!(
            apply_scalar(func::FETCH_ADD, Width::W1, false, &mut e, 1, 0),
            Ok(255)
        );
        assert_eq!(e, [0]);
        let mut e = [0, 0];
        apply_scalar(func::FETCH_SUB, Width::W2, true, &mut e, 1, 0).unwrap();
        assert_eq!(e, [0xff, 0xff]);
        let mut e = 5u32.to_le_bytes();
        apply_scalar(func::MIN, Width::W4, true, &mut e, u64::MAX, 0).unwrap();
        assert_eq!(i32::from_le_bytes(e), -1);
        let mut e = 5u32.to_le_bytes();
        apply_scalar(func::MIN, Width::W4, false, &mut e, u64::MAX, 0).unwrap();
        assert_eq!(u32::from_le_bytes(e), 5);
    }

    #[test]
    fn errors_change_nothing() {
        let mut v = [1u8, 2, 3];
        let mut o = [0u8; 8];
        let f = ElemFn::Builtin(Builtin::FetchAdd);
        assert_eq!(
            update_s2v(f, Width::W2, false, &mut v, 1, 0, &mut o),
            Err(OpError::BadLength)
        );
        let mut v4 = [1u8, 2, 3, 4];
        assert_eq!(
            update_v2v(f, Width::W2, false, &mut v4, &[1, 2], 0, &mut o),
            Err(OpError::BadLength)
        );
        assert_eq!(
            update_s2v(f, Width::W1, false, &mut v4, 1, 0, &mut o[..3]),
            Err(OpError::BufferTooSmall)
        );
        assert_eq!(v, [1, 2, 3]);
        assert_eq!(v4, [1, 2, 3, 4]);
        assert_eq!(
            apply_scalar(10, Width::W1, false, &mut v[..1], 1, 0),
            Err(OpError::UnknownFunction)
        );
        assert_eq!(
            apply_scalar(func::SWAP, Width::W2, false, &mut v, 1, 0),
            Err(OpError::BadLength)
        );
        assert_eq!(v, [1, 2, 3]);
        assert_eq!(
            filter(Predicate::AnyBits, Width::W2, false, u64::MAX, &v, &mut o),
            Err(OpError::BadLength)
        );
        assert_eq!(
            reduce(f, Width::W4, false, &v, 0, 0),
            Err(OpError::BadLength)
        );
    }

    #[test]
    fn empty_vectors_are_fine() {
        let f = ElemFn::Builtin(Builtin::FetchAdd);
        assert_eq!(
            update_s2v(f, Width::W8, false, &mut [], 1, 0, &mut []),
            Ok(0)
        );
        assert_eq!(reduce(f, Width::W8, false, &[], 7, 0), Ok(7));
        assert_eq!(
            filter(Predicate::Ge, Width::W8, false, 0, &[], &mut []),
            Ok(0)
        );
    }
}
