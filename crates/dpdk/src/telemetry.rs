//! DPDK telemetry commands (`/usr/bin/dpdk-telemetry.py` or the
//! `/var/run/dpdk/<prefix>/dpdk_telemetry.v2` socket).
//!
//! DPDK 22.11 callbacks are plain C function pointers without user data, but they are
//! given the command name: one `extern "C"` trampoline looks the command up in a global
//! registry of Rust closures.

use std::ffi::{c_char, c_int, CStr};
use std::sync::{Arc, Mutex};

use crate::error::{cstring, DpdkError, Result, ToResult};

type Callback = Arc<dyn Fn(&str, &mut TelDict<'_>) + Send + Sync>;

static REGISTRY: Mutex<Vec<(String, Callback)>> = Mutex::new(Vec::new());

/// A dictionary response being built (`rte_tel_data` in dict mode).
pub struct TelDict<'a> {
    raw: *mut dpdk_sys::rte_tel_data,
    _life: std::marker::PhantomData<&'a mut ()>,
}

impl TelDict<'_> {
    /// Adds `name: value` (`rte_tel_data_add_dict_u64`). Names are limited to
    /// alphanumerics, `_`, `/`, `-`, `.` by DPDK (`EINVAL` otherwise); at most 256
    /// entries (`ENOSPC`).
    pub fn add_u64(&mut self, name: &str, value: u64) -> Result<()> {
        let c = cstring("rte_tel_data_add_dict_u64", name)?;
        // SAFETY: `raw` is the live rte_tel_data of the current callback (the TelDict
        // cannot escape it), started as a dict; valid C string (copied).
        unsafe { dpdk_sys::rte_tel_data_add_dict_u64(self.raw, c.as_ptr(), value) }
            .neg_errno("rte_tel_data_add_dict_u64")?;
        Ok(())
    }

    /// Adds `name: "value"` (`rte_tel_data_add_dict_string`). DPDK keeps at most
    /// [`MAX_STRING_LEN`]` - 1` bytes of the value: a longer one is cut there and the
    /// call reports `E2BIG` (the truncated entry is still added).
    pub fn add_str(&mut self, name: &str, value: &str) -> Result<()> {
        let n = cstring("rte_tel_data_add_dict_string", name)?;
        let v = cstring("rte_tel_data_add_dict_string", value)?;
        // SAFETY: as in add_u64.
        unsafe { dpdk_sys::rte_tel_data_add_dict_string(self.raw, n.as_ptr(), v.as_ptr()) }
            .neg_errno("rte_tel_data_add_dict_string")?;
        Ok(())
    }

    /// Adds `name: {...}`, a nested dictionary filled by `fill`
    /// (`rte_tel_data_add_dict_container`). DPDK 22.11 renders nested dicts at any
    /// depth, but an array can hold only flat arrays, not dicts.
    pub fn add_dict<F>(&mut self, name: &str, fill: F) -> Result<()>
    where
        F: FnOnce(&mut TelDict<'_>),
    {
        const OP: &str = "rte_tel_data_add_dict_container";
        let n = cstring(OP, name)?;
        let child = Container::alloc()?;
        // SAFETY: `child.raw` is a fresh container owned by `child`.
        unsafe { dpdk_sys::rte_tel_data_start_dict(child.raw) }.neg_errno(OP)?;
        fill(&mut TelDict {
            raw: child.raw,
            _life: std::marker::PhantomData,
        });
        // SAFETY: `self.raw` is a live dict; on success telemetry takes ownership of
        // the container (keep = 0: it frees it after rendering), so `child` must not
        // free it.
        unsafe { dpdk_sys::rte_tel_data_add_dict_container(self.raw, n.as_ptr(), child.raw, 0) }
            .neg_errno(OP)?;
        std::mem::forget(child);
        Ok(())
    }

    /// Adds `name: [v0, v1, ...]`, an array of u64 (at most [`MAX_ARRAY_ENTRIES`]
    /// values; `ENOSPC` beyond).
    pub fn add_u64_array(&mut self, name: &str, values: &[u64]) -> Result<()> {
        const OP: &str = "rte_tel_data_add_array_u64";
        self.add_array(name, dpdk_sys::RTE_TEL_U64_VAL, |raw| {
            for &v in values {
                // SAFETY: `raw` is a live container started as a u64 array.
                unsafe { dpdk_sys::rte_tel_data_add_array_u64(raw, v) }.neg_errno(OP)?;
            }
            Ok(())
        })
    }

    /// Adds `name: ["s0", "s1", ...]`, an array of strings (each cut at
    /// [`MAX_STRING_LEN`]` - 1` bytes).
    pub fn add_str_array<S: AsRef<str>>(&mut self, name: &str, values: &[S]) -> Result<()> {
        const OP: &str = "rte_tel_data_add_array_string";
        self.add_array(name, dpdk_sys::RTE_TEL_STRING_VAL, |raw| {
            for v in values {
                let c = cstring(OP, v.as_ref())?;
                // SAFETY: `raw` is a live container started as a string array; the
                // string is copied.
                unsafe { dpdk_sys::rte_tel_data_add_array_string(raw, c.as_ptr()) }
                    .neg_errno(OP)?;
            }
            Ok(())
        })
    }

    fn add_array<F>(&mut self, name: &str, ty: dpdk_sys::rte_tel_value_type, fill: F) -> Result<()>
    where
        F: FnOnce(*mut dpdk_sys::rte_tel_data) -> Result<()>,
    {
        const OP: &str = "rte_tel_data_add_dict_container";
        let n = cstring(OP, name)?;
        let child = Container::alloc()?;
        // SAFETY: `child.raw` is a fresh container owned by `child`.
        unsafe { dpdk_sys::rte_tel_data_start_array(child.raw, ty) }.neg_errno(OP)?;
        fill(child.raw)?;
        // SAFETY: as in add_dict.
        unsafe { dpdk_sys::rte_tel_data_add_dict_container(self.raw, n.as_ptr(), child.raw, 0) }
            .neg_errno(OP)?;
        std::mem::forget(child);
        Ok(())
    }
}

