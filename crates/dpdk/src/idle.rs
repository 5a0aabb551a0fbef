//! What a poll-mode loop does while it has nothing to do (pure Rust, no DPDK call).
//!
//! Three policies ([`IdlePolicy`]):
//! * `Poll`: keep polling (a dedicated core; the lowest latency, a whole core always);
//! * `Yield`: after `after` empty polls in a row, `sched_yield` on every further
//!   empty poll, so a thread sharing the core runs instead of waiting out a
//!   scheduler slice; on a dedicated core it returns at once (a syscall per idle
//!   poll, a whole core still);
//! * `Sleep`: once the loop found nothing for `after` polls in a row *and* for
//!   `quiet_us` microseconds (so a loaded loop's short gaps between bursts never
//!   sleep; until then it yields as `Yield` does), sleep (`nanosleep`, the thread's timer slack set to 1 µs) for a time
//!   that starts at `min_us` and doubles on each further empty poll up to `max_us`;
//!   any work resets it. An idle loop then costs a wake-up per `max_us`, and the
//!   first packet after a quiet spell waits at most `max_us` (plus the kernel's
//!   timer slack). Work never sleeps: a loop that found work does not idle, and
//!   the loop's own timers (tx drain, probes, retransmission) are late by at most
//!   one sleep. DPDK's PMD power management `pause` mode and VPP's adaptive mode
//!   are the same idea; Rx interrupts (where a port has them) are the next step.
//!
//! A loop fed by another lcore through a ring (a replication lcore fed by the workers'
//! log rings, a replica's worker fed by its replication lcore) can sleep on a
//! [`Doorbell`] instead: an eventfd its producers ring when they pushed something while
//! it slept, so it wakes at once instead of at the end of its sleep, and no ring is
//! lost between the loop's last look at its rings and its sleep (the loop notes the
//! rings at each empty poll; a ring since refuses the sleep). Ringing costs the
//! producer one atomic add per notification while the consumer is awake, and one
//! `write(2)` per sleep that a push interrupts — never a syscall per record.
//!
//! A loop whose port gives Rx interrupts ([`crate::RxQueue::intr_fd`]: net_tap) also
//! wakes on its rx queue's descriptor ([`IdleBackoff::with_rx_fds`]): readable exactly
//! while packets wait, so a packet that arrives at any moment of the sleep, or just
//! before it, ends it at once — none waits for the timeout, none is missed.
//!
//! A loop whose port signals only when asked ([`ArmRx`]: memif, through
//! [`crate::MemifRxIntr`]) arms each such queue right before a sleep — the queue says
//! whether packets already wait (then the loop does not sleep) or which descriptor to
//! wait on — and disarms it right after, so senders signal only while it sleeps.

use std::os::fd::RawFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use crate::doorbell::Doorbell;

/// A poll loop's idle policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IdlePolicy {
    /// Never give the CPU away.
    Poll,
    /// `sched_yield` on every empty poll after `after` in a row.
    Yield {
        /// Empty polls in a row before the first yield.
        after: u32,
    },
    /// Sleep on empty polls after `after` in a row spanning `quiet_us`, `min_us`
    /// doubling to `max_us`.
    Sleep {
        /// Empty polls in a row before the first sleep.
        after: u32,
        /// Microseconds without work before the first sleep.
        quiet_us: u32,
        /// First sleep, microseconds (at least 1).
        min_us: u32,
        /// Longest sleep, microseconds.
        max_us: u32,
    },
}

/// What arming an rx queue's interrupt found ([`ArmRx::arm`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Armed {
    /// Armed: the descriptor to wait on, readable once a packet is signalled.
    Wait(RawFd),
    /// Packets already wait: do not sleep (the queue is disarmed again).
    Pending,
    /// No interrupt now (link down, peer gone): a timed sleep for this queue.
    Unavailable,
}

/// An rx queue whose interrupt is armed only around a sleep: senders signal while it
/// is armed, and never otherwise (memif's mask bit, a NIC's interrupt enable).
pub trait ArmRx: Send {
    /// Asks for a signal on the next packet, then looks for packets already waiting
    /// (so a packet landing as the queue is armed is seen by one or the other).
    fn arm(&mut self) -> Armed;
    /// Stops signalling (after the sleep, or when another queue was [`Armed::Pending`]).
    fn disarm(&mut self);
}

