//! Whole-frame parsing and emission of KV-Direct RoCEv2 packets.
//!
//! ```text
//! request : Ethernet(14) IPv4(20) UDP(8) BTH(12, RC RDMA WRITE ONLY) RETH(16) payload pad(0..3) ICRC(4)
//! response: Ethernet(14) IPv4(20) UDP(8) BTH(12, UD SEND ONLY)       DETH(8)  payload pad(0..3) ICRC(4)
//! ```
//!
//! The emitters write headers first, the caller writes the payload in place
//! at offset [`REQUEST_HEADER_LEN`] / [`RESPONSE_HEADER_LEN`] (e.g. with a
//! [`crate::BatchWriter`]), then [`finalize`] zeroes the pad bytes and fills
//! the IPv4 checksum and the ICRC. No function here allocates or panics.

use crate::ethernet::{self, EthernetFrame, MacAddr};
use crate::ib::{self, opcode, Bth, Deth, Reth};
use crate::icrc::{self, ICRC_LEN};
use crate::ipv4::{self, Ipv4Packet};
use crate::udp::{self, UdpPacket};
use core::net::Ipv4Addr;

/// Bytes before the payload of a request frame (14+20+8+12+16).
pub const REQUEST_HEADER_LEN: usize =
    ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + ib::BTH_LEN + ib::RETH_LEN;
/// Bytes before the payload of a response frame (14+20+8+12+8).
pub const RESPONSE_HEADER_LEN: usize =
    ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + ib::BTH_LEN + ib::DETH_LEN;
/// Default IP MTU.
pub const DEFAULT_MTU: usize = 1500;
/// Largest IP MTU supported (jumbo frames).
pub const MAX_MTU: usize = 9000;
/// Offset of the IPv4 header in a frame.
const IP_OFF: usize = ethernet::HEADER_LEN;
/// Offset of the UDP header in a frame.
const UDP_OFF: usize = IP_OFF + ipv4::HEADER_LEN;
/// Offset of the BTH in a frame.
const BTH_OFF: usize = UDP_OFF + udp::HEADER_LEN;
/// Offset of the extension header (RETH/DETH) in a frame.
pub(crate) const EXT_OFF: usize = BTH_OFF + ib::BTH_LEN;

/// Pad bytes needed to bring `payload_len` to a multiple of 4.
#[inline]
pub const fn pad_len(payload_len: usize) -> usize {
    (4 - (payload_len & 3)) & 3
}

/// Largest request payload for an IP MTU (1500 → 1440), a multiple of 4.
#[inline]
pub const fn request_payload_capacity(mtu: usize) -> usize {
    mtu.saturating_sub(REQUEST_HEADER_LEN - ethernet::HEADER_LEN + ICRC_LEN) & !3
}

/// Largest response payload for an IP MTU (1500 → 1448), a multiple of 4.
#[inline]
pub const fn response_payload_capacity(mtu: usize) -> usize {
    mtu.saturating_sub(RESPONSE_HEADER_LEN - ethernet::HEADER_LEN + ICRC_LEN) & !3
}

/// Total frame length of a request carrying `payload_len` bytes.
#[inline]
pub const fn request_frame_len(payload_len: usize) -> usize {
    REQUEST_HEADER_LEN + payload_len + pad_len(payload_len) + ICRC_LEN
}

/// Total frame length of a response carrying `payload_len` bytes.
#[inline]
pub const fn response_frame_len(payload_len: usize) -> usize {
    RESPONSE_HEADER_LEN + payload_len + pad_len(payload_len) + ICRC_LEN
}

