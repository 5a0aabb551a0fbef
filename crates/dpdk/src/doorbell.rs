//! The doorbell a sleeping consumer loop is woken by when its producers push work
//! (pure Rust, no DPDK call): an eventfd written only while the consumer sleeps.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::idle::ppoll_us;

/// A counter on its own cache line (producers write it; the consumer's flag stays
/// apart).
#[derive(Debug, Default)]
#[repr(align(64))]
struct Padded(AtomicU64);

/// Wakes a sleeping consumer loop when its producers pushed work (see the module
/// docs of [`crate::idle`]). One consumer; any number of producers.
///
/// The protocol, a Dekker handshake with no lost wake-up: a producer, after its push,
/// counts a ring (`rings`, a sequentially consistent add) and then looks at
/// `sleeping`; the consumer notes `rings` ([`Doorbell::mark`]) after each empty poll
/// of its rings and, to sleep, sets `sleeping` (sequentially consistent) and reads
/// `rings` again. A push whose ring came before the mark was visible to the
/// consumer's next look at its rings (the mark acquires it); one whose ring came after
/// either changed `rings` before the consumer's second read (the consumer does not
/// sleep) or comes after `sleeping` was set in the total order, so its producer sees
/// it, clears it (only the first producer writes) and writes the eventfd. Ringing
/// costs a producer one atomic add while the consumer is awake, and one `write(2)` per
/// sleep a push interrupts — never a syscall per record.
#[derive(Debug)]
pub struct Doorbell {
    fd: OwnedFd,
    sleeping: AtomicBool,
    /// Rings so far (one per producer notification).
    rings: Padded,
    /// When the last ring was written (ns on [`mono_ns`]'s clock).
    rung_at: AtomicU64,
    /// Sleeps cut short by a ring.
    pub wakeups: AtomicU64,
    /// Sum of ring-to-wake latencies, ns.
    pub wake_ns_sum: AtomicU64,
    /// Largest ring-to-wake latency, ns.
    pub wake_ns_max: AtomicU64,
}

