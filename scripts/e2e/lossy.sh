#!/usr/bin/env bash
# Protocol v2 under loss, duplication and reordering in both directions (memif):
# the dataplane drops/duplicates/delays 1 % of what it sends (--inject-*), pktgen
# 1 % of what it sends and receives (--loss/--dup/--reorder). Verify mode must see
# every op completed with 0 mismatches and 0 ops given up (one QP: verify's model
# orders a key's ops per QP, and go-back-N keeps a QP's order); N QPs x M fetch-adds
# on one key must sum exactly and return each original once; CAS chains likewise.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

start_dataplane lossy --stats-json "$E2E_TMP/dp.json" \
  --inject-loss 0.01 --inject-dup 0.01 --inject-reorder 0.01 --inject-seed 7
FAULTS=(--loss 0.01 --dup 0.01 --reorder 0.01)

check_run() {
  local name=$1; shift
  run_pktgen "$name" --json "$E2E_TMP/$name.json" "${FAULTS[@]}" "$@" >"$E2E_TMP/$name.out" 2>&1 \
    || { cat "$E2E_TMP/$name.out"; fail "$name: pktgen exited non-zero"; }
  local ops mism tmo err gave_up retx
  ops=$(json_field "$E2E_TMP/$name.json" 'd["ops"]')
  mism=$(json_field "$E2E_TMP/$name.json" 'd["mismatches"]')
  tmo=$(json_field "$E2E_TMP/$name.json" 'd["timeouts"]')
  err=$(json_field "$E2E_TMP/$name.json" 'd["errors"]')
  gave_up=$(json_field "$E2E_TMP/$name.json" 'd["transport"]["failed"]')
  retx=$(json_field "$E2E_TMP/$name.json" 'd["transport"]["retransmitted"]')
  [ "$ops" -gt 1000 ] || { cat "$E2E_TMP/$name.out"; fail "$name: only $ops ops"; }
  [ "$mism" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $mism mismatches"; }
  [ "$tmo" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $tmo ops timed out"; }
  [ "$gave_up" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: transport gave up on $gave_up requests"; }
  [ "$err" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $err error statuses"; }
  [ "$retx" -gt 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: no retransmission under 1 % loss (faults not injected?)"; }
  pass "$name: $ops ops verified under loss/dup/reorder, 0 mismatches, 0 given up, $retx retransmitted"
}

check_run verify --verify --keys 2000 --key-size 8 --value-size 8 --load \
  --get 0.4 --put 0.3 --atomic 0.2 --ops-per-packet 8 --qps 1 --window 16 \
  --warmup 0.2 --duration 2 --calibrate 50

name=exactly-once
run_pktgen "$name" --json "$E2E_TMP/$name.json" "${FAULTS[@]}" --qps 4 --exactly-once 300 \
  --duration 0.2 --warmup 0 --calibrate 10 --keys 100 >"$E2E_TMP/$name.out" 2>&1 \
  || { cat "$E2E_TMP/$name.out"; fail "$name: pktgen exited non-zero"; }
viol=$(json_field "$E2E_TMP/$name.json" 'd["exactly_once"]["violations"]')
summary=$(json_field "$E2E_TMP/$name.json" 'd["exactly_once"]["summary"]')
[ "$viol" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $viol violations: $summary"; }
pass "$name: $summary"

stop_dataplane
inuse=$(json_field "$E2E_TMP/dp.json" 'd["mbufs_in_use"]')
[ "$inuse" -eq 0 ] || fail "dataplane ended with $inuse mbufs in use"
replays=$(json_field "$E2E_TMP/dp.json" 'd["replays"]')
naks=$(json_field "$E2E_TMP/dp.json" 'd["naks_sent"]')
[ "$replays" -gt 0 ] || fail "no replayed responses under response loss"
[ "$naks" -gt 0 ] || fail "no NAK sent under request loss"
pass "dataplane: $replays replays, $naks NAKs, 0 mbufs in use at exit"
