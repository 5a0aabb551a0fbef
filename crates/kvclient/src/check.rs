//! The exactly-once check: N QPs × M fetch-adds on one key, then CAS chains on
//! another, over a [`Transport`], with every returned original accounted for.
//!
//! * **Fetch-adds.** Every QP issues `M` fetch-adds of 1 on key A (initially 0), up
//!   to `depth` requests in flight per QP (so losses open PSN gaps and exercise the
//!   NAK path, not only timeouts). The originals returned must be exactly
//!   `{0, …, N×M−1}`, each once, and A must end at `N×M`. A fetch-add executed twice
//!   (a retransmission run again) shows up as a skipped or repeated original and a
//!   final value above `N×M`.
//! * **CAS chains.** Every QP repeatedly tries `CAS(B, expected, expected + 1)` and
//!   learns the current value from the original returned (one CAS in flight per QP),
//!   until the QPs together
//!   succeeded `N×M` times. The successful `expected` values must be exactly
//!   `{0, …, successes−1}`, each once, and B must end at `successes`. A CAS executed
//!   twice answers its retransmission with a different original: the client counts a
//!   failure where the value moved, and B ends above the successes.
//!
//! A request the transport gives up on ([`Event::Failed`]) leaves its outcome unknown
//! and is counted as a violation (the check cannot be conclusive).
//!
//! The check is a step function ([`ExactlyOnce::step`]) so a caller can interleave it
//! with the rest of its loop (pktgen's DPDK polling, or a test running the server
//! between steps).

use crate::{Event, PacketIo, Transport};
use kvwire::{func, Atomic, BatchWriter, KvOp, ResponseReader, Status, Width};

const ADD: Atomic = Atomic {
    func: func::FETCH_ADD,
    width: Width::W8,
    signed: false,
};
const CAS: Atomic = Atomic {
    func: func::CAS,
    width: Width::W8,
    signed: false,
};

/// Where the check is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Waiting for the connections, then writing 0 to both keys.
    Init,
    /// Fetch-adds.
    Adds,
    /// CAS chains.
    Cas,
    /// Reading both keys back.
    Final,
    /// Finished.
    Done,
}

/// What one QP has in flight.
#[derive(Clone, Copy, Debug, Default)]
struct QpTurn {
    /// Requests in flight.
    busy: u32,
    /// Fetch-adds not sent yet.
    adds_left: u64,
    /// The value this QP's next CAS expects.
    expected: u64,
    /// The `expected` of the CAS in flight.
    cas_expected: u64,
}

/// The outcome of the check.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Violations of exactly-once found (0 = passed).
    pub violations: u64,
    /// Fetch-adds answered.
    pub adds: u64,
    /// Key A's final value.
    pub final_add: Option<u64>,
    /// CAS requests answered.
    pub cas_tries: u64,
    /// Successful CASes.
    pub cas_successes: u64,
    /// Key B's final value.
    pub final_cas: Option<u64>,
    /// Requests the transport gave up on.
    pub failed: u64,
    /// The first few problems, in words.
    pub problems: Vec<String>,
}

impl Report {
    /// One line: what was checked and the verdict.
    pub fn summary(&self) -> String {
        format!(
            "{} fetch-adds (final {:?}), {} CAS tries / {} successes (final {:?}), {} given up, {} violations{}",
            self.adds,
            self.final_add,
            self.cas_tries,
            self.cas_successes,
            self.final_cas,
            self.failed,
            self.violations,
            if self.problems.is_empty() {
                String::new()
            } else {
                format!(": {}", self.problems.join("; "))
            }
        )
    }
}

/// The exactly-once check over QPs `0..n` of a transport (see the module doc). All
/// of them must be allowed to carry both keys (one partition, or QPs of the keys'
/// partition).
#[derive(Debug)]
pub struct ExactlyOnce {
    key_add: [u8; 16],
    key_cas: [u8; 16],
    n: usize,
    per_qp: u64,
    /// Fetch-adds in flight per QP.
    depth: u32,
    stage: Stage,
    turns: Vec<QpTurn>,
    /// Originals returned by the fetch-adds (bit per value `0..n×per_qp`).
    add_seen: Vec<u64>,
    /// `expected` values of successful CASes.
    cas_seen: Vec<u64>,
    /// Init / Final requests answered (2 needed each).
    acks: u8,
    init_sent: bool,
    final_sent: bool,
    report: Report,
}

fn bit_set(bits: &mut [u64], i: u64) -> Option<bool> {
    let w = bits.get_mut((i / 64) as usize)?;
    let was = *w & (1 << (i % 64)) != 0;
    *w |= 1 << (i % 64);
    Some(was)
}

fn u64_of(v: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(v.try_into().ok()?))
}

