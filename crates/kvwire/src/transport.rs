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
    FrameParams, Parsed, Request, Response, EXT_OFF, RESPONSE_HEADER_LEN,
};
use crate::ib::{self, opcode, Deth};
use crate::icrc::ICRC_LEN;
use crate::{ethernet, ipv4, udp};
use core::net::Ipv4Addr;

/// First byte of CONNECT and ACCEPT payloads (`'C'`; a response batch starts with `'R'`).
pub const CONNECT_MAGIC: u8 = 0x43;
/// Protocol version carried by CONNECT and ACCEPT.
pub const PROTOCOL_VERSION: u8 = 2;
/// CONNECT payload length.
pub const CONNECT_LEN: usize = 16;
/// ACCEPT payload length.
pub const ACCEPT_LEN: usize = 40;
/// Kind byte of a CONNECT.
pub const KIND_CONNECT: u8 = 1;
/// Kind byte of an ACCEPT.
pub const KIND_ACCEPT: u8 = 2;
/// Kind byte of a RESUME (a CONNECT that continues an incarnation on another node).
pub const KIND_RESUME: u8 = 3;
/// RESUME payload length: a CONNECT's 16 bytes and the next request PSN.
pub const RESUME_LEN: usize = CONNECT_LEN + 4;
/// ACCEPT flag (byte 3): the incarnation was resumed (answer to a RESUME).
pub const ACCEPT_RESUMED: u8 = 0x01;
/// Default request window (credits) per client QP.
pub const DEFAULT_CREDITS: u16 = 32;
/// Largest request window a server accepts in its configuration.
pub const MAX_CREDITS: u16 = 1024;
/// Length of a CONNECT frame.
pub const CONNECT_FRAME_LEN: usize = EXT_OFF + CONNECT_LEN + ICRC_LEN;
/// Length of a RESUME frame.
pub const RESUME_FRAME_LEN: usize = EXT_OFF + RESUME_LEN + ICRC_LEN;
/// Length of an ACCEPT frame.
pub const ACCEPT_FRAME_LEN: usize = RESPONSE_HEADER_LEN + ACCEPT_LEN + ICRC_LEN;
/// Length of an RC Acknowledge frame.
pub const ACK_FRAME_LEN: usize = EXT_OFF + ib::AETH_LEN + ICRC_LEN;

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

/// A client's connection request: the R_Key the operator admitted its QP with, and
/// a nonce naming this incarnation, larger than any earlier incarnation's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Connect {
    /// The QP's R_Key.
    pub rkey: u32,
    /// Incarnation nonce (clients use the wall clock in ns).
    pub nonce: u64,
}

impl Connect {
    /// Writes the 16-byte payload.
    pub fn encode(&self, out: &mut [u8; CONNECT_LEN]) {
        out[0] = CONNECT_MAGIC;
        out[1] = PROTOCOL_VERSION;
        out[2] = KIND_CONNECT;
        out[3] = 0;
        out[4..8].copy_from_slice(&self.rkey.to_be_bytes());
        out[8..16].copy_from_slice(&self.nonce.to_be_bytes());
    }

    /// Reads a CONNECT payload (exactly [`CONNECT_LEN`] bytes).
    pub fn decode(p: &[u8]) -> Option<Connect> {
        let p: &[u8; CONNECT_LEN] = p.try_into().ok()?;
        Self::decode_kind(p, KIND_CONNECT)
    }

    /// Writes the 20-byte RESUME payload: this incarnation (`rkey`, `nonce`) goes on
    /// at request PSN `next_psn` (the client's oldest unanswered request, or its next
    /// one when none is unanswered).
    pub fn encode_resume(&self, next_psn: u32, out: &mut [u8; RESUME_LEN]) {
        let mut c = [0u8; CONNECT_LEN];
        self.encode(&mut c);
        c[2] = KIND_RESUME;
        out[..CONNECT_LEN].copy_from_slice(&c);
        out[CONNECT_LEN..].copy_from_slice(&(next_psn & ib::MASK_24).to_be_bytes());
    }

    /// Reads a CONNECT (16 bytes, `resume` `None`) or a RESUME payload (20 bytes,
    /// `resume` = its next request PSN).
    pub fn decode_any(p: &[u8]) -> Option<(Connect, Option<u32>)> {
        match p.len() {
            CONNECT_LEN => Self::decode(p).map(|c| (c, None)),
            RESUME_LEN => {
                let head: &[u8; CONNECT_LEN] = p[..CONNECT_LEN].try_into().ok()?;
                let c = Self::decode_kind(head, KIND_RESUME)?;
                let n = u32::from_be_bytes([p[16], p[17], p[18], p[19]]);
                (n <= ib::MASK_24).then_some((c, Some(n)))
            }
            _ => None,
        }
    }

