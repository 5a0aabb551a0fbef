//! Every built-in function and predicate against the native-type reference, at every
//! width, signed and unsigned, with edge values that overflow and wrap.

mod common;

use common::{bytes, get, ref_apply, ref_pred};
use kvops::functions::{
    apply_scalar, filter, reduce, update_s2v, update_v2v, Builtin, ElemFn, OpError, Predicate,
};
use kvwire::{func, Width};
use proptest::prelude::*;

/// Values biased to the edges of every width.
fn edgy() -> impl Strategy<Value = u64> {
    prop_oneof![
        any::<u64>(),
        prop::sample::select(vec![
            0u64,
            1,
            2,
            0x7f,
            0x80,
            0xff,
            0x100,
            0x7fff,
            0x8000,
            0xffff,
            0x7fff_ffff,
            0x8000_0000,
            0xffff_ffff,
            i64::MAX as u64,
            i64::MIN as u64,
            u64::MAX,
            u64::MAX - 1,
        ]),
    ]
}

fn width() -> impl Strategy<Value = Width> {
    prop::sample::select(Width::ALL.to_vec())
}

fn builtin() -> impl Strategy<Value = Builtin> {
    prop::sample::select(Builtin::ALL.to_vec())
}

fn predicate() -> impl Strategy<Value = Predicate> {
    prop::sample::select(Predicate::ALL.to_vec())
}

/// A vector of `0..6` elements of `w` bytes each, element values edge-biased.
fn vector(w: Width) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(edgy(), 0..6)
        .prop_map(move |es| es.iter().flat_map(|&e| bytes(e, w.bytes())).collect())
}

fn width_and_vector() -> impl Strategy<Value = (Width, Vec<u8>)> {
    width().prop_flat_map(|w| (Just(w), vector(w)))
}

#[test]
fn width_one_exhaustive() {
    for b in Builtin::ALL {
        for signed in [false, true] {
            for old in 0..=255u64 {
                for p in 0..=255u64 {
                    for p2 in [0u64, 0x5a, 0xff] {
                        let mut e = [old as u8];
                        let orig = apply_scalar(b.id(), Width::W1, signed, &mut e, p, p2);
                        assert_eq!(orig, Ok(old));
                        let want = ref_apply(b.id(), 1, signed, old, p, p2);
                        assert_eq!(e[0] as u64, want, "{b:?} signed={signed} {old} {p} {p2}");
                    }
                }
            }
        }
    }
}

#[test]
fn width_one_predicates_exhaustive() {
    for pred in Predicate::ALL {
        for signed in [false, true] {
            for e in 0..=255u64 {
                for p in 0..=255u64 {
                    assert_eq!(
                        pred.test(Width::W1, signed, e, p),
                        ref_pred(pred as u8, 1, signed, e, p),
                        "{pred:?} {signed} {e} {p}"
                    );
                }
            }
        }
    }
}

#[test]
fn overflow_examples() {
    let cases: &[(u8, Width, bool, u64, u64, u64)] = &[
        (func::FETCH_ADD, Width::W2, false, 0xffff, 1, 0),
        (
            func::FETCH_ADD,
            Width::W4,
            true,
            0x7fff_ffff,
            1,
            0x8000_0000,
        ),
        (func::FETCH_ADD, Width::W8, false, u64::MAX, 2, 1),
        (func::FETCH_SUB, Width::W1, false, 0, 1, 0xff),
        (
            func::FETCH_SUB,
            Width::W8,
            true,
            i64::MIN as u64,
            1,
            i64::MAX as u64,
        ),
        (func::MIN, Width::W2, true, 1, 0x8000, 0x8000),
        (func::MIN, Width::W2, false, 1, 0x8000, 1),
        (func::MAX, Width::W4, true, 0xffff_ffff, 0, 0),
        (func::MAX, Width::W4, false, 0xffff_ffff, 0, 0xffff_ffff),
        // Parameters wider than the element are truncated.
        (func::FETCH_ADD, Width::W1, false, 1, 0x1ff, 0),
        (func::CAS, Width::W2, false, 7, 0x1_0007, 9),
    ];
    for &(f, w, signed, old, p, want) in cases {
        let mut e = bytes(old, w.bytes());
        let p2 = if f == func::CAS { 9 } else { 0 };
        assert_eq!(apply_scalar(f, w, signed, &mut e, p, p2), Ok(old));
        assert_eq!(get(&e), want, "{f:?} {w:?} {signed} {old:#x} {p:#x}");
    }
}

