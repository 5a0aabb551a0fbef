//! The checked run: every flag validated against the config and resolved (the key
//! count of `--load-util`, the window clamped, the client QPs of each partition)
//! before EAL init, so a usage error costs no DPDK start-up and is a value
//! ([`SpecError`]) that tests can match.

use crate::cli::{Args, Dist};
use kvconf::Config;
use kvload::{Distribution, Mix, SizeDist};
use kvwire::partition::partition_of_qp;
use std::fmt;
use std::path::PathBuf;

/// Largest number of packets in flight (batch ids carry a 16-bit slot index).
pub const MAX_SLOTS: usize = 8192;
/// Largest number of ops per packet.
pub const MAX_OPS: usize = kvwire::MAX_OPS_PER_BATCH;
/// Ops per packet of the load phase (at most; fewer when values are large).
pub const LOAD_OPS: usize = 64;

/// Why the flags do not make a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SpecError {
    /// `--value-size` is not `N` or `MIN-MAX`.
    ValueSize(String),
    /// The op shares are out of range or sum to more than 1.
    Mix(String),
    /// `--load-util` outside [0, 1).
    LoadUtil,
    /// `--key-size` outside 1..=MAX_KEY_LEN.
    KeySize,
    /// More keys than keys of `key_size` bytes exist.
    KeysDoNotFit {
        /// The key count.
        keys: u64,
        /// The key size in bytes.
        key_size: usize,
    },
    /// No keys (`--keys 0`, or a `--load-util` too small for one).
    NoKeys,
    /// `--ops-per-packet` outside 1..=MAX_OPS.
    OpsPerPacket,
    /// `--qp-first` + `--qps` beyond the config's clients (or no QP).
    Qps {
        /// Clients in the config.
        clients: usize,
    },
    /// `--partitions` outside 1..=64.
    Partitions,
    /// `--count-partitions` outside 1..=1024.
    CountPartitions,
    /// `--open`/`--tenant-file` with what needs the config's QPs, or a credentials
    /// file that cannot be read.
    Opened(String),
    /// A partition has no client QP among the QPs of the run.
    NoQpForPartition {
        /// `--partitions`.
        partitions: u32,
        /// The first partition without a QP.
        partition: usize,
        /// The QPNs of the run.
        qpns: Vec<u32>,
    },
    /// `--loss/--dup/--reorder` out of range (each in [0, 1], sum at most 1).
    Faults(String),
    /// `--exactly-once` with more than one partition, or in echo mode.
    ExactlyOnce,
    /// `--rto-us` 0.
    Rto,
    /// `--theta` outside (0, 1) with a skewed `--dist`.
    Theta,
    /// A `--ycsb` preset that cannot run (workload E, or F's value size).
    Ycsb(String),
}

impl SpecError {
    fn faults(e: kvload::faults::FaultConfigError) -> SpecError {
        SpecError::Faults(e.to_string())
    }
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpecError::ValueSize(e)
            | SpecError::Mix(e)
            | SpecError::Ycsb(e)
            | SpecError::Opened(e) => f.write_str(e),
            SpecError::Theta => f.write_str("--theta must be in (0, 1)"),
            SpecError::LoadUtil => f.write_str("--load-util must be in [0, 1)"),
            SpecError::KeySize => {
                write!(
                    f,
                    "--key-size must be 1..={} ({} with --tenant-file: its namespace takes {} \
                     bytes of each key; {} with --open)",
                    kvwire::MAX_KEY_LEN,
                    kvwire::MAX_KEY_LEN - kvwire::tenant::NAMESPACE_LEN,
                    kvwire::tenant::NAMESPACE_LEN,
                    kvwire::MAX_KEY_LEN - 1
                )
            }
            SpecError::KeysDoNotFit { keys, key_size } => {
                write!(f, "{keys} keys do not fit in {key_size}-byte keys")
            }
            SpecError::NoKeys => f.write_str("--keys must be > 0"),
            SpecError::OpsPerPacket => write!(f, "--ops-per-packet must be 1..={MAX_OPS}"),
            SpecError::Qps { clients } => write!(
                f,
                "--qp-first + --qps must be 1..={clients} (clients in the config)"
            ),
            SpecError::Partitions => f.write_str("--partitions must be 1..=64"),
            SpecError::CountPartitions => f.write_str("--count-partitions must be 1..=1024"),
            SpecError::Faults(e) => write!(f, "--loss/--dup/--reorder: {e}"),
            SpecError::ExactlyOnce => write!(
                f,
                "--exactly-once needs --partitions 1 and the transport (not --echo)"
            ),
            SpecError::Rto => write!(f, "--rto-us and --rto-min-us must be at least 1"),
            SpecError::NoQpForPartition {
                partitions: n,
                partition: p,
                qpns,
            } => write!(
                f,
                "--partitions {n}: no client QP for partition {p} among the first --qps {} \
                 (qpns {qpns:?}); partition p needs a qpn with qpn % {n} == {p}: raise --qps \
                 or add clients to the config",
                qpns.len()
            ),
        }
    }
}

