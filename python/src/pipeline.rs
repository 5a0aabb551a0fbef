//! `Client.pipeline()`: redis-py's pipeline object over `Client.batch`. Commands
//! are queued (each call returns the pipeline, so calls chain) and sent together by
//! `execute()`, which returns their results in order and empties the queue.

use crate::client::Client;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString, PyTuple};

/// Queued operations of one client, sent as one `batch` by `execute()`.
#[pyclass(module = "kvdirect", name = "Pipeline", unsendable)]
pub struct Pipeline {
    client: Py<Client>,
    ops: Vec<Py<PyTuple>>,
}

impl Pipeline {
    /// A pipeline of `client`.
    pub fn new(client: Py<Client>) -> Pipeline {
        Pipeline {
            client,
            ops: Vec::new(),
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
    /// Queues `get(key)`.
    fn get<'py>(
        slf: PyRefMut<'py, Self>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<PyRefMut<'py, Self>> {
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
    /// order (the queue is emptied, whatever happens).
    #[pyo3(signature = (*, return_exceptions=false))]
    fn execute<'py>(
        &mut self,
        py: Python<'py>,
        return_exceptions: bool,
    ) -> PyResult<Bound<'py, PyList>> {
        let ops = PyList::new(py, self.ops.drain(..))?;
        let client = self.client.bind(py).borrow();
        client.batch_list(py, ops.as_any(), return_exceptions)
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
        false
    }
}
