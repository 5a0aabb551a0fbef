#!/usr/bin/env bash
# Election safety with real processes (issue 29, docs/FAILOVER.md "Election safety"):
# three etcd-managed nodes in sync mode (min_replicas 1) hold 20 000 acknowledged
# keys. kill -9 node2, freeze node0 and node1 (SIGSTOP) past their leases, restart
# node2 empty. Before, node2 was elected at epoch 2 with offset 0 and the others, on
# SIGCONT, followed it and were wiped. Now node2 is never elected while it is the
# only reporter (it says the election waits for a quorum); on SIGCONT a data holder
# is elected (node2 too, if a full sync made it one first), the others follow it, and
# all three hold the 20 000 keys. The same schedule
# also checks the SIGCONT crash of issue 29: node0 and node1 are the memif servers of
# their links to node2, killed and restarted while they were frozen.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
LEASE_MS=1000
etcd_up 26000
D="$E2E_TMP/es"
python3 scripts/cluster_config.py "$D" 2 --prefix kvd-e2e-es --etcd "$ETCD_URL" \
  --cluster es --lease-ms "$LEASE_MS" --mode sync --min-replicas 1 \
  --probe-ms 50 --waiting-ms 200 --backlog-mb 64 >/dev/null

status() { repl_status "$D" "$1" "$2"; }
wait_for() { wait_repl "$1" "$2" "$D" "$3" "$4"; }
synced='sum(1 for p in d["peers"].values() if p["state"] == "online" and int(p["acked_offset"]) == int(d["offset"])) == 2'

start_node "$D" 0
start_node "$D" 1
start_node "$D" 2
wait_for "node0 elected" 10 0 'd["role"] == "master"'
wait_for "both replicas online" 30 0 "$synced"
timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$D/fill.json" --keys 20000 \
  --key-size 8 --value-size 8 --load --get 0 --put 1 --duration 0.2 --warmup 0 >"$D/fill.out" 2>&1 \
  || { cat "$D/fill.out"; fail "fill failed"; }
wait_for "every key on both replicas" 30 0 "$synced"
[ "$(status 2 'd["data"]')" = live ] || fail "node2's data is $(status 2 'd["data"]'), not live"
pass "3 nodes, sync, 20000 keys acknowledged and on both replicas"

kill -KILL "${NODE_PID[2]}"
wait "${NODE_PID[2]}" 2>/dev/null || true
kill -STOP "${NODE_PID[0]}" "${NODE_PID[1]}"
sleep 2.5 # past the lease: etcd deletes the leader key
rm -f "$D/client2.sock"
start_node "$D" 2
sleep 3
role=$(status 2 'd["role"]')
[ "$role" != master ] || fail "the empty node2 was elected"
[ "$(status 2 'd["data"]')" = none ] || fail "node2 restarted empty but says $(status 2 'd["data"]')"
wait_for "node2 reporting the wait for a quorum" 5 2 'd["election_wait"] is not None and int(d["election_wait"]["need"]) == 2'
target/release/ctlplane replication status --config "$D/node2.json" | grep -q "the election waits for a quorum" \
  || fail "ctlplane replication status does not say why there is no master"
target/release/ctlplane replication force-elect --config "$D/node2.json" --node node2 >"$D/force.out" 2>&1 \
  && fail "force-elect ran without --i-accept-data-loss"
grep -q "i-accept-data-loss" "$D/force.out" || fail "force-elect refused without saying why: $(cat "$D/force.out")"
pass "node2 restarted empty while the data holders are frozen: not elected ($role), waits for a quorum"

# On SIGCONT a data holder is elected. node2 may be one by then: the thawed old master
# (fenced, its lease lapsed) can finish node2's full sync before the election, and
# with equal data the tie goes to the lower rank, then the lower id. Either way the
# winner holds data and, checked below, every node ends with every acknowledged key.
kill -CONT "${NODE_PID[0]}" "${NODE_PID[1]}"
new=""
for _ in $(seq 1 100); do
  for k in 0 1 2; do
    [ "$(status "$k" 'd["role"]')" = master ] && new=$k && break 2
  done
  sleep 0.1
done
if [ -z "$new" ]; then
  for k in 0 1 2; do
    echo "--- node$k: alive $(kill -0 "${NODE_PID[$k]}" 2>/dev/null && echo yes || echo no), role $(status "$k" 'd["role"]'), election wait $(status "$k" 'd["election_wait"]')"
    tail -n 15 "$D/node$k.log"
  done
  fail "no data holder elected within 10 s of SIGCONT"
fi
epoch=$(status "$new" 'd["epoch"]')
[ "$epoch" -ge 2 ] || fail "epoch $epoch"
data=$(status "$new" 'd["data"]')
[ "$data" != none ] || fail "node$new was elected holding no data"
wait_for "both replicas in sync with node$new" 30 "$new" "$synced"
pass "SIGCONT: node$new elected at epoch $epoch (data $data), the others follow it"
for k in 0 1 2; do stop_node "$D" "$k"; done
for k in 0 1 2; do
  n=$(json_field "$D/node$k.stats.json" 'd["engine_kvs"]')
  [ "$n" -ge 20000 ] || fail "node$k holds $n keys, not the 20000 acknowledged"
done
for k in 0 1 2; do
  [ "$k" = "$new" ] || same_kvs "$D" "$new" "$k"
done
pass "all three nodes hold the 20000 acknowledged keys"
