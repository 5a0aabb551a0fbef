#!/usr/bin/env python3
"""Replication benchmark (called by scripts/bench.sh replication; issue 14, SKV's
evaluation in software): a master dataplane with 0..3 replicas over memif links on
this host (scripts/cluster_config.py), pktgen on the master's client port.

Every measured run starts a fresh cluster (or a fresh standalone node), waits until
every replica is Online, runs pktgen closed loop at saturation, waits until the
replicas acknowledged the whole stream (lag 0), stops the nodes and checks that every
replica holds exactly the master's data (engine digest and KV count of the final
stats). Per repetition, back to back under one hold of the DPDK lock:
  * PUT-only: standalone ("none"), master + 1, 2 (and 3, see --max-replicas) async
    replicas; GET-only: none and 1 replica;
  * the value-size sweep (8 B / 64 B / 256 B / 1 KB values), PUT-only, none vs 1
    replica (the 8 B point is the PUT pair above).
Also the master role alone (one replica configured, its process not started: the
replication lcore runs and drains the log, nothing competes for the cores but it)
for PUT and GET, to tell the cost of the replication lcore from that of the replica
processes. Ratios are taken inside a repetition and their median reported; every
figure is the median of --reps repetitions. Each run records the host's CPU busy
share in the 0.5 s before it (other work on the host shares the 2 cores) and the share of
requests pktgen retransmitted (its RTO fires when a response is delayed by CPU
contention; the server replays the answer). Throughput counts only ops answered OK / NOT_FOUND
(ops refused, e.g. TryAgain when a worker's log ring is full, are listed apart).
Latency: pktgen's calibrated latency (transport floor subtracted) at saturation.

Then the replica-failure timeline (SKV Fig. 14): master + 1 replica, min_replicas 0,
PUT-only load; the master's op counter and replication status are read every 100 ms
over its telemetry socket (/kvd/stats, /kvd/replication: what `ctlplane replication
status` shows); the replica is killed (SIGKILL) at 4 s and started again (empty: it
needs a full sync) at 9 s. Marked: the kill, the detection (first sample with the
peer invalid), the restart and the return to Online.

Finally Redis 7 side by side when redis-server is installed: master + 1 replica,
redis-benchmark SET with as many connections as pktgen has QPs, pipelined as deep
as pktgen keeps ops in flight per QP, and not pipelined.

Placement (2 cores): pktgen on CPU 0; the master's worker on CPU 1 (EAL
--main-lcore 1), its replication lcore on CPU 0; each replica's worker on CPU 0 and
its replication lcore on CPU 1. The standalone node runs its single worker on CPU 1
(the master minus the replication lcore). All lcores back off when idle.

Writes results/replication.json, results/replication.png and
results/replica_fail_timeline.png (pktgen's replication_plot binary).
"""
import argparse
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import (  # noqa: E402
    BIN, ROOT, Telemetry, dpdk_lock, free_port, log, med, redis_info, redis_lag, start_redis,
    start_redis_replica, stop_all)
from replcluster import (  # noqa: E402
    Cluster, add_run_args, one_run, ops_per_packet, ratio_med, wait_quiet)

SIZES = [8, 64, 256, 1024]


