//! Test-only reference server of protocol v2 (the server rules of the transport)
//! over a HashMap store, and a harness that runs it on the far end of a
//! `LossyLink` inside the client's `PacketIo`.
#![allow(dead_code)]

use hashbrown::HashMap;
use kvclient::sim::{Faults, LinkEnd, LossyLink};
use kvclient::PacketIo;
use kvwire::ib::MASK_24;
use kvwire::partition::{partition_of_hash, partition_of_qp};
use kvwire::payload::{func, BatchReader, KvOp, ResponseWriter};
use kvwire::psn;
use kvwire::transport::{
    emit_accept, emit_ack, parse_client_frame, slot_va, Accept, ClientFrame, NakCode, Syndrome,
};
use kvwire::{
    emit_response_headers, finalize, response_frame_len, FrameParams, MacAddr, Request, Status,
};
use std::cell::Cell;
use std::net::Ipv4Addr;
use std::rc::Rc;

pub const SERVER_MAC: MacAddr = [2, 0, 0, 0, 0, 2];
pub const CLIENT_MAC: MacAddr = [2, 0, 0, 0, 0, 1];
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 2);
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 0, 1);
pub const QKEY: u32 = 0x8001_0000;
pub const SERVER_QPN: u32 = 1;

/// Client → server frame parameters.
pub fn client_params() -> FrameParams {
    FrameParams::new(CLIENT_MAC, SERVER_MAC, CLIENT_IP, SERVER_IP, 0xC000)
}

/// `(qpn, rkey)` of `n` client QPs.
pub fn qps(n: u32) -> Vec<(u32, u32)> {
    (0..n).map(|i| (16 + i, 0x1000 + i)).collect()
}

#[derive(Debug, Clone)]
pub struct SrvCfg {
    pub credits: u16,
    pub slot_size: u32,
    pub region_va: u64,
    /// `request_psn` of the first incarnation of each QP (later ones add 1000).
    pub first_request_psn: u32,
    /// Results per response frame (splits responses to exercise reassembly).
    pub results_per_frame: usize,
    /// false: requests are dropped unanswered (a server that never answers).
    pub answer_requests: bool,
    /// PSNs answered RNR NAK (once each) when they are the expected one.
    pub rnr_psns: Vec<u32>,
    pub rnr_timer: u8,
    /// Partitions (0: no check; else WRONG_PARTITION for keys of another one).
    pub partitions: u32,
}

impl Default for SrvCfg {
    fn default() -> Self {
        SrvCfg {
            credits: 8,
            slot_size: 1024,
            region_va: 1 << 32,
            first_request_psn: 100,
            results_per_frame: 64,
            answer_requests: true,
            rnr_psns: Vec::new(),
            rnr_timer: 16,
            partitions: 0,
        }
    }
}

/// What the server did with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Disp {
    Served,
    Replayed,
    /// Ahead of the expected PSN; true if a NAK was sent.
    Ahead(bool),
    Old,
    Rnr,
    NotConnected,
    Dropped,
}

#[derive(Debug, Clone, Copy)]
pub struct Arrival {
    pub t: u64,
    pub qpn: u32,
    pub psn: u32,
    pub disp: Disp,
}

struct SrvQp {
    nonce: u64,
    connected: bool,
    accept: Accept,
    expected: u32,
    nak_sent: bool,
    resp_psn: u32,
    cache: Vec<Option<(u32, Vec<Vec<u8>>)>>,
}

pub struct RefServer {
    pub cfg: SrvCfg,
    admitted: HashMap<u32, u32>,
    qps: HashMap<u32, SrvQp>,
    pub store: HashMap<Vec<u8>, Vec<u8>>,
    pub log: Vec<Arrival>,
    /// Ops executed (each op of each served request once).
    pub executed: u64,
    /// CONNECTs received: (time, qpn, nonce).
    pub connects: Vec<(u64, u32, u64)>,
    incarnations: HashMap<u32, u32>,
}

impl RefServer {
    pub fn new(cfg: SrvCfg, admitted: &[(u32, u32)]) -> RefServer {
        RefServer {
            cfg,
            admitted: admitted.iter().copied().collect(),
            qps: HashMap::new(),
            store: HashMap::new(),
            log: Vec::new(),
            executed: 0,
            connects: Vec::new(),
            incarnations: HashMap::new(),
        }
    }

