//! The sending end of a reliable connection — IBA RC's requester rules, written once
//! for every go-back-N sender here: the client's request QPs (`kvclient`) and the
//! master's replication shipper (`kvrepl`). [`Recovery`] decides *when* and *from
//! which PSN* to send again (an RNR NAK's hold-off, a NAK "PSN sequence error" taken
//! once per PSN, the retransmission timer); the sender walks its own buffer (request
//! frames, stream segments). [`RtoPolicy`] is the timeout after progress: fixed, or
//! from a round-trip estimate.

use super::RetransmitTimer;
use crate::psn;

/// What a sender's recovery asks of it now ([`Recovery::due`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Due {
    /// Nothing to resend: new packets may go (window permitting).
    Nothing,
    /// In an RNR hold-off: send nothing, not even new packets.
    Wait,
    /// Resend everything in flight from this PSN (go-back-N); the timer is armed.
    Resend(u32),
    /// The timer expired with packets in flight: give up, or [`Recovery::back_off`]
    /// and resend from the oldest.
    Timeout,
}

/// A go-back-N sender's recovery state: the retransmission timer, the end of an RNR
/// hold-off, the PSN a resend starts from, and the last NAK taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Recovery {
    timer: RetransmitTimer,
    /// Nothing is sent before this time (an RNR NAK's wait).
    rnr_until: u64,
    /// A resend is due from this PSN (once any hold-off ended).
    resend_from: Option<u32>,
    /// The PSN of the last NAK taken: a duplicate of it is ignored (the receiver NAKs
    /// a gap once, but the network may duplicate the NAK).
    nak_seen: Option<u32>,
}

impl Recovery {
    /// Nothing in flight, timeout `rto_ns`.
    pub const fn new(rto_ns: u64) -> Self {
        Recovery {
            timer: RetransmitTimer::new(rto_ns),
            rnr_until: 0,
            resend_from: None,
            nak_seen: None,
        }
    }

    /// A new connection (or incarnation): timeout `base_ns`, not armed, nothing due.
    pub fn restart(&mut self, base_ns: u64) {
        *self = Recovery::new(base_ns);
    }

    /// The current timeout.
    #[inline]
    pub const fn rto_ns(&self) -> u64 {
        self.timer.rto_ns()
    }

    /// Whether new packets must wait: an RNR hold-off runs or a resend is due (a new
    /// packet would overtake it).
    #[inline]
    pub fn blocks_new(&self, now_ns: u64) -> bool {
        now_ns < self.rnr_until || self.resend_from.is_some()
    }

    /// A new packet went out; `first`: nothing else was in flight, so the timer runs
    /// from now (a deadline left from the last progress would fire early for it).
    #[inline]
    pub fn on_send(&mut self, now_ns: u64, first: bool) {
        if first {
            self.timer.arm(now_ns);
        } else {
            self.timer.arm_if_idle(now_ns);
        }
    }

    /// Progress (a packet acknowledged or answered): the timeout is `base_ns` again,
    /// running from now while packets are in flight (`una` the oldest); a NAK older
    /// than `una` is forgotten.
    #[inline]
    pub fn on_progress(&mut self, una: u32, base_ns: u64, now_ns: u64, in_flight: bool) {
        self.timer.reset(base_ns);
        if in_flight {
            self.timer.arm(now_ns);
        } else {
            self.timer.disarm();
        }
        if self.nak_seen.is_some_and(|n| psn::distance(una, n) < 0) {
            self.nak_seen = None;
        }
    }

    /// An RNR NAK naming `psn` (`una` the oldest in flight): nothing is sent before
    /// `now_ns + wait_ns`, then everything from `psn` again.
    pub fn on_rnr(&mut self, una: u32, psn: u32, wait_ns: u64, now_ns: u64) {
        self.rnr_until = self.rnr_until.max(now_ns.saturating_add(wait_ns));
        self.resend_from(una, psn);
    }

