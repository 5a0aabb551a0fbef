//! `pktgen --tx R,W [--tx-baseline]`: transaction latency (docs/TRANSACTIONS.md).
//!
//! One client, one transaction at a time (so the latency is the design's, not a
//! queue's), on `--keys` accounts whose values are `--value-size` bytes with the
//! balance in the first 8 (LE). Each transaction reads R accounts and writes W: the
//! first two writes move 1 from one account to the other, further ones rewrite their
//! account unchanged, so the total of all balances never changes.
//!
//! * design: one request — the R GETs (each with an EQUALS condition on the value the
//!   client knows: it is the only writer) and the W PUTs, committed or aborted whole;
//! * baseline (`--tx-baseline`, HyperLoop-style): every op its own round trip — CAS
//!   0→1 on each key's lock word (in key order), the GETs, the PUTs, CAS 1→0 on the
//!   lock words.
//!
//! At the end every balance is read back: the total must be unchanged and each
//! balance what the committed transactions imply (exit 1 otherwise).
//!
//! `--tx-audit` runs beside them, typically on a replica (the tail of a chain):
//! read-only transactions over every account (at most 64), each checking that the
//! balances add up to the starting total — a transfer seen half applied breaks it.

use crate::io::PortIo;
use crate::spec::RunSpec;
use dpdk::IdleBackoff;
use hdrhistogram::Histogram;
use kvclient::{Client, ClientConfig, NodeAddr, Op, TxCondition};
use kvwire::payload::{func, Atomic, Width};
use kvwire::FrameParams;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Initial balance of every account.
pub(crate) const START_BALANCE: u64 = 1000;

/// What `--tx` asked for.
pub struct TxArgs {
    /// Reads per transaction.
    pub reads: usize,
    /// Writes per transaction.
    pub writes: usize,
    /// One round trip per op, client-side locks.
    pub baseline: bool,
    /// Accounts shared with other clients: optimistic transfers (`crate::txn_shared`).
    pub shared: bool,
    /// Transfers in flight at once (shared mode).
    pub inflight: usize,
}

impl TxArgs {
    /// Parses `R,W`.
    pub fn parse(s: &str, baseline: bool) -> Result<TxArgs, String> {
        let (r, w) = s
            .split_once(',')
            .ok_or_else(|| format!("--tx {s:?}: want R,W (e.g. 4,2)"))?;
        let reads: usize = r.trim().parse().map_err(|_| format!("--tx: bad R {r:?}"))?;
        let writes: usize = w.trim().parse().map_err(|_| format!("--tx: bad W {w:?}"))?;
        if reads + writes == 0 || reads + writes > 32 {
            return Err(format!("--tx {s}: 1..=32 keys per transaction"));
        }
        Ok(TxArgs {
            reads,
            writes,
            baseline,
            shared: false,
            inflight: 1,
        })
    }
}

pub(crate) fn key(i: u64, size: usize) -> Vec<u8> {
    let mut k = format!("a{i:0>w$}", w = size.saturating_sub(1)).into_bytes();
    k.truncate(size.max(1));
    k
}

fn lock_key(k: &[u8]) -> Vec<u8> {
    let mut l = b"L".to_vec();
    l.extend_from_slice(k);
    l
}

pub(crate) fn value(balance: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0x5a; size.max(8)];
    v[..8].copy_from_slice(&balance.to_le_bytes());
    v
}

/// CAS `from` -> `to` on account `a`'s lock word; the word's old value.
fn cas_lock<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    a: u64,
    ksize: usize,
    from: u64,
    to: u64,
) -> Result<Vec<u8>, kvclient::Error> {
    c.exec(Op::UpdateS2S {
        key: lock_key(&key(a, ksize)),
        atomic: Atomic {
            func: func::CAS,
            width: Width::W8,
            signed: false,
        },
        param: from,
        param2: to,
    })?
    .ok()
}

/// The port for the blocking client: `PortIo` queues frames into tx bursts; they go
/// out before each receive (the client always receives after it sends). Waiting for
/// an answer, it yields the CPU after `idle_yield_polls` empty receives, as the
/// other pktgen loops do: on a host where the server's lcores share this CPU (a
/// replicated cluster on 2 cores), spinning would keep them off it until the
/// scheduler preempts this thread, milliseconds later.
struct Flushing(PortIo, IdleBackoff);

