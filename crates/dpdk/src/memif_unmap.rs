//! A workaround for a crash in DPDK 22.11's memif PMD: a region unmapped under a burst.
//!
//! When a memif peer goes away (a pktgen run ends, a replica restarts), the EAL
//! interrupt thread tears the connection down (`memif_disconnect`): it clears the
//! device's connected flag, closes the rings' eventfds, and `munmap`s the shared
//! regions. The data path checks that flag once at the top of each rx or tx burst and
//! then reads and writes the rings and buffers in those regions, with nothing to keep
//! them mapped meanwhile; a burst that passed the check just before the flag was
//! cleared and is still running (or was preempted, as on a host of two busy cores)
//! when the region goes touches unmapped memory: `segfault … in librte_net_memif.so`,
//! at the ring's index. `scripts/memif_disconnect_repro.sh` (a busy-polling dataplane
//! beside one busy thread, short pktgen runs ending one after another): without this
//! module the dataplane died 5 times in 120 disconnects, with it 0 times in 120 (two
//! rounds of 60 each, alternating). The nemesis met it too (docs/FAILOVER.md, seed
//! 312), and so did a benchmark (docs/OPERATIONS.md, "Idle lcores").
//!
//! The workaround, as a read-copy-update grace period: every burst on a memif queue
//! (through [`crate::RxQueue`] and [`crate::TxQueue`]) marks its queue's slot busy for
//! its duration — an odd count, set with a full barrier before the PMD reads the
//! flag — and this module defines `munmap` for the process (exported by the binary, as
//! `sendmsg` is for [`crate::memif_fix`]): before the system call it waits until every
//! burst that was running has ended. A burst that starts later sees the flag cleared
//! (the teardown cleared it before unmapping, with system calls between, which are full
//! barriers) and returns without touching the region. The wait is the length of one
//! burst (microseconds) and only for `munmap` calls made while some memif burst runs;
//! it never waits on the calling thread's own bursts (a burst never unmaps), and gives
//! up after a second, should a thread be stopped inside one.

use std::sync::atomic::{fence, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use libc::{c_int, c_long, c_void, size_t};

/// Queues that can be guarded (more are left unguarded).
const SLOTS: usize = 1024;

/// Per guarded queue: bursts begun + bursts ended (odd while one runs).
static BURSTS: [AtomicU64; SLOTS] = [const { AtomicU64::new(0) }; SLOTS];
/// Slots handed out so far.
static TAKEN: AtomicUsize = AtomicUsize::new(0);

/// The busy mark of one memif queue's bursts (and of whatever else its lcore reads in
/// the queue's regions: [`crate::MemifRxIntr`]'s arming).
#[derive(Clone, Copy, Debug)]
pub(crate) struct BurstGuard(usize);

impl BurstGuard {
    /// A slot for a new queue handle; `None` once every slot is taken.
    pub(crate) fn new() -> Option<BurstGuard> {
        let i = TAKEN.fetch_add(1, Ordering::AcqRel);
        (i < SLOTS).then_some(BurstGuard(i))
    }

    /// A burst begins: marked busy before the PMD reads its connected flag.
    #[inline]
    pub(crate) fn enter(&self) -> u64 {
        BURSTS[self.0].fetch_add(1, Ordering::SeqCst)
    }

    /// The burst that `enter` returned `begun` for has ended.
    #[inline]
    pub(crate) fn exit(&self, begun: u64) {
        BURSTS[self.0].store(begun + 2, Ordering::Release);
    }

    /// Runs `f` marked busy.
    pub(crate) fn during<T>(guard: Option<BurstGuard>, f: impl FnOnce() -> T) -> T {
        let begun = guard.map(|g| g.enter());
        let out = f();
        if let (Some(g), Some(b)) = (guard, begun) {
            g.exit(b);
        }
        out
    }
}

/// Waits until every memif burst running now has ended (at most a second).
pub fn quiesce() {
    let n = TAKEN.load(Ordering::Acquire).min(SLOTS);
    if n == 0 {
        return;
    }
    fence(Ordering::SeqCst);
    for slot in &BURSTS[..n] {
        let seen = slot.load(Ordering::SeqCst);
        if seen % 2 == 0 {
            continue;
        }
        let start = Instant::now();
        while slot.load(Ordering::Acquire) == seen && start.elapsed() < Duration::from_secs(1) {
            std::thread::yield_now();
        }
    }
}

/// `munmap(2)` for the whole process (see the module documentation): the system call,
/// once no memif burst that may use the memory is running.
///
/// # Safety
///
/// As `munmap(2)`: the caller owns the mapping and nothing uses it afterwards.
#[no_mangle]
// SAFETY: takes the place of libc's `munmap` for the whole process: the same system
// call with the same contract (# Safety above), callers need nothing more.
pub unsafe extern "C" fn munmap(addr: *mut c_void, len: size_t) -> c_int {
    quiesce();
    // SAFETY: the caller's arguments go to the kernel unchanged, as libc's munmap does.
    unsafe { libc::syscall(libc::SYS_munmap, addr, len as c_long) as c_int }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    #[test]
    fn an_unmap_waits_for_a_running_burst_and_not_for_an_ended_one() {
        let g = BurstGuard::new().unwrap();
        let begun = g.enter();
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let waiter = std::thread::spawn(move || {
            quiesce();
            d.load(Ordering::SeqCst)
        });
        std::thread::sleep(Duration::from_millis(50));
        done.store(true, Ordering::SeqCst);
        g.exit(begun);
        assert!(
            waiter.join().unwrap(),
            "quiesce returned while the burst ran"
        );
        // Nothing running: no wait (a test that hung here would fail by its timeout).
        quiesce();
    }

    #[test]
    fn munmap_is_the_system_call() {
        // SAFETY: a fresh anonymous mapping, unmapped once.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: `p` is our mapping of 4096 bytes; nothing uses it afterwards.
        assert_eq!(unsafe { munmap(p, 4096) }, 0);
        let misaligned = std::ptr::dangling_mut::<u8>().wrapping_add(1).cast();
        // SAFETY: a misaligned address: the kernel refuses it, nothing is unmapped.
        let r = unsafe { munmap(misaligned, 4096) };
        assert_eq!(r, -1);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::EINVAL)
        );
    }
}
