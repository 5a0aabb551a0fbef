#!/usr/bin/env bash
# A/B of replicated cross-partition transactions against another revision: the e2e
# cross_repl setup (a master and a sync replica with 2 workers each, min_replicas 1)
# running (4, 2) bank transfers from 4 QPs for 2 s, the two revisions' binaries
# alternating (master and replica of one revision together), 3 rounds. Writes
# results/ab_cross_repl.json with each run's transactions/s, average and p99 latency,
# and the ratios of the medians (this revision / REV).
# Usage: scripts/ab_cross_repl.sh REV   (e.g. the commit before a change)
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:?usage: scripts/ab_cross_repl.sh REV}
. scripts/ab_lib.sh
ab_start "$rev"
exec 9>/tmp/kvd-dpdk.lock
flock 9
for round in 1 2 3; do
  for which in base head; do
    ab_use "$which"
    D="$E2E_TMP/$which-$round"
    python3 scripts/cluster_config.py "$D" 1 --prefix "kvd-ab-xrepl" --mode sync --min-replicas 1 \
      --probe-ms 50 --waiting-ms 500 --lcores 0@0,1@1,2@1 >/dev/null
    start_node "$D" 0
    start_node "$D" 1
    wait_repl "replica online" 30 "$D" 0 'd["peers"]["0"]["state"] == "online"'
    timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$E2E_TMP/$which-$round.json" \
      --partitions 2 --qps 4 --rto-min-us 5000 --timeout-ms 2000 --warmup 0.3 --duration 2 \
      --tx 4,2 --keys 5000 --value-size 64 --seed "$round" >"$D/pg.out" 2>&1 \
      || { cat "$D/pg.out"; fail "pktgen against $which"; }
    stop_node "$D" 1
    stop_node "$D" 0
  done
done
python3 - "$E2E_TMP" "$rev" "$(git rev-parse --short HEAD)" <<'PY'
import json, statistics, sys
tmp, rev, head = sys.argv[1:]
runs = {w: [json.load(open(f"{tmp}/{w}-{r}.json")) for r in (1, 2, 3)] for w in ("base", "head")}
for w, v in runs.items():
    for d in v:
        assert d["invariant_holds"], f"{w}: bank invariant broken"
pick = lambda k: {w: [round(d[k], 2) for d in v] for w, v in runs.items()}
tps, avg, p99 = pick("tx_per_s"), pick("avg_us"), pick("p99_us")
med = lambda m: {w: statistics.median(v) for w, v in m.items()}
out = {"what": "master + sync replica, 2 workers each (lcores 0@0,1@1,2@1), pktgen --tx 4,2 "
               "--partitions 2 --qps 4, 5000 accounts, 64 B values, 2 s; binaries alternating",
       "command": f"scripts/ab_cross_repl.sh {rev}", "base": rev, "head": head,
       "tx_per_s": tps, "avg_us": avg, "p99_us": p99,
       "median_tx_per_s": med(tps), "median_avg_us": med(avg), "median_p99_us": med(p99)}
out["head_vs_base_tx_per_s"] = round(out["median_tx_per_s"]["head"] / out["median_tx_per_s"]["base"], 3)
out["head_vs_base_avg_us"] = round(out["median_avg_us"]["head"] / out["median_avg_us"]["base"], 3)
json.dump(out, open("results/ab_cross_repl.json", "w"), indent=2)
print(f"ab: head {head} {out['median_tx_per_s']['head']:.0f} tx/s vs {rev} "
      f"{out['median_tx_per_s']['base']:.0f} tx/s -> {out['head_vs_base_tx_per_s']}; "
      f"avg {out['median_avg_us']['head']} vs {out['median_avg_us']['base']} us")
PY
