//! `kvdirect.Client`: a kvclient [`kvclient::Client`] over the kernel transport
//! ([`KernelIo`], an AF_PACKET socket on one interface).
//!
//! # Threads and the GIL
//!
//! `kvclient::Client` is not `Send` (it keeps a `Box<dyn FnMut() -> u64>` clock).
//! Rather than an `unsendable` Python class (whose use from another thread is a
//! Rust panic), each Rust client lives in a registry local to the thread that
//! created it ([`CLIENTS`]); the Python object holds only its id and that thread's
//! id. A call from another thread is refused with `RuntimeError`. Since the
//! client never leaves its thread, the network waits run with the GIL released
//! (`Python::detach` runs the closure on the same thread, and the closure
//! captures only `Send` data: the id, the operation, the result slots).

use crate::convert::{self, Kind};
use crate::errors::{self, Error as KvError};
use crate::vector::{self, Shape};
use kvclient::{kernel_client_config, Endpoint, KernelIo, Op, Reply, Ticket};
use kvwire::Status;
use pyo3::exceptions::PyRuntimeError;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::{self, ThreadId};
use std::time::{Duration, Instant};

thread_local! {
    /// The clients created on this thread, by id.
    static CLIENTS: RefCell<HashMap<u64, kvclient::Client<KernelIo>>> =
        RefCell::new(HashMap::new());
}

/// Ids of [`CLIENTS`] entries (never reused).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Why [`with_client`] could not run.
pub(crate) enum Access {
    /// No such client on this thread (closed).
    Closed,
    /// The registry is in use (cannot happen: nothing re-enters it) or gone
    /// (thread exit).
    Busy,
}

/// Runs `f` on client `id` of this thread's registry.
pub(crate) fn with_client<R>(
    id: u64,
    f: impl FnOnce(&mut kvclient::Client<KernelIo>) -> R,
) -> Result<R, Access> {
    CLIENTS
        .try_with(|m| {
            let mut m = m.try_borrow_mut().map_err(|_| Access::Busy)?;
            m.get_mut(&id).map(f).ok_or(Access::Closed)
        })
        .map_err(|_| Access::Busy)?
}

/// A KV-Direct client on one network interface.
///
/// `Client(iface, config=None, *, server_ip=None, server_mac=None, client_ip=None,
/// client_mac=None, qps=None, partitions=None, udp_src_port=None, timeout=None,
/// connect_timeout=None)`
///
/// The endpoint comes from a configuration file (`config`: the dataplane's MAC/IP
/// are the server's, the pktgen's are this client's, the dataplane's worker count
/// the partitions), or from the keyword arguments alone (then `server_ip`,
/// `server_mac`, `client_ip` and `client_mac` are required); keyword arguments given
/// with `config` override its values. The server opens one QP per partition for the
/// client (docs/PROTOCOL.md §6.1) unless `qps` names static ones.
/// `timeout` (seconds) bounds each blocking operation and a batch's wait for
/// progress, `connect_timeout` (seconds) the connection set-up. Connects every QP
/// before returning (`kvdirect.UnreachableError` if the server does not answer).
///
/// Keys are `bytes`, `bytearray` or `str` (UTF-8), never empty; values the same or
/// an `int` (stored as 8 bytes little-endian, the form `incr`/`cas` work on).
/// Results are `bytes`. The client belongs to the thread that created it (other
/// threads get `RuntimeError`); it releases the GIL while it waits for the network.
#[pyclass(module = "kvdirect", name = "Client")]
pub struct Client {
    /// Key of the Rust client in the owner thread's [`CLIENTS`].
    pub(crate) id: u64,
    /// The thread that created it.
    owner: ThreadId,
    endpoint: Endpoint,
    op_timeout_ns: u64,
    /// `get` results as `str` (UTF-8) instead of `bytes` (redis-py's
    /// `decode_responses`).
    pub(crate) decode: bool,
}

impl Drop for Client {
    fn drop(&mut self) {
        // On another thread the entry stays until the owner thread exits (its
        // registry is dropped then).
        if thread::current().id() == self.owner {
            let _ = CLIENTS.try_with(|m| m.try_borrow_mut().map(|mut m| m.remove(&self.id)));
        }
    }
}

