//! Unit tests of `gen.rs`.

use super::*;
use crate::qp::tests::params;
use crate::spec::tests::spec;
use kvload::write_value;
use kvwire::KvOp;
use kvwire::{
    emit_response_headers, finalize, parse_request, request_frame_len, request_payload_capacity,
    response_frame_len, ResponseWriter, DEFAULT_MTU,
};
use std::collections::HashMap;

/// Timestamps in these tests are nanoseconds.
const HZ: u64 = 1_000_000_000;

fn gen(flags: &[&str]) -> Gen {
    gen_mtu(flags, DEFAULT_MTU)
}

fn gen_mtu(flags: &[&str], mtu: usize) -> Gen {
    let s = spec(flags).unwrap();
    let qps = QpSet::new(
        s.qps.qps.clone(),
        s.qps.by_partition.clone(),
        params(),
        1 << 32,
        1 << 20,
        1,
    );
    Gen::new(&s, qps, HZ, request_payload_capacity(mtu))
}

/// Builds one request frame, as an mbuf of the generator would hold it.
fn build(g: &mut Gen, phase: Phase, at: u64, record: bool) -> Option<(Vec<u8>, usize)> {
    let mut buf = vec![0u8; request_frame_len(g.payload_cap())];
    let (len, part) = g.build(&mut buf, phase, at, record)?;
    buf.truncate(len);
    Some((buf, part))
}

type Results = Vec<(Status, Vec<u8>)>;

/// A response frame carrying `results` of batch `batch_id` from index `first`.
fn response(batch_id: u32, first: u16, results: &[(Status, Vec<u8>)], more: bool) -> Vec<u8> {
    let mut payload = vec![0u8; 8192];
    let mut w = ResponseWriter::new(&mut payload, batch_id, first).unwrap();
    for (s, v) in results {
        w.push(*s, v).unwrap();
    }
    w.set_more(more);
    let plen = w.finish();
    let mut frame = vec![0u8; response_frame_len(plen)];
    let h = emit_response_headers(&mut frame, &params(), 17, 0, 0x8001_0001, 1, plen).unwrap();
    frame[h..h + plen].copy_from_slice(&payload[..plen]);
    let n = finalize(&mut frame).unwrap();
    frame.truncate(n);
    frame
}

fn elems(v: &[u8]) -> impl Iterator<Item = u64> + '_ {
    v.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
}

/// A store that executes requests as the dataplane does (u64 fetch-adds of 1).
#[derive(Default)]
struct Store(HashMap<Vec<u8>, Vec<u8>>);

impl Store {
    /// Executes one request frame; returns its batch id and results.
    fn execute(&mut self, frame: &[u8]) -> (u32, Results) {
        let req = parse_request(frame).expect("a valid request frame");
        let b = BatchReader::new(req.payload).unwrap();
        let id = b.batch_id();
        let mut out = Vec::new();
        for op in b {
            out.push(self.op(op.expect("a valid op")));
        }
        (id, out)
    }

    fn op(&mut self, op: KvOp<'_>) -> (Status, Vec<u8>) {
        let m = &mut self.0;
        match op {
            KvOp::Get { key } => match m.get(key) {
                Some(v) => (Status::Ok, v.clone()),
                None => (Status::NotFound, vec![]),
            },
            KvOp::Put { key, value } => {
                m.insert(key.to_vec(), value.to_vec());
                (Status::Ok, vec![])
            }
            KvOp::Delete { key } => match m.remove(key) {
                Some(_) => (Status::Ok, vec![]),
                None => (Status::NotFound, vec![]),
            },
            KvOp::UpdateS2S { key, .. } | KvOp::UpdateS2V { key, .. } => {
                let scalar = matches!(op, KvOp::UpdateS2S { .. });
                let Some(v) = m.get_mut(key) else {
                    return (Status::NotFound, vec![]);
                };
                if (scalar && v.len() != 8) || v.len() % 8 != 0 {
                    return (Status::BadLength, vec![]);
                }
                let orig = v.clone();
                let new: Vec<u8> = elems(&orig)
                    .flat_map(|x| x.wrapping_add(1).to_le_bytes())
                    .collect();
                *v = new;
                (Status::Ok, orig)
            }
            KvOp::Reduce { key, .. } => {
                let Some(v) = m.get(key) else {
                    return (Status::NotFound, vec![]);
                };
                if v.len() % 8 != 0 {
                    return (Status::BadLength, vec![]);
                }
                let sum = elems(v).fold(0u64, u64::wrapping_add);
                (Status::Ok, sum.to_le_bytes().to_vec())
            }
            other => panic!("pktgen does not send {other:?}"),
        }
    }
}

