#!/usr/bin/env python3
"""Idle lcores of a replicated pair (issue 31; `scripts/bench.sh idle --doorbell`):
what `server.idle: adaptive` costs and saves on a sync master + replica, with and
without the doorbells between the workers and the replication lcores.

Per rep, variants alternating (so drift hits all alike), each a fresh master and
one replica (scripts/cluster_config.py, memif links, mode sync, min_replicas 1; the
master's worker on core 1, its replication lcore and the replica's lcores where
cluster_config puts them; pktgen on core 0):

  yield                 every lcore polls and yields
  adaptive              idle lcores sleep on their doorbells (woken by a push) and
                        on their memif queues' ring signals (woken by a frame)
  adaptive_no_rx_intr   the same without the ring signals (`--no-rx-intr`): a frame
                        is found when a timed sleep ends
  adaptive_no_doorbells idle lcores sleep on ring signals, not doorbells
                        (`--no-doorbells`)

Measured: `idle_cpu_share` (both nodes' CPU time over 3 s with the replica in sync
and no client, as a share of one core); sync PUT latency at a sparse load (0.002
Mops, one op per packet: every lcore idles between writes, so each wake-up is in the
latency) and a moderate one (0.05 Mops); and each node's doorbells (wake-ups, mean
and largest ring-to-wake latency, from /kvd/replication).

Writes results/idle_doorbell.json: medians over --reps.
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402
from bench_idle import cpu_seconds  # noqa: E402
from benchlib import ROOT, log, med  # noqa: E402

VARIANTS = {
    "yield": ("yield", []),
    "adaptive": ("adaptive", []),
    "adaptive_no_rx_intr": ("adaptive", ["--no-rx-intr"]),
    "adaptive_no_doorbells": ("adaptive", ["--no-doorbells"]),
}


class Pair(rc.Cluster):
    """A sync master and one replica with `idle` and extra dataplane flags."""

    def __init__(self, tmp, tag, huge, idle, flags):
        super().__init__(tmp, tag, 1, huge)
        self.flags = list(flags)
        for k in range(self.n):
            c = json.load(open(self.cfg(k)))
            c["server"]["idle"] = idle
            c["replication"]["mode"] = "sync"
            c["replication"]["min_replicas"] = 1
            json.dump(c, open(self.cfg(k), "w"), indent=2)


def idle_share(pair, secs):
    pids = [p.pid for p in pair.procs.values()]
    c0, t0 = sum(cpu_seconds(p) for p in pids), time.monotonic()
    time.sleep(secs)
    c1, t1 = sum(cpu_seconds(p) for p in pids), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def bells(pair):
    out = {}
    for k in range(pair.n):
        st = benchlib.telemetry(pair.prefix(k), "/kvd/replication")
        out[f"node{k}"] = st.get("doorbells", {})
    return out


def latency(pair, rate, seconds, name):
    r = pair.pktgen(["--keys", "10000", "--key-size", "8", "--value-size", "8", "--get", "0",
                     "--put", "1", "--ops-per-packet", "1", "--rate", str(rate), "--warmup", "0.5",
                     "--duration", str(seconds)], name)
    # Raw latencies: a calibration (the least round trip) would hold a wake-up.
    lat = r["latency_raw_us"]
    return {"mops": r["throughput_mops"], "p50_us": lat["p50"], "p99_us": lat["p99"]}


def one(tmp, rep, name, huge):
    idle, flags = VARIANTS[name]
    pair = Pair(tmp, f"db-{name}-{rep}", huge, idle, flags)
    try:
        pair.up()
        pair.wait_online()
        time.sleep(1.0)
        out = {"idle_cpu_share": idle_share(pair, 3.0)}
        out["sparse"] = latency(pair, 0.002, 4, f"sparse-{rep}")
        out["moderate"] = latency(pair, 0.05, 3, f"moderate-{rep}")
        out["doorbells"] = bells(pair)
        return out
    finally:
        pair.down()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-huge", dest="huge", action="store_false")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/idle_doorbell.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvd-doorbell-")
    reps = []
    with benchlib.dpdk_lock():
        for rep in range(a.reps):
            row = {}
            for name in VARIANTS:
                row[name] = one(tmp, rep, name, a.huge)
                s = row[name]
                log(f"rep {rep} {name}: idle {s['idle_cpu_share']:.3f} core; sparse sync PUT p50 "
                    f"{s['sparse']['p50_us']:.1f} us p99 {s['sparse']['p99_us']:.1f} us; moderate p50 "
                    f"{s['moderate']['p50_us']:.1f} us p99 {s['moderate']['p99_us']:.1f} us")
            reps.append(row)
    res = {"what": __doc__.split("\n\n")[0], "command": "scripts/bench_doorbell.py " + " ".join(sys.argv[1:]),
           "date": time.strftime("%Y-%m-%d %H:%M:%S"), "reps": reps, "medians": {}}
    for name in VARIANTS:
        runs = [r[name] for r in reps]
        res["medians"][name] = {
            "idle_cpu_share": med(runs, "idle_cpu_share"),
            **{f"{load}_{f}": med(runs, load, f) for load in ("sparse", "moderate")
               for f in ("p50_us", "p99_us")},
        }
    m = res["medians"]
    res["sparse_p50_doorbells_vs_timed"] = m["adaptive"]["sparse_p50_us"] / m["adaptive_no_doorbells"]["sparse_p50_us"]
    res["sparse_p50_ring_signals_vs_timed"] = m["adaptive"]["sparse_p50_us"] / m["adaptive_no_rx_intr"]["sparse_p50_us"]
    res["idle_cpu_share_adaptive_vs_yield"] = m["adaptive"]["idle_cpu_share"] / m["yield"]["idle_cpu_share"]
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"doorbell: {json.dumps(m)} -> {a.out}")


if __name__ == "__main__":
    main()
