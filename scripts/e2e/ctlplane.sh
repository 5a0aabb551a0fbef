#!/usr/bin/env bash
# ctlplane against a running dataplane over DPDK telemetry: counters move with
# traffic, a revoked client QP gets no answers (counted as unknown_qp drops) from
# the moment `clients remove` returns, re-admitting it restores verified service,
# `slab merge` reports per worker, pktgen runs as a tenant (and as a read-only one,
# and with rotated-out credentials), and DPDK's own dpdk-telemetry.py reads /kvd/stats.
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

# Tenants from pktgen (docs/PROTOCOL.md §6.8): with --tenant-file the server opens
# its QPs, granted the tenant's window (max_credits 8), every key in the tenant's
# namespace; the exactly-once check and a verified workload pass there, and the
# tenant's counters hold its requests. A read-only
# tenant's writes are all refused DENIED (nothing lost: its reads still run); after a
# rotation the old credentials open nothing.
ctl tenants add --name gen --id 5 --max-credits 8 --credentials-out "$E2E_TMP/gen.json" >/dev/null
ctl tenants add --name ro --id 6 --acl read --credentials-out "$E2E_TMP/ro.json" >/dev/null
run_pktgen tenant --no-huge --json "$E2E_TMP/tenant.json" --verify --tenant-file "$E2E_TMP/gen.json" \
  --keys 1000 --value-size 8 --load --get 0.5 --put 0.3 --atomic 0.2 --warmup 0.2 --duration 1 \
  --calibrate 50 --timeout-ms 3000 --exactly-once 500 >"$E2E_TMP/tenant.out" 2>&1 \
  || { cat "$E2E_TMP/tenant.out"; fail "tenant: pktgen failed"; }
tops=$(json_field "$E2E_TMP/tenant.json" 'd["ops"]')
tbad=$(json_field "$E2E_TMP/tenant.json" 'd["errors"] + d["mismatches"] + d["timeouts"] + d["readback"]["mismatches"] + d["readback"]["errors"]')
tid=$(json_field "$E2E_TMP/tenant.json" 'd["tenant"]')
tviol=$(json_field "$E2E_TMP/tenant.json" 'd["exactly_once"]["violations"]')
[ "$tops" -gt 1000 ] && [ "$tbad" -eq 0 ] && [ "$tid" = 5 ] && [ "$tviol" = 0 ] \
  || { cat "$E2E_TMP/tenant.out"; fail "tenant: $tops ops, $tbad failures, tenant $tid, exactly-once violations $tviol"; }
echo /kvd/tenants/stats | dpdk-telemetry.py -f "$PREFIX" >"$E2E_TMP/tstats.json"
treq=$(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])["/kvd/tenants/stats"]; print(d["requests"][d["id"].index(5)])' "$E2E_TMP/tstats.json")
[ "$treq" -gt 1000 ] || { cat "$E2E_TMP/tstats.json"; fail "tenant 5 counted $treq requests"; }
grep -q "QPs connected in .* ms, window 8$" "$E2E_TMP/tenant.out" \
  || { cat "$E2E_TMP/tenant.out"; fail "tenant 5's QPs were not granted its 8 credits"; }
pass "tenant 5 via pktgen --tenant-file: window 8 (its max_credits), $tops ops verified, exactly-once clean, $treq requests counted for it"
if run_pktgen readonly --no-huge --json "$E2E_TMP/ro.json.out" --tenant-file "$E2E_TMP/ro.json" \
  --keys 1000 --value-size 8 --get 0.5 --put 0.5 --warmup 0 --duration 0.5 --calibrate 0 \
  --timeout-ms 3000 >"$E2E_TMP/readonly.out" 2>&1; then :; fi
rden=$(json_field "$E2E_TMP/ro.json.out" 'd["denied"]')
rerr=$(json_field "$E2E_TMP/ro.json.out" 'd["errors"]')
rok=$(json_field "$E2E_TMP/ro.json.out" 'd["results_ok"]')
[ "$rden" -gt 100 ] && [ "$rden" -eq "$rerr" ] && [ "$rok" -gt 100 ] \
  || { cat "$E2E_TMP/readonly.out"; fail "read-only tenant: $rden DENIED of $rerr errors, $rok results ok"; }
pass "read-only tenant 6: $rden writes refused DENIED (and nothing else), $rok reads answered"
ctl tenants rotate --id 5 --credentials-out "$E2E_TMP/gen2.json" >/dev/null
if run_pktgen rotated --no-huge --tenant-file "$E2E_TMP/gen.json" --keys 100 --warmup 0 \
  --duration 0.2 --calibrate 0 --connect-timeout-ms 1000 >"$E2E_TMP/rotated.out" 2>&1; then
  cat "$E2E_TMP/rotated.out"; fail "the rotated-out credentials opened QPs"
fi
grep -q "connect: 0 of 4 QPs connected" "$E2E_TMP/rotated.out" \
  || { cat "$E2E_TMP/rotated.out"; fail "rotated credentials: no connect failure reported"; }
pass "tenant 5 rotated: pktgen with the old credentials opens no QP"

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
