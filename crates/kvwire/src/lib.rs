//! KV-Direct wire codec: RoCEv2 framing and the KV batch payload.
//!
//! * Header views in the smoltcp style — [`ethernet`], [`ipv4`], [`udp`],
//!   [`ib`] (BTH, RETH, DETH) — plus the [`icrc`] of RoCEv2.
//! * The KV batch payload — [`payload`]: [`BatchReader`] / [`BatchWriter`]
//!   for requests, [`ResponseWriter`] / [`ResponseReader`] for responses.
//! * Frame helpers — [`frame`]: [`parse_request`], [`parse_response`],
//!   [`emit_request_headers`], [`emit_response_headers`], [`finalize`],
//!   and the [`DropReason`] enum for every drop counter.
//! * [`psn`]: 24-bit PSN arithmetic and a per-QP tracker.
//! * [`transport`]: protocol v2's connection set-up and RC Acknowledge packets.
//! * [`repl`]: frames of the replication link (RDMA WRITE Only with Immediate,
//!   SEND Only, RC Acknowledge).
//!
//! # Panic contract
//!
//! Header views panic only when used unchecked: after `new_checked` (or a
//! successful `check_len`) no accessor panics. Setters index within the
//! fixed header length, so they need a buffer at least `MIN_LEN` long.
//! Everything that takes untrusted input — the frame parsers, the payload
//! readers, and the fuzz entry points in [`fuzzing`] — never panics on any
//! input, and nothing in the parse or emit paths allocates.
//!
//! The protocol is specified in `docs/PROTOCOL.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod counters;
pub mod ethernet;
pub mod frame;
pub mod fuzzing;
pub mod hash;

pub mod ib;
pub mod icrc;
pub mod ipv4;
pub mod partition;
pub mod payload;
pub mod psn;
pub mod repl;
pub mod tenant;
#[cfg(test)]
mod test_util;
pub mod transport;
pub mod udp;
mod view;

pub use ethernet::MacAddr;
pub use frame::{
    emit_request_headers, emit_response_headers, finalize, pad_len, parse_request,
    parse_request_unverified, parse_response, request_frame_len, request_payload_capacity,
    response_frame_len, response_parts_unchecked, response_payload_capacity, DropReason, EmitError,
    FrameParams, Request, Response, DEFAULT_MTU, MAX_MTU, REQUEST_HEADER_LEN, RESPONSE_HEADER_LEN,
};
pub use icrc::ICRC_LEN;
pub use payload::{
    copy_small, func, op, ops, pred, put_result, Atomic, BatchReader, BatchWriter, KvOp, KvOpOf,
    KvResult, MasterHint, OpSpec, OwnedKvOp, PayloadError, ResponseReader, ResponseWriter, Status,
    Width, MASTER_HINT_LEN, MAX_KEY_LEN, MAX_OPS_PER_BATCH, MAX_VALUE_LEN, OPCOUNT, OPS,
};
pub use psn::{Arrival, Receiver};
pub use transport::{
    emit_accept, emit_ack, emit_connect, emit_resume, parse_client_frame, parse_server_frame,
    slot_size, slot_va, Accept, AcceptFrame, AckFrame, ClientFrame, Connect, ConnectFrame, NakCode,
    ServerFrame, Syndrome,
};
pub use view::Error as HeaderError;