impl kvclient::PacketIo for Flushing {
    fn send(&mut self, frame: &[u8]) -> bool {
        self.0.send(frame)
    }
    fn recv(&mut self, f: &mut dyn FnMut(&[u8])) -> usize {
        self.0.flush();
        let n = self.0.recv(f);
        self.1.poll(n == 0);
        n
    }
}

/// The blocking client over `io`, every QP connected.
fn connect(
    io: PortIo,
    spec: &RunSpec,
    tcfg: kvclient::Config,
    params: FrameParams,
    nodes: &[NodeAddr],
) -> Result<Client<Flushing>, kvclient::Error> {
    // Wall-clock based: connection nonces must grow across pktgen runs (PROTOCOL.md §6.1).
    let t0 = Instant::now();
    let wall0 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    let clock = move || wall0 + t0.elapsed().as_nanos() as u64;
    let cfg = ClientConfig {
        transport: tcfg,
        partitions: spec.qps.partitions,
        op_timeout_ns: 5_000_000_000,
        connect_timeout_ns: spec.phases.connect_timeout_ms * 1_000_000,
        ..ClientConfig::default()
    };
    let mut c = Client::with_qps(
        Flushing(io, IdleBackoff::new(spec.phases.idle_yield_polls)),
        cfg,
        &spec.qps.client_qps(),
        params,
        Box::new(clock),
    );
    c.set_credentials(spec.qps.credentials().cloned());
    // With the nodes of --follow-ports: the client follows the master (NOT_MASTER
    // hints, the next node when one stops answering, RESUME of what was in flight).
    c.set_nodes(nodes);
    c.connect()?;
    Ok(c)
}