impl Doorbell {
    /// A doorbell on a fresh eventfd.
    pub fn new() -> std::io::Result<Arc<Doorbell>> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(Arc::new(Doorbell {
            // SAFETY: `fd` was just returned by eventfd and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            sleeping: AtomicBool::new(false),
            rings: Padded::default(),
            rung_at: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            wake_ns_sum: AtomicU64::new(0),
            wake_ns_max: AtomicU64::new(0),
        }))
    }

    /// A producer pushed work: wakes the consumer if it sleeps (or is about to).
    #[inline]
    pub fn ring(&self) {
        self.rings.0.fetch_add(1, Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::AcqRel) {
            self.ring_slow();
        }
    }

    #[inline(never)]
    fn ring_slow(&self) {
        self.rung_at.store(mono_ns(), Ordering::Relaxed);
        let one: u64 = 1;
        // A full counter (EAGAIN) means the consumer is already rung: nothing to do.
        // SAFETY: writes the 8 bytes of `one` (alive across the call) to our eventfd.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                (&one as *const u64).cast(),
                std::mem::size_of::<u64>(),
            );
        }
    }

    /// The consumer's note of the rings so far, taken right after it found its rings
    /// empty; a sleep announced with it is refused if a ring came since.
    #[inline]
    pub fn mark(&self) -> u64 {
        self.rings.0.load(Ordering::Acquire)
    }

    /// The consumer sleeps up to `us` microseconds or until rung: whether it was rung;
    /// `None` without sleeping when a producer rang since `mark` (work may wait).
    pub fn sleep(&self, mark: u64, us: u32) -> Option<bool> {
        if !self.announce(mark) {
            return None;
        }
        let mut pfd = [libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let r = ppoll_us(&mut pfd, us);
        self.woke(r > 0);
        Some(r > 0)
    }

    /// The eventfd a sleep waits on.
    pub(crate) fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// The consumer is about to wait on the eventfd: producers must ring. `false` (and
    /// no sleep announced) when a producer rang since `mark`.
    pub(crate) fn announce(&self, mark: u64) -> bool {
        self.sleeping.store(true, Ordering::SeqCst);
        if self.rings.0.load(Ordering::SeqCst) != mark {
            self.sleeping.store(false, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Whether the consumer has announced a sleep not yet rung (tests).
    #[cfg(test)]
    pub(crate) fn is_sleeping(&self) -> bool {
        self.sleeping.load(Ordering::SeqCst)
    }

    /// The consumer's wait ended, `rung` when the eventfd was readable: resets it and
    /// counts the wake-up.
    pub(crate) fn woke(&self, rung: bool) {
        self.sleeping.store(false, Ordering::Relaxed);
        if rung {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into `v` (the eventfd's counter, which resets it).
            unsafe {
                libc::read(
                    self.fd.as_raw_fd(),
                    (&mut v as *mut u64).cast(),
                    std::mem::size_of::<u64>(),
                );
            }
            let lat = mono_ns().saturating_sub(self.rung_at.load(Ordering::Relaxed));
            self.wakeups.fetch_add(1, Ordering::Relaxed);
            self.wake_ns_sum.fetch_add(lat, Ordering::Relaxed);
            self.wake_ns_max.fetch_max(lat, Ordering::Relaxed);
        }
    }
}

/// Nanoseconds since the first call in this process (a monotonic clock the
/// producers and the consumer of a doorbell share).
fn mono_ns() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

#[cfg(test)]
mod tests {
    use super::Doorbell;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_ring_wakes_a_sleeper_and_a_ring_to_the_awake_writes_nothing() {
        let d = Doorbell::new().unwrap();
        // Awake: a ring writes nothing, so a short sleep is not cut short.
        d.ring();
        assert_eq!(d.sleep(d.mark(), 1), Some(false));
        assert_eq!(d.wakeups.load(Ordering::Relaxed), 0);
        // Asleep for up to an hour: the ring wakes it (the test would hang otherwise).
        let d2 = d.clone();
        let mark = d.mark();
        let sleeper = std::thread::spawn(move || d2.sleep(mark, 3_600_000_000));
        while !d.is_sleeping() {
            std::thread::yield_now();
        }
        d.ring();
        d.ring(); // a second producer: the first already rang
        assert_eq!(sleeper.join().unwrap(), Some(true));
        assert_eq!(d.wakeups.load(Ordering::Relaxed), 1);
        assert!(!d.is_sleeping());
    }

    #[test]
    fn a_ring_after_the_mark_refuses_the_sleep() {
        let d = Doorbell::new().unwrap();
        // The consumer found its rings empty and noted the rings...
        let mark = d.mark();
        // ... a producer pushed and rang before the consumer announced its sleep: the
        // producer saw it awake and wrote nothing, so that sleep would last its whole
        // timeout (2 s here). It is refused instead.
        d.ring();
        assert_eq!(d.sleep(mark, 2_000_000), None);
        assert!(!d.is_sleeping());
        assert_eq!(d.wakeups.load(Ordering::Relaxed), 0);
        // With a fresh mark the next sleep goes ahead.
        assert_eq!(d.sleep(d.mark(), 1), Some(false));
    }

    /// A producer rings at arbitrary moments of a consumer's look-mark-sleep loop: no
    /// sleep runs to its timeout (2 s) — each ends on a ring or is refused.
    #[test]
    fn no_push_waits_for_the_timeout() {
        use std::sync::atomic::AtomicU64;
        use std::sync::Arc;
        let d = Doorbell::new().unwrap();
        let pushed = Arc::new(AtomicU64::new(0));
        let (d2, p2) = (d.clone(), pushed.clone());
        let producer = std::thread::spawn(move || {
            for i in 0..2000u64 {
                if i % 7 == 0 {
                    std::thread::yield_now();
                }
                p2.fetch_add(1, Ordering::Release);
                d2.ring();
            }
        });
        let (mut seen, mut timed_out) = (0, 0);
        let mut mark = d.mark();
        while seen < 2000 {
            let now = pushed.load(Ordering::Acquire);
            if now != seen {
                seen = now;
            } else if d.sleep(mark, 2_000_000) == Some(false) {
                // Found nothing, slept, and no ring ended the sleep: a lost wake-up.
                timed_out += 1;
            }
            mark = d.mark();
        }
        producer.join().unwrap();
        assert_eq!(timed_out, 0);
    }
}
