#!/usr/bin/env python3
"""Chain reconfiguration, measured (docs/REPLICATION.md §10.4): a chain of 3 in
`mode: sync` (the head answers a write once the tail applied it), probe 100 ms,
waiting time 500 ms (the cluster script's defaults), memif, this 2-core host.

Each rep, on a fresh chain:
  1. `pktgen --tx 0,1` (one write transaction at a time) on the head for 2 s: the
     undisturbed latency (avg, p99, max);
  2. the same for 4 s with the middle killed (kill -9) after 1.5 s: the longest
     transaction (`stall_ms`: a write waits until the tail joined the head and had
     it), how long until the head sees the tail online (`tail_rejoin_s`), and that
     the bank invariant holds (every committed transfer read back);
  3. the middle restarted (as an operator would: its stale memif sockets removed):
     the seconds until it is online behind the tail (`returning_join_s`, via the
     head's REDIRECT; its peers' memif links redial it), checked not to be a second
     follower of the head;
  4. 2 s of `--tx 0,1` on the new chain head -> tail -> returning node.
Medians of --reps. Writes results/chain_reconfig.json.

Usage: scripts/bench_chain.py [--reps 3] [--no-huge] [--quick]
"""
import argparse
import json
import os
import signal
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log, med  # noqa: E402
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402
from bench_tx import Chain  # noqa: E402

HEAD, MIDDLE, TAIL = 0, 1, 2
# pktgen must outlast the reconfiguration: a retransmission timeout of at least 50 ms
# and 2 s per attempt (a write waits about the waiting time for the tail to join).
SLOW = ["--rto-min-us", "50000", "--timeout-ms", "2000"]


def tx(c, name, seconds, key_size, wait=True):
    args = ["--tx", "0,1", "--keys", "2000", "--key-size", str(key_size), "--value-size", "64",
            "--warmup", "0", "--duration", str(seconds)] + SLOW
    return c.pktgen(args, name, wait=wait)


def poll(what, cond, timeout):
    """Seconds until cond() holds (raises after timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if cond():
            return time.monotonic() - t0
        time.sleep(0.02)
    raise RuntimeError(f"{what}: not within {timeout} s")


def st(c, k):
    return benchlib.telemetry(c.prefix(k), "/kvd/replication")


def one_rep(tmp, a, rep):
    c = Chain(tmp, f"chain-r{rep}", 3, a.huge)
    try:
        c.up()
        c.wait_chain_online()
        out = {"undisturbed": tx(c, "steady", a.duration, 10)}
        p, path = tx(c, "kill", a.duration + 2, 11, wait=False)
        time.sleep(1.5)
        c.stop(MIDDLE, signal.SIGKILL)
        # The head's link 1 goes to the tail.
        out["tail_rejoin_s"] = poll(
            "tail online on the head",
            lambda: st(c, HEAD).get("peers", {}).get("1", {}).get("state") == "online", 20)
        if p.wait(120) != 0:
            raise RuntimeError("pktgen across the kill failed")
        out["across_kill"] = json.load(open(path))
        if not out["across_kill"].get("invariant_holds"):
            raise RuntimeError(f"invariant broken across the kill: {out['across_kill']}")
        # The returning middle: the sockets its crash left, then the same command.
        for f in ("client1.sock", "link1-2.sock"):
            try:
                os.remove(os.path.join(c.dir, f))
            except FileNotFoundError:
                pass
        t0 = time.monotonic()
        c.start(MIDDLE)
        c.wait_ready(MIDDLE)
        # The tail's link 1 goes to node 1: its relay ships to the returning node.
        poll("returning node online behind the tail",
             lambda: (st(c, TAIL).get("relay") or {}).get("peers", {}).get("1", {})
             .get("state") == "online", 60)
        out["returning_join_s"] = time.monotonic() - t0
        h = st(c, HEAD)
        if h["peers"]["0"]["state"] == "online" or h.get("redirects_sent", 0) < 1:
            raise RuntimeError(f"the returning node is not behind the tail: {h}")
        out["redirects_sent"] = h["redirects_sent"]
        out["new_chain"] = tx(c, "after", a.duration, 12)
        return out
    finally:
        c.down()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--no-huge", dest="huge", action="store_false")
    # Accepted (and unused) so that `scripts/bench.sh tx ARGS` can pass the other
    # transaction benchmarks' options.
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--keys", type=int, default=50000)
    ap.add_argument("--quick", action="store_true", help="1 rep (smoke check)")
    ap.add_argument("--quiet-below", type=float, default=0.25)
    ap.add_argument("--quiet-wait", type=float, default=240)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "chain_reconfig.json"))
    a = ap.parse_args()
    if a.quick:
        a.reps, a.quiet_wait = 1, 0
    tmp = tempfile.mkdtemp(prefix="kvd-bench-chain-")
    runs = []
    t0 = time.monotonic()
    for rep in range(a.reps):
        rc.wait_quiet(a)
        with benchlib.dpdk_lock():
            r = one_rep(tmp, a, rep)
        runs.append(r)
        log(f"  rep {rep}: stall {r['across_kill']['max_us'] / 1e3:.0f} ms, tail rejoined in "
            f"{r['tail_rejoin_s']:.2f} s, returning node joined in {r['returning_join_s']:.2f} s")
    f = lambda k, fld: med([r[k][fld] for r in runs], digits=3)  # noqa: E731
    res = {
        "command": "scripts/bench_chain.py",
        "what": "chain of 3, mode sync, min_replicas 1, probe 100 ms, waiting time 500 ms; "
                "pktgen --tx 0,1 (one write transaction at a time) on the head; kill -9 of "
                "the middle, then its restart",
        "placement": "3 dataplanes (2 lcores each) and pktgen on the 2 cores of this host",
        "reps": a.reps,
        "hugepages": a.huge,
        "undisturbed_avg_us": f("undisturbed", "avg_us"),
        "undisturbed_p99_us": f("undisturbed", "p99_us"),
        "undisturbed_max_ms": med([r["undisturbed"]["max_us"] / 1e3 for r in runs], digits=3),
        "stall_ms": med([r["across_kill"]["max_us"] / 1e3 for r in runs], digits=3),
        "tail_rejoin_s": med([r["tail_rejoin_s"] for r in runs], digits=3),
        "committed_across_kill": f("across_kill", "committed"),
        "invariant_held_all_runs": all(r["across_kill"]["invariant_holds"] for r in runs),
        "returning_join_s": med([r["returning_join_s"] for r in runs], digits=3),
        "new_chain_avg_us": f("new_chain", "avg_us"),
        "new_chain_p99_us": f("new_chain", "p99_us"),
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as fh:
        json.dump(res, fh, indent=2)
    log(f"chain: stall {res['stall_ms']} ms (undisturbed max {res['undisturbed_max_ms']} ms), "
        f"tail rejoined {res['tail_rejoin_s']} s, returning node joined {res['returning_join_s']} s "
        f"-> {os.path.relpath(a.out, ROOT)}")


if __name__ == "__main__":
    main()
