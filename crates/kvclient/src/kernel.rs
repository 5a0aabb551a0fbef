//! [`KernelIo`]: a [`PacketIo`] over a Linux `AF_PACKET` raw socket, so a
//! [`Client`](crate::Client) runs from an ordinary process on an ordinary
//! interface (a TAP, a veth, a NIC), without DPDK.
//!
//! # Design
//!
//! **Why `AF_PACKET`/`SOCK_RAW`.** The client builds the whole Ethernet frame
//! itself (MACs, IPv4, UDP, BTH, RETH, payload, ICRC): the ICRC then covers
//! exactly the bytes that go on the wire, the source MAC/IP can be any identity
//! the operator admitted, and no kernel RDMA stack (rxe) is involved. A UDP socket
//! cannot do this: the kernel would choose the headers (and the ICRC covers them).
//! The socket is bound to one interface and receives IPv4 frames only
//! (`ETH_P_IP`); frames the socket itself sent are skipped (`PACKET_IGNORE_OUTGOING`
//! where the kernel has it, and the packet type of every frame in any case), and a
//! cheap check (IPv4 without options, UDP, destination port 4791) drops anything
//! else before the transport parses it.
//!
//! **Receiving without burning a core.** [`PacketIo::recv`] takes what is queued
//! (up to [`BURST`] frames, without blocking); only when nothing is there does it
//! wait, at most [`RECV_WAIT_NS`], in `ppoll(2)`. The client's timers (RTO,
//! CONNECT retransmission) keep running, and an idle client sleeps in the kernel.
//!
//! **Permissions.** Opening the socket needs root or `CAP_NET_RAW`
//! ([`KernelError::PermissionDenied`]).
//!
//! **Addressing.** The kernel's own IP stack sees the server's responses too. If
//! the client IP is an address of the host, the kernel may answer each response
//! (UDP port 4791, no socket) with an ICMP port-unreachable that the server then
//! has to drop. Use a client IP that is *not* configured on the host: the TAP
//! topology (`configs/tap.json`) uses 127.0.0.3, which the kernel treats as a
//! martian on a non-loopback interface and drops silently. On a real NIC, use the
//! NIC's own MAC as the client MAC (or put the NIC in promiscuous mode), since the
//! NIC filters frames for other MACs before any socket sees them.

use crate::PacketIo;
use std::fmt;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// Most frames [`KernelIo::recv`] hands over per call.
pub const BURST: usize = 32;

/// Longest [`KernelIo::recv`] waits when nothing is queued (150 µs).
pub const RECV_WAIT_NS: i64 = 150_000;

/// Largest frame received (jumbo MTU 9000 + Ethernet header, with room to spare).
const FRAME_MAX: usize = 9216;

/// Socket receive buffer asked for (the kernel may cap it at `rmem_max`).
const RCVBUF_BYTES: libc::c_int = 4 << 20;

/// EtherType IPv4.
const ETH_P_IP: u16 = 0x0800;

/// `PACKET_IGNORE_OUTGOING` (Linux 4.20; not in every libc version).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;

/// Why [`KernelIo::open`] failed.
#[derive(Debug)]
pub enum KernelError {
    /// There is no interface of that name (in this network namespace).
    NoSuchInterface {
        /// The name asked for.
        name: String,
        /// The interfaces there are.
        available: Vec<String>,
    },
    /// Raw sockets need root or `CAP_NET_RAW`.
    PermissionDenied {
        /// The interface the socket was for.
        iface: String,
    },
    /// Any other system call failure.
    Io(io::Error),
}

impl fmt::Display for KernelError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelError::NoSuchInterface { name, available } => {
                write!(f, "no network interface named {name:?}")?;
                if available.is_empty() {
                    write!(f, " (no interfaces found)")
                } else {
                    write!(f, " (available: {})", available.join(", "))
                }
            }
            KernelError::PermissionDenied { iface } => write!(
                f,
                "opening a raw socket on {iface:?} needs root or CAP_NET_RAW \
                 (run as root, or `setcap cap_net_raw+ep` on the binary)"
            ),
            KernelError::Io(e) => write!(f, "raw socket: {e}"),
        }
    }
}

