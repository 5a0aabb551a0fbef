//! The retransmission timer every go-back-N sender here shares.

/// A go-back-N sender's retransmission timer, written once for every sender here (the
/// client's request QPs, `kvclient`; the master's replication shipper, `kvrepl`): the
/// current timeout — doubled on each expiry up to a cap, set back to a base (fixed, or
/// the sender's RTT estimate) on progress — and the deadline it is armed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetransmitTimer {
    rto_ns: u64,
    /// `u64::MAX`: not armed.
    deadline_ns: u64,
}

impl RetransmitTimer {
    /// A timer of timeout `rto_ns`, not armed.
    pub const fn new(rto_ns: u64) -> Self {
        RetransmitTimer {
            rto_ns,
            deadline_ns: u64::MAX,
        }
    }

    /// The current timeout.
    #[inline]
    pub const fn rto_ns(&self) -> u64 {
        self.rto_ns
    }

    /// When it fires, if armed.
    #[inline]
    pub const fn deadline_ns(&self) -> Option<u64> {
        if self.deadline_ns == u64::MAX {
            None
        } else {
            Some(self.deadline_ns)
        }
    }

    /// Whether it is armed and `now_ns` is at or past its deadline.
    #[inline]
    pub const fn expired(&self, now_ns: u64) -> bool {
        now_ns >= self.deadline_ns
    }

    /// Fires one timeout after `from_ns` (now, or the end of an RNR hold-off).
    #[inline]
    pub fn arm(&mut self, from_ns: u64) {
        self.deadline_ns = from_ns.saturating_add(self.rto_ns);
    }

    /// Arms it if it is not (the first packet in flight).
    #[inline]
    pub fn arm_if_idle(&mut self, now_ns: u64) {
        if self.deadline_ns == u64::MAX {
            self.arm(now_ns);
        }
    }

    /// Not armed (nothing in flight).
    #[inline]
    pub fn disarm(&mut self) {
        self.deadline_ns = u64::MAX;
    }

    /// After an expiry: the timeout doubles (at most `max_ns`) and the timer is armed
    /// again from `now_ns`.
    #[inline]
    pub fn back_off(&mut self, now_ns: u64, max_ns: u64) {
        self.rto_ns = self.rto_ns.saturating_mul(2).min(max_ns);
        self.arm(now_ns);
    }

    /// Progress (or a new connection): the timeout is `base_ns` again.
    #[inline]
    pub fn reset(&mut self, base_ns: u64) {
        self.rto_ns = base_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backs_off_to_the_cap_and_resets_on_progress() {
        let mut t = RetransmitTimer::new(100);
        assert_eq!(t.deadline_ns(), None);
        assert!(!t.expired(u64::MAX - 1), "not armed: never fires");
        t.arm_if_idle(1_000);
        t.arm_if_idle(1_050);
        assert_eq!(
            t.deadline_ns(),
            Some(1_100),
            "armed by the first packet only"
        );
        assert!(!t.expired(1_099) && t.expired(1_100));
        t.back_off(1_100, 300);
        assert_eq!((t.rto_ns(), t.deadline_ns()), (200, Some(1_300)));
        t.back_off(1_300, 300);
        t.back_off(1_600, 300);
        assert_eq!((t.rto_ns(), t.deadline_ns()), (300, Some(1_900)), "capped");
        t.reset(100);
        t.arm(2_000);
        assert_eq!(t.deadline_ns(), Some(2_100));
        t.disarm();
        assert_eq!(t.deadline_ns(), None);
        t.arm(u64::MAX - 10);
        assert_eq!(t.deadline_ns(), None, "saturates rather than wrapping");
    }
}
