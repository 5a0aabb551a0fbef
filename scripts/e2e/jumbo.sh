#!/usr/bin/env bash
# Jumbo frames (`server.mtu: 9000`): the dataplane and pktgen size their mbufs and memif
# buffers for 9014-byte frames.
#  1. PUT/GET of 3000-byte values, several per packet, every answer verified and every
#     key read back: requests and responses far beyond a 1500-byte frame.
#  2. (4, 2) bank transfers of 1 KiB accounts, one request each (~6 KiB: four 1 KiB
#     EQUALS conditions and two 1 KiB PUTs) and the one-round-trip-per-op baseline:
#     nothing aborts, every balance reads back as committed.
#  The dataplane must see next to no duplicate requests (memif's copy path between
#  9 KiB mbufs and 2 KiB memif buffers repeated frames by the million) and drop nothing.
#  3. The same transaction at the default MTU 1500 fails with an error naming server.mtu.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

E2E_CONFIG="$E2E_TMP/jumbo.json"
python3 - "$E2E_CONFIG" <<'EOF'
import json, sys
c = json.load(open("configs/memif.json"))
c["server"]["mtu"] = 9000
c["dataplane"]["mbufs"] = c["pktgen"]["mbufs"] = 4095
json.dump(c, open(sys.argv[1], "w"), indent=2)
EOF

start_dataplane jumbo --stats-json "$E2E_TMP/dp.json"
grep -q "bsize=9216" "$DP_LOG" || { cat "$DP_LOG"; fail "memif vdev without bsize=9216"; }

run_pktgen big --keys 2000 --value-size 3000 --load --get 0.5 --put 0.5 --ops-per-packet 2 \
  --window 8 --warmup 0.2 --duration 1.5 --verify --timeout-ms 5000 --json "$E2E_TMP/big.json" \
  >"$E2E_TMP/big.out" 2>&1 || { cat "$E2E_TMP/big.out"; fail "big values: pktgen exited non-zero"; }
ops=$(json_field "$E2E_TMP/big.json" 'd["ops"]')
bad=$(json_field "$E2E_TMP/big.json" 'd["mismatches"] + d["timeouts"] + d["errors"] + d["readback"]["mismatches"] + d["readback"]["errors"] + d["readback"]["timeouts"]')
[ "$ops" -gt 1000 ] && [ "$bad" -eq 0 ] || { cat "$E2E_TMP/big.out"; fail "big values: $ops ops, $bad failures"; }
pass "big values: $ops PUT/GET of 3000 B verified at MTU 9000, read-back exact"

for mode in design baseline; do
  extra=(); [ "$mode" = baseline ] && extra=(--tx-baseline)
  run_pktgen "tx-$mode" --tx 4,2 --keys 2000 --value-size 1024 --key-size $([ "$mode" = design ] && echo 10 || echo 11) \
    --warmup 0.2 --duration 1.5 --timeout-ms 5000 --json "$E2E_TMP/tx-$mode.json" "${extra[@]}" \
    >"$E2E_TMP/tx-$mode.out" 2>&1 || { cat "$E2E_TMP/tx-$mode.out"; fail "tx $mode: pktgen exited non-zero"; }
  c=$(json_field "$E2E_TMP/tx-$mode.json" 'd["committed"]')
  a=$(json_field "$E2E_TMP/tx-$mode.json" 'd["aborted"]')
  inv=$(json_field "$E2E_TMP/tx-$mode.json" 'd["invariant_holds"]')
  [ "$c" -gt 100 ] && [ "$a" -eq 0 ] && [ "$inv" = True ] || { cat "$E2E_TMP/tx-$mode.out"; fail "tx $mode: $c committed, $a aborted, invariant $inv"; }
  pass "tx (4,2) 1 KiB $mode: $c committed, 0 aborted, every balance as committed ($(json_field "$E2E_TMP/tx-$mode.json" 'round(d["avg_us"], 1)') us avg)"
done
stop_dataplane

dup=$(json_field "$E2E_TMP/dp.json" 'd.get("drop_psn_duplicate", 0)')
drops=$(json_field "$E2E_TMP/dp.json" 'sum(v for k,v in d.items() if k.startswith("drop_") and k not in ("drop_psn_duplicate", "drop_psn_ahead", "drop_tx_full"))')
inuse=$(json_field "$E2E_TMP/dp.json" 'd["mbufs_in_use"]')
# Duplicates are retransmissions after a stall of this shared 2-core host: a few.
[ "$dup" -le 2000 ] || { cat "$E2E_TMP/dp.json"; fail "$dup duplicate requests"; }
[ "$drops" -eq 0 ] && [ "$inuse" -eq 0 ] || { cat "$E2E_TMP/dp.json"; fail "drops $drops, mbufs in use $inuse"; }
pass "dataplane at MTU 9000: $dup duplicate requests, 0 drops, 0 mbufs leaked"

# The default MTU: the transaction does not fit one request, and pktgen says so.
E2E_CONFIG=configs/memif.json
start_dataplane mtu1500
if run_pktgen small --tx 4,2 --keys 100 --value-size 1024 --duration 0.3 --warmup 0 \
  >"$E2E_TMP/small.out" 2>&1; then
  cat "$E2E_TMP/small.out"; fail "a (4,2) 1 KiB transaction ran at MTU 1500"
fi
grep -q "does not fit one request packet at server.mtu 1500: raise server.mtu" "$E2E_TMP/small.out" \
  || { cat "$E2E_TMP/small.out"; fail "no error naming server.mtu"; }
stop_dataplane
pass "MTU 1500: the (4,2) 1 KiB transaction is refused by the client with an error naming server.mtu"
