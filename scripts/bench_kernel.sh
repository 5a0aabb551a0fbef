#!/usr/bin/env bash
# The kernel-socket client path, for scripts/bench_clients.py: runs the kvcli and the
# Python end-to-end tests (dataplane on net_tap in a private netns) with their
# benchmark hooks on, and prints one JSON line merging the two.
# Usage: scripts/bench_kernel.sh   (needs root and netns, as the tests do)
set -euo pipefail
cd "$(dirname "$0")/.."
TMP=$(mktemp -d /tmp/kvd-bench-kernel.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
KVD_KVCLI_BENCH="$TMP/kvcli.json" scripts/e2e/kvcli.sh >"$TMP/kvcli.log" 2>&1 \
  || { tail -n 20 "$TMP/kvcli.log" >&2; echo "bench_kernel: kvcli run failed" >&2; exit 1; }
KVD_PY_BENCH="$TMP/py.json" scripts/e2e/python.sh >"$TMP/py.log" 2>&1 \
  || { tail -n 20 "$TMP/py.log" >&2; echo "bench_kernel: python run failed" >&2; exit 1; }
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["python"]=json.load(open(sys.argv[2])); print(json.dumps(d))' \
  "$TMP/kvcli.json" "$TMP/py.json"