impl std::error::Error for KernelError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            KernelError::Io(e) => Some(e),
            _ => None,
        }
    }
}

/// Counters of a [`KernelIo`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KernelStats {
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames the kernel did not take (queue full, interface down, …).
    pub tx_errors: u64,
    /// Frames handed to the transport.
    pub rx_frames: u64,
    /// Frames received and dropped by the pre-filter (not IPv4/UDP/4791, or sent
    /// by this socket).
    pub rx_filtered: u64,
    /// Receive system-call failures other than "nothing queued".
    pub rx_errors: u64,
}

/// A [`PacketIo`] over an `AF_PACKET` raw socket bound to one interface (see the
/// module doc). `Send`: a client can be moved to another thread.
#[derive(Debug)]
pub struct KernelIo {
    fd: OwnedFd,
    iface: String,
    buf: Vec<u8>,
    stats: KernelStats,
}

impl KernelIo {
    /// Opens a raw socket on interface `iface` (which must exist in this network
    /// namespace; it should be up for frames to flow).
    pub fn open(iface: &str) -> Result<KernelIo, KernelError> {
        let ifindex = ifindex(iface)?;
        let proto_be = ETH_P_IP.to_be();
        // SAFETY: socket(2) takes no pointers; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                libc::c_int::from(proto_be),
            )
        };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => KernelError::PermissionDenied {
                    iface: iface.to_string(),
                },
                _ => KernelError::Io(e),
            });
        }
        // SAFETY: `raw` is a fresh, valid descriptor owned by nothing else; the OwnedFd closes it exactly once.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        // Best effort: a larger receive buffer absorbs a burst of responses, and the
        // kernel need not hand us our own frames back.
        let _ = setsockopt_int(&fd, libc::SOL_SOCKET, libc::SO_RCVBUF, RCVBUF_BYTES);
        let _ = setsockopt_int(&fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);

        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = proto_be;
        sll.sll_ifindex = ifindex;
        let len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: `sll` is a valid sockaddr_ll that lives across the call, and `len` is its exact size.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                (&sll as *const libc::sockaddr_ll).cast::<libc::sockaddr>(),
                len,
            )
        };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(match e.raw_os_error() {
                Some(libc::ENODEV) => no_such_interface(iface),
                Some(libc::EPERM) | Some(libc::EACCES) => KernelError::PermissionDenied {
                    iface: iface.to_string(),
                },
                _ => KernelError::Io(e),
            });
        }
        let mut io = KernelIo {
            fd,
            iface: iface.to_string(),
            buf: vec![0; FRAME_MAX],
            stats: KernelStats::default(),
        };
        // Frames of any interface may have been queued between socket() and bind().
        while io.recv_one() != Recv::Empty {}
        io.stats = KernelStats::default();
        Ok(io)
    }

    /// The interface the socket is bound to.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Counters since [`KernelIo::open`].
    pub fn stats(&self) -> KernelStats {
        self.stats
    }

    /// Receives one frame into `self.buf` without blocking.
    fn recv_one(&mut self) -> Recv {
        // SAFETY: sockaddr_ll is plain old data; all-zero is a valid value.
        let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        let mut from_len = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
        // SAFETY: the buffer pointer and length describe `self.buf`, which is exclusively borrowed for the call; `from`/`from_len` are valid and sized for a sockaddr_ll (the kernel writes at most `from_len` bytes).
        let n = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                self.buf.as_mut_ptr().cast::<libc::c_void>(),
                self.buf.len(),
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                (&mut from as *mut libc::sockaddr_ll).cast::<libc::sockaddr>(),
                &mut from_len,
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            return match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EINTR) => Recv::Empty,
                _ => {
                    self.stats.rx_errors += 1;
                    Recv::Empty
                }
            };
        }
        // MSG_TRUNC: `n` is the real length, larger than the buffer if cut.
        let n = n as usize;
        if n <= self.buf.len()
            && from.sll_pkttype != libc::PACKET_OUTGOING
            && is_rocev2(&self.buf[..n])
        {
            Recv::Frame(n)
        } else {
            self.stats.rx_filtered += 1;
            Recv::Skipped
        }
    }

    /// Waits until a frame is queued, at most [`RECV_WAIT_NS`].
    fn wait_readable(&self) {
        let mut pfd = libc::pollfd {
            fd: self.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: RECV_WAIT_NS as libc::c_long,
        };
        // SAFETY: `pfd` and `ts` are valid for the call and the count is 1; a null signal mask leaves the mask unchanged. The result needs no check: the caller just tries to receive again.
        unsafe {
            libc::ppoll(&mut pfd, 1, &ts, std::ptr::null());
        }
    }
}

