//! The dataplane's test harness, shared by the integration tests and the
//! `server_scale` example: a server identity and engine, request frames built with
//! kvwire, and a `Vec`-backed transmit side that collects the response frames.
#![allow(dead_code)] // each test binary uses its own subset

pub mod iso;
pub mod repl;

use dataplane::packet::Identity;
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use dataplane::tx::{TxFrame, TxSink};
use kvclient::sim::{Faults, LinkEnd, LossyLink};
use kvclient::PacketIo;
use kvengine::{Engine, EngineConfig, Region};
use kvwire::frame::FrameParams;
use kvwire::transport::{
    emit_connect, parse_server_frame, slot_size, slot_va, Accept, AckFrame, Connect, ServerFrame,
    CONNECT_FRAME_LEN, DEFAULT_CREDITS,
};
use kvwire::{
    emit_request_headers, finalize, request_frame_len, BatchWriter, KvOp, REQUEST_HEADER_LEN,
};
use std::cell::Cell;
use std::net::Ipv4Addr;
use std::rc::Rc;

/// A seeded xorshift64 (13, 7, 17): the tests' workloads are the same in every run.
pub struct Rng(pub u64);

impl Rng {
    /// The next value.
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// The next value below `n` (> 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The server of partition `p` of `n`, sharing `table` (a node's workers for
/// cross-partition transactions), with a 4 MiB engine and one client QP, `18 - p`.
pub fn partition_server(
    p: u32,
    n: u32,
    table: &std::sync::Arc<dataplane::server::PartitionTable>,
) -> Server {
    let mut s = Server::new(identity(), &[(18 - p, RKEY)], engine(4 << 20));
    s.set_partition(p, n);
    s.set_partition_table(table.clone()).unwrap();
    s
}

/// Simulated time per poll of [`ServerIo`]'s client side.
pub const STEP_NS: u64 = 10_000;

/// The server's MAC.
pub const SERVER_MAC: [u8; 6] = [2, 0, 0, 0, 0, 1];
/// The client's MAC.
pub const CLIENT_MAC: [u8; 6] = [2, 0, 0, 0, 0, 2];
/// The server's IPv4 address.
pub const SERVER_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);
/// The client's IPv4 address.
pub const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 3);
/// The server's QPN (DETH source QP of responses).
pub const SERVER_QPN: u32 = 1;
/// The R_Key of the admitted test clients.
pub const RKEY: u32 = 0x1234_5678;
/// Base of the request region.
pub const VA: u64 = 1 << 32;
/// Length of the request region.
pub const REGION_LEN: u64 = 1 << 20;

/// The test server's identity (MTU 1500).
pub fn identity() -> Identity {
    Identity {
        mac: SERVER_MAC,
        ip: SERVER_IP,
        qpn: SERVER_QPN,
        qkey: 0x8001_0000,
        region_va: VA,
        region_len: REGION_LEN,
        mtu: 1500,
    }
}

/// An engine over `mem` bytes of heap memory, default parameters otherwise.
pub fn engine(mem: usize) -> Engine {
    let cfg = EngineConfig {
        mem_bytes: mem,
        ..EngineConfig::default()
    };
    Engine::new(Region::owned(mem), &cfg).expect("engine")
}

/// Client → server addresses of request frames.
pub fn request_params() -> FrameParams {
    FrameParams::new(CLIENT_MAC, SERVER_MAC, CLIENT_IP, SERVER_IP, 0xC000)
}

