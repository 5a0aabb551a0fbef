"""Figures measured on the running appliance (dataplane + pktgen over the memif pair,
dataplane on core 1, pktgen on core 0): Fig. 12 (slab merge through the control
plane), Figs. 13a/b and Table 2 (scripts/bench_ooo.py), Fig. 15 (scripts/bench_e2e.py)
and the Fig. 20 analog (worker lcores, benchlib's repeated runs and the server_scale
example). The YCSB figures are in ycsb_figs.py.
"""
import json
import os
import statistics
import subprocess
import sys

from common import HERE, bars, line, log, rel, run_json, spread
from paper import claim

import benchlib  # noqa: E402  (scripts/, on the path via common)

SCRIPTS = os.path.dirname(HERE)


def suite(ctx, script, args, out, attempts=2):
    """Runs one of the existing benchmark suites (scripts/bench_*.py) with `args`,
    writing its JSON to `out`; returns (JSON, the command as recorded). A failed suite
    (e.g. a pktgen run that hung: the memif link of DPDK 22.11 can stop delivering,
    see benchlib) runs again from the start, `attempts` times in all."""
    cmd = [sys.executable, os.path.join(SCRIPTS, script)] + args + ["--out", out]
    for attempt in range(attempts):
        log(f"  {rel(cmd[1])} {' '.join(args)}" + (f" (attempt {attempt + 1})" if attempt else ""))
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        tail = []
        for ln in p.stderr:  # the suite's progress, indented under the step's line
            log("    " + ln.rstrip())
            tail = (tail + [ln])[-40:]
        rc = p.wait()
        if rc == 0 and os.path.exists(out):
            with open(out) as f:
                return json.load(f), f"python3 scripts/{script} {' '.join(args)}"
        if attempt == attempts - 1:
            raise RuntimeError(f"{script} failed ({rc}):\n{''.join(tail)}")
        log(f"  {script} failed ({rc}), running it again")
    raise AssertionError("unreachable")


def fig12(ctx):
    """Slab merge time vs free slabs: a dataplane per store size is loaded to 50 % with
    20..100 B values (28..108 B KVs, all in slabs), most keys are deleted, and the
    control plane's merge (/kvd/slab_merge) reports free blocks scanned and time."""
    sizes = ctx.pick([64], [64, 128, 256, 512])
    pts = []
    for mb in sizes:
        keys = int((mb << 20) * 0.5 / 68)
        name = f"merge{mb}"
        dp = benchlib.Dataplane(ctx.tmp, name, ["--mem-mb", str(mb)])
        try:
            # Load, then a run of DELETEs only (no GET/PUT share: the rest are DELETEs).
            r = benchlib.pktgen(dp, ctx.tmp, ["--keys", str(keys), "--key-size", "8", "--value-size", "20-100",
                                              "--load", "--get", "0", "--put", "0", "--warmup", "0",
                                              "--duration", str(ctx.pick(0.3, 0.6) * mb / 64), "--calibrate", "10",
                                              "--ops-per-packet", "32", "--window", "64"])
            rep = benchlib.telemetry(f"kvd-bench-{name}", "/kvd/slab_merge")
        finally:
            dp.stop()
        w = rep["per_worker"]["0"]
        pts.append({"store_mib": mb, "keys_loaded": r["load"]["keys_loaded"], "deletes": r["ops"],
                    "free_blocks_scanned": w["scanned"], "buddy_pairs_merged": w["merged_total"],
                    "elapsed_us": w["elapsed_us"], "ns_per_free_block": 1e3 * w["elapsed_us"] / max(1, w["scanned"])})
        log(f"  {mb} MiB: {w['scanned']} free blocks, {w['merged_total']} pairs merged in {w['elapsed_us']} us "
            f"({pts[-1]['ns_per_free_block']:.0f} ns/block)")
    big = pts[-1]
    ns = statistics.median(p["ns_per_free_block"] for p in pts)
    return {
        "title": "Fig. 12: slab merge time",
        "paper": claim("fig12"),
        "config": {"store_mib": sizes, "fill": "50 % with 20..100 B values, 8 B keys", "workload_after_load": "DELETEs only, uniform",
                   "merge": "ctlplane slab merge (telemetry /kvd/slab_merge): workers flush their slab caches, the merge "
                            "(radix sort of free addresses, buddy pairs) runs on the control thread", "workers": 1},
        "numbers": {"ns_per_free_block": ns, "free_blocks_scanned_largest": big["free_blocks_scanned"],
                    "merge_ms_largest": big["elapsed_us"] / 1e3,
                    "extrapolated_s_for_4g_blocks": ns * 4e9 / 1e9},
        "numbers_doc": {"ns_per_free_block": "merge time per free slab block scanned (median over store sizes)",
                        "free_blocks_scanned_largest": "free blocks in the largest store",
                        "merge_ms_largest": "merge time of the largest store, ms",
                        "extrapolated_s_for_4g_blocks": "ns per block x 4 G blocks (the paper's size), s"},
        "differs": "Scaled to what fits in this VM's hugepages (a store of at most 512 MiB, not the paper's "
                   "64 GiB): the 4 G figure is extrapolated linearly from ns per block; one core, as the paper.",
        "data": {"points": pts},
        "plot": {"title": "Fig. 12 analog: slab merge time vs free blocks (one core)",
                 "panels": [line("Merge time", "free slab blocks (millions)", "ms",
                                 [("merge", [(p["free_blocks_scanned"] / 1e6, p["elapsed_us"] / 1e3) for p in pts])]),
                            bars("Per free block", "ns / block", [f"{p['store_mib']} MiB" for p in pts],
                                 [("ns per block", [p["ns_per_free_block"] for p in pts])])]},
    }


