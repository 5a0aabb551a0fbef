"""YCSB on the running appliance through pktgen's `--ycsb` presets (pktgen/src/ycsb.rs):
Figs. 16-17 (read-intensive B and write-intensive A, uniform and Zipf 0.99, over KV
sizes: throughput in closed loop, latency in open loop at half of that throughput)
and all core workloads A-F at one KV size (E is refused: no scan in the protocol).
Dataplane on core 1 (one worker), pktgen on core 0, memif.
"""
import statistics
import subprocess

import benchlib  # noqa: E402  (scripts/, on the path via common)
from common import bars, line, log, spread, stall_probe, stalls_summary
from paper import claim

STORE_MIB = 256  # configs/memif.json engine.mem_mb


class Session:
    """A dataplane loaded once with `keys` KVs, for many pktgen runs; a run that fails
    (the memif PMD can crash when a peer disconnects mid-burst, see benchlib) restarts
    the dataplane, reloads and retries once."""

    def __init__(self, ctx, name, keys, value):
        self.ctx, self.name, self.keys, self.value = ctx, name, keys, value
        self.dp = None

    def start(self):
        self.dp = benchlib.Dataplane(self.ctx.tmp, self.name, [])
        r = benchlib.pktgen(self.dp, self.ctx.tmp, self.common(32) + [
            "--load", "--get", "1", "--put", "0", "--warmup", "0", "--duration", "0.2"])
        log(f"  loaded {r['load']['keys_loaded']} keys of {8 + self.value} B")

    def common(self, opp):
        return ["--keys", str(self.keys), "--key-size", "8", "--value-size", str(self.value),
                "--ops-per-packet", str(opp), "--window", "64", "--calibrate", "100"]

    def run(self, opp, args):
        for attempt in range(2):
            if self.dp is None:
                self.start()
            try:
                r = benchlib.pktgen(self.dp, self.ctx.tmp, self.common(opp) + args)
                if r["mismatches"] or r["errors"]:
                    raise RuntimeError(f"{r['mismatches']} mismatches, {r['errors']} errors")
                return r
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                self.stop()
                if attempt == 1:
                    raise
                log(f"  run failed, restarting the dataplane: {str(e).splitlines()[0][:300]}")
        raise AssertionError("unreachable")

    def stop(self):
        if self.dp is not None:
            self.dp.stop()
            self.dp = None


def timing(ctx):
    return ["--warmup", str(ctx.pick(0.2, 0.5)), "--duration", str(ctx.pick(0.4, 1.0))]


def probe(ctx):
    if "ycsb_stalls" not in ctx.shared:
        ctx.shared["ycsb_stalls"] = stall_probe(ctx, ctx.pick(1, 3))
        log(f"  stall probe: {stalls_summary(ctx.shared['ycsb_stalls'])}")
    return ctx.shared["ycsb_stalls"]


def med(runs, f):
    return statistics.median(f(r) for r in runs)


