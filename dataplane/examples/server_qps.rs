//! HERD's question for one server core, without the network: how does request
//! processing (protocol v2: connection state, slot and PSN checks, response cache)
//! scale with the number of client connections?
//!
//! One `Server` admits and connects `N` QPs. The same pre-built requests (32 ops per
//! packet, 95 % GET / 5 % PUT, uniform over 1 M 10-byte KVs) go through
//! `Server::handle_burst` in bursts of 32, each frame on the next QP in round robin,
//! alternately spread over the first 4 QPs and over all `N`, a quarter second at a time,
//! so a drift of the machine hits both alike. Only `handle_burst` is timed (headers and
//! ICRC of the next frames are written outside the timed region).
//!
//! `cargo run --release -p dataplane --example server_qps -- [SECONDS] [N]`
//! prints JSON: `server_mops_4qp`, `server_mops_<N>qp`, `ratio`.

#[path = "../tests/common/mod.rs"]
mod common;

use common::{connect, engine, identity, request, request_params, slot, VecSink, RKEY, VA};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvwire::{emit_request_headers, finalize, KvOp};
use std::time::{Duration, Instant};

const OPS_PER_PACKET: usize = 32;
const BURST: usize = 32;
const KEYS: u64 = 1_000_000;
const FIRST_QPN: u32 = 100;

fn key(i: u64) -> [u8; 8] {
    i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes()
}

/// The server, its clients' next PSNs, and the round-robin cursor.
struct Bench {
    server: Server,
    next_psn: Vec<u32>,
    cursor: usize,
    tx: VecSink,
}

impl Bench {
    /// Sends `frames` as bursts, frame k on QP `cursor % active`; returns the time in
    /// `handle_burst`.
    fn run(&mut self, frames: &mut [Vec<u8>], active: usize, stats: &WorkerStats) -> Duration {
        let mut busy = Duration::ZERO;
        for burst in frames.chunks_mut(BURST) {
            for f in burst.iter_mut() {
                let qi = self.cursor % active;
                self.cursor = self.cursor.wrapping_add(1);
                let psn = self.next_psn[qi];
                self.next_psn[qi] = (psn + 1) & 0xff_ffff;
                // The payload length (DMA length) as the frame was built.
                let plen = kvwire::parse_request_unverified(f).map_or(0, |r| r.payload.len());
                let qpn = FIRST_QPN + qi as u32;
                let _ = emit_request_headers(f, &request_params(), qpn, psn, slot(psn), RKEY, plen);
                let _ = finalize(f);
            }
            let views: Vec<&[u8]> = burst.iter().map(|f| f.as_slice()).collect();
            let t0 = Instant::now();
            self.server.handle_burst(&views, stats, &mut self.tx);
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

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4.0);
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4096);
    let qps: Vec<(u32, u32)> = (0..n).map(|i| (FIRST_QPN + i, RKEY)).collect();
    let mut server = Server::new(identity(), &qps, engine(256 << 20));
    let next_psn = qps
        .iter()
        .map(|&(q, r)| connect(&mut server, q, r).accept.request_psn)
        .collect();
    let mut b = Bench {
        server,
        next_psn,
        cursor: 0,
        tx: VecSink::default(),
    };
    let stats = WorkerStats::default();
    // Keys and values live as long as the program: the frames borrow nothing.
    let keys: &'static [[u8; 8]] =
        Box::leak((0..KEYS).map(key).collect::<Vec<_>>().into_boxed_slice());
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
    b.run(&mut load, n as usize, &stats);
    let pick = |x: u64| {
        let k = &keys[((x >> 33) % KEYS) as usize];
        if (x >> 20).is_multiple_of(20) {
            KvOp::Put { key: k, value }
        } else {
            KvOp::Get { key: k }
        }
    };
    let mut work = frames(pick, BURST * 8, 2);
    // Alternate 4 QPs and N QPs, a quarter second each.
    let mut acc = [(0u64, 0f64); 2];
    let start = Instant::now();
    let mut round = 0usize;
    while start.elapsed().as_secs_f64() < secs {
        let (active, slot) = if round.is_multiple_of(2) {
            (4, 0)
        } else {
            (n as usize, 1)
        };
        let ops0 = stats.ops();
        let t0 = Instant::now();
        let mut busy = Duration::ZERO;
        while t0.elapsed() < Duration::from_millis(250) {
            busy += b.run(&mut work, active, &stats);
        }
        acc[slot].0 += stats.ops() - ops0;
        acc[slot].1 += busy.as_secs_f64();
        round += 1;
    }
    let m4 = acc[0].0 as f64 / acc[0].1 / 1e6;
    let mn = acc[1].0 as f64 / acc[1].1 / 1e6;
    println!(
        "{{\"server_mops_4qp\": {m4:.3}, \"server_mops_{n}qp\": {mn:.3}, \"ratio\": {:.3}, \"qps\": {n}, \"seconds\": {secs}, \"rounds\": {round}}}",
        mn / m4
    );
}
