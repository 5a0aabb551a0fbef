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

fail() { echo "FAIL: malformed: $*"; exit 1; }
source scripts/e2e/tapns.sh
tapns_init malformed
START=$(date +%s)
tapns_start target/release/dataplane --stats-json "$TMP/dp.json"

rc=0
timeout 45 ip netns exec "$NS" python3 scripts/e2e/py/inject.py run \
  --config configs/tap.json --iface kvtap0 --expect "$TMP/expect.json" || rc=$?

tapns_stop
[ -f "$TMP/dp.json" ] || { cat "$TMP/dp.log"; fail "no --stats-json written"; }
[ "$rc" -eq 0 ] || { sed -n '/final stats/,$p' "$TMP/dp.log"; fail "injection cases failed (rc $rc)"; }

python3 scripts/e2e/py/inject.py check --expect "$TMP/expect.json" --stats "$TMP/dp.json" \
  --mbuf-baseline "${DP_BASE:-0}" \
  || { sed -n '/final stats/,$p' "$TMP/dp.log"; fail "dataplane counters differ from the expected ones"; }
echo "PASS: malformed: all cases, counters exact ($(( $(date +%s) - START )) s)"
