//! The function × opcode matrix of docs/PROTOCOL.md §3.2, read from the document itself
//! and walked cell by cell through the station: a defined cell runs, an undefined cell
//! answers its documented status with no bytes, and neither reads nor changes the value.

mod common;

use std::ops::RangeInclusive;

use common::MapStore;
use kvops::functions::Builtin;
use kvops::registry::samples;
use kvops::{FunctionRegistry, Predicate, Station, StationConfig};
use kvwire::{func, op, pred, Atomic, KvOp, Status, Width};

const PROTOCOL: &str = include_str!("../../../docs/PROTOCOL.md");
/// The one user function registered in these tests.
const USER_ID: u8 = 200;
const KEY: &[u8] = b"key";

/// One cell of the matrix.
#[derive(Clone, Debug, PartialEq)]
enum Cell {
    /// The op runs; the text names the function or predicate.
    Defined(String),
    /// The op is not defined and answers this status.
    Undefined(Status),
}

/// One row: the ids it covers, whether it is only for registered (`Some(true)`) or
/// unregistered (`Some(false)`) ids, and a cell per opcode column.
#[derive(Debug)]
struct Row {
    ids: RangeInclusive<u8>,
    registered: Option<bool>,
    cells: Vec<Cell>,
}

fn opcode_of(name: &str) -> u8 {
    match name {
        "UPDATE_S2S" => op::UPDATE_S2S,
        "UPDATE_S2V" => op::UPDATE_S2V,
        "UPDATE_V2V" => op::UPDATE_V2V,
        "REDUCE" => op::REDUCE,
        "FILTER" => op::FILTER,
        _ => panic!("matrix column {name:?} is not a function opcode"),
    }
}

fn status_named(name: &str) -> Status {
    Status::ALL
        .into_iter()
        .find(|s| s.name().eq_ignore_ascii_case(name))
        .unwrap_or_else(|| panic!("{name:?} is not a status"))
}

fn split_row(line: &str) -> Vec<&str> {
    let inner = line.trim().trim_start_matches('|').trim_end_matches('|');
    inner.split(" | ").map(str::trim).collect()
}

/// The matrix as documented: its opcode columns and its rows.
fn matrix() -> (Vec<u8>, Vec<Row>) {
    let mut lines = PROTOCOL
        .lines()
        .skip_while(|l| !l.starts_with("| func | UPDATE_S2S"));
    let header = lines.next().expect("the matrix is in docs/PROTOCOL.md");
    let opcodes: Vec<u8> = split_row(header)[1..]
        .iter()
        .map(|n| opcode_of(n))
        .collect();
    assert!(lines.next().is_some_and(|l| l.starts_with("|---")));
    let rows = lines
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            let cells = split_row(l);
            assert_eq!(cells.len(), opcodes.len() + 1, "{l}");
            let (ids, registered) = match cells[0].split_once(", ") {
                Some((ids, "registered")) => (ids, Some(true)),
                Some((ids, "not registered")) => (ids, Some(false)),
                Some(_) => panic!("row {l}"),
                None => (cells[0], None),
            };
            let ids = match ids.split_once('–') {
                Some((a, b)) => a.parse().unwrap()..=b.parse().unwrap(),
                None => {
                    let id = ids.parse().unwrap();
                    id..=id
                }
            };
            let cells = cells[1..]
                .iter()
                .map(
                    |c| match c.strip_prefix('`').and_then(|c| c.strip_suffix('`')) {
                        Some(status) => Cell::Undefined(status_named(status)),
                        None => Cell::Defined(c.to_string()),
                    },
                )
                .collect();
            Row {
                ids,
                registered,
                cells,
            }
        })
        .collect();
    (opcodes, rows)
}

/// The documented cell of `opcode` × `id`; the rows must cover each id exactly once.
fn documented(opcodes: &[u8], rows: &[Row], opcode: u8, id: u8) -> Cell {
    let col = opcodes.iter().position(|&o| o == opcode).unwrap();
    let registered = id == USER_ID;
    let hits: Vec<&Row> = rows
        .iter()
        .filter(|r| r.ids.contains(&id) && r.registered.map_or(true, |reg| reg == registered))
        .collect();
    assert_eq!(hits.len(), 1, "id {id} (registered: {registered})");
    hits[0].cells[col].clone()
}

fn at(func: u8, width: Width) -> Atomic {
    Atomic {
        func,
        width,
        signed: false,
    }
}

/// The value stored under `KEY` for `opcode`'s cells (one element for UPDATE_S2S).
fn value_for(opcode: u8) -> Vec<u8> {
    match opcode {
        op::UPDATE_S2S => 5u64.to_le_bytes().to_vec(),
        _ => vec![1, 0, 2, 0, 3, 0, 4, 0],
    }
}

/// A valid `opcode` op on `key` with function/predicate `id`.
fn op_for<'a>(opcode: u8, id: u8, key: &'a [u8]) -> KvOp<'a> {
    const DELTA: &[u8] = &[1, 0, 1, 0, 1, 0, 1, 0];
    match opcode {
        op::UPDATE_S2S => KvOp::UpdateS2S {
            key,
            atomic: at(id, Width::W8),
            param: 5,
            param2: 9,
        },
        op::UPDATE_S2V => KvOp::UpdateS2V {
            key,
            atomic: at(id, Width::W2),
            param: 1,
            param2: 9,
        },
        op::UPDATE_V2V => KvOp::UpdateV2V {
            key,
            atomic: at(id, Width::W2),
            delta: DELTA,
        },
        op::REDUCE => KvOp::Reduce {
            key,
            atomic: at(id, Width::W2),
            init: 0,
        },
        op::FILTER => KvOp::Filter {
            key,
            atomic: at(id, Width::W2),
            param: 1,
        },
        _ => unreachable!(),
    }
}

