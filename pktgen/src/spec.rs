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
            SpecError::ValueSize(e) | SpecError::Mix(e) | SpecError::Ycsb(e) => f.write_str(e),
            SpecError::Theta => f.write_str("--theta must be in (0, 1)"),
            SpecError::LoadUtil => f.write_str("--load-util must be in [0, 1)"),
            SpecError::KeySize => {
                write!(f, "--key-size must be 1..={}", kvwire::MAX_KEY_LEN)
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
    /// Key size in bytes.
    pub key_size: usize,
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
        (payload_cap / (self.key_size + self.sizes.max + 4)).clamp(1, LOAD_OPS)
    }
}

/// The client QPs of the run and the dataplane's partitions.
#[derive(Clone, Debug)]
pub struct QpSpec {
    /// (QPN, R_Key) of each QP used, in config order.
    pub qps: Vec<(u32, u32)>,
    /// Indices into `qps` of each partition's QPs (`qpn % N == p`).
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
        let (workload, load) = WorkloadSpec::new(args, cfg)?;
        let qps = QpSpec::new(args, cfg, &mut warnings)?;
        let phases = PhaseSpec::new(args, load, qps.qps.len(), &mut warnings)?;
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
    /// The QPs the run uses (`--qps` from `--qp-first` of the config's clients) and
    /// the partitions they spread over.
    fn new(args: &Args, cfg: &Config, warnings: &mut Vec<String>) -> Result<QpSpec, SpecError> {
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
pub(crate) mod tests {
    use super::*;
    use clap::Parser;

    /// The shipped memif config.
    pub(crate) fn memif() -> Config {
        Config::load(std::path::Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../configs/memif.json"
        )))
        .expect("configs/memif.json")
    }

    /// A spec from pktgen flags (after the program name) against the memif config.
    pub(crate) fn spec(flags: &[&str]) -> Result<RunSpec, SpecError> {
        let args = Args::try_parse_from(std::iter::once("pktgen").chain(flags.iter().copied()))
            .expect("flags parse");
        RunSpec::new(&args, &memif())
    }

