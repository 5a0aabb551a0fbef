"""A Python application sharing one dataplane with other client processes.

Runs put/get pairs on its own keys for --seconds and counts every operation that
fails or returns a wrong value; prints one JSON line {"ops": N, "failures": F}.
Used by scripts/e2e/python.sh while kvcli loops run beside it (issue 32: with
shared static QPs, one kvcli call broke the application's next operations).
"""
import argparse
import json
import time

import kvdirect

ap = argparse.ArgumentParser()
ap.add_argument("--iface", required=True)
ap.add_argument("--config", required=True)
ap.add_argument("--seconds", type=float, default=5.0)
ap.add_argument("--static-qp", type=int, default=None,
                help="use this static QP of the config instead of opened ones (the "
                     "behaviour before issue 32, for comparison)")
a = ap.parse_args()

if a.static_qp is None:
    c = kvdirect.Client(a.iface, config=a.config)
else:
    conf = json.load(open(a.config))
    rkey = next(q["rkey"] for q in conf["clients"] if q["qpn"] == a.static_qp)
    c = kvdirect.Client(a.iface, config=a.config, qps=[(a.static_qp, rkey)])
ops = failures = 0
deadline = time.monotonic() + a.seconds
i = 0
while time.monotonic() < deadline:
    key = b"app:%d" % (i % 100)
    value = b"v%d" % i
    try:
        c.put(key, value)
        ops += 1
        if c.get(key) != value:
            failures += 1
        ops += 1
    except kvdirect.Error as e:  # every client error derives from kvdirect.Error
        failures += 1
        print("failure:", e, flush=True)
    i += 1
c.close()
print(json.dumps({"ops": ops, "failures": failures}))
