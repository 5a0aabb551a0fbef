//! Completion records: exactly-once execution across a failover (RIFL's idea on
//! this appliance's transport; docs/PROTOCOL.md §6.6, docs/REPLICATION.md §2).
//!
//! A master that logs completions (an etcd-managed node: one that can fail over)
//! writes three kinds of `QP_STATE` records into the replication stream, next to the
//! post-images, in the order the worker produced them:
//!
//! * **INCARNATION** (nonce) when a client QP connects anew;
//! * **INTENT** (nonce, request PSN) before it executes a request that may write —
//!   pushed ahead of the request's first post-image;
//! * **FRAME** (nonce, request PSN, frame index, last?, response PSN, response
//!   payload) for each response frame of such a request, at the end of its burst.
//!
//! A replica keeps, per admitted QP, the last `W` requests' records ([`RestoredQp`]:
//! entries indexed by PSN like the transport's replay entries, payloads in a ring of
//! their own). When the replica has become the master and the client resumes its
//! connection there (a RESUME, §6.1), a resent request finds
//!
//! * its whole response → the original response is sent again (never executed);
//! * only its intent → its outcome is unknown here (the old master began it; some
//!   post-images may be in, the response is not): every op is answered
//!   `OUTCOME_UNKNOWN`, nothing is executed;
//! * nothing → the old master never executed it, or nothing of it reached this node:
//!   it is executed now.
//!
//! Because a request's intent precedes its post-images and its frames follow them in
//! one worker's ring — the stream keeps that order, and a replica has a prefix of
//! the stream — "post-images present" implies "intent present", so no write is ever
//! applied twice; and in `mode: sync` a response that reached the client implies
//! its frames are on the replicas (the worker's answer waits for its log position,
//! which is after the frames).

pub(crate) use crate::clients::OpenedQp;
use crate::response_cache::{Arena, Entry, EntryState, REC_HDR};
use kvwire::psn;

/// Blob kind: a new incarnation of the QP began.
pub const KIND_INCARNATION: u8 = 1;
/// Blob kind: a request that may write is being executed.
pub const KIND_INTENT: u8 = 2;
/// Blob kind: one response frame of a logged request.
pub const KIND_FRAME: u8 = 3;
/// Blob kind: an OPEN opened the QP (an incarnation with the QP's R_Key and secret).
pub const KIND_OPENED: u8 = 4;
/// Blob kind: the opened QP was closed (a CLOSE, or reclaimed when idle).
pub const KIND_CLOSED: u8 = 5;
/// FRAME flag: the request's last response frame.
pub const FRAME_LAST: u8 = 0x01;
/// Bytes of an INCARNATION blob.
pub const INCARNATION_LEN: usize = 9;
/// Bytes of an OPENED blob: kind, nonce, R_Key, secret, tenant, window, then the
/// source MAC and IPv4 address the QP is bound to.
pub const OPENED_LEN: usize = 37;
/// Bytes of an OPENED blob written before QPs were bound to their source (read as
/// unbound).
pub const OPENED_UNBOUND_LEN: usize = 27;
/// Bytes of a CLOSED blob.
pub const CLOSED_LEN: usize = 9;
/// Bytes of an INTENT blob.
pub const INTENT_LEN: usize = 13;
/// Bytes of a FRAME blob before its payload.
pub const FRAME_HEADER_LEN: usize = 20;
/// Bytes a restored payload record carries before the payload: the response PSN.
const PAYLOAD_PREFIX: usize = 4;
/// `RestoredQp::resume_until` / `Client::resume_until` when not resuming.
pub const NOT_RESUMING: u32 = u32::MAX;

/// The completion records of a worker's client QPs (`crate::repl::completion`), which a
/// full sync carries ahead of the engine's KVs: the synced node then knows every
/// request whose effects the scan carries, as a node that followed the stream does.
pub trait ClientRecords {
    /// Client slots (indices `0..slots()`).
    fn slots(&self) -> usize;
    /// Client `i`'s records as (QPN, blob) through `emit`, in the order a replica
    /// applies them (its incarnation first); with `frames` false only its
    /// incarnation and one INTENT per request (answered `OUTCOME_UNKNOWN` on the
    /// synced node, never executed twice): for a client whose responses exceed a step.
    fn emit(&mut self, i: usize, frames: bool, emit: &mut dyn FnMut(u32, &[u8]));
}

