#!/usr/bin/env bash
# Cross-partition transactions on a replicated master (docs/TRANSACTIONS.md,
# docs/REPLICATION.md §3): a master with 2 workers (lcores mapped "0@0,1@1,2@1": two
# workers and the replication lcore on this host's 2 CPUs) and one replica, `mode:
# sync`, min_replicas 1. Each post-image of a transaction over both partitions goes
# to its owner's log ring and the coordinator's ring waits for the other's (WAIT), so
# the stream keeps every key's order and a sync answer covers both parts.
#  1. (4, 2) transfers one at a time, then 4 optimistic transfers in flight on 32
#     Zipf-hot accounts: every balance read back as committed, total unchanged, most
#     of them coordinated over both partitions;
#  2. the replica acknowledged the whole stream and holds exactly the master's KVs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
D="$E2E_TMP/x"
python3 scripts/cluster_config.py "$D" 1 --prefix kvd-e2e-xrepl --mode sync --min-replicas 1 \
  --probe-ms 50 --waiting-ms 500 >/dev/null
python3 - "$D/node0.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["dataplane"]["lcores"] = "0@0,1@1,2@1"
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY

wait_for() { wait_repl "$1" "$2" "$D" 0 "$3"; } # WHAT TIMEOUT_S EXPR on the master

start_node "$D" 0
start_node "$D" 1
wait_for "replica online" 30 'd["peers"]["0"]["state"] == "online"'
pass "master with 2 workers and a sync replica up"

# Answers wait for the replica (~0.1 ms here): a patient transport.
pg() { # NAME FLAGS...: pktgen on the master's client port
  local name=$1; shift
  timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$D/$name.json" --partitions 2 --qps 4 \
    --rto-min-us 5000 --timeout-ms 2000 --warmup 0 --duration 1.5 "$@" >"$D/$name.out" 2>&1 \
    || { cat "$D/$name.out"; fail "$name: pktgen failed"; }
  [ "$(json_field "$D/$name.json" 'd["invariant_holds"]')" = True ] || { cat "$D/$name.out"; fail "$name: invariant"; }
}
pg one --tx 4,2 --keys 5000 --value-size 64 --seed 3
c1=$(json_field "$D/one.json" 'd["committed"]')
[ "$c1" -gt 100 ] && [ "$(json_field "$D/one.json" 'd["aborted"]')" = 0 ] || { cat "$D/one.out"; fail "$c1 committed"; }
pass "(4, 2) transfers one at a time: $c1 committed, every balance read back as committed"
pg shared --tx 2,2 --tx-shared --tx-inflight 4 --keys 32 --key-size 12 --dist zipf --value-size 16 --seed 4
c2=$(json_field "$D/shared.json" 'd["committed"]')
[ "$c2" -gt 100 ] || { cat "$D/shared.out"; fail "$c2 concurrent transfers"; }
pass "concurrent transfers: $c2 committed, $(json_field "$D/shared.json" 'd["conflicts"]') aborted by conflicts, total unchanged"

wait_for "replica caught up" 10 'int(d["peers"]["0"]["acked_offset"]) == int(d["offset"])'
stop_node "$D" 1
stop_node "$D" 0
w=$(json_field "$D/node0.stats.json" 'd["workers"]')
x=$(json_field "$D/node0.stats.json" 'd["tx_cross_partition"]')
[ "$w" = 2 ] && [ "$x" -gt 100 ] || fail "master: $w workers, $x cross-partition transactions"
pass "master: $x transactions coordinated over both partitions"
same_kvs "$D" 0 1 # the replica holds the master's KVs
