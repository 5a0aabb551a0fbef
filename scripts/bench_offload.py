#!/usr/bin/env python3
"""Offload vs inline replication (called by scripts/bench.sh replication; issue 14,
SKV Fig. 7 and Fig. 11 in software).

SKV's point: when the master's request-serving CPU also replicates (sends every write
to every replica), its throughput and tail latency suffer; moving replication to a
dedicated core (SKV: the SmartNIC's; here: the replication lcore) takes that cost off
the request path. Both variants run here with the same processes and placement as
scripts/bench_replication.py (pktgen on CPU 0, the master's worker on CPU 1, its
replication lcore on CPU 0, replicas' lcores on both):

  * offload: the normal master; the worker pushes post-images into its log ring, the
    replication lcore builds the stream and ships it;
  * inline: `dataplane --repl-inline`: worker 0 runs the same replication loop itself
    between its bursts (drain, backlog, segments to every replica, acknowledgements,
    probes); the replication lcore idles.

Per repetition, back to back under the DPDK lock: standalone (0 replicas), inline with
3 replicas, offload with 3 replicas, and master + 1 replica in `mode: sync`
(min_replicas 1), PUT-only at saturation (closed loop). Reported:

  * inline_fanout_cost (SKV Fig. 7): inline 3 replicas vs 0 — throughput and p99 ratios;
  * offload_vs_inline_mops, offload_vs_inline_p99 (SKV Fig. 11: +14 % throughput,
    −21 % p99) at saturation with 3 replicas; on this 2-core host the replication
    lcore has no core of its own (it shares CPU 0 with pktgen and the replicas), which
    the figures include;
  * put_sync1_vs_none (and its p99 ratio): sync replication's cost — each answer waits
    until the replica has the write in memory;
  * worker_cycles_per_put_offload_vs_inline: the master worker's busy TSC cycles (loop
    iterations that did work, counter `busy_cycles`) per PUT it executed — the cost
    taken off the request path, independent of where the other lcores run.

Medians of --reps repetitions (ratios taken inside each repetition). Every run checks
that each replica ends with the master's contents. Writes results/offload.json and
copies its headline fields into results/replication.json.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log, med  # noqa: E402
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402


class InlineCluster(rc.Cluster):
    """A cluster whose master runs with --repl-inline."""

    def start(self, k, flags=()):
        super().start(k, list(flags) + (["--repl-inline"] if k == 0 else []))


class SyncCluster(rc.Cluster):
    """A cluster in `mode: sync` with min_replicas 1."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        for k in range(self.n):
            c = json.load(open(self.cfg(k)))
            c["replication"]["mode"] = "sync"
            c["replication"]["min_replicas"] = 1
            json.dump(c, open(self.cfg(k), "w"), indent=2)


def run(tmp, a, tag, replicas, inline, rep, sync=False):
    cls = InlineCluster if inline else SyncCluster if sync else rc.Cluster
    c, out, _ = rc.fresh_run(
        lambda: cls(tmp, f"{tag}-r{rep}", replicas, a.huge, standalone=(replicas == 0)),
        a, tag, rep, replicas)
    m = json.load(open(c.stats_path(0)))
    out["worker_busy_cycles"] = m.get("busy_cycles")
    out["worker_puts"] = m.get("puts")
    out["cycles_per_put"] = m["busy_cycles"] / m["puts"] if m.get("puts") else None
    if replicas and not out["replicas_equal_master"]:
        raise RuntimeError(f"{tag}: a replica differs from the master")
    return out


def ratio(num, den, f):
    v = [n[f] / d[f] for n, d in zip(num, den) if n.get(f) and d.get(f)]
    return round(statistics.median(v), 3) if v else None