    #[test]
    fn defaults_make_a_run() {
        let s = spec(&[]).unwrap();
        assert_eq!(s.workload.keys, 100_000);
        assert_eq!(s.workload.key_size, 8);
        assert_eq!(s.workload.sizes, SizeDist { min: 2, max: 2 });
        assert_eq!(s.workload.distribution(), Distribution::Uniform);
        assert!((s.workload.mix.delete_share() - 0.0).abs() < 1e-9);
        assert_eq!((s.phases.window, s.phases.slots), (32, 32));
        assert_eq!(s.phases.run_window(), 32);
        assert_eq!(s.phases.sweep_window(), 32);
        assert!(!s.phases.load && !s.phases.verify);
        // Up to 4 QPs of the config by default (memif.json has 4).
        assert_eq!(s.qps.qps.len(), 4);
        assert_eq!(s.qps.by_partition, vec![vec![0, 1, 2, 3]]);
        assert_eq!(spec(&["--qp-first", "3"]).unwrap().qps.qps.len(), 1);
        assert_eq!(s.qps.count_partitions, 1);
        assert_eq!(s.ops_per_slot(), LOAD_OPS);
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn each_bad_flag_is_its_error() {
        let cases: &[(&[&str], SpecError)] = &[
            (
                &["--value-size", "9-3"],
                SpecError::ValueSize("bad size range \"9-3\"".into()),
            ),
            (&["--load-util", "1.0"], SpecError::LoadUtil),
            (&["--key-size", "0"], SpecError::KeySize),
            (&["--key-size", "256"], SpecError::KeySize),
            (
                &["--key-size", "1", "--keys", "257"],
                SpecError::KeysDoNotFit {
                    keys: 257,
                    key_size: 1,
                },
            ),
            (&["--keys", "0"], SpecError::NoKeys),
            (&["--ops-per-packet", "0"], SpecError::OpsPerPacket),
            (&["--ops-per-packet", "1025"], SpecError::OpsPerPacket),
            (&["--partitions", "0"], SpecError::Partitions),
            (&["--partitions", "65"], SpecError::Partitions),
            (&["--count-partitions", "0"], SpecError::CountPartitions),
            (&["--count-partitions", "1025"], SpecError::CountPartitions),
        ];
        for (flags, want) in cases {
            assert_eq!(spec(flags).unwrap_err(), *want, "{flags:?}");
        }
        assert!(matches!(
            spec(&["--get", "0.9", "--put", "0.2"]),
            Err(SpecError::Mix(_))
        ));
        for theta in ["1.0", "0", "-0.5", "NaN", "1.5"] {
            let flag = format!("--theta={theta}");
            assert_eq!(
                spec(&["--dist", "zipf", &flag]).unwrap_err(),
                SpecError::Theta,
                "{theta}"
            );
        }
        assert!(spec(&["--theta", "1.5"]).is_ok(), "uniform ignores theta");
        let clients = memif().clients.len();
        let too_many = (clients + 1).to_string();
        assert_eq!(
            spec(&["--qps", &too_many]).unwrap_err(),
            SpecError::Qps { clients }
        );
        assert_eq!(
            spec(&["--qps", "0"]).unwrap_err(),
            SpecError::Qps { clients }
        );
        let last = (clients - 1).to_string();
        assert!(spec(&["--qp-first", &last]).is_ok());
        assert_eq!(
            spec(&["--qp-first", &last, "--qps", "2"]).unwrap_err(),
            SpecError::Qps { clients }
        );
    }

    #[test]
    fn errors_read_as_before() {
        assert_eq!(SpecError::KeySize.to_string(), "--key-size must be 1..=255");
        assert_eq!(
            SpecError::KeysDoNotFit {
                keys: 300,
                key_size: 1
            }
            .to_string(),
            "300 keys do not fit in 1-byte keys"
        );
        assert_eq!(
            SpecError::OpsPerPacket.to_string(),
            "--ops-per-packet must be 1..=1024"
        );
        let e = SpecError::NoQpForPartition {
            partitions: 2,
            partition: 1,
            qpns: vec![16],
        };
        assert_eq!(
            e.to_string(),
            "--partitions 2: no client QP for partition 1 among the first --qps 1 (qpns [16]); \
             partition p needs a qpn with qpn % 2 == 1: raise --qps or add clients to the config"
        );
    }

    #[test]
    fn load_util_sets_keys_and_load() {
        let s = spec(&["--load-util", "0.5", "--value-size", "8"]).unwrap();
        let mem = memif().engine.mem_mb << 20;
        assert_eq!(s.workload.keys, (mem as f64 * 0.5 / 16.0) as u64);
        assert!(s.phases.load);
        // Too small a share for one key.
        assert_eq!(
            spec(&["--load-util", "0", "--value-size", "8"]).unwrap_err(),
            SpecError::NoKeys
        );
    }

    #[test]
    fn windows_and_slots() {
        let s = spec(&["--window", "0"]).unwrap();
        assert_eq!(s.phases.window, 1);
        assert_eq!(s.phases.sweep_window(), 1, "no more than the slots");
        let s = spec(&["--window", "100000"]).unwrap();
        assert_eq!((s.phases.window, s.phases.slots), (MAX_SLOTS, MAX_SLOTS));
        let s = spec(&["--window", "8", "--rate", "1.5"]).unwrap();
        assert_eq!((s.phases.window, s.phases.slots), (8, MAX_SLOTS));
        assert_eq!(s.phases.run_window(), MAX_SLOTS, "open loop: all slots");
        assert_eq!(s.phases.sweep_window(), 32);
    }

    #[test]
    fn sweep_packets_hold_the_largest_kvs() {
        let s = spec(&["--value-size", "2-1000", "--key-size", "16"]).unwrap();
        assert_eq!(s.workload.sweep_ops_per_packet(1400), 1400 / 1020);
        let s = spec(&[]).unwrap();
        assert_eq!(s.workload.sweep_ops_per_packet(1400), LOAD_OPS);
        let s = spec(&["--value-size", "4000"]).unwrap();
        assert_eq!(s.workload.sweep_ops_per_packet(1400), 1);
    }

    #[test]
    fn partitions_need_a_qp_each() {
        let cfg = memif();
        let qpns: Vec<u32> = cfg.clients.iter().map(|c| c.qpn).collect();
        let n = cfg.clients.len().to_string();
        let s = spec(&["--qps", &n, "--partitions", "2"]);
        let has_both = qpns.iter().any(|q| q % 2 == 0) && qpns.iter().any(|q| q % 2 == 1);
        assert_eq!(s.is_ok(), has_both, "qpns {qpns:?}");
        if let Ok(s) = s {
            for (p, qis) in s.qps.by_partition.iter().enumerate() {
                assert!(qis.iter().all(|&i| s.qps.qps[i].0 % 2 == p as u32));
            }
            assert_eq!(s.qps.count_partitions, 2);
        }
        let one = [(16, 0)];
        assert!(matches!(
            qps_by_partition(&one, 2),
            Err(SpecError::NoQpForPartition { partition: 1, .. })
        ));
        let by = qps_by_partition(&[(3, 0), (4, 0), (5, 0)], 2).unwrap();
        assert_eq!(by, vec![vec![1], vec![0, 2]]);
    }

    #[test]
    fn misdirect_with_one_partition_is_a_warning() {
        let s = spec(&["--misdirect"]).unwrap();
        assert_eq!(s.warnings.len(), 1);
        assert!(s.qps.misdirect);
    }

    #[test]
    fn workload_flags_are_kept() {
        let s = spec(&[
            "--dist",
            "zipf",
            "--theta",
            "0.9",
            "--get",
            "0.5",
            "--put",
            "0.3",
            "--count-partitions",
            "10",
            "--seed",
            "7",
            "--verify",
            "--echo",
        ])
        .unwrap();
        assert_eq!(s.workload.distribution(), Distribution::Zipf(0.9));
        assert!((s.workload.mix.delete_share() - 0.2).abs() < 1e-9);
        assert_eq!(s.qps.count_partitions, 10);
        assert_eq!(s.workload.seed, 7);
        assert!(s.phases.verify && s.phases.echo);
    }
}
