//! Results into response frames, in op order.
//!
//! The open frame is built in place in the worker's response cache (`response_cache::Arena`):
//! opening a frame reserves room for the largest frame at the ring's write position
//! and the payload goes behind the header room. Closing the frame writes the headers
//! and the ICRC there, commits the record (the frame is now cached for replays, also
//! if it cannot be sent), allocates the tx frame and copies the whole frame into it.
//! So the per-result step is a bounds check and a few stores into a plain slice,
//! whatever the tx buffer type, and a tx frame is allocated only when it is complete.
//!
//! The engine's results arrive through [`EngineSink`], which the engine calls once per
//! executed op. The chunk's tags say which packet each result belongs to, with the
//! immediate statuses (ops the engine does not run) in between. The sink looks at the
//! tags once per *run* (consecutive engine ops of one packet); within a run a result
//! goes straight into the open frame. Everything else (a new packet, a full frame,
//! immediates) takes the out-of-line path.

use crate::clients::Client;
use crate::packet::{Identity, PktCtx, Source, Tag};
use crate::response_cache::{Arena, Cursor, Entry, EntryState, REC_HDR};
use crate::stats::WorkerStats;
use crate::tx::{TxFrame, TxSink};
use kvwire::payload::{RESPONSE_BATCH_HEADER_LEN, RESULT_HEADER_LEN};
use kvwire::psn;
use kvwire::{
    emit_response_headers, finalize, put_result, response_frame_len, DropReason, EmitError,
    ResponseWriter, Status, RESPONSE_HEADER_LEN,
};

/// Largest response payload the responder builds, whatever the MTU: its frame length
/// must fit a cache record's `u16` length, and the result count a `u16`.
pub(crate) const MAX_PAYLOAD: usize = 60_000;

/// What closing a frame needs besides the payload: the client's response PSN and
/// replay entries, the server's identity, the burst's packets (reply addresses, batch
/// IDs, PSNs) and counters.
pub(crate) struct Ctx<'a> {
    pub clients: &'a mut [Client],
    pub id: &'a Identity,
    pub pkts: &'a [PktCtx],
    pub stats: &'a WorkerStats,
    /// The value of a `NOT_MASTER` result (the master hint; empty when unknown).
    pub hint: &'a [u8],
}

/// Streams results into response frames (see the module doc).
pub(crate) struct Responder<'s, 't, T> {
    /// The response cache's bytes.
    ring: &'s mut [u8],
    /// Its write cursor.
    cur: &'s mut Cursor,
    /// Payload bytes of a frame.
    cap: usize,
    /// Ring offset of the open frame's record.
    rec: usize,
    /// Ring offset of the open frame's payload (`rec + REC_HDR + RESPONSE_HEADER_LEN`).
    base: usize,
    /// Payload bytes in use; 0 when no frame is open.
    pos: usize,
    /// Results in the open frame.
    count: u16,
    /// Index within its request of the open frame's first result.
    first: u16,
    /// The open frame's request (index into the burst's packets).
    pkt: u8,
    tx: &'t mut T,
}

impl<'s, 't, T: TxSink> Responder<'s, 't, T> {
    /// A responder building frames of at most `payload_cap` payload bytes in `arena`
    /// (whose largest record must hold such a frame) and sending them through `tx`. A
    /// `payload_cap` shorter than a response header and one bare result answers
    /// nothing (each response counted as `mtu_too_small`).
    pub fn new(arena: &'s mut Arena, payload_cap: usize, tx: &'t mut T) -> Self {
        // Every result takes at least RESULT_HEADER_LEN bytes, so this bound keeps the
        // u16 result count from overflowing.
        let cap = payload_cap
            .min(MAX_PAYLOAD)
            .min(usize::from(u16::MAX) * RESULT_HEADER_LEN);
        debug_assert!(REC_HDR + response_frame_len(cap) <= arena.cur.max_record());
        Responder {
            ring: &mut arena.bytes,
            cur: &mut arena.cur,
            cap,
            rec: 0,
            base: 0,
            pos: 0,
            count: 0,
            first: 0,
            pkt: 0,
            tx,
        }
    }

    /// The transmit side (for frames that are not responses: ACKs, ACCEPTs).
    #[inline]
    pub fn tx(&mut self) -> &mut T {
        self.tx
    }

    /// Appends a result to the open frame if it fits; `false` (nothing written) if it
    /// does not. The caller knows the open frame is `pkt`'s.
    #[inline(always)]
    fn push_fast(&mut self, status: Status, value: &[u8]) -> bool {
        debug_assert!(self.pos != 0, "a frame is open");
        let Some(buf) = self.ring.get_mut(self.base..self.base + self.cap) else {
            return false;
        };
        match put_result(buf, self.pos, status, value) {
            Some(end) => {
                self.pos = end;
                self.count += 1;
                true
            }
            None => false,
        }
    }
    /// Appends one result of packet `pkt`.
    #[inline(always)]
    pub fn result(&mut self, ctx: &mut Ctx<'_>, pkt: u8, status: Status, value: &[u8]) {
        if self.pos != 0 && self.pkt == pkt && self.push_fast(status, value) {
            return;
        }
        self.push(ctx, pkt, status, value);
    }

