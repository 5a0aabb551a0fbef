//! Sleeping on an rx queue armed around each sleep ([`dpdk::ArmRx`]), against a model
//! of memif's signalling: a sender publishes a packet (its ring index), then writes the
//! ring's eventfd unless the receiver's mask bit is set. No EAL: the queue is modelled.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;

use dpdk::{ArmRx, Armed, IdleBackoff, IdlePolicy};

/// The ring the two ends share.
struct Ring {
    /// The receiver polls (`MEMIF_RING_FLAG_MASK_INT`).
    masked: AtomicBool,
    /// The sender's index: packets published.
    head: AtomicU16,
    /// The receiver's index: packets taken.
    taken: AtomicU16,
    /// The ring's eventfd.
    fd: OwnedFd,
    /// Signals the sender wrote.
    writes: AtomicU64,
}

impl Ring {
    fn new() -> Arc<Ring> {
        // SAFETY: eventfd takes two integers and returns a new descriptor or -1.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        assert!(fd >= 0);
        Arc::new(Ring {
            masked: AtomicBool::new(true),
            head: AtomicU16::new(0),
            taken: AtomicU16::new(0),
            // SAFETY: `fd` was just created and is owned by nothing else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            writes: AtomicU64::new(0),
        })
    }

    /// The sender: publish one packet, signal unless masked.
    fn send(&self) {
        self.head.fetch_add(1, Ordering::SeqCst);
        if !self.masked.load(Ordering::SeqCst) {
            let one = 1u64;
            // SAFETY: writes the 8 bytes of `one` to the ring's eventfd.
            unsafe { libc::write(self.fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
            self.writes.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The receiver's rx burst: takes what was published; whether it found any.
    fn take(&self) -> bool {
        let h = self.head.load(Ordering::Acquire);
        self.taken.swap(h, Ordering::Relaxed) != h
    }
}

/// The receiver's side of the interrupt, as `dpdk::MemifRxIntr` does it.
struct Queue(Arc<Ring>);

impl ArmRx for Queue {
    fn arm(&mut self) -> Armed {
        let mut v = 0u64;
        // SAFETY: reads at most 8 bytes into `v` from the non-blocking eventfd.
        unsafe { libc::read(self.0.fd.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        self.0.masked.store(false, Ordering::SeqCst);
        if self.0.head.load(Ordering::SeqCst) != self.0.taken.load(Ordering::Relaxed) {
            self.disarm();
            return Armed::Pending;
        }
        Armed::Wait(self.0.fd.as_raw_fd())
    }

    fn disarm(&mut self) {
        self.0.masked.store(true, Ordering::SeqCst);
    }
}

/// Sleeps at once, each up to `us`, on `ring`.
fn sleeper(ring: &Arc<Ring>, us: u32) -> IdleBackoff {
    IdleBackoff::with_policy(IdlePolicy::Sleep {
        after: 0,
        quiet_us: 0,
        min_us: us,
        max_us: us,
    })
    .with_armed_rx([Box::new(Queue(ring.clone())) as Box<dyn ArmRx>])
}

#[test]
fn a_packet_published_before_the_arm_stops_the_sleep() {
    let ring = Ring::new();
    let mut b = sleeper(&ring, 30_000_000);
    assert!(b.wakes_on_rx());
    ring.send();
    assert_eq!(b.poll(true), 0, "no sleep: a packet waits");
    assert_eq!((b.sleeps, b.armed_pending), (0, 1));
    assert!(ring.masked.load(Ordering::SeqCst), "disarmed again");
    assert_eq!(
        ring.writes.load(Ordering::Relaxed),
        0,
        "a masked ring is not signalled"
    );
}

#[test]
fn a_packet_during_the_sleep_ends_it_and_an_awake_receiver_costs_no_signal() {
    let ring = Ring::new();
    // Sleeps of 30 s: one counted as a packet's wake-up ended before its timeout.
    let mut b = sleeper(&ring, 30_000_000);
    let r = ring.clone();
    let t = std::thread::spawn(move || {
        while r.masked.load(Ordering::SeqCst) {
            std::thread::yield_now();
        }
        r.send();
    });
    b.poll(true);
    t.join().unwrap();
    assert_eq!((b.sleeps, b.rx_wakeups), (1, 1));
    assert!(
        ring.masked.load(Ordering::SeqCst),
        "disarmed after the sleep"
    );
    assert!(ring.take());
    // Awake: sends are not signalled.
    for _ in 0..100 {
        ring.send();
    }
    assert_eq!(ring.writes.load(Ordering::Relaxed), 1);
}

#[test]
fn every_sleep_ends_on_a_packet_whenever_it_lands() {
    // The receiver loops until it took every packet; the sender publishes at moments
    // spread around the arming. A packet missed would leave a sleep to its timeout
    // (5 s): then a sleep ended without a wake-up and the counts differ.
    const PACKETS: u16 = 2000;
    let ring = Ring::new();
    let mut b = sleeper(&ring, 5_000_000);
    let r = ring.clone();
    let sender = std::thread::spawn(move || {
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..PACKETS {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            for _ in 0..x % 2000 {
                std::hint::spin_loop();
            }
            if x.is_multiple_of(3) {
                std::thread::yield_now();
            }
            r.send();
        }
    });
    while ring.taken.load(Ordering::Relaxed) != PACKETS {
        let found = ring.take();
        b.poll(!found);
    }
    sender.join().unwrap();
    assert_eq!(b.sleeps, b.rx_wakeups, "a sleep ran to its timeout");
    assert!(
        b.sleeps + b.armed_pending > 0,
        "the receiver idled at some point"
    );
}
