//! 24-bit packet sequence numbers and a per-QP tracker.
//!
//! PSNs live in `0..2^24` and wrap. The signed distance between two PSNs is
//! taken in `-2^23..2^23`: a PSN "behind" the expected one by less than half
//! the space is a duplicate, one "ahead" is a gap.

use crate::ib::MASK_24;

/// Number of distinct PSNs.
pub const PSN_MODULUS: u32 = 1 << 24;

/// `(psn + n) mod 2^24`.
#[inline]
pub const fn add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & MASK_24
}

/// Signed distance `b − a` in `-2^23..2^23`.
#[inline]
pub const fn distance(a: u32, b: u32) -> i32 {
    // Shift the 24-bit difference into the top of an i32 and back.
    ((b.wrapping_sub(a) << 8) as i32) >> 8
}

/// Classification of an incoming PSN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PsnClass {
    /// The PSN the tracker expected.
    Expected,
    /// An already seen (older) PSN.
    Duplicate,
    /// A newer PSN; the payload is the number of missing PSNs (≥ 1).
    Gap(u32),
}

/// Per-QP PSN state of a receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PsnTracker {
    expected: u32,
    synced: bool,
}

impl PsnTracker {
    /// A tracker expecting `start` (masked to 24 bits).
    pub const fn new(start: u32) -> Self {
        PsnTracker {
            expected: start & MASK_24,
            synced: true,
        }
    }
    /// A tracker that adopts the first PSN it sees as expected.
    pub const fn unsynced() -> Self {
        PsnTracker {
            expected: 0,
            synced: false,
        }
    }
    /// The next expected PSN (meaningless before the first packet of an
    /// unsynced tracker).
    #[inline]
    pub const fn expected(&self) -> u32 {
        self.expected
    }
    /// Classifies `psn` without changing the state.
    #[inline]
    pub fn classify(&self, psn: u32) -> PsnClass {
        if !self.synced {
            return PsnClass::Expected;
        }
        match distance(self.expected, psn & MASK_24) {
            0 => PsnClass::Expected,
            d if d < 0 => PsnClass::Duplicate,
            d => PsnClass::Gap(d as u32),
        }
    }
    /// Classifies `psn` and advances: after `Expected` or `Gap` the next
    /// expected PSN is `psn + 1` (the packet is served and the gap counted);
    /// a `Duplicate` leaves the state unchanged.
    #[inline]
    pub fn accept(&mut self, psn: u32) -> PsnClass {
        let c = self.classify(psn);
        if c != PsnClass::Duplicate {
            self.expected = add(psn, 1);
            self.synced = true;
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_wraps() {
        assert_eq!(add(MASK_24, 1), 0);
        assert_eq!(add(MASK_24, 3), 2);
        assert_eq!(distance(MASK_24, 1), 2);
        assert_eq!(distance(1, MASK_24), -2);
        assert_eq!(distance(0, 1 << 23), -(1 << 23));
        assert_eq!(distance(0, (1 << 23) - 1), (1 << 23) - 1);
    }

    #[test]
    fn tracker() {
        let mut t = PsnTracker::new(MASK_24 - 1);
        assert_eq!(t.accept(MASK_24 - 1), PsnClass::Expected);
        assert_eq!(t.accept(MASK_24), PsnClass::Expected);
        assert_eq!(t.accept(0), PsnClass::Expected);
        assert_eq!(t.accept(0), PsnClass::Duplicate);
        assert_eq!(t.accept(MASK_24), PsnClass::Duplicate);
        assert_eq!(t.expected(), 1);
        assert_eq!(t.accept(4), PsnClass::Gap(3));
        assert_eq!(t.accept(5), PsnClass::Expected);
        assert_eq!(t.accept(2), PsnClass::Duplicate);
        let mut u = PsnTracker::unsynced();
        assert_eq!(u.accept(77), PsnClass::Expected);
        assert_eq!(u.accept(78), PsnClass::Expected);
        assert_eq!(u.classify(77), PsnClass::Duplicate);
    }
}