    /// Forgets QP `qpn`'s connection (as after a server restart).
    pub fn disconnect(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.connected = false;
        }
    }

    /// Handles every frame waiting at `end`.
    pub fn step(&mut self, end: &mut LinkEnd, now: u64) {
        let mut frames = Vec::new();
        while end.recv(&mut |f| frames.push(f.to_vec())) > 0 {}
        for f in frames {
            let mut out = Vec::new();
            self.handle(&f, now, &mut out);
            for o in out {
                end.send(&o);
            }
        }
    }

    fn handle(&mut self, frame: &[u8], now: u64, out: &mut Vec<Vec<u8>>) {
        match parse_client_frame(frame) {
            Ok(ClientFrame::Connect(c)) => {
                self.connects.push((now, c.dest_qp, c.connect.nonce));
                if self.admitted.get(&c.dest_qp) != Some(&c.connect.rkey) {
                    return;
                }
                let params = c.reply_params(SERVER_MAC, SERVER_IP, 0xC001);
                let fresh = match self.qps.get(&c.dest_qp) {
                    Some(q) if c.connect.nonce < q.nonce => return,
                    Some(q) if c.connect.nonce == q.nonce => false,
                    _ => true,
                };
                if fresh {
                    let inc = self.incarnations.entry(c.dest_qp).or_insert(0);
                    *inc += 1;
                    let inc = *inc - 1;
                    let w = self.cfg.credits;
                    let accept = Accept {
                        nonce: c.connect.nonce,
                        credits: w,
                        request_psn: psn::add(self.cfg.first_request_psn, 1000 * inc),
                        response_psn: psn::add(0x42, 77 * inc),
                        slot_size: self.cfg.slot_size,
                        region_va: self.cfg.region_va,
                        resumed: false,
                        opened: None,
                    };
                    self.qps.insert(
                        c.dest_qp,
                        SrvQp {
                            nonce: c.connect.nonce,
                            connected: true,
                            accept,
                            expected: accept.request_psn,
                            nak_sent: false,
                            resp_psn: accept.response_psn,
                            cache: vec![None; usize::from(w)],
                        },
                    );
                }
                let q = &self.qps[&c.dest_qp];
                let mut buf = vec![0u8; 256];
                let n =
                    emit_accept(&mut buf, &params, c.dest_qp, QKEY, SERVER_QPN, &q.accept).unwrap();
                buf.truncate(n);
                out.push(buf);
            }
            Ok(ClientFrame::Request(r)) => self.request(&r, now, out),
            Err(e) => panic!("client sent a bad frame: {e:?}"),
        }
    }

    fn request(&mut self, r: &Request<'_>, now: u64, out: &mut Vec<Vec<u8>>) {
        let params = r.reply_params(SERVER_MAC, SERVER_IP, 0xC001);
        let mut log = |disp| {
            self.log.push(Arrival {
                t: now,
                qpn: r.dest_qp,
                psn: r.psn,
                disp,
            })
        };
        let ack = |psn, syn| {
            let mut buf = vec![0u8; 128];
            let n = emit_ack(&mut buf, &params, r.dest_qp, psn, syn, 0).unwrap();
            buf.truncate(n);
            buf
        };
        let Some(q) = self.qps.get_mut(&r.dest_qp) else {
            return log(Disp::Dropped);
        };
        if !q.connected {
            out.push(ack(r.psn, Syndrome::Nak(NakCode::InvalidRequest)));
            return log(Disp::NotConnected);
        }
        let a = q.accept;
        assert_eq!(self.admitted.get(&r.dest_qp), Some(&r.rkey), "R_Key");
        assert_eq!(
            r.va,
            slot_va(a.region_va, u64::from(a.slot_size), a.credits, r.psn),
            "RETH VA of psn {}",
            r.psn
        );
        assert!(
            r.payload.len() <= a.slot_size as usize,
            "payload beyond slot"
        );
        assert_eq!(
            BatchReader::new(r.payload).unwrap().batch_id(),
            r.psn,
            "batch id = PSN"
        );
        if !self.cfg.answer_requests {
            return log(Disp::Dropped);
        }
        let d = psn::distance(q.expected, r.psn);
        if d > 0 {
            let nak = !q.nak_sent;
            if nak {
                q.nak_sent = true;
                out.push(ack(q.expected, Syndrome::Nak(NakCode::PsnSequenceError)));
            }
            return log(Disp::Ahead(nak));
        }
        if d < 0 {
            if -d > i32::from(a.credits) {
                return log(Disp::Old);
            }
            match &q.cache[(r.psn % u32::from(a.credits)) as usize] {
                Some((p, frames)) if *p == r.psn => {
                    out.extend(frames.iter().cloned());
                    return log(Disp::Replayed);
                }
                _ => return log(Disp::Old),
            }
        }
        if let Some(i) = self.cfg.rnr_psns.iter().position(|&p| p == r.psn) {
            self.cfg.rnr_psns.remove(i);
            q.nak_sent = true;
            out.push(ack(
                q.expected,
                Syndrome::RnrNak {
                    timer: self.cfg.rnr_timer,
                },
            ));
            return log(Disp::Rnr);
        }
        // Serve.
        q.expected = psn::add(q.expected, 1);
        q.nak_sent = false;
        let results = execute(
            &mut self.store,
            r.payload,
            &mut self.executed,
            self.cfg.partitions,
            r.dest_qp,
        );
        let per = self.cfg.results_per_frame.max(1);
        let chunks: Vec<&[(Status, Vec<u8>)]> = if results.is_empty() {
            vec![&results[..]]
        } else {
            results.chunks(per).collect()
        };
        let mut frames = Vec::new();
        let mut first = 0u16;
        for (ci, chunk) in chunks.iter().enumerate() {
            let mut payload = vec![0u8; 8192];
            let mut w = ResponseWriter::new(&mut payload, r.psn, first).unwrap();
            for (s, v) in chunk.iter() {
                w.push(*s, v).unwrap();
            }
            w.set_more(ci + 1 < chunks.len());
            let n = w.finish();
            first += chunk.len() as u16;
            let mut buf = vec![0u8; response_frame_len(n)];
            let h = emit_response_headers(&mut buf, &params, r.dest_qp, q.resp_psn, QKEY, 1, n)
                .unwrap();
            buf[h..h + n].copy_from_slice(&payload[..n]);
            let len = finalize(&mut buf).unwrap();
            buf.truncate(len);
            q.resp_psn = (q.resp_psn + 1) & MASK_24;
            frames.push(buf);
        }
        out.extend(frames.iter().cloned());
        q.cache[(r.psn % u32::from(a.credits)) as usize] = Some((r.psn, frames));
        log(Disp::Served);
    }
}