/// Optional keyword arguments of `Client(...)` that override or replace the
/// configuration file.
struct Overrides<'a, 'py> {
    server_ip: Option<&'a Bound<'py, PyAny>>,
    server_mac: Option<&'a Bound<'py, PyAny>>,
    client_ip: Option<&'a Bound<'py, PyAny>>,
    client_mac: Option<&'a Bound<'py, PyAny>>,
    qps: Option<&'a Bound<'py, PyAny>>,
    partitions: Option<&'a Bound<'py, PyAny>>,
    udp_src_port: Option<&'a Bound<'py, PyAny>>,
}

impl Overrides<'_, '_> {
    /// The endpoint from the arguments alone (no configuration file).
    fn endpoint(&self, iface: &str) -> PyResult<Endpoint> {
        let missing: Vec<&str> = [
            ("server_ip", self.server_ip.is_none()),
            ("server_mac", self.server_mac.is_none()),
            ("client_ip", self.client_ip.is_none()),
            ("client_mac", self.client_mac.is_none()),
        ]
        .into_iter()
        .filter_map(|(n, m)| m.then_some(n))
        .collect();
        if !missing.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "Client(): without config=, the endpoint needs server_ip, server_mac, \
                 client_ip and client_mac (missing: {})",
                missing.join(", ")
            )));
        }
        let mut ep = Endpoint {
            iface: iface.to_string(),
            client_mac: [0; 6],
            client_ip: std::net::Ipv4Addr::UNSPECIFIED,
            server_mac: [0; 6],
            server_ip: std::net::Ipv4Addr::UNSPECIFIED,
            udp_src_port: 0xC000,
            partitions: 1,
            qps: Vec::new(),
            credentials: None,
            nodes: Vec::new(),
        };
        self.apply(&mut ep)?;
        Ok(ep)
    }

    /// Overrides the fields of `ep` that were given.
    fn apply(&self, ep: &mut Endpoint) -> PyResult<()> {
        if let Some(v) = self.server_ip {
            ep.server_ip = convert::ipv4(v, "server_ip")?;
        }
        if let Some(v) = self.server_mac {
            ep.server_mac = convert::mac(v, "server_mac")?;
        }
        if let Some(v) = self.client_ip {
            ep.client_ip = convert::ipv4(v, "client_ip")?;
        }
        if let Some(v) = self.client_mac {
            ep.client_mac = convert::mac(v, "client_mac")?;
        }
        // Static QPs only when given: otherwise the server opens this client's QPs.
        ep.qps = match self.qps {
            Some(v) => convert::qps(v)?,
            None => Vec::new(),
        };
        if let Some(p) = self.partitions {
            // At most the QPN space: a partition count beyond it serves nothing.
            ep.partitions = convert::int_in(p, "partitions", 1, 1 << 24)? as u32;
        }
        if let Some(p) = self.udp_src_port {
            ep.udp_src_port = convert::int_in(p, "udp_src_port", 0, 0xFFFF)? as u16;
        }
        Ok(())
    }
}

