#!/usr/bin/env python3
"""Idle lcores on net_tap, where the port has Rx interrupts (issue 31; called by
scripts/bench.sh idle-tap).

A dataplane on net_tap (configs/tap.json, one worker) in a private network namespace,
the Python binding (kernel transport, AF_PACKET on kvtap0) as its client in the same
namespace. Variants, alternating within every repetition: `--idle yield` (the default),
`--idle adaptive` (idle workers sleep and wake on the tap queue's Rx interrupt
descriptor) and `--idle adaptive --no-rx-intr` (timed sleeps only, the baseline). Per
run: the dataplane's CPU share while idle (2 s, /proc), then one GET per millisecond
(`--sparse` of them: each finds the worker asleep under `adaptive`) and back-to-back
GETs for 2 s (one outstanding: the wake-up is paid only after a pause); per-GET
latency from the client's clock (`time.perf_counter_ns` around the call). The
worker's `idle_rx_wakeups` says how many sleeps a packet ended.

Writes results/idle_tap.json. Needs root (network namespaces).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402
from bench_repl_cost import cpu_ns  # noqa: E402
from benchlib import DP, ROOT, log  # noqa: E402

VARIANTS = {
    "yield": ["--idle", "yield"],
    "adaptive": ["--idle", "adaptive"],
    "adaptive_no_rx_intr": ["--idle", "adaptive", "--no-rx-intr"],
}

# The client: sparse GETs (one per ms), then back-to-back GETs; latencies in ns.
CLIENT = r"""
import json, sys, time, kvdirect
n, secs = int(sys.argv[1]), float(sys.argv[2])
c = kvdirect.Client("kvtap0", config="configs/tap.json")
c.put(b"k", b"v")
def one():
    t = time.perf_counter_ns(); c.get(b"k"); return time.perf_counter_ns() - t
sparse = []
for _ in range(n):
    time.sleep(0.001)
    sparse.append(one())
dense, end = [], time.monotonic() + secs
while time.monotonic() < end:
    dense.append(one())
c.close()
print(json.dumps({"sparse": sparse, "dense": dense}))
"""


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p * len(v)))] / 1e3


def one_run(tmp, name, flags, rep, sparse):
    ns = f"kvd-bench-tap-{os.getpid()}"
    prefix = f"kvd-bench-tap-{name}"
    logf = os.path.join(tmp, f"{name}-{rep}.log")
    stats = os.path.join(tmp, f"{name}-{rep}.stats.json")
    subprocess.run(["ip", "netns", "add", ns], check=True)
    dp = None
    try:
        subprocess.run(["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "sysctl", "-qw",
                        "net.ipv6.conf.all.disable_ipv6=1",
                        "net.ipv6.conf.default.disable_ipv6=1"], check=True)
        dp = subprocess.Popen(["ip", "netns", "exec", ns, DP, "--config", "configs/tap.json",
                               "--no-huge", "--file-prefix", prefix, "--mem-mb", "64",
                               "--stats-json", stats] + flags,
                              stdout=open(logf, "w"), stderr=subprocess.STDOUT, cwd=ROOT)
        for _ in range(300):
            if "dataplane ready" in open(logf).read():
                break
            if dp.poll() is not None:
                raise RuntimeError(f"{name}: dataplane exited:\n" + open(logf).read())
            time.sleep(0.1)
        else:
            raise RuntimeError(f"{name}: dataplane not ready:\n" + open(logf).read())
        time.sleep(1.0)  # the link up, the worker past its quiet time
        c0, t0 = cpu_ns(dp.pid), time.monotonic()
        time.sleep(2.0)
        idle = (cpu_ns(dp.pid) - c0) / ((time.monotonic() - t0) * 1e9)
        r = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", CLIENT,
                            str(sparse), "2"], stdout=subprocess.PIPE, text=True,
                           cwd=ROOT, timeout=300, check=True)
        lat = json.loads(r.stdout)
    finally:
        if dp is not None:
            dp.send_signal(2)
            try:
                dp.wait(15)
            except subprocess.TimeoutExpired:
                dp.kill()
        subprocess.run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(f"/var/run/dpdk/{prefix}", ignore_errors=True)
    st = json.load(open(stats))
    intr = "wake on Rx interrupts" in open(logf).read()
    return {
        "idle_cpu_share": idle,
        "rx_interrupts": intr,
        "sparse_p50_us": pct(lat["sparse"], 0.5), "sparse_p99_us": pct(lat["sparse"], 0.99),
        "dense_p50_us": pct(lat["dense"], 0.5), "dense_p99_us": pct(lat["dense"], 0.99),
        "dense_gets_per_s": len(lat["dense"]) / 2.0,
        "idle_sleeps": st.get("idle_sleeps", 0), "idle_rx_wakeups": st.get("idle_rx_wakeups", 0),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sparse", type=int, default=2000, help="GETs one per ms per run")
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "idle_tap.json"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_idle_tap: needs root (network namespaces)")
    runs = {k: [] for k in VARIANTS}
    with tempfile.TemporaryDirectory(prefix="kvd-bench-tap-") as tmp, benchlib.dpdk_lock():
        for rep in range(a.reps):
            for name, flags in VARIANTS.items():
                r = one_run(tmp, name, flags, rep, a.sparse)
                runs[name].append(r)
                log(f"  rep {rep} {name}: idle {r['idle_cpu_share']:.3f} core, sparse p50 "
                    f"{r['sparse_p50_us']:.0f} us p99 {r['sparse_p99_us']:.0f} us, dense p50 "
                    f"{r['dense_p50_us']:.0f} us, {r['idle_rx_wakeups']} of "
                    f"{r['idle_sleeps']} sleeps ended by a packet")
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0] if f != "rx_interrupts"}
           for k, v in runs.items()}
    out = {
        "command": "scripts/bench.sh idle-tap " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "what": __doc__.split("\n\n")[1].replace("\n", " "),
        "reps": a.reps,
        "medians": med,
        "sparse_p50_adaptive_vs_timed": med["adaptive"]["sparse_p50_us"]
        / med["adaptive_no_rx_intr"]["sparse_p50_us"],
        "runs": runs,
    }
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=True)
    for k, m in med.items():
        log(f"{k}: " + ", ".join(f"{f} {v:.3f}" for f, v in m.items()))


if __name__ == "__main__":
    main()
