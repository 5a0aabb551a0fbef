//! Time-stamp counter.

/// Current TSC value (`rte_rdtsc`, no serialisation).
#[inline]
pub fn now() -> u64 {
    // SAFETY: rdtsc has no preconditions.
    unsafe { dpdk_sys::dpdk_shim_rdtsc() }
}

/// TSC ticks per second as calibrated by EAL (0 before [`crate::Eal::init`]).
pub fn hz() -> u64 {
    if !crate::Eal::is_initialized() {
        return 0;
    }
    // SAFETY: EAL is initialised, so the calibrated frequency is available.
    unsafe { dpdk_sys::rte_get_tsc_hz() }
}

/// Converts TSC ticks to nanoseconds with the calibrated frequency.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    let hz = hz().max(1);
    ((ticks as u128 * 1_000_000_000u128) / hz as u128) as u64
}

/// A CPU spin-wait hint (`rte_pause`).
#[inline]
pub fn pause() {
    // SAFETY: `pause` instruction; no preconditions.
    unsafe { dpdk_sys::dpdk_shim_pause() }
}

/// Prefetches the cache line at `p` into all cache levels (`rte_prefetch0`). Any
/// address is allowed: a prefetch never faults.
#[inline]
pub fn prefetch0<T>(p: *const T) {
    // SAFETY: prefetch is a hint and never dereferences/faults, whatever `p` is.
    unsafe { dpdk_sys::dpdk_shim_prefetch0(p.cast()) }
}
