//! Rx interrupts for DPDK 22.11's memif PMD, which has none of its own (issue 31).
//!
//! The memif protocol signals each ring through an eventfd the two ends share: a
//! sender, after publishing packets, writes that eventfd unless the receiver set
//! `MEMIF_RING_FLAG_MASK_INT` in the ring's shared header. DPDK's memif PMD masks every
//! ring it receives on at connect ("polling mode") and exposes neither the flag nor the
//! descriptor (no `rx_queue_intr_enable`). This module reaches both through the PMD's
//! queue structure, so an idle lcore can arm its queue around a sleep exactly as
//! interrupt-driven drivers do ([`crate::idle::ArmRx`]):
//!
//! 1. drain the eventfd (stale signals from an earlier sleep);
//! 2. clear the mask bit (a sequentially consistent store: a full barrier);
//! 3. look at the ring's producer index: packets already published → do not sleep;
//! 4. sleep on the eventfd with the loop's timeout; then set the mask bit again, so the
//!    sender pays no `write(2)` while the receiver polls (and the PMD's rx burst no
//!    `read(2)`, which it issues whenever the bit is clear).
//!
//! A sender that published after step 3 sees the bit clear and writes the eventfd —
//! except in one interleaving: DPDK's sender stores its index (release) and then loads
//! the flags with no barrier between, so on x86 its load can pass its own store, see
//! the old mask, and skip the write while the receiver's step 3 still saw the old
//! index. Then the packet waits for the sleep's timeout, as it does with no interrupt
//! at all: never lost, and the sleeps stay bounded ([`crate::IdlePolicy::Sleep`]'s
//! `max_us`) for exactly this reason and for the loop's timers.
//!
//! **What is reached, and how it is checked.** The PMD's private layouts of DPDK
//! 22.11 (`struct memif_queue`, `struct pmd_process_private`, `struct memif_region`,
//! `memif_ring_t`, and where `struct rte_eth_dev` keeps `data` and `process_private`)
//! are written down below as offsets, measured against the 22.11.11 sources. They are
//! used only after [`MemifRxIntr::new`] verified them on the live port: the EAL reports
//! 22.11, the PMD is `net_memif`, `rte_eth_devices[port]`'s data holds the port's own
//! name and the same rx queue array the public fast-path table (`rte_eth_fp_ops`)
//! points to, and the queue names the port and a ring type. Each arm and disarm marks
//! its queue busy as a burst does ([`crate::memif_unmap`]: no region is unmapped under
//! it) and checks again that the link is connected and the ring carries the memif
//! cookie; anything unexpected leaves the loop on timed sleeps. Any other DPDK
//! version: no interrupts (timed sleeps), said in the log.

use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use crate::idle::{ArmRx, Armed};
use crate::memif_unmap::BurstGuard;
use crate::RxQueue;

/// `MEMIF_COOKIE`: the first word of every memif ring.
const MEMIF_COOKIE: u32 = 0x03E3_1F20;
/// `MEMIF_RING_FLAG_MASK_INT`: the receiver polls; senders do not signal.
const MASK_INT: u16 = 1;
/// `memif_ring_type_t`: client-to-server (a server receives on these) and back.
const RING_C2S: u32 = 0;
const RING_S2C: u32 = 1;

