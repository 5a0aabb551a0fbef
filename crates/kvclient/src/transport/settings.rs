//! A [`Transport`](super::Transport)'s settings ([`Config`]) and counters ([`Stats`]).

use kvwire::DEFAULT_MTU;

/// Configuration of a [`Transport`](super::Transport).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// IP MTU of the link (request payloads are at most
    /// [`kvwire::request_payload_capacity`]`(mtu)` bytes, and at most the slot size).
    pub mtu: usize,
    /// Retransmission timeout before the first round-trip sample (default 1 ms);
    /// afterwards the timeout adapts to the measured round trips (Jacobson/Karels:
    /// smoothed RTT + 4 × its mean deviation, samples only from requests sent once),
    /// never below `rto_min_ns`.
    pub rto_initial_ns: u64,
    /// Smallest adaptive retransmission timeout (default 200 µs).
    pub rto_min_ns: u64,
    /// Largest retransmission timeout after exponential back-off (default 100 ms).
    pub rto_max_ns: u64,
    /// RTO-driven retransmissions of a request without any response frame of it
    /// arriving, before it fails with [`Error::Timeout`](crate::Error::Timeout) and its QP with it
    /// (default 8).
    pub max_retries: u8,
    /// ... and not before the request has been outstanding this long since its first
    /// transmission (default 0: the retry count alone decides). The RTO restarts from
    /// the round-trip estimate whenever another request of the QP progresses, so
    /// `max_retries` alone can run out within a few milliseconds of a server that is
    /// merely descheduled (a sleeping lcore on a shared host); a client that would
    /// rather wait says how long here (pktgen: `--timeout-ms`).
    pub give_up_ns: u64,
    /// Time between CONNECT retransmissions (same nonce) while no ACCEPT came
    /// (default 10 ms).
    pub connect_timeout_ns: u64,
    /// Frame buffers, i.e. requests in flight across all QPs (default 256).
    pub max_outstanding: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            mtu: DEFAULT_MTU,
            rto_initial_ns: 1_000_000,
            rto_min_ns: 200_000,
            rto_max_ns: 100_000_000,
            max_retries: 8,
            give_up_ns: 0,
            connect_timeout_ns: 10_000_000,
            max_outstanding: 256,
        }
    }
}

/// Counters of a [`Transport`](super::Transport).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests sent (first transmissions).
    pub sent: u64,
    /// Request retransmissions (RTO, NAK and RNR NAK driven).
    pub retransmitted: u64,
    /// CONNECT frames sent (retransmissions included).
    pub connects_sent: u64,
    /// NAK "PSN sequence error" acted upon.
    pub naks_seq: u64,
    /// RNR NAKs acted upon.
    pub rnr_naks: u64,
    /// NAK "invalid request" (and other fatal NAKs) that reset a connection.
    pub naks_invalid: u64,
    /// Positive ACKs (no action).
    pub acks: u64,
    /// Retransmission timer firings.
    pub timeouts: u64,
    /// Fast retransmits (later requests completed while the oldest did not).
    pub fast_retransmits: u64,
    /// Duplicate frames (response frames already received, replayed ACCEPTs, NAKs
    /// already acted upon).
    pub dup_frames: u64,
    /// Frames for nothing outstanding (old PSNs, other nonces, unknown QPs).
    pub stale_frames: u64,
    /// Response frames after a missing one (dropped; the replay brings them again).
    pub gap_frames: u64,
    /// Frames that do not parse (or bad response/ACCEPT payloads).
    pub bad_frames: u64,
    /// Requests completed.
    pub completed: u64,
    /// Requests failed.
    pub failed: u64,
    /// RESUME frames sent.
    pub resumes_sent: u64,
    /// RESUMEs answered: the connection went on (requests in flight resent).
    pub resumed: u64,
    /// RESUMEs answered with a new incarnation (requests in flight failed).
    pub resume_refused: u64,
}
