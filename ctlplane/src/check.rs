//! `ctlplane stats --check`: the accounting invariant (docs/OPERATIONS.md, "Accounting
//! invariant") evaluated on a live, quiescent dataplane.
//!
//! Per worker and for the total:
//!
//! * rx: `rx_packets = echoed + requests + connects + connect_repeats + opens +
//!   closes + resumes + replays + Σ drop.<r>` over the rx-side reasons `r` except `handoff_full`;
//! * tx (unless skipped: fault injection breaks it): `responses + replayed_frames +
//!   naks_sent + rnr_naks_sent + accepts_sent + echoed = tx_packets + drop.tx_full`;
//!
//! and for the total: `handed_off = handed_in`, and `mbufs_in_use` equal to a
//! baseline when one is given. The tx-side reasons come from the reply's
//! `tx_side_drops`, so the dataplane alone decides them.
//!
//! A frame in flight (in a ring between two workers, in a tx queue) would break the
//! identities for a moment, so the check waits for quiescence: two replies
//! [`SETTLE`] apart with the same counters, within [`QUIET_TIMEOUT`].

use crate::target::Target;
use serde_json::Value;
use std::time::{Duration, Instant};

/// Time between the two replies that must agree.
pub const SETTLE: Duration = Duration::from_millis(250);
/// How long the check waits for the dataplane to become quiescent.
pub const QUIET_TIMEOUT: Duration = Duration::from_secs(10);

/// The rx identity's counter terms (the drops are added by reason).
const RX_TERMS: &[&str] = &[
    "echoed",
    "requests",
    "connects",
    "connect_repeats",
    "opens",
    "closes",
    "resumes",
    "replays",
];
/// The tx identity's left-hand terms: frames handed to the transmit side.
const TX_TERMS: &[&str] = &[
    "responses",
    "replayed_frames",
    "naks_sent",
    "rnr_naks_sent",
    "accepts_sent",
    "echoed",
];

/// What to check besides the rx identity.
#[derive(Clone, Copy, Debug, Default)]
pub struct Options {
    /// Expected `mbufs_in_use`.
    pub mbuf_baseline: Option<u64>,
    /// Skip the tx identity (a dataplane run with `--inject-*`).
    pub skip_tx: bool,
}

/// The outcome: one line per term and verdict, and whether everything held.
#[derive(Debug, Default)]
pub struct Report {
    /// Printable lines.
    pub lines: Vec<String>,
    /// Every check held.
    pub pass: bool,
}

impl Report {
    fn verdict(&mut self, what: &str, ok: bool, detail: String) {
        let v = if ok { "PASS" } else { "FAIL" };
        self.lines.push(format!("{v} {what}: {detail}"));
        self.pass &= ok;
    }
}

fn get(c: &Value, k: &str) -> Result<u64, String> {
    c[k].as_u64()
        .ok_or_else(|| format!("reply has no counter {k:?} (a dataplane older than the check?)"))
}