/// Offsets in DPDK 22.11's structures (x86-64), see the module docs.
mod layout {
    /// `sizeof(struct rte_eth_dev)` (RTE_MAX_QUEUES_PER_PORT 1024).
    pub const ETH_DEV_SIZE: usize = 16512;
    /// `struct rte_eth_dev`: `data`, `process_private`.
    pub const ETH_DEV_DATA: usize = 48;
    pub const ETH_DEV_PROCESS_PRIVATE: usize = 56;
    /// `struct rte_eth_dev_data`: `name[64]` at 0, `rx_queues`, `dev_private`.
    pub const DEV_DATA_RX_QUEUES: usize = 64;
    pub const DEV_DATA_DEV_PRIVATE: usize = 96;
    pub const DEV_NAME_LEN: usize = 64;
    /// `struct memif_queue`.
    pub const MQ_TYPE: usize = 16;
    pub const MQ_REGION: usize = 20;
    pub const MQ_IN_PORT: usize = 22;
    pub const MQ_RING_OFFSET: usize = 24;
    pub const MQ_LAST_HEAD: usize = 28;
    pub const MQ_LAST_TAIL: usize = 30;
    pub const MQ_INTR_HANDLE: usize = 56;
    pub const MQ_LOG2_RING_SIZE: usize = 64;
    /// `memif_ring_t`: cookie at 0, then `flags`, `head`; `tail` on the next line.
    pub const RING_FLAGS: usize = 4;
    pub const RING_HEAD: usize = 6;
    pub const RING_TAIL: usize = 64;
    /// `struct pmd_process_private`: `regions[256]` at 0; `struct memif_region`: `addr` at 0.
    pub const MAX_REGIONS: usize = 256;
    /// `struct pmd_internals` (the memif device's `dev_private`): `flags`.
    pub const PMD_FLAGS: usize = 8;
    /// `ETH_MEMIF_FLAG_CONNECTED`: cleared first when a connection goes down, before
    /// the regions are unmapped.
    pub const PMD_CONNECTED: u32 = 2;
}

extern "C" {
    /// The ethdev's device table (exported by librte_ethdev for its PMDs).
    static rte_eth_devices: [u8; 0];
}

/// One memif rx queue's interrupt, armed only around a sleep (see the module docs).
/// Lives on the queue's lcore, beside its [`RxQueue`].
#[derive(Debug)]
pub struct MemifRxIntr {
    /// The memif device's `struct pmd_internals` (for its connected flag).
    pmd: *const u8,
    /// Its `struct pmd_process_private` (the mapped regions).
    regions: *const *const u8,
    /// The PMD's `struct memif_queue` (allocated at queue setup, freed at port close).
    mq: *const u8,
    /// The ring whose mask bit this arm cleared (to set it again).
    armed_ring: Option<*const u8>,
    /// The rx queue's busy mark: arming reads the queue's ring as a burst does, so a
    /// departing peer's region is not unmapped meanwhile ([`crate::memif_unmap`]).
    guard: Option<BurstGuard>,
}

// The pointers name PMD memory only the rx queue's lcore uses through this value.
// SAFETY: moving the value moves that sole use; nothing is shared.
unsafe impl Send for MemifRxIntr {}

