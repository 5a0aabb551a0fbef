//! Frames of the replication link (docs/REPLICATION.md): the stream as RC
//! RDMA WRITE Only with Immediate, control messages as RC SEND Only, and RC
//! Acknowledge for the transport's ACK/NAK.
//!
//! ```text
//! segment : Ethernet IPv4 UDP BTH(0x0B) RETH(16) ImmDt(4) payload pad ICRC   master → replica
//! control : Ethernet IPv4 UDP BTH(0x04)                   payload pad ICRC   both ways
//! ack/nak : Ethernet IPv4 UDP BTH(0x11) AETH(4)                       ICRC   replica → master
//! ```
//!
//! The payloads (segment header and records, control messages) belong to the
//! `kvrepl` crate; this module frames them. The RETH DMA length is the
//! payload length without pad and without the ImmDt; the ImmDt is 4 bytes,
//! big-endian as on the wire of InfiniBand. Like the rest of this crate,
//! nothing here allocates or panics on input.

/// BTH destination QP of every replication-link frame (both directions).
pub const REPL_QPN: u32 = 0x0000_0100;
/// UDP source port of replication-link frames.
pub const REPL_UDP_PORT: u16 = 0xC100;

use crate::ethernet::MacAddr;
use crate::frame::{emit_lower, finalize, pad_len, parse_common, DropReason, EmitError};
use crate::frame::{FrameParams, Parsed, EXT_OFF};
use crate::ib::{self, bth_field, opcode, Reth};
use crate::icrc::ICRC_LEN;
use crate::transport::{AckFrame, Syndrome};
use crate::{ethernet, ipv4, udp};
use core::net::Ipv4Addr;

/// Length of the ImmDt (Immediate Data) extension header.
pub const IMMDT_LEN: usize = 4;
/// Bytes before the payload of a WRITE Only with Immediate frame (14+20+8+12+16+4).
pub const WRITE_IMM_HEADER_LEN: usize = EXT_OFF + ib::RETH_LEN + IMMDT_LEN;
/// Bytes before the payload of a SEND Only frame (14+20+8+12).
pub const SEND_HEADER_LEN: usize = EXT_OFF;
/// Offset of the BTH in a frame.
const BTH_OFF: usize = EXT_OFF - ib::BTH_LEN;

/// Total length of a WRITE Only with Immediate frame carrying `payload_len` bytes.
#[inline]
pub const fn write_imm_frame_len(payload_len: usize) -> usize {
    WRITE_IMM_HEADER_LEN + payload_len + pad_len(payload_len) + ICRC_LEN
}

/// Largest WRITE with Immediate payload for an IP MTU (1500 → 1436), a multiple of 4.
#[inline]
pub const fn write_imm_payload_capacity(mtu: usize) -> usize {
    mtu.saturating_sub(WRITE_IMM_HEADER_LEN - ethernet::HEADER_LEN + ICRC_LEN) & !3
}

/// Total length of a SEND Only frame carrying `payload_len` bytes.
#[inline]
pub const fn send_frame_len(payload_len: usize) -> usize {
    SEND_HEADER_LEN + payload_len + pad_len(payload_len) + ICRC_LEN
}

/// Addressing and transport fields common to the parsed frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkHeader {
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
    /// BTH destination QP.
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
    /// BTH AckReq.
    pub ack_req: bool,
}

impl LinkHeader {
    fn from_parsed(p: &Parsed<'_>) -> Self {
        LinkHeader {
            src_mac: p.src_mac,
            dst_mac: p.dst_mac,
            src_ip: p.src_ip,
            dst_ip: p.dst_ip,
            udp_src_port: p.udp_src_port,
            pkey: p.pkey,
            dest_qp: p.dest_qp,
            psn: p.psn,
            ack_req: p.ack_req,
        }
    }

