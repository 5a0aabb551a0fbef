//! Snapshots while serving, without DPDK: servers fed request frames (puts, deletes,
//! fetch-adds) between the scan steps of their workers' snapshot state, the real
//! writer thread writing the file, then `load_into` fresh engines (another partition
//! count) — equal to each partition's contents at the moment its scan finished.

mod common;

use common::{connect, identity, Client, RKEY};
use dataplane::mutation::MutationSink;
use dataplane::server::Server;
use dataplane::snapshot::{load_into, Outcome, SnapshotCtl, WorkerSnap};
use dataplane::stats::WorkerStats;
use kvengine::Engine;
use kvwire::{func, Atomic, KvOp, Width};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const QPN: u32 = 30;
type Contents = BTreeMap<Vec<u8>, Vec<u8>>;

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvd-snap-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn contents(e: &Engine) -> Contents {
    let mut m = BTreeMap::new();
    e.for_each(|k, v| {
        m.insert(k.to_vec(), v.to_vec());
    });
    m
}

/// xorshift64*.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

/// One worker: its server, client and snapshot state.
struct Worker {
    server: Server,
    client: Client,
    snap: WorkerSnap,
    sent: u32,
}

impl Worker {
    fn new(w: u32, n: u32, keys: u32) -> Worker {
        let mut server = Server::new(identity(), &[(QPN, RKEY)], common::engine(4 << 20));
        server.set_partition(w, n);
        // Initial contents, straight into the engine (only this partition's keys).
        for i in 0..keys {
            let key = format!("key{i}").into_bytes();
            if kvwire::partition::partition_of_hash(kvengine::key_hash(&key), n) == w {
                let v = vec![i as u8; 1 + (i as usize % 40)];
                assert_eq!(server.engine_mut().put(&key, &v), kvengine::Status::Ok);
            }
        }
        let client = connect(&mut server, QPN, RKEY);
        Worker {
            server,
            client,
            snap: WorkerSnap::new(w as usize),
            sent: 0,
        }
    }

    /// A burst of 4 requests of 8 random writes each (every key goes to every worker:
    /// the others' keys are answered WRONG_PARTITION, changing nothing).
    fn burst(&mut self, rng: &mut Rng, keys: u32) {
        self.burst_in(rng, 0, keys + 50)
    }

    /// A burst writing only keys `key{lo}..key{hi}`.
    fn burst_in(&mut self, rng: &mut Rng, lo: u32, hi: u32) {
        let mut frames = Vec::new();
        for _ in 0..4 {
            let owned: Vec<(Vec<u8>, u64, Vec<u8>)> = (0..8)
                .map(|_| {
                    let k = format!("key{}", u64::from(lo) + rng.next() % u64::from(hi - lo))
                        .into_bytes();
                    let r = rng.next();
                    (k, r, vec![r as u8; (r % 60) as usize])
                })
                .collect();
            let ops: Vec<KvOp<'_>> = owned
                .iter()
                .map(|(key, r, v)| match r % 4 {
                    0 => KvOp::Delete { key },
                    1 => KvOp::UpdateS2S {
                        key,
                        atomic: Atomic {
                            func: func::FETCH_ADD,
                            width: Width::W8,
                            signed: false,
                        },
                        param: 1,
                        param2: 0,
                    },
                    2 if v.len() % 2 == 0 => KvOp::Put {
                        key,
                        value: &v[..8.min(v.len())],
                    },
                    _ => KvOp::Put { key, value: v },
                })
                .collect();
            frames.push(self.client.request(&ops, self.sent, self.sent));
            self.sent += 1;
        }
        let out = common::run(&mut self.server, &WorkerStats::default(), &frames);
        assert_eq!(out.len(), 4, "every request answered (no refusal expected)");
    }
}

/// Runs a snapshot over `n` workers with writes between scan steps; returns the file,
/// each worker's contents when its scan finished, and the final contents.
fn save_while_serving(dir: &std::path::Path, n: u32, keys: u32, seed: u64) -> (PathBuf, Contents) {
    save_while_serving_with(dir, n, keys, seed, None)
}

/// A replication log stand-in: records every post-image it is given.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Vec<u8>>>>);

impl MutationSink for Recorder {
    fn room(&self) -> usize {
        usize::MAX
    }
    fn put(&mut self, key: &[u8], _value: &[u8]) {
        self.0.lock().unwrap().push(key.to_vec());
    }
    fn delete(&mut self, key: &[u8]) {
        self.0.lock().unwrap().push(key.to_vec());
    }
    fn group(&mut self, bytes: u32) {
        self.0
            .lock()
            .unwrap()
            .push(format!("#group {bytes}").into_bytes());
    }
    fn wait_for(&mut self, ring: u32, position: u64) {
        self.0
            .lock()
            .unwrap()
            .push(format!("#wait {ring} {position}").into_bytes());
    }
    fn qp_state(&mut self, qpn: u32, blob: &[u8]) {
        self.0
            .lock()
            .unwrap()
            .push(format!("#qp {qpn} {}", blob.len()).into_bytes());
    }
    // As the replication log: another partition's key a transaction this worker
    // coordinated wrote is in its stream; its own key's record in another's.
    fn stream_put(&mut self, key: &[u8], _value: &[u8]) {
        let mut k = b"#stream ".to_vec();
        k.extend_from_slice(key);
        self.0.lock().unwrap().push(k);
    }
    fn local_put(&mut self, _key: &[u8], _value: &[u8]) {}
}

