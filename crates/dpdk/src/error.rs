//! Error type: a DPDK errno plus the name of the failed operation.

use std::ffi::CStr;
use std::fmt;

/// A failed DPDK call: which operation, and the (positive) errno it reported.
///
/// `Display` renders DPDK's `rte_strerror` text, which also knows DPDK's own codes
/// (`E_RTE_SECONDARY`, `E_RTE_NO_CONFIG`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DpdkError {
    /// The DPDK function (or wrapper operation) that failed.
    pub op: &'static str,
    /// Positive errno value.
    pub errno: i32,
}

/// `Result` with [`DpdkError`].
pub type Result<T, E = DpdkError> = std::result::Result<T, E>;

impl DpdkError {
    /// An error with an explicit errno.
    pub const fn new(op: &'static str, errno: i32) -> Self {
        DpdkError { op, errno }
    }

    /// An error from the calling thread's `rte_errno`.
    pub fn last(op: &'static str) -> Self {
        let e = rte_errno();
        DpdkError {
            op,
            errno: if e == 0 { libc::EINVAL } else { e },
        }
    }

    /// `rte_strerror` text for this error.
    pub fn message(&self) -> String {
        // SAFETY: rte_strerror accepts any int and returns a pointer to a NUL-terminated
        // string (static, or in a thread-local buffer valid until the next call on this
        // thread); we copy it out immediately.
        unsafe {
            let p = dpdk_sys::rte_strerror(self.errno);
            if p.is_null() {
                return format!("errno {}", self.errno);
            }
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    }
}

impl fmt::Display for DpdkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {} (errno {})", self.op, self.message(), self.errno)
    }
}

impl std::error::Error for DpdkError {}

/// The calling thread's `rte_errno`.
pub fn rte_errno() -> i32 {
    // SAFETY: reads a thread-local int; no preconditions.
    unsafe { dpdk_sys::dpdk_shim_errno() }
}

/// Turns C return conventions into `Result`.
pub(crate) trait ToResult {
    /// The success value.
    type Ok;
    /// ethdev style: a negative return is `-errno`.
    fn neg_errno(self, op: &'static str) -> Result<Self::Ok>;
    /// EAL style: a negative return means "see `rte_errno`".
    fn rte_errno(self, op: &'static str) -> Result<Self::Ok>;
}

impl ToResult for i32 {
    type Ok = i32;
    fn neg_errno(self, op: &'static str) -> Result<i32> {
        if self < 0 {
            Err(DpdkError::new(op, -self))
        } else {
            Ok(self)
        }
    }
    fn rte_errno(self, op: &'static str) -> Result<i32> {
        if self < 0 {
            Err(DpdkError::last(op))
        } else {
            Ok(self)
        }
    }
}

impl<T> ToResult for *mut T {
    type Ok = std::ptr::NonNull<T>;
    fn neg_errno(self, op: &'static str) -> Result<Self::Ok> {
        self.rte_errno(op)
    }
    fn rte_errno(self, op: &'static str) -> Result<Self::Ok> {
        std::ptr::NonNull::new(self).ok_or_else(|| DpdkError::last(op))
    }
}

impl<T> ToResult for *const T {
    type Ok = std::ptr::NonNull<T>;
    fn neg_errno(self, op: &'static str) -> Result<Self::Ok> {
        self.rte_errno(op)
    }
    fn rte_errno(self, op: &'static str) -> Result<Self::Ok> {
        std::ptr::NonNull::new(self as *mut T).ok_or_else(|| DpdkError::last(op))
    }
}

/// Converts a Rust string to a C string for DPDK names (errno `EINVAL` on interior NUL).
pub(crate) fn cstring(op: &'static str, s: &str) -> Result<std::ffi::CString> {
    std::ffi::CString::new(s).map_err(|_| DpdkError::new(op, libc::EINVAL))
}
