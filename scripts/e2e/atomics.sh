#!/usr/bin/env bash
# Atomics, vector operations and the reservation station over memif, verify mode.
#
# Station on (ooo): 4 client QPs x fetch-adds on ONE key — every returned original must
# be the count of adds sent before it, and the read-back after the run must find
# exactly the number of adds sent (Q x M); then a Zipf mix of GET/PUT/DELETE/atomic/
# vector update/reduce over 8-64 B values (values that are not one u64 or not a
# multiple of 8 B must be answered BAD_LENGTH and change nothing). The dataplane must
# report ops served by data forwarding and no stall. Stall mode (--ooo false): the
# single-key run again, with stalls and no forwarding.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

check_run() {
  local name=$1; shift
  run_pktgen "$name" --json "$E2E_TMP/$name.json" --verify --timeout-ms 3000 "$@" >"$E2E_TMP/$name.out" 2>&1 \
    || { cat "$E2E_TMP/$name.out"; fail "$name: pktgen exited non-zero"; }
  local ops mism tmo err rb
  ops=$(json_field "$E2E_TMP/$name.json" 'd["ops"]')
  mism=$(json_field "$E2E_TMP/$name.json" 'd["mismatches"]')
  tmo=$(json_field "$E2E_TMP/$name.json" 'd["timeouts"]')
  err=$(json_field "$E2E_TMP/$name.json" 'd["errors"]')
  rb=$(json_field "$E2E_TMP/$name.json" 'd["readback"]["mismatches"] + d["readback"]["errors"] + d["readback"]["timeouts"]')
  [ "$ops" -gt 1000 ] || { cat "$E2E_TMP/$name.out"; fail "$name: only $ops ops"; }
  [ "$mism" -eq 0 ] && [ "$tmo" -eq 0 ] && [ "$err" -eq 0 ] && [ "$rb" -eq 0 ] \
    || { cat "$E2E_TMP/$name.out"; fail "$name: $mism mismatches, $tmo timeouts, $err errors, $rb read-back failures"; }
  pass "$name: $ops ops verified, read-back exact, 0 mismatches, 0 timeouts"
}

start_dataplane atomics-ooo --ooo true --stats-json "$E2E_TMP/ooo.json"
check_run one-key-4qps --keys 1 --value-size 8 --load --get 0 --put 0 --atomic 1 \
  --qps 4 --ops-per-packet 32 --window 16 --warmup 0.2 --duration 1.5 --calibrate 20
check_run zipf-mix --keys 2000 --value-size 8-64 --load --dist zipf --get 0.3 --put 0.15 \
  --atomic 0.2 --vector 0.2 --reduce 0.1 --qps 2 --ops-per-packet 16 --window 16 \
  --warmup 0.2 --duration 1.5 --calibrate 20
stop_dataplane
fwd=$(json_field "$E2E_TMP/ooo.json" 'd["station_forwarded"]')
stalls=$(json_field "$E2E_TMP/ooo.json" 'd["station_stalls"]')
bad=$(json_field "$E2E_TMP/ooo.json" 'd["op_errors"]')
[ "$fwd" -gt 0 ] && [ "$stalls" -eq 0 ] || fail "ooo: forwarded $fwd, stalls $stalls"
pass "ooo dataplane: $fwd ops served by forwarding, 0 stalls, $bad BAD_LENGTH answers (expected)"

start_dataplane atomics-stall --ooo false --stats-json "$E2E_TMP/stall.json"
check_run one-key-stall --keys 1 --value-size 8 --load --get 0 --put 0 --atomic 1 \
  --qps 4 --ops-per-packet 32 --window 16 --warmup 0.2 --duration 1.5 --calibrate 20
stop_dataplane
fwd=$(json_field "$E2E_TMP/stall.json" 'd["station_forwarded"]')
stalls=$(json_field "$E2E_TMP/stall.json" 'd["station_stalls"]')
[ "$fwd" -eq 0 ] && [ "$stalls" -gt 0 ] || fail "stall: forwarded $fwd, stalls $stalls"
pass "stall dataplane: $stalls stalls, no forwarding"
