//! `--fuzz N`: a live fuzzer that sends N mutated request frames to the dataplane
//! while the run's own workload (e.g. `--verify`) goes on, on the same port.
//!
//! Frames are built from three bases — a valid request on a fuzz QP (with the PSN and
//! slot of the ACCEPT the fuzz QP last got, so some frames execute), a CONNECT of a
//! fuzz QP, or a request to a QP no one admitted — and then get 1–3 structure-aware
//! mutations ([`mutate`]); half of them have their checksums repaired. Everything
//! follows from `--fuzz-seed` (printed).
//!
//! **Protection of the workload.** A fuzz frame can change the server's state only
//! through the QP its BTH names, and the store only through the ops of a request that
//! parses, is admitted, connected and in sequence. Every candidate frame goes through
//! [`Guard::allows`] before it is sent, which uses the server's own parsers (kvwire):
//! a frame whose destination QP (as the hand-off steering peeks it, and as
//! `parse_client_frame` reads it) is one of the workload's QPs is never sent, so no
//! workload QP's connection, PSNs or response cache can be touched; and a frame that
//! parses as a request is sent only if *every* op its payload decodes to has a key
//! whose length differs from the workload's `--key-size` — a key of another length is
//! another key, so no op of a fuzz frame reads or writes a workload key. The check is
//! a superset of what the server executes (it decodes past errors the server stops
//! at), so it errs on the side of not sending.

pub mod mutate;

use kvwire::frame::FrameParams;
use kvwire::partition::peek_dest_qp;
use kvwire::transport::{
    emit_connect, parse_client_frame, parse_server_frame, slot_va, ClientFrame, Connect,
    ServerFrame, CONNECT_FRAME_LEN,
};
use kvwire::{
    emit_request_headers, finalize, request_frame_len, Atomic, BatchReader, BatchWriter, KvOp,
    Width, REQUEST_HEADER_LEN,
};
use mutate::{Rng, KINDS, MAX_FRAME};

/// What the fuzzer must never disturb: the workload's QPs and key length.
pub struct Guard {
    /// QPNs of the concurrent workload.
    pub protected: Vec<u32>,
    /// Key length of the workload's keys.
    pub key_len: usize,
}

impl Guard {
    /// Whether `frame` may be sent (see the module doc).
    pub fn allows(&self, frame: &[u8]) -> bool {
        if peek_dest_qp(frame).is_some_and(|q| self.protected.contains(&q)) {
            return false;
        }
        match parse_client_frame(frame) {
            Ok(ClientFrame::Connect(c)) => !self.protected.contains(&c.dest_qp),
            Ok(ClientFrame::Request(r)) => {
                if self.protected.contains(&r.dest_qp) {
                    return false;
                }
                match BatchReader::new(r.payload) {
                    Ok(rd) => rd
                        .filter_map(Result::ok)
                        .all(|op| op.key().len() != self.key_len),
                    Err(_) => true,
                }
            }
            Err(_) => true,
        }
    }
}

/// A fuzz QP: QPN, R_Key, and its connection as the last ACCEPT told it.
struct FuzzQp {
    qpn: u32,
    rkey: u32,
    nonce: u64,
    /// (next request PSN, region VA, slot size, credits) once connected.
    conn: Option<(u32, u64, u64, u16)>,
}

/// Counters of a fuzz run.
#[derive(Default, Debug, Clone, serde::Serialize)]
pub struct FuzzStats {
    /// The seed.
    pub seed: u64,
    /// Frames handed to the port.
    pub sent: u64,
    /// Candidates the guard refused (regenerated).
    pub refused: u64,
    /// ACCEPTs the fuzz QPs got.
    pub accepts: u64,
    /// Mutations applied, by kind ([`mutate::KINDS`]).
    pub mutations: Vec<(String, u64)>,
}

/// The live fuzzer.
pub struct Fuzzer {
    rng: Rng,
    guard: Guard,
    params: FrameParams,
    qps: Vec<FuzzQp>,
    /// Frames still to send.
    pub left: u64,
    /// Counters.
    pub stats: FuzzStats,
    by_kind: [u64; KINDS.len()],
}