/// A worker without clients (tests, a sink with no server).
pub struct NoClients;

impl ClientRecords for NoClients {
    fn slots(&self) -> usize {
        0
    }
    fn emit(&mut self, _: usize, _: bool, _: &mut dyn FnMut(u32, &[u8])) {}
}

/// One decoded completion blob.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Blob<'a> {
    /// A new incarnation (`nonce`) of the QP.
    Incarnation {
        /// Its nonce.
        nonce: u64,
    },
    /// An OPEN opened the QP: its first incarnation `nonce`, and what it was opened
    /// with (R_Key, secret, tenant, window).
    Opened {
        /// Its nonce.
        nonce: u64,
        /// What the QP was opened with.
        qp: OpenedQp,
    },
    /// The opened QP's incarnation `nonce` ended: the QP is closed.
    Closed {
        /// Its nonce.
        nonce: u64,
    },
    /// Request `psn` of incarnation `nonce` is being executed.
    Intent {
        /// The incarnation.
        nonce: u64,
        /// The request PSN.
        psn: u32,
    },
    /// Response frame `index` of request `psn`.
    Frame {
        /// The incarnation.
        nonce: u64,
        /// The request PSN.
        psn: u32,
        /// The frame's index within the response (0 first).
        index: u16,
        /// The response's last frame.
        last: bool,
        /// The frame's response PSN.
        resp_psn: u32,
        /// The frame's payload (the response batch: header and results).
        payload: &'a [u8],
    },
}

/// Writes an INCARNATION blob.
pub fn incarnation(nonce: u64) -> [u8; INCARNATION_LEN] {
    let mut b = [0u8; INCARNATION_LEN];
    b[0] = KIND_INCARNATION;
    b[1..9].copy_from_slice(&nonce.to_le_bytes());
    b
}

/// Writes an OPENED blob.
pub fn opened(nonce: u64, q: &OpenedQp) -> [u8; OPENED_LEN] {
    let mut b = [0u8; OPENED_LEN];
    b[0] = KIND_OPENED;
    b[1..9].copy_from_slice(&nonce.to_le_bytes());
    b[9..13].copy_from_slice(&q.rkey.to_le_bytes());
    b[13..21].copy_from_slice(&q.secret.to_le_bytes());
    b[21..25].copy_from_slice(&q.tenant.to_le_bytes());
    b[25..27].copy_from_slice(&q.window.to_le_bytes());
    if let Some(o) = q.origin {
        b[27..33].copy_from_slice(&o.mac);
        b[33..37].copy_from_slice(&o.ip.octets());
    }
    b
}

/// Writes a CLOSED blob.
pub fn closed(nonce: u64) -> [u8; CLOSED_LEN] {
    let mut b = [0u8; CLOSED_LEN];
    b[0] = KIND_CLOSED;
    b[1..9].copy_from_slice(&nonce.to_le_bytes());
    b
}

/// Writes an INTENT blob.
pub fn intent(nonce: u64, psn: u32) -> [u8; INTENT_LEN] {
    let mut b = [0u8; INTENT_LEN];
    b[0] = KIND_INTENT;
    b[1..9].copy_from_slice(&nonce.to_le_bytes());
    b[9..13].copy_from_slice(&psn.to_le_bytes());
    b
}

/// Writes a FRAME blob's header (the payload follows it in the record).
pub fn frame_header(
    nonce: u64,
    psn: u32,
    index: u16,
    last: bool,
    resp_psn: u32,
) -> [u8; FRAME_HEADER_LEN] {
    let mut b = [0u8; FRAME_HEADER_LEN];
    b[0] = KIND_FRAME;
    b[1] = if last { FRAME_LAST } else { 0 };
    b[2..4].copy_from_slice(&index.to_le_bytes());
    b[4..12].copy_from_slice(&nonce.to_le_bytes());
    b[12..16].copy_from_slice(&psn.to_le_bytes());
    b[16..20].copy_from_slice(&resp_psn.to_le_bytes());
    b
}

