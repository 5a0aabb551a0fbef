//! [`Client::transact`]: one transaction (docs/PROTOCOL.md §3.4) as one request.

use super::{Client, Op, Reply};
use crate::follow::Verdict;
use crate::transport::SendError;
use crate::{Error, PacketIo};
use kvwire::payload::{write_tx_header, CondKind, Condition, ResponseReader, TxAbort};
use kvwire::{BatchWriter, PayloadError, Status};

/// A compare condition on the GET at index `op` of a transaction's ops: it commits
/// only if that GET reads `Some(value)`, or finds no key for `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxCondition {
    /// Index of the GET among the transaction's ops.
    pub op: u8,
    /// What it must read (`None`: the key is absent).
    pub expect: Option<Vec<u8>>,
}

/// How a transaction ended, with every op's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxOutcome {
    /// `None`: committed; else why it aborted (nothing changed).
    pub abort: Option<TxAbort>,
    /// The master named by a write refused `NOT_MASTER`, when known.
    pub master: Option<kvwire::MasterHint>,
    /// Each op's result, in order (writes of an aborted transaction: `ABORTED`).
    pub results: Vec<Reply>,
}

impl TxOutcome {
    /// True when the transaction committed.
    pub fn committed(&self) -> bool {
        self.abort.is_none()
    }
}

/// Names a transaction submitted with [`Client::submit_tx`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxTicket(u64);

/// A transaction in flight: the results received so far, and the end.
#[derive(Debug, Default)]
pub(super) struct TxWait {
    results: Vec<(Status, Vec<u8>)>,
    pub(super) done: Option<Result<(), Error>>,
    /// Client clock when it was submitted.
    start: u64,
}

impl TxWait {
    /// Takes the results of one response packet.
    pub(super) fn take(&mut self, rd: ResponseReader<'_>) {
        for r in rd {
            let Ok(r) = r else { break };
            self.results.push((r.status, r.value.to_vec()));
        }
    }
}

impl<I: PacketIo> Client<I> {
    /// Runs `ops` as one transaction with `conds` on their GETs; blocks until the
    /// outcome (or `op_timeout_ns`: [`Error::Deadline`], outcome unknown). Its keys
    /// may span partitions (the server then runs it with the other partitions'
    /// workers paused); it goes on the QP of its first key's partition, after what
    /// that QP already sent.
    ///
    /// Following the master (candidate nodes, [`Client::set_nodes`]), a transaction
    /// refused `NOT_MASTER` (WRITES_REFUSED: nothing of it ran) is sent again once the
    /// client moved to the node the refusal named, or once the cluster named one, as
    /// a single operation would be.
    pub fn transact(&mut self, conds: &[TxCondition], ops: &[Op]) -> Result<TxOutcome, Error> {
        let start = (self.clock)();
        loop {
            let t = self.submit_tx(conds, ops)?;
            let o = loop {
                if let Some(o) = self.tx_outcome(t) {
                    break o?;
                }
                let now = (self.clock)();
                self.pump(now);
            };
            if !self.follows_refusal(&o) {
                return Ok(o);
            }
            loop {
                let now = (self.clock)();
                if now.saturating_sub(start) > self.cfg.op_timeout_ns {
                    return Err(Error::Deadline);
                }
                if !self.follow.moving() && !self.follow.holding(now) {
                    break;
                }
                self.pump(now);
            }
        }
    }

    /// Whether `o` is a refusal `NOT_MASTER` the client follows (it then moves to the
    /// named node, or holds until one is named).
    fn follows_refusal(&mut self, o: &TxOutcome) -> bool {
        let refused = o.abort.is_some_and(|a| {
            a.reason == kvwire::payload::AbortReason::WritesRefused && a.status == Status::NotMaster
        });
        if !refused {
            return false;
        }
        let hint = o.master.map(|h| h.encode().to_vec()).unwrap_or_default();
        let now = (self.clock)();
        self.follow.on_not_master(&hint, now) == Verdict::Requeue
    }