/// A QPN nobody admits (the fuzz QPs' unknown-QP base).
const STRANGER_QP: u32 = 0x00ab_cdef;

impl Fuzzer {
    /// A fuzzer sending `count` frames from `params`' addresses to the fuzz QPs `qps`
    /// (QPN, R_Key), seeded with `seed`, never disturbing what `guard` protects.
    pub fn new(
        count: u64,
        seed: u64,
        params: FrameParams,
        qps: &[(u32, u32)],
        guard: Guard,
    ) -> Fuzzer {
        Fuzzer {
            rng: Rng::new(seed),
            qps: qps
                .iter()
                .filter(|(q, _)| !guard.protected.contains(q))
                .map(|&(qpn, rkey)| FuzzQp {
                    qpn,
                    rkey,
                    nonce: 0,
                    conn: None,
                })
                .collect(),
            guard,
            params,
            left: count,
            stats: FuzzStats {
                seed,
                ..FuzzStats::default()
            },
            by_kind: [0; KINDS.len()],
        }
    }

    /// Learns a fuzz QP's connection from an ACCEPT among the received frames.
    pub fn observe(&mut self, frame: &[u8]) {
        if let Ok(ServerFrame::Accept(a)) = parse_server_frame(frame) {
            if let Some(q) = self.qps.iter_mut().find(|q| q.qpn == a.dest_qp) {
                let x = a.accept;
                if x.nonce == q.nonce {
                    q.conn = Some((
                        x.request_psn,
                        x.region_va,
                        u64::from(x.slot_size),
                        x.credits,
                    ));
                    self.stats.accepts += 1;
                }
            }
        }
    }

    /// A key of the fuzz namespace: never the workload's length.
    fn key(&mut self, buf: &mut [u8; 24]) -> usize {
        let mut len = 1 + self.rng.below(23);
        if len == self.guard.key_len {
            len += 1;
        }
        buf[..3].copy_from_slice(b"fz/");
        let k = self.rng.below(64) as u8;
        buf[3..].fill(k);
        len
    }

    /// A base frame into `f`.
    fn base(&mut self, f: &mut Vec<u8>) {
        f.clear();
        let nq = self.qps.len();
        let pick = self.rng.below(10);
        if nq > 0 && pick < 2 {
            let qi = self.rng.below(nq);
            let q = &mut self.qps[qi];
            q.nonce += 1;
            f.resize(CONNECT_FRAME_LEN, 0);
            let c = Connect {
                rkey: q.rkey,
                nonce: q.nonce,
            };
            if let Ok(n) = emit_connect(f, &self.params, q.qpn, 0, &c) {
                f.truncate(n);
            }
            return;
        }
        let (qpn, rkey, psn, va) = match (nq > 0 && pick < 9).then(|| self.rng.below(nq)) {
            Some(qi) => {
                let q = &mut self.qps[qi];
                match q.conn.as_mut() {
                    Some((psn, region, slot, credits)) => {
                        let p = *psn;
                        *psn = (p + 1) & 0xff_ffff;
                        (q.qpn, q.rkey, p, slot_va(*region, *slot, *credits, p))
                    }
                    None => (q.qpn, q.rkey, 0, 0),
                }
            }
            None => (STRANGER_QP, 0, 0, 0),
        };
        let mut payload = [0u8; 512];
        let Ok(mut w) = BatchWriter::new(&mut payload, self.rng.next() as u32) else {
            return;
        };
        let mut kb = [0u8; 24];
        let mut vb = [0u8; 64];
        for _ in 0..self.rng.below(6) {
            let kl = self.key(&mut kb);
            let key = &kb[..kl];
            let vl = 1 + self.rng.below(63);
            vb[..vl].fill(self.rng.next() as u8);
            let width = [Width::W1, Width::W2, Width::W4, Width::W8][self.rng.below(4)];
            let op = match self.rng.below(4) {
                0 => KvOp::Get { key },
                1 => KvOp::Put {
                    key,
                    value: &vb[..vl],
                },
                2 => KvOp::Delete { key },
                _ => KvOp::UpdateS2S {
                    key,
                    atomic: Atomic {
                        width,
                        signed: self.rng.one_in(2),
                        func: self.rng.below(8) as u8,
                    },
                    param: self.rng.next(),
                    param2: 0,
                },
            };
            if w.push(&op).is_err() {
                break;
            }
        }
        let len = w.finish();
        f.resize(request_frame_len(len), 0);
        if emit_request_headers(f, &self.params, qpn, psn, va, rkey, len).is_ok() {
            f[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + len].copy_from_slice(&payload[..len]);
            if let Ok(n) = finalize(f) {
                f.truncate(n);
            }
        }
    }

