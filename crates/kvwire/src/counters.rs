//! The dataplane's worker counters, declared once.
//!
//! [`worker_counters!`](crate::worker_counters) lists every per-worker counter —
//! its name (the key in `/kvd/stats`, in the final report and `--stats-json`, and
//! the field of the dataplane's `WorkerStats`), its documentation, its Prometheus
//! export, and whether `ctlplane stats` shows it as a row. The dataplane builds its
//! counters struct from the list; [`WORKER_COUNTERS`] is the same list as data, from
//! which the telemetry reply, `ctlplane stats` and `ctlplane metrics` are derived.
//! [`DERIVED`] names the figures computed from the counters. Adding a counter is one
//! entry here and the code that bumps it (docs/OPERATIONS.md, "Counters").

/// How a counter appears in `ctlplane metrics` (Prometheus text format).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Export {
    /// A family of its own, one series per worker.
    Family(&'static str),
    /// One series of a family shared with other counters: (family, label name,
    /// label value); the counter's help is the family's.
    Series(&'static str, &'static str, &'static str),
    /// Not exported, and why (derivable from exported series).
    Skip(&'static str),
}

/// One counter of the schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CounterDef {
    /// Key in `/kvd/stats`, the final report and `--stats-json`.
    pub name: &'static str,
    /// One line for Prometheus's `# HELP`.
    pub help: &'static str,
    /// Its Prometheus export.
    pub export: Export,
    /// Shown as a row of `ctlplane stats`.
    pub table: bool,
}

/// Calls macro `$m` with the list of worker counters, each as
/// `#[doc = ...] name: "help", Export, table;` — the single declaration of the
/// dataplane's per-worker counters (see the module documentation).
#[macro_export]
macro_rules! worker_counters {
    ($m:ident) => {
        $m! {
            /// Frames received.
            rx_packets: "Packets received by the worker.",
                Family("kvd_rx_packets_total"), true;
            /// Frames sent.
            tx_packets: "Packets sent by the worker.", Family("kvd_tx_packets_total"), true;
            /// Request packets accepted (all checks passed).
            requests: "Request packets taken for processing.", Family("kvd_requests_total"), true;
            /// Response packets built.
            responses: "Response packets sent.", Family("kvd_responses_total"), true;
            /// Duplicate requests answered from the response cache (each re-sends all
            /// the cached frames of one request).
            replays: "Go-back-N replays of the response stream.",
                Family("kvd_transport_replays_total"), false;
            /// Response frames re-sent by replays.
            replayed_frames: "Response frames sent again by replays.",
                Family("kvd_transport_replayed_frames_total"), false;
            /// NAKs sent: PSN sequence errors (a request ahead of the expected PSN, once
            /// per gap) and invalid requests (a request on a QP that is not connected).
            naks_sent: "Sequence-error NAKs sent to clients.",
                Family("kvd_transport_naks_total"), false;
            /// RNR NAKs sent (the tx side was backlogged when a request was due).
            rnr_naks_sent: "Receiver-not-ready NAKs sent to clients.",
                Family("kvd_transport_rnr_naks_total"), false;
            /// CONNECTs that started a new incarnation of their QP.
            connects: "Client CONNECT requests that started a new incarnation.",
                Family("kvd_transport_connects_total"), false;
            /// CONNECTs that repeated the current incarnation's nonce (a lost ACCEPT:
            /// the same ACCEPT is sent again). With `connects` and the CONNECT drops,
            /// every CONNECT frame is counted once (docs/OPERATIONS.md, "Accounting
            /// invariant").
            connect_repeats: "Client CONNECTs repeating the current incarnation (ACCEPT sent again).",
                Family("kvd_transport_connect_repeats_total"), false;
            /// Requests whose batch header was malformed (wrong magic or version, more
            /// than 1024 ops, shorter than 8 bytes): answered with one MALFORMED result
            /// (also counted as `requests` and `op_errors`).
            bad_batches: "Requests with a malformed batch header (answered MALFORMED).",
                Family("kvd_bad_batches_total"), false;
            /// Ops refused `DENIED`: outside the client's tenant namespace or ACL
            /// (docs/PROTOCOL.md §6.8; also counted as `op_errors`).
            denied: "Ops refused by the tenant's ACL or namespace.",
                Family("kvd_denied_total"), false;
            /// Keys deleted by purges of removed tenants' namespaces (docs/PROTOCOL.md
            /// §6.8, "Removal").
            purged_keys: "Keys deleted by purges of removed tenants' namespaces.",
                Family("kvd_tenant_purged_keys_total"), false;
            /// OPENs that opened a QP (docs/PROTOCOL.md §6.1; a repeated OPEN whose
            /// ACCEPT was lost is counted `connect_repeats`).
            opens: "Client OPENs that opened a QP.", Family("kvd_transport_opens_total"), false;
            /// CLOSEs that closed an opened QP.
            closes: "Client CLOSEs that closed an opened QP.",
                Family("kvd_transport_closes_total"), false;
            /// Opened QPs the server closed after `server.connection_idle_s` without a
            /// frame from their client.
            reclaims: "Opened QPs closed by the server after idling.",
                Family("kvd_transport_reclaims_total"), false;
            /// ACCEPT frames sent (new incarnations and re-sent ACCEPTs).
            accepts_sent: "Connection ACCEPTs sent to clients.",
                Family("kvd_transport_accepts_total"), false;
            /// GET operations executed.
            gets: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "get"), true;
            /// GETs that found their key.
            get_hits: "GETs that found their key.", Family("kvd_get_hits_total"), true;
            /// PUT operations executed.
            puts: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "put"), true;
            /// DELETE operations executed.
            deletes: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "delete"), true;
            /// Atomic scalar updates (UPDATE_S2S) executed.
            atomics: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "atomic"), false;
            /// Vector updates (UPDATE_S2V, UPDATE_V2V) executed.
            vector_updates: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "vector_update"), false;
            /// REDUCE operations executed.
            reduces: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "reduce"), false;
            /// FILTER operations executed.
            filters: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "filter"), false;
            /// COMPARE_DELETE operations executed (deleted or not).
            compare_deletes: "KV operations executed, by type.",
                Series("kvd_ops_total", "op", "compare_delete"), false;
            /// Operations answered with a status other than OK/NOT_FOUND.
            op_errors: "Operations answered with an error status.",
                Family("kvd_op_errors_total"), true;
            /// Transactions committed (docs/TRANSACTIONS.md).
            tx_committed: "Transactions committed.",
                Family("kvd_transactions_committed_total"), false;
            /// Transactions aborted (nothing of them changed).
            tx_aborted: "Transactions aborted (nothing of them changed).",
                Family("kvd_transactions_aborted_total"), false;
            /// Transactions this worker coordinated over other partitions too
            /// (committed or not; docs/TRANSACTIONS.md).
            tx_cross_partition: "Transactions coordinated over more than one partition (committed or not).",
                Family("kvd_transactions_cross_partition_total"), false;
            /// Chunks executed (each straight by the engine or through the station).
            batches: "Request batches (multi-op packets) processed.",
                Family("kvd_batches_total"), true;
            /// Chunks that went through the reservation station (they held a
            /// read-modify-write op or two ops in one station slot); the others ran
            /// straight in the engine.
            station_chunks: "Chunks of operations through the reservation station.",
                Family("kvd_station_chunks_total"), false;
            /// Station: ops served from the forwarding cache (mirrors the station's
            /// own statistics).
            station_forwarded: "Reservation station: operations answered by forwarding from an in-flight one.",
                Family("kvd_station_forwarded_total"), false;
            /// Station: in-place updates merged without a write of their own.
            station_merged: "Reservation station: operations merged into an in-flight one on the same key.",
                Family("kvd_station_merged_total"), false;
            /// Station: merged write-backs issued.
            station_write_backs: "Reservation station: merged results written back to the store.",
                Family("kvd_station_write_backs_total"), false;
            /// Station: pipeline stalls on a key conflict (stall mode, `ooo = false`).
            station_stalls: "Reservation station: stalls on a key conflict (stall mode).",
                Family("kvd_station_stalls_total"), false;
            /// Requests refused with an RNR NAK because the mutation tap lacked room
            /// for their worst-case post-images (also counted as drop `overloaded`).
            tap_full: "Requests refused (RNR NAK) for want of room in the replication tap.",
                Family("kvd_tap_full_total"), false;
            /// RESUMEs that continued an incarnation (a client moving across a
            /// failover, docs/PROTOCOL.md §6.6): from completion records, or the live
            /// connection.
            resumes: "RESUMEs that continued a connection's incarnation.",
                Family("kvd_transport_resumes_total"), false;
            /// Requests answered from completion records (also counted as `replays`).
            restored_replays: "Requests answered from replicated completion records.",
                Family("kvd_transport_restored_replays_total"), false;
            /// Requests answered `OUTCOME_UNKNOWN`: their completion records hold only
            /// the intent (also counted as `requests`).
            outcome_unknown: "Requests answered OUTCOME_UNKNOWN (only their intent was recorded).",
                Family("kvd_outcome_unknown_total"), false;
            /// Logged requests whose response went into the replication stream.
            completions_logged: "Responses recorded in the replication stream (completion records).",
                Family("kvd_completions_logged_total"), false;
            /// Logged requests whose response did not (no room, or overwritten): after
            /// a failover a resend of one is answered `OUTCOME_UNKNOWN`.
            completions_skipped: "Responses that found no room in the replication stream.",
                Family("kvd_completions_skipped_total"), false;
            /// Frames bounced in echo mode.
            echoed: "Packets answered by echo (no KV operation).", Family("kvd_echoed_total"), true;
            /// Requests received on this worker's queue and handed to their
            /// partition's worker.
            handed_off: "Requests handed to the worker owning their partition.",
                Family("kvd_handed_off_total"), false;
            /// Requests another worker handed to this one.
            handed_in: "Requests taken over from another worker.", Family("kvd_handed_in_total"), false;
            /// TSC cycles of the loop iterations that did work (received, applied,
            /// scanned, replicated inline or sent something): the worker's busy time,
            /// e.g. for its cycles per PUT (`scripts/bench_replication.py`).
            busy_cycles: "TSC cycles of the worker's loop iterations that did work.",
                Family("kvd_busy_cycles_total"), false;
            /// Sleeps of the idle policy `adaptive` (docs/OPERATIONS.md "Idle lcores").
            idle_sleeps: "Sleeps of an idle worker (server.idle adaptive).",
                Family("kvd_idle_sleeps_total"), false;
            /// Those sleeps ended by a packet: the rx queue's interrupt descriptor
            /// became readable (net_tap; `crate` docs of `dpdk::RxQueue::intr_fd`).
            idle_rx_wakeups: "Sleeps of an idle worker ended by a packet (Rx interrupt).",
                Family("kvd_idle_rx_wakeups_total"), false;
            /// Microseconds those sleeps asked for (the kernel adds its timer slack).
            idle_sleep_us: "Microseconds an idle worker asked to sleep.",
                Skip("Prometheus counts time in seconds; kvd_idle_sleeps_total counts the sleeps"), false;
            /// Sync mode: held responses freed unsent because the node stopped being a
            /// master (their writes may not be on the new one; the clients retry).
            sync_dropped: "Held responses freed unsent when the node stopped being master.",
                Family("kvd_sync_dropped_total"), false;
        }
    };
}