impl ExactlyOnce {
    /// A check of `per_qp` fetch-adds per QP over QPs `0..n`, up to 4 in flight per
    /// QP, on two keys derived from `tag` (use a fresh tag per run so earlier runs'
    /// keys do not interfere).
    pub fn new(n: usize, per_qp: u64, tag: u64) -> ExactlyOnce {
        Self::with_depth(n, per_qp, tag, 4)
    }

    /// [`ExactlyOnce::new`] with `depth` fetch-adds in flight per QP (at least 1).
    pub fn with_depth(n: usize, per_qp: u64, tag: u64, depth: u32) -> ExactlyOnce {
        let mut key_add = *b"eo-add-\0\0\0\0\0\0\0\0\0";
        let mut key_cas = *b"eo-cas-\0\0\0\0\0\0\0\0\0";
        key_add[8..16].copy_from_slice(&tag.to_be_bytes());
        key_cas[8..16].copy_from_slice(&tag.to_be_bytes());
        let total = n as u64 * per_qp;
        ExactlyOnce {
            key_add,
            key_cas,
            n,
            per_qp,
            depth: depth.max(1),
            stage: Stage::Init,
            turns: vec![
                QpTurn {
                    adds_left: per_qp,
                    ..QpTurn::default()
                };
                n
            ],
            add_seen: vec![0; total.div_ceil(64) as usize],
            cas_seen: vec![0; total.div_ceil(64) as usize],
            acks: 0,
            init_sent: false,
            final_sent: false,
            report: Report::default(),
        }
    }

    /// The check on keys in tenant `tenant`'s namespace (docs/PROTOCOL.md §6.8), for a
    /// transport whose QPs that tenant opened: the keys' first bytes become the
    /// namespace (they stay 16 bytes and distinct).
    pub fn in_namespace(mut self, tenant: u32) -> ExactlyOnce {
        let ns = kvwire::tenant::namespace(tenant);
        self.key_add[..ns.len()].copy_from_slice(&ns);
        self.key_cas[..ns.len()].copy_from_slice(&ns);
        self
    }

    /// Whether the check finished.
    pub fn done(&self) -> bool {
        self.stage == Stage::Done
    }

    /// The outcome so far (final once [`ExactlyOnce::done`]).
    pub fn report(&self) -> &Report {
        &self.report
    }

    fn violation(&mut self, what: String) {
        self.report.violations += 1;
        if self.report.problems.len() < 8 {
            self.report.problems.push(what);
        }
    }

    /// Sends what can be sent, polls the transport once and handles its events.
    /// Returns [`ExactlyOnce::done`].
    pub fn step<I: PacketIo + ?Sized>(
        &mut self,
        t: &mut Transport,
        io: &mut I,
        now_ns: u64,
    ) -> bool {
        self.send(t, io, now_ns);
        t.poll(io, now_ns, &mut |ev| match ev {
            Event::Results { qp, payload, .. } => self.on_results(qp, payload),
            Event::Complete { qp, .. } => self.on_complete(qp),
            Event::Failed { qp, .. } => self.on_failed(qp),
            // This checker never turns resuming on.
            Event::Connected { .. } | Event::Lost { .. } => {}
        });
        self.advance();
        self.done()
    }

    fn send<I: PacketIo + ?Sized>(&mut self, t: &mut Transport, io: &mut I, now_ns: u64) {
        match self.stage {
            Stage::Init
                if !self.init_sent
                    && (0..self.n).all(|q| t.is_connected(q))
                    && t.can_send(0, now_ns) =>
            {
                let (a, b) = (self.key_add, self.key_cas);
                let zero = 0u64.to_le_bytes();
                let ops = [
                    KvOp::Put {
                        key: &a,
                        value: &zero,
                    },
                    KvOp::Put {
                        key: &b,
                        value: &zero,
                    },
                ];
                if send_ops(t, io, 0, now_ns, &ops) {
                    self.init_sent = true;
                }
            }
            Stage::Adds => {
                for q in 0..self.n {
                    while self.turns[q].busy < self.depth
                        && self.turns[q].adds_left > 0
                        && t.can_send(q, now_ns)
                    {
                        let key = self.key_add;
                        let op = KvOp::UpdateS2S {
                            key: &key,
                            atomic: ADD,
                            param: 1,
                            param2: 0,
                        };
                        if !send_ops(t, io, q, now_ns, &[op]) {
                            break;
                        }
                        self.turns[q].busy += 1;
                        self.turns[q].adds_left -= 1;
                    }
                }
            }
            Stage::Cas => {
                let target = self.n as u64 * self.per_qp;
                for q in 0..self.n {
                    if self.report.cas_successes >= target {
                        break;
                    }
                    let turn = self.turns[q];
                    if turn.busy > 0 || !t.can_send(q, now_ns) {
                        continue;
                    }
                    let key = self.key_cas;
                    let op = KvOp::UpdateS2S {
                        key: &key,
                        atomic: CAS,
                        param: turn.expected,
                        param2: turn.expected.wrapping_add(1),
                    };
                    if send_ops(t, io, q, now_ns, &[op]) {
                        self.turns[q].busy = 1;
                        self.turns[q].cas_expected = turn.expected;
                    }
                }
            }
            Stage::Final if !self.final_sent && t.can_send(0, now_ns) => {
                let (a, b) = (self.key_add, self.key_cas);
                let ops = [KvOp::Get { key: &a }, KvOp::Get { key: &b }];
                if send_ops(t, io, 0, now_ns, &ops) {
                    self.final_sent = true;
                }
            }
            _ => {}
        }
    }

