#!/usr/bin/env bash
# An etcd-managed chain (docs/REPLICATION.md §10.5), real processes over memif and a
# real etcd: `topology: chain`, `mode: sync`, min_replicas 1.
#  1. node0 is elected head; node1 follows it and node2 follows node1's relay;
#  2. bank transfers (pktgen --tx 4,2) on the head, then kill -9 of the head: the
#     survivor with the highest offset is elected head at the next epoch and the other
#     goes on behind it; the new head holds every account exactly as the tail had it
#     before the kill (all the old head's committed transfers), and transfers run on
#     it (bank total unchanged);
#  3. the old head restarts: it joins the chain behind the tail, and its member
#     record in etcd ranks it behind the others (ranks 1, 2, 3);
#  4. kill -9 of the new head: on equal offsets the election prefers the lower rank,
#     so the tail — the node right behind the dead head — is elected, not the old
#     head behind it, which goes on behind the new head;
#  5. the survivors end with the same KVs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
CTL=target/release/ctlplane
LEASE_MS=1000
etcd_up 26000

D="$E2E_TMP/c"
python3 scripts/cluster_config.py "$D" 2 --prefix kvd-e2e-cfo --topology chain --mode sync \
  --min-replicas 1 --probe-ms 50 --waiting-ms 200 --etcd "$ETCD_URL" \
  --cluster cfo --lease-ms "$LEASE_MS" >/dev/null

status() { repl_status "$D" "$1" "$2"; }               # K EXPR
wait_for() { wait_repl "$1" "$2" "$D" "$3" "$4"; }     # WHAT TIMEOUT_S K EXPR

start_node "$D" 0
start_node "$D" 1
start_node "$D" 2
# The first election waits for every node; the configured head ranks first.
wait_for "node0 elected head" 10 0 'd["role"] == "master"'
# Node 0's link 0 goes to node 1; node 1's link 1 to node 2.
wait_for "middle online on the head" 30 0 'd["peers"]["0"]["state"] == "online"'
wait_for "tail online on the middle's relay" 30 1 'd["relay"]["peers"]["1"]["state"] == "online"'
[ "$(status 0 'd["peers"]["1"]["state"]')" = absent ] || fail "the tail should follow the middle, not the head"
pass "etcd-managed chain up: head node0 -> node1 -> node2"

timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$D/tx.json" --tx 4,2 --keys 2000 \
  --value-size 64 --duration 1 --warmup 0 >"$D/tx.out" 2>&1 \
  || { cat "$D/tx.out"; fail "transfers on the head failed"; }
c0=$(json_field "$D/tx.json" 'd["committed"]')
[ "$c0" -gt 100 ] || fail "only $c0 transfers on the head"
# Every transfer the head committed is on the tail (sync mode): its contents now are
# what the new head must hold.
"$CTL" snapshot save "$D/before.kvd" --config "$D/node2.json" >/dev/null || fail "snapshot of the tail failed"
kill -KILL "${NODE_PID[0]}"
t0=$(date +%s%N)
# The survivor with the highest offset is elected (ties: the lower id): the middle,
# or the tail when both stand at the same offset. The other follows it — the tail
# keeps its predecessor; the middle, whose predecessor died, asks whoever answers.
new=""
for _ in $(seq 1 100); do
  for k in 1 2; do
    [ "$(status "$k" 'd["role"] == "master" and int(d["epoch"]) >= 2')" = True ] && new=$k
  done
  [ -n "$new" ] && break
  sleep 0.1
done
[ -n "$new" ] || fail "no survivor elected head within 10 s"
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
other=$((3 - new))
# node1's link 1 goes to node2, node2's link 1 to node1.
wait_for "node$other online behind the new head" 15 "$new" 'd["peers"]["1"]["state"] == "online"'
pass "head killed: node$new head at epoch $(status "$new" 'd["epoch"]') after $ms ms, node$other behind it"
"$CTL" snapshot save "$D/after.kvd" --config "$D/node$new.json" >/dev/null || fail "snapshot of the new head failed"
python3 - "$D/before.kvd" "$D/after.kvd" <<'PY' || fail "the new head lost committed transfers"
import sys
sys.path.insert(0, "scripts")
from snapshot_dump import read
a, b = read(sys.argv[1]), read(sys.argv[2])
assert len(a) == 2000 and a == b, f"{len(a)} accounts before, {len(b)} after, equal: {a == b}"
PY
pass "the new head holds every account exactly as the tail had it before the kill"
# The old head's transfers are all there: the read-back of a second run checks the
# bank total over every account (pktgen --tx verifies it at the end).
timeout 60 "$PG" --config "$D/node$new.json" --no-huge --json "$D/tx2.json" --tx 4,2 --keys 2000 \
  --value-size 64 --duration 1 --warmup 0 >"$D/tx2.out" 2>&1 \
  || { cat "$D/tx2.out"; fail "transfers on the new head failed"; }
c1=$(json_field "$D/tx2.json" 'd["committed"]')
[ "$(json_field "$D/tx2.json" 'd["invariant_holds"]')" = True ] && [ "$c1" -gt 100 ] \
  || { cat "$D/tx2.out"; fail "new head: $c1 transfers, invariant $(json_field "$D/tx2.json" 'd["invariant_holds"]')"; }
pass "new head: $c1 transfers committed on top of the old head's $c0, bank total unchanged"

rm -f "$D/client0.sock" "$D/link0-1.sock" "$D/link0-2.sock" # sockets the killed process left
start_node "$D" 0
# Its link 0 on node$other (the tail) goes to node0.
wait_for "old head online behind the tail" 30 "$other" 'd["relay"]["peers"]["0"]["state"] == "online"'
pass "old head restarted: appended behind the tail (node$new -> node$other -> node0)"
wait_for "tail caught up" 10 "$new" 'int(d["peers"]["1"]["acked_offset"]) == int(d["offset"])'
wait_for "old head caught up" 10 "$other" 'int(d["relay"]["peers"]["0"]["acked_offset"]) == int(d["offset"])'
ranks() { # the members' (role, rank) in chain order, from etcd
  "$CTL" replication members --config "$D/node0.json" --json \
    | python3 -c 'import json, sys; d = json.load(sys.stdin); print([(m["role"], m.get("rank", 0)) for m in d["members"]])'
}
want="[('master', 1), ('replica', 2), ('replica', 3)]"
r=""
for _ in $(seq 1 50); do r=$(ranks); [ "$r" = "$want" ] && break; sleep 0.1; done
[ "$r" = "$want" ] || fail "members $r: the appended old head should rank behind the others"
"$CTL" replication members --config "$D/node0.json"
pass "members in etcd, chain order $r: the old head ranks behind the tail"

kill -KILL "${NODE_PID[$new]}"
elected=""
for _ in $(seq 1 100); do
  for k in "$other" 0; do
    [ "$(status "$k" 'd["role"] == "master" and int(d["epoch"]) >= 3')" = True ] && elected=$k
  done
  [ -n "$elected" ] && break
  sleep 0.1
done
[ "$elected" = "$other" ] || fail "node${elected:-?} elected after the second kill, want node$other (the lower rank)"
wait_for "old head online behind the tail's mastership" 15 "$other" 'd["peers"]["0"]["state"] == "online"'
pass "new head killed: node$other (rank 2) elected at epoch $(status "$other" 'd["epoch"]'), node0 (rank 3) behind it"
wait_for "old head caught up again" 10 "$other" 'int(d["peers"]["0"]["acked_offset"]) == int(d["offset"])'
stop_node "$D" 0
stop_node "$D" "$other"
same_kvs "$D" "$other" 0