/// The idle policy applied to one loop, with what it did.
pub struct IdleBackoff {
    policy: IdlePolicy,
    empty: u32,
    next_us: u32,
    /// When the current run of empty polls reached `after` (policy `Sleep`).
    quiet_since: Option<Instant>,
    /// Sleeps taken (policy `Sleep`).
    pub sleeps: u64,
    /// Microseconds asked to sleep in total (the kernel may add its timer slack).
    pub slept_us: u64,
    /// Where sleeps wait to be rung (`None`: a plain timed sleep).
    doorbell: Option<Arc<Doorbell>>,
    /// Rx queue interrupt descriptors a sleep also wakes on.
    rx_fds: Vec<RawFd>,
    /// Rx queues armed around each sleep; their descriptors fill the last slots of
    /// `pfds` at each sleep.
    armed_rx: Vec<Box<dyn ArmRx>>,
    /// What a sleep polls: the doorbell's eventfd (if any) first, then `rx_fds`, then
    /// one slot per `armed_rx`. Empty: a plain timed sleep.
    pfds: Vec<libc::pollfd>,
    /// Sleeps skipped because work turned up as they were about to start: an armed
    /// queue found packets waiting, or a producer rang the doorbell since the last
    /// empty poll.
    pub armed_pending: u64,
    /// Sleeps ended by a packet (an rx descriptor readable).
    pub rx_wakeups: u64,
    /// The longest sleep while every rx queue can wake it ([`Self::with_rx_sleep_max`]).
    rx_max_us: Option<u32>,
    /// The doorbell's rings as of the last empty poll ([`Doorbell::mark`]).
    bell_mark: u64,
}

impl IdleBackoff {
    /// Policy `Yield { after }` (0: never yields, i.e. `Poll`).
    pub fn new(after: u32) -> Self {
        Self::with_policy(if after == 0 {
            IdlePolicy::Poll
        } else {
            IdlePolicy::Yield { after }
        })
    }

    /// A loop following `policy`.
    pub fn with_policy(policy: IdlePolicy) -> Self {
        let next_us = match policy {
            IdlePolicy::Sleep { min_us, .. } => {
                fine_timer_slack();
                min_us.max(1)
            }
            _ => 0,
        };
        IdleBackoff {
            policy,
            empty: 0,
            next_us,
            quiet_since: None,
            sleeps: 0,
            slept_us: 0,
            doorbell: None,
            rx_fds: Vec::new(),
            armed_rx: Vec::new(),
            pfds: Vec::new(),
            armed_pending: 0,
            rx_wakeups: 0,
            rx_max_us: None,
            bell_mark: 0,
        }
    }

    /// Sleeps back off up to `max_us` (instead of the policy's longest sleep) while
    /// every rx queue of the loop can end them — its descriptor is waited on, or it is
    /// armed (or down: nothing arrives) — and nothing else is waited for (no
    /// [`Doorbell`]), so their timeout is only a safety net: for a loop with no timer
    /// of its own shorter than `max_us` (a worker; not the replication lcore, whose
    /// retransmission timers must fire on time). A loop fed by other lcores keeps the
    /// policy's cap: on a sync master + replica the longer sleeps saved nothing at rest
    /// (0.13 of a core either way) and the sparse sync PUT's p50 was about 30 µs
    /// higher in an A/B (docs/OPERATIONS.md, "Idle lcores").
    pub fn with_rx_sleep_max(mut self, max_us: u32) -> Self {
        self.rx_max_us = Some(max_us);
        self
    }

    /// Sleeps on `bell` (rung by the loop's producers) instead of a plain timed sleep.
    pub fn with_doorbell(mut self, bell: Option<Arc<Doorbell>>) -> Self {
        self.doorbell = bell;
        self.rebuild_pfds();
        self
    }

    /// Sleeps also end when one of `fds` (rx queue interrupt descriptors, readable
    /// while packets wait: [`crate::RxQueue::intr_fd`]) is readable.
    pub fn with_rx_fds(mut self, fds: impl IntoIterator<Item = RawFd>) -> Self {
        self.rx_fds.extend(fds);
        self.rebuild_pfds();
        self
    }

