//! `rte_ring`: lock-free FIFO of pointers between lcores.
//!
//! A [`Ring<T>`] carries owned items (`Mbuf`, `Box<U>`, or your own [`RingItem`]).
//! Producers/consumers are handles: for single-producer/consumer rings only one
//! producer (consumer) handle can ever be created, so the SP/SC fast path is safe.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{cstring, DpdkError, Result, ToResult};
use crate::mbuf::{Mbuf, MbufBurst};
use crate::SocketId;

/// An owned value that travels through a ring as one pointer.
///
/// # Safety
/// `into_ptr` must return a non-null pointer that `from_ptr` turns back into the same
/// value exactly once; the value must be safe to move across threads (`Send`).
pub unsafe trait RingItem: Send + Sized {
    /// Gives up ownership as a pointer.
    fn into_ptr(self) -> *mut c_void;
    /// Reclaims ownership.
    ///
    /// # Safety
    /// `p` came from `into_ptr` of the same type and is reclaimed once.
    unsafe fn from_ptr(p: *mut c_void) -> Self;
}

// SAFETY: Mbuf is a non-null owning pointer; into_raw/from_raw round-trip it.
unsafe impl RingItem for Mbuf {
    fn into_ptr(self) -> *mut c_void {
        self.into_raw().as_ptr().cast()
    }
    unsafe fn from_ptr(p: *mut c_void) -> Self {
        // SAFETY: by the trait contract `p` is a non-null mbuf pointer we own.
        unsafe { Mbuf::from_raw(std::ptr::NonNull::new_unchecked(p.cast())) }
    }
}

// SAFETY: Box::into_raw/from_raw round-trip, non-null.
unsafe impl<U: Send> RingItem for Box<U> {
    fn into_ptr(self) -> *mut c_void {
        Box::into_raw(self).cast()
    }
    unsafe fn from_ptr(p: *mut c_void) -> Self {
        // SAFETY: by the trait contract `p` came from Box::into_raw of a Box<U>.
        unsafe { Box::from_raw(p.cast()) }
    }
}

/// Producer/consumer sync modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingMode {
    /// Single producer, single consumer.
    SpSc,
    /// Multi producer, single consumer.
    MpSc,
    /// Single producer, multi consumer.
    SpMc,
    /// Multi producer, multi consumer.
    MpMc,
}

impl RingMode {
    fn single_producer(self) -> bool {
        matches!(self, RingMode::SpSc | RingMode::SpMc)
    }
    fn single_consumer(self) -> bool {
        matches!(self, RingMode::SpSc | RingMode::MpSc)
    }
}

struct Inner<T: RingItem> {
    raw: std::ptr::NonNull<dpdk_sys::rte_ring>,
    mode: RingMode,
    producer_taken: AtomicBool,
    consumer_taken: AtomicBool,
    _t: PhantomData<T>,
}

// SAFETY: the ring is a thread-safe DPDK object; access discipline (SP/SC) is enforced
// by the handle types.
unsafe impl<T: RingItem> Send for Inner<T> {}
// SAFETY: as above.
unsafe impl<T: RingItem> Sync for Inner<T> {}

impl<T: RingItem> Drop for Inner<T> {
    fn drop(&mut self) {
        // All handles are gone: drain the remaining items (dropping them), then free.
        let mut p: *mut c_void = std::ptr::null_mut();
        loop {
            // SAFETY: no handle is left, so we are the only user of the ring.
            let n = unsafe {
                dpdk_sys::dpdk_shim_ring_dequeue_burst(
                    self.raw.as_ptr(),
                    &mut p,
                    1,
                    std::ptr::null_mut(),
                )
            };
            if n == 0 {
                break;
            }
            // SAFETY: every pointer in the ring came from T::into_ptr.
            drop(unsafe { T::from_ptr(p) });
        }
        // SAFETY: created by rte_ring_create, freed once.
        unsafe { dpdk_sys::rte_ring_free(self.raw.as_ptr()) };
    }
}

/// A ring of owned `T`s. Cloning shares the same ring.
pub struct Ring<T: RingItem> {
    inner: Arc<Inner<T>>,
}

impl<T: RingItem> Clone for Ring<T> {
    fn clone(&self) -> Self {
        Ring {
            inner: self.inner.clone(),
        }
    }
}

impl<T: RingItem> std::fmt::Debug for Ring<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ring")
            .field("mode", &self.inner.mode)
            .finish()
    }
}

impl<T: RingItem> Ring<T> {
    /// `rte_ring_create(name, count, socket, flags)`; `count` is rounded up to a power of
    /// two (usable capacity `count-1` unless exact). Name must be unique.
    pub fn create(name: &str, count: u32, socket: SocketId, mode: RingMode) -> Result<Ring<T>> {
        const OP: &str = "rte_ring_create";
        crate::eal::ensure(OP)?;
        let c = cstring(OP, name)?;
        let mut flags = dpdk_sys::RING_F_EXACT_SZ;
        if mode.single_producer() {
            flags |= dpdk_sys::RING_F_SP_ENQ;
        }
        if mode.single_consumer() {
            flags |= dpdk_sys::RING_F_SC_DEQ;
        }
        // SAFETY: EAL initialised; valid C string (copied).
        let raw =
            unsafe { dpdk_sys::rte_ring_create(c.as_ptr(), count, socket, flags) }.rte_errno(OP)?;
        Ok(Ring {
            inner: Arc::new(Inner {
                raw,
                mode,
                producer_taken: AtomicBool::new(false),
                consumer_taken: AtomicBool::new(false),
                _t: PhantomData,
            }),
        })
    }

