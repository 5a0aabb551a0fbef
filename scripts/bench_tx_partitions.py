#!/usr/bin/env python3
"""Cross-partition transactions (docs/TRANSACTIONS.md): one node with 1 worker (every
transaction on one partition) against the same node with 2 workers, where the keys of
a (4, 2) transaction fall in both partitions 31 times in 32 and the worker that
received it runs it with the other worker parked.

Per rep and worker count, on one fresh standalone node (memif, no replication):
  * `pktgen --tx 4,2` one transaction at a time (design) and `--tx-baseline`
    (HyperLoop-style, one round trip per op), 64 B values;
  * `pktgen --tx 0,1` (one key: never cross-partition; what the placement costs);
  * `pktgen --tx 4,2 --tx-shared --tx-inflight 8`: optimistic transfers, 8 in flight;
  * the dataplane's `tx_cross_partition` counter, to report the share of transactions
    that were coordinated over both partitions.
Medians of --reps; ratios inside each rep. Placement (2-core host): 1 worker: its
lcore on CPU 1, pktgen on CPU 0; 2 workers: CPUs 0 and 1, pktgen shares CPU 0 with
worker 0 (each yields after 64 idle polls). Writes results/tx_partitions.json.

Usage: scripts/bench_tx_partitions.py [--reps 3] [--duration 2] [--no-huge] [--quick]
"""
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log  # noqa: E402
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402
from bench_tx import med, parse_args  # noqa: E402

CONCURRENT = 8


def one_node(tmp, a, workers, rep):
    """Every run on one fresh node of `workers` workers; {name: result}."""
    for attempt in range(2):
        # Each attempt in its own directory: a failed one's logs stay for a look.
        tag = f"w{workers}-r{rep}-a{attempt}"
        c = rc.Cluster(tmp, tag, 0, a.huge, standalone=True)
        cfg = json.load(open(c.cfg(0)))
        cfg["dataplane"]["lcores"] = "1" if workers == 1 else "0,1"
        json.dump(cfg, open(c.cfg(0), "w"), indent=2)
        # memif loses nothing: retransmissions only follow a stall of this shared
        # host; a patient transport rides one out instead of giving up (50 ms).
        common = ["--timeout-ms", "2000", "--rto-min-us", "1000",
                  "--partitions", str(workers), "--qps", "4", "--value-size", "64",
                  "--warmup", str(a.warmup), "--duration", str(a.duration),
                  "--seed", str(rep + 1)]
        try:
            c.up()
            out = {}
            for mode in ("design", "baseline"):
                args = ["--tx", "4,2", "--keys", str(a.keys)] + common
                if mode == "baseline":
                    args.append("--tx-baseline")
                res = c.pktgen(args, f"tx-{mode}")
                if not res.get("invariant_holds") or res.get("aborted", 1) != 0:
                    raise RuntimeError(f"{tag} {mode}: {res}")
                out[mode] = res
            # A (0, 1) transaction has one key: never cross-partition, the placement's
            # cost alone.
            res = c.pktgen(["--tx", "0,1", "--keys", str(a.keys)] + common, "tx-0-1")
            if not res.get("invariant_holds"):
                raise RuntimeError(f"{tag} (0,1): {res}")
            out["single_key"] = res
            res = c.pktgen(["--tx", "4,2", "--tx-shared", "--tx-inflight", str(CONCURRENT),
                            "--keys", str(a.keys), "--key-size", "12"] + common, "tx-shared")
            if not res.get("invariant_holds"):
                raise RuntimeError(f"{tag} shared: invariant broken: {res}")
            out["concurrent"] = res
            c.down()
            st = json.load(open(c.stats_path(0)))
            out["dataplane"] = {k: st.get(k) for k in
                                ("workers", "tx_committed", "tx_aborted", "tx_cross_partition")}
            return out
        except RuntimeError as e:
            if attempt == 1:
                raise
            log(f"  {tag}: failed, retrying (logs in {c.dir}): {str(e)[-2000:]}")
        finally:
            c.down()