    fn on_results(&mut self, qp: usize, payload: &[u8]) {
        let Ok(reader) = ResponseReader::new(payload) else {
            self.violation(format!("qp {qp}: unreadable response"));
            return;
        };
        let first = usize::from(reader.first_index());
        for (k, r) in reader.enumerate() {
            let Ok(r) = r else {
                self.violation(format!("qp {qp}: malformed result"));
                return;
            };
            let idx = first + k;
            match self.stage {
                Stage::Init => {
                    if r.status != Status::Ok {
                        self.violation(format!("initial PUT answered {:?}", r.status));
                    }
                }
                Stage::Adds => self.on_add(qp, r.status, r.value),
                Stage::Cas => self.on_cas(qp, r.status, r.value),
                Stage::Final => {
                    let v = if r.status == Status::Ok {
                        u64_of(r.value)
                    } else {
                        None
                    };
                    if idx == 0 {
                        self.report.final_add = v;
                    } else {
                        self.report.final_cas = v;
                    }
                }
                Stage::Done => {}
            }
        }
    }

    fn on_add(&mut self, qp: usize, status: Status, value: &[u8]) {
        self.report.adds += 1;
        let Some(orig) = (status == Status::Ok).then(|| u64_of(value)).flatten() else {
            self.violation(format!("qp {qp}: fetch-add answered {status:?}"));
            return;
        };
        match bit_set(&mut self.add_seen, orig) {
            None => self.violation(format!("fetch-add original {orig} beyond N×M")),
            Some(true) => self.violation(format!("fetch-add original {orig} returned twice")),
            Some(false) => {}
        }
    }

    fn on_cas(&mut self, qp: usize, status: Status, value: &[u8]) {
        self.report.cas_tries += 1;
        let Some(orig) = (status == Status::Ok).then(|| u64_of(value)).flatten() else {
            self.violation(format!("qp {qp}: CAS answered {status:?}"));
            return;
        };
        let turn = &mut self.turns[qp];
        if orig == turn.cas_expected {
            turn.expected = orig + 1;
            self.report.cas_successes += 1;
            match bit_set(&mut self.cas_seen, orig) {
                None => {} // beyond the target: other QPs' last tries; checked at the end
                Some(true) => self.violation(format!("CAS from {orig} succeeded twice")),
                Some(false) => {}
            }
        } else {
            turn.expected = orig;
        }
    }

    fn on_complete(&mut self, qp: usize) {
        match self.stage {
            Stage::Init | Stage::Final => self.acks += 1,
            Stage::Adds | Stage::Cas => {
                let t = &mut self.turns[qp];
                t.busy = t.busy.saturating_sub(1);
            }
            Stage::Done => {}
        }
    }

    fn on_failed(&mut self, qp: usize) {
        self.report.failed += 1;
        self.violation(format!("qp {qp}: a request was given up (outcome unknown)"));
        // Its outcome is unknown: stop sending on this QP.
        let t = &mut self.turns[qp];
        t.busy = t.busy.saturating_sub(1);
        t.adds_left = 0;
        if matches!(self.stage, Stage::Init | Stage::Final) {
            self.acks += 2;
        }
    }

    fn advance(&mut self) {
        match self.stage {
            Stage::Init if self.acks >= 1 => {
                self.acks = 0;
                self.stage = Stage::Adds;
            }
            Stage::Adds if self.turns.iter().all(|t| t.busy == 0 && t.adds_left == 0) => {
                self.stage = Stage::Cas;
            }
            Stage::Cas
                if self.report.cas_successes >= self.n as u64 * self.per_qp
                    && self.turns.iter().all(|t| t.busy == 0) =>
            {
                self.stage = Stage::Final;
            }
            Stage::Final if self.acks >= 1 => {
                self.finish();
                self.stage = Stage::Done;
            }
            _ => {}
        }
    }

