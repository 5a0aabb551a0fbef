//! Packet-buffer pools.

use std::ffi::CStr;
use std::ptr::NonNull;

use crate::error::{cstring, Result, ToResult};
use crate::SocketId;

/// A handle to a DPDK mempool of packet buffers.
///
/// Pools are never freed: they live until the process exits (DPDK apps create them
/// once at start-up). That makes the handle `Copy` and guarantees that no [`crate::Mbuf`]
/// outlives its pool.
#[derive(Clone, Copy, Debug)]
pub struct Mempool {
    raw: NonNull<dpdk_sys::rte_mempool>,
}

// SAFETY: DPDK mempools are thread-safe (ring_mp_mc ops, per-lcore caches keyed by the
// calling lcore, non-EAL threads bypass the cache); the handle itself is a pointer to a
// never-freed object.
unsafe impl Send for Mempool {}
// SAFETY: see `Send`; all methods take `&self` and are thread-safe in DPDK.
unsafe impl Sync for Mempool {}

impl Mempool {
    /// `rte_pktmbuf_pool_create(name, n, cache, 0, data_room, socket)`.
    ///
    /// `data_room` includes the headroom: use `2048 + 128` (DPDK's
    /// `RTE_MBUF_DEFAULT_BUF_SIZE`) for standard frames. `n` is best a power of two
    /// minus one; `cache` ≤ 512 (and ≤ n / 1.5). Name must be unique per process group.
    pub fn create_pktmbuf(
        name: &str,
        n: u32,
        cache: u32,
        data_room: u16,
        socket: SocketId,
    ) -> Result<Mempool> {
        const OP: &str = "rte_pktmbuf_pool_create";
        crate::eal::ensure(OP)?;
        let cname = cstring(OP, name)?;
        // SAFETY: EAL is initialised; `cname` is a valid C string for the call (DPDK
        // copies the name).
        let raw = unsafe {
            dpdk_sys::rte_pktmbuf_pool_create(cname.as_ptr(), n, cache, 0, data_room, socket)
        }
        .rte_errno(OP)?;
        Ok(Mempool { raw })
    }

    /// Looks up an existing pool by name (e.g. one created by the primary process).
    pub fn lookup(name: &str) -> Result<Mempool> {
        const OP: &str = "rte_mempool_lookup";
        crate::eal::ensure(OP)?;
        let cname = cstring(OP, name)?;
        // SAFETY: EAL is initialised; valid C string.
        let raw = unsafe { dpdk_sys::rte_mempool_lookup(cname.as_ptr()) }.rte_errno(OP)?;
        Ok(Mempool { raw })
    }

    /// Number of elements currently allocated (including those in per-lcore caches).
    pub fn in_use_count(&self) -> u32 {
        // SAFETY: valid, never-freed pool.
        unsafe { dpdk_sys::rte_mempool_in_use_count(self.raw.as_ptr()) }
    }

    /// Number of elements available (including those in per-lcore caches).
    pub fn avail_count(&self) -> u32 {
        // SAFETY: valid, never-freed pool.
        unsafe { dpdk_sys::rte_mempool_avail_count(self.raw.as_ptr()) }
    }

    /// Total number of elements.
    pub fn size(&self) -> u32 {
        // SAFETY: valid pool; `size` is immutable after creation.
        unsafe { (*self.raw.as_ptr()).size }
    }

    /// The pool's name.
    pub fn name(&self) -> String {
        // SAFETY: valid pool; `name` is a NUL-terminated fixed array set at creation.
        unsafe { CStr::from_ptr((*self.raw.as_ptr()).name.as_ptr()) }
            .to_string_lossy()
            .into_owned()
    }

    /// Raw pointer for FFI.
    pub fn as_ptr(&self) -> *mut dpdk_sys::rte_mempool {
        self.raw.as_ptr()
    }
}
