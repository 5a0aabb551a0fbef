#!/usr/bin/env bash
# The main job: set up, build release, start the dataplane on the default memif
# config, run a short YCSB-style pktgen run, print the summary table, stop the dataplane.
# Usage: scripts/run.sh [CONFIG] [extra pktgen flags...]
set -euo pipefail
cd "$(dirname "$0")/.."
cfg="${1:-configs/memif.json}"
shift || true

scripts/setup.sh
cargo build --release -q -p dataplane -p pktgen

mkdir -p results/tmp
log=results/tmp/dataplane.log
sock=$(grep -o 'socket=[^,"]*' "$cfg" | head -1 | cut -d= -f2 || true)
[ -n "$sock" ] && rm -f "$sock"

target/release/dataplane --config "$cfg" >"$log" 2>&1 &
dp=$!
stop_dataplane() {
  if kill -0 "$dp" 2>/dev/null; then
    kill -INT "$dp" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$dp" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$dp" 2>/dev/null || true
  fi
  wait "$dp" 2>/dev/null || true
  # EAL leaves its hugepage files behind for secondary processes; nobody needs them now.
  rm -f /dev/hugepages/kvd-dataplane* /dev/hugepages/kvd-pktgen* 2>/dev/null || true
}
trap stop_dataplane EXIT

for _ in $(seq 1 300); do
  grep -q "dataplane ready" "$log" 2>/dev/null && break
  kill -0 "$dp" 2>/dev/null || { cat "$log"; echo "run.sh: dataplane exited early" >&2; exit 1; }
  sleep 0.1
done
grep -q "dataplane ready" "$log" || { cat "$log"; echo "run.sh: dataplane not ready after 30 s" >&2; exit 1; }

target/release/pktgen --config "$cfg" --keys 1000000 --key-size 8 --value-size 2 \
  --load --get 0.95 --put 0.05 --dist zipf --ops-per-packet 8 --window 64 \
  --warmup 1 --duration 5 --json results/run.json "$@"

stop_dataplane
trap - EXIT
echo
echo "dataplane final stats:"
sed -n '/final stats/,$p' "$log"