fn execute(
    store: &mut HashMap<Vec<u8>, Vec<u8>>,
    payload: &[u8],
    executed: &mut u64,
    partitions: u32,
    qpn: u32,
) -> Vec<(Status, Vec<u8>)> {
    let mut res = Vec::new();
    for op in BatchReader::new(payload).unwrap() {
        let Ok(op) = op else {
            res.push((Status::Malformed, Vec::new()));
            break;
        };
        let key = op.key();
        if partitions > 0
            && partition_of_hash(kvwire::hash::key_hash(key), partitions)
                != partition_of_qp(qpn, partitions)
        {
            res.push((Status::WrongPartition, Vec::new()));
            continue;
        }
        *executed += 1;
        let r = match op {
            KvOp::Get { key } => match store.get(key) {
                Some(v) => (Status::Ok, v.clone()),
                None => (Status::NotFound, Vec::new()),
            },
            KvOp::Put { key, value } => {
                store.insert(key.to_vec(), value.to_vec());
                (Status::Ok, Vec::new())
            }
            KvOp::Delete { key } => match store.remove(key) {
                Some(_) => (Status::Ok, Vec::new()),
                None => (Status::NotFound, Vec::new()),
            },
            KvOp::UpdateS2S {
                key,
                atomic,
                param,
                param2,
            } => match store.get_mut(key) {
                None => (Status::NotFound, Vec::new()),
                Some(v) if v.len() != atomic.width.bytes() => (Status::BadLength, Vec::new()),
                Some(v) => {
                    let mut b = [0u8; 8];
                    b[..v.len()].copy_from_slice(v);
                    let orig = u64::from_le_bytes(b);
                    let mask = atomic.width.mask();
                    let new = match atomic.func {
                        func::FETCH_ADD => orig.wrapping_add(param) & mask,
                        func::CAS if orig == param => param2 & mask,
                        func::CAS => orig,
                        _ => return vec![(Status::UnknownFunction, Vec::new())],
                    };
                    let n = v.len();
                    v.copy_from_slice(&new.to_le_bytes()[..n]);
                    (Status::Ok, b[..n].to_vec())
                }
            },
            KvOp::CompareDelete { key, expected } => match store.get(key).cloned() {
                Some(v) => {
                    if v == expected {
                        store.remove(key);
                    }
                    (Status::Ok, v)
                }
                None => (Status::NotFound, Vec::new()),
            },
            _ => (Status::Unsupported, Vec::new()),
        };
        res.push(r);
    }
    res
}

/// The client's `PacketIo`: a lossy link whose far end is a [`RefServer`], run
/// (and the shared clock advanced by `tick_ns`) on every receive.
pub struct Sim {
    pub client: LinkEnd,
    pub server_end: LinkEnd,
    pub server: RefServer,
    pub clock: Rc<Cell<u64>>,
    pub tick_ns: u64,
}

impl Sim {
    pub fn new(seed: u64, faults: Faults, cfg: SrvCfg, admitted: &[(u32, u32)]) -> Sim {
        let (client, server_end) = LossyLink::new(seed, faults, faults);
        Sim {
            client,
            server_end,
            server: RefServer::new(cfg, admitted),
            clock: Rc::new(Cell::new(1_000_000)),
            tick_ns: 10_000,
        }
    }

    pub fn now(&self) -> u64 {
        self.clock.get()
    }

    /// A clock closure for `Client::new`.
    pub fn clock_fn(&self) -> Box<dyn FnMut() -> u64> {
        let c = self.clock.clone();
        Box::new(move || c.get())
    }
}

impl PacketIo for Sim {
    fn send(&mut self, frame: &[u8]) -> bool {
        self.client.send(frame)
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        let now = self.clock.get() + self.tick_ns;
        self.clock.set(now);
        self.server.step(&mut self.server_end, now);
        self.client.recv(f)
    }
}