/// The source address in an OPENED blob's bytes 27–36 (`None`: absent, or all zero).
fn origin_of(b: Option<&[u8]>) -> Option<crate::clients::Origin> {
    let b = b?;
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&b[..6]);
    let ip = std::net::Ipv4Addr::new(b[6], b[7], b[8], b[9]);
    (mac != [0; 6] || !ip.is_unspecified()).then_some(crate::clients::Origin { mac, ip })
}

/// Reads a blob; `None` for anything else (a future kind, a short blob).
pub fn decode(b: &[u8]) -> Option<Blob<'_>> {
    let le32 = |o: usize| {
        b.get(o..o + 4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap_or_default()))
    };
    let le64 = |o: usize| {
        b.get(o..o + 8)
            .map(|s| u64::from_le_bytes(s.try_into().unwrap_or_default()))
    };
    match *b.first()? {
        KIND_INCARNATION if b.len() == INCARNATION_LEN => {
            Some(Blob::Incarnation { nonce: le64(1)? })
        }
        KIND_OPENED if b.len() == OPENED_LEN || b.len() == OPENED_UNBOUND_LEN => {
            Some(Blob::Opened {
                nonce: le64(1)?,
                qp: OpenedQp {
                    rkey: le32(9)?,
                    secret: le64(13)?,
                    tenant: le32(21)?,
                    window: u16::from_le_bytes([b[25], b[26]]),
                    origin: origin_of(b.get(27..37)),
                },
            })
        }
        KIND_CLOSED if b.len() == CLOSED_LEN => Some(Blob::Closed { nonce: le64(1)? }),
        KIND_INTENT if b.len() == INTENT_LEN => Some(Blob::Intent {
            nonce: le64(1)?,
            psn: le32(9)?,
        }),
        KIND_FRAME if b.len() >= FRAME_HEADER_LEN => Some(Blob::Frame {
            nonce: le64(4)?,
            psn: le32(12)?,
            index: u16::from_le_bytes([b[2], b[3]]),
            last: b[1] & FRAME_LAST != 0,
            resp_psn: le32(16)?,
            payload: &b[FRAME_HEADER_LEN..],
        }),
        _ => None,
    }
}

/// What a replica knows of one client QP's requests on its master.
#[derive(Clone, Debug)]
pub(crate) struct RestoredQp {
    /// The incarnation the entries belong to; 0 = nothing known.
    pub nonce: u64,
    /// One past the highest request PSN with an entry (`None`: no entry yet).
    pub end: Option<u32>,
    /// One past the highest response PSN seen.
    pub next_resp: u32,
    /// Entries by PSN (`p mod W`): `Pending` = intent (and maybe some frames),
    /// `Ready` = the whole response is in the payload ring.
    pub entries: Box<[Entry]>,
}

impl RestoredQp {
    /// Nothing known, `credits` entries.
    pub fn new(credits: u16) -> RestoredQp {
        RestoredQp {
            nonce: 0,
            end: None,
            next_resp: 0,
            entries: vec![Entry::EMPTY; usize::from(credits.max(1))].into_boxed_slice(),
        }
    }

    /// The entry of PSN `p`.
    #[inline]
    pub fn entry(&self, p: u32) -> &Entry {
        &self.entries[p as usize & (self.entries.len() - 1)]
    }

    fn entry_mut(&mut self, p: u32) -> &mut Entry {
        let mask = self.entries.len() - 1;
        &mut self.entries[p as usize & mask]
    }

    /// Nothing known any more.
    pub fn forget(&mut self) {
        self.nonce = 0;
        self.end = None;
        self.next_resp = 0;
        self.entries.fill(Entry::EMPTY);
    }

    /// A new incarnation `nonce`: the old one's requests are forgotten.
    fn begin(&mut self, nonce: u64) {
        self.forget();
        self.nonce = nonce;
    }

