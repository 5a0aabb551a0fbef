//! A workaround for a crash in DPDK 22.11's memif server (issue 29).
//!
//! The memif server's listener (`memif_listener_handler` in `memif_socket.c`) accepts a
//! connection, registers an interrupt callback for it, and sends its HELLO. When the
//! client has already closed the connection — it died while the server was frozen
//! (SIGSTOP, a paused VM) with its connect waiting in the listen queue — that send fails
//! with `EPIPE`, and the error path closes the socket and frees the control channel
//! **without unregistering the callback**. The EAL interrupt thread then rebuilds its
//! epoll set with the closed descriptor and panics ("Error adding fd N epoll_ctl, Bad
//! file descriptor"). `scripts/memif_sigcont_repro.sh` shows it with dpdk-testpmd alone;
//! the fix belongs in DPDK (unregister before closing), which this project takes from
//! the OS packages.
//!
//! The workaround: this module defines `sendmsg` for the process. A binary that exports
//! it (`-Wl,--export-dynamic-symbol=sendmsg`, see `dataplane/build.rs`) has every
//! shared library — the memif PMD that EAL `dlopen`s among them — call it instead of
//! libc's. It is the system call itself, except that on a `SOCK_SEQPACKET` socket
//! (memif's control channel; nothing else here uses that type) a send the peer can no
//! longer receive (`EPIPE`, `ECONNRESET`) reports the message as sent. memif then keeps
//! the connection and its callback registered, reads the peer's end of file on the next
//! interrupt, and tears the connection down by its ordinary path, which unregisters the
//! callback before closing. Nothing is lost by the pretence: the peer is gone, and the
//! next read says so. `scripts/e2e/memif_sigcont.sh` runs the sequence against the
//! dataplane (without this module it aborts on SIGCONT).

use libc::{c_int, c_long, msghdr, ssize_t};

/// `sendmsg(2)` for the whole process (see the module documentation): the system call,
/// with a vanished peer of a `SOCK_SEQPACKET` socket reported as a completed send.
///
/// # Safety
///
/// As `sendmsg(2)`: `msg` points to a valid `msghdr` whose buffers are readable.
#[no_mangle]
// SAFETY: takes the place of libc's `sendmsg` for the whole process: the same system
// call with the same contract (# Safety above), callers need nothing more.
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's arguments go to the kernel unchanged (it validates them), as libc's sendmsg does.
    let sent = unsafe { libc::syscall(libc::SYS_sendmsg, fd as c_long, msg, flags as c_long) };
    if sent >= 0 {
        return sent as ssize_t;
    }
    let err = std::io::Error::last_os_error().raw_os_error();
    if matches!(err, Some(libc::EPIPE | libc::ECONNRESET)) && is_seqpacket(fd) {
        // SAFETY: the kernel read `msg` just now, so it and its iovec array are valid.
        return unsafe { payload_len(msg) };
    }
    sent as ssize_t
}

/// Whether `fd` is a `SOCK_SEQPACKET` socket.
fn is_seqpacket(fd: c_int) -> bool {
    let mut ty: c_int = 0;
    let mut len = std::mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: `ty` and `len` are valid for writes of the sizes given.
    let r = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&mut ty as *mut c_int).cast(),
            &mut len,
        )
    };
    r == 0 && ty == libc::SOCK_SEQPACKET
}

/// The bytes `msg`'s iovecs hold.
///
/// # Safety
///
/// `msg` and its `msg_iov` array (`msg_iovlen` entries) are valid for reads.
unsafe fn payload_len(msg: *const msghdr) -> ssize_t {
    // SAFETY: the caller guarantees `msg` is valid.
    let m = unsafe { &*msg };
    if m.msg_iov.is_null() {
        return 0;
    }
    // SAFETY: the caller guarantees `msg_iovlen` readable entries at `msg_iov`.
    let iov = unsafe { std::slice::from_raw_parts(m.msg_iov, m.msg_iovlen) };
    iov.iter().map(|v| v.iov_len).sum::<usize>() as ssize_t
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::{UnixDatagram, UnixStream};

    fn send(fd: c_int, bytes: &[u8]) -> (ssize_t, Option<i32>) {
        let mut iov = libc::iovec {
            iov_base: bytes.as_ptr() as *mut _,
            iov_len: bytes.len(),
        };
        // SAFETY: an all-zero msghdr is valid; the fields set below point to live data.
        let mut m: msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = &mut iov;
        m.msg_iovlen = 1;
        // SAFETY: `m` and `iov` are valid for the call.
        let r = unsafe { sendmsg(fd, &m, libc::MSG_NOSIGNAL) };
        (r, std::io::Error::last_os_error().raw_os_error())
    }

    /// A SEQPACKET pair as memif uses: (ours, peer).
    fn seqpacket_pair() -> (c_int, c_int) {
        let mut fds = [0 as c_int; 2];
        let (domain, ty) = (libc::AF_UNIX, libc::SOCK_SEQPACKET);
        // SAFETY: `fds` has room for the two descriptors.
        let r = unsafe { libc::socketpair(domain, ty, 0, fds.as_mut_ptr()) };
        assert_eq!(r, 0);
        (fds[0], fds[1])
    }

    #[test]
    fn a_vanished_seqpacket_peer_reads_as_sent_and_end_of_file_follows() {
        let (ours, peer) = seqpacket_pair();
        assert_eq!(send(ours, b"hello").0, 5, "a live peer");
        // SAFETY: `peer` is ours to close.
        unsafe { libc::close(peer) };
        assert_eq!(send(ours, b"hello").0, 5, "the peer closed: reported sent");
        let mut buf = [0u8; 8];
        // SAFETY: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(ours, buf.as_mut_ptr().cast(), buf.len(), 0) };
        assert_eq!(n, 0, "the next read sees the peer's end of file");
        // SAFETY: `ours` is ours to close.
        unsafe { libc::close(ours) };
    }

    #[test]
    fn other_sockets_and_errors_are_the_system_calls() {
        // A stream socket whose peer closed: EPIPE, as from libc.
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let (r, err) = send(a.as_raw_fd(), b"x");
        assert_eq!((r, err), (-1, Some(libc::EPIPE)));
        // A datagram socket with nowhere to send: its own error.
        let d = UnixDatagram::unbound().unwrap();
        assert_eq!(send(d.as_raw_fd(), b"x").0, -1);
        // Not a socket at all.
        assert_eq!(send(-1, b"x"), (-1, Some(libc::EBADF)));
    }
}
