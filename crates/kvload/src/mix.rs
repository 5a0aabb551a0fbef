//! Operation types and the operation mix.

use crate::rng::RandomSource;

/// The kinds of operation a client issues.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpType {
    /// Read a key.
    Get,
    /// Insert or replace a key.
    Put,
    /// Remove a key.
    Delete,
    /// UPDATE_S2S fetch-add of 1 to the value as one unsigned 8-byte element; returns
    /// the original.
    Atomic,
    /// UPDATE_S2V fetch-add of 1 to every 8-byte element of the value; returns the
    /// original vector.
    Vector,
    /// REDUCE: the wrapping sum of the value's 8-byte elements.
    Reduce,
}

impl OpType {
    /// Whether the op changes the stored value.
    #[inline]
    pub fn writes(self) -> bool {
        !matches!(self, OpType::Get | OpType::Reduce)
    }
}

/// The operation mix, as cumulative thresholds over [0, 1).
#[derive(Clone, Copy, Debug)]
pub struct Mix {
    /// (cumulative share × 2^53, op), DELETE is the rest: a draw compares the 53 random
    /// bits of [`RandomSource::next_f64`] as an integer, with no conversion to floating
    /// point.
    cuts: [(u64, OpType); 5],
    /// The cumulative share of all ops but DELETE.
    non_delete: f64,
}

/// 2^53: the resolution of a draw.
const DRAW_ONE: f64 = (1u64 << 53) as f64;

impl Mix {
    /// A mix with the given GET, PUT, atomic, vector-update and reduce shares; the rest
    /// are DELETEs.
    pub fn new(get: f64, put: f64, atomic: f64, vector: f64, reduce: f64) -> Result<Mix, String> {
        let shares = [get, put, atomic, vector, reduce];
        let sum: f64 = shares.iter().sum();
        if shares.iter().any(|s| !(0.0..=1.0).contains(s)) || sum > 1.0 + 1e-9 {
            return Err(format!(
                "bad mix: get {get} put {put} atomic {atomic} vector {vector} reduce {reduce} \
                 must each be in [0, 1] and sum to at most 1"
            ));
        }
        let ops = [
            OpType::Get,
            OpType::Put,
            OpType::Atomic,
            OpType::Vector,
            OpType::Reduce,
        ];
        let mut cuts = [(0, OpType::Get); 5];
        let mut acc = 0.0;
        for (c, (s, op)) in cuts.iter_mut().zip(shares.iter().zip(ops)) {
            acc += s;
            // u / 2^53 < acc  <=>  u < acc * 2^53 for the integer u of a draw.
            *c = ((acc * DRAW_ONE).ceil().min(DRAW_ONE) as u64, op);
        }
        Ok(Mix {
            cuts,
            non_delete: acc,
        })
    }

    /// The DELETE share.
    pub fn delete_share(&self) -> f64 {
        (1.0 - self.non_delete).max(0.0)
    }

    /// Draws an operation type (one [`RandomSource::next_u64`]).
    #[inline]
    pub fn next<R: RandomSource>(&self, rng: &mut R) -> OpType {
        let u = rng.next_u64() >> 11;
        for &(cut, op) in &self.cuts {
            if u < cut {
                return op;
            }
        }
        OpType::Delete
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Xorshift64Star;

    #[test]
    fn bad_mixes_are_rejected() {
        assert!(Mix::new(0.9, 0.2, 0.0, 0.0, 0.0).is_err());
        assert!(Mix::new(0.5, 0.2, 0.2, 0.1, 0.1).is_err());
        assert!(Mix::new(-0.1, 0.0, 0.0, 0.0, 0.0).is_err());
        assert!(Mix::new(f64::NAN, 0.0, 0.0, 0.0, 0.0).is_err());
    }

    #[test]
    fn shares_are_followed() {
        let m = Mix::new(0.5, 0.5, 0.0, 0.0, 0.0).unwrap();
        let mut rng = Xorshift64Star::new(3);
        assert!((0..100).all(|_| m.next(&mut rng) != OpType::Delete));
        let m = Mix::new(0.0, 0.0, 1.0, 0.0, 0.0).unwrap();
        let mut rng = Xorshift64Star::new(1);
        assert!((0..100).all(|_| m.next(&mut rng) == OpType::Atomic));
        assert_eq!(m.delete_share(), 0.0);
        let m = Mix::new(0.0, 0.0, 0.0, 0.0, 0.0).unwrap();
        assert!((0..100).all(|_| m.next(&mut rng) == OpType::Delete));
        assert_eq!(m.delete_share(), 1.0);
        let m = Mix::new(0.25, 0.25, 0.25, 0.0, 0.0).unwrap();
        let dels = (0..100_000)
            .filter(|_| m.next(&mut rng) == OpType::Delete)
            .count();
        assert!((23_500..26_500).contains(&dels), "{dels}");
        assert!((m.delete_share() - 0.25).abs() < 1e-12);
    }

    #[test]
    fn mix_golden() {
        let m = Mix::new(0.5, 0.3, 0.1, 0.05, 0.0).unwrap();
        let mut r = Xorshift64Star::new(5);
        let got: Vec<OpType> = (0..12).map(|_| m.next(&mut r)).collect();
        use OpType::*;
        assert_eq!(
            got,
            [Atomic, Get, Put, Put, Get, Get, Put, Get, Get, Get, Put, Put]
        );
    }

    #[test]
    fn writes() {
        assert!(!OpType::Get.writes() && !OpType::Reduce.writes());
        assert!(OpType::Put.writes() && OpType::Delete.writes());
        assert!(OpType::Atomic.writes() && OpType::Vector.writes());
    }
}
