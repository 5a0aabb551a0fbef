#!/usr/bin/env bash
# `ctlplane metrics` against a running dataplane: every scrape passes
# `promtool check metrics`, counters grow with traffic, the service-latency histogram
# counts exactly the samples `ctlplane stats` reports (about responses / sample_every),
# the exporter answers `kvd_up 0` once the dataplane is gone and `kvd_up 1` again
# after it restarts, and configs/grafana/kvd-dashboard.json parses and uses exported metrics.
# Binaries come from ${CARGO_TARGET_DIR:-target}/release.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh

TARGET_DIR=${CARGO_TARGET_DIR:-target}
DP=$TARGET_DIR/release/dataplane
PG=$TARGET_DIR/release/pktgen
CTL=$TARGET_DIR/release/ctlplane
PREFIX=kvd-e2e-metrics-dp
for b in "$DP" "$PG" "$CTL"; do [ -x "$b" ] || fail "$b not built"; done
command -v promtool >/dev/null || fail "promtool not found (scripts/setup.sh installs Debian's prometheus)"

# scrape NAME: GET /metrics into $E2E_TMP/NAME.prom; it must pass promtool.
scrape() {
  python3 - "$URL" "$E2E_TMP/$1.prom" <<'PY' || fail "scrape $1: no answer from $URL"
import sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=10) as r:
    assert r.status == 200, r.status
    assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers
    open(sys.argv[2], "wb").write(r.read())
PY
  promtool check metrics <"$E2E_TMP/$1.prom" >"$E2E_TMP/$1.promtool" 2>&1 \
    || { cat "$E2E_TMP/$1.promtool"; fail "scrape $1: promtool check metrics"; }
}
# msum NAME METRIC: the sum of METRIC's samples (all label sets) in scrape NAME.
msum() {
  python3 - "$E2E_TMP/$1.prom" "$2" <<'PY'
import sys
total = 0.0
for line in open(sys.argv[1]):
    if line.startswith("#") or not line.strip():
        continue
    series, value = line.rsplit(" ", 1)
    if series.split("{", 1)[0] == sys.argv[2]:
        total += float(value)
print(int(total) if total == int(total) else total)
PY
}

# Two workers (lcores 0 and 1, each a key partition; pktgen shares core 0), so
# every per-worker series comes twice and totals are sums over `worker`.
start_dataplane metrics --no-huge --lcores 0,1

# The exporter on a free port (it prints the address it took).
"$CTL" metrics --listen 127.0.0.1:0 --file-prefix "$PREFIX" --timeout-ms 3000 \
  >"$E2E_TMP/exporter.log" 2>&1 &
EXP_PID=$!
E2E_PIDS+=("$EXP_PID")
URL=""
for _ in $(seq 1 100); do
  URL=$(sed -n 's|^ctlplane metrics: serving \(http://[^ ]*\) .*|\1|p' "$E2E_TMP/exporter.log")
  [ -n "$URL" ] && break
  kill -0 "$EXP_PID" 2>/dev/null || { cat "$E2E_TMP/exporter.log"; fail "exporter exited"; }
  sleep 0.1
done
[ -n "$URL" ] || { cat "$E2E_TMP/exporter.log"; fail "exporter did not start"; }
python3 - "${URL%/metrics}/" <<'PY' || fail "exporter / page"
import sys, urllib.request
assert b"/metrics" in urllib.request.urlopen(sys.argv[1], timeout=10).read()
PY
scrape idle
[ "$(msum idle kvd_up)" = 1 ] || fail "idle: kvd_up $(msum idle kvd_up)"
[ "$(msum idle kvd_workers)" = 2 ] && [ "$(grep -c '^kvd_rx_packets_total{worker=' "$E2E_TMP/idle.prom")" = 2 ] \
  || fail "idle: want 2 workers' series"
pass "exporter at $URL: kvd_up 1, 2 workers' series, promtool clean before traffic"

# Closed-loop GETs and PUTs; one scrape while they run, one after.
run_pktgen traffic --no-huge --json "$E2E_TMP/traffic.json" --verify --timeout-ms 3000 \
  --keys 2000 --key-size 8 --value-size 1-60 --load --get 0.6 --put 0.4 --partitions 2 --qps 4 \
  --ops-per-packet 8 --window 16 --warmup 0.2 --duration 3 --calibrate 50 \
  >"$E2E_TMP/traffic.out" 2>&1 &
PG_PID=$!
E2E_PIDS+=("$PG_PID")
during=0
for _ in $(seq 1 200); do
  scrape during
  [ "$(msum during kvd_responses_total)" -gt 1000 ] && { during=1; break; }
  kill -0 "$PG_PID" 2>/dev/null || break
  sleep 0.1
done
wait "$PG_PID" || { cat "$E2E_TMP/traffic.out"; fail "traffic: pktgen failed"; }
[ "$during" -eq 1 ] || fail "no responses seen by the exporter while pktgen ran"
scrape after
"$CTL" stats --json --file-prefix "$PREFIX" >"$E2E_TMP/stats.json"
"$CTL" stats --file-prefix "$PREFIX" >"$E2E_TMP/table.txt"
for m in kvd_rx_packets_total kvd_tx_packets_total kvd_requests_total kvd_responses_total \
  kvd_ops_total kvd_service_latency_seconds_count; do
  a=$(msum during "$m"); b=$(msum after "$m")
  [ "$b" -gt "$a" ] || fail "$m did not grow between scrapes ($a -> $b)"
