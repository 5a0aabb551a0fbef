//! Command-line flags. Addresses and QPs come from the config file; `spec.rs` checks
//! the flags against it.

use clap::{Parser, ValueEnum};
use std::path::PathBuf;

/// Key popularity flag (`--dist`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Dist {
    /// Every key equally likely.
    Uniform,
    /// YCSB's scrambled Zipfian (`--theta`).
    Zipf,
    /// YCSB's "latest": Zipfian over recency, the last loaded keys hottest.
    Latest,
}

/// Workload and measurement flags; addresses and QPs come from the config file.
#[derive(Parser, Debug, Clone)]
#[command(
    version,
    args_override_self = true,
    about = "KV-Direct traffic generator: batched RoCEv2 KV load, latency percentiles"
)]
pub struct Args {
    /// Topology/config file (JSON) shared with the dataplane.
    #[arg(long, default_value = "configs/memif.json")]
    pub config: PathBuf,
    /// Override the first vdev of the config's pktgen section.
    #[arg(long)]
    pub vdev: Option<String>,
    /// Override the EAL file prefix.
    #[arg(long)]
    pub file_prefix: Option<String>,
    /// Override the EAL lcore list.
    #[arg(long)]
    pub lcores: Option<String>,
    /// Force --no-huge.
    #[arg(long)]
    pub no_huge: bool,
    /// Number of distinct keys.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Key size in bytes (>= 1; below 8 the key count must fit).
    #[arg(long, default_value_t = 8)]
    pub key_size: usize,
    /// Value size in bytes: `N` or `MIN-MAX` (uniform per key and version).
    #[arg(long, default_value = "2")]
    pub value_size: String,
    /// Share of GETs.
    #[arg(long, default_value_t = 0.95)]
    pub get: f64,
    /// Share of PUTs (the rest are DELETEs).
    #[arg(long, default_value_t = 0.05)]
    pub put: f64,
    /// Share of atomic fetch-adds (UPDATE_S2S, +1 to the value as one u64; needs
    /// 8-byte values, others get BAD_LENGTH).
    #[arg(long, default_value_t = 0.0)]
    pub atomic: f64,
    /// Share of vector updates (UPDATE_S2V, +1 to every u64 element; values must be a
    /// multiple of 8 bytes).
    #[arg(long, default_value_t = 0.0)]
    pub vector: f64,
    /// Share of REDUCEs (sum of the u64 elements).
    #[arg(long, default_value_t = 0.0)]
    pub reduce: f64,
    /// Key popularity [default: uniform, or the --ycsb preset's].
    #[arg(long, value_enum)]
    pub dist: Option<Dist>,
    /// A YCSB core workload as the op mix and key popularity (docs/BENCHMARKS.md):
    /// a 50/50 GET/PUT, b 95/5, c read only, d 95/5 read-latest, f 50 % GET 50 %
    /// fetch-add on the value; e (scans) is refused: the protocol has no scan.
    #[arg(long, value_enum, conflicts_with_all = ["get", "put", "atomic", "vector", "reduce"])]
    pub ycsb: Option<crate::ycsb::Ycsb>,
    /// Zipf skew (of --dist zipf and latest), in (0, 1).
    #[arg(long, default_value_t = 0.99)]
    pub theta: f64,
    /// KV operations per packet (client-side batching).
    #[arg(long, default_value_t = 8)]
    pub ops_per_packet: usize,
    /// Client QPs to spread packets over (from the config's clients list; default:
    /// up to 4 from --qp-first on). Each QP has `server.credits` requests in flight
    /// at most (32 by default), so a closed-loop --window beyond QPs × credits is
    /// not reached.
    #[arg(long)]
    pub qps: Option<usize>,
    /// Index in the config's clients list of the first QP used (the run uses
    /// `--qps` QPs from there on).
    #[arg(long, default_value_t = 0)]
    pub qp_first: usize,
    /// Have the server open the run's QPs (an OPEN each, docs/PROTOCOL.md §6.1)
    /// instead of using the config's clients: `--qps` of them (default 4, at least
    /// one per partition), QP i serving partition i % --partitions. Each key goes
    /// with a zero byte before it (no tenant's namespace can be hit).
    #[arg(long)]
    pub open: bool,
    /// The tenant credentials file (`{"tenant": ID, "secret": "HEX"}`, written by
    /// `ctlplane tenants add`): open the run's QPs as that tenant (implies --open),
    /// every key in its namespace (4 bytes more per key on the wire).
    #[arg(long, env = "KVD_TENANT_FILE", value_name = "FILE")]
    pub tenant_file: Option<std::path::PathBuf>,
    /// Key partitions of the dataplane (its worker lcores). pktgen opens N rx/tx queue
    /// pairs and sends each packet with the keys of one partition p only, on queue p,
    /// from a QP with `qpn % N == p` (each partition needs one among the first --qps).
    #[arg(long, default_value_t = 1)]
    pub partitions: u32,
    /// Send partition p's packets on queue (p+1) % N instead of p (whole QPs, so
    /// per-QP order holds): the dataplane must hand them to their owner.
    #[arg(long)]
    pub misdirect: bool,
    /// Also tally the measured ops by key partition among K (default: --partitions),
    /// whatever N is: reports partition_ops_k and hottest_partition_ratio_k. With K
    /// different from N this hashes every op's key once more.
    #[arg(long)]
    pub count_partitions: Option<u32>,
    /// Load phase: PUT every key before the run.
    #[arg(long)]
    pub load: bool,
    /// Load phase to a target memory utilization of the server's store (sets --keys
    /// from engine.mem_mb and the KV size; implies --load).
    #[arg(long)]
    pub load_util: Option<f64>,
    /// Closed loop: packets outstanding.
    #[arg(long, default_value_t = 32)]
    pub window: usize,
    /// Open loop: target rate in Mops (overrides the closed loop).
    #[arg(long)]
    pub rate: Option<f64>,
    /// Warm-up seconds (not recorded).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Measurement seconds.
    #[arg(long, default_value_t = 5.0)]
    pub duration: f64,
    /// Check every response against the expected value; exit 1 on any mismatch.
    #[arg(long)]
    pub verify: bool,
    /// How long a request may go unanswered, in ms: the transport doubles its timeout
    /// from --rto-us up to this, and gives up on a request once it was retransmitted
    /// 8 times and is this old (a server descheduled for a few ms is waited for); in
    /// echo mode, a packet not back after this long is a timeout.
    #[arg(long, default_value_t = 200)]
    pub timeout_ms: u64,
    /// Retransmission timeout of the transport before its first round-trip sample,
    /// in µs (then it adapts: smoothed RTT + 4 deviations, at least --rto-min-us).
    #[arg(long, default_value_t = 1000)]
    pub rto_us: u64,
    /// Give up when the QPs are not all connected (ACCEPTed) after this many ms.
    #[arg(long, default_value_t = 10_000)]
    pub connect_timeout_ms: u64,
    /// Smallest adaptive retransmission timeout, in µs.
    #[arg(long, default_value_t = 200)]
    pub rto_min_us: u64,
    /// Drop this share of the frames pktgen sends and of those it receives (seeded
    /// by --seed; both directions are exercised).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Duplicate this share of the frames sent and received.
    #[arg(long, default_value_t = 0.0)]
    pub dup: f64,
    /// Hold back this share of the frames sent and received behind 1-4 later ones.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// After the measurement, the exactly-once check: every QP does M fetch-adds on
    /// one key and the QPs run CAS chains on another; each original must come back
    /// exactly once (kvclient::check). Needs --partitions 1.
    #[arg(long, default_value_t = 0)]
    pub exactly_once: u64,
    /// Empty batches sent one at a time to calibrate the transport floor (0: off).
    #[arg(long, default_value_t = 2000)]
    pub calibrate: u32,
    /// Yield the CPU on idle loop iterations (nothing sent or received) after this
    /// many in a row; 0 = pure busy polling. Lets a dataplane worker that shares this
    /// core run instead of waiting out a scheduler slice.
    #[arg(long, default_value_t = 64)]
    pub idle_yield_polls: u32,
    /// The dataplane runs in echo mode: count echoed requests as completions.
    #[arg(long)]
    pub echo: bool,
    /// Build every request op by op instead of from pre-built packet templates (the
    /// A/B baseline of the generator's own cost; templates apply to the run phase of
    /// a one-partition workload with a fixed value size).
    #[arg(long)]
    pub no_templates: bool,
    /// PRNG seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write results as JSON here (a latency plot goes beside it as .png).
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// A label for the summary and JSON.
    #[arg(long)]
    pub label: Option<String>,
    /// Transactions instead of the KV workload (docs/TRANSACTIONS.md): `R,W` = reads
    /// and writes per transaction, run one at a time for `--duration` s on `--keys`
    /// accounts of `--value-size` bytes (the first 8 a balance); writes move 1 between
    /// accounts, so the total never changes (checked at the end).
    #[arg(long, value_name = "R,W")]
    pub tx: Option<String>,
    /// With `--tx`: the HyperLoop-style baseline — every op its own round trip, keys
    /// locked and unlocked by the client with CAS on lock words.
    #[arg(long, requires = "tx")]
    pub tx_baseline: bool,
    /// Read-only transactions over all `--keys` accounts (at most 64), each checking
    /// that the balances add up (run on a replica, e.g. a chain's tail, while `--tx`
    /// transfers run on the head); exit 1 if one does not.
    #[arg(long, conflicts_with = "tx")]
    pub tx_audit: bool,
    /// With `--tx`: accounts shared with other clients — each transfer reads its
    /// accounts, then commits only if they are unchanged (a conflict aborts it);
    /// keys from `--dist`. The total is checked at the end.
    #[arg(long, requires = "tx", conflicts_with = "tx_baseline")]
    pub tx_shared: bool,
    /// With `--tx-shared`: transfers in flight at once (each on its first key's QP).
    #[arg(long, default_value_t = 1, requires = "tx_shared")]
    pub tx_inflight: usize,
    /// Live fuzzer: send this many mutated request frames alongside the workload, on
    /// the config's client QPs the workload does not use (docs/OPERATIONS.md).
    #[arg(long, default_value_t = 0)]
    pub fuzz: u64,
    /// Seed of the live fuzzer (default: from the clock; always printed).
    #[arg(long)]
    pub fuzz_seed: Option<u64>,
    /// Fuzz frames sent per transmit flush of the event loop (the fuzz rate).
    #[arg(long, default_value_t = 8)]
    pub fuzz_per_flush: u32,
    /// Follow the master of a replicated cluster over these DPDK ports (comma-separated
    /// or repeated), one per node, tried in this order; the run starts on the first
    /// (the config's `pktgen.port` is not used). When the node in use stops
    /// answering, the requests in flight are resumed on the next node (RESUME,
    /// docs/PROTOCOL.md §6.6); a node that answers writes NOT_MASTER is left for the
    /// next one too.
    #[arg(long, value_delimiter = ',')]
    pub follow_ports: Vec<String>,
}

impl Args {
    /// The flags that override fields of the config file.
    pub fn overrides(&self) -> kvconf::Overrides {
        kvconf::Overrides {
            vdev: self.vdev.clone(),
            file_prefix: self.file_prefix.clone(),
            lcores: self.lcores.clone(),
            mem_mb: None,
        }
    }
}