    /// Sleeps also end on a packet at one of `queues`, armed around each sleep.
    pub fn with_armed_rx(mut self, queues: impl IntoIterator<Item = Box<dyn ArmRx>>) -> Self {
        self.armed_rx.extend(queues);
        self.rebuild_pfds();
        self
    }

    /// Whether a sleep wakes on rx descriptors.
    pub fn wakes_on_rx(&self) -> bool {
        !self.rx_fds.is_empty() || !self.armed_rx.is_empty()
    }

    fn rebuild_pfds(&mut self) {
        let pollin = |fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        self.pfds = self
            .doorbell
            .iter()
            .map(|d| pollin(d.fd()))
            .chain(self.rx_fds.iter().map(|&fd| pollin(fd)))
            .chain(self.armed_rx.iter().map(|_| pollin(-1)))
            .collect();
    }

    /// The policy.
    pub fn policy(&self) -> IdlePolicy {
        self.policy
    }

    /// Records one poll; gives the CPU away as the policy says when it was empty and
    /// the loop has idled long enough. Returns the microseconds it asked to sleep
    /// (0: it did not sleep; a yield counts 0).
    #[inline]
    pub fn poll(&mut self, empty: bool) -> u32 {
        let after = match self.policy {
            IdlePolicy::Poll => return 0,
            IdlePolicy::Yield { after } | IdlePolicy::Sleep { after, .. } => after,
        };
        if !empty {
            self.empty = 0;
            if let IdlePolicy::Sleep { min_us, .. } = self.policy {
                self.next_us = min_us.max(1);
                self.quiet_since = None;
            }
            return 0;
        }
        let slept = self.poll_empty(after);
        // What a sleep of a later empty poll is checked against: rings after this note
        // refuse it (their pushes may not have been seen by the loop's next look).
        if let Some(d) = &self.doorbell {
            self.bell_mark = d.mark();
        }
        slept
    }

    /// An empty poll: counted, then a yield or a sleep as the policy says.
    #[inline]
    fn poll_empty(&mut self, after: u32) -> u32 {
        if self.empty < after {
            self.empty += 1;
            return 0;
        }
        match self.policy {
            IdlePolicy::Sleep {
                quiet_us, max_us, ..
            } => {
                let since = *self.quiet_since.get_or_insert_with(Instant::now);
                if since.elapsed() < Duration::from_micros(u64::from(quiet_us)) {
                    // Not idle long enough to sleep: yield as `Yield` does, so a thread
                    // sharing the core (a client, another lcore) runs now rather than
                    // after a scheduler slice of spinning.
                    std::thread::yield_now();
                    return 0;
                }
                self.sleep(max_us)
            }
            _ => {
                std::thread::yield_now();
                0
            }
        }
    }

    /// [`Self::poll`] for a loop waiting on another lcore (e.g. for replicas to
    /// acknowledge a held response): it yields instead of sleeping, so the answer is
    /// seen as soon as it comes.
    #[inline]
    pub fn poll_waiting(&mut self) {
        let after = match self.policy {
            IdlePolicy::Poll => return,
            IdlePolicy::Yield { after } | IdlePolicy::Sleep { after, .. } => after,
        };
        if self.empty < after {
            self.empty += 1;
        } else {
            std::thread::yield_now();
        }
        if let Some(d) = &self.doorbell {
            self.bell_mark = d.mark();
        }
    }

    #[inline(never)]
    fn sleep(&mut self, max_us: u32) -> u32 {
        if !self.arm_rx() {
            self.armed_pending += 1;
            return 0;
        }
        if !self
            .doorbell
            .as_ref()
            .is_none_or(|d| d.announce(self.bell_mark))
        {
            // Rung since the last empty poll: the push may not have been seen.
            self.disarm_rx();
            self.armed_pending += 1;
            return 0;
        }
        let max_us = match self.rx_max_us {
            Some(rx_max) if self.rx_all_armed() => rx_max.max(max_us),
            _ => max_us,
        };
        let us = self.next_us.min(max_us.max(1));
        if self.pfds.iter().all(|p| p.fd < 0) {
            // Nothing to wait on (no doorbell, no queue armed): a plain timed sleep.
            std::thread::sleep(Duration::from_micros(u64::from(us)));
        } else {
            self.sleep_polling(us);
        }
        self.disarm_rx();
        self.sleeps += 1;
        self.slept_us += u64::from(us);
        self.next_us = us.saturating_mul(2).min(max_us.max(1));
        us
    }
}