    /// Whether a request record of incarnation `nonce` is to be kept: only for the
    /// incarnation this node saw begin. One it did not (it joined, was synced or
    /// restarted since) may have requests before it saw any, whose effects it holds:
    /// entries from the later ones alone would have it run an earlier one again, so
    /// that incarnation stays unknown here (a RESUME of it starts a new one).
    fn follows(&self, nonce: u64) -> bool {
        nonce != 0 && nonce == self.nonce
    }

    fn note(&mut self, p: u32) {
        let next = psn::add(p, 1);
        self.end = Some(match self.end {
            Some(e) if psn::distance(e, next) <= 0 => e,
            _ => next,
        });
    }

    /// Applies one blob; payloads go into `ring`. Out-of-order frames (a FRAME
    /// whose earlier frames are missing) leave the entry as it was. Returns whether
    /// the blob was understood.
    pub fn apply(&mut self, blob: &[u8], ring: &mut Arena) -> bool {
        match decode(blob) {
            Some(Blob::Incarnation { nonce } | Blob::Opened { nonce, .. }) => {
                // A new incarnation forgets the old one's requests, even with an equal
                // nonce (never sent twice by a master).
                self.begin(nonce);
                true
            }
            Some(Blob::Intent { nonce, .. } | Blob::Frame { nonce, .. })
                if !self.follows(nonce) =>
            {
                true
            }
            Some(Blob::Intent { psn: p, .. }) => {
                *self.entry_mut(p) = Entry {
                    psn: p,
                    ..Entry::pending(p)
                };
                self.note(p);
                true
            }
            Some(Blob::Frame {
                psn: p,
                index,
                last,
                resp_psn,
                payload,
                ..
            }) => {
                let e = *self.entry(p);
                let fresh = index == 0;
                if !fresh && (e.psn != p || e.state != EntryState::Pending || e.frames != index) {
                    return true;
                }
                let Some(at) = store(ring, resp_psn, payload) else {
                    return true;
                };
                let e = self.entry_mut(p);
                if fresh {
                    *e = Entry {
                        start: at,
                        ..Entry::pending(p)
                    };
                }
                e.frames += 1;
                e.bytes = (ring.cur.head() - e.start) as u32;
                if last {
                    e.state = EntryState::Ready;
                }
                self.note(p);
                self.next_resp = psn::add(resp_psn, 1);
                true
            }
            Some(Blob::Closed { .. }) => {
                self.forget();
                true
            }
            None => false,
        }
    }
}

/// Stores `[resp_psn][payload]` as one record of `ring`; its absolute position, or
/// `None` if the payload is larger than a record.
fn store(ring: &mut Arena, resp_psn: u32, payload: &[u8]) -> Option<u64> {
    let len = PAYLOAD_PREFIX + payload.len();
    if REC_HDR + len > ring.cur.max_record() {
        return None;
    }
    let off = ring.cur.reserve(&mut ring.bytes) + REC_HDR;
    ring.bytes[off..off + PAYLOAD_PREFIX].copy_from_slice(&resp_psn.to_be_bytes());
    ring.bytes[off + PAYLOAD_PREFIX..off + len].copy_from_slice(payload);
    Some(ring.cur.commit(&mut ring.bytes, len))
}