    fn decode_kind(p: &[u8; CONNECT_LEN], kind: u8) -> Option<Connect> {
        if p[0] != CONNECT_MAGIC || p[1] != PROTOCOL_VERSION || p[2] != kind || p[3] != 0 {
            return None;
        }
        Some(Connect {
            rkey: u32::from_be_bytes([p[4], p[5], p[6], p[7]]),
            nonce: u64::from_be_bytes([p[8], p[9], p[10], p[11], p[12], p[13], p[14], p[15]]),
        })
    }
}

/// The server's answer to a CONNECT: the agreed starting PSNs and the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Accept {
    /// The CONNECT's nonce, echoed.
    pub nonce: u64,
    /// Request window `W` (a power of two).
    pub credits: u16,
    /// PSN of the client's first request.
    pub request_psn: u32,
    /// PSN of the server's first response.
    pub response_psn: u32,
    /// Bytes per request slot.
    pub slot_size: u32,
    /// Start of the request ring (slot 0).
    pub region_va: u64,
    /// The answer to a RESUME that continued the incarnation ([`ACCEPT_RESUMED`]):
    /// `request_psn` is the RESUME's next PSN and unanswered requests are resent.
    /// `false` for a CONNECT, and for a RESUME the node could not continue (a new
    /// incarnation began: unanswered requests have an unknown outcome).
    pub resumed: bool,
}

impl Accept {
    /// Writes the 40-byte payload.
    pub fn encode(&self, out: &mut [u8; ACCEPT_LEN]) {
        out.fill(0);
        out[0] = CONNECT_MAGIC;
        out[1] = PROTOCOL_VERSION;
        out[2] = KIND_ACCEPT;
        out[3] = if self.resumed { ACCEPT_RESUMED } else { 0 };
        out[4..6].copy_from_slice(&self.credits.to_be_bytes());
        out[8..16].copy_from_slice(&self.nonce.to_be_bytes());
        out[16..20].copy_from_slice(&(self.request_psn & ib::MASK_24).to_be_bytes());
        out[20..24].copy_from_slice(&(self.response_psn & ib::MASK_24).to_be_bytes());
        out[24..28].copy_from_slice(&self.slot_size.to_be_bytes());
        out[32..40].copy_from_slice(&self.region_va.to_be_bytes());
    }

    /// Reads an ACCEPT payload (at least [`ACCEPT_LEN`] bytes; more are ignored).
    pub fn decode(p: &[u8]) -> Option<Accept> {
        let p = p.get(..ACCEPT_LEN)?;
        if p[0] != CONNECT_MAGIC || p[1] != PROTOCOL_VERSION || p[2] != KIND_ACCEPT {
            return None;
        }
        let be32 = |o: usize| u32::from_be_bytes([p[o], p[o + 1], p[o + 2], p[o + 3]]);
        let be64 = |o: usize| (u64::from(be32(o)) << 32) | u64::from(be32(o + 4));
        Some(Accept {
            nonce: be64(8),
            credits: u16::from_be_bytes([p[4], p[5]]),
            request_psn: be32(16) & ib::MASK_24,
            response_psn: be32(20) & ib::MASK_24,
            slot_size: be32(24),
            region_va: be64(32),
            resumed: p[3] & ACCEPT_RESUMED != 0,
        })
    }
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
    /// BTH destination QP: the client QP being connected.
    pub dest_qp: u32,
    /// BTH PSN (not used).
    pub psn: u32,
    /// The payload.
    pub connect: Connect,
    /// A RESUME: the request PSN the incarnation goes on at. `None`: a CONNECT.
    pub resume: Option<u32>,
}

impl ConnectFrame {
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
    let (connect, resume) = Connect::decode_any(body).ok_or(DropReason::BadConnect)?;
    Ok(ClientFrame::Connect(ConnectFrame {
        src_mac: p.src_mac,
        dst_mac: p.dst_mac,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        pkey: p.pkey,
        dest_qp: p.dest_qp,
        psn: p.psn,
        connect,
        resume,
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
    let h = emit_response_headers(buf, params, dest_qp, 0, qkey, src_qp, ACCEPT_LEN)?;
    let mut payload = [0u8; ACCEPT_LEN];
    accept.encode(&mut payload);
    buf[h..h + ACCEPT_LEN].copy_from_slice(&payload);
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
