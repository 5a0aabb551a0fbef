use super::*;
use crate::applier::{Applier, Outcome, Reply, Sink, SinkError};
use crate::messages::{Welcome, WelcomeMode};
use crate::record::Record;
use std::collections::HashMap;

#[derive(Default)]
struct Map {
    kv: HashMap<Vec<u8>, Vec<u8>>,
    clears: u32,
}

impl Sink for Map {
    fn clear(&mut self) {
        self.kv.clear();
        self.clears += 1;
    }
    fn apply(&mut self, rec: Record<'_>) -> Result<(), SinkError> {
        match rec {
            Record::Put { key, value } => {
                self.kv.insert(key.to_vec(), value.to_vec());
            }
            Record::Delete { key } => {
                self.kv.remove(key);
            }
            Record::QpState { .. } | Record::Group { .. } => {}
        }
        Ok(())
    }
}

fn cfg(window: u16, payload: usize) -> ShipperConfig {
    ShipperConfig {
        segment_payload: payload,
        window,
        rto_ns: 1000,
        rto_max_ns: 8000,
        max_retries: 5,
    }
}

fn welcome(mode: WelcomeMode, offset: u64) -> Welcome {
    Welcome {
        nonce: 1,
        mode,
        repl_id: 77,
        epoch: 2,
        offset,
        first_psn: 0xff_fff0,
        node_id: 1,
    }
}

/// Sends everything `poll` gives (dropping PSNs in `lose`), feeds the
/// replies back; returns the segments that went out.
#[allow(clippy::too_many_arguments)]
fn pump(
    s: &mut Shipper,
    a: &mut Applier,
    m: &mut Map,
    live: &Backlog,
    sync: Option<&Backlog>,
    done: bool,
    now: u64,
    lose: &mut Vec<u32>,
) -> Vec<Outgoing> {
    let mut out = vec![0u8; 256];
    let mut sent = Vec::new();
    while let Some(o) = s.poll(now, live, sync, done, &mut out).unwrap() {
        sent.push(o);
        if let Some(i) = lose.iter().position(|&p| p == o.psn) {
            lose.remove(i);
            continue;
        }
        let (_, reply) = a.on_segment(o.psn, o.ack_req, o.imm, &out[..o.len], m);
        match reply {
            Reply::Ack(p) => s.on_ack(p, now),
            Reply::Nak(p) => s.on_nak(p, now),
            Reply::None => {}
        }
    }
    sent
}

fn fill(b: &mut Backlog, n: usize, vlen: usize) -> HashMap<Vec<u8>, Vec<u8>> {
    let mut want = HashMap::new();
    for i in 0..n {
        let k = format!("k{i}").into_bytes();
        let v = vec![i as u8; vlen + i % 7];
        b.append_record(&Record::Put { key: &k, value: &v })
            .unwrap();
        want.insert(k, v);
    }
    want
}

#[test]
fn partial_stream_with_a_lost_segment_and_psn_wrap() {
    let mut live = Backlog::new(0, 1000);
    let want = fill(&mut live, 60, 20);
    let mut s = Shipper::new(cfg(4, 200));
    let mut a = Applier::new(100);
    let mut m = Map::default();
    a.on_welcome(&welcome(WelcomeMode::Partial, 1000), &mut m);
    s.start_partial(77, 2, 0xff_fff0, 1000);
    let mut lose = vec![0xff_fff2];
    let mut now = 0;
    while s.acked_live() < live.end() {
        pump(&mut s, &mut a, &mut m, &live, None, false, now, &mut lose);
        now += 500;
        assert!(now < 1_000_000, "stuck at {}", s.acked_live());
    }
    assert_eq!(m.kv, want);
    assert_eq!(a.applied_live(), Some(live.end()));
    assert_eq!(s.stats().naks, 1);
    assert!(s.stats().resent >= 1);
    assert_eq!(s.in_flight(), 0);
}

