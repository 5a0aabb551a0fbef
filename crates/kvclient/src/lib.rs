//! KV-Direct client: the client half of protocol v2's reliable transport, in pure
//! Rust (no DPDK), over any [`PacketIo`].
//!
//! * [`Transport`] — the low level (what pktgen uses): many client QPs, requests
//!   framed into the transport's own buffers and kept for retransmission, events
//!   out. No heap allocation per packet.
//! * [`Client`] — a plain blocking and pipelined API (`get`, `put`, `update`, …,
//!   `submit`/`flush`/`poll`) on top of a `Transport`, for tools and tests.
//! * [`sim`] — [`sim::LossyLink`], a seeded in-memory duplex link that drops,
//!   duplicates and reorders frames, for deterministic tests.
//! * [`kernel`] — [`KernelIo`], a [`PacketIo`] over a Linux `AF_PACKET` raw socket,
//!   and [`endpoint`] — [`Endpoint`] (interface, addresses, QPs from a config file)
//!   with [`kernel_client_config`]: a client without DPDK (what `kvcli` uses;
//!   docs/CLIENTS.md).
//!
//! Time is always passed in (`now_ns`): nothing here reads a clock.
//!
//! # Design
//!
//! **Connection.** Each client QP (a QPN and R_Key the operator admitted) first
//! sends CONNECT with a nonce larger than any earlier incarnation's (the caller's
//! clock in ns, or the previous nonce + 1). The server answers ACCEPT with the
//! window `W` (credits, a power of two), the first request and response PSNs, the
//! slot size and the request ring's address. A lost CONNECT or ACCEPT is recovered
//! by retransmitting the CONNECT with the *same* nonce every `connect_timeout_ns`
//! (the server answers the same nonce with the same ACCEPT); ACCEPTs with another
//! nonce are ignored.
//!
//! **Credits.** Requests carry consecutive 24-bit PSNs from the ACCEPT's
//! `request_psn`, the batch id of each is its PSN, and its RETH VA is slot
//! `psn mod W` of the ring. PSN `p` is sent only once every request up to `p − W`
//! is complete (all its response frames arrived): at most `W` requests are in
//! flight per QP, and a slot is never overwritten while the server may still
//! serve it. Each in-flight request keeps its frame in a buffer of a shared pool
//! (`max_outstanding` buffers) until it completes.
//!
//! **Go-back-N.** The server serves only the expected PSN, in order. A request
//! ahead of it is answered by one NAK "PSN sequence error" naming the expected PSN
//! `e`; the client then resends every incomplete request from `e` on, oldest first,
//! with the same bytes (duplicate NAKs for the same `e` are ignored). An RNR NAK
//! (server overloaded) names `e` and a timer: nothing is sent on that QP before
//! the timer has run out, then the client resends from `e`. A duplicate of a
//! request the server has served (within the last `W`) is answered from the
//! server's cache with the same response frames: it is never executed twice.
//!
//! **RTO.** One retransmission timer per QP runs while requests are in flight.
//! When it fires the client resends every incomplete request (go-back-N from the
//! oldest), doubles the timeout up to `rto_max_ns`, and counts a retry of each
//! request resent. Any accepted response frame resets the timeout to
//! `rto_initial_ns`, and the retry count of its request to 0 (a long multi-frame
//! response that arrives piecemeal is progress, not a failure). When the oldest
//! request has been retransmitted `max_retries` times without progress (and, where
//! `give_up_ns` is set, has been outstanding that long) and the timer fires again,
//! it fails with
//! [`Error::Timeout`], the others in flight with [`Error::ConnectionLost`], and
//! the QP must reconnect.
//!
//! **Reassembly.** A response may span several frames, each with the index of its
//! first result and a MORE flag on all but the last. A frame is accepted only if
//! its first index equals the number of results received so far for that request
//! (lower: a duplicate, ignored; higher: a gap, dropped — the retransmission's
//! replay brings the whole response again). The request completes on the frame
//! without MORE. Only accepted frames are delivered, so every result is delivered
//! exactly once, in order.
//!
//! # Exactly-once contract and its limits
//!
//! Within one connection (incarnation), every request the client reports
//! complete was executed exactly once by the server, and its results are the
//! ones of that execution. A request reported [`Event::Failed`] has an *unknown*
//! outcome: it may have been executed (once) or not. The transport never resends
//! it under a new PSN; the application decides (a blind retry is at-least-once,
//! fine for idempotent ops only). The server keeps exactly-once state per
//! incarnation only: after a reconnect nothing of the old incarnation is replayed.
//! Frames of an old incarnation still in the network after a reconnect cannot be
//! taken for the new one's: the server starts a new incarnation's PSNs half the PSN
//! space (2^23) away from the old one's and drops every request outside the window
//! (docs/PROTOCOL.md §6.5); on this side, responses and NAKs are matched by QPN and
//! PSN, and the old incarnation's PSNs are not in flight any more.
// Only the kernel transport's system calls and the prefetch hint use `unsafe` (each
// with a SAFETY note).
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod check;
mod client;
pub mod endpoint;
pub mod follow;
#[allow(unsafe_code)]
mod hint;
#[allow(unsafe_code)]
pub mod kernel;
mod pool;
mod qp;
pub mod sim;
mod transport;

