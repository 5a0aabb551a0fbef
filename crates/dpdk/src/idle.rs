//! Idle backoff for poll-mode loops (pure Rust, no DPDK call).

/// Gives the CPU away while a poll loop has nothing to do.
///
/// A poll-mode loop that shares its core with another busy thread (here: pktgen on a
/// 2-core host, or two workers on one core) would otherwise keep the core for a whole
/// scheduler slice (milliseconds) while the other thread holds the work it waits for.
/// After `after` empty polls in a row every further empty poll calls `sched_yield`:
/// on a dedicated core it returns at once (no other runnable thread), so it costs a
/// syscall per idle poll and never touches a busy loop. DPDK's own answer to the same
/// problem is its PMD power management (pause or sleep on empty polls).
pub struct IdleBackoff {
    after: u32,
    empty: u32,
}

impl IdleBackoff {
    /// Yields after `after` consecutive empty polls (0: never yields).
    pub fn new(after: u32) -> Self {
        IdleBackoff { after, empty: 0 }
    }

    /// Records one poll; yields when it was empty and the loop has idled long enough.
    /// Returns whether it yielded.
    #[inline]
    pub fn poll(&mut self, empty: bool) -> bool {
        if !empty || self.after == 0 {
            self.empty = 0;
            return false;
        }
        if self.empty < self.after {
            self.empty += 1;
            return false;
        }
        std::thread::yield_now();
        true
    }
}

#[cfg(test)]
mod tests {
    use super::IdleBackoff;

    #[test]
    fn yields_only_after_enough_empty_polls_in_a_row() {
        let mut b = IdleBackoff::new(3);
        assert!(!b.poll(true));
        assert!(!b.poll(true));
        assert!(!b.poll(true));
        assert!(b.poll(true), "fourth empty poll in a row yields");
        assert!(b.poll(true), "and every one after it");
        assert!(!b.poll(false), "work resets the count");
        assert!(!b.poll(true));
    }

    #[test]
    fn zero_never_yields() {
        let mut b = IdleBackoff::new(0);
        assert!((0..1000).all(|_| !b.poll(true)));
    }
}
