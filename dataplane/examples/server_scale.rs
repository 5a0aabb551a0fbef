//! Request-processing scaling without the network: one or two worker threads, each a
//! partition with its own `Server` (engine shard, station), each fed pre-built RoCEv2
//! request frames of its own partition's keys through `Server::handle_burst`, exactly
//! as the worker loop feeds rx bursts. Measures the processing rate of 1 vs 2 workers
//! on this machine without a load generator competing for the cores (the end-to-end
//! scale benchmark cannot avoid that on 2 cores).
//!
//! `cargo run --release -p dataplane --example server_scale -- [SECONDS] [KEYS]`
//! prints JSON: `server_mops_1_worker`, `server_mops_2_workers`, `ratio`.

// The integration tests' harness (server identity, request frames, a Vec tx side).
#[path = "../tests/common/mod.rs"]
mod common;

use common::{identity, request, request_params, slot, VecSink, RKEY, VA};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvengine::key_hash;
use kvwire::partition::partition_of_hash;
use kvwire::{emit_request_headers, finalize, KvOp};
use std::time::{Duration, Instant};

const QPNS: [u32; 2] = [18, 17]; // qpn % 2 == partition
const OPS_PER_PACKET: usize = 32;
const BURST: usize = 32;

/// A request frame carrying `ops` (PSN patched before each send).
fn frame(ops: &[KvOp<'_>], qpn: u32) -> Vec<u8> {
    request(ops, 1, qpn, RKEY, VA, 0)
}

/// Runs one worker of partition `p` of `n` for `secs`; returns (ops, seconds spent in
/// `handle_burst`).
fn worker(p: u32, n: u32, keys: u64, secs: f64) -> (u64, f64) {
    let engine = common::engine(128 << 20);
    let id = identity();
    let qpn = QPNS[p as usize];
    let mut server = Server::new(id, &[(qpn, RKEY)], engine);
    server.set_partition(p, n);
    // Protocol v2: connect first; requests carry the accepted PSNs and their slots.
    let client = common::connect(&mut server, qpn, RKEY);
    // This partition's keys (8 B), 2 B values: 10 B KVs.
    let mine: Vec<[u8; 8]> = (0..keys)
        .map(|i| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).to_le_bytes())
        .filter(|k| partition_of_hash(key_hash(k), n) == p)
        .collect();
    let value = [7u8, 7];
    let stats = WorkerStats::default();
    let mut tx = VecSink::default();
    let mut psn = client.accept.request_psn;
    let mut run = |frames: &mut [Vec<u8>], stats: &WorkerStats| -> Duration {
        for f in frames.iter_mut() {
            let plen = f.len() - kvwire::REQUEST_HEADER_LEN - kvwire::ICRC_LEN;
            let _ = emit_request_headers(f, &request_params(), qpn, psn, slot(psn), RKEY, plen);
            let _ = finalize(f);
            psn = (psn + 1) & 0xff_ffff;
        }
        let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
        let t0 = Instant::now();
        server.handle_burst(&views, stats, &mut tx);
        let t = t0.elapsed();
        tx.recycle();
        t
    };
    // Load.
    for chunk in mine.chunks(OPS_PER_PACKET * BURST) {
        let mut frames: Vec<Vec<u8>> = chunk
            .chunks(OPS_PER_PACKET)
            .map(|ks| {
                let ops: Vec<KvOp<'_>> = ks
                    .iter()
                    .map(|k| KvOp::Put {
                        key: k,
                        value: &value,
                    })
                    .collect();
                frame(&ops, qpn)
            })
            .collect();
        run(&mut frames, &stats);
    }
    // 95% GET / 5% PUT, uniform over the partition's keys.
    let mut x = 0x1234_5678_9abc_def0u64 ^ u64::from(p);
    let mut frames: Vec<Vec<u8>> = (0..BURST * 8)
        .map(|_| {
            let ops: Vec<KvOp<'_>> = (0..OPS_PER_PACKET)
                .map(|_| {
                    x = x
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    let k = &mine[((x >> 33) % mine.len() as u64) as usize];
                    if (x >> 20).is_multiple_of(20) {
                        KvOp::Put {
                            key: k,
                            value: &value,
                        }
                    } else {
                        KvOp::Get { key: k }
                    }
                })
                .collect();
            frame(&ops, qpn)
        })
        .collect();
    let ops0 = stats.ops();
    let (mut busy, start) = (Duration::ZERO, Instant::now());
    while start.elapsed().as_secs_f64() < secs {
        for burst in frames.chunks_mut(BURST) {
            busy += run(burst, &stats);
        }
    }
    (stats.ops() - ops0, busy.as_secs_f64())
}

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let keys: u64 = args
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let (ops1, busy1) = worker(0, 1, keys, secs);
    let one = ops1 as f64 / busy1 / 1e6;
    let handles: Vec<_> = (0..2u32)
        .map(|p| std::thread::spawn(move || worker(p, 2, keys, secs)))
        .collect();
    let results: Vec<(u64, f64)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    // Each worker's own rate (ops per second of its processing time), summed: the two
    // run at the same time on the two cores.
    let two: f64 = results.iter().map(|(o, b)| *o as f64 / b / 1e6).sum();
    println!(
        "{{\"server_mops_1_worker\": {one:.3}, \"server_mops_2_workers\": {two:.3}, \"ratio\": {:.3}, \"per_worker_mops\": [{}], \"keys\": {keys}, \"seconds\": {secs}}}",
        two / one,
        results
            .iter()
            .map(|(o, b)| format!("{:.3}", *o as f64 / b / 1e6))
            .collect::<Vec<_>>()
            .join(", ")
    );
}
