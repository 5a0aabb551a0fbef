//! Tenant isolation as a property (docs/SECURITY.md): the noninterference fuzzer
//! (`kviso`) against the server state machine over many seeds. Every answer each
//! client gets must be what its own namespace's model predicts; no leak, no trace of
//! a refused op, no QP taken over, no replayed OPEN answered with a live QP, no
//! revoked QP served, no key left by a purge. The long run is
//! `examples/noninterference.rs` (`scripts/bench.sh tenants`).

mod common;

use common::iso::InProcess;
use kviso::{Config, Fuzzer};

#[test]
fn no_client_ever_sees_another() {
    let mut total = kviso::Figures::default();
    for seed in 1..=12u64 {
        let cfg = Config {
            seed,
            admin_every: 1500,
            ..Config::default()
        };
        let mut f = Fuzzer::new(InProcess::new(8 << 20), cfg).expect("tenants set");
        let fig = f.run(100_000, 0).clone();
        assert_eq!(fig.failures(), 0, "seed {seed}: {fig:#?}");
        total.merge(&fig);
    }
    // Every kind of step was taken (a fuzzer that tries nothing proves nothing).
    let t = &total;
    for (name, n) in [
        ("tx_committed", t.tx_committed),
        ("tx_aborted", t.tx_aborted),
        ("tx_denied", t.tx_denied),
        ("denied_ops", t.denied_ops),
        ("redacted_ops", t.redacted_ops),
        ("hijack_attempts", t.hijack_attempts),
        ("replay_attempts", t.replay_attempts),
        ("revoked_attempts", t.revoked_attempts),
        ("rotations", t.rotations),
        ("removals", t.removals),
        ("readds", t.readds),
        ("resumes", t.resumes),
        ("closes", t.closes),
        ("open_repeats", t.open_repeats),
    ] {
        assert!(n > 0, "no {name} in {t:#?}");
    }
}