/// Runs `phase` for `packets` packets (or until the sweep ends) with `window`
/// packets in flight: requests execute in send order, responses come back
/// newest first. Returns the packets sent.
fn drive(g: &mut Gen, store: &mut Store, phase: Phase, packets: usize, window: usize) -> usize {
    let mut sent = 0;
    let mut t = 1_000;
    while sent < packets {
        let mut pending = Vec::new();
        while pending.len() < window && sent < packets {
            let Some((frame, _)) = build(g, phase, t, true) else {
                break;
            };
            pending.push(store.execute(&frame));
            sent += 1;
        }
        if pending.is_empty() {
            break;
        }
        t += 10;
        for (id, results) in pending.into_iter().rev() {
            assert_eq!(
                g.complete(&response(id, 0, &results, false), t, phase, 0, u64::MAX),
                1
            );
        }
    }
    assert_eq!(g.flight.busy(), 0);
    sent
}

fn assert_clean(c: &Counts) {
    assert_eq!(
        (c.mismatches, c.errors, c.stale, c.rx_drops, c.timeouts_ops),
        (0, 0, 0, 0, 0),
        "{c:?}"
    );
}

#[test]
fn verify_agrees_with_a_faithful_store() {
    // Variable value sizes and two partitions take the op-by-op path; a fixed size
    // with one partition the templates (unless turned off).
    let cases: [(&str, &[&str], bool); 4] = [
        ("8-24", &[], false),
        ("8-24", &["--partitions", "2", "--qps", "4"], false),
        ("16", &[], true),
        ("16", &["--no-templates"], false),
    ];
    for (size, extra, templated) in cases {
        let flags = [
            &[
                "--verify",
                "--keys",
                "300",
                "--value-size",
                size,
                "--get",
                "0.4",
                "--put",
                "0.3",
                "--atomic",
                "0.1",
                "--vector",
                "0.05",
                "--reduce",
                "0.05",
            ][..],
            extra,
        ]
        .concat();
        let mut g = gen(&flags);
        let mut store = Store::default();
        g.begin_phase();
        let n = drive(&mut g, &mut store, Phase::Load, usize::MAX, 4);
        let (c, _) = g.end_phase(Phase::Load);
        assert_clean(&c);
        assert_eq!(c.done_ops, 300, "every key loaded");
        assert_eq!(c.done_pkts, n as u64);
        assert_eq!(store.0.len(), 300);
        g.begin_phase();
        drive(&mut g, &mut store, Phase::Run, 2_000, 16);
        assert_eq!(g.templated(), templated, "{size} {extra:?}");
        let (c, h) = g.end_phase(Phase::Run);
        assert_clean(&c);
        assert_eq!(c.done_pkts, 2_000);
        assert_eq!(c.done_ops, 2_000 * 8);
        assert_eq!(h.len(), 2_000 * 8, "one latency sample per op");
        assert!(c.status_not_ok == 0, "BAD_LENGTH was expected: {c:?}");
        assert_eq!(g.tally.part_ops.iter().sum::<u64>(), 16_000);
        g.workload.sweep_next = 0;
        g.begin_phase();
        drive(&mut g, &mut store, Phase::Readback, usize::MAX, 4);
        let (c, _) = g.end_phase(Phase::Readback);
        assert_clean(&c);
        assert_eq!(c.done_ops, 300);
    }
}

