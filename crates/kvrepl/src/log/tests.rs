//! Unit tests of the log rings.

use super::*;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// A random record as owned (kind, key, value).
fn random_record(rng: &mut SmallRng) -> (u8, Vec<u8>, Vec<u8>) {
    let kind = rng.gen_range(1..=3u8);
    let klen = if kind == 3 { 0 } else { rng.gen_range(0..=255) };
    let vlen = if kind == 2 {
        0
    } else if rng.gen_bool(0.01) {
        rng.gen_range(0..=8000)
    } else {
        rng.gen_range(0..=300)
    };
    let key = (0..klen).map(|_| rng.gen()).collect();
    let value = (0..vlen).map(|_| rng.gen()).collect();
    (kind, key, value)
}

fn as_record<'a>(r: &'a (u8, Vec<u8>, Vec<u8>), qpn: u32) -> Record<'a> {
    match r.0 {
        1 => Record::Put {
            key: &r.1,
            value: &r.2,
        },
        2 => Record::Delete { key: &r.1 },
        _ => Record::QpState { qpn, bytes: &r.2 },
    }
}

/// Two threads: the producer pushes N random records (spinning on Full),
/// the consumer checks every one, in order, byte for byte, with the lookahead of
/// [`LogConsumer::drain_ahead`] running over the ring's wrap: every upcoming key
/// shown is the key of a record still to come.
#[test]
fn two_threads_exact_order() {
    const N: usize = 20_000;
    let (mut p, mut c) = log_ring(MIN_LOG_CAPACITY + 777);
    let producer = std::thread::spawn(move || {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut full = 0u64;
        for i in 0..N {
            let r = random_record(&mut rng);
            let rec = as_record(&r, i as u32 & 0xff_ffff);
            loop {
                match p.try_push(&rec) {
                    Ok(()) => break,
                    Err(PushError::Full) => {
                        full += 1;
                        std::thread::yield_now();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        (full, p.pushed())
    });
    let mut rng = SmallRng::seed_from_u64(7);
    let mut seen = 0usize;
    let mut enc = vec![0u8; MAX_RECORD_LEN];
    let mut upcoming = std::collections::VecDeque::new();
    let mut shown = 0usize;
    while seen < N {
        let n = c
            .drain_ahead(64, 4, |d| {
                let item = match d {
                    Drained::Item(item) => item,
                    Drained::Upcoming(k) => {
                        upcoming.push_back(k.to_vec());
                        return true;
                    }
                };
                let LogItem::Live(bytes) = item else {
                    panic!("unexpected {item:?}");
                };
                if let Ok((Record::Put { key, .. } | Record::Delete { key }, _)) =
                    Record::decode(bytes)
                {
                    // Keys that straddled the wrap were not shown: skip past them.
                    while let Some(k) = upcoming.front() {
                        if k == key {
                            break;
                        }
                        upcoming.pop_front();
                    }
                    shown += usize::from(upcoming.pop_front().is_some());
                }
                let r = random_record(&mut rng);
                let want = as_record(&r, seen as u32 & 0xff_ffff);
                let len = want.encode_into(&mut enc).unwrap();
                assert_eq!(bytes, &enc[..len], "record {seen}");
                seen += 1;
                true
            })
            .unwrap();
        if n == 0 {
            std::thread::yield_now();
        }
    }
    assert!(shown > N / 4, "keys shown ahead: {shown} of {N} records");
    let (_full, pushed) = producer.join().unwrap();
    assert_eq!(c.popped(), pushed);
    assert_eq!(c.pending_bytes(), 0);
    assert!(c.is_abandoned());
}

#[test]
fn notify_wakes_once_per_batch_of_pushes() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let (mut p, _c) = log_ring(4096);
    p.notify(); // no waker: nothing happens
    let calls = Arc::new(AtomicU64::new(0));
    let c2 = calls.clone();
    p.set_waker(Some(Arc::new(move || {
        c2.fetch_add(1, Ordering::Relaxed);
    })));
    p.notify();
    assert_eq!(calls.load(Ordering::Relaxed), 0, "nothing pushed");
    for _ in 0..3 {
        p.try_push(&Record::Delete { key: b"k" }).unwrap();
    }
    p.notify();
    p.notify();
    assert_eq!(
        calls.load(Ordering::Relaxed),
        1,
        "one wake for three records"
    );
    p.try_push(&Record::Delete { key: b"k" }).unwrap();
    p.notify();
    assert_eq!(calls.load(Ordering::Relaxed), 2);
}

#[test]
fn full_ring_writes_nothing_and_recovers() {
    let (mut p, mut c) = log_ring(0);
    let value = vec![5u8; 30_000];
    let rec = Record::Put {
        key: b"k",
        value: &value,
    };
    let mut pushed = 0;
    while p.try_push(&rec).is_ok() {
        pushed += 1;
    }
    assert_eq!(pushed, MIN_LOG_CAPACITY / rec.encoded_len());
    let free = p.free_bytes();
    assert_eq!(p.try_push(&rec), Err(PushError::Full));
    assert_eq!(p.free_bytes(), free, "a refused push writes nothing");
    // Drain one, then the next push wraps around the ring's end.
    let mut got = 0;
    c.drain(1, |_| {
        got += 1;
        true
    })
    .unwrap();
    assert_eq!(got, 1);
    p.try_push(&rec).unwrap();
    let mut n = 0;
    c.drain(usize::MAX, |item| {
        assert_eq!(
            Record::decode(match item {
                LogItem::Live(b) => b,
                other => panic!("{other:?}"),
            }),
            Ok((rec, rec.encoded_len()))
        );
        n += 1;
        true
    })
    .unwrap();
    assert_eq!(n, pushed);
}

#[test]
fn scan_items_and_markers() {
    let (mut p, mut c) = log_ring(0);
    let scan = Record::Put {
        key: b"a",
        value: b"1",
    };
    let live = Record::Delete { key: b"b" };
    p.try_push_scan_begin(9).unwrap();
    assert_eq!(p.try_push_scan(&scan, 5), Err(PushError::NoCredit));
    p.try_push_scan(&scan, 6).unwrap();
    p.try_push(&live).unwrap();
    assert_eq!(p.try_push_scan(&scan, 6), Err(PushError::NoCredit));
    p.try_push_scan_end(9).unwrap();
    assert_eq!(p.scan_pushed(), 6);
    let mut items = Vec::new();
    // Refusing an item leaves it in place, scan bit included.
    c.drain(10, |item| {
        items.push(format!("{item:?}"));
        items.len() < 2
    })
    .unwrap();
    assert_eq!(items.len(), 2);
    items.pop();
    c.drain(10, |item| {
        items.push(format!("{item:?}"));
        true
    })
    .unwrap();
    assert_eq!(
        items,
        [
            "ScanBegin(9)",
            "Scan([1, 1, 1, 0, 97, 49])",
            "Live([2, 1, 0, 0, 98])",
            "ScanEnd(9)"
        ]
    );
    assert_eq!(
        p.try_push(&Record::QpState {
            qpn: 1 << 24,
            bytes: b""
        }),
        Err(PushError::Invalid(RecordError::BadQpn(1 << 24)))
    );
}

#[test]
fn span_marker_round_trips() {
    let (mut p, mut c) = log_ring(0);
    p.try_push_span(0b1010, 77).unwrap();
    p.try_push(&Record::Group { bytes: 5 }).unwrap();
    p.try_push(&Record::Delete { key: b"k" }).unwrap();
    assert_eq!(
        p.pushed(),
        (SPAN_LEN + crate::record::GROUP_RECORD_LEN + 5) as u64
    );
    let mut items = Vec::new();
    c.drain(10, |item| {
        items.push(format!("{item:?}"));
        true
    })
    .unwrap();
    assert_eq!(
        items,
        [
            "Span { partitions: 10, bytes: 77 }",
            "Live([4, 0, 4, 0, 5, 0, 0, 0])",
            "Live([2, 1, 0, 0, 107])"
        ]
    );
    assert_eq!(c.popped(), p.pushed());
}

#[test]
fn wait_marker_round_trips_and_stays_when_refused() {
    let (mut p, mut c) = log_ring(0);
    p.try_push(&Record::Delete { key: b"k" }).unwrap();
    p.try_push_wait(3, 0x0102_0304_0506).unwrap();
    p.try_push(&Record::Delete { key: b"z" }).unwrap();
    assert_eq!(p.pushed(), 5 + WAIT_LEN as u64 + 5);
    let mut items = Vec::new();
    // The consumer stops at the wait (its ring is not there yet)...
    c.drain(10, |item| {
        let stop = matches!(item, LogItem::Wait { .. });
        if !stop {
            items.push(format!("{item:?}"));
        }
        !stop
    })
    .unwrap();
    assert_eq!(c.popped(), 5);
    // ...and finds it again on the next drain.
    c.drain(10, |item| {
        items.push(format!("{item:?}"));
        true
    })
    .unwrap();
    assert_eq!(
        items,
        [
            "Live([2, 1, 0, 0, 107])",
            "Wait { ring: 3, position: 1108152157446 }",
            "Live([2, 1, 0, 0, 122])"
        ]
    );
    assert_eq!(c.popped(), p.pushed());
}

#[test]
fn drain_ahead_shows_each_key_before_its_record() {
    let (mut p, mut c) = log_ring(1 << 12);
    let keys: Vec<Vec<u8>> = (0..10u8).map(|i| vec![b'k', i]).collect();
    for (i, k) in keys.iter().enumerate() {
        if i == 4 {
            p.try_push_scan_begin(1).unwrap();
        }
        if i % 3 == 0 {
            p.try_push(&Record::Delete { key: k }).unwrap();
        } else {
            p.try_push_scan(
                &Record::Put {
                    key: k,
                    value: b"v",
                },
                1 << 20,
            )
            .unwrap();
        }
    }
    let mut events: Vec<(bool, Vec<u8>)> = Vec::new();
    let n = c
        .drain_ahead(usize::MAX, 3, |d| {
            match d {
                Drained::Upcoming(k) => events.push((false, k.to_vec())),
                Drained::Item(LogItem::Live(b) | LogItem::Scan(b)) => {
                    let (r, _) = Record::decode(b).unwrap();
                    let (Record::Put { key, .. } | Record::Delete { key }) = r else {
                        panic!("{r:?}");
                    };
                    events.push((true, key.to_vec()));
                }
                Drained::Item(_) => {}
            }
            true
        })
        .unwrap();
    assert_eq!(n, 11, "ten records and the marker");
    for k in &keys {
        let shown = events.iter().position(|e| e == &(false, k.clone()));
        let applied = events.iter().position(|e| e == &(true, k.clone()));
        assert!(shown.unwrap() < applied.unwrap(), "{k:?}: {events:?}");
        assert_eq!(events.iter().filter(|e| e.1 == *k).count(), 2, "once each");
    }
    // The first record comes after the first three keys were shown.
    assert!(events[..3].iter().all(|e| !e.0), "{events:?}");
}
