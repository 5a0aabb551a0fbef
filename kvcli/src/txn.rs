//! `kvcli tx OP , OP , ...`: one transaction (docs/PROTOCOL.md §3.4).
//!
//! Ops are separated by `,` (or `;`): `get KEY`, `get KEY =VALUE` (commit only if it
//! reads VALUE), `get KEY absent`, `put KEY VALUE`, `del KEY`, `incr KEY [N]` (8-byte
//! fetch-add). Committed: exit 0, one line per op. Aborted (nothing changed): exit 1,
//! the reason and what the reads saw.

use crate::commands::{Done, Fail, Kv};
use crate::value as v;
use kvclient::{Op, TxCondition};
use kvwire::payload::{func, AbortReason, Atomic, Width};
use kvwire::Status;
use serde_json::{Map, Value as Json};

/// The ops and conditions of a transaction script.
pub fn parse(words: &[String]) -> Result<(Vec<Op>, Vec<TxCondition>), String> {
    let text = words.join(" ").replace(';', " , ");
    let mut ops = Vec::new();
    let mut conds = Vec::new();
    for part in text.split(',') {
        let t: Vec<&str> = part.split_whitespace().collect();
        let Some((&verb, args)) = t.split_first() else {
            continue;
        };
        let key = |i: usize| -> Result<Vec<u8>, String> {
            v::parse_key(
                args.get(i)
                    .ok_or_else(|| format!("{verb}: a key is missing"))?,
            )
        };
        let at = ops.len();
        let op = match (verb, args.len()) {
            ("get", 1) => Op::Get { key: key(0)? },
            ("get", 2) => {
                let k = key(0)?;
                let expect = match args[1] {
                    "absent" => None,
                    c => Some(v::parse_value(
                        c.strip_prefix('=').ok_or_else(|| {
                            format!("get {}: the condition is =VALUE or absent, not {c:?}", args[0])
                        })?,
                        k.len(),
                    )?),
                };
                conds.push(TxCondition {
                    op: at as u8,
                    expect,
                });
                Op::Get { key: k }
            }
            ("put", 2) => {
                let k = key(0)?;
                let value = v::parse_value(args[1], k.len())?;
                Op::Put { key: k, value }
            }
            ("del" | "delete", 1) => Op::Delete { key: key(0)? },
            ("cad", 2) => {
                let k = key(0)?;
                let expected = v::parse_value(args[1], k.len())?;
                Op::CompareDelete { key: k, expected }
            }
            ("incr", 1 | 2) => Op::UpdateS2S {
                key: key(0)?,
                atomic: Atomic {
                    func: func::FETCH_ADD,
                    width: Width::W8,
                    signed: false,
                },
                param: v::parse_int(args.get(1).copied().unwrap_or("1"), Width::W8)?,
                param2: 0,
            },
            _ => {
                return Err(format!(
                    "tx: {:?}: ops are `get KEY [=VALUE|absent]`, `put KEY VALUE`, `del KEY`, `cad KEY VALUE`, `incr KEY [N]`, separated by `,`",
                    part.trim()
                ))
            }
        };
        ops.push(op);
    }
    if ops.is_empty() {
        return Err("tx: no op (e.g. `kvcli tx get a =1 , put a 2`)".into());
    }
    if ops.len() > kvwire::payload::MAX_TX_OPS {
        return Err(format!(
            "tx: {} ops; a transaction holds at most {}",
            ops.len(),
            kvwire::payload::MAX_TX_OPS
        ));
    }
    Ok((ops, conds))
}

/// Runs the transaction and describes it.
pub fn run(
    kv: &mut Kv,
    words: &[String],
    hex: bool,
    j: &mut Map<String, Json>,
) -> Result<Done, Fail> {
    let (ops, conds) = parse(words)?;
    let out = kv.transact(&conds, &ops)?;
    let mut lines = Vec::new();
    let mut results = Vec::new();
    for (i, (op, r)) in ops.iter().zip(&out.results).enumerate() {
        let verb = match op {
            Op::Get { .. } => "get",
            Op::Put { .. } => "put",
            Op::Delete { .. } => "del",
            Op::CompareDelete { .. } => "cad",
            _ => "incr",
        };
        let key = v::show(op.key(), false).0;
        let mut o = Map::new();
        o.insert("status".into(), r.status.name().into());
        let shown = match (op, r.status) {
            (Op::UpdateS2S { param, .. }, Status::Ok) if r.value.len() == 8 => {
                let old = u64::from_le_bytes(r.value[..].try_into().unwrap_or_default());
                o.insert("old".into(), old.into());
                format!("{} -> {}", old, old.wrapping_add(*param))
            }
            (Op::CompareDelete { expected, .. }, Status::Ok) => {
                let deleted = r.value == *expected;
                o.insert("deleted".into(), deleted.into());
                if deleted {
                    "deleted".into()
                } else {
                    format!("not deleted (it holds {})", v::show(&r.value, hex).0)
                }
            }
            (Op::Get { .. }, Status::Ok) => {
                let (s, enc) = v::show(&r.value, hex);
                o.insert("value".into(), s.clone().into());
                o.insert("encoding".into(), enc.into());
                s
            }
            (_, s) => s.name().to_ascii_uppercase(),
        };
        lines.push(format!("{i} {verb} {key}: {shown}"));
        results.push(Json::Object(o));
    }
    j.insert("committed".into(), out.committed().into());
    j.insert("results".into(), Json::Array(results));
    match out.abort {
        None => Ok(Done {
            code: crate::args::EXIT_OK,
            text: std::iter::once("committed".to_string())
                .chain(lines)
                .collect::<Vec<_>>()
                .join("\n"),
        }),
        Some(a) => {
            let mut ab = Map::new();
            ab.insert("reason".into(), AbortReason::name(a.reason).into());
            ab.insert("op".into(), a.op.into());
            ab.insert("status".into(), a.status.name().into());
            j.insert("abort".into(), Json::Object(ab));
            let at = if a.op == 255 {
                String::new()
            } else {
                format!(" at op {}", a.op)
            };
            let head = format!(
                "aborted: {}{at} ({}); nothing changed",
                AbortReason::name(a.reason),
                a.status.name()
            );
            Ok(Done {
                code: crate::args::EXIT_NOT_FOUND,
                text: std::iter::once(head)
                    .chain(lines)
                    .collect::<Vec<_>>()
                    .join("\n"),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn scripts_parse_into_ops_and_conditions() {
        let (ops, conds) = parse(&w(
            "get a =100 , get b absent ; put a 90 , del c , incr n 5",
        ))
        .unwrap();
        assert_eq!(ops.len(), 5);
        assert_eq!(
            conds,
            vec![
                TxCondition {
                    op: 0,
                    expect: Some(b"100".to_vec())
                },
                TxCondition {
                    op: 1,
                    expect: None
                }
            ]
        );
        assert!(matches!(&ops[4], Op::UpdateS2S { param: 5, .. }));
        for bad in ["", "get", "put a", "get a 100", "frob a", "get a =1 ,, put"] {
            assert!(parse(&w(bad)).is_err(), "{bad:?}");
        }
    }
}