    /// A producer handle; for single-producer rings only the first call succeeds
    /// (`EBUSY` afterwards).
    pub fn producer(&self) -> Result<RingProducer<T>> {
        if self.inner.mode.single_producer()
            && self.inner.producer_taken.swap(true, Ordering::AcqRel)
        {
            return Err(DpdkError::new("ring producer", libc::EBUSY));
        }
        Ok(RingProducer {
            ring: self.clone(),
            _not_sync: PhantomData,
        })
    }

    /// A consumer handle; for single-consumer rings only the first call succeeds.
    pub fn consumer(&self) -> Result<RingConsumer<T>> {
        if self.inner.mode.single_consumer()
            && self.inner.consumer_taken.swap(true, Ordering::AcqRel)
        {
            return Err(DpdkError::new("ring consumer", libc::EBUSY));
        }
        Ok(RingConsumer {
            ring: self.clone(),
            _not_sync: PhantomData,
        })
    }

    /// Items currently queued.
    pub fn count(&self) -> u32 {
        // SAFETY: valid ring; count is a racy but safe read.
        unsafe { dpdk_sys::dpdk_shim_ring_count(self.inner.raw.as_ptr()) }
    }

    /// Free slots.
    pub fn free_count(&self) -> u32 {
        // SAFETY: valid ring; racy but safe read.
        unsafe { dpdk_sys::dpdk_shim_ring_free_count(self.inner.raw.as_ptr()) }
    }

    fn raw(&self) -> *mut dpdk_sys::rte_ring {
        self.inner.raw.as_ptr()
    }
}

/// Enqueue side of a [`Ring`] (`Send`, not `Sync`).
pub struct RingProducer<T: RingItem> {
    ring: Ring<T>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

/// Dequeue side of a [`Ring`] (`Send`, not `Sync`).
pub struct RingConsumer<T: RingItem> {
    ring: Ring<T>,
    _not_sync: PhantomData<std::cell::Cell<()>>,
}

// SAFETY: a handle may move to another thread; SP/SC uniqueness is per handle, and
// handles are !Sync so never used from two threads at once.
unsafe impl<T: RingItem> Send for RingProducer<T> {}
// SAFETY: as above.
unsafe impl<T: RingItem> Send for RingConsumer<T> {}

impl<T: RingItem> RingProducer<T> {
    /// Enqueues one item; gives it back if the ring is full.
    pub fn enqueue(&mut self, item: T) -> Result<(), T> {
        let p = item.into_ptr();
        // SAFETY: this handle is the (only, for SP) producer; `p` is a valid table of 1.
        let n = unsafe {
            dpdk_sys::dpdk_shim_ring_enqueue_burst(self.ring.raw(), &p, 1, std::ptr::null_mut())
        };
        if n == 1 {
            Ok(())
        } else {
            // SAFETY: the ring did not take `p`; reclaim it once.
            Err(unsafe { T::from_ptr(p) })
        }
    }

    /// The ring.
    pub fn ring(&self) -> &Ring<T> {
        &self.ring
    }
}

impl RingProducer<Mbuf> {
    /// Enqueues as many mbufs from the front of `burst` as fit; the rest stay in
    /// `burst`. Returns the number enqueued.
    pub fn enqueue_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let len = burst.len() as u32;
        if len == 0 {
            return 0;
        }
        // SAFETY: producer handle discipline as in `enqueue`; the burst's first `len`
        // slots are valid owned mbuf pointers; the ring takes ownership of the first `n`.
        let n = unsafe {
            dpdk_sys::dpdk_shim_ring_enqueue_burst(
                self.ring.raw(),
                burst.head_ptr().cast::<*mut c_void>(),
                len,
                std::ptr::null_mut(),
            )
        } as usize;
        // SAFETY: the first `n` mbufs now belong to the ring.
        unsafe { burst.consume_front(n) };
        n
    }
}

impl<T: RingItem> RingConsumer<T> {
    /// Dequeues one item.
    pub fn dequeue(&mut self) -> Option<T> {
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: this handle is the (only, for SC) consumer; out-table of 1.
        let n = unsafe {
            dpdk_sys::dpdk_shim_ring_dequeue_burst(self.ring.raw(), &mut p, 1, std::ptr::null_mut())
        };
        // SAFETY: a dequeued pointer came from T::into_ptr and is now ours.
        (n == 1).then(|| unsafe { T::from_ptr(p) })
    }

    /// The ring.
    pub fn ring(&self) -> &Ring<T> {
        &self.ring
    }
}

impl RingConsumer<Mbuf> {
    /// Dequeues up to `burst.remaining()` mbufs, appending them; returns how many.
    pub fn dequeue_burst<const N: usize>(&mut self, burst: &mut MbufBurst<N>) -> usize {
        let room = burst.remaining() as u32;
        if room == 0 {
            return 0;
        }
        // SAFETY: consumer discipline; the free tail of the burst has room for `room`
        // pointers.
        let n = unsafe {
            dpdk_sys::dpdk_shim_ring_dequeue_burst(
                self.ring.raw(),
                burst.tail_ptr().cast::<*mut c_void>(),
                room,
                std::ptr::null_mut(),
            )
        } as usize;
        // SAFETY: `n` owned mbufs were written into the tail.
        unsafe { burst.commit(n) };
        n
    }
}

impl<T: RingItem> std::fmt::Debug for RingProducer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingProducer")
            .field("ring", &self.ring)
            .finish()
    }
}

impl<T: RingItem> std::fmt::Debug for RingConsumer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RingConsumer")
            .field("ring", &self.ring)
            .finish()
    }
}
