# Shared helpers of the end-to-end tests (sourced).
# Each test runs its own dataplane/pktgen pair with private memif sockets and EAL
# file prefixes, so tests never collide with each other or with scripts/run.sh.

E2E_TMP=$(mktemp -d /tmp/kvd-e2e.XXXXXX)
E2E_PIDS=()
DP=target/release/dataplane
PG=target/release/pktgen
# The config of start_dataplane / run_pktgen (a test may point it at a variant).
E2E_CONFIG=${E2E_CONFIG:-configs/memif.json}

e2e_cleanup() {
  for p in "${E2E_PIDS[@]:-}"; do
    [ -n "$p" ] && kill -KILL "$p" 2>/dev/null || true
  done
  [ -n "${E2E_KEEP:-}" ] && echo "kept $E2E_TMP" && return 0
  rm -rf "$E2E_TMP" /dev/hugepages/kvd-e2e-* 2>/dev/null || true
}
trap e2e_cleanup EXIT

fail() { echo "FAIL: $*"; exit 1; }
pass() { echo "PASS: $*"; }

# etcd_up BASE_PORT: a private etcd on a port in BASE..BASE+1999 (sets ETCD_PORT and
# ETCD_URL), stopped at exit with everything else.
etcd_up() {
  ETCD_PORT=$(($1 + RANDOM % 2000))
  ETCD_URL="http://127.0.0.1:$ETCD_PORT"
  ETCD_DIR="$E2E_TMP/etcd"
  trap 'scripts/etcd.sh stop --port "$ETCD_PORT" --dir "$ETCD_DIR" >/dev/null 2>&1 || true; e2e_cleanup' EXIT
  scripts/etcd.sh start --port "$ETCD_PORT" --dir "$ETCD_DIR" >/dev/null || fail "etcd did not start"
}

# json_field FILE EXPR: a value from a JSON file (python expression on `d`).
json_field() { python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print($2)" "$1"; }

# start_dataplane NAME [extra flags...]: memif server on a private socket; sets DP_PID, DP_LOG, SOCK.
start_dataplane() {
  local name=$1; shift
  SOCK="$E2E_TMP/$name.sock"
  DP_LOG="$E2E_TMP/$name-dataplane.log"
  : >"$DP_LOG"
  "$DP" --config "$E2E_CONFIG" \
    --vdev "net_memif0,role=server,id=0,socket=$SOCK,socket-abstract=no,rsize=11" \
    --file-prefix "kvd-e2e-$name-dp" "$@" >"$DP_LOG" 2>&1 &
  DP_PID=$!
  E2E_PIDS+=("$DP_PID")
  for _ in $(seq 1 300); do
    grep -q "dataplane ready" "$DP_LOG" && return 0
    kill -0 "$DP_PID" 2>/dev/null || { cat "$DP_LOG"; fail "$name: dataplane exited early"; }
    sleep 0.1
  done
  cat "$DP_LOG"; fail "$name: dataplane not ready in 30 s"
}

# run_pktgen NAME [flags...]: pktgen as memif client of the running dataplane.
run_pktgen() {
  local name=$1; shift
  timeout 120 "$PG" --config "$E2E_CONFIG" \
    --vdev "net_memif0,role=client,id=0,socket=$SOCK,socket-abstract=no,rsize=11" \
    --file-prefix "kvd-e2e-$name-pg" "$@"
}

# stop_dataplane: SIGINT, wait for the final stats.
stop_dataplane() {
  kill -INT "$DP_PID" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$DP_PID" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$DP_PID" 2>/dev/null && { kill -KILL "$DP_PID"; fail "dataplane did not stop on SIGINT"; }
  wait "$DP_PID" 2>/dev/null || true
}

# Replicated nodes (configs from scripts/cluster_config.py in DIR): NODE_PID[K].
declare -A NODE_PID

# start_node DIR K: node K (DIR/nodeK.json, --no-huge, final stats in
# DIR/nodeK.stats.json) until "dataplane ready".
start_node() {
  local log="$1/node$2.log"
  "$DP" --config "$1/node$2.json" --no-huge --stats-json "$1/node$2.stats.json" >"$log" 2>&1 &
  NODE_PID[$2]=$!
  E2E_PIDS+=("$!")
  for _ in $(seq 1 300); do
    grep -q "dataplane ready" "$log" && return 0
    kill -0 "${NODE_PID[$2]}" 2>/dev/null || { cat "$log"; fail "node$2 exited early"; }
    sleep 0.1
  done
  cat "$log"; fail "node$2 not ready in 30 s"
}

# stop_node DIR K: SIGINT, wait for its final stats.
stop_node() {
  kill -INT "${NODE_PID[$2]}" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "${NODE_PID[$2]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${NODE_PID[$2]}" 2>/dev/null && fail "node$2 did not stop on SIGINT"
  wait "${NODE_PID[$2]}" 2>/dev/null || true
}

# repl_status DIR K EXPR: EXPR on node K's /kvd/replication ("?" when it does not answer).
repl_status() {
  target/release/ctlplane replication status --json --config "$1/node$2.json" >"$E2E_TMP/st$2.json" 2>/dev/null \
    || { echo "?"; return; }
  json_field "$E2E_TMP/st$2.json" "$3"
}

# wait_repl WHAT TIMEOUT_S DIR K EXPR: until EXPR holds on node K (fail with WHAT).
wait_repl() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    [ "$(repl_status "$3" "$4" "$5")" = True ] && return 0
    sleep 0.1
  done
  target/release/ctlplane replication status --config "$3/node$4.json" || true
  fail "$1: not within $2 s"
}

# same_kvs DIR A B: nodes A and B of DIR, stopped (final stats written), hold the same KVs.
same_kvs() {
  local d=$1 a b ka kb
  a=$(json_field "$d/node$2.stats.json" 'd["engine_digest"]')
  b=$(json_field "$d/node$3.stats.json" 'd["engine_digest"]')
  ka=$(json_field "$d/node$2.stats.json" 'd["engine_kvs"]')
  kb=$(json_field "$d/node$3.stats.json" 'd["engine_kvs"]')
  [ "$a" = "$b" ] && [ "$ka" = "$kb" ] || fail "node$3 differs from node$2: $ka KVs digest $a vs $kb KVs digest $b"
  pass "node$3 equals node$2: $ka KVs, digest $a"
}
