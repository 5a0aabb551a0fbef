//! Transport-level tests against the reference server over a lossy link.

mod common;

use common::*;
use kvclient::sim::Faults;
use kvclient::{Config, Error, Event, PacketIo, QpState, Transport};
use kvwire::ib::MASK_24;
use kvwire::payload::{func, Atomic, BatchWriter, KvOp, ResponseReader, Width};
use kvwire::transport::{parse_client_frame, parse_server_frame, ClientFrame, ServerFrame};
use kvwire::Status;
use std::collections::HashMap;

const CTR: &[u8] = b"ctr";
const W8: Atomic = Atomic {
    func: func::FETCH_ADD,
    width: Width::W8,
    signed: false,
};

/// What the driver saw of one request.
#[derive(Default, Debug)]
struct Seen {
    results: Vec<(Status, u64)>,
    complete: bool,
    failed: Option<Error>,
}

struct Driver {
    sim: Sim,
    t: Transport,
    seen: HashMap<u64, Seen>,
    connected_events: usize,
}

impl Driver {
    fn new(sim: Sim, cfg: Config, nqp: u32) -> Driver {
        let t = Transport::new(cfg, &qps(nqp), client_params());
        Driver {
            sim,
            t,
            seen: HashMap::new(),
            connected_events: 0,
        }
    }

    fn poll(&mut self) {
        let now = self.sim.now();
        let Driver {
            sim,
            t,
            seen,
            connected_events,
        } = self;
        t.poll(sim, now, &mut |ev| match ev {
            Event::Connected { .. } => *connected_events += 1,
            Event::Lost { .. } => panic!("resuming is off in these tests"),
            Event::Results { tag, payload, .. } => {
                let s = seen.entry(tag).or_default();
                assert!(!s.complete && s.failed.is_none(), "results after the end");
                let rd = ResponseReader::new(payload).unwrap();
                // Reassembly: delivered in order, each result once.
                assert_eq!(usize::from(rd.first_index()), s.results.len(), "tag {tag}");
                for r in rd {
                    let r = r.unwrap();
                    let mut b = [0u8; 8];
                    b[..r.value.len()].copy_from_slice(r.value);
                    s.results.push((r.status, u64::from_le_bytes(b)));
                }
            }
            Event::Complete { tag, .. } => {
                let s = seen.entry(tag).or_default();
                assert!(!s.complete && s.failed.is_none(), "completed twice: {tag}");
                s.complete = true;
            }
            Event::Failed { tag, error, .. } => {
                let s = seen.entry(tag).or_default();
                assert!(!s.complete && s.failed.is_none(), "failed after the end");
                s.failed = Some(error);
            }
        });
    }

    fn connect(&mut self) {
        let now = self.sim.now();
        self.t.connect_all(&mut self.sim, now);
        let deadline = now + 10_000_000_000;
        while !self.t.all_connected() {
            assert!(self.sim.now() < deadline, "connect timed out");
            self.poll();
        }
    }

