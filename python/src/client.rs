//! `kvdirect.Client`: a kvclient [`kvclient::Client`] over the kernel transport
//! ([`KernelIo`], an AF_PACKET socket on one interface).

use crate::convert::{self, Kind};
use crate::errors::{self, Error as KvError};
use kvclient::{kernel_client_config, Endpoint, KernelIo, Op, Reply, Ticket};
use kvwire::Status;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyList};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A KV-Direct client on one network interface.
///
/// `Client(iface, config=None, *, server_ip=None, server_mac=None, client_ip=None,
/// client_mac=None, qps=None, partitions=None, udp_src_port=None, timeout=None,
/// connect_timeout=None)`
///
/// The endpoint comes from a configuration file (`config`: the dataplane's MAC/IP
/// are the server's, the pktgen's are this client's, `clients` are the QPs, the
/// dataplane's worker count the partitions), or from the keyword arguments alone
/// (then `server_ip`, `server_mac`, `client_ip`, `client_mac` and `qps` are
/// required); keyword arguments given with `config` override its values.
/// `timeout` (seconds) bounds each blocking operation and a batch's wait for
/// progress, `connect_timeout` (seconds) the connection set-up. Connects every QP
/// before returning (`kvdirect.UnreachableError` if the server does not answer).
///
/// Keys are `bytes`, `bytearray` or `str` (UTF-8), never empty; values the same or
/// an `int` (stored as 8 bytes little-endian, the form `incr`/`cas` work on).
/// Results are `bytes`. The object belongs to the thread that created it, and holds
/// the GIL while it waits for the network (the client is not `Send`).
#[pyclass(unsendable, module = "kvdirect", name = "Client")]
pub struct Client {
    inner: Option<kvclient::Client<KernelIo>>,
    endpoint: Endpoint,
    op_timeout_ns: u64,
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
            ("qps", self.qps.is_none()),
        ]
        .into_iter()
        .filter_map(|(n, m)| m.then_some(n))
        .collect();
        if !missing.is_empty() {
            return Err(PyTypeError::new_err(format!(
                "Client(): without config=, the endpoint needs server_ip, server_mac, \
                 client_ip, client_mac and qps (missing: {})",
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
        if let Some(v) = self.qps {
            ep.qps = convert::qps(v)?;
        }
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
fn reply_value<'py>(
    py: Python<'py>,
    kind: Kind,
    r: Result<Reply, kvclient::Error>,
) -> PyResult<Bound<'py, PyAny>> {
    let r = r.map_err(|e| errors::op_error(py, e))?;
    let fail = |s: Status| Err(errors::op_error(py, kvclient::Error::Status(s)));
    match (kind, r.status) {
        (Kind::Get, Status::Ok) => Ok(PyBytes::new(py, &r.value).into_any()),
        (Kind::Get, Status::NotFound) => Ok(py.None().into_bound(py)),
        (Kind::Put, Status::Ok) => Ok(py.None().into_bound(py)),
        (Kind::Delete, Status::Ok | Status::NotFound) => {
            Ok(PyBool::new(py, r.status == Status::Ok)
                .to_owned()
                .into_any())
        }
        (Kind::Incr(delta), Status::Ok) => Ok(le_u64(&r.value)
            .wrapping_add(delta)
            .into_pyobject(py)?
            .into_any()),
        (Kind::Cas, Status::Ok) => Ok(le_u64(&r.value).into_pyobject(py)?.into_any()),
        (_, s) => fail(s),
    }
}

impl Client {
    fn inner(&mut self) -> PyResult<&mut kvclient::Client<KernelIo>> {
        self.inner
            .as_mut()
            .ok_or_else(|| KvError::new_err("the client is closed"))
    }

    /// Runs one operation to completion (blocking, GIL held).
    fn run<'py>(&mut self, py: Python<'py>, kind: Kind, op: Op) -> PyResult<Bound<'py, PyAny>> {
        let r = self.inner()?.exec(op);
        reply_value(py, kind, r)
    }
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (iface, config=None, *, server_ip=None, server_mac=None,
        client_ip=None, client_mac=None, qps=None, partitions=None, udp_src_port=None,
        timeout=None, connect_timeout=None))]
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
        if endpoint.qps.is_empty() {
            return Err(errors::ConfigError::new_err(
                "the endpoint has no QP (empty `clients` list / qps)",
            ));
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
        let inner = endpoint
            .connect(cfg)
            .map_err(|e| errors::endpoint_error(py, e, &endpoint.iface, &server))?;
        Ok(Client {
            inner: Some(inner),
            endpoint,
            op_timeout_ns: cfg.op_timeout_ns,
        })
    }

    /// `get(key) -> bytes | None`: the value, or `None` if the key is absent.
    fn get<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "get")?;
        self.run(py, Kind::Get, Op::Get { key })
    }

    /// `put(key, value) -> None`: stores `value` (bytes, bytearray, str, or an int as
    /// 8 bytes little-endian) under `key`.
    fn put<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "put")?;
        let value = convert::value(value, "put")?;
        self.run(py, Kind::Put, Op::Put { key, value })
    }

    /// `delete(key) -> bool`: removes `key`; whether it was present.
    fn delete<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "delete")?;
        self.run(py, Kind::Delete, Op::Delete { key })
    }

    /// `incr(key, delta=1) -> int`: atomic fetch-and-add on the 8-byte little-endian
    /// counter stored under `key`; returns the new value (mod 2**64). A negative
    /// `delta` subtracts. The key must exist and hold exactly 8 bytes (else
    /// `StatusError` with status "not_found" / "bad_length"): create it with
    /// `put(key, 0)`.
    #[pyo3(signature = (key, delta=None))]
    fn incr<'py>(
        &mut self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
        delta: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let key = convert::key(key, "incr")?;
        let delta = match delta {
            Some(d) => convert::word(d, "incr")?,
            None => 1,
        };
        self.run(py, Kind::Incr(delta), convert::incr_op(key, delta))
    }

    /// `cas(key, expected, new) -> int`: atomic compare-and-swap on the 8-byte
    /// little-endian word under `key`; returns the original value (the swap
    /// happened iff it equals `expected`).
    fn cas<'py>(
        &mut self,
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
        &mut self,
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
        let client = self.inner()?;
        let n = parsed.len();
        let mut kinds = Vec::with_capacity(n);
        let mut first: Option<Ticket> = None;
        for (kind, op) in parsed {
            let t = client.submit(op);
            first.get_or_insert(t);
            kinds.push(kind);
        }
        let Some(first) = first else {
            return Ok(PyList::empty(py));
        };
        let mut results: Vec<Option<Result<Reply, kvclient::Error>>> = vec![None; n];
        let mut remaining = n;
        client.flush();
        let mut last_progress = Instant::now();
        let mut last_signal_check = last_progress;
        while remaining > 0 {
            let done = client.poll();
            let now = Instant::now();
            if !done.is_empty() {
                last_progress = now;
            }
            for (t, r) in done {
                // Tickets are consecutive from `first`; anything else is a late
                // result of an earlier, abandoned call.
                let Some(i) = t.0.checked_sub(first.0).map(|i| i as usize) else {
                    continue;
                };
                if let Some(slot @ None) = results.get_mut(i) {
                    *slot = Some(r);
                    remaining -= 1;
                }
            }
            if now.duration_since(last_progress) > op_timeout {
                break;
            }
            if now.duration_since(last_signal_check) > Duration::from_millis(20) {
                last_signal_check = now;
                py.check_signals()?;
            }
        }
        let list = PyList::empty(py);
        let mut first_err: Option<PyErr> = None;
        for (i, (kind, r)) in kinds.into_iter().zip(results).enumerate() {
            let r = r.unwrap_or(Err(kvclient::Error::Deadline));
            match reply_value(py, kind, r) {
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

    /// `stats() -> dict`: the transport's counters (requests sent, retransmitted,
    /// completed, failed, NAKs, timeouts, duplicate/stale/bad frames, ...),
    /// `in_flight`, `qps_connected`, and the raw socket's `tx_frames`, `tx_errors`,
    /// `rx_frames`, `rx_filtered`, `rx_errors`.
    fn stats<'py>(&mut self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let nq = self.endpoint.qps.len();
        let client = self.inner()?;
        let io = client.io_mut().stats();
        let t = client.transport();
        let s = *t.stats();
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
        d.set_item("in_flight", t.total_in_flight())?;
        let connected = (0..nq).filter(|&q| t.is_connected(q)).count();
        d.set_item("qps_connected", connected)?;
        d.set_item("tx_frames", io.tx_frames)?;
        d.set_item("tx_errors", io.tx_errors)?;
        d.set_item("rx_frames", io.rx_frames)?;
        d.set_item("rx_filtered", io.rx_filtered)?;
        d.set_item("rx_errors", io.rx_errors)?;
        Ok(d)
    }

    /// `close()`: closes the socket; later calls raise `kvdirect.Error`.
    fn close(&mut self) {
        self.inner = None;
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
    fn __exit__(&mut self, _args: &Bound<'_, pyo3::types::PyTuple>) -> bool {
        self.close();
        false
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
            if self.inner.is_none() { " closed" } else { "" }
        )
    }
}
