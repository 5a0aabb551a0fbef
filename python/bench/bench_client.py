#!/usr/bin/env python3
"""Throughput/latency of kvdirect against a running dataplane; prints JSON.

* ``get_latency_us``: round trip of ``Client.get`` (one op, blocking) over ``-n``
  calls after a warm-up: p50, p99, mean, min, max in µs.
* ``batch``: ``Client.batch`` of ``--batch`` puts, then as many gets (distinct
  keys, ``--value-bytes`` values), ``--reps`` times: ops/s of each rep and the
  median, and the request packets per batch (ops per packet).

Needs the client's interface and the dataplane's config, as the tests do
(``--iface``/``KVD_IFACE``, ``--config``/``KVD_CONFIG``), and root (raw socket).
``KVD_PY_BENCH=out.json scripts/e2e/python.sh`` runs it after the tests, inside the
test namespace, and writes the JSON to out.json.
"""

import argparse
import json
import os
import platform
import statistics
import sys
import time

import kvdirect


def percentile(sorted_values, q):
    """Nearest-rank percentile of an ascending list."""
    if not sorted_values:
        return None
    i = max(0, min(len(sorted_values) - 1, int(round(q / 100 * len(sorted_values) + 0.5)) - 1))
    return sorted_values[i]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iface", default=os.environ.get("KVD_IFACE", "kvtap0"))
    ap.add_argument("--config", default=os.environ.get("KVD_CONFIG", "configs/tap.json"))
    ap.add_argument("-n", type=int, default=10_000, help="get calls timed")
    ap.add_argument("--warmup", type=int, default=1_000)
    ap.add_argument("--batch", type=int, default=10_000, help="ops per batch call")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--value-bytes", type=int, default=16)
    a = ap.parse_args()

    c = kvdirect.Client(a.iface, config=a.config)
    value = bytes(range(256)) * (a.value_bytes // 256 + 1)
    value = value[: a.value_bytes]

    key = b"bench-latency-key"
    c.put(key, value)
    for _ in range(a.warmup):
        c.get(key)
    lat = []
    clock = time.perf_counter_ns
    for _ in range(a.n):
        t0 = clock()
        v = c.get(key)
        lat.append(clock() - t0)
        if v != value:
            sys.exit("get returned a wrong value")
    lat.sort()
    us = [x / 1e3 for x in lat]

    keys = [f"bench-batch-{i:08d}".encode() for i in range(a.batch)]
    puts = [("put", k, value) for k in keys]
    gets = [("get", k) for k in keys]
    put_rates, get_rates, packets = [], [], []
    for _ in range(a.reps):
        s0 = c.stats()["sent"]
        t0 = time.perf_counter()
        c.batch(puts)
        t1 = time.perf_counter()
        s1 = c.stats()["sent"]
        r = c.batch(gets)
        t2 = time.perf_counter()
        s2 = c.stats()["sent"]
        if r != [value] * len(keys):
            sys.exit("batch get returned wrong values")
        put_rates.append(a.batch / (t1 - t0))
        get_rates.append(a.batch / (t2 - t1))
        packets.append(f"{s1 - s0}/{s2 - s1}")
    c.batch([("delete", k) for k in keys])
    stats = c.stats()
    c.close()

    out = {
        "kvdirect": kvdirect.__version__,
        "python": platform.python_version(),
        "iface": a.iface,
        "value_bytes": a.value_bytes,
        "get_latency_us": {
            "n": a.n,
            "p50": round(percentile(us, 50), 1),
            "p99": round(percentile(us, 99), 1),
            "mean": round(statistics.fmean(us), 1),
            "min": round(us[0], 1),
            "max": round(us[-1], 1),
        },
        "batch": {
            "ops": a.batch,
            "reps": a.reps,
            "put_ops_per_s": " ".join(str(round(x)) for x in put_rates),
            "get_ops_per_s": " ".join(str(round(x)) for x in get_rates),
            "put_ops_per_s_median": round(statistics.median(put_rates)),
            "get_ops_per_s_median": round(statistics.median(get_rates)),
            "request_packets_put_get": " ".join(packets),
        },
        "client_stats": {k: stats[k] for k in ("sent", "retransmitted", "timeouts", "failed")},
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