    /// The end-of-run checks: every original seen once, final values as counted.
    fn finish(&mut self) {
        let total = self.n as u64 * self.per_qp;
        let r = &self.report;
        let (adds, final_add, succ, final_cas) =
            (r.adds, r.final_add, r.cas_successes, r.final_cas);
        if self.report.failed == 0 {
            let missing = (0..total)
                .filter(|&i| self.add_seen[(i / 64) as usize] & (1 << (i % 64)) == 0)
                .count();
            if missing > 0 || adds != total {
                self.violation(format!(
                    "{adds} fetch-adds answered, {missing} originals of 0..{total} never returned"
                ));
            }
        }
        if final_add != Some(adds) {
            self.violation(format!(
                "key A ends at {final_add:?} after {adds} fetch-adds"
            ));
        }
        let seen = (0..total.min(succ))
            .filter(|&i| self.cas_seen[(i / 64) as usize] & (1 << (i % 64)) != 0)
            .count() as u64;
        if seen != total.min(succ) {
            self.violation(format!(
                "CAS successes from {seen} of the values 0..{}",
                total.min(succ)
            ));
        }
        if final_cas != Some(succ) {
            self.violation(format!(
                "key B ends at {final_cas:?} after {succ} successful CASes"
            ));
        }
    }
}

/// Sends `ops` as one request on QP `qp`; whether it went out.
fn send_ops<I: PacketIo + ?Sized>(
    t: &mut Transport,
    io: &mut I,
    qp: usize,
    now_ns: u64,
    ops: &[KvOp<'_>],
) -> bool {
    t.send_with(io, qp, now_ns, qp as u64, |buf, batch_id| {
        let mut w = BatchWriter::new(buf, batch_id).ok()?;
        for op in ops {
            w.push(op).ok()?;
        }
        Some(w.finish())
    })
    .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A check past its fetch-adds, fed results by hand.
    fn in_adds(n: usize, m: u64) -> ExactlyOnce {
        let mut c = ExactlyOnce::new(n, m, 1);
        c.stage = Stage::Adds;
        c
    }

    fn finish_with(c: &mut ExactlyOnce, final_add: u64, successes: u64, final_cas: u64) {
        for v in 0..successes {
            let _ = bit_set(&mut c.cas_seen, v);
        }
        c.report.cas_successes = successes;
        c.report.final_add = Some(final_add);
        c.report.final_cas = Some(final_cas);
        c.finish();
    }

    #[test]
    fn namespaced_keys_are_the_tenants_and_stay_apart() {
        let c = ExactlyOnce::new(1, 1, 9).in_namespace(7);
        for k in [&c.key_add, &c.key_cas] {
            assert!(kvwire::tenant::key_allowed(7, k), "{k:?}");
            assert!(!kvwire::tenant::key_allowed(8, k), "{k:?}");
        }
        assert_ne!(c.key_add, c.key_cas);
        assert_eq!(c.key_add[8..], 9u64.to_be_bytes());
    }

    #[test]
    fn every_original_once_passes() {
        let mut c = in_adds(2, 3);
        for v in [3, 0, 5, 1, 4, 2] {
            c.on_add(0, Status::Ok, &u64::to_le_bytes(v));
        }
        finish_with(&mut c, 6, 6, 6);
        assert_eq!(c.report.violations, 0, "{}", c.report.summary());
    }

    #[test]
    fn a_fetch_add_applied_twice_is_caught() {
        // A retransmission executed again: its original repeats or a value is
        // skipped, and the key ends one too high.
        let mut c = in_adds(2, 3);
        for v in [0, 1, 1, 2, 3, 4] {
            c.on_add(0, Status::Ok, &u64::to_le_bytes(v));
        }
        finish_with(&mut c, 7, 6, 6);
        assert!(c.report.violations >= 3, "{}", c.report.summary());
        assert!(c
            .report
            .problems
            .iter()
            .any(|p| p.contains("returned twice")));
    }

    #[test]
    fn a_cas_applied_twice_is_caught() {
        let mut c = in_adds(1, 2);
        for v in [0, 1] {
            c.on_add(0, Status::Ok, &u64::to_le_bytes(v));
        }
        // Two successes counted, but the value moved three times.
        finish_with(&mut c, 2, 2, 3);
        assert_eq!(c.report.violations, 1, "{}", c.report.summary());
        // A CAS whose success from the same value is reported twice.
        c.stage = Stage::Cas;
        c.turns[0].cas_expected = 1;
        c.on_cas(0, Status::Ok, &u64::to_le_bytes(1));
        assert!(c
            .report
            .problems
            .iter()
            .any(|p| p.contains("succeeded twice")));
    }
}
