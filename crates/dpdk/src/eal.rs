//! EAL initialisation and teardown.
//!
//! # Argument sets that work on this project's machines (DPDK 22.11, Debian)
//!
//! * memif server with hugepages:
//!   `-l 0 --file-prefix=kvd-s --vdev=net_memif0,role=server,socket=/tmp/kvd.sock,socket-abstract=no`
//! * memif client: the same with `role=client` and another `--file-prefix`.
//! * without hugepages add `--no-huge -m 512` (`--iova-mode=va` is the default
//!   with `--no-huge` for vdevs; passing it explicitly is harmless).
//! * tests: `--no-huge --iova-mode=va -m 256 --file-prefix=dpdk-test-<pid> --vdev=net_ring0`.
//!
//! No `-d` is needed: EAL auto-loads the PMD directory (`RTE_EAL_PMD_PATH`).

use std::ffi::{c_char, c_int, CString};
use std::sync::atomic::{AtomicU8, Ordering};

use crate::error::{DpdkError, Result, ToResult};

const UNINIT: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;
const CLEANED: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);

/// Proof that the EAL is initialised; dropping it runs `rte_eal_cleanup`.
///
/// Exactly one `Eal` exists per process. Keep it alive until every other DPDK object
/// (ports, queues, mbufs, rings, regions) is gone: after `rte_eal_cleanup` DPDK must not
/// be called again.
#[derive(Debug)]
pub struct Eal {
    _priv: (),
}

impl Eal {
    /// Initialises the EAL with `args` (EAL arguments *without* the program name, e.g.
    /// `["-l", "0-1", "--no-huge", "--vdev=net_ring0"]`); `argv[0]` is supplied from
    /// `std::env::args()`. Returns the handle whose `Drop` runs `rte_eal_cleanup`.
    ///
    /// Fails with `EALREADY` if called twice in a process (DPDK cannot re-init).
    pub fn init<S: AsRef<str>>(args: &[S]) -> Result<Eal> {
        if STATE
            .compare_exchange(UNINIT, BUSY, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return Err(DpdkError::new("rte_eal_init", libc::EALREADY));
        }
        let prog = std::env::args()
            .next()
            .unwrap_or_else(|| "dpdk".to_string());
        let mut owned = Vec::with_capacity(args.len() + 1);
        for a in std::iter::once(prog.as_str()).chain(args.iter().map(|a| a.as_ref())) {
            match CString::new(a) {
                Ok(c) => owned.push(c),
                Err(_) => {
                    STATE.store(UNINIT, Ordering::Release);
                    return Err(DpdkError::new("rte_eal_init", libc::EINVAL));
                }
            }
        }
        // EAL keeps pointers into argv for some options and permutes argv; give it
        // strings that live for the rest of the process (a few bytes, once).
        let leaked: &'static mut [*mut c_char] = Box::leak(
            owned
                .into_iter()
                .map(CString::into_raw)
                .chain(std::iter::once(std::ptr::null_mut()))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let argc = (leaked.len() - 1) as c_int;
        // SAFETY: argv is a NULL-terminated array of `argc` valid, NUL-terminated,
        // never-freed C strings; STATE guarantees this is the only rte_eal_init call.
        let ret = unsafe { dpdk_sys::rte_eal_init(argc, leaked.as_mut_ptr()) };
        match ret.rte_errno("rte_eal_init") {
            Ok(_) => {
                STATE.store(READY, Ordering::Release);
                Ok(Eal { _priv: () })
            }
            Err(e) => {
                // DPDK does not support a second rte_eal_init after a failed one either
                // (it sets its own run-once flag), so stay "busy".
                Err(e)
            }
        }
    }

    /// Whether [`Eal::init`] has succeeded and cleanup has not run.
    pub fn is_initialized() -> bool {
        STATE.load(Ordering::Acquire) == READY
    }

    /// `true` if this process is the DPDK primary process.
    pub fn is_primary(&self) -> bool {
        // SAFETY: EAL is initialised (we hold the Eal token).
        unsafe { dpdk_sys::rte_eal_process_type() == dpdk_sys::RTE_PROC_PRIMARY }
    }
}

impl Drop for Eal {
    fn drop(&mut self) {
        if STATE
            .compare_exchange(READY, CLEANED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            // SAFETY: EAL is initialised; we first wait for all worker lcores to finish
            // (must run on the main lcore, which is the thread that called init in the
            // usual single-main-thread program), then release EAL resources once.
            unsafe {
                if dpdk_sys::dpdk_shim_lcore_id() == dpdk_sys::rte_get_main_lcore() {
                    dpdk_sys::rte_eal_mp_wait_lcore();
                }
                dpdk_sys::rte_eal_cleanup();
            }
        }
    }
}

/// The DPDK library's version string, e.g. `DPDK 22.11.11`.
pub fn version() -> String {
    // SAFETY: rte_version returns a pointer to a static NUL-terminated string.
    let v = unsafe { std::ffi::CStr::from_ptr(dpdk_sys::rte_version()) };
    v.to_string_lossy().into_owned()
}

/// Returns `Err(ENODEV)`-style error unless the EAL is initialised.
pub(crate) fn ensure(op: &'static str) -> Result<()> {
    if Eal::is_initialized() {
        Ok(())
    } else {
        Err(DpdkError::new(op, libc::ENODEV))
    }
}
