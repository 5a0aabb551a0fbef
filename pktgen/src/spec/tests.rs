//! Unit tests of the run specification.

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
    assert_eq!(
        SpecError::KeySize.to_string(),
        "--key-size must be 1..=255 (251 with --tenant-file: its namespace takes 4 bytes of \
         each key; 254 with --open)"
    );
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
#[test]
fn opened_qps_spread_over_the_partitions_and_take_the_tenant_prefix() {
    let s = spec(&["--open", "--partitions", "2", "--qps", "5"]).unwrap();
    assert_eq!(s.qps.count, 5);
    assert_eq!(s.qps.by_partition, vec![vec![0, 2, 4], vec![1, 3]]);
    assert_eq!(
        s.qps.client_qps()[3],
        kvclient::QpSpec::Opened { partition: 1 }
    );
    assert!(s.qps.credentials().is_none());
    assert_eq!(s.workload.wire_key_size(), 9, "a zero byte before each key");
    assert!(spec(&[]).unwrap().workload.key_prefix.is_empty());
    assert_eq!(spec(&["--open", "--partitions", "3"]).unwrap().qps.count, 4);

    let dir = std::env::temp_dir().join(format!("pktgen-spec-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("t.json");
    std::fs::write(
        &f,
        r#"{"tenant": 7, "secret": "00112233445566778899aabbccddeeff"}"#,
    )
    .unwrap();
    let path = f.to_str().unwrap();
    let s = spec(&["--tenant-file", path, "--key-size", "12"]).unwrap();
    assert_eq!(s.qps.credentials().map(|c| c.tenant), Some(7));
    assert_eq!(s.workload.key_size, 12);
    assert_eq!(s.workload.wire_key_size(), 16);
    let mut key = [0u8; 16];
    s.workload.key_prefix.write_key(1, &mut key);
    assert_eq!(key[..4], kvwire::tenant::namespace(7));
    let max = kvwire::MAX_KEY_LEN.to_string();
    assert!(matches!(
        spec(&["--tenant-file", path, "--key-size", &max]),
        Err(SpecError::KeySize)
    ));
    for bad in [&["--echo"][..], &["--fuzz", "10"], &["--qp-first", "1"]] {
        let flags: Vec<&str> = ["--tenant-file", path].iter().chain(bad).copied().collect();
        assert!(matches!(spec(&flags), Err(SpecError::Opened(_))), "{bad:?}");
    }
    assert!(matches!(
        spec(&["--open", "--partitions", "2", "--qps", "1"]),
        Err(SpecError::Opened(_))
    ));
    let missing = dir.join("none.json");
    assert!(matches!(
        spec(&["--tenant-file", missing.to_str().unwrap()]),
        Err(SpecError::Opened(_))
    ));
    std::fs::remove_dir_all(&dir).unwrap();
}