#[test]
fn a_wrong_value_is_a_mismatch() {
    let mut g = gen(&["--verify", "--keys", "10", "--get", "1", "--put", "0"]);
    let mut store = Store::default();
    g.begin_phase();
    drive(&mut g, &mut store, Phase::Load, usize::MAX, 1);
    g.end_phase(Phase::Load);
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 0, true).unwrap();
    let (id, mut results) = store.execute(&frame);
    results[3].1[0] ^= 1;
    results[5] = (Status::NotFound, vec![]);
    assert_eq!(
        g.complete(&response(id, 0, &results, false), 5, Phase::Run, 0, 10),
        1
    );
    let (c, _) = g.end_phase(Phase::Run);
    assert_eq!(c.mismatches, 2, "{c:?}");
    // Without verify nothing is compared.
    let mut g = gen(&["--keys", "10", "--get", "1", "--put", "0"]);
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 0, true).unwrap();
    let (id, results) = Store::default().execute(&frame);
    g.complete(&response(id, 0, &results, false), 5, Phase::Run, 0, 10);
    assert_eq!(g.end_phase(Phase::Run).0.mismatches, 0);
}

#[test]
fn results_split_over_response_packets() {
    let mut g = gen(&["--verify", "--keys", "50", "--ops-per-packet", "8"]);
    let mut store = Store::default();
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 100, true).unwrap();
    let (id, results) = store.execute(&frame);
    assert_eq!(results.len(), 8);
    let first = response(id, 0, &results[..3], true);
    let rest = response(id, 3, &results[3..], false);
    assert_eq!(
        g.complete(&first, 150, Phase::Run, 0, 1_000),
        0,
        "more to come"
    );
    assert_eq!(g.flight.busy(), 1);
    assert_eq!(g.complete(&rest, 200, Phase::Run, 0, 1_000), 1);
    let (c, h) = g.end_phase(Phase::Run);
    assert_clean(&c);
    assert_eq!((c.done_pkts, c.done_ops), (1, 8));
    assert_eq!(
        (h.len(), h.min(), h.max()),
        (8, 100, 100),
        "100 ns after the send"
    );
}

#[test]
fn stale_duplicate_and_garbage_frames() {
    let mut g = gen(&["--keys", "50"]);
    let mut store = Store::default();
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 0, true).unwrap();
    let (id, results) = store.execute(&frame);
    let resp = response(id, 0, &results, false);
    assert_eq!(g.complete(&resp, 1, Phase::Run, 0, 10), 1);
    assert_eq!(g.complete(&resp, 2, Phase::Run, 0, 10), 0, "duplicate");
    // The slot is reused with the next generation: the old id stays stale.
    let (frame2, _) = build(&mut g, Phase::Run, 3, true).unwrap();
    let (id2, results2) = store.execute(&frame2);
    assert_eq!(id2 & 0xffff, id & 0xffff, "same slot");
    assert_ne!(id2, id);
    assert_eq!(g.complete(&resp, 4, Phase::Run, 0, 10), 0, "old generation");
    assert_eq!(
        g.complete(&response(0xffff, 0, &[], false), 4, Phase::Run, 0, 10),
        0
    );
    assert_eq!(g.complete(&[0u8; 60], 4, Phase::Run, 0, 10), 0);
    assert_eq!(
        g.complete(&frame2, 4, Phase::Run, 0, 10),
        0,
        "a request is no response"
    );
    assert_eq!(
        g.complete(&response(id2, 0, &results2, false), 5, Phase::Run, 0, 10),
        1
    );
    let (c, _) = g.end_phase(Phase::Run);
    assert_eq!((c.stale, c.rx_drops, c.done_pkts), (3, 2, 2), "{c:?}");
    // More results than ops: errors.
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 0, true).unwrap();
    let (id, mut results) = store.execute(&frame);
    results.push((Status::Ok, vec![]));
    g.complete(&response(id, 0, &results, false), 1, Phase::Run, 0, 10);
    assert_eq!(g.end_phase(Phase::Run).0.errors, 1);
}