    /// Sends one request of `ops` on `qp` with tag `tag`; false if it cannot now.
    fn send(&mut self, qp: usize, tag: u64, ops: &[KvOp<'_>]) -> bool {
        let now = self.sim.now();
        if !self.t.can_send(qp, now) {
            return false;
        }
        let r = self.t.send_with(&mut self.sim, qp, now, tag, |buf, id| {
            let mut w = BatchWriter::new(buf, id).ok()?;
            for op in ops {
                w.push(op).ok()?;
            }
            Some(w.finish())
        });
        r.is_ok()
    }
}

fn faults(p: f64) -> Faults {
    Faults::uniform(p)
}

/// N QPs × M fetch-adds of 1 on one key through a lossy link: every request
/// completes once, the final value is N·M and the originals are 0..N·M, each once.
fn fetch_adds(seed: u64, nqp: u32, m: usize, srv: SrvCfg, p: f64) -> Driver {
    let mut sim = Sim::new(seed, faults(p), srv, &qps(nqp));
    sim.server
        .store
        .insert(CTR.to_vec(), 0u64.to_le_bytes().to_vec());
    let mut d = Driver::new(sim, Config::default(), nqp);
    d.connect();
    let mut left = vec![m; nqp as usize];
    let mut next_tag = 0u64;
    let mut ops_of = HashMap::new();
    let deadline = d.sim.now() + 600_000_000_000;
    let add = KvOp::UpdateS2S {
        key: CTR,
        atomic: W8,
        param: 1,
        param2: 0,
    };
    loop {
        for (qp, left) in left.iter_mut().enumerate() {
            while *left > 0 {
                let k = (1 + (seed as usize + next_tag as usize) % 4).min(*left);
                if !d.send(qp, next_tag, &vec![add; k]) {
                    break;
                }
                ops_of.insert(next_tag, k);
                *left -= k;
                next_tag += 1;
            }
        }
        d.poll();
        let done = d
            .seen
            .values()
            .filter(|s| s.complete || s.failed.is_some())
            .count();
        if left.iter().all(|&l| l == 0) && done == ops_of.len() {
            break;
        }
        assert!(d.sim.now() < deadline, "seed {seed}: stuck");
    }
    let total = nqp as u64 * m as u64;
    let mut originals = Vec::new();
    for (tag, k) in &ops_of {
        let s = &d.seen[tag];
        assert_eq!(s.failed, None, "seed {seed} tag {tag}");
        assert!(s.complete);
        assert_eq!(s.results.len(), *k, "seed {seed} tag {tag}");
        for &(st, v) in &s.results {
            assert_eq!(st, Status::Ok);
            originals.push(v);
        }
    }
    originals.sort_unstable();
    assert_eq!(originals, (0..total).collect::<Vec<_>>(), "seed {seed}");
    assert_eq!(d.sim.server.store[CTR], total.to_le_bytes(), "seed {seed}");
    assert_eq!(d.sim.server.executed, total, "seed {seed}: executed twice?");
    let st = d.t.stats();
    assert_eq!(st.completed, ops_of.len() as u64);
    assert_eq!(st.failed, 0);
    assert_eq!(d.t.total_in_flight(), 0);
    d
}

#[test]
fn fetch_adds_exactly_once_under_loss_dup_reorder() {
    let mut retrans = 0;
    let mut dups = 0;
    for seed in 0..40 {
        let srv = SrvCfg {
            credits: 1 << (seed % 4 + 1),
            results_per_frame: 1 + seed as usize % 3,
            ..SrvCfg::default()
        };
        let d = fetch_adds(seed, 3, 60, srv, 0.05);
        retrans += d.t.stats().retransmitted;
        dups += d.t.stats().dup_frames;
    }
    // The faults did happen and were repaired.
    assert!(retrans > 100, "{retrans}");
    assert!(dups > 50, "{dups}");
}

#[test]
fn fetch_adds_heavy_loss() {
    for seed in 100..105 {
        let srv = SrvCfg {
            results_per_frame: 1,
            ..SrvCfg::default()
        };
        fetch_adds(seed, 2, 40, srv, 0.2);
    }
}

#[test]
fn psn_wraps() {
    for seed in 0..8 {
        let srv = SrvCfg {
            first_request_psn: MASK_24 - 5,
            credits: 4,
            results_per_frame: 2,
            ..SrvCfg::default()
        };
        let d = fetch_adds(seed, 2, 40, srv, 0.05);
        // Every QP went past 2^24 − 1.
        for qp in 0..2 {
            assert!(d.t.next_psn(qp) < 100, "{}", d.t.next_psn(qp));
        }
    }
}

/// CAS chains: each QP claims values by CAS(v, v+1) one at a time; exactly-once
/// means the claims are 0..final, each once.
#[test]
fn cas_chains_exactly_once() {
    for seed in 0..20 {
        let nqp = 3u32;
        let mut sim = Sim::new(seed, faults(0.05), SrvCfg::default(), &qps(nqp));
        sim.server
            .store
            .insert(CTR.to_vec(), 0u64.to_le_bytes().to_vec());
        let mut d = Driver::new(sim, Config::default(), nqp);
        d.connect();
        let mut guess = vec![0u64; nqp as usize];
        let mut pending: Vec<Option<u64>> = vec![None; nqp as usize];
        let mut claimed = Vec::new();
        let mut tag = 0u64;
        let target = 150;
        let deadline = d.sim.now() + 600_000_000_000;
        loop {
            for qp in 0..nqp as usize {
                if pending[qp].is_none() && claimed.len() < target {
                    let op = KvOp::UpdateS2S {
                        key: CTR,
                        atomic: Atomic {
                            func: func::CAS,
                            ..W8
                        },
                        param: guess[qp],
                        param2: guess[qp] + 1,
                    };
                    if d.send(qp, tag, &[op]) {
                        pending[qp] = Some(tag);
                        tag += 1;
                    }
                }
            }
            d.poll();
            for qp in 0..nqp as usize {
                if let Some(t) = pending[qp] {
                    if let Some(s) = d.seen.get(&t).filter(|s| s.complete) {
                        let (st, orig) = s.results[0];
                        assert_eq!(st, Status::Ok);
                        if orig == guess[qp] {
                            claimed.push(orig);
                            guess[qp] = orig + 1;
                        } else {
                            guess[qp] = orig;
                        }
                        pending[qp] = None;
                    }
                }
            }
            if claimed.len() >= target && pending.iter().all(Option::is_none) {
                break;
            }
            assert!(d.sim.now() < deadline, "seed {seed}: stuck");
        }
        assert!(d.seen.values().all(|s| s.failed.is_none()));
        claimed.sort_unstable();
        let n = claimed.len() as u64;
        assert_eq!(claimed, (0..n).collect::<Vec<_>>(), "seed {seed}");
        assert_eq!(d.sim.server.store[CTR], n.to_le_bytes(), "seed {seed}");
    }
}

#[test]
fn connect_survives_lost_accepts_and_ignores_other_nonces() {
    let sim = Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1));
    let mut lost = 0;
    sim.server_end.set_tx_filter(Some(Box::new(move |f| {
        let real =
            matches!(parse_server_frame(f), Ok(ServerFrame::Accept(a)) if a.accept.credits != 64);
        if real && lost < 3 {
            lost += 1;
            return true;
        }
        false
    })));
    let mut d = Driver::new(sim, Config::default(), 1);
    let t0 = d.sim.now();
    d.t.connect_all(&mut d.sim, t0);
    // A forged ACCEPT with another nonce (and another window) is ignored.
    let mut buf = [0u8; 256];
    let forged = kvwire::Accept {
        nonce: t0 + 5,
        credits: 64,
        request_psn: 7,
        response_psn: 0,
        slot_size: 512,
        region_va: 0,
        resumed: false,
        opened: None,
    };
    let n = kvwire::emit_accept(&mut buf, &client_params(), 16, QKEY, SERVER_QPN, &forged).unwrap();
    d.sim.server_end.send(&buf[..n]);
    while !d.t.all_connected() {
        assert_eq!(d.t.state(0), QpState::Connecting);
        d.poll();
        assert!(d.sim.now() < t0 + 1_000_000_000);
    }
    assert_eq!(d.connected_events, 1);
    assert_eq!(d.t.credits(0), 8);
    assert_eq!(d.t.next_psn(0), 100);
    let c = &d.sim.server.connects;
    assert_eq!(c.len(), 4, "{c:?}");
    assert!(
        c.iter().all(|&(_, q, nonce)| q == 16 && nonce == t0),
        "{c:?}"
    );
    // Retransmitted every connect_timeout_ns.
    for w in c.windows(2) {
        assert!(w[1].0 - w[0].0 >= Config::default().connect_timeout_ns);
    }
    assert_eq!(d.t.stats().connects_sent, 4);
    assert!(d.t.stats().stale_frames >= 1);
    // A request now goes through.
    let put = KvOp::Put {
        key: b"k",
        value: b"v",
    };
    assert!(d.send(0, 9, &[put]));
    while !d.seen.get(&9).is_some_and(|s| s.complete) {
        d.poll();
    }
}

