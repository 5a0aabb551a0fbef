//! A client of DPDK's telemetry socket (v2): `<runtime dir>/dpdk/<file-prefix>/
//! dpdk_telemetry.v2`, a `SOCK_SEQPACKET` unix socket. On connect the process sends
//! one JSON greeting (`version`, `pid`, `max_output_len`); then every command string
//! (`/cmd` or `/cmd,params`) is answered by one JSON message `{"/cmd": value}`.

use serde_json::Value;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How long to wait for one reply (slab merges are answered when done).
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(30);

/// DPDK's runtime directory of `file_prefix`, found as EAL finds it:
/// `$RUNTIME_DIRECTORY`, else `/var/run` for root, else `$XDG_RUNTIME_DIR` or `/tmp`;
/// then `dpdk/<file_prefix>`.
pub fn runtime_dir(file_prefix: &str) -> PathBuf {
    let base = std::env::var_os("RUNTIME_DIRECTORY")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // /proc/self belongs to the process's effective uid.
            let root = std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0);
            if root {
                PathBuf::from("/var/run")
            } else {
                std::env::var_os("XDG_RUNTIME_DIR")
                    .map(PathBuf::from)
                    .unwrap_or_else(|| PathBuf::from("/tmp"))
            }
        });
    base.join("dpdk").join(file_prefix)
}

/// The telemetry socket of the DPDK process started with `file_prefix`.
pub fn socket_path(file_prefix: &str) -> PathBuf {
    runtime_dir(file_prefix).join("dpdk_telemetry.v2")
}

/// Connects a `SOCK_SEQPACKET` unix socket to `path`, waiting at most `timeout`
/// (a frozen process's full listen queue blocks a connect). The connected socket is
/// handed out as a `UnixStream`: its `read`/`write`/timeouts are plain fd calls
/// that keep message boundaries on a seqpacket socket (one `read` = one message);
/// both timeouts are set to `timeout`.
#[allow(unsafe_code)]
fn connect_seqpacket(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let bytes = path.as_os_str().as_bytes();
    let mut addr = libc::sockaddr_un {
        sun_family: libc::AF_UNIX as libc::sa_family_t,
        sun_path: [0; 108],
    };
    if bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "socket path too long or contains NUL",
        ));
    }
    for (d, s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = *s as libc::c_char;
    }
    // SAFETY: plain system call with constant arguments; returns a new fd or -1.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` is a freshly created descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A unix socket's connect waits at most its send timeout.
    let sock = UnixStream::from(fd);
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    // SAFETY: `addr` is a fully initialised sockaddr_un that outlives the call and
    // the length passed is its size; `fd` is open.
    let rc = unsafe {
        libc::connect(
            sock.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast::<libc::sockaddr>(),
            std::mem::size_of::<libc::sockaddr_un>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(sock)
}

/// A connection to one DPDK process's telemetry.
pub struct Telemetry {
    sock: UnixStream,
    buf: Vec<u8>,
    /// How long a reply may take.
    timeout: Duration,
    /// The process id from the greeting.
    pub pid: u64,
}

impl Telemetry {
    /// Connects to the process started with `--file-prefix file_prefix`.
    pub fn connect(file_prefix: &str) -> Result<Telemetry, String> {
        Telemetry::connect_within(file_prefix, REPLY_TIMEOUT)
    }

    /// Connects to the process started with `--file-prefix file_prefix`, waiting at
    /// most `timeout` for the connection, for the greeting and for each reply after.
    pub fn connect_within(file_prefix: &str, timeout: Duration) -> Result<Telemetry, String> {
        let path = socket_path(file_prefix);
        Telemetry::connect_path_within(&path, timeout).map_err(|e| {
            format!(
                "{e} (is a dataplane running with --file-prefix {file_prefix}? socket {})",
                path.display()
            )
        })
    }

    /// Connects to the telemetry socket at `path`, waiting at most `timeout` for each
    /// step.
    pub fn connect_path_within(path: &Path, timeout: Duration) -> Result<Telemetry, String> {
        let sock = connect_seqpacket(path, timeout).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                format!("connect: no answer within {timeout:?}")
            }
            _ => format!("connect: {e}"),
        })?;
        let mut t = Telemetry {
            sock,
            buf: vec![0; 64 * 1024],
            timeout,
            pid: 0,
        };
        let hello = t.read_json()?;
        t.pid = hello["pid"].as_u64().unwrap_or(0);
        if let Some(n) = hello["max_output_len"].as_u64() {
            // One byte more than any message: a full buffer would mean truncation.
            t.buf.resize((n as usize + 1).max(t.buf.len()), 0);
        }
        Ok(t)
    }

    /// Waits at most `timeout` for each reply (and for each send) from now on,
    /// instead of [`REPLY_TIMEOUT`].
    pub fn set_timeout(&mut self, timeout: Duration) -> Result<(), String> {
        self.sock
            .set_read_timeout(Some(timeout))
            .and_then(|()| self.sock.set_write_timeout(Some(timeout)))
            .map_err(|e| format!("socket timeout: {e}"))?;
        self.timeout = timeout;
        Ok(())
    }

    fn read_json(&mut self) -> Result<Value, String> {
        let n = self.sock.read(&mut self.buf).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => {
                format!("no reply within {:?}", self.timeout)
            }
            _ => format!("read: {e}"),
        })?;
        if n == 0 {
            return Err("the process closed the telemetry connection".into());
        }
        if n == self.buf.len() {
            return Err("reply larger than the receive buffer".into());
        }
        serde_json::from_slice(&self.buf[..n]).map_err(|e| format!("bad JSON reply: {e}"))
    }

    /// Sends `cmd` (`/name` or `/name,params`) and returns the reply's value. A
    /// `null` value (unknown command, or the callback failed) is an error; so is a
    /// dict with an `error` entry (the dataplane's refusals).
    pub fn query(&mut self, cmd: &str) -> Result<Value, String> {
        let name = cmd.split(',').next().unwrap_or(cmd);
        self.query_opt(cmd)?.ok_or_else(|| {
            format!("{name}: no data (unknown command: is this a KV-Direct dataplane?)")
        })
    }

    /// [`Telemetry::query`] for a command the dataplane may not have (`/kvd/replication`
    /// on a node without replication): `None` for a `null` value.
    pub fn query_opt(&mut self, cmd: &str) -> Result<Option<Value>, String> {
        self.sock
            .write_all(cmd.as_bytes())
            .map_err(|e| format!("send: {e}"))?;
        let mut reply = self.read_json()?;
        let name = cmd.split(',').next().unwrap_or(cmd);
        let v = reply
            .get_mut(name)
            .map(Value::take)
            .ok_or_else(|| format!("unexpected reply to {name}: {reply}"))?;
        if v.is_null() {
            return Ok(None);
        }
        if let Some(e) = v.get("error").and_then(Value::as_str) {
            return Err(format!("{name}: {e}"));
        }
        Ok(Some(v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        assert!(socket_path("kvd-x").ends_with("dpdk/kvd-x/dpdk_telemetry.v2"));
        let long = "x".repeat(200);
        assert!(Telemetry::connect(&long).is_err());
    }

    #[test]
    fn missing_socket_is_an_error_not_a_panic() {
        let e = Telemetry::connect("kvd-no-such-prefix-for-tests")
            .err()
            .unwrap();
        assert!(e.contains("kvd-no-such-prefix-for-tests"), "{e}");
    }
}
