//! `pktgen --tx R,W --tx-shared [--tx-inflight K] [--dist zipf]`: bank transfers by
//! clients that share the accounts (docs/TRANSACTIONS.md).
//!
//! Unlike the one-client mode, the client does not know the balances: each transfer
//! is optimistic — a read-only transaction reads the R + W accounts, then one
//! transaction re-reads them with EQUALS conditions on what was read and writes the
//! W accounts (the first two moving 1 between them). Another transfer that committed
//! in between makes it abort (counted as a conflict, not retried). `K` transfers run
//! at once, each on the QP of its first key, so they interleave on the server and
//! conflict on hot accounts (`--dist zipf`).
//!
//! Accounts are created with conditional transactions (ABSENT → PUT the starting
//! balance), so several runs can share them without resetting each other. At the end
//! every balance is read back: none may be missing or negative and the total must be
//! `keys × 1000` (exit 1 otherwise).

use crate::spec::RunSpec;
use crate::txn_bench::{key, value, TxArgs, START_BALANCE};
use hdrhistogram::Histogram;
use kvclient::{Client, Op, PacketIo, TxCondition, TxOutcome, TxTicket};
use kvload::{KeyChooser, Xorshift64Star};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Account creations in flight at once.
const CREATE_WINDOW: usize = 64;

/// Where one in-flight transfer stands.
enum Slot {
    Idle,
    /// The read of its accounts, since `start`.
    Reading(TxTicket, Instant, Vec<u64>),
    /// The conditional transfer, since `start` (of the read).
    Moving(TxTicket, Instant),
}

/// Balance in the first 8 bytes of a value (`None`: too short).
fn balance(v: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(v.get(..8)?.try_into().ok()?))
}

/// Creates the accounts that do not exist yet.
fn create<I: PacketIo>(
    c: &mut Client<I>,
    n: u64,
    ksize: usize,
    vsize: usize,
) -> Result<(), kvclient::Error> {
    let mut i = 0u64;
    let mut inflight: Vec<TxTicket> = Vec::new();
    while i < n || !inflight.is_empty() {
        while i < n && inflight.len() < CREATE_WINDOW {
            let k = key(i, ksize);
            let cond = [TxCondition {
                op: 0,
                expect: None,
            }];
            let ops = [
                Op::Get { key: k.clone() },
                Op::Put {
                    key: k,
                    value: value(START_BALANCE, vsize),
                },
            ];
            inflight.push(c.submit_tx(&cond, &ops)?);
            i += 1;
        }
        c.poll();
        let mut j = 0;
        while j < inflight.len() {
            match c.tx_outcome(inflight[j]) {
                // Committed (created) or aborted (it existed): both fine.
                Some(o) => {
                    o?;
                    inflight.swap_remove(j);
                }
                None => j += 1,
            }
        }
    }
    Ok(())
}

/// The conditional transfer for accounts `accts` (reads first, writes last) that
/// read `vals`; `None` if a balance was missing.
fn transfer_ops(
    accts: &[u64],
    vals: &TxOutcome,
    writes: usize,
    ksize: usize,
    vsize: usize,
) -> Option<(Vec<TxCondition>, Vec<Op>)> {
    let mut conds = Vec::with_capacity(accts.len());
    let mut ops = Vec::with_capacity(accts.len() + writes);
    let mut bals = Vec::with_capacity(accts.len());
    for (i, (&a, r)) in accts.iter().zip(&vals.results).enumerate() {
        if r.status != kvwire::Status::Ok {
            return None;
        }
        bals.push(balance(&r.value)?);
        conds.push(TxCondition {
            op: i as u8,
            expect: Some(r.value.clone()),
        });
        ops.push(Op::Get { key: key(a, ksize) });
    }
    let w0 = accts.len() - writes;
    let mut newbal: Vec<u64> = bals[w0..].to_vec();
    if newbal.len() >= 2 && newbal[0] > 0 {
        newbal[0] -= 1;
        newbal[1] += 1;
    }
    for (&a, &b) in accts[w0..].iter().zip(&newbal) {
        ops.push(Op::Put {
            key: key(a, ksize),
            value: value(b, vsize),
        });
    }
    Some((conds, ops))
}

