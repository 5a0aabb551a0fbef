//! Test harness: a real etcd per test (free ports, temp dir, killed at the end), a
//! watcher that timestamps leader-key changes, and node helpers.
#![allow(dead_code)]

pub mod proc;

use std::io::Read;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kvcluster::{
    mono_now_ns, ClusterConfig, ClusterEvent, ClusterHandle, ClusterView, NodeAddr, TimedEvent,
};

/// Lease TTL of the tests (the etcd below grants 1 s leases).
pub const TTL_MS: u64 = 1000;
pub const MARGIN_MS: u64 = 100;

/// A single-node etcd on two free localhost ports, in its own temp dir.
pub struct Etcd {
    child: Child,
    dir: PathBuf,
    pub endpoint: String,
    peer: String,
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free localhost port")
}

impl Etcd {
    /// Starts etcd and waits until it answers `/health`. Panics with a clear message
    /// when the `etcd` binary is missing (scripts/setup.sh installs it).
    pub fn start() -> Etcd {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        if Command::new("etcd")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_err()
        {
            panic!(
                "the `etcd` binary is missing: these tests run a real etcd; \
                 install it with scripts/setup.sh (Debian package etcd-server)"
            );
        }
        for attempt in 0..3 {
            let dir = std::env::temp_dir().join(format!(
                "kvcluster-test-{}-{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            ));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir");
            let (cp, pp) = (free_port(), free_port());
            let endpoint = format!("http://127.0.0.1:{cp}");
            let peer = format!("http://127.0.0.1:{pp}");
            let child = spawn_etcd(&dir, &endpoint, &peer);
            let mut e = Etcd {
                child,
                dir,
                endpoint,
                peer,
            };
            if e.wait_healthy() {
                return e;
            }
            eprintln!("etcd attempt {attempt} failed; log in {}", e.dir.display());
        }
        panic!("etcd did not become healthy in 3 attempts");
    }

    fn wait_healthy(&mut self) -> bool {
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return false; // exited (port taken?)
            }
            if self.healthy() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }

    /// Kills etcd (SIGKILL) and starts it again on the same ports with an empty data
    /// directory: every key is gone, the epoch key included.
    pub fn wipe_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(self.dir.join("data"));
        self.child = spawn_etcd(&self.dir, &self.endpoint, &self.peer);
        assert!(self.wait_healthy(), "etcd did not come back after the wipe");
    }

    fn healthy(&self) -> bool {
        let addr = self.endpoint.trim_start_matches("http://");
        let Ok(mut s) = TcpStream::connect(addr) else {
            return false;
        };
        use std::io::Write;
        let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
        if s.write_all(format!("GET /health HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
            .is_err()
        {
            return false;
        }
        let mut body = String::new();
        let _ = s.read_to_string(&mut body);
        body.contains("\"health\":\"true\"")
    }

    pub fn endpoints(&self) -> Vec<String> {
        vec![self.endpoint.clone()]
    }

    /// The etcd process id (to SIGSTOP etcd itself).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn spawn_etcd(dir: &std::path::Path, endpoint: &str, peer: &str) -> Child {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("etcd.log"))
        .expect("log file");
    Command::new("etcd")
        .args(["--name", "t", "--data-dir"])
        .arg(dir.join("data"))
        .args(["--listen-client-urls", endpoint])
        .args(["--advertise-client-urls", endpoint])
        .args(["--listen-peer-urls", peer])
        .args(["--initial-advertise-peer-urls", peer])
        .args(["--initial-cluster", &format!("t={peer}")])
        .args(["--heartbeat-interval", "25", "--election-timeout", "250"])
        .args(["--logger", "zap", "--log-level", "error"])
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log file"))
        .stderr(log)
        .spawn()
        .expect("spawning etcd")
}

pub fn addr(id: u32) -> NodeAddr {
    NodeAddr {
        mac: [2, 0, 0, 0, 0, id as u8],
        ip: Ipv4Addr::new(10, 0, 0, id as u8),
        qpn: 100 + id,
    }
}

/// The tests' node configuration: 1 s leases, short waits.
pub fn config(etcd: &Etcd, cluster: &str, id: u32) -> ClusterConfig {
    let mut c =
        ClusterConfig::new(etcd.endpoints(), cluster, id, addr(id)).with_lease_ttl_ms(TTL_MS);
    c.fence_margin_ms = MARGIN_MS;
    c.publish_interval_ms = 50;
    c.election_wait_ms = 300;
    c.handover_timeout_ms = 1500;
    c.op_timeout_ms = 500;
    c
}

/// A node in this process, with the events it has raised so far.
pub struct Node {
    pub handle: ClusterHandle,
    pub view: Arc<ClusterView>,
    pub events: Vec<TimedEvent>,
}

impl Node {
    pub fn start(cfg: ClusterConfig, offset: u64) -> Node {
        let (handle, view) = ClusterHandle::start(cfg).expect("start node");
        view.set_offset(offset);
        // A live copy of epoch 1's stream: the offsets alone decide between nodes.
        view.set_data(1, kvcluster::records::DataState::Live);
        Node {
            handle,
            view,
            events: Vec::new(),
        }
    }

    /// Collects pending events.
    pub fn drain(&mut self) {
        while let Some(e) = self.handle.try_event() {
            self.events.push(e);
        }
    }

    /// Waits for an event matching `pred` (among those already seen or new ones).
    pub fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&ClusterEvent) -> bool,
    ) -> TimedEvent {
        let until = Instant::now() + timeout;
        loop {
            if let Some(e) = self.events.iter().find(|e| pred(&e.event)) {
                return e.clone();
            }
            let left = until.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "node {}: no {what} within {timeout:?}; events: {:?}",
                    self.view.node_id(),
                    self.events
                );
            }
            if let Some(e) = self.handle.next_event(left.min(Duration::from_millis(50))) {
                self.events.push(e);
            }
        }
    }

    /// Whether any event collected so far matches `pred`.
    pub fn saw(&mut self, pred: impl Fn(&ClusterEvent) -> bool) -> bool {
        self.drain();
        self.events.iter().any(|e| pred(&e.event))
    }
}

