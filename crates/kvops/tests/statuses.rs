//! Every status the station can answer, each produced by at least one case here, and the
//! list checked against the status table of docs/OPERATIONS.md. Error statuses come
//! with no bytes; the cases marked `unchanged` leave the store as it was.

mod common;

use common::MapStore;
use kvops::{FunctionRegistry, Station, StationConfig};
use kvwire::{func, pred, Atomic, KvOp, Status, Width};

const OPERATIONS: &str = include_str!("../../../docs/OPERATIONS.md");

/// The statuses the station produces (docs/OPERATIONS.md, "Status codes").
const STATION_STATUSES: [Status; 8] = [
    Status::Ok,
    Status::NotFound,
    Status::OutOfMemory,
    Status::KeyTooLarge,
    Status::ValueTooLarge,
    Status::UnknownFunction,
    Status::BadLength,
    Status::Internal,
];

const K: &[u8] = b"k";
const LONG: &[u8] = b"a-key-longer-than-the-store-takes";

fn at(func: u8, width: Width) -> Atomic {
    Atomic {
        func,
        width,
        signed: false,
    }
}

fn s2s(key: &[u8], func: u8, width: Width) -> KvOp<'_> {
    KvOp::UpdateS2S {
        key,
        atomic: at(func, width),
        param: 1,
        param2: 0,
    }
}

fn s2v(key: &[u8], func: u8, width: Width) -> KvOp<'_> {
    KvOp::UpdateS2V {
        key,
        atomic: at(func, width),
        param: 1,
        param2: 0,
    }
}

fn reduce(key: &[u8], func: u8, width: Width) -> KvOp<'_> {
    KvOp::Reduce {
        key,
        atomic: at(func, width),
        init: 0,
    }
}

fn filter(key: &[u8], pred: u8, width: Width) -> KvOp<'_> {
    KvOp::Filter {
        key,
        atomic: at(pred, width),
        param: 0,
    }
}

struct Case {
    name: &'static str,
    store: MapStore,
    max_value_len: usize,
    ops: Vec<KvOp<'static>>,
    want: Vec<Status>,
    /// The store must be unchanged afterwards.
    unchanged: bool,
}

fn case(name: &'static str, store: MapStore, ops: Vec<KvOp<'static>>, want: &[Status]) -> Case {
    Case {
        name,
        store,
        max_value_len: 64,
        ops,
        want: want.to_vec(),
        unchanged: true,
    }
}

