//! Request processing, independent of DPDK: request frames in, response frames out.
//!
//! The worker loop hands [`Server::handle_burst`] the frames of one rx burst. For each
//! frame the server checks, in order: the wire format (kvwire's `parse_request`,
//! ICRC included), the destination MAC/IP, the client's QP, its R_Key, the RETH
//! address range, and the PSN. Admitted frames' KV batches are decoded in place (keys
//! and values stay in the rx buffers) and the operations of the whole burst go to the
//! engine in chunks of [`CHUNK`] so it can prefetch across packets. Results stream
//! into response frames in op order; a request whose results do not fit in one frame
//! is answered with several (the MORE flag and `first_index` tell the client).
//!
//! Every frame that is not answered is counted under a [`DropReason`]; every op that
//! is answered with an error is counted under its status.

use crate::stats::WorkerStats;
use kvengine::{BatchOp, Engine, OpKind};
use kvwire::frame::FrameParams;
use kvwire::psn;
use kvwire::{
    emit_response_headers, finalize, parse_request, response_payload_capacity, BatchReader,
    DropReason, KvOp, MacAddr, ResponseWriter, Status, RESPONSE_HEADER_LEN,
};
use std::net::Ipv4Addr;

/// Operations handed to the engine at once (its prefetch window spans them).
pub const CHUNK: usize = 256;
/// Largest rx burst [`Server::handle_burst`] accepts.
pub const MAX_BURST: usize = 64;
/// A PSN at most this far behind the expected one is a duplicate and dropped; one
/// farther behind is taken as the client restarting its sequence (a resync).
pub const PSN_DUP_WINDOW: i32 = 128;
/// UDP source port of responses.
pub const RESPONSE_UDP_SRC_PORT: u16 = 0xC001;

/// A buffer a response frame is written into (an mbuf in the dataplane, a `Vec` in
/// tests).
pub trait TxFrame {
    /// The writable bytes, from the start of the frame to the end of the buffer.
    fn room(&mut self) -> &mut [u8];
    /// Sets the frame length (at most `room().len()`).
    fn set_len(&mut self, len: usize);
}

/// The server's own identity and limits.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Our MAC; requests to another unicast MAC are dropped.
    pub mac: MacAddr,
    /// Our IPv4 address; requests to another address are dropped.
    pub ip: Ipv4Addr,
    /// Our QPN: the DETH source QP of responses.
    pub qpn: u32,
    /// Q_Key of responses.
    pub qkey: u32,
    /// Request region base address (RETH VA must fall inside).
    pub region_va: u64,
    /// Request region length.
    pub region_len: u64,
    /// MTU: the largest IP packet a response may be.
    pub mtu: usize,
}

/// One admitted client QP.
#[derive(Clone, Copy, Debug)]
struct Client {
    qpn: u32,
    rkey: u32,
    /// Next expected request PSN (`None` until the first request).
    expected_psn: Option<u32>,
    /// PSN of the next response sent to this client.
    resp_psn: u32,
}

/// What to do with a received PSN.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum PsnVerdict {
    Serve,
    Gap,
    Duplicate,
}

impl Client {
    fn accept_psn(&mut self, psn_in: u32) -> PsnVerdict {
        let verdict = match self.expected_psn {
            None => PsnVerdict::Serve,
            Some(exp) => match psn::distance(exp, psn_in) {
                0 => PsnVerdict::Serve,
                d if (-PSN_DUP_WINDOW..0).contains(&d) => PsnVerdict::Duplicate,
                d if d > 0 => PsnVerdict::Gap,
                _ => PsnVerdict::Serve, // far behind: the client restarted its sequence
            },
        };
        if verdict != PsnVerdict::Duplicate {
            self.expected_psn = Some(psn::add(psn_in, 1));
        }
        verdict
    }
}

/// Per-frame context kept while its ops run.
#[derive(Clone, Copy)]
struct PktCtx {
    params: FrameParams,
    client: u16,
    batch_id: u32,
}

