#!/usr/bin/env python3
"""Idle lcores (issue 31; called by scripts/bench.sh idle): what each `server.idle`
policy costs an idle dataplane and a loaded one, on this host, in one run.

Dataplane: configs/memif.json (1 worker on core 1); pktgen on core 0. For each rep
and each policy (poll, yield, adaptive, adaptive_timed — `adaptive` with
`--no-rx-intr`, so its sleeps end only on their timeout instead of on memif's ring
signal — and adaptive_short — `adaptive` whose sleeps a packet ends back off to 1 ms,
as the timed ones do, instead of `server.idle_sleep_max_rx_us`; alternating, so drift
hits all alike):

* idle_cpu_share: the dataplane started and left idle; its CPU time (utime + stime
  from /proc) over 4 s of wall time, as a share of one core;
* saturation: closed loop, 95 % GET / 5 % PUT uniform over 100 000 loaded keys,
  32 ops per packet, window 64: kv_mops;
* half load: open loop at half of that rep's `poll` saturation: p50, p99 and the
  share of ops answered within 10 us;
* latencies are pktgen's raw ones (the calibration's least round trip would hold
  a sleeping server's wake-up);
* sparse load: open loop at 0.001 Mops (a packet every ~1 ms at 1 op per packet,
  longer than `idle_quiet_us`): the server idles between requests, so an adaptive
  one sleeps and its wake-up is in every latency (wake_us
  p50 and p99 are the sparse latencies of `adaptive` minus those of `poll`;
  wake_us_timed_* and wake_us_short_* the same for `adaptive_timed` and
  `adaptive_short`).

Medians over --reps; ratios adaptive/poll taken within a rep. Writes results/idle.json.
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, Dataplane, log, pktgen  # noqa: E402

# Variant name -> the dataplane's idle flags.
POLICIES = {"poll": ["--idle", "poll"], "yield": ["--idle", "yield"],
            "adaptive": ["--idle", "adaptive"],
            "adaptive_timed": ["--idle", "adaptive", "--no-rx-intr"],
            "adaptive_short": ["--idle", "adaptive", "--idle-sleep-max-rx-us", "1000"]}
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of every thread of `pid`, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def idle_share(dp, secs):
    time.sleep(1.0)  # past start-up
    c0, t0 = cpu_seconds(dp.proc.pid), time.monotonic()
    time.sleep(secs)
    c1, t1 = cpu_seconds(dp.proc.pid), time.monotonic()
    return (c1 - c0) / (t1 - t0)


def one_policy(tmp, rep, policy, common, half_rate):
    dp = Dataplane(tmp, f"idle-{policy}-{rep}", POLICIES[policy])
    try:
        out = {"idle_cpu_share": idle_share(dp, 4.0)}
        pktgen(dp, tmp, common + ["--load", "--get", "1", "--put", "0", "--duration", "0.3",
                                  "--ops-per-packet", "32"])
        sat = pktgen(dp, tmp, common + ["--get", "0.95", "--put", "0.05", "--ops-per-packet", "32",
                                        "--seed", str(rep + 1)])
        out["kv_mops"] = sat["throughput_mops"]
        rate = half_rate if half_rate else sat["throughput_mops"] / 2
        half = pktgen(dp, tmp, common + ["--get", "0.95", "--put", "0.05", "--ops-per-packet", "32",
                                         "--rate", f"{rate:.4f}", "--seed", str(rep + 11)])
        # Raw latencies: the calibration (the least round trip) of a sleeping server
        # holds its wake-up, so calibrated figures would hide it.
        out["half_load"] = {"rate_mops": rate, "p50_us": half["latency_raw_us"]["p50"],
                            "p99_us": half["latency_raw_us"]["p99"],
                            "share_within_10us": half.get("share_within_10us", 0.0)}
        sparse = pktgen(dp, tmp, common + ["--get", "1", "--put", "0", "--ops-per-packet", "1",
                                           "--rate", "0.001", "--seed", str(rep + 21)])
        out["sparse"] = {"p50_us": sparse["latency_raw_us"]["p50"], "p99_us": sparse["latency_raw_us"]["p99"]}
        return out
    finally:
        dp.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/idle.json"))
    a = ap.parse_args()
    common = ["--keys", "100000", "--key-size", "8", "--value-size", "2", "--warmup", "0.3",
              "--duration", str(a.duration), "--calibrate", "200", "--window", "64"]
    tmp = tempfile.mkdtemp(prefix="kvd-bench-idle-")
    reps = []
    for rep in range(a.reps):
        got = {}
        for policy in POLICIES:
            half = got["poll"]["kv_mops"] / 2 if "poll" in got else None
            got[policy] = one_policy(tmp, rep, policy, common, half)
            g = got[policy]
            log(f"rep {rep} {policy}: idle cpu {g['idle_cpu_share']:.3f} core, {g['kv_mops']:.2f} Mops, "
                f"half load p50 {g['half_load']['p50_us']:.1f} us, sparse p50 {g['sparse']['p50_us']:.1f} us "
                f"p99 {g['sparse']['p99_us']:.1f} us")
        reps.append(got)
    med = statistics.median
    res = {"reps": reps, "policies": {}}
    for p in POLICIES:
        res["policies"][p] = {
            "idle_cpu_share": med(r[p]["idle_cpu_share"] for r in reps),
            "kv_mops": med(r[p]["kv_mops"] for r in reps),
            "half_load_p50_us": med(r[p]["half_load"]["p50_us"] for r in reps),
            "half_load_share_within_10us": med(r[p]["half_load"]["share_within_10us"] for r in reps),
            "sparse_p50_us": med(r[p]["sparse"]["p50_us"] for r in reps),
            "sparse_p99_us": med(r[p]["sparse"]["p99_us"] for r in reps),
        }
    res["kv_mops_adaptive_vs_poll"] = med(r["adaptive"]["kv_mops"] / r["poll"]["kv_mops"] for r in reps)
    res["wake_us_p50"] = med(r["adaptive"]["sparse"]["p50_us"] - r["poll"]["sparse"]["p50_us"] for r in reps)
    res["wake_us_p99"] = med(r["adaptive"]["sparse"]["p99_us"] - r["poll"]["sparse"]["p99_us"] for r in reps)
    for q in ("p50", "p99"):
        for variant, name in (("adaptive_timed", "timed"), ("adaptive_short", "short")):
            res[f"wake_us_{name}_{q}"] = med(r[variant]["sparse"][f"{q}_us"] - r["poll"]["sparse"][f"{q}_us"]
                                             for r in reps)
    # What the longer sleeps a packet ends save at rest, and cost: within each rep.
    res["idle_cpu_adaptive_vs_short"] = med(r["adaptive"]["idle_cpu_share"] / r["adaptive_short"]["idle_cpu_share"]
                                            for r in reps)
    res["targets"] = {"idle_cpu_share_adaptive": "<= 0.02", "kv_mops_adaptive_vs_poll": ">= 0.97",
                      "half_load_p50_us_adaptive": "<= 5", "half_load_share_within_10us_adaptive": ">= 0.95"}
    res["host"] = {"cpus": os.cpu_count()}
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(json.dumps({k: v for k, v in res.items() if k != "reps"}, indent=1))


if __name__ == "__main__":
    main()
