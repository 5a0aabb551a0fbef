//! `ctlplane clients gen` end to end: the binary reads a config, writes a new one.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn ctlplane(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ctlplane"))
        .args(args)
        .output()
        .expect("run ctlplane")
}

/// A fresh scratch directory for one test.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ctlplane-gen-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn memif_json() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../configs/memif.json")
}

fn read(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn gen_replaces_clients_and_keeps_the_rest() {
    let d = scratch("replace");
    let out = d.join("out.json");
    let o = ctlplane(&[
        "clients",
        "gen",
        "--count",
        "64",
        "--first-qpn",
        "1000",
        "--config",
        s(&memif_json()),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{o:?}");
    let line = String::from_utf8_lossy(&o.stdout);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.contains("64 generated clients (qpn 1000..=1063"),
        "{line}"
    );

    // A valid config for every program, with only the clients changed.
    let cfg = kvconf::Config::load(&out).expect("generated config loads");
    assert_eq!(cfg.clients.len(), 64);
    for (i, c) in cfg.clients.iter().enumerate() {
        assert_eq!(c.qpn, 1000 + i as u32);
        assert_ne!(c.rkey, 0);
    }
    let (mut a, mut b) = (read(&memif_json()), read(&out));
    a.as_object_mut().unwrap().remove("clients");
    b.as_object_mut().unwrap().remove("clients");
    assert_eq!(a, b);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn gen_appends_and_keeps_unknown_fields() {
    let d = scratch("append");
    let input = d.join("in.json");
    let mut doc = read(&memif_json());
    doc["comment"] = "not a kvconf field".into();
    std::fs::write(&input, serde_json::to_string(&doc).unwrap()).unwrap();
    let out = d.join("out.json");
    let o = ctlplane(&[
        "clients",
        "gen",
        "--count",
        "3",
        "--append",
        "--config",
        s(&input),
        "--out",
        s(&out),
    ]);
    assert!(o.status.success(), "{o:?}");
    let got = read(&out);
    assert_eq!(got["comment"], "not a kvconf field");
    let qpns: Vec<u64> = got["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["qpn"].as_u64().unwrap())
        .collect();
    // memif.json's four clients, then the default first QPN 100.
    assert_eq!(qpns, [17, 18, 19, 20, 100, 101, 102]);
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn gen_refuses_bad_requests() {
    let d = scratch("refuse");
    let out = d.join("out.json");
    let cfg = memif_json();
    for (args, msg) in [
        (vec!["--count", "0"], "--count must be at least 1"),
        (vec!["--count", "2", "--first-qpn", "8388607"], "2^23 - 1"),
        (vec!["--count", "2", "--first-qpn", "1"], "not client QPs"),
        (
            vec!["--count", "2", "--first-qpn", "19", "--append"],
            "qpn 19 is already a client",
        ),
    ] {
        let mut all = vec!["clients", "gen", "--config", s(&cfg), "--out", s(&out)];
        all.extend(args);
        let o = ctlplane(&all);
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(msg), "{err}");
        assert!(!out.exists());
    }
    let _ = std::fs::remove_dir_all(&d);
}