const EMPTY_CTX: PktCtx = PktCtx {
    params: FrameParams::new(
        [0; 6],
        [0; 6],
        Ipv4Addr::UNSPECIFIED,
        Ipv4Addr::UNSPECIFIED,
        0,
    ),
    client: 0,
    batch_id: 0,
};

/// What produces the result of one entry of a chunk.
#[derive(Clone, Copy)]
enum Source {
    /// The engine (the next engine op).
    Engine,
    /// A status decided at decode time (an op the engine does not run).
    Immediate(Status),
    /// A request with no ops: answer with an empty response.
    Empty,
}

#[derive(Clone, Copy)]
struct Tag {
    pkt: u8,
    src: Source,
}

/// Request processing state of one worker: identity, clients, engine, counters.
pub struct Server {
    id: Identity,
    /// Admitted clients, sorted by QPN.
    clients: Vec<Client>,
    engine: Engine,
}

impl Server {
    /// A server over `engine` admitting `clients` as (QPN, R_Key) pairs.
    pub fn new(id: Identity, clients: &[(u32, u32)], engine: Engine) -> Server {
        let mut v: Vec<Client> = clients
            .iter()
            .map(|&(qpn, rkey)| Client {
                qpn,
                rkey,
                expected_psn: None,
                resp_psn: 0,
            })
            .collect();
        v.sort_by_key(|c| c.qpn);
        v.dedup_by_key(|c| c.qpn);
        Server {
            id,
            clients: v,
            engine,
        }
    }