#[test]
fn error_statuses_are_counted() {
    let mut g = gen(&["--keys", "50", "--get", "1", "--put", "0"]);
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 0, true).unwrap();
    let (id, mut results) = Store::default().execute(&frame);
    results[0].0 = Status::WrongPartition;
    results[1].0 = Status::BadLength;
    assert_eq!(
        g.complete(&response(id, 0, &results, false), 1, Phase::Run, 0, 10),
        1
    );
    let (c, _) = g.end_phase(Phase::Run);
    assert_eq!((c.wrong_partition, c.status_not_ok, c.errors), (1, 2, 2));
    assert_eq!(c.done_pkts, 1, "the packet still completes");
}

#[test]
fn out_of_memory_stops_the_load() {
    let mut g = gen(&["--verify", "--keys", "100"]);
    g.workload.ops_per_packet = 10;
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Load, 0, false).unwrap();
    let (id, mut results) = Store::default().execute(&frame);
    results[9].0 = Status::OutOfMemory;
    assert!(!g.workload.sweep_stop);
    g.complete(&response(id, 0, &results, false), 1, Phase::Load, 0, 10);
    assert!(g.workload.sweep_stop);
    let (c, _) = g.end_phase(Phase::Load);
    assert_eq!((c.oom, c.errors, c.done_ops), (1, 0, 10));
}

#[test]
fn timeouts_free_slots_and_make_writes_uncertain() {
    let mut g = gen(&["--verify", "--keys", "4", "--timeout-ms", "1"]);
    let mut store = Store::default();
    g.begin_phase();
    // The load packet is lost: its PUTs may or may not have been applied.
    let (frame, _) = build(&mut g, Phase::Load, 0, false).unwrap();
    assert_eq!(g.flight.busy(), 1);
    assert_eq!(g.expire(1_000_000, 1_000_000), 0, "not yet");
    assert_eq!(g.expire(1_000_001, 1_000_000), 1);
    assert_eq!(g.flight.busy(), 0);
    let (c, _) = g.end_phase(Phase::Load);
    assert_eq!((c.timeouts_pkts, c.timeouts_ops), (1, 4));
    // Its response arrives late: stale.
    let (id, results) = Store::default().execute(&frame);
    g.begin_phase();
    assert_eq!(
        g.complete(&response(id, 0, &results, false), 2, Phase::Load, 0, 10),
        0
    );
    assert_eq!(g.end_phase(Phase::Load).0.stale, 1);
    // Reading the keys back: NOT_FOUND (the store never saw the PUTs) is fine.
    g.workload.sweep_next = 0;
    g.begin_phase();
    drive(&mut g, &mut store, Phase::Readback, usize::MAX, 1);
    let (c, _) = g.end_phase(Phase::Readback);
    assert_clean(&c);
    assert_eq!(c.done_ops, 4);
}

#[test]
fn only_the_recording_window_is_measured() {
    let mut g = gen(&["--keys", "50"]);
    let mut store = Store::default();
    g.begin_phase();
    let mut respond = |g: &mut Gen, sent: u64, record: bool, done: u64| {
        let (frame, _) = build(g, Phase::Run, sent, record).unwrap();
        let (id, results) = store.execute(&frame);
        g.complete(
            &response(id, 0, &results, false),
            done,
            Phase::Run,
            100,
            200,
        )
    };
    respond(&mut g, 50, false, 120); // warm-up
    respond(&mut g, 150, true, 170); // measured: 20 ns
    respond(&mut g, 190, true, 250); // completes after the end
    let (c, h) = g.end_phase(Phase::Run);
    assert_eq!((c.done_pkts, c.done_ops), (3, 8));
    assert_eq!((h.len(), h.max()), (8, 20));
    assert_eq!(g.tally.part_ops, [16], "ops sent in the window");
}

