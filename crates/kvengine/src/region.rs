//! Caller-provided memory the engine lives in.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Alignment used by [`Region::owned`] for regions of at least 2 MiB, so
/// that transparent huge pages can back them.
pub const HUGE_ALIGN: usize = 2 << 20;
/// Alignment used by [`Region::owned`] for smaller regions.
pub const PAGE_ALIGN: usize = 4096;

/// A contiguous memory region that an [`crate::Engine`] stores everything in.
///
/// Either owned (an aligned, zeroed heap allocation freed on drop) or
/// borrowed from the caller (e.g. DPDK hugepage memory, never freed here).
/// A region is `Send` (it can move to the worker lcore) but not `Sync`.
pub struct Region {
    ptr: NonNull<u8>,
    len: usize,
    /// `Some` when this region owns its allocation.
    layout: Option<Layout>,
}

// SAFETY: a Region is the unique handle to its memory (owned allocation, or
// memory whose exclusivity the caller promised in `from_raw`); moving that
// handle to another thread is sound. It is deliberately not Sync.
unsafe impl Send for Region {}

impl Region {
    /// Allocates `bytes` of zeroed memory aligned to 2 MiB (4 KiB below
    /// 2 MiB). The memory is freed when the region drops.
    ///
    /// On Linux, regions of 2 MiB and more are advised `MADV_HUGEPAGE`
    /// before they are first touched (zeroed), so transparent huge pages back
    /// them when the system allows (`/sys/kernel/mm/transparent_hugepage`
    /// set to `madvise` or `always`): random access then costs no TLB walk.
    /// Aborts through [`handle_alloc_error`] when the allocation fails, like
    /// `Vec`; panics if `bytes` exceeds `isize::MAX` rounded to the alignment.
    pub fn owned(bytes: usize) -> Region {
        if bytes == 0 {
            return Region {
                ptr: NonNull::dangling(),
                len: 0,
                layout: None,
            };
        }
        let align = if bytes >= HUGE_ALIGN {
            HUGE_ALIGN
        } else {
            PAGE_ALIGN
        };
        let layout = Layout::from_size_align(bytes, align).expect("region size overflows isize");
        // SAFETY: layout has a non-zero size (bytes > 0 checked above).
        let raw = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        #[cfg(target_os = "linux")]
        if align == HUGE_ALIGN {
            // SAFETY: the range is exactly our own fresh allocation (page
            // aligned); MADV_HUGEPAGE only changes how the kernel backs it and
            // a failure is harmless (we ignore it: 4 KiB pages still work).
            unsafe {
                libc::madvise(raw.cast(), bytes, libc::MADV_HUGEPAGE);
            }
        }
        // SAFETY: raw is valid for writes of `bytes` bytes (just allocated).
        unsafe { std::ptr::write_bytes(raw, 0, bytes) };
        Region {
            ptr,
            len: bytes,
            layout: Some(layout),
        }
    }

    /// Wraps caller-owned memory (e.g. a DPDK `rte_malloc`/memzone area).
    /// The region never frees it.
    ///
    /// # Safety
    ///
    /// `ptr` must be non-null, valid for reads and writes of `len` bytes for
    /// the whole lifetime of the returned region (and of any engine built on
    /// it), and not accessed through any other pointer during that time.
    /// The engine requires 64-byte alignment and checks it in `Engine::new`.
    pub unsafe fn from_raw(ptr: *mut u8, len: usize) -> Region {
        match NonNull::new(ptr) {
            Some(ptr) => Region {
                ptr,
                len,
                layout: None,
            },
            None => Region {
                ptr: NonNull::dangling(),
                len: 0,
                layout: None,
            },
        }
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when the region has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Start address (for alignment checks, `madvise`, prefetch hints).
    pub fn as_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    /// Mutable start address.
    pub fn as_mut_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The region as a byte slice.
    #[inline(always)]
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `len` bytes for the region's lifetime
        // (owned allocation or the `from_raw` contract), and `&self` keeps
        // every `&mut` view out while this borrow lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The region as a mutable byte slice.
    #[inline(always)]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this view unique.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

/// The worker's view of a [`Region`] whose owner lives elsewhere (the
/// engine keeps the region in its shared slab state, so a slab service
/// handle keeps it alive): the same pointer and length, with the same
/// `&self` / `&mut self` discipline as [`Region::as_slice`] /
/// [`Region::as_mut_slice`].
pub(crate) struct RegionView {
    ptr: NonNull<u8>,
    len: usize,
}

impl RegionView {
    /// A view of `region`'s memory.
    ///
    /// # Safety
    ///
    /// The region must outlive the view and must not be accessed through
    /// `region` itself while the view lives (the engine moves it into its
    /// shared state, where only its `Drop` runs). The slab pool may write
    /// the link words of blocks on its free lists from another thread; the
    /// engine never accesses those bytes through this view while the
    /// blocks are in the pool.
    pub(crate) unsafe fn new(region: &mut Region) -> RegionView {
        RegionView {
            ptr: region.ptr,
            len: region.len,
        }
    }

    /// The region as a byte slice.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: ptr is valid for `len` bytes while the view lives (the
        // contract of `new`), and `&self` keeps every `&mut` view out while
        // this borrow lives. Bytes another thread may write concurrently
        // (link words of blocks in the shared pool) are never read through
        // the slice: the engine reads only index buckets and the records of
        // blocks it has allocated.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The region as a mutable byte slice.
    #[inline(always)]
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: as in `as_slice`; `&mut self` makes this view unique among
        // the worker's views, and the engine writes only bytes it owns.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if let Some(layout) = self.layout {
            // SAFETY: `layout` is `Some` only for a region made by `owned`,
            // whose ptr came from `alloc(layout)` with this same layout; drop
            // runs once, so it is freed exactly once.
            unsafe { dealloc(self.ptr.as_ptr(), layout) }
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("owned", &self.layout.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owned_is_aligned_and_zeroed() {
        let r = Region::owned(3 << 20);
        assert_eq!(r.as_ptr() as usize % HUGE_ALIGN, 0);
        assert!(r.as_slice().iter().all(|&b| b == 0));
        let s = Region::owned(100);
        assert_eq!(s.as_ptr() as usize % PAGE_ALIGN, 0);
        assert_eq!(Region::owned(0).len(), 0);
    }

    #[test]
    fn from_raw_does_not_free() {
        let mut v = vec![7u8; 256];
        // SAFETY: v outlives the region and is not touched while it lives.
        let mut r = unsafe { Region::from_raw(v.as_mut_ptr(), v.len()) };
        r.as_mut_slice()[0] = 1;
        drop(r);
        assert_eq!(v[0], 1);
    }
}
