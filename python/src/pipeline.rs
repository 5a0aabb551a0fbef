//! `Client.pipeline()`: redis-py's pipeline object over `Client.batch`. Commands
//! are queued (each call returns the pipeline, so calls chain) and sent together by
//! `execute()`, which returns their results in order and empties the queue. With
//! `transaction=True` they are sent as one transaction (txn.rs), and a queued `get`
//! may carry a condition the commit depends on.

use crate::client::Client;
use crate::convert;
use kvclient::TxCondition;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

/// Queued operations of one client, sent as one `batch` (or one transaction) by
/// `execute()`.
#[pyclass(module = "kvdirect", name = "Pipeline", unsendable)]
pub struct Pipeline {
    client: Py<Client>,
    ops: Vec<Py<PyTuple>>,
    /// Sent as one transaction.
    transaction: bool,
    /// The transaction's conditions on its GETs.
    conds: Vec<TxCondition>,
}

impl Pipeline {
    /// A pipeline of `client`; a transaction if `transaction`.
    pub fn new(client: Py<Client>, transaction: bool) -> Pipeline {
        Pipeline {
            client,
            ops: Vec::new(),
            transaction,
            conds: Vec::new(),
        }
    }

    fn push<'py>(
        mut slf: PyRefMut<'py, Self>,
        name: &str,
        args: &[&Bound<'py, PyAny>],
    ) -> PyResult<PyRefMut<'py, Self>> {
        let py = slf.py();
        let mut items: Vec<Bound<'py, PyAny>> = vec![PyString::new(py, name).into_any()];
        items.extend(args.iter().map(|a| (*a).clone()));
        let t = PyTuple::new(py, items)?;
        slf.ops.push(t.unbind());
        Ok(slf)
    }
}

#[pymethods]
impl Pipeline {
    /// Queues `get(key)`. In a transaction, `equals=VALUE` makes it commit only if
    /// the GET reads exactly VALUE, `absent=True` only if the key is absent.
    #[pyo3(signature = (key, *, equals=None, absent=false))]
    fn get<'py>(
        mut slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
        equals: Option<&Bound<'py, PyAny>>,
        absent: bool,
    ) -> PyResult<PyRefMut<'py, Self>> {
        let expect = match (equals, absent) {
            (None, false) => None,
            (Some(_), true) => {
                return Err(PyValueError::new_err(
                    "get: equals= and absent=True exclude each other",
                ))
            }
            _ if !slf.transaction => {
                return Err(PyValueError::new_err(
                    "get: conditions (equals=, absent=) need pipeline(transaction=True)",
                ))
            }
            (Some(v), false) => Some(Some(convert::value(v, "get equals")?)),
            (None, true) => Some(None),
        };
        if let Some(expect) = expect {
            let op = u8::try_from(slf.ops.len())
                .map_err(|_| PyValueError::new_err("get: a transaction holds at most 64 ops"))?;
            slf.conds.push(TxCondition { op, expect });
        }
        Pipeline::push(slf, "get", &[key])
    }

    /// Queues `put(key, value)`.
    fn put<'py>(
        slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        Pipeline::push(slf, "put", &[key, value])
    }

    /// Queues `delete(key)`.
    fn delete<'py>(
        slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        Pipeline::push(slf, "delete", &[key])
    }

    /// Queues `compare_delete(key, value)`.
    fn compare_delete<'py>(
        slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        Pipeline::push(slf, "compare_delete", &[key, value])
    }

    /// Queues `incr(key, delta=1)`.
    #[pyo3(signature = (key, delta=None))]
    fn incr<'py>(
        slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
        delta: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        match delta {
            Some(d) => Pipeline::push(slf, "incr", &[key, d]),
            None => Pipeline::push(slf, "incr", &[key]),
        }
    }

    /// Queues `cas(key, expected, new)`.
    fn cas<'py>(
        slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
        expected: &Bound<'py, PyAny>,
        new: &Bound<'py, PyAny>,
    ) -> PyResult<PyRefMut<'py, Self>> {
        Pipeline::push(slf, "cas", &[key, expected, new])
    }

    /// Sends every queued operation as one `batch` and returns the results in
    /// order (the queue is emptied, whatever happens). A transaction pipeline sends
    /// them as one transaction: committed, the results; aborted, nothing changed
    /// and `TransactionAborted` is raised (`return_exceptions` does not apply).
    #[pyo3(signature = (*, return_exceptions=false))]
    fn execute<'py>(
        &mut self,
        py: Python<'py>,
        return_exceptions: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let ops = PyList::new(py, self.ops.drain(..))?;
        let conds = std::mem::take(&mut self.conds);
        let client = self.client.bind(py).borrow();
        if self.transaction {
            client.transact_list(py, ops.as_any(), conds)
        } else {
            client.batch_list(py, ops.as_any(), return_exceptions)
        }
    }

    /// Operations queued.
    fn __len__(&self) -> usize {
        self.ops.len()
    }

    fn __enter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Leaving a `with` block drops what was not executed (as redis-py's).
    #[pyo3(signature = (*_args))]
    fn __exit__(&mut self, _args: &Bound<'_, PyTuple>) -> bool {
        self.ops.clear();
        self.conds.clear();
        false
    }
}