def timeline(tmp, a):
    """The replica-failure timeline; returns its JSON object."""
    kill_at, back_at, total = (1.5, 3.0, 6.0) if a.quick else (4.0, 9.0, 14.0)
    c = Cluster(tmp, "timeline", 1, a.huge)
    samples, stop = [], threading.Event()

    def sampler():
        tel = Telemetry(c.prefix(0))
        nxt = time.monotonic()
        try:
            while not stop.is_set():
                t = time.monotonic()
                ops = tel("/kvd/stats")["total"]["ops"]
                st = tel("/kvd/replication")
                p = st["peers"]["0"]
                samples.append({"t": t, "ops": ops, "state": p["state"], "lag_bytes": p["lag_bytes"],
                                "offset": st["offset"], "full_syncs": p["full_syncs"]})
                nxt += 0.1
                time.sleep(max(0.0, nxt - time.monotonic()))
        finally:
            tel.close()

    try:
        c.up()
        c.wait_online()
        c.pktgen(["--keys", str(a.keys), "--key-size", "8", "--value-size", "8", "--load",
                  "--get", "0", "--put", "1", "--duration", "0.2", "--warmup", "0",
                  "--calibrate", "0"], "fill")
        c.wait_drained()
        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        pg, pg_out = c.pktgen(["--keys", str(a.keys), "--key-size", "8", "--value-size", "8",
                               "--get", "0", "--put", "1", "--warmup", "0", "--duration", str(total),
                               "--calibrate", "0", "--window", str(a.window), "--qps", str(a.qps),
                               "--ops-per-packet", str(a.ops_per_packet)], "load", wait=False)
        # t0: the first sample in which the master executed ops (pktgen's run began).
        t0 = None
        deadline = time.monotonic() + 60
        while t0 is None and time.monotonic() < deadline:
            time.sleep(0.02)
            for i in range(1, len(samples)):
                if samples[i]["ops"] > samples[i - 1]["ops"]:
                    t0 = samples[i - 1]["t"]
                    break
        if t0 is None:
            raise RuntimeError("timeline: the load never started")
        time.sleep(max(0.0, t0 + kill_at - time.monotonic()))
        t_kill = time.monotonic()
        c.procs[1].send_signal(signal.SIGKILL)
        c.procs.pop(1).wait()
        time.sleep(max(0.0, t0 + back_at - time.monotonic()))
        # The killed process left its client-port memif socket behind.
        with contextlib.suppress(OSError):
            os.remove(os.path.join(c.dir, "client1.sock"))
        t_back = time.monotonic()
        c.start(1)
        c.wait_ready(1)
        t_ready = time.monotonic()
        pg.wait(total + 60)
        # Keep sampling until the replica is Online again (or 30 s).
        end = time.monotonic() + 30
        while time.monotonic() < end and not (samples and samples[-1]["state"] == "online"
                                              and samples[-1]["t"] > t_back):
            time.sleep(0.1)
        stop.set()
        th.join(5)
        r = json.load(open(pg_out))
        c.down()
    finally:
        stop.set()
        c.down()
    pts = []
    for s0, s1 in zip(samples, samples[1:]):
        if s1["t"] < t0:
            continue
        pts.append([round(s1["t"] - t0, 3), (s1["ops"] - s0["ops"]) / (s1["t"] - s0["t"]) / 1e6,
                    s1["state"]])
    detect = next((s["t"] for s in samples if s["t"] > t_kill and s["state"] == "invalid"), None)
    online = next((s["t"] for s in samples if s["t"] > t_back and s["state"] == "online"), None)
    rel = (lambda t: None if t is None else round(t - t0, 3))
    during = [p[1] for p in pts if kill_at + 0.5 <= p[0] < back_at]
    before = [p[1] for p in pts if 1.0 <= p[0] < kill_at]
    sync = [p[1] for p in pts if back_at <= p[0] < (rel(online) or total) and p[0] < total]
    after = [p[1] for p in pts if (rel(online) or total) <= p[0] < total]
    return {
        "interval_s": 0.1,
        "source": "the master's /kvd/stats total ops and /kvd/replication peer state, read every "
                  "100 ms over its telemetry socket (the data `ctlplane replication status` shows)",
        "workload": f"PUT-only, {a.keys} keys, 8 B keys and values, {total} s, window "
                    f"{a.window}, {a.ops_per_packet} ops/packet, min_replicas 0, probe 100 ms, waiting 500 ms",
        "points": pts,
        "kill_s": rel(t_kill),
        "detected_s": rel(detect),
        "detection_ms": None if detect is None else round((detect - t_kill) * 1000),
        "restart_s": rel(t_back),
        "replica_ready_s": rel(t_ready),
        "online_s": rel(online),
        "full_sync_ms": None if online is None else round((online - t_ready) * 1000),
        "full_syncs": samples[-1]["full_syncs"] if samples else None,
        "mops_before_kill": statistics.median(before) if before else None,
        "mops_replica_down": statistics.median(during) if during else None,
        "mops_during_full_sync": statistics.median(sync) if sync else None,
        "mops_after_online": statistics.median(after) if after else None,
        "pktgen_mops": r["throughput_mops"],
        "pktgen_errors": r["errors"],
    }


