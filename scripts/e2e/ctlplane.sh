#!/usr/bin/env bash
# ctlplane against a running dataplane over DPDK telemetry: counters move with
# traffic, a revoked client QP gets no answers (counted as unknown_qp drops) from
# the moment `clients remove` returns, re-admitting it restores verified service,
# `slab merge` reports per worker, and DPDK's own dpdk-telemetry.py reads /kvd/stats.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

CTL=target/release/ctlplane
PREFIX=kvd-e2e-ctl-dp
ctl() { "$CTL" "$@" --file-prefix "$PREFIX"; }
# stat FILE EXPR: a value from a saved `ctlplane stats --json`.
stat() { json_field "$1" "$2"; }

start_dataplane ctl --no-huge --stats-json "$E2E_TMP/dp.json"

# Counters move between two reads.
ctl stats --json >"$E2E_TMP/s0.json"
run_pktgen traffic --no-huge --json "$E2E_TMP/traffic.json" --verify --timeout-ms 3000 \
  --keys 2000 --key-size 8 --value-size 1-60 --load --get 0.5 --put 0.35 --qps 4 \
  --ops-per-packet 8 --window 16 --warmup 0.2 --duration 1 --calibrate 50 \
  >"$E2E_TMP/traffic.out" 2>&1 || { cat "$E2E_TMP/traffic.out"; fail "traffic: pktgen failed"; }
ctl stats --json >"$E2E_TMP/s1.json"
rx0=$(stat "$E2E_TMP/s0.json" 'd["total"]["rx_packets"]')
rx1=$(stat "$E2E_TMP/s1.json" 'd["total"]["rx_packets"]')
ops1=$(stat "$E2E_TMP/s1.json" 'd["total"]["ops"]')
w0ops=$(stat "$E2E_TMP/s1.json" 'd["per_worker"]["0"]["ops"]')
[ "$rx1" -gt "$rx0" ] || fail "stats: rx_packets did not move ($rx0 -> $rx1)"
[ "$ops1" -gt 1000 ] && [ "$ops1" -eq "$w0ops" ] || fail "stats: ops total $ops1 vs worker 0 $w0ops"
ctl stats >"$E2E_TMP/table.txt"
grep -Eq '^ops +[0-9]+ +[0-9]+$' "$E2E_TMP/table.txt" || { cat "$E2E_TMP/table.txt"; fail "stats table"; }
ctl watch --interval 0.2 --count 2 >"$E2E_TMP/watch.txt"
grep -q 'worker0/s' "$E2E_TMP/watch.txt" || { cat "$E2E_TMP/watch.txt"; fail "watch output"; }
pass "stats: rx_packets $rx0 -> $rx1, $ops1 ops; table and watch render"

# Revoke QPN 20 (the 4th client of configs/memif.json): a client on that QP alone
# cannot even connect (its CONNECTs are unknown_qp drops, never answered).
ctl clients remove --qpn 20 | tee "$E2E_TMP/remove.txt"
grep -q 'revoked qpn 20' "$E2E_TMP/remove.txt" || fail "clients remove"
if ctl clients remove --qpn 20 2>"$E2E_TMP/remove2.err"; then fail "second remove accepted"; fi
grep -q 'not admitted' "$E2E_TMP/remove2.err" || fail "second remove: $(cat "$E2E_TMP/remove2.err")"
ctl clients list | grep -Eq '^ +20 ' && fail "QPN 20 still listed"
u0=$(stat "$E2E_TMP/s1.json" 'd["total"]["drop"]["unknown_qp"]')
if run_pktgen revoked --no-huge --json "$E2E_TMP/revoked.json" --qp-first 3 --qps 1 \
  --keys 1000 --warmup 0 --duration 1 --calibrate 0 --connect-timeout-ms 1000 \
  >"$E2E_TMP/revoked.out" 2>&1; then
  cat "$E2E_TMP/revoked.out"; fail "a client on the revoked QP ran"
