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

/// Counters of one worker lcore, padded to whole cache lines so two workers never
/// share a line.
#[repr(align(128))]
#[derive(Default, Debug)]
pub struct WorkerStats {
    /// Frames received.
    pub rx_packets: Counter,
    /// Frames sent.
    pub tx_packets: Counter,
    /// Request packets accepted (all checks passed).
    pub requests: Counter,
    /// Response packets built.
    pub responses: Counter,
    /// Duplicate requests answered from the response cache (each re-sends all the
    /// cached frames of one request).
    pub replays: Counter,
    /// Response frames re-sent by replays.
    pub replayed_frames: Counter,
    /// NAKs sent: PSN sequence errors (a request ahead of the expected PSN, once per
    /// gap) and invalid requests (a request on a QP that is not connected).
    pub naks_sent: Counter,
    /// RNR NAKs sent (the tx side was backlogged when a request was due).
    pub rnr_naks_sent: Counter,
    /// CONNECTs that started a new incarnation of their QP.
    pub connects: Counter,
    /// CONNECTs that repeated the current incarnation's nonce (a lost ACCEPT: the same
    /// ACCEPT is sent again). With `connects` and the CONNECT drops, every CONNECT
    /// frame is counted once (docs/OPERATIONS.md, "Accounting invariant").
    pub connect_repeats: Counter,
    /// ACCEPT frames sent (new incarnations and re-sent ACCEPTs).
    pub accepts_sent: Counter,
    /// GET operations executed.
    pub gets: Counter,
    /// GETs that found their key.
    pub get_hits: Counter,
    /// PUT operations executed.
    pub puts: Counter,
    /// DELETE operations executed.
    pub deletes: Counter,
    /// Atomic scalar updates (UPDATE_S2S) executed.
    pub atomics: Counter,
    /// Vector updates (UPDATE_S2V, UPDATE_V2V) executed.
    pub vector_updates: Counter,
    /// REDUCE operations executed.
    pub reduces: Counter,
    /// FILTER operations executed.
    pub filters: Counter,
    /// Operations answered with a status other than OK/NOT_FOUND.
    pub op_errors: Counter,
    /// Transactions committed (docs/TRANSACTIONS.md).
    pub tx_committed: Counter,
    /// Transactions aborted (nothing of them changed).
    pub tx_aborted: Counter,
    /// Transactions this worker coordinated over other partitions too (committed or
    /// not; docs/TRANSACTIONS.md).
    pub tx_cross_partition: Counter,
    /// Chunks executed (each straight by the engine or through the station).
    pub batches: Counter,
    /// Chunks that went through the reservation station (they held a read-modify-write
    /// op or two ops in one station slot); the others ran straight in the engine.
    pub station_chunks: Counter,
    /// Station: ops served from the forwarding cache (mirrors `StationStats`).
    pub forwarded: Counter,
    /// Station: in-place updates merged without a write of their own.
    pub merged: Counter,
    /// Station: merged write-backs issued.
    pub write_backs: Counter,
    /// Station: pipeline stalls on a key conflict (stall mode, `ooo = false`).
    pub stalls: Counter,
    /// Requests refused with an RNR NAK because the mutation tap lacked room for their
    /// worst-case post-images (`crate::mutation`; also counted as drop `overloaded`).
    pub tap_full: Counter,
    /// RESUMEs that continued an incarnation (a client moving across a failover,
    /// docs/PROTOCOL.md §6.6): from completion records, or the live connection.
    pub resumes: Counter,
    /// Requests answered from completion records (also counted as `replays`).
    pub restored_replays: Counter,
    /// Requests answered `OUTCOME_UNKNOWN`: their completion records hold only the
    /// intent (also counted as `requests`).
    pub outcome_unknown: Counter,
    /// Logged requests whose response went into the replication stream.
    pub completions_logged: Counter,
    /// Logged requests whose response did not (no room, or overwritten): after a
    /// failover a resend of one is answered `OUTCOME_UNKNOWN`.
    pub completions_skipped: Counter,
    /// Frames bounced in echo mode.
    pub echoed: Counter,
    /// Requests received on this worker's queue and handed to their partition's worker.
    pub handed_off: Counter,
    /// Requests another worker handed to this one.
    pub handed_in: Counter,
    /// TSC cycles of the loop iterations that did work (received, applied, scanned,
    /// replicated inline or sent something): the worker's busy time, e.g. for its
    /// cycles per PUT (`scripts/bench_replication.py`, offload vs inline).
    pub busy_cycles: Counter,
    /// Sync mode: held responses freed unsent because the node stopped being a master
    /// (their writes may not be on the new one; the clients retry).
    pub sync_dropped: Counter,
    /// Drops by reason, indexed by [`DropReason::index`].
    pub drops: Drops,
    /// Sampled service latency (rx burst to hand-off of the response to the NIC).
    pub latency: LatencyHist,
}

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
    /// echo, an accepted request, a CONNECT (new incarnation or repeat), a RESUME that
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

    /// Total operations executed.
    pub fn ops(&self) -> u64 {
        self.gets.get()
            + self.puts.get()
            + self.deletes.get()
            + self.atomics.get()
            + self.vector_updates.get()
            + self.reduces.get()
            + self.filters.get()
    }

    /// A plain snapshot as (name, value) pairs, drops last, non-zero drops only.
    pub fn snapshot(&self) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = [
            ("rx_packets", &self.rx_packets),
            ("tx_packets", &self.tx_packets),
            ("requests", &self.requests),
            ("responses", &self.responses),
            ("replays", &self.replays),
            ("replayed_frames", &self.replayed_frames),
            ("naks_sent", &self.naks_sent),
            ("rnr_naks_sent", &self.rnr_naks_sent),
            ("connects", &self.connects),
            ("connect_repeats", &self.connect_repeats),
            ("accepts_sent", &self.accepts_sent),
            ("gets", &self.gets),
            ("get_hits", &self.get_hits),
            ("puts", &self.puts),
            ("deletes", &self.deletes),
            ("atomics", &self.atomics),
            ("vector_updates", &self.vector_updates),
            ("reduces", &self.reduces),
            ("filters", &self.filters),
            ("op_errors", &self.op_errors),
            ("tx_committed", &self.tx_committed),
            ("tx_aborted", &self.tx_aborted),
            ("tx_cross_partition", &self.tx_cross_partition),
            ("batches", &self.batches),
            ("station_chunks", &self.station_chunks),
            ("forwarded", &self.forwarded),
            ("merged", &self.merged),
            ("write_backs", &self.write_backs),
            ("stalls", &self.stalls),
            ("tap_full", &self.tap_full),
            ("resumes", &self.resumes),
            ("restored_replays", &self.restored_replays),
            ("outcome_unknown", &self.outcome_unknown),
            ("completions_logged", &self.completions_logged),
            ("completions_skipped", &self.completions_skipped),
            ("echoed", &self.echoed),
            ("handed_off", &self.handed_off),
            ("handed_in", &self.handed_in),
            ("busy_cycles", &self.busy_cycles),
            ("sync_dropped", &self.sync_dropped),
        ]
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
