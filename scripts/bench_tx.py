#!/usr/bin/env python3
"""Transaction latency (docs/TRANSACTIONS.md), Orca's comparison on this appliance:
`pktgen --tx R,W` (the whole transaction in one request, executed by the worker) vs
`pktgen --tx R,W --tx-baseline` (HyperLoop-style: every op its own round trip, keys
locked and unlocked by the client with CAS on lock words), one transaction at a time.

Cases: (R, W) = (0, 1) and (4, 2) with 64 B values, (0, 1) with 1024 B values, at MTU
1500; (4, 2) with 1024 B values on clusters of their own at MTU 9000 (`server.mtu`: its
request, four 1 KiB EQUALS conditions and two 1 KiB PUTs, takes ~6 KiB).
Three set-ups: one node (no replication), and chains of 2 (Orca's) and 3 nodes
(`replication.topology: chain`, `mode: sync`: the head answers a write once the tail
applied it; the middle relays the stream). Every run ends with the bank invariant checked by pktgen (total unchanged,
every balance as the committed transactions imply). Medians of --reps runs; ratios
design/baseline inside each rep. Writes results/tx.json and results/tx.png (the
latency comparison in the style of Orca's figure).

Usage: scripts/bench_tx.py [--reps 3] [--duration 2] [--no-huge] [--quick]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log, med  # noqa: E402
import replcluster as rc  # noqa: E402
import benchlib  # noqa: E402

CASES = [(0, 1, 64), (4, 2, 64), (0, 1, 1024)]
# Cases needing jumbo frames, run on clusters at this MTU.
JUMBO_MTU = 9000
JUMBO_CASES = [(4, 2, 1024)]
# Set-ups with replication: a chain of 2 (Orca's) and of 3 nodes.
CHAINS = {"chain_2": 2, "chain_3": 3}
# Transfers in flight at once in the throughput run.
CONCURRENT = 8


class Chain(rc.Cluster):
    """A chain of `length` nodes (topology chain, mode sync, min_replicas 1): the head
    answers a write once the tail acknowledged it."""

    def __init__(self, tmp, tag, length, huge, mtu=1500):
        super().__init__(tmp, tag, length - 1, huge, topology="chain", mtu=mtu)
        for k in range(self.n):
            c = json.load(open(self.cfg(k)))
            c["replication"]["mode"] = "sync"
            c["replication"]["min_replicas"] = 1
            json.dump(c, open(self.cfg(k), "w"), indent=2)


def read_only(c, a, slow):
    """Pure-read transactions (every one of 16 accounts read) at the head and at the
    tail of a chain, idle, and at the tail while optimistic transfers run on the head
    (the head's own port then carries the transfers: one pktgen per port)."""
    acc = ["--keys", "16", "--key-size", "10", "--value-size", "64"]
    # Creates the 16 accounts (and moves some money between them).
    c.pktgen(["--tx", "0,2", "--duration", "0.2", "--warmup", "0"] + acc + slow, "ro-load")
    audit = ["--tx-audit", "--warmup", str(a.warmup), "--duration", str(a.duration)] + acc + slow
    out = {}
    for where, node in (("head", 0), ("tail", c.n - 1)):
        out[f"read_only_{where}"] = c.pktgen(audit, f"ro-{where}", node=node)
    p, wout = c.pktgen(["--tx", "0,2", "--tx-shared", "--tx-inflight", "4", "--qps", "4",
                        "--duration", str(a.duration + 1.0), "--warmup", "0"] + acc + slow,
                       "ro-writer", wait=False)
    time.sleep(0.5)
    out["read_only_tail_under_writes"] = c.pktgen(audit, "ro-tail-busy", node=c.n - 1)
    if p.wait(120) != 0:
        raise RuntimeError("ro-writer: pktgen failed")
    for k, r in out.items():
        if r.get("wrong_totals", 1) != 0 or r.get("audits", 0) == 0:
            raise RuntimeError(f"{k}: audit failed: {r}")
    return out


def one_setup(tmp, a, setup, rep, mtu=1500):
    """Every case, design and baseline, on one fresh cluster; {case: {mode: result}}.
    At a jumbo `mtu` only the JUMBO_CASES."""
    jumbo = mtu > 1500
    for attempt in range(2):
        tag = f"{setup}-{'j' if jumbo else ''}r{rep}"
        c = (Chain(tmp, tag, CHAINS[setup], a.huge, mtu=mtu) if setup in CHAINS
             else rc.Cluster(tmp, tag, 0, a.huge, standalone=True, mtu=mtu))
        try:
            c.up()
            # On a chain a pipelined load's answers wait for the tail (~0.1 ms each,
            # queued): a retransmission timeout of at least 5 ms keeps the client from
            # resending (and, 8 times over, giving up on) requests merely waiting.
            # memif loses nothing, so the timeout never fires in the measured loops.
            slow = ["--rto-min-us", "5000", "--timeout-ms", "400"] if setup in CHAINS else []
            if setup in CHAINS:
                c.wait_chain_online()
            out = {}
            for r, w, v in (JUMBO_CASES if jumbo else CASES):
                for mode in ("design", "baseline"):
                    # 1 KiB values: fewer accounts, so that they fit the node's memory
                    # beside what the 64 B cases left in other slab classes.
                    keys = a.keys if v <= 64 else min(a.keys, 10000)
                    args = ["--tx", f"{r},{w}", "--keys", str(keys), "--value-size", str(v),
                            "--warmup", str(a.warmup), "--duration", str(a.duration),
                            "--seed", str(rep + 1)] + slow
                    if mode == "baseline":
                        args.append("--tx-baseline")
                    res = c.pktgen(args, f"tx-{r}-{w}-{v}-{mode}")
                    if not res.get("invariant_holds"):
                        raise RuntimeError(f"{tag} {r},{w} {v} B {mode}: invariant broken: {res}")
                    out.setdefault(f"{r}_{w}_{v}", {})[mode] = res
            if jumbo:
                return out
            # Throughput with transfers in flight at once (8, on the 4 QPs of the config),
            # optimistic (read, then commit if unchanged) on shared accounts.
            res = c.pktgen(["--tx", "4,2", "--tx-shared", "--tx-inflight", str(CONCURRENT),
                            "--qps", "4", "--keys", str(a.keys), "--value-size", "64",
                            # Accounts of their own (longer keys): the runs above moved
                            # money between theirs and reset some.
                            "--key-size", "12",
                            "--warmup", str(a.warmup), "--duration", str(a.duration),
                            "--seed", str(rep + 1)] + slow, "tx-shared")
            if not res.get("invariant_holds"):
                raise RuntimeError(f"{tag} shared: invariant broken: {res}")
            out["concurrent_4_2_64"] = res
            if setup in CHAINS:
                out.update(read_only(c, a, slow))
            return out
        except RuntimeError as e:
            if attempt == 1:
                raise
            log(f"  {tag}: failed, retrying: {str(e).splitlines()[0]}")
        finally:
            c.down()


def parse_args(out):
    """The transaction benchmarks' options; results go to results/`out` by default."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--warmup", type=float, default=0.3)
    ap.add_argument("--keys", type=int, default=50000)
    ap.add_argument("--no-huge", dest="huge", action="store_false")
    ap.add_argument("--quick", action="store_true", help="1 rep, short runs (smoke check)")
    ap.add_argument("--quiet-below", type=float, default=0.25)
    ap.add_argument("--quiet-wait", type=float, default=240)
    ap.add_argument("--out", default=os.path.join(ROOT, "results", out))
    a = ap.parse_args()
    if a.quick:
        a.reps, a.duration, a.warmup, a.keys, a.quiet_wait = 1, 0.5, 0.1, 10000, 0
    return a


def main():
    a = parse_args("tx.json")
    tmp = tempfile.mkdtemp(prefix="kvd-bench-tx-")
    setups = ["one_node", "chain_2", "chain_3"]
    runs = {s: [] for s in setups}
    t0 = time.monotonic()
    for rep in range(a.reps):
        rc.wait_quiet(a)
        with benchlib.dpdk_lock():
            for s in setups:
                runs[s].append(one_setup(tmp, a, s, rep))
                runs[s][-1].update(one_setup(tmp, a, s, rep, mtu=JUMBO_MTU))
        for s in setups:
            x = runs[s][-1]["4_2_64"]
            log(f"  rep {rep} {s}: (4,2) 64 B avg design {x['design']['avg_us']:.2f} us, "
                f"baseline {x['baseline']['avg_us']:.2f} us")
    res = {
        "what": "one transaction at a time from one client (pktgen --tx), design = one request "
                "executed whole by the worker, baseline = one round trip per op with client CAS "
                "locks (HyperLoop-style); 50K accounts (Orca: 100K KVs; the cluster configs give a node 128 MB)",
        "reps": a.reps,
        "hugepages": a.huge,
        "placement": "pktgen CPU 0, the head's worker CPU 1 (2-core host); every other node's "
                     "two lcores share the same two cores (a chain of 3: 7 polling threads on 2 "
                     "cores, each yielding after 64 idle polls)",
        "accounts_1024": "min(--keys, 10000) with 1024 B values (memory of a node)",
        "mtu": {"4_2_1024": JUMBO_MTU, "others": 1500},
        "mtu_note": "(4, 2) with 1024 B values needs a ~6 KiB request (four 1 KiB EQUALS "
                    "conditions and two 1 KiB PUTs): run on clusters of their own with "
                    "server.mtu 9000 (memif buffers and mbufs of 9 KiB)",
        "setups": {},
        "wall_s": None,
        "runs": runs,
    }
    for s in setups:
        d = {}
        for r, w, v in CASES + JUMBO_CASES:
            k = f"{r}_{w}_{v}"
            cell = {}
            for mode in ("design", "baseline"):
                for f in ("avg_us", "p50_us", "p99_us", "tx_per_s", "round_trips_per_tx"):
                    cell[f"{mode}_{f}"] = med([x[k][mode][f] for x in runs[s]], digits=3)
            cell["avg_vs_baseline"] = med([x[k]["design"]["avg_us"] / x[k]["baseline"]["avg_us"]
                                           for x in runs[s]], digits=3)
            cell["p99_vs_baseline"] = med([x[k]["design"]["p99_us"] / x[k]["baseline"]["p99_us"]
                                           for x in runs[s]], digits=3)
            d[k] = cell
        d["concurrent_4_2_64"] = {
            f: med([x["concurrent_4_2_64"][f] for x in runs[s]], digits=3)
            for f in ("transfers_per_s", "avg_us", "p99_us", "committed", "conflicts")
        }
        d["concurrent_4_2_64"]["inflight"] = CONCURRENT
        if s in CHAINS:
            d["read_only_16_accounts"] = {
                where: {f: med([x[f"read_only_{where}"][f] for x in runs[s]], digits=3)
                        for f in ("avg_us", "p50_us", "p99_us", "tx_per_s")}
                for where in ("head", "tail", "tail_under_writes")
            }
        d["concurrent_vs_one_at_a_time_tx_per_s"] = round(
            d["concurrent_4_2_64"]["transfers_per_s"] / d["4_2_64"]["design_tx_per_s"], 2)
        res["setups"][s] = d
    # Headline: a chain of 2, Orca's set-up; the others beside it.
    for s in setups:
        pre = "" if s == "chain_2" else f"{s}_"
        for case in ("4_2_64", "0_1_64", "0_1_1024", "4_2_1024"):
            for f in ("avg", "p99"):
                res[f"{pre}{f}_vs_baseline_{case}"] = res["setups"][s][case][f"{f}_vs_baseline"]
    res["goal"] = ("avg and p99 design/baseline for (4,2) <= 0.33 on a chain of 2 "
                   "(Orca: 63-67 % lower)")
    res["wall_s"] = round(time.monotonic() - t0, 1)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    # Orca-style latency figure next to the JSON (pktgen's tx_plot binary).
    subprocess.run([os.path.join(benchlib.BIN, "tx_plot"), a.out, a.out.replace(".json", ".png")],
                   check=False)
    log(f"tx: chain of 2, (4,2) 64 B design/baseline avg {res['avg_vs_baseline_4_2_64']} p99 "
        f"{res['p99_vs_baseline_4_2_64']}; (4,2) 1 KiB avg {res['avg_vs_baseline_4_2_1024']} p99 "
        f"{res['p99_vs_baseline_4_2_1024']}; (0,1) avg {res['avg_vs_baseline_0_1_64']}; chain of 3 "
        f"(4,2) avg {res['chain_3_avg_vs_baseline_4_2_64']}; one node (4,2) avg "
        f"{res['one_node_avg_vs_baseline_4_2_64']} -> {os.path.relpath(a.out, ROOT)}")


if __name__ == "__main__":
    main()