    /// A NAK "PSN sequence error" naming `psn`: everything from it is sent again —
    /// once per PSN. `false`: a duplicate of the NAK last taken (ignored).
    pub fn on_nak(&mut self, una: u32, psn: u32) -> bool {
        if self.nak_seen == Some(psn) {
            return false;
        }
        self.nak_seen = Some(psn);
        self.resend_from(una, psn);
        true
    }

    /// A resend from `psn` is due (a NAK, an RNR NAK, a fast retransmit, a resumed
    /// connection); with one already due, the older start wins.
    pub fn resend_from(&mut self, una: u32, psn: u32) {
        self.resend_from = Some(match self.resend_from {
            Some(x) if psn::distance(una, x) < psn::distance(una, psn) => x,
            _ => psn,
        });
    }

    /// What is due at `now_ns` (`in_flight`: packets await acknowledgement): a
    /// hold-off first, then a pending resend (arming the timer), then the timer.
    #[inline]
    pub fn due(&mut self, now_ns: u64, in_flight: bool) -> Due {
        if now_ns < self.rnr_until {
            return Due::Wait;
        }
        if let Some(from) = self.resend_from.take() {
            self.timer.arm(now_ns);
            return Due::Resend(from);
        }
        if in_flight && self.timer.expired(now_ns) {
            return Due::Timeout;
        }
        Due::Nothing
    }

    /// After a [`Due::Timeout`] not given up: the timeout doubles (at most `max_ns`),
    /// the timer runs again from now, and a NAK of the same PSN counts again (the
    /// resend it asked for may be what was lost).
    pub fn back_off(&mut self, now_ns: u64, max_ns: u64) {
        self.timer.back_off(now_ns, max_ns);
        self.nak_seen = None;
    }

    /// Everything in flight failed or was discarded: nothing is due.
    pub fn clear(&mut self) {
        self.resend_from = None;
        self.nak_seen = None;
    }
}

/// The retransmission timeout a sender starts from after progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtoPolicy {
    /// Always this (the replication shipper: one link, a known path).
    Fixed(u64),
    /// From the round-trip estimate (RFC 6298: `srtt + 4·rttvar`, clamped to
    /// `min_ns..=max_ns`), `initial_ns` before the first sample (the client).
    Adaptive {
        /// Before any sample.
        initial_ns: u64,
        /// The floor.
        min_ns: u64,
        /// The cap.
        max_ns: u64,
        /// Smoothed round trip (0: no sample yet).
        srtt_ns: u64,
        /// Its mean deviation.
        rttvar_ns: u64,
    },
}

impl RtoPolicy {
    /// An adaptive policy without samples.
    pub const fn adaptive(initial_ns: u64, min_ns: u64, max_ns: u64) -> Self {
        RtoPolicy::Adaptive {
            initial_ns,
            min_ns,
            max_ns,
            srtt_ns: 0,
            rttvar_ns: 0,
        }
    }

    /// The timeout after progress.
    #[inline]
    pub fn base_ns(&self) -> u64 {
        match *self {
            RtoPolicy::Fixed(ns) => ns,
            RtoPolicy::Adaptive {
                initial_ns,
                min_ns,
                max_ns,
                srtt_ns,
                rttvar_ns,
            } => {
                if srtt_ns == 0 {
                    initial_ns
                } else {
                    (srtt_ns + 4 * rttvar_ns).clamp(min_ns, max_ns.max(min_ns))
                }
            }
        }
    }