/// Formats a MAC address.
fn mac_str(m: &[u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// A little-endian word of up to 8 bytes.
fn le_u64(v: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    let n = v.len().min(8);
    b[..n].copy_from_slice(&v[..n]);
    u64::from_le_bytes(b)
}

/// The Python value of one operation's reply.
pub(crate) fn reply_value<'py>(
    py: Python<'py>,
    kind: Kind,
    r: Result<Reply, kvclient::Error>,
    decode: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let r = r.map_err(|e| errors::op_error(py, e))?;
    let fail = |s: Status| Err(errors::op_error(py, kvclient::Error::Status(s)));
    match (kind, r.status) {
        // A value that is not UTF-8 raises UnicodeDecodeError, as in redis-py.
        (Kind::Get, Status::Ok) if decode => {
            PyBytes::new(py, &r.value).call_method1("decode", ("utf-8",))
        }
        (Kind::Get, Status::Ok) => Ok(PyBytes::new(py, &r.value).into_any()),
        (Kind::Get, Status::NotFound) => Ok(py.None().into_bound(py)),
        (Kind::Put, Status::Ok) => Ok(py.None().into_bound(py)),
        (Kind::Delete, Status::Ok | Status::NotFound) => {
            Ok(PyBool::new(py, r.status == Status::Ok)
                .to_owned()
                .into_any())
        }
        // Counters are signed 64-bit two's complement, as every client shows them
        // (docs/CLIENTS.md).
        (Kind::Incr(delta), Status::Ok) => Ok((le_u64(&r.value).wrapping_add(delta) as i64)
            .into_pyobject(py)?
            .into_any()),
        (Kind::Cas, Status::Ok) => Ok((le_u64(&r.value) as i64).into_pyobject(py)?.into_any()),
        (Kind::CompareDelete(expected), Status::Ok | Status::NotFound) => {
            let deleted = r.status == Status::Ok && r.value == expected;
            Ok(PyBool::new(py, deleted).to_owned().into_any())
        }
        (Kind::Elems(shape) | Kind::VGet(shape), Status::Ok) => shape.to_list(py, &r.value),
        (Kind::VGet(_), Status::NotFound) => Ok(py.None().into_bound(py)),
        (Kind::Elem(shape), Status::Ok) => shape.to_int(py, &r.value),
        (_, s) => fail(s),
    }
}

impl Client {
    /// Runs `f` on the Rust client: only on the owner thread, only while open.
    pub(crate) fn with<R>(
        &self,
        f: impl FnOnce(&mut kvclient::Client<KernelIo>) -> R,
    ) -> PyResult<R> {
        if thread::current().id() != self.owner {
            return Err(PyRuntimeError::new_err(
                "this kvdirect.Client belongs to the thread that created it; create \
                 one client per thread (on distinct QPs)",
            ));
        }
        with_client(self.id, f).map_err(|e| match e {
            Access::Closed => KvError::new_err("the client is closed"),
            Access::Busy => KvError::new_err("the client is in use"),
        })
    }

    /// Runs one operation to completion, with the GIL released while it waits.
    fn run<'py>(&self, py: Python<'py>, kind: Kind, op: Op) -> PyResult<Bound<'py, PyAny>> {
        self.with(|_| ())?; // thread and open checks, with the GIL
        let id = self.id;
        let r = py.detach(move || with_client(id, |c| c.exec(op)));
        match r {
            Ok(r) => reply_value(py, kind, r, self.decode),
            Err(_) => Err(KvError::new_err("the client is closed")),
        }
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (iface, config=None, *, server_ip=None, server_mac=None,
        client_ip=None, client_mac=None, qps=None, partitions=None, udp_src_port=None,
        timeout=None, connect_timeout=None, decode_responses=false, tenant_file=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        iface: &Bound<'_, PyAny>,
        config: Option<&Bound<'_, PyAny>>,
        server_ip: Option<&Bound<'_, PyAny>>,
        server_mac: Option<&Bound<'_, PyAny>>,
        client_ip: Option<&Bound<'_, PyAny>>,
        client_mac: Option<&Bound<'_, PyAny>>,
        qps: Option<&Bound<'_, PyAny>>,
        partitions: Option<&Bound<'_, PyAny>>,
        udp_src_port: Option<&Bound<'_, PyAny>>,
        timeout: Option<&Bound<'_, PyAny>>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        decode_responses: bool,
        tenant_file: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let iface: String = iface.extract().map_err(|_| {
            PyTypeError::new_err(format!(
                "iface: expected the interface name as str, not {}",
                convert::type_name(iface)
            ))
        })?;
        if iface.is_empty() || iface.len() > 15 || iface.contains(['/', '\0']) {
            return Err(PyValueError::new_err(format!(
                "iface: {iface:?} is not a network interface name"
            )));
        }
        let over = Overrides {
            server_ip,
            server_mac,
            client_ip,
            client_mac,
            qps,
            partitions,
            udp_src_port,
        };
        let endpoint = match config {
            Some(c) => {
                let path: PathBuf = c.extract().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "config: expected a path (str or os.PathLike), not {}",
                        convert::type_name(c)
                    ))
                })?;
                let mut ep = Endpoint::from_config(&path, &iface).map_err(|e| {
                    errors::endpoint_error(py, e, &iface, "(from the configuration)")
                })?;
                over.apply(&mut ep)?;
                ep
            }
            None => over.endpoint(&iface)?,
        };
        let mut endpoint = endpoint;
        // The tenant credentials: `tenant_file=`, else $KVD_TENANT_FILE (never the
        // secret itself as an argument).
        let tenant_path: Option<PathBuf> = match tenant_file {
            Some(f) => Some(f.extract().map_err(|_| {
                PyTypeError::new_err("tenant_file: expected a path (str or os.PathLike)")
            })?),
            None => std::env::var_os("KVD_TENANT_FILE").map(PathBuf::from),
        };
        if let Some(p) = tenant_path {
            if !endpoint.qps.is_empty() {
                return Err(PyValueError::new_err(
                    "tenant_file opens QPs for the tenant: give no qps",
                ));
            }
            endpoint.credentials =
                Some(kvclient::Credentials::load(&p).map_err(errors::ConfigError::new_err)?);
        }
        let mut cfg = kernel_client_config();
        cfg.partitions = endpoint.partitions.max(1);
        if let Some(t) = timeout {
            cfg.op_timeout_ns = convert::seconds(t, "timeout")?;
        }
        if let Some(t) = connect_timeout {
            cfg.connect_timeout_ns = convert::seconds(t, "connect_timeout")?;
        }
        let server = format!("{} ({})", endpoint.server_ip, mac_str(&endpoint.server_mac));
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        // Connecting waits for the server: without the GIL. The client goes
        // straight into this thread's registry (it cannot leave the thread).
        let connected = py.detach(|| {
            let c = endpoint.connect(cfg)?;
            Ok(CLIENTS.try_with(|m| {
                m.try_borrow_mut().map(|mut m| {
                    m.insert(id, c);
                })
            }))
        });
        match connected {
            Ok(Ok(Ok(()))) => {}
            Ok(_) => {
                return Err(KvError::new_err(
                    "cannot register the client on this thread",
                ))
            }
            Err(e) => return Err(errors::endpoint_error(py, e, &endpoint.iface, &server)),
        }
        Ok(Client {
            id,
            owner: thread::current().id(),
            endpoint,
            op_timeout_ns: cfg.op_timeout_ns,
            decode: decode_responses,
        })
    }

    /// `get(key) -> bytes | None`: the value, or `None` if the key is absent.
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "get")?;
        self.run(py, Kind::Get, Op::Get { key })
    }

    /// `put(key, value) -> None`: stores `value` (bytes, bytearray, str, or an int as
    /// 8 bytes little-endian) under `key`.
    fn put<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "put")?;
        let value = convert::value(value, "put")?;
        self.run(py, Kind::Put, Op::Put { key, value })
    }

    /// `delete(key) -> bool`: removes `key`; whether it was present.
    fn delete<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "delete")?;
        self.run(py, Kind::Delete, Op::Delete { key })
    }

    /// `compare_delete(key, value) -> bool`: deletes `key` only if it holds `value`
    /// (releasing a lock only its owner holds); whether it did (`False` also for an
    /// absent key).
    fn compare_delete<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "compare_delete")?;
        let expected = convert::value(value, "compare_delete")?;
        let kind = Kind::CompareDelete(expected.clone());
        self.run(py, kind, Op::CompareDelete { key, expected })
    }

    /// `incr(key, delta=1) -> int`: atomic fetch-and-add on the 8-byte little-endian
    /// counter stored under `key`; returns the new value (signed 64-bit). A negative
    /// `delta` subtracts. A missing counter is created with value `delta` (Redis's
    /// INCR; a transaction that commits only if the key is still absent, so no
    /// concurrent increment is lost); a value that is not 8 bytes is `StatusError`
    /// "bad_length".
    #[pyo3(signature = (key, delta=None))]
    fn incr<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        delta: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "incr")?;
        let delta = match delta {
            Some(d) => convert::word(d, "incr")?,
            None => 1,
        };
        self.with(|_| ())?; // thread and open checks, with the GIL
        let id = self.id;
        let old = py
            .detach(move || with_client(id, |c| c.incr(&key, delta)))
            .map_err(|_| KvError::new_err("the client is closed"))?
            .map_err(|e| errors::op_error(py, e))?;
        Ok((old.wrapping_add(delta) as i64)
            .into_pyobject(py)?
            .into_any())
    }

    /// `cas(key, expected, new) -> int`: atomic compare-and-swap on the 8-byte
    /// little-endian word under `key`; returns the original value (the swap
    /// happened iff it equals `expected`).
    fn cas<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        expected: &Bound<'py, PyAny>,
        new: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "cas")?;
        let expected = convert::word(expected, "cas")?;
        let new = convert::word(new, "cas")?;
        self.run(py, Kind::Cas, convert::cas_op(key, expected, new))
    }

    /// `batch(ops, *, return_exceptions=False) -> list`: runs many operations
    /// pipelined (many per packet, many packets in flight) and returns their
    /// results in order.
    ///
    /// Each op is a tuple: `("get", key)`, `("put", key, value)`, `("delete", key)`,
    /// `("incr", key[, delta])`, `("cas", key, expected, new)`; its result is what
    /// the method of the same name returns. Operations on the same key run in the
    /// order given; operations on different keys may run in any order. All ops are
    /// checked before anything is sent (a bad op raises `TypeError`/`ValueError`
    /// naming its index). If an op fails, the first failure is raised once every op
    /// has finished (with `.index` set to its position), unless
    /// `return_exceptions=True`, which puts the exception objects in the list in
    /// place of results.
    #[pyo3(signature = (ops, *, return_exceptions=false))]
    fn batch<'py>(
        &self,
        py: Python<'py>,
        ops: &Bound<'py, PyAny>,
        return_exceptions: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        self.batch_list(py, ops, return_exceptions)
    }

    /// `vput(key, elements, *, width=8) -> None`: stores the ints as a vector of
    /// `width`-byte little-endian elements (what the vector operations work on).
    #[pyo3(signature = (key, elements, *, width=8))]
    fn vput<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        elements: &Bound<'py, PyAny>,
        width: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "vput")?;
        let value = Shape::new(width, false, "vput")?.vector(elements, "vput")?;
        self.run(py, Kind::Put, Op::Put { key, value })
    }

    /// `vget(key, *, width=8, signed=False) -> list[int] | None`: the vector's
    /// elements, or `None` if the key is absent.
    #[pyo3(signature = (key, *, width=8, signed=false))]
    fn vget<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        width: usize,
        signed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "vget")?;
        let shape = Shape::new(width, signed, "vget")?;
        self.run(py, Kind::VGet(shape), Op::Get { key })
    }

    /// `vupdate(key, func, param, param2=0, *, width=8, signed=False) -> list[int]`:
    /// applies `func` (`"add"`, `"sub"`, `"swap"`, `"cas"`, `"min"`, `"max"`,
    /// `"and"`, `"or"`, `"xor"` or an id, user functions 128-255) with the
    /// parameter(s) to every element atomically (UPDATE_S2V); returns the original
    /// elements.
    #[pyo3(signature = (key, func, param, param2=None, *, width=8, signed=false))]
    #[allow(clippy::too_many_arguments)]
    fn vupdate<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        param: &Bound<'py, PyAny>,
        param2: Option<&Bound<'py, PyAny>>,
        width: usize,
        signed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "vupdate")?;
        let shape = Shape::new(width, signed, "vupdate")?;
        let op = Op::UpdateS2V {
            key,
            atomic: shape.atomic(vector::func_id(func, "vupdate")?),
            param: shape.elem(param, "vupdate param")?,
            param2: param2.map_or(Ok(0), |p| shape.elem(p, "vupdate param2"))?,
        };
        self.run(py, Kind::Elems(shape), op)
    }

    /// `vapply(key, func, deltas, *, width=8, signed=False) -> list[int]`: applies
    /// `func` element by element with the matching delta (UPDATE_V2V: element i
    /// becomes `func(x_i, deltas[i])`); returns the original elements.
    #[pyo3(signature = (key, func, deltas, *, width=8, signed=false))]
    fn vapply<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        func: &Bound<'py, PyAny>,
        deltas: &Bound<'py, PyAny>,
        width: usize,
        signed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "vapply")?;
        let shape = Shape::new(width, signed, "vapply")?;
        let op = Op::UpdateV2V {
            key,
            atomic: shape.atomic(vector::func_id(func, "vapply")?),
            delta: shape.vector(deltas, "vapply deltas")?,
        };
        self.run(py, Kind::Elems(shape), op)
    }

    /// `reduce(key, func="add", *, init=0, width=8, signed=False) -> int`: folds
    /// the elements with `func` from `init` (REDUCE), e.g. their sum or maximum.
    #[pyo3(signature = (key, func=None, *, init=None, width=8, signed=false))]
    fn reduce<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        func: Option<&Bound<'py, PyAny>>,
        init: Option<&Bound<'py, PyAny>>,
        width: usize,
        signed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "reduce")?;
        let shape = Shape::new(width, signed, "reduce")?;
        let f = func.map_or(Ok(kvwire::payload::func::FETCH_ADD), |f| {
            vector::func_id(f, "reduce")
        })?;
        let op = Op::Reduce {
            key,
            atomic: shape.atomic(f),
            init: init.map_or(Ok(0), |i| shape.elem(i, "reduce init"))?,
        };
        self.run(py, Kind::Elem(shape), op)
    }

    /// `filter(key, pred, param, *, width=8, signed=False) -> list[int]`: the
    /// elements `x` for which `pred(x, param)` holds (`"eq"`, `"ne"`, `"lt"`,
    /// `"le"`, `"gt"`, `"ge"`, `"any"` (x & param != 0) or an id), in order.
    #[pyo3(signature = (key, pred, param, *, width=8, signed=false))]
    fn filter<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        pred: &Bound<'py, PyAny>,
        param: &Bound<'py, PyAny>,
        width: usize,
        signed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "filter")?;
        let shape = Shape::new(width, signed, "filter")?;
        let op = Op::Filter {
            key,
            atomic: shape.atomic(vector::pred_id(pred, "filter")?),
            param: shape.elem(param, "filter param")?,
        };
        self.run(py, Kind::Elems(shape), op)
    }

    /// `pipeline(transaction=False) -> Pipeline`: queue operations (calls chain)
    /// and send them with `execute()`: as one `batch` (redis-py's pipeline), or with
    /// `transaction=True` as one transaction (all or nothing, with conditions on its
    /// GETs; docs/PROTOCOL.md §3.4).
    #[pyo3(signature = (transaction=false))]
    fn pipeline(slf: Py<Self>, transaction: bool) -> crate::pipeline::Pipeline {
        crate::pipeline::Pipeline::new(slf, transaction)
    }

    /// `stats() -> dict`: the transport's counters (requests sent, retransmitted,
    /// completed, failed, NAKs, timeouts, duplicate/stale/bad frames, ...),
    /// `in_flight`, `qps_connected`, and the raw socket's `tx_frames`, `tx_errors`,
    /// `rx_frames`, `rx_filtered`, `rx_errors`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let nq = self.endpoint.qps.len();
        let (s, io, in_flight, connected) = self.with(|client| {
            let io = client.io_mut().stats();
            let t = client.transport();
            let connected = (0..nq).filter(|&q| t.is_connected(q)).count();
            (*t.stats(), io, t.total_in_flight(), connected)
        })?;
        let d = PyDict::new(py);
        d.set_item("sent", s.sent)?;
        d.set_item("retransmitted", s.retransmitted)?;
        d.set_item("connects_sent", s.connects_sent)?;
        d.set_item("naks_seq", s.naks_seq)?;
        d.set_item("rnr_naks", s.rnr_naks)?;
        d.set_item("naks_invalid", s.naks_invalid)?;
        d.set_item("acks", s.acks)?;
        d.set_item("timeouts", s.timeouts)?;
        d.set_item("fast_retransmits", s.fast_retransmits)?;
        d.set_item("dup_frames", s.dup_frames)?;
        d.set_item("stale_frames", s.stale_frames)?;
        d.set_item("gap_frames", s.gap_frames)?;
        d.set_item("bad_frames", s.bad_frames)?;
        d.set_item("completed", s.completed)?;
        d.set_item("failed", s.failed)?;
        d.set_item("in_flight", in_flight)?;
        d.set_item("qps_connected", connected)?;
        d.set_item("tx_frames", io.tx_frames)?;
        d.set_item("tx_errors", io.tx_errors)?;
        d.set_item("rx_frames", io.rx_frames)?;
        d.set_item("rx_filtered", io.rx_filtered)?;
        d.set_item("rx_errors", io.rx_errors)?;
        Ok(d)
    }

    /// `close()`: closes the socket; later calls raise `kvdirect.Error`.
    fn close(&self) -> PyResult<()> {
        if thread::current().id() != self.owner {
            return self.with(|_| ());
        }
        let _ = CLIENTS.try_with(|m| m.try_borrow_mut().map(|mut m| m.remove(&self.id)));
        Ok(())
    }

    /// The network interface.
    #[getter]
    fn iface(&self) -> &str {
        &self.endpoint.iface
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) -> PyResult<bool> {
        self.close()?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let ep = &self.endpoint;
        format!(
            "<kvdirect.Client iface={:?} server={} ({}) client={} ({}) qps={} partitions={}{}>",
            ep.iface,
            ep.server_ip,
            mac_str(&ep.server_mac),
            ep.client_ip,
            mac_str(&ep.client_mac),
            ep.qps.len(),
            ep.partitions,
            if thread::current().id() != self.owner {
                " (of another thread)"
            } else if self.with(|_| ()).is_err() {
                " closed"
            } else {
                ""
            }
        )
    }
}