fn put(key: &[u8]) -> KvOp<'_> {
    KvOp::Put { key, value: b"v" }
}

#[test]
fn rnr_backoff_is_honoured() {
    let srv = SrvCfg {
        rnr_psns: vec![103],
        rnr_timer: 16,
        ..SrvCfg::default()
    };
    let hold = u64::from(kvwire::transport::rnr_timer_micros(16)) * 1000;
    assert!(hold > Config::default().rto_initial_ns);
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, srv, &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    for tag in 0..8 {
        assert!(d.send(0, tag, &[put(b"k")]));
    }
    while d.seen.values().filter(|s| s.complete).count() < 8 {
        d.poll();
        assert!(d.sim.now() < 10_000_000_000);
    }
    let log = &d.sim.server.log;
    let rnr = log
        .iter()
        .find(|a| a.disp == Disp::Rnr)
        .expect("an RNR NAK");
    assert_eq!(rnr.psn, 103);
    let later: Vec<_> = log.iter().filter(|a| a.t > rnr.t).collect();
    assert!(!later.is_empty());
    for a in &later {
        assert!(
            a.t >= rnr.t + hold,
            "resent {} ns after the RNR NAK",
            a.t - rnr.t
        );
    }
    // Resent from the RNR PSN, in order, and served.
    let served: Vec<u32> = log
        .iter()
        .filter(|a| a.disp == Disp::Served)
        .map(|a| a.psn)
        .collect();
    assert_eq!(served, (100..108).collect::<Vec<_>>());
    assert_eq!(later[0].psn, 103);
    assert_eq!(d.t.stats().rnr_naks, 1);
    assert_eq!(d.t.stats().timeouts, 0);
    assert_eq!(d.sim.server.executed, 8);
}