done
pass "promtool clean during and after traffic; counters grew ($(msum during kvd_ops_total) -> $(msum after kvd_ops_total) ops)"

count=$(msum after kvd_service_latency_seconds_count)
inf=$(python3 - "$E2E_TMP/after.prom" <<'PY'
import sys
print(int(sum(float(l.rsplit(" ", 1)[1]) for l in open(sys.argv[1])
              if l.startswith("kvd_service_latency_seconds_bucket{") and 'le="+Inf"' in l)))
PY
)
sampled=$(json_field "$E2E_TMP/stats.json" 'd["total"]["latency"]["sampled"]')
every=$(json_field "$E2E_TMP/stats.json" 'd["total"]["latency"]["sample_every"]')
# One in `every` received packets is sampled (retransmitted requests too, which are
# replayed rather than answered anew): compare with rx, not with responses.
resp=$(json_field "$E2E_TMP/stats.json" 'd["total"]["rx_packets"]')
[ "$count" -gt 0 ] && [ "$count" -eq "$sampled" ] && [ "$inf" -eq "$count" ] \
  || fail "latency: exported count $count (+Inf $inf) vs sampled $sampled"
python3 -c "import sys; c, r, n = map(int, sys.argv[1:]); e = r / n; sys.exit(not (0.5 * e <= c <= 1.2 * e + 2))" \
  "$count" "$resp" "$every" || fail "latency: $count samples for $resp received packets, 1 in $every"
grep -Eq '^latency\.p99 +<=' "$E2E_TMP/table.txt" || { cat "$E2E_TMP/table.txt"; fail "stats table: no latency.p99 row"; }
pass "latency: $count samples exported = sampled, $resp received packets / $every; stats table: $(grep '^latency.p50' "$E2E_TMP/table.txt" | tr -s ' ')"

# Every kvd_ metric the dashboard queries is exported.
python3 - configs/grafana/kvd-dashboard.json "$E2E_TMP/after.prom" <<'PY' || fail "configs/grafana/kvd-dashboard.json"
import json, re, sys
d = json.load(open(sys.argv[1]))
exported = {re.split(r"[{ ]", l, 1)[0] for l in open(sys.argv[2]) if not l.startswith("#")}
exported |= {re.sub(r"_(bucket|sum|count)$", "", n) for n in exported}
used = {m for p in d["panels"] for t in p.get("targets", []) for m in re.findall(r"kvd_\w+", t["expr"])}
# The replication panels' metrics come from replicated nodes only (this one is
# standalone): ctlplane's unit test renders them from a /kvd/replication reply.
used = {m for m in used if not m.startswith("kvd_repl_")}
assert d["templating"]["list"][0]["type"] == "datasource", "no datasource variable"
missing = used - exported
assert used and not missing, f"dashboard uses metrics not exported: {missing}"
print(f"dashboard: {len(d['panels'])} panels, {len(used)} metrics")
PY
pass "configs/grafana/kvd-dashboard.json parses; its metrics are exported"

# Dataplane frozen (SIGSTOP): a scrape still ends within the exporter's budget
# (--timeout-ms 3000, under the 4 s scrape timeout the docs configure), kvd_up 0;
# the next scrape after SIGCONT is up again.
kill -STOP "$DP_PID"
t0=$(date +%s.%N)
scrape frozen
t1=$(date +%s.%N)
kill -CONT "$DP_PID"
secs=$(python3 -c "print(round($t1 - $t0, 2))")
[ "$(msum frozen kvd_up)" = 0 ] || { cat "$E2E_TMP/frozen.prom"; fail "frozen: want kvd_up 0"; }
python3 -c "import sys; sys.exit(0 if $secs < 4 else 1)" || fail "frozen: the scrape took $secs s (budget 3 s)"
scrape thawed
[ "$(msum thawed kvd_up)" = 1 ] || fail "thawed: kvd_up $(msum thawed kvd_up)"
pass "dataplane frozen: scrape answered in $secs s with kvd_up 0, up again after SIGCONT"

# Dataplane gone: the exporter keeps answering, with kvd_up 0 only.
stop_dataplane
scrape down
[ "$(msum down kvd_up)" = 0 ] \
  && [ "$(grep -v '^#' "$E2E_TMP/down.prom" | grep -vc '^kvd_\(build_info\|exporter_\)')" -eq 1 ] \
  || { cat "$E2E_TMP/down.prom"; fail "down: want only kvd_up 0 (and the exporter's own)"; }
kill -0 "$EXP_PID" 2>/dev/null || fail "exporter died with the dataplane"
pass "dataplane stopped: exporter answers kvd_up 0 only (and its own series)"

# A new dataplane under the same prefix: up again, counters from that process.
rm -f "$E2E_TMP/metrics.sock"
start_dataplane metrics --no-huge --lcores 0,1
scrape restarted
[ "$(msum restarted kvd_up)" = 1 ] || fail "restarted: kvd_up $(msum restarted kvd_up)"
r=$(msum restarted kvd_responses_total)
[ "$r" -lt "$resp" ] || fail "restarted: responses $r, want the new process's (< $resp)"
pass "dataplane restarted: kvd_up 1, counters of the new process ($r responses)"
stop_dataplane
kill "$EXP_PID" 2>/dev/null || true
