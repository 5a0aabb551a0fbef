#!/usr/bin/env bash
# Runs every end-to-end test and prints "e2e: N passed, M failed".
set -uo pipefail
cd "$(dirname "$0")/../.."
# ctlplane on its own: it enables the engine's accounting feature, which must not reach
# the dataplane binary (Cargo unifies features within one build).
cargo build --release -q -p dataplane -p pktgen || exit 1
cargo build --release -q -p ctlplane || exit 1
tests=(memif_verify lossy atomics partitions jumbo backpressure tap_capture malformed ctlplane metrics kvcli python tenants noninterference fuzz_live replication sync_repl chain chain_failover cross_repl failover cluster_clients election_safety memif_sigcont nemesis snapshot)
passed=0; failed=0
for t in "${tests[@]}"; do
  [ -x "scripts/e2e/$t.sh" ] || { echo "missing scripts/e2e/$t.sh"; failed=$((failed+1)); continue; }
  echo "-- e2e $t"
  start=$(date +%s)
  if "scripts/e2e/$t.sh"; then passed=$((passed+1)); else failed=$((failed+1)); echo "-- e2e $t FAILED"; fi
  echo "-- e2e $t took $(( $(date +%s) - start )) s"
done
echo "e2e: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
