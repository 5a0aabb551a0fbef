//! The accounting invariant (docs/OPERATIONS.md, "Accounting invariant"), without
//! DPDK: every frame the server judges bumps `rx_packets` and exactly one rx term
//! (`WorkerStats::rx_accounted`), and every frame it hands to the transmit side is one
//! of `WorkerStats::tx_queued`'s terms — whatever the frame, and also when the
//! transmit side has no buffer to give.

mod common;

use common::{connect, connect_frame, identity, request, Client, VecSink, RKEY, VA};
use dataplane::server::Server;
use dataplane::stats::WorkerStats;
use kvwire::{DropReason, KvOp};

const QPN: u32 = 17;
/// Admitted, never connected.
const IDLE_QPN: u32 = 18;

fn server() -> Server {
    Server::new(
        identity(),
        &[(QPN, RKEY), (IDLE_QPN, RKEY)],
        common::engine(1 << 20),
    )
}

/// Runs one burst through a sink with `budget` tx frames (`None`: unlimited) and
/// checks both identities; returns the frames sent.
fn burst(s: &mut Server, st: &WorkerStats, frames: &[Vec<u8>], budget: Option<usize>) -> usize {
    let views: Vec<&[u8]> = frames.iter().map(|f| f.as_slice()).collect();
    let mut tx = VecSink {
        budget,
        ..VecSink::default()
    };
    let before = st.tx_queued();
    s.handle_burst(&views, st, &mut tx);
    assert_eq!(
        st.rx_packets.get(),
        st.rx_accounted(),
        "rx identity: {:?}",
        st.snapshot()
    );
    assert_eq!(
        st.tx_queued() - before,
        tx.sent.len() as u64,
        "tx identity: {:?}",
        st.snapshot()
    );
    tx.sent.len()
}

fn drops(st: &WorkerStats, r: DropReason) -> u64 {
    st.drops[r.index()].get()
}

#[test]
fn repeated_connect_is_counted_even_when_its_accept_cannot_be_sent() {
    let mut s = server();
    let st = WorkerStats::default();
    assert_eq!(burst(&mut s, &st, &[connect_frame(QPN, RKEY, 5)], None), 1);
    // The ACCEPT was lost; the repeat finds no tx buffer.
    assert_eq!(
        burst(&mut s, &st, &[connect_frame(QPN, RKEY, 5)], Some(0)),
        0
    );
    assert_eq!(st.connects.get(), 1);
    assert_eq!(st.connect_repeats.get(), 1);
    assert_eq!(drops(&st, DropReason::NoMbuf), 1);
    assert_eq!(st.rx_packets.get(), 2);
}

#[test]
fn every_path_bumps_one_term() {
    let mut s = server();
    let c: Client = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let get = [KvOp::Get { key: b"k" }];
    let put = [KvOp::Put {
        key: b"k",
        value: b"v",
    }];
    let first = c.request(&put, 1, 0);
    let mut bad_icrc = first.clone();
    let last = bad_icrc.len() - 1;
    bad_icrc[last] ^= 1;
    let frames = vec![
        first.clone(),                                      // request
        first.clone(),                                      // pending duplicate
        c.request(&get, 9, 9),                              // ahead (NAK)
        request(&get, 2, IDLE_QPN, RKEY, VA, 0),            // not connected (NAK)
        request(&get, 2, 99, RKEY, VA, 0),                  // unknown QP
        request(&get, 2, QPN, RKEY ^ 1, c.va(1), c.psn(1)), // bad R_Key
        request(&get, 2, QPN, RKEY, c.va(1) + 8, c.psn(1)), // bad VA
        bad_icrc,                                           // bad ICRC
        first[..20].to_vec(),                               // too short
        connect_frame(QPN, RKEY, 0),                        // stale CONNECT
        connect_frame(QPN, RKEY ^ 1, 9),                    // CONNECT, bad R_Key
    ];
    burst(&mut s, &st, &frames, None);
    assert_eq!(st.requests.get(), 1);
    assert_eq!(drops(&st, DropReason::PsnDuplicate), 1);
    // A duplicate in a later burst is replayed; with no tx buffer its NAKs and replays
    // fail (tx-side drops), and still each frame is one rx term.
    burst(&mut s, &st, std::slice::from_ref(&first), None);
    assert_eq!(st.replays.get(), 1);
    burst(&mut s, &st, &frames, Some(0));
    burst(&mut s, &st, &[first], Some(0));
    assert!(drops(&st, DropReason::NoMbuf) > 0);
    assert_eq!(st.rx_packets.get(), 2 * frames.len() as u64 + 2);
}

/// A small xorshift, so the mutations are reproducible.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

#[test]
fn mutated_frames_keep_both_identities() {
    let mut s = server();
    let c = connect(&mut s, QPN, RKEY);
    let st = WorkerStats::default();
    let mut rng = 0x9e37_79b9_7f4a_7c15u64;
    let ops = [
        KvOp::Put {
            key: b"a",
            value: b"1",
        },
        KvOp::Get { key: b"a" },
        KvOp::Delete { key: b"b" },
    ];
    for round in 0..400u32 {
        let mut frames = Vec::new();
        for i in 0..8u32 {
            let n = round * 8 + i;
            let mut f = match next(&mut rng) % 3 {
                0 => c.request(&ops, n, n % 40),
                1 => connect_frame(QPN, RKEY, u64::from(n % 4)),
                _ => c.request(&ops[..1], n, n % 40),
            };
            // Flip, truncate or extend.
            match next(&mut rng) % 4 {
                0 => {
                    let at = (next(&mut rng) as usize) % f.len();
                    f[at] ^= 1 << (next(&mut rng) % 8);
                }
                1 => f.truncate((next(&mut rng) as usize) % f.len()),
                2 => f.extend_from_slice(&[0; 7]),
                _ => {}
            }
            frames.push(f);
        }
        let budget = (round % 5 == 0).then_some((round as usize / 5) % 3);
        burst(&mut s, &st, &frames, budget);
    }
    assert_eq!(st.rx_packets.get(), 400 * 8);
}
