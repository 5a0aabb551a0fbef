//! [`TxExecutor`]: runs one transaction on one partition's store, all or nothing.

use arrayvec::ArrayVec;
use kvops::{semantics, FunctionRegistry};
use kvwire::payload::{AbortReason, CondKind, Condition, TxAbort, TxReader, MAX_TX_OPS};
use kvwire::{KvOp, Status};

/// Bytes of the executor's arena: keys, pre-images, post-images and results of one
/// transaction. A transaction that needs more aborts `TOO_LARGE`.
pub const ARENA_BYTES: usize = 1 << 20;

/// The store a transaction runs on (one partition's engine).
pub trait TxStore {
    /// Reads `key` into `out`: its length, or `NotFound` (or another status).
    fn get(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status>;
    /// Stores `value` under `key`.
    fn put(&mut self, key: &[u8], value: &[u8]) -> Status;
    /// Deletes `key` (`NotFound` when absent).
    fn delete(&mut self, key: &[u8]) -> Status;
    /// Largest value it stores.
    fn max_value_len(&self) -> usize;
}

impl TxStore for kvengine::Engine {
    fn get(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        kvengine::Engine::get(self, key, out).map_err(Status::from)
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Status {
        kvengine::Engine::put(self, key, value).into()
    }
    fn delete(&mut self, key: &[u8]) -> Status {
        kvengine::Engine::delete(self, key).into()
    }
    fn max_value_len(&self) -> usize {
        kvengine::Engine::max_value_len(self)
    }
}

/// How a transaction ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every write is in the store.
    Committed,
    /// Nothing changed.
    Aborted(TxAbort),
}

/// A span of the arena.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Span {
    off: u32,
    len: u32,
}

impl Span {
    fn range(self) -> core::ops::Range<usize> {
        self.off as usize..(self.off + self.len) as usize
    }
}

/// A key the transaction touched: its value before (`pre`) and now (`post`).
#[derive(Clone, Copy, Debug)]
struct Touched {
    key: Span,
    pre: Option<Span>,
    post: Option<Span>,
    /// The transaction changed it.
    wrote: bool,
}

/// Runs transactions (module docs). One per worker.
pub struct TxExecutor {
    arena: Box<[u8]>,
    used: usize,
    /// A vector op's discarded copy of the original.
    scratch: Box<[u8]>,
    touched: ArrayVec<Touched, MAX_TX_OPS>,
    results: ArrayVec<(Status, Span), MAX_TX_OPS>,
    /// Transactions committed and aborted.
    pub committed: u64,
    /// Transactions aborted.
    pub aborted: u64,
}

impl Default for TxExecutor {
    fn default() -> Self {
        Self::new()
    }
}

/// Why execution stopped before commit.
type Abort = TxAbort;

/// The abort of op `i` whose result would not fit the transaction's arena.
/// `len` bytes of an arena of `cap` bytes whose first `used` are taken.
fn bump(cap: usize, used: &mut usize, len: usize) -> Option<Span> {
    let off = *used;
    if len > cap - off {
        return None;
    }
    *used += len;
    Some(Span {
        off: off as u32,
        len: len as u32,
    })
}

fn too_large(i: usize) -> Abort {
    abort(AbortReason::TooLarge, i, Status::ResponseTooLarge)
}

fn abort(reason: AbortReason, op: usize, status: Status) -> Abort {
    TxAbort {
        reason,
        op: op.min(255) as u8,
        status,
    }
}

impl TxExecutor {
    /// An executor with its arena (allocated here, once).
    pub fn new() -> TxExecutor {
        TxExecutor {
            arena: vec![0u8; ARENA_BYTES].into_boxed_slice(),
            used: 0,
            scratch: vec![0u8; kvwire::MAX_VALUE_LEN].into_boxed_slice(),
            touched: ArrayVec::new(),
            results: ArrayVec::new(),
            committed: 0,
            aborted: 0,
        }
    }