#[test]
fn lost_acks_time_out_and_duplicates_are_reacked() {
    let mut live = Backlog::new(0, 0);
    let want = fill(&mut live, 10, 10);
    let mut s = Shipper::new(cfg(32, 1400));
    let mut a = Applier::new(100);
    let mut m = Map::default();
    a.on_welcome(&welcome(WelcomeMode::Partial, 0), &mut m);
    s.start_partial(77, 2, 0xff_fff0, 0);
    let mut out = vec![0u8; 1400];
    let o = s.poll(0, &live, None, false, &mut out).unwrap().unwrap();
    assert!(o.ack_req, "nothing more to send: AckReq");
    assert_eq!(o.imm, live.end() as u32);
    // The ACK is lost.
    assert_eq!(
        a.on_segment(o.psn, o.ack_req, o.imm, &out[..o.len], &mut m),
        (Outcome::Applied, Reply::Ack(0xff_fff0))
    );
    assert_eq!(s.poll(500, &live, None, false, &mut out).unwrap(), None);
    let r = s.poll(1000, &live, None, false, &mut out).unwrap().unwrap();
    assert!(r.resend);
    assert_eq!(
        a.on_segment(r.psn, r.ack_req, r.imm, &out[..r.len], &mut m),
        (Outcome::Duplicate, Reply::Ack(0xff_fff0))
    );
    s.on_ack(0xff_fff0, 1000);
    assert_eq!(s.acked_live(), live.end());
    assert_eq!(m.kv, want);
    assert_eq!(a.stats().duplicates, 1);
    assert_eq!(s.stats().timeouts, 1);
}

#[test]
fn unreachable_after_max_retries() {
    let mut live = Backlog::new(0, 0);
    fill(&mut live, 3, 3);
    let mut s = Shipper::new(cfg(8, 1400));
    s.start_partial(77, 2, 5, 0);
    let mut out = vec![0u8; 1400];
    let mut now = 0;
    let err = loop {
        match s.poll(now, &live, None, false, &mut out) {
            Ok(_) => now += 100,
            Err(e) => break e,
        }
        assert!(now < 10_000_000);
    };
    assert_eq!(err, ShipError::Unreachable);
    assert_eq!(s.stats().timeouts, 6);
    assert!(!s.is_active());
}

#[test]
fn long_records_are_split_and_reassembled() {
    let mut live = Backlog::new(0, 0);
    let big = vec![0xabu8; 5000];
    live.append_record(&Record::Put {
        key: b"big",
        value: &big,
    })
    .unwrap();
    live.append_record(&Record::Delete { key: b"x" }).unwrap();
    live.append_record(&Record::Put {
        key: b"y",
        value: &big[..300],
    })
    .unwrap();
    let mut s = Shipper::new(cfg(64, 256));
    let mut a = Applier::new(1);
    let mut m = Map::default();
    a.on_welcome(&welcome(WelcomeMode::Partial, 0), &mut m);
    s.start_partial(77, 2, 0xff_fff0, 0);
    let sent = pump(&mut s, &mut a, &mut m, &live, None, false, 0, &mut vec![]);
    assert!(sent.len() > 5000 / 216);
    assert_eq!(m.kv.get(&b"big"[..]), Some(&big));
    assert_eq!(m.kv.get(&b"y"[..]).map(Vec::len), Some(300));
    assert_eq!(s.acked_live(), live.end());
    assert_eq!(a.applied_live(), Some(live.end()));
}

#[test]
fn full_sync_then_live() {
    let mut live = Backlog::new(0, 500);
    let mut sync = Backlog::new(0, 0);
    let mut want = fill(&mut sync, 30, 40);
    let mut s = Shipper::new(cfg(8, 300));
    let mut a = Applier::new(4);
    let mut m = Map::default();
    m.kv.insert(b"stale".to_vec(), b"gone".to_vec());
    a.on_welcome(&welcome(WelcomeMode::Full, 500), &mut m);
    assert_eq!(m.clears, 1);
    s.start_full(77, 2, 0xff_fff0, 500);
    // Scan not complete: the sync data goes, no SNAPSHOT_END yet.
    pump(
        &mut s,
        &mut a,
        &mut m,
        &live,
        Some(&sync),
        false,
        0,
        &mut vec![],
    );
    assert!(!s.sync_done());
    assert_eq!(s.acked_sync(), sync.end());
    assert_eq!(a.applied_live(), None);
    // Live records meanwhile (a post-image newer than the scan's).
    live.append_record(&Record::Put {
        key: b"k3",
        value: b"new",
    })
    .unwrap();
    live.append_record(&Record::Delete { key: b"k4" }).unwrap();
    want.insert(b"k3".to_vec(), b"new".to_vec());
    want.remove(&b"k4"[..]);
    let sent = pump(
        &mut s,
        &mut a,
        &mut m,
        &live,
        Some(&sync),
        true,
        0,
        &mut vec![],
    );
    assert_eq!(sent[0].kind, SegmentKind::SnapshotEnd);
    assert!(s.sync_done());
    assert_eq!(m.kv, want);
    assert_eq!(a.applied_live(), Some(live.end()));
    assert_eq!(a.position(), (77, live.end()));
}

