//! What each read-modify-write op does to a value, written once: UPDATE_S2S,
//! UPDATE_S2V, UPDATE_V2V, REDUCE and FILTER (docs/PROTOCOL.md §3.2). The
//! reservation station (on its cached value, `crate::station`) and the transaction
//! executor (on its copy, `kvtx`) both run an op through [`Rmw`]; they differ only in
//! where the value lives and how it is written back.
//!
//! The checks run in the protocol's order: the function or predicate
//! ([`Rmw::resolve`], before the key is read, so an undefined op neither reads nor
//! changes anything), then the key's existence (the caller's), then the lengths
//! ([`Rmw::apply`]). An error changes nothing.

use crate::functions::{filter, reduce, store_le, update_s2v, update_v2v, ElemFn, Predicate};
use crate::registry::FunctionRegistry;
use kvwire::{op, KvOp, Status, Width};

/// A read-modify-write op with its function or predicate resolved.
#[derive(Clone, Copy, Debug)]
pub struct Rmw<'a> {
    kind: Kind<'a>,
    width: Width,
    signed: bool,
}

#[derive(Clone, Copy, Debug)]
enum Kind<'a> {
    /// One element, `f(x, p, p2)`.
    Scalar { f: ElemFn, p: u64, p2: u64 },
    /// Every element, `f(x, p, p2)`.
    Vector { f: ElemFn, p: u64, p2: u64 },
    /// Element-wise with `delta` (no second parameter on the wire: user functions get 0).
    Delta { f: ElemFn, delta: &'a [u8] },
    /// Σ = f(Σ, x) from `init` (no second parameter: 0).
    Reduce { f: ElemFn, init: u64 },
    /// The elements `pred(x, p)` keeps.
    Filter { pred: Predicate, p: u64 },
}

/// What [`Rmw::apply`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Bytes of the result in `out`.
    pub len: usize,
    /// The value was changed in place (an update; REDUCE and FILTER only read).
    pub wrote: bool,
}

