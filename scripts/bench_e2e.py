#!/usr/bin/env python3
"""End-to-end benchmark (called by scripts/bench.sh e2e): dataplane + pktgen over memif.

Dataplane: 1 worker lcore (its main lcore, core 1). pktgen: 1 lcore (core 0).
10 B KVs (8 B key + 2 B value), 1 M keys loaded first. Each rep: closed loop over ops
per packet 1..32 for 95%/50% GET x uniform/Zipf 0.99, then the same batch sweep
against the dataplane in echo mode (the I/O limit, run first), so KV and echo of one
rep run seconds apart and the KV/echo ratio is taken per rep (median reported).
Then an open-loop run at 50% of the best 95%-GET-uniform rate for the tail latency.
Each point is the median of --reps runs.
Writes results/e2e.json and results/e2e.png (via the e2e_plot binary).
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
from benchlib import BIN, ROOT, BusySampler, Dataplane, log, pktgen  # noqa: E402

STALLS = os.path.join(BIN, "cpu_stalls")


def cpu_stalls(secs):
    """The platform's own stall rate: cpu_stalls spinning on every core at once (run
    while nothing else of ours runs). Gaps a bare clock-reading loop sees are the floor
    under any poll-mode loop's tail latency."""
    procs = [subprocess.Popen(["taskset", "-c", str(c), STALLS, str(secs)], stdout=subprocess.PIPE, text=True)
             for c in range(os.cpu_count() or 1)]
    return {f"cpu{c}": json.loads(p.communicate()[0]) for c, p in enumerate(procs)}


def measured(dp, tmp, args):
    """One pktgen run against `dp` with the dataplane's busy share sampled beside it
    (`server_busy_share` in the returned JSON)."""
    with BusySampler(dp.prefix) as busy:
        r = pktgen(dp, tmp, args)
    r["server_busy_share"] = busy.share()
    return r