/// As [`save_while_serving`]; with `inner`, every worker has that tap installed
/// before the snapshot (as a replicating master has its log) and its writes go to
/// keys `key{keys}..` only.
fn save_while_serving_with(
    dir: &std::path::Path,
    n: u32,
    keys: u32,
    seed: u64,
    inner: Option<&Recorder>,
) -> (PathBuf, Contents) {
    let mut ws: Vec<Worker> = (0..n).map(|w| Worker::new(w, n, keys)).collect();
    if let Some(r) = inner {
        for w in &mut ws {
            w.server.set_mutation_sink(Some(Box::new(r.clone())));
        }
    }
    let burst = |w: &mut Worker, rng: &mut Rng| match inner {
        Some(_) => w.burst_in(rng, keys, keys + 200),
        None => w.burst(rng, keys),
    };
    let ctl = SnapshotCtl::new(n as usize);
    let path = dir.join("snap.kvd");
    ctl.start(path.clone()).expect("start");
    let mut rng = Rng(seed | 1);
    let mut at_end = vec![None; n as usize];
    let mut rounds = 0;
    while at_end.iter().any(Option::is_none) {
        rounds += 1;
        assert!(rounds < 100_000, "the scans do not finish");
        for (i, w) in ws.iter_mut().enumerate() {
            w.snap.poll(&ctl, &mut w.server);
            burst(w, &mut rng);
            if w.snap.active() {
                w.snap.step(&mut w.server);
                if !w.snap.active() {
                    at_end[i] = Some(contents(w.server.engine()));
                }
            }
        }
    }
    // Writes after the scans are not in the file.
    for w in &mut ws {
        burst(w, &mut rng);
        assert_eq!(
            w.server.mutation_sink_mut().is_some(),
            inner.is_some(),
            "the snapshot's tap removed, the one before it back"
        );
    }
    let st = ctl
        .wait(Duration::from_secs(20))
        .expect("the writer finishes");
    assert_eq!(st.outcome, Outcome::Done, "{st:?}");
    assert!(st.records >= st.scanned && st.scanned > 0, "{st:?}");
    assert!(path.exists() && !dir.join("snap.kvd.tmp").exists());
    let mut want = Contents::new();
    for c in at_end.into_iter().flatten() {
        want.extend(c);
    }
    (path, want)
}

