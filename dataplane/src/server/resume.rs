//! The server's side of completion records (`crate::repl::completion`, docs/PROTOCOL.md
//! §6.6): a master logs an INTENT before each request that may write and its
//! response frames after the burst; a replica keeps them per client QP; a RESUME
//! continues a client's connection from them once this node is the master.

use super::Server;
use crate::clients::ClientTable;
use crate::mutation::record_cost;
use crate::packet::{Identity, PktCtx};
use crate::repl::apply::CompletionKeeper;
use crate::repl::completion::{self, RestoredQp, INTENT_LEN, NOT_RESUMING};
use crate::response_cache::{Arena, Entry, EntryState};
use crate::stats::WorkerStats;
use crate::tx::{TxFrame, TxSink};
use kvwire::frame::FrameParams;
use kvwire::{emit_response_headers, finalize, psn, response_parts_unchecked, DropReason};

/// What [`Server::sequence`](super::Server) decided for the request it let through.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ServeMark {
    /// Executed as usual.
    Plain,
    /// Executed, and its INTENT is logged: its response frames follow after the burst.
    Logged,
    /// Not executed: its completion records hold only the old master's intent, so
    /// every op is answered `OUTCOME_UNKNOWN`.
    Unknown,
}

/// What an INTENT costs against the tap's room.
pub(crate) const INTENT_COST: usize = record_cost(4, INTENT_LEN);
/// QP_STATE key bytes (the QPN).
const QPN_KEY: usize = 4;

/// How a resumed connection's request `p` is to be answered.
pub(crate) enum Restored {
    /// Not in the completion records: executed normally.
    Execute,
    /// Its response is there: sent again, not executed.
    Replay(Entry),
    /// Only its intent (or a response since overwritten): `OUTCOME_UNKNOWN`.
    Unknown,
}

/// Looks request `p` of an incarnation `nonce` up in `r`.
pub(crate) fn lookup(r: Option<&RestoredQp>, nonce: u64, p: u32) -> Restored {
    let Some(r) = r.filter(|r| r.nonce == nonce) else {
        return Restored::Execute;
    };
    let e = *r.entry(p);
    if e.psn != p {
        return Restored::Execute;
    }
    match e.state {
        EntryState::Ready => Restored::Replay(e),
        EntryState::Pending => Restored::Unknown,
        EntryState::Empty => Restored::Execute,
    }
}

/// Calls `f` with each response frame of live cache entry `e` (in `arena`) as
/// (index, response PSN, payload), in order; `false` when a record is not there or not
/// a response (the frames after it are not visited).
pub(crate) fn each_cached_frame(
    arena: &Arena,
    e: &Entry,
    f: &mut dyn FnMut(u16, u32, &[u8]),
) -> bool {
    let mut at = e.start;
    for i in 0..e.frames {
        let Some((off, len, next)) = arena.cur.record(&arena.bytes, at) else {
            return false;
        };
        let Some((resp, payload)) = response_parts_unchecked(&arena.bytes[off..off + len]) else {
            return false;
        };
        f(i, resp, payload);
        at = next;
    }
    true
}

/// Sends the restored response `e` (payloads in `ring`) as frames addressed with
/// `params` to client QP `qpn` from server `id`, under the frames' original response
/// PSNs. `false` (nothing sent) if the ring overwrote them.
pub(crate) fn replay_restored<T: TxSink>(
    tx: &mut T,
    params: &FrameParams,
    qpn: u32,
    id: &Identity,
    ring: &Arena,
    e: &Entry,
    stats: &WorkerStats,
) -> bool {
    let Some(frames) = completion::frames(ring, e) else {
        return false;
    };
    for (resp_psn, payload) in frames {
        let Some(mut f) = tx.alloc() else {
            stats.drop(DropReason::NoMbuf);
            continue;
        };
        let buf = f.room();
        let built =
            emit_response_headers(buf, params, qpn, resp_psn, id.qkey, id.qpn, payload.len())
                .and_then(|h| {
                    buf.get_mut(h..h + payload.len())
                        .ok_or(kvwire::EmitError::BufferTooSmall)?
                        .copy_from_slice(payload);
                    finalize(buf)
                });
        match built {
            Ok(n) => {
                f.set_len(n);
                tx.send(f);
                stats.replayed_frames.inc();
            }
            Err(_) => stats.drop(DropReason::TxBufferTooSmall),
        }
    }
    true
}

