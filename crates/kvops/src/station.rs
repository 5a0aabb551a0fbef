//! The reservation station (KV-Direct §3.3.4, Fig. 8), one per worker lcore.
//!
//! # What it does
//!
//! A worker decodes a request batch into a slice of wire operations ([`KvOp`]) and
//! calls [`Station::process_batch`]; every completion carries a wire [`Status`]. The
//! station
//!
//! 1. **admits** every op into one of [`SLOTS`] (1024) hash slots, indexed by a fold of
//!    the key hash. Ops in the same slot are treated as dependent: a false positive
//!    (two keys, one slot) only costs waiting, a missed dependency cannot happen because
//!    equal keys always hash alike. Within a slot, ops on the same key form a **chain**
//!    in arrival order; a different key that collides waits behind the keys admitted to
//!    the slot before it.
//! 2. **issues** the chains in rounds: each round takes the head key of every busy slot,
//!    calls [`MemoryStage::prefetch`] on all of them (so a memory stage can overlap its
//!    DRAM misses, as the NIC overlapped PCIe reads), then runs each chain to the end.
//! 3. **runs a chain** against a forwarding cache holding the key's latest value: the
//!    first op that needs the value reads it from the memory stage once; every later op
//!    on the key is executed from the cache directly (*data forwarding*; atomics take a
//!    fast path that updates the cached element in place) and its result is emitted at
//!    once. When the chain is drained, the key's in-place updates (atomics, vector
//!    updates) are merged into **one write-back**. PUT and DELETE are written through in
//!    chain order, because their status (out of memory, value too large, not found) is
//!    only known to the memory stage; the cache follows them.
//! 4. frees the slot; the next key waiting in it is issued in the next round.
//!
//! At most one chain per key exists at any time and a chain's memory-stage calls are
//! made one after another, so no two operations on the same key are ever in the memory
//! stage at once.
//!
//! With `ooo = false` ([`StationConfig::ooo`]) the station is the paper's baseline
//! instead: ops are admitted in arrival order into a window; an op whose slot is already
//! taken by an op in the window **stalls** the pipeline: the whole window is executed
//! (one read and one write per op, no forwarding, no merging) before it is admitted.
//!
//! # Ordering guarantees
//!
//! * Results equal executing, for each key, that key's operations sequentially in
//!   arrival order (the memory stage is only touched through this station).
//! * The sink receives exactly one completion per op, carrying the op's index in the
//!   slice given to `process_batch`. Completions of ops on the **same key** come in
//!   arrival order. Completions of **different keys** may come out of arrival order (in
//!   out-of-order mode, by chain); the dataplane places results by op index. In stall
//!   mode completions come in arrival order.
//! * All completions of a `process_batch` call are delivered before it returns; nothing
//!   stays in flight across calls (run to completion).
//! * Across keys, the memory stage sees operations in chain order, not arrival order.
//!   A status that depends on *other* keys (chiefly `OutOfMemory` when the slab is nearly
//!   full) therefore reflects that execution order; it is still a valid serial order of
//!   the batch, just not the arrival one.
//!
//! # Allocation
//!
//! All pools (slots, chain links, the value cache and the result buffer) are allocated
//! by [`Station::new`]; `process_batch` allocates nothing.

use kvwire::{KvOp, Status};

use crate::registry::FunctionRegistry;
use crate::semantics;

/// Number of hash slots, as in the paper.
pub const SLOTS: usize = 1024;
/// Largest supported [`StationConfig::max_batch`].
pub const MAX_BATCH_LIMIT: usize = 4096;

const NONE: u16 = u16::MAX;