/// Why a frame was dropped. One enum for every drop counter of the
/// dataplane and pktgen: the first group is detected by this crate's
/// parsers, the second by their callers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than Ethernet + IPv4 + UDP headers.
    TooShort = 0,
    /// EtherType is not IPv4.
    NotIpv4,
    /// IP version ≠ 4, IHL ≠ 5 (options are not accepted), fragment, or
    /// total length inconsistent with the frame.
    BadIpHeader,
    /// IPv4 header checksum wrong.
    BadIpChecksum,
    /// IP protocol is not UDP.
    NotUdp,
    /// UDP destination port is not 4791.
    NotRoce,
    /// UDP length inconsistent with the IP payload.
    BadUdpLength,
    /// UDP payload shorter than BTH + ICRC.
    TruncatedBth,
    /// BTH opcode is not the expected one (requests: 0x0A, responses: 0x64).
    BadBthOpcode,
    /// BTH transport version ≠ 0.
    BadBthVersion,
    /// Too short for the RETH.
    TruncatedReth,
    /// Too short for the DETH.
    TruncatedDeth,
    /// Pad count larger than the payload, or RETH DMA length ≠ payload length.
    LengthMismatch,
    /// ICRC wrong.
    BadIcrc,
    /// (caller) Destination MAC/IP is not this host.
    WrongDestination,
    /// (caller) Destination QP not admitted.
    UnknownQp,
    /// (caller) R_Key does not match the QP's key.
    BadRKey,
    /// (caller) VA/length outside the QP's request region.
    BadVa,
    /// (caller) Q_Key mismatch on a response.
    BadQKey,
    /// (caller) PSN older than the window behind the expected one: dropped, not
    /// executed again.
    PsnDuplicate,
    /// (caller) The KV batch payload header is malformed.
    BadPayload,
    /// (caller) TX ring full, the response was dropped.
    TxFull,
    /// (caller) No mbuf for the response.
    NoMbuf,
    /// (caller) The configured MTU leaves no room for a response header and one bare
    /// result: nothing can be answered.
    MtuTooSmall,
    /// (caller) The tx buffer is shorter than the response frame.
    TxBufferTooSmall,
    /// (caller) A response frame could not be encoded (a server bug: the payload was
    /// not in the state the encoder requires).
    ResponseEncode,
    /// (caller) A request for another partition's worker found its hand-off ring full.
    HandoffFull,
    /// A CONNECT whose payload is not a valid protocol v2 CONNECT.
    BadConnect,
    /// (caller) A request on a QP with no connection (answered NAK "invalid request").
    NotConnected,
    /// (caller) A request ahead of the expected PSN (go-back-N: not served; the first
    /// of a gap is answered NAK "PSN sequence error").
    PsnAhead,
    /// (caller) A CONNECT with a nonce older than the QP's current incarnation.
    StaleConnect,
    /// (caller) A duplicate request inside the window whose cached response was
    /// overwritten (not executed again, not answered).
    ReplayMissing,
    /// (caller) A request refused because the transmit side is overloaded (answered
    /// RNR NAK).
    Overloaded,
    /// (caller) A RESUME on a node that does not take writes (not the master): not
    /// answered, so the client keeps asking until this node is promoted, or moves on.
    ResumeNotMaster,
    /// (caller) A RESUME or CLOSE of an opened QP without its connection secret, or
    /// with another one.
    BadSecret,
    /// (caller) An OPEN the server could not serve: no free QP in its partition
    /// (`server.max_connections`), or a partition it does not have.
    NoFreeQp,
    /// (caller) An OPEN whose tenant credential does not hold (unknown tenant, wrong
    /// proof, stale time, the tenant's connection quota reached), or without one on
    /// a server that takes no anonymous clients.
    BadCredential,
    /// (caller) An OPEN with a credential from a source that failed too many this
    /// second: dropped without checking it.
    AuthThrottled,
    /// (caller) A request over its tenant's requests-per-second quota (answered RNR
    /// NAK).
    OverQuota,
    /// (caller) A frame to a QP bound to another source MAC/IP than the frame's (an
    /// opened QP is bound to the address that opened it, a static one to its
    /// configured address); answered as a closed QP is, within the refusal rate.
    WrongSource,
    /// (caller) An OPEN of a tenant at its `max_connections` on the worker, or one that
    /// would take a QP another tenant's reserve holds (`reserved_connections`). Not a
    /// failed credential: it does not count toward the OPEN throttle.
    ConnectionQuota,
    /// (caller) A frame that would be answered NAK "invalid request" (a closed or
    /// unknown opened QPN, a wrong R_Key or source) beyond the worker's refusal rate:
    /// dropped unanswered.
    RefusalThrottled,
}