def fig16_17(ctx):
    stalls = probe(ctx)
    reps = ctx.pick(1, 3)
    sizes = ctx.pick([10], [10, 62, 254])
    mixes = [("b", "read-intensive B (95 % GET)"), ("a", "write-intensive A (50 % GET)")]
    dists = [("uniform", ["--dist", "uniform"]), ("zipf", [])]  # zipf: the preset's own
    res = {}
    for kv in sizes:
        keys = min(ctx.pick(100_000, 1_000_000), int(0.4 * (STORE_MIB << 20) / kv))
        opp = min(32, 1400 // (kv + 8))
        s = Session(ctx, f"ycsb{kv}", keys, kv - 8)
        try:
            for w, _ in mixes:
                for dn, dflag in dists:
                    closed = [s.run(opp, ["--ycsb", w] + dflag + timing(ctx) + ["--seed", str(i + 1)]) for i in range(reps)]
                    peak = med(closed, lambda r: r["throughput_mops"])
                    half = [s.run(opp, ["--ycsb", w] + dflag + timing(ctx) + ["--rate", f"{peak / 2:.4f}",
                                                                              "--seed", str(i + 11)]) for i in range(reps)]
                    p = {"keys": keys, "ops_per_packet": opp, "mops": peak,
                         "mops_runs": [r["throughput_mops"] for r in closed],
                         "closed_p50_us": med(closed, lambda r: r["latency_us"]["p50"]),
                         "closed_p99_us": med(closed, lambda r: r["latency_us"]["p99"]),
                         "half_load_mops": med(half, lambda r: r["throughput_mops"]),
                         # Raw send-to-receive time: the calibrated value (minus the
                         # loop-back floor, floored at 0) reads 0 when the floor was
                         # measured while the idle dataplane backed off (slower than
                         # under load), so it is kept beside, not as the headline.
                         "half_p50_us": med(half, lambda r: r["latency_raw_us"]["p50"]),
                         "half_p99_us": med(half, lambda r: r["latency_raw_us"]["p99"]),
                         "half_p999_us": med(half, lambda r: r["latency_raw_us"]["p999"]),
                         "half_p50_calibrated_us": med(half, lambda r: r["latency_us"]["p50"]),
                         "half_p99_calibrated_us": med(half, lambda r: r["latency_us"]["p99"]),
                         "half_share_within_10us": med(half, lambda r: r.get("share_within_10us", 0.0)),
                         "calibration_us": med(closed, lambda r: r["calibration_us"])}
                    res[(w, dn, kv)] = p
                    log(f"  {kv} B ycsb {w} {dn}: {peak:.2f} Mops; half load p50 {p['half_p50_us']:.1f} us "
                        f"p99 {p['half_p99_us']:.1f} us")
        finally:
            s.stop()
    key = lambda w, dn, kv: f"{w}_{dn}_{kv}b"
    data = {key(*k): v for k, v in res.items()}
    names = {(w, dn): f"{label.split(' (')[0]} {dn}" for w, label in mixes for dn, _ in dists}
    lo, hi = sizes[0], sizes[-1]
    cfg = {"store_mib": STORE_MIB, "key_bytes": 8, "kv_bytes": sizes, "reps": reps, "window_packets": 64,
           "mixes": {w: label for w, label in mixes}, "zipf_theta": 0.99,
           "ops_per_packet": {kv: min(32, 1400 // (kv + 8)) for kv in sizes},
           "latency": "open loop at half of the closed-loop throughput; send-to-receive (raw); "
                      "half_p*_calibrated_us subtract the loop-back floor (calibration_us)"}

    def chart(field, title, ylabel, y_log=False):
        # Error bars: the spread of the closed-loop reps (throughput only).
        err = lambda k: spread(res[k]["mops_runs"]) if field == "mops" else None
        if len(sizes) == 1:
            ks = [(w, dn, sizes[0]) for w, _ in mixes for dn, _ in dists]
            return bars(title, ylabel, [names[(w, dn)] for w, dn, _ in ks],
                        [(f"{sizes[0]} B KVs", [res[k][field] for k in ks], [err(k) for k in ks])],
                        y_log=y_log)
        return line(title, "KV size (bytes)", ylabel,
                    [(names[(w, dn)], [(kv, res[(w, dn, kv)][field]) for kv in sizes],
                      [err((w, dn, kv)) for kv in sizes]) for w, _ in mixes for dn, _ in dists],
                    x_log2=True, y_log=y_log)

    fig16 = {
        "title": "Fig. 16: YCSB throughput, read-intensive and write-intensive, uniform and long tail",
        "paper": claim("fig16"), "config": cfg,
        "numbers": {f"mops_{key(w, dn, kv)}": res[(w, dn, kv)]["mops"] for w, _ in mixes for dn, _ in dists
                    for kv in {lo, hi}},
        "numbers_doc": {f"mops_{key(w, dn, kv)}": f"YCSB {w.upper()} {dn}, {kv} B KVs, closed loop, Mops"
                        for w, _ in mixes for dn, _ in dists for kv in {lo, hi}},
        "differs": "One worker core in software vs the FPGA NIC's pipeline; 2 vCPUs shared with the load "
                   "generator; larger KVs are bound by the memif link (fewer ops per packet).",
        "platform_stalls": stalls, "data": data,
        "plot": {"title": "Fig. 16 analog: YCSB throughput (1 worker lcore, memif)",
                 "panels": [chart("mops", "Throughput (closed loop)", "Mops")]},
    }
    fig17 = {
        "title": "Fig. 17: YCSB latency",
        "paper": claim("fig17"), "config": cfg,
        "numbers": {f"{p}_us_{key(w, dn, lo)}": res[(w, dn, lo)][f"half_{p}_us"] for w, _ in mixes
                    for dn, _ in dists for p in ("p50", "p99")},
        "numbers_doc": {f"{p}_us_{key(w, dn, lo)}": f"YCSB {w.upper()} {dn}, {lo} B KVs, open loop at half load, {p}, us"
                        for w, _ in mixes for dn, _ in dists for p in ("p50", "p99")},
        "differs": "Latency is pktgen's send-to-receive time over memif on a shared VM (the loop-back "
                   "floor, calibration_us, included); the p99 follows the platform's stalls (platform_stalls), not the KV path.",
        "platform_stalls": stalls, "data": data,
        "plot": {"title": "Fig. 17 analog: YCSB latency at half load (open loop, send to receive)",
                 "panels": [chart("half_p50_us", "p50 at half load", "us", y_log=True),
                            chart("half_p99_us", "p99 at half load", "us", y_log=True)]},
    }
    return {"fig16": fig16, "fig17": fig17}


def refusal_of_e(ctx):
    """pktgen --ycsb e must refuse (exit 2, before EAL start-up) and say why."""
    r = subprocess.run([ctx.exe("pktgen"), "--config", benchlib.CFG, "--ycsb", "e"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=60)
    msg = r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""
    if r.returncode != 2 or "no scan" not in msg:
        raise RuntimeError(f"pktgen --ycsb e: expected a refusal (exit 2), got {r.returncode}: {r.stdout}")
    return {"refused": True, "exit_code": r.returncode, "message": msg}


def ycsb_all(ctx):
    stalls = probe(ctx)
    e = refusal_of_e(ctx)
    reps = ctx.pick(1, 3)
    value = 8  # F's read-modify-write is the fetch-add on one 8-byte value
    keys = ctx.pick(100_000, 1_000_000)
    ws = ["a", "b", "c", "d", "f"]
    res = {}
    s = Session(ctx, "ycsb-all", keys, value)
    try:
        for w in ws:
            runs = [s.run(32, ["--ycsb", w] + timing(ctx) + ["--seed", str(i + 1)]) for i in range(reps)]
            res[w] = {"mops": med(runs, lambda r: r["throughput_mops"]), "mops_runs": [r["throughput_mops"] for r in runs],
                      "p50_us": med(runs, lambda r: r["latency_us"]["p50"]),
                      "p99_us": med(runs, lambda r: r["latency_us"]["p99"]),
                      "workload": runs[0]["workload"]}
            log(f"  ycsb {w}: {res[w]['mops']:.2f} Mops, p99 {res[w]['p99_us']:.1f} us (closed loop)")
    finally:
        s.stop()
    return {
        "title": "YCSB core workloads A-F (16 B KVs, 1 worker lcore)",
        "paper": claim("ycsb"),
        "config": {"key_bytes": 8, "value_bytes": value, "keys": keys, "ops_per_packet": 32, "window_packets": 64,
                   "reps": reps, "presets": "pktgen --ycsb (docs/BENCHMARKS.md): A 50/50 GET/PUT zipf, B 95/5 zipf, "
                                             "C 100 % GET zipf, D 95/5 latest, F 50 % GET + 50 % fetch-add zipf",
                   "latency": "closed loop (window 64 packets): queueing included"},
        "numbers": {f"mops_{w}": res[w]["mops"] for w in ws},
        "numbers_doc": {f"mops_{w}": f"YCSB {w.upper()}, closed loop, Mops" for w in ws},
        "differs": "D has no inserts (the key set is fixed; PUTs replace the latest-skewed keys); F's "
                   "read-modify-write is one server-side fetch-add, not a client GET + PUT; E cannot run.",
        "platform_stalls": stalls,
        "data": dict(res, e=e),
        "plot": {"title": "YCSB A-F presets (E refused: no scan operation)",
                 "panels": [bars("Throughput (closed loop)", "Mops", [w.upper() for w in ws],
                                 [("Mops (median; bars: min-max of the reps)", [res[w]["mops"] for w in ws],
                                   [spread(res[w]["mops_runs"]) for w in ws])]),
                            bars("Latency (closed loop)", "us", [w.upper() for w in ws],
                                 [("p50", [res[w]["p50_us"] for w in ws]), ("p99", [res[w]["p99_us"] for w in ws])],
                                 y_log=True)]},
    }
