//! Raw FFI bindings to DPDK 22.11, generated at build time by bindgen from the system
//! headers found through `pkg-config libdpdk`, plus `dpdk_shim_*` out-of-line copies of
//! DPDK's static-inline fast-path functions (see `csrc/shim.h`).
//!
//! Everything here is `unsafe` and raw. Use the `dpdk` crate for the safe layer.

#![allow(non_upper_case_globals)]
#![allow(non_camel_case_types)]
#![allow(non_snake_case)]
#![allow(dead_code)]
#![allow(clippy::all)]
#![allow(clippy::pedantic)]
#![allow(rustdoc::all)]
#![allow(improper_ctypes)]
#![allow(unsafe_op_in_unsafe_fn)]

include!(concat!(env!("OUT_DIR"), "/bindings.rs"));

// Constants defined through function-like macros (`RTE_BIT64`) that bindgen cannot
// evaluate. `csrc/shim.c` `_Static_assert`s each against the C headers, so a mismatch
// fails the build.

/// `RTE_ETH_RSS_IP`.
pub const RTE_ETH_RSS_IP: u64 =
    (1 << 2) | (1 << 3) | (1 << 7) | (1 << 8) | (1 << 9) | (1 << 13) | (1 << 15);
/// `RTE_ETH_RSS_UDP`.
pub const RTE_ETH_RSS_UDP: u64 = (1 << 5) | (1 << 11) | (1 << 17);
/// `RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE`.
pub const RTE_ETH_TX_OFFLOAD_MBUF_FAST_FREE: u64 = 1 << 16;