impl std::error::Error for SpecError {}

/// What is sent: keys, values, the op mix and key popularity.
#[derive(Clone, Debug)]
pub struct WorkloadSpec {
    /// Distinct keys (resolved from `--load-util` when given).
    pub keys: u64,
    /// Key size in bytes (the application's: without `key_prefix`).
    pub key_size: usize,
    /// What every key begins with on the wire: the tenant's namespace with
    /// `--tenant-file` (docs/PROTOCOL.md §6.8), else nothing.
    pub key_prefix: kvload::KeyPrefix,
    /// `--value-size` as given (for the label and the JSON).
    pub value_size: String,
    /// Value sizes.
    pub sizes: SizeDist,
    /// Shares of GET, PUT, atomic, vector and reduce ops as given.
    pub get: f64,
    /// See `get`.
    pub put: f64,
    /// See `get`.
    pub atomic: f64,
    /// See `get`.
    pub vector: f64,
    /// See `get`.
    pub reduce: f64,
    /// The op mix built from the shares (DELETE is the rest).
    pub mix: Mix,
    /// Key popularity flag.
    pub dist: Dist,
    /// The `--ycsb` preset the mix and popularity came from, if any.
    pub ycsb: Option<crate::ycsb::Ycsb>,
    /// Zipf skew.
    pub theta: f64,
    /// Ops per packet of the measurement.
    pub ops_per_packet: usize,
    /// PRNG seed.
    pub seed: u64,
}

impl WorkloadSpec {
    /// The key distribution.
    pub fn distribution(&self) -> Distribution {
        match self.dist {
            Dist::Uniform => Distribution::Uniform,
            Dist::Zipf => Distribution::Zipf(self.theta),
            Dist::Latest => Distribution::Latest(self.theta),
        }
    }

    /// Ops per packet of the load and read-back sweeps: as many of the largest KVs
    /// as a payload of `payload_cap` bytes holds, 1..=LOAD_OPS.
    pub fn sweep_ops_per_packet(&self, payload_cap: usize) -> usize {
        (payload_cap / (self.wire_key_size() + self.sizes.max + 4)).clamp(1, LOAD_OPS)
    }

    /// Key bytes on the wire: the prefix's and the key's own.
    pub fn wire_key_size(&self) -> usize {
        self.key_prefix.len() + self.key_size
    }
}

/// Whose QPs a run uses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QpSource {
    /// The config's `clients[]`: static QPs the operator admitted.
    Config,
    /// QPs the server opens for this run (an OPEN each, docs/PROTOCOL.md §6.1), as
    /// the tenant of `credentials` (§6.8) or, without, anonymously.
    Opened {
        /// The tenant's credentials (`--tenant-file`).
        credentials: Option<kvclient::Credentials>,
    },
}

/// The client QPs of the run and the dataplane's partitions.
#[derive(Clone, Debug)]
pub struct QpSpec {
    /// Whose QPs.
    pub source: QpSource,
    /// (QPN, R_Key) of each static QP used, in config order (none when opened).
    pub qps: Vec<(u32, u32)>,
    /// QPs of the run (`qps.len()` when static).
    pub count: usize,
    /// Indices of each partition's QPs: into `qps` (`qpn % N == p`) when static;
    /// QP `i` serves partition `i % N` when opened.
    pub by_partition: Vec<Vec<usize>>,
    /// N: the dataplane's key partitions (its worker lcores).
    pub partitions: u32,
    /// Send partition p's packets on queue (p+1) % N.
    pub misdirect: bool,
    /// K of `--count-partitions` (N unless given).
    pub count_partitions: u32,
}

