#!/usr/bin/env python3
"""One client process of the nemesis's history workload (scripts/nemesis.py
--workload history): operations through the Python binding (kvdirect), each recorded
with its invocation and completion time and its outcome, for scripts/history_check.py.

Every operation is one line of JSON in --out, written when it completes:

  {"p": client, "f": op, "k": key, "v": arg, "t0": ns, "t1": ns, "r": outcome, "out": result}

`t0`/`t1` are CLOCK_MONOTONIC nanoseconds (one clock for every process of the host).
`r` is "ok" (acknowledged), "fail" (the server said it did not happen: a refusal
status, an aborted transaction) or "info" (outcome unknown: timeout, connection lost,
OUTCOME_UNKNOWN), as Jepsen names them. The operations, drawn from a seeded mix:

  put       register r<i> := a value no other operation writes ("<client>-<seq>")
  get       register r<i>: its value or null
  incr      the counter "ctr" += 1: out = the new value
  transfer  a transaction moving 1..5 units between two accounts a<i>, a<j>: it
            commits only if both still hold the balances read just before
  audit     a read-only transaction over every account: out = the balances

The runner creates the accounts (each START) and the counter (0) before any client
starts. Runs until --stop-file exists.
"""
import argparse
import json
import os
import random
import time

import kvdirect

START = 100
MIX = [("put", 30), ("get", 30), ("incr", 20), ("transfer", 15), ("audit", 5)]


def as_int(v):
    return None if v is None else int.from_bytes(v, "little", signed=True)


def as_text(v):
    return None if v is None else (v.decode() if isinstance(v, bytes) else v)


class Workload:
    def __init__(self, c, a):
        self.c, self.a = c, a
        self.rng = random.Random(a.seed)
        self.seq = 0
        self.ops = [name for name, w in MIX for _ in range(w)]

    def step(self):
        """Draws an operation; returns (f, key, arg, fn): fn() runs it and returns its
        result."""
        f = self.rng.choice(self.ops)
        a = self.a
        if f == "put":
            k = f"r{self.rng.randrange(a.registers)}"
            self.seq += 1
            v = f"{a.client}-{self.seq}"
            return f, k, v, lambda: self.c.put(k, v)
        if f == "get":
            k = f"r{self.rng.randrange(a.registers)}"
            return f, k, None, lambda: as_text(self.c.get(k))
        if f == "incr":
            return f, "ctr", 1, lambda: self.c.incr("ctr", 1)
        if f == "transfer":
            i, j = self.rng.sample(range(a.accounts), 2)
            keys, amount = [f"a{i}", f"a{j}"], self.rng.randint(1, 5)
            return f, keys, amount, lambda: self.transfer(keys, amount)
        return f, None, None, self.audit

    def transfer(self, keys, amount):
        """The balances are read first (outside the transaction, so they may be stale:
        the transaction's conditions then abort it)."""
        src, dst = keys
        bs, bd = as_int(self.c.get(src)), as_int(self.c.get(dst))
        amount = min(amount, bs)
        tx = self.c.pipeline(transaction=True)
        tx.get(src, equals=bs).get(dst, equals=bd).put(src, bs - amount).put(dst, bd + amount)
        tx.execute()
        return [bs, bd, amount]

    def audit(self):
        tx = self.c.pipeline(transaction=True)
        for i in range(self.a.accounts):
            tx.get(f"a{i}")
        return [as_int(v) for v in tx.execute()]


def run_one(fn):
    """Runs one operation; returns its outcome and result."""
    try:
        return "ok", fn()
    except kvdirect.TransactionAborted as e:
        return "fail", f"aborted: {e.reason}"
    except kvdirect.StatusError as e:
        # Every refusal status says nothing changed, but OUTCOME_UNKNOWN.
        return ("info" if e.status == "outcome_unknown" else "fail"), f"status: {e.status}"
    except kvdirect.Error as e:
        return "info", f"{type(e).__name__}: {e}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--iface", required=True)
    ap.add_argument("--client", type=int, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--stop-file", required=True)
    ap.add_argument("--registers", type=int, default=8)
    ap.add_argument("--accounts", type=int, default=8)
    ap.add_argument("--timeout", type=float, default=3.0, help="per operation, seconds")
    a = ap.parse_args()
    c = kvdirect.Client(a.iface, config=a.config, timeout=a.timeout)
    w = Workload(c, a)
    with open(a.out, "w") as out:
        while not os.path.exists(a.stop_file):
            f, k, v, fn = w.step()
            t0 = time.monotonic_ns()
            r, res = run_one(fn)
            t1 = time.monotonic_ns()
            out.write(json.dumps({"p": a.client, "f": f, "k": k, "v": v, "t0": t0, "t1": t1,
                                  "r": r, "out": res}) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