impl DropReason {
    /// Number of reasons.
    pub const COUNT: usize = 42;
    /// All reasons, indexed by their `u8` value.
    pub const ALL: [DropReason; Self::COUNT] = [
        DropReason::TooShort,
        DropReason::NotIpv4,
        DropReason::BadIpHeader,
        DropReason::BadIpChecksum,
        DropReason::NotUdp,
        DropReason::NotRoce,
        DropReason::BadUdpLength,
        DropReason::TruncatedBth,
        DropReason::BadBthOpcode,
        DropReason::BadBthVersion,
        DropReason::TruncatedReth,
        DropReason::TruncatedDeth,
        DropReason::LengthMismatch,
        DropReason::BadIcrc,
        DropReason::WrongDestination,
        DropReason::UnknownQp,
        DropReason::BadRKey,
        DropReason::BadVa,
        DropReason::BadQKey,
        DropReason::PsnDuplicate,
        DropReason::BadPayload,
        DropReason::TxFull,
        DropReason::NoMbuf,
        DropReason::MtuTooSmall,
        DropReason::TxBufferTooSmall,
        DropReason::ResponseEncode,
        DropReason::HandoffFull,
        DropReason::BadConnect,
        DropReason::NotConnected,
        DropReason::PsnAhead,
        DropReason::StaleConnect,
        DropReason::ReplayMissing,
        DropReason::Overloaded,
        DropReason::ResumeNotMaster,
        DropReason::BadSecret,
        DropReason::NoFreeQp,
        DropReason::BadCredential,
        DropReason::AuthThrottled,
        DropReason::OverQuota,
        DropReason::WrongSource,
        DropReason::ConnectionQuota,
        DropReason::RefusalThrottled,
    ];
    /// Index for counter arrays (`== self as usize`).
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }
    /// Stable snake_case name for stats output.
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::TooShort => "too_short",
            DropReason::NotIpv4 => "not_ipv4",
            DropReason::BadIpHeader => "bad_ip_header",
            DropReason::BadIpChecksum => "bad_ip_checksum",
            DropReason::NotUdp => "not_udp",
            DropReason::NotRoce => "not_roce",
            DropReason::BadUdpLength => "bad_udp_length",
            DropReason::TruncatedBth => "truncated_bth",
            DropReason::BadBthOpcode => "bad_bth_opcode",
            DropReason::BadBthVersion => "bad_bth_version",
            DropReason::TruncatedReth => "truncated_reth",
            DropReason::TruncatedDeth => "truncated_deth",
            DropReason::LengthMismatch => "length_mismatch",
            DropReason::BadIcrc => "bad_icrc",
            DropReason::WrongDestination => "wrong_destination",
            DropReason::UnknownQp => "unknown_qp",
            DropReason::BadRKey => "bad_rkey",
            DropReason::BadVa => "bad_va",
            DropReason::BadQKey => "bad_qkey",
            DropReason::PsnDuplicate => "psn_duplicate",
            DropReason::BadPayload => "bad_payload",
            DropReason::TxFull => "tx_full",
            DropReason::NoMbuf => "no_mbuf",
            DropReason::MtuTooSmall => "mtu_too_small",
            DropReason::TxBufferTooSmall => "tx_buffer_too_small",
            DropReason::ResponseEncode => "response_encode",
            DropReason::HandoffFull => "handoff_full",
            DropReason::BadConnect => "bad_connect",
            DropReason::NotConnected => "not_connected",
            DropReason::PsnAhead => "psn_ahead",
            DropReason::StaleConnect => "stale_connect",
            DropReason::ReplayMissing => "replay_missing",
            DropReason::Overloaded => "overloaded",
            DropReason::ResumeNotMaster => "resume_not_master",
            DropReason::BadSecret => "bad_secret",
            DropReason::NoFreeQp => "no_free_qp",
            DropReason::BadCredential => "bad_credential",
            DropReason::AuthThrottled => "auth_throttled",
            DropReason::OverQuota => "over_quota",
            DropReason::WrongSource => "wrong_source",
            DropReason::ConnectionQuota => "connection_quota",
            DropReason::RefusalThrottled => "refusal_throttled",
        }
    }
}