impl Client {
    /// `batch`'s work (also `Pipeline.execute`'s).
    pub(crate) fn batch_list<'py>(
        &self,
        py: Python<'py>,
        ops: &Bound<'py, PyAny>,
        return_exceptions: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let iter = ops.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "batch: expected an iterable of operation tuples, not {}",
                convert::type_name(ops)
            ))
        })?;
        let mut parsed = Vec::new();
        for (i, item) in iter.enumerate() {
            parsed.push(convert::batch_op(&item?, i)?);
        }
        let op_timeout = Duration::from_nanos(self.op_timeout_ns);
        let n = parsed.len();
        let mut kinds = Vec::with_capacity(n);
        let first = self.with(|client| {
            let mut first: Option<Ticket> = None;
            for (kind, op) in parsed {
                let t = client.submit(op);
                first.get_or_insert(t);
                kinds.push(kind);
            }
            client.flush();
            first
        })?;
        let Some(first) = first else {
            return Ok(PyList::empty(py));
        };
        let mut results: Vec<Option<Result<Reply, kvclient::Error>>> = vec![None; n];
        let mut remaining = n;
        let mut last_progress = Instant::now();
        let id = self.id;
        // Poll without the GIL, taking it back every 20 ms for signals (Ctrl-C).
        while remaining > 0 && last_progress.elapsed() <= op_timeout {
            let slice = py.detach(|| {
                with_client(id, |client| {
                    let start = Instant::now();
                    while remaining > 0 && start.elapsed() < Duration::from_millis(20) {
                        let done = client.poll();
                        if !done.is_empty() {
                            last_progress = Instant::now();
                        }
                        for (t, r) in done {
                            // Tickets are consecutive from `first`; anything else is a
                            // late result of an earlier, abandoned call.
                            let Some(i) = t.0.checked_sub(first.0).map(|i| i as usize) else {
                                continue;
                            };
                            if let Some(slot @ None) = results.get_mut(i) {
                                *slot = Some(r);
                                remaining -= 1;
                            }
                        }
                        if last_progress.elapsed() > op_timeout {
                            break;
                        }
                    }
                })
            });
            if slice.is_err() {
                return Err(KvError::new_err("the client is closed"));
            }
            py.check_signals()?;
        }
        let list = PyList::empty(py);
        let mut first_err: Option<PyErr> = None;
        for (i, (kind, r)) in kinds.into_iter().zip(results).enumerate() {
            let r = r.unwrap_or(Err(kvclient::Error::Deadline));
            match reply_value(py, kind, r, self.decode) {
                Ok(v) => list.append(v)?,
                Err(e) => {
                    let _ = e.value(py).setattr("index", i);
                    if return_exceptions {
                        list.append(e.into_value(py))?;
                    } else if first_err.is_none() {
                        first_err = Some(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(list),
        }
    }
}
