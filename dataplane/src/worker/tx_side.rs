//! A worker's transmit side: response mbufs from the pool, frames waiting for the NIC
//! (drained in bursts, freed when the NIC stalls), the fault injector (`--inject-*`:
//! dropped, duplicated or delayed frames from a seeded [`kvload::Faults`] plan per
//! worker; with no fault configured the only cost is one branch per frame), and a sync
//! master's held responses (sent once the replicas have their writes).

use dataplane::latency::Sampler;
use dataplane::repl::hold::HoldQueue;
use dataplane::repl::scan::ScanShared;
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use dataplane::tx::{TxFrame, TxSink};
use dpdk::{tsc, Mbuf, MbufBurst, Mempool, TxQueue};
use kvload::inject::Injector;
use kvload::FaultConfig;
use kvwire::partition::peek_dest_qp;
use kvwire::DropReason;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// How many tx frames may wait for the NIC before new ones are dropped.
const TX_QUEUE: usize = 256;
/// Queued tx frames are freed when the NIC took none of them for this long (a peer
/// that went away must not pin mbufs forever).
const TX_STALL_MS: u64 = 50;
/// Above this many queued tx frames the transmit side reports itself backlogged
/// (3/4 of `TX_QUEUE`).
pub const TX_BACKLOG: usize = TX_QUEUE / 4 * 3;
/// Delayed frames an injecting worker holds at most (a further delay is sent at once).
const INJECT_HOLD: usize = 16;
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

/// An mbuf being filled with a response frame.
pub(super) struct TxMbuf(Mbuf);

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
pub(super) struct TxSide<'a> {
    txq: TxQueue,
    pool: &'a Mempool,
    pub(super) stats: &'a WorkerStats,
    /// Bytes of a response frame at the MTU.
    frame_cap: usize,
    burst: MbufBurst<TX_QUEUE>,
    /// TSC of the last flush that moved a frame (or found nothing to move).
    last_progress: u64,
    /// Ticks without progress after which the queued frames are freed.
    stall_ticks: u64,
    /// Fault injection (`None`: off).
    inject: Option<Box<Injector<Mbuf, INJECT_HOLD>>>,
    /// Frames waiting for the NIC beyond which the server answers RNR NAKs.
    rnr_backlog: usize,
    /// Sync mode (`None`: responses go out at once).
    hold: Option<SyncHold>,
}

/// How worker `w` transmits: frames of `frame_cap` bytes, RNR NAKs beyond
/// `rnr_backlog` queued frames, faults injected as `inject` says, and — on a sync
/// master (`sync`) — responses held until the replicas have their writes.
pub(super) struct TxPlan {
    pub w: u32,
    pub frame_cap: usize,
    pub rnr_backlog: usize,
    pub inject: Option<FaultConfig>,
    pub sync: Option<Arc<ScanShared>>,
}

impl<'a> TxSide<'a> {
    /// The transmit side of `txq`, with mbufs from `pool`, counted in `stats`.
    pub(super) fn new(
        txq: TxQueue,
        pool: &'a Mempool,
        stats: &'a WorkerStats,
        plan: TxPlan,
    ) -> Self {
        TxSide {
            txq,
            pool,
            stats,
            frame_cap: plan.frame_cap,
            burst: MbufBurst::new(),
            last_progress: tsc::now(),
            stall_ticks: tsc::hz() / 1000 * TX_STALL_MS,
            inject: injector(plan.inject, plan.w),
            rnr_backlog: plan.rnr_backlog,
            hold: plan.sync.map(|shared| SyncHold {
                q: HoldQueue::new(HOLD_FRAMES),
                active: !shared.paused.load(Ordering::Acquire),
                shared,
            }),
        }
    }

    /// Frames queued for the NIC.
    #[inline]
    pub(super) fn queued(&self) -> usize {
        self.burst.len()
    }

    /// Responses wait for the replicas (sync mode): the worker may back off but must
    /// not sleep.
    #[inline]
    pub(super) fn holding(&self) -> bool {
        self.hold.as_ref().is_some_and(|h| !h.q.is_empty())
    }

    /// After an iteration's bursts (`served` frames): a sync master tags the responses
    /// it held with the log position the bursts' writes reached and sends those the
    /// replicas have; anything else sends at once and has nothing to do here.
    #[inline]
    pub(super) fn after_bursts(&mut self, served: usize, server: &Server) {
        if self.hold.is_none() {
            return;
        }
        // Every write of this iteration's bursts is at or below this position; a
        // burst whose writes were refused wrote nothing.
        let pos = (served > 0).then(|| {
            if server.took_writes() {
                server.write_position()
            } else {
                0
            }
        });
        self.sync_release(pos);
    }
}

impl TxSide<'_> {
    /// The drain: held injected frames that waited long enough, then the burst to
    /// the NIC; the sampled burst's latency once all its responses left; a burst
    /// the NIC has not taken for `stall_ticks` is discarded.
    #[inline]
    pub(super) fn drain(&mut self, now: u64, drain_ticks: u64, sampler: &mut Sampler) {
        if self.inject.is_some() {
            self.release_held(now, drain_ticks);
        }
        self.flush();
        if sampler.pending() && self.burst.is_empty() {
            sampler.on_tx_done(tsc::now(), &self.stats.latency);
        }
        if self.burst.is_empty() {
            self.last_progress = now;
        } else if now.wrapping_sub(self.last_progress) > self.stall_ticks {
            self.discard();
            self.last_progress = now;
        }
    }

    /// Queues a frame for the NIC, through the fault injector when one is set.
    #[inline]
    pub(super) fn push(&mut self, m: Mbuf) {
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
    pub(super) fn close(mut self, w: u32) {
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
