#!/usr/bin/env python3
"""Everyday-use benchmark (called by scripts/bench.sh clients): what the operator's
and the scripter's paths cost. Writes results/clients.json.

1. sampling_overhead: the hot-path cost of the server-side latency histogram, as
   1 - Mops(sampled 1 in 64) / Mops(no sampling code) of request processing alone
   (dataplane/examples/sampling_overhead: the same bursts through Server::handle_burst
   with and without the worker loop's sampling code, alternating a quarter second
   at a time in one process), the median over --reps runs. Also end to end
   (sampling_overhead_e2e): one dataplane (memif) and closed-loop pktgen runs with
   sampling off (0) and on (64) in ABBA order, switched at run time through the
   telemetry command /kvd/latency/sample_every; on this 2-core machine pktgen and
   the dataplane share the cores, so this figure carries the run-to-run noise of
   the whole system (every pair is listed). One in every packet is measured both
   ways too, for scale.
2. kernel: the kernel-socket client path (kvclient over AF_PACKET) against a dataplane
   on net_tap in a private network namespace (scripts/bench_kernel.sh): whole `kvcli
   get` commands (process start, CONNECT, one GET) p50/p99, and the Python binding's
   get round trip p50/p99 and batched throughput (python/bench/bench_client.py).
3. exporter_frozen_scrape_s: `ctlplane metrics` (default --timeout-ms) scraped over
   HTTP while its dataplane is frozen (SIGSTOP): seconds until the answer, which must
   say kvd_up 0 (the signal to alert on), the median of --reps freezes; the docs
   configure Prometheus with a 4 s scrape timeout.
"""
import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import BIN, ROOT, Dataplane, log, pktgen, telemetry  # noqa: E402


def overhead(tmp, reps, duration):
    common = ["--keys", "100000", "--key-size", "8", "--value-size", "8",
              "--warmup", "0.5", "--duration", str(duration), "--calibrate", "200",
              "--window", "64", "--ops-per-packet", "32", "--get", "0.95", "--put", "0.05",
              "--qps", "4"]
    dp = Dataplane(tmp, "clients-ovh", ["--mem-mb", "256"])
    prefix = "kvd-bench-clients-ovh"
    runs = {0: [], 64: [], 1: []}
    try:
        pktgen(dp, tmp, common + ["--load", "--duration", "0.2"])

        def one(every, rep):
            telemetry(prefix, f"/kvd/latency/sample_every,{every}")
            time.sleep(0.05)  # the workers apply it within a 10 ms control tick
            before = telemetry(prefix, "/kvd/stats")["total"]["latency"]["sampled"]
            r = pktgen(dp, tmp, common + ["--seed", str(rep + 1)])
            after = telemetry(prefix, "/kvd/stats")["total"]["latency"]["sampled"]
            runs[every].append({"mops": r["throughput_mops"], "sampled": after - before,
                                "p99_us": r["latency_raw_us"]["p99"]})
            log(f"  rep {rep} sample_every {every}: {r['throughput_mops']:.3f} Mops, "
                f"{after - before} samples")

        for rep in range(reps):
            for every in (0, 64, 64, 0, 0, 1, 1, 0):
                one(every, rep)
    finally:
        dp.stop()

    # Pair each sampled run with the sampling-off run next to it in time.
    off = runs[0]
    per_rep_off = [off[i:i + 4] for i in range(0, len(off), 4)]
    on64 = [runs[64][i:i + 2] for i in range(0, len(runs[64]), 2)]
    on1 = [runs[1][i:i + 2] for i in range(0, len(runs[1]), 2)]
    ovh64, ovh1 = [], []
    for o, a, b in zip(per_rep_off, on64, on1):
        # order: 0, 64, 64, 0, 0, 1, 1, 0
        ovh64 += [1 - a[0]["mops"] / o[0]["mops"], 1 - a[1]["mops"] / o[1]["mops"]]
        ovh1 += [1 - b[0]["mops"] / o[2]["mops"], 1 - b[1]["mops"] / o[3]["mops"]]
    return {
        "sampling_overhead_e2e": statistics.median(ovh64),
        "sampling_overhead_e2e_pairs": ovh64,
        "sampling_overhead_e2e_every_packet": statistics.median(ovh1),
        "sampling_overhead_e2e_every_packet_pairs": ovh1,
        "mops_sampling_off": statistics.median(r["mops"] for r in runs[0]),
        "mops_sampling_64": statistics.median(r["mops"] for r in runs[64]),
        "samples_per_run_64": statistics.median(r["sampled"] for r in runs[64]),
        "runs": {str(k): v for k, v in runs.items()},
    }


