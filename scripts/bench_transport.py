#!/usr/bin/env python3
"""Reliable-transport benchmark (called by scripts/bench.sh transport): dataplane +
pktgen over memif, protocol v2 (connections, credits, go-back-N, replay).

Per repetition, against fresh dataplanes (the config's client list extended to 4096
QPs by `ctlplane clients gen`):
1. echo (the dataplane bounces frames: the I/O floor, no transport) before and after
   the KV runs (their mean is the rep's echo point) against KV with 4 QPs:
   kv_over_echo;
2. KV throughput over N QPs for N in --qps-list (HERD's scaling: one server core, many
   connections): mops_Nqp, scale_N_vs_4; the list is run forward and then backward
   and each point is the mean of its two runs (a drift of the machine during the
   sweep hits every point alike);
3. KV with injected loss in both directions (pktgen --loss on its transmit and
   receive sides, seeded): 0.1 % and 1 %, against lossless;
4. exactly-once under 1 % loss + 1 % duplication + 1 % reordering: N QPs x M
   fetch-adds on one key and CAS chains (pktgen --exactly-once): violations;
5. the server alone (dataplane/examples/server_qps: one Server, requests spread over 4
   and over 4096 connected QPs alternately, only handle_burst timed): how request
   processing itself scales with the number of connections, apart from the client
   and the memif link.

Every field is the median over --reps; ratios are taken per repetition (both sides
ran seconds apart) and their median reported. A pktgen run that does not finish, or
ops the transport gave up on, count as hangs. Writes results/transport.json and
results/transport.png.
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BIN, CFG, ROOT, Dataplane, log, pktgen  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--qps-list", default="4,16,64,256,1024,4096")
    ap.add_argument("--ops-per-packet", type=int, default=32)
    ap.add_argument("--window", type=int, default=64)
    ap.add_argument("--out", default=os.path.join(ROOT, "results/transport.json"))
    a = ap.parse_args()
    qps_list = [int(q) for q in a.qps_list.split(",")]
    tmp = tempfile.mkdtemp(prefix="kvd-bench-transport-")
    cfg = os.path.join(tmp, "memif-4096.json")
    subprocess.run([os.path.join(BIN, "ctlplane"), "clients", "gen", "--count", str(max(qps_list + [16])),
                    "--first-qpn", "100", "--config", CFG, "--out", cfg], check=True)
    common = ["--keys", str(a.keys), "--key-size", "8", "--value-size", "2",
              "--warmup", "0.5", "--duration", str(a.duration), "--calibrate", "200",
              "--window", str(a.window), "--ops-per-packet", str(a.ops_per_packet),
              "--get", "0.95", "--put", "0.05"]
    runs = {"echo": [], "loss_0_1pct": [], "loss_1pct": [], "exactly_once": []}
    for q in qps_list:
        runs[f"qps_{q}"] = []
    hangs = 0

    def one(dp, tag, args, rep):
        nonlocal hangs
        try:
            r = pktgen(dp, tmp, args + ["--seed", str(rep + 1)], timeout=300)
        except subprocess.TimeoutExpired:
            hangs += 1
            log(f"  rep {rep} {tag}: HANG (pktgen did not finish)")
            return None
        except RuntimeError as e:
            log(f"  rep {rep} {tag}: FAILED {str(e).splitlines()[0]}")
            raise
        t = r.get("transport") or {}
        hangs += t.get("failed", 0)
        runs[tag].append(r)
        log(f"  rep {rep} {tag}: {r['throughput_mops']:.2f} Mops p99 {r['latency_raw_us']['p99']:.1f} us"
            f" retransmitted {t.get('retransmitted', 0)} failed {t.get('failed', 0)}"
            f" timeouts {r['timeouts']} mismatches {r['mismatches']}")
        return r

    for rep in range(a.reps):
        dp = Dataplane(tmp, "echo", ["--echo"], cfg=cfg)
        try:
            one(dp, "echo", common + ["--echo", "--qps", "4"], rep)
        finally:
            dp.stop()
        dp = Dataplane(tmp, "kv", ["--mem-mb", "256"], cfg=cfg)
        try:
            pktgen(dp, tmp, common + ["--load", "--duration", "0.2", "--qps", "4"])
            # ABBA order (4 .. 4096, then 4096 .. 4) and each point the mean of its two
            # runs: a drift of the machine during the sweep hits every point alike.
            pair = {}
            for q in qps_list + qps_list[::-1]:
                r = one(dp, f"qps_{q}", common + ["--qps", str(q)], rep)
                if r is not None:
                    pair.setdefault(q, []).append(r)
            for q, rs in pair.items():
                runs[f"qps_{q}"] = [x for x in runs[f"qps_{q}"] if x not in rs]
                mean = dict(rs[-1])
                mean["throughput_mops"] = statistics.mean(x["throughput_mops"] for x in rs)
                mean["runs_mops"] = [x["throughput_mops"] for x in rs]
                runs[f"qps_{q}"].append(mean)
            for tag, p in (("loss_0_1pct", 0.001), ("loss_1pct", 0.01)):
                one(dp, tag, common + ["--qps", "4", "--loss", str(p)], rep)
            one(dp, "exactly_once", common + ["--qps", "16", "--duration", "0.5",
                                              "--loss", "0.01", "--dup", "0.01", "--reorder", "0.01",
                                              "--exactly-once", "200"], rep)
        finally:
            dp.stop()
        # Echo again after the KV runs: the rep's echo point is the mean of the runs
        # before and after them, so a drift of the machine hits both sides alike.
        dp = Dataplane(tmp, "echo", ["--echo"], cfg=cfg)
        try:
            r = one(dp, "echo", common + ["--echo", "--qps", "4"], rep)
        finally:
            dp.stop()
        if r is not None and len(runs["echo"]) >= 2:
            e1, e2 = runs["echo"][-2], runs["echo"][-1]
            mean = dict(e2)
            mean["throughput_mops"] = (e1["throughput_mops"] + e2["throughput_mops"]) / 2
            mean["runs_mops"] = [e1["throughput_mops"], e2["throughput_mops"]]
            runs["echo"][-2:] = [mean]

    server_only = []
    for rep in range(a.reps):
        r = subprocess.run([os.path.join(BIN, "examples", "server_qps"), "4", str(max(qps_list))],
                           check=True, capture_output=True, text=True)
        server_only.append(json.loads(r.stdout))
        log(f"  rep {rep} server alone: {r.stdout.strip()}")

    def med(tag, field="throughput_mops"):
        v = [r[field] for r in runs[tag]]
        return statistics.median(v) if v else None

    def ratio(num, den):
        rs = [n["throughput_mops"] / d["throughput_mops"]
              for n, d in zip(runs[num], runs[den]) if d["throughput_mops"]]
        return statistics.median(rs) if rs else None

    eo = [r.get("exactly_once") or {} for r in runs["exactly_once"]]
    out = {
        "command": "scripts/bench.sh transport " + " ".join(sys.argv[1:]),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
        "reps": a.reps,
        "kv_over_echo": ratio("qps_4", "echo"),
        "echo_mops": med("echo"),
        "mops_4qp": med("qps_4"),
        "mops_1024qp": med("qps_1024") if 1024 in qps_list else None,
        "scale_1024_vs_4": ratio("qps_1024", "qps_4") if 1024 in qps_list else None,
        "mops_4096qp": med("qps_4096") if 4096 in qps_list else None,
        "scale_4096_vs_4": ratio("qps_4096", "qps_4") if 4096 in qps_list else None,
        "mops_by_qps": {str(q): med(f"qps_{q}") for q in qps_list},
        "p99_us_by_qps": {str(q): statistics.median(r["latency_raw_us"]["p99"] for r in runs[f"qps_{q}"])
                          for q in qps_list if runs[f"qps_{q}"]},
        "loss_0_1pct_vs_lossless": ratio("loss_0_1pct", "qps_4"),
        "loss_1pct_vs_lossless": ratio("loss_1pct", "qps_4"),
        "p99_us_lossless": statistics.median(r["latency_raw_us"]["p99"] for r in runs["qps_4"]),
        "p99_us_loss_0_1pct": statistics.median(r["latency_raw_us"]["p99"] for r in runs["loss_0_1pct"]),
        "p99_us_loss_1pct": statistics.median(r["latency_raw_us"]["p99"] for r in runs["loss_1pct"]),
        "retransmitted_loss_1pct": [(r.get("transport") or {}).get("retransmitted") for r in runs["loss_1pct"]],
        "exactly_once_violations": sum(e.get("violations", 1) for e in eo) if eo else None,
        "exactly_once_runs": eo,
        "hangs": hangs,
        "server_only_scale_vs_4": statistics.median(x["ratio"] for x in server_only),
        "server_only_runs": server_only,
        "runs": {k: [{"throughput_mops": r["throughput_mops"], "latency_raw_us": r["latency_raw_us"],
                      "transport": r.get("transport"), "timeouts": r["timeouts"]} for r in v]
                 for k, v in runs.items()},
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    plot = os.path.join(BIN, "transport_plot")
    subprocess.run([plot, a.out, a.out.replace(".json", ".png")], check=False)
    log(f"bench transport: kv/echo {out['kv_over_echo']}, 1024/4 {out['scale_1024_vs_4']}, "
        f"4096/4 {out['scale_4096_vs_4']}, loss 0.1% {out['loss_0_1pct_vs_lossless']}, "
        f"loss 1% {out['loss_1pct_vs_lossless']}, exactly-once violations "
        f"{out['exactly_once_violations']}, hangs {hangs} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
