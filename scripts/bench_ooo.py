#!/usr/bin/env python3
"""Reservation-station benchmark (called by scripts/bench.sh ooo): dataplane + pktgen
over memif, the station out of order (`--ooo true`) vs stall mode (`--ooo false`).

1. Atomics (KV-Direct Fig. 13a): fetch-add (UPDATE_S2S, +1 on an 8-byte value) on
   1, 2, 4 ... 1024 keys and on 100 000 uniformly chosen keys, station on and off.
2. Long tail (Fig. 13b): Zipf 0.99 over 100 000 keys of 10 B, PUT share 0 ... 100 %
   (the rest GETs), station on and off, with `--station-kv true` (chunks of plain ops
   with a repeated key go through the station; by default they run in the engine's
   batch); the share of operations served by data forwarding comes from the
   dataplane's counters (forwarded / ops of the run). The same mix with the default
   routing is recorded for comparison (`zipf_default_routing`).
3. Vector updates (Table 2) of 64 ... 1024 B vectors, in GB/s of vector data updated:
   UPDATE_S2V (+1 on every 8-byte element) vs one key per element (a fetch-add per
   element) vs the client fetching the vector and writing it back (a GET and a PUT
   per update; pktgen pipelines them without waiting for the GET, which flatters this
   alternative: a real client would wait one round trip).

Every point runs against a freshly started dataplane (so its counters belong to that
run only) and is the median of --reps runs. Dataplane on core 1, pktgen on core 0 (the
machine has 2 cores). Writes results/ooo.json.
"""
import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log, run_reps  # noqa: E402

KEY_COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
UNIFORM_KEYS = 100_000
PUT_SHARES = [0.0, 0.25, 0.5, 0.75, 1.0]
VECTOR_SIZES = [64, 128, 256, 512, 1024]
PAYLOAD = 1400  # bytes of KV payload a packet carries comfortably (1500 B MTU)