    /// One round-trip sample, of a packet sent once (Karn's rule: the caller skips
    /// resent ones). A fixed policy ignores it.
    #[inline]
    pub fn sample(&mut self, rtt_ns: u64) {
        if let RtoPolicy::Adaptive {
            srtt_ns, rttvar_ns, ..
        } = self
        {
            let rtt = rtt_ns.max(1);
            if *srtt_ns == 0 {
                *srtt_ns = rtt;
                *rttvar_ns = rtt / 2;
            } else {
                let dev = srtt_ns.abs_diff(rtt);
                *rttvar_ns = (3 * *rttvar_ns + dev) / 4;
                *srtt_ns = (7 * *srtt_ns + rtt) / 8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ib::MASK_24;

    #[test]
    fn an_rnr_nak_holds_everything_then_resends_from_its_psn() {
        let mut r = Recovery::new(100);
        r.on_send(0, true);
        r.on_rnr(5, 7, 50, 10);
        assert!(r.blocks_new(59) && r.blocks_new(60), "resend still due");
        assert_eq!(r.due(59, true), Due::Wait);
        assert_eq!(r.due(60, true), Due::Resend(7));
        assert!(!r.blocks_new(60));
        assert_eq!(r.due(159, true), Due::Nothing, "timer armed by the resend");
        assert_eq!(r.due(160, true), Due::Timeout);
        // A second RNR NAK while one runs: the later end, the older PSN.
        r.on_rnr(5, 9, 100, 200);
        r.on_rnr(5, 6, 10, 210);
        assert_eq!(r.due(299, true), Due::Wait);
        assert_eq!(r.due(300, true), Due::Resend(6));
    }

    #[test]
    fn a_nak_is_taken_once_per_psn_until_progress_passes_it_or_the_timer_fires() {
        let mut r = Recovery::new(100);
        assert!(r.on_nak(MASK_24, 1));
        assert!(!r.on_nak(MASK_24, 1), "duplicate NAK");
        assert_eq!(r.due(0, true), Due::Resend(1));
        assert!(!r.on_nak(MASK_24, 1), "still the same gap");
        r.back_off(100, 1_000);
        assert!(r.on_nak(MASK_24, 1), "after a timeout the NAK counts again");
        assert_eq!(r.due(100, true), Due::Resend(1));
        r.on_progress(2, 100, 150, true);
        assert!(r.on_nak(2, 1), "older than una: forgotten");
        // The older of two resend starts wins, across the PSN wrap.
        let mut r = Recovery::new(100);
        r.resend_from(MASK_24 - 1, 1);
        r.resend_from(MASK_24 - 1, MASK_24);
        r.resend_from(MASK_24 - 1, 3);
        assert_eq!(r.due(0, true), Due::Resend(MASK_24));
    }

    #[test]
    fn the_timer_runs_while_in_flight_and_backs_off() {
        let mut r = Recovery::new(100);
        assert_eq!(r.due(1_000, true), Due::Nothing, "never armed");
        r.on_send(0, true);
        r.on_send(50, false);
        assert_eq!(r.due(99, true), Due::Nothing);
        assert_eq!(r.due(100, false), Due::Nothing, "nothing in flight");
        assert_eq!(r.due(100, true), Due::Timeout);
        r.back_off(100, 250);
        assert_eq!(r.rto_ns(), 200);
        assert_eq!(r.due(299, true), Due::Nothing);
        assert_eq!(r.due(300, true), Due::Timeout);
        r.back_off(300, 250);
        assert_eq!(r.rto_ns(), 250, "capped");
        r.on_progress(0, 80, 400, false);
        assert_eq!((r.rto_ns(), r.due(10_000, true)), (80, Due::Nothing));
        // Progress left the timer armed (the answered packet was still counted in
        // flight); the next packet after a quiet spell runs it from its own send.
        r.on_progress(1, 80, 500, true);
        r.on_send(10_000, true);
        assert_eq!(
            r.due(10_079, true),
            Due::Nothing,
            "not from the old deadline"
        );
        assert_eq!(r.due(10_080, true), Due::Timeout);
        r.restart(90);
        assert_eq!(r, Recovery::new(90));
    }

    #[test]
    fn adaptive_rto_follows_the_round_trip_within_its_bounds() {
        let mut p = RtoPolicy::adaptive(1_000, 200, 5_000);
        assert_eq!(p.base_ns(), 1_000, "no sample yet");
        p.sample(100);
        assert_eq!(p.base_ns(), 300, "100 + 4·50");
        for _ in 0..100 {
            p.sample(10);
        }
        assert_eq!(p.base_ns(), 200, "the floor");
        p.sample(100_000);
        assert_eq!(p.base_ns(), 5_000, "the cap");
        let mut f = RtoPolicy::Fixed(2_000);
        f.sample(1);
        assert_eq!(f.base_ns(), 2_000);
    }
}