#[test]
fn nak_triggers_resend_from_the_nak_psn() {
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    // Lose the first transmission of PSN 102.
    let mut dropped = false;
    d.sim.client.set_tx_filter(Some(Box::new(move |f| {
        if let Ok(ClientFrame::Request(r)) = parse_client_frame(f) {
            if r.psn == 102 && !dropped {
                dropped = true;
                return true;
            }
        }
        false
    })));
    let t0 = d.sim.now();
    for tag in 0..6 {
        assert!(d.send(0, tag, &[put(b"k")]));
    }
    while d.seen.values().filter(|s| s.complete).count() < 6 {
        d.poll();
    }
    let log = &d.sim.server.log;
    let seq: Vec<(u32, Disp)> = log.iter().map(|a| (a.psn, a.disp)).collect();
    use Disp::*;
    assert_eq!(
        seq,
        [
            (100, Served),
            (101, Served),
            (103, Ahead(true)),
            (104, Ahead(false)),
            (105, Ahead(false)),
            (102, Served),
            (103, Served),
            (104, Served),
            (105, Served)
        ]
    );
    // Resent on the NAK, long before any timeout.
    assert!(log[5].t - t0 < Config::default().rto_initial_ns / 2);
    let st = d.t.stats();
    assert_eq!((st.naks_seq, st.timeouts, st.retransmitted), (1, 0, 4));
}

#[test]
fn duplicate_naks_resend_once() {
    // Every server frame is duplicated: each NAK arrives twice.
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    d.sim.server_end.set_tx_faults(Faults {
        duplicate: 1.0,
        ..Faults::NONE
    });
    let mut dropped = false;
    d.sim.client.set_tx_filter(Some(Box::new(move |f| {
        if let Ok(ClientFrame::Request(r)) = parse_client_frame(f) {
            if r.psn == 101 && !dropped {
                dropped = true;
                return true;
            }
        }
        false
    })));
    for tag in 0..4 {
        assert!(d.send(0, tag, &[put(b"k")]));
    }
    while d.seen.values().filter(|s| s.complete).count() < 4 {
        d.poll();
    }
    let st = d.t.stats();
    assert_eq!((st.naks_seq, st.retransmitted), (1, 3), "{st:?}");
    assert!(st.dup_frames >= 4, "{st:?}");
    assert_eq!(d.sim.server.executed, 4);
}

