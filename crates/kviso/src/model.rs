//! One namespace's store as its owner must see it: a `HashMap` run through the same
//! op meanings as the server (`kvops::semantics` for read-modify-write ops, `kvtx`'s
//! executor for transactions, `kvops::semantics::redact` for a client without
//! `read`). What it predicts depends on the owner's requests alone: the fuzzer's
//! noninterference property is that every answer equals this prediction.

use kvops::{semantics, FunctionRegistry};
use kvtx::{Outcome, TxExecutor, TxStore};
use kvwire::payload::{TxAbort, TxReader};
use kvwire::{KvOp, Status};
use std::collections::HashMap;

/// Largest value the model stores (the fuzzer writes far smaller ones; the server's
/// engine takes these too).
pub const MAX_VALUE_LEN: usize = 4096;

/// One expected result: status and value.
pub type Expected = (Status, Vec<u8>);

/// A namespace's keys and values.
#[derive(Clone, Debug, Default)]
pub struct Store {
    map: HashMap<Vec<u8>, Vec<u8>>,
}

impl TxStore for Store {
    fn get(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        let v = self.map.get(key).ok_or(Status::NotFound)?;
        out.get_mut(..v.len())
            .ok_or(Status::ValueTooLarge)?
            .copy_from_slice(v);
        Ok(v.len())
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Status {
        self.map.insert(key.to_vec(), value.to_vec());
        Status::Ok
    }
    fn delete(&mut self, key: &[u8]) -> Status {
        match self.map.remove(key) {
            Some(_) => Status::Ok,
            None => Status::NotFound,
        }
    }
    fn max_value_len(&self) -> usize {
        MAX_VALUE_LEN
    }
}

impl Store {
    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Option<&[u8]> {
        self.map.get(key).map(Vec::as_slice)
    }

    /// Every value held now.
    pub fn values(&self) -> impl Iterator<Item = &[u8]> {
        self.map.values().map(Vec::as_slice)
    }

    /// Forgets everything (the namespace was purged).
    pub fn clear(&mut self) {
        self.map.clear();
    }

    /// Runs one op (allowed for its client) and returns its result; `redact` for a
    /// client without `read`.
    pub fn apply(&mut self, op: &KvOp<'_>, registry: &FunctionRegistry, redact: bool) -> Expected {
        let key = op.key();
        match *op {
            KvOp::Get { .. } => match self.map.get(key) {
                Some(v) => (Status::Ok, v.clone()),
                None => (Status::NotFound, Vec::new()),
            },
            KvOp::Put { value, .. } => {
                self.map.insert(key.to_vec(), value.to_vec());
                (Status::Ok, Vec::new())
            }
            KvOp::Delete { .. } => match self.map.remove(key) {
                Some(_) => (Status::Ok, Vec::new()),
                None => (Status::NotFound, Vec::new()),
            },
            _ => self.apply_rmw(op, registry, redact),
        }
    }

    /// A read-modify-write op through `kvops::semantics::run`, as the station runs it.
    fn apply_rmw(&mut self, op: &KvOp<'_>, registry: &FunctionRegistry, redact: bool) -> Expected {
        let key = op.key().to_vec();
        let mut out = vec![0u8; MAX_VALUE_LEN + 8];
        let mut current = self.map.get(&key).cloned();
        let ran = semantics::run(
            op,
            registry,
            |_| current.as_deref_mut().ok_or(Status::NotFound),
            &mut out,
        );
        match ran {
            Ok(done) => {
                if done.deletes {
                    self.map.remove(&key);
                } else if done.wrote {
                    if let Some(v) = current {
                        self.map.insert(key, v);
                    }
                }
                let mut value = out[..done.len].to_vec();
                if redact {
                    let n = semantics::redact(op, Status::Ok, &mut value);
                    value.truncate(n);
                }
                (Status::Ok, value)
            }
            Err(s) => (s, Vec::new()),
        }
    }

    /// Runs transaction `tx` (allowed for its client) with `exec` and returns its
    /// outcome result and each op's; `redacts` says which ops' results its client
    /// may not read.
    pub fn transact(
        &mut self,
        tx: &TxReader<'_>,
        exec: &mut TxExecutor,
        registry: &FunctionRegistry,
        redacts: impl Fn(&KvOp<'_>) -> bool,
    ) -> Vec<Expected> {
        exec.begin();
        let outcome = exec.execute(tx, self, registry, |_| true, Status::Ok);
        exec.redact_results(tx, redacts);
        let mut out = vec![match outcome {
            Outcome::Committed => (Status::Ok, Vec::new()),
            Outcome::Aborted(a) => (Status::Aborted, a.encode().to_vec()),
        }];
        out.extend(exec.results().map(|(s, v)| (s, v.to_vec())));
        out
    }
}

/// The results of a transaction refused `DENIED` for op `op` (255: the client may not
/// run transactions): the outcome, then `ops` results `ABORTED` with no value.
pub fn denied_transaction(op: u8, ops: usize) -> Vec<Expected> {
    let abort = TxAbort {
        reason: kvwire::payload::AbortReason::OpFailed,
        op,
        status: Status::Denied,
    };
    let mut out = vec![(Status::Aborted, abort.encode().to_vec())];
    out.extend((0..ops).map(|_| (Status::Aborted, Vec::new())));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::{func, Atomic, Width};

    #[test]
    fn ops_and_redaction() {
        let reg = FunctionRegistry::new();
        let mut s = Store::default();
        assert_eq!(
            s.apply(&KvOp::Get { key: b"k" }, &reg, false).0,
            Status::NotFound
        );
        s.apply(
            &KvOp::Put {
                key: b"k",
                value: &5u64.to_le_bytes(),
            },
            &reg,
            false,
        );
        let add = KvOp::UpdateS2S {
            key: b"k",
            atomic: Atomic {
                func: func::FETCH_ADD,
                width: Width::W8,
                signed: false,
            },
            param: 2,
            param2: 0,
        };
        assert_eq!(
            s.apply(&add, &reg, false),
            (Status::Ok, 5u64.to_le_bytes().to_vec())
        );
        assert_eq!(
            s.apply(&add, &reg, true),
            (Status::Ok, Vec::new()),
            "redacted"
        );
        assert_eq!(s.get(b"k"), Some(&9u64.to_le_bytes()[..]));
        let cad = KvOp::CompareDelete {
            key: b"k",
            expected: &9u64.to_le_bytes(),
        };
        assert_eq!(s.apply(&cad, &reg, true).1, 9u64.to_le_bytes().to_vec());
        assert_eq!(s.get(b"k"), None);
    }
}