#[test]
fn pings_are_empty_and_rotate_over_partitions() {
    let mut g = gen(&["--partitions", "2", "--qps", "4"]);
    g.begin_phase();
    let mut parts = Vec::new();
    for t in 0..4u64 {
        let (frame, part) = build(&mut g, Phase::Ping, t * 100, false).unwrap();
        parts.push(part);
        let req = parse_request(&frame).unwrap();
        assert_eq!(req.dest_qp % 2, part as u32, "a QP of the partition");
        let b = BatchReader::new(req.payload).unwrap();
        assert_eq!(b.op_count(), 0);
        let resp = response(b.batch_id(), 0, &[], false);
        assert_eq!(g.complete(&resp, t * 100 + 30, Phase::Ping, 0, 0), 1);
    }
    assert_eq!(parts, [0, 1, 0, 1]);
    let (c, h) = g.end_phase(Phase::Ping);
    assert_eq!((c.done_pkts, c.done_ops), (4, 0));
    assert_eq!((h.len(), h.min()), (4, 30), "one sample per ping");
}

#[test]
fn steered_packets_carry_one_partition_each() {
    let mut g = gen(&[
        "--partitions",
        "2",
        "--qps",
        "4",
        "--count-partitions",
        "4",
        "--window",
        "200",
    ]);
    g.begin_phase();
    for t in 0..200 {
        let (frame, part) = build(&mut g, Phase::Run, t, true).unwrap();
        let req = parse_request(&frame).unwrap();
        assert_eq!(req.dest_qp % 2, part as u32);
        for op in BatchReader::new(req.payload).unwrap() {
            let h = kvwire::hash::key_hash(op.unwrap().key());
            assert_eq!(partition_of_hash(h, 2) as usize, part);
        }
    }
    let (sum, sum_k) = (
        g.tally.part_ops.iter().sum::<u64>(),
        g.tally.part_ops_k.iter().sum::<u64>(),
    );
    assert_eq!(sum, 1600);
    assert!(sum_k >= sum, "K counts every drawn op, parked ones too");
    assert!(g.tally.part_ops_k.iter().all(|&n| n > 0));
}

#[test]
fn echo_counts_echoed_requests() {
    let mut g = gen(&["--echo", "--keys", "50"]);
    g.begin_phase();
    let (frame, _) = build(&mut g, Phase::Run, 0, true).unwrap();
    assert_eq!(g.complete(&frame, 10, Phase::Run, 0, 100), 1);
    assert_eq!(
        g.complete(&response(1, 0, &[], false), 10, Phase::Run, 0, 100),
        0
    );
    let (c, _) = g.end_phase(Phase::Run);
    assert_eq!((c.done_pkts, c.done_ops, c.rx_drops), (1, 8, 1));
}

#[test]
fn sweeps_stop_at_the_last_key_and_large_values_fill_packets() {
    let mut g = gen(&["--keys", "100", "--value-size", "1000", "--window", "128"]);
    g.workload.ops_per_packet = 64;
    g.begin_phase();
    let mut ops = 0;
    while let Some((frame, _)) = build(&mut g, Phase::Load, 0, false) {
        let req = parse_request(&frame).unwrap();
        let n = BatchReader::new(req.payload).unwrap().op_count();
        assert_eq!(n, 1, "one 1000 B value per packet");
        ops += n as usize;
    }
    assert_eq!(ops, 100);
    assert!(g.sweep_done());
    assert_eq!(g.flight.busy(), 100);
    assert!(build(&mut g, Phase::Load, 0, false).is_none());
    assert_eq!(g.workload.keys(), 100);
}

#[test]
fn jumbo_requests_carry_whole_large_values() {
    // 3000 B values at MTU 9000: two per request, verified whole (a value buffer of
    // 2 KiB once cut them short, and every GET then mismatched).
    let mut g = gen_mtu(
        &[
            "--verify",
            "--keys",
            "40",
            "--value-size",
            "3000",
            "--get",
            "0.5",
            "--put",
            "0.5",
        ],
        kvwire::MAX_MTU,
    );
    g.workload.ops_per_packet = 2;
    let mut store = Store::default();
    g.begin_phase();
    drive(&mut g, &mut store, Phase::Load, usize::MAX, 4);
    let (c, _) = g.end_phase(Phase::Load);
    assert_clean(&c);
    // Whole values: none of them fits a 1500-byte frame.
    assert!(store.0.len() == 40 && store.0.values().all(|v| v.len() == 3000));
    g.begin_phase();
    drive(&mut g, &mut store, Phase::Run, 200, 4);
    let (c, _) = g.end_phase(Phase::Run);
    assert_clean(&c);
    assert_eq!(c.done_ops, 400);
}