/// Runs the transaction benchmark on `io`; returns the exit code.
pub fn run(
    io: PortIo,
    spec: &RunSpec,
    tcfg: kvclient::Config,
    params: FrameParams,
    tx: &TxArgs,
    nodes: &[NodeAddr],
) -> Result<i32, Box<dyn std::error::Error>> {
    let w = &spec.workload;
    let vsize: usize = w
        .value_size
        .parse()
        .map_err(|_| format!("--tx needs one --value-size N (not {:?})", w.value_size))?;
    let (n, ksize) = (w.keys.max(2), w.key_size.max(4));
    let mtu = tcfg.mtu;
    let need = tx.reads + tx.writes;
    if (n as usize) < need {
        return Err(format!("--tx needs at least {need} --keys").into());
    }
    let mut c = connect(io, spec, tcfg, params, nodes)?;
    if tx.shared {
        return crate::txn_shared::run(&mut c, spec, tx, tx.inflight);
    }
    load_accounts(&mut c, n, ksize, vsize, tx.baseline)?;
    let mut bal = vec![START_BALANCE; n as usize];
    let mut rng = w.seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut k = Counts {
        committed: 0,
        aborted: 0,
        round_trips: 0,
        refused: 0,
        unknown: 0,
        hist: Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?,
    };
    let warm_end = Instant::now() + Duration::from_secs_f64(spec.phases.warmup);
    let end = warm_end + Duration::from_secs_f64(spec.phases.duration);
    let mut picked: Vec<u64> = Vec::with_capacity(need);
    while Instant::now() < end && !crate::phases::QUIT.load(Ordering::Relaxed) {
        // Distinct accounts: the reads, then the writes.
        picked.clear();
        while picked.len() < need {
            let a = next() % n;
            if !picked.contains(&a) {
                picked.push(a);
            }
        }
        let (reads, writes) = picked.split_at(tx.reads);
        let mut newbal: Vec<(u64, u64)> = writes.iter().map(|&a| (a, bal[a as usize])).collect();
        if newbal.len() >= 2 && newbal[0].1 > 0 {
            newbal[0].1 -= 1;
            newbal[1].1 += 1;
        }
        let start = Instant::now();
        let ended = if tx.baseline {
            let (ok, rts) = baseline(&mut c, reads, &newbal, &bal, ksize, vsize)?;
            k.round_trips += rts;
            if ok {
                Ended::Committed
            } else {
                Ended::Aborted
            }
        } else {
            k.round_trips += 1;
            match design(&mut c, reads, &newbal, &bal, ksize, vsize) {
                // Refused writes ran nothing; following the master, they wait for it.
                Ok(Ended::Refused) if nodes.is_empty() => Ended::Aborted,
                Ok(e) => e,
                // Following the master: a transaction in flight at a failover may
                // have committed or not (PROTOCOL.md §6.6); the store says which.
                Err(e) if !nodes.is_empty() && in_doubt(&e) => Ended::Unknown,
                Err(kvclient::Error::TooLarge) => {
                    return Err(format!(
                        "a ({}, {}) transaction of {vsize} B values does not fit one \
                         request packet at server.mtu {}: raise server.mtu (up to 9000, \
                         jumbo frames)",
                        tx.reads, tx.writes, mtu
                    )
                    .into())
                }
                Err(e) => return Err(e.to_string().into()),
            }
        };
        let ns = start.elapsed().as_nanos() as u64;
        match ended {
            Ended::Committed => {
                for &(a, b) in &newbal {
                    bal[a as usize] = b;
                }
                k.committed += 1;
            }
            Ended::Aborted => k.aborted += 1,
            Ended::Refused => {
                k.refused += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Ended::Unknown => {
                reread(&mut c, &newbal, &mut bal, ksize)?;
                k.unknown += 1;
            }
        }
        if start >= warm_end {
            k.hist.record(ns.max(1))?;
        }
    }
    let read = read_back(&mut c, ksize, &bal)?;
    let invariant = k.report(&c, spec, tx, (n, vsize), read, !nodes.is_empty())?;
    Ok(if invariant && k.aborted == 0 { 0 } else { 1 })
}

/// What a bank run counted.
struct Counts {
    committed: u64,
    aborted: u64,
    round_trips: u64,
    /// Transactions refused for want of a master (nothing ran; tried again).
    refused: u64,
    /// Transactions of unknown outcome (a failover while in flight).
    unknown: u64,
    /// Latency of the measured transactions (ns).
    hist: Histogram<u64>,
}

impl Counts {
    /// Prints the run (and writes `--json`) for `n` accounts of `vsize`-byte values
    /// whose read-back found `(total, wrong)`; whether the invariant holds.
    fn report(
        &self,
        c: &Client<Flushing>,
        spec: &RunSpec,
        tx: &TxArgs,
        (n, vsize): (u64, usize),
        (total, wrong): (u64, u64),
        following: bool,
    ) -> Result<bool, Box<dyn std::error::Error>> {
        let Counts {
            committed,
            aborted,
            round_trips,
            refused,
            unknown,
            ref hist,
        } = *self;
        let secs = spec.phases.duration;
        let measured = hist.len();
        let us = |q: f64| hist.value_at_quantile(q) as f64 / 1e3;
        let label = if tx.baseline { "baseline" } else { "design" };
        println!(
            "tx {},{} {label}, {vsize} B values, {n} accounts: {measured} transactions measured, \
             {committed} committed, {aborted} aborted; avg {:.2} us p50 {:.2} us p99 {:.2} us; \
             {:.0} tx/s; {:.1} round trips per transaction",
            tx.reads,
            tx.writes,
            hist.mean() / 1e3,
            us(0.5),
            us(0.99),
            measured as f64 / secs,
            round_trips as f64 / (committed + aborted).max(1) as f64
        );
        let invariant = total == START_BALANCE * n && wrong == 0;
        if following {
            println!(
                "tx follow: {} redirects, {refused} transactions refused for want of a master, \
                 {unknown} of unknown outcome (their accounts re-read)",
                c.redirects()
            );
        }
        println!(
            "tx read-back: total {total} (want {}), {wrong} balances differ from the committed transactions",
            START_BALANCE * n
        );
        if let Some(path) = &spec.json {
            let j = serde_json::json!({
                "mode": label,
                "reads": tx.reads,
                "writes": tx.writes,
                "value_size": vsize,
                "accounts": n,
                "measured": measured,
                "committed": committed,
                "aborted": aborted,
                "avg_us": hist.mean() / 1e3,
                "p50_us": us(0.5),
                "p99_us": us(0.99),
                "max_us": hist.max() as f64 / 1e3,
                "tx_per_s": measured as f64 / secs,
                "round_trips_per_tx": round_trips as f64 / (committed + aborted).max(1) as f64,
                "invariant_holds": invariant,
                "refused": refused,
                "outcome_unknown": unknown,
                "follow_redirects": c.redirects(),
                "transport": serde_json::json!({
                    "retransmitted": c.transport().stats().retransmitted,
                    "failed": c.transport().stats().failed,
                }),
            });
            std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
        }
        Ok(invariant)
    }
}

/// An error after which a transaction may or may not have committed.
fn in_doubt(e: &kvclient::Error) -> bool {
    use kvclient::Error as E;
    matches!(
        e,
        E::ConnectionLost | E::Timeout | E::Deadline | E::Status(kvwire::Status::OutcomeUnknown)
    )
}

/// Reads the balances of the accounts `written` (a transaction of unknown outcome
/// wrote them, or not) into `bal`.
fn reread<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    written: &[(u64, u64)],
    bal: &mut [u64],
    ksize: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    for &(a, _) in written {
        let v = c.get(&key(a, ksize))?.unwrap_or_default();
        let b = v.get(..8).ok_or("an account's balance is not 8 bytes")?;
        bal[a as usize] = u64::from_le_bytes(b.try_into()?);
    }
    Ok(())
}

