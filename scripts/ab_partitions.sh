#!/usr/bin/env bash
# A/B of the dataplane's request path against another revision, on 2 workers: the
# e2e partitions workload (pktgen --partitions 2, GET/PUT/atomics, Zipf, verified),
# the two binaries alternating, 3 rounds. Writes results/ab_partitions.json with each
# run's Mops and the ratio of the medians (this revision / REV).
# Usage: scripts/ab_partitions.sh REV   (e.g. the commit before a change)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab_partitions.sh REV}
. scripts/ab_lib.sh
ab_start "$rev"
flags=(--partitions 2 --qps 4 --keys 3000 --value-size 8 --load --dist zipf --get 0.5 --put 0.2
       --atomic 0.2 --ops-per-packet 16 --window 16 --warmup 0.3 --duration 2 --calibrate 20 --verify)
exec 9>/tmp/kvd-dpdk.lock
flock 9
for round in 1 2 3; do
  for which in base head; do
    ab_use "$which"
    start_dataplane "ab-$which-$round" --lcores 0,1
    run_pktgen "ab-$which-$round" --json "$E2E_TMP/$which-$round.json" "${flags[@]}" >/dev/null 2>&1 \
      || fail "pktgen against $which"
    stop_dataplane
  done
done
python3 - "$E2E_TMP" "$rev" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
tmp, rev, head = sys.argv[1:]
runs = {w: [json.load(open(f"{tmp}/{w}-{r}.json")) for r in (1, 2, 3)] for w in ("base", "head")}
mops = {w: [round(d["throughput_mops"], 3) for d in v] for w, v in runs.items()}
med = {w: statistics.median(v) for w, v in mops.items()}
out = {"what": "2 workers, pktgen --partitions 2 GET/PUT/atomics Zipf 3000 keys, verified; "
               "Mops per run, binaries alternating",
       "command": f"scripts/ab_partitions.sh {rev}", "base": rev, "head": head, "mops": mops, "median_mops": med,
       "head_vs_base": round(med["head"] / med["base"], 3)}
json.dump(out, open("results/ab_partitions.json", "w"), indent=2)
print(f"ab: head {head} {med['head']} Mops vs {rev} {med['base']} Mops -> {out['head_vs_base']}")
PY
