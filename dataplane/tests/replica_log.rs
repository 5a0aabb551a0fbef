//! The replica's log file end to end without DPDK: the replication lcore's feed, the
//! writer thread, the file, and loading it back (`replication.log_file`).

use dataplane::repl::replica_log::{self, LogFeed};
use kvengine::{Engine, EngineConfig, Region};
use kvrepl::aof::FsyncPolicy;
use kvrepl::Record;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("kvd-replica-log-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn engine() -> Engine {
    let cfg = EngineConfig {
        mem_bytes: 8 << 20,
        ..EngineConfig::default()
    };
    Engine::new(Region::owned(cfg.mem_bytes), &cfg).unwrap()
}

/// Feeds `n` puts of keys `k{base+i}` (value = the key repeated) and a delete of
/// every 5th, one segment (commit) per 10 records, into `feed` and `model`; the live
/// offset grows by 100 per segment from `*offset`.
fn feed_live(
    feed: &mut LogFeed,
    model: &mut HashMap<Vec<u8>, Vec<u8>>,
    base: u32,
    n: u32,
    offset: &mut u64,
) {
    for i in 0..n {
        let key = format!("k{}", base + i).into_bytes();
        let value = key.repeat(3);
        assert!(feed.room(4096));
        feed.record(&Record::Put {
            key: &key,
            value: &value,
        });
        model.insert(key.clone(), value);
        if i % 5 == 0 {
            feed.record(&Record::Delete { key: &key });
            model.remove(&key);
        }
        if i % 10 == 3 {
            // A completion record: loaded back for the node's transport, not its data.
            let qpn = base + i;
            feed.record(&Record::QpState {
                qpn,
                bytes: &qpn.to_le_bytes(),
            });
            model.insert(format!("qp:{qpn}").into_bytes(), qpn.to_le_bytes().to_vec());
        }
        if i % 10 == 9 {
            *offset += 100;
            feed.commit(*offset);
        }
    }
}

