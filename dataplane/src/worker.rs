//! The run-to-completion worker loop (DPDK's l2fwd shape):
//! rx burst → [`Server::handle_burst`] → tx burst, with a TSC-timed tx drain so a
//! half-full tx batch never waits longer than `drain_us`.
//!
//! Fault injection (`--inject-*`): the transmit side can drop, duplicate or delay the
//! frames it queues for the NIC, from a seeded [`kvload::Faults`] plan per worker;
//! with no fault configured the only cost is one branch per frame.

use dataplane::control::{self, WorkerControl};
use dataplane::hold::HoldQueue;
use dataplane::latency::Sampler;
use dataplane::packet::MAX_BURST;
use dataplane::repl::apply::{apply_span, Applier};
use dataplane::repl::scan::ScanShared;
use dataplane::server::Server;
use dataplane::snapshot::WorkerSnap;
use dataplane::stats::WorkerStats;
use dataplane::tx::{TxFrame, TxSink};
use dpdk::{
    tsc, DpdkRegion, IdleBackoff, Mbuf, MbufBurst, Mempool, RingConsumer, RingProducer, RxQueue,
    TxQueue,
};
use kvload::inject::Injector;
use kvload::FaultConfig;
use kvwire::partition::{peek_dest_qp, peek_owner};
use kvwire::{response_frame_len, response_payload_capacity, DropReason};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How many tx frames may wait for the NIC before new ones are dropped.
const TX_QUEUE: usize = 256;
/// Queued tx frames are freed when the NIC took none of them for this long (a peer
/// that went away must not pin mbufs forever).
const TX_STALL_MS: u64 = 50;
/// Above this many queued tx frames the transmit side reports itself backlogged
/// (3/4 of `TX_QUEUE`).
pub const TX_BACKLOG: usize = TX_QUEUE / 4 * 3;
/// Replicated records a replica worker applies per loop iteration at most (bounds the
/// delay they add to the requests waiting behind them).
const APPLY_PER_LOOP: usize = 256;
/// Delayed frames an injecting worker holds at most (a further delay is sent at once).
const INJECT_HOLD: usize = 16;

/// The server and the memory its engine lives in. Field order matters: the server
/// (and its engine, which points into `_mem`) is dropped before `_mem` is freed.
pub struct Store {
    /// Request processing state.
    pub server: Server,
    /// DPDK hugepage memory backing the engine (None: the engine owns heap memory).
    pub _mem: Option<DpdkRegion>,
    /// On a replica: the master's records for this partition, applied between bursts.
    pub apply: Option<Applier>,
    /// The replication loop, polled by this worker between its bursts instead of by a
    /// replication lcore (`--repl-inline`: the baseline without SKV's offload).
    pub inline_repl: Option<crate::replicator::Replicator>,
    /// Sync replication (`mode: sync` on a master): this worker's shared state with
    /// the replication lcore, whose `durable` position releases held responses.
    pub sync: Option<Arc<ScanShared>>,
    /// What an idle worker sleeps on (`server.idle: adaptive` on a replicated node):
    /// rung by the replication lcore when it routed records to this worker.
    pub bell: Option<Arc<dpdk::Doorbell>>,
}

/// Responses a sync master worker holds at most (frames); beyond [`HOLD_SLACK`] left,
/// the server answers new requests with RNR NAKs.
const HOLD_FRAMES: usize = 4096;
/// Room kept for the frames of requests already admitted in a burst.
const HOLD_SLACK: usize = 512;

/// Sync mode's held responses of one worker.
struct SyncHold {
    q: HoldQueue<Mbuf>,
    shared: Arc<ScanShared>,
    /// This node is a master taking writes (not paused): responses are held.
    active: bool,
}

