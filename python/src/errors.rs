//! The exception hierarchy and the mapping of kvclient's errors onto it.
//!
//! ```text
//! Exception
//! └── kvdirect.Error                 anything the client reports (bad response, socket I/O)
//!     ├── kvdirect.UnreachableError  connect timeout, request timeout, connection lost,
//!     │                              no result in time (.reason: "connect_timeout",
//!     │                              "timeout", "connection_lost", "deadline")
//!     ├── kvdirect.StatusError       the server answered with an error status
//!     │                              (.status: "not_found", "bad_length", ...)
//!     ├── kvdirect.TransactionAborted a transaction did not commit (.reason, .op,
//!     │                              .status, .results)
//!     └── kvdirect.ConfigError       bad configuration file/arguments, no such interface,
//!                                    no QP for a key's partition
//! PermissionError                    no permission for a raw socket on the interface
//! RuntimeError                       a call from another thread than the client's
//! TypeError / ValueError             bad arguments (wrong types, empty key, an operation
//!                                    too large for one request packet)
//! ```

use kvclient::{EndpointError, KernelError};
use pyo3::exceptions::{PyException, PyPermissionError, PyValueError};
use pyo3::prelude::*;

pyo3::create_exception!(
    kvdirect,
    Error,
    PyException,
    "Base class of the errors of kvdirect."
);
pyo3::create_exception!(
    kvdirect,
    UnreachableError,
    Error,
    "The server did not answer: connect timeout, request timeout (after the \
     transport's retransmissions), connection lost, or no result within the \
     client's timeout. The outcome of the operation is unknown. `.reason` is one of \
     \"connect_timeout\", \"timeout\", \"connection_lost\", \"deadline\"."
);
pyo3::create_exception!(
    kvdirect,
    StatusError,
    Error,
    "The server answered the operation with an error status; `.status` is its name \
     (\"not_found\", \"bad_length\", \"out_of_memory\", \"value_too_large\", ...)."
);
pyo3::create_exception!(
    kvdirect,
    TransactionAborted,
    Error,
    "A transaction did not commit; nothing of it changed. `.reason` (\"condition_failed\", \
     \"op_failed\", \"writes_refused\", \"cross_partition\", \"too_large\", \
     \"malformed\"), `.op` (the op concerned, or None), `.status` (its status name) and \
     `.results` (per op: what a GET read, None for the rest)."
);
pyo3::create_exception!(
    kvdirect,
    ConfigError,
    Error,
    "Bad configuration: unreadable config file, inconsistent endpoint arguments, no \
     such network interface, or no QP serving a key's partition."
);

/// `err` with attribute `name` set to `value` (best effort: an exception instance
/// always takes attributes).
fn with_attr(py: Python<'_>, err: PyErr, name: &str, value: &str) -> PyErr {
    let _ = err.value(py).setattr(name, value);
    err
}

/// The Python exception of an operation's error.
pub fn op_error(py: Python<'_>, e: kvclient::Error) -> PyErr {
    use kvclient::Error as E;
    let unreachable = |reason: &str, msg: &str| {
        with_attr(
            py,
            UnreachableError::new_err(msg.to_string()),
            "reason",
            reason,
        )
    };
    match e {
        E::Timeout => unreachable(
            "timeout",
            "no response from the server after the transport's retransmissions \
             (outcome unknown; the QP reconnects on next use)",
        ),
        E::ConnectionLost => unreachable(
            "connection_lost",
            "connection lost while the operation was in flight (outcome unknown)",
        ),
        E::ConnectTimeout => unreachable(
            "connect_timeout",
            "the server did not accept the connection in time",
        ),
        E::Deadline => unreachable(
            "deadline",
            "no result within the client's timeout (outcome unknown)",
        ),
        E::NotExecuted => unreachable(
            "not_executed",
            "not executed: the server had closed the connection (send it again)",
        ),
        E::Status(s) => with_attr(
            py,
            StatusError::new_err(format!("server status {}", s.name())),
            "status",
            s.name(),
        ),
        E::TooLarge => PyValueError::new_err(
            "the operation does not fit in one request packet (key + value too large \
             for the link's MTU)",
        ),
        E::Invalid(p) => PyValueError::new_err(format!("the operation cannot be encoded: {p:?}")),
        E::BadResponse => Error::new_err("malformed response from the server"),
        E::NoQp => {
            ConfigError::new_err("no QP serves the key's partition (check `partitions` and `qps`)")
        }
    }
}

/// The Python exception of a kernel socket error on `iface`.
pub fn kernel_error(e: KernelError, iface: &str) -> PyErr {
    match e {
        KernelError::NoSuchInterface { name, available } => ConfigError::new_err(format!(
            "no such network interface {name:?} (available here: {})",
            if available.is_empty() {
                "none".to_string()
            } else {
                available.join(", ")
            }
        )),
        KernelError::PermissionDenied { iface } => PyPermissionError::new_err(format!(
            "no permission to open a raw (AF_PACKET) socket on interface {iface:?}: \
             needs root or CAP_NET_RAW"
        )),
        KernelError::Io(io) => Error::new_err(format!("interface {iface:?}: {io}")),
    }
}

/// The Python exception of an endpoint error (configuration, socket, connect).
pub fn endpoint_error(py: Python<'_>, e: EndpointError, iface: &str, server: &str) -> PyErr {
    match e {
        EndpointError::Config(msg) => ConfigError::new_err(msg),
        EndpointError::Kernel(k) => kernel_error(k, iface),
        EndpointError::Unreachable(kvclient::Error::ConnectTimeout) => with_attr(
            py,
            UnreachableError::new_err(format!(
                "server {server} not reachable via interface {iface:?}: not every QP was \
                 accepted within the connect timeout"
            )),
            "reason",
            "connect_timeout",
        ),
        EndpointError::Unreachable(other) => op_error(py, other),
    }
}
