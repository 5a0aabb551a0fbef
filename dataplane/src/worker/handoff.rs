//! Requests that reached a worker's queue but belong to another partition (their
//! client QP's, `kvwire::partition`) go to the owner's inbox, in arrival order.

use dataplane::packet::MAX_BURST;
use dataplane::stats::WorkerStats;
use dpdk::{Mbuf, MbufBurst, RingConsumer, RingProducer};
use kvwire::partition::peek_owner;
use kvwire::DropReason;
use std::sync::Arc;

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
    pub(super) fn steer(&mut self, rx: &mut MbufBurst<MAX_BURST>, stats: &WorkerStats) {
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