/// Loop settings.
#[derive(Clone)]
pub struct WorkerConfig {
    /// Packets per rx burst.
    pub burst: usize,
    /// TX drain period in microseconds.
    pub drain_us: u64,
    /// Bounce frames without parsing them.
    pub echo: bool,
    /// Print stats this often (zero: never).
    pub stats_interval: Duration,
    /// The workers whose counters this one prints, one labelled line each, every
    /// `stats_interval`: all of them for the worker on the main lcore, none for the
    /// others (only the main lcore prints).
    pub printed: Vec<Arc<WorkerStats>>,
    /// Stop at this time, if set.
    pub deadline: Option<Instant>,
    /// Consecutive empty polls after which every further empty poll yields the CPU
    /// (0: never).
    pub idle: dpdk::IdlePolicy,
    /// Faults injected into the frames this worker transmits (`--inject-*`); `None`
    /// (no fault) costs one branch per frame. Worker `w` draws from `seed + w`.
    pub inject: Option<FaultConfig>,
    /// More frames than this waiting for the NIC is overload: new requests get an
    /// RNR NAK ([`TxSink::backlogged`]); default [`TX_BACKLOG`].
    pub rnr_backlog: usize,
    /// Sample the service latency of one in this many packets (0: off).
    pub latency_sample_every: u32,
    /// IP MTU of the responses (`server.mtu`): the largest frame this worker builds.
    pub mtu: usize,
    /// Sleeping workers wake on their queue's Rx interrupt where the port has one
    /// (`--no-rx-intr` clears it): net_tap's descriptor, a memif queue armed around
    /// each sleep.
    pub rx_intr: bool,
    /// The longest sleep while a packet can end it (`server.idle_sleep_max_rx_us`).
    pub rx_sleep_max_us: u32,
}

/// How a worker passes requests that reached its queue but belong to another
/// partition (their client QP's, `kvwire::partition`) to the owner, in arrival order.
pub struct Handoff {
    /// This worker's partition.
    pub me: u32,
    /// Number of partitions (workers).
    pub n: u32,
    /// Requests other workers handed to this one (multi-producer, single-consumer).
    pub inbox: Option<RingConsumer<Mbuf>>,
    /// Producers into every worker's inbox, indexed by partition (`None` for `me`).
    pub outboxes: Vec<Option<RingProducer<Mbuf>>>,
    /// Every worker's doorbell by partition (`None`: it does not sleep on one), rung
    /// once per burst that handed it requests.
    pub bells: Vec<Option<Arc<dpdk::Doorbell>>>,
}

impl Handoff {
    /// Moves the frames of `rx` that belong to other partitions to their owners' inboxes
    /// (dropping and counting one whose inbox is full); `rx` keeps this worker's frames.
    #[inline]
    fn steer(&mut self, rx: &mut MbufBurst<MAX_BURST>, stats: &WorkerStats) {
        let mut keep = MbufBurst::<MAX_BURST>::new();
        // The owners handed something in this burst (partitions < 64).
        let mut handed: u64 = 0;
        for m in rx.drain() {
            let owner = peek_owner(m.data(), self.n).unwrap_or(self.me);
            match self
                .outboxes
                .get_mut(owner as usize)
                .and_then(Option::as_mut)
            {
                Some(out) if owner != self.me => match out.enqueue(m) {
                    Ok(()) => {
                        stats.handed_off.inc();
                        handed |= 1 << (owner % 64);
                    }
                    Err(m) => {
                        stats.drop(DropReason::HandoffFull);
                        drop(m);
                    }
                },
                // Ours (or unparseable: the server judges it). Cannot overflow: `keep`
                // has the capacity of `rx`.
                _ => {
                    let _ = keep.push(m);
                }
            }
        }
        std::mem::swap(rx, &mut keep);
        while handed != 0 {
            let owner = handed.trailing_zeros() as usize;
            handed &= handed - 1;
            if let Some(Some(b)) = self.bells.get(owner) {
                b.ring();
            }
        }
    }
}

/// An mbuf being filled with a response frame.
struct TxMbuf(Mbuf);

