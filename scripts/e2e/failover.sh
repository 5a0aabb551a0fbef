#!/usr/bin/env bash
# Failover through etcd (docs/FAILOVER.md), real processes over memif, a real etcd:
#  1. kill -9 of the master under write load: a replica is elected and takes writes
#     within 3 s, the other replica follows it; the killed master restarts and joins
#     as a replica of the new one (its peer's memif link redials it); all three end
#     with the same KVs;
#  2. split-brain: the master is frozen (SIGSTOP) past its lease while a client keeps
#     writing to it; a replica is elected; on SIGCONT the old master acknowledges no
#     write (every write it answers is NOT_MASTER), steps down and rejoins as a replica
#     with the new master's contents;
#  3. sync mode: kill -9 of the master under fetch-adds to one counter: every
#     fetch-add it acknowledged is in the counter of the new master (read from a
#     snapshot, scripts/snapshot_dump.py);
#  4. the same with a client that follows the master (pktgen --follow-ports): its
#     requests in flight are resumed on the new master, and every fetch-add it was
#     answered counts exactly once (docs/PROTOCOL.md §6.6); one that starts at a
#     replica goes straight to the master the refusal names;
#  5. bank transfers (pktgen --tx) following the master across its kill -9: money
#     conserved, every balance what the committed transfers left.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
CTL=target/release/ctlplane
LEASE_MS=1000
etcd_up 24000

# cluster DIR N_REPLICAS NAME: configs of N+1 etcd-managed nodes (cluster NAME).
cluster() {
  python3 scripts/cluster_config.py "$1" "$2" --prefix "kvd-e2e-fo-$3" \
    --etcd "$ETCD_URL" --cluster "$3" --lease-ms "$LEASE_MS" \
    --probe-ms 50 --waiting-ms 200 --backlog-mb 256 >/dev/null
}


field() { # DIR K EXPR: a field of node K's /kvd/replication
  "$CTL" replication status --json --config "$1/node$2.json" >"$E2E_TMP/st.json" 2>/dev/null || { echo "?"; return; }
  json_field "$E2E_TMP/st.json" "$3"
}

wait_role() { # DIR K ROLE TIMEOUT_S
  local i r=""
  for ((i = 0; i < $4 * 20; i++)); do
    r=$(field "$1" "$2" 'd["role"]')
    [ "$r" = "$3" ] && return 0
    sleep 0.05
  done
  fail "node$2 is $r, not $3, after $4 s"
}

# wait_followers DIR M TIMEOUT_S K...: master M sees every follower online, acked to its end.
wait_followers() {
  local d=$1 m=$2 t=$3 i; shift 3
  for ((i = 0; i < t * 10; i++)); do
    [ "$(field "$d" "$m" 'sum(1 for p in d["peers"].values() if p["state"] == "online" and int(p["acked_offset"]) == int(d["offset"]))')" = "$#" ] && return 0
    sleep 0.1
  done
  "$CTL" replication status --config "$d/node$m.json" || true
  fail "node$m: its $# replicas not in sync within $t s"
}

elected() { # DIR: which of nodes 1 and 2 is master (polled for up to 5 s; "" if none)
  local k
  for _ in $(seq 1 100); do
    for k in 1 2; do
      [ "$(field "$1" "$k" 'd["role"]')" = master ] && { echo "$k"; return; }
    done
    sleep 0.05
  done
}

pg() { # DIR K NAME ARGS...: pktgen on node K's client port
  local d=$1 k=$2 name=$3; shift 3
  timeout 60 "$PG" --config "$d/node$k.json" --no-huge --json "$d/$name.json" "$@" >"$d/$name.out" 2>&1
}

same_contents() { # DIR A B: nodes A and B stopped, same KVs
  local ka
  ka=$(json_field "$1/node$2.stats.json" 'd["engine_kvs"]')
  [ "$ka" -gt 1000 ] || fail "node$2 holds only $ka KVs"
  same_kvs "$1" "$2" "$3"
}

# --- 1: kill -9 the master under load.
D="$E2E_TMP/a"
cluster "$D" 2 fo-a
start_node "$D" 0
start_node "$D" 1
start_node "$D" 2
wait_role "$D" 0 master 10
wait_followers "$D" 0 30 1 2
pg "$D" 0 fill --keys 20000 --key-size 8 --value-size 4-40 --load --get 0 --put 1 --duration 0.5 --warmup 0 \
  || { cat "$D/fill.out"; fail "fill failed"; }
