//! Owning packet buffers and fixed-capacity bursts of them.
//!
//! ```text
//!  rte_mbuf buffer (one segment)
//!  +-----------+---------------------------+-----------+
//!  | headroom  | data (data_len bytes)     | tailroom  |
//!  +-----------+---------------------------+-----------+
//!  ^buf_addr   ^buf_addr + data_off         ^ +data_len
//! ```
//!
//! The accessors work on the first segment: the wrapper never builds chains, and frames
//! received from memif/ring/tap with the default 2 KiB data room are single-segment.

use std::mem::MaybeUninit;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use crate::error::{DpdkError, Result};
use crate::mempool::Mempool;

/// An owned `rte_mbuf`; freed back to its pool on drop.
///
/// `#[repr(transparent)]` over `NonNull<rte_mbuf>`: 8 bytes, and an array of `Mbuf` has
/// the layout of the `struct rte_mbuf **` that burst functions take.
#[repr(transparent)]
#[derive(Debug)]
pub struct Mbuf {
    raw: NonNull<dpdk_sys::rte_mbuf>,
}

// SAFETY: an `Mbuf` exclusively owns its buffer; freeing to the pool is thread-safe in
// DPDK (from any thread, EAL or not), so moving ownership across threads is fine.
unsafe impl Send for Mbuf {}
// SAFETY: `&Mbuf` only allows reads of the buffer; mutation needs `&mut Mbuf`.
unsafe impl Sync for Mbuf {}

const _: () = assert!(std::mem::size_of::<Mbuf>() == 8);
const _: () = assert!(std::mem::size_of::<Option<Mbuf>>() == 8);

impl Mbuf {
    /// Allocates one mbuf (`rte_pktmbuf_alloc`); `None` when the pool is empty.
    #[inline]
    pub fn alloc(pool: &Mempool) -> Option<Mbuf> {
        // SAFETY: `pool` is a valid, never-freed pktmbuf pool. The returned mbuf (if any)
        // is freshly reset and exclusively ours.
        let p = unsafe { dpdk_sys::dpdk_shim_pktmbuf_alloc(pool.as_ptr()) };
        NonNull::new(p).map(|raw| Mbuf { raw })
    }

    /// Takes ownership of a raw mbuf.
    ///
    /// # Safety
    /// `raw` must point to a valid mbuf that the caller owns exclusively (e.g. obtained
    /// from [`Mbuf::into_raw`] or from a DPDK burst function) and that nobody else frees.
    #[inline]
    pub unsafe fn from_raw(raw: NonNull<dpdk_sys::rte_mbuf>) -> Mbuf {
        Mbuf { raw }
    }

    /// Gives up ownership without freeing; the caller must eventually free or hand it
    /// back to DPDK.
    #[inline]
    pub fn into_raw(self) -> NonNull<dpdk_sys::rte_mbuf> {
        let raw = self.raw;
        std::mem::forget(self);
        raw
    }

    /// Raw pointer (still owned by `self`).
    #[inline]
    pub fn as_ptr(&self) -> *mut dpdk_sys::rte_mbuf {
        self.raw.as_ptr()
    }