    /// The storage engine (for stats).
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// Checks a frame up to the batch payload; returns the request and client index.
    fn admit<'f>(&mut self, frame: &'f [u8]) -> Result<(kvwire::Request<'f>, usize), DropReason> {
        let req = parse_request(frame)?;
        if (req.dst_mac != self.id.mac && req.dst_mac != [0xff; 6]) || req.dst_ip != self.id.ip {
            return Err(DropReason::WrongDestination);
        }
        let ci = self
            .clients
            .binary_search_by_key(&req.dest_qp, |c| c.qpn)
            .map_err(|_| DropReason::UnknownQp)?;
        let client = &mut self.clients[ci];
        if client.rkey != req.rkey {
            return Err(DropReason::BadRKey);
        }
        let len = req.payload.len() as u64;
        let inside = req.va >= self.id.region_va
            && req
                .va
                .checked_add(len)
                .is_some_and(|end| end <= self.id.region_va + self.id.region_len);
        if !inside {
            return Err(DropReason::BadVa);
        }
        Ok((req, ci))
    }

    /// Processes one rx burst. `alloc` gives an empty tx frame (or `None`: the
    /// response is dropped and counted as `NoMbuf`); `send` takes each finished
    /// response frame in order.
    pub fn handle_burst<B, A, S>(
        &mut self,
        frames: &[&[u8]],
        stats: &WorkerStats,
        alloc: A,
        send: S,
    ) where
        B: TxFrame,
        A: FnMut() -> Option<B>,
        S: FnMut(B),
    {
        let frames = &frames[..frames.len().min(MAX_BURST)];
        let mut pkts = [EMPTY_CTX; MAX_BURST];
        let mut ops = [BatchOp::get(&[]); CHUNK];
        let mut tags = [Tag {
            pkt: 0,
            src: Source::Empty,
        }; CHUNK];
        let (mut n_ops, mut n_tags) = (0usize, 0usize);
        let mut out = Responder {
            cur: None,
            alloc,
            send,
            payload_cap: response_payload_capacity(self.id.mtu),
        };

        for (fi, frame) in frames.iter().enumerate() {
            stats.rx_packets.inc();
            let (req, ci) = match self.admit(frame) {
                Ok(x) => x,
                Err(why) => {
                    stats.drop(why);
                    continue;
                }
            };
            match self.clients[ci].accept_psn(req.psn) {
                PsnVerdict::Serve => {}
                PsnVerdict::Gap => stats.drop(DropReason::PsnGap), // counted, still served
                PsnVerdict::Duplicate => {
                    stats.drop(DropReason::PsnDuplicate);
                    continue;
                }
            }
            let reader = match BatchReader::new(req.payload) {
                Ok(r) => r,
                Err(_) => {
                    stats.drop(DropReason::BadPayload);
                    continue;
                }
            };
            stats.requests.inc();
            pkts[fi] = PktCtx {
                params: req.reply_params(RESPONSE_UDP_SRC_PORT),
                client: ci as u16,
                batch_id: reader.batch_id(),
            };
            if reader.op_count() == 0 {
                if n_tags == CHUNK {
                    self.flush(&ops[..n_ops], &tags[..n_tags], &pkts, stats, &mut out);
                    (n_ops, n_tags) = (0, 0);
                }
                tags[n_tags] = Tag {
                    pkt: fi as u8,
                    src: Source::Empty,
                };
                n_tags += 1;
                continue;
            }
            for item in reader {
                if n_tags == CHUNK {
                    self.flush(&ops[..n_ops], &tags[..n_tags], &pkts, stats, &mut out);
                    (n_ops, n_tags) = (0, 0);
                }
                let (src, op) = match item {
                    Ok(KvOp::Get { key }) => (Source::Engine, Some(BatchOp::get(key))),
                    Ok(KvOp::Put { key, value }) => {
                        (Source::Engine, Some(BatchOp::put(key, value)))
                    }
                    Ok(KvOp::Delete { key }) => (Source::Engine, Some(BatchOp::delete(key))),
                    // Atomics and vector operations arrive with the reservation station.
                    Ok(_) => (Source::Immediate(Status::Unsupported), None),
                    // The failing op is answered; later ops are not executed.
                    Err(e) => (Source::Immediate(e.status()), None),
                };
                if let Some(op) = op {
                    ops[n_ops] = op;
                    n_ops += 1;
                }
                let stop = matches!(src, Source::Immediate(s) if s == Status::Malformed || s == Status::UnknownOpcode);
                tags[n_tags] = Tag { pkt: fi as u8, src };
                n_tags += 1;
                if stop {
                    break;
                }
            }
        }
        if n_tags > 0 {
            self.flush(&ops[..n_ops], &tags[..n_tags], &pkts, stats, &mut out);
        }
        out.close(&mut self.clients, &self.id, &pkts, stats, false);
    }

    /// Runs one chunk: engine ops through the engine, results (engine and immediate)
    /// into responses in chunk order.
    fn flush<B, A, S>(
        &mut self,
        ops: &[BatchOp<'_>],
        tags: &[Tag],
        pkts: &[PktCtx; MAX_BURST],
        stats: &WorkerStats,
        out: &mut Responder<B, A, S>,
    ) where
        B: TxFrame,
        A: FnMut() -> Option<B>,
        S: FnMut(B),
    {
        stats.batches.inc();
        let Server {
            id,
            clients,
            engine,
            ..
        } = self;
        let mut next_tag = 0usize;
        // Emits the tags before the next engine op (immediates and empty requests).
        let drain_immediates =
            |next_tag: &mut usize, out: &mut Responder<B, A, S>, clients: &mut Vec<Client>| {
                while *next_tag < tags.len() {
                    let t = tags[*next_tag];
                    match t.src {
                        Source::Engine => return,
                        Source::Immediate(status) => {
                            stats.op_errors.inc();
                            out.result(clients, id, pkts, stats, t.pkt, status, &[]);
                        }
                        Source::Empty => out.empty(clients, id, pkts, stats, t.pkt),
                    }
                    *next_tag += 1;
                }
            };
        drain_immediates(&mut next_tag, out, clients);
        let mut sink = |i: usize, status: kvengine::Status, value: &[u8]| {
            let t = tags[next_tag];
            debug_assert!(matches!(t.src, Source::Engine));
            count_op(stats, ops[i].kind, status);
            out.result(clients, id, pkts, stats, t.pkt, wire_status(status), value);
            next_tag += 1;
            drain_immediates(&mut next_tag, out, clients);
        };
        engine.execute_batch(ops, &mut sink);
    }

    /// The storage engine, mutable (slow-path maintenance such as slab merging).
    pub fn engine_mut(&mut self) -> &mut Engine {
        &mut self.engine
    }

    /// Replaces the admitted clients with `clients` (QPN, R_Key) between bursts.
    /// A client whose QPN stays keeps its PSN state (and takes the new R_Key); a
    /// removed one is forgotten, so its frames drop as `UnknownQp` from the next
    /// burst on; a new one starts fresh. Allocates: call it off the hot path.
    pub fn set_clients(&mut self, clients: &[(u32, u32)]) {
        let old = std::mem::take(&mut self.clients);
        let mut v: Vec<Client> = clients
            .iter()
            .map(
                |&(qpn, rkey)| match old.binary_search_by_key(&qpn, |c| c.qpn) {
                    Ok(i) => Client { rkey, ..old[i] },
                    Err(_) => Client {
                        qpn,
                        rkey,
                        expected_psn: None,
                        resp_psn: 0,
                    },
                },
            )
            .collect();
        v.sort_by_key(|c| c.qpn);
        v.dedup_by_key(|c| c.qpn);
        self.clients = v;
    }
}