/// What one non-blocking receive gave.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recv {
    /// Nothing queued (or an error).
    Empty,
    /// A frame the pre-filter dropped.
    Skipped,
    /// A frame of this many bytes in the buffer, for the transport.
    Frame(usize),
}

impl PacketIo for KernelIo {
    fn send(&mut self, frame: &[u8]) -> bool {
        // SAFETY: the pointer and length describe `frame`, which outlives the call; the kernel only reads from it.
        let n = unsafe {
            libc::send(
                self.fd.as_raw_fd(),
                frame.as_ptr().cast::<libc::c_void>(),
                frame.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n >= 0 && n as usize == frame.len() {
            self.stats.tx_frames += 1;
            true
        } else {
            self.stats.tx_errors += 1;
            false
        }
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        let mut delivered = 0;
        let mut waited = false;
        // Bounded: at most BURST frames handed over, and filtered frames count too
        // (a flood of foreign traffic cannot keep us here).
        for _ in 0..4 * BURST {
            match self.recv_one() {
                Recv::Frame(len) => {
                    f(&self.buf[..len]);
                    self.stats.rx_frames += 1;
                    delivered += 1;
                    if delivered == BURST {
                        break;
                    }
                }
                Recv::Skipped => {}
                Recv::Empty => {
                    if delivered > 0 || waited {
                        break;
                    }
                    self.wait_readable();
                    waited = true;
                }
            }
        }
        delivered
    }
}

/// The cheap pre-filter: an Ethernet II frame carrying IPv4 without options, UDP,
/// destination port 4791 (everything else is checked by the transport's parser).
pub fn is_rocev2(frame: &[u8]) -> bool {
    const ETH: usize = 14;
    const IP: usize = 20;
    if frame.len() < ETH + IP + 8 {
        return false;
    }
    let ethertype = u16::from_be_bytes([frame[12], frame[13]]);
    let udp = ETH + IP;
    ethertype == ETH_P_IP
        && frame[ETH] == 0x45
        && frame[ETH + 9] == 17
        && u16::from_be_bytes([frame[udp + 2], frame[udp + 3]]) == kvwire::udp::ROCEV2_PORT
}

/// The index of interface `name`, or [`KernelError::NoSuchInterface`].
fn ifindex(name: &str) -> Result<libc::c_int, KernelError> {
    // IFNAMSIZ is 16 with the terminating NUL; a longer name or an inner NUL
    // cannot name an interface.
    if name.is_empty() || name.len() >= libc::IFNAMSIZ || name.contains(['\0', '/']) {
        return Err(no_such_interface(name));
    }
    let Ok(c) = std::ffi::CString::new(name) else {
        return Err(no_such_interface(name));
    };
    // SAFETY: `c` is a valid NUL-terminated string that outlives the call, which only reads it.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    match libc::c_int::try_from(idx) {
        Ok(i) if i > 0 => Ok(i),
        _ => Err(no_such_interface(name)),
    }
}

fn no_such_interface(name: &str) -> KernelError {
    KernelError::NoSuchInterface {
        name: name.to_string(),
        available: interfaces(),
    }
}

/// The interfaces of this network namespace, sorted (from `/sys/class/net`;
/// empty if it cannot be read).
pub fn interfaces() -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter_map(|e| e.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn setsockopt_int(fd: &OwnedFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int) -> bool {
    // SAFETY: the option value points to a live c_int and the length is its size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            opt,
            (&val as *const libc::c_int).cast::<libc::c_void>(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use kvwire::FrameParams;
    use std::net::Ipv4Addr;

    fn assert_send<T: Send>() {}

    #[test]
    fn kernel_io_is_send() {
        assert_send::<KernelIo>();
    }

    #[test]
    fn missing_interface_is_named() {
        let e = KernelIo::open("nosuch0").unwrap_err();
        match &e {
            KernelError::NoSuchInterface { name, available } => {
                assert_eq!(name, "nosuch0");
                assert!(!available.iter().any(|a| a == "nosuch0"));
            }
            other => panic!("unexpected {other:?}"),
        }
        let msg = e.to_string();
        assert!(msg.contains("\"nosuch0\""), "{msg}");
        for bad in ["", "a-name-far-too-long-for-linux", "a\0b", "../lo"] {
            assert!(
                matches!(
                    KernelIo::open(bad),
                    Err(KernelError::NoSuchInterface { .. })
                ),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn loopback_send_and_receive() {
        // Needs CAP_NET_RAW: skipped without it.
        let mut io = match KernelIo::open("lo") {
            Ok(io) => io,
            Err(KernelError::PermissionDenied { .. }) => return,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(io.iface(), "lo");
        let t = std::time::Instant::now();
        let mut frames = Vec::new();
        // Nothing queued: returns after a short wait.
        io.recv(&mut |f| frames.push(f.to_vec()));
        assert!(t.elapsed() < std::time::Duration::from_millis(100));
        let p = FrameParams::new(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(127, 0, 0, 3),
            Ipv4Addr::new(127, 0, 0, 2),
            0xC000,
        );
        let mut buf = [0u8; 256];
        let c = kvwire::Connect {
            rkey: 0x1234,
            nonce: 0x5eed,
        };
        let n = kvwire::emit_connect(&mut buf, &p, 17, 0, &c).expect("fits");
        assert!(io.send(&buf[..n]));
        // lo hands the frame back as received (the outgoing copy is skipped).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        while !frames.iter().any(|f| f[..] == buf[..n]) && std::time::Instant::now() < deadline {
            io.recv(&mut |f| frames.push(f.to_vec()));
        }
        assert!(
            frames.iter().any(|f| f[..] == buf[..n]),
            "own frame back via lo"
        );
        assert_eq!(io.stats().tx_frames, 1);
        assert!(io.stats().rx_frames >= 1);
    }

    #[test]
    fn error_messages() {
        let e = KernelError::PermissionDenied {
            iface: "kvtap0".into(),
        };
        assert!(e.to_string().contains("needs root or CAP_NET_RAW"));
        let e = KernelError::NoSuchInterface {
            name: "x".into(),
            available: vec!["lo".into(), "eth0".into()],
        };
        assert_eq!(
            e.to_string(),
            "no network interface named \"x\" (available: lo, eth0)"
        );
    }

    #[test]
    fn prefilter() {
        let p = FrameParams::new(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(127, 0, 0, 3),
            Ipv4Addr::new(127, 0, 0, 2),
            0xC000,
        );
        let mut buf = [0u8; 256];
        let c = kvwire::Connect {
            rkey: 0x1234,
            nonce: 7,
        };
        let n = kvwire::emit_connect(&mut buf, &p, 17, 0, &c).expect("fits");
        let f = &buf[..n];
        assert!(is_rocev2(f));
        assert!(!is_rocev2(&f[..41]), "truncated");
        let mut g = f.to_vec();
        g[36] ^= 1; // UDP destination port
        assert!(!is_rocev2(&g));
        let mut g = f.to_vec();
        g[23] = 6; // TCP
        assert!(!is_rocev2(&g));
        let mut g = f.to_vec();
        g[12] = 0x86; // IPv6
        assert!(!is_rocev2(&g));
        let mut g = f.to_vec();
        g[14] = 0x46; // IP options
        assert!(!is_rocev2(&g));
    }
}