def run_point(tmp, tag, ooo, args, reps, dp_extra=()):
    """`reps` runs of pktgen `args`, each against a fresh dataplane; returns
    (median Mops, runs, dataplane stats of each run)."""
    def dp_args(sj):
        return ["--ooo", "true" if ooo else "false", "--mem-mb", "128",
                "--stats-json", sj] + list(dp_extra)
    return run_reps(tmp, tag, dp_args, args, reps)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=1.5)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/ooo.json"))
    ap.add_argument("--quick", action="store_true", help="fewer points (a smoke run)")
    a = ap.parse_args()
    key_counts = [1, 16, 1024] if a.quick else KEY_COUNTS
    put_shares = [0.0, 1.0] if a.quick else PUT_SHARES
    vector_sizes = [64, 1024] if a.quick else VECTOR_SIZES
    tmp = tempfile.mkdtemp(prefix="kvd-bench-ooo-")
    common = ["--warmup", "0.3", "--duration", str(a.duration), "--calibrate", "50",
              "--window", "32", "--qps", "4", "--key-size", "8", "--load"]

    # 1. Atomics on few keys.
    atomics = {"ooo": {}, "stall": {}}
    for mode, ooo in (("ooo", True), ("stall", False)):
        for k in key_counts + [UNIFORM_KEYS]:
            args = common + ["--keys", str(k), "--value-size", "8", "--get", "0", "--put", "0",
                             "--atomic", "1", "--ops-per-packet", "32", "--verify"]
            mops, runs, st = run_point(tmp, f"atomic-{mode}-{k}", ooo, args, a.reps)
            atomics[mode][str(k)] = {"mops": mops, "runs": [r["throughput_mops"] for r in runs],
                                     "forwarded": [s.get("station_forwarded", 0) for s in st],
                                     "stalls": [s.get("station_stalls", 0) for s in st]}
            log(f"  atomic {mode} keys={k}: {mops:.2f} Mops")

    # 2. Zipf long tail, PUT share sweep.
    zipf = {"ooo": {}, "stall": {}}
    for mode, ooo in (("ooo", True), ("stall", False)):
        for put in put_shares:
            args = common + ["--keys", str(UNIFORM_KEYS), "--value-size", "2", "--dist", "zipf",
                             "--get", str(round(1 - put, 3)), "--put", str(put),
                             "--ops-per-packet", "32"]
            # --station-kv: plain GET/PUT/DELETE chunks with repeated keys go through the
            # station too (by default the engine's batch runs them: see docs).
            mops, runs, st = run_point(tmp, f"zipf-{mode}-{put}", ooo, args, a.reps,
                                       ["--station-kv", "true"])
            # The run's ops at the dataplane: everything it executed minus the load phase.
            shares = []
            for r, s in zip(runs, st):
                ops = s.get("ops", 0) - r["load"]["keys_loaded"]
                shares.append(s.get("station_forwarded", 0) / ops if ops > 0 else 0.0)
            zipf[mode][str(put)] = {"mops": mops, "runs": [r["throughput_mops"] for r in runs],
                                    "forwarded_share": statistics.median(shares),
                                    "stalls": [s.get("station_stalls", 0) for s in st]}
            log(f"  zipf {mode} put={put}: {mops:.2f} Mops, forwarded "
                f"{statistics.median(shares) * 100:.1f}%")

    # The same long-tail mix with the default routing (station only for RMW chunks).
    zipf_default = {}
    for put in put_shares:
        args = common + ["--keys", str(UNIFORM_KEYS), "--value-size", "2", "--dist", "zipf",
                         "--get", str(round(1 - put, 3)), "--put", str(put),
                         "--ops-per-packet", "32"]
        mops, runs, _ = run_point(tmp, f"zipf-default-{put}", True, args, a.reps)
        zipf_default[str(put)] = {"mops": mops, "runs": [r["throughput_mops"] for r in runs]}
        log(f"  zipf default routing put={put}: {mops:.2f} Mops")

    # 3. Vector updates vs the alternatives.
    vectors = {}
    for size in vector_sizes:
        opp_vec = max(1, PAYLOAD // (size + 8))
        vkeys = 1000
        native = common + ["--keys", str(vkeys), "--value-size", str(size), "--get", "0",
                           "--put", "0", "--vector", "1", "--ops-per-packet", str(opp_vec),
                           "--verify"]
        per_elem = common + ["--keys", str(vkeys * size // 8), "--value-size", "8", "--get", "0",
                             "--put", "0", "--atomic", "1", "--ops-per-packet", "32"]
        fmw = common + ["--keys", str(vkeys), "--value-size", str(size), "--get", "0.5",
                        "--put", "0.5", "--ops-per-packet", str(opp_vec)]
        m_nat, _, _ = run_point(tmp, f"vec-native-{size}", True, native, a.reps)
        m_el, _, _ = run_point(tmp, f"vec-elem-{size}", True, per_elem, a.reps)
        m_fmw, _, _ = run_point(tmp, f"vec-fmw-{size}", True, fmw, a.reps)
        vectors[str(size)] = {
            "ops_per_packet": opp_vec,
            "vector_update_gbps": m_nat * 1e6 * size / 1e9,
            "per_element_keys_gbps": m_el * 1e6 * 8 / 1e9,
            "fetch_modify_write_gbps": m_fmw / 2 * 1e6 * size / 1e9,
            "vector_update_mops": m_nat, "per_element_mops": m_el, "fetch_modify_write_mops": m_fmw,
        }
        v = vectors[str(size)]
        log(f"  vector {size} B: S2V {v['vector_update_gbps']:.2f} GB/s, per-element keys "
            f"{v['per_element_keys_gbps']:.2f} GB/s, fetch+write back {v['fetch_modify_write_gbps']:.2f} GB/s")

    cpu = ""
    try:
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    except StopIteration:
        pass
    single = atomics["ooo"]["1"]["mops"]
    uniform = atomics["ooo"][str(UNIFORM_KEYS)]["mops"]
    out = {
        "command": "scripts/bench.sh ooo " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release()},
        "config": {"topology": "memif pair, one host; dataplane core 1, pktgen core 0",
                   "reps": a.reps, "duration_s": a.duration, "qps": 4, "window_packets": 32,
                   "atomic": "UPDATE_S2S fetch_add +1, 8 B values, 32 ops/packet",
                   "zipf": f"theta 0.99 over {UNIFORM_KEYS} keys of 10 B, 32 ops/packet",
                   "fetch_modify_write_note": "GET and PUT pipelined without waiting: an upper bound for that alternative"},
        "single_key_atomic_mops": single,
        "uniform_atomic_mops": uniform,
        "single_to_uniform_ratio": single / uniform if uniform else None,
        "stall_single_key_atomic_mops": atomics["stall"]["1"]["mops"],
        "stall_uniform_atomic_mops": atomics["stall"][str(UNIFORM_KEYS)]["mops"],
        "ooo_to_stall_single_key_ratio": single / atomics["stall"]["1"]["mops"],
        "forwarded_share_zipf": zipf["ooo"][str(put_shares[len(put_shares) // 2])]["forwarded_share"],
        "forwarded_share_zipf_put": put_shares[len(put_shares) // 2],
        "atomics": atomics,
        "zipf": zipf,
        "zipf_default_routing": zipf_default,
        "vectors": vectors,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    log(f"bench ooo: single-key atomics {single:.2f} Mops vs uniform {uniform:.2f} Mops "
        f"(ratio {out['single_to_uniform_ratio']:.2f}); stall single-key "
        f"{out['stall_single_key_atomic_mops']:.2f} Mops; forwarded share (zipf, "
        f"{out['forwarded_share_zipf_put']:.0%} PUT) {out['forwarded_share_zipf']:.1%} -> {a.out}")


if __name__ == "__main__":
    main()