( pg "$D" 0 during --keys 20000 --key-size 8 --value-size 4-40 --get 0.3 --put 0.7 --duration 3 --warmup 0 || true ) &
LOAD=$!
sleep 1
kill -KILL "${NODE_PID[0]}"
t0=$(date +%s%N)
new=$(elected "$D")
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ -n "$new" ] || fail "no replica became master within 5 s of kill -9"
[ "$ms" -le 3000 ] || fail "failover took $ms ms (lease $LEASE_MS ms)"
other=$((3 - new))
epoch=$(field "$D" "$new" 'd["epoch"]')
[ "$epoch" -ge 2 ] || fail "new master at epoch $epoch"
pass "master killed: node$new master at epoch $epoch after $ms ms"
wait "$LOAD" || true
pg "$D" "$new" after --keys 20000 --key-size 8 --value-size 4-40 --get 0 --put 1 --duration 0.5 --warmup 0 \
  || { cat "$D/after.out"; fail "writes on the new master failed"; }
errs=$(json_field "$D/after.json" 'd["errors"]')
ops=$(json_field "$D/after.json" 'd["ops"]')
[ "$errs" = 0 ] && [ "$ops" -gt 100 ] || fail "new master: $errs errors in $ops writes"
pass "new master node$new takes writes ($ops, no errors)"
wait_followers "$D" "$new" 30 1
[ "$(field "$D" "$other" 'd["epoch"]')" = "$epoch" ] || fail "node$other does not follow epoch $epoch"
pass "node$other follows node$new at epoch $epoch"
# The killed master comes back (its crash left its memif server sockets): etcd names
# node$new master, so it starts as a replica and follows it; node$new's memif client
# link to it redials the restarted server by itself.
rm -f "$D/client0.sock" "$D"/link0-*.sock
start_node "$D" 0
wait_followers "$D" "$new" 30 1 2
[ "$(field "$D" 0 'd["role"]')" = replica ] || fail "the returning old master is $(field "$D" 0 'd["role"]')"
pass "old master restarted: a replica of node$new, in sync"
stop_node "$D" 0
stop_node "$D" "$other"
stop_node "$D" "$new"
same_contents "$D" "$new" "$other"
same_contents "$D" "$new" 0

# --- 2: split-brain. Freeze the master past its lease while a client writes to it.
D="$E2E_TMP/b"
cluster "$D" 1 fo-b
start_node "$D" 0
start_node "$D" 1
wait_role "$D" 0 master 10
wait_followers "$D" 0 30 1
pg "$D" 0 fill --keys 10000 --key-size 8 --value-size 8 --load --get 0 --put 1 --duration 0.3 --warmup 0 \
  || { cat "$D/fill.out"; fail "fill failed"; }
kill -STOP "${NODE_PID[0]}"
wait_role "$D" 1 master 5
pass "master frozen: node1 elected at epoch $(field "$D" 1 'd["epoch"]')"
# The client starts while the old master is frozen: everything it sends is answered
# (if at all) by a master whose lease has run out.
( pg "$D" 0 stale --keys 10000 --key-size 8 --value-size 8 --get 0 --put 1 --duration 2 --warmup 0 || true ) &
LOAD=$!
sleep 1
kill -CONT "${NODE_PID[0]}"
wait "$LOAD" || true
[ -f "$D/stale.json" ] || { cat "$D/stale.out"; fail "the client of the old master reported nothing"; }
# Every answer was an error, and every error a NOT_MASTER (errors also count the
# requests still in flight at the end, so they may exceed the completed ops).
ok=$(json_field "$D/stale.json" 'max(0, d["ops"] - d["not_master"])')
nm=$(json_field "$D/stale.json" 'd["not_master"]')
other=$(json_field "$D/stale.json" 'd["errors"] - d["not_master"]')
[ "$ok" = 0 ] && [ "$other" = 0 ] || fail "the old master acknowledged $ok writes after its lease ran out ($other other errors)"
[ "$nm" -gt 0 ] || fail "the old master answered no NOT_MASTER"
pass "old master resumed: $nm writes refused NOT_MASTER, none acknowledged"
wait_role "$D" 0 replica 10
wait_followers "$D" 1 30 1
dem=$(field "$D" 0 'd["demotions"]')
[ "$dem" -ge 1 ] || fail "old master's demotions: $dem"
pass "old master rejoined as a replica of node1"
stop_node "$D" 0
stop_node "$D" 1
same_contents "$D" 1 0

