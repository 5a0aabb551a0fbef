//! Protocol v2's transport packets (docs/PROTOCOL.md §6): connection set-up
//! (CONNECT / ACCEPT), RC Acknowledge packets (ACK, RNR NAK, NAK), request-slot
//! addressing, and the two classifiers of what a server and a client receive.
//!
//! ```text
//! CONNECT : Ethernet IPv4 UDP BTH(0x04 RC SEND Only)          CONNECT(16) ICRC   client → server
//! ACCEPT  : Ethernet IPv4 UDP BTH(0x64 UD SEND Only) DETH(8)  ACCEPT(40)  ICRC   server → client
//! ACK/NAK : Ethernet IPv4 UDP BTH(0x11 RC Acknowledge) AETH(4)            ICRC   server → client
//! ```
//!
//! Like the rest of this crate nothing here allocates or panics on input.

use crate::ethernet::MacAddr;
use crate::frame::{
    self, emit_lower, emit_response_headers, finalize, parse_common, DropReason, EmitError,
    FrameParams, Parsed, Request, Response, EXT_OFF,
};
use crate::ib::{self, opcode, Deth};
use crate::{ethernet, ipv4, udp};
use core::net::Ipv4Addr;

mod connection;
mod sender;
mod timer;
pub use connection::*;
pub use sender::{Due, Recovery, RtoPolicy};
pub use timer::RetransmitTimer;

/// Bytes of each request slot of a client's ring: the region split into `credits`
/// slots, rounded down to 64 bytes.
#[inline]
pub const fn slot_size(region_len: u64, credits: u16) -> u64 {
    if credits == 0 {
        return 0;
    }
    (region_len / credits as u64) & !63
}

/// RETH virtual address a request with PSN `psn` must carry: the start of slot
/// `psn mod credits` of the client's ring (`credits` is a power of two, so the slot
/// sequence continues across the 2^24 PSN wrap).
#[inline]
pub const fn slot_va(region_va: u64, slot_size: u64, credits: u16, psn: u32) -> u64 {
    if credits == 0 {
        return region_va;
    }
    region_va + (psn % credits as u32) as u64 * slot_size
}

/// NAK codes of an AETH (IBA 9.7.5.2.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum NakCode {
    /// A request ahead of the expected PSN: resend from the AETH packet's PSN.
    PsnSequenceError = 0,
    /// A request the server cannot take (here: its QP is not connected).
    InvalidRequest = 1,
    /// An R_Key or address violation (not sent by this server).
    RemoteAccessError = 2,
    /// The server failed (not sent by this server).
    RemoteOperationalError = 3,
}

/// The AETH syndrome: what an RC Acknowledge says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Syndrome {
    /// Positive acknowledgement (5-bit credit count; 31 = no credit information).
    Ack {
        /// Credit count field.
        credits: u8,
    },
    /// Receiver not ready: retry after the 5-bit timer's time ([`rnr_timer_micros`]).
    RnrNak {
        /// RNR timer field.
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

impl Syndrome {
    /// The syndrome byte (bits 6–5 type: 00 ACK, 01 RNR NAK, 11 NAK; bits 4–0 value).
    pub const fn to_byte(self) -> u8 {
        match self {
            Syndrome::Ack { credits } => credits & 0x1f,
            Syndrome::RnrNak { timer } => 0x20 | (timer & 0x1f),
            Syndrome::Nak(code) => 0x60 | code as u8,
        }
    }

    /// Reads a syndrome byte; `None` for reserved encodings.
    pub const fn from_byte(b: u8) -> Option<Syndrome> {
        let v = b & 0x1f;
        match b >> 5 {
            0 => Some(Syndrome::Ack { credits: v }),
            1 => Some(Syndrome::RnrNak { timer: v }),
            3 => match v {
                0 => Some(Syndrome::Nak(NakCode::PsnSequenceError)),
                1 => Some(Syndrome::Nak(NakCode::InvalidRequest)),
                2 => Some(Syndrome::Nak(NakCode::RemoteAccessError)),
                3 => Some(Syndrome::Nak(NakCode::RemoteOperationalError)),
                _ => None,
            },
            _ => None,
        }
    }
}

/// RNR NAK timer of a server refusing a request for overload (its transmit queue ¾ full)
/// or over its tenant's rate: field 14 = 1.28 ms, about what a full transmit queue of a
/// few hundred frames takes to drain at the rates a server reaches with room to spare,
/// so the client's resend finds it drained rather than still full (docs/PROTOCOL.md §6.3).
pub const RNR_TIMER_OVERLOADED: u8 = 14;

/// RNR NAK timer of a replica whose workers' apply rings cannot take a segment: field
/// 12 = 0.64 ms, a few apply bursts (docs/REPLICATION.md §11).
pub const RNR_TIMER_RINGS_FULL: u8 = 12;

/// RNR NAK timer field → minimum wait in microseconds (IBA table "RNR NAK timer field
/// encoding": 1 → 0.01 ms … 31 → 491.52 ms, 0 → 655.36 ms).
pub const fn rnr_timer_micros(timer: u8) -> u32 {
    const T: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];
    T[(timer & 0x1f) as usize]
}