def fig13_table2(ctx):
    args = (["--quick"] if ctx.quick else []) + ["--reps", str(ctx.pick(1, 2)),
                                                 "--duration", str(ctx.pick(0.3, 1.0))]
    d, src = suite(ctx, "bench_ooo.py", args, os.path.join(ctx.tmp, "ooo.json"))
    at, zipf = d["atomics"], d["zipf"]
    keys = sorted((int(k) for k in at["ooo"] if int(k) < 100_000))
    uni = max(int(k) for k in at["ooo"])
    a_series = [(f"{m} ({'out of order' if m == 'ooo' else 'stall on conflict'})",
                 [(k, at[m][str(k)]["mops"]) for k in keys]) for m in ("ooo", "stall")]
    a_series += [(f"{uni} keys uniform, {m}", [(keys[0], at[m][str(uni)]["mops"]), (keys[-1], at[m][str(uni)]["mops"])])
                 for m in ("ooo", "stall")]
    shares = sorted(float(s) for s in zipf["ooo"])
    b_series = [(m, [(s, zipf[m][str(s)]["mops"]) for s in shares]) for m in ("ooo", "stall")]
    b_series.append(("default routing (engine batch)", [(s, d["zipf_default_routing"][str(s)]["mops"]) for s in shares]))
    fwd = [(s, zipf["ooo"][str(s)]["forwarded_share"] * 100) for s in shares]
    numbers = {"single_key_atomic_mops": d["single_key_atomic_mops"], "uniform_atomic_mops": d["uniform_atomic_mops"],
               "single_to_uniform_ratio": d["single_to_uniform_ratio"],
               "ooo_to_stall_single_key_ratio": d["ooo_to_stall_single_key_ratio"],
               "zipf_put100_ooo_mops": zipf["ooo"][str(shares[-1])]["mops"]}
    best_fwd = max(f for _, f in fwd)
    if best_fwd > 0:
        numbers["max_forwarded_share_pct"] = best_fwd
    cfg = dict(d["config"], source_command=src)
    fig13 = {
        "title": "Fig. 13: out-of-order execution (a) atomics vs keys, (b) long tail vs PUT share",
        "paper": claim("fig13"), "config": cfg, "numbers": numbers,
        "numbers_doc": {"single_key_atomic_mops": "fetch-adds on one key, station on, Mops",
                        "uniform_atomic_mops": f"fetch-adds on {uni} uniform keys, Mops",
                        "single_to_uniform_ratio": "single key / uniform (1 = no collapse under a hot key)",
                        "ooo_to_stall_single_key_ratio": "out of order / stall mode, single key",
                        "zipf_put100_ooo_mops": "Zipf 0.99, 100 % PUT, station on, Mops",
                        "max_forwarded_share_pct": "largest share of ops served by data forwarding, %"},
        "differs": "A stalled op waits for ~100 ns of CPU work here, for a PCIe round trip (~1 us) on the FPGA, "
                   "so stalling costs far less in software and the out-of-order gain is far smaller than 191x.",
        "data": {"atomics": at, "zipf": zipf, "zipf_default_routing": d["zipf_default_routing"]},
        "plot": {"title": "Fig. 13 analog: reservation station out of order vs stall (1 worker)",
                 "panels": [line("(a) fetch-add throughput vs keys", "distinct keys", "Mops", a_series, x_log2=True,
                                      legend="lower_left"),
                            line("(b) Zipf 0.99 throughput vs PUT share", "PUT share", "Mops", b_series,
                                      legend="lower_left"),
                            ] + ([line("(b) ops served by forwarding", "PUT share", "% of ops",
                                       [("forwarded (ooo)", [p for p in fwd if p[1] > 0])])] if best_fwd > 0 else [])},
    }
    vec = d["vectors"]
    sizes = sorted(vec, key=int)
    kinds = [("vector_update_gbps", "vector update (UPDATE_S2V)"), ("per_element_keys_gbps", "one key per element"),
             ("fetch_modify_write_gbps", "fetch to client + write back")]
    rows = [[f"{s} B"] + [round(vec[s][k], 4) for k, _ in kinds] for s in sizes]
    table2 = {
        "title": "Table 2: vector operations, GB/s of vector data updated",
        "paper": claim("table2"), "config": cfg,
        "numbers": {f"{k}_{s}b": vec[s][k] for s in (sizes[0], sizes[-1]) for k, _ in kinds},
        "numbers_doc": {f"{k}_{s}b": f"{name}, {s} B vectors, GB/s" for s in (sizes[0], sizes[-1]) for k, name in kinds},
        "differs": "Fetch + write back is pipelined by pktgen without waiting for the GET (an upper bound for "
                   "that alternative); one worker core, memif, 1400 B of KV payload per packet.",
        "tables": {"table2_gbps": {"columns": ["vector size"] + [n for _, n in kinds], "rows": rows}},
        "data": vec,
        "plot": {"title": "Table 2 analog: vector update vs alternatives (GB/s)",
                 "panels": [bars("GB/s of vector data updated", "GB/s", [f"{s} B" for s in sizes],
                                 [(n, [vec[s][k] for s in sizes]) for k, n in kinds])]},
    }
    return {"fig13": fig13, "table2": table2}


