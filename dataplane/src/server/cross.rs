//! Cross-partition transactions (docs/TRANSACTIONS.md): a transaction whose keys
//! live in several partitions runs whole on the worker that received it — the
//! *coordinator* — over every involved partition's engine, while the workers owning
//! the other partitions are **parked**.
//!
//! * **Parking** ([`PartitionTable`]): one slot per worker with a state word. The
//!   coordinator asks a participant to park (`RUNNING → PARK_REQUESTED`); the
//!   participant sees it at its next park point — between two bursts, or while it
//!   waits for the token itself — publishes a pointer to its [`Server`], sets
//!   `PARKED` and spins until the coordinator sets `RUNNING` again. Meanwhile the
//!   coordinator is the only one touching that server's engine and mutation tap.
//! * **One coordinator at a time**: the table's token — a ticket lock (take a
//!   number, wait until it is served), taken only by cross-partition transactions —
//!   orders them node-wide in arrival order, so two coordinators never wait for each
//!   other and none starves; a worker waiting for its turn parks when asked.
//!   Single-partition requests never touch the token: their hot path costs one
//!   relaxed load of the worker's own slot per loop.
//! * **Replication order**: the coordinator's tap first waits for every
//!   participant's ring up to what it took ([`MutationSink::wait_for`]: their
//!   earlier writes of the transaction's keys, and those it read, come first in the
//!   stream, so a response held for the coordinator's position in sync mode covers
//!   them); then takes the whole committed transaction as one group (another
//!   partition's keys through [`MutationSink::stream_put`], their snapshot copies to
//!   their owners' taps through [`MutationSink::local_put`]), so a replica applies it
//!   at once; then each participant written waits for the coordinator's ring past the
//!   group (its later writes of those keys come after).
//!
//! This is H-Store's multi-partition execution, with partitions locked as a whole
//! instead of Orca's per-key lock table: a run-to-completion worker serves its
//! partition serially anyway, so locking it whole for the few microseconds of one
//! transaction is what a per-key table would cost on the hot path of every request.
//!
//! [`MutationSink::wait_for`]: crate::mutation::MutationSink::wait_for
//! [`MutationSink::stream_put`]: crate::mutation::MutationSink::stream_put
//! [`MutationSink::local_put`]: crate::mutation::MutationSink::local_put

use super::conn::reserve;
use super::Server;
use crate::mutation::{record_cost, MutationSink};
use crate::stats::WorkerStats;
use kvengine::Engine;
use kvtx::{Outcome, TxStore};
use kvwire::partition::partition_of_hash;
use kvwire::payload::{AbortReason, TxAbort, TxReader};
use kvwire::Status;
use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

/// Partitions a node can coordinate transactions over (a bit set of `u64`).
pub const MAX_PARTITIONS: usize = 64;
const _: () = assert!(MAX_PARTITIONS <= u64::BITS as usize);

/// Slot states.
const RUNNING: u8 = 0;
const PARK_REQUESTED: u8 = 1;
const PARKED: u8 = 2;
/// The worker left its loop: it parks no more.
const GONE: u8 = 3;

/// Busy polls before a waiting worker starts yielding its CPU (on a small host the
/// worker it waits for may need that CPU).
const SPINS_BEFORE_YIELD: u32 = 256;

/// One worker's parking slot, on its own cache line.
#[repr(align(64))]
struct Slot {
    state: AtomicU8,
    /// The worker's server, published when it parks.
    server: AtomicPtr<Server>,
    /// Wakes the worker if it sleeps (its doorbell), so a park request is seen at once.
    waker: OnceLock<ParkWaker>,
}

/// What wakes a sleeping worker when a coordinator asks it to park.
pub type ParkWaker = Box<dyn Fn() + Send + Sync>;

/// One counter of the coordinator token, on its own cache line.
#[repr(align(64))]
struct Counter(AtomicU32);

/// The parking slots of a node's workers and the coordinator token: shared by all
/// the node's servers ([`Server::set_partition_table`]).
pub struct PartitionTable {
    /// The token's next ticket.
    next: Counter,
    /// The ticket whose holder coordinates now.
    serving: Counter,
    slots: Box<[Slot]>,
}

impl PartitionTable {
    /// A table for `partitions` workers (2 ..= [`MAX_PARTITIONS`]).
    pub fn new(partitions: usize) -> Result<Arc<PartitionTable>, String> {
        if !(2..=MAX_PARTITIONS).contains(&partitions) {
            return Err(format!(
                "cross-partition transactions need 2 to {MAX_PARTITIONS} partitions, not {partitions}"
            ));
        }
        Ok(Arc::new(PartitionTable {
            next: Counter(AtomicU32::new(0)),
            serving: Counter(AtomicU32::new(0)),
            slots: (0..partitions)
                .map(|_| Slot {
                    state: AtomicU8::new(RUNNING),
                    server: AtomicPtr::new(std::ptr::null_mut()),
                    waker: OnceLock::new(),
                })
                .collect(),
        }))
    }

