#!/usr/bin/env bash
# Replication over memif links, real processes (docs/REPLICATION.md):
#  1. a replica that starts empty while the master takes writes converges by a full
#     sync; checked key by key (order-independent digest of every KV, and the count);
#  2. a replica paused (SIGSTOP) past the waiting time is declared invalid, writes go
#     on (async), and on SIGCONT it resumes from its offset (partial resync) and
#     converges again;
#  3. with min_replicas 1, kill -9 of the replica is detected within probe interval +
#     waiting time; writes are then refused NOT_ENOUGH_REPLICAS while reads go on;
#  4. a replica with a log file (fsync always) killed -9 under load and restarted
#     loads its log and catches up by a partial resync (no second full sync), equal to
#     the master key by key; with a byte of its log flipped it refuses to start;
#  5. kill -9 of the master and its restart with nothing (no --load): the replica,
#     which asks the silent master again, is not resynced to the empty store (that
#     would erase every write the old master acknowledged): it keeps all its KVs and
#     the master counts the refusal.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
CTL=target/release/ctlplane
PROBE_MS=50
WAIT_MS=200

# cluster DIR MIN_REPLICAS: configs of a master + 1 replica. The backlog (512 MiB)
# holds every write of the pause below even at full speed (~100 MB/s of post-images),
# so the resumed replica can resync partially; with a smaller one a full sync is right.
cluster() {
  python3 scripts/cluster_config.py "$1" 1 --prefix kvd-e2e-repl --min-replicas "$2" \
    --probe-ms "$PROBE_MS" --waiting-ms "$WAIT_MS" --backlog-mb 512 >/dev/null
}


# repl_field DIR K EXPR: a field of node K's /kvd/replication (python on `d`).
repl_field() {
  "$CTL" replication status --json --config "$1/node$2.json" >"$E2E_TMP/st.json" 2>/dev/null || { echo "?"; return; }
  json_field "$E2E_TMP/st.json" "$3"
}

# wait_in_sync DIR TIMEOUT_S: the master's peer is online with nothing outstanding.
wait_in_sync() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ "$(repl_field "$1" 0 'd["peers"]["0"]["state"] == "online" and int(d["peers"]["0"]["acked_offset"]) == int(d["offset"])')" = True ] && return 0
    sleep 0.1
  done
  "$CTL" replication status --config "$1/node0.json" || true
  fail "replica not in sync within $2 s"
}

pg() { # DIR NAME ARGS...: pktgen on the master's client port
  local d=$1 name=$2; shift 2
  timeout 120 "$PG" --config "$d/node0.json" --no-huge --json "$d/$name.json" "$@" >"$d/$name.out" 2>&1 \
    || { cat "$d/$name.out"; fail "$name: pktgen failed"; }
}

compare() { # DIR: master and replica stopped; same KVs
  local ka
  ka=$(json_field "$1/node0.stats.json" 'd["engine_kvs"]')
  [ "$ka" -gt 1000 ] || fail "master holds only $ka KVs"
  same_kvs "$1" 0 1
}

# --- 1 and 2: full sync under load, pause, partial resync.
D="$E2E_TMP/a"
cluster "$D" 0
start_node "$D" 0
pg "$D" fill --keys 20000 --key-size 8 --value-size 4-40 --load --get 0 --put 1 --duration 0.5 --warmup 0
# The replica joins while writes (puts, deletes, fetch-adds) go on.
( pg "$D" during --keys 20000 --key-size 8 --value-size 4-40 --get 0.3 --put 0.5 --duration 3 --warmup 0 ) &
LOAD=$!
sleep 1
start_node "$D" 1
wait "$LOAD" || fail "load during the full sync failed"
wait_in_sync "$D" 30
full=$(repl_field "$D" 0 'd["peers"]["0"]["full_syncs"]')
[ "$full" = 1 ] || fail "full_syncs $full, want 1"
pass "replica that joined under load converged by a full sync"