/// A parsed CONNECT frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectFrame {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source IP.
    pub src_ip: Ipv4Addr,
    /// Destination IP.
    pub dst_ip: Ipv4Addr,
    /// BTH P_Key.
    pub pkey: u16,
    /// BTH destination QP: the client QP being connected ([`CM_QPN`] for an OPEN).
    pub dest_qp: u32,
    /// BTH PSN (not used).
    pub psn: u32,
    /// The payload's R_Key and nonce.
    pub connect: Connect,
    /// What it asks for.
    pub join: Join,
}

impl ConnectFrame {
    /// A RESUME's next request PSN; `None` for the other kinds.
    pub const fn resume(&self) -> Option<u32> {
        match self.join {
            Join::Resume { next_psn, .. } => Some(next_psn),
            _ => None,
        }
    }

    /// Reply parameters (as [`Request::reply_params`]).
    pub const fn reply_params(&self, own_mac: MacAddr, own_ip: Ipv4Addr, port: u16) -> FrameParams {
        let mut p = FrameParams::new(own_mac, self.src_mac, own_ip, self.src_ip, port);
        p.pkey = self.pkey;
        p
    }
}

/// A parsed RC Acknowledge frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckFrame {
    /// BTH destination QP (the client's QP).
    pub dest_qp: u32,
    /// BTH PSN: for a NAK or RNR NAK, the PSN the client must resend from.
    pub psn: u32,
    /// What it says.
    pub syndrome: Syndrome,
    /// AETH message sequence number (24 bits).
    pub msn: u32,
}

/// A parsed ACCEPT frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcceptFrame {
    /// BTH destination QP (the client's QP).
    pub dest_qp: u32,
    /// DETH Q_Key.
    pub qkey: u32,
    /// DETH source QP (the server's QPN).
    pub src_qp: u32,
    /// The payload.
    pub accept: Accept,
}

/// What a server receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientFrame<'a> {
    /// A KV batch (RC RDMA WRITE Only).
    Request(Request<'a>),
    /// A connection request (RC SEND Only).
    Connect(ConnectFrame),
}

/// What a client receives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerFrame<'a> {
    /// Results of a batch (UD SEND Only, payload magic `'R'`).
    Response(Response<'a>),
    /// A connection accept (UD SEND Only, payload magic `'C'`).
    Accept(AcceptFrame),
    /// An ACK, RNR NAK or NAK (RC Acknowledge).
    Ack(AckFrame),
}