    /// Sends `ops` as one transaction with `conds` (as [`Client::transact`]) without
    /// waiting for its outcome: blocks only until its QP can take it (the QP is the
    /// first key's, so transactions on different keys go out on different QPs and
    /// run concurrently). Poll with [`Client::tx_outcome`].
    pub fn submit_tx(&mut self, conds: &[TxCondition], ops: &[Op]) -> Result<TxTicket, Error> {
        let tenant = self.tenant;
        let ops: Vec<Op> = ops.iter().map(|o| o.clone().in_namespace(tenant)).collect();
        let ops = &ops[..];
        let first = ops
            .first()
            .ok_or(Error::Invalid(PayloadError::TooManyOps))?;
        let qp = self.qp_for_key(first.key()).ok_or(Error::NoQp)?;
        let start = (self.clock)();
        let tag = self.next_tag;
        self.next_tag += 1;
        loop {
            let now = (self.clock)();
            if now.saturating_sub(start) > self.cfg.op_timeout_ns {
                return Err(Error::Deadline);
            }
            if matches!(
                self.t.state(qp),
                crate::QpState::Idle | crate::QpState::Failed
            ) {
                self.t.connect(qp, &mut self.io, now);
            }
            if self.t.can_send(qp, now) {
                let mut err = None;
                let r = self.t.send_with(&mut self.io, qp, now, tag, |buf, id| {
                    match encode(buf, id, conds, ops) {
                        Ok(n) => Some(n),
                        Err(e) => {
                            err = Some(e);
                            None
                        }
                    }
                });
                match r {
                    Ok(_) => break,
                    Err(SendError::Aborted) => {
                        return Err(match err {
                            Some(PayloadError::NoSpace) | None => Error::TooLarge,
                            Some(e) => Error::Invalid(e),
                        })
                    }
                    Err(_) => {}
                }
            }
            self.pump(now);
        }
        self.txs.insert(
            tag,
            TxWait {
                start,
                ..TxWait::default()
            },
        );
        Ok(TxTicket(tag))
    }

    /// The outcome of transaction `t` once it is known (`None`: still in flight;
    /// [`Client::poll`] or [`Client::flush`] move it on). After `op_timeout_ns`:
    /// [`Error::Deadline`], outcome unknown. An outcome is handed out once.
    pub fn tx_outcome(&mut self, t: TxTicket) -> Option<Result<TxOutcome, Error>> {
        let w = self.txs.get(&t.0)?;
        if w.done.is_none() {
            if (self.clock)().saturating_sub(w.start) > self.cfg.op_timeout_ns {
                self.txs.remove(&t.0);
                return Some(Err(Error::Deadline));
            }
            return None;
        }
        let w = self.txs.remove(&t.0)?;
        Some(outcome(w))
    }
}

/// A finished transaction's outcome from its results.
fn outcome(w: TxWait) -> Result<TxOutcome, Error> {
    w.done.unwrap_or(Err(Error::BadResponse))?;
    let mut it = w.results.into_iter();
    let (status, value) = it.next().ok_or(Error::BadResponse)?;
    let (abort, master) = match status {
        Status::Ok => (None, None),
        Status::Aborted => (
            Some(TxAbort::decode(&value).ok_or(Error::BadResponse)?),
            TxAbort::hint(&value),
        ),
        s => return Err(Error::Status(s)),
    };
    Ok(TxOutcome {
        abort,
        master,
        results: it.map(|(status, value)| Reply { status, value }).collect(),
    })
}

/// Writes the transaction payload (batch id `id`) into `buf`.
fn encode(
    buf: &mut [u8],
    id: u32,
    conds: &[TxCondition],
    ops: &[Op],
) -> Result<usize, PayloadError> {
    let mut cs = [Condition {
        op: 0,
        kind: CondKind::Equals,
        value: &[],
    }; kvwire::payload::MAX_TX_OPS];
    if conds.len() > cs.len() || ops.len() > kvwire::payload::MAX_TX_OPS {
        return Err(PayloadError::TooManyOps);
    }
    for (c, t) in cs.iter_mut().zip(conds) {
        *c = Condition {
            op: t.op,
            kind: if t.expect.is_some() {
                CondKind::Equals
            } else {
                CondKind::Absent
            },
            value: t.expect.as_deref().unwrap_or(&[]),
        };
    }
    let n = write_tx_header(buf, &cs[..conds.len()])?;
    let mut w = BatchWriter::new(&mut buf[n..], id)?;
    for op in ops {
        w.push(&op.as_kv())?;
    }
    Ok(n + w.finish())
}