def fig15(ctx):
    batches = ctx.pick("1,4,32", "1,2,4,8,16,32")
    args = ["--reps", str(ctx.pick(1, 3)), "--duration", str(ctx.pick(0.4, 1.0)),
            "--keys", str(ctx.pick(100_000, 1_000_000)), "--batches", batches]
    d, src = suite(ctx, "bench_e2e.py", args, os.path.join(ctx.tmp, "e2e.json"))
    bs = [int(b) for b in batches.split(",")]
    kv = d["kv"]
    label = {"get95_uniform": "95 % GET, uniform", "get95_zipf": "95 % GET, Zipf 0.99",
             "get50_uniform": "50 % GET, uniform", "get50_zipf": "50 % GET, Zipf 0.99"}
    pts = lambda p, f: [(b, p[str(b)][f]) for b in bs]
    runs = lambda p, f: [spread(p[str(b)].get(f)) for b in bs]
    tput = [(label.get(w, w), pts(kv[w], "throughput_mops"), runs(kv[w], "throughput_runs")) for w in kv]
    # Echo mode bounces frames unparsed: the server idles, the generator sets the pace.
    tput.append(("echo (generator-bound)", pts(d["echo"], "throughput_mops"),
                 runs(d["echo"], "throughput_runs")))
    lat = [(f"{label[w]}: p99", pts(kv[w], "p99_raw_us")) for w in ("get95_uniform", "get50_zipf")]
    lat.append((f"{label['get95_uniform']}: p50", pts(kv["get95_uniform"], "p50_raw_us")))
    numbers = {"kv_mops_best_batch": d["kv_mops"], "echo_mops_same_batch": d["echo_mops"],
               "kv_to_echo_ratio": d["kv_to_echo_ratio"], "kv_mops_1_op_per_packet": kv["get95_uniform"]["1"]["throughput_mops"],
               "p50_us_at_half_load": d["p50_us_at_half_load"], "p99_us_at_half_load": d["p99_us_at_half_load"],
               "share_within_10us_at_half_load": d["share_within_10us_at_half_load"]}
    numbers = {k: v for k, v in numbers.items() if v}  # a share of 0 is data, not a headline
    return {
        "title": "Fig. 15: throughput and latency vs ops per packet (client-side batching)",
        "paper": claim("fig15"), "config": dict(d["config"], source_command=src), "numbers": numbers,
        "numbers_doc": {"kv_mops_best_batch": "95 % GET uniform, 10 B KVs, best batch, Mops",
                        "echo_mops_same_batch": "dataplane --echo (no KV work) at that batch, Mops: "
                                                "bound by the generator, the server mostly idle",
                        "kv_to_echo_ratio": "KV / echo (median of per-rep ratios)",
                        "kv_mops_1_op_per_packet": "95 % GET uniform, 1 op per packet, Mops",
                        "p50_us_at_half_load": "open loop at half of the peak: p50, us (calibrated)",
                        "p99_us_at_half_load": "open loop at half of the peak: p99, us (calibrated)",
                        "share_within_10us_at_half_load": "share of ops answered within 10 us at half load"},
        "differs": "Two DPDK processes on one 2-vCPU VM over memif, not 40 GbE to an FPGA: the load generator "
                   "shares the machine, and the p99 is set by the platform's stalls (platform_stalls).",
        "platform_stalls": d["platform_stalls"],
        "data": {"kv": kv, "echo": d["echo"], "half_load": d["half_load"], "kv_best_batch": d["kv_best_batch"]},
        "plot": {"title": "Fig. 15 analog: batching (memif, 1 lcore each, closed loop)",
                 "panels": [line("Throughput", "ops per packet", "Mops", tput, x_log2=True),
                            line("Latency (raw, closed loop, window 64 packets)", "ops per packet", "us", lat,
                                 x_log2=True, y_log=True)]},
    }