pub use client::{Client, ClientConfig, Op, Reply, Ticket, TxCondition, TxOutcome, TxTicket};
pub use endpoint::{kernel_client_config, Endpoint, EndpointError};
pub use follow::NodeAddr;
pub use kernel::{KernelError, KernelIo};
pub use qp::{QpSpec, QpState};

/// A tenant's credential (docs/PROTOCOL.md §6.8): its id and secret. The secret never
/// leaves the client: OPENs carry a proof made with it.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The tenant id (`1..2^24`).
    pub tenant: u32,
    /// The secret.
    pub secret: Vec<u8>,
}

impl core::fmt::Debug for Credentials {
    // The secret is not printed.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Credentials {{ tenant: {}, secret: <{} bytes> }}",
            self.tenant,
            self.secret.len()
        )
    }
}

impl Credentials {
    /// Reads a credentials file (`kvconf::TenantCredentials`).
    pub fn load(path: &std::path::Path) -> Result<Credentials, String> {
        kvconf::TenantCredentials::load(path).map(|(tenant, secret)| Credentials { tenant, secret })
    }
}
pub use transport::{Config, Event, SendError, Stats, Transport};

/// Moves whole frames to and from the network.
pub trait PacketIo {
    /// Sends one frame (copies it out). `false`: it cannot be taken now (nothing
    /// was sent).
    fn send(&mut self, frame: &[u8]) -> bool;
    /// Delivers up to one burst of received frames to `f`; returns how many.
    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize;
}

impl<T: PacketIo + ?Sized> PacketIo for &mut T {
    fn send(&mut self, frame: &[u8]) -> bool {
        (**self).send(frame)
    }
    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        (**self).recv(f)
    }
}

impl<T: PacketIo + ?Sized> PacketIo for Box<T> {
    fn send(&mut self, frame: &[u8]) -> bool {
        (**self).send(frame)
    }
    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        (**self).recv(f)
    }
}

/// Why a request or an operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// No response after `max_retries` retransmissions: the outcome is unknown, and
    /// the QP's connection is considered lost.
    Timeout,
    /// The connection was lost (server NAK "invalid request", another request of
    /// the QP timed out, or a reconnect) while the request was in flight: the
    /// outcome is unknown.
    ConnectionLost,
    /// [`Client`]: the server answered with a status other than the success of the
    /// operation.
    Status(kvwire::Status),
    /// [`Client`]: the QP did not connect within the client's connect timeout.
    ConnectTimeout,
    /// [`Client`]: the operation does not fit in one request packet.
    TooLarge,
    /// [`Client`]: the operation cannot be encoded (e.g. empty key).
    Invalid(kvwire::PayloadError),
    /// [`Client`]: the response was malformed, or had no result for the
    /// operation.
    BadResponse,
    /// [`Client`]: no QP serves the key's partition.
    NoQp,
    /// [`Client`]: no result within the client's operation timeout (outcome
    /// unknown; a result arriving later is discarded).
    Deadline,
    /// Not executed: the server no longer had the opened QP (closed, or reclaimed
    /// when idle) when the request arrived, and it was sent only once. A [`Client`]
    /// opens a new QP and sends the operation again; [`Transport`] users may too.
    NotExecuted,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Error::Status(s) => write!(f, "status {}", s.name()),
            Error::TooLarge => f.write_str("too large for one request packet of the MTU"),
            Error::Timeout => f.write_str("no response after every retransmission"),
            Error::ConnectionLost => {
                f.write_str("the connection was lost while the request was in flight")
            }
            Error::ConnectTimeout => f.write_str("no ACCEPT within the connect timeout"),
            Error::Invalid(e) => write!(f, "cannot encode the operation: {e}"),
            Error::BadResponse => f.write_str("malformed response from the server"),
            Error::NoQp => f.write_str("no client QP serves this key's partition"),
            Error::Deadline => f.write_str("no result within the operation timeout"),
            Error::NotExecuted => {
                f.write_str("not executed: the server had closed the connection; send it again")
            }
        }
    }
}

impl std::error::Error for Error {}