macro_rules! schema {
    ($( $(#[$doc:meta])* $name:ident : $help:literal, $kind:ident ( $($arg:expr),* ), $table:literal; )*) => {
        /// Every per-worker counter, in declaration order.
        pub const WORKER_COUNTERS: &[CounterDef] = &[
            $( CounterDef {
                name: stringify!($name),
                help: $help,
                export: Export::$kind($($arg),*),
                table: $table,
            }, )*
        ];
    };
}
crate::worker_counters!(schema);

/// Figures of `/kvd/stats` computed from the counters: (name, help, export, table).
pub const DERIVED: &[CounterDef] = &[
    CounterDef {
        name: "ops",
        help: "KV operations executed (every type).",
        export: Export::Skip("the sum of kvd_ops_total over `op`"),
        table: true,
    },
    CounterDef {
        name: "get_misses",
        help: "GETs that did not find their key.",
        export: Export::Family("kvd_get_misses_total"),
        table: true,
    },
    CounterDef {
        name: "drops",
        help: "Frames dropped (every reason).",
        export: Export::Skip("the sum of kvd_drops_total over `reason`"),
        table: true,
    },
];

/// One per-tenant family (docs/OPERATIONS.md "Tenants"): its key in the dataplane's
/// `/kvd/tenants/stats` (an array, one entry per tenant id) and its Prometheus family
/// (`ctlplane metrics`, labelled `tenant`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantFamily {
    /// Key in `/kvd/tenants/stats`.
    pub key: &'static str,
    /// Prometheus family.
    pub family: &'static str,
    /// One line for `# HELP`.
    pub help: &'static str,
    /// A gauge (a level) rather than a counter.
    pub gauge: bool,
}

/// Every per-tenant family, in the order of the dataplane's `TenantSlot::values`.
pub const TENANT_FAMILIES: [TenantFamily; 7] = [
    TenantFamily {
        key: "requests",
        family: "kvd_tenant_requests_total",
        help: "Requests served, by tenant.",
        gauge: false,
    },
    TenantFamily {
        key: "request_bytes",
        family: "kvd_tenant_request_bytes_total",
        help: "Request payload bytes served, by tenant.",
        gauge: false,
    },
    TenantFamily {
        key: "denied",
        family: "kvd_tenant_denied_total",
        help: "Ops refused DENIED (ACL or namespace), by tenant.",
        gauge: false,
    },
    TenantFamily {
        key: "over_quota",
        family: "kvd_tenant_over_quota_total",
        help: "Requests refused over the tenant's rate, by tenant.",
        gauge: false,
    },
    TenantFamily {
        key: "opens",
        family: "kvd_tenant_opens_total",
        help: "QPs opened, by tenant.",
        gauge: false,
    },
    TenantFamily {
        key: "bad_credentials",
        family: "kvd_tenant_bad_credentials_total",
        help: "OPENs refused for a bad credential, by tenant.",
        gauge: false,
    },
    TenantFamily {
        key: "connections",
        family: "kvd_tenant_connections",
        help: "Opened QPs live, by tenant.",
        gauge: true,
    },
];

/// The counter or derived figure called `name`.
pub fn find(name: &str) -> Option<&'static CounterDef> {
    WORKER_COUNTERS
        .iter()
        .chain(DERIVED)
        .find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_families_are_kvd_totals() {
        let all: Vec<&CounterDef> = WORKER_COUNTERS.iter().chain(DERIVED).collect();
        for (i, c) in all.iter().enumerate() {
            assert!(
                all[..i].iter().all(|d| d.name != c.name),
                "{} twice",
                c.name
            );
            let family = match c.export {
                Export::Family(f) | Export::Series(f, ..) => f,
                Export::Skip(why) => {
                    assert!(!why.is_empty());
                    continue;
                }
            };
            assert!(
                family.starts_with("kvd_") && family.ends_with("_total"),
                "{family}"
            );
        }
        // A family of its own belongs to one counter.
        for c in &all {
            if let Export::Family(f) = c.export {
                assert_eq!(
                    all.iter().filter(|d| d.export == Export::Family(f)).count(),
                    1,
                    "{f}"
                );
            }
        }
        assert!(!find("station_forwarded").unwrap().table);
        assert!(find("forwarded").is_none());
    }
}