/// Phases, pacing and checks.
#[derive(Clone, Debug)]
pub struct PhaseSpec {
    /// Empty batches of the calibration (0: off).
    pub calibrate: u32,
    /// Run the load phase.
    pub load: bool,
    /// Closed loop: packets outstanding (1..=MAX_SLOTS).
    pub window: usize,
    /// Packet slots: the window, or MAX_SLOTS in open loop.
    pub slots: usize,
    /// Open loop: target rate in Mops.
    pub rate: Option<f64>,
    /// Warm-up seconds.
    pub warmup: f64,
    /// Measurement seconds.
    pub duration: f64,
    /// A response not back after this many ms is a timeout.
    pub timeout_ms: u64,
    /// Idle loop iterations before yielding the CPU (0: never).
    pub idle_yield_polls: u32,
    /// Check every response; read every key back at the end.
    pub verify: bool,
    /// The dataplane echoes requests.
    pub echo: bool,
    /// The run phase may send pre-built packet templates (gen/template.rs).
    pub templates: bool,
    /// Retransmission timeout of the transport before its first sample, in µs.
    pub rto_us: u64,
    /// Smallest adaptive retransmission timeout, in µs.
    pub rto_min_us: u64,
    /// Connection set-up time limit, in ms.
    pub connect_timeout_ms: u64,
    /// Faults injected on what pktgen sends.
    pub tx_faults: kvload::faults::FaultConfig,
    /// Faults injected on what pktgen receives.
    pub rx_faults: kvload::faults::FaultConfig,
    /// Fetch-adds per QP of the exactly-once check (0: no check).
    pub exactly_once: u64,
}

impl PhaseSpec {
    /// Packets outstanding in the measurement. Open loop is bounded only by the
    /// slots: a slow server must show up as latency (from the intended send time),
    /// not as a sender that politely waits.
    pub fn run_window(&self) -> usize {
        if self.rate.is_some() {
            self.slots
        } else {
            self.window
        }
    }

    /// Packets outstanding in the load and read-back sweeps.
    pub fn sweep_window(&self) -> usize {
        self.window.max(32).min(self.slots)
    }
}

/// A checked run.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// What is sent.
    pub workload: WorkloadSpec,
    /// From which QPs, to which partitions.
    pub qps: QpSpec,
    /// Phases, pacing and checks.
    pub phases: PhaseSpec,
    /// Force `--no-huge`.
    pub no_huge: bool,
    /// The config file (for the JSON).
    pub config_file: PathBuf,
    /// Write the results as JSON here.
    pub json: Option<PathBuf>,
    /// The label of the summary and JSON, if given.
    pub label: Option<String>,
    /// Flags that are valid but have no effect, for stderr.
    pub warnings: Vec<String>,
}

impl RunSpec {
    /// Checks `args` against `cfg` (its clients and engine size) and resolves them.
    pub fn new(args: &Args, cfg: &Config) -> Result<RunSpec, SpecError> {
        let mut warnings = Vec::new();
        let (mut workload, load) = WorkloadSpec::new(args, cfg)?;
        let qps = QpSpec::new(args, cfg, &mut warnings)?;
        workload.key_prefix = qps.key_prefix();
        if workload.wire_key_size() > kvwire::MAX_KEY_LEN {
            return Err(SpecError::KeySize);
        }
        let phases = PhaseSpec::new(args, load, qps.count, &mut warnings)?;
        Ok(RunSpec {
            workload,
            qps,
            phases,
            no_huge: args.no_huge,
            config_file: args.config.clone(),
            json: args.json.clone(),
            label: args.label.clone(),
            warnings,
        })
    }

    /// Expectations kept per packet slot: the most ops a packet of any phase holds.
    pub fn ops_per_slot(&self) -> usize {
        self.workload.ops_per_packet.max(LOAD_OPS)
    }
}

impl QpSpec {
    /// `--qps` QPs (default: 4, at least one per partition) the server opens, as
    /// the tenant of `--tenant-file` or anonymously.
    fn opened(args: &Args) -> Result<QpSpec, SpecError> {
        let refuse = |what: &str| {
            Err(SpecError::Opened(format!(
                "{what} needs the config's static QPs: not with --open or --tenant-file"
            )))
        };
        if args.echo {
            return refuse("--echo");
        }
        if args.fuzz > 0 {
            return refuse("--fuzz");
        }
        if args.qp_first > 0 {
            return refuse("--qp-first");
        }
        if !(1..=64).contains(&args.partitions) {
            return Err(SpecError::Partitions);
        }
        let n = args.partitions as usize;
        let count = args.qps.unwrap_or(4.max(n));
        if count < n || count > MAX_OPENED_QPS {
            return Err(SpecError::Opened(format!(
                "--qps {count} with --open or --tenant-file: {n}..={MAX_OPENED_QPS} (one \
                 per partition at least)"
            )));
        }
        let credentials = args
            .tenant_file
            .as_deref()
            .map(kvclient::Credentials::load)
            .transpose()
            .map_err(|e| SpecError::Opened(format!("--tenant-file: {e}")))?;
        let count_k = args.count_partitions.unwrap_or(args.partitions);
        if !(1..=1024).contains(&count_k) {
            return Err(SpecError::CountPartitions);
        }
        Ok(QpSpec {
            source: QpSource::Opened { credentials },
            qps: Vec::new(),
            count,
            by_partition: (0..n).map(|p| (p..count).step_by(n).collect()).collect(),
            partitions: args.partitions,
            misdirect: args.misdirect,
            count_partitions: count_k,
        })
    }