/// Runs the shared-accounts transfers on a connected client; returns the exit code.
pub fn run<I: PacketIo>(
    c: &mut Client<I>,
    spec: &RunSpec,
    tx: &TxArgs,
    inflight: usize,
) -> Result<i32, Box<dyn std::error::Error>> {
    let w = &spec.workload;
    let vsize: usize = w.value_size.parse().unwrap_or(8).max(8);
    let (n, ksize) = (w.keys.max(2), w.key_size.max(4));
    let need = tx.reads + tx.writes;
    if tx.writes < 2 || (n as usize) < need || need > kvwire::payload::MAX_TX_OPS / 2 {
        return Err("--tx-shared needs W >= 2 and at least R + W --keys".into());
    }
    create(c, n, ksize, vsize)?;
    let chooser = KeyChooser::new(n, w.distribution());
    let mut rng = Xorshift64Star::new(w.seed | 1);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let (mut committed, mut conflicts, mut unreadable) = (0u64, 0u64, 0u64);
    let warm_end = Instant::now() + Duration::from_secs_f64(spec.phases.warmup);
    let end = warm_end + Duration::from_secs_f64(spec.phases.duration);
    let mut slots: Vec<Slot> = (0..inflight.max(1)).map(|_| Slot::Idle).collect();
    loop {
        let running = Instant::now() < end && !crate::phases::QUIT.load(Ordering::Relaxed);
        if !running && slots.iter().all(|s| matches!(s, Slot::Idle)) {
            break;
        }
        c.poll();
        for slot in slots.iter_mut() {
            match slot {
                Slot::Idle if running => {
                    let mut accts: Vec<u64> = Vec::with_capacity(need);
                    while accts.len() < need {
                        let a = chooser.next(&mut rng);
                        if !accts.contains(&a) {
                            accts.push(a);
                        }
                    }
                    let ops: Vec<Op> = accts
                        .iter()
                        .map(|&a| Op::Get { key: key(a, ksize) })
                        .collect();
                    let t = c.submit_tx(&[], &ops)?;
                    *slot = Slot::Reading(t, Instant::now(), accts);
                }
                Slot::Idle => {}
                Slot::Reading(t, start, accts) => {
                    let Some(o) = c.tx_outcome(*t) else { continue };
                    let o = o?;
                    match transfer_ops(accts, &o, tx.writes, ksize, vsize) {
                        Some((conds, ops)) => {
                            let t = c.submit_tx(&conds, &ops)?;
                            *slot = Slot::Moving(t, *start);
                        }
                        None => {
                            unreadable += 1;
                            *slot = Slot::Idle;
                        }
                    }
                }
                Slot::Moving(t, start) => {
                    let Some(o) = c.tx_outcome(*t) else { continue };
                    if o?.committed() {
                        committed += 1;
                    } else {
                        conflicts += 1;
                    }
                    if *start >= warm_end {
                        hist.record((start.elapsed().as_nanos() as u64).max(1))?;
                    }
                    *slot = Slot::Idle;
                }
            }
        }
    }
    // Read back: nothing missing or negative, the total unchanged.
    let (mut total, mut bad) = (0u64, 0u64);
    for i in 0..n {
        match c.get(&key(i, ksize))?.as_deref().and_then(balance) {
            Some(b) if b <= START_BALANCE * n => total += b,
            _ => bad += 1,
        }
    }
    let invariant = bad == 0 && total == START_BALANCE * n;
    let secs = spec.phases.duration;
    let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
    println!(
        "tx shared {},{} x{}: {committed} committed, {conflicts} aborted by a conflicting \
         transfer; read + transfer avg {:.2} us p50 {:.2} us p99 {:.2} us; {:.0} transfers/s",
        tx.reads,
        tx.writes,
        slots.len(),
        hist.mean() / 1e3,
        us(0.5),
        us(0.99),
        committed as f64 / secs
    );
    println!(
        "tx read-back: total {total} (want {}), {bad} accounts missing or out of range",
        START_BALANCE * n
    );
    if let Some(path) = &spec.json {
        let j = serde_json::json!({
            "mode": "shared",
            "reads": tx.reads,
            "writes": tx.writes,
            "inflight": slots.len(),
            "accounts": n,
            "committed": committed,
            "conflicts": conflicts,
            "unreadable": unreadable,
            "avg_us": hist.mean() / 1e3,
            "p50_us": us(0.5),
            "p99_us": us(0.99),
            "transfers_per_s": committed as f64 / secs,
            "invariant_holds": invariant,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
    }
    Ok(if invariant && committed > 0 { 0 } else { 1 })
}