/// What the test's own etcd watch saw on the leader key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LeaderChange {
    Put { id: u32, epoch: u64 },
    Delete,
}

/// Records every change of `/kvd/<cluster>/leader` with the CLOCK_MONOTONIC time the
/// watch delivered it.
pub struct LeaderWatch {
    pub seen: Arc<Mutex<Vec<(u64, LeaderChange)>>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LeaderWatch {
    pub fn start(etcd: &Etcd, cluster: &str) -> LeaderWatch {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let thread = {
            let (seen, stop) = (seen.clone(), stop.clone());
            let ep = etcd.endpoint.clone();
            let key = format!("/kvd/{cluster}/leader");
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let mut c = etcd_client::Client::connect([ep], None).await.unwrap();
                    let mut w = c.watch(key, None).await.unwrap();
                    ready_tx.send(()).unwrap();
                    while !stop.load(Ordering::Acquire) {
                        let m = tokio::time::timeout(Duration::from_millis(50), w.message()).await;
                        let Ok(m) = m else { continue };
                        let Some(resp) = m.unwrap() else { break };
                        let t = mono_now_ns();
                        for ev in resp.events() {
                            let Some(kv) = ev.kv() else { continue };
                            let ch = match ev.event_type() {
                                etcd_client::EventType::Delete => LeaderChange::Delete,
                                etcd_client::EventType::Put => {
                                    let l: kvcluster::records::LeaderRecord =
                                        serde_json::from_slice(kv.value()).unwrap();
                                    LeaderChange::Put {
                                        id: l.id,
                                        epoch: l.epoch,
                                    }
                                }
                            };
                            seen.lock().unwrap().push((t, ch));
                        }
                    }
                });
            })
        };
        ready_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("leader watch did not start");
        // The watch is created on the server once the first response arrives; give it a
        // moment so no event is missed.
        std::thread::sleep(Duration::from_millis(100));
        LeaderWatch {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    /// The first change matching `pred`, waiting up to `timeout`.
    pub fn wait_for(&self, timeout: Duration, pred: impl Fn(&LeaderChange) -> bool) -> Option<u64> {
        let until = Instant::now() + timeout;
        while Instant::now() < until {
            if let Some((t, _)) = self.seen.lock().unwrap().iter().find(|(_, c)| pred(c)) {
                return Some(*t);
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        None
    }
}

impl Drop for LeaderWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Plays an lcore on `view`: polls the fence every ~200 µs (fresh clock each time) and
/// records every answer change and the last time it said yes per epoch.
/// (time, answer) samples of a [`FencePoller`].
type FenceLog = Arc<Mutex<Vec<(u64, Option<u64>)>>>;

pub struct FencePoller {
    pub log: FenceLog,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FencePoller {
    pub fn start(view: Arc<ClusterView>) -> FencePoller {
        let log: FenceLog = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut last: Option<Option<u64>> = None;
                let mut last_yes = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let now = mono_now_ns();
                    let e = view.write_epoch(now);
                    if e.is_some() {
                        last_yes = now;
                    }
                    if last != Some(e) {
                        // Log a "no" with the time of the last "yes" before it too.
                        if e.is_none() && last_yes != 0 {
                            log.lock().unwrap().push((last_yes, last.flatten()));
                        }
                        log.lock().unwrap().push((now, e));
                        last = Some(e);
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        };
        FencePoller {
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// (time, epoch) of every "yes" answer edge and last-yes sample recorded.
    pub fn yes_times(&self) -> Vec<(u64, u64)> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .filter_map(|(t, e)| e.map(|e| (*t, e)))
            .collect()
    }

    /// The first time the answer went from yes to no at or after `after`.
    pub fn first_no_after(&self, after: u64) -> Option<u64> {
        self.log
            .lock()
            .unwrap()
            .iter()
            .find(|(t, e)| *t >= after && e.is_none())
            .map(|(t, _)| *t)
    }
}

impl Drop for FencePoller {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

pub fn ms(ns: u64) -> f64 {
    ns as f64 / 1e6
}
