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

mod burst_bench;

use burst_bench::{alternate, Bench};
use dataplane::stats::WorkerStats;

fn main() {
    let mut args = std::env::args().skip(1);
    let secs: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4.0);
    let n: u32 = args.next().and_then(|s| s.parse().ok()).unwrap_or(4096);
    let stats = WorkerStats::default();
    let mut b = Bench::new(n, &stats);
    let (mops, round) = alternate(secs, &stats, 2, |slot| {
        let active = if slot == 0 { 4 } else { n as usize };
        b.run(active, &stats, &mut |s, v, st, tx| {
            s.handle_burst(v, st, tx)
        })
    });
    let (m4, mn) = (mops[0], mops[1]);
    println!(
        "{{\"server_mops_4qp\": {m4:.3}, \"server_mops_{n}qp\": {mn:.3}, \"ratio\": {:.3}, \"qps\": {n}, \"seconds\": {secs}, \"rounds\": {round}}}",
        mn / m4
    );
}