    /// Packet length (`pkt_len`; equals `data_len` for a single segment).
    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: valid owned mbuf; plain field read (same as the C accessor).
        unsafe { (*self.raw.as_ptr()).pkt_len as usize }
    }

    /// `true` if the packet has no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Length of the first segment's data (`data_len`).
    #[inline]
    pub fn data_len(&self) -> usize {
        // SAFETY: valid owned mbuf; plain field read.
        unsafe { (*self.raw.as_ptr()).data_len as usize }
    }

    /// Number of segments.
    #[inline]
    pub fn nb_segs(&self) -> u16 {
        // SAFETY: valid owned mbuf; plain field read.
        unsafe { (*self.raw.as_ptr()).nb_segs }
    }

    /// Free bytes before the data.
    #[inline]
    pub fn headroom(&self) -> usize {
        // SAFETY: valid owned mbuf; `data_off` is rte_pktmbuf_headroom().
        unsafe { (*self.raw.as_ptr()).data_off as usize }
    }

    /// Free bytes after the data (first segment).
    #[inline]
    pub fn tailroom(&self) -> usize {
        // SAFETY: valid owned mbuf; rte_pktmbuf_tailroom() = buf_len - data_off - data_len
        // (DPDK keeps data_off + data_len <= buf_len).
        unsafe {
            let m = &*self.raw.as_ptr();
            (m.buf_len - m.data_off - m.data_len) as usize
        }
    }

    /// `rte_pktmbuf_mtod`: `buf_addr + data_off`.
    #[inline]
    fn data_ptr(&self) -> *mut u8 {
        // SAFETY: valid owned mbuf; `data_off < buf_len`, so the offset stays inside the
        // buffer allocation.
        unsafe {
            let m = &*self.raw.as_ptr();
            (m.buf_addr as *mut u8).add(m.data_off as usize)
        }
    }

    /// The first segment's data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: mtod points at `data_len` bytes inside the mbuf's buffer, which is
        // mapped, initialised (DPDK memory is zeroed at allocation or written by the PMD)
        // and owned by `self` for the borrow's lifetime.
        unsafe {
            let p = self.data_ptr();
            std::slice::from_raw_parts(p, self.data_len())
        }
    }

    /// The first segment's data, mutable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        let len = self.data_len();
        // SAFETY: as in `data`; `&mut self` gives exclusive access to the buffer.
        unsafe {
            let p = self.data_ptr();
            std::slice::from_raw_parts_mut(p, len)
        }
    }

    /// Appends `len` bytes at the tail (`rte_pktmbuf_append`) and returns them;
    /// `None` if the tailroom is too small (the mbuf is unchanged).
    #[inline]
    pub fn append(&mut self, len: usize) -> Option<&mut [u8]> {
        let l16 = u16::try_from(len).ok()?;
        // SAFETY: valid, exclusively owned mbuf; on success the returned pointer addresses
        // `len` bytes inside the buffer that now belong to the data area.
        unsafe {
            let p = dpdk_sys::dpdk_shim_pktmbuf_append(self.raw.as_ptr(), l16) as *mut u8;
            if p.is_null() {
                None
            } else {
                Some(std::slice::from_raw_parts_mut(p, len))
            }
        }
    }

    /// Prepends `len` bytes in the headroom (`rte_pktmbuf_prepend`) and returns them.
    #[inline]
    pub fn prepend(&mut self, len: usize) -> Option<&mut [u8]> {
        let l16 = u16::try_from(len).ok()?;
        // SAFETY: as in `append`, but at the head of the data.
        unsafe {
            let p = dpdk_sys::dpdk_shim_pktmbuf_prepend(self.raw.as_ptr(), l16) as *mut u8;
            if p.is_null() {
                None
            } else {
                Some(std::slice::from_raw_parts_mut(p, len))
            }
        }
    }

    /// Removes `len` bytes from the head (`rte_pktmbuf_adj`); `false` if too long.
    #[inline]
    pub fn adj(&mut self, len: usize) -> bool {
        let Ok(l16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: valid, exclusively owned mbuf; adj checks the bound itself.
        unsafe { !dpdk_sys::dpdk_shim_pktmbuf_adj(self.raw.as_ptr(), l16).is_null() }
    }

    /// Removes `len` bytes from the tail (`rte_pktmbuf_trim`); `false` if too long.
    #[inline]
    pub fn trim(&mut self, len: usize) -> bool {
        let Ok(l16) = u16::try_from(len) else {
            return false;
        };
        // SAFETY: valid, exclusively owned mbuf; trim checks the bound itself.
        unsafe { dpdk_sys::dpdk_shim_pktmbuf_trim(self.raw.as_ptr(), l16) == 0 }
    }

    /// Sets the length of a single-segment packet to `len` (growing exposes the bytes
    /// already in the buffer). `false` (unchanged) if `len` exceeds `data_len +
    /// tailroom` or the mbuf is chained.
    #[inline]
    pub fn set_len(&mut self, len: usize) -> bool {
        if self.nb_segs() != 1 || len > self.data_len() + self.tailroom() {
            return false;
        }
        // SAFETY: single segment and `len` fits in the buffer (checked above), so
        // data_len == pkt_len == len keeps the mbuf consistent.
        unsafe { dpdk_sys::dpdk_shim_pktmbuf_set_len(self.raw.as_ptr(), len as u16) };
        true
    }

    /// Resets the mbuf to the freshly allocated state (`rte_pktmbuf_reset`): empty data,
    /// default headroom, no offload flags.
    #[inline]
    pub fn reset(&mut self) {
        // SAFETY: valid, exclusively owned, single-owner mbuf.
        unsafe { dpdk_sys::dpdk_shim_pktmbuf_reset(self.raw.as_ptr()) }
    }

    /// A copy of this single-segment frame in a new mbuf from `pool` (`None`: no mbuf
    /// free, or the frame does not fit in one).
    pub fn copy_into(&self, pool: &Mempool) -> Option<Mbuf> {
        let mut c = Mbuf::alloc(pool)?;
        let data = self.data();
        if !c.set_len(data.len()) {
            return None;
        }
        c.data_mut().copy_from_slice(data);
        Some(c)
    }

    /// Input port recorded by the PMD.
    #[inline]
    pub fn port(&self) -> u16 {
        // SAFETY: valid mbuf; plain field read.
        unsafe { (*self.raw.as_ptr()).port }
    }
}

