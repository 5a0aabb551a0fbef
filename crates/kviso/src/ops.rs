//! Drawing ops of every kind — GET, PUT, DELETE, the three updates with every
//! built-in function and width, REDUCE, FILTER, COMPARE_DELETE — and a transaction's
//! conditions, with values that make most ops meaningful (8- and 16-byte values for
//! the element ops, the key's current value for half the compares).

use kvwire::payload::{CondKind, Condition};
use kvwire::{func, pred, Atomic, KvOpOf, OwnedKvOp, Width};
use rand::Rng;

/// One drawn op.
#[derive(Clone, Debug)]
pub struct Drawn {
    /// The op.
    pub op: OwnedKvOp,
}

/// A transaction condition owning its value.
#[derive(Clone, Debug)]
pub struct OwnedCondition {
    op: u8,
    kind: CondKind,
    value: Vec<u8>,
}

impl OwnedCondition {
    /// The borrowed form.
    pub fn as_condition(&self) -> Condition<'_> {
        Condition {
            op: self.op,
            kind: self.kind,
            value: &self.value,
        }
    }
}

fn value<R: Rng>(rng: &mut R) -> Vec<u8> {
    let len = match rng.gen_range(0..10) {
        0..=5 => 8,
        6..=7 => 16,
        _ => rng.gen_range(1..=40),
    };
    (0..len).map(|_| rng.gen()).collect()
}

fn width<R: Rng>(rng: &mut R) -> Width {
    Width::ALL[rng.gen_range(0..4)]
}

/// An update's function, width and signedness.
fn update<R: Rng>(rng: &mut R) -> Atomic {
    let f = update_fn(rng);
    Atomic {
        func: f,
        width: width(rng),
        signed: rng.gen(),
    }
}

/// An update function id: a built-in one (CAS included), rarely an undefined one.
fn update_fn<R: Rng>(rng: &mut R) -> u8 {
    if rng.gen_range(0..50) == 0 {
        return 100; // reserved: UNKNOWN_FUNCTION
    }
    rng.gen_range(func::FETCH_ADD..=func::XOR)
}

/// Draws an op on `key`, whose value is `current`.
pub fn draw<R: Rng>(rng: &mut R, key: Vec<u8>, current: Option<&[u8]>) -> Drawn {
    let op = match rng.gen_range(0..100) {
        0..=24 => KvOpOf::Get { key },
        25..=49 => KvOpOf::Put {
            key,
            value: value(rng),
        },
        50..=56 => KvOpOf::Delete { key },
        57..=66 => {
            let mut a = update(rng);
            // S2S works on a value of one element: the width of 8-byte values.
            if rng.gen_range(0..3) > 0 {
                a.width = Width::W8;
            }
            KvOpOf::UpdateS2S {
                key,
                atomic: a,
                param: rng.gen(),
                param2: rng.gen(),
            }
        }
        67..=73 => KvOpOf::UpdateS2V {
            key,
            atomic: update(rng),
            param: rng.gen(),
            param2: rng.gen(),
        },
        74..=78 => {
            let len = current.map_or(8, <[u8]>::len);
            KvOpOf::UpdateV2V {
                key,
                atomic: update(rng),
                delta: (0..len).map(|_| rng.gen()).collect(),
            }
        }
        79..=85 => KvOpOf::Reduce {
            key,
            atomic: update(rng),
            init: rng.gen(),
        },
        86..=92 => KvOpOf::Filter {
            key,
            atomic: Atomic {
                func: rng.gen_range(pred::EQ..=pred::ANY_BITS),
                width: width(rng),
                signed: rng.gen(),
            },
            param: rng.gen(),
        },
        _ => KvOpOf::CompareDelete {
            key,
            expected: match current {
                Some(v) if rng.gen() => v.to_vec(),
                _ => value(rng),
            },
        },
    };
    Drawn { op }
}

/// Conditions for a transaction of `drawn` (on some of its GETs): EQUALS the key's
/// value before the transaction (`peek`) or another, or ABSENT.
pub fn conditions<R: Rng>(
    rng: &mut R,
    drawn: &[Drawn],
    peek: impl Fn(&[u8]) -> Option<Vec<u8>>,
) -> Vec<OwnedCondition> {
    let mut out = Vec::new();
    for (i, d) in drawn.iter().enumerate() {
        if !matches!(d.op, KvOpOf::Get { .. }) || rng.gen_range(0..3) > 0 {
            continue;
        }
        let now = peek(d.op.key());
        let (kind, value) = match rng.gen_range(0..4) {
            0 => (CondKind::Absent, Vec::new()),
            1 => (CondKind::Equals, value(rng)),
            _ => match now {
                Some(v) => (CondKind::Equals, v),
                None => (CondKind::Absent, Vec::new()),
            },
        };
        out.push(OwnedCondition {
            op: i as u8,
            kind,
            value,
        });
    }
    out
}
