//! `kvdirect`: Python bindings of the KV-Direct client (`kvclient`) over the
//! kernel transport (an AF_PACKET socket on one network interface).
//!
//! ```python
//! import kvdirect
//! c = kvdirect.Client("kvtap0", config="configs/tap.json")
//! c.put(b"k", b"v"); assert c.get(b"k") == b"v"
//! c.batch([("put", b"a", b"1"), ("get", b"a"), ("delete", b"a")])
//! ```
//!
//! See `python/README.md` for the whole API; [`errors`] for the exceptions.

mod client;
mod convert;
mod errors;
mod pipeline;
mod txn;
mod vector;

use pyo3::prelude::*;

/// KV-Direct client: `Client(iface, config=...)` with `get`, `put`, `delete`,
/// `incr`, `cas`, the vector ops, `batch`, `pipeline` (also transactions) and
/// `stats`; exceptions `Error`, `UnreachableError`, `StatusError`,
/// `TransactionAborted`, `ConfigError`.
#[pymodule]
fn kvdirect(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<client::Client>()?;
    m.add_class::<pipeline::Pipeline>()?;
    m.add("Error", py.get_type::<errors::Error>())?;
    m.add(
        "UnreachableError",
        py.get_type::<errors::UnreachableError>(),
    )?;
    m.add("StatusError", py.get_type::<errors::StatusError>())?;
    m.add(
        "TransactionAborted",
        py.get_type::<errors::TransactionAborted>(),
    )?;
    m.add("ConfigError", py.get_type::<errors::ConfigError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