fn registry() -> FunctionRegistry {
    let mut r = FunctionRegistry::new();
    r.register(USER_ID, "saturating_add", samples::saturating_add)
        .unwrap();
    r
}

/// Runs `ops` through a fresh station; returns (status, bytes) by op index.
fn run(ooo: bool, store: &mut MapStore, ops: &[KvOp<'_>]) -> Vec<(Status, Vec<u8>)> {
    let cfg = StationConfig {
        ooo,
        ..StationConfig::default()
    };
    let mut st = Station::new(cfg, |k: &[u8]| k.len() as u64, registry()).unwrap();
    let mut out = vec![(Status::Internal, vec![]); ops.len()];
    st.process_batch(ops, store, &mut |i: usize, s: Status, v: &[u8]| {
        out[i] = (s, v.to_vec())
    });
    out
}

fn predicate_name(p: Predicate) -> &'static str {
    match p as u8 {
        pred::EQ => "EQ",
        pred::NE => "NE",
        pred::LT => "LT",
        pred::LE => "LE",
        pred::GT => "GT",
        pred::GE => "GE",
        pred::ANY_BITS => "ANY_BITS",
        _ => unreachable!(),
    }
}

#[test]
fn matrix_covers_every_opcode_and_id_once() {
    let (opcodes, rows) = matrix();
    let mut sorted = opcodes.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            op::UPDATE_S2S,
            op::UPDATE_S2V,
            op::UPDATE_V2V,
            op::REDUCE,
            op::FILTER
        ]
    );
    for &opcode in &opcodes {
        for id in 0..=255u8 {
            documented(&opcodes, &rows, opcode, id);
        }
    }
}

/// Every opcode × id through the station (both modes), on a present and a missing key.
#[test]
fn station_answers_the_documented_matrix() {
    let (opcodes, rows) = matrix();
    let reg = registry();
    for &opcode in &opcodes {
        for id in 0..=255u8 {
            let cell = documented(&opcodes, &rows, opcode, id);
            // A defined cell names what the server implements under that id.
            if let Cell::Defined(name) = &cell {
                if opcode == op::FILTER {
                    let p = Predicate::from_id(id).unwrap();
                    assert_eq!(name, predicate_name(p), "FILTER {id}");
                } else if let Some(b) = Builtin::from_id(id) {
                    assert_eq!(name, &b.name().to_uppercase(), "{opcode} {id}");
                } else {
                    assert!(name.starts_with("user "), "{opcode} {id}: {name}");
                    assert!(reg.resolve(id).is_ok());
                }
            }
            for ooo in [true, false] {
                let value = value_for(opcode);
                let mut store = MapStore::with(KEY, &value);
                let ops = [op_for(opcode, id, KEY), op_for(opcode, id, b"missing")];
                let got = run(ooo, &mut store, &ops);
                let ctx = format!("opcode {opcode} func {id} ooo {ooo}: {cell:?}");
                match cell {
                    Cell::Defined(_) => {
                        assert_eq!(got[0].0, Status::Ok, "{ctx}");
                        assert_eq!(got[1], (Status::NotFound, vec![]), "{ctx}");
                    }
                    Cell::Undefined(s) => {
                        assert_eq!(got[0], (s, vec![]), "{ctx}");
                        assert_eq!(got[1], (s, vec![]), "{ctx}");
                        assert_eq!((store.reads, store.writes), (0, 0), "{ctx}");
                        assert_eq!(store.map[KEY], value, "{ctx}");
                        assert!(!store.map.contains_key(&b"missing"[..]), "{ctx}");
                    }
                }
            }
        }
    }
}

/// The cells that answered OK before they were documented: REDUCE and UPDATE_V2V with
/// CAS (which needs a p2 those opcodes do not carry). Also inside a chain whose value is
/// forwarded from the cache: the fetch-add before them is kept, nothing else changes.
#[test]
fn reduce_and_v2v_with_cas_answer_unknown_function_and_change_nothing() {
    let v: Vec<u8> = vec![7, 0, 0, 0, 7, 0, 0, 0];
    for ooo in [true, false] {
        let mut store = MapStore::with(KEY, &v);
        let cas_reduce = KvOp::Reduce {
            key: KEY,
            atomic: at(func::CAS, Width::W4),
            init: 7,
        };
        let cas_v2v = KvOp::UpdateV2V {
            key: KEY,
            atomic: at(func::CAS, Width::W4),
            delta: &[7, 0, 0, 0, 7, 0, 0, 0],
        };
        let got = run(ooo, &mut store, &[cas_reduce, cas_v2v]);
        assert_eq!(got, vec![(Status::UnknownFunction, vec![]); 2]);
        assert_eq!(store.map[KEY], v);
        assert_eq!((store.reads, store.writes), (0, 0));

        let add = KvOp::UpdateS2V {
            key: KEY,
            atomic: at(func::FETCH_ADD, Width::W4),
            param: 1,
            param2: 0,
        };
        let get = KvOp::Get { key: KEY };
        let got = run(ooo, &mut store, &[add, cas_reduce, cas_v2v, get]);
        let added = vec![8, 0, 0, 0, 8, 0, 0, 0];
        assert_eq!(got[0], (Status::Ok, v.clone()));
        assert_eq!(got[1], (Status::UnknownFunction, vec![]));
        assert_eq!(got[2], (Status::UnknownFunction, vec![]));
        assert_eq!(got[3], (Status::Ok, added.clone()));
        assert_eq!(store.map[KEY], added);
    }
}