impl TxFrame for TxMbuf {
    #[inline]
    fn room(&mut self) -> &mut [u8] {
        self.0.data_mut()
    }
    #[inline]
    fn set_len(&mut self, len: usize) {
        let ok = self.0.set_len(len);
        debug_assert!(ok, "frame length within the room");
    }
}

/// The fault injector of worker `w` (`--inject-*`): the plan seeded with `seed + w`;
/// `None` when no fault is configured.
fn injector<T>(cfg: Option<FaultConfig>, w: u32) -> Option<Box<Injector<T, INJECT_HOLD>>> {
    let cfg = cfg?;
    Injector::new(FaultConfig {
        seed: cfg.seed.wrapping_add(u64::from(w)),
        ..cfg
    })
    .map(Box::new)
}

/// The one-line injection summary worker `w` prints at exit.
fn inject_summary<T, const N: usize>(inj: &Injector<T, N>, w: u32) -> String {
    let c = inj.counts();
    format!(
        "inject worker{w}: frames {} dropped {} duplicated {} delayed {} (dup without mbuf {}, holdback full {})",
        c.total(),
        c.dropped,
        c.duplicated,
        c.delayed,
        inj.dup_failed(),
        inj.hold_full()
    )
}

/// The worker's transmit side: response mbufs from the pool, and frames waiting for
/// the NIC (up to `TX_QUEUE`, drained in bursts). It is the server's [`TxSink`].
struct TxSide<'a> {
    txq: TxQueue,
    pool: &'a Mempool,
    stats: &'a WorkerStats,
    /// Bytes of a response frame at the MTU.
    frame_cap: usize,
    burst: MbufBurst<TX_QUEUE>,
    /// TSC of the last flush that moved a frame (or found nothing to move).
    last_progress: u64,
    /// Fault injection (`None`: off).
    inject: Option<Box<Injector<Mbuf, INJECT_HOLD>>>,
    /// Frames waiting for the NIC beyond which the server answers RNR NAKs.
    rnr_backlog: usize,
    /// Sync mode (`None`: responses go out at once).
    hold: Option<SyncHold>,
}