fn wait_synced(feed: &LogFeed, offset: u64) {
    let t0 = Instant::now();
    while feed.shared().synced_end.load(Ordering::Acquire) < offset {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "writer never reached {offset}"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

fn stop(feed: LogFeed, t: std::thread::JoinHandle<()>) {
    feed.shared().stop.store(true, Ordering::Release);
    t.join().unwrap();
}

/// Loads the file into a fresh engine and compares with `model`.
fn check_file(path: &Path, model: &HashMap<Vec<u8>, Vec<u8>>) -> (u64, u64, u64) {
    let opened = replica_log::open(path, FsyncPolicy::No)
        .unwrap()
        .expect("a log file");
    let mut e = engine();
    let mut qps = HashMap::new();
    let mut keep = |qpn: u32, blob: &[u8]| {
        qps.insert(format!("qp:{qpn}").into_bytes(), blob.to_vec());
    };
    let rep = dataplane::snapshot::load_log_into(path, &mut [&mut e], &mut keep).unwrap();
    let (want_qps, kvs): (HashMap<_, _>, HashMap<_, _>) =
        model.iter().partition(|(k, _)| k.starts_with(b"qp:"));
    let want_qps: HashMap<Vec<u8>, Vec<u8>> = want_qps
        .into_iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    assert_eq!(
        qps, want_qps,
        "completion records come back for the transport"
    );
    assert_eq!(rep.keys as usize, kvs.len());
    let mut out = vec![0u8; 4096];
    for (k, v) in kvs {
        let n = e
            .get(k, &mut out)
            .unwrap_or_else(|s| panic!("{k:?}: {s:?}"));
        assert_eq!(&out[..n], &v[..]);
    }
    opened.position
}

#[test]
fn full_sync_then_live_records_load_back_at_their_stream_position() {
    let dir = scratch("full");
    let path = dir.join("node1.aof");
    let (mut feed, t) =
        replica_log::spawn_writer(path.clone(), FsyncPolicy::Always, 2, None).unwrap();
    let mut model = HashMap::new();
    // A full sync: records with no position, then the live stream from 10_000.
    feed.begin(0xAB, 3);
    assert_eq!(
        feed.durable(500),
        0,
        "nothing acknowledged before the new file exists"
    );
    let mut off = 0;
    feed_live(&mut feed, &mut model, 0, 500, &mut off);
    feed.commit(0);
    // Nothing is the log file before the sync completes.
    std::thread::sleep(Duration::from_millis(50));
    assert!(!path.exists());
    assert!(replica_log::sync_path(&path).exists());
    feed.sync_done(10_000);
    wait_synced(&feed, 10_000);
    assert!(path.exists() && !replica_log::sync_path(&path).exists());
    let mut off = 10_000;
    feed_live(&mut feed, &mut model, 500, 300, &mut off);
    wait_synced(&feed, off);
    // Under `always` the replica may acknowledge what is synced, not more.
    assert_eq!(feed.durable(off + 5), off);
    // A new master continues the same stream under a new id.
    feed.stream(0xCD, 4, off);
    feed_live(&mut feed, &mut model, 800, 100, &mut off);
    wait_synced(&feed, off);
    stop(feed, t);
    assert_eq!(check_file(&path, &model), (0xCD, 4, off));

    // Restart: the file continues from where it ended.
    let opened = replica_log::open(&path, FsyncPolicy::EverySec)
        .unwrap()
        .unwrap();
    let (mut feed, t) =
        replica_log::spawn_writer(path.clone(), FsyncPolicy::EverySec, 2, Some(opened.writer))
            .unwrap();
    assert_eq!(
        feed.durable(123),
        123,
        "everysec acknowledges what is applied"
    );
    feed.stream(0xCD, 4, off);
    feed_live(&mut feed, &mut model, 900, 100, &mut off);
    stop(feed, t);
    assert_eq!(check_file(&path, &model), (0xCD, 4, off));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_torn_tail_is_cut_and_a_corrupt_file_is_refused() {
    let dir = scratch("torn");
    let path = dir.join("node1.aof");
    let (mut feed, t) = replica_log::spawn_writer(path.clone(), FsyncPolicy::No, 1, None).unwrap();
    let mut model = HashMap::new();
    feed.begin(7, 1);
    feed.sync_done(0);
    let mut off = 0;
    // Four rounds, each written out before the next: four blocks at least.
    for round in 0..4 {
        feed_live(&mut feed, &mut model, round * 50, 50, &mut off);
        wait_synced(&feed, off);
    }
    stop(feed, t);
    let whole = std::fs::read(&path).unwrap();
    // A crash mid-write: the last block torn. Opening cuts it; the data is a prefix.
    std::fs::write(&path, &whole[..whole.len() - 7]).unwrap();
    let o = replica_log::open(&path, FsyncPolicy::No).unwrap().unwrap();
    assert!(o.truncated_bytes > 0);
    assert!(o.position.2 < off, "resumes before the torn block");
    drop(o);
    // A flipped byte in the middle: refused, named, the file left as it was.
    let mut bad = whole.clone();
    let mid = bad.len() / 2;
    bad[mid] ^= 0x40;
    std::fs::write(&path, &bad).unwrap();
    let err = replica_log::open(&path, FsyncPolicy::No)
        .err()
        .expect("refused");
    assert!(err.contains("node1.aof"), "{err}");
    assert_eq!(std::fs::read(&path).unwrap(), bad);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn retire_removes_the_file_and_a_full_sync_begins_a_new_one() {
    let dir = scratch("retire");
    let path = dir.join("node1.aof");
    let (mut feed, t) =
        replica_log::spawn_writer(path.clone(), FsyncPolicy::Always, 1, None).unwrap();
    let mut model = HashMap::new();
    feed.begin(9, 1);
    feed.sync_done(50);
    let mut off = 50;
    feed_live(&mut feed, &mut model, 0, 50, &mut off);
    wait_synced(&feed, off);
    assert!(path.exists());
    // Promoted: its data will hold writes no stream of its own logs.
    feed.retire();
    let t0 = Instant::now();
    while path.exists() {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(2));
    }
    assert_eq!(feed.durable(off), 0);
    // Records after retiring go nowhere.
    feed_live(&mut feed, &mut model, 50, 20, &mut off);
    // Demoted and fully synced again: a new file with only the new sync.
    let mut model = HashMap::new();
    feed.begin(11, 2);
    let mut o2 = 0;
    feed_live(&mut feed, &mut model, 1000, 30, &mut o2);
    feed.sync_done(7000);
    wait_synced(&feed, 7000);
    stop(feed, t);
    assert_eq!(check_file(&path, &model), (11, 2, 7000));
    std::fs::remove_dir_all(&dir).unwrap();
}
