//! The simulation can fail: each integration rule of `group.rs`, switched off by its
//! cargo feature, is caught on seeds that found it (the simulation replays a seed
//! exactly, so they keep finding it). `scripts/test.sh` builds this test once per
//! feature; without one, the same seeds pass.

#[allow(unused_imports)]
use kvraft::sim::{run_seeds, SimConfig};

/// Runs `seeds` and asserts that at least one fails.
#[allow(dead_code)]
fn caught(seeds: &[u64], what: &str) {
    let cfg = SimConfig::default();
    let failed: usize = seeds
        .iter()
        .map(|&s| run_seeds(cfg, s..s + 1).0.len())
        .sum();
    assert!(failed > 0, "{what}: none of seeds {seeds:?} failed");
}

#[cfg(feature = "bug-ack-before-persist")]
#[test]
fn acknowledging_before_persisting_is_caught() {
    caught(&[10, 14, 22, 23], "ack before persist");
}

#[cfg(feature = "bug-term-not-persisted")]
#[test]
fn an_unpersisted_term_is_caught() {
    caught(&[1, 2, 3, 5], "term not persisted");
}

#[cfg(feature = "bug-write-before-catch-up")]
#[test]
fn writing_before_catching_up_is_caught() {
    caught(&[85, 98, 99, 133], "write before catch-up");
}

#[cfg(feature = "bug-apply-before-commit")]
#[test]
fn applying_before_commit_is_caught() {
    caught(&[4, 7, 10, 37], "apply before commit");
}

#[cfg(feature = "bug-stale-read")]
#[test]
fn reading_without_a_lease_is_caught() {
    caught(&[23, 162, 312, 519], "stale read");
}

/// Without a seeded bug, the seeds that catch them all pass.
#[cfg(not(any(
    feature = "bug-ack-before-persist",
    feature = "bug-term-not-persisted",
    feature = "bug-write-before-catch-up",
    feature = "bug-apply-before-commit",
    feature = "bug-stale-read"
)))]
#[test]
fn the_seeds_that_catch_them_pass_without_them() {
    let seeds = [
        10, 14, 22, 23, 1, 2, 3, 5, 85, 98, 99, 133, 4, 7, 37, 162, 312, 519,
    ];
    for s in seeds {
        let (failed, _) = run_seeds(SimConfig::default(), s..s + 1);
        assert!(failed.is_empty(), "seed {s}: {failed:#?}");
    }
}
