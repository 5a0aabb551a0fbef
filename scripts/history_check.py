#!/usr/bin/env python3
"""The history checker of the nemesis (scripts/nemesis.py --workload history): reads
the operations scripts/history_client.py recorded (invocation and completion times,
outcomes) and the final state read after the faults healed, and finds what a correct
(linearizable) store could not have produced.

Outcomes are Jepsen's: "ok" (acknowledged), "fail" (did not happen), "info" (unknown:
it may have happened, at any time after its invocation). An operation A *precedes* B
in real time when A completed before B was invoked (A.t1 < B.t0); an "info" operation
never completes, so it precedes nothing.

Registers (unique values per write):
  * read_never_written: a read returned a value no put wrote, or one whose put was
    invoked after the read completed.
  * stale_reads: a read returned the value of a put W while another acknowledged put
    W2 of the key came after W (W precedes W2) and before the read (W2 precedes the
    read) — an acknowledged write lost to a later read. Reading "absent" counts as
    reading a write that precedes everything.
  * lost_acked_writes: the same rule for the final state, read after everything.
Counter (increments of 1 from 0; an increment's result is the new value):
  * duplicate_incr_results: two acknowledged increments returned the same new value (one
    was rolled back and redone, or lost).
  * non_monotonic_incr: an acknowledged increment that precedes another returned a value
    not smaller than the other's.
  * lost_acked_increments: the final counter is below the acknowledged increments (or
    below the largest value one returned).
  * duplicate_effects: the final counter is above acknowledged + unknown increments.
Bank (transactions moving units between accounts, audits reading all in one
transaction):
  * wrong_bank_totals: an audit, or the final state, whose total is not accounts x
    START, or with a negative balance.

Usage: history_check.py HISTORY.jsonl... --final FINAL.json [--accounts N] [--start S]
prints the counts as JSON; exit 1 if any is not 0. check() is the library entry.
"""
import argparse
import bisect
import json
import sys

INF = float("inf")
VIOLATIONS = ["read_never_written", "stale_reads", "lost_acked_writes", "duplicate_incr_results",
              "non_monotonic_incr", "lost_acked_increments", "duplicate_effects", "wrong_bank_totals"]


def completed_at(op):
    """When an operation surely had taken effect: its completion if acknowledged;
    never, if unknown."""
    return op["t1"] if op["r"] == "ok" else INF


class Register:
    """One key's puts: the latest invocation among acknowledged puts that completed
    before a time."""

    def __init__(self, puts):
        self.by_value = {p["v"]: p for p in puts}
        acked = sorted((p for p in puts if p["r"] == "ok"), key=lambda p: p["t1"])
        self.ends = [p["t1"] for p in acked]
        self.latest_start = []
        m = -INF
        for p in acked:
            m = max(m, p["t0"])
            self.latest_start.append(m)

    def newest_start_before(self, t):
        """The latest invocation of an acknowledged put that completed before t."""
        i = bisect.bisect_left(self.ends, t)
        return self.latest_start[i - 1] if i > 0 else -INF

    def judge(self, value, t0, t1):
        """What is wrong with reading `value` in [t0, t1]: None, "never_written" or
        "stale"."""
        if value is None:
            source_end = -INF
        else:
            w = self.by_value.get(value)
            if w is None or w["t0"] > t1:
                return "never_written"
            source_end = completed_at(w)
        return "stale" if source_end < self.newest_start_before(t0) else None


def check_registers(ops, final):
    puts, reads = {}, {}
    for op in ops:
        if op["f"] == "put" and op["r"] != "fail":
            puts.setdefault(op["k"], []).append(op)
        elif op["f"] == "get" and op["r"] == "ok":
            reads.setdefault(op["k"], []).append(op)
    res = {"read_never_written": 0, "stale_reads": 0, "lost_acked_writes": 0, "examples": []}
    for k in set(puts) | set(reads) | set(final):
        reg = Register(puts.get(k, []))
        for r in reads.get(k, []):
            bad = reg.judge(r["out"], r["t0"], r["t1"])
            if bad:
                res["read_never_written" if bad == "never_written" else "stale_reads"] += 1
                res["examples"].append(f"{k}: read {r['out']!r} [{r['t0']}, {r['t1']}] by {r['p']}: {bad}")
        bad = reg.judge(final.get(k), INF, INF)
        if bad == "never_written":
            res["read_never_written"] += 1
        elif bad:
            res["lost_acked_writes"] += 1
        if bad:
            res["examples"].append(f"{k}: final {final.get(k)!r}: {bad}")
    return res