impl MemifRxIntr {
    /// The rx queue's interrupt when its port is a DPDK 22.11 memif whose structures
    /// match what this module expects; the reason otherwise.
    pub fn new(rxq: &RxQueue) -> Result<Self, String> {
        let (port, queue) = (rxq.port().0, rxq.queue().0);
        if !crate::eal::version().starts_with("DPDK 22.11") {
            return Err(format!(
                "{} (memif interrupts: 22.11 only)",
                crate::eal::version()
            ));
        }
        let p = crate::Port::from_id(rxq.port()).map_err(|e| e.to_string())?;
        let driver = p.driver_name().map_err(|e| e.to_string())?;
        if driver != "net_memif" {
            return Err(format!("{driver} is not memif"));
        }
        let name = p.name().map_err(|e| e.to_string())?;
        // A started port (its RxQueue exists): its fast-path entry holds its rx queues.
        // SAFETY: reads one entry of the public fast-path table; `port` < RTE_MAX_ETHPORTS.
        let fp_rxqs = unsafe { dpdk_sys::rte_eth_fp_ops[usize::from(port)].rxq.data };
        let dev = eth_dev(port);
        // The entry's size and field offsets are checked next, through what it holds.
        // SAFETY: `dev` is inside rte_eth_devices (RTE_MAX_ETHPORTS entries of ETH_DEV_SIZE).
        let data = unsafe { read::<*const u8>(dev, layout::ETH_DEV_DATA) };
        if data.is_null() {
            return Err("no device data".into());
        }
        // SAFETY: a live port's non-null `data` is its rte_eth_dev_data: name[64], rx_queues.
        let (dname, rxqs) = unsafe {
            (
                std::slice::from_raw_parts(data, layout::DEV_NAME_LEN),
                read::<*const *const u8>(data, layout::DEV_DATA_RX_QUEUES),
            )
        };
        let dname = dname.split(|&b| b == 0).next().unwrap_or(&[]);
        if dname != name.as_bytes() || rxqs != fp_rxqs.cast_const().cast() {
            return Err("the device table does not match (not the expected DPDK build)".into());
        }
        // SAFETY: `rxqs` is the port's rx queue array (checked above); `queue` is configured.
        let mq = unsafe { *rxqs.add(usize::from(queue)) };
        if mq.is_null() {
            return Err("queue not set up".into());
        }
        // SAFETY: `mq` is the PMD's struct memif_queue (the driver is memif).
        let (in_port, ty, log2) = unsafe {
            (
                read::<u16>(mq, layout::MQ_IN_PORT),
                read::<u32>(mq, layout::MQ_TYPE),
                read::<u8>(mq, layout::MQ_LOG2_RING_SIZE),
            )
        };
        if in_port != port || !matches!(ty, RING_C2S | RING_S2C) || log2 > 14 {
            return Err("the queue does not match (not the expected DPDK build)".into());
        }
        // SAFETY: `data` and `dev` were verified above; both pointers live with the port.
        let (pmd, regions) = unsafe {
            (
                read::<*const u8>(data, layout::DEV_DATA_DEV_PRIVATE),
                read::<*const *const u8>(dev, layout::ETH_DEV_PROCESS_PRIVATE),
            )
        };
        if pmd.is_null() || regions.is_null() {
            return Err("no device state".into());
        }
        Ok(MemifRxIntr {
            pmd,
            regions,
            mq,
            armed_ring: None,
            guard: rxq.burst_guard(),
        })
    }

    /// The queue's ring, while the port is connected and its region mapped.
    ///
    /// A disconnect (on the EAL interrupt thread) clears the connected flag first, then
    /// closes descriptors, unmaps the regions and clears their pointers; the flag is
    /// read first here, as the PMD's own rx burst does, so the ring is touched only
    /// while it is mapped — short of a disconnect starting within these few loads,
    /// the same window the PMD's rx burst has.
    fn ring(&self) -> Option<*const u8> {
        // The device state and queue were verified in `new` and live while the port does.
        // SAFETY: each pointer is checked non-null before it is followed; layouts as verified.
        unsafe {
            let flags = atomic_u32(self.pmd, layout::PMD_FLAGS).load(Ordering::Acquire);
            let region = usize::from(read::<u16>(self.mq, layout::MQ_REGION));
            if flags & layout::PMD_CONNECTED == 0 || region >= layout::MAX_REGIONS {
                return None;
            }
            // `regions[region]` is NULL until connected and after a disconnect.
            let r = *self.regions.add(region);
            if r.is_null() {
                return None;
            }
            let addr = read::<*const u8>(r, 0);

            if addr.is_null() {
                return None;
            }
            let ring = addr.add(read::<u32>(self.mq, layout::MQ_RING_OFFSET) as usize);
            (read::<u32>(ring, 0) == MEMIF_COOKIE).then_some(ring)
        }
    }

    /// The queue's eventfd (negative while disconnected).
    fn event_fd(&self) -> RawFd {
        // SAFETY: `mq` is the verified memif queue; its intr_handle (set up with the queue) is read by DPDK's accessor.
        unsafe {
            let h = read::<*const dpdk_sys::rte_intr_handle>(self.mq, layout::MQ_INTR_HANDLE);
            if h.is_null() {
                -1
            } else {
                dpdk_sys::rte_intr_fd_get(h)
            }
        }
    }