/// Evaluates the invariant on a `/kvd/stats` reply.
pub fn evaluate(v: &Value, opt: Options) -> Result<Report, String> {
    let tx_side: Vec<&str> = v["tx_side_drops"]
        .as_array()
        .ok_or("reply has no tx_side_drops (a dataplane older than the check?)")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let mut cols: Vec<(String, &Value)> = Vec::new();
    if let Some(pw) = v["per_worker"].as_object() {
        let mut ids: Vec<&String> = pw.keys().collect();
        ids.sort_by_key(|k| k.parse::<u64>().unwrap_or(u64::MAX));
        cols.extend(ids.into_iter().map(|id| (format!("worker{id}"), &pw[id])));
    }
    let total = &v["total"];
    if total.is_null() {
        return Err("reply has no total".into());
    }
    cols.push(("total".into(), total));
    let mut r = Report {
        pass: true,
        ..Report::default()
    };
    for (name, c) in &cols {
        let rx = get(c, "rx_packets")?;
        let mut sum = 0u64;
        let mut terms = Vec::new();
        for t in RX_TERMS {
            let x = get(c, t)?;
            sum += x;
            terms.push(format!("{t} {x}"));
        }
        let drops = c["drop"].as_object().ok_or("reply has no drop counters")?;
        let mut reasons: Vec<(&String, u64)> = drops
            .iter()
            .map(|(k, x)| (k, x.as_u64().unwrap_or(0)))
            .filter(|(k, _)| !tx_side.contains(&k.as_str()) && k.as_str() != "handoff_full")
            .collect();
        reasons.sort();
        for (k, x) in reasons {
            sum += x;
            if x > 0 {
                terms.push(format!("drop.{k} {x}"));
            }
        }
        r.verdict(
            &format!("{name} rx"),
            rx == sum,
            format!(
                "rx_packets {rx} {} {sum} = {}",
                rel(rx, sum),
                terms.join(" + ")
            ),
        );
        let nic = rx + get(c, "handed_off")? + num(&c["drop"]["handoff_full"])
            - get(c, "handed_in")?.min(rx);
        r.lines.push(format!(
            "     {name} frames from the NIC queue (rx_packets - handed_in + handed_off + drop.handoff_full): {nic}"
        ));
        if !opt.skip_tx {
            let mut queued = 0u64;
            let mut tterms = Vec::new();
            for t in TX_TERMS {
                let x = get(c, t)?;
                queued += x;
                tterms.push(format!("{t} {x}"));
            }
            let sent = get(c, "tx_packets")? + num(&c["drop"]["tx_full"]);
            r.verdict(
                &format!("{name} tx"),
                queued == sent,
                format!(
                    "{} = {queued} {} {sent} = tx_packets + drop.tx_full",
                    tterms.join(" + "),
                    rel(queued, sent)
                ),
            );
        }
    }
    let (off, inn) = (get(total, "handed_off")?, get(total, "handed_in")?);
    r.verdict(
        "hand-offs",
        off == inn,
        format!("handed_off {off} {} handed_in {inn}", rel(off, inn)),
    );
    let inuse = get(v, "mbufs_in_use")?;
    match opt.mbuf_baseline {
        Some(b) => r.verdict(
            "mbufs",
            inuse == b,
            format!("mbufs_in_use {inuse} {} baseline {b}", rel(inuse, b)),
        ),
        None => r
            .lines
            .push(format!("     mbufs_in_use {inuse} (no --mbuf-baseline)")),
    }
    Ok(r)
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or(0)
}

fn rel(a: u64, b: u64) -> &'static str {
    if a == b {
        "=="
    } else {
        "!="
    }
}

/// The reply without what moves on an idle dataplane (nothing today, but the
/// comparison is of counters only).
/// The counters the identities read, of the total and of every worker: an idle
/// dataplane holds them still, while others (an `adaptive` lcore's sleeps) move.
fn counters(v: &Value) -> Vec<Value> {
    let terms = RX_TERMS.iter().chain(TX_TERMS).chain(&[
        "rx_packets",
        "tx_packets",
        "drop",
        "handed_off",
        "handed_in",
    ]);
    let mut cols: Vec<&Value> = vec![&v["total"]];
    if let Some(w) = v["per_worker"].as_object() {
        cols.extend(w.values());
    }
    let mut out: Vec<Value> = cols
        .iter()
        .flat_map(|c| terms.clone().map(move |k| c[*k].clone()))
        .collect();
    out.push(v["mbufs_in_use"].clone());
    out
}

