#!/usr/bin/env python3
"""Partition scaling benchmark (called by scripts/bench.sh scale): dataplane + pktgen
over memif.

1. Throughput with 1 worker lcore (dataplane on core 1, pktgen on core 0) and with 2
   worker lcores (dataplane on cores 0 and 1: this machine has 2 cores, so pktgen
   shares core 0 with worker 0). 10 B KVs, 95 % GET, uniform, 32 ops/packet; pktgen
   steers every op to its partition's QP and queue (`--partitions`). The 2-worker
   run is repeated with pure busy polling on both sides (`--idle-yield-polls 0`): the
   threads sharing core 0 then keep it for whole scheduler slices.
   Request processing alone, without pktgen competing for a core: the server_scale
   example feeds pre-built request frames to 1 and then 2 workers (threads).
2. Per-partition load under Zipf 0.99: the ops each of the 2 workers executed, and the
   skew over 10 hash partitions of the same key stream (pktgen `--count-partitions
   10`; the paper: the hottest of 10 partitions carries 1.5x the average).
3. A worker's throughput while the slab daemon merges free slabs every 100 ms, vs
   without (PUT-heavy, 20-1000 B values, 1 worker).

Every point is the median of --reps runs against a fresh dataplane. Writes
results/scale.json.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log, run_reps  # noqa: E402


def run(tmp, tag, dp_extra, pg_args, reps):
    """`reps` runs against fresh dataplanes: (median Mops, runs, dataplane stats)."""
    return run_reps(tmp, tag, lambda sj: dp_extra + ["--stats-json", sj], pg_args, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/scale.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvd-bench-scale-")
    base = ["--warmup", "0.5", "--duration", str(a.duration), "--calibrate", "100",
            "--window", "64", "--qps", "4", "--key-size", "8", "--value-size", "2",
            "--keys", str(a.keys), "--load", "--ops-per-packet", "32"]
    uniform = base + ["--get", "0.95", "--put", "0.05"]

    m1, _, _ = run(tmp, "w1", ["--mem-mb", "256"], uniform + ["--partitions", "1"], a.reps)
    log(f"  1 worker: {m1:.2f} Mops")
    m2, runs2, st2 = run(tmp, "w2", ["--mem-mb", "256", "--lcores", "0,1"],
                         uniform + ["--partitions", "2"], a.reps)
    log(f"  2 workers: {m2:.2f} Mops, worker ops {[s.get('worker_ops') for s in st2]}")
    m2_busy, _, _ = run(tmp, "w2-busy", ["--mem-mb", "256", "--lcores", "0,1", "--idle-yield-polls", "0"],
                        uniform + ["--partitions", "2", "--idle-yield-polls", "0"], a.reps)
    log(f"  2 workers, pure busy polling (no idle yield): {m2_busy:.2f} Mops")
    srv = []
    for rep in range(a.reps):
        r = subprocess.run([os.path.join(ROOT, "target/release/examples/server_scale"), "3", "1000000"],
                           stdout=subprocess.PIPE, text=True, check=True, timeout=300)
        srv.append(json.loads(r.stdout))
        log(f"  server alone: 1 worker {srv[-1]['server_mops_1_worker']:.2f} Mops, "
            f"2 workers {srv[-1]['server_mops_2_workers']:.2f} Mops")
    srv1 = statistics.median(r["server_mops_1_worker"] for r in srv)
    srv2 = statistics.median(r["server_mops_2_workers"] for r in srv)
    mis, _, st_mis = run(tmp, "w2-misdirect", ["--mem-mb", "256", "--lcores", "0,1"],
                         uniform + ["--partitions", "2", "--misdirect"], a.reps)
    log(f"  2 workers, every request on the wrong queue (handed off): {mis:.2f} Mops")

    zipf = base + ["--get", "0.95", "--put", "0.05", "--dist", "zipf", "--partitions", "2",
                   "--count-partitions", "10"]
    mz, runs_z, st_z = run(tmp, "w2-zipf", ["--mem-mb", "256", "--lcores", "0,1"], zipf, a.reps)
    worker_ratio = []
    for s in st_z:
        ops = s.get("worker_ops", [])
        if ops and sum(ops):
            worker_ratio.append(max(ops) / (sum(ops) / len(ops)))
    hot10 = statistics.median(r["hottest_partition_ratio_k"] for r in runs_z)
    log(f"  zipf, 2 workers: {mz:.2f} Mops; hottest worker / mean {statistics.median(worker_ratio):.3f}; "
        f"hottest of 10 hash partitions / mean {hot10:.3f}")

    churn = ["--warmup", "0.5", "--duration", str(a.duration), "--calibrate", "100",
             "--window", "32", "--qps", "1", "--key-size", "8", "--value-size", "20-1000",
             "--keys", "200000", "--load", "--get", "0.5", "--put", "0.3",
             "--ops-per-packet", "8"]
    no_merge, _, _ = run(tmp, "merge-off", ["--mem-mb", "256"], churn, a.reps)
    with_merge, _, st_m = run(tmp, "merge-on", ["--mem-mb", "256", "--merge-every-ms", "100"],
                              churn, a.reps)
    log(f"  churn: {no_merge:.3f} Mops without merges, {with_merge:.3f} Mops with a merge "
        f"every 100 ms ({[s.get('slab_merges') for s in st_m]} merges)")

    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except StopIteration:
        pass
    out = {
        "command": "scripts/bench.sh scale " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release()},
        "config": {"reps": a.reps, "duration_s": a.duration, "keys": a.keys, "kv_bytes": 10,
                   "one_worker": "dataplane core 1, pktgen core 0",
                   "two_workers": "dataplane cores 0 and 1, pktgen core 0 (shared with worker 0)",
                   "idle_yield_polls": "64 on both sides (default) unless *_busy_poll",
                   "server_alone": "examples/server_scale: pre-built 32-op frames (95% GET, 5% PUT, "
                                   "uniform over 1 M 10 B keys) fed to Server::handle_burst in bursts "
                                   "of 32, 1 worker then 2 worker threads; rate = ops / time in "
                                   "handle_burst, summed over workers",
                   "churn": "20-1000 B values, 50% GET 30% PUT 20% DELETE, 200k keys, 1 worker"},
        "mops_1_lcore": m1,
        "mops_2_lcores": m2,
        "scaling_2_over_1": m2 / m1 if m1 else None,
        "mops_2_lcores_busy_poll": m2_busy,
        "server_mops_1_worker": srv1,
        "server_mops_2_workers": srv2,
        "server_scaling_2_over_1": srv2 / srv1 if srv1 else None,
        "server_runs": srv,
        "mops_2_lcores_all_misdirected": mis,
        "handed_off_per_run": [s.get("handed_off") for s in st_mis],
        "zipf_mops_2_lcores": mz,
        "hottest_worker_ratio_zipf_2": statistics.median(worker_ratio) if worker_ratio else None,
        "hottest_partition_ratio": hot10,
        "hottest_partition_ratio_partitions": 10,
        "partition_ops_10": runs_z[0].get("partition_ops_k"),
        "churn_mops_no_merge": no_merge,
        "churn_mops_merge_every_100ms": with_merge,
        "merge_ratio": with_merge / no_merge if no_merge else None,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    log(f"bench scale: 1 lcore {m1:.2f} Mops, 2 lcores {m2:.2f} Mops, hottest of 10 partitions "
        f"{hot10:.2f}x mean, churn with merges {out['merge_ratio']:.2f}x -> {a.out}")


if __name__ == "__main__":
    main()
