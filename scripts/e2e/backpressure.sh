#!/usr/bin/env bash
# Forced tx backpressure: pktgen floods the dataplane with a large window, is frozen
# (SIGSTOP: it stops draining its rx ring, so the dataplane's memif tx ring fills), then
# killed. The dataplane must keep running, count the responses it could not send, and
# return its mbuf pool's in-use count to the baseline it had at start-up.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

start_dataplane backpressure --stats-interval 1 --stats-json "$E2E_TMP/dp.json"
base=$(sed -n 's/.*dataplane ready (mbufs in use \([0-9]*\)).*/\1/p' "$DP_LOG")
[ -n "$base" ] || fail "no baseline in the dataplane log"

run_pktgen bp --keys 10000 --value-size 2 --get 1.0 --put 0.0 --ops-per-packet 32 \
  --window 4000 --warmup 0 --duration 30 --calibrate 0 >"$E2E_TMP/pg.out" 2>&1 &
pg=$!
E2E_PIDS+=("$pg")
sleep 3
kill -STOP "$pg"
sleep 2
kill -KILL "$pg"
wait "$pg" 2>/dev/null || true
sleep 2.5   # two stats intervals
kill -0 "$DP_PID" || fail "dataplane died under backpressure"
last=$(grep '^stats:' "$DP_LOG" | tail -1 | sed -n 's/.*mbufs_in_use \([0-9]*\).*/\1/p')
[ -n "$last" ] || { cat "$DP_LOG"; fail "no stats line"; }
stop_dataplane
txfull=$(json_field "$E2E_TMP/dp.json" 'd.get("drop_tx_full", 0)')
req=$(json_field "$E2E_TMP/dp.json" 'd["requests"]')
[ "$req" -gt 0 ] || fail "no requests reached the dataplane"
[ "$last" -eq "$base" ] || fail "mbufs in use $last after backpressure, baseline $base"
echo "  requests $req, responses dropped for tx_full $txfull"
pass "mbuf pool back to baseline ($base) after forced tx backpressure"