/// The slot of a key hash: the top 10 bits of a Fibonacci (multiplicative) hash of it,
/// so that keys which share low hash bits (as keys steered to one lcore by `hash % n`
/// do) still spread over all slots.
pub const fn slot_of(hash: u64) -> usize {
    (hash.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as usize
}

/// The memory stages behind the station (the storage engine, or a test double).
///
/// Contract: a failed `write` or `delete` leaves the stored state unchanged; a
/// `write_back` of an existing key with a value of the stored length succeeds (it is an
/// in-place update). Statuses are the wire's: whatever a memory stage refuses with
/// (`OutOfMemory`, `KeyTooLarge`, `ValueTooLarge`, …) is the status the op answers.
pub trait MemoryStage {
    /// A hint that `key` will be accessed soon (issue prefetches). Default: nothing.
    fn prefetch(&mut self, key: &[u8]) {
        let _ = key;
    }

    /// Copies the value of `key` into `out` and returns its length; `Err(NotFound)` if
    /// absent; `Err(ValueTooLarge)` if it does not fit in `out`. (A length beyond
    /// `out.len()` breaks the contract; the op answers `Internal`.)
    fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status>;

    /// Inserts or replaces `key` with `value`.
    fn write(&mut self, key: &[u8], value: &[u8]) -> Status;

    /// Removes `key`; `NotFound` if absent.
    fn delete(&mut self, key: &[u8]) -> Status;

    /// The merged write-back after a chain: `key` exists and `value` has its stored
    /// length, so an engine can update in place (e.g. `Engine::lookup_mut`).
    /// Default: [`MemoryStage::write`].
    fn write_back(&mut self, key: &[u8], value: &[u8]) -> Status {
        self.write(key, value)
    }
}

/// Receives one completion per op: its index in the batch, its status and its result
/// bytes (empty on error and for PUT/DELETE). The bytes are only valid during the call.
pub trait CompletionSink {
    /// One op completed.
    fn complete(&mut self, index: usize, status: Status, value: &[u8]);
}

impl<F: FnMut(usize, Status, &[u8])> CompletionSink for F {
    fn complete(&mut self, index: usize, status: Status, value: &[u8]) {
        self(index, status, value)
    }
}

/// Station parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StationConfig {
    /// `true`: out-of-order execution with data forwarding (KV-Direct). `false`: stall on
    /// every slot conflict (the baseline the paper compares against).
    pub ooo: bool,
    /// Ops handled per pass, `1..=4096`; longer slices are cut into passes (each pass
    /// drains fully before the next starts). Default 64.
    pub max_batch: usize,
    /// Size of the value cache and result buffer; must be at least the memory stage's
    /// largest value, else read-modify-write ops on larger values get `ValueTooLarge`.
    /// Default 4096.
    pub max_value_len: usize,
}

impl Default for StationConfig {
    fn default() -> Self {
        StationConfig {
            ooo: true,
            max_batch: 64,
            max_value_len: 4096,
        }
    }
}

/// An invalid [`StationConfig`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StationConfigError {
    /// `max_batch` is 0 or above [`MAX_BATCH_LIMIT`].
    MaxBatch(usize),
    /// `max_value_len` is below 8 (one element of the widest width).
    MaxValueLen(usize),
}

impl core::fmt::Display for StationConfigError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            StationConfigError::MaxBatch(n) => {
                write!(f, "max_batch {n} not in 1..={MAX_BATCH_LIMIT}")
            }
            StationConfigError::MaxValueLen(n) => write!(f, "max_value_len {n} below 8"),
        }
    }
}

impl std::error::Error for StationConfigError {}

/// Station counters (monotonic; read them any time between batches).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StationStats {
    /// `process_batch` calls.
    pub batches: u64,
    /// Ops completed.
    pub ops: u64,
    /// Memory-stage reads issued.
    pub reads: u64,
    /// Ops that needed the key's value and got it from the forwarding cache.
    pub forwarded: u64,
    /// In-place updates absorbed by the cache without a write of their own.
    pub merged: u64,
    /// Merged write-backs issued after a chain drained.
    pub write_backs: u64,
    /// Write-backs the memory stage refused (a contract violation; should stay 0).
    pub writeback_failures: u64,
    /// PUT/DELETE (and stall-mode updates) written through to the memory stage.
    pub writes_through: u64,
    /// Keys that had to wait because another key held their slot (ooo mode).
    pub collision_waits: u64,
    /// Pipeline stalls on a slot conflict (stall mode).
    pub stalls: u64,
    /// Issue rounds (ooo mode; one prefetch wave each).
    pub rounds: u64,
}