proptest! {
    #[test]
    fn scalar_matches_reference(
        b in builtin(), w in width(), signed: bool, old in edgy(), p in edgy(), p2 in edgy(),
    ) {
        let old = old & w.mask();
        let mut e = bytes(old, w.bytes());
        prop_assert_eq!(apply_scalar(b.id(), w, signed, &mut e, p, p2), Ok(old));
        prop_assert_eq!(get(&e), ref_apply(b.id(), w.bytes(), signed, old, p, p2));
    }

    #[test]
    fn predicate_matches_reference(
        pred in predicate(), w in width(), signed: bool, e in edgy(), p in edgy(),
    ) {
        prop_assert_eq!(
            pred.test(w, signed, e & w.mask(), p),
            ref_pred(pred as u8, w.bytes(), signed, e & w.mask(), p)
        );
    }

    #[test]
    fn s2v_matches_reference(
        b in builtin(), (w, v) in width_and_vector(), signed: bool, p in edgy(), p2 in edgy(),
    ) {
        let mut value = v.clone();
        let mut orig = vec![0xa5; v.len() + 3];
        let n = update_s2v(b.into(), w, signed, &mut value, p, p2, &mut orig);
        prop_assert_eq!(n, Ok(v.len()));
        prop_assert_eq!(&orig[..v.len()], &v[..]);
        prop_assert!(orig[v.len()..].iter().all(|&x| x == 0xa5));
        let want: Vec<u8> = v
            .chunks(w.bytes())
            .flat_map(|e| bytes(ref_apply(b.id(), w.bytes(), signed, get(e), p, p2), w.bytes()))
            .collect();
        prop_assert_eq!(value, want);
    }

    #[test]
    fn v2v_matches_reference(
        b in builtin(),
        (w, v, d) in width().prop_flat_map(|w| (Just(w), vector(w)))
            .prop_flat_map(|(w, v)| {
                let n = v.len();
                (Just(w), Just(v), prop::collection::vec(any::<u8>(), n))
            }),
        signed: bool,
        p2 in edgy(),
    ) {
        let mut value = v.clone();
        let mut orig = vec![0; v.len()];
        prop_assert_eq!(update_v2v(b.into(), w, signed, &mut value, &d, p2, &mut orig), Ok(v.len()));
        prop_assert_eq!(&orig, &v);
        let want: Vec<u8> = v
            .chunks(w.bytes())
            .zip(d.chunks(w.bytes()))
            .flat_map(|(e, d)| {
                bytes(ref_apply(b.id(), w.bytes(), signed, get(e), get(d), p2), w.bytes())
            })
            .collect();
        prop_assert_eq!(value, want);
    }

    #[test]
    fn reduce_matches_reference(
        b in builtin(), (w, v) in width_and_vector(), signed: bool, init in edgy(), p2 in edgy(),
    ) {
        let want = v.chunks(w.bytes()).fold(init & w.mask(), |acc, e| {
            ref_apply(b.id(), w.bytes(), signed, acc, get(e), p2)
        });
        prop_assert_eq!(reduce(b.into(), w, signed, &v, init, p2), Ok(want));
    }

    #[test]
    fn filter_matches_reference(
        pred in predicate(), (w, v) in width_and_vector(), signed: bool, p in edgy(),
    ) {
        let mut out = vec![0xa5; v.len()];
        let n = filter(pred, w, signed, p, &v, &mut out).unwrap();
        let want: Vec<u8> = v
            .chunks(w.bytes())
            .filter(|e| ref_pred(pred as u8, w.bytes(), signed, get(e), p))
            .flatten()
            .copied()
            .collect();
        prop_assert_eq!(&out[..n], &want[..]);
    }

    /// A bad length, bad Δ length or short output buffer is refused and changes nothing.
    #[test]
    fn errors_leave_value_unchanged(
        b in builtin(), w in width(), signed: bool,
        v in prop::collection::vec(any::<u8>(), 0..40),
        dlen in 0usize..40, p in edgy(),
    ) {
        let f: ElemFn = b.into();
        let len_ok = v.len() % w.bytes() == 0;
        let mut value = v.clone();
        let mut orig = vec![0; 64];
        let r = update_s2v(f, w, signed, &mut value, p, p, &mut orig);
        prop_assert_eq!(r.is_ok(), len_ok);
        if !len_ok {
            prop_assert_eq!(r, Err(OpError::BadLength));
            prop_assert_eq!(&value, &v);
        }
        let mut value = v.clone();
        let d = vec![1u8; dlen];
        let r = update_v2v(f, w, signed, &mut value, &d, p, &mut orig);
        if !len_ok || dlen != v.len() {
            prop_assert_eq!(r, Err(OpError::BadLength));
            prop_assert_eq!(&value, &v);
        }
        if !v.is_empty() && len_ok {
            let mut value = v.clone();
            let r = update_s2v(f, w, signed, &mut value, p, p, &mut orig[..v.len() - 1]);
            prop_assert_eq!(r, Err(OpError::BufferTooSmall));
            prop_assert_eq!(&value, &v);
        }
        prop_assert_eq!(reduce(f, w, signed, &v, 0, 0).is_ok(), len_ok);
        prop_assert_eq!(filter(Predicate::AnyBits, w, signed, u64::MAX, &v, &mut orig).is_ok(), len_ok);
        let mut value = v.clone();
        let r = apply_scalar(b.id(), w, signed, &mut value, p, p);
        prop_assert_eq!(r.is_ok(), v.len() == w.bytes());
        if r.is_err() {
            prop_assert_eq!(&value, &v);
        }
    }

    #[test]
    fn unknown_ids_change_nothing(id in 9u8..=255, v in prop::collection::vec(any::<u8>(), 1..9)) {
        let mut value = v.clone();
        prop_assert_eq!(
            apply_scalar(id, Width::W1, false, &mut value[..1], 1, 1),
            Err(OpError::UnknownFunction)
        );
        prop_assert_eq!(&value, &v);
        prop_assert_eq!(Predicate::from_id(id), Err(OpError::UnknownFunction));
    }
}

#[test]
fn func_nine_unknown() {
    let mut e = [0u8];
    assert_eq!(
        apply_scalar(9, Width::W1, false, &mut e, 1, 1),
        Err(OpError::UnknownFunction)
    );
    assert_eq!(e, [0]);
}