impl<'a> Rmw<'a> {
    /// `op`'s function or predicate resolved in `registry` (the function × opcode
    /// matrix: an undefined cell is `UnknownFunction`); `None` for an op that is not a
    /// read-modify-write (GET, PUT, DELETE).
    pub fn resolve(op: &KvOp<'a>, registry: &FunctionRegistry) -> Option<Result<Rmw<'a>, Status>> {
        let f = |opcode: u8, id: u8| registry.resolve_for(opcode, id).map_err(Status::from);
        let (kind, a) = match *op {
            KvOp::UpdateS2S {
                atomic,
                param,
                param2,
                ..
            } => (
                f(op::UPDATE_S2S, atomic.func).map(|f| Kind::Scalar {
                    f,
                    p: param,
                    p2: param2,
                }),
                atomic,
            ),
            KvOp::UpdateS2V {
                atomic,
                param,
                param2,
                ..
            } => (
                f(op::UPDATE_S2V, atomic.func).map(|f| Kind::Vector {
                    f,
                    p: param,
                    p2: param2,
                }),
                atomic,
            ),
            KvOp::UpdateV2V { atomic, delta, .. } => (
                f(op::UPDATE_V2V, atomic.func).map(|f| Kind::Delta { f, delta }),
                atomic,
            ),
            KvOp::Reduce { atomic, init, .. } => (
                f(op::REDUCE, atomic.func).map(|f| Kind::Reduce { f, init }),
                atomic,
            ),
            KvOp::Filter { atomic, param, .. } => (
                Predicate::from_id(atomic.func)
                    .map(|pred| Kind::Filter { pred, p: param })
                    .map_err(Status::from),
                atomic,
            ),
            KvOp::Get { .. } | KvOp::Put { .. } | KvOp::Delete { .. } => return None,
        };
        Some(kind.map(|kind| Rmw {
            kind,
            width: a.width,
            signed: a.signed,
        }))
    }

    /// Whether it changes the value (an update) rather than only reading it.
    pub fn writes(&self) -> bool {
        matches!(
            self.kind,
            Kind::Scalar { .. } | Kind::Vector { .. } | Kind::Delta { .. }
        )
    }

    /// Runs it on the key's current `value`, changed in place when it
    /// [`writes`](Rmw::writes); the result goes to `out` — the original value for an
    /// update, Σ for REDUCE, the kept elements for FILTER. `out` must hold the value's
    /// length and 8 bytes, else `ValueTooLarge`. On an error (a length the op does not
    /// fit) nothing is changed.
    pub fn apply(&self, value: &mut [u8], out: &mut [u8]) -> Result<Done, Status> {
        let (w, signed) = (self.width, self.signed);
        let updated = |len: usize| Done { len, wrote: true };
        let read = |len: usize| Done { len, wrote: false };
        match self.kind {
            Kind::Scalar { f, p, p2 } => {
                let n = value.len();
                if n != w.bytes() {
                    return Err(Status::BadLength);
                }
                out.get_mut(..n)
                    .ok_or(Status::ValueTooLarge)?
                    .copy_from_slice(value);
                f.apply(w, signed, value, p, p2)?;
                Ok(updated(n))
            }
            Kind::Vector { f, p, p2 } => Ok(updated(update_s2v(f, w, signed, value, p, p2, out)?)),
            Kind::Delta { f, delta } => {
                Ok(updated(update_v2v(f, w, signed, value, delta, 0, out)?))
            }
            Kind::Reduce { f, init } => {
                let sigma = reduce(f, w, signed, value, init, 0)?;
                let dst = out.get_mut(..w.bytes()).ok_or(Status::ValueTooLarge)?;
                store_le(dst, sigma);
                Ok(read(w.bytes()))
            }
            Kind::Filter { pred, p } => Ok(read(filter(pred, w, signed, p, value, out)?)),
        }
    }
}

/// The largest value `op` can leave behind, for sizing its post-image ahead of
/// running it (the replication tap's room); `Some(0)` for a DELETE, `None` for an op
/// that never writes. `max_value_len` bounds what an update of a whole vector, whose
/// current length is not known yet, can leave.
pub const fn post_image_bound(op: &KvOp<'_>, max_value_len: usize) -> Option<usize> {
    match *op {
        KvOp::Put { value, .. } => Some(value.len()),
        KvOp::Delete { .. } => Some(0),
        KvOp::UpdateS2S { atomic, .. } => Some(atomic.width.bytes()),
        KvOp::UpdateV2V { delta, .. } => Some(delta.len()),
        KvOp::UpdateS2V { .. } => Some(max_value_len),
        KvOp::Get { .. } | KvOp::Reduce { .. } | KvOp::Filter { .. } => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::{func, pred, Atomic};

    fn atomic(id: u8, width: Width) -> Atomic {
        Atomic {
            func: id,
            width,
            signed: false,
        }
    }

    #[test]
    fn updates_change_the_value_and_return_the_original() {
        let reg = FunctionRegistry::new();
        let op = KvOp::UpdateS2S {
            key: b"k",
            atomic: atomic(func::FETCH_ADD, Width::W8),
            param: 5,
            param2: 0,
        };
        let rmw = Rmw::resolve(&op, &reg).unwrap().unwrap();
        let mut v = 7u64.to_le_bytes();
        let mut out = [0u8; 16];
        assert_eq!(
            rmw.apply(&mut v, &mut out),
            Ok(Done {
                len: 8,
                wrote: true
            })
        );
        assert_eq!(
            (u64::from_le_bytes(v), &out[..8]),
            (12, &7u64.to_le_bytes()[..])
        );
        // A value that is not one element: BadLength, nothing changed.
        let mut long = [1u8; 9];
        assert_eq!(rmw.apply(&mut long, &mut out), Err(Status::BadLength));
        assert_eq!(long, [1u8; 9]);
    }

    #[test]
    fn reads_leave_the_value_alone() {
        let reg = FunctionRegistry::new();
        let mut v: Vec<u8> = [3u32, 9, 4].iter().flat_map(|x| x.to_le_bytes()).collect();
        let before = v.clone();
        let sum = KvOp::Reduce {
            key: b"k",
            atomic: atomic(func::FETCH_ADD, Width::W4),
            init: 0,
        };
        let mut out = [0u8; 16];
        let rmw = Rmw::resolve(&sum, &reg).unwrap().unwrap();
        assert!(!rmw.writes());
        assert_eq!(
            rmw.apply(&mut v, &mut out),
            Ok(Done {
                len: 4,
                wrote: false
            })
        );
        assert_eq!(&out[..4], &16u32.to_le_bytes());
        let gt = KvOp::Filter {
            key: b"k",
            atomic: atomic(pred::GT, Width::W4),
            param: 3,
        };
        let rmw = Rmw::resolve(&gt, &reg).unwrap().unwrap();
        assert_eq!(
            rmw.apply(&mut v, &mut out),
            Ok(Done {
                len: 8,
                wrote: false
            })
        );
        assert_eq!(&out[..8], &[9, 0, 0, 0, 4, 0, 0, 0]);
        assert_eq!(v, before);
    }

    #[test]
    fn the_function_is_checked_first_and_plain_ops_are_not_rmw() {
        let reg = FunctionRegistry::new();
        let cas_reduce = KvOp::Reduce {
            key: b"k",
            atomic: atomic(func::CAS, Width::W8),
            init: 0,
        };
        assert_eq!(
            Rmw::resolve(&cas_reduce, &reg).map(|r| r.err()),
            Some(Some(Status::UnknownFunction))
        );
        assert!(Rmw::resolve(&KvOp::Get { key: b"k" }, &reg).is_none());
    }

    #[test]
    fn post_images_are_bounded_for_writes_only() {
        for spec in kvwire::OPS {
            let a = atomic(0, Width::W4);
            let op = match spec.code {
                op::GET => KvOp::Get { key: b"k" },
                op::PUT => KvOp::Put {
                    key: b"k",
                    value: b"abc",
                },
                op::DELETE => KvOp::Delete { key: b"k" },
                op::UPDATE_S2S => KvOp::UpdateS2S {
                    key: b"k",
                    atomic: a,
                    param: 1,
                    param2: 0,
                },
                op::UPDATE_S2V => KvOp::UpdateS2V {
                    key: b"k",
                    atomic: a,
                    param: 1,
                    param2: 0,
                },
                op::UPDATE_V2V => KvOp::UpdateV2V {
                    key: b"k",
                    atomic: a,
                    delta: b"12345678",
                },
                op::REDUCE => KvOp::Reduce {
                    key: b"k",
                    atomic: a,
                    init: 0,
                },
                _ => KvOp::Filter {
                    key: b"k",
                    atomic: a,
                    param: 0,
                },
            };
            let bound = post_image_bound(&op, 100);
            assert_eq!(bound.is_some(), spec.writes, "{}", spec.name);
        }
    }
}