    /// Parameters for a frame back to the sender, from `own_mac`/`own_ip`
    /// (as [`crate::Request::reply_params`]).
    pub const fn reply_params(&self, own_mac: MacAddr, own_ip: Ipv4Addr, port: u16) -> FrameParams {
        let mut p = FrameParams::new(own_mac, self.src_mac, own_ip, self.src_ip, port);
        p.pkey = self.pkey;
        p
    }
}

/// A parsed RC RDMA WRITE Only with Immediate frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteImm<'a> {
    /// Addressing and BTH fields.
    pub link: LinkHeader,
    /// RETH virtual address.
    pub va: u64,
    /// RETH R_Key.
    pub rkey: u32,
    /// The immediate data (ImmDt, big-endian on the wire).
    pub imm: u32,
    /// The payload (RETH DMA length bytes, without pad).
    pub payload: &'a [u8],
}

/// A parsed RC SEND Only frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Send<'a> {
    /// Addressing and BTH fields.
    pub link: LinkHeader,
    /// The payload (without pad).
    pub payload: &'a [u8],
}

/// A parsed replication-link frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplFrame<'a> {
    /// A stream segment (opcode 0x0B).
    WriteImm(WriteImm<'a>),
    /// A control message (opcode 0x04).
    Send(Send<'a>),
    /// An ACK, RNR NAK or NAK (opcode 0x11).
    Ack(AckFrame),
}

/// Parses and validates (IPv4 checksum and ICRC included) a frame of the
/// replication link.
pub fn parse_repl_frame(frame: &[u8]) -> Result<ReplFrame<'_>, DropReason> {
    let p = parse_common(
        frame,
        &[
            opcode::RC_RDMA_WRITE_ONLY_IMM,
            opcode::RC_SEND_ONLY,
            opcode::RC_ACKNOWLEDGE,
        ],
        true,
    )?;
    let body = p
        .rest
        .len()
        .checked_sub(p.pad)
        .map(|n| &p.rest[..n])
        .ok_or(DropReason::LengthMismatch)?;
    match p.opcode {
        opcode::RC_RDMA_WRITE_ONLY_IMM => {
            if p.rest.len() < ib::RETH_LEN + IMMDT_LEN {
                return Err(DropReason::TruncatedReth);
            }
            let reth = Reth::new_unchecked(&p.rest[..ib::RETH_LEN]);
            let i = &p.rest[ib::RETH_LEN..ib::RETH_LEN + IMMDT_LEN];
            let payload = body
                .get(ib::RETH_LEN + IMMDT_LEN..)
                .ok_or(DropReason::LengthMismatch)?;
            if u64::from(reth.dma_len()) != payload.len() as u64 {
                return Err(DropReason::LengthMismatch);
            }
            Ok(ReplFrame::WriteImm(WriteImm {
                link: LinkHeader::from_parsed(&p),
                va: reth.va(),
                rkey: reth.rkey(),
                imm: u32::from_be_bytes([i[0], i[1], i[2], i[3]]),
                payload,
            }))
        }
        opcode::RC_SEND_ONLY => Ok(ReplFrame::Send(Send {
            link: LinkHeader::from_parsed(&p),
            payload: body,
        })),
        _ => {
            let [s, m0, m1, m2] =
                *<&[u8; ib::AETH_LEN]>::try_from(body).map_err(|_| DropReason::LengthMismatch)?;
            let syndrome = Syndrome::from_byte(s).ok_or(DropReason::BadPayload)?;
            Ok(ReplFrame::Ack(AckFrame {
                dest_qp: p.dest_qp,
                psn: p.psn,
                syndrome,
                msn: u32::from_be_bytes([0, m0, m1, m2]),
            }))
        }
    }
}

