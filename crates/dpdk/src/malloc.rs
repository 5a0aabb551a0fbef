//! Hugepage memory: `rte_zmalloc_socket` regions and memzones.

use std::ptr::NonNull;

use crate::error::{cstring, Result, ToResult};
use crate::SocketId;

/// A zeroed, owned region of DPDK (hugepage, or anonymous with `--no-huge`) memory;
/// `rte_free`d on drop. The storage engine takes `as_mut_ptr()` + `len()`.
#[derive(Debug)]
pub struct DpdkRegion {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the region is plain owned memory; rte_free is thread-safe.
unsafe impl Send for DpdkRegion {}
// SAFETY: shared access only hands out `&[u8]`.
unsafe impl Sync for DpdkRegion {}

/// `rte_zmalloc_socket(name, size, align, socket)`; `None` if out of memory (or EAL
/// not initialised, or `size == 0`). `align` must be a power of two (0 = cache line).
pub fn zmalloc_socket(
    name: &str,
    size: usize,
    align: usize,
    socket: SocketId,
) -> Option<DpdkRegion> {
    crate::eal::ensure("rte_zmalloc_socket").ok()?;
    if size == 0 || (align != 0 && !align.is_power_of_two()) {
        return None;
    }
    let cname = cstring("rte_zmalloc_socket", name).ok()?;
    // SAFETY: EAL initialised, valid C string (used only as a debug tag), align checked.
    let p = unsafe { dpdk_sys::rte_zmalloc_socket(cname.as_ptr(), size, align as u32, socket) };
    NonNull::new(p.cast::<u8>()).map(|ptr| DpdkRegion { ptr, len: size })
}

impl DpdkRegion {
    /// Start of the region.
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Start of the region, writable.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` if zero-length (never, by construction).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The region as bytes.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `len` zero-initialised bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The region as mutable bytes.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as above, exclusive via &mut self.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for DpdkRegion {
    fn drop(&mut self) {
        // SAFETY: allocated by rte_zmalloc_socket, freed once.
        unsafe { dpdk_sys::rte_free(self.ptr.as_ptr().cast()) }
    }
}

/// A named, IOVA-contiguous-if-possible memzone (visible to secondary processes by
/// name); freed on drop if this handle reserved it.
#[derive(Debug)]
pub struct Memzone {
    mz: NonNull<dpdk_sys::rte_memzone>,
    owned: bool,
}

// SAFETY: a memzone descriptor is immutable after reservation; freeing is thread-safe.
unsafe impl Send for Memzone {}
// SAFETY: shared access only reads the descriptor.
unsafe impl Sync for Memzone {}

impl Memzone {
    /// `rte_memzone_reserve_aligned(name, len, socket, flags=0, align)`.
    pub fn reserve(name: &str, len: usize, socket: SocketId, align: u32) -> Result<Memzone> {
        const OP: &str = "rte_memzone_reserve_aligned";
        crate::eal::ensure(OP)?;
        let c = cstring(OP, name)?;
        // SAFETY: EAL initialised; valid C string (copied by DPDK).
        let mz =
            unsafe { dpdk_sys::rte_memzone_reserve_aligned(c.as_ptr(), len, socket, 0, align) }
                .rte_errno(OP)?;
        Ok(Memzone { mz, owned: true })
    }

    /// Looks a memzone up by name (not freed on drop).
    pub fn lookup(name: &str) -> Result<Memzone> {
        const OP: &str = "rte_memzone_lookup";
        crate::eal::ensure(OP)?;
        let c = cstring(OP, name)?;
        // SAFETY: EAL initialised; valid C string.
        let mz = unsafe { dpdk_sys::rte_memzone_lookup(c.as_ptr()) }.rte_errno(OP)?;
        Ok(Memzone { mz, owned: false })
    }

    /// Virtual address of the zone.
    pub fn as_ptr(&self) -> *mut u8 {
        // SAFETY: valid descriptor; `addr` is in an anonymous union with addr_64.
        unsafe { (*self.mz.as_ptr()).__bindgen_anon_1.addr.cast() }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        // SAFETY: valid descriptor.
        unsafe { (*self.mz.as_ptr()).len }
    }

    /// `true` if zero-length.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Drop for Memzone {
    fn drop(&mut self) {
        if self.owned {
            // SAFETY: reserved by us, freed once.
            unsafe { dpdk_sys::rte_memzone_free(self.mz.as_ptr()) };
        }
    }
}