#[test]
fn evicted_bytes_need_a_full_sync() {
    let mut live = Backlog::new(0, 0);
    fill(&mut live, 3, 30_000);
    let mut s = Shipper::new(cfg(8, 1400));
    s.start_partial(77, 2, 0, 0);
    let mut out = vec![0u8; 1400];
    assert_eq!(
        s.poll(0, &live, None, false, &mut out),
        Err(ShipError::NeedFullSync)
    );
}

#[test]
fn stale_and_foreign_segments_are_dropped() {
    let mut live = Backlog::new(0, 0);
    fill(&mut live, 3, 3);
    let mut s = Shipper::new(cfg(8, 1400));
    s.start_partial(77, 1, 0, 0);
    let mut a = Applier::new(1);
    let mut m = Map::default();
    let mut out = vec![0u8; 1400];
    let o = s.poll(0, &live, None, false, &mut out).unwrap().unwrap();
    // Before a WELCOME: not connected.
    assert!(matches!(
        a.on_segment(o.psn, true, o.imm, &out[..o.len], &mut m).0,
        Outcome::Dropped(DropCause::NotConnected)
    ));
    let mut w = welcome(WelcomeMode::Partial, 0);
    w.first_psn = 0;
    a.on_welcome(&w, &mut m);
    // Epoch 1 from a master the replica knows at epoch 2: fenced.
    assert!(matches!(
        a.on_segment(o.psn, true, o.imm, &out[..o.len], &mut m).0,
        Outcome::Dropped(DropCause::WrongEpoch)
    ));
    // A wrong immediate: malformed.
    assert!(matches!(
        a.on_segment(o.psn, true, o.imm ^ 1, &out[..o.len], &mut m)
            .0,
        Outcome::Dropped(DropCause::Malformed(_))
    ));
    assert!(m.kv.is_empty());
}

use crate::applier::DropCause;

/// Sends what `poll` gives at `now` without delivering it; the PSNs.
fn drain(s: &mut Shipper, live: &Backlog, now: u64) -> Vec<(u32, bool)> {
    let mut out = vec![0u8; 256];
    let mut sent = Vec::new();
    while let Some(o) = s.poll(now, live, None, false, &mut out).unwrap() {
        sent.push((o.psn, o.resend));
    }
    sent
}

#[test]
fn a_duplicated_nak_resends_once_and_an_rnr_nak_holds_everything() {
    let mut live = Backlog::new(0, 0);
    fill(&mut live, 4, 100);
    let mut s = Shipper::new(cfg(8, 200));
    s.start_partial(77, 2, 10, 0);
    let first: Vec<u32> = drain(&mut s, &live, 0).iter().map(|p| p.0).collect();
    assert_eq!(first, [10, 11, 12, 13]);
    // The replica took 10 and NAKs 11; the network delivers the NAK twice, the copy
    // after the resend went out.
    s.on_nak(11, 100);
    assert_eq!(
        drain(&mut s, &live, 100),
        [(11, true), (12, true), (13, true)]
    );
    s.on_nak(11, 101);
    assert_eq!(
        drain(&mut s, &live, 101),
        [],
        "the duplicate NAK resends nothing"
    );
    assert_eq!(s.stats().naks, 2);
    assert_eq!(s.in_flight(), 3);
    // RNR NAK naming 12 (11 arrived): nothing goes out before the wait ends.
    s.on_rnr(12, 400, 200);
    assert_eq!(drain(&mut s, &live, 599), []);
    assert_eq!(drain(&mut s, &live, 600), [(12, true), (13, true)]);
    assert_eq!(s.in_flight(), 2);
    s.on_ack(13, 650);
    assert_eq!((s.in_flight(), s.acked_live()), (0, live.end()));
}