kill -STOP "${NODE_PID[1]}"
( pg "$D" paused --keys 20000 --key-size 8 --value-size 4-40 --get 0.5 --put 0.5 --duration 1.5 --warmup 0 ) &
LOAD=$!
inv=""
for _ in $(seq 1 40); do
  inv=$(repl_field "$D" 0 'd["peers"]["0"]["state"]')
  [ "$inv" = invalid ] && break
  sleep 0.1
done
[ "$inv" = invalid ] || { kill -CONT "${NODE_PID[1]}"; fail "paused replica not declared invalid (state $inv)"; }
wait "$LOAD" || fail "writes stopped while the replica was invalid (async mode)"
errs=$(json_field "$D/paused.json" 'd["errors"]')
[ "$errs" = 0 ] || fail "async writes got $errs errors while the replica was invalid"
pass "paused replica declared invalid; async writes went on"
kill -CONT "${NODE_PID[1]}"
wait_in_sync "$D" 30
part=$(repl_field "$D" 0 'd["peers"]["0"]["partial_syncs"]')
full=$(repl_field "$D" 0 'd["peers"]["0"]["full_syncs"]')
[ "$part" -ge 1 ] && [ "$full" = 1 ] || fail "after the pause: partial_syncs $part full_syncs $full"
pass "resumed replica caught up by a partial resync (partial $part, full $full)"
stop_node "$D" 1
stop_node "$D" 0
compare "$D"

# --- 3: min_replicas 1, kill -9 of the replica.
D="$E2E_TMP/b"
cluster "$D" 1
start_node "$D" 0
start_node "$D" 1
wait_in_sync "$D" 30
pg "$D" before --keys 5000 --key-size 8 --value-size 8 --load --get 0.5 --put 0.5 --duration 0.5 --warmup 0
[ "$(json_field "$D/before.json" 'd["errors"]')" = 0 ] || fail "writes refused with the replica online"
kill -KILL "${NODE_PID[1]}"
t0=$(date +%s%N)
state=""
for _ in $(seq 1 100); do
  state=$(repl_field "$D" 0 'd["peers"]["0"]["state"]')
  [ "$state" = invalid ] && break
  sleep 0.02
done
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
[ "$state" = invalid ] || fail "killed replica not detected (state $state)"
# Detection bound: waiting time + one probe interval, plus polling and scheduling slack.
[ "$ms" -le $((WAIT_MS + PROBE_MS + 1000)) ] || fail "detection took $ms ms"
pass "killed replica detected in $ms ms (waiting ${WAIT_MS} + probe ${PROBE_MS} ms)"
pg "$D" refused --keys 5000 --key-size 8 --value-size 8 --get 0 --put 1 --duration 0.5 --warmup 0
pg "$D" reads --keys 5000 --key-size 8 --value-size 8 --get 1 --put 0 --duration 0.5 --warmup 0
werr=$(json_field "$D/refused.json" 'd["errors"]')
wnr=$(json_field "$D/refused.json" 'd["not_enough_replicas"]')
rerr=$(json_field "$D/reads.json" 'd["errors"]')
rops=$(json_field "$D/reads.json" 'd["ops"]')
[ "$wnr" -gt 100 ] && [ "$werr" = "$wnr" ] \
  || { cat "$D/refused.out"; fail "writes with min_replicas unmet: $wnr NOT_ENOUGH_REPLICAS of $werr errors"; }
[ "$rerr" = 0 ] && [ "$rops" -gt 100 ] || fail "reads: $rerr errors of $rops ops"
pass "min_replicas unmet: every write refused NOT_ENOUGH_REPLICAS ($wnr), $rops reads served"
stop_node "$D" 0

# --- 4: the replica's log file: kill -9 under load, restart, partial resync.
D="$E2E_TMP/c"
python3 scripts/cluster_config.py "$D" 1 --prefix kvd-e2e-repl --probe-ms "$PROBE_MS" \
  --waiting-ms "$WAIT_MS" --backlog-mb 512 --log-fsync always >/dev/null