# --- 3: sync mode, kill -9 of the master under acknowledged fetch-adds: every one the
# dying master acknowledged is in the counter the new master has.
# counter_cluster NAME: D = a sync-mode cluster of 3 nodes (min_replicas 1), node0
# master, holding one 8-byte counter (key index 0).
counter_cluster() {
  D="$E2E_TMP/$1"
  python3 scripts/cluster_config.py "$D" 2 --prefix "kvd-e2e-fo-fo-$1" \
    --etcd "$ETCD_URL" --cluster "fo-$1" --lease-ms "$LEASE_MS" \
    --mode sync --min-replicas 1 --probe-ms 50 --waiting-ms 200 --backlog-mb 64 >/dev/null
  start_node "$D" 0
  start_node "$D" 1
  start_node "$D" 2
  wait_role "$D" 0 master 10
  wait_followers "$D" 0 30 1 2
  pg "$D" 0 fill --keys 1 --key-size 8 --value-size 8 --load --get 0 --put 1 --duration 0.1 --warmup 0 \
    || { cat "$D/fill.out"; fail "fill failed"; }
}
counter_cluster c
counter() { # K NAME: node K's counter value, from a snapshot of it
  "$CTL" snapshot save "$D/$2.kvd" --config "$D/node$1.json" >/dev/null || fail "snapshot of node$1 failed"
  python3 - "$D/$2.kvd" <<'PY'
import struct, sys
sys.path.insert(0, "scripts")
from snapshot_dump import read
kv = read(sys.argv[1])
assert len(kv) == 1, f"{len(kv)} keys"
print(struct.unpack("<Q", next(iter(kv.values())))[0])
PY
}
x0=$(counter 0 before)
( pg "$D" 0 adds --keys 1 --key-size 8 --get 0 --put 0 --atomic 1 --duration 3 --warmup 0 --timeout-ms 300 || true ) &
LOAD=$!
sleep 1
kill -KILL "${NODE_PID[0]}"
new=$(elected "$D")
[ -n "$new" ] || fail "sync mode: no replica became master within 5 s"
wait "$LOAD" || true
[ -f "$D/adds.json" ] || { cat "$D/adds.out"; fail "the fetch-add client reported nothing"; }
acked=$(json_field "$D/adds.json" 'd["ops"] - d["errors"]')
[ "$acked" -gt 100 ] || fail "only $acked fetch-adds acknowledged before the kill"
x1=$(counter "$new" after)
grew=$(python3 -c "print(($x1 - $x0) % 2**64)")
[ "$grew" -ge "$acked" ] || fail "sync mode lost acknowledged writes: counter grew by $grew, $acked fetch-adds acknowledged"
pass "sync mode, master killed: node$new master; all $acked acknowledged fetch-adds are in its counter (+$grew)"
stop_node "$D" 1
stop_node "$D" 2

# --- 4: a client that follows the master (pktgen --follow-ports: one port per node)
# under fetch-adds across kill -9 of the master, sync mode. Its requests in flight at
# the kill are resumed on the new master (RESUME, docs/PROTOCOL.md §6.6), which answers
# the ones the old master had run from their completion records: every fetch-add the
# client was answered counts exactly once — the counter grows by the acknowledged ones,
# plus at most those answered OUTCOME_UNKNOWN or given up.
counter_cluster d
x0=$(counter 0 before)
( timeout 60 "$PG" --config "$D/follow.json" --follow-ports net_memif20,net_memif21,net_memif22 \
    --no-huge --json "$D/fadds.json" --keys 1 --key-size 8 --get 0 --put 0 --atomic 1 \
    --duration 4 --warmup 0 --timeout-ms 300 >"$D/fadds.out" 2>&1 || true ) &