/// `ctlplane stats --check`: waits for quiescence, prints every term and verdict;
/// an error (exit 1) when the invariant does not hold or the dataplane stays busy.
pub fn run(target: &Target, opt: Options) -> Result<(), String> {
    let mut t = target.connect()?;
    let start = Instant::now();
    let mut prev = t.query("/kvd/stats")?;
    let v = loop {
        std::thread::sleep(SETTLE);
        let v = t.query("/kvd/stats")?;
        if counters(&v) == counters(&prev) {
            break v;
        }
        if start.elapsed() > QUIET_TIMEOUT {
            println!("FAIL quiescence: counters still moving after {QUIET_TIMEOUT:?}");
            return Err("accounting check: dataplane not quiescent".into());
        }
        prev = v;
    };
    let r = evaluate(&v, opt)?;
    for l in &r.lines {
        println!("{l}");
    }
    if r.pass {
        println!("PASS accounting invariant");
        Ok(())
    } else {
        println!("FAIL accounting invariant");
        Err("accounting check failed".into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn col(rx: u64, req: u64, bad_icrc: u64, no_mbuf: u64) -> Value {
        json!({"rx_packets": rx, "tx_packets": req, "requests": req, "responses": req,
            "replays": 0, "replayed_frames": 0, "naks_sent": 0, "rnr_naks_sent": 0,
            "connects": 1, "connect_repeats": 0, "opens": 0, "closes": 0, "resumes": 0,
            "accepts_sent": 1, "echoed": 0,
            "handed_off": 0, "handed_in": 0,
            "drop": {"bad_icrc": bad_icrc, "no_mbuf": no_mbuf, "tx_full": 1, "handoff_full": 4}})
    }

    /// The sum of two columns, field by field.
    fn add(a: &Value, b: &Value) -> Value {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                Value::Object(x.iter().map(|(k, v)| (k.clone(), add(v, &y[k]))).collect())
            }
            _ => json!(num(a) + num(b)),
        }
    }

    fn reply(w0: Value, w1: Value) -> Value {
        let total = add(&w0, &w1);
        json!({"workers": 2, "mbufs_in_use": 7,
            "tx_side_drops": ["tx_full", "no_mbuf", "mtu_too_small"],
            "total": total, "per_worker": {"1": w1, "0": w0}})
    }

    #[test]
    fn quiescence_reads_the_identity_terms_only() {
        let v = json!({"total": {"requests": 5, "idle_sleeps": 1, "drop": {"bad_va": 0}},
            "per_worker": {"0": {"requests": 5, "idle_sleep_us": 10}}, "mbufs_in_use": 3});
        let mut w = v.clone();
        w["total"]["idle_sleeps"] = json!(9);
        w["per_worker"]["0"]["idle_sleep_us"] = json!(99);
        assert_eq!(
            counters(&v),
            counters(&w),
            "an adaptive lcore's sleeps move"
        );
        w["per_worker"]["0"]["requests"] = json!(6);
        assert_ne!(counters(&v), counters(&w));
        let mut d = v.clone();
        d["total"]["drop"]["bad_va"] = json!(1);
        assert_ne!(counters(&v), counters(&d));
    }

    #[test]
    fn holds_and_ignores_tx_side_and_handoff_drops() {
        let v = reply(col(6, 3, 2, 5), col(1, 0, 0, 0));
        let r = evaluate(
            &v,
            Options {
                mbuf_baseline: Some(7),
                skip_tx: false,
            },
        )
        .unwrap();
        assert!(r.pass, "{:#?}", r.lines);
        assert!(r.lines[0].starts_with("PASS worker0 rx: rx_packets 6 == 6"));
        assert!(r.lines.iter().any(|l| l.starts_with("PASS mbufs")));
    }

    #[test]
    fn fails_on_a_missing_term_and_on_mbufs() {
        let v = reply(col(7, 3, 2, 0), col(1, 0, 0, 0));
        let r = evaluate(&v, Options::default()).unwrap();
        assert!(!r.pass);
        assert!(r.lines[0].starts_with("FAIL worker0 rx"));
        let v = reply(col(6, 3, 2, 0), col(1, 0, 0, 0));
        let r = evaluate(
            &v,
            Options {
                mbuf_baseline: Some(0),
                skip_tx: true,
            },
        )
        .unwrap();
        assert!(!r.pass);
        assert!(!r.lines.iter().any(|l| l.contains(" tx:")));
        assert!(r.lines.last().unwrap().starts_with("FAIL mbufs"));
    }

    #[test]
    fn old_reply_is_an_error() {
        assert!(evaluate(&json!({"total": {}}), Options::default()).is_err());
    }
}
