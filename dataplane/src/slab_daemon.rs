//! The slab daemon: a plain thread (not a worker lcore) that keeps every partition's
//! slab pool serviced, the software form of KV-Direct's host-side slab management (§4).
//!
//! Every `period` it runs `SlabService::balance` on each partition (pre-splitting large
//! free blocks for the classes the worker is allocating from, so the worker's refills
//! find blocks without splitting). Lazy merges run on request ([`SlabDaemon::merge_all`],
//! called from the control plane's thread) and, if configured, periodically
//! (`dataplane --merge-every-ms`). The worker never waits for either: it only `try_lock`s the shared pool
//! at its watermarks (docs/ENGINE.md, "Slab service").

use kvengine::{MergeReport, SlabService};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Handles to every partition's slab pool, usable from any thread.
#[derive(Clone)]
pub struct SlabDaemon {
    services: Arc<Vec<SlabService>>,
    merges: Arc<AtomicU64>,
}

/// Sum of the merge reports of all partitions.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MergeSummary {
    /// Partitions merged.
    pub partitions: usize,
    /// Free blocks examined.
    pub scanned: u64,
    /// Buddy pairs merged (all classes).
    pub merged_pairs: u64,
    /// Wall time of the slowest partition's pass, in microseconds.
    pub max_elapsed_us: u64,
    /// Longest pool-lock hold of any pass, in microseconds (what a worker could wait).
    pub max_lock_hold_us: u64,
}

impl SlabDaemon {
    /// A daemon over these partitions' services.
    pub fn new(services: Vec<SlabService>) -> SlabDaemon {
        SlabDaemon {
            services: Arc::new(services),
            merges: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Runs a lazy merge of every partition now, on the calling thread.
    pub fn merge_all(&self) -> MergeSummary {
        let mut s = MergeSummary::default();
        for svc in self.services.iter() {
            let r: MergeReport = svc.merge_now();
            s.partitions += 1;
            s.scanned += r.scanned;
            s.merged_pairs += r.merged.iter().sum::<u64>();
            s.max_elapsed_us = s.max_elapsed_us.max(r.elapsed.as_micros() as u64);
            s.max_lock_hold_us = s.max_lock_hold_us.max(r.max_lock_hold.as_micros() as u64);
        }
        self.merges.fetch_add(1, Ordering::Relaxed);
        s
    }

    /// Merge passes run so far (over all partitions, counted once per `merge_all`).
    pub fn merges(&self) -> u64 {
        self.merges.load(Ordering::Relaxed)
    }

    /// The services, by partition.
    pub fn services(&self) -> &[SlabService] {
        &self.services
    }

    /// Starts the daemon thread: balance every `period`, and merge every `merge_every`
    /// if set. Stops when `quit` is set.
    pub fn spawn(
        &self,
        period: Duration,
        merge_every: Option<Duration>,
        quit: &'static AtomicBool,
    ) -> std::io::Result<JoinHandle<()>> {
        let me = self.clone();
        let tick = merge_every.map_or(period, |m| m.min(period));
        std::thread::Builder::new()
            .name("kvd-slab".into())
            .spawn(move || {
                let (mut last_balance, mut last_merge) = (Instant::now(), Instant::now());
                while !quit.load(Ordering::Relaxed) {
                    if last_balance.elapsed() >= period {
                        last_balance = Instant::now();
                        for svc in me.services.iter() {
                            svc.balance();
                        }
                    }
                    if merge_every.is_some_and(|m| last_merge.elapsed() >= m) {
                        last_merge = Instant::now();
                        me.merge_all();
                    }
                    std::thread::sleep(tick);
                }
            })
    }
}
