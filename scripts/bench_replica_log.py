#!/usr/bin/env python3
"""The cost of the replica's log file (`replication.log_file`, docs/OPERATIONS.md
"The replica's log file"): saturated PUT throughput and p99 of a master with one
replica, the replica writing no log or a log under each fsync policy, in async mode
and in sync mode (min_replicas 1: a write is answered once the replica acknowledged
it, and under `always` the replica acknowledges only what is fdatasync'ed).

Placement and cluster set-up as scripts/bench_replication.py (2-core host: nothing
has a core of its own). Every run checks that the replica ends equal to the master
and, with a log, that the log file reached the stream's end with no write error.
Medians of --reps runs; ratios are taken inside each rep against the run without a
log in the same mode. Writes results/replica_log.json.

Usage: scripts/bench_replica_log.py [--reps 3] [--no-huge] [--quick]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log  # noqa: E402
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402
from bench_offload import med, ratio  # noqa: E402

POLICIES = ["none", "no", "everysec", "always"]


class LogCluster(rc.Cluster):
    """A master and one replica; the replica logs under `policy` ("none": no log);
    `sync`: mode sync with min_replicas 1."""

    def __init__(self, tmp, tag, huge, policy, sync):
        super().__init__(tmp, tag, 1, huge)
        for k in range(self.n):
            c = json.load(open(self.cfg(k)))
            if sync:
                c["replication"]["mode"] = "sync"
                c["replication"]["min_replicas"] = 1
            if k > 0 and policy != "none":
                c["replication"]["log_file"] = os.path.join(self.dir, f"node{k}.aof")
                c["replication"]["fsync"] = policy
            json.dump(c, open(self.cfg(k), "w"), indent=2)


def run(tmp, a, policy, sync, rep):
    tag = f"{'sync' if sync else 'async'}-{policy}"
    c, out, replica_status = rc.fresh_run(
        lambda: LogCluster(tmp, f"{tag}-r{rep}", a.huge, policy, sync), a, tag, rep, 1,
        after=lambda c: benchlib.telemetry(c.prefix(1), "/kvd/replication") or {})
    if not out["replicas_equal_master"]:
        raise RuntimeError(f"{tag}: the replica differs from the master")
    lf = replica_status.get("log_file")
    # Its counters; not the file's path (a scratch directory of this machine).
    lf = lf if isinstance(lf, dict) else None  # telemetry renders "no log" as "null"
    out["log_file"] = {k: v for k, v in lf.items() if k != "file"} if lf else None
    if policy != "none":
        size = os.path.getsize(os.path.join(c.dir, "node1.aof"))
        out["log_bytes"] = size
        if not lf or int(lf.get("errors", 1)) != 0:
            raise RuntimeError(f"{tag}: log file status {lf}")
    return out


def main():
    ap = argparse.ArgumentParser()
    rc.add_run_args(ap)
    ap.add_argument("--quick", action="store_true", help="1 rep, short runs (smoke check)")
    ap.add_argument("--quiet-below", type=float, default=0.25)
    ap.add_argument("--quiet-wait", type=float, default=240)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/replica_log.json"))
    a = ap.parse_args()
    a.pg_extra = []
    if a.quick:
        a.reps, a.duration, a.warmup, a.quiet_wait = 1, 0.5, 0.2, 0
    tmp = tempfile.mkdtemp(prefix="kvd-bench-replica-log-")
    modes = {"async": [(p, False) for p in POLICIES], "sync": [("none", True), ("always", True)]}
    runs = {m: {p: [] for p, _ in cfgs} for m, cfgs in modes.items()}
    t0 = time.monotonic()
    for rep in range(a.reps):
        rc.wait_quiet(a)
        with benchlib.dpdk_lock():
            for m, cfgs in modes.items():
                for p, sync in cfgs:
                    runs[m][p].append(run(tmp, a, p, sync, rep))
        log(f"  rep {rep}: PUT Mops " + ", ".join(
            f"{m}/{p} {runs[m][p][-1]['mops']:.3f}" for m in runs for p in runs[m]))
    res = {
        "what": "PUT-only at saturation, 8 B keys and values, master + 1 replica on memif; "
                "the replica appends the stream to a log file under each fsync policy",
        "reps": a.reps,
        "hugepages": a.huge,
        "placement": "as scripts/bench_replication.py: pktgen CPU 0, master worker CPU 1; "
                     "2-core host, the replica and its log thread share the cores",
        "log_dir_filesystem": subprocess.run(["stat", "-f", "-c", "%T", tmp], capture_output=True,
                                             text=True).stdout.strip(),
        "async": {p: {"put_mops": med(runs["async"][p], "mops"),
                      "p99_us": med(runs["async"][p], "p99_us"),
                      "mops_vs_no_log": ratio(runs["async"][p], runs["async"]["none"], "mops")}
                  for p in POLICIES},
        "sync": {p: {"put_mops": med(runs["sync"][p], "mops"),
                     "p99_us": med(runs["sync"][p], "p99_us"),
                     "mops_vs_no_log": ratio(runs["sync"][p], runs["sync"]["none"], "mops")}
                 for p in ("none", "always")},
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log("replica log: async PUT Mops vs no log: " + ", ".join(
        f"{p} {res['async'][p]['mops_vs_no_log']}" for p in POLICIES[1:])
        + f"; sync+always vs sync: {res['sync']['always']['mops_vs_no_log']} -> {a.out}")


if __name__ == "__main__":
    main()
