#!/usr/bin/env bash
# Malformed-frame robustness of the dataplane on net_tap, inside a private netns.
#
# The dataplane serves kvtap0 (configs/tap.json); scripts/e2e/py/inject.py writes
# hand-built frames into kvtap0 from the kernel side (AF_PACKET) and sniffs the
# answers: a valid PUT/GET first (UD SEND response, status OK, ICRC/IP checksum,
# QPs, Q_Key, PSN, batch id all checked), then one frame per malformed case —
# truncated at every header boundary, IPv4/UDP lengths that lie, bad IPv4
# checksum, bad ICRC, wrong UDP port, not IPv4, not UDP, IP fragment, bad BTH
# opcode/TVer, DMA length mismatch, wrong destination, unknown QP 999, wrong
# R_Key, RETH VA outside the region, bad batch magic, PSN duplicate (each must
# be dropped without response) and two answered payload errors (undefined KV
# opcode -> UNKNOWN_OPCODE, op count beyond the payload -> MALFORMED) — then GETs
# that show the store is intact. Finally the dataplane is stopped with SIGINT and
# its --stats-json must show exactly the expected count per drop reason, no
# other drops, op_errors = 2, and no mbuf leaked.
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo build --release -q -p dataplane -p pktgen

NS="kvd-e2e-mal-$$"
PREFIX="kvd-e2e-malformed-dp-$$"
TMP=$(mktemp -d /tmp/kvd-e2e-malformed.XXXXXX)
DP_PID=""

cleanup() {
  set +e
  if [ -n "$DP_PID" ] && kill -0 "$DP_PID" 2>/dev/null; then
    kill -KILL "$DP_PID" 2>/dev/null; wait "$DP_PID" 2>/dev/null
  fi
  ip netns del "$NS" 2>/dev/null
  rm -rf "$TMP" "/var/run/dpdk/$PREFIX" 2>/dev/null
}
trap cleanup EXIT

fail() { echo "FAIL: malformed: $*"; exit 1; }

if [ "$(id -u)" -ne 0 ] || ! ip netns add "$NS" 2>/dev/null; then
  echo "SKIP: needs root/netns (ip netns add not permitted)"; trap - EXIT; rm -rf "$TMP"; exit 0
fi
nsx() { ip netns exec "$NS" "$@"; }
nsx ip link set lo up
# No IPv6 (router/neighbour solicitations) on the taps: only our frames reach the dataplane.
nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1

START=$(date +%s)
# `ip netns exec` execs the program: $! is the dataplane's own PID.
: >"$TMP/dp.log"  # exists before the wait loop greps it
ip netns exec "$NS" target/release/dataplane --config configs/tap.json --no-huge \
  --file-prefix "$PREFIX" --mem-mb 64 --stats-json "$TMP/dp.json" >"$TMP/dp.log" 2>&1 &
DP_PID=$!
for _ in $(seq 1 200); do
  grep -q "dataplane ready" "$TMP/dp.log" && break
  kill -0 "$DP_PID" 2>/dev/null || { cat "$TMP/dp.log"; fail "dataplane exited early"; }
  sleep 0.1
done
grep -q "dataplane ready" "$TMP/dp.log" || { cat "$TMP/dp.log"; fail "dataplane not ready in 20 s"; }
# mbufs the PMD holds in its rx ring at start (net_tap pre-fills it): the baseline.
BASE=$(sed -n 's/.*dataplane ready (mbufs in use \([0-9]*\)).*/\1/p' "$TMP/dp.log")
for _ in $(seq 1 50); do
  nsx ip link show kvtap0 2>/dev/null | grep -q ",UP" && break
  sleep 0.1
done
nsx ip link show kvtap0 | grep -q ",UP" || fail "kvtap0 not up"

rc=0
timeout 45 ip netns exec "$NS" python3 scripts/e2e/py/inject.py run \
  --config configs/tap.json --iface kvtap0 --expect "$TMP/expect.json" || rc=$?

kill -INT "$DP_PID"
for _ in $(seq 1 100); do kill -0 "$DP_PID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$DP_PID" 2>/dev/null; then fail "dataplane did not stop on SIGINT"; fi
wait "$DP_PID" || fail "dataplane exited with status $?"
DP_PID=""
[ -f "$TMP/dp.json" ] || { cat "$TMP/dp.log"; fail "no --stats-json written"; }
[ "$rc" -eq 0 ] || { sed -n '/final stats/,$p' "$TMP/dp.log"; fail "injection cases failed (rc $rc)"; }

python3 scripts/e2e/py/inject.py check --expect "$TMP/expect.json" --stats "$TMP/dp.json" \
  --mbuf-baseline "${BASE:-0}" \
  || { sed -n '/final stats/,$p' "$TMP/dp.log"; fail "dataplane counters differ from the expected ones"; }
echo "PASS: malformed: all cases, counters exact ($(( $(date +%s) - START )) s)"