fi
grep -q "connect: 0 of 1 QPs connected" "$E2E_TMP/revoked.out" \
  || { cat "$E2E_TMP/revoked.out"; fail "revoked QP: no connect failure reported"; }
ctl stats --json >"$E2E_TMP/s2.json"
u1=$(stat "$E2E_TMP/s2.json" 'd["total"]["drop"]["unknown_qp"]')
[ "$u1" -gt "$u0" ] || fail "unknown_qp drops did not grow ($u0 -> $u1)"
pass "revoked QPN 20: connection refused (never answered), unknown_qp drops $u0 -> $u1"

# Re-admit it: verified service on that QP alone.
ctl clients add --qpn 20 --rkey 0x1234567b | tee "$E2E_TMP/add.txt"
grep -q 'admitted qpn 20' "$E2E_TMP/add.txt" || fail "clients add"
run_pktgen readmitted --no-huge --json "$E2E_TMP/readmitted.json" --verify --qp-first 3 --qps 1 \
  --keys 1000 --value-size 20-200 --load --get 0.5 --put 0.3 --warmup 0.2 --duration 1 \
  --calibrate 50 --timeout-ms 3000 >"$E2E_TMP/readmitted.out" 2>&1 \
  || { cat "$E2E_TMP/readmitted.out"; fail "readmitted: pktgen --verify failed"; }
aops=$(json_field "$E2E_TMP/readmitted.json" 'd["ops"]')
atmo=$(json_field "$E2E_TMP/readmitted.json" 'd["timeouts"]')
amis=$(json_field "$E2E_TMP/readmitted.json" 'd["mismatches"]')
[ "$aops" -gt 1000 ] && [ "$atmo" -eq 0 ] && [ "$amis" -eq 0 ] \
  || fail "readmitted: $aops ops, $atmo timeouts, $amis mismatches"
pass "re-admitted QPN 20: $aops ops verified, 0 timeouts"

# Slab merge: a report per worker (the runs above freed slab blocks by replaces
# and deletes, so the pass has free blocks to scan).
ctl slab merge --json >"$E2E_TMP/merge.json"
req=$(json_field "$E2E_TMP/merge.json" 'd["request"]')
scanned=$(json_field "$E2E_TMP/merge.json" 'd["per_worker"]["0"]["scanned"]')
merged=$(json_field "$E2E_TMP/merge.json" 'd["per_worker"]["0"]["merged_total"]')
[ "$req" -ge 1 ] && [ "$scanned" -gt 0 ] || { cat "$E2E_TMP/merge.json"; fail "slab merge report"; }
# Into a file, not a pipe: `grep -q` exits at its first match, and with pipefail the
# writer's broken pipe would fail the step.
ctl slab merge >"$E2E_TMP/merge.txt" || fail "slab merge table: ctlplane failed"
grep -q '^worker 0: scanned' "$E2E_TMP/merge.txt" || { cat "$E2E_TMP/merge.txt"; fail "slab merge table"; }
pass "slab merge: request $req, worker 0 scanned $scanned free blocks, merged $merged pairs"

# DPDK's own client reads the same commands.
echo /kvd/stats | dpdk-telemetry.py -f "$PREFIX" >"$E2E_TMP/py.json"
python3 - "$E2E_TMP/py.json" <<'PY' || fail "dpdk-telemetry.py /kvd/stats"
import json, sys
d = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["/kvd/stats"]
assert d["workers"] == 1 and d["total"]["ops"] > 0, d
assert d["total"]["drop"]["unknown_qp"] > 0, d
PY
echo "/kvd/clients/remove,notanumber" | dpdk-telemetry.py -f "$PREFIX" | grep -q '"error"' \
  || fail "bad params not answered with an error"
pass "dpdk-telemetry.py -f $PREFIX reads /kvd/stats; bad params answered with an error"

stop_dataplane
[ "$(json_field "$E2E_TMP/dp.json" 'd["mbufs_in_use"]')" -eq 0 ] || fail "mbufs leaked"
pass "dataplane stopped cleanly"