#[inline]
fn count_op(stats: &WorkerStats, kind: OpKind, status: kvengine::Status) {
    match kind {
        OpKind::Get => {
            stats.gets.inc();
            if status == kvengine::Status::Ok {
                stats.get_hits.inc();
            }
        }
        OpKind::Put => stats.puts.inc(),
        OpKind::Delete => stats.deletes.inc(),
    }
    if !matches!(status, kvengine::Status::Ok | kvengine::Status::NotFound) {
        stats.op_errors.inc();
    }
}

/// The wire status of an engine status.
#[inline]
pub fn wire_status(s: kvengine::Status) -> Status {
    match s {
        kvengine::Status::Ok => Status::Ok,
        kvengine::Status::NotFound => Status::NotFound,
        kvengine::Status::OutOfMemory => Status::OutOfMemory,
        kvengine::Status::KeyTooLarge => Status::KeyTooLarge,
        kvengine::Status::ValueTooLarge => Status::ValueTooLarge,
        kvengine::Status::BufferTooSmall => Status::Internal,
    }
}

/// The response frame being filled.
struct Open<B> {
    /// `None` when no mbuf could be had: this packet's results are discarded.
    buf: Option<B>,
    pkt: u8,
    /// Payload bytes written (response header included).
    len: usize,
    count: u16,
    /// Index within the request of the next result.
    next_index: u16,
}

/// Streams results into response frames.
struct Responder<B, A, S> {
    cur: Option<Open<B>>,
    alloc: A,
    send: S,
    payload_cap: usize,
}