    /// Whether the ring holds packets the PMD has not taken yet.
    fn pending(&self, ring: *const u8) -> bool {
        // Our last position is written by the rx burst on this same lcore.
        // SAFETY: `ring` is mapped (checked by `ring`); the peer's index is read atomically.
        unsafe {
            let (theirs, ours) = if read::<u32>(self.mq, layout::MQ_TYPE) == RING_C2S {
                (layout::RING_HEAD, layout::MQ_LAST_HEAD)
            } else {
                (layout::RING_TAIL, layout::MQ_LAST_TAIL)
            };
            let published = atomic_u16(ring, theirs).load(Ordering::Acquire);
            published != read::<u16>(self.mq, ours)
        }
    }
}

impl ArmRx for MemifRxIntr {
    fn arm(&mut self) -> Armed {
        let guard = self.guard;
        BurstGuard::during(guard, || self.arm_marked())
    }

    fn disarm(&mut self) {
        let guard = self.guard;
        BurstGuard::during(guard, || self.disarm_marked());
    }
}

impl MemifRxIntr {
    /// [`ArmRx::arm`], its queue marked busy.
    fn arm_marked(&mut self) -> Armed {
        let Some(ring) = self.ring() else {
            return Armed::Unavailable;
        };
        let fd = self.event_fd();
        if fd < 0 {
            return Armed::Unavailable;
        }
        drain(fd);
        // SAFETY: `ring` is mapped (checked just now); `flags` is the receiver's u16 in the shared header.
        unsafe { atomic_u16(ring, layout::RING_FLAGS) }.fetch_and(!MASK_INT, Ordering::SeqCst);
        self.armed_ring = Some(ring);
        if self.pending(ring) {
            self.disarm_marked();
            return Armed::Pending;
        }
        Armed::Wait(fd)
    }

    /// [`ArmRx::disarm`], its queue marked busy.
    fn disarm_marked(&mut self) {
        let Some(armed) = self.armed_ring.take() else {
            return;
        };
        // Set the bit on the ring as it is now: after a reconnect during the sleep the
        // old mapping is gone (the new ring starts masked).
        if self.ring() == Some(armed) {
            // SAFETY: as in `arm`: the mapped ring's receiver-owned flags.
            unsafe { atomic_u16(armed, layout::RING_FLAGS) }.fetch_or(MASK_INT, Ordering::SeqCst);
        }
    }
}

/// Empties an eventfd's counter (non-blocking; nothing to read is fine).
fn drain(fd: RawFd) {
    let mut v = 0u64;
    // SAFETY: reads at most 8 bytes into `v`; memif's eventfds are non-blocking.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) };
}

/// The device table entry of `port`.
fn eth_dev(port: u16) -> *const u8 {
    // SAFETY: only the address is formed (no read); `port` < RTE_MAX_ETHPORTS.
    unsafe {
        std::ptr::addr_of!(rte_eth_devices)
            .cast::<u8>()
            .add(usize::from(port) * layout::ETH_DEV_SIZE)
    }
}

/// Reads a `T` at `base + off`.
///
/// # Safety
/// `base + off` must be readable for a `T` (alignment not required).
unsafe fn read<T: Copy>(base: *const u8, off: usize) -> T {
    // SAFETY: the caller's contract.
    unsafe { base.add(off).cast::<T>().read_unaligned() }
}

/// The u32 at `base + off` as an atomic.
///
/// # Safety
/// `base + off` must be a live, 4-byte aligned u32.
unsafe fn atomic_u32<'a>(base: *const u8, off: usize) -> &'a AtomicU32 {
    // SAFETY: the caller's contract; AtomicU32 has u32's layout.
    unsafe { &*base.add(off).cast::<AtomicU32>() }
}

/// The u16 at `base + off` as an atomic.
///
/// # Safety
/// `base + off` must be a live, 2-byte aligned u16 shared only through atomic access.
unsafe fn atomic_u16<'a>(base: *const u8, off: usize) -> &'a AtomicU16 {
    // SAFETY: the caller's contract; AtomicU16 has u16's layout.
    unsafe { &*base.add(off).cast::<AtomicU16>() }
}
