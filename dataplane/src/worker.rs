//! The run-to-completion worker loop (DPDK's l2fwd shape):
//! rx burst → [`Server::handle_burst`] → tx burst, with a TSC-timed tx drain so a
//! half-full tx batch never waits longer than `drain_us`. The node's part in
//! replication is the worker's [`Role`], chosen at start ([`role`]); requests of other
//! partitions are handed to their owners ([`handoff`]); responses leave through the
//! transmit side ([`tx_side`]: the NIC queue, fault injection, a sync master's holds).

mod handoff;
pub mod role;
mod tx_side;

pub use handoff::Handoff;
pub use role::Role;
pub use tx_side::TX_BACKLOG;

use dataplane::control::{self, WorkerControl};
use dataplane::latency::Sampler;
use dataplane::packet::MAX_BURST;
use dataplane::repl::scan::ScanShared;
use dataplane::server::Server;
use dataplane::snapshot::WorkerSnap;
use dataplane::stats::WorkerStats;
use dpdk::{tsc, DpdkRegion, IdleBackoff, MbufBurst, Mempool, RxQueue, TxQueue};
use kvload::FaultConfig;
use kvwire::{response_frame_len, response_payload_capacity};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tx_side::{TxPlan, TxSide};

/// The server and the memory its engine lives in. Field order matters: the server
/// (and its engine, which points into `_mem`) is dropped before `_mem` is freed.
pub struct Store {
    /// Request processing state.
    pub server: Server,
    /// DPDK hugepage memory backing the engine (None: the engine owns heap memory).
    pub _mem: Option<DpdkRegion>,
    /// The worker's part in replication ([`role::Standalone`] unless replication set
    /// one up).
    pub role: Box<dyn Role>,
    /// Sync replication (`mode: sync` on a master): this worker's shared state with
    /// the replication lcore, whose `durable` position releases held responses.
    pub sync: Option<Arc<ScanShared>>,
    /// What an idle worker sleeps on (`server.idle: adaptive` on a replicated node):
    /// rung by the replication lcore when it routed records to this worker.
    pub bell: Option<Arc<dpdk::Doorbell>>,
}

impl Store {
    /// Gives the worker its replication role; a second one is a set-up error (one
    /// worker plays one role).
    pub fn set_role(&mut self, role: Box<dyn Role>) -> Result<(), String> {
        if self.role.name() != role::Standalone.name() {
            return Err(format!(
                "a worker cannot be both {} and {}",
                self.role.name(),
                role.name()
            ));
        }
        self.role = role;
        Ok(())
    }
}

/// What one worker runs on: its partition, its queues, the hand-off rings to the
/// other partitions and its line to the control plane.
pub struct Work {
    /// The partition.
    pub store: Store,
    /// The port's rx queue of this worker.
    pub rxq: RxQueue,
    /// The port's tx queue of this worker.
    pub txq: TxQueue,
    /// Requests of other partitions in and out.
    pub handoff: Handoff,
    /// Client admission, snapshots, slab merges, the latency sampling rate.
    pub ctl: WorkerControl,
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
    /// RNR NAK ([`dataplane::tx::TxSink::backlogged`]); default [`TX_BACKLOG`].
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
pub fn run(
    work: Work,
    pool: &Mempool,
    stats: &WorkerStats,
    cfg: &WorkerConfig,
    quit: &AtomicBool,
) -> Store {
    let mut w = Worker::new(work, pool, stats, cfg);
    while !w.iterate(quit) {}
    w.close()
}

/// TSC periods and the times the loop last did its periodic work.
struct Clock {
    hz: u64,
    /// The tx drain period.
    drain_ticks: u64,
    /// How often the loop looks at the quit flag, the deadline and the control plane.
    check_ticks: u64,
    last_drain: u64,
    last_check: u64,
    last_print: Instant,
}

/// One worker's loop state.
struct Worker<'a> {
    store: Store,
    rxq: RxQueue,
    handoff: Handoff,
    ctl: WorkerControl,
    rx: MbufBurst<MAX_BURST>,
    tx: TxSide<'a>,
    pool: &'a Mempool,
    stats: &'a WorkerStats,
    cfg: &'a WorkerConfig,
    /// Packets per rx burst; a tx queue this long is drained at once.
    burst: usize,
    clock: Clock,
    /// Snapshots: picked up in the control tick, scanned a little per iteration.
    snap: WorkerSnap,
    idle: IdleBackoff,
    sampler: Sampler,
    /// Purges finished here that the control plane has not taken yet.
    unreported: Vec<dataplane::server::PurgeDone>,
}

impl<'a> Worker<'a> {
    fn new(work: Work, pool: &'a Mempool, stats: &'a WorkerStats, cfg: &'a WorkerConfig) -> Self {
        let Work {
            mut store,
            rxq,
            txq,
            handoff,
            ctl,
        } = work;
        let hz = tsc::hz();
        let plan = TxPlan {
            w: handoff.me,
            frame_cap: response_frame_len(response_payload_capacity(cfg.mtu)),
            rnr_backlog: cfg.rnr_backlog,
            inject: cfg.inject,
            sync: store.sync.clone(),
        };
        let tx = TxSide::new(txq, pool, stats, plan);
        control_tick(&ctl, &mut store.server);
        store
            .server
            .maintain((tsc::now() / hz.max(1)) as u32, stats);
        let now = tsc::now();
        stats
            .latency
            .sample_every
            .set(cfg.latency_sample_every as u64);
        Worker {
            idle: idle_backoff(cfg, &store, &rxq),
            snap: WorkerSnap::new(handoff.me as usize),
            sampler: Sampler::new(cfg.latency_sample_every, hz),
            clock: Clock {
                hz,
                drain_ticks: hz / 1_000_000 * cfg.drain_us.max(1),
                check_ticks: hz / 100, // every 10 ms
                last_drain: now,
                last_check: now,
                last_print: Instant::now(),
            },
            burst: cfg.burst.clamp(1, MAX_BURST),
            unreported: Vec::new(),
            store,
            rxq,
            handoff,
            ctl,
            rx: MbufBurst::new(),
            tx,
            pool,
            stats,
            cfg,
        }
    }

