//! The completion records a full sync carries (`crate::repl::completion::ClientRecords`):
//! what this worker knows of each client QP's recent requests, written as the
//! records a replica that followed the stream would have applied — the incarnation,
//! then per request its response frames, or its INTENT when the response is not
//! here whole (the synced node answers a resend of it `OUTCOME_UNKNOWN`, never runs
//! it again).
//!
//! A master's source is its live response cache (the connections it serves); a
//! replica's or chain relay's, the records it restored from its own master. A
//! connection a master resumed from completion records has both: the restored
//! requests first, then the ones it served itself (a FRAME replaces an INTENT of
//! the same request on the synced node).

use super::resume::each_cached_frame;
use super::Server;
use crate::clients::{Client, ClientTable};
use crate::repl::completion::{self, ClientRecords, RestoredQp, FRAME_HEADER_LEN};
use crate::repl::gate::WriteGate;
use crate::response_cache::{Arena, Entry, EntryState};
use kvwire::psn;

/// A worker's clients as [`ClientRecords`], borrowed from its [`Server`] for one
/// scan step.
pub(crate) struct SyncRecords<'a> {
    clients: &'a ClientTable,
    /// The live response cache.
    arena: &'a Arena,
    /// The payloads of restored responses.
    restored_ring: &'a Arena,
    /// Where a FRAME blob is put together.
    scratch: &'a mut [u8],
    /// The live connections count (this node is the master: its cache is the truth).
    live: bool,
    /// Completion records are kept at all.
    on: bool,
}

impl Server {
    /// Lets the mutation tap do its between-bursts work (`MutationSink::tick`) with
    /// this worker's completion records at hand; returns whether it did any.
    pub fn tick_mutation_sink(&mut self) -> bool {
        let Server {
            tap,
            engine,
            clients,
            arena,
            restored_ring,
            completion_scratch,
            completions,
            gate,
            ..
        } = self;
        let Some(t) = tap.as_deref_mut() else {
            return false;
        };
        let mut records = SyncRecords {
            clients,
            arena,
            restored_ring,
            scratch: completion_scratch,
            // Not this burst's write permission: a master refusing writes (too few
            // replicas in sync, or fenced while it finishes a replica's full sync)
            // executed every request its cache holds (the nemesis, seed 5).
            live: gate.as_deref().is_none_or(WriteGate::is_master),
            on: *completions,
        };
        t.tick(engine, &mut records)
    }
}

impl ClientRecords for SyncRecords<'_> {
    fn slots(&self) -> usize {
        if self.on {
            self.clients.as_slice().len()
        } else {
            0
        }
    }

    fn emit(&mut self, i: usize, frames: bool, emit: &mut dyn FnMut(u32, &[u8])) {
        let Some(c) = self.clients.as_slice().get(i) else {
            return;
        };
        let restored = self.clients.restored(i);
        let live = self.live && c.connected;
        let nonce = match (live, restored) {
            (true, _) => c.nonce,
            (false, Some(r)) => r.nonce,
            (false, None) => 0,
        };
        if nonce == 0 || c.qpn == 0 {
            return;
        }
        emit_incarnation(c, nonce, emit);
        if let Some(r) = restored.filter(|r| r.nonce == nonce) {
            self.emit_restored(c.qpn, r, frames, emit);
        }
        if live {
            self.emit_live(c, frames, emit);
        }
    }
}

impl SyncRecords<'_> {
    /// The requests `r` holds, oldest first (the synced node's next response PSN is
    /// the last frame's).
    fn emit_restored(
        &mut self,
        qpn: u32,
        r: &RestoredQp,
        frames: bool,
        emit: &mut dyn FnMut(u32, &[u8]),
    ) {
        let Some(end) = r.end else { return };
        let w = r.entries.len() as u32;
        for k in 0..w {
            let p = psn::add(end, psn::PSN_MODULUS - w + k);
            let e = *r.entry(p);
            if e.psn != p || e.state == EntryState::Empty {
                continue;
            }
            let sent = frames
                && e.state == EntryState::Ready
                && e.frames > 0
                && completion::frames(self.restored_ring, &e).is_some_and(|f| {
                    let n = e.frames;
                    for (idx, (resp, payload)) in f.enumerate() {
                        let idx = idx as u16;
                        let last = idx + 1 == n;
                        frame(
                            self.scratch,
                            r.nonce,
                            p,
                            idx,
                            last,
                            resp,
                            payload,
                            qpn,
                            emit,
                        );
                    }
                    true
                });
            if !sent {
                emit(qpn, &completion::intent(r.nonce, p));
            }
        }
    }

    /// The requests of live connection `c` in the response cache, oldest first.
    fn emit_live(&mut self, c: &Client, frames: bool, emit: &mut dyn FnMut(u32, &[u8])) {
        let w = c.replay.len() as u32;
        for k in 0..w {
            let p = psn::add(c.rx.expected(), psn::PSN_MODULUS - w + k);
            let e = *c.entry_ref(p);
            if e.psn != p || e.state == EntryState::Empty {
                continue;
            }
            if !(frames && self.live_frames(c, p, &e, emit)) {
                emit(c.qpn, &completion::intent(c.nonce, p));
            }
        }
    }

    /// Emits the cached response frames of request `p` (entry `e`); `false` (nothing
    /// emitted) when they are not all intact in the cache.
    fn live_frames(
        &mut self,
        c: &Client,
        p: u32,
        e: &Entry,
        emit: &mut dyn FnMut(u32, &[u8]),
    ) -> bool {
        let a = self.arena;
        if e.state != EntryState::Ready || e.frames == 0 || !a.cur.valid(e.start) {
            return false;
        }
        // Every frame parses before any is emitted: all of a request's frames or none.
        if !each_cached_frame(a, e, &mut |_, _, _| {}) {
            return false;
        }
        let scratch = &mut *self.scratch;
        each_cached_frame(a, e, &mut |idx, resp, payload| {
            let last = idx + 1 == e.frames;
            frame(scratch, c.nonce, p, idx, last, resp, payload, c.qpn, emit);
        })
    }
}

/// The OPENED (an opened QP: its R_Key, secret, tenant and window come along) or INCARNATION
/// record of incarnation `nonce` of `c`.
fn emit_incarnation(c: &Client, nonce: u64, emit: &mut dyn FnMut(u32, &[u8])) {
    if c.is_opened() {
        emit(c.qpn, &completion::opened(nonce, &c.opened_qp()));
    } else {
        emit(c.qpn, &completion::incarnation(nonce));
    }
}

/// One FRAME record (header and payload put together in `scratch`).
#[allow(clippy::too_many_arguments)]
fn frame(
    scratch: &mut [u8],
    nonce: u64,
    p: u32,
    index: u16,
    last: bool,
    resp: u32,
    payload: &[u8],
    qpn: u32,
    emit: &mut dyn FnMut(u32, &[u8]),
) {
    let h = completion::frame_header(nonce, p, index, last, resp);
    let n = FRAME_HEADER_LEN + payload.len();
    if let Some(buf) = scratch.get_mut(..n) {
        buf[..FRAME_HEADER_LEN].copy_from_slice(&h);
        buf[FRAME_HEADER_LEN..].copy_from_slice(payload);
        emit(qpn, buf);
    }
}