def main():
    ap = argparse.ArgumentParser()
    rc.add_run_args(ap)
    ap.add_argument("--replicas", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 rep, short runs (smoke check)")
    ap.add_argument("--quiet-below", type=float, default=0.25)
    ap.add_argument("--quiet-wait", type=float, default=240)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/offload.json"))
    ap.add_argument("--merge-into", default=os.path.join(ROOT, "results/replication.json"),
                    help="also write the headline fields into this JSON ('' = no)")
    a = ap.parse_args()
    a.pg_extra = []
    if a.quick:
        a.reps, a.duration, a.warmup, a.quiet_wait = 1, 0.5, 0.2, 0
    tmp = tempfile.mkdtemp(prefix="kvd-bench-offload-")
    k = a.replicas
    runs = {"none": [], "inline": [], "offload": [], "sync1": []}
    t0 = time.monotonic()
    for rep in range(a.reps):
        rc.wait_quiet(a)
        with benchlib.dpdk_lock():
            runs["none"].append(run(tmp, a, "none", 0, False, rep))
            runs["inline"].append(run(tmp, a, "inline", k, True, rep))
            runs["offload"].append(run(tmp, a, "offload", k, False, rep))
            runs["sync1"].append(run(tmp, a, "sync1", 1, False, rep, sync=True))
        log(f"  rep {rep}: PUT Mops none {runs['none'][-1]['mops']:.3f}, inline {runs['inline'][-1]['mops']:.3f}, "
            f"offload {runs['offload'][-1]['mops']:.3f}, 1 sync replica {runs['sync1'][-1]['mops']:.3f}; "
            f"worker cycles/PUT inline "
            f"{runs['inline'][-1]['cycles_per_put']:.0f}, offload {runs['offload'][-1]['cycles_per_put']:.0f}")
    res = {
        "what": f"PUT-only at saturation, 8 B keys and values, master + {k} async replicas on memif, "
                "replication inline on the worker (--repl-inline) vs on the replication lcore",
        "reps": a.reps,
        "replicas": k,
        "hugepages": a.huge,
        "placement": "pktgen CPU 0; master worker CPU 1, its replication lcore CPU 0; replicas' "
                     "worker CPU 0 and replication lcore CPU 1 (2-core host: nothing has a core of its own)",
        "inline_fanout_cost": {
            "put_mops_0": med(runs["none"], "mops", digits=3),
            f"put_mops_{k}": med(runs["inline"], "mops", digits=3),
            "p99_us_0": med(runs["none"], "p99_us", digits=3),
            f"p99_us_{k}": med(runs["inline"], "p99_us", digits=3),
            "mops_ratio": ratio(runs["inline"], runs["none"], "mops"),
            "p99_ratio": ratio(runs["inline"], runs["none"], "p99_us"),
        },
        "offload_vs_inline_mops": ratio(runs["offload"], runs["inline"], "mops"),
        "offload_vs_inline_p99": ratio(runs["offload"], runs["inline"], "p99_us"),
        "worker_cycles_per_put_offload_vs_inline": ratio(runs["offload"], runs["inline"], "cycles_per_put"),
        "put_sync1_vs_none": ratio(runs["sync1"], runs["none"], "mops"),
        "p99_put_sync1_vs_none": ratio(runs["sync1"], runs["none"], "p99_us"),
        "put_sync1_mops": med(runs["sync1"], "mops", digits=3),
        "worker_cycles_per_put": {"none": med(runs["none"], "cycles_per_put", digits=3),
                                  "inline": med(runs["inline"], "cycles_per_put", digits=3),
                                  "offload": med(runs["offload"], "cycles_per_put", digits=3)},
        "goals": {"worker_cycles_per_put_offload_vs_inline": "<= 0.8",
                  "skv_fig11": "offload +14% throughput, -21% p99 vs host-CPU replication"},
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"offload: inline fan-out cost {res['inline_fanout_cost']['mops_ratio']} (Mops, {k} vs 0 replicas), "
        f"offload/inline Mops {res['offload_vs_inline_mops']} p99 {res['offload_vs_inline_p99']}, "
        f"worker cycles/PUT offload/inline {res['worker_cycles_per_put_offload_vs_inline']} -> {a.out}")
    if a.merge_into and os.path.exists(a.merge_into):
        j = json.load(open(a.merge_into))
        for f in ("inline_fanout_cost", "offload_vs_inline_mops", "offload_vs_inline_p99",
                  "worker_cycles_per_put_offload_vs_inline", "put_sync1_vs_none", "p99_put_sync1_vs_none"):
            j[f] = res[f]
            if isinstance(j.get("not_measured"), dict):
                j["not_measured"].pop(f, None)
        j["offload_source"] = os.path.relpath(a.out, ROOT)
        with open(a.merge_into, "w") as f:
            json.dump(j, f, indent=2)


if __name__ == "__main__":
    main()
