//! The types one request packet carries through a burst, shared by the server (which
//! admits and decodes requests) and the responder (which answers them): the server's
//! identity, the burst limit, the per-packet reply context and the per-result tags.

use kvwire::frame::FrameParams;
use kvwire::{MacAddr, Status};
use std::net::Ipv4Addr;

/// Largest rx burst the server and the worker loop handle (the config's `burst` is at
/// most this).
pub const MAX_BURST: usize = 64;

/// UDP source port of responses.
pub const RESPONSE_UDP_SRC_PORT: u16 = 0xC001;

/// The server's own identity and limits.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Our MAC; requests to another unicast MAC are dropped. Responses always carry it
    /// as their source.
    pub mac: MacAddr,
    /// Our IPv4 address; requests to another address are dropped. Responses always
    /// carry it as their source.
    pub ip: Ipv4Addr,
    /// Our QPN: the DETH source QP of responses.
    pub qpn: u32,
    /// Q_Key of responses.
    pub qkey: u32,
    /// Request region base address: slot 0 of every client's request ring (a
    /// request's RETH VA must be its PSN's slot, `kvwire::transport::slot_va`).
    pub region_va: u64,
    /// Request region length (split into `W` slots).
    pub region_len: u64,
    /// MTU: the largest IP packet a response may be.
    pub mtu: usize,
}

/// One admitted request of the burst, kept while its ops run.
#[derive(Clone, Copy)]
pub(crate) struct PktCtx {
    /// Addresses of the reply.
    pub params: FrameParams,
    /// Index of the client in the server's client table.
    pub client: u16,
    /// The request's PSN (selects its replay entry).
    pub psn: u32,
    /// The request's batch id, echoed in every response frame.
    pub batch_id: u32,
    /// Its INTENT was logged: its response frames go to the tap after the burst
    /// (`crate::repl::completion`).
    pub logged: bool,
}

/// What produces the result of one entry of a chunk.
#[derive(Clone, Copy)]
pub(crate) enum Source {
    /// The engine or the station (the next executed op).
    Engine,
    /// The station, its result redacted for a client that may not read values
    /// (`kvwire::tenant::redacts`, `kvops::semantics::redact`). Only read-modify-write
    /// ops are redacted, and they always run through the station.
    Redacted,
    /// A status decided at decode time (an op that is not executed).
    Immediate(Status),
    /// A request with no ops: answer with an empty response.
    Empty,
}

/// One result of a chunk, in order: which packet it answers and where it comes from.
#[derive(Clone, Copy)]
pub(crate) struct Tag {
    /// Index of the request in the burst's admitted packets.
    pub pkt: u8,
    /// Where the result comes from.
    pub src: Source,
}
