//! What each read-modify-write op does to a value, written once: UPDATE_S2S,
//! UPDATE_S2V, UPDATE_V2V, REDUCE, FILTER and COMPARE_DELETE (docs/PROTOCOL.md
//! §3.2). The
//! reservation station (on its cached value, `crate::station`) and the transaction
//! executor (on its copy, `kvtx`) both run an op through [`run`]; they differ only in
//! where the value lives and how it is written back.
//!
//! The checks run in the protocol's order: the function or predicate (before the key
//! is read, so an undefined op neither reads nor changes anything), then the key's
//! existence (the caller's loader), then the lengths. An error changes nothing.

use crate::functions::{filter, reduce, store_le, update_s2v, update_v2v, Predicate};
use crate::registry::FunctionRegistry;
use kvwire::{op, KvOp, Status};

/// What [`run`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Done {
    /// Bytes of the result in `out`.
    pub len: usize,
    /// The value was changed in place (an update; REDUCE and FILTER only read).
    pub wrote: bool,
    /// The key is to be deleted (a COMPARE_DELETE whose value matched); the caller
    /// deletes it.
    pub deletes: bool,
}

/// Whether `op` is a read-modify-write op that changes the value (an update) rather
/// than only reading it (REDUCE, FILTER); `false` for GET, PUT, DELETE.
#[inline]
pub const fn updates(op: &KvOp<'_>) -> bool {
    matches!(
        op,
        KvOp::UpdateS2S { .. } | KvOp::UpdateS2V { .. } | KvOp::UpdateV2V { .. }
    )
}

/// Runs the read-modify-write `op`: resolves its function or predicate in `registry`
/// (the function × opcode matrix: an undefined cell is `UnknownFunction`, and nothing
/// is read), then asks `value` for the key's current value — with whether it will be
/// changed ([`updates`]); `Err(NotFound)` there for a missing key — and runs the op on
/// it, in place for an update. The result goes to `out`: the original value for an
/// update, Σ for REDUCE, the kept elements for FILTER; `out` must hold the value's
/// length and 8 bytes, else `ValueTooLarge`. On an error (a length the op does not fit)
/// nothing is changed. COMPARE_DELETE answers the value the key held and, when it
/// equals the op's value, says [`Done::deletes`]. GET, PUT and DELETE are not
/// read-modify-write: `Internal`.
#[inline]
pub fn run<'v>(
    op: &KvOp<'_>,
    registry: &FunctionRegistry,
    value: impl FnOnce(bool) -> Result<&'v mut [u8], Status>,
    out: &mut [u8],
) -> Result<Done, Status> {
    let f = |opcode: u8, id: u8| registry.resolve_for(opcode, id).map_err(Status::from);
    let updated = |len: usize| Done {
        len,
        wrote: true,
        deletes: false,
    };
    let read = |len: usize| Done {
        len,
        wrote: false,
        deletes: false,
    };
    match *op {
        KvOp::UpdateS2S {
            atomic: a,
            param,
            param2,
            ..
        } => {
            let f = f(op::UPDATE_S2S, a.func)?;
            let value = value(true)?;
            let n = value.len();
            if n != a.width.bytes() {
                return Err(Status::BadLength);
            }
            out.get_mut(..n)
                .ok_or(Status::ValueTooLarge)?
                .copy_from_slice(value);
            f.apply(a.width, a.signed, value, param, param2)?;
            Ok(updated(n))
        }
        KvOp::UpdateS2V {
            atomic: a,
            param,
            param2,
            ..
        } => {
            let f = f(op::UPDATE_S2V, a.func)?;
            let v = value(true)?;
            Ok(updated(update_s2v(
                f, a.width, a.signed, v, param, param2, out,
            )?))
        }
        KvOp::UpdateV2V {
            atomic: a, delta, ..
        } => {
            let f = f(op::UPDATE_V2V, a.func)?;
            // No second parameter on the wire: user functions get 0.
            let v = value(true)?;
            Ok(updated(update_v2v(f, a.width, a.signed, v, delta, 0, out)?))
        }
        KvOp::Reduce {
            atomic: a, init, ..
        } => {
            let f = f(op::REDUCE, a.func)?;
            let v = value(false)?;
            let sigma = reduce(f, a.width, a.signed, v, init, 0)?;
            let dst = out
                .get_mut(..a.width.bytes())
                .ok_or(Status::ValueTooLarge)?;
            store_le(dst, sigma);
            Ok(read(a.width.bytes()))
        }
        KvOp::Filter {
            atomic: a, param, ..
        } => {
            let p = Predicate::from_id(a.func)?;
            let v = value(false)?;
            Ok(read(filter(p, a.width, a.signed, param, v, out)?))
        }
        KvOp::CompareDelete { expected, .. } => {
            let v = value(false)?;
            out.get_mut(..v.len())
                .ok_or(Status::ValueTooLarge)?
                .copy_from_slice(v);
            Ok(Done {
                deletes: v == expected,
                ..read(v.len())
            })
        }
        KvOp::Get { .. } | KvOp::Put { .. } | KvOp::Delete { .. } => Err(Status::Internal),
    }
}

