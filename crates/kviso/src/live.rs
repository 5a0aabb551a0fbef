//! The fuzzer's live driver: a running dataplane reached over a kernel raw socket on
//! its tap interface (`kvclient::KernelIo`), tenants changed through `ctlplane
//! tenants` (whose credentials files give the secrets). The clock cannot be moved, so
//! OPENs are not replayed past their window here (the in-process run does that).

use crate::fuzz::Driver;
use kvclient::{KernelIo, PacketIo};
use kvwire::{tenant, MacAddr};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a live exchange waits for its answers at most.
const ANSWER_WAIT: Duration = Duration::from_millis(200);
/// How long it waits for stragglers when no answer is due (a refusal's NAK).
const QUIET_WAIT: Duration = Duration::from_millis(2);

/// A live dataplane (module docs).
pub struct Live {
    io: KernelIo,
    server: (MacAddr, Ipv4Addr),
    ctlplane: PathBuf,
    file_prefix: String,
    scratch: PathBuf,
    /// Exchanges whose answers did not all come in time.
    pub late: u64,
}

impl Live {
    /// A driver sending on `iface` to the server at `server`, changing tenants with
    /// the `ctlplane` binary on the dataplane of `file_prefix`; credentials files go
    /// to `scratch`.
    pub fn new(
        iface: &str,
        server: (MacAddr, Ipv4Addr),
        ctlplane: PathBuf,
        file_prefix: String,
        scratch: PathBuf,
    ) -> Result<Live, String> {
        let io = KernelIo::open(iface).map_err(|e| format!("{iface}: {e}"))?;
        Ok(Live {
            io,
            server,
            ctlplane,
            file_prefix,
            scratch,
            late: 0,
        })
    }

    /// Runs `ctlplane tenants ARGS --file-prefix P`; its stdout.
    fn ctl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.ctlplane)
            .arg("tenants")
            .args(args)
            .args(["--file-prefix", &self.file_prefix])
            .output()
            .map_err(|e| format!("ctlplane: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "ctlplane tenants {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A fresh path for a credentials file, and the secret once ctlplane wrote it.
    fn credentials(
        &self,
        id: u32,
        run: impl FnOnce(&str) -> Result<String, String>,
    ) -> Result<Vec<u8>, String> {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = self.scratch.join(format!("tenant-{id}-{nanos}.json"));
        let p = path.to_string_lossy().into_owned();
        run(&p)?;
        let (_, secret) = kvconf::TenantCredentials::load(&path)?;
        let _ = std::fs::remove_file(&path);
        Ok(secret)
    }
}

impl Driver for Live {
    fn server(&self) -> (MacAddr, Ipv4Addr) {
        self.server
    }

    fn exchange(&mut self, frames: &[Vec<u8>], expect: usize) -> Vec<Vec<u8>> {
        for f in frames {
            while !self.io.send(f) {
                std::thread::yield_now();
            }
        }
        let mut out = Vec::new();
        let wait = if expect > 0 { ANSWER_WAIT } else { QUIET_WAIT };
        let deadline = Instant::now() + wait;
        let (mac, ip) = self.server;
        while Instant::now() < deadline && (expect == 0 || out.len() < expect) {
            self.io.recv(&mut |f| {
                // Only the server's frames (its source MAC and IP).
                if f.len() > 30 && f[6..12] == mac && f[26..30] == ip.octets() {
                    out.push(f.to_vec());
                }
            });
        }
        if out.len() < expect {
            self.late += 1;
        }
        out
    }

    fn add_tenant(&mut self, id: u32, acl: u8) -> Result<Vec<u8>, String> {
        let (ids, name, acl) = (id.to_string(), format!("iso{id}"), tenant::acl_names(acl));
        self.credentials(id, |p| {
            self.ctl(&[
                "add",
                "--name",
                &name,
                "--id",
                &ids,
                "--acl",
                &acl,
                "--credentials-out",
                p,
            ])
        })
    }

    fn rotate_tenant(&mut self, id: u32) -> Result<Vec<u8>, String> {
        let ids = id.to_string();
        self.credentials(id, |p| {
            self.ctl(&["rotate", "--id", &ids, "--credentials-out", p])
        })
    }

    fn remove_tenant(&mut self, id: u32) -> Result<u64, String> {
        let out = self.ctl(&["remove", "--id", &id.to_string()])?;
        // "purged tenant N's namespace: K key(s) deleted in ..."
        out.lines()
            .find_map(|l| {
                let rest = l.split("namespace: ").nth(1)?;
                rest.split_whitespace().next()?.parse().ok()
            })
            .ok_or_else(|| format!("ctlplane tenants remove: no purge count in {out:?}"))
    }

    fn skew_clock(&mut self, _ms: u64) -> bool {
        false
    }

    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
    }
}