/// The admission structures: slot heads, per-key entries and chain links.
#[derive(Debug)]
struct Sched {
    /// Per slot: first entry (key) waiting in it, or NONE.
    slot_head: Vec<u16>,
    /// Slots holding entries this pass (dense list, `used_len` valid).
    used: Vec<u16>,
    used_len: usize,
    /// Per entry: index of its first op (also the chain head and the key's source).
    ent_first: Vec<u16>,
    /// Per entry: index of its last op.
    ent_last: Vec<u16>,
    /// Per entry: next entry (another key) in the same slot.
    ent_next: Vec<u16>,
    /// Per entry: its slot.
    ent_slot: Vec<u16>,
    n_ent: usize,
    /// Per op: next op of the same key.
    op_next: Vec<u16>,
    /// Entries issued in the current round.
    active: Vec<u16>,
    /// Stall mode: slots taken by the window.
    busy: [u64; SLOTS / 64],
    /// Stall mode: op indices in the window, in arrival order.
    window: Vec<u16>,
    window_len: usize,
}

impl Sched {
    fn new(max_batch: usize) -> Self {
        Sched {
            slot_head: vec![NONE; SLOTS],
            used: vec![0; max_batch],
            used_len: 0,
            ent_first: vec![NONE; max_batch],
            ent_last: vec![NONE; max_batch],
            ent_next: vec![NONE; max_batch],
            ent_slot: vec![0; max_batch],
            n_ent: 0,
            op_next: vec![NONE; max_batch],
            active: vec![NONE; max_batch],
            busy: [0; SLOTS / 64],
            window: vec![NONE; max_batch],
            window_len: 0,
        }
    }

    /// Admits op `i` into `slot`; returns true if its key must wait behind another key.
    fn admit(&mut self, ops: &[KvOp<'_>], i: u16, slot: usize) -> bool {
        let key = ops[i as usize].key();
        self.op_next[i as usize] = NONE;
        let mut e = self.slot_head[slot];
        let mut last = NONE;
        while e != NONE {
            let eu = e as usize;
            if ops[self.ent_first[eu] as usize].key() == key {
                let tail = self.ent_last[eu] as usize;
                self.op_next[tail] = i;
                self.ent_last[eu] = i;
                return false;
            }
            last = e;
            e = self.ent_next[eu];
        }
        let ne = self.n_ent;
        self.n_ent += 1;
        self.ent_first[ne] = i;
        self.ent_last[ne] = i;
        self.ent_next[ne] = NONE;
        self.ent_slot[ne] = slot as u16;
        if last == NONE {
            self.slot_head[slot] = ne as u16;
            self.used[self.used_len] = slot as u16;
            self.used_len += 1;
            false
        } else {
            self.ent_next[last as usize] = ne as u16;
            true
        }
    }

    /// Fills `active` with the head entry of every busy slot; returns how many.
    fn collect_active(&mut self) -> usize {
        let mut n = 0;
        let mut keep = 0;
        for u in 0..self.used_len {
            let slot = self.used[u];
            let e = self.slot_head[slot as usize];
            if e != NONE {
                self.active[n] = e;
                n += 1;
                self.used[keep] = slot;
                keep += 1;
            }
        }
        self.used_len = keep;
        n
    }

    /// Frees entry `e`'s slot for the next key waiting in it.
    fn retire(&mut self, e: u16) {
        let eu = e as usize;
        self.slot_head[self.ent_slot[eu] as usize] = self.ent_next[eu];
    }

    fn reset(&mut self) {
        debug_assert!(self.slot_head.iter().all(|&h| h == NONE));
        self.n_ent = 0;
        self.used_len = 0;
    }

    fn is_busy(&self, slot: usize) -> bool {
        self.busy[slot / 64] & (1 << (slot % 64)) != 0
    }

    fn window_push(&mut self, i: u16, slot: usize) {
        self.busy[slot / 64] |= 1 << (slot % 64);
        self.op_next[i as usize] = NONE;
        self.window[self.window_len] = i;
        self.window_len += 1;
    }
}

/// What a finished op returns.
enum Out {
    /// No bytes.
    Empty,
    /// `cache[..n]`.
    Cache(usize),
    /// `out[..n]`.
    Result(usize),
}

/// What the forwarding cache knows about the chain's key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cached {
    /// Not read yet (or a write made the cached copy stale).
    Unknown,
    /// The key does not exist.
    Absent,
    /// The key's latest value is `cache[..n]`.
    Present(usize),
}

