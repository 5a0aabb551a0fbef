#!/usr/bin/env bash
# Two worker lcores, each a key partition (own engine shard, station, queue pair):
# pktgen steers every op to its partition's QP and queue and verifies every answer
# (GET/PUT/DELETE/atomics over 4 QPs, Zipf) and reads every key back; then the same
# with every packet sent on the OTHER partition's queue (--misdirect): the dataplane
# must hand each request to its owner and still answer correctly. The dataplane must
# count the hand-offs, answer no op WRONG_PARTITION and leak no mbuf.
# (This machine has 2 cores: dataplane workers on 0 and 1, pktgen shares core 0.)
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

check_run() {
  local name=$1; shift
  run_pktgen "$name" --json "$E2E_TMP/$name.json" --verify --timeout-ms 5000 "$@" >"$E2E_TMP/$name.out" 2>&1 \
    || { cat "$E2E_TMP/$name.out"; fail "$name: pktgen exited non-zero"; }
  local ops bad wp
  ops=$(json_field "$E2E_TMP/$name.json" 'd["ops"]')
  bad=$(json_field "$E2E_TMP/$name.json" 'd["mismatches"] + d["timeouts"] + d["errors"] + d["readback"]["mismatches"] + d["readback"]["errors"] + d["readback"]["timeouts"]')
  wp=$(json_field "$E2E_TMP/$name.json" 'd["wrong_partition"]')
  [ "$ops" -gt 1000 ] || { cat "$E2E_TMP/$name.out"; fail "$name: only $ops ops"; }
  [ "$bad" -eq 0 ] && [ "$wp" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $bad failures, $wp WRONG_PARTITION"; }
  pass "$name: $ops ops verified over 2 partitions, read-back exact, $(json_field "$E2E_TMP/$name.json" 'd["partition_ops"]') ops per partition"
}

flags=(--partitions 2 --qps 4 --keys 3000 --value-size 8 --load --dist zipf --get 0.5 --put 0.2
       --atomic 0.2 --ops-per-packet 16 --window 16 --warmup 0.2 --duration 1.5 --calibrate 20)

start_dataplane part --lcores 0,1 --stats-json "$E2E_TMP/dp.json"
check_run steered "${flags[@]}"
check_run misdirected "${flags[@]}" --misdirect
stop_dataplane
w=$(json_field "$E2E_TMP/dp.json" 'd["workers"]')
off=$(json_field "$E2E_TMP/dp.json" 'd["handed_off"]')
in=$(json_field "$E2E_TMP/dp.json" 'd["handed_in"]')
inuse=$(json_field "$E2E_TMP/dp.json" 'd["mbufs_in_use"]')
# Duplicates of served requests are the transport at work (a retransmission after a
# platform stall longer than the RTO, answered from the cache): not errors.
drops=$(json_field "$E2E_TMP/dp.json" 'sum(v for k,v in d.items() if k.startswith("drop_") and k not in ("drop_psn_duplicate", "drop_psn_ahead"))')
[ "$w" -eq 2 ] || fail "dataplane ran $w workers"
[ "$off" -gt 0 ] && [ "$off" -eq "$in" ] || fail "hand-offs: $off off, $in in"
[ "$inuse" -eq 0 ] && [ "$drops" -eq 0 ] || { cat "$E2E_TMP/dp.json"; fail "mbufs in use $inuse, drops $drops"; }
pass "dataplane: 2 workers, $off requests handed to their owner, 0 drops, 0 mbufs leaked"