impl IdleBackoff {
    /// Arms every [`ArmRx`] queue, its descriptor into its `pfds` slot; `false` (all
    /// disarmed again) when one has packets waiting.
    fn arm_rx(&mut self) -> bool {
        let first = self.pfds.len() - self.armed_rx.len();
        for i in 0..self.armed_rx.len() {
            self.pfds[first + i].fd = match self.armed_rx[i].arm() {
                Armed::Wait(fd) => fd,
                Armed::Unavailable => -1,
                Armed::Pending => {
                    for q in &mut self.armed_rx[..i] {
                        q.disarm();
                    }
                    return false;
                }
            };
        }
        true
    }

    /// Whether only a packet is waited for, and any packet that can arrive ends the
    /// sleep being taken: the loop has rx queues and no doorbell, and no interrupt
    /// descriptor was dropped after an error. An armed queue is either waited on or
    /// [`Armed::Unavailable`] — a memif link without its peer, where nothing arrives
    /// before the peer's connection (the first packet after it may wait out this one
    /// sleep).
    fn rx_all_armed(&self) -> bool {
        self.doorbell.is_none()
            && self.wakes_on_rx()
            && self.pfds[..self.rx_fds.len()].iter().all(|p| p.fd >= 0)
    }

    fn disarm_rx(&mut self) {
        for q in &mut self.armed_rx {
            q.disarm();
        }
    }

    /// Sleeps up to `us` or until the doorbell rings or an rx descriptor is readable.
    fn sleep_polling(&mut self, us: u32) {
        let bell = self.doorbell.as_deref();
        for p in &mut self.pfds {
            p.revents = 0;
        }
        let r = ppoll_us(&mut self.pfds, us);
        if let Some(d) = bell {
            d.woke(r > 0 && self.pfds[0].revents != 0);
        }
        if r <= 0 {
            return;
        }
        let rx = usize::from(bell.is_some());
        let mut packet = false;
        for p in &mut self.pfds[rx..] {
            if p.revents & libc::POLLIN != 0 {
                packet = true;
            } else if p.revents != 0 {
                // A descriptor gone bad (error, hang-up) would end every sleep at
                // once: poll ignores a negative fd, so the loop falls back to timed
                // sleeps for it.
                p.fd = -1;
            }
        }
        self.rx_wakeups += u64::from(packet);
    }
}

/// `ppoll` on `fds` for up to `us` microseconds: the number of ready descriptors,
/// 0 on timeout, negative on error (EINTR: a signal, as a timeout).
pub(crate) fn ppoll_us(fds: &mut [libc::pollfd], us: u32) -> i32 {
    let ts = libc::timespec {
        tv_sec: libc::time_t::from(us / 1_000_000),
        tv_nsec: libc::c_long::from(us % 1_000_000) * 1000,
    };
    // SAFETY: `fds` (of `fds.len()` pollfds) and `ts` outlive the call; no sigmask.
    unsafe {
        libc::ppoll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            &ts,
            std::ptr::null(),
        )
    }
}

/// Sets the calling thread's timer slack to 1 µs: a short sleep then lasts about
/// what it asks (the default slack, 50 µs, would make every sleep at least that).
fn fine_timer_slack() {
    // Only this thread's timer slack changes; PR_SET_TIMERSLACK passes no memory.
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_TIMERSLACK, n) takes an integer and touches no memory.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

#[cfg(test)]
mod tests {
    use super::{ArmRx, Armed, Doorbell, IdleBackoff, IdlePolicy};
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn a_backoff_sleeps_on_its_doorbell() {
        let d = Doorbell::new().unwrap();
        let mut b = IdleBackoff::with_policy(IdlePolicy::Sleep {
            after: 0,
            quiet_us: 0,
            min_us: 1,
            max_us: 2,
        })
        .with_doorbell(Some(d.clone()));
        assert_eq!(b.poll(true), 1);
        assert_eq!(b.poll(true), 2);
        assert_eq!(b.sleeps, 2);
    }

