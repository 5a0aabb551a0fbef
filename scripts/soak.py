#!/usr/bin/env python3
"""The soak (called by scripts/soak.sh): one dataplane (memif, slab merges every
500 ms by its daemon) serving verify-mode pktgen rounds back to back for MINUTES,
with everything moving at once:

* rounds cycle through the op mixes: GET/PUT/DELETE with values of 1..1000 B (every
  slab class), and a Zipf mix of GET/PUT/atomics/vector updates/reduces on 8..64 B
  values; each round loads its keys, runs verified, and reads every key back;
* client churn: every third round admits a new QP through `ctlplane clients add`,
  runs a verified round on it alone, and revokes it (`ctlplane clients remove`);
* the live fuzzer (pktgen --fuzz) sends hostile frames at a low rate during the
  GET/PUT/DELETE rounds, on the config's QPs the round's workload does not use (its
  guard never lets a frame reach a workload QP or a workload key);
* every 10 s: the dataplane's RSS and the host's used hugepages.

At the end: `ctlplane stats --check` (the accounting invariant) on the quiet
dataplane, then it stops; the mbufs in use must be back at the start level. Writes a
JSON summary (default results/soak.json) and exits 1 on any mismatch, error,
invariant failure or leak.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BIN, CFG, ROOT, Dataplane, log, pktgen  # noqa: E402

CTL = os.path.join(BIN, "ctlplane")
PREFIX = "kvd-bench-soak"
CHURN_FIRST_QPN = 1000
CHURN_QPS = 64


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return None


def hugepages_used_mb():
    info = {}
    with open("/proc/meminfo") as f:
        for line in f:
            k, v = line.split(":", 1)
            info[k] = v.split()
    total, free = int(info["HugePages_Total"][0]), int(info["HugePages_Free"][0])
    size_kb = int(info["Hugepagesize"][0])
    return (total - free) * size_kb / 1024


def ctl(*args, check=True):
    r = subprocess.run([CTL, *args, "--file-prefix", PREFIX], capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"ctlplane {' '.join(args)}: {r.stdout}{r.stderr}")
    return r


def pktgen_has(flag):
    r = subprocess.run([os.path.join(BIN, "pktgen"), "--help"], capture_output=True, text=True)
    return flag in r.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--round-seconds", type=float, default=15.0)
    ap.add_argument("--fuzz-frames", type=int, default=20000, help="fuzz frames per KV round")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/soak.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvd-soak-")
    # pktgen's config: the dataplane's 4 clients plus CHURN_QPS more, admitted one at a
    # time during the soak (the dataplane starts with the 4 only).
    pg_cfg = os.path.join(tmp, "soak-clients.json")
    subprocess.run([CTL, "clients", "gen", "--count", str(CHURN_QPS), "--first-qpn", str(CHURN_FIRST_QPN),
                    "--append", "--config", CFG, "--out", pg_cfg], check=True)
    churn = json.load(open(pg_cfg))["clients"][4:]
    fuzz = pktgen_has("--fuzz ")
    stats_json = os.path.join(tmp, "dp.json")
    dp = Dataplane(tmp, "soak", ["--merge-every-ms", "500", "--stats-json", stats_json])
    dp.cfg = pg_cfg  # pktgen reads the extended client list
    base_mbufs = int(open(dp.log).read().split("mbufs in use ")[1].split(")")[0])
    samples, stop = [], threading.Event()

    def sampler():
        t0 = time.time()
        while not stop.is_set():
            samples.append({"t_s": round(time.time() - t0, 1), "rss_mb": rss_mb(dp.proc.pid),
                            "hugepages_used_mb": hugepages_used_mb()})
            stop.wait(10)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    common = ["--warmup", "0.2", "--duration", str(a.round_seconds), "--calibrate", "20",
              "--timeout-ms", "3000", "--verify", "--load", "--window", "16"]
    mixes = [
        ("kv-all-classes", ["--keys", "20000", "--value-size", "1-1000", "--get", "0.5", "--put", "0.35",
                            "--ops-per-packet", "8", "--qps", "2"]),
        ("atomics-vectors", ["--keys", "2000", "--value-size", "8-64", "--dist", "zipf", "--get", "0.3",
                             "--put", "0.15", "--atomic", "0.2", "--vector", "0.2", "--reduce", "0.1",
                             "--ops-per-packet", "16", "--qps", "4"]),
    ]
    totals = {"ops": 0, "mismatches": 0, "timeouts": 0, "errors": 0, "readback_failures": 0}
    rounds, churn_cycles, failures = [], 0, []
    end = time.time() + a.minutes * 60
    i = 0
    try:
        while time.time() < end:
            kind, args = mixes[i % len(mixes)]
            if i % 3 == 2:
                c = churn[churn_cycles % len(churn)]
                ctl("clients", "add", "--qpn", str(c["qpn"]), "--rkey", str(c["rkey"]))
                kind = f"churn-qpn-{c['qpn']}"
                args = ["--keys", "2000", "--value-size", "1-500", "--get", "0.5", "--put", "0.4",
                        "--ops-per-packet", "8", "--qp-first", str(4 + churn_cycles % len(churn)), "--qps", "1"]
            elif fuzz and kind == "kv-all-classes":
                args = args + ["--fuzz", str(a.fuzz_frames), "--fuzz-seed", str(i + 1),
                               "--fuzz-per-flush", "2"]
            r = pktgen(dp, tmp, common + args + ["--seed", str(i + 1)], timeout=a.round_seconds * 4 + 120)
            rb = r.get("readback") or {}
            rbf = rb.get("mismatches", 0) + rb.get("errors", 0) + rb.get("timeouts", 0)
            for k in ("ops", "mismatches", "timeouts", "errors"):
                totals[k] += r[k]
            totals["readback_failures"] += rbf
            rounds.append({"round": i, "kind": kind, "ops": r["ops"], "mops": r["throughput_mops"],
                           "mismatches": r["mismatches"], "timeouts": r["timeouts"], "errors": r["errors"],
                           "readback_failures": rbf, "fuzz": r.get("fuzz")})
            log(f"  soak round {i} {kind}: {r['ops']} ops {r['throughput_mops']:.2f} Mops, "
                f"{r['mismatches']} mismatches, {r['timeouts']} timeouts, {r['errors']} errors, "
                f"read-back failures {rbf}")
            if r["mismatches"] or r["errors"] or rbf:
                failures.append(f"round {i} {kind}: verify failures")
            if kind.startswith("churn"):
                ctl("clients", "remove", "--qpn", str(churn[churn_cycles % len(churn)]["qpn"]))
                churn_cycles += 1
            i += 1
        check = ctl("stats", "--check", check=False) if "--check" in ctl("stats", "--help", check=False).stdout \
            else None
    finally:
        stop.set()
        th.join()
        dp.stop()
    if check is not None and check.returncode != 0:
        failures.append("ctlplane stats --check failed:\n" + check.stdout + check.stderr)
    final = json.load(open(stats_json))
    leak = final["mbufs_in_use"] - base_mbufs
    if leak != 0:
        failures.append(f"mbuf leak: {final['mbufs_in_use']} in use at exit, {base_mbufs} at start")
    steady = [s["rss_mb"] for s in samples[1:] if s["rss_mb"] is not None]
    out = {
        "command": "scripts/soak.py " + " ".join(os.path.relpath(x, ROOT) if os.path.isabs(x) else x
                                                 for x in sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "soak_minutes": a.minutes,
        "rounds": len(rounds),
        "soak_ops": totals["ops"],
        "verify_mismatches": totals["mismatches"],
        "errors": totals["errors"],
        "timeouts": totals["timeouts"],
        "readback_failures": totals["readback_failures"],
        "churn_cycles": churn_cycles,
        "live_fuzzer": fuzz,
        "accounting_check": None if check is None else check.returncode == 0,
        "mbuf_leak": leak,
        "soak_rss_growth_mb": round(steady[-1] - steady[0], 2) if len(steady) >= 2 else None,
        "memory_samples": samples,
        "slab_merges": final.get("slab_merges"),
        "drops": {k: v for k, v in final.items() if k.startswith("drop_")},
        "per_round": rounds,
        "failures": failures,
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    log(f"soak: {len(rounds)} rounds, {totals['ops']} ops, {totals['mismatches']} mismatches, "
        f"{churn_cycles} churn cycles, mbuf leak {leak}, RSS growth {out['soak_rss_growth_mb']} MB -> {a.out}")
    for f in failures:
        log("FAIL: " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