#[test]
fn timeout_after_max_retries_then_reconnect() {
    let srv = SrvCfg {
        answer_requests: false,
        ..SrvCfg::default()
    };
    let cfg = Config::default();
    let mut d = Driver::new(Sim::new(1, Faults::NONE, srv, &qps(1)), cfg, 1);
    d.connect();
    let t0 = d.sim.now();
    assert!(d.send(0, 1, &[put(b"a")]));
    assert!(d.send(0, 2, &[put(b"b")]));
    while !d.seen.get(&1).is_some_and(|s| s.failed.is_some()) {
        d.poll();
        assert!(d.sim.now() < t0 + 10_000_000_000);
    }
    assert_eq!(d.seen[&1].failed, Some(Error::Timeout));
    assert_eq!(d.seen[&2].failed, Some(Error::ConnectionLost));
    let waited: u64 = (0..=cfg.max_retries)
        .map(|i| (cfg.rto_initial_ns << i).min(cfg.rto_max_ns))
        .sum();
    assert!(
        d.sim.now() - t0 >= waited,
        "{} < {waited}",
        d.sim.now() - t0
    );
    let arrivals = d.sim.server.log.iter().filter(|a| a.psn == 100).count();
    assert_eq!(arrivals, 1 + usize::from(cfg.max_retries));
    let st = *d.t.stats();
    assert_eq!(st.timeouts, u64::from(cfg.max_retries) + 1);
    assert_eq!(st.failed, 2);
    assert_eq!(d.t.state(0), QpState::Failed);
    assert!(!d.t.can_send(0, d.sim.now()));
    assert_eq!(d.t.total_in_flight(), 0);
    // Reconnect: a new incarnation with a larger nonce.
    d.sim.server.cfg.answer_requests = true;
    d.connect();
    let c = &d.sim.server.connects;
    assert!(c[c.len() - 1].2 > c[0].2);
    assert_eq!(d.t.next_psn(0), 1100);
    assert!(d.send(0, 3, &[put(b"c")]));
    while !d.seen.get(&3).is_some_and(|s| s.complete) {
        d.poll();
    }
}

/// With `give_up_ns`, running out of retries is not enough: the request is retried
/// on (at most `rto_max_ns` apart) until it has been outstanding that long.
#[test]
fn timeout_waits_for_give_up_ns() {
    let srv = SrvCfg {
        answer_requests: false,
        ..SrvCfg::default()
    };
    let cfg = Config {
        rto_max_ns: 2_000_000,
        give_up_ns: 100_000_000,
        ..Config::default()
    };
    let mut d = Driver::new(Sim::new(1, Faults::NONE, srv, &qps(1)), cfg, 1);
    d.connect();
    let t0 = d.sim.now();
    assert!(d.send(0, 1, &[put(b"a")]));
    while !d.seen.get(&1).is_some_and(|s| s.failed.is_some()) {
        d.poll();
        assert!(d.sim.now() < t0 + 10_000_000_000);
    }
    assert_eq!(d.seen[&1].failed, Some(Error::Timeout));
    let waited = d.sim.now() - t0;
    assert!(waited >= cfg.give_up_ns, "gave up after {waited} ns");
    assert!(waited <= cfg.give_up_ns + 2 * cfg.rto_max_ns, "{waited} ns");
    // Retransmitted all along (2 ms apart once backed off), not only max_retries times.
    let arrivals = d.sim.server.log.iter().filter(|a| a.psn == 100).count();
    assert!(arrivals > 40, "{arrivals} arrivals");
}

#[test]
fn invalid_request_nak_fails_in_flight_requests() {
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(2)),
        Config::default(),
        2,
    );
    d.connect();
    d.sim.server.disconnect(16);
    for tag in 0..3 {
        assert!(d.send(0, tag, &[put(b"k")]));
    }
    assert!(d.send(1, 10, &[put(b"k")]));
    while d.seen.len() < 4 || d.seen.values().any(|s| !s.complete && s.failed.is_none()) {
        d.poll();
    }
    for tag in 0..3 {
        assert_eq!(d.seen[&tag].failed, Some(Error::ConnectionLost));
    }
    assert!(d.seen[&10].complete);
    assert_eq!(d.t.state(0), QpState::Failed);
    assert!(d.t.is_connected(1));
    let st = d.t.stats();
    assert_eq!(st.naks_invalid, 1);
    assert_eq!(st.stale_frames, 2, "the later NAKs are stale");
    assert_eq!(d.sim.server.executed, 1);
}

