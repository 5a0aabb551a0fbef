#!/usr/bin/env bash
# dataplane + pktgen over memif in verify mode: KV sizes on both sides of the inline
# threshold, puts, replaces and deletes, several QPs, Zipf, large values whose GET
# results span several response packets. Every response is checked against pktgen's
# model: zero mismatches and zero timeouts, and no mbuf leaked by the dataplane.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

start_dataplane verify --stats-json "$E2E_TMP/dp.json"

check_run() {
  local name=$1; shift
  run_pktgen "$name" --json "$E2E_TMP/$name.json" --verify --timeout-ms 3000 "$@" >"$E2E_TMP/$name.out" 2>&1 \
    || { cat "$E2E_TMP/$name.out"; fail "$name: pktgen exited non-zero"; }
  local ops mism tmo err
  ops=$(json_field "$E2E_TMP/$name.json" 'd["ops"]')
  mism=$(json_field "$E2E_TMP/$name.json" 'd["mismatches"]')
  tmo=$(json_field "$E2E_TMP/$name.json" 'd["timeouts"]')
  err=$(json_field "$E2E_TMP/$name.json" 'd["errors"]')
  [ "$ops" -gt 1000 ] || { cat "$E2E_TMP/$name.out"; fail "$name: only $ops ops"; }
  [ "$mism" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $mism mismatches"; }
  [ "$tmo" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $tmo timeouts"; }
  [ "$err" -eq 0 ] || { cat "$E2E_TMP/$name.out"; fail "$name: $err error statuses"; }
  pass "$name: $ops ops verified, 0 mismatches, 0 timeouts"
}

# Small key space: many replaces (size class changes) and deletes; values 1..60 B
# straddle the 16 B inline threshold.
check_run mixed --keys 2000 --key-size 8 --value-size 1-60 --load \
  --get 0.5 --put 0.35 --ops-per-packet 8 --window 16 --warmup 0.2 --duration 2 --calibrate 50
# Several QPs, Zipf skew, 1-byte-to-8-byte keys of a different size.
check_run zipf-qps --keys 5000 --key-size 12 --value-size 4-24 \
  --get 0.7 --put 0.2 --dist zipf --qps 4 --ops-per-packet 16 --window 32 --warmup 0.2 --duration 2 --calibrate 50
# Large values: 4 GETs of up to 1000 B do not fit one response frame (MORE flag).
check_run large --keys 300 --key-size 8 --value-size 200-1000 --load \
  --get 0.6 --put 0.3 --ops-per-packet 4 --window 8 --warmup 0.2 --duration 2 --calibrate 50

stop_dataplane
inuse=$(json_field "$E2E_TMP/dp.json" 'd["mbufs_in_use"]')
# Duplicates of served requests and requests after a gap are the transport at work
# (a retransmission after a platform stall longer than the RTO): not errors.
drops=$(json_field "$E2E_TMP/dp.json" 'sum(v for k,v in d.items() if k.startswith("drop_") and k not in ("drop_psn_duplicate", "drop_psn_ahead"))')
replays=$(json_field "$E2E_TMP/dp.json" 'd["replays"]')
[ "$inuse" -eq 0 ] || fail "dataplane ended with $inuse mbufs in use"
[ "$drops" -eq 0 ] || { cat "$E2E_TMP/dp.json"; fail "dataplane dropped $drops frames"; }
pass "dataplane stopped cleanly: 0 mbufs in use, 0 drops ($replays spurious retransmissions answered from the cache)"
# Server-side latency sampling (default one in 64 request packets): a sample for
# about every 64th packet served, and a plausible p50 bucket (between 256 ns and 1 s).
sampled=$(json_field "$E2E_TMP/dp.json" 'd["latency_sampled"]')
lo=$(json_field "$E2E_TMP/dp.json" 'd["requests"] // 128')
hi=$(json_field "$E2E_TMP/dp.json" 'd["rx_packets"] // 64 + 1')
p50=$(json_field "$E2E_TMP/dp.json" 'd["latency_p50_le_ns"]')
[ "$sampled" -ge "$lo" ] && [ "$sampled" -le "$hi" ] \
  || fail "latency samples $sampled not in [$lo, $hi] (requests/128 .. rx_packets/64)"
[ "$p50" -ge 256 ] && [ "$p50" -le 1000000000 ] || fail "latency p50 bucket $p50 ns implausible"
pass "service latency: $sampled samples, p50 <= $p50 ns"