impl core::fmt::Display for DropReason {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of the emitters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmitError {
    /// The buffer is shorter than the frame.
    BufferTooSmall,
    /// The payload makes the IP packet longer than 65535 bytes.
    PayloadTooLarge,
    /// `finalize`: the buffer does not hold a frame emitted by this crate.
    NotAFrame,
}

impl core::fmt::Display for EmitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Debug::fmt(self, f)
    }
}

impl std::error::Error for EmitError {}

/// Addressing of an emitted frame (everything below the transport).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameParams {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source IPv4 address.
    pub src_ip: Ipv4Addr,
    /// Destination IPv4 address.
    pub dst_ip: Ipv4Addr,
    /// UDP source port (flow entropy; RoCEv2 uses 0xC000..=0xFFFF).
    pub udp_src_port: u16,
    /// IPv4 TOS (DSCP/ECN) byte, default 0.
    pub tos: u8,
    /// IPv4 TTL, default 64.
    pub ttl: u8,
    /// IPv4 identification, default 0.
    pub ip_id: u16,
    /// BTH partition key, default 0xFFFF.
    pub pkey: u16,
}

impl FrameParams {
    /// Parameters with default TOS 0, TTL 64, IP id 0 and P_Key 0xFFFF.
    pub const fn new(
        src_mac: MacAddr,
        dst_mac: MacAddr,
        src_ip: Ipv4Addr,
        dst_ip: Ipv4Addr,
        udp_src_port: u16,
    ) -> Self {
        FrameParams {
            src_mac,
            dst_mac,
            src_ip,
            dst_ip,
            udp_src_port,
            tos: 0,
            ttl: 64,
            ip_id: 0,
            pkey: ib::DEFAULT_PKEY,
        }
    }
}

/// A parsed, validated request frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source IP.
    pub src_ip: Ipv4Addr,
    /// Destination IP.
    pub dst_ip: Ipv4Addr,
    /// UDP source port.
    pub udp_src_port: u16,
    /// BTH P_Key.
    pub pkey: u16,
    /// BTH destination QP (the server-side QP of this client).
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
    /// BTH AckReq (not acted upon).
    pub ack_req: bool,
    /// RETH virtual address.
    pub va: u64,
    /// RETH R_Key.
    pub rkey: u32,
    /// The KV batch (RETH DMA length bytes, without pad).
    pub payload: &'a [u8],
}

impl Request<'_> {
    /// Frame parameters for the reply of a server whose port has MAC `own_mac` and
    /// IPv4 address `own_ip`: from those, to the request's source MAC and IP, with the
    /// request's P_Key and the given UDP source port.
    ///
    /// The source is the server's own, never the request's destination: a request to
    /// the broadcast MAC (accepted, `docs/PROTOCOL.md` §5) is answered from `own_mac`,
    /// not from ff:ff:ff:ff:ff:ff, which switches drop. Whether the request was for
    /// this server at all (destination MAC = own or broadcast, destination IP = own;
    /// otherwise dropped as [`DropReason::WrongDestination`]) is the caller's check.
    pub const fn reply_params(
        &self,
        own_mac: MacAddr,
        own_ip: Ipv4Addr,
        udp_src_port: u16,
    ) -> FrameParams {
        let mut p = FrameParams::new(own_mac, self.src_mac, own_ip, self.src_ip, udp_src_port);
        p.pkey = self.pkey;
        p
    }
}

/// A parsed, validated response frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Response<'a> {
    /// Source MAC.
    pub src_mac: MacAddr,
    /// Destination MAC.
    pub dst_mac: MacAddr,
    /// Source IP.
    pub src_ip: Ipv4Addr,
    /// Destination IP.
    pub dst_ip: Ipv4Addr,
    /// UDP source port.
    pub udp_src_port: u16,
    /// BTH P_Key.
    pub pkey: u16,
    /// BTH destination QP (the client's UD QP).
    pub dest_qp: u32,
    /// BTH PSN (the server's per-client response sequence).
    pub psn: u32,
    /// DETH Q_Key.
    pub qkey: u32,
    /// DETH source QP (the server's QP).
    pub src_qp: u32,
    /// The response batch (without pad).
    pub payload: &'a [u8],
}