impl Server {
    /// Turns completion records on (`on`): as a master, every request that may
    /// write is logged (INTENT, then its response) through the mutation tap; as a
    /// replica, [`Server::restore_completion`] keeps what the master logged, and a
    /// RESUME continues a connection from it once this node takes writes. For nodes
    /// that can fail over (etcd-managed). Allocates (a payload ring the size of the
    /// response cache): call it at set-up.
    pub fn set_completion_records(&mut self, on: bool) {
        self.completions = on;
        if on && self.restored_ring.bytes.is_empty() {
            self.clients.keep_restored();
            let max_frame = self.arena.cur.max_record();
            self.restored_ring = Arena::new(self.arena.bytes.len(), max_frame);
            self.completion_scratch =
                vec![0u8; completion::FRAME_HEADER_LEN + max_frame].into_boxed_slice();
        }
    }

    /// Whether completion records are on.
    pub fn completion_records(&self) -> bool {
        self.completions
    }

    /// A replica applies one completion record of its master (a `QP_STATE` record's
    /// QPN and blob). Records of QPs not admitted here, and blobs it does not know,
    /// are ignored (`false`).
    pub fn restore_completion(&mut self, qpn: u32, blob: &[u8]) -> bool {
        self.completions
            && restore(
                &mut self.clients,
                &mut self.restored_ring,
                qpn,
                blob,
                self.now_s,
            )
    }