/// Parses and validates (ICRC included) a frame a server receives: a request or a
/// CONNECT. A CONNECT whose payload is not one is [`DropReason::BadConnect`].
pub fn parse_client_frame(frame: &[u8]) -> Result<ClientFrame<'_>, DropReason> {
    let p = parse_common(
        frame,
        &[opcode::RC_RDMA_WRITE_ONLY, opcode::RC_SEND_ONLY],
        true,
    )?;
    if p.opcode == opcode::RC_RDMA_WRITE_ONLY {
        return frame::request_from_parsed(&p).map(ClientFrame::Request);
    }
    let body = body_without_pad(&p)?;
    let (connect, join) = Connect::decode_any(body).ok_or(DropReason::BadConnect)?;
    Ok(ClientFrame::Connect(ConnectFrame {
        src_mac: p.src_mac,
        dst_mac: p.dst_mac,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        pkey: p.pkey,
        dest_qp: p.dest_qp,
        psn: p.psn,
        connect,
        join,
    }))
}

/// Parses and validates (ICRC included) a frame a client receives: a response, an
/// ACCEPT or an RC Acknowledge.
pub fn parse_server_frame(frame: &[u8]) -> Result<ServerFrame<'_>, DropReason> {
    let p = parse_common(frame, &[opcode::UD_SEND_ONLY, opcode::RC_ACKNOWLEDGE], true)?;
    if p.opcode == opcode::RC_ACKNOWLEDGE {
        let aeth = body_without_pad(&p)?;
        let [s, m0, m1, m2] =
            *<&[u8; ib::AETH_LEN]>::try_from(aeth).map_err(|_| DropReason::LengthMismatch)?;
        let syndrome = Syndrome::from_byte(s).ok_or(DropReason::BadPayload)?;
        return Ok(ServerFrame::Ack(AckFrame {
            dest_qp: p.dest_qp,
            psn: p.psn,
            syndrome,
            msn: u32::from_be_bytes([0, m0, m1, m2]),
        }));
    }
    let resp = frame::response_from_parsed(&p)?;
    if resp.payload.first() == Some(&CONNECT_MAGIC) {
        let accept = Accept::decode(resp.payload).ok_or(DropReason::BadPayload)?;
        let rest = p
            .rest
            .get(..ib::DETH_LEN)
            .ok_or(DropReason::TruncatedDeth)?;
        let deth = Deth::new_unchecked(rest);
        return Ok(ServerFrame::Accept(AcceptFrame {
            dest_qp: p.dest_qp,
            qkey: deth.qkey(),
            src_qp: deth.src_qp(),
            accept,
        }));
    }
    Ok(ServerFrame::Response(resp))
}

/// The bytes after the BTH without pad (the frame had no extension header).
fn body_without_pad<'a>(p: &Parsed<'a>) -> Result<&'a [u8], DropReason> {
    let len = p
        .rest
        .len()
        .checked_sub(p.pad)
        .ok_or(DropReason::LengthMismatch)?;
    Ok(&p.rest[..len])
}

/// Writes a whole CONNECT frame into `buf`; returns its length.
pub fn emit_connect(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    connect: &Connect,
) -> Result<usize, EmitError> {
    let mut payload = [0u8; CONNECT_LEN];
    connect.encode(&mut payload);
    crate::repl::emit_send(buf, params, dest_qp, psn, &payload)
}

/// Writes a whole connection-management frame (`join` with `connect`'s fields) into
/// `buf`; returns its length.
pub fn emit_join(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    connect: &Connect,
    join: &Join,
) -> Result<usize, EmitError> {
    let mut payload = [0u8; MAX_JOIN_LEN];
    let n = connect.encode_join(join, &mut payload);
    crate::repl::emit_send(buf, params, dest_qp, 0, &payload[..n])
}

/// Writes a whole RESUME frame into `buf` (the incarnation `connect` goes on at
/// request PSN `next_psn`); returns its length.
pub fn emit_resume(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    connect: &Connect,
    next_psn: u32,
) -> Result<usize, EmitError> {
    let mut payload = [0u8; RESUME_LEN];
    connect.encode_resume(next_psn, &mut payload);
    crate::repl::emit_send(buf, params, dest_qp, psn, &payload)
}