    /// Runs `tx` on `store`. `key_ok` says whether a key belongs to this partition;
    /// `writes` is `Ok` when the node takes writes, else the status to refuse them
    /// with (a read-only transaction runs anyway). After it, [`TxExecutor::results`]
    /// gives each op's result and, when committed, [`TxExecutor::post_images`] what
    /// changed (for the replication log).
    pub fn execute<S: TxStore>(
        &mut self,
        tx: &TxReader<'_>,
        store: &mut S,
        registry: &FunctionRegistry,
        key_ok: impl Fn(&[u8]) -> bool,
        writes: Status,
    ) -> Outcome {
        self.begin();
        let out = match self.run(tx, store, registry, &key_ok, writes) {
            Ok(()) => match self.commit(store) {
                Ok(()) => Outcome::Committed,
                Err(a) => Outcome::Aborted(a),
            },
            Err(a) => Outcome::Aborted(a),
        };
        match out {
            Outcome::Committed => self.committed += 1,
            Outcome::Aborted(_) => {
                self.aborted += 1;
                // Nothing changed: writes report ABORTED; reads keep what they read.
                let ops = tx.batch();
                let n = usize::from(ops.op_count());
                for (i, o) in ops.enumerate() {
                    let read = o.as_ref().is_ok_and(|o| !o.is_write());
                    match self.results.get_mut(i) {
                        Some(r) if !read => *r = (Status::Aborted, Span::default()),
                        Some(_) => {}
                        None => break,
                    }
                }
                self.pad_results(n);
            }
        }
        out
    }

    /// Starts a new request: the results of the last transaction (whoever sent it)
    /// are gone, so nothing of it can reach this request's response.
    pub fn begin(&mut self) {
        self.used = 0;
        self.touched.clear();
        self.results.clear();
    }

    /// Answers `tx` refused before it ran (its client may not run it, or the
    /// partitions could not be coordinated: `abort` names why): nothing is read or
    /// changed, and every op's result is `ABORTED` with no value.
    pub fn refuse(&mut self, tx: &TxReader<'_>, abort: TxAbort) -> Outcome {
        self.begin();
        self.pad_results(usize::from(tx.batch().op_count()));
        self.aborted += 1;
        Outcome::Aborted(abort)
    }

    /// Completes the results to `ops` with `ABORTED` (no value): the ops a transaction
    /// that stopped early did not reach. Never more results than ops.
    pub fn pad_results(&mut self, ops: usize) {
        assert!(self.results.len() <= ops, "more results than ops");
        while self.results.len() < ops {
            self.result(Status::Aborted, Span::default());
        }
    }