/// A request frame carrying `ops` (batch `batch_id`) to QP `qpn` with `rkey`, RETH VA
/// `va`, PSN `psn`.
pub fn request(ops: &[KvOp<'_>], batch_id: u32, qpn: u32, rkey: u32, va: u64, psn: u32) -> Vec<u8> {
    request_to(&request_params(), ops, batch_id, qpn, rkey, va, psn)
}

/// [`request`] with explicit addresses.
pub fn request_to(
    params: &FrameParams,
    ops: &[KvOp<'_>],
    batch_id: u32,
    qpn: u32,
    rkey: u32,
    va: u64,
    psn: u32,
) -> Vec<u8> {
    let mut payload = vec![0u8; 1440];
    let mut w = BatchWriter::new(&mut payload, batch_id).expect("payload header");
    for op in ops {
        w.push(op).expect("op fits the payload");
    }
    let len = w.finish();
    let mut buf = vec![0u8; request_frame_len(len)];
    emit_request_headers(&mut buf, params, qpn, psn, va, rkey, len).expect("headers");
    buf[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + len].copy_from_slice(&payload[..len]);
    let n = finalize(&mut buf).expect("icrc");
    buf.truncate(n);
    buf
}

/// The default window `W`.
pub const W: u16 = DEFAULT_CREDITS;

/// The request slot VA of PSN `psn` with the default window.
pub fn slot(psn: u32) -> u64 {
    slot_va(VA, slot_size(REGION_LEN, W), W, psn)
}

/// A CONNECT frame for QP `qpn` with `rkey` and `nonce`.
pub fn connect_frame(qpn: u32, rkey: u32, nonce: u64) -> Vec<u8> {
    let mut buf = vec![0u8; CONNECT_FRAME_LEN];
    let n = emit_connect(
        &mut buf,
        &request_params(),
        qpn,
        0,
        &Connect { rkey, nonce },
    )
    .expect("connect");
    buf.truncate(n);
    buf
}

/// The ACCEPT in `frame` (panics if it is none).
pub fn accept_of(frame: &[u8]) -> Accept {
    match parse_server_frame(frame) {
        Ok(ServerFrame::Accept(a)) => {
            assert_eq!(a.src_qp, SERVER_QPN);
            a.accept
        }
        other => panic!("not an ACCEPT: {other:?}"),
    }
}

/// The RC Acknowledge in `frame` (panics if it is none).
pub fn ack_of(frame: &[u8]) -> AckFrame {
    match parse_server_frame(frame) {
        Ok(ServerFrame::Ack(a)) => a,
        other => panic!("not an ACK: {other:?}"),
    }
}

/// A connected client QP: its QPN, R_Key and the ACCEPT it got.
#[derive(Clone, Copy, Debug)]
pub struct Client {
    /// QPN.
    pub qpn: u32,
    /// R_Key.
    pub rkey: u32,
    /// The server's ACCEPT.
    pub accept: Accept,
}

impl Client {
    /// The PSN of the client's `n`-th request (0: the first).
    pub fn psn(&self, n: u32) -> u32 {
        self.accept.request_psn.wrapping_add(n) & 0xff_ffff
    }

    /// The slot VA of the `n`-th request.
    pub fn va(&self, n: u32) -> u64 {
        let a = &self.accept;
        slot_va(a.region_va, u64::from(a.slot_size), a.credits, self.psn(n))
    }

    /// The `n`-th request, carrying `ops` as batch `batch_id`.
    pub fn request(&self, ops: &[KvOp<'_>], batch_id: u32, n: u32) -> Vec<u8> {
        self.request_to(&request_params(), ops, batch_id, n)
    }

    /// The `n`-th request, carrying `payload` as it is (e.g. a transaction).
    pub fn raw_request(&self, payload: &[u8], n: u32) -> Vec<u8> {
        let len = payload.len();
        let mut buf = vec![0u8; request_frame_len(len)];
        emit_request_headers(
            &mut buf,
            &request_params(),
            self.qpn,
            self.psn(n),
            self.va(n),
            self.rkey,
            len,
        )
        .expect("headers");
        buf[REQUEST_HEADER_LEN..REQUEST_HEADER_LEN + len].copy_from_slice(payload);
        let n = finalize(&mut buf).expect("icrc");
        buf.truncate(n);
        buf
    }

    /// [`Client::request`] with explicit addresses.
    pub fn request_to(
        &self,
        params: &FrameParams,
        ops: &[KvOp<'_>],
        batch_id: u32,
        n: u32,
    ) -> Vec<u8> {
        request_to(
            params,
            ops,
            batch_id,
            self.qpn,
            self.rkey,
            self.va(n),
            self.psn(n),
        )
    }
}

/// The transport settings of the model tests over the simulated link (whose clock
/// moves `STEP_NS` per poll): timers short enough for many seeds, retries enough for
/// heavy loss.
pub fn model_transport_config() -> kvclient::Config {
    kvclient::Config {
        rto_initial_ns: 300_000,
        rto_max_ns: 5_000_000,
        max_retries: 12,
        ..kvclient::Config::default()
    }
}

/// Opens a QP with an OPEN of `nonce` (partition 0), as tenant `cred` (id, secret)
/// or as none; the client, or `None` if the server did not answer an ACCEPT.
pub fn open_qp(s: &mut Server, nonce: u64, cred: Option<(u32, &[u8])>) -> Option<Client> {
    use kvwire::transport::{emit_join, signed_open, Join, CM_QPN, MAX_JOIN_FRAME_LEN};
    let join = match cred {
        Some((id, secret)) => {
            let ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            signed_open(0, nonce, id, ms, secret, &CLIENT_MAC, CLIENT_IP)
        }
        None => Join::Open {
            partition: 0,
            tenant: None,
        },
    };
    let mut buf = vec![0u8; MAX_JOIN_FRAME_LEN];
    let n = emit_join(
        &mut buf,
        &request_params(),
        CM_QPN,
        &Connect { rkey: 0, nonce },
        &join,
    )
    .expect("join");
    buf.truncate(n);
    let out = run(s, &WorkerStats::default(), &[buf]);
    let Ok(ServerFrame::Accept(a)) = parse_server_frame(out.first()?) else {
        return None;
    };
    let o = a.accept.opened?;
    Some(Client {
        qpn: o.qpn,
        rkey: o.rkey,
        accept: a.accept,
    })
}

/// Connects QP `qpn` (nonce 1) and returns the client (the server's counters of the
/// exchange go to a scratch `WorkerStats`).
pub fn connect(s: &mut Server, qpn: u32, rkey: u32) -> Client {
    connect_nonce(s, qpn, rkey, 1)
}

/// Connects QP `qpn` with `nonce`; panics unless the server answers one ACCEPT.
pub fn connect_nonce(s: &mut Server, qpn: u32, rkey: u32, nonce: u64) -> Client {
    let out = run(
        s,
        &WorkerStats::default(),
        &[connect_frame(qpn, rkey, nonce)],
    );
    assert_eq!(out.len(), 1, "one ACCEPT");
    let accept = accept_of(&out[0]);
    assert_eq!(accept.nonce, nonce);
    Client { qpn, rkey, accept }
}

/// A response frame buffer: 2 KiB pre-filled with `0xa5`, so unwritten bytes show.
pub struct VecFrame {
    /// The buffer.
    pub buf: Vec<u8>,
    /// Frame length set by the server.
    pub len: usize,
}

impl TxFrame for VecFrame {
    fn room(&mut self) -> &mut [u8] {
        &mut self.buf
    }
    fn set_len(&mut self, len: usize) {
        self.len = len;
    }
}

/// A transmit side collecting the frames sent; `alloc` fails once `budget` frames
/// were handed out (`None`: unlimited), to test mbuf exhaustion. New buffers are 2 KiB
/// of `0xa5`; [`VecSink::recycle`] reuses the sent ones (no allocation per frame, for
/// benchmarks).
#[derive(Default)]
pub struct VecSink {
    /// What `backlogged` answers.
    pub backlogged: bool,
    /// Frames sent, in order.
    pub sent: Vec<Vec<u8>>,
    /// Frames `alloc` may still hand out.
    pub budget: Option<usize>,
    /// Size of new frame buffers (0: [`FRAME_BUF`]).
    pub frame_size: usize,
    /// Buffers for later frames ([`VecSink::recycle`]).
    pub spare: Vec<Vec<u8>>,
}

/// Size of a [`VecSink`] frame buffer.
pub const FRAME_BUF: usize = 2048;

impl VecSink {
    /// A sink whose `alloc` hands out at most `budget` frames.
    pub fn with_budget(budget: usize) -> VecSink {
        VecSink {
            budget: Some(budget),
            ..VecSink::default()
        }
    }

    /// Empties `sent`, keeping the buffers for later frames.
    pub fn recycle(&mut self) {
        for mut b in self.sent.drain(..) {
            b.resize(FRAME_BUF, 0xa5);
            self.spare.push(b);
        }
    }
}

impl TxSink for VecSink {
    type Frame = VecFrame;

    fn alloc(&mut self) -> Option<VecFrame> {
        if let Some(b) = self.budget.as_mut() {
            *b = b.checked_sub(1)?;
        }
        let size = if self.frame_size == 0 {
            FRAME_BUF
        } else {
            self.frame_size
        };
        let buf = self.spare.pop().unwrap_or_else(|| vec![0xa5; size]);
        Some(VecFrame { buf, len: 0 })
    }

    fn send(&mut self, f: VecFrame) {
        let mut buf = f.buf;
        buf.truncate(f.len);
        self.sent.push(buf);
    }

    fn backlogged(&self) -> bool {
        self.backlogged
    }
}

/// Runs `frames` through the server as one burst; returns the response frames.
pub fn run(s: &mut Server, stats: &WorkerStats, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let mut tx = VecSink::default();
    s.handle_burst(&views, stats, &mut tx);
    tx.sent
}

/// Every result of a response frame: (status, value), in order.
pub fn results(frame: &[u8]) -> Vec<(kvwire::Status, Vec<u8>)> {
    let r = kvwire::parse_response(frame).expect("valid response frame");
    kvwire::ResponseReader::new(r.payload)
        .unwrap()
        .map(|x| x.map(|k| (k.status, k.value.to_vec())))
        .collect::<Result<Vec<_>, _>>()
        .unwrap()
}

/// Sum of every drop counter.
pub fn total_drops(stats: &WorkerStats) -> u64 {
    stats.drops.iter().map(|c| c.get()).sum()
}

/// The client's side of the link, with the server on the other end: every `recv`
/// first lets the server take one burst from its end and answer it, and advances the
/// clock by one step.
pub struct ServerIo {
    /// The client's end.
    pub client: LinkEnd,
    /// The server's end.
    pub server_end: LinkEnd,
    /// The server.
    pub server: Server,
    /// Its counters.
    pub stats: WorkerStats,
    /// Simulated time (ns).
    pub clock: Rc<Cell<u64>>,
}

impl ServerIo {
    /// A server for `qps` behind a seeded lossy link.
    pub fn new(seed: u64, faults: Faults, qps: &[(u32, u32)]) -> ServerIo {
        let (client, server_end) = LossyLink::new(seed, faults, faults);
        server_end.set_burst(32);
        ServerIo {
            client,
            server_end,
            server: Server::new(identity(), qps, engine(16 << 20)),
            stats: WorkerStats::default(),
            clock: Rc::new(Cell::new(0)),
        }
    }

    /// Lets the server handle one burst of what reached it.
    pub fn serve(&mut self) {
        let mut frames: Vec<Vec<u8>> = Vec::new();
        self.server_end.recv(&mut |f| frames.push(f.to_vec()));
        if frames.is_empty() {
            return;
        }
        let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let mut tx = VecSink::default();
        self.server.handle_burst(&views, &self.stats, &mut tx);
        for f in tx.sent {
            self.server_end.send(&f);
        }
    }
}

impl PacketIo for ServerIo {
    fn send(&mut self, frame: &[u8]) -> bool {
        self.client.send(frame)
    }

    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        self.serve();
        self.clock.set(self.clock.get() + STEP_NS);
        self.client.recv(f)
    }
}
