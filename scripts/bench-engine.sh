#!/usr/bin/env bash
# Engine benchmark (called as `scripts/bench.sh engine [throughput options]`).
#   1. accounting build: distinct 64 B lines per GET/PUT vs memory utilization,
#      max utilization for 10 B KVs, slab transfer and merge figures
#      -> results/engine_lines.json
#   2. normal build: single-core GET/PUT throughput of the engine (batched and
#      per-op) against hashbrown, 10 M KVs of 10 B at 50% utilization,
#      uniform and Zipf 0.99, median of repeated runs
#      -> results/engine.json (+ the lines figures) and results/engine_*.png
# Extra arguments go to the throughput run, e.g. --reps 5 --n 10000000 --ratio 0.8.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
target="${CARGO_TARGET_DIR:-target}"
bin="$target/release/examples/engine_bench"
cmd="scripts/bench.sh engine $*"

echo "== engine: lines per op (cargo feature accounting)"
cargo build -q --release -p kvengine --example engine_bench --features accounting
"$bin" lines --out results/engine_lines.json

echo "== engine: throughput"
cargo build -q --release -p kvengine --example engine_bench
# glibc.malloc.hugetlb=1 gives hashbrown's table transparent huge pages too,
# as Region::owned does for the engine, so the comparison is like for like.
GLIBC_TUNABLES=glibc.malloc.hugetlb=1 "$bin" throughput \
  --lines results/engine_lines.json --out results/engine.json --cmd "$cmd" --reps 5 "$@"
echo "== results/engine.json, results/engine_lines.json, results/engine_*.png"