    /// Number of partitions.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Never true (a table has at least 2 partitions).
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    fn slot(&self, p: u32) -> &Slot {
        &self.slots[p as usize]
    }

    /// What wakes partition `p`'s worker when it sleeps (set once; later calls are
    /// ignored).
    pub fn set_waker(&self, p: u32, waker: ParkWaker) {
        if let Some(slot) = self.slots.get(p as usize) {
            let _ = slot.waker.set(waker);
        }
    }
}

/// Spin, then yield.
#[derive(Default)]
struct Backoff(u32);

impl Backoff {
    fn snooze(&mut self) {
        if self.0 < SPINS_BEFORE_YIELD {
            self.0 += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The bits set in `m`, lowest first.
fn bits(mut m: u64) -> impl Iterator<Item = u32> {
    std::iter::from_fn(move || {
        (m != 0).then(|| {
            let b = m.trailing_zeros();
            m &= m - 1;
            b
        })
    })
}

/// Partition of `key` among `n`.
#[inline]
fn partition_of(key: &[u8], n: u32) -> u32 {
    partition_of_hash(kvengine::key_hash(key), n)
}

/// The engines of the partitions a transaction spans, by partition.
struct Engines<'a> {
    n: u32,
    by_partition: [Option<&'a mut Engine>; MAX_PARTITIONS],
    max_value_len: usize,
}

impl Engines<'_> {
    fn of(&mut self, key: &[u8]) -> Option<&mut Engine> {
        self.by_partition
            .get_mut(partition_of(key, self.n) as usize)?
            .as_deref_mut()
    }
}

impl TxStore for Engines<'_> {
    fn get(&mut self, key: &[u8], out: &mut [u8]) -> Result<usize, Status> {
        match self.of(key) {
            Some(e) => e.get(key, out).map_err(Status::from),
            // Not parked: cannot happen (every key's partition was), refused anyway.
            None => Err(Status::WrongPartition),
        }
    }
    fn put(&mut self, key: &[u8], value: &[u8]) -> Status {
        self.of(key)
            .map_or(Status::WrongPartition, |e| e.put(key, value).into())
    }
    fn delete(&mut self, key: &[u8]) -> Status {
        self.of(key)
            .map_or(Status::WrongPartition, |e| e.delete(key).into())
    }
    fn max_value_len(&self) -> usize {
        self.max_value_len
    }
}

/// The abort when the partitions cannot be coordinated now (a participant's
/// replication log is full or its worker stopped): the client may retry.
const TRY_AGAIN: Outcome = Outcome::Aborted(TxAbort {
    reason: AbortReason::CrossPartition,
    op: 255,
    status: Status::TryAgain,
});

impl Server {
    /// Lets this server coordinate transactions over the other partitions of
    /// `table` and be parked by theirs (every worker of the node shares one table,
    /// sized to [`Server::set_partition`]'s `n`). Without a table, a transaction
    /// with a key of another partition aborts `CROSS_PARTITION`.
    pub fn set_partition_table(&mut self, table: Arc<PartitionTable>) -> Result<(), String> {
        if table.len() != self.partitions as usize {
            return Err(format!(
                "partition table of {} for {} partitions",
                table.len(),
                self.partitions
            ));
        }
        self.cross = Some(table);
        Ok(())
    }

    /// What wakes this partition's worker when it sleeps and a coordinator asks it to
    /// park (its doorbell); nothing without a partition table.
    pub fn set_park_waker(&self, waker: ParkWaker) {
        if let Some(t) = &self.cross {
            t.set_waker(self.partition, waker);
        }
    }

    /// Between bursts: parks while a coordinator runs a transaction over this
    /// partition (one relaxed load when none does).
    #[inline]
    pub fn park_point(&mut self) {
        let Some(t) = &self.cross else { return };
        if t.slot(self.partition).state.load(Ordering::Relaxed) != PARK_REQUESTED {
            return;
        }
        // No packet of a burst holds a reservation now: the coordinator may use all
        // the room of the tap.
        if let Some(tap) = &self.tap {
            self.tap_budget = tap.room();
        }
        self.park();
    }

    /// Leaves the table (the worker stops): from now on a transaction over this
    /// partition aborts `CROSS_PARTITION` / `TRY_AGAIN`. Parks first if asked to.
    pub fn leave_partition_table(&mut self) {
        let Some(t) = self.cross.clone() else { return };
        let slot = t.slot(self.partition);
        while let Err(s) =
            slot.state
                .compare_exchange(RUNNING, GONE, Ordering::AcqRel, Ordering::Acquire)
        {
            if s == GONE {
                break;
            }
            self.park();
        }
    }