    #[test]
    fn a_ring_after_the_last_empty_poll_refuses_the_sleep() {
        let d = Doorbell::new().unwrap();
        let mut b = IdleBackoff::with_policy(IdlePolicy::Sleep {
            after: 1,
            quiet_us: 0,
            min_us: 2_000_000,
            max_us: 2_000_000,
        })
        .with_doorbell(Some(d.clone()));
        assert_eq!(
            b.poll(true),
            0,
            "the first empty poll only counts (and notes the rings)"
        );
        // A producer pushes and rings after the loop's look at its rings, before the
        // sleep is announced: it sees the loop awake and writes nothing. The sleep (2 s
        // to its timeout) is refused, so the loop looks again at once.
        d.ring();
        assert_eq!(b.poll(true), 0);
        assert_eq!((b.sleeps, b.armed_pending), (0, 1));
        assert_eq!(d.wakeups.load(Ordering::Relaxed), 0);
    }

    /// A pipe standing for an rx queue's interrupt descriptor (readable while bytes,
    /// i.e. packets, wait): (read end, write end).
    fn rx_pipe() -> (std::fs::File, std::fs::File) {
        let mut fds = [0; 2];
        // SAFETY: pipe writes two new descriptors into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // SAFETY: both descriptors were just created and are owned by nothing else.
        unsafe {
            (
                std::fs::File::from_raw_fd(fds[0]),
                std::fs::File::from_raw_fd(fds[1]),
            )
        }
    }

    /// A backoff that sleeps at once, each sleep `us` long, waking on `rx`.
    fn sleeper_on(rx: &std::fs::File, us: u32, bell: Option<Arc<Doorbell>>) -> IdleBackoff {
        IdleBackoff::with_policy(IdlePolicy::Sleep {
            after: 0,
            quiet_us: 0,
            min_us: us,
            max_us: us,
        })
        .with_doorbell(bell)
        .with_rx_fds([rx.as_raw_fd()])
    }