/// Stores `n` accounts at [`START_BALANCE`] (and, for the baseline, their lock words
/// at 0).
fn load_accounts<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    n: u64,
    ksize: usize,
    vsize: usize,
    baseline: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut load = Vec::new();
    for i in 0..n {
        let k = key(i, ksize);
        if baseline {
            load.push(Op::Put {
                key: lock_key(&k),
                value: 0u64.to_le_bytes().to_vec(),
            });
        }
        load.push(Op::Put {
            key: k,
            value: value(START_BALANCE, vsize),
        });
    }
    for r in pipelined(c, load)? {
        r.ok()?;
    }
    Ok(())
}

/// Reads every balance back: (their sum, how many differ from `bal`, what the
/// committed transactions imply).
fn read_back<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    ksize: usize,
    bal: &[u64],
) -> Result<(u64, u64), Box<dyn std::error::Error>> {
    let (mut total, mut wrong) = (0u64, 0u64);
    let gets = (0..bal.len() as u64)
        .map(|i| Op::Get { key: key(i, ksize) })
        .collect();
    for (i, r) in pipelined(c, gets)?.into_iter().enumerate() {
        let v = r.ok().unwrap_or_default();
        let b = v.get(..8).map_or(u64::MAX, |x| {
            u64::from_le_bytes(x.try_into().unwrap_or_default())
        });
        total = total.wrapping_add(b);
        if b != bal[i] {
            wrong += 1;
        }
    }
    Ok((total, wrong))
}

/// Runs `ops` pipelined (many per packet, a window in flight); their replies in order.
fn pipelined<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    ops: Vec<Op>,
) -> Result<Vec<kvclient::Reply>, kvclient::Error> {
    const WINDOW: usize = 4096;
    let mut out = Vec::with_capacity(ops.len());
    let mut it = ops.into_iter().peekable();
    while it.peek().is_some() {
        let tickets: Vec<_> = it.by_ref().take(WINDOW).map(|op| c.submit(op)).collect();
        c.flush();
        for t in tickets {
            out.push(c.wait(t)?);
        }
    }
    Ok(out)
}