/// Fields common to both parsers.
pub(crate) struct Parsed<'a> {
    pub opcode: u8,
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
    pub src_ip: Ipv4Addr,
    pub dst_ip: Ipv4Addr,
    pub udp_src_port: u16,
    pub pkey: u16,
    pub dest_qp: u32,
    pub psn: u32,
    pub ack_req: bool,
    /// Extension header + payload + pad (ICRC excluded).
    pub rest: &'a [u8],
    pub pad: usize,
}

#[inline]
pub(crate) fn parse_common<'a>(
    frame: &'a [u8],
    want_opcodes: &[u8],
    check_icrc: bool,
) -> Result<Parsed<'a>, DropReason> {
    if frame.len() < EXT_OFF {
        return Err(DropReason::TooShort);
    }
    let eth = EthernetFrame::new_unchecked(frame);
    if eth.ethertype() != ethernet::ETHERTYPE_IPV4 {
        return Err(DropReason::NotIpv4);
    }
    let ip_bytes = &frame[IP_OFF..];
    let ip = Ipv4Packet::new_unchecked(ip_bytes);
    if ip.version() != 4 || ip.header_len() != ipv4::HEADER_LEN || ip.is_fragment() {
        return Err(DropReason::BadIpHeader);
    }
    if ip.check_len().is_err() {
        return Err(DropReason::BadIpHeader);
    }
    if !ip.verify_checksum() {
        return Err(DropReason::BadIpChecksum);
    }
    if ip.protocol() != ipv4::PROTO_UDP {
        return Err(DropReason::NotUdp);
    }
    let ip_payload = &ip_bytes[ipv4::HEADER_LEN..usize::from(ip.total_len())];
    let udp = UdpPacket::new_checked(ip_payload).map_err(|_| DropReason::BadUdpLength)?;
    if usize::from(udp.len()) != ip_payload.len() {
        return Err(DropReason::BadUdpLength);
    }
    if udp.dst_port() != udp::ROCEV2_PORT {
        return Err(DropReason::NotRoce);
    }
    let udp_payload = &ip_payload[udp::HEADER_LEN..];
    if udp_payload.len() < ib::BTH_LEN + ICRC_LEN {
        return Err(DropReason::TruncatedBth);
    }
    let bth = Bth::new_unchecked(udp_payload);
    if !want_opcodes.contains(&bth.opcode()) {
        return Err(DropReason::BadBthOpcode);
    }
    if bth.tver() != 0 {
        return Err(DropReason::BadBthVersion);
    }
    let body_end = udp_payload.len() - ICRC_LEN;
    if check_icrc {
        let ip_total = usize::from(ip.total_len());
        let covered = ip_bytes
            .get(..ip_total - ICRC_LEN)
            .ok_or(DropReason::BadIcrc)?;
        let want = icrc::compute(covered, ipv4::HEADER_LEN).ok_or(DropReason::BadIcrc)?;
        let t = &udp_payload[body_end..];
        if u32::from_le_bytes([t[0], t[1], t[2], t[3]]) != want {
            return Err(DropReason::BadIcrc);
        }
    }
    Ok(Parsed {
        opcode: bth.opcode(),
        src_mac: eth.src_addr(),
        dst_mac: eth.dst_addr(),
        src_ip: ip.src_addr(),
        dst_ip: ip.dst_addr(),
        udp_src_port: udp.src_port(),
        pkey: bth.pkey(),
        dest_qp: bth.dest_qp(),
        psn: bth.psn(),
        ack_req: bth.ack_req(),
        rest: &udp_payload[ib::BTH_LEN..body_end],
        pad: usize::from(bth.pad_count()),
    })
}

/// Parses and validates a request frame (RC RDMA WRITE ONLY + RETH),
/// including the ICRC. QP, R_Key, VA and PSN checks are the caller's.
pub fn parse_request(frame: &[u8]) -> Result<Request<'_>, DropReason> {
    parse_request_inner(frame, true)
}

