#!/usr/bin/env bash
# Cross-partition transactions on a replicated master (docs/TRANSACTIONS.md,
# docs/REPLICATION.md §3): a master and a replica with 2 workers each (lcores mapped
# "0@0,1@1,2@1": two workers and the replication lcore on this host's 2 CPUs), `mode:
# sync`, min_replicas 1. A transaction over both partitions goes whole into its
# coordinator's log ring as one group, behind a WAIT for the other ring (which waits
# for it past the transaction), so the stream keeps every key's order, a sync answer
# covers both parts, and the replica applies it over both of its partitions at once.
#  1. (4, 2) transfers one at a time, then 4 optimistic transfers in flight on 32
#     Zipf-hot accounts: every balance read back as committed, total unchanged, most
#     of them coordinated over both partitions, while read-only transactions on the
#     replica check the bank total in each (pktgen --tx-audit): none sees half a
#     transfer;
#  2. the replica acknowledged the whole stream, applied transactions over both of
#     its partitions at once, and holds exactly the master's KVs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
D="$E2E_TMP/x"
python3 scripts/cluster_config.py "$D" 1 --prefix kvd-e2e-xrepl --mode sync --min-replicas 1 \
  --probe-ms 50 --waiting-ms 500 --lcores 0@0,1@1,2@1 >/dev/null

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
pg shared --tx 2,2 --tx-shared --tx-inflight 4 --keys 32 --key-size 12 --dist zipf --value-size 16 --seed 4 &
W=$!
sleep 0.3
# Read-only transactions over every account on the 2-worker replica, each checking
# the total: a transaction coordinated over both master partitions reaches the
# replica as one group, which the replica applies over both of its partitions at
# once (docs/REPLICATION.md §2) — an audit never sees half a transfer.
timeout 60 "$PG" --config "$D/node1.json" --no-huge --json "$D/audit.json" --partitions 2 --qps 2 \
  --tx-audit --keys 32 --key-size 12 --duration 1 --warmup 0 >"$D/audit.out" 2>&1 \
  || { cat "$D/audit.out"; fail "audit at the replica failed"; }
wait "$W"
c2=$(json_field "$D/shared.json" 'd["committed"]')
[ "$c2" -gt 100 ] || { cat "$D/shared.out"; fail "$c2 concurrent transfers"; }
pass "concurrent transfers: $c2 committed, $(json_field "$D/shared.json" 'd["conflicts"]') aborted by conflicts, total unchanged"
audits=$(json_field "$D/audit.json" 'd["audits"]')
[ "$audits" -gt 50 ] || { cat "$D/audit.out"; fail "only $audits audits at the replica"; }
pass "replica (2 workers): $audits read-only transactions during the transfers, each with the right total"

wait_for "replica caught up" 10 'int(d["peers"]["0"]["acked_offset"]) == int(d["offset"])'
stop_node "$D" 1
stop_node "$D" 0
w=$(json_field "$D/node0.stats.json" 'd["workers"]')
x=$(json_field "$D/node0.stats.json" 'd["tx_cross_partition"]')
[ "$w" = 2 ] && [ "$x" -gt 100 ] || fail "master: $w workers, $x cross-partition transactions"
pass "master: $x transactions coordinated over both partitions"
w1=$(json_field "$D/node1.stats.json" 'd["workers"]')
spans=$(json_field "$D/node1.stats.json" 'd["repl_applied_spans"]')
[ "$w1" = 2 ] && [ "$spans" -gt 100 ] || fail "replica: $w1 workers, $spans transactions applied over both partitions"
pass "replica: $spans transactions applied over both of its partitions at once"
same_kvs "$D" 0 1 # the replica holds the master's KVs