struct ChainState {
    cached: Cached,
    /// The cache holds updates the memory stage has not seen.
    dirty: bool,
    /// In-place updates applied to the cache in this chain.
    updates: u64,
}

/// Where a pass sends its memory accesses and completions.
struct Io<'x, M, S> {
    store: &'x mut M,
    sink: &'x mut S,
    /// Index of the pass's first op in the caller's slice.
    base: usize,
}

/// The executor: forwarding cache, result buffer, functions and counters.
#[derive(Debug)]
struct Exec {
    cache: Vec<u8>,
    out: Vec<u8>,
    registry: FunctionRegistry,
    stats: StationStats,
}

impl Exec {
    /// Runs the chain starting at op `head` against the forwarding cache, then writes
    /// back once if it updated the value in place.
    fn run_chain<M: MemoryStage, S: CompletionSink>(
        &mut self,
        ops: &[KvOp<'_>],
        next: &[u16],
        head: u16,
        io: &mut Io<'_, M, S>,
    ) {
        let Some(first) = ops.get(head as usize) else {
            return;
        };
        let key = first.key();
        let mut st = ChainState {
            cached: Cached::Unknown,
            dirty: false,
            updates: 0,
        };
        let mut i = head;
        while let Some(op) = ops.get(i as usize) {
            self.stats.ops += 1;
            let (status, out) = match self.exec_op(op, key, &mut st, io.store) {
                Ok(out) => (Status::Ok, out),
                Err(s) => (s, Out::Empty),
            };
            let bytes = match out {
                Out::Empty => &[][..],
                Out::Cache(n) => self.cache.get(..n).unwrap_or_default(),
                Out::Result(n) => self.out.get(..n).unwrap_or_default(),
            };
            io.sink.complete(io.base + i as usize, status, bytes);
            i = next.get(i as usize).copied().unwrap_or(NONE);
        }
        let mut wrote = 0;
        if let (true, Cached::Present(n)) = (st.dirty, st.cached) {
            let value = self.cache.get(..n).unwrap_or_default();
            self.stats.write_backs += 1;
            wrote = 1;
            if io.store.write_back(key, value) != Status::Ok {
                self.stats.writeback_failures += 1;
            }
        }
        self.stats.merged += st.updates.saturating_sub(wrote);
    }

    fn exec_op<M: MemoryStage>(
        &mut self,
        op: &KvOp<'_>,
        key: &[u8],
        st: &mut ChainState,
        store: &mut M,
    ) -> Result<Out, Status> {
        match *op {
            KvOp::Get { .. } => {
                load(&mut self.cache, &mut self.stats, key, st, store).map(Out::Cache)
            }
            KvOp::Put { value, .. } => {
                self.stats.writes_through += 1;
                let s = store.write(key, value);
                if s == Status::Ok {
                    st.dirty = false;
                    st.cached = match self.cache.get_mut(..value.len()) {
                        Some(dst) => {
                            dst.copy_from_slice(value);
                            Cached::Present(value.len())
                        }
                        None => Cached::Unknown,
                    };
                    Ok(Out::Empty)
                } else {
                    Err(s)
                }
            }
            KvOp::Delete { .. } => {
                if st.cached == Cached::Absent {
                    self.stats.forwarded += 1;
                    return Err(Status::NotFound);
                }
                delete_through(&mut self.stats, key, st, store).map(|()| Out::Empty)
            }
            // Read-modify-write: its meaning is `semantics::run`'s, on the cached value.
            _ => {
                let Exec {
                    cache,
                    out,
                    registry,
                    stats,
                } = self;
                let (chain, mem) = (&mut *st, &mut *store);
                let done = semantics::run(
                    op,
                    registry,
                    move |_| {
                        let n = load(cache, stats, key, chain, mem)?;
                        cache.get_mut(..n).ok_or(Status::ValueTooLarge)
                    },
                    out,
                )?;
                if done.wrote {
                    st.dirty = true;
                    st.updates += 1;
                }
                if done.deletes {
                    delete_through(&mut self.stats, key, st, store)?;
                }
                Ok(Out::Result(done.len))
            }
        }
    }
}

/// Deletes `key` in the memory stage (a write-through: updates cached for it are
/// dropped with it); the cache then knows the key is absent.
fn delete_through<M: MemoryStage>(
    stats: &mut StationStats,
    key: &[u8],
    st: &mut ChainState,
    store: &mut M,
) -> Result<(), Status> {
    stats.writes_through += 1;
    let s = store.delete(key);
    if matches!(s, Status::Ok | Status::NotFound) {
        st.cached = Cached::Absent;
        st.dirty = false;
    }
    if s == Status::Ok {
        Ok(())
    } else {
        Err(s)
    }
}

/// The key's value into `cache`, from it or (once per chain) from the memory stage;
/// its length.
fn load<M: MemoryStage>(
    cache: &mut [u8],
    stats: &mut StationStats,
    key: &[u8],
    st: &mut ChainState,
    store: &mut M,
) -> Result<usize, Status> {
    match st.cached {
        Cached::Present(n) => {
            stats.forwarded += 1;
            Ok(n)
        }
        Cached::Absent => {
            stats.forwarded += 1;
            Err(Status::NotFound)
        }
        Cached::Unknown => {
            stats.reads += 1;
            match store.read(key, cache) {
                Ok(n) if n <= cache.len() => {
                    st.cached = Cached::Present(n);
                    Ok(n)
                }
                // The memory stage broke its contract (a length beyond `out`).
                Ok(_) => Err(Status::Internal),
                Err(Status::NotFound) => {
                    st.cached = Cached::Absent;
                    Err(Status::NotFound)
                }
                Err(e) => Err(e),
            }
        }
    }
}

/// A per-lcore reservation station; `H` computes the key hash (the engine's
/// `key_hash` in the dataplane, anything in tests).
#[derive(Debug)]
pub struct Station<H> {
    cfg: StationConfig,
    hash: H,
    sched: Sched,
    exec: Exec,
}

impl<H: Fn(&[u8]) -> u64> Station<H> {
    /// Builds a station, allocating all its pools.
    pub fn new(
        cfg: StationConfig,
        hash: H,
        registry: FunctionRegistry,
    ) -> Result<Self, StationConfigError> {
        if cfg.max_batch == 0 || cfg.max_batch > MAX_BATCH_LIMIT {
            return Err(StationConfigError::MaxBatch(cfg.max_batch));
        }
        if cfg.max_value_len < 8 {
            return Err(StationConfigError::MaxValueLen(cfg.max_value_len));
        }
        Ok(Station {
            cfg,
            hash,
            sched: Sched::new(cfg.max_batch),
            exec: Exec {
                cache: vec![0; cfg.max_value_len],
                out: vec![0; cfg.max_value_len],
                registry,
                stats: StationStats::default(),
            },
        })
    }