impl TxSide<'_> {
    /// The drain: held injected frames that waited long enough, then the burst to
    /// the NIC; the sampled burst's latency once all its responses left; a burst
    /// the NIC has not taken for `stall_ticks` is discarded.
    #[inline]
    fn drain(&mut self, now: u64, drain_ticks: u64, stall_ticks: u64, sampler: &mut Sampler) {
        if self.inject.is_some() {
            self.release_held(now, drain_ticks);
        }
        self.flush();
        if sampler.pending() && self.burst.is_empty() {
            sampler.on_tx_done(tsc::now(), &self.stats.latency);
        }
        if self.burst.is_empty() {
            self.last_progress = now;
        } else if now.wrapping_sub(self.last_progress) > stall_ticks {
            self.discard();
            self.last_progress = now;
        }
    }

    /// Queues a frame for the NIC, through the fault injector when one is set.
    #[inline]
    fn push(&mut self, m: Mbuf) {
        if self.inject.is_none() {
            self.enqueue(m);
        } else {
            self.push_injected(m);
        }
    }

    /// Queues a frame as its drawn fate says ([`Injector::route`]): dropped (freed),
    /// queued twice (a copy in a new mbuf), held back behind later frames, or queued.
    #[inline(never)]
    fn push_injected(&mut self, m: Mbuf) {
        let Some(mut inj) = self.inject.take() else {
            return self.enqueue(m);
        };
        let pool = self.pool;
        inj.route(m, tsc::now, |m| m.copy_into(pool), |m| self.enqueue(m));
        self.inject = Some(inj);
    }

    /// Queues every held frame when the oldest has waited `max_ticks` (the tx drain
    /// period), so a delayed frame never waits for traffic that does not come.
    #[inline]
    fn release_held(&mut self, now: u64, max_ticks: u64) {
        if let Some(mut inj) = self.inject.take() {
            inj.release_stale(now, max_ticks, |m| self.enqueue(m));
            self.inject = Some(inj);
        }
    }

    /// Queues a frame; when the queue is full, tries the NIC once, then drops.
    #[inline]
    fn enqueue(&mut self, m: Mbuf) {
        if let Err(m) = self.burst.push(m) {
            self.flush();
            if let Err(m) = self.burst.push(m) {
                self.stats.drop(DropReason::TxFull);
                drop(m);
            }
        }
    }

    /// Hands what the NIC takes to it; the rest stays queued for the next flush.
    #[inline]
    fn flush(&mut self) {
        if !self.burst.is_empty() {
            let sent = self.txq.tx_burst(&mut self.burst);
            self.stats.tx_packets.add(sent as u64);
            if sent > 0 {
                self.last_progress = tsc::now();
            }
        }
    }

    /// Sync mode, after a burst: tags its held responses with the log position its
    /// writes reached, then sends every held response whose writes the replicas have
    /// (or frees them all when this node stopped being a master).
    #[inline]
    fn sync_release(&mut self, position: Option<u64>) {
        let Some(mut h) = self.hold.take() else {
            return;
        };
        if let Some(p) = position {
            h.q.tag(p);
        }
        h.active = !h.shared.paused.load(Ordering::Acquire);
        if !h.q.is_empty() {
            if h.active {
                let d = h.shared.durable.load(Ordering::Acquire);
                h.q.release(d, |m| self.enqueue(m));
            } else {
                // Demoted or fenced: these writes may never be on the new master;
                // the clients retry (and are told NOT_MASTER).
                let n = h.q.discard(drop);
                self.stats.sync_dropped.add(n as u64);
            }
        }
        self.hold = Some(h);
    }

    /// Frees everything queued (the peer stopped taking frames), counting `TxFull`.
    fn discard(&mut self) {
        let n = self.burst.len();
        self.burst.clear();
        self.stats.drops[DropReason::TxFull.index()].add(n as u64);
    }

    /// At exit: queues the held frames and prints the injection summary of worker
    /// `w`, gives queued frames a last chance, then frees what the NIC will not take
    /// (counted as `TxFull`).
    fn close(mut self, w: u32) {
        if let Some(mut inj) = self.inject.take() {
            inj.flush(|h| self.enqueue(h));
            println!("{}", inject_summary(&inj, w));
        }
        for _ in 0..1000 {
            if self.burst.is_empty() {
                break;
            }
            self.flush();
        }
        let (sent, dropped) = self.txq.tx_burst_or_free(&mut self.burst);
        self.stats.tx_packets.add(sent as u64);
        self.stats.drops[DropReason::TxFull.index()].add(dropped as u64);
    }
}

impl TxSink for TxSide<'_> {
    type Frame = TxMbuf;

    #[inline]
    fn alloc(&mut self) -> Option<TxMbuf> {
        let mut m = Mbuf::alloc(self.pool)?;
        let cap = self.frame_cap.min(m.tailroom());
        m.set_len(cap).then_some(TxMbuf(m))
    }

    #[inline]
    fn send(&mut self, frame: TxMbuf) {
        match self.hold.as_mut() {
            Some(h) if h.active => {
                let qp = peek_dest_qp(frame.0.data()).unwrap_or(0);
                if h.q.push(frame.0, qp).is_err() {
                    self.stats.drop(DropReason::TxFull);
                }
            }
            _ => self.push(frame.0),
        }
    }

    #[inline]
    fn backlogged(&self) -> bool {
        self.burst.len() > self.rnr_backlog
            || self
                .hold
                .as_ref()
                .is_some_and(|h| h.active && h.q.room() < HOLD_SLACK)
    }
}

