#!/usr/bin/env bash
# A/B of pktgen against another revision's pktgen: this revision's dataplane serves
# both, the two pktgen binaries alternate, 5 rounds, on the e2e benchmark's setting
# (95 % GET / 5 % PUT uniform over 100 000 keys, 8 B keys and 2 B values, 32 ops per
# packet, window 64). Echo mode first: there the generator is the limit, so its Mops
# give its cost, 1000 / Mops ns of its core per op, for either binary; then KV mode,
# where the server is the limit. Writes results/ab_pktgen.json (each run's Mops, this
# revision's own TSC figure, the ratio of the medians).
# Usage: scripts/ab_pktgen.sh REV   (e.g. the commit before a change)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab_pktgen.sh REV}
. scripts/ab_lib.sh
AB_PACKAGE=pktgen ab_start "$rev"
flags=(--keys 100000 --key-size 8 --value-size 2 --get 0.95 --put 0.05 --ops-per-packet 32
       --window 64 --warmup 0.3 --duration 2 --calibrate 200)
exec 9>/tmp/kvd-dpdk.lock
flock 9
HEAD_PG=$PG
for mode in echo kv; do
  if [ "$mode" = echo ]; then start_dataplane "abpg-$mode" --echo; else start_dataplane "abpg-$mode"; fi
  extra=()
  if [ "$mode" = echo ]; then
    extra=(--echo)
  else
    run_pktgen "abpg-load" --keys 100000 --key-size 8 --value-size 2 --load --get 1 --put 0 \
      --duration 0.3 --ops-per-packet 32 >/dev/null 2>&1 || fail "load"
  fi
  for round in 1 2 3 4 5; do
    for which in base head; do
      if [ "$which" = base ]; then PG="$AB_OLD/target/release/pktgen"; else PG=$HEAD_PG; fi
      run_pktgen "abpg-$mode-$which-$round" --json "$E2E_TMP/$mode-$which-$round.json" \
        "${flags[@]}" "${extra[@]}" >/dev/null 2>&1 || fail "$which pktgen, $mode mode"
    done
  done
  stop_dataplane
done
python3 - "$E2E_TMP" "$rev" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
tmp, rev, head = sys.argv[1:]
out = {"what": "pktgen of this revision (head) vs of REV (base), alternating, against this revision's "
               "dataplane: memif, 95% GET / 5% PUT uniform 100k keys, 8 B keys, 2 B values, "
               "32 ops/packet, window 64; 5 rounds per mode",
       "command": f"scripts/ab_pktgen.sh {rev}", "base": rev, "head": head}
for mode in ("echo", "kv"):
    runs = {w: [json.load(open(f"{tmp}/{mode}-{w}-{r}.json")) for r in range(1, 6)] for w in ("base", "head")}
    mops = {w: [round(d["throughput_mops"], 3) for d in v] for w, v in runs.items()}
    med = {w: statistics.median(v) for w, v in mops.items()}
    m = {"mops": mops, "median_mops": med, "head_vs_base": round(med["head"] / med["base"], 3),
         "head_generator_ns_per_op": [round(d["generator"]["ns_per_op"], 2) for d in runs["head"]],
         "head_generator_busy_share": [round(d["generator"]["busy_share"], 3) for d in runs["head"]]}
    if mode == "echo":
        # The generator is the limit in echo mode: ns of its core per op.
        m["core_ns_per_op_median"] = {w: round(1e3 / v, 2) for w, v in med.items()}
    out[mode] = m
    print(f"ab {mode}: head {head} {med['head']} Mops vs {rev} {med['base']} Mops -> {m['head_vs_base']}")
json.dump(out, open("results/ab_pktgen.json", "w"), indent=2)
PY