/// Like [`parse_request`] but skips the ICRC check (for NICs that verify it
/// in hardware, or benchmarks that measure its cost).
pub fn parse_request_unverified(frame: &[u8]) -> Result<Request<'_>, DropReason> {
    parse_request_inner(frame, false)
}

#[inline]
fn parse_request_inner(frame: &[u8], check_icrc: bool) -> Result<Request<'_>, DropReason> {
    let p = parse_common(frame, &[opcode::RC_RDMA_WRITE_ONLY], check_icrc)?;
    request_from_parsed(&p)
}

/// The request of a parsed RC RDMA WRITE Only frame (RETH checks).
#[inline]
pub(crate) fn request_from_parsed<'a>(p: &Parsed<'a>) -> Result<Request<'a>, DropReason> {
    if p.rest.len() < ib::RETH_LEN {
        return Err(DropReason::TruncatedReth);
    }
    let reth = Reth::new_unchecked(&p.rest[..ib::RETH_LEN]);
    let body = &p.rest[ib::RETH_LEN..];
    let len = body
        .len()
        .checked_sub(p.pad)
        .ok_or(DropReason::LengthMismatch)?;
    if u64::from(reth.dma_len()) != len as u64 {
        return Err(DropReason::LengthMismatch);
    }
    Ok(Request {
        src_mac: p.src_mac,
        dst_mac: p.dst_mac,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        udp_src_port: p.udp_src_port,
        pkey: p.pkey,
        dest_qp: p.dest_qp,
        psn: p.psn,
        ack_req: p.ack_req,
        va: reth.va(),
        rkey: reth.rkey(),
        payload: &body[..len],
    })
}

/// Parses and validates a response frame (UD SEND ONLY + DETH), including
/// the ICRC. Q_Key/QP checks are the caller's.
pub fn parse_response(frame: &[u8]) -> Result<Response<'_>, DropReason> {
    let p = parse_common(frame, &[opcode::UD_SEND_ONLY], true)?;
    response_from_parsed(&p)
}

/// The response of a parsed UD SEND Only frame (DETH checks).
pub(crate) fn response_from_parsed<'a>(p: &Parsed<'a>) -> Result<Response<'a>, DropReason> {
    if p.rest.len() < ib::DETH_LEN {
        return Err(DropReason::TruncatedDeth);
    }
    let deth = Deth::new_unchecked(&p.rest[..ib::DETH_LEN]);
    let body = &p.rest[ib::DETH_LEN..];
    let len = body
        .len()
        .checked_sub(p.pad)
        .ok_or(DropReason::LengthMismatch)?;
    Ok(Response {
        src_mac: p.src_mac,
        dst_mac: p.dst_mac,
        src_ip: p.src_ip,
        dst_ip: p.dst_ip,
        udp_src_port: p.udp_src_port,
        pkey: p.pkey,
        dest_qp: p.dest_qp,
        psn: p.psn,
        qkey: deth.qkey(),
        src_qp: deth.src_qp(),
        payload: &body[..len],
    })
}