    /// The run's QPs as the client library takes them.
    pub fn client_qps(&self) -> Vec<kvclient::QpSpec> {
        match self.source {
            QpSource::Config => self
                .qps
                .iter()
                .map(|&(qpn, rkey)| kvclient::QpSpec::Static { qpn, rkey })
                .collect(),
            QpSource::Opened { .. } => (0..self.count)
                .map(|i| kvclient::QpSpec::Opened {
                    partition: (i % self.partitions as usize) as u16,
                })
                .collect(),
        }
    }

    /// What the run's keys begin with on the wire: a tenant's namespace; on
    /// anonymous opened QPs a zero byte (an anonymous client's key beginning with
    /// the namespace byte `0xFE` is refused once a tenant exists, docs/PROTOCOL.md
    /// §6.8, and the index bytes of [`kvload::write_key`] begin with any byte);
    /// nothing on static QPs (not checked).
    fn key_prefix(&self) -> kvload::KeyPrefix {
        let prefix = match &self.source {
            QpSource::Config => kvload::KeyPrefix::new(&[]),
            QpSource::Opened { credentials: None } => kvload::KeyPrefix::new(&[0]),
            QpSource::Opened {
                credentials: Some(c),
            } => kvload::KeyPrefix::new(&kvwire::tenant::namespace(c.tenant)),
        };
        prefix.expect("a namespace fits a key prefix")
    }

    /// The tenant credentials the QPs are opened with, if any.
    pub fn credentials(&self) -> Option<&kvclient::Credentials> {
        match &self.source {
            QpSource::Opened { credentials } => credentials.as_ref(),
            QpSource::Config => None,
        }
    }
}

/// Opened QPs of a run at most (a dataplane's `server.max_connections` bounds them).
const MAX_OPENED_QPS: usize = 1024;

/// The client QPs of each partition: indices into `qps` with `qpn % N == p`, in
/// config order. Errors when a partition has none.
pub fn qps_by_partition(qps: &[(u32, u32)], n: u32) -> Result<Vec<Vec<usize>>, SpecError> {
    let mut by: Vec<Vec<usize>> = vec![Vec::new(); n as usize];
    for (i, &(qpn, _)) in qps.iter().enumerate() {
        by[partition_of_qp(qpn, n) as usize].push(i);
    }
    if let Some(p) = by.iter().position(Vec::is_empty) {
        return Err(SpecError::NoQpForPartition {
            partitions: n,
            partition: p,
            qpns: qps.iter().map(|q| q.0).collect(),
        });
    }
    Ok(by)
}

impl WorkloadSpec {
    /// The workload of the command line: keys, sizes, op shares (or a `--ycsb`
    /// preset's), popularity; and whether the keys are loaded first.
    fn new(args: &Args, cfg: &Config) -> Result<(WorkloadSpec, bool), SpecError> {
        let sizes = SizeDist::parse(&args.value_size).map_err(SpecError::ValueSize)?;
        // A --ycsb preset replaces the op shares (clap refuses both) and gives the
        // popularity unless --dist is given.
        let preset = args
            .ycsb
            .map(|w| crate::ycsb::preset(w, &sizes))
            .transpose()
            .map_err(|e| SpecError::Ycsb(e.to_string()))?;
        let (get, put, atomic, vector, reduce) = match preset {
            Some(p) => (p.get, p.put, p.atomic, p.vector, 0.0),
            None => (args.get, args.put, args.atomic, args.vector, args.reduce),
        };
        let dist = args
            .dist
            .or(preset.map(|p| p.dist))
            .unwrap_or(Dist::Uniform);
        if dist != Dist::Uniform && !(args.theta > 0.0 && args.theta < 1.0) {
            return Err(SpecError::Theta);
        }
        let mix = Mix::new(get, put, atomic, vector, reduce).map_err(SpecError::Mix)?;
        let (mut keys, mut load) = (args.keys, args.load);
        if let Some(u) = args.load_util {
            if !(0.0..1.0).contains(&u) {
                return Err(SpecError::LoadUtil);
            }
            let kv = args.key_size as f64 + (sizes.min + sizes.max) as f64 / 2.0;
            keys = ((cfg.engine.mem_mb << 20) as f64 * u / kv) as u64;
            load = true;
        }
        if args.key_size == 0 || args.key_size > kvwire::MAX_KEY_LEN {
            return Err(SpecError::KeySize);
        }
        if args.key_size < 8 && keys > 1u64 << (8 * args.key_size) {
            return Err(SpecError::KeysDoNotFit {
                keys,
                key_size: args.key_size,
            });
        }
        if keys == 0 {
            return Err(SpecError::NoKeys);
        }
        if args.ops_per_packet == 0 || args.ops_per_packet > MAX_OPS {
            return Err(SpecError::OpsPerPacket);
        }
        let w = WorkloadSpec {
            keys,
            key_size: args.key_size,
            key_prefix: kvload::KeyPrefix::NONE,
            value_size: args.value_size.clone(),
            sizes,
            get,
            put,
            atomic,
            vector,
            reduce,
            mix,
            dist,
            ycsb: args.ycsb,
            theta: args.theta,
            ops_per_packet: args.ops_per_packet,
            seed: args.seed,
        };
        Ok((w, load))
    }
}