def check_counter(ops, final):
    acked = sorted((op for op in ops if op["f"] == "incr" and op["r"] == "ok"), key=lambda o: o["t1"])
    unknown = sum(1 for op in ops if op["f"] == "incr" and op["r"] == "info")
    outs = [op["out"] for op in acked]
    res = {"acked_increments": len(acked), "unknown_increments": unknown, "final_counter": final,
           "duplicate_incr_results": len(outs) - len(set(outs)), "non_monotonic_incr": 0, "examples": []}
    ends = [op["t1"] for op in acked]
    prefix_max, m = [], -INF
    for v in outs:
        m = max(m, v)
        prefix_max.append(m)
    for op in acked:
        i = bisect.bisect_left(ends, op["t0"])
        if i > 0 and prefix_max[i - 1] >= op["out"]:
            res["non_monotonic_incr"] += 1
            res["examples"].append(f"incr by {op['p']} at {op['t0']} returned {op['out']}, "
                                   f"after one that returned {prefix_max[i - 1]}")
    floor = max([len(acked)] + outs)
    res["lost_acked_increments"] = max(0, floor - final) if final is not None else len(acked)
    res["duplicate_effects"] = max(0, (final or 0) - len(acked) - unknown)
    if res["duplicate_effects"]:
        res["examples"] += explain_extra_effects(ops, set(outs), final)
    return res


def explain_extra_effects(ops, seen, final):
    """Names the counter values no acknowledged increment returned (an effect nobody was
    told of) and the failed increments that completed nearest to them: the suspects."""
    failed = sorted((op for op in ops if op["f"] == "incr" and op["r"] == "fail"), key=lambda o: o["t1"])
    by_out = {op["out"]: op for op in ops if op["f"] == "incr" and op["r"] == "ok"}
    notes = []
    for v in [v for v in range(1, final + 1) if v not in seen][:3]:
        before, after = by_out.get(v - 1), by_out.get(v + 1)
        t = (before or after or {}).get("t1", 0)
        near = sorted(failed, key=lambda o: abs(o["t1"] - t))[:2]
        notes.append(f"no acknowledged increment returned {v} (neighbours done at "
                     f"{before and before['t1']} / {after and after['t1']}); nearest failed: "
                     + "; ".join(f"p{o['p']} {o['t0']}..{o['t1']} {o['out']}" for o in near))
    return notes


def check_bank(ops, final_accounts, accounts, start):
    want = accounts * start
    audits = [op["out"] for op in ops if op["f"] == "audit" and op["r"] == "ok"]
    # A missing account (None: its key gone, as after a wipe) is a wrong total too.
    bad = [b for b in audits + [final_accounts]
           if b is None or None in b or sum(b) != want or min(b) < 0]
    return {"audits": len(audits), "wrong_bank_totals": len(bad),
            "examples": [f"balances {b} (total {sum(x for x in b or [] if x is not None)}, want {want})"
                         for b in bad[:5]]}


def check(ops, final, accounts, start):
    """Every check over one history; `final` = {"registers": {key: value}, "counter": n,
    "accounts": [balance, ...]}. Returns the counts (VIOLATIONS all 0 when correct) and
    up to 10 examples."""
    reg = check_registers(ops, final.get("registers", {}))
    ctr = check_counter(ops, final.get("counter"))
    bank = check_bank(ops, final.get("accounts"), accounts, start)
    res = {"operations": len(ops), "acknowledged": sum(1 for op in ops if op["r"] == "ok"),
           "unknown": sum(1 for op in ops if op["r"] == "info"), "audits": bank["audits"],
           "acked_increments": ctr["acked_increments"], "final_counter": ctr["final_counter"]}
    for part in (reg, ctr, bank):
        for v in VIOLATIONS:
            if v in part:
                res[v] = part[v]
    res["examples"] = (reg["examples"] + ctr["examples"] + bank["examples"])[:10]
    return res


def load(paths):
    ops = []
    for p in paths:
        with open(p) as f:
            ops.extend(json.loads(line) for line in f if line.strip())
    return ops


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("histories", nargs="+")
    ap.add_argument("--final", required=True)
    ap.add_argument("--accounts", type=int, default=8)
    ap.add_argument("--start", type=int, default=100)
    a = ap.parse_args()
    res = check(load(a.histories), json.load(open(a.final)), a.accounts, a.start)
    print(json.dumps(res, indent=1))
    sys.exit(1 if any(res[v] for v in VIOLATIONS) else 0)


if __name__ == "__main__":
    main()