impl Drop for Mbuf {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: we own the mbuf exclusively and never use it again.
        unsafe { dpdk_sys::dpdk_shim_pktmbuf_free(self.raw.as_ptr()) }
    }
}

/// A fixed-capacity, stack-allocated burst of up to `N` owned mbufs (no heap).
///
/// ```text
///  bufs: [ Mbuf | Mbuf | Mbuf | uninit ... ]   len = 3, capacity N
/// ```
///
/// Dereferences to `[Mbuf]` (indexing, iteration, `iter_mut`); dropping the burst frees
/// whatever is still in it. `rx_burst` appends into the free tail; `tx_burst` sends a
/// prefix and keeps the rest at the front for a retry.
pub struct MbufBurst<const N: usize> {
    len: usize,
    bufs: [MaybeUninit<Mbuf>; N],
}

impl<const N: usize> Default for MbufBurst<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> std::fmt::Debug for MbufBurst<N> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MbufBurst")
            .field("len", &self.len)
            .field("capacity", &N)
            .finish()
    }
}

impl<const N: usize> MbufBurst<N> {
    /// An empty burst.
    #[inline]
    pub const fn new() -> Self {
        const { assert!(N > 0 && N <= u16::MAX as usize) };
        MbufBurst {
            len: 0,
            // An array of MaybeUninit needs no initialisation.
            bufs: [const { MaybeUninit::uninit() }; N],
        }
    }

    /// Capacity `N`.
    #[inline]
    pub const fn capacity(&self) -> usize {
        N
    }

    /// Number of mbufs held.
    #[inline]
    pub fn len(&self) -> usize {
        self.len
    }

    /// `true` if empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// `true` if full.
    #[inline]
    pub fn is_full(&self) -> bool {
        self.len == N
    }

    /// Free slots.
    #[inline]
    pub fn remaining(&self) -> usize {
        N - self.len
    }

    /// Adds an mbuf; gives it back if the burst is full.
    #[inline]
    pub fn push(&mut self, m: Mbuf) -> Result<(), Mbuf> {
        if self.len == N {
            return Err(m);
        }
        self.bufs[self.len].write(m);
        self.len += 1;
        Ok(())
    }

