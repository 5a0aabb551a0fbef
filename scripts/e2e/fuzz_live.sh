#!/usr/bin/env bash
# Live fuzzing (memif): pktgen's verify workload on QP 17 and, in the same process,
# `--fuzz N` mutated request frames on the other client QPs (default N = 200000).
# Then, on the live dataplane after traffic stopped, `ctlplane stats --check` must
# find the accounting invariant holding with the mbufs back at the start level; the
# dataplane must stop cleanly with 0 mbufs in use, and verify must see 0 mismatches.
#
#   scripts/e2e/fuzz_live.sh [N]        # e.g. 10000000 for the long benchmark run
#   FUZZ_SEED=7 FUZZ_DURATION=600 FUZZ_PER_FLUSH=32 scripts/e2e/fuzz_live.sh 10000000
#
# The workload runs FUZZ_DURATION seconds (default: 20, or N/10000 for larger N);
# the fuzzer adds FUZZ_PER_FLUSH frames (default 16) per pktgen transmit flush.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
BIN=${CARGO_TARGET_DIR:-target}/release
DP=$BIN/dataplane
PG=$BIN/pktgen
CTL=$BIN/ctlplane

N=${1:-200000}
SEED=${FUZZ_SEED:-1}
DUR=${FUZZ_DURATION:-$(( N / 10000 > 20 ? N / 10000 : 20 ))}
PER=${FUZZ_PER_FLUSH:-16}

start_dataplane fuzzlive --stats-json "$E2E_TMP/dp.json"
base=$(sed -n 's/.*dataplane ready (mbufs in use \([0-9]*\)).*/\1/p' "$DP_LOG")
[ -n "$base" ] || fail "no mbufs-in-use figure at start"

t0=$(date +%s.%N)
timeout $(( DUR + 120 )) "$PG" --config configs/memif.json \
  --vdev "net_memif0,role=client,id=0,socket=$SOCK,socket-abstract=no,rsize=11" \
  --file-prefix "kvd-e2e-fuzzlive-pg" --json "$E2E_TMP/pg.json" \
  --verify --keys 2000 --key-size 8 --value-size 8 --load --get 0.5 --put 0.4 --atomic 0.1 \
  --ops-per-packet 8 --qps 1 --window 16 --warmup 0.2 --duration "$DUR" --calibrate 50 \
  --fuzz "$N" --fuzz-seed "$SEED" --fuzz-per-flush "$PER" >"$E2E_TMP/pg.out" 2>&1 \
  || { cat "$E2E_TMP/pg.out"; tail -20 "$DP_LOG"; fail "pktgen exited non-zero"; }
t1=$(date +%s.%N)
grep '^fuzz:' "$E2E_TMP/pg.out"
kill -0 "$DP_PID" 2>/dev/null || { tail -30 "$DP_LOG"; fail "dataplane died under fuzzing"; }

ops=$(json_field "$E2E_TMP/pg.json" 'd["ops"]')
mism=$(json_field "$E2E_TMP/pg.json" 'd["mismatches"]')
sent=$(json_field "$E2E_TMP/pg.json" 'd["fuzz"]["sent"]')
[ "$ops" -gt 1000 ] || { cat "$E2E_TMP/pg.out"; fail "verify: only $ops ops"; }
[ "$mism" -eq 0 ] || { cat "$E2E_TMP/pg.out"; fail "verify: $mism mismatches under fuzzing"; }
[ "$sent" -ge "$N" ] || { cat "$E2E_TMP/pg.out"; fail "fuzzer sent $sent of $N frames (longer FUZZ_DURATION?)"; }
rate=$(python3 -c "print(int($sent / ($t1 - $t0)))")
pass "verify: $ops ops, 0 mismatches beside $sent fuzz frames (seed $SEED, ~$rate frames/s over the pktgen run)"

"$CTL" stats --check --file-prefix kvd-e2e-fuzzlive-dp --mbuf-baseline "$base" >"$E2E_TMP/check.out" 2>&1 \
  || { cat "$E2E_TMP/check.out"; fail "ctlplane stats --check on the live dataplane"; }
cat "$E2E_TMP/check.out"
pass "accounting invariant holds on the live dataplane, mbufs in use back at $base"

kill -0 "$DP_PID" 2>/dev/null || fail "dataplane died"
stop_dataplane
grep -q "dataplane: final stats" "$DP_LOG" || { tail -30 "$DP_LOG"; fail "dataplane did not print final stats"; }
inuse=$(json_field "$E2E_TMP/dp.json" 'd["mbufs_in_use"]')
[ "$inuse" -eq "$base" ] || fail "dataplane ended with $inuse mbufs in use (start $base)"
echo "drops by reason:"
json_field "$E2E_TMP/dp.json" '"\n".join(f"  {k[5:]:<22} {v}" for k, v in sorted(d.items()) if k.startswith("drop_"))'
pass "dataplane stopped cleanly, $inuse mbufs in use at exit"

# The benchmark's summary (scripts/bench.sh hardening): FUZZ_JSON=FILE.
if [ -n "${FUZZ_JSON:-}" ]; then
  python3 - "$E2E_TMP/pg.json" "$E2E_TMP/dp.json" "$FUZZ_JSON" "$base" "$t0" "$t1" "$SEED" <<'PY'
import json, sys
pg, dp = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
base, t0, t1, seed = int(sys.argv[4]), float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7])
json.dump({
    "fuzz_frames": pg["fuzz"]["sent"], "fuzz_seed": seed, "seconds": round(t1 - t0, 1),
    "frames_per_s_over_run": int(pg["fuzz"]["sent"] / (t1 - t0)),
    "crashes": 0, "accounting_mismatches": 0,
    "verify_ops": pg["ops"], "verify_mismatches": pg["mismatches"],
    "mbuf_leak": dp["mbufs_in_use"] - base, "rx_packets": dp["rx_packets"],
    "drops": {k[5:]: v for k, v in dp.items() if k.startswith("drop_")},
    "fuzzer": pg["fuzz"],
}, open(sys.argv[3], "w"), indent=1)
PY
fi