    /// [`Responder::result`] when a frame must be opened or closed first or the open
    /// frame is full.
    #[cold]
    #[inline(never)]
    fn push(&mut self, ctx: &mut Ctx<'_>, pkt: u8, status: Status, value: &[u8]) {
        if self.pos == 0 || self.pkt != pkt {
            self.close(ctx, false);
            self.open(ctx, pkt, 0);
        }
        let (mut status, mut value) = (status, value);
        loop {
            if self.pos == 0 {
                // The payload buffer cannot hold even a header (a misconfigured MTU):
                // nothing can be answered. Counted in `open`.
                return;
            }
            if self.push_fast(status, value) {
                return;
            }
            if self.count == 0 {
                if value.is_empty() {
                    // Not even a bare status fits an empty frame (tiny MTU).
                    ctx.stats.drop(DropReason::MtuTooSmall);
                    return;
                }
                // Even an empty frame cannot hold this value.
                status = Status::ResponseTooLarge;
                value = &[];
                ctx.stats.op_errors.inc();
                continue;
            }
            let next = self.first.wrapping_add(self.count);
            self.close(ctx, true);
            self.open(ctx, pkt, next);
        }
    }

    /// Starts a frame for packet `pkt` whose first result has index `first`.
    fn open(&mut self, ctx: &mut Ctx<'_>, pkt: u8, first: u16) {
        let batch_id = ctx.pkts[usize::from(pkt)].batch_id;
        let rec = self.cur.reserve(self.ring);
        let base = rec + REC_HDR + RESPONSE_HEADER_LEN;
        let ok = self
            .ring
            .get_mut(base..base + self.cap)
            .is_some_and(|buf| ResponseWriter::new(buf, batch_id, first).is_ok());
        if !ok {
            ctx.stats.drop(DropReason::MtuTooSmall);
            self.pos = 0;
            return;
        }
        self.rec = rec;
        self.base = base;
        self.pos = RESPONSE_BATCH_HEADER_LEN;
        self.count = 0;
        self.first = first;
        self.pkt = pkt;
    }

    /// Finishes the open frame (if any): headers and ICRC, into the response cache
    /// (the request's replay entry grows by the frame), then copied into a tx frame
    /// and sent. `more`: the request has further results in a later frame; without
    /// it, the request's replay entry is complete.
    pub fn close(&mut self, ctx: &mut Ctx<'_>, more: bool) {
        if self.pos == 0 {
            return;
        }
        let (pos, count) = (self.pos, self.count);
        self.pos = 0;
        let payload = self.ring.get_mut(self.base..self.base + self.cap);
        let Some(Ok(mut w)) = payload.map(|b| ResponseWriter::resume(b, pos, count)) else {
            debug_assert!(false, "the open frame is within the ring");
            ctx.stats.drop(DropReason::ResponseEncode);
            return;
        };
        w.set_more(more);
        let plen = w.finish();
        let pkt = &ctx.pkts[usize::from(self.pkt)];
        let client = &mut ctx.clients[usize::from(pkt.client)];
        let rec_end = self.rec + self.cur.max_record();
        let Some(room) = self.ring.get_mut(self.rec + REC_HDR..rec_end) else {
            debug_assert!(false, "the reserved record is within the ring");
            ctx.stats.drop(DropReason::ResponseEncode);
            return;
        };
        let hdr = emit_response_headers(
            room,
            &pkt.params,
            client.qpn,
            client.resp_psn,
            ctx.id.qkey,
            ctx.id.qpn,
            plen,
        );
        let frame_len = match hdr.and_then(|_| finalize(room)) {
            Ok(n) => n,
            Err(EmitError::BufferTooSmall | EmitError::PayloadTooLarge | EmitError::NotAFrame) => {
                debug_assert!(false, "a response payload within the record encodes");
                ctx.stats.drop(DropReason::ResponseEncode);
                return;
            }
        };
        let at = self.cur.commit(self.ring, frame_len);
        client.resp_psn = psn::add(client.resp_psn, 1);
        let e = client.entry(pkt.psn);
        if e.psn == pkt.psn && e.state == EntryState::Pending {
            if e.frames == 0 {
                e.start = at;
            }
            e.frames = e.frames.saturating_add(1);
            e.bytes = (self.cur.head() - e.start) as u32;
            if !more {
                e.state = EntryState::Ready;
            }
        }
        let frame = &self.ring[self.rec + REC_HDR..self.rec + REC_HDR + frame_len];
        if send_copy(self.tx, frame, ctx.stats) {
            ctx.stats.responses.inc();
        }
    }