def point(runs):
    """Median throughput, latency percentiles and the two sides' busy shares over
    repeated runs."""
    med = lambda xs: statistics.median(xs)
    opt_med = lambda xs: med([x for x in xs if x is not None]) if any(x is not None for x in xs) else None
    cost = [r["server_busy_share"] * 1e3 / r["throughput_mops"] for r in runs
            if r.get("server_busy_share") and r["throughput_mops"]]
    return {
        "server_busy_share": opt_med([r.get("server_busy_share") for r in runs]),
        "server_busy_share_runs": [r.get("server_busy_share") for r in runs],
        # ns of the server's core per op: its busy share over the op rate.
        "server_ns_per_op": med(cost) if cost else None,
        "pktgen_ns_per_op": med([r["generator"]["ns_per_op"] for r in runs]),
        "pktgen_busy_share": med([r["generator"]["busy_share"] for r in runs]),
        "throughput_mops": med([r["throughput_mops"] for r in runs]),
        "throughput_runs": [r["throughput_mops"] for r in runs],
        "p50_us": med([r["latency_us"]["p50"] for r in runs]),
        "p99_us": med([r["latency_us"]["p99"] for r in runs]),
        "p999_us": med([r["latency_us"]["p999"] for r in runs]),
        "p99_us_runs": [r["latency_us"]["p99"] for r in runs],
        "share_within_10us": med([r.get("share_within_10us", 0.0) for r in runs]),
        "p50_raw_us": med([r["latency_raw_us"]["p50"] for r in runs]),
        "p99_raw_us": med([r["latency_raw_us"]["p99"] for r in runs]),
        "calibration_us": med([r["calibration_us"] for r in runs]),
        "timeouts": sum(r["timeouts"] for r in runs),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--keys", type=int, default=1_000_000)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--batches", default="1,2,4,8,16,32")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/e2e.json"))
    a = ap.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    common = ["--keys", str(a.keys), "--key-size", "8", "--value-size", "2",
              "--warmup", "0.5", "--duration", str(a.duration), "--calibrate", "300",
              "--window", str(a.window)]
    workloads = [("get95_uniform", 0.95, "uniform"), ("get95_zipf", 0.95, "zipf"),
                 ("get50_uniform", 0.50, "uniform"), ("get50_zipf", 0.50, "zipf")]
    series = {w[0]: {} for w in workloads}
    tmp = tempfile.mkdtemp(prefix="kvd-bench-")
    log("bench e2e: platform stalls (cpu_stalls on every core, 5 s)")
    stalls = cpu_stalls(5)
    for c, s in stalls.items():
        log(f"  {c}: stalled {100 * s['stalled_share']:.2f}% of the time, longest gap {s['longest_gap_us']:.0f} us, {s['counts']}")

    def load(dp):
        log(f"bench e2e: loading {a.keys} keys of 10 B")
        r = pktgen(dp, tmp, common + ["--load", "--get", "1", "--put", "0", "--duration", "0.5",
                                      "--ops-per-packet", "32"])
        log(f"  loaded {r['load']['keys_loaded']} keys")

    # Echo and KV alternate rep by rep (echo first, then a fresh, freshly loaded KV
    # dataplane), so a shift of the machine's state between reps hits both sides of
    # the ratio; the ratio is taken per rep.
    # The generator's A/B at 32 ops per packet: the same run with requests built op by
    # op (--no-templates, the previous builder) right after the templated one.
    echo, ab = {}, {"kv": {"templates": [], "op_by_op": []}, "echo": {"templates": [], "op_by_op": []}}
    for rep in range(a.reps):
        dp = Dataplane(tmp, "echo", ["--echo"])
        try:
            for b in batches:
                args = common + ["--echo", "--get", "0.95", "--put", "0.05", "--ops-per-packet", str(b),
                                 "--seed", str(rep + 1)]
                r = measured(dp, tmp, args)
                echo.setdefault(b, []).append(r)
                log(f"  rep {rep} echo b={b}: {r['throughput_mops']:.2f} Mops, pktgen "
                    f"{r['generator']['ns_per_op']:.1f} ns/op busy {r['generator']['busy_share']:.2f}, "
                    f"server busy {r['server_busy_share']}")
                if b == 32:
                    ab["echo"]["templates"].append(r)
                    ab["echo"]["op_by_op"].append(measured(dp, tmp, args + ["--no-templates"]))
        finally:
            dp.stop()
        dp = Dataplane(tmp, "kv", [])
        try:
            load(dp)
            for name, get, dist in workloads:
                for b in batches:
                    args = common + ["--get", str(get), "--put", str(round(1 - get, 3)), "--dist", dist,
                                     "--ops-per-packet", str(b), "--seed", str(rep + 1)]
                    r = measured(dp, tmp, args)
                    series[name].setdefault(b, []).append(r)
                    log(f"  rep {rep} {name} b={b}: {r['throughput_mops']:.2f} Mops "
                        f"p50 {r['latency_raw_us']['p50']:.1f} us p99 {r['latency_raw_us']['p99']:.1f} us (raw), "
                        f"server busy {r['server_busy_share']}, pktgen {r['generator']['ns_per_op']:.1f} ns/op")
                    if name == "get95_uniform" and b == 32:
                        ab["kv"]["templates"].append(r)
                        ab["kv"]["op_by_op"].append(measured(dp, tmp, args + ["--no-templates"]))
        finally:
            dp.stop()
    kv = {name: {b: point(rs) for b, rs in s.items()} for name, s in series.items()}
    best_b = max(batches, key=lambda b: kv["get95_uniform"][b]["throughput_mops"])
    peak = kv["get95_uniform"][best_b]["throughput_mops"]
    ratio_runs = [k["throughput_mops"] / e["throughput_mops"]
                  for k, e in zip(series["get95_uniform"][best_b], echo[best_b]) if e["throughput_mops"]]
    half = []
    dp = Dataplane(tmp, "kv", [])
    try:
        load(dp)
        for rep in range(a.reps):
            r = measured(dp, tmp, common + ["--get", "0.95", "--put", "0.05", "--ops-per-packet", str(best_b),
                                          "--rate", f"{peak / 2:.4f}", "--seed", str(rep + 11)])
            half.append(r)
            log(f"  rep {rep} half load {peak / 2:.2f} Mops b={best_b}: got {r['throughput_mops']:.2f} Mops "
                f"p99 {r['latency_us']['p99']:.2f} us calibrated, {r['latency_raw_us']['p99']:.2f} us raw, "
                f"{100 * r.get('share_within_10us', 0.0):.2f}% within 10 us")
    finally:
        dp.stop()

    echo = {b: point(rs) for b, rs in echo.items()}
    ab = {mode: {how: point(rs) for how, rs in sides.items()} for mode, sides in ab.items()}
    hp = point(half)
    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except StopIteration:
        pass
    out = {
        "command": "scripts/bench.sh e2e " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release()},
        "config": {"topology": "memif pair, one host", "config_file": "configs/memif.json",
                   "dataplane_lcores": 1, "pktgen_lcores": 1, "kv_bytes": 10, "key_size": 8,
                   "value_size": 2, "keys": a.keys, "window_packets": a.window, "reps": a.reps,
                   "duration_s": a.duration, "batches": batches,
                   "latency_note": "latency_us: raw minus the loop-back calibration (min RTT of empty batches); *_raw_us: as measured"},
        "kv_mops": peak,
        "kv_best_batch": best_b,
        "echo_mops": echo[best_b]["throughput_mops"],
        "echo_best_mops": max(p["throughput_mops"] for p in echo.values()),
        # Median of the per-rep ratios (KV and echo of one rep ran back to back).
        "kv_to_echo_ratio": statistics.median(ratio_runs) if ratio_runs else None,
        "kv_to_echo_ratio_runs": ratio_runs,
        "server_busy_share": kv["get95_uniform"][best_b]["server_busy_share"],
        "pktgen_ns_per_op": kv["get95_uniform"][best_b]["pktgen_ns_per_op"],
        # What each op costs the server's core in KV and in echo mode at the best batch:
        # echo leaves the server mostly idle (the generator is the limit there), so the
        # ratio of these costs, not of the Mops, compares the server's work.
        "server_ns_per_op_kv": kv["get95_uniform"][best_b]["server_ns_per_op"],
        "server_ns_per_op_echo": echo[best_b]["server_ns_per_op"],
        "pktgen_busy_share": kv["get95_uniform"][best_b]["pktgen_busy_share"],
        # Same dataplane, back to back, 32 ops per packet: requests from templates vs
        # built op by op (the previous builder, --no-templates).
        "generator_ab_32": {mode: {how: {k: p[k] for k in ("throughput_mops", "pktgen_ns_per_op",
                                                          "pktgen_busy_share", "server_busy_share")}
                                   for how, p in sides.items()} for mode, sides in ab.items()},
        "half_load_target_mops": peak / 2,
        "half_load_achieved_mops": hp["throughput_mops"],
        "p99_us_at_half_load": hp["p99_us"],
        "p99_raw_us_at_half_load": hp["p99_raw_us"],
        "p50_us_at_half_load": hp["p50_us"],
        "share_within_10us_at_half_load": hp["share_within_10us"],
        "platform_stalls": stalls,
        "kv": {name: {str(b): p for b, p in s.items()} for name, s in kv.items()},
        "echo": {str(b): p for b, p in echo.items()},
        "half_load": hp,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    log(f"bench e2e: kv {peak:.2f} Mops (b={best_b}), echo {out['echo_mops']:.2f} Mops, "
        f"ratio {out['kv_to_echo_ratio']:.2f}, server busy {out['server_busy_share']}, "
        f"pktgen {out['pktgen_ns_per_op']:.1f} ns/op, p99 at half load {hp['p99_us']:.2f} us "
        f"({hp['p99_raw_us']:.2f} us raw) -> {a.out}")
    plot = os.path.join(BIN, "e2e_plot")
    subprocess.run([plot, a.out, a.out.replace(".json", ".png")], check=False)


if __name__ == "__main__":
    main()