/// Audits the bank invariant in read-only transactions until `--duration` ends;
/// returns the exit code (1 if any transaction saw a wrong total).
pub fn audit(
    io: PortIo,
    spec: &RunSpec,
    tcfg: kvclient::Config,
    params: FrameParams,
    nodes: &[NodeAddr],
) -> Result<i32, Box<dyn std::error::Error>> {
    let w = &spec.workload;
    let (n, ksize) = (w.keys, w.key_size.max(4));
    if !(1..=kvwire::payload::MAX_TX_OPS as u64).contains(&n) {
        return Err(format!(
            "--tx-audit reads every account in one transaction: 1..={} --keys",
            kvwire::payload::MAX_TX_OPS
        )
        .into());
    }
    let mut c = connect(io, spec, tcfg, params, nodes)?;
    let ops: Vec<Op> = (0..n).map(|i| Op::Get { key: key(i, ksize) }).collect();
    let want = START_BALANCE * n;
    let (mut audits, mut wrong, mut incomplete) = (0u64, 0u64, 0u64);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    let warm_end = Instant::now() + Duration::from_secs_f64(spec.phases.warmup);
    let mut worst: Option<u64> = None;
    let end = Instant::now() + Duration::from_secs_f64(spec.phases.warmup + spec.phases.duration);
    while Instant::now() < end && !crate::phases::QUIT.load(Ordering::Relaxed) {
        let start = Instant::now();
        let o = c.transact(&[], &ops)?;
        if start >= warm_end {
            hist.record((start.elapsed().as_nanos() as u64).max(1))?;
        }
        if !o.committed() {
            incomplete += 1;
            continue;
        }
        let mut total = 0u64;
        let mut all = true;
        for r in &o.results {
            match r.value.get(..8) {
                Some(b) if r.status == kvwire::Status::Ok => {
                    total += u64::from_le_bytes(b.try_into().unwrap_or_default())
                }
                _ => all = false,
            }
        }
        if !all {
            // Not loaded yet (or not replicated yet): nothing to check.
            incomplete += 1;
            continue;
        }
        audits += 1;
        if total != want {
            wrong += 1;
            worst.get_or_insert(total);
        }
    }
    println!(
        "tx audit: read-only transaction latency avg {:.2} us p99 {:.2} us",
        hist.mean() / 1e3,
        hist.value_at_quantile(0.99) as f64 / 1e3
    );
    println!(
        "tx audit: {audits} read-only transactions over {n} accounts, {wrong} with a total \
         other than {want}{}, {incomplete} before every account was there",
        worst.map_or(String::new(), |t| format!(" (first: {t})"))
    );
    if let Some(path) = &spec.json {
        let j = serde_json::json!({
            "mode": "audit",
            "accounts": n,
            "audits": audits,
            "wrong_totals": wrong,
            "incomplete": incomplete,
            "avg_us": hist.mean() / 1e3,
            "p50_us": hist.value_at_quantile(0.5) as f64 / 1e3,
            "p99_us": hist.value_at_quantile(0.99) as f64 / 1e3,
            "tx_per_s": hist.len() as f64 / spec.phases.duration,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)?;
    }
    Ok(if wrong == 0 && audits > 0 { 0 } else { 1 })
}

/// How one transfer ended.
enum Ended {
    Committed,
    /// A condition failed (another writer, or the client's view is stale).
    Aborted,
    /// The node took no writes (WRITES_REFUSED: nothing ran).
    Refused,
    /// Unknown: a failover while it was in flight (its accounts are re-read).
    Unknown,
}

/// One transaction request; how it ended.
fn design<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    reads: &[u64],
    writes: &[(u64, u64)],
    bal: &[u64],
    ksize: usize,
    vsize: usize,
) -> Result<Ended, kvclient::Error> {
    let mut ops = Vec::with_capacity(reads.len() + writes.len());
    let mut conds = Vec::with_capacity(reads.len());
    for (i, &a) in reads.iter().enumerate() {
        ops.push(Op::Get { key: key(a, ksize) });
        conds.push(TxCondition {
            op: i as u8,
            expect: Some(value(bal[a as usize], vsize)),
        });
    }
    for &(a, b) in writes {
        ops.push(Op::Put {
            key: key(a, ksize),
            value: value(b, vsize),
        });
    }
    let o = c.transact(&conds, &ops)?;
    Ok(match o.abort {
        None => Ended::Committed,
        Some(a) if a.reason == kvwire::payload::AbortReason::WritesRefused => Ended::Refused,
        Some(_) => Ended::Aborted,
    })
}

/// The baseline: locks, reads, writes, unlocks, one round trip each; (whether every
/// read saw what the client knew, round trips).
fn baseline<I: kvclient::PacketIo>(
    c: &mut Client<I>,
    reads: &[u64],
    writes: &[(u64, u64)],
    bal: &[u64],
    ksize: usize,
    vsize: usize,
) -> Result<(bool, u64), kvclient::Error> {
    let mut keys: Vec<u64> = reads
        .iter()
        .copied()
        .chain(writes.iter().map(|w| w.0))
        .collect();
    keys.sort_unstable();
    let mut rts = 0u64;
    for &a in &keys {
        // Spin until the lock word goes 0 -> 1 (one client: at once).
        loop {
            rts += 1;
            if cas_lock(c, a, ksize, 0, 1)? == 0u64.to_le_bytes() {
                break;
            }
        }
    }
    let mut ok = true;
    for &a in reads {
        rts += 1;
        ok &= c.get(&key(a, ksize))? == Some(value(bal[a as usize], vsize));
    }
    for &(a, b) in writes {
        rts += 1;
        c.put(&key(a, ksize), &value(b, vsize))?;
    }
    for &a in &keys {
        rts += 1;
        cas_lock(c, a, ksize, 1, 0)?;
    }
    Ok((ok, rts))
}
