#!/usr/bin/env python3
"""What a replicated PUT costs in CPU (issue 31; called by scripts/bench.sh repl-cost).

Ours: a standalone node and a master with one async replica (scripts/bench_replication.py's
cluster and placement: 2 cores shared by pktgen, the master's worker and replication
lcore, the replica's), PUT-only at saturation, each idle policy (`--idle yield`, the
default, and `adaptive`) in turn within every repetition. A sampler reads, every
100 ms, the CPU time of every dataplane process of the run (/proc/PID/stat, all
threads: workers, replication lcores, control threads; pktgen, the client, is left out)
and the master's op counter (telemetry /kvd/stats). The cost is CPU time over the
ops answered across the samples where the op rate was at least half its peak (the
measurement window, not start-up or the load sweep): `cpu_ns_per_put`. The ratio
replicated / standalone is `cycles_per_replicated_put` (the same clock: CPU time
ratios are cycle ratios).

Redis 7 side by side: a master alone and a master with one replica (placement as in
bench_replication), redis-benchmark SET pipelined; the CPU time of the redis-server
processes over the benchmark over its requests.

Writes results/repl_cost.json.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402
from benchlib import (  # noqa: E402
    ROOT, free_port, log, redis_lag, start_redis, start_redis_replica, stop_all)

TICK_NS = 1e9 / os.sysconf("SC_CLK_TCK")
POLICIES = ["yield", "adaptive"]


def cpu_ns(pid):
    """CPU time (user + system, all threads) of process `pid` so far, in ns."""
    with open(f"/proc/{pid}/stat") as f:
        # The fields after the command name (which may hold spaces) in parentheses.
        rest = f.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) * TICK_NS


class Sampler:
    """Every `period` s: (time, CPU ns of `pids` summed, the master's ops)."""

    def __init__(self, pids, prefix, period=0.1):
        self.pids, self.prefix, self.period = pids, prefix, period
        self.samples = []
        self.stop = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)

    def run(self):
        tel = benchlib.Telemetry(self.prefix)
        try:
            while not self.stop.is_set():
                ops = tel("/kvd/stats")["total"]["ops"]
                cpu = sum(cpu_ns(p) for p in self.pids)
                self.samples.append((time.monotonic(), cpu, ops))
                self.stop.wait(self.period)
        finally:
            tel.close()

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()

    def cost(self):
        """(CPU ns per op, ops, seconds) over the span of samples whose op rate was
        at least half the peak's."""
        s = self.samples
        rates = [(b[2] - a[2]) / (b[0] - a[0]) for a, b in zip(s, s[1:])]
        if not rates or max(rates) <= 0:
            raise RuntimeError("no ops while sampling")
        busy = [i for i, r in enumerate(rates) if r >= max(rates) / 2]
        a, b = s[busy[0]], s[busy[-1] + 1]
        ops = b[2] - a[2]
        return (b[1] - a[1]) / ops, ops, b[0] - a[0]


def ours(tmp, a, replicas, policy, rep):
    """One fresh standalone node (replicas 0) or master + `replicas`, PUT-only
    pktgen; its throughput and CPU cost."""
    c = rc.Cluster(tmp, f"cost-{policy}-{replicas}-r{rep}", replicas, a.huge,
                   standalone=replicas == 0)
    c.flags = ["--idle", policy]
    try:
        c.up()
        if replicas:
            c.wait_online()
        pids = [p.pid for p in c.procs.values()]
        with Sampler(pids, c.prefix(0)) as s:
            r = c.pktgen(rc.pg_args(a, 8, False, rep), "pg")
        if replicas:
            c.wait_drained()
    finally:
        c.down()
    ns, ops, secs = s.cost()
    return {"mops": r["throughput_mops"], "cpu_ns_per_put": ns, "ops_sampled": ops,
            "seconds_sampled": secs, "cores_busy": ns * ops / secs / 1e9}