def overhead_server(reps, secs):
    runs = []
    for rep in range(reps):
        r = subprocess.run([os.path.join(BIN, "examples", "sampling_overhead"), str(secs)],
                           check=True, capture_output=True, text=True)
        runs.append(json.loads(r.stdout))
        log(f"  rep {rep} server alone: {r.stdout.strip()}")
    return {
        "sampling_overhead": statistics.median(r["overhead_64"] for r in runs),
        "sampling_overhead_every_packet": statistics.median(r["overhead_1"] for r in runs),
        "sampling_overhead_runs": runs,
    }


def kernel():
    """Runs scripts/bench_kernel.sh (tap dataplane in a netns, kvcli and the Python
    binding against it) and returns its JSON."""
    out = subprocess.run([os.path.join(ROOT, "scripts/bench_kernel.sh")],
                         stdout=subprocess.PIPE, text=True, check=True, timeout=1800)
    return json.loads(out.stdout.strip().splitlines()[-1])


def exporter_frozen(tmp, reps):
    """Seconds a scrape of `ctlplane metrics` takes with the dataplane frozen, per
    freeze, and whether every frozen scrape said kvd_up 0."""
    import re
    import signal
    import urllib.request
    dp = Dataplane(tmp, "exporter", [])
    exp = subprocess.Popen([os.path.join(BIN, "ctlplane"), "metrics", "--listen", "127.0.0.1:0",
                            "--file-prefix", dp.prefix], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    try:
        url = None
        for _ in range(100):
            m = re.search(r"serving (http://\S+)", exp.stdout.readline())
            if m:
                url = m.group(1)
                break
        if not url:
            raise RuntimeError("ctlplane metrics did not say where it serves")
        scrape = lambda: urllib.request.urlopen(url, timeout=30).read().decode()
        up = lambda text: re.search(r"^kvd_up (\S+)", text, re.M).group(1)
        assert up(scrape()) == "1", "the exporter does not see the running dataplane"
        secs, downs = [], []
        for _ in range(reps):
            dp.proc.send_signal(signal.SIGSTOP)
            try:
                t0 = time.monotonic()
                text = scrape()
                secs.append(time.monotonic() - t0)
                downs.append(up(text) == "0")
            finally:
                dp.proc.send_signal(signal.SIGCONT)
            time.sleep(0.5)
        return {"exporter_frozen_scrape_s": statistics.median(secs),
                "exporter_frozen_scrape_runs_s": [round(x, 3) for x in secs],
                "exporter_frozen_kvd_up_0": all(downs)}
    finally:
        exp.terminate()
        exp.wait(5)
        dp.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=2.0)
    ap.add_argument("--skip-kernel", action="store_true")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/clients.json"))
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="kvd-bench-clients-")
    out = {
        "command": "scripts/bench.sh clients " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "cpu": next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo")
                                 if ln.startswith("model name")), "")},
        "reps": a.reps,
    }
    out.update(exporter_frozen(tmp, a.reps))
    log(f"bench clients: frozen dataplane scraped in {out['exporter_frozen_scrape_s']:.2f} s "
        f"(kvd_up 0: {out['exporter_frozen_kvd_up_0']})")
    out.update(overhead_server(a.reps, 6))
    out.update(overhead(tmp, a.reps, a.duration))
    log(f"bench clients: sampling overhead (1 in 64) {out['sampling_overhead']:+.4f} "
        f"(end to end {out['sampling_overhead_e2e']:+.4f}), every packet "
        f"{out['sampling_overhead_every_packet']:+.4f}")
    if not a.skip_kernel:
        k = kernel()
        py = k.get("python", {})
        out["kernel"] = k
        out["kvcli_rtt_us_p50"] = k.get("kvcli_rtt_us_p50")
        out["kvcli_rtt_us_p99"] = k.get("kvcli_rtt_us_p99")
        out["kvcli_command_ms_p50"] = k.get("kvcli_command_ms_p50")
        out["python_get_us_p50"] = (py.get("get_latency_us") or {}).get("p50")
        out["python_get_us_p99"] = (py.get("get_latency_us") or {}).get("p99")
        b = py.get("batch") or {}
        out["python_batch_put_ops_per_s"] = b.get("put_ops_per_s_median")
        out["python_batch_get_ops_per_s"] = b.get("get_ops_per_s_median")
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"bench clients -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