    /// Re-sends the cached response frames of `e` (a complete entry); `false` if they
    /// are no longer in the cache (nothing sent).
    pub fn replay(&mut self, e: &Entry, stats: &WorkerStats) -> bool {
        if e.frames > 0 && !self.cur.valid(e.start) {
            return false;
        }
        let mut at = e.start;
        for _ in 0..e.frames {
            let Some((off, len, next)) = self.cur.record(self.ring, at) else {
                debug_assert!(false, "a valid entry's records are in the ring");
                return false;
            };
            if send_copy(self.tx, &self.ring[off..off + len], stats) {
                stats.replayed_frames.inc();
            }
            at = next;
        }
        stats.replays.inc();
        true
    }

    /// A request without ops: an empty response.
    pub fn empty(&mut self, ctx: &mut Ctx<'_>, pkt: u8) {
        self.close(ctx, false);
        self.open(ctx, pkt, 0);
        self.close(ctx, false);
    }

    /// Emits the tags from `*next` up to the next engine op (immediate statuses and
    /// empty requests).
    pub fn drain_immediates(&mut self, ctx: &mut Ctx<'_>, tags: &[Tag], next: &mut usize) {
        while let Some(t) = tags.get(*next) {
            match t.src {
                Source::Engine | Source::Redacted => return,
                Source::Immediate(status) => {
                    ctx.stats.op_errors.inc();
                    let value = if status == Status::NotMaster {
                        ctx.hint
                    } else {
                        &[]
                    };
                    self.result(ctx, t.pkt, status, value);
                }
                Source::Empty => self.empty(ctx, t.pkt),
            }
            *next += 1;
        }
    }
}

/// The engine's result sink for one chunk: results into the responder in chunk order,
/// with the chunk's immediates emitted between them.
pub(crate) struct EngineSink<'r, 's, 't, 'c, T> {
    pub out: &'r mut Responder<'s, 't, T>,
    pub ctx: Ctx<'c>,
    /// The chunk's tags.
    pub tags: &'c [Tag],
    /// The first tag not yet consumed.
    pub next_tag: usize,
    /// Results left in the current run; while non-zero the open frame is the run's
    /// packet's.
    pub run_left: usize,
    /// The current run's packet.
    pub run_pkt: u8,
}

impl<T: TxSink> EngineSink<'_, '_, '_, '_, T> {
    /// A result that does not go straight into the open frame: the first of a run, or
    /// one that does not fit.
    #[cold]
    #[inline(never)]
    fn result_slow(&mut self, status: Status, value: &[u8]) {
        let pkt = if self.run_left == 0 {
            self.out
                .drain_immediates(&mut self.ctx, self.tags, &mut self.next_tag);
            let Some(&Tag { pkt, .. }) = self.tags.get(self.next_tag) else {
                // More engine results than engine tags: cannot happen (one tag per
                // engine op); answer nothing rather than guess the packet.
                debug_assert!(false, "engine result without a tag");
                return;
            };
            let run = self.tags[self.next_tag..]
                .iter()
                .take_while(|t| t.pkt == pkt && matches!(t.src, Source::Engine | Source::Redacted))
                .count();
            self.next_tag += run;
            self.run_left = run;
            self.run_pkt = pkt;
            pkt
        } else {
            self.run_pkt
        };
        self.out.push(&mut self.ctx, pkt, status, value);
        self.run_left -= 1;
    }

    /// Emits the immediates after the chunk's last engine op.
    pub fn finish(mut self) {
        self.out
            .drain_immediates(&mut self.ctx, self.tags, &mut self.next_tag);
    }
}

/// Copies `frame` into a new tx frame and sends it; `false` (counted) when no tx frame
/// could be had or it is too small.
pub(crate) fn send_copy<T: TxSink>(tx: &mut T, frame: &[u8], stats: &WorkerStats) -> bool {
    let Some(mut f) = tx.alloc() else {
        stats.drop(DropReason::NoMbuf);
        return false;
    };
    let Some(dst) = f.room().get_mut(..frame.len()) else {
        // A tx buffer smaller than the MTU's frame: cannot be sent.
        stats.drop(DropReason::TxBufferTooSmall);
        return false;
    };
    dst.copy_from_slice(frame);
    f.set_len(frame.len());
    tx.send(f);
    true
}

impl<T: TxSink> kvengine::ResultSink for EngineSink<'_, '_, '_, '_, T> {
    #[inline(always)]
    fn result(&mut self, _index: usize, status: kvengine::Status, value: &[u8]) {
        let status = Status::from(status);
        if self.run_left != 0 && self.out.push_fast(status, value) {
            self.run_left -= 1;
            return;
        }
        self.result_slow(status, value);
    }
}
