#!/usr/bin/env bash
# Tenants end to end (docs/PROTOCOL.md §6.8, issue 32): a dataplane on net_tap in a
# private netns; `ctlplane tenants add` makes two tenants (one read-only) and writes
# their credentials files; kvcli and the Python binding use them. Checked: the same
# application key is private to each tenant and to clients without one; the read-only
# tenant's write is refused DENIED; a rotated secret stops the old credentials at once
# while the new ones work; a removed tenant's credentials open nothing; the counters
# (`denied`, `bad_credential`) and `ctlplane tenants list` agree. The dataplane runs
# `--idle adaptive`: between the kvcli calls its worker sleeps, woken by the tap
# queue's Rx interrupt (every request above is answered across those sleeps; the
# worker's `idle_rx_wakeups` counts them).
set -euo pipefail
cd "$(dirname "$0")/../.."

TGT=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p dataplane -p kvcli
cargo build --release -q -p ctlplane
KVCLI="$TGT/release/kvcli"
CTL="$TGT/release/ctlplane"

FAILS=0
CASES=0
fail() { echo "FAIL: tenants: $*"; exit 1; }
source scripts/e2e/tapns.sh
tapns_init tenants
START=$(date +%s)
tapns_start "$TGT/release/dataplane" --idle adaptive --stats-json "$TMP/dp.json"
ctl() { "$CTL" "$@" --file-prefix "$PREFIX"; }

check() { # name ok detail
  CASES=$((CASES + 1))
  if [ "$2" = 1 ]; then echo "PASS: tenants/$1: $3"; else FAILS=$((FAILS + 1)); echo "FAIL: tenants/$1: $3"; fi
}
# kv CREDS ARGS...: kvcli as tenant CREDS ("-" for none); sets OUT, RC.
kv() {
  local creds=$1; shift
  local t=()
  [ "$creds" != - ] && t=(--tenant-file "$creds")
  set +e
  OUT=$(HOME="$TMP" timeout 20 ip netns exec "$NS" "$KVCLI" --config configs/tap.json \
    --iface kvtap0 --timeout-ms 500 "${t[@]}" "$@" 2>&1)
  RC=$?
  set -e
}

ctl tenants add --name app --id 7 --credentials-out "$TMP/app.json" >/dev/null
ctl tenants add --name reader --id 9 --acl read --credentials-out "$TMP/reader.json" >/dev/null
LIST=$(ctl tenants list)
ROWS=$(echo "$LIST" | grep -c -E '^ +(7 +app +read,write,atomic,txn|9 +reader +read) ' || true)
check list "$([ "$ROWS" = 2 ] && echo 1 || echo 0)" "$(echo "$LIST" | tail -n 2 | tr -s ' ' | tr '\n' '|')"
[ "$(stat -c %a "$TMP/app.json")" = 600 ] && m=1 || m=0
check credentials-file-private "$m" "mode $(stat -c %a "$TMP/app.json")"

kv "$TMP/app.json" put shared from-app;   rc1=$RC
kv - put shared from-anonymous;           rc2=$RC
kv "$TMP/app.json" get shared;            a=$OUT
kv - get shared;                          n=$OUT
kv "$TMP/reader.json" get shared;         r=$OUT; rr=$RC
check isolation "$([ "$rc1$rc2" = 00 ] && [ "$a" = from-app ] && [ "$n" = from-anonymous ] && [ "$rr" = 1 ] && echo 1 || echo 0)" \
  "app sees '$a', no tenant sees '$n', reader: exit $rr ($r)"
kv "$TMP/reader.json" put shared x
check read-only-denied "$([ "$RC" = 2 ] && echo "$OUT" | grep -q DENIED && echo 1 || echo 0)" "exit $RC: $OUT"

# Python with the tenant's credentials: the same namespace as kvcli's.
PY=$(ip netns exec "$NS" timeout 20 python3 -c '
import kvdirect, sys
c = kvdirect.Client("kvtap0", config="configs/tap.json", tenant_file=sys.argv[1])
print(c.get(b"shared").decode())
c.close()' "$TMP/app.json" 2>&1 || true)
check python-tenant "$([ "$PY" = from-app ] && echo 1 || echo 0)" "python as app reads '$PY'"

ctl tenants rotate --id 7 --credentials-out "$TMP/app2.json" >/dev/null
kv "$TMP/app.json" get shared; old=$RC
kv "$TMP/app2.json" get shared; new=$RC; v=$OUT
check rotate "$([ "$old" = 3 ] && [ "$new" = 0 ] && [ "$v" = from-app ] && echo 1 || echo 0)" \
  "old credentials exit $old (unreachable), new exit $new reads '$v'"
ctl tenants remove --id 9 >/dev/null
kv "$TMP/reader.json" get shared
check remove "$([ "$RC" = 3 ] && echo 1 || echo 0)" "removed tenant's credentials: exit $RC"

STATS=$(ctl stats --json)
DEN=$(echo "$STATS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"]["denied"])')
BAD=$(echo "$STATS" | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"]["drop"]["bad_credential"])')
check counters "$([ "$DEN" -ge 1 ] && [ "$BAD" -ge 2 ] && echo 1 || echo 0)" "denied $DEN, bad_credential $BAD"

# The per-tenant series of the exporter (bounded: one per tenant, `other` beyond 64),
# promtool-clean.
"$CTL" metrics --listen 127.0.0.1:0 --file-prefix "$PREFIX" >"$TMP/exporter.log" 2>&1 &
EXP=$!
URL=""
for _ in $(seq 1 100); do
  URL=$(sed -n 's|^ctlplane metrics: serving \(http://[^ ]*\) .*|\1|p' "$TMP/exporter.log")
  [ -n "$URL" ] && break
  sleep 0.1
done
python3 - "$URL" "$TMP/m.prom" <<'PY' || true
import sys, urllib.request
open(sys.argv[2], "wb").write(urllib.request.urlopen(sys.argv[1], timeout=10).read())
PY
kill "$EXP" 2>/dev/null || true
REQ=$(sed -n 's/^kvd_tenant_requests_total{tenant="7"} \([0-9]*\)$/\1/p' "$TMP/m.prom")
DEN9=$(sed -n 's/^kvd_tenant_denied_total{tenant="9"} \([0-9]*\)$/\1/p' "$TMP/m.prom")
PROM=0
promtool check metrics <"$TMP/m.prom" >/dev/null 2>&1 && PROM=1
check tenant-metrics "$([ "$PROM" = 1 ] && [ "${REQ:-0}" -ge 3 ] && echo 1 || echo 0)" \
  "promtool clean $PROM, kvd_tenant_requests_total{tenant=\"7\"} ${REQ:-none} (tenant 9 was removed: ${DEN9:-no series})"

tapns_stop
INTR=0
grep -q "idle workers wake on Rx interrupts (net_tap)" "$TMP/dp.log" && INTR=1
WAKES=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["idle_rx_wakeups"])' "$TMP/dp.json")
check rx-interrupts "$([ "$INTR" = 1 ] && [ "$WAKES" -ge 5 ] && echo 1 || echo 0)" \
  "adaptive idle on net_tap: Rx interrupts $INTR, $WAKES sleeps ended by a packet"
[ "$FAILS" = 0 ] || fail "$FAILS of $CASES cases failed"
echo "PASS: tenants: $CASES cases ($(( $(date +%s) - START )) s)"