#[test]
fn io_refusal_sends_nothing() {
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    d.sim.client.set_tx_capacity(0);
    let now = d.sim.now();
    let r = d.t.send_with(&mut d.sim, 0, now, 1, |buf, id| {
        let mut w = BatchWriter::new(buf, id).ok()?;
        w.push(&put(b"k")).ok()?;
        Some(w.finish())
    });
    assert_eq!(r, Err(kvclient::SendError::IoBusy));
    assert_eq!(d.t.next_psn(0), 100);
    assert_eq!(d.t.total_in_flight(), 0);
    // A batch id other than the PSN is refused.
    let r = d.t.send_with(&mut d.sim, 0, now, 1, |buf, id| {
        let mut w = BatchWriter::new(buf, id + 1).ok()?;
        w.push(&put(b"k")).ok()?;
        Some(w.finish())
    });
    assert_eq!(r, Err(kvclient::SendError::BadPayload));
}

#[test]
fn lost_response_is_fast_retransmitted_and_replayed() {
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    // Lose the (first) response to PSN 101.
    let mut dropped = false;
    d.sim.server_end.set_tx_filter(Some(Box::new(move |f| {
        if let Ok(ServerFrame::Response(r)) = parse_server_frame(f) {
            if ResponseReader::new(r.payload).map(|x| x.batch_id()) == Ok(101) && !dropped {
                dropped = true;
                return true;
            }
        }
        false
    })));
    let t0 = d.sim.now();
    for tag in 0..6 {
        assert!(d.send(0, tag, &[put(b"k")]));
    }
    while d.seen.values().filter(|s| s.complete).count() < 6 {
        d.poll();
    }
    let log = &d.sim.server.log;
    let seq: Vec<(u32, Disp)> = log.iter().map(|a| (a.psn, a.disp)).collect();
    use Disp::*;
    // Three later completions (102, 103, 104) and 101 goes again: replayed, not run.
    assert_eq!(
        &seq[..6],
        [
            (100, Served),
            (101, Served),
            (102, Served),
            (103, Served),
            (104, Served),
            (105, Served)
        ]
    );
    assert_eq!(seq[6], (101, Replayed));
    assert!(
        log[6].t - t0 < Config::default().rto_initial_ns / 2,
        "resent after 3 later completions, before the timer"
    );
    let st = d.t.stats();
    assert_eq!((st.fast_retransmits, st.timeouts), (1, 0));
}

#[test]
fn rto_adapts_to_the_measured_round_trip() {
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    assert_eq!(
        d.t.rto_ns(),
        Config::default().rto_initial_ns,
        "no sample yet"
    );
    for tag in 0..20 {
        assert!(d.send(0, tag, &[put(b"k")]));
        while !d.seen.get(&tag).is_some_and(|s| s.complete) {
            d.poll();
        }
    }
    // The simulated round trip is a few poll steps: far below 1 ms, so the timeout
    // settles at its floor.
    assert_eq!(d.t.rto_ns(), Config::default().rto_min_ns);
}

#[test]
fn a_request_after_a_quiet_spell_is_not_resent_early() {
    let mut d = Driver::new(
        Sim::new(1, Faults::NONE, SrvCfg::default(), &qps(1)),
        Config::default(),
        1,
    );
    d.connect();
    assert!(d.send(0, 1, &[put(b"k")]));
    while !d.seen.get(&1).is_some_and(|s| s.complete) {
        d.poll();
    }
    // Quiet for far longer than the timeout: the deadline set when the response
    // came is long past. The next request's answer is slow (the server holds it):
    // within one timeout of its send nothing may be resent.
    d.sim.clock.set(d.sim.now() + 1_000_000_000);
    d.sim.server.cfg.answer_requests = false;
    let retransmitted = d.t.stats().retransmitted;
    assert!(d.send(0, 2, &[put(b"k")]));
    let sent = d.sim.now();
    while d.sim.now() < sent + d.t.rto_ns() / 2 {
        d.poll();
    }
    assert_eq!(
        d.t.stats().retransmitted,
        retransmitted,
        "resent on a stale deadline"
    );
    assert_eq!(d.t.stats().timeouts, 0);
}
