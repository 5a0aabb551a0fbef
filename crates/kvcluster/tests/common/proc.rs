//! `kvcluster-node` children: spawned, signalled (SIGSTOP / SIGCONT / SIGKILL) and
//! read (their JSON lines) by the multi-process tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Etcd, MARGIN_MS, TTL_MS};

/// A `kvcluster-node` child and the JSON lines it printed.
pub struct NodeProc {
    pub id: u32,
    pub child: Child,
    lines: Arc<Mutex<Vec<Value>>>,
}

impl NodeProc {
    pub fn spawn(etcd: &Etcd, cluster: &str, id: u32, offset: u64, grow: bool) -> NodeProc {
        Self::spawn_with(etcd, cluster, id, offset, grow, &[])
    }

    /// As [`NodeProc::spawn`], with more `kvcluster-node` arguments.
    pub fn spawn_with(
        etcd: &Etcd,
        cluster: &str,
        id: u32,
        offset: u64,
        grow: bool,
        extra: &[&str],
    ) -> NodeProc {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_kvcluster-node"));
        cmd.args(["--endpoints", &etcd.endpoint, "--cluster", cluster])
            .args(["--id", &id.to_string(), "--offset", &offset.to_string()])
            .args(["--ttl-ms", &TTL_MS.to_string()])
            .args(["--margin-ms", &MARGIN_MS.to_string()])
            .args(["--election-wait-ms", "300", "--publish-ms", "50"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if grow {
            cmd.arg("--grow");
        }
        cmd.args(extra);
        let mut child = cmd.spawn().expect("spawning kvcluster-node");
        let out = child.stdout.take().expect("stdout");
        let lines = Arc::new(Mutex::new(Vec::new()));
        {
            let lines = lines.clone();
            std::thread::spawn(move || {
                for l in BufReader::new(out).lines() {
                    let Ok(l) = l else { break };
                    match serde_json::from_str(&l) {
                        Ok(v) => lines.lock().unwrap().push(v),
                        Err(e) => panic!("node printed a non-JSON line {l:?}: {e}"),
                    }
                }
            });
        }
        NodeProc { id, child, lines }
    }

    /// Writes one command line to the node's standard input.
    pub fn command(&mut self, line: &str) {
        use std::io::Write;
        let stdin = self.child.stdin.as_mut().expect("stdin");
        writeln!(stdin, "{line}").expect("writing a command");
        stdin.flush().expect("flushing a command");
    }

    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on the child this test spawned and has not yet reaped.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({}, {sig})", self.child.id());
    }

    pub fn events(&self) -> Vec<Value> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter(|v| v.get("event").is_some())
            .cloned()
            .collect()
    }

    /// Waits for an event line `name` whose other fields match `fields`; returns its time.
    pub fn wait_event(&self, name: &str, fields: &[(&str, u64)], timeout: Duration) -> u64 {
        let until = Instant::now() + timeout;
        loop {
            let hit = self.events().into_iter().find(|v| {
                v["event"] == name && fields.iter().all(|(k, x)| v[*k].as_u64() == Some(*x))
            });
            if let Some(v) = hit {
                return v["t"].as_u64().expect("event time");
            }
            if Instant::now() > until {
                panic!(
                    "node {}: no {name} {fields:?} within {timeout:?}; lines: {:?}",
                    self.id,
                    self.events()
                );
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    pub fn saw_event(&self, name: &str) -> bool {
        self.events().iter().any(|v| v["event"] == name)
    }

    /// (epoch, first, last) of every chunk of acknowledged writes printed so far.
    pub fn acks(&self) -> Vec<(u64, u64, u64)> {
        self.lines
            .lock()
            .unwrap()
            .iter()
            .filter_map(|v| {
                Some((
                    v.get("ack_epoch")?.as_u64()?,
                    v["first"].as_u64()?,
                    v["last"].as_u64()?,
                ))
            })
            .collect()
    }
}

impl Drop for NodeProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `cond` every 5 ms until it holds; panics after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, cond: impl Fn() -> bool) {
    let until = Instant::now() + timeout;
    while !cond() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}
