//! Shared harness of the server-only examples (`server_qps`, `sampling_overhead`): one
//! `Server` with `N` connected QPs, a store loaded with 1 M 10-byte KVs, and
//! pre-built request frames (32 ops per packet, 95 % GET / 5 % PUT, uniform keys)
//! pushed through `Server::handle_burst` in bursts of 32, frame k on QP
//! `cursor % active`. Headers and ICRC of the next frames are written outside the
//! timed region; what a bench times is up to its `step` closure.

#[path = "../../tests/common/mod.rs"]
pub mod common;

#[allow(unused_imports)] // each example uses a subset
pub use common::open_qp;
use common::{connect, engine, identity, request, request_params, slot, VecSink, RKEY, VA};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvwire::{emit_request_headers, finalize, KvOp};
use std::time::{Duration, Instant};

/// Operations per request packet.
pub const OPS_PER_PACKET: usize = 32;
/// Frames per burst.
pub const BURST: usize = 32;
const KEYS: u64 = 1_000_000;
const FIRST_QPN: u32 = 100;

/// Key `i` (8 bytes) after `prefix`.
fn key(prefix: &[u8], i: u64) -> Vec<u8> {
    let mut k = prefix.to_vec();
    k.extend_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    k
}

/// The server, its clients (QPN, R_Key) and their next PSNs, the round-robin cursor
/// and the work frames.
pub struct Bench {
    server: Server,
    qps: Vec<(u32, u32)>,
    next_psn: Vec<u32>,
    cursor: usize,
    tx: VecSink,
    work: Vec<Vec<u8>>,
}

impl Bench {
    /// A server with `n` connected QPs and a loaded store, and 8 bursts of work.
    #[allow(dead_code)] // each example uses a subset
    pub fn new(n: u32, stats: &WorkerStats) -> Bench {
        let qps: Vec<(u32, u32)> = (0..n).map(|i| (FIRST_QPN + i, RKEY)).collect();
        let mut server = Server::new(identity(), &qps, engine(256 << 20));
        let clients = qps
            .iter()
            .map(|&(q, r)| connect(&mut server, q, r))
            .collect();
        Bench::with_clients(server, clients, &[], stats)
    }

    /// A bench on `server` (its engine empty) whose connected `clients` send keys
    /// behind `prefix` (a tenant's namespace, or nothing): the store is loaded with
    /// 1 M such keys through the clients, and 8 bursts of work are built.
    pub fn with_clients(
        server: Server,
        clients: Vec<common::Client>,
        prefix: &[u8],
        stats: &WorkerStats,
    ) -> Bench {
        let n = clients.len();
        let mut b = Bench {
            server,
            qps: clients.iter().map(|c| (c.qpn, c.rkey)).collect(),
            next_psn: clients.iter().map(|c| c.accept.request_psn).collect(),
            cursor: 0,
            tx: VecSink::default(),
            work: Vec::new(),
        };
        // Keys and values live as long as the program: the frames borrow nothing.
        let keys: &'static [Vec<u8>] = Box::leak(
            (0..KEYS)
                .map(|i| key(prefix, i))
                .collect::<Vec<_>>()
                .into_boxed_slice(),
        );
        let value: &'static [u8] = &[7, 7];
        let mut i = 0u64;
        let mut load = frames(
            |_| {
                i += 1;
                KvOp::Put {
                    key: &keys[((i - 1) % KEYS) as usize],
                    value,
                }
            },
            (KEYS as usize).div_ceil(OPS_PER_PACKET),
            1,
        );
        b.pass(&mut load, n, stats, &mut |s, v, st, tx| {
            s.handle_burst(v, st, tx)
        });
        let pick = |x: u64| {
            let k = &keys[((x >> 33) % KEYS) as usize];
            if (x >> 20).is_multiple_of(20) {
                KvOp::Put { key: k, value }
            } else {
                KvOp::Get { key: k }
            }
        };
        b.work = frames(pick, BURST * 8, 2);
        b
    }

    /// The server.
    #[allow(dead_code)] // each example uses a subset
    pub fn server(&mut self) -> &mut Server {
        &mut self.server
    }

    /// Sends the work frames once as bursts spread over the first `active` QPs;
    /// `step` handles one burst (and times what it wants). Returns the time spent in
    /// `step`.
    pub fn run(
        &mut self,
        active: usize,
        stats: &WorkerStats,
        step: &mut impl FnMut(&mut Server, &[&[u8]], &WorkerStats, &mut VecSink),
    ) -> Duration {
        let mut work = std::mem::take(&mut self.work);
        let busy = self.pass(&mut work, active, stats, step);
        self.work = work;
        busy
    }

    fn pass(
        &mut self,
        frames: &mut [Vec<u8>],
        active: usize,
        stats: &WorkerStats,
        step: &mut impl FnMut(&mut Server, &[&[u8]], &WorkerStats, &mut VecSink),
    ) -> Duration {
        let mut busy = Duration::ZERO;
        for burst in frames.chunks_mut(BURST) {
            for f in burst.iter_mut() {
                let qi = self.cursor % active;
                self.cursor = self.cursor.wrapping_add(1);
                let psn = self.next_psn[qi];
                self.next_psn[qi] = (psn + 1) & 0xff_ffff;
                // The payload length (DMA length) as the frame was built.
                let plen = kvwire::parse_request_unverified(f).map_or(0, |r| r.payload.len());
                let (qpn, rkey) = self.qps[qi];
                let _ = emit_request_headers(f, &request_params(), qpn, psn, slot(psn), rkey, plen);
                let _ = finalize(f);
            }
            let views: Vec<&[u8]> = burst.iter().map(|f| f.as_slice()).collect();
            let t0 = Instant::now();
            step(&mut self.server, &views, stats, &mut self.tx);
            busy += t0.elapsed();
            self.tx.recycle();
        }
        busy
    }
}

fn frames(mut ops_of: impl FnMut(u64) -> KvOp<'static>, n: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            let ops: Vec<KvOp<'_>> = (0..OPS_PER_PACKET)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ops_of(x)
                })
                .collect();
            request(&ops, 1, FIRST_QPN, RKEY, VA, 0)
        })
        .collect()
}

/// Alternates the variants of `slots`, a quarter second each, for `secs` seconds;
/// returns each variant's Mops (operations over time spent in its steps) and the
/// number of rounds. A drift of the machine hits every variant alike.
pub fn alternate(
    secs: f64,
    stats: &WorkerStats,
    variants: usize,
    mut quarter: impl FnMut(usize) -> Duration,
) -> (Vec<f64>, usize) {
    let mut acc = vec![(0u64, 0f64); variants];
    let start = Instant::now();
    let mut round = 0usize;
    while start.elapsed().as_secs_f64() < secs {
        let slot = round % variants;
        let ops0 = stats.ops();
        let t0 = Instant::now();
        let mut busy = Duration::ZERO;
        while t0.elapsed() < Duration::from_millis(250) {
            busy += quarter(slot);
        }
        acc[slot].0 += stats.ops() - ops0;
        acc[slot].1 += busy.as_secs_f64();
        round += 1;
    }
    let mops = acc.iter().map(|(o, t)| *o as f64 / t / 1e6).collect();
    (mops, round)
}
