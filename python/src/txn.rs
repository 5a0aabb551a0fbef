//! `Pipeline(transaction=True).execute()`: the queued ops as one transaction
//! (docs/PROTOCOL.md §3.4) through `kvclient::Client::transact`. Committed: every
//! op's result, as the method of the same name returns it. Aborted: nothing changed,
//! and `TransactionAborted` says why, at which op, and what the reads saw.

use crate::client::{reply_value, with_client, Client};
use crate::convert::{self, Kind};
use crate::errors::{self, TransactionAborted};
use kvclient::TxCondition;
use kvwire::Status;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyList;

impl Client {
    /// Runs the op tuples of `ops` (as `batch` takes them) with `conds` on their GETs
    /// as one transaction.
    pub(crate) fn transact_list<'py>(
        &self,
        py: Python<'py>,
        ops: &Bound<'py, PyAny>,
        conds: Vec<TxCondition>,
    ) -> PyResult<Bound<'py, PyList>> {
        let iter = ops.try_iter().map_err(|_| {
            PyTypeError::new_err("transaction: expected an iterable of operation tuples")
        })?;
        let (mut kinds, mut parsed) = (Vec::new(), Vec::new());
        for (i, item) in iter.enumerate() {
            let (kind, op) = convert::batch_op(&item?, i)?;
            kinds.push(kind);
            parsed.push(op);
        }
        self.with(|_| ())?; // thread and open checks, with the GIL
        let id = self.id;
        let out = py
            .detach(move || with_client(id, |c| c.transact(&conds, &parsed)))
            .map_err(|_| errors::Error::new_err("the client is closed"))?
            .map_err(|e| errors::op_error(py, e))?;
        let list = PyList::empty(py);
        let Some(abort) = out.abort else {
            for (kind, r) in kinds.into_iter().zip(out.results) {
                list.append(reply_value(py, kind, Ok(r), self.decode)?)?;
            }
            return Ok(list);
        };
        // What each op saw: a read's value (None if absent), None for the writes and
        // the ops not reached.
        for (kind, r) in kinds.into_iter().zip(out.results) {
            let seen = match (&kind, r.status) {
                (Kind::Get, Status::Ok | Status::NotFound) => {
                    reply_value(py, kind, Ok(r), self.decode)?
                }
                _ => py.None().into_bound(py),
            };
            list.append(seen)?;
        }
        Err(aborted(py, abort, list))
    }
}

/// The `TransactionAborted` of `abort`, with `.reason`, `.op` (None when no op is
/// concerned), `.status` and `.results` (what the reads saw).
fn aborted(py: Python<'_>, abort: kvwire::payload::TxAbort, seen: Bound<'_, PyList>) -> PyErr {
    let op = (abort.op != u8::MAX).then_some(abort.op);
    let e = TransactionAborted::new_err(format!(
        "transaction aborted: {}{} ({}); nothing changed",
        abort.reason.name(),
        op.map(|i| format!(" at op {i}")).unwrap_or_default(),
        abort.status.name()
    ));
    let v = e.value(py);
    let _ = v.setattr("reason", abort.reason.name());
    let _ = v.setattr("op", op);
    let _ = v.setattr("status", abort.status.name());
    let _ = v.setattr("results", seen);
    e
}
