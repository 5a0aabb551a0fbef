#!/usr/bin/env python3
"""What completion records cost (docs/PROTOCOL.md §6.6; called by scripts/bench.sh
replication).

An etcd-managed node logs, as master, an INTENT before each request that may write
and the request's response frames after it, into the replication stream, so that a
client's resend across a failover is answered once and never run twice. This
measures that price: per repetition, two fresh clusters of 2 etcd-managed nodes on
memif (master + 1 replica, `mode: sync`, min_replicas 1), one with completion records
(the default) and one with `completion_records: false`, each driven by pktgen in
closed loop on the master:

  * put: 100 % PUT, 8 B keys, 8 B values, 32 ops per packet;
  * mixed: 50 % GET / 50 % PUT, same sizes (every packet carries writes, so every
    response — GET values included — goes into the stream).

Reported per workload: throughput and p99 with and without, their ratios inside each
repetition (medians over the repetitions), and the stream bytes per operation (the
master's stream offset growth / ops). Both processes and pktgen share the machine's
two cores. Writes results/completions.json.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log  # noqa: E402
import bench_failover as bf  # noqa: E402
import benchlib  # noqa: E402

WORKLOADS = {
    "put": ["--get", "0", "--put", "1"],
    "mixed": ["--get", "0.5", "--put", "0.5"],
}


def one_cluster(tmp, a, etcd_url, tag, completions):
    d = os.path.join(tmp, tag)
    shutil.rmtree(d, ignore_errors=True)
    cmd = [sys.executable, os.path.join(ROOT, "scripts/cluster_config.py"), d, "1",
           "--prefix", bf.PREFIX, "--etcd", etcd_url, "--cluster", f"bco-{tag}-{os.getpid()}",
           "--lease-ms", "1000", "--mode", "sync", "--min-replicas", "1",
           "--probe-ms", "50", "--waiting-ms", "500", "--backlog-mb", "256"]
    if not completions:
        cmd.append("--no-completions")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    nodes = [bf.Node(d, k, a.huge) for k in range(2)]
    out = {}
    try:
        nodes[0].start()
        nodes[1].start()
        bf.wait_for(lambda: nodes[0].status().get("role") == "master", 15, "node0 master")
        bf.wait_for(lambda: any(p["state"] == "online" for p in nodes[0].status().get("peers", {}).values()),
                    30, "replica online")
        rc, _ = bf.pktgen(nodes[0], ["--keys", str(a.keys), "--key-size", "8", "--value-size", "8", "--load",
                                     "--get", "0", "--put", "1", "--duration", "0.1", "--warmup", "0"], "fill")
        if rc != 0:
            raise RuntimeError(f"{tag}: fill failed")
        for w, mix in WORKLOADS.items():
            off0 = nodes[0].status().get("offset", 0)
            rc, r = bf.pktgen(nodes[0], ["--keys", str(a.keys), "--key-size", "8", "--value-size", "8",
                                         "--ops-per-packet", "32", "--warmup", "0.3",
                                         "--duration", str(a.duration)] + mix, f"{w}")
            if rc != 0 or r is None:
                raise RuntimeError(f"{tag} {w}: pktgen failed (rc {rc})")
            off1 = nodes[0].status().get("offset", 0)
            ops = r["ops"]
            out[w] = {"mops": r["throughput_mops"], "p99_us": r["latency_us"]["p99"],
                      "errors": r["errors"], "stream_bytes": off1 - off0,
                      "stream_bytes_per_op": round((off1 - off0) / ops, 2) if ops else None}
            log(f"  {tag} {w}: {r['throughput_mops']:.3f} Mops, p99 {r['latency_us']['p99']:.1f} us, "
                f"{out[w]['stream_bytes_per_op']} stream B/op")
        return out
    finally:
        for n in nodes:
            n.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--no-huge", dest="huge", action="store_false")
    ap.add_argument("--quick", action="store_true", help="1 rep, 1 s runs")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/completions.json"))
    a = ap.parse_args()
    if a.quick:
        a.reps, a.duration = 1, 1.0
    tmp = tempfile.mkdtemp(prefix="kvd-bench-completions-")
    runs = []
    t0 = time.monotonic()
    try:
        with bf.etcd(tmp) as url, benchlib.dpdk_lock():
            for rep in range(a.reps):
                on = one_cluster(tmp, a, url, f"on{rep}", True)
                off = one_cluster(tmp, a, url, f"off{rep}", False)
                runs.append({"with": on, "without": off})
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def med(f):
        v = [f(r) for r in runs]
        v = [x for x in v if x is not None]
        return round(statistics.median(v), 4) if v else None

    res = {
        "what": "completion records (exactly-once across a failover) on vs off: 2 etcd-managed nodes on memif, "
                "mode sync, min_replicas 1; pktgen closed loop on the master, 8 B keys and values, "
                "32 ops per packet; all three processes share the 2 cores",
        "command": "scripts/bench_completions.py" + (" --quick" if a.quick else ""),
        "reps": a.reps,
        "duration_s": a.duration,
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
    }
    for w in WORKLOADS:
        res[w] = {
            "mops_with": med(lambda r: r["with"][w]["mops"]),
            "mops_without": med(lambda r: r["without"][w]["mops"]),
            "mops_ratio": med(lambda r: r["with"][w]["mops"] / r["without"][w]["mops"]),
            "p99_us_with": med(lambda r: r["with"][w]["p99_us"]),
            "p99_us_without": med(lambda r: r["without"][w]["p99_us"]),
            "p99_ratio": med(lambda r: r["with"][w]["p99_us"] / r["without"][w]["p99_us"]),
            "stream_bytes_per_op_with": med(lambda r: r["with"][w]["stream_bytes_per_op"]),
            "stream_bytes_per_op_without": med(lambda r: r["without"][w]["stream_bytes_per_op"]),
        }
        log(f"completions {w}: throughput ratio {res[w]['mops_ratio']}, p99 ratio {res[w]['p99_ratio']}, "
            f"stream B/op {res[w]['stream_bytes_per_op_with']} vs {res[w]['stream_bytes_per_op_without']}")
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"-> {a.out}")


if __name__ == "__main__":
    main()
