//! `dpdk` — the one thin safe layer over DPDK 22.11 for the KV-Direct appliance.
//!
//! All FFI `unsafe` of the workspace lives in `dpdk-sys` (raw bindings + C shim) and in
//! this crate; every `unsafe {}` block carries a `// SAFETY:` comment.
//!
//! # Lifecycle
//!
//! 1. [`Eal::init`] once per process (a second call returns `EALREADY`).
//! 2. Create [`Mempool`]s, configure [`Port`]s (which hand out [`RxQueue`]/[`TxQueue`]
//!    handles), launch work on worker lcores with [`lcore::launch_on`].
//! 3. Drop the queue handles (join the lcores), [`Port::stop`]/[`Port::close`], and drop
//!    the [`Eal`] last: its `Drop` runs `rte_eal_cleanup`, after which no DPDK object may
//!    be used (declare the `Eal` binding first in `main` so it is dropped last).
//!
//! Mempools are never freed (they live until the process exits), so an [`Mbuf`] can never
//! outlive its pool.
//!
//! # Drivers (PMDs)
//!
//! Debian's DPDK is a shared build with `RTE_EAL_PMD_PATH =
//! /usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0`; EAL `dlopen`s every driver in that directory
//! at init (`net_memif`, `net_ring`, `net_null`, `net_tap`, `mempool_ring`, ...), so no
//! `-d` argument and no `--no-as-needed` linking is needed. See [`eal`] for working
//! argument sets.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod doorbell;
pub mod eal;
pub mod error;
pub mod idle;
pub mod lcore;
pub mod malloc;
pub mod mbuf;
pub mod memif_fix;
pub mod memif_intr;
pub mod memif_unmap;
pub mod mempool;
pub mod pdump;
pub mod port;
pub mod ring;
pub mod telemetry;
pub mod tsc;

pub use eal::Eal;
pub use error::{DpdkError, Result};
pub use idle::{ArmRx, Armed, Doorbell, IdleBackoff, IdlePolicy};
pub use lcore::{LaunchError, LaunchHandle, LcoreId};
pub use malloc::{DpdkRegion, Memzone};
pub use mbuf::{Mbuf, MbufBurst};
pub use memif_intr::MemifRxIntr;
pub use mempool::Mempool;
pub use port::{
    LinkStatus, Port, PortConfig, PortId, PortQueues, PortStats, QueueId, RxQueue, TxQueue,
    RX_INTR_DRIVERS,
};
pub use ring::{Ring, RingConsumer, RingItem, RingMode, RingProducer};

/// Raw bindings, re-exported for the rare case the safe layer lacks something.
pub use dpdk_sys as sys;

/// NUMA socket id as DPDK uses it; [`SOCKET_ID_ANY`] (-1) means "any socket".
pub type SocketId = i32;

/// "Any NUMA socket" (`SOCKET_ID_ANY`).
pub const SOCKET_ID_ANY: SocketId = -1;

#[cfg(test)]
mod tests {
    //! Tests that need no EAL (this unit-test process never initialises it); the EAL
    //! cases live in `tests/eal.rs`.
    use super::*;

    #[test]
    fn calls_before_init_fail_cleanly() {
        assert!(!Eal::is_initialized());
        let e = Mempool::create_pktmbuf("p", 63, 0, 2176, SOCKET_ID_ANY).unwrap_err();
        assert_eq!(e.errno, libc::ENODEV);
        assert!(Port::by_name("net_ring0").is_err());
        assert_eq!(Port::count(), 0);
        assert_eq!(tsc::hz(), 0);
        assert_eq!(lcore::id(), None);
        assert_eq!(lcore::count(), 0);
        assert_eq!(lcore::workers().count(), 0);
        assert!(malloc::zmalloc_socket("r", 64, 0, SOCKET_ID_ANY).is_none());
        assert!(lcore::launch_on(LcoreId(1), || ()).is_err());
    }

    #[test]
    fn error_text_uses_rte_strerror() {
        let e = DpdkError::new("rte_eth_dev_configure", libc::EBUSY);
        let s = e.to_string();
        assert!(s.starts_with("rte_eth_dev_configure: "), "{s}");
        assert!(s.contains("busy"), "{s}");
        // DPDK's own codes: E_RTE_SECONDARY = 1001.
        assert!(DpdkError::new("x", 1001).message().contains("secondary"));
    }

    #[test]
    fn burst_layout() {
        assert_eq!(std::mem::size_of::<Mbuf>(), 8);
        assert_eq!(
            std::mem::size_of::<MbufBurst<32>>(),
            8 + 32 * 8,
            "a burst is len + N pointers, no heap"
        );
        let b = MbufBurst::<32>::new();
        assert!(b.is_empty());
        assert_eq!(b.capacity(), 32);
    }
}