/// Serves the frames of `rx` (this worker's requests) and queues the responses.
#[inline]
fn serve(store: &mut Store, rx: &mut MbufBurst<MAX_BURST>, tx: &mut TxSide<'_>) {
    let n = rx.len();
    if n == 0 {
        return;
    }
    // Borrowed views of this burst's frames (dropped before rx is freed).
    let mut frames: [&[u8]; MAX_BURST] = [&[]; MAX_BURST];
    for (slot, m) in frames.iter_mut().zip(rx.iter()) {
        *slot = m.data();
    }
    let stats = tx.stats;
    store.server.handle_burst(&frames[..n], stats, tx);
    rx.clear();
}

/// Runs the loop until `quit` is set or the deadline passes; returns the store.
/// `ctl` connects the worker to the control plane (client admission, snapshots).
#[allow(clippy::too_many_arguments)]
pub fn run(
    mut store: Store,
    mut rxq: RxQueue,
    txq: TxQueue,
    mut handoff: Handoff,
    pool: &Mempool,
    stats: &WorkerStats,
    cfg: &WorkerConfig,
    quit: &AtomicBool,
    ctl: &mut WorkerControl,
) -> Store {
    let burst = cfg.burst.clamp(1, MAX_BURST);
    let hz = tsc::hz();
    let drain_ticks = hz / 1_000_000 * cfg.drain_us.max(1);
    let check_ticks = hz / 100; // look at the clock/quit flag every 10 ms
    let frame_cap = response_frame_len(response_payload_capacity(cfg.mtu));
    let mut rx = MbufBurst::<MAX_BURST>::new();
    let mut tx = TxSide {
        txq,
        pool,
        stats,
        frame_cap,
        burst: MbufBurst::new(),
        last_progress: tsc::now(),
        inject: injector(cfg.inject, handoff.me),
        rnr_backlog: cfg.rnr_backlog,
        hold: store.sync.clone().map(|shared| SyncHold {
            q: HoldQueue::new(HOLD_FRAMES),
            active: !shared.paused.load(Ordering::Acquire),
            shared,
        }),
    };
    let stall_ticks = hz / 1000 * TX_STALL_MS;
    let mut last_drain = tsc::now();
    let mut last_check = last_drain;
    let mut last_print = Instant::now();
    control_tick(ctl, &mut store.server);
    store
        .server
        .maintain((tsc::now() / hz.max(1)) as u32, stats);
    // Snapshots: picked up in the control tick, scanned a little per iteration.
    let mut snap = WorkerSnap::new(handoff.me as usize);
    let mut idle = idle_backoff(cfg, &store, &rxq);
    let mut sampler = Sampler::new(cfg.latency_sample_every, hz);
    stats
        .latency
        .sample_every
        .set(cfg.latency_sample_every as u64);

    loop {
        let iter_start = tsc::now();
        // A cross-partition transaction of another worker may need this partition.
        store.server.park_point();
        // Admission changes take effect before the next rx burst (one atomic load).
        ctl.poll_clients(|clients, tenants, anonymous| {
            store.server.set_clients(clients);
            store.server.set_tenants(tenants.to_vec(), anonymous, stats);
        });
        let n = rxq.rx_burst(&mut rx);
        if n > 0 {
            if cfg.echo {
                sampler.on_rx(n, tsc::now);
                echo(&mut rx, stats, &mut tx);
            } else {
                if handoff.n > 1 {
                    handoff.steer(&mut rx, stats);
                }
                // Only the packets this worker serves: the handed-off ones are
                // answered (and measured from their hand-in) elsewhere.
                sampler.on_rx(rx.len(), tsc::now);
                serve(&mut store, &mut rx, &mut tx);
            }
        }
        // Requests other workers received for this partition.
        let handed = match handoff.inbox.as_mut() {
            Some(inbox) => inbox.dequeue_burst(&mut rx),
            None => 0,
        };
        if handed > 0 {
            stats.handed_in.add(handed as u64);
            serve(&mut store, &mut rx, &mut tx);
        }
        // A replica applies its master's records between bursts.
        // (Through the mutation tap, so a snapshot taken on a replica sees them.)
        let applied = apply_replicated(&mut store)
            + usize::from(store.server.tick_mutation_sink())
            + usize::from(store.inline_repl.as_mut().is_some_and(|r| r.poll_once()));
        let n = n + handed;
        if tx.hold.is_some() {
            // Every write of this iteration's bursts is at or below this position; a
            // burst whose writes were refused wrote nothing.
            let s = &store.server;
            let pos = (n > 0).then(|| {
                if s.took_writes() {
                    s.write_position()
                } else {
                    0
                }
            });
            tx.sync_release(pos);
        }
        let now = tsc::now();
        // The responses of one rx burst go out as one tx burst right away (the rx
        // burst is the batch); the timer retries what the NIC did not take.
        if n > 0 || tx.burst.len() >= burst || now.wrapping_sub(last_drain) >= drain_ticks {
            tx.drain(now, drain_ticks, stall_ticks, &mut sampler);
            last_drain = now;
        }
        let scanned = snap.active() && snap.step(&mut store.server);
        // Held responses (sync mode) are not work: waiting for the replicas, the worker
        // backs off like an idle one, so a replication lcore sharing its core can run.
        let idle_now = n == 0 && applied == 0 && tx.burst.is_empty() && !scanned;
        if !idle_now {
            stats.busy_cycles.add(tsc::now().wrapping_sub(iter_start));
        }
        // Held responses (sync mode) wait for the replicas: yield, never sleep.
        let holding = || tx.hold.as_ref().is_some_and(|h| !h.q.is_empty());
        if idle_now && holding() {
            idle.poll_waiting();
        } else {
            idle_step(&mut idle, idle_now, stats);
        }
        if now.wrapping_sub(last_check) >= check_ticks {
            last_check = now;
            if quit.load(Ordering::Relaxed) || cfg.deadline.is_some_and(|d| Instant::now() >= d) {
                break;
            }
            control_tick(ctl, &mut store.server);
            store.server.maintain((now / hz.max(1)) as u32, stats);
            snap.poll(ctl.snapshot(), &mut store.server);
            let every = ctl.latency_sample_every();
            if every != sampler.every() {
                sampler = Sampler::new(every, hz);
                stats.latency.sample_every.set(every as u64);
            }
            maybe_print(cfg, pool, &mut last_print);
        }
    }
    store.server.leave_partition_table();
    snap.stop(&mut store.server);
    tx.close(handoff.me);
    store
}