    /// The engine, the mutation tap and the keeper of completion records together:
    /// what a replica worker applying its master's records needs
    /// (`repl::apply::Applier::apply_with`).
    pub fn apply_parts(
        &mut self,
    ) -> (
        &mut kvengine::Engine,
        Option<&mut (dyn crate::mutation::MutationSink + 'static)>,
        Keeper<'_>,
    ) {
        let Server {
            engine,
            tap,
            clients,
            restored_ring,
            completions,
            now_s,
            ..
        } = self;
        let keeper = Keeper {
            clients,
            ring: restored_ring,
            on: *completions,
            now: *now_s,
        };
        (engine, tap.as_deref_mut(), keeper)
    }

    /// Logs the INTENT of request `p` of client `ci` (its room was reserved).
    pub(super) fn log_intent(&mut self, ci: usize, p: u32) {
        let c = &self.clients.as_slice()[ci];
        let blob = completion::intent(c.nonce, p);
        if let Some(t) = self.tap.as_deref_mut() {
            t.qp_state(c.qpn, &blob);
        }
    }

    /// Logs a new incarnation of client `ci`, if the tap has room (best effort: a
    /// replica without it cannot resume that incarnation, whose RESUME then starts a
    /// new one).
    pub(super) fn log_incarnation(&mut self, ci: usize) {
        if !self.completions {
            return;
        }
        let c = &self.clients.as_slice()[ci];
        let mut buf = [0u8; completion::OPENED_LEN];
        let blob: &[u8] = if c.is_opened() {
            buf = completion::opened(c.nonce, &c.opened_qp());
            &buf
        } else {
            let b = completion::incarnation(c.nonce);
            buf[..b.len()].copy_from_slice(&b);
            &buf[..b.len()]
        };
        if let Some(t) = self.tap.as_deref_mut() {
            if t.room() >= record_cost(QPN_KEY, blob.len()) {
                t.qp_state(c.qpn, blob);
            }
        }
    }

    /// Logs the end of opened client `ci`'s QP (a CLOSE or a reclaim), if the tap has
    /// room (best effort: a replica that misses it reclaims the QP when it idles).
    pub(super) fn log_closed(&mut self, ci: usize) {
        if !self.completions {
            return;
        }
        let c = &self.clients.as_slice()[ci];
        let blob = completion::closed(c.nonce);
        if let Some(t) = self.tap.as_deref_mut() {
            if t.room() >= record_cost(QPN_KEY, blob.len()) {
                t.qp_state(c.qpn, &blob);
            }
        }
    }

    /// After a burst: the response frames of its logged requests (built in `arena`)
    /// into the tap, all of a request's frames or none (then counted
    /// `completions_skipped`: a resend after a failover is answered
    /// `OUTCOME_UNKNOWN`).
    pub(super) fn log_completions(&mut self, arena: &Arena, pkts: &[PktCtx], stats: &WorkerStats) {
        let Server {
            clients,
            tap,
            completion_scratch: scratch,
            ..
        } = self;
        let Some(tap) = tap.as_deref_mut() else {
            return;
        };
        for p in pkts.iter().filter(|p| p.logged) {
            let c = &clients.as_slice()[usize::from(p.client)];
            let e = *c.entry_ref(p.psn);
            let intact = e.psn == p.psn
                && e.state == EntryState::Ready
                && (e.frames == 0 || arena.cur.valid(e.start));
            // The frames of the request, as (response PSN, payload).
            let each = |f: &mut dyn FnMut(u16, u32, &[u8])| each_cached_frame(arena, &e, f);
            let mut need = 0usize;
            let ok = intact
                && e.frames > 0
                && each(&mut |_, _, pl| {
                    need += record_cost(QPN_KEY, completion::FRAME_HEADER_LEN + pl.len())
                })
                && need <= tap.room();
            if !ok {
                stats.completions_skipped.inc();
                continue;
            }
            let (qpn, nonce, last) = (c.qpn, c.nonce, e.frames - 1);
            each(&mut |i, resp, payload| {
                let h = completion::frame_header(nonce, p.psn, i, i == last, resp);
                let n = h.len() + payload.len();
                if let Some(buf) = scratch.get_mut(..n) {
                    buf[..h.len()].copy_from_slice(&h);
                    buf[h.len()..].copy_from_slice(payload);
                    tap.qp_state(qpn, buf);
                }
            });
            stats.completions_logged.inc();
        }
    }

    /// A RESUME of client `ci` (incarnation `nonce`, next request PSN `next`):
    /// `Some(true)` when the connection goes on (the live one, or one installed from
    /// the completion records), `Some(false)` when a new incarnation must start (no
    /// state for that nonce here), `None` when it is not answered (this node does not
    /// take writes, or the nonce is older than the live one).
    pub(super) fn resume(&mut self, ci: usize, nonce: u64, next: u32) -> Option<bool> {
        if self.write_status != kvwire::Status::Ok {
            return None;
        }
        let (c, restored) = self.clients.with_restored(ci);
        if c.connected && c.nonce == nonce {
            // The live connection (the client came back, or its ACCEPT was lost): it
            // resends what is unanswered and the transport replays or serves it.
            return Some(true);
        }
        if c.connected && nonce < c.nonce {
            return None;
        }
        let Some(r) = restored.filter(|r| r.nonce == nonce && self.completions) else {
            return Some(false);
        };
        c.nonce = nonce;
        c.connected = true;
        c.rx.restart(next);
        c.start_psn = next;
        c.resp_psn = r.next_resp;
        c.start_resp_psn = r.next_resp;
        c.replay.fill(Entry::EMPTY);
        c.resume_until = match r.end {
            Some(end) if psn::distance(next, end) > 0 => end,
            _ => NOT_RESUMING,
        };
        Some(true)
    }
}

/// A replica worker's clients as the keeper of its master's completion records.
pub struct Keeper<'a> {
    clients: &'a mut ClientTable,
    ring: &'a mut Arena,
    on: bool,
    now: u32,
}

impl CompletionKeeper for Keeper<'_> {
    fn record(&mut self, qpn: u32, blob: &[u8]) {
        if self.on {
            restore(self.clients, self.ring, qpn, blob, self.now);
        }
    }

    fn full_sync(&mut self) {
        self.clients.forget_restored();
    }
}

/// Applies one completion record to client `qpn`'s restored state; an OPENED record
/// first puts the opened QP into the table, a CLOSED one takes it out. `false` for a
/// QP not here or a blob not understood.
fn restore(clients: &mut ClientTable, ring: &mut Arena, qpn: u32, blob: &[u8], now: u32) -> bool {
    let i = match completion::decode(blob) {
        Some(completion::Blob::Opened { qp, .. }) => clients.install_opened(qpn, qp, now),
        Some(completion::Blob::Closed { nonce }) => {
            if let Some(i) = clients.find(qpn) {
                let same = clients.restored_mut(i).is_some_and(|r| r.nonce == nonce);
                if same && clients.as_slice()[i].is_opened() {
                    clients.close(i);
                }
            }
            return true;
        }
        _ => clients.find(qpn),
    };
    let Some(i) = i else {
        return false;
    };
    clients.as_mut_slice()[i].last_active = now;
    match clients.restored_mut(i) {
        Some(r) => r.apply(blob, ring),
        None => false,
    }
}