#[test]
fn a_snapshot_under_writes_loads_to_each_partitions_state_at_scan_end() {
    for (n, load_n, seed) in [(1u32, 1usize, 7u64), (2, 3, 11), (3, 1, 5)] {
        let dir = scratch(&format!("serve{n}"));
        let (path, want) = save_while_serving(&dir, n, 3000, seed);
        let mut engines: Vec<Engine> = (0..load_n).map(|_| common::engine(8 << 20)).collect();
        let mut refs: Vec<&mut Engine> = engines.iter_mut().collect();
        let r = load_into(&path, &mut refs).expect("load");
        assert_eq!(r.saved_partitions, n);
        assert_eq!(r.keys, want.len() as u64);
        let mut got = Contents::new();
        for (p, e) in engines.iter().enumerate() {
            for (k, v) in contents(e) {
                let owner =
                    kvwire::partition::partition_of_hash(kvengine::key_hash(&k), load_n as u32);
                assert_eq!(owner as usize, p, "key in the wrong partition");
                got.insert(k, v);
            }
        }
        assert_eq!(got.len(), want.len());
        assert!(got == want, "loaded contents differ (n {n})");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn a_snapshot_on_a_replicating_master_keeps_its_log_tap() {
    let dir = scratch("inner");
    let keys = 2000;
    let rec = Recorder::default();
    let (path, want) = save_while_serving_with(&dir, 2, keys, 3, Some(&rec));
    let mut engines = [common::engine(8 << 20)];
    let mut refs: Vec<&mut Engine> = engines.iter_mut().collect();
    let r = load_into(&path, &mut refs).expect("load");
    assert_eq!(r.keys, want.len() as u64);
    assert!(contents(&engines[0]) == want, "loaded contents differ");
    // The log tap got the live writes (before, during and after the snapshot) and
    // none of the snapshot's scan records (those are the initial keys, never written).
    let seen = rec.0.lock().unwrap();
    assert!(seen.len() > 1000, "{} post-images", seen.len());
    let written = |k: &Vec<u8>| {
        std::str::from_utf8(k)
            .ok()
            .and_then(|s| s.strip_prefix("key"))
            .and_then(|n| n.parse::<u32>().ok())
            .is_some_and(|n| n >= keys)
    };
    assert!(
        seen.iter().all(written),
        "a scan record reached the log tap"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_snapshot_passes_the_streams_markers_to_the_log_tap() {
    // A transaction's group marker, a cross-partition wait and a completion record
    // belong to the replication stream: a snapshot in front of the log must pass
    // them on (a replica would otherwise apply a transaction piecemeal). A
    // cross-partition transaction's post-images split: the coordinator's stream takes
    // the other partition's keys, the snapshot of the partition owning a key takes it.
    let rec = Recorder::default();
    let mut w = Worker::new(0, 1, 10);
    w.server.set_mutation_sink(Some(Box::new(rec.clone())));
    let dir = scratch("markers");
    let ctl = SnapshotCtl::new(1);
    ctl.start(dir.join("m.kvd")).unwrap();
    w.snap.poll(&ctl, &mut w.server);
    assert!(w.snap.active());
    let t = w.server.mutation_sink_mut().unwrap();
    t.group(30);
    t.wait_for(1, 99);
    t.qp_state(7, b"blob");
    t.stream_put(b"theirs", b"1");
    t.local_put(b"mine", b"2");
    let seen: Vec<String> = rec
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|k| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(
        seen,
        ["#group 30", "#wait 1 99", "#qp 7 4", "#stream theirs"]
    );
    while w.snap.active() {
        w.snap.step(&mut w.server);
    }
    ctl.wait(Duration::from_secs(10)).unwrap();
    let mut e = common::engine(4 << 20);
    load_into(&dir.join("m.kvd"), &mut [&mut e]).unwrap();
    let mut out = [0u8; 8];
    assert_eq!(
        e.get(b"mine", &mut out),
        Ok(1),
        "the local copy in the snapshot"
    );
    assert!(
        e.get(b"theirs", &mut out).is_err(),
        "not another partition's key"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bad_files_are_refused_by_load_with_their_reason() {
    let dir = scratch("bad");
    let (path, _) = save_while_serving(&dir, 1, 3000, 3);
    let good = std::fs::read(&path).unwrap();
    let try_load = |bytes: &[u8]| {
        let p = dir.join("bad.kvd");
        std::fs::write(&p, bytes).unwrap();
        let mut e = common::engine(4 << 20);
        load_into(&p, &mut [&mut e]).unwrap_err()
    };
    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x01;
    assert!(
        try_load(&flipped).contains("corrupt"),
        "{}",
        try_load(&flipped)
    );
    let e = try_load(&good[..good.len() - 10]);
    assert!(e.contains("truncated"), "{e}");
    let e = try_load(b"hello world, not a snapshot at all, really not");
    assert!(e.contains("not a snapshot"), "{e}");
    let e = {
        let mut e = common::engine(4 << 20);
        load_into(&dir.join("missing.kvd"), &mut [&mut e]).unwrap_err()
    };
    assert!(e.contains("missing.kvd"), "{e}");
    // An engine too small for the file: refused, not half-loaded silently.
    let mut tiny = common::engine(64 << 10);
    let e = load_into(&path, &mut [&mut tiny]).unwrap_err();
    assert!(e.contains("refused"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn failures_leave_no_file_and_free_the_workers() {
    let dir = scratch("fail");
    let ctl = SnapshotCtl::new(1);
    // A directory that does not exist: refused at once.
    assert!(ctl.start(dir.join("no/such/dir/x.kvd")).is_err());
    let mut w = Worker::new(0, 1, 2000);
    let path = dir.join("aborted.kvd");
    ctl.start(path.clone()).unwrap();
    assert!(
        ctl.start(dir.join("second.kvd"))
            .unwrap_err()
            .contains("running"),
        "one job at a time"
    );
    w.snap.poll(&ctl, &mut w.server);
    assert!(w.snap.active() && w.server.mutation_sink_mut().is_some());
    w.snap.step(&mut w.server);
    ctl.abort("test abort");
    let st = ctl.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(st.outcome, Outcome::Failed("test abort".into()));
    // The worker notices at its next step and removes its tap.
    w.snap.step(&mut w.server);
    assert!(!w.snap.active() && w.server.mutation_sink_mut().is_none());
    let mut rng = Rng(9);
    w.burst(&mut rng, 2000);
    // The writer thread removes the partial file.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!path.exists() && !dir.join("aborted.kvd.tmp").exists());
    // A worker that stops during its scan fails the job.
    let path = dir.join("stopped.kvd");
    ctl.start(path.clone()).unwrap();
    w.snap.poll(&ctl, &mut w.server);
    assert!(w.snap.active());
    w.snap.stop(&mut w.server);
    let st = ctl.wait(Duration::from_secs(10)).unwrap();
    assert!(
        matches!(&st.outcome, Outcome::Failed(why) if why.contains("stopped")),
        "{st:?}"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(!path.exists());
    // And the next job works.
    let path = dir.join("ok.kvd");
    ctl.start(path.clone()).unwrap();
    w.snap.poll(&ctl, &mut w.server);
    while w.snap.active() {
        w.snap.step(&mut w.server);
    }
    let st = ctl.wait(Duration::from_secs(10)).unwrap();
    assert_eq!(st.outcome, Outcome::Done);
    let mut e = common::engine(4 << 20);
    load_into(&path, &mut [&mut e]).unwrap();
    assert!(contents(&e) == contents(w.server.engine()));
    std::fs::remove_dir_all(&dir).unwrap();
}