/// The largest value `op` can leave behind, for sizing its post-image ahead of
/// running it (the replication tap's room); `Some(0)` for a DELETE, `None` for an op
/// that never writes. `max_value_len` bounds what an update of a whole vector, whose
/// current length is not known yet, can leave.
pub const fn post_image_bound(op: &KvOp<'_>, max_value_len: usize) -> Option<usize> {
    match *op {
        KvOp::Put { value, .. } => Some(value.len()),
        KvOp::Delete { .. } | KvOp::CompareDelete { .. } => Some(0),
        KvOp::UpdateS2S { atomic, .. } => Some(atomic.width.bytes()),
        KvOp::UpdateV2V { delta, .. } => Some(delta.len()),
        KvOp::UpdateS2V { .. } => Some(max_value_len),
        KvOp::Get { .. } | KvOp::Reduce { .. } | KvOp::Filter { .. } => None,
    }
}

/// Redacts, in place, the result `value` (status `status`) of `op` for a client that
/// may not read values (`kvwire::tenant::redacts`): what is left says only the op's
/// outcome, which the client learns from any answer, and no byte of the stored value.
/// Returns the redacted length (never more than `value.len()`).
///
/// * COMPARE_DELETE: the value when it deleted (it equals the op's expected value, so
///   it tells nothing new); else an empty value — or one zero byte when the expected
///   value is empty — so it differs from the expected value as the stored one did.
/// * CAS (UPDATE_S2S/S2V with function CAS): each element stays `p1` where it was
///   `p1` (the swap happened), and becomes `!p1` where it was not.
/// * Every other update: an empty value. Errors carry no value either way.
pub fn redact(op: &KvOp<'_>, status: Status, value: &mut [u8]) -> usize {
    if status != Status::Ok {
        return 0;
    }
    match *op {
        KvOp::CompareDelete { expected, .. } => {
            if value == expected {
                value.len()
            } else if expected.is_empty() && !value.is_empty() {
                value[0] = 0;
                1
            } else {
                0
            }
        }
        KvOp::UpdateS2S { atomic, param, .. } | KvOp::UpdateS2V { atomic, param, .. }
            if atomic.func == kvwire::func::CAS =>
        {
            let w = atomic.width.bytes();
            let p1 = param & atomic.width.mask();
            let not_p1 = !param & atomic.width.mask();
            let whole = value.len() - value.len() % w;
            for e in value[..whole].chunks_exact_mut(w) {
                if crate::functions::load_le(e) != p1 {
                    store_le(e, not_p1);
                }
            }
            whole
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::{func, pred, Atomic, Width};

    fn atomic(id: u8, width: Width) -> Atomic {
        Atomic {
            func: id,
            width,
            signed: false,
        }
    }

    fn on<'v>(v: &'v mut [u8]) -> impl FnOnce(bool) -> Result<&'v mut [u8], Status> {
        move |_| Ok(v)
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
        assert!(updates(&op));
        let mut v = 7u64.to_le_bytes();
        let mut out = [0u8; 16];
        let done = run(&op, &reg, on(&mut v), &mut out);
        assert_eq!(
            done,
            Ok(Done {
                len: 8,
                wrote: true,
                deletes: false,
            })
        );
        assert_eq!(
            (u64::from_le_bytes(v), &out[..8]),
            (12, &7u64.to_le_bytes()[..])
        );
        // A value that is not one element: BadLength, nothing changed.
        let mut long = [1u8; 9];
        assert_eq!(
            run(&op, &reg, on(&mut long), &mut out),
            Err(Status::BadLength)
        );
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
        assert!(!updates(&sum));
        let done = run(&sum, &reg, on(&mut v), &mut out);
        assert_eq!(
            done,
            Ok(Done {
                len: 4,
                wrote: false,
                deletes: false,
            })
        );
        assert_eq!(&out[..4], &16u32.to_le_bytes());
        let gt = KvOp::Filter {
            key: b"k",
            atomic: atomic(pred::GT, Width::W4),
            param: 3,
        };
        let done = run(&gt, &reg, on(&mut v), &mut out);
        assert_eq!(
            done,
            Ok(Done {
                len: 8,
                wrote: false,
                deletes: false,
            })
        );
        assert_eq!(&out[..8], &[9, 0, 0, 0, 4, 0, 0, 0]);
        assert_eq!(v, before);
    }

    #[test]
    fn compare_delete_deletes_only_its_value_and_answers_what_was_there() {
        let reg = FunctionRegistry::new();
        let cad = KvOp::CompareDelete {
            key: b"lock",
            expected: b"owner-1",
        };
        assert!(!updates(&cad));
        let mut out = [0u8; 16];
        let mut held = *b"owner-1";
        let done = run(&cad, &reg, on(&mut held), &mut out);
        assert_eq!(
            done,
            Ok(Done {
                len: 7,
                wrote: false,
                deletes: true,
            })
        );
        assert_eq!(&out[..7], b"owner-1");
        // Another owner's value (even one that starts the same) stays.
        let mut other = *b"owner-12";
        let done = run(&cad, &reg, on(&mut other), &mut out);
        assert_eq!(
            done,
            Ok(Done {
                len: 8,
                wrote: false,
                deletes: false,
            })
        );
        assert_eq!((&out[..8], &other), (&b"owner-12"[..], b"owner-12"));
        let missing = |_| -> Result<&mut [u8], Status> { Err(Status::NotFound) };
        assert_eq!(run(&cad, &reg, missing, &mut out), Err(Status::NotFound));
        // A value the result cannot hold: ValueTooLarge, nothing deleted.
        let mut big = [7u8; 32];
        assert_eq!(
            run(&cad, &reg, on(&mut big), &mut out),
            Err(Status::ValueTooLarge)
        );
    }

    #[test]
    fn the_function_is_checked_before_the_key_is_read() {
        let reg = FunctionRegistry::new();
        let cas_reduce = KvOp::Reduce {
            key: b"k",
            atomic: atomic(func::CAS, Width::W8),
            init: 0,
        };
        let mut out = [0u8; 8];
        let unread = |_| -> Result<&mut [u8], Status> { panic!("the key was read") };
        assert_eq!(
            run(&cas_reduce, &reg, unread, &mut out),
            Err(Status::UnknownFunction)
        );
        let missing = |_| -> Result<&mut [u8], Status> { Err(Status::NotFound) };
        let add = KvOp::Reduce {
            key: b"k",
            atomic: atomic(func::FETCH_ADD, Width::W8),
            init: 0,
        };
        assert_eq!(run(&add, &reg, missing, &mut out), Err(Status::NotFound));
        let get = KvOp::Get { key: b"k" };
        assert_eq!(run(&get, &reg, unread, &mut out), Err(Status::Internal));
    }

    #[test]
    fn post_images_are_bounded_for_writes_only() {
        for spec in kvwire::OPS {
            let a = atomic(0, Width::W4);
            let op = KvOp::from_parts(spec.code, b"k", b"12345678", a, 1, 0).unwrap();
            let bound = post_image_bound(&op, 100);
            assert_eq!(bound.is_some(), spec.writes, "{}", spec.name);
            assert_eq!(updates(&op), spec.writes && spec.atomic, "{}", spec.name);
        }
    }

    #[test]
    fn redaction_leaves_the_outcome_and_no_stored_byte() {
        let cad = KvOp::CompareDelete {
            key: b"k",
            expected: b"mine",
        };
        let mut held = *b"mine";
        assert_eq!(
            redact(&cad, Status::Ok, &mut held),
            4,
            "deleted: the expected value"
        );
        let mut other = *b"theirs";
        assert_eq!(redact(&cad, Status::Ok, &mut other), 0, "kept: nothing");
        let empty = KvOp::CompareDelete {
            key: b"k",
            expected: b"",
        };
        let mut other = *b"secret";
        assert_eq!(redact(&empty, Status::Ok, &mut other), 1);
        assert_eq!(other[0], 0);
        let cas = KvOp::UpdateS2V {
            key: b"k",
            atomic: atomic(func::CAS, Width::W2),
            param: 7,
            param2: 9,
        };
        let mut v: Vec<u8> = [7u16, 1234, 7]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(redact(&cas, Status::Ok, &mut v), 6);
        let elems: Vec<u16> = v
            .chunks(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect();
        assert_eq!(
            elems,
            vec![7, !7u16, 7],
            "the swap's outcome per element, not 1234"
        );
        let add = KvOp::UpdateS2S {
            key: b"k",
            atomic: atomic(func::FETCH_ADD, Width::W8),
            param: 1,
            param2: 0,
        };
        let mut orig = 41u64.to_le_bytes();
        assert_eq!(redact(&add, Status::Ok, &mut orig), 0);
        let mut hint = [1u8; 20];
        assert_eq!(redact(&cad, Status::NotMaster, &mut hint), 0);
    }
}