/// The stored frames of a `Ready` entry as (response PSN, payload), in order; `None`
/// once the ring has overwritten them.
pub(crate) fn frames<'a>(
    ring: &'a Arena,
    e: &Entry,
) -> Option<impl Iterator<Item = (u32, &'a [u8])> + 'a> {
    if e.state != EntryState::Ready || (e.frames > 0 && !ring.cur.valid(e.start)) {
        return None;
    }
    let mut at = e.start;
    let mut left = e.frames;
    Some(std::iter::from_fn(move || {
        if left == 0 {
            return None;
        }
        let (off, len, next) = ring.cur.record(&ring.bytes, at)?;
        at = next;
        left -= 1;
        let rec = &ring.bytes[off..off + len];
        let resp = u32::from_be_bytes(rec[..PAYLOAD_PREFIX].try_into().ok()?);
        Some((resp, &rec[PAYLOAD_PREFIX..]))
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(nonce: u64, p: u32, index: u16, last: bool, resp: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = frame_header(nonce, p, index, last, resp).to_vec();
        v.extend_from_slice(payload);
        v
    }

    #[test]
    fn blobs_round_trip() {
        assert_eq!(
            decode(&incarnation(7)),
            Some(Blob::Incarnation { nonce: 7 })
        );
        assert_eq!(
            decode(&intent(7, 0xff_ffff)),
            Some(Blob::Intent {
                nonce: 7,
                psn: 0xff_ffff
            })
        );
        let f = frame(9, 3, 2, true, 11, b"xyz");
        assert_eq!(
            decode(&f),
            Some(Blob::Frame {
                nonce: 9,
                psn: 3,
                index: 2,
                last: true,
                resp_psn: 11,
                payload: b"xyz"
            })
        );
        assert_eq!(decode(&f[..10]), None);
        assert_eq!(decode(&[9u8; 20]), None);
        assert_eq!(decode(&[]), None);
        assert_eq!(decode(&intent(1, 2)[..12]), None);
    }

    #[test]
    fn a_response_is_restored_frame_by_frame() {
        let mut ring = Arena::new(4096, 256);
        let mut r = RestoredQp::new(8);
        // Records of an incarnation not seen beginning are not kept.
        assert!(r.apply(&intent(5, 99), &mut ring));
        assert_eq!((r.nonce, r.entry(99).state), (0, EntryState::Empty));
        assert!(r.apply(&incarnation(5), &mut ring));
        assert!(r.apply(&intent(5, 100), &mut ring));
        assert_eq!(r.entry(100).state, EntryState::Pending);
        assert_eq!(r.end, Some(101));
        assert!(r.apply(&frame(5, 100, 0, false, 40, b"first"), &mut ring));
        // A frame out of order (index 2 before 1) is ignored.
        assert!(r.apply(&frame(5, 100, 2, true, 42, b"third"), &mut ring));
        assert_eq!(r.entry(100).frames, 1);
        assert!(r.apply(&frame(5, 100, 1, true, 41, b"second"), &mut ring));
        let e = *r.entry(100);
        assert_eq!((e.state, e.frames), (EntryState::Ready, 2));
        let got: Vec<(u32, Vec<u8>)> = frames(&ring, &e)
            .unwrap()
            .map(|(p, b)| (p, b.to_vec()))
            .collect();
        assert_eq!(got, vec![(40, b"first".to_vec()), (41, b"second".to_vec())]);
        assert_eq!(r.next_resp, 42);
        // An intent alone stays pending; the end follows the highest PSN (mod 2^24).
        assert!(r.apply(&intent(5, 101), &mut ring));
        assert_eq!(
            (r.entry(101).state, r.end),
            (EntryState::Pending, Some(102))
        );
        assert!(frames(&ring, r.entry(101)).is_none());
        // Another incarnation forgets the old one's requests; the old one's late
        // records change nothing.
        assert!(r.apply(&incarnation(6), &mut ring));
        assert_eq!((r.nonce, r.entry(100).state), (6, EntryState::Empty));
        assert!(r.apply(&intent(5, 102), &mut ring));
        assert_eq!(r.entry(102).state, EntryState::Empty);
        assert!(!r.apply(&[0u8; 3], &mut ring));
    }

    #[test]
    fn overwritten_payloads_are_not_replayed() {
        let mut ring = Arena::new(64, 40);
        let mut r = RestoredQp::new(4);
        r.apply(&incarnation(1), &mut ring);
        r.apply(&frame(1, 0, 0, true, 0, &[1u8; 30]), &mut ring);
        let e = *r.entry(0);
        assert!(frames(&ring, &e).is_some());
        r.apply(&frame(1, 1, 0, true, 1, &[2u8; 30]), &mut ring);
        r.apply(&frame(1, 2, 0, true, 2, &[3u8; 30]), &mut ring);
        assert!(frames(&ring, &e).is_none(), "the ring wrapped over it");
        // A payload larger than a record is not stored: the entry keeps its intent.
        r.apply(&intent(1, 3), &mut ring);
        r.apply(&frame(1, 3, 0, true, 3, &[4u8; 60]), &mut ring);
        assert_eq!(r.entry(3).state, EntryState::Pending);
    }
}