/// Writes Ethernet/IPv4/UDP/BTH for a frame of `frame_len` bytes; returns
/// the IP packet slice's total length.
pub(crate) fn emit_lower(
    buf: &mut [u8],
    p: &FrameParams,
    bth_opcode: u8,
    dest_qp: u32,
    psn: u32,
    payload_len: usize,
    frame_len: usize,
) -> Result<(), EmitError> {
    let ip_total = frame_len - ethernet::HEADER_LEN;
    if ip_total > usize::from(u16::MAX) {
        return Err(EmitError::PayloadTooLarge);
    }
    let frame = buf.get_mut(..frame_len).ok_or(EmitError::BufferTooSmall)?;
    let mut eth = EthernetFrame::new_unchecked(&mut frame[..]);
    eth.set_dst_addr(p.dst_mac);
    eth.set_src_addr(p.src_mac);
    eth.set_ethertype(ethernet::ETHERTYPE_IPV4);
    let mut ip = Ipv4Packet::new_unchecked(&mut frame[IP_OFF..UDP_OFF]);
    ip.set_version_and_header_len(ipv4::HEADER_LEN);
    ip.set_tos(p.tos);
    ip.set_total_len(ip_total as u16);
    ip.set_ident(p.ip_id);
    ip.set_flags_frag(ipv4::FLAG_DF);
    ip.set_ttl(p.ttl);
    ip.set_protocol(ipv4::PROTO_UDP);
    ip.set_checksum(0);
    ip.set_src_addr(p.src_ip);
    ip.set_dst_addr(p.dst_ip);
    let mut udp = UdpPacket::new_unchecked(&mut frame[UDP_OFF..BTH_OFF]);
    udp.set_src_port(p.udp_src_port);
    udp.set_dst_port(udp::ROCEV2_PORT);
    udp.set_len((ip_total - ipv4::HEADER_LEN) as u16);
    udp.set_checksum(0);
    let mut bth = Bth::new_unchecked(&mut frame[BTH_OFF..EXT_OFF]);
    bth.set_opcode(bth_opcode);
    bth.set_flags(false, false, pad_len(payload_len) as u8, 0);
    bth.set_pkey(p.pkey);
    bth.set_resv8a(0);
    bth.set_dest_qp(dest_qp);
    bth.set_ack_req(false);
    bth.set_psn(psn);
    Ok(())
}

/// Writes the headers of a request frame carrying `payload_len` bytes into
/// `buf` (at least [`request_frame_len`]`(payload_len)` bytes) and returns
/// [`REQUEST_HEADER_LEN`]. Write the payload at that offset, then call
/// [`finalize`].
pub fn emit_request_headers(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    va: u64,
    rkey: u32,
    payload_len: usize,
) -> Result<usize, EmitError> {
    if payload_len > usize::from(u16::MAX) {
        return Err(EmitError::PayloadTooLarge);
    }
    let frame_len = request_frame_len(payload_len);
    emit_lower(
        buf,
        params,
        opcode::RC_RDMA_WRITE_ONLY,
        dest_qp,
        psn,
        payload_len,
        frame_len,
    )?;
    let mut reth = Reth::new_unchecked(&mut buf[EXT_OFF..REQUEST_HEADER_LEN]);
    reth.set_va(va);
    reth.set_rkey(rkey);
    reth.set_dma_len(payload_len as u32);
    Ok(REQUEST_HEADER_LEN)
}

/// Writes the headers of a response frame carrying `payload_len` bytes into
/// `buf` (at least [`response_frame_len`]`(payload_len)` bytes) and returns
/// [`RESPONSE_HEADER_LEN`]. Write the payload at that offset, then call
/// [`finalize`].
pub fn emit_response_headers(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    qkey: u32,
    src_qp: u32,
    payload_len: usize,
) -> Result<usize, EmitError> {
    if payload_len > usize::from(u16::MAX) {
        return Err(EmitError::PayloadTooLarge);
    }
    let frame_len = response_frame_len(payload_len);
    emit_lower(
        buf,
        params,
        opcode::UD_SEND_ONLY,
        dest_qp,
        psn,
        payload_len,
        frame_len,
    )?;
    let mut deth = Deth::new_unchecked(&mut buf[EXT_OFF..RESPONSE_HEADER_LEN]);
    deth.set_qkey(qkey);
    deth.set_src_qp(src_qp);
    Ok(RESPONSE_HEADER_LEN)
}

/// The BTH PSN and the payload of a response frame this side built itself (a
/// server reading back its own cached frame): offsets only, no ICRC or header
/// checks. `None` if `frame` is shorter than its headers, pad and ICRC say.
pub fn response_parts_unchecked(frame: &[u8]) -> Option<(u32, &[u8])> {
    let bth = frame.get(BTH_OFF..BTH_OFF + ib::BTH_LEN)?;
    let psn = u32::from_be_bytes([0, bth[9], bth[10], bth[11]]);
    let pad = usize::from((bth[1] >> 4) & 0x3);
    let end = frame.len().checked_sub(pad + ICRC_LEN)?;
    Some((psn, frame.get(RESPONSE_HEADER_LEN..end)?))
}