/// Longest string (NUL included) DPDK keeps in a dict entry or array.
pub const MAX_STRING_LEN: usize = dpdk_sys::RTE_TEL_MAX_STRING_LEN as usize;
/// Most entries of one dict.
pub const MAX_DICT_ENTRIES: usize = dpdk_sys::RTE_TEL_MAX_DICT_ENTRIES as usize;
/// Most entries of one array.
pub const MAX_ARRAY_ENTRIES: usize = dpdk_sys::RTE_TEL_MAX_ARRAY_ENTRIES as usize;

/// A container not yet handed to telemetry (freed on drop).
struct Container {
    raw: *mut dpdk_sys::rte_tel_data,
}

impl Container {
    fn alloc() -> Result<Container> {
        // SAFETY: no preconditions; returns NULL on allocation failure.
        let raw = unsafe { dpdk_sys::rte_tel_data_alloc() };
        if raw.is_null() {
            return Err(DpdkError::new("rte_tel_data_alloc", libc::ENOMEM));
        }
        Ok(Container { raw })
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        // SAFETY: `raw` came from rte_tel_data_alloc and was not handed to telemetry
        // (handing it over forgets the Container).
        unsafe { dpdk_sys::rte_tel_data_free(self.raw) };
    }
}

extern "C" fn trampoline(
    cmd: *const c_char,
    params: *const c_char,
    info: *mut dpdk_sys::rte_tel_data,
) -> c_int {
    let result = std::panic::catch_unwind(|| {
        if cmd.is_null() || info.is_null() {
            return -libc::EINVAL;
        }
        // SAFETY: telemetry passes the NUL-terminated registered command name.
        let cmd = unsafe { CStr::from_ptr(cmd) }.to_string_lossy();
        let params = if params.is_null() {
            String::new()
        } else {
            // SAFETY: non-null params is a NUL-terminated string owned by telemetry.
            unsafe { CStr::from_ptr(params) }
                .to_string_lossy()
                .into_owned()
        };
        let cb = {
            let reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
            reg.iter().find(|(n, _)| *n == cmd).map(|(_, c)| c.clone())
        };
        let Some(cb) = cb else { return -libc::ENOENT };
        // SAFETY: `info` is the response object for this call.
        unsafe { dpdk_sys::rte_tel_data_start_dict(info) };
        let mut d = TelDict {
            raw: info,
            _life: std::marker::PhantomData,
        };
        cb(&params, &mut d);
        0
    });
    result.unwrap_or(-libc::EIO)
}

/// Registers a telemetry command `name` (must start with `/`, e.g. `/kvd/stats`) whose
/// callback fills a dict of `(name, u64)` pairs. The callback runs on DPDK's telemetry
/// thread (not an lcore): read counters with atomics, take no locks the workers take.
/// `params` is the text after the comma in `/cmd,params`.
///
/// May be called before or after [`crate::Eal::init`]; re-registering a name is
/// `EEXIST`.
pub fn register_cmd<F>(name: &str, help: &str, callback: F) -> Result<()>
where
    F: Fn(&str, &mut TelDict<'_>) + Send + Sync + 'static,
{
    const OP: &str = "rte_telemetry_register_cmd";
    let cname = cstring(OP, name)?;
    let chelp = cstring(OP, help)?;
    let mut reg = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    if reg.iter().any(|(n, _)| n == name) {
        return Err(DpdkError::new(OP, libc::EEXIST));
    }
    // Telemetry may keep the pointers: leak the two short strings (once per command).
    let cname: &'static CStr = Box::leak(cname.into_boxed_c_str());
    let chelp: &'static CStr = Box::leak(chelp.into_boxed_c_str());
    // SAFETY: 'static C strings; `trampoline` has the telemetry_cb ABI and never unwinds.
    unsafe {
        dpdk_sys::rte_telemetry_register_cmd(cname.as_ptr(), Some(trampoline), chelp.as_ptr())
    }
    .neg_errno(OP)?;
    reg.push((name.to_string(), Arc::new(callback)));
    Ok(())
}