    /// Removes the last mbuf.
    #[inline]
    pub fn pop(&mut self) -> Option<Mbuf> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        // SAFETY: slot `len` (old len - 1) was initialised and is now outside `0..len`,
        // so it is read exactly once.
        Some(unsafe { self.bufs[self.len].assume_init_read() })
    }

    /// Removes and returns the mbuf at `i`, replacing it with the last one (O(1)).
    pub fn swap_remove(&mut self, i: usize) -> Mbuf {
        assert!(
            i < self.len,
            "swap_remove index {i} out of range {}",
            self.len
        );
        self.bufs.swap(i, self.len - 1);
        self.pop().expect("non-empty")
    }

    /// Keeps only the mbufs for which `f` returns true (others are freed), preserving
    /// order.
    pub fn retain(&mut self, mut f: impl FnMut(&mut Mbuf) -> bool) {
        let len = self.len;
        // Leak-amplification guard: if `f` panics the burst appears empty (mbufs leak
        // rather than double-free).
        self.len = 0;
        let mut w = 0;
        for r in 0..len {
            // SAFETY: r < old len, so the slot is initialised; it is read once here and
            // either dropped or moved to slot w <= r.
            let mut m = unsafe { self.bufs[r].assume_init_read() };
            if f(&mut m) {
                self.bufs[w].write(m);
                w += 1;
            }
        }
        self.len = w;
    }

    /// Frees all mbufs (bulk free).
    pub fn clear(&mut self) {
        let n = self.len;
        self.len = 0;
        if n > 0 {
            // SAFETY: the first `n` slots are initialised owned mbufs; `len` is already 0
            // so they are not touched again. `Mbuf` is a transparent pointer, so the
            // array is a valid `struct rte_mbuf **` of `n` entries.
            unsafe {
                dpdk_sys::rte_pktmbuf_free_bulk(self.bufs.as_mut_ptr().cast(), n as u32);
            }
        }
    }

    /// Moves all mbufs out through an iterator (remaining ones are freed when the
    /// iterator is dropped).
    pub fn drain(&mut self) -> Drain<'_, N> {
        let end = self.len;
        self.len = 0;
        Drain {
            burst: self,
            pos: 0,
            end,
        }
    }

    /// Allocates `n` more mbufs in one call (`rte_pktmbuf_alloc_bulk`); all-or-nothing.
    pub fn alloc_bulk(&mut self, pool: &Mempool, n: usize) -> Result<()> {
        if n > self.remaining() {
            return Err(DpdkError::new("rte_pktmbuf_alloc_bulk", libc::ENOSPC));
        }
        if n == 0 {
            return Ok(());
        }
        // SAFETY: `bufs[len..len+n]` are free slots of pointer layout; on success DPDK
        // writes `n` valid, exclusively owned mbufs there, on failure nothing.
        let rc = unsafe {
            dpdk_sys::dpdk_shim_pktmbuf_alloc_bulk(pool.as_ptr(), self.tail_ptr(), n as u32)
        };
        if rc != 0 {
            return Err(DpdkError::new("rte_pktmbuf_alloc_bulk", libc::ENOBUFS));
        }
        self.len += n;
        Ok(())
    }

    /// Pointer to the first free slot, as `struct rte_mbuf **`.
    #[inline]
    pub(crate) fn tail_ptr(&mut self) -> *mut *mut dpdk_sys::rte_mbuf {
        // SAFETY: `len <= N`, so the offset stays within (or one past) the array.
        unsafe { self.bufs.as_mut_ptr().add(self.len).cast() }
    }

    /// Pointer to slot 0, as `struct rte_mbuf **`.
    #[inline]
    pub(crate) fn head_ptr(&mut self) -> *mut *mut dpdk_sys::rte_mbuf {
        self.bufs.as_mut_ptr().cast()
    }

    /// Records that `n` more slots after `len` were filled by DPDK.
    ///
    /// # Safety
    /// Slots `len..len+n` must now hold valid mbufs owned by this burst.
    #[inline]
    pub(crate) unsafe fn commit(&mut self, n: usize) {
        debug_assert!(self.len + n <= N);
        self.len += n;
    }

    /// Forgets the first `n` mbufs (DPDK took ownership of them) and moves the rest to
    /// the front.
    ///
    /// # Safety
    /// Ownership of slots `0..n` must have been transferred elsewhere.
    #[inline]
    pub(crate) unsafe fn consume_front(&mut self, n: usize) {
        debug_assert!(n <= self.len);
        let rest = self.len - n;
        if rest > 0 && n > 0 {
            // SAFETY: both ranges lie inside the array; `copy` handles overlap. Slots
            // 0..rest end up holding the still-owned mbufs; the stale tail is ignored.
            unsafe {
                std::ptr::copy(self.bufs.as_ptr().add(n), self.bufs.as_mut_ptr(), rest);
            }
        }
        self.len = rest;
    }
}

impl<const N: usize> Deref for MbufBurst<N> {
    type Target = [Mbuf];
    #[inline]
    fn deref(&self) -> &[Mbuf] {
        // SAFETY: the first `len` slots are initialised mbufs; MaybeUninit<Mbuf> has the
        // layout of Mbuf.
        unsafe { std::slice::from_raw_parts(self.bufs.as_ptr().cast(), self.len) }
    }
}

impl<const N: usize> DerefMut for MbufBurst<N> {
    #[inline]
    fn deref_mut(&mut self) -> &mut [Mbuf] {
        // SAFETY: as in `deref`, with exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.bufs.as_mut_ptr().cast(), self.len) }
    }
}

impl<const N: usize> Drop for MbufBurst<N> {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Draining iterator from [`MbufBurst::drain`].
pub struct Drain<'a, const N: usize> {
    burst: &'a mut MbufBurst<N>,
    pos: usize,
    end: usize,
}

impl<const N: usize> Iterator for Drain<'_, N> {
    type Item = Mbuf;
    #[inline]
    fn next(&mut self) -> Option<Mbuf> {
        if self.pos == self.end {
            return None;
        }
        let i = self.pos;
        self.pos += 1;
        // SAFETY: i < end (old len) and each slot is read exactly once (pos advances);
        // the burst's len is 0 so it will not touch these slots again.
        Some(unsafe { self.burst.bufs[i].assume_init_read() })
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = self.end - self.pos;
        (n, Some(n))
    }
}

impl<const N: usize> ExactSizeIterator for Drain<'_, N> {}

impl<const N: usize> Drop for Drain<'_, N> {
    fn drop(&mut self) {
        for m in self.by_ref() {
            drop(m);
        }
    }
}
