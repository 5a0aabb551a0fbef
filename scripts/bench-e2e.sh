#!/usr/bin/env bash
# End-to-end benchmark: dataplane + pktgen over memif (see scripts/bench_e2e.py).
# Writes results/e2e.json and results/e2e.png. Extra flags go to bench_e2e.py
# (--reps, --duration, --keys, --window, --batches).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh >/dev/null
cargo build --release -q -p dataplane -p pktgen
exec python3 scripts/bench_e2e.py "$@"