/// Fields of a WRITE Only with Immediate frame besides its addressing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteImmFields {
    /// BTH destination QP (the replica's replication QP).
    pub dest_qp: u32,
    /// BTH PSN.
    pub psn: u32,
    /// BTH AckReq: ask the responder for an ACK now.
    pub ack_req: bool,
    /// RETH virtual address (the slot in the replica's receive ring).
    pub va: u64,
    /// RETH R_Key (the replica's).
    pub rkey: u32,
    /// The immediate data.
    pub imm: u32,
}

/// Writes the headers of a WRITE Only with Immediate frame carrying
/// `payload_len` bytes into `buf` (at least [`write_imm_frame_len`] bytes) and
/// returns [`WRITE_IMM_HEADER_LEN`]. Write the payload at that offset (before
/// or after this call), then call [`finalize`].
pub fn emit_write_imm_headers(
    buf: &mut [u8],
    params: &FrameParams,
    f: &WriteImmFields,
    payload_len: usize,
) -> Result<usize, EmitError> {
    if payload_len > usize::from(u16::MAX) {
        return Err(EmitError::PayloadTooLarge);
    }
    emit_lower(
        buf,
        params,
        opcode::RC_RDMA_WRITE_ONLY_IMM,
        f.dest_qp,
        f.psn,
        payload_len,
        write_imm_frame_len(payload_len),
    )?;
    buf[BTH_OFF + bth_field::ACK] = u8::from(f.ack_req) << 7;
    let mut reth = Reth::new_unchecked(&mut buf[EXT_OFF..EXT_OFF + ib::RETH_LEN]);
    reth.set_va(f.va);
    reth.set_rkey(f.rkey);
    reth.set_dma_len(payload_len as u32);
    buf[EXT_OFF + ib::RETH_LEN..WRITE_IMM_HEADER_LEN].copy_from_slice(&f.imm.to_be_bytes());
    Ok(WRITE_IMM_HEADER_LEN)
}

/// Writes a whole SEND Only frame (BTH PSN `psn`) carrying `payload` into
/// `buf`; returns its length.
pub fn emit_send(
    buf: &mut [u8],
    params: &FrameParams,
    dest_qp: u32,
    psn: u32,
    payload: &[u8],
) -> Result<usize, EmitError> {
    if payload.len() > usize::from(u16::MAX) {
        return Err(EmitError::PayloadTooLarge);
    }
    emit_lower(
        buf,
        params,
        opcode::RC_SEND_ONLY,
        dest_qp,
        psn,
        payload.len(),
        send_frame_len(payload.len()),
    )?;
    buf[SEND_HEADER_LEN..SEND_HEADER_LEN + payload.len()].copy_from_slice(payload);
    finalize(buf)
}

/// Builds a sample segment frame (QP 0x22, PSN 0x300, AckReq, VA 0x20000,
/// R_Key 0x5555aaaa, immediate 0x1234, payload `payload`) into `buf`; returns
/// its length. Used by tests and docs/REPLICATION.md's example.
#[doc(hidden)]
pub fn sample_write_imm(buf: &mut [u8], payload: &[u8]) -> usize {
    let params = FrameParams::new(
        [2, 0, 0, 0, 0, 2],
        [2, 0, 0, 0, 0, 3],
        Ipv4Addr::new(10, 0, 0, 2),
        Ipv4Addr::new(10, 0, 0, 3),
        0xc001,
    );
    let f = WriteImmFields {
        dest_qp: 0x22,
        psn: 0x300,
        ack_req: true,
        va: 0x2_0000,
        rkey: 0x5555_aaaa,
        imm: 0x1234,
    };
    let h = emit_write_imm_headers(buf, &params, &f, payload.len()).expect("buffer fits");
    buf[h..h + payload.len()].copy_from_slice(payload);
    finalize(buf).expect("frame")
}

// The header length assumes these header sizes.
const _: () = assert!(
    WRITE_IMM_HEADER_LEN == ethernet::HEADER_LEN + ipv4::HEADER_LEN + udp::HEADER_LEN + 12 + 20
);

#[cfg(test)]
mod tests;
