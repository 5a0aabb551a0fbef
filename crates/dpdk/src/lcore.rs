//! Logical cores: ids, iteration, and launching closures on worker lcores.

use std::any::Any;
use std::ffi::{c_int, c_void};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex};

use crate::error::{DpdkError, Result, ToResult};

/// An EAL logical core id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LcoreId(pub u32);

impl fmt::Display for LcoreId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "lcore {}", self.0)
    }
}

/// The calling thread's lcore id; `None` on a non-EAL thread.
#[inline]
pub fn id() -> Option<LcoreId> {
    // SAFETY: reads a thread-local; no preconditions.
    let id = unsafe { dpdk_sys::dpdk_shim_lcore_id() };
    (id != dpdk_sys::LCORE_ID_ANY).then_some(LcoreId(id))
}

/// The main lcore (`rte_get_main_lcore`).
pub fn main_id() -> LcoreId {
    if !crate::Eal::is_initialized() {
        return LcoreId(0);
    }
    // SAFETY: EAL initialised.
    LcoreId(unsafe { dpdk_sys::rte_get_main_lcore() })
}

/// Number of enabled lcores, main included (0 before EAL init).
pub fn count() -> u32 {
    if !crate::Eal::is_initialized() {
        return 0;
    }
    // SAFETY: EAL initialised.
    unsafe { dpdk_sys::rte_lcore_count() }
}

/// NUMA socket of an lcore.
pub fn socket_id(lcore: LcoreId) -> u32 {
    // SAFETY: any id may be queried (out-of-range returns an invalid socket).
    unsafe { dpdk_sys::rte_lcore_to_socket_id(lcore.0) }
}

/// Enabled worker lcores (main excluded), in increasing order.
pub fn workers() -> impl Iterator<Item = LcoreId> {
    let ready = crate::Eal::is_initialized();
    let mut cur: u32 = u32::MAX; // rte_get_next_lcore(-1, ..) starts at 0
    std::iter::from_fn(move || {
        if !ready {
            return None;
        }
        // SAFETY: EAL initialised; skip_main=1, wrap=0 returns RTE_MAX_LCORE at the end.
        let next = unsafe { dpdk_sys::rte_get_next_lcore(cur, 1, 0) };
        if next >= dpdk_sys::RTE_MAX_LCORE {
            None
        } else {
            cur = next;
            Some(LcoreId(next))
        }
    })
}

/// Why a launched closure produced no value.
#[derive(Debug)]
pub enum LaunchError {
    /// The closure panicked; the panic message.
    Panicked(String),
    /// `rte_eal_wait_lcore` reported no result (should not happen).
    Lost,
}

impl fmt::Display for LaunchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LaunchError::Panicked(m) => write!(f, "lcore job panicked: {m}"),
            LaunchError::Lost => write!(f, "lcore job result lost"),
        }
    }
}

impl std::error::Error for LaunchError {}

type Slot<T> = Arc<Mutex<Option<std::thread::Result<T>>>>;
type Job = Box<dyn FnOnce() -> c_int + Send>;

/// Handle to a closure running on a worker lcore; [`LaunchHandle::wait`] joins it.
#[must_use = "wait() joins the lcore and reports panics"]
#[derive(Debug)]
pub struct LaunchHandle<T> {
    lcore: LcoreId,
    slot: Slot<T>,
}

extern "C" fn trampoline(arg: *mut c_void) -> c_int {
    // SAFETY: `arg` is the `Box<Job>` leaked by `launch_on`, handed to exactly one
    // lcore by rte_eal_remote_launch; we reclaim it exactly once here.
    let job: Box<Job> = unsafe { Box::from_raw(arg.cast::<Job>()) };
    // The job already catches panics of the user closure; this outer guard only
    // protects the FFI boundary (e.g. a panicking Drop of a captured value).
    catch_unwind(AssertUnwindSafe(move || (*job)())).unwrap_or(-1)
}

fn panic_message(p: &Box<dyn Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "non-string panic payload".to_string()
    }
}

/// Runs `f` on worker lcore `lcore` (`rte_eal_remote_launch`). Must be called from the
/// main lcore; the target lcore must be idle (`EBUSY` otherwise).
pub fn launch_on<F, T>(lcore: LcoreId, f: F) -> Result<LaunchHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    const OP: &str = "rte_eal_remote_launch";
    crate::eal::ensure(OP)?;
    if id() != Some(main_id()) {
        return Err(DpdkError::new(OP, libc::EPERM));
    }
    let slot: Slot<T> = Arc::new(Mutex::new(None));
    let slot2 = slot.clone();
    let job: Job = Box::new(move || {
        let r = catch_unwind(AssertUnwindSafe(f));
        let code = if r.is_ok() { 0 } else { -1 };
        *slot2.lock().unwrap_or_else(|e| e.into_inner()) = Some(r);
        code
    });
    let arg = Box::into_raw(Box::new(job));
    // SAFETY: EAL initialised and we are on the main lcore; `trampoline` has the
    // lcore_function_t ABI and takes ownership of `arg` exactly once if the launch
    // succeeds.
    let rc = unsafe { dpdk_sys::rte_eal_remote_launch(Some(trampoline), arg.cast(), lcore.0) };
    if let Err(e) = rc.neg_errno(OP) {
        // SAFETY: the launch failed, so no lcore received `arg`; reclaim it once.
        drop(unsafe { Box::from_raw(arg) });
        return Err(e);
    }
    Ok(LaunchHandle { lcore, slot })
}

impl<T> LaunchHandle<T> {
    /// The lcore running the job.
    pub fn lcore(&self) -> LcoreId {
        self.lcore
    }

    /// Waits for the job (`rte_eal_wait_lcore`, main lcore only) and returns its value,
    /// or the panic it raised.
    pub fn wait(self) -> std::result::Result<T, LaunchError> {
        if crate::Eal::is_initialized() && id() == Some(main_id()) {
            // SAFETY: EAL initialised, called on the main lcore.
            unsafe { dpdk_sys::rte_eal_wait_lcore(self.lcore.0) };
        } else {
            // Not on main: poll the slot instead.
            while self.slot.lock().map(|s| s.is_none()).unwrap_or(false) {
                std::thread::yield_now();
            }
        }
        let r = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take();
        match r {
            Some(Ok(v)) => Ok(v),
            Some(Err(p)) => Err(LaunchError::Panicked(panic_message(&p))),
            None => Err(LaunchError::Lost),
        }
    }
}

/// Waits for all worker lcores to finish (`rte_eal_mp_wait_lcore`; main lcore only).
pub fn wait_all() {
    if crate::Eal::is_initialized() && id() == Some(main_id()) {
        // SAFETY: EAL initialised, called on the main lcore.
        unsafe { dpdk_sys::rte_eal_mp_wait_lcore() };
    }
}
