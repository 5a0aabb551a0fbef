#!/usr/bin/env bash
# Chain replication over memif, real processes (docs/REPLICATION.md §10.4,
# docs/TRANSACTIONS.md): head -> middle -> tail, `mode: sync`, min_replicas 1.
#  1. the chain comes up: the middle follows the head, the tail the middle's relay;
#  2. transfers on the head — 4 at once on 4 QPs over shared Zipf-hot accounts, each
#     optimistic (read, then commit only if unchanged) — while read-only transactions
#     on the tail check the bank invariant in each (pktgen --tx-audit): conflicting
#     transfers abort, none is lost or half applied (a replica applies a transaction
#     whole), and the total read back at the end is unchanged;
#  3. bank transfers (pktgen --tx 4,2) run on the head while the middle is killed
#     (kill -9): the tail joins the head by partial resync (its offsets are the
#     head's), the transfers go on, and the read-back at the end finds every
#     committed transfer and the total unchanged;
#  4. the middle restarts: the head redirects it down the chain and it is appended
#     behind the tail; transfers run on the longer chain;
#  5. both replicas end with exactly the head's KVs.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
D="$E2E_TMP/c"
python3 scripts/cluster_config.py "$D" 2 --prefix kvd-e2e-chain --topology chain --mode sync \
  --min-replicas 1 --probe-ms 50 --waiting-ms 200 >/dev/null

status() { repl_status "$D" "$1" "$2"; }               # K EXPR
wait_for() { wait_repl "$1" "$2" "$D" "$3" "$4"; }     # WHAT TIMEOUT_S K EXPR

start_node "$D" 0
start_node "$D" 1
start_node "$D" 2
# Node 0's link 0 goes to node 1; node 1's link 1 to node 2.
wait_for "middle online on the head" 30 0 'd["peers"]["0"]["state"] == "online"'
wait_for "tail online on the middle's relay" 30 1 'd["relay"]["peers"]["1"]["state"] == "online"'
[ "$(status 0 'd["peers"]["1"]["state"]')" = absent ] || fail "the tail should follow the middle, not the head"
pass "chain up: head -> middle -> tail"

timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$D/w.json" --tx 2,2 --tx-shared \
  --tx-inflight 4 --qps 4 --dist zipf --keys 32 --value-size 16 --duration 2 --warmup 0 \
  >"$D/w.out" 2>&1 &
W=$!
sleep 0.5
timeout 60 "$PG" --config "$D/node2.json" --no-huge --json "$D/audit.json" --tx-audit --keys 32 \
  --duration 1.5 --warmup 0 >"$D/audit.out" 2>&1 || { cat "$D/audit.out"; fail "audit at the tail failed"; }
wait "$W" || { cat "$D/w.out"; fail "transfers on the head failed"; }
audits=$(json_field "$D/audit.json" 'd["audits"]')
[ "$audits" -gt 50 ] || { cat "$D/audit.out"; fail "only $audits audits at the tail"; }
[ "$(json_field "$D/w.json" 'd["invariant_holds"]')" = True ] || { cat "$D/w.out"; fail "head invariant"; }
moved=$(json_field "$D/w.json" 'd["committed"]')
conflicts=$(json_field "$D/w.json" 'd["conflicts"]')
[ "$moved" -gt 100 ] && [ "$conflicts" -gt 0 ] || { cat "$D/w.out"; fail "$moved transfers, $conflicts conflicts: no contention"; }
pass "head: $moved concurrent transfers committed, $conflicts aborted by conflicts, total unchanged"
pass "tail: $audits read-only transactions during transfers, each with the right total"

# A transfer held across the reconfiguration (a few hundred ms) must not make the
# transport give up: a retransmission timeout of at least 50 ms (8 retries: > 2 s).
timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$D/tx.json" --tx 4,2 --keys 2000 \
  --value-size 64 --duration 3 --warmup 0 --rto-min-us 50000 --timeout-ms 400 >"$D/tx.out" 2>&1 &
LOAD=$!
sleep 1
kill -KILL "${NODE_PID[1]}"
wait_for "tail online on the head after the middle died" 10 0 'd["peers"]["1"]["state"] == "online"'
full=$(status 0 'd["peers"]["1"]["full_syncs"]')
part=$(status 0 'd["peers"]["1"]["partial_syncs"]')
[ "$full" = 0 ] && [ "$part" -ge 1 ] || fail "the tail rejoined with $full full and $part partial syncs (want a partial one)"
pass "middle killed: the tail follows the head (partial resync, no full sync)"
wait "$LOAD" || { cat "$D/tx.out"; fail "transfers across the reconfiguration failed"; }
inv=$(json_field "$D/tx.json" 'd["invariant_holds"]')
committed=$(json_field "$D/tx.json" 'd["committed"]')
[ "$inv" = True ] && [ "$committed" -gt 100 ] || { cat "$D/tx.out"; fail "bank invariant: $inv after $committed committed transfers"; }
pass "transfers across the kill: $committed committed, every one found, total unchanged"

# The middle comes back (empty: no log file): it asks its configured predecessor, the
# head, which already streams to a live successor and redirects it down the chain; it
# joins behind the tail (node 2's link 1 goes to node 1) instead of becoming a second
# follower of the head.
rm -f "$D/client1.sock" "$D/link1-2.sock" # memif server sockets the killed process left
start_node "$D" 1
wait_for "returning node online behind the tail" 30 2 'd["relay"]["peers"]["1"]["state"] == "online"'
head_peer=$(status 0 'd["peers"]["0"]["state"]')
sent=$(status 0 'd["redirects_sent"]')
followed=$(status 1 'd["redirects_followed"]')
[ "$head_peer" != online ] && [ "$sent" -ge 1 ] && [ "$followed" -ge 1 ] \
  || fail "returning node: head's link to it $head_peer, $sent redirects sent, $followed followed"
pass "returning node appended behind the tail: head -> node2 -> node1 ($sent redirect(s))"
timeout 60 "$PG" --config "$D/node0.json" --no-huge --json "$D/tx2.json" --tx 4,2 --keys 2000 \
  --key-size 12 --value-size 64 --duration 1.5 --warmup 0 --rto-min-us 50000 --timeout-ms 400 \
  >"$D/tx2.out" 2>&1 || { cat "$D/tx2.out"; fail "transfers on the new chain failed"; }
committed=$(json_field "$D/tx2.json" 'd["committed"]')
[ "$(json_field "$D/tx2.json" 'd["invariant_holds"]')" = True ] && [ "$committed" -gt 100 ] \
  || { cat "$D/tx2.out"; fail "transfers on the new chain: $committed committed"; }
pass "transfers on the new chain: $committed committed, total unchanged"

wait_for "tail caught up" 10 0 'int(d["peers"]["1"]["acked_offset"]) == int(d["offset"])'
wait_for "returning node caught up" 10 2 'int(d["relay"]["peers"]["1"]["acked_offset"]) == int(d["offset"])'
stop_node "$D" 1
stop_node "$D" 2
stop_node "$D" 0
same_kvs "$D" 0 2 # the tail holds the head's KVs
same_kvs "$D" 0 1 # and so does the node appended behind it