    /// The next frame to send into `f`: a mutated base the guard allows (a runt if
    /// none was found in a few tries — runts never reach a QP).
    pub fn next_frame(&mut self, f: &mut Vec<u8>) {
        for _ in 0..8 {
            self.base(f);
            for _ in 0..=self.rng.below(3) {
                // The unmutated base now and then (valid frames execute, move PSNs).
                if self.rng.one_in(12) {
                    break;
                }
                let k = self.rng.below(KINDS.len());
                self.by_kind[k] += 1;
                mutate::mutate(&mut self.rng, f, k);
            }
            if self.rng.one_in(2) {
                mutate::repair(f);
            }
            f.truncate(MAX_FRAME);
            if self.guard.allows(f) {
                return;
            }
            self.stats.refused += 1;
        }
        f.clear();
        f.extend_from_slice(&[0xff; 13]);
    }

    /// The counters, with the mutations by kind.
    pub fn report(&self) -> FuzzStats {
        let mut s = self.stats.clone();
        s.mutations = KINDS
            .iter()
            .zip(self.by_kind)
            .map(|(k, n)| (k.to_string(), n))
            .collect();
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn params() -> FrameParams {
        FrameParams::new(
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            Ipv4Addr::new(10, 0, 0, 2),
            Ipv4Addr::new(10, 0, 0, 1),
            0xC000,
        )
    }

    fn fuzzer(seed: u64) -> Fuzzer {
        let guard = Guard {
            protected: vec![17],
            key_len: 8,
        };
        Fuzzer::new(1000, seed, params(), &[(17, 1), (18, 2), (19, 3)], guard)
    }

    #[test]
    fn reproducible_and_never_touches_the_workload() {
        let (mut a, mut b) = (fuzzer(42), fuzzer(42));
        let (mut fa, mut fb) = (Vec::new(), Vec::new());
        for _ in 0..20_000 {
            a.next_frame(&mut fa);
            b.next_frame(&mut fb);
            assert_eq!(fa, fb);
            assert!(a.guard.allows(&fa));
            assert_ne!(peek_dest_qp(&fa), Some(17));
            assert!(fa.len() <= MAX_FRAME);
        }
        assert!(a.report().mutations.iter().all(|(_, n)| *n > 0));
    }

    #[test]
    fn guard_refuses_workload_qps_and_key_lengths() {
        let g = Guard {
            protected: vec![17],
            key_len: 2,
        };
        let mut payload = [0u8; 64];
        let mut w = BatchWriter::new(&mut payload, 1).unwrap();
        w.push(&KvOp::Get { key: b"ab" }).unwrap();
        let len = w.finish();
        let frame = |qpn: u32| {
            let mut f = vec![0u8; request_frame_len(len)];
            emit_request_headers(&mut f, &params(), qpn, 0, 0, 0, len).unwrap();
            f[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + len].copy_from_slice(&payload[..len]);
            let n = finalize(&mut f).unwrap();
            f.truncate(n);
            f
        };
        assert!(!g.allows(&frame(17)));
        assert!(!g.allows(&frame(18)), "a 2-byte key is a workload key");
        let g3 = Guard {
            protected: vec![17],
            key_len: 3,
        };
        assert!(g3.allows(&frame(18)));
    }
}