    #[test]
    fn a_packet_waiting_before_or_arriving_during_a_sleep_ends_it() {
        use std::io::Write;
        let (r, mut w) = rx_pipe();
        // Sleeps of 30 s: a wake-up counted as a packet's came before the timeout.
        let mut b = sleeper_on(&r, 30_000_000, Doorbell::new().ok());
        assert!(b.wakes_on_rx());
        // Waiting before the sleep (the race of a packet landing after the last empty
        // poll): the sleep ends at once.
        w.write_all(b"p").unwrap();
        b.poll(true);
        assert_eq!(b.rx_wakeups, 1);
        // Still unread (the PMD has not taken it): every sleep ends at once.
        b.poll(true);
        assert_eq!(b.rx_wakeups, 2);
        let (r, mut w) = rx_pipe();
        let mut b = sleeper_on(&r, 30_000_000, None);
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            w.write_all(b"p").unwrap();
            w
        });
        b.poll(true);
        let _w = t.join().unwrap();
        assert_eq!((b.rx_wakeups, b.sleeps), (1, 1));
    }

    #[test]
    fn a_doorbell_still_rings_beside_rx_descriptors_and_a_dead_one_is_dropped() {
        let (r, w) = rx_pipe();
        let d = Doorbell::new().unwrap();
        let mut b = sleeper_on(&r, 30_000_000, Some(d.clone()));
        let d2 = d.clone();
        let t = std::thread::spawn(move || {
            while !d2.is_sleeping() {
                std::thread::yield_now();
            }
            d2.ring();
        });
        b.poll(true);
        t.join().unwrap();
        assert_eq!(d.wakeups.load(Ordering::Relaxed), 1);
        assert_eq!(b.rx_wakeups, 0, "rung, not a packet");
        // The write end closed: POLLHUP. The descriptor leaves the set instead of
        // ending every sleep at once.
        drop(w);
        let mut b = sleeper_on(&r, 1, None);
        b.poll(true);
        assert_eq!((b.rx_wakeups, b.pfds[0].fd), (0, -1));
        b.poll(true);
        assert_eq!(b.sleeps, 2);
    }

    #[test]
    fn yields_only_after_enough_empty_polls_in_a_row() {
        let mut b = IdleBackoff::new(3);
        for _ in 0..3 {
            assert_eq!(b.poll(true), 0);
        }
        assert_eq!(b.empty, 3, "the fourth empty poll in a row yields");
        assert_eq!(b.poll(true), 0, "a yield sleeps 0 us");
        assert_eq!(b.poll(false), 0);
        assert_eq!(b.empty, 0, "work resets the count");
        assert_eq!(b.policy(), IdlePolicy::Yield { after: 3 });
        assert_eq!(b.sleeps, 0);
    }

    #[test]
    fn zero_is_poll() {
        let mut b = IdleBackoff::new(0);
        assert_eq!(b.policy(), IdlePolicy::Poll);
        assert!((0..1000).all(|_| b.poll(true) == 0));
        assert_eq!(b.sleeps, 0);
    }

    #[test]
    fn sleeps_double_to_the_cap_and_work_resets_them() {
        let mut b = IdleBackoff::with_policy(IdlePolicy::Sleep {
            after: 2,
            quiet_us: 0,
            min_us: 1,
            max_us: 5,
        });
        let got: Vec<u32> = (0..7).map(|_| b.poll(true)).collect();
        assert_eq!(got, [0, 0, 1, 2, 4, 5, 5]);
        assert_eq!((b.sleeps, b.slept_us), (5, 17));
        assert_eq!(b.poll(false), 0, "work never sleeps");
        let got: Vec<u32> = (0..4).map(|_| b.poll(true)).collect();
        assert_eq!(got, [0, 0, 1, 2], "and starts the back-off again");
        b.poll_waiting();
        assert_eq!(b.sleeps, 7, "waiting on another lcore yields, never sleeps");
    }

    #[test]
    fn sleeps_a_packet_can_end_back_off_further() {
        let policy = IdlePolicy::Sleep {
            after: 0,
            quiet_us: 0,
            min_us: 1,
            max_us: 4,
        };
        // Every rx queue wakes the sleep: up to the rx cap.
        let (r, _w) = rx_pipe();
        let mut b = IdleBackoff::with_policy(policy)
            .with_rx_fds([r.as_raw_fd()])
            .with_rx_sleep_max(16);
        let got: Vec<u32> = (0..7).map(|_| b.poll(true)).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 16, 16]);
        // A queue that cannot wake it (a descriptor gone bad): the policy's cap again.
        b.pfds[0].fd = -1;
        assert_eq!(b.poll(true), 4);
        // An armed queue whose link is down (nothing can arrive): the rx cap too.
        struct Down;
        impl ArmRx for Down {
            fn arm(&mut self) -> Armed {
                Armed::Unavailable
            }
            fn disarm(&mut self) {}
        }
        let mut b = IdleBackoff::with_policy(policy)
            .with_armed_rx([Box::new(Down) as Box<dyn ArmRx>])
            .with_rx_sleep_max(16);
        let got: Vec<u32> = (0..6).map(|_| b.poll(true)).collect();
        assert_eq!(got, [1, 2, 4, 8, 16, 16]);
        // No rx queue at all: the policy's cap.
        let mut b = IdleBackoff::with_policy(policy).with_rx_sleep_max(16);
        let got: Vec<u32> = (0..5).map(|_| b.poll(true)).collect();
        assert_eq!(got, [1, 2, 4, 4, 4]);
        // A doorbell beside the queue: the policy's cap.
        let mut b = IdleBackoff::with_policy(policy)
            .with_doorbell(Doorbell::new().ok())
            .with_rx_fds([r.as_raw_fd()])
            .with_rx_sleep_max(16);
        let got: Vec<u32> = (0..5).map(|_| b.poll(true)).collect();
        assert_eq!(got, [1, 2, 4, 4, 4]);
    }

    #[test]
    fn no_sleep_before_the_quiet_time() {
        // A quiet time no test run reaches: empty polls never sleep.
        let mut b = IdleBackoff::with_policy(IdlePolicy::Sleep {
            after: 1,
            quiet_us: u32::MAX,
            min_us: 1,
            max_us: 5,
        });
        assert!((0..10_000).all(|_| b.poll(true) == 0));
        assert_eq!(b.sleeps, 0);
        // Once the quiet time has passed (here: none), the next empty poll sleeps.
        b.policy = IdlePolicy::Sleep {
            after: 1,
            quiet_us: 0,
            min_us: 1,
            max_us: 5,
        };
        assert_eq!(b.poll(true), 1);
        assert_eq!(b.poll(false), 0, "work resets the quiet time too");
        assert!(b.quiet_since.is_none());
    }
}