    /// Redacts, in place, the result of every op of `tx` (the transaction just run)
    /// that `redacts` says its client may not read (`kvops::semantics::redact`).
    pub fn redact_results(&mut self, tx: &TxReader<'_>, redacts: impl Fn(&KvOp<'_>) -> bool) {
        let TxExecutor { arena, results, .. } = self;
        for (r, op) in results.iter_mut().zip(tx.batch()) {
            let Ok(op) = op else { break };
            if redacts(&op) {
                let v = &mut arena[r.1.range()];
                r.1.len = kvops::semantics::redact(&op, r.0, v) as u32;
            }
        }
    }

    /// Each op's result, in order (status, value).
    pub fn results(&self) -> impl Iterator<Item = (Status, &[u8])> + '_ {
        self.results
            .iter()
            .map(|&(s, sp)| (s, &self.arena[sp.range()]))
    }

    /// After a commit: every key the transaction changed, with its new value (`None`:
    /// deleted), in the order first touched.
    pub fn post_images(&self) -> impl Iterator<Item = (&[u8], Option<&[u8]>)> + '_ {
        self.touched.iter().filter(|t| t.wrote).map(|t| {
            (
                &self.arena[t.key.range()],
                t.post.map(|p| &self.arena[p.range()]),
            )
        })
    }

    /// Bytes of the post-images of the last transaction (keys + values), for a
    /// replication log's room check.
    pub fn post_image_bytes(&self) -> usize {
        self.touched
            .iter()
            .filter(|t| t.wrote)
            .map(|t| t.key.len as usize + t.post.map_or(0, |p| p.len as usize))
            .sum()
    }

    fn alloc(&mut self, len: usize) -> Option<Span> {
        bump(self.arena.len(), &mut self.used, len)
    }

    fn copy_in(&mut self, bytes: &[u8]) -> Option<Span> {
        let s = self.alloc(bytes.len())?;
        self.arena[s.range()].copy_from_slice(bytes);
        Some(s)
    }

    /// The index of `key` among the touched keys, reading it from the store the first
    /// time (its pre-image).
    fn touch<S: TxStore>(&mut self, key: &[u8], store: &mut S, i: usize) -> Result<usize, Abort> {
        if let Some(t) = self
            .touched
            .iter()
            .position(|t| &self.arena[t.key.range()] == key)
        {
            return Ok(t);
        }
        let too_large = || abort(AbortReason::TooLarge, i, Status::ResponseTooLarge);
        let k = self.copy_in(key).ok_or_else(too_large)?;
        let room = store.max_value_len().min(self.arena.len() - self.used);
        let pre = match store.get(key, &mut self.arena[self.used..self.used + room]) {
            Ok(n) => Some(self.alloc(n).ok_or_else(too_large)?),
            Err(Status::NotFound) => None,
            // The arena had less room than the largest value: it did not fit.
            Err(s) if s != Status::KeyTooLarge && room < store.max_value_len() => {
                return Err(too_large())
            }
            Err(s) => return Err(abort(AbortReason::OpFailed, i, s)),
        };
        self.touched
            .try_push(Touched {
                key: k,
                pre,
                post: pre,
                wrote: false,
            })
            .map_err(|_| abort(AbortReason::TooLarge, i, Status::Malformed))?;
        Ok(self.touched.len() - 1)
    }

    fn result(&mut self, status: Status, value: Span) {
        // At most MAX_TX_OPS ops (the reader checked).
        let _ = self.results.try_push((status, value));
    }

    fn run<S: TxStore>(
        &mut self,
        tx: &TxReader<'_>,
        store: &mut S,
        registry: &FunctionRegistry,
        key_ok: &impl Fn(&[u8]) -> bool,
        writes: Status,
    ) -> Result<(), Abort> {
        let mut conds: [Option<Condition<'_>>; MAX_TX_OPS] = [None; MAX_TX_OPS];
        for c in tx.conditions() {
            if let Some(slot) = conds.get_mut(usize::from(c.op)) {
                *slot = Some(c);
            }
        }
        // Decode every op first: a malformed one aborts before anything is read.
        let mut ops: ArrayVec<KvOp<'_>, MAX_TX_OPS> = ArrayVec::new();
        for (i, o) in tx.batch().enumerate() {
            let o = o.map_err(|e| abort(AbortReason::Malformed, i, e.status()))?;
            if !key_ok(o.key()) {
                return Err(abort(
                    AbortReason::CrossPartition,
                    i,
                    Status::WrongPartition,
                ));
            }
            if o.is_write() && writes != Status::Ok {
                return Err(abort(AbortReason::WritesRefused, i, writes));
            }
            if conds[i].is_some() && !matches!(o, KvOp::Get { .. }) {
                return Err(abort(AbortReason::Malformed, i, Status::Malformed));
            }
            ops.try_push(o)
                .map_err(|_| abort(AbortReason::TooLarge, i, Status::Malformed))?;
        }
        for (i, o) in ops.iter().enumerate() {
            self.step(i, o, conds[i], store, registry)?;
        }
        Ok(())
    }

    /// One op against the transaction's view of the store.
    fn step<S: TxStore>(
        &mut self,
        i: usize,
        o: &KvOp<'_>,
        cond: Option<Condition<'_>>,
        store: &mut S,
        registry: &FunctionRegistry,
    ) -> Result<(), Abort> {
        let failed = |s: Status| abort(AbortReason::OpFailed, i, s);
        let t = self.touch(o.key(), store, i)?;
        let cur = self.touched[t].post;
        match *o {
            KvOp::Get { .. } => self.step_get(i, cur, cond)?,
            KvOp::Put { value, .. } => {
                if value.len() > store.max_value_len() {
                    return Err(failed(Status::ValueTooLarge));
                }
                let v = self.copy_in(value).ok_or_else(|| too_large(i))?;
                self.write(t, Some(v));
                self.result(Status::Ok, Span::default());
            }
            KvOp::Delete { .. } => {
                if cur.is_none() {
                    self.result(Status::NotFound, Span::default());
                } else {
                    self.write(t, None);
                    self.result(Status::Ok, Span::default());
                }
            }
            // Read-modify-write: its meaning is `kvops::semantics::run`'s, on a copy.
            _ => self.step_rmw(i, t, cur, o, registry)?,
        }
        Ok(())
    }

    /// Touched key `t` now holds `post` (`None`: deleted), written by the transaction.
    fn write(&mut self, t: usize, post: Option<Span>) {
        let e = &mut self.touched[t];
        e.post = post;
        e.wrote = true;
    }

    /// GET: the current value (or NOT_FOUND); the transaction aborts when the op's
    /// condition does not hold.
    fn step_get(
        &mut self,
        i: usize,
        cur: Option<Span>,
        cond: Option<Condition<'_>>,
    ) -> Result<(), Abort> {
        let holds = match (cond, cur) {
            (None, _) => true,
            (Some(c), None) => c.kind == CondKind::Absent,
            (Some(c), Some(v)) => c.kind == CondKind::Equals && &self.arena[v.range()] == c.value,
        };
        match cur {
            Some(v) => self.result(Status::Ok, v),
            None => self.result(Status::NotFound, Span::default()),
        }
        if !holds {
            return Err(abort(AbortReason::ConditionFailed, i, Status::Ok));
        }
        Ok(())
    }

    /// A read-modify-write op on touched key `t` (current value `cur`): an update
    /// changes a copy, which becomes the key's post-image, and answers the original; a
    /// read answers what it computed, copied into the arena (a COMPARE_DELETE that
    /// matched also deletes the key).
    fn step_rmw(
        &mut self,
        i: usize,
        t: usize,
        cur: Option<Span>,
        o: &KvOp<'_>,
        registry: &FunctionRegistry,
    ) -> Result<(), Abort> {
        let TxExecutor {
            arena,
            used,
            scratch,
            ..
        } = self;
        let (mut new, mut no_room) = (None, false);
        let ran = semantics::run(
            o,
            registry,
            |writes| {
                let cur = cur.ok_or(Status::NotFound)?;
                if !writes {
                    return Ok(&mut arena[cur.range()]);
                }
                // The original stays where it is (the result); the new value is a copy.
                let Some(n) = bump(arena.len(), used, cur.len as usize) else {
                    no_room = true;
                    return Err(Status::ValueTooLarge);
                };
                arena.copy_within(cur.range(), n.off as usize);
                new = Some(n);
                Ok(&mut arena[n.range()])
            },
            scratch,
        );
        if no_room {
            return Err(too_large(i));
        }
        let done = ran.map_err(|s| abort(AbortReason::OpFailed, i, s))?;
        if done.deletes {
            self.write(t, None);
        }
        match (new, cur) {
            (Some(n), Some(c)) => {
                self.write(t, Some(n));
                self.result(Status::Ok, c);
            }
            _ => {
                let s = self.alloc(done.len).ok_or_else(|| too_large(i))?;
                self.arena[s.range()].copy_from_slice(&self.scratch[..done.len]);
                self.result(Status::Ok, s);
            }
        }
        Ok(())
    }

    /// Applies the post-images; on a store failure undoes what was applied.
    fn commit<S: TxStore>(&mut self, store: &mut S) -> Result<(), Abort> {
        for (n, t) in self.touched.iter().enumerate() {
            if !t.wrote {
                continue;
            }
            let key = &self.arena[t.key.range()];
            let s = match t.post {
                Some(v) => store.put(key, &self.arena[v.range()]),
                None => match store.delete(key) {
                    Status::NotFound => Status::Ok,
                    s => s,
                },
            };
            if s != Status::Ok {
                for u in self.touched[..n].iter().rev().filter(|u| u.wrote) {
                    let key = &self.arena[u.key.range()];
                    // Restoring a value into the room just freed; nothing else can fail.
                    let _ = match u.pre {
                        Some(v) => store.put(key, &self.arena[v.range()]),
                        None => store.delete(key),
                    };
                }
                return Err(abort(AbortReason::OpFailed, 255, s));
            }
        }
        Ok(())
    }
}