    /// The configuration.
    pub fn config(&self) -> &StationConfig {
        &self.cfg
    }

    /// The function registry ops are resolved against.
    pub fn registry(&self) -> &FunctionRegistry {
        &self.exec.registry
    }

    /// The counters so far.
    pub fn stats(&self) -> StationStats {
        self.exec.stats
    }

    /// Executes `ops` against `store`, calling `sink` exactly once per op with its index
    /// in `ops` (see the module doc for ordering). Slices longer than `max_batch` are cut
    /// into passes that each drain completely.
    ///
    /// Every read-modify-write op (UPDATE_*, REDUCE, FILTER) on a missing key answers
    /// `NotFound` and creates nothing. Its checks run in the order function/predicate
    /// (docs/PROTOCOL.md §3.2 matrix) → key exists → lengths; an error changes nothing.
    pub fn process_batch<M: MemoryStage, S: CompletionSink>(
        &mut self,
        ops: &[KvOp<'_>],
        store: &mut M,
        sink: &mut S,
    ) {
        self.exec.stats.batches += 1;
        for (c, chunk) in ops.chunks(self.cfg.max_batch).enumerate() {
            let mut io = Io {
                store: &mut *store,
                sink: &mut *sink,
                base: c * self.cfg.max_batch,
            };
            if self.cfg.ooo {
                self.pass_ooo(chunk, &mut io);
            } else {
                self.pass_stall(chunk, &mut io);
            }
        }
    }

    fn pass_ooo<M: MemoryStage, S: CompletionSink>(
        &mut self,
        ops: &[KvOp<'_>],
        io: &mut Io<'_, M, S>,
    ) {
        for (i, op) in ops.iter().enumerate() {
            let slot = slot_of((self.hash)(op.key()));
            if self.sched.admit(ops, i as u16, slot) {
                self.exec.stats.collision_waits += 1;
            }
        }
        loop {
            let n = self.sched.collect_active();
            if n == 0 {
                break;
            }
            self.exec.stats.rounds += 1;
            for &e in &self.sched.active[..n] {
                let first = self.sched.ent_first[e as usize] as usize;
                io.store.prefetch(ops[first].key());
            }
            for a in 0..n {
                let e = self.sched.active[a];
                let head = self.sched.ent_first[e as usize];
                self.exec.run_chain(ops, &self.sched.op_next, head, io);
                self.sched.retire(e);
            }
        }
        self.sched.reset();
    }

    fn pass_stall<M: MemoryStage, S: CompletionSink>(
        &mut self,
        ops: &[KvOp<'_>],
        io: &mut Io<'_, M, S>,
    ) {
        for (i, op) in ops.iter().enumerate() {
            let slot = slot_of((self.hash)(op.key()));
            if self.sched.is_busy(slot) {
                self.exec.stats.stalls += 1;
                self.flush_window(ops, io);
            }
            self.sched.window_push(i as u16, slot);
        }
        self.flush_window(ops, io);
    }

    /// Stall mode: executes the window, each op on its own (read, modify, write).
    fn flush_window<M: MemoryStage, S: CompletionSink>(
        &mut self,
        ops: &[KvOp<'_>],
        io: &mut Io<'_, M, S>,
    ) {
        let n = self.sched.window_len;
        for &i in &self.sched.window[..n] {
            io.store.prefetch(ops[i as usize].key());
        }
        for w in 0..n {
            let i = self.sched.window[w];
            self.exec.run_chain(ops, &self.sched.op_next, i, io);
        }
        self.sched.window_len = 0;
        self.sched.busy = [0; SLOTS / 64];
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::{func, Atomic, Width};
    use std::collections::HashMap;

    #[derive(Default)]
    struct Map(HashMap<Vec<u8>, Vec<u8>>, u64, u64);

    impl MemoryStage for Map {
        fn read(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
            self.1 += 1;
            let v = self.0.get(key).ok_or(Status::NotFound)?;
            out.get_mut(..v.len())
                .ok_or(Status::ValueTooLarge)?
                .copy_from_slice(v);
            Ok(v.len())
        }
        fn write(&mut self, key: &[u8], value: &[u8]) -> Status {
            self.2 += 1;
            self.0.insert(key.to_vec(), value.to_vec());
            Status::Ok
        }
        fn delete(&mut self, key: &[u8]) -> Status {
            self.2 += 1;
            match self.0.remove(key) {
                Some(_) => Status::Ok,
                None => Status::NotFound,
            }
        }
    }

    fn add(key: &[u8], d: u64) -> KvOp<'_> {
        KvOp::UpdateS2S {
            key,
            atomic: Atomic {
                func: func::FETCH_ADD,
                width: Width::W8,
                signed: false,
            },
            param: d,
            param2: 0,
        }
    }

    #[test]
    fn hot_key_atomics_read_once_write_once() {
        let mut st = Station::new(
            StationConfig::default(),
            |k: &[u8]| k[0] as u64,
            FunctionRegistry::new(),
        )
        .unwrap();
        let mut m = Map::default();
        m.0.insert(b"k".to_vec(), 0u64.to_le_bytes().to_vec());
        let ops: Vec<KvOp<'_>> = (0..64).map(|_| add(b"k", 1)).collect();
        let mut got = Vec::new();
        st.process_batch(&ops, &mut m, &mut |i, s, v: &[u8]| {
            got.push((i, s, u64::from_le_bytes(v.try_into().unwrap())))
        });
        let want: Vec<_> = (0..64).map(|i| (i, Status::Ok, i as u64)).collect();
        assert_eq!(got, want);
        assert_eq!(m.0[&b"k"[..]], 64u64.to_le_bytes());
        assert_eq!((m.1, m.2), (1, 1));
        let s = st.stats();
        assert_eq!(
            (s.reads, s.forwarded, s.merged, s.write_backs),
            (1, 63, 63, 1)
        );
    }

    #[test]
    fn stall_mode_stalls_on_every_conflict() {
        let cfg = StationConfig {
            ooo: false,
            ..StationConfig::default()
        };
        let mut st = Station::new(cfg, |k: &[u8]| k[0] as u64, FunctionRegistry::new()).unwrap();
        let mut m = Map::default();
        m.0.insert(b"k".to_vec(), 0u64.to_le_bytes().to_vec());
        let ops: Vec<KvOp<'_>> = (0..10).map(|_| add(b"k", 1)).collect();
        let mut n = 0;
        st.process_batch(&ops, &mut m, &mut |i, s, v: &[u8]| {
            assert_eq!((i, s, v), (n, Status::Ok, &(n as u64).to_le_bytes()[..]));
            n += 1;
        });
        assert_eq!(n, 10);
        assert_eq!((m.1, m.2), (10, 10));
        assert_eq!(st.stats().stalls, 9);
    }

    #[test]
    fn config_is_checked() {
        let h = |_: &[u8]| 0;
        let bad = |max_batch, max_value_len| StationConfig {
            ooo: true,
            max_batch,
            max_value_len,
        };
        assert!(Station::new(bad(0, 64), h, FunctionRegistry::new()).is_err());
        assert!(Station::new(bad(4097, 64), h, FunctionRegistry::new()).is_err());
        assert!(Station::new(bad(64, 7), h, FunctionRegistry::new()).is_err());
        assert!(Station::new(bad(4096, 8), h, FunctionRegistry::new()).is_ok());
    }

    #[test]
    fn slots_spread() {
        let mut seen = [false; SLOTS];
        for h in 0..8192u64 {
            seen[slot_of(h * 2)] = true;
        }
        assert!(seen.iter().filter(|&&b| b).count() > 900);
    }
}