    /// One iteration: the bursts, the role's work, the tx drain, a snapshot step, the
    /// idle policy, and every `check_ticks` the periodic work. Whether to stop.
    #[inline]
    fn iterate(&mut self, quit: &AtomicBool) -> bool {
        let iter_start = tsc::now();
        // A cross-partition transaction of another worker may need this partition.
        self.store.server.park_point();
        // Admission changes take effect before the next rx burst (one atomic load).
        let (server, stats) = (&mut self.store.server, self.stats);
        self.ctl.poll_clients(|a| {
            server.set_clients(a.clients);
            server.set_tenants(a.tenants.to_vec(), a.anonymous, stats);
            server.request_purges(a.purges);
        });
        let n = self.receive();
        let s = &mut self.store;
        let worked =
            s.role.between_bursts(&mut s.server) + usize::from(s.server.tick_mutation_sink());
        self.tx.after_bursts(n, &s.server);
        let now = tsc::now();
        // The responses of one rx burst go out as one tx burst right away (the rx
        // burst is the batch); the timer retries what the NIC did not take.
        let c = &mut self.clock;
        if n > 0
            || self.tx.queued() >= self.burst
            || now.wrapping_sub(c.last_drain) >= c.drain_ticks
        {
            self.tx.drain(now, c.drain_ticks, &mut self.sampler);
            c.last_drain = now;
        }
        let scanned = self.snap.active() && self.snap.step(&mut self.store.server);
        let purged = self.store.server.purge_active() && self.purge_step();
        let idle_now = n == 0 && worked == 0 && self.tx.queued() == 0 && !scanned && !purged;
        if !idle_now {
            self.stats
                .busy_cycles
                .add(tsc::now().wrapping_sub(iter_start));
        }
        // Held responses (sync mode) are not work, but they wait for the replicas:
        // back off like an idle worker (a replication lcore sharing the core can run),
        // never sleep.
        if idle_now && self.tx.holding() {
            self.idle.poll_waiting();
        } else {
            idle_step(&mut self.idle, idle_now, self.stats);
        }
        now.wrapping_sub(self.clock.last_check) >= self.clock.check_ticks
            && self.periodic(now, quit)
    }

    /// One step of a purge of a removed tenant's namespace (`server::purge`); a
    /// finished purge is reported to the control plane (again at the next step or
    /// periodic check when its list is busy). Whether it worked.
    #[cold]
    fn purge_step(&mut self) -> bool {
        if let Some(done) = self.store.server.purge_step(self.stats) {
            self.unreported.push(done);
        }
        self.report_purges();
        true
    }

    /// Hands the finished purges to the control plane (those it cannot take now stay).
    fn report_purges(&mut self) {
        while let Some(&d) = self.unreported.last() {
            if !self.ctl.report_purge(d) {
                break;
            }
            self.unreported.pop();
        }
    }

    /// The rx burst (echoed, or steered and served) and the requests other workers
    /// handed to this partition; the frames received.
    #[inline]
    fn receive(&mut self) -> usize {
        let n = self.rxq.rx_burst(&mut self.rx);
        if n > 0 {
            if self.cfg.echo {
                self.sampler.on_rx(n, tsc::now);
                echo(&mut self.rx, self.stats, &mut self.tx);
            } else {
                if self.handoff.n > 1 {
                    self.handoff.steer(&mut self.rx, self.stats);
                }
                // Only the packets this worker serves: the handed-off ones are
                // answered (and measured from their hand-in) elsewhere.
                self.sampler.on_rx(self.rx.len(), tsc::now);
                serve(&mut self.store, &mut self.rx, &mut self.tx);
            }
        }
        let handed = match self.handoff.inbox.as_mut() {
            Some(inbox) => inbox.dequeue_burst(&mut self.rx),
            None => 0,
        };
        if handed > 0 {
            self.stats.handed_in.add(handed as u64);
            serve(&mut self.store, &mut self.rx, &mut self.tx);
        }
        n + handed
    }

    /// Every `check_ticks`: the quit flag and the deadline (whether to stop), the
    /// control plane's requests, the server's timers, snapshots, the sampling rate and
    /// the printed counters.
    #[cold]
    fn periodic(&mut self, now: u64, quit: &AtomicBool) -> bool {
        self.clock.last_check = now;
        if quit.load(Ordering::Relaxed) || self.cfg.deadline.is_some_and(|d| Instant::now() >= d) {
            return true;
        }
        let hz = self.clock.hz;
        control_tick(&self.ctl, &mut self.store.server);
        self.store
            .server
            .maintain((now / hz.max(1)) as u32, self.stats);
        self.report_purges();
        self.snap.poll(self.ctl.snapshot(), &mut self.store.server);
        let every = self.ctl.latency_sample_every();
        if every != self.sampler.every() {
            self.sampler = Sampler::new(every, hz);
            self.stats.latency.sample_every.set(every as u64);
        }
        maybe_print(self.cfg, self.pool, &mut self.clock.last_print);
        false
    }

    /// Leaves the partition table, stops a snapshot, sends or frees what is queued;
    /// the store.
    fn close(mut self) -> Store {
        self.store.server.leave_partition_table();
        self.snap.stop(&mut self.store.server);
        self.tx.close(self.handoff.me);
        self.store
    }
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