start_node "$D" 0
start_node "$D" 1
wait_in_sync "$D" 30
pg "$D" fill --keys 20000 --key-size 8 --value-size 4-40 --load --get 0 --put 1 --duration 0.5 --warmup 0
( pg "$D" during --keys 20000 --key-size 8 --value-size 4-40 --get 0.3 --put 0.5 --duration 3 --warmup 0 ) &
LOAD=$!
sleep 1
kill -KILL "${NODE_PID[1]}"
wait "${NODE_PID[1]}" 2>/dev/null || true
wait "$LOAD" || fail "load while the replica was killed failed"
[ -s "$D/node1.aof" ] || fail "the killed replica left no log file"
mv "$D/node1.log" "$D/node1.first.log"
rm -f "$D/client1.sock" # a memif server's socket outlives a kill -9
start_node "$D" 1
grep -q "replica log .*loaded" "$D/node1.log" || { cat "$D/node1.log"; fail "the restarted replica did not load its log"; }
wait_in_sync "$D" 30
part=$(repl_field "$D" 0 'd["peers"]["0"]["partial_syncs"]')
full=$(repl_field "$D" 0 'd["peers"]["0"]["full_syncs"]')
# One partial resync; a few more would mean the link broke while catching up.
[ "$part" -ge 1 ] && [ "$part" -le 3 ] && [ "$full" = 1 ] || fail "after the restart: partial_syncs $part full_syncs $full"
pass "replica killed under load restarted from its log: partial resync (partial $part, full $full); $(grep -o 'loaded [0-9]* records' "$D/node1.log")"
stop_node "$D" 1
stop_node "$D" 0
compare "$D"
# A flipped byte inside the log: the replica refuses to start, naming the file.
python3 - "$D/node1.aof" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0x40
open(p, "wb").write(b)
PY
if timeout 60 "$DP" --config "$D/node1.json" --no-huge >"$D/corrupt.log" 2>&1; then
  fail "the replica started with a corrupt log file"
fi
grep -q "node1.aof: corrupt" "$D/corrupt.log" || { cat "$D/corrupt.log"; fail "no clear error for the corrupt log"; }
pass "corrupt log refused: $(grep -o 'node1.aof: corrupt[^;]*' "$D/corrupt.log" | head -1)"

# --- 5: the master crashes and restarts empty; its replica keeps its data.
D="$E2E_TMP/e"
cluster "$D" 0
start_node "$D" 0
pg "$D" fill5 --keys 20000 --key-size 8 --value-size 4-40 --load --get 0 --put 1 --duration 0.3 --warmup 0
start_node "$D" 1
wait_in_sync "$D" 30
kill -KILL "${NODE_PID[0]}"
wait "${NODE_PID[0]}" 2>/dev/null || true
rm -f "$D/client0.sock" "$D"/link0-*.sock # memif server sockets a kill -9 leaves
start_node "$D" 0
refused=0
for _ in $(seq 1 100); do
  refused=$(repl_field "$D" 0 'd["foreign_refused"]')
  [ "$refused" != "?" ] && [ "$refused" -gt 0 ] && break
  sleep 0.1
done
[ "$refused" != "?" ] && [ "$refused" -gt 0 ] || fail "the restarted master never heard the replica (foreign_refused $refused)"
grep -q "not resyncing it" "$D/node0.log" || { cat "$D/node0.log"; fail "no message about the refused replica"; }
stop_node "$D" 1
stop_node "$D" 0
kept=$(json_field "$D/node1.stats.json" 'd["engine_kvs"]')
[ "$kept" = 20000 ] || fail "the replica holds $kept of 20000 KVs after the master restarted empty"
pass "master restarted empty: the replica kept its 20000 KVs ($refused HELLOs left unanswered)"
