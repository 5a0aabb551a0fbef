#!/usr/bin/env bash
# A/B of the dataplane against another revision on the e2e benchmark's setting (one
# worker, memif, 95 % GET / 5 % PUT uniform, 8 B keys and 2 B values, 32 ops per
# packet, window 64), the two binaries alternating, 5 rounds; this revision's pktgen
# drives both. Writes results/ab_e2e.json with each run's Mops and p50 and the ratio
# of the medians (this revision / REV).
# Usage: scripts/ab_e2e.sh REV   (e.g. the commit before a change)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab_e2e.sh REV}
. scripts/ab_lib.sh
ab_start "$rev"
flags=(--keys 100000 --key-size 8 --value-size 2 --get 0.95 --put 0.05 --ops-per-packet 32
       --window 64 --warmup 0.3 --duration 2 --calibrate 200)
exec 9>/tmp/kvd-dpdk.lock
flock 9
for round in 1 2 3 4 5; do
  for which in base head; do
    ab_use "$which"
    start_dataplane "ab-$which-$round"
    run_pktgen "ab-$which-$round-load" --keys 100000 --key-size 8 --value-size 2 --load --get 1 \
      --put 0 --duration 0.3 --ops-per-packet 32 >/dev/null 2>&1 || fail "load against $which"
    run_pktgen "ab-$which-$round" --json "$E2E_TMP/$which-$round.json" "${flags[@]}" >/dev/null 2>&1 \
      || fail "pktgen against $which"
    stop_dataplane
  done
done
python3 - "$E2E_TMP" "$rev" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
tmp, rev, head = sys.argv[1:]
rounds = range(1, 6)
runs = {w: [json.load(open(f"{tmp}/{w}-{r}.json")) for r in rounds] for w in ("base", "head")}
mops = {w: [round(d["throughput_mops"], 3) for d in v] for w, v in runs.items()}
p50 = {w: [round(d["latency_us"]["p50"], 2) for d in v] for w, v in runs.items()}
med = {w: statistics.median(v) for w, v in mops.items()}
out = {"what": "1 worker, memif, 95% GET / 5% PUT uniform 100k keys, 32 ops/packet, window 64; "
               "Mops per run, binaries alternating (this revision's pktgen for both)",
       "command": f"scripts/ab_e2e.sh {rev}", "base": rev, "head": head, "mops": mops, "p50_us": p50,
       "median_mops": med, "head_vs_base": round(med["head"] / med["base"], 3)}
json.dump(out, open("results/ab_e2e.json", "w"), indent=2)
print(f"ab: head {head} {med['head']} Mops vs {rev} {med['base']} Mops -> {out['head_vs_base']}")
PY