/// Completes a frame whose headers were emitted by this module and whose
/// payload is in place: zeroes the pad bytes, computes the IPv4 header
/// checksum and the ICRC. `frame` may be longer than the frame; returns the
/// frame length (14 + IP total length). Can be called again after changing
/// header fields (e.g. the PSN of a template).
pub fn finalize(frame: &mut [u8]) -> Result<usize, EmitError> {
    if frame.len() < EXT_OFF {
        return Err(EmitError::NotAFrame);
    }
    if frame[IP_OFF] != 0x45 {
        return Err(EmitError::NotAFrame);
    }
    let ip_total = usize::from(Ipv4Packet::new_unchecked(&frame[IP_OFF..]).total_len());
    let end = IP_OFF + ip_total;
    let pad = usize::from(Bth::new_unchecked(&frame[BTH_OFF..EXT_OFF]).pad_count());
    if end > frame.len() || end < EXT_OFF + pad + ICRC_LEN {
        return Err(EmitError::NotAFrame);
    }
    let icrc_off = end - ICRC_LEN;
    frame[icrc_off - pad..icrc_off].fill(0);
    Ipv4Packet::new_unchecked(&mut frame[IP_OFF..UDP_OFF]).fill_checksum();
    let crc =
        icrc::compute(&frame[IP_OFF..icrc_off], ipv4::HEADER_LEN).ok_or(EmitError::NotAFrame)?;
    frame[icrc_off..end].copy_from_slice(&crc.to_le_bytes());
    Ok(end)
}

/// Builds the worked-example request of `docs/PROTOCOL.md` into `buf`
/// (PUT "hello"="world!" then GET "hello", batch 0x01020304) and returns its
/// length. Used by tests, the fuzz seed corpus and `examples/dump_frames`.
#[doc(hidden)]
pub fn sample_request(buf: &mut [u8]) -> usize {
    use crate::payload::{BatchWriter, KvOp};
    let params = FrameParams::new(
        [2, 0, 0, 0, 0, 1],
        [2, 0, 0, 0, 0, 2],
        Ipv4Addr::new(10, 0, 0, 1),
        Ipv4Addr::new(10, 0, 0, 2),
        0xc000,
    );
    let mut payload = [0u8; 64];
    let mut w = BatchWriter::new(&mut payload, 0x0102_0304).expect("fits");
    w.push(&KvOp::Put {
        key: b"hello",
        value: b"world!",
    })
    .expect("fits");
    w.push(&KvOp::Get { key: b"hello" }).expect("fits");
    let len = w.finish();
    let h = emit_request_headers(buf, &params, 0x11, 0x100, 0x1_0000, 0x1234_abcd, len)
        .expect("buffer fits");
    buf[h..h + len].copy_from_slice(&payload[..len]);
    finalize(buf).expect("frame")
}

/// Builds the worked-example response (results OK and OK "world!") into
/// `buf` and returns its length.
#[doc(hidden)]
pub fn sample_response(buf: &mut [u8]) -> usize {
    use crate::payload::{ResponseWriter, Status};
    let params = FrameParams::new(
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 1],
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 1),
        0xc000,
    );
    let mut payload = [0u8; 64];
    let mut w = ResponseWriter::new(&mut payload, 0x0102_0304, 0).expect("fits");
    w.push(Status::Ok, &[]).expect("fits");
    w.push(Status::Ok, b"world!").expect("fits");
    let len = w.finish();
    let h = emit_response_headers(buf, &params, 0x11, 0x100, 0x1111_1111, 0x01, len)
        .expect("buffer fits");
    buf[h..h + len].copy_from_slice(&payload[..len]);
    finalize(buf).expect("frame")
}

/// Formats `bytes` as offset-prefixed lines of 16 hex bytes (the format of
/// the dumps in `docs/PROTOCOL.md`).
#[doc(hidden)]
pub fn hexdump(bytes: &[u8]) -> String {
    use core::fmt::Write;
    let mut s = String::new();
    for (i, chunk) in bytes.chunks(16).enumerate() {
        let _ = write!(s, "{:04x} ", i * 16);
        for b in chunk {
            let _ = write!(s, " {b:02x}");
        }
        s.push('\n');
    }
    s
}

#[cfg(test)]
mod tests;