LOAD=$!
sleep 1
kill -KILL "${NODE_PID[0]}"
new=$(elected "$D")
[ -n "$new" ] || fail "following: no replica became master within 5 s"
wait "$LOAD" || true
[ -f "$D/fadds.json" ] || { cat "$D/fadds.out"; fail "the following client reported nothing"; }
acked=$(json_field "$D/fadds.json" 'd["results_ok"]')
unknown=$(json_field "$D/fadds.json" 'd["outcome_unknown"]')
gaveup=$(json_field "$D/fadds.json" 'd["timeouts"]')
resumed=$(json_field "$D/fadds.json" 'd["transport"]["resumed"]')
moves=$(json_field "$D/fadds.json" 'd["follow"]["moves"]')
x1=$(counter "$new" after)
grew=$(python3 -c "print(($x1 - $x0) % 2**64)")
[ "$resumed" -ge 1 ] || { cat "$D/fadds.out"; fail "following: no QP was resumed ($moves moves)"; }
[ "$acked" -gt 1000 ] || fail "following: only $acked fetch-adds answered"
[ "$grew" -ge "$acked" ] || fail "following: acknowledged fetch-adds lost: +$grew, $acked acknowledged"
[ "$grew" -le $((acked + unknown + gaveup)) ] \
  || fail "following: a fetch-add ran twice: +$grew > $acked acknowledged + $unknown unknown + $gaveup given up"
# The killed master back, as a replica: a following client that starts there is
# refused NOT_MASTER with a hint and goes straight to the master it names (one move,
# not through the other replica).
rm -f "$D/client0.sock" "$D"/link0-*.sock
start_node "$D" 0
wait_followers "$D" "$new" 30 0
timeout 60 "$PG" --config "$D/follow.json" --follow-ports net_memif20,net_memif21,net_memif22 \
  --no-huge --json "$D/hinted.json" --keys 1 --key-size 8 --get 0 --put 0 --atomic 1 \
  --duration 1 --warmup 0 --timeout-ms 300 >"$D/hinted.out" 2>&1 || true
hmoves=$(json_field "$D/hinted.json" 'd["follow"]["moves"]' 2>/dev/null || echo "?")
grep -q "naming the master, now node $new" "$D/hinted.out" && [ "$hmoves" = 1 ] \
  || { grep "follow" "$D/hinted.out"; fail "following a hint: $hmoves moves, not 1 straight to node$new"; }
for k in 0 1 2; do stop_node "$D" "$k"; done
replays=$(json_field "$D/node$new.stats.json" 'd["restored_replays"]')
pass "following the master: $moves moves, $resumed QPs resumed on node$new ($replays requests answered from completion records); $acked fetch-adds answered, counter +$grew ($unknown unknown, $gaveup given up); started at a replica, one move to the master its refusal named"

# --- 5: bank transfers (pktgen --tx 2,2: two conditioned reads, a transfer between two
# accounts, one transaction each) that follow the master (--follow-ports, each node at
# its own address) across kill -9 of the master, sync mode. The client moves to the
# next node when the master stops answering, and from there where a NOT_MASTER hint
# points (a transaction refused NOT_MASTER ran nothing and goes again; one in flight at
# the kill is resumed; one of unknown outcome has its accounts re-read). The money is
# conserved and every balance is what the committed transactions left.
counter_cluster e
( timeout 60 "$PG" --config "$D/follow.json" --follow-ports net_memif20,net_memif21,net_memif22 \
    --no-huge --json "$D/bank.json" --tx 2,2 --keys 64 --key-size 8 --value-size 8 \
    --duration 5 --warmup 0 --timeout-ms 300 >"$D/bank.out" 2>&1; echo $? >"$D/bank.rc" ) &
LOAD=$!
sleep 1.5
kill -KILL "${NODE_PID[0]}"
new=$(elected "$D")
[ -n "$new" ] || fail "bank: no replica became master within 5 s"
wait "$LOAD" || true
rc=$(cat "$D/bank.rc" 2>/dev/null || echo "?")
[ -f "$D/bank.json" ] || { cat "$D/bank.out"; fail "bank: pktgen --tx reported nothing (exit $rc)"; }
grep "^tx " "$D/bank.out" || true
[ "$rc" = 0 ] || { cat "$D/bank.out"; fail "bank: pktgen --tx exit $rc"; }
holds=$(json_field "$D/bank.json" 'd["invariant_holds"]')
committed=$(json_field "$D/bank.json" 'd["committed"]')
redirects=$(json_field "$D/bank.json" 'd["follow_redirects"]')
unknown=$(json_field "$D/bank.json" 'd["outcome_unknown"]')
[ "$holds" = True ] || { cat "$D/bank.out"; fail "bank: the money is not conserved or a balance is wrong"; }
[ "$committed" -gt 100 ] || fail "bank: only $committed transfers committed"
[ "$redirects" -ge 1 ] || { cat "$D/bank.out"; fail "bank: the client never moved (the kill did not reach it?)"; }
pass "bank transfers following the master: $committed committed, $redirects redirects (to node$new), $unknown of unknown outcome re-read; money conserved, every balance as committed"