/// Echo mode: every frame goes back with its MAC addresses swapped.
#[inline]
fn echo(rx: &mut MbufBurst<MAX_BURST>, stats: &WorkerStats, tx: &mut TxSide<'_>) {
    stats.rx_packets.add(rx.len() as u64);
    for mut m in rx.drain() {
        let d = m.data_mut();
        if d.len() >= 12 {
            let (dst, src) = d.split_at_mut(6);
            dst.swap_with_slice(&mut src[..6]);
        }
        stats.echoed.inc();
        tx.push(m);
    }
}

/// The worker's idle policy: its sleeps end on a ring from the replication lcore and
/// on a packet where the port has Rx interrupts (net_tap's descriptor, or a memif
/// queue armed around each sleep).
fn idle_backoff(cfg: &WorkerConfig, store: &Store, rxq: &RxQueue) -> IdleBackoff {
    let wakes = cfg.rx_intr && matches!(cfg.idle, dpdk::IdlePolicy::Sleep { .. });
    let rx_fd = wakes.then(|| rxq.intr_fd()).flatten();
    let armed = (wakes && rx_fd.is_none())
        .then(|| dpdk::MemifRxIntr::new(rxq).ok())
        .flatten()
        .map(|m| Box::new(m) as Box<dyn dpdk::ArmRx>);
    IdleBackoff::with_policy(cfg.idle)
        .with_doorbell(store.bell.clone())
        .with_rx_fds(rx_fd)
        .with_armed_rx(armed)
        .with_rx_sleep_max(cfg.rx_sleep_max_us)
}