def main():
    a = parse_args("tx_partitions.json")
    tmp = tempfile.mkdtemp(prefix="kvd-bench-txp-")
    runs = {1: [], 2: []}
    t0 = time.monotonic()
    for rep in range(a.reps):
        rc.wait_quiet(a)
        with benchlib.dpdk_lock():
            for w in (1, 2):
                runs[w].append(one_node(tmp, a, w, rep))
        log(f"  rep {rep}: (4,2) avg 1 worker {runs[1][-1]['design']['avg_us']:.2f} us, "
            f"2 workers {runs[2][-1]['design']['avg_us']:.2f} us; 8 in flight "
            f"{runs[1][-1]['concurrent']['transfers_per_s']:.0f} vs "
            f"{runs[2][-1]['concurrent']['transfers_per_s']:.0f} /s")
    res = {
        "what": "one node, 1 worker vs 2 workers (partitions): (4, 2) transactions with 64 B "
                "values on 50K accounts, one at a time (design and HyperLoop-style baseline), "
                "and optimistic transfers 8 in flight; with 2 workers most transactions span "
                "both partitions and run with the other worker parked",
        "reps": a.reps,
        "hugepages": a.huge,
        "placement": "1 worker: CPU 1, pktgen CPU 0; 2 workers: CPUs 0 and 1, pktgen shares "
                     "CPU 0 with worker 0 (2-core host)",
        "workers": {},
        "runs": {str(k): v for k, v in runs.items()},
    }
    for w in (1, 2):
        rs = runs[w]
        d = {}
        for mode in ("design", "baseline"):
            for f in ("avg_us", "p50_us", "p99_us", "tx_per_s"):
                d[f"{mode}_{f}"] = med([x[mode][f] for x in rs])
        for f in ("avg_us", "p99_us"):
            d[f"single_key_0_1_{f}"] = med([x["single_key"][f] for x in rs])
        d["avg_vs_baseline"] = med([x["design"]["avg_us"] / x["baseline"]["avg_us"] for x in rs])
        d["p99_vs_baseline"] = med([x["design"]["p99_us"] / x["baseline"]["p99_us"] for x in rs])
        for f in ("transfers_per_s", "avg_us", "p99_us", "committed", "conflicts"):
            d[f"concurrent_{f}"] = med([x["concurrent"][f] for x in rs])
        d["cross_partition_share"] = med([
            (x["dataplane"]["tx_cross_partition"] or 0)
            / max(1, (x["dataplane"]["tx_committed"] or 0) + (x["dataplane"]["tx_aborted"] or 0))
            for x in rs])
        res["workers"][str(w)] = d
    # Ratios inside each rep: 2 workers (mostly cross-partition) against 1.
    res["cross_vs_single_avg_4_2_64"] = med(
        [runs[2][i]["design"]["avg_us"] / runs[1][i]["design"]["avg_us"] for i in range(a.reps)])
    res["cross_vs_single_p99_4_2_64"] = med(
        [runs[2][i]["design"]["p99_us"] / runs[1][i]["design"]["p99_us"] for i in range(a.reps)])
    res["single_key_2_vs_1_workers_avg_0_1_64"] = med(
        [runs[2][i]["single_key"]["avg_us"] / runs[1][i]["single_key"]["avg_us"]
         for i in range(a.reps)])
    res["concurrent_2_vs_1_workers_tx_per_s"] = med(
        [runs[2][i]["concurrent"]["transfers_per_s"] / runs[1][i]["concurrent"]["transfers_per_s"]
         for i in range(a.reps)])
    res["avg_vs_baseline_4_2_64_two_partitions"] = res["workers"]["2"]["avg_vs_baseline"]
    res["p99_vs_baseline_4_2_64_two_partitions"] = res["workers"]["2"]["p99_vs_baseline"]
    res["wall_s"] = round(time.monotonic() - t0, 1)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"tx partitions: (4,2) avg 2 workers / 1 worker {res['cross_vs_single_avg_4_2_64']}, "
        f"design/baseline on 2 partitions avg {res['avg_vs_baseline_4_2_64_two_partitions']} p99 "
        f"{res['p99_vs_baseline_4_2_64_two_partitions']}; 8 in flight 2/1 workers "
        f"{res['concurrent_2_vs_1_workers_tx_per_s']} -> {os.path.relpath(a.out, ROOT)}")


if __name__ == "__main__":
    main()