/// Writes a whole ACCEPT frame into `buf`; returns its length.
pub fn emit_accept(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    qkey: u32,
    src_qp: u32,
    accept: &Accept,
) -> Result<usize, EmitError> {
    let len = accept.payload_len();
    let h = emit_response_headers(buf, params, dest_qp, 0, qkey, src_qp, len)?;
    let mut payload = [0u8; OPENED_ACCEPT_LEN];
    accept.encode_into(&mut payload);
    buf[h..h + len].copy_from_slice(&payload[..len]);
    finalize(buf)
}

/// Writes a whole RC Acknowledge frame (BTH PSN `psn`, AETH `syndrome` + `msn`) into
/// `buf`; returns its length.
pub fn emit_ack(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    syndrome: Syndrome,
    msn: u32,
) -> Result<usize, EmitError> {
    emit_lower(
        buf,
        params,
        opcode::RC_ACKNOWLEDGE,
        dest_qp,
        psn,
        ib::AETH_LEN,
        ACK_FRAME_LEN,
    )?;
    let m = (msn & ib::MASK_24).to_be_bytes();
    buf[EXT_OFF..EXT_OFF + ib::AETH_LEN].copy_from_slice(&[syndrome.to_byte(), m[1], m[2], m[3]]);
    finalize(buf)
}

/// The worked example's addresses (`docs/PROTOCOL.md` §8): client → server.
fn sample_params(to_server: bool) -> FrameParams {
    let (c, s) = ([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let (ci, si) = (Ipv4Addr::new(10, 0, 0, 1), Ipv4Addr::new(10, 0, 0, 2));
    if to_server {
        FrameParams::new(c, s, ci, si, 0xc000)
    } else {
        FrameParams::new(s, c, si, ci, 0xc000)
    }
}

/// Builds the worked-example CONNECT (QP 0x11, R_Key 0x1234abcd, nonce
/// 0x0102030405060708) into `buf`; returns its length.
#[doc(hidden)]
pub fn sample_connect(buf: &mut [u8]) -> usize {
    let c = Connect {
        rkey: 0x1234_abcd,
        nonce: 0x0102_0304_0506_0708,
    };
    emit_connect(buf, &sample_params(true), 0x11, 0, &c).expect("buffer fits")
}

/// Builds the worked-example ACCEPT (W 32, request PSN 0x100, response PSN 0x100,
/// slot 32768 B, region 0x10000) into `buf`; returns its length.
#[doc(hidden)]
pub fn sample_accept(buf: &mut [u8]) -> usize {
    let a = Accept {
        nonce: 0x0102_0304_0506_0708,
        credits: 32,
        request_psn: 0x100,
        response_psn: 0x100,
        slot_size: 32768,
        region_va: 0x1_0000,
        resumed: false,
        opened: None,
    };
    emit_accept(buf, &sample_params(false), 0x11, 0x1111_1111, 0x01, &a).expect("buffer fits")
}

/// Builds the worked-example NAK "PSN sequence error" expecting PSN 0x101 into
/// `buf`; returns its length.
#[doc(hidden)]
pub fn sample_nak(buf: &mut [u8]) -> usize {
    let s = Syndrome::Nak(NakCode::PsnSequenceError);
    emit_ack(buf, &sample_params(false), 0x11, 0x101, s, 0).expect("buffer fits")
}

/// Builds one sample frame into a buffer; returns its length.
#[doc(hidden)]
pub type SampleBuilder = fn(&mut [u8]) -> usize;

/// Every worked-example frame of `docs/PROTOCOL.md` §8, by name, in the document's
/// order (for `examples/dump_frames` and `tests/protocol_doc.rs`).
#[doc(hidden)]
pub fn samples() -> [(&'static str, SampleBuilder); 5] {
    [
        ("connect", sample_connect),
        ("accept", sample_accept),
        ("request", frame::sample_request),
        ("response", frame::sample_response),
        ("nak", sample_nak),
    ]
}

// The fixed frame lengths above assume these header sizes.
const _: () = assert!(EXT_OFF == ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + 12);

#[cfg(test)]
mod tests;