impl QpSpec {
    /// The QPs the run uses (`--qps` from `--qp-first` of the config's clients, or
    /// opened with `--open`/`--tenant-file`) and the partitions they spread over.
    fn new(args: &Args, cfg: &Config, warnings: &mut Vec<String>) -> Result<QpSpec, SpecError> {
        if args.open || args.tenant_file.is_some() {
            return QpSpec::opened(args);
        }
        let nqps = args
            .qps
            .unwrap_or_else(|| cfg.clients.len().saturating_sub(args.qp_first).clamp(1, 4));
        if nqps == 0 || args.qp_first + nqps > cfg.clients.len() {
            return Err(SpecError::Qps {
                clients: cfg.clients.len(),
            });
        }
        // memif supports up to 255 queue pairs; far more than the workers we run.
        if !(1..=64).contains(&args.partitions) {
            return Err(SpecError::Partitions);
        }
        let nparts = args.partitions;
        let count_k = args.count_partitions.unwrap_or(nparts);
        if !(1..=1024).contains(&count_k) {
            return Err(SpecError::CountPartitions);
        }
        if args.misdirect && nparts == 1 {
            warnings.push("--misdirect has no effect with one partition".to_string());
        }
        let qps: Vec<(u32, u32)> = cfg
            .clients
            .iter()
            .skip(args.qp_first)
            .take(nqps)
            .map(|c| (c.qpn, c.rkey))
            .collect();
        let by_partition = qps_by_partition(&qps, nparts)?;
        Ok(QpSpec {
            source: QpSource::Config,
            count: qps.len(),
            qps,
            by_partition,
            partitions: nparts,
            misdirect: args.misdirect,
            count_partitions: count_k,
        })
    }
}

impl PhaseSpec {
    /// The run's phases and transport settings; `nqps` QPs in use.
    fn new(
        args: &Args,
        load: bool,
        nqps: usize,
        warnings: &mut Vec<String>,
    ) -> Result<PhaseSpec, SpecError> {
        let faults = |seed: u64| kvload::faults::FaultConfig {
            loss: args.loss,
            dup: args.dup,
            reorder: args.reorder,
            seed,
        };
        let (tx_faults, rx_faults) = (faults(args.seed ^ 0x7478), faults(args.seed ^ 0x7278));
        tx_faults.validate().map_err(SpecError::faults)?;
        if args.exactly_once > 0 && (args.partitions != 1 || args.echo) {
            return Err(SpecError::ExactlyOnce);
        }
        if args.verify && nqps > 1 && !tx_faults.is_zero() {
            warnings.push(
                "--verify with several QPs under injected faults: a retransmitted request can \
                 execute after a later one on another QP, and the model's order of a key's ops \
                 is per QP (use --qps 1, or one QP per partition)"
                    .to_string(),
            );
        }
        if args.rto_us == 0 || args.rto_min_us == 0 {
            return Err(SpecError::Rto);
        }
        let window = args.window.clamp(1, MAX_SLOTS);
        let slots = window.max(if args.rate.is_some() {
            MAX_SLOTS
        } else {
            window
        });
        Ok(PhaseSpec {
            calibrate: args.calibrate,
            load,
            window,
            slots,
            rate: args.rate,
            warmup: args.warmup,
            duration: args.duration,
            timeout_ms: args.timeout_ms,
            idle_yield_polls: args.idle_yield_polls,
            verify: args.verify,
            echo: args.echo,
            templates: !args.no_templates,
            rto_us: args.rto_us,
            rto_min_us: args.rto_min_us,
            connect_timeout_ms: args.connect_timeout_ms,
            tx_faults,
            rx_faults,
            exactly_once: args.exactly_once,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests;