fn cases() -> Vec<Case> {
    use Status::*;
    let eight = || MapStore::with(K, &7u64.to_le_bytes());
    let three = || MapStore::with(K, &[1, 2, 3]);
    vec![
        case(
            "ok",
            eight(),
            vec![KvOp::Get { key: K }, reduce(K, func::FETCH_ADD, Width::W8)],
            &[Ok, Ok],
        ),
        Case {
            unchanged: false,
            ..case(
                "not found: read, delete, and forwarded from the cache after a delete",
                eight(),
                vec![
                    KvOp::Get { key: b"missing" },
                    KvOp::Delete { key: b"missing" },
                    s2s(b"missing", func::SWAP, Width::W8),
                    KvOp::Delete { key: K },
                    KvOp::Delete { key: K },
                    KvOp::Get { key: K },
                    reduce(K, func::FETCH_ADD, Width::W8),
                    filter(K, pred::EQ, Width::W8),
                ],
                &[
                    NotFound, NotFound, NotFound, Ok, NotFound, NotFound, NotFound, NotFound,
                ],
            )
        },
        case(
            "out of memory: the memory stage cannot allocate a new key",
            MapStore {
                full: true,
                ..eight()
            },
            vec![KvOp::Put {
                key: b"new",
                value: b"v",
            }],
            &[OutOfMemory],
        ),
        case(
            "key too large: the memory stage refuses the key",
            MapStore {
                max_key: 8,
                ..eight()
            },
            vec![
                KvOp::Get { key: LONG },
                KvOp::Put {
                    key: LONG,
                    value: b"v",
                },
                KvOp::Delete { key: LONG },
                s2s(LONG, func::FETCH_ADD, Width::W8),
            ],
            &[KeyTooLarge; 4],
        ),
        case(
            "value too large: the memory stage refuses the value",
            MapStore {
                max_value: 8,
                ..eight()
            },
            vec![KvOp::Put {
                key: K,
                value: &[0; 9],
            }],
            &[ValueTooLarge],
        ),
        Case {
            max_value_len: 8,
            ..case(
                "value too large: the stored value exceeds the station's value buffer",
                MapStore::with(K, &[1; 12]),
                vec![
                    KvOp::Get { key: K },
                    s2v(K, func::FETCH_ADD, Width::W1),
                    reduce(K, func::FETCH_ADD, Width::W1),
                    filter(K, pred::NE, Width::W1),
                ],
                &[ValueTooLarge; 4],
            )
        },
        case(
            "unknown function: reserved, unregistered, bad predicate, undefined for the opcode",
            eight(),
            vec![
                s2s(K, 9, Width::W8),
                s2s(K, func::USER_MIN, Width::W8),
                s2v(K, 127, Width::W8),
                filter(K, 7, Width::W8),
                filter(K, pred::USER_MIN, Width::W8),
                reduce(K, func::CAS, Width::W8),
                KvOp::UpdateV2V {
                    key: K,
                    atomic: at(func::CAS, Width::W8),
                    delta: &[0; 8],
                },
            ],
            &[UnknownFunction; 7],
        ),
        case(
            "bad length: value not a multiple of the width, scalar not one element, Δ length",
            three(),
            vec![
                s2s(K, func::FETCH_ADD, Width::W1),
                s2v(K, func::FETCH_ADD, Width::W2),
                KvOp::UpdateV2V {
                    key: K,
                    atomic: at(func::XOR, Width::W1),
                    delta: &[1, 1],
                },
                reduce(K, func::FETCH_ADD, Width::W2),
                filter(K, pred::EQ, Width::W4),
            ],
            &[BadLength; 5],
        ),
        case(
            "internal: the memory stage reads more than the buffer holds",
            MapStore {
                overlong_read: true,
                ..eight()
            },
            vec![KvOp::Get { key: K }, s2s(K, func::FETCH_ADD, Width::W8)],
            &[Internal, Internal],
        ),
    ]
}

#[test]
fn every_case_answers_its_statuses() {
    for ooo in [true, false] {
        for c in cases() {
            let cfg = StationConfig {
                ooo,
                max_value_len: c.max_value_len,
                ..StationConfig::default()
            };
            let mut st = Station::new(cfg, |k: &[u8]| k.len() as u64, FunctionRegistry::new())
                .expect("station");
            assert_eq!(c.ops.len(), c.want.len(), "{}", c.name);
            let mut store = c.store;
            let before = store.map.clone();
            let mut got = vec![None; c.ops.len()];
            st.process_batch(&c.ops, &mut store, &mut |i: usize, s: Status, v: &[u8]| {
                got[i] = Some((s, v.to_vec()));
            });
            for (i, (g, want)) in got.iter().zip(&c.want).enumerate() {
                let (s, v) = g.as_ref().expect("every op completes");
                assert_eq!(s, want, "{} (ooo {ooo}): op {i}", c.name);
                if *s != Status::Ok {
                    assert!(v.is_empty(), "{}: op {i} error with bytes", c.name);
                }
            }
            if c.unchanged {
                assert_eq!(store.map, before, "{} (ooo {ooo})", c.name);
            }
        }
    }
}

/// The cases produce every status of `STATION_STATUSES`, which is the status table of
/// docs/OPERATIONS.md.
#[test]
fn every_station_status_has_a_case_and_is_documented() {
    let produced: Vec<Status> = cases().into_iter().flat_map(|c| c.want).collect();
    for s in STATION_STATUSES {
        assert!(produced.contains(&s), "no case produces {s:?}");
    }
    assert!(produced.iter().all(|s| STATION_STATUSES.contains(s)));

    let table = OPERATIONS
        .split("## Status codes")
        .nth(1)
        .and_then(|t| t.split("\n## ").next())
        .expect("docs/OPERATIONS.md has a status table");
    let documented: Vec<Status> = table
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells.get(2)?.strip_prefix('`')?.strip_suffix('`')?;
            let code: u8 = cells.get(1)?.parse().ok()?;
            let s = Status::ALL
                .into_iter()
                .find(|s| format!("{s:?}") == name)
                .unwrap_or_else(|| panic!("{name} is not a kvwire::Status"));
            assert_eq!(s as u8, code, "{name}");
            Some(s)
        })
        .collect();
    assert_eq!(documented, STATION_STATUSES);
}
