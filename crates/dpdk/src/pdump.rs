//! Packet capture support for `dpdk-dumpcap` / `dpdk-pdump`.

use crate::error::{Result, ToResult};

/// `rte_pdump_init`: lets a secondary `dpdk-dumpcap --file-prefix=<same prefix>` capture
/// this (primary) process's ports. Call after [`crate::Eal::init`].
pub fn init() -> Result<()> {
    crate::eal::ensure("rte_pdump_init")?;
    // SAFETY: EAL initialised.
    unsafe { dpdk_sys::rte_pdump_init() }.rte_errno("rte_pdump_init")?;
    Ok(())
}

/// `rte_pdump_uninit`.
pub fn uninit() -> Result<()> {
    crate::eal::ensure("rte_pdump_uninit")?;
    // SAFETY: EAL initialised.
    unsafe { dpdk_sys::rte_pdump_uninit() }.rte_errno("rte_pdump_uninit")?;
    Ok(())
}
