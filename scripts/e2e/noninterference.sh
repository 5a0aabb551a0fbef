#!/usr/bin/env bash
# Tenant isolation as a property against the live dataplane (docs/SECURITY.md): the
# noninterference fuzzer (crates/kviso) on a raw socket in the tap's namespace —
# tenants with different ACLs and clients without one, every op kind, transactions,
# OPEN/CLOSE/RESUME, hijack attempts, rotations and removals through `ctlplane
# tenants` — each answer checked against the client's own namespace model.
# KVD_ISO_OPS sets the ops (default 200000: the CI's short run; the benchmark runs
# 1 M, scripts/bench.sh tenants).
set -euo pipefail
cd "$(dirname "$0")/../.."

TGT=${CARGO_TARGET_DIR:-target}
cargo build --release -q -p dataplane -p kviso
cargo build --release -q -p ctlplane
fail() { echo "FAIL: noninterference: $*"; exit 1; }
source scripts/e2e/tapns.sh
tapns_init noninterference
tapns_start "$TGT/release/dataplane"
OPS=${KVD_ISO_OPS:-200000}
set +e
nsx timeout 600 "$TGT/release/noninterference_live" --config configs/tap.json --iface kvtap0 \
  --file-prefix "$PREFIX" --ctlplane "$TGT/release/ctlplane" --ops "$OPS" --seed "${KVD_ISO_SEED:-1}" \
  --scratch "$TMP" >"$TMP/iso.json" 2>"$TMP/iso.err"
rc=$?
set -e
cat "$TMP/iso.json"
[ -n "${KVD_ISO_OUT:-}" ] && cp "$TMP/iso.json" "$KVD_ISO_OUT"
[ "$rc" -eq 0 ] || { cat "$TMP/iso.err"; tail -20 "$TMP/dp.log"; fail "exit $rc"; }
tapns_stop
SUMMARY=$(python3 - "$TMP/iso.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
f = d["figures"]
print("%d ops, %d hijack attempts, %d revoked-QP attempts, %d failures"
      % (f["ops"], f["hijack_attempts"], f["revoked_attempts"], d["failures"]))
PY
)
echo "PASS: noninterference: $SUMMARY"