#[test]
fn no_frame_without_a_free_slot_or_room() {
    let mut g = gen(&["--keys", "50", "--window", "2"]);
    g.begin_phase();
    assert!(g.flight.has_free());
    assert!(build(&mut g, Phase::Run, 0, true).is_some());
    assert!(build(&mut g, Phase::Run, 0, true).is_some());
    assert!(!g.flight.has_free());
    assert!(build(&mut g, Phase::Run, 0, true).is_none());
    let mut g = gen(&["--keys", "50"]);
    let mut small = [0u8; 30];
    assert_eq!(g.build(&mut small, Phase::Run, 0, true), None);
    assert_eq!(g.flight.busy(), 0, "the slot is given back");
}

#[test]
fn ticks_to_ns() {
    assert_eq!(tsc_to_ns(3_000, 3_000_000_000), 1_000);
    assert_eq!(tsc_to_ns(u64::MAX, u64::MAX), 1_000_000_000);
}

#[test]
fn templates_carry_the_drawn_keys_values_and_mix() {
    let flags = [
        "--keys",
        "1000",
        "--value-size",
        "6",
        "--ops-per-packet",
        "16",
        "--get",
        "0.5",
        "--put",
        "0.3",
        "--atomic",
        "0.1",
        "--vector",
        "0.05",
        "--reduce",
        "0.05",
    ];
    let mut g = gen(&flags);
    g.begin_phase();
    let stride = g.flight.stride;
    let mut by_op: HashMap<&str, usize> = HashMap::new();
    let mut distinct_ids = std::collections::HashSet::new();
    for p in 0..2_000u64 {
        let (frame, _) = build(&mut g, Phase::Run, p, true).unwrap();
        assert!(g.templated());
        let req = parse_request(&frame).unwrap();
        let b = BatchReader::new(req.payload).unwrap();
        distinct_ids.insert(b.batch_id());
        let slot = (b.batch_id() & 0xffff) as usize;
        assert_eq!(b.op_count(), 16);
        for (i, op) in b.enumerate() {
            let op = op.unwrap();
            let e = g.flight.exp[slot * stride + i];
            let mut key = [0u8; 8];
            kvload::write_key(e.key, &mut key);
            assert_eq!(op.key(), key, "packet {p} op {i}");
            let name = match (e.op, op) {
                (OpType::Get, KvOp::Get { .. }) => "get",
                (OpType::Put, KvOp::Put { value, .. }) => {
                    let mut v = [0u8; 6];
                    write_value(e.key, 1, &mut v);
                    assert_eq!(value, v, "packet {p} op {i}");
                    "put"
                }
                (OpType::Atomic, KvOp::UpdateS2S { param: 1, .. }) => "atomic",
                (OpType::Vector, KvOp::UpdateS2V { param: 1, .. }) => "vector",
                (OpType::Reduce, KvOp::Reduce { .. }) => "reduce",
                (want, got) => panic!("packet {p} op {i}: expected {want:?}, sent {got:?}"),
            };
            *by_op.entry(name).or_default() += 1;
        }
        g.release(slot as u16);
    }
    assert_eq!(distinct_ids.len(), 2_000, "every packet its own batch id");
    let total = 2_000.0 * 16.0;
    for (name, share) in [
        ("get", 0.5),
        ("put", 0.3),
        ("atomic", 0.1),
        ("reduce", 0.05),
    ] {
        let got = by_op[name] as f64 / total;
        assert!(
            (got - share).abs() < 0.02,
            "{name}: {got} of the ops, {share} asked"
        );
    }
}