    /// Publishes this server to the coordinator and waits until it is done with it.
    fn park(&mut self) {
        let Some(t) = self.cross.clone() else { return };
        let slot = t.slot(self.partition);
        slot.server.store(self as *mut Server, Ordering::Release);
        slot.state.store(PARKED, Ordering::Release);
        let mut b = Backoff::default();
        while slot.state.load(Ordering::Acquire) == PARKED {
            b.snooze();
        }
    }

    /// The partitions other than this one that `tx`'s keys belong to, as a bit set:
    /// 0 when they are all this one's, or when this server cannot coordinate (no
    /// table, or a partition beyond [`MAX_PARTITIONS`]) — the executor then aborts
    /// the transaction `CROSS_PARTITION` at its first foreign key.
    pub(super) fn other_partitions(&self, tx: &TxReader<'_>) -> u64 {
        if self.cross.is_none() {
            return 0;
        }
        let mut m = 0u64;
        for op in tx.batch().flatten() {
            let p = partition_of(op.key(), self.partitions);
            if p as usize >= MAX_PARTITIONS {
                return 0;
            }
            m |= 1 << p;
        }
        m & !(1u64 << self.partition)
    }

    /// Runs `tx` over this partition and the partitions `others` (a bit set), with
    /// their workers parked; `payload` is its request's (for the room its post-images
    /// may take in the participants' taps).
    pub(super) fn run_cross(
        &mut self,
        tx: &TxReader<'_>,
        payload: &[u8],
        others: u64,
        stats: &WorkerStats,
    ) -> Outcome {
        stats.tx_cross_partition.inc();
        self.with_parked(others, |me, parts| {
            me.execute_parked(tx, payload, others, parts)
        })
        .unwrap_or(TRY_AGAIN)
    }

    /// Runs `f` over this server and the servers of the partitions `others` (a bit
    /// set; by partition in `f`'s array), with their workers parked: takes the token
    /// (one coordinator at a time, in arrival order), parks every worker of
    /// `others`, runs `f`, lets them go. `None` (and `f` not run) without a table or
    /// when one of those workers stopped.
    // The one unsafe step of the crate: using a parked worker's server (below).
    #[allow(unsafe_code)]
    pub fn with_parked<R>(
        &mut self,
        others: u64,
        f: impl FnOnce(&mut Server, [Option<&mut Server>; MAX_PARTITIONS]) -> R,
    ) -> Option<R> {
        let table = self.cross.clone()?;
        let me = self.partition;
        let others = others & !(1u64 << me);
        let mut b = Backoff::default();
        let ticket = table.next.0.fetch_add(1, Ordering::Relaxed);
        while table.serving.0.load(Ordering::Acquire) != ticket {
            // Another coordinator runs: it may be waiting for this worker to park.
            if table.slot(me).state.load(Ordering::Relaxed) == PARK_REQUESTED {
                self.park();
            }
            b.snooze();
        }
        let mut parked = 0u64;
        let mut servers = [std::ptr::null_mut::<Server>(); MAX_PARTITIONS];
        let mut all_parked = true;
        for p in bits(others) {
            let Some(slot) = table.slots.get(p as usize) else {
                all_parked = false;
                break;
            };
            if slot
                .state
                .compare_exchange(RUNNING, PARK_REQUESTED, Ordering::AcqRel, Ordering::Acquire)
                .is_err()
            {
                // GONE: the worker stopped (only the token holder parks others).
                all_parked = false;
                break;
            }
            parked |= 1 << p;
            if let Some(wake) = slot.waker.get() {
                wake();
            }
            let mut b = Backoff::default();
            while slot.state.load(Ordering::Acquire) != PARKED {
                b.snooze();
            }
            servers[p as usize] = slot.server.load(Ordering::Acquire);
        }
        let out = if all_parked {
            // Every pointer of `others` was published by its worker right before it
            // stored PARKED (Release), which this thread read (Acquire): it points
            // to that worker's live server, which its worker does not touch until
            // the state is RUNNING again (stored below, Release, so our writes are
            // visible to it then). The token keeps every other coordinator out,
            // and each partition is a distinct server, not this one (`others`
            // excludes it): the `&mut` are unique.
            let mut parts: [Option<&mut Server>; MAX_PARTITIONS] = std::array::from_fn(|_| None);
            for p in bits(others) {
                // SAFETY: `servers[p]` is parked (above): ours alone until RUNNING.
                parts[p as usize] = unsafe { servers[p as usize].as_mut() };
            }
            Some(f(self, parts))
        } else {
            None
        };
        for p in bits(parked) {
            table.slot(p).state.store(RUNNING, Ordering::Release);
        }
        table
            .serving
            .0
            .store(ticket.wrapping_add(1), Ordering::Release);
        out
    }