impl<B, A, S> Responder<B, A, S>
where
    B: TxFrame,
    A: FnMut() -> Option<B>,
    S: FnMut(B),
{
    /// Starts a response frame for packet `pkt`, first result index `first`.
    fn open(&mut self, pkts: &[PktCtx; MAX_BURST], stats: &WorkerStats, pkt: u8, first: u16) {
        let mut buf = (self.alloc)();
        if let Some(b) = buf.as_mut() {
            let room = b.room();
            let end = (RESPONSE_HEADER_LEN + self.payload_cap).min(room.len());
            let ok = room
                .get_mut(RESPONSE_HEADER_LEN..end)
                .map(|p| ResponseWriter::new(p, pkts[pkt as usize].batch_id, first).is_ok())
                .unwrap_or(false);
            if !ok {
                buf = None;
            }
        }
        if buf.is_none() {
            stats.drop(DropReason::NoMbuf);
        }
        self.cur = Some(Open {
            buf,
            pkt,
            len: kvwire::payload::RESPONSE_BATCH_HEADER_LEN,
            count: 0,
            next_index: first,
        });
    }

    /// Finishes the open frame (if any) and hands it to `send`.
    fn close(
        &mut self,
        clients: &mut [Client],
        id: &Identity,
        pkts: &[PktCtx; MAX_BURST],
        stats: &WorkerStats,
        more: bool,
    ) {
        let Some(open) = self.cur.take() else { return };
        let Some(mut buf) = open.buf else { return };
        let ctx = &pkts[open.pkt as usize];
        let client = &mut clients[ctx.client as usize];
        let room = buf.room();
        let end = (RESPONSE_HEADER_LEN + self.payload_cap).min(room.len());
        let frame_len = {
            let payload = &mut room[RESPONSE_HEADER_LEN..end];
            let Ok(mut w) = ResponseWriter::resume(payload, open.len, open.count) else {
                stats.drop(DropReason::NoMbuf);
                return;
            };
            w.set_more(more);
            let plen = w.finish();
            let hdr = emit_response_headers(
                room,
                &ctx.params,
                client.qpn,
                client.resp_psn,
                id.qkey,
                id.qpn,
                plen,
            );
            match hdr.and_then(|_| finalize(room)) {
                Ok(n) => n,
                Err(_) => {
                    stats.drop(DropReason::NoMbuf);
                    return;
                }
            }
        };
        client.resp_psn = psn::add(client.resp_psn, 1);
        buf.set_len(frame_len);
        stats.responses.inc();
        (self.send)(buf);
    }

    /// A request without ops: an empty response.
    fn empty(
        &mut self,
        clients: &mut [Client],
        id: &Identity,
        pkts: &[PktCtx; MAX_BURST],
        stats: &WorkerStats,
        pkt: u8,
    ) {
        self.close(clients, id, pkts, stats, false);
        self.open(pkts, stats, pkt, 0);
        self.close(clients, id, pkts, stats, false);
    }

    /// Appends one result of packet `pkt`.
    #[allow(clippy::too_many_arguments)]
    fn result(
        &mut self,
        clients: &mut [Client],
        id: &Identity,
        pkts: &[PktCtx; MAX_BURST],
        stats: &WorkerStats,
        pkt: u8,
        status: Status,
        value: &[u8],
    ) {
        if self.cur.as_ref().is_none_or(|o| o.pkt != pkt) {
            self.close(clients, id, pkts, stats, false);
            self.open(pkts, stats, pkt, 0);
        }
        let (mut status, mut value) = (status, value);
        loop {
            let cap = self.payload_cap;
            let open = self.cur.as_mut().expect("opened above");
            let Some(buf) = open.buf.as_mut() else {
                open.next_index = open.next_index.wrapping_add(1);
                return;
            };
            let room = buf.room();
            let end = (RESPONSE_HEADER_LEN + cap).min(room.len());
            let payload = &mut room[RESPONSE_HEADER_LEN..end];
            let Ok(mut w) = ResponseWriter::resume(payload, open.len, open.count) else {
                return;
            };
            match w.push(status, value) {
                Ok(()) => {
                    open.len = w.len();
                    open.count = w.count();
                    open.next_index = open.next_index.wrapping_add(1);
                    return;
                }
                Err(_) if open.count == 0 => {
                    // Even an empty frame cannot hold this value.
                    status = Status::ResponseTooLarge;
                    value = &[];
                    stats.op_errors.inc();
                }
                Err(_) => {
                    let next = open.next_index;
                    self.close(clients, id, pkts, stats, true);
                    self.open(pkts, stats, pkt, next);
                }
            }
        }
    }
}