def main():
    ap = argparse.ArgumentParser()
    add_run_args(ap)
    ap.add_argument("--max-replicas", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1 rep, tiny durations (smoke check)")
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--pg-extra", default="", help="more pktgen flags for the saturated runs")
    ap.add_argument("--quiet-below", type=float, default=0.25,
                    help="before each group of runs, wait for the host's CPU busy share to drop below this")
    ap.add_argument("--quiet-wait", type=float, default=240, help="longest wait for that (s; 0: never wait)")
    ap.add_argument("--idle", default="yield", choices=["poll", "yield", "adaptive"],
                    help="every node's idle policy (yield: the placement's documented one)")
    ap.add_argument("--master-lcores", default=None,
                    help="the master's dataplane.lcores (an EAL --lcores map such as 0@1,1@1: its "
                         "replication lcore on the worker's CPU 1 instead of pktgen's CPU 0)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/replication.json"))
    a = ap.parse_args()
    Cluster.IDLE = a.idle
    Cluster.MASTER_LCORES = a.master_lcores
    a.pg_extra = a.pg_extra.split()
    if a.quick:
        a.reps, a.duration, a.warmup, a.quiet_wait = 1, 0.3, 0.1, 0
    tmp = tempfile.mkdtemp(prefix="kvd-bench-repl-")
    t_start = time.monotonic()
    put = {k: [] for k in range(a.max_replicas + 1)}
    get = {0: [], 1: []}
    sweep = {v: {0: [], 1: []} for v in SIZES}
    alone = {"put": [], "get": []}
    failed = {}
    waited = []
    for rep in range(a.reps):
        waited.append(wait_quiet(a))
        with dpdk_lock():
            for k in range(a.max_replicas + 1):
                if k in failed:
                    continue
                try:
                    put[k].append(one_run(tmp, a, f"put{k}", k, 8, False, rep))
                except RuntimeError as e:
                    if k < 3:
                        raise
                    failed[k] = str(e).splitlines()[0]
                    log(f"  put with {k} replicas did not run: {failed[k]}")
                    continue
                log(f"  rep {rep} PUT {k} replicas: {put[k][-1]['mops']:.3f} Mops "
                    f"p99 {put[k][-1]['p99_us']:.1f} us")
                if k == 0:
                    alone["put"].append(one_run(tmp, a, "put-alone", 0, 8, False, rep, alone=True))
                    log(f"  rep {rep} PUT master, no replica process: {alone['put'][-1]['mops']:.3f} Mops")
            for k in (0, 1):
                get[k].append(one_run(tmp, a, f"get{k}", k, 8, True, rep))
                log(f"  rep {rep} GET {k} replicas: {get[k][-1]['mops']:.3f} Mops")
                if k == 0:
                    alone["get"].append(one_run(tmp, a, "get-alone", 0, 8, True, rep, alone=True))
                    log(f"  rep {rep} GET master, no replica process: {alone['get'][-1]['mops']:.3f} Mops")
        waited.append(wait_quiet(a))
        with dpdk_lock():
            for v in SIZES:
                for k in (0, 1):
                    sweep[v][k].append(put[k][-1] if v == 8 else one_run(tmp, a, f"v{v}-{k}", k, v, False, rep))
                log(f"  rep {rep} {v} B values: {sweep[v][0][-1]['mops']:.3f} -> "
                    f"{sweep[v][1][-1]['mops']:.3f} Mops")
    waited.append(wait_quiet(a))
    with dpdk_lock():
        tl = timeline(tmp, a)
    log(f"  timeline: kill {tl['kill_s']} s, detected {tl['detected_s']} s "
        f"({tl['detection_ms']} ms), restart {tl['restart_s']} s, online {tl['online_s']} s")
    rd = None
    if not a.no_redis and shutil.which("redis-server") and shutil.which("redis-benchmark"):
        waited.append(wait_quiet(a))
        with dpdk_lock():
            rd = redis_run(tmp, a.reps, a.quick, clients=a.qps,
                           pipeline=a.window * a.ops_per_packet // a.qps)
    a.waited = waited
    out = report(a, put, get, alone, sweep, failed, tl, rd, time.monotonic() - t_start)
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
    plot = os.path.join(BIN, "replication_plot")
    d, stem = os.path.dirname(a.out), os.path.splitext(a.out)[0]
    pngs = ([os.path.join(d, "replication.png"), os.path.join(d, "replica_fail_timeline.png")]
            if os.path.basename(stem) == "replication" else [stem + ".png", stem + "_timeline.png"])
    subprocess.run([plot, a.out] + pngs, check=False)
    log(f"bench replication: put_async1_vs_none {out['put_async1_vs_none']:.3f}, "
        f"get_async1_vs_none {out['get_async1_vs_none']:.3f} -> {a.out}")
    if not out["replicas_equal_master_all_runs"]:
        log("bench replication: FAILED: a replica's data differed from its master's (see runs)")
        sys.exit(1)


def redis_run(tmp, reps, quick, clients, pipeline):
    """Redis 7 side by side: SET throughput of a master alone and of a master with 1
    replica (fresh servers for every run), redis-benchmark with `clients`
    connections, pipelined `pipeline` deep and not pipelined. Placement as ours: the
    master on CPU 1, the replica and redis-benchmark on CPU 0."""
    d = os.path.join(tmp, "redis")
    os.makedirs(d, exist_ok=True)
    n_pipe, n_one = (200_000, 20_000) if quick else (1_500_000, 100_000)
    version = subprocess.run(["redis-server", "--version"], stdout=subprocess.PIPE, text=True).stdout.strip()
    runs = {f"{c}_{p}": [] for c in ("none", "replica1") for p in ("pipelined", "unpipelined")}

    for rep in range(reps):
        for cfg in ("none", "replica1"):
            for pipe in ("pipelined", "unpipelined"):
                pm, ps = free_port(), free_port()
                procs = [start_redis(d, "master", 1, pm, [])]
                try:
                    if cfg == "replica1":
                        procs.append(start_redis_replica(d, 0, ps, pm))
                    n, depth = (n_pipe, pipeline) if pipe == "pipelined" else (n_one, 1)
                    b = subprocess.run(["taskset", "-c", "0", "redis-benchmark", "-h", "127.0.0.1",
                                        "-p", str(pm), "-t", "set", "-n", str(n), "-c", str(clients),
                                        "-P", str(depth), "-d", "8", "-r", "20000", "--csv"],
                                       stdout=subprocess.PIPE, text=True, timeout=300, check=True)
                    rows = [l.replace('"', "").split(",") for l in b.stdout.splitlines()]
                    hdr = rows[0]
                    row = next(r for r in rows[1:] if r and r[0] == "SET")
                    v = dict(zip(hdr, row))
                    one = {"mops": float(v["rps"]) / 1e6, "p50_ms": float(v.get("p50_latency_ms", "nan")),
                           "p99_ms": float(v.get("p99_latency_ms", "nan")), "requests": n}
                    if cfg == "replica1":
                        lag = None
                        for _ in range(200):
                            lag = redis_lag(pm, ps)
                            if lag == 0:
                                break
                            time.sleep(0.05)
                        one["replica_lag_bytes_end"] = lag
                        one["replica_keys"] = int(redis_info(ps, "keyspace").get("db0", "keys=0,").split(",")[0][5:] or 0)
                    one["master_keys"] = int(redis_info(pm, "keyspace").get("db0", "keys=0,").split(",")[0][5:] or 0)
                    runs[f"{cfg}_{pipe}"].append(one)
                    log(f"  rep {rep} redis {cfg} {pipe}: {one['mops']:.3f} Mops SET")
                finally:
                    stop_all(procs)
    m = {k: statistics.median(r["mops"] for r in v) for k, v in runs.items()}
    return {
        "version": version,
        "placement": "master on CPU 1; replica and redis-benchmark on CPU 0; loopback TCP",
        "clients": clients, "pipeline_depth": pipeline, "value_size": 8, "keyspace": 20000,
        "set_none_pipelined_mops": m["none_pipelined"],
        "set_replica1_pipelined_mops": m["replica1_pipelined"],
        "set_none_unpipelined_mops": m["none_unpipelined"],
        "set_replica1_unpipelined_mops": m["replica1_unpipelined"],
        "set_replica1_vs_none_pipelined": statistics.median(
            a["mops"] / b["mops"] for a, b in zip(runs["replica1_pipelined"], runs["none_pipelined"])),
        "set_replica1_vs_none_unpipelined": statistics.median(
            a["mops"] / b["mops"] for a, b in zip(runs["replica1_unpipelined"], runs["none_unpipelined"])),
        "runs": runs,
    }


def lat(runs):
    return {"p50_us": med(runs, "p50_us"), "p99_us": med(runs, "p99_us")}


def report(a, put, get, alone, sweep, failed, tl, rd, wall):
    cpu = ""
    with contextlib.suppress(StopIteration, OSError):
        cpu = next(l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name"))
    nm = {
        "put_sync1_vs_none": "sync mode is not built: this build refuses `mode: sync`",
        "inline_fanout_cost": "the inline baseline (the worker itself sending to every replica) is not built",
        "offload_vs_inline_mops": "the inline baseline is not built",
        "offload_vs_inline_p99": "the inline baseline is not built",
        "worker_cycles_per_put_offload_vs_inline": "the inline baseline is not built",
        "failover_ms": "failover through etcd is not wired into the dataplane yet",
        "lost_acked_writes": "failover through etcd is not wired into the dataplane yet",
    }
    out = {
        "command": "scripts/bench.sh replication " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"nproc": os.cpu_count(), "cpu": cpu, "kernel": platform.release()},
        "placement": "2 cores shared by every process: pktgen on CPU 0; master worker on CPU 1 "
                     "(EAL --main-lcore 1) and its replication lcore on CPU 0; each replica's worker "
                     "on CPU 0 and its replication lcore on CPU 1; the standalone node's one worker "
                     f"on CPU 1. Idle policy of every lcore: {a.idle}. Replicas and the "
                     "master's replication lcore therefore compete with pktgen and the master's "
                     "worker for the same 2 cores (no free core for SKV's Nic-KV)."
                     + (f" Master lcores overridden: {a.master_lcores} (EAL --lcores map)."
                        if a.master_lcores else ""),
        "config": {"reps": a.reps, "duration_s": a.duration, "warmup_s": a.warmup, "keys": a.keys,
                   "key_size": 8, "value_size_main": 8, "window_packets": a.window, "qps": a.qps,
                   "ops_per_packet": a.ops_per_packet,
                   "ops_per_packet_by_value_size": {str(v): ops_per_packet(a, v) for v in SIZES},
                   "idle": a.idle, "mode": "async", "min_replicas": 0, "probe_interval_ms": 100, "waiting_time_ms": 500,
                   "hugepages": a.huge, "quick": a.quick,
                   "runs": "each run a fresh cluster (or standalone node), pktgen --load then "
                           "closed loop at saturation; replicas Online before the run; lag 0 "
                           "and replica == master (engine digest) checked after it",
                   "throughput": "ops answered OK/NOT_FOUND per second (refused ops excluded)",
                   "latency": "pktgen's calibrated latency (transport floor subtracted), at saturation"},
        "wall_s": round(wall, 1),
        "quiet_wait": {"below": a.quiet_below, "max_s": a.quiet_wait, "waited_s": a.waited,
                       "what": "before each group of runs the script waited for the host's CPU busy "
                               "share to drop below `below` (at most max_s): other sessions' "
                               "compilers share the cores and are not covered by the DPDK lock"},
    }
    for k in range(1, a.max_replicas + 1):
        out[f"put_async{k}_vs_none"] = ratio_med(put[k], put[0]) if put[k] else None
    out["get_async1_vs_none"] = ratio_med(get[1], get[0])
    # Where the cost comes from: the master role alone (its replication lcore and
    # the log rings, no replica process competing for the cores) against standalone.
    out["put_master_no_replica_vs_none"] = ratio_med(alone["put"], put[0])
    out["get_master_no_replica_vs_none"] = ratio_med(alone["get"], get[0])
    out["master_no_replica_mops"] = {"put": med(alone["put"], "mops"), "get": med(alone["get"], "mops")}
    out["p99_put_async1_vs_none"] = ratio_med(put[1], put[0], "p99_us")
    out["p99_get_async1_vs_none"] = ratio_med(get[1], get[0], "p99_us")
    out["put_mops"] = {str(k): med(put[k], "mops") for k in put if put[k]}
    out["get_mops"] = {str(k): med(get[k], "mops") for k in get}
    out["latency_us"] = {**{f"put_{k}_replicas": lat(put[k]) for k in put if put[k]},
                         **{f"get_{k}_replicas": lat(get[k]) for k in get}}
    def rshare(runs):
        v = [r["retransmitted"] / r["requests_sent"] for r in runs if r.get("requests_sent")]
        return statistics.median(v) if v else None
    out["pktgen_retransmitted_share"] = {
        **{f"put_{k}_replicas": rshare(put[k]) for k in put if put[k]},
        **{f"get_{k}_replicas": rshare(get[k]) for k in get},
        "put_master_no_replica": rshare(alone["put"]), "get_master_no_replica": rshare(alone["get"])}
    every = [r for k in put for r in put[k]] + [r for k in get for r in get[k]] + alone["put"] + alone["get"]
    out["background_cpu_busy_before_runs"] = {
        "what": "share of the 2 CPUs busy in the 0.5 s before each run (no process of this "
                "benchmark running): other work on the host, which shares the cores during the run",
        "median": med(every, "background_cpu_busy"),
        "max": max(r["background_cpu_busy"] for r in every)}
    out["replicas_ran"] = [k for k in put if put[k]]
    out["replicas_failed"] = failed
    allrep = [r for k in put if k for r in put[k]] + get[1] + [r for v in SIZES for r in sweep[v][1]]
    out["replicas_equal_master_all_runs"] = all(r["replicas_equal_master"] for r in allrep)
    out["refused_ops_all_runs"] = sum(r["errors"] for k in put for r in put[k]) + \
        sum(r["errors"] for k in get for r in get[k]) + sum(r["errors"] for v in SIZES for k in (0, 1) for r in sweep[v][k])
    out["replication_status_end"] = {f"put_{k}_replicas": put[k][-1]["status_end"] for k in put if k and put[k]}
    out["drain_s_after_run"] = {f"put_{k}_replicas": med(put[k], "drain_s") for k in put if k and put[k]}
    out["value_size_sweep"] = {
        str(v): {"none_mops": med(sweep[v][0], "mops"), "async1_mops": med(sweep[v][1], "mops"),
                 "put_async1_vs_none": ratio_med(sweep[v][1], sweep[v][0]),
                 "none_p99_us": med(sweep[v][0], "p99_us"), "async1_p99_us": med(sweep[v][1], "p99_us"),
                 "ops_per_packet": ops_per_packet(a, v)}
        for v in SIZES}
    out["timeline"] = tl
    for f in nm:
        out[f] = None
    if rd is not None:
        ours = out["put_mops"]["1"] / 2  # master: worker + replication lcore
        out["redis"] = rd
        out["put_mops_per_core_vs_redis"] = ours / rd["set_replica1_pipelined_mops"]
        out["put_mops_per_core_vs_redis_unpipelined"] = ours / rd["set_replica1_unpipelined_mops"]
        out["put_mops_per_core_definition"] = (
            "ours: median PUT Mops with 1 async replica / 2 (the master's worker and replication "
            "lcores); Redis: SET Mops of a master with 1 replica / 1 (its one main thread). Redis "
            "is reached over loopback TCP, ours over memif")
    else:
        out["put_mops_per_core_vs_redis"] = None
        nm["put_mops_per_core_vs_redis"] = "redis-server / redis-benchmark not installed (or --no-redis)"
    out["not_measured"] = nm
    out["runs"] = {"put": {str(k): put[k] for k in put}, "get": {str(k): get[k] for k in get},
                   "master_no_replica": alone,
                   "sweep": {str(v): {str(k): sweep[v][k] for k in (0, 1)} for v in SIZES if v != 8}}
    return out


if __name__ == "__main__":
    main()
