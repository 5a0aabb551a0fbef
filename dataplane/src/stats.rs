//! Per-worker counters.
//!
//! Each worker owns one cache-aligned [`WorkerStats`]; it is the only writer, so a
//! counter bump is a relaxed load + store (no locked instruction). Readers (the main
//! lcore's printer, later the control plane) load with relaxed ordering and may see a
//! slightly stale but never torn value.

use crate::latency::LatencyHist;
use kvwire::DropReason;
use std::sync::atomic::{AtomicU64, Ordering};

/// A single-writer monotonically increasing counter.
#[derive(Default, Debug)]
pub struct Counter(AtomicU64);

impl Counter {
    /// Adds `n` (single writer: not a read-modify-write instruction).
    #[inline]
    pub fn add(&self, n: u64) {
        self.0.store(
            self.0.load(Ordering::Relaxed).wrapping_add(n),
            Ordering::Relaxed,
        );
    }

    /// Adds one.
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    /// Overwrites the value (for totals kept elsewhere and mirrored here).
    #[inline]
    pub fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// The current value.
    #[inline]
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

macro_rules! worker_stats {
    ($( $(#[$doc:meta])* $name:ident : $help:literal, $kind:ident ( $($arg:expr),* ), $table:literal; )*) => {
        /// Counters of one worker lcore, padded to whole cache lines so two workers
        /// never share a line. The counters are declared once, in
        /// [`kvwire::worker_counters!`] (names, docs, export).
        #[repr(align(128))]
        #[derive(Default, Debug)]
        pub struct WorkerStats {
            $( $(#[$doc])* pub $name: Counter, )*
            /// Drops by reason, indexed by [`DropReason::index`].
            pub drops: Drops,
            /// Sampled service latency (rx burst to hand-off of the response to the NIC).
            pub latency: LatencyHist,
            /// Per-tenant counters (`crate::tenant_stats`).
            pub tenants: crate::tenant_stats::TenantStats,
        }

        impl WorkerStats {
            /// Every counter with its name, in the schema's order
            /// ([`kvwire::counters::WORKER_COUNTERS`]).
            pub fn counters(&self) -> [(&'static str, &Counter); kvwire::counters::WORKER_COUNTERS.len()] {
                [ $( (stringify!($name), &self.$name), )* ]
            }
        }
    };
}
kvwire::worker_counters!(worker_stats);

/// The drop counters, indexed by [`DropReason::index`] (an array behind `Deref`: the
/// standard `Default` of arrays stops at 32 entries).
#[derive(Debug)]
pub struct Drops(pub [Counter; DropReason::COUNT]);

impl Default for Drops {
    fn default() -> Self {
        Drops(std::array::from_fn(|_| Counter::default()))
    }
}

impl std::ops::Deref for Drops {
    type Target = [Counter; DropReason::COUNT];
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

/// Drop reasons that count a frame the worker failed to *send* (a response, ACK,
/// ACCEPT, replayed or echoed frame), not a received frame: they are terms of the tx
/// identity, not of the rx one (docs/OPERATIONS.md, "Accounting invariant"). Every
/// other reason counts one received frame.
pub const TX_SIDE_DROPS: [DropReason; 5] = [
    DropReason::TxFull,
    DropReason::NoMbuf,
    DropReason::MtuTooSmall,
    DropReason::TxBufferTooSmall,
    DropReason::ResponseEncode,
];

/// Whether `r` counts a frame that was not sent (see [`TX_SIDE_DROPS`]).
pub const fn is_tx_side(r: DropReason) -> bool {
    matches!(
        r,
        DropReason::TxFull
            | DropReason::NoMbuf
            | DropReason::MtuTooSmall
            | DropReason::TxBufferTooSmall
            | DropReason::ResponseEncode
    )
}

impl WorkerStats {
    /// The right-hand side of the rx identity: every frame the worker's server judged
    /// (`rx_packets`: its own frames and the handed-in ones) ends as exactly one of an
    /// echo, an accepted request, a CONNECT (new incarnation or repeat), an OPEN, a
    /// CLOSE, a RESUME that
    /// continued an incarnation, a replayed
    /// duplicate, or a drop of an rx-side reason other than `handoff_full` (those frames
    /// never reach the server). `rx_packets == rx_accounted()` on a quiescent worker.
    pub fn rx_accounted(&self) -> u64 {
        let drops: u64 = DropReason::ALL
            .iter()
            .filter(|r| !is_tx_side(**r) && **r != DropReason::HandoffFull)
            .map(|r| self.drops[r.index()].get())
            .sum();
        self.echoed.get()
            + self.requests.get()
            + self.connects.get()
            + self.connect_repeats.get()
            + self.opens.get()
            + self.closes.get()
            + self.resumes.get()
            + self.replays.get()
            + drops
    }

    /// Frames handed to the transmit side: responses, replayed responses, NAKs, RNR
    /// NAKs, ACCEPTs and echoes. Without fault injection each one is sent
    /// (`tx_packets`), dropped as `tx_full`, or still queued.
    pub fn tx_queued(&self) -> u64 {
        self.responses.get()
            + self.replayed_frames.get()
            + self.naks_sent.get()
            + self.rnr_naks_sent.get()
            + self.accepts_sent.get()
            + self.echoed.get()
    }

    /// Counts one drop.
    #[inline]
    pub fn drop(&self, why: DropReason) {
        self.drops[why.index()].inc();
    }

    /// Total operations executed: the sum of the counters the op table names (each
    /// once; two opcodes may share one).
    pub fn ops(&self) -> u64 {
        self.counters()
            .iter()
            .filter(|(name, _)| kvwire::OPS.iter().any(|s| s.counter == *name))
            .map(|(_, c)| c.get())
            .sum()
    }

    /// A figure computed from the counters ([`kvwire::counters::DERIVED`]), `None`
    /// for a name that is not one.
    pub fn derived(&self, name: &str) -> Option<u64> {
        match name {
            "ops" => Some(self.ops()),
            "get_misses" => Some(self.gets.get().saturating_sub(self.get_hits.get())),
            "drops" => Some(self.drops.iter().map(Counter::get).sum()),
            _ => None,
        }
    }

    /// A plain snapshot as (name, value) pairs, drops last, non-zero drops only.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .counters()
            .iter()
            .map(|(n, c)| (n.to_string(), c.get()))
            .collect();
        for r in DropReason::ALL {
            let n = self.drops[r.index()].get();
            if n > 0 {
                v.push((format!("drop_{}", r.name()), n));
            }
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_count() {
        let s = WorkerStats::default();
        s.gets.add(3);
        s.drop(DropReason::BadIcrc);
        s.drop(DropReason::BadIcrc);
        assert_eq!(s.ops(), 3);
        let snap = s.snapshot();
        assert!(snap.contains(&("drop_bad_icrc".to_string(), 2)));
        assert!(!snap.iter().any(|(n, _)| n == "drop_bad_rkey"));
        assert_eq!(std::mem::align_of::<WorkerStats>(), 128);
    }

    #[test]
    fn every_derived_figure_is_computed() {
        let s = WorkerStats::default();
        for d in kvwire::counters::DERIVED {
            assert!(s.derived(d.name).is_some(), "{}", d.name);
        }
        for (n, _) in s.counters() {
            assert!(kvwire::counters::find(n).is_some(), "{n}");
        }
    }

    #[test]
    fn tx_side_list_and_predicate_agree() {
        for r in DropReason::ALL {
            assert_eq!(is_tx_side(r), TX_SIDE_DROPS.contains(&r), "{}", r.name());
        }
        let s = WorkerStats::default();
        s.requests.inc();
        s.drop(DropReason::BadIcrc);
        s.drop(DropReason::NoMbuf);
        s.drop(DropReason::HandoffFull);
        assert_eq!(s.rx_accounted(), 2);
    }
}