def fig20(ctx):
    reps = ctx.pick(1, 3)
    keys = ctx.pick(100_000, 1_000_000)
    base = ["--warmup", str(ctx.pick(0.2, 0.5)), "--duration", str(ctx.pick(0.5, 1.5)), "--calibrate", "50",
            "--window", "64", "--qps", "4", "--key-size", "8", "--value-size", "2", "--keys", str(keys),
            "--load", "--ops-per-packet", "32", "--get", "0.95", "--put", "0.05"]
    run = lambda tag, dp, pg: benchlib.run_reps(ctx.tmp, tag, lambda sj: dp + ["--stats-json", sj], pg, reps)
    m1, _, _ = run("w1", ["--mem-mb", "256"], base + ["--partitions", "1"])
    m2, _, _ = run("w2", ["--mem-mb", "256", "--lcores", "0,1"], base + ["--partitions", "2"])
    mz, runs_z, _ = run("w1-zipf", ["--mem-mb", "256"], base + ["--partitions", "1", "--dist", "zipf",
                                                                 "--count-partitions", "10"])
    hot10 = statistics.median(r["hottest_partition_ratio_k"] for r in runs_z)
    log(f"  end to end: 1 worker {m1:.2f} Mops, 2 workers {m2:.2f} Mops; Zipf hottest of 10 partitions {hot10:.2f}x")
    srv = []
    for _ in range(reps):
        out = run_json([ctx.exe("server_scale"), str(ctx.pick(1, 3)), str(keys)], timeout=600)
        srv.append(json.loads(out))
    s1 = statistics.median(r["server_mops_1_worker"] for r in srv)
    s2 = statistics.median(r["server_mops_2_workers"] for r in srv)
    log(f"  request processing alone: 1 worker {s1:.2f} Mops, 2 workers {s2:.2f} Mops")
    return {
        "title": "Fig. 20 analog: throughput vs worker lcores (partitions)",
        "paper": claim("fig20"),
        "config": {"reps": reps, "keys": keys, "kv_bytes": 10, "mix": "95 % GET uniform, 32 ops/packet",
                   "one_worker": "dataplane core 1, pktgen core 0",
                   "two_workers": "dataplane cores 0 and 1, pktgen core 0 (shared with worker 0)",
                   "server_alone": "dataplane/examples/server_scale: pre-built request frames through "
                                   "Server::handle_burst, 1 then 2 worker threads, no load generator"},
        "numbers": {"mops_1_lcore": m1, "mops_2_lcores": m2, "scaling_2_over_1": m2 / m1,
                    "server_mops_1_worker": s1, "server_mops_2_workers": s2, "server_scaling_2_over_1": s2 / s1,
                    "hottest_of_10_partitions_zipf": hot10},
        "numbers_doc": {"mops_1_lcore": "end to end, 1 worker lcore, Mops", "mops_2_lcores": "end to end, 2 worker lcores, Mops",
                        "scaling_2_over_1": "2 workers / 1 worker, end to end",
                        "server_mops_1_worker": "request processing alone, 1 worker, Mops",
                        "server_mops_2_workers": "request processing alone, 2 workers, Mops",
                        "server_scaling_2_over_1": "2 / 1 workers, request processing alone",
                        "hottest_of_10_partitions_zipf": "Zipf 0.99: ops of the hottest of 10 key partitions / mean"},
        "differs": "The machine stops at 2 cores: 2 workers at most, and with 2 the load generator shares core 0 "
                   "with worker 0, so the end-to-end point measures the core sharing as much as the scaling; the "
                   "paper scales to 10 NICs in one server.",
        "data": {"server_runs": srv, "partition_ops_10": runs_z[0].get("partition_ops_k"), "zipf_mops_1_lcore": mz},
        "plot": {"title": "Fig. 20 analog: worker lcores (this machine stops at 2 cores)",
                 "panels": [bars("Throughput", "Mops", ["1 worker", "2 workers"],
                                 [("end to end (pktgen on core 0)", [m1, m2]),
                                  ("request processing alone", [s1, s2])])]},
    }
