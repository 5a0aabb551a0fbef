//! The deterministic simulation's short form (the long one is `scripts/bench.sh
//! sim`): thousands of seeds of 3-node groups and hundreds of 5-node ones, each with
//! its fault phase, calm phase and checks (linearizable history per key, one leader
//! per term, equal stores).

use kvraft::sim::{run_seeds, Sim, SimConfig};
use kvraft::FsyncPolicy;

fn assert_all_pass(cfg: SimConfig, seeds: std::ops::Range<u64>) -> kvraft::sim::SimReport {
    let n = seeds.end - seeds.start;
    let (failed, total) = run_seeds(cfg, seeds);
    assert!(
        failed.is_empty(),
        "{} of {n} seeds failed: {:#?}",
        failed.len(),
        &failed[..failed.len().min(3)]
    );
    // A run that did nothing proves nothing.
    assert!(total.ops_done > n * 100, "{total:?}");
    assert!(
        total.crashes > 0 && total.partitions > 0 && total.freezes > 0,
        "{total:?}"
    );
    total
}

#[test]
fn three_node_groups_keep_every_property_over_thousands_of_seeds() {
    let t = assert_all_pass(SimConfig::default(), 1..2001);
    assert!(
        t.machine_crashes > 0 && t.disks_lost > 0 && t.transfers > 0,
        "{t:?}"
    );
    assert!(t.conf_changes > 0, "a lost disk was replaced: {t:?}");
}

#[test]
fn five_node_groups_keep_every_property() {
    let cfg = SimConfig {
        nodes: 5,
        ..SimConfig::default()
    };
    assert_all_pass(cfg, 10_001..10_401);
}

/// Under `everysec` and `no`, process crashes (the OS keeps what was written) lose
/// nothing; machine crashes may (docs/FAILOVER.md's table, `durable.rs`).
#[test]
fn weaker_fsync_policies_survive_process_crashes() {
    for fsync in [FsyncPolicy::EverySec, FsyncPolicy::No] {
        let mut cfg = SimConfig {
            fsync,
            ..SimConfig::default()
        };
        cfg.faults.machine_crash = 0.0;
        assert_all_pass(cfg, 20_001..20_301);
    }
}

#[test]
fn a_seed_replays_exactly() {
    let cfg = SimConfig::default();
    let a = serde_json::to_string(&Sim::new(cfg, 77).run()).unwrap();
    let b = serde_json::to_string(&Sim::new(cfg, 77).run()).unwrap();
    assert_eq!(a, b);
}
