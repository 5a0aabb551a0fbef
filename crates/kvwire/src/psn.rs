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

/// Where an arriving PSN stands for a go-back-N receiver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// The PSN expected next: served (then [`Receiver::accept`]).
    Expected,
    /// Behind the expected PSN, within the window: already served (answered again or
    /// acknowledged).
    Duplicate,
    /// Ahead of the expected PSN, within the window: something before it was lost
    /// (NAK "PSN sequence error" naming the expected PSN, once: [`Receiver::nak_due`]).
    Ahead,
    /// Outside the window both ways: an old duplicate or a stale packet of an earlier
    /// incarnation (whose PSNs lie 2^23 away); dropped unanswered.
    Stale,
}

/// The receiving end of a reliable connection — IBA RC's responder rules, written
/// once for every receiver here: the server's client QPs (requests,
/// docs/PROTOCOL.md §6.3) and a replica's replication QP (segments, §2.6a). It takes
/// PSNs in order only; a PSN ahead of the expected one is answered with one NAK (or
/// RNR NAK) until the expected PSN arrives, not one per packet of the go-back-N
/// burst that follows a loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receiver {
    /// The expected PSN (24 bits) and, in bit 31, whether its gap was NAKed: one word,
    /// as a server keeps one per client QP (thousands, in its connection table).
    word: u32,
}

/// [`Receiver`]'s "NAK sent" bit.
const NAKED: u32 = 1 << 31;

impl Receiver {
    /// A receiver expecting `start` (masked to 24 bits).
    pub const fn new(start: u32) -> Self {
        Receiver {
            word: start & MASK_24,
        }
    }

    /// The next expected PSN.
    #[inline]
    pub const fn expected(&self) -> u32 {
        self.word & MASK_24
    }

    /// The last PSN taken (what a coalesced ACK names).
    #[inline]
    pub const fn last(&self) -> u32 {
        add(self.expected(), MASK_24)
    }

    /// Where `psn` stands; `window` bounds how far behind or ahead a PSN still
    /// belongs to this connection (a client's credits; [`HALF`] for the whole space).
    #[inline]
    pub fn arrival(&self, psn: u32, window: u32) -> Arrival {
        let d = distance(self.expected(), psn & MASK_24);
        let w = window.min(HALF) as i64;
        match d {
            0 => Arrival::Expected,
            d if !(-w..w).contains(&i64::from(d)) => Arrival::Stale,
            d if d < 0 => Arrival::Duplicate,
            _ => Arrival::Ahead,
        }
    }

    /// The expected PSN was taken: the next one is expected, and a later gap may be
    /// NAKed again.
    #[inline]
    pub fn accept(&mut self) {
        self.word = add(self.expected(), 1);
    }

    /// Starts over at `psn` (a new incarnation, a resumed connection, a replay that
    /// stood for the expected request).
    #[inline]
    pub fn restart(&mut self, psn: u32) {
        self.word = psn & MASK_24;
    }

    /// Whether a NAK or RNR NAK for the expected PSN is due: none was sent since it
    /// became expected.
    #[inline]
    pub const fn nak_due(&self) -> bool {
        self.word & NAKED == 0
    }

    /// A NAK or RNR NAK for the expected PSN went out.
    #[inline]
    pub fn naked(&mut self) {
        self.word |= NAKED;
    }
}

/// Half the PSN space: the window of a receiver that bounds nothing, and how far a new
/// incarnation's PSNs start from the old ones.
pub const HALF: u32 = 1 << 23;

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
    fn receiver_takes_psns_in_order_and_naks_a_gap_once() {
        let mut r = Receiver::new(MASK_24);
        assert_eq!(r.arrival(MASK_24, 8), Arrival::Expected);
        r.accept();
        assert_eq!((r.expected(), r.last()), (0, MASK_24));
        assert_eq!(r.arrival(MASK_24, 8), Arrival::Duplicate, "across the wrap");
        assert_eq!(r.arrival(7, 8), Arrival::Ahead);
        assert_eq!(r.arrival(8, 8), Arrival::Stale, "beyond the window");
        assert_eq!(r.arrival(add(0, MASK_24 - 8), 8), Arrival::Stale);
        assert_eq!(r.arrival(HALF - 1, HALF), Arrival::Ahead, "no bound");
        assert_eq!(r.arrival(HALF, HALF), Arrival::Duplicate);
        assert!(r.nak_due());
        r.naked();
        assert!(!r.nak_due(), "one NAK per gap");
        r.accept();
        assert!(r.nak_due(), "the next gap is NAKed again");
        r.naked();
        r.restart(add(1, HALF));
        assert_eq!((r.expected(), r.nak_due()), (add(1, HALF), true));
    }
}
