//! The prefetch hint of the transport (the engine has its own: a client does not
//! link the storage engine).

/// Prefetches the cache line holding the start of `*r` (no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch_ref<T: ?Sized>(r: &T) {
    #[cfg(target_arch = "x86_64")]
    {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: PREFETCHT0 is a hint that never faults, whatever the address.
        unsafe { _mm_prefetch::<_MM_HINT_T0>((r as *const T).cast::<i8>()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = r;
    }
}