/// One poll of the idle policy (`empty`: the iteration found no work), its sleep
/// counted.
#[inline]
fn idle_step(idle: &mut IdleBackoff, empty: bool, stats: &WorkerStats) {
    let slept = idle.poll(empty);
    if slept > 0 {
        stats.idle_sleeps.inc();
        stats.idle_sleep_us.add(u64::from(slept));
        stats.idle_rx_wakeups.set(idle.rx_wakeups);
    }
}

/// A replica applies its master's records between bursts (through the mutation
/// tap, so a snapshot taken on a replica sees them); a transaction over several
/// partitions with their workers parked. Records applied.
#[inline]
fn apply_replicated(store: &mut Store) -> usize {
    let Some(a) = store.apply.as_mut() else {
        return 0;
    };
    let k = {
        let (engine, tap, mut keeper) = store.server.apply_parts();
        a.apply_with(engine, tap, APPLY_PER_LOOP, &mut keeper)
    };
    k + a.pending_span().map_or(0, |parts| {
        store
            .server
            .with_parked(parts, |me, others| apply_span(a, me, others))
            .unwrap_or(0)
    })
}

/// The main worker's periodic counter lines (`stats_interval`).
fn maybe_print(cfg: &WorkerConfig, pool: &Mempool, last_print: &mut Instant) {
    if !cfg.stats_interval.is_zero()
        && !cfg.printed.is_empty()
        && last_print.elapsed() >= cfg.stats_interval
    {
        *last_print = Instant::now();
        print_stats(&cfg.printed, pool);
    }
}

/// Slow-path control work: publish the engine snapshot, serve a slab merge request.
fn control_tick(ctl: &WorkerControl, server: &mut Server) {
    ctl.publish_engine(|s| s.fill_from(&server.engine().stats()));
    if let Some(request) = ctl.merge_requested() {
        let summary = control::merge_now(server.engine_mut());
        ctl.merge_done(request, summary);
        ctl.publish_engine(|s| s.fill_from(&server.engine().stats()));
    }
}

/// One line per worker, labelled, then the pool's mbufs in use (shared by all).
fn print_stats(workers: &[Arc<WorkerStats>], pool: &Mempool) {
    for (w, s) in workers.iter().enumerate() {
        let drops: u64 = s.drops.iter().map(|c| c.get()).sum();
        println!(
            "stats worker{w}: rx {} tx {} requests {} ops {} (get {} hit {} put {} del {}) errors {} drops {}",
            s.rx_packets.get(),
            s.tx_packets.get(),
            s.requests.get(),
            s.ops(),
            s.gets.get(),
            s.get_hits.get(),
            s.puts.get(),
            s.deletes.get(),
            s.op_errors.get(),
            drops,
        );
    }
    println!("stats: mbufs_in_use {}", pool.in_use_count());
}

#[cfg(test)]
mod tests {
    use super::*;

    // The injector's own behaviour is tested in kvload::inject.

    #[test]
    fn no_faults_no_injector() {
        assert!(injector::<u32>(None, 0).is_none());
        assert!(injector::<u32>(Some(FaultConfig::default()), 3).is_none());
    }

    #[test]
    fn workers_draw_different_sequences_and_summarise() {
        let cfg = Some(FaultConfig {
            loss: 0.5,
            dup: 0.0,
            reorder: 0.0,
            seed: 10,
        });
        let run = |w: u32| {
            let mut inj = injector::<u32>(cfg, w).expect("faults configured");
            let mut out = Vec::new();
            for f in 0..200 {
                inj.route(f, || 0, |&f| Some(f), |f| out.push(f));
            }
            inj.flush(|f| out.push(f));
            out
        };
        assert_eq!(run(0), run(0));
        assert_ne!(run(0), run(1));
        let inj = injector::<u32>(cfg, 2).unwrap();
        assert!(inject_summary(&inj, 2).starts_with("inject worker2: frames"));
    }
}