    /// The transaction itself, over this server and the parked servers `parts`
    /// (by partition) of `others`.
    fn execute_parked(
        &mut self,
        tx: &TxReader<'_>,
        payload: &[u8],
        others: u64,
        mut parts: [Option<&mut Server>; MAX_PARTITIONS],
    ) -> Outcome {
        // Room in each participant's tap (its reservation budget: what its own burst
        // has not reserved) for the local copies of the post-images (a snapshot's)
        // and the wait for our ring; in ours for the waits (the post-images and
        // their group were reserved with the request).
        let max_value_len = self.engine.max_value_len();
        let wait = kvrepl::log::WAIT_LEN;
        for s in parts.iter_mut().flatten() {
            if s.tap.is_some()
                && !(reserve(&mut s.tap_budget, payload, max_value_len)
                    && s.tap_budget.checked_sub(wait).is_some_and(|l| {
                        s.tap_budget = l;
                        true
                    }))
            {
                return TRY_AGAIN;
            }
        }
        if self.tap.is_some() {
            let need = others.count_ones() as usize * kvrepl::log::WAIT_LEN;
            match self.tap_budget.checked_sub(need) {
                Some(left) => self.tap_budget = left,
                None => return TRY_AGAIN,
            }
        }
        let n = self.partitions;
        let me = self.partition as usize;
        let Server {
            engine,
            station,
            tx_exec,
            tap,
            write_status,
            ..
        } = self;
        let mut taps: [Option<&mut (dyn MutationSink + 'static)>; MAX_PARTITIONS] =
            std::array::from_fn(|_| None);
        let mut engines = Engines {
            n,
            by_partition: std::array::from_fn(|_| None),
            max_value_len,
        };
        engines.by_partition[me] = Some(engine);
        taps[me] = tap.as_deref_mut();
        for (p, s) in parts.iter_mut().enumerate() {
            if let Some(s) = s.as_deref_mut() {
                engines.by_partition[p] = Some(&mut s.engine);
                taps[p] = s.tap.as_deref_mut();
            }
        }
        let outcome = tx_exec.execute(
            tx,
            &mut engines,
            station.registry(),
            |_| true,
            *write_status,
        );
        // What this ring takes from here on enters the stream after the participants'
        // records up to now: their earlier writes of the keys the transaction wrote
        // (a key's records stay in order), and those it read (in sync mode its
        // answer, held for our position, then covers them) — whatever the outcome.
        let positions: [u64; MAX_PARTITIONS] =
            std::array::from_fn(|p| taps[p].as_deref().map_or(0, |t| t.position()));
        if let Some(own) = taps[me].as_deref_mut() {
            for p in bits(others) {
                own.wait_for(p, positions[p as usize]);
            }
        }
        if outcome == Outcome::Committed {
            // The whole transaction in our ring, behind one group record when it has
            // two or more post-images (docs/REPLICATION.md §2): a replica applies it
            // at once, over all its partitions. Each key's local copy (a snapshot's)
            // goes to the tap of the partition that owns it.
            let (mut count, mut bytes, mut wrote) = (0u32, 0u32, 0u64);
            for (k, v) in tx_exec.post_images() {
                count += 1;
                bytes += record_cost(k.len(), v.map_or(0, <[u8]>::len)) as u32;
                wrote |= 1 << partition_of(k, n);
            }
            if let (Some(own), true) = (taps[me].as_deref_mut(), count > 1) {
                own.group(bytes);
            }
            for (k, v) in tx_exec.post_images() {
                let p = partition_of(k, n) as usize;
                if p == me {
                    if let Some(t) = taps[me].as_deref_mut() {
                        match v {
                            Some(v) => t.put(k, v),
                            None => t.delete(k),
                        }
                    }
                    continue;
                }
                if let Some(t) = taps[me].as_deref_mut() {
                    match v {
                        Some(v) => t.stream_put(k, v),
                        None => t.stream_delete(k),
                    }
                }
                if let Some(t) = taps[p].as_deref_mut() {
                    match v {
                        Some(v) => t.local_put(k, v),
                        None => t.local_delete(k),
                    }
                }
            }
            // A participant's later writes of those keys enter the stream after the
            // transaction.
            let end = taps[me].as_deref().map_or(0, |t| t.position());
            for p in bits(wrote & others) {
                if let Some(t) = taps[p as usize].as_deref_mut() {
                    t.wait_for(me as u32, end);
                }
            }
        }
        outcome
    }
}