def redis_cost(tmp, reps, clients, pipeline, n):
    """Redis SET: CPU ns of the redis-server processes per request, master alone and
    with one replica."""
    d = os.path.join(tmp, "redis")
    os.makedirs(d, exist_ok=True)
    out = {"none": [], "replica1": []}

    for rep in range(reps):
        for cfg in out:
            pm, ps = free_port(), free_port()
            procs = [start_redis(d, "master", 1, pm, [])]
            try:
                if cfg == "replica1":
                    procs.append(start_redis_replica(d, 0, ps, pm))
                cpu0 = sum(cpu_ns(p.pid) for p in procs)
                t0 = time.monotonic()
                subprocess.run(["taskset", "-c", "0", "redis-benchmark", "-h", "127.0.0.1",
                                "-p", str(pm), "-t", "set", "-n", str(n), "-c", str(clients),
                                "-P", str(pipeline), "-d", "8", "-r", "20000", "-q"],
                               stdout=subprocess.DEVNULL, timeout=300, check=True)
                secs = time.monotonic() - t0
                if cfg == "replica1":
                    # The replica's share of the work: until it has the whole stream.
                    for _ in range(200):
                        if redis_lag(pm, ps) == 0:
                            break
                        time.sleep(0.05)
                cpu = sum(cpu_ns(p.pid) for p in procs) - cpu0
                out[cfg].append({"cpu_ns_per_set": cpu / n, "mops": n / secs / 1e6})
                log(f"  rep {rep} redis {cfg}: {cpu / n:.0f} CPU ns per SET")
            finally:
                stop_all(procs)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    rc.add_run_args(ap, duration=3.0)
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "repl_cost.json"))
    a = ap.parse_args()
    a.pg_extra = []
    runs = {p: {0: [], 1: []} for p in POLICIES}
    with tempfile.TemporaryDirectory(prefix="kvd-bench-cost-") as tmp:
        with benchlib.dpdk_lock():
            for rep in range(a.reps):
                for policy in POLICIES:
                    for k in (0, 1):
                        r = ours(tmp, a, k, policy, rep)
                        runs[policy][k].append(r)
                        log(f"  rep {rep} {policy} {'master + 1 async replica' if k else 'standalone'}:"
                            f" {r['mops']:.2f} Mops, {r['cpu_ns_per_put']:.0f} CPU ns per PUT,"
                            f" {r['cores_busy']:.2f} cores busy")
        redis = None
        if not a.no_redis and shutil.which("redis-server") and shutil.which("redis-benchmark"):
            redis = redis_cost(tmp, a.reps, a.qps, a.window * a.ops_per_packet // a.qps, 1_000_000)
    out = {
        "command": "scripts/bench.sh repl-cost " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "what": __doc__.split("\n\n")[1].replace("\n", " "),
        "placement": "pktgen on CPU 0; standalone worker on CPU 1; master worker CPU 1, its "
                     "replication lcore CPU 0; replica worker CPU 0, replication lcore CPU 1",
        "reps": a.reps,
        "runs": runs,
    }
    for policy in POLICIES:
        r = runs[policy]
        ratio = [b["cpu_ns_per_put"] / n["cpu_ns_per_put"] for n, b in zip(r[0], r[1])]
        mops = [b["mops"] / n["mops"] for n, b in zip(r[0], r[1])]
        out[policy] = {
            "cpu_ns_per_put_standalone": statistics.median(x["cpu_ns_per_put"] for x in r[0]),
            "cpu_ns_per_put_replicated": statistics.median(x["cpu_ns_per_put"] for x in r[1]),
            "cycles_per_replicated_put": statistics.median(ratio),
            "put_async1_vs_none": statistics.median(mops),
        }
    if redis:
        ratio = [b["cpu_ns_per_set"] / n["cpu_ns_per_set"]
                 for n, b in zip(redis["none"], redis["replica1"])]
        out["redis"] = {
            "version": subprocess.run(["redis-server", "--version"], stdout=subprocess.PIPE,
                                      text=True).stdout.strip(),
            "setup": "redis-benchmark -t set -d 8 -r 20000, clients and pipeline depth as "
                     "pktgen's QPs and ops in flight; master on CPU 1, replica and the "
                     "benchmark on CPU 0",
            "cpu_ns_per_set_standalone": statistics.median(x["cpu_ns_per_set"] for x in redis["none"]),
            "cpu_ns_per_set_replicated": statistics.median(x["cpu_ns_per_set"] for x in redis["replica1"]),
            "cycles_per_replicated_set": statistics.median(ratio),
            "runs": redis,
        }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    for policy in POLICIES:
        log(f"{policy}: " + ", ".join(f"{k} {v:.3f}" for k, v in out[policy].items()))
    if redis:
        log("redis: " + ", ".join(f"{k} {v:.3f}" for k, v in out["redis"].items()
                                  if isinstance(v, float)))


if __name__ == "__main__":
    main()
