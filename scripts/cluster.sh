#!/usr/bin/env bash
# A replicated cluster on this host: (optionally etcd,) one master and N replicas,
# each a dataplane process with its own file prefix, joined by memif pairs
# (scripts/cluster_config.py writes their configs).
#
#   scripts/cluster.sh up [--replicas N] [--mode async|sync] [--min-replicas K]
#                         [--topology star|chain] [--etcd] [--etcd-port P] [--dir DIR]
#                         [--prefix NAME] [--no-huge]
#   scripts/cluster.sh status [--dir DIR]
#   scripts/cluster.sh restart K [--dir DIR]   kill -9 node K (if it runs) and start it
#                                              again (empty, or from its log file)
#   scripts/cluster.sh down [--dir DIR]
#
# --prefix names the nodes' EAL file prefixes and the etcd cluster (default kvd): two
# clusters on one host need two prefixes, two --dir and, with etcd, two --etcd-port.
# Node k's pktgen attaches with: target/release/pktgen --config DIR/nodek.json ...
# Logs: DIR/nodek.log. Everything runs until `down`. With --etcd, etcd runs on port
# $KVD_ETCD_PORT (default 23790) with its data in DIR/etcd, and roles are elected.
set -euo pipefail
cd "$(dirname "$0")/.."

cmd="${1:-}"
shift || true
node_arg=""
if [ "$cmd" = restart ]; then
  node_arg="${1:-}"
  shift || true
  case "$node_arg" in ''|*[!0-9]*) echo "usage: scripts/cluster.sh restart K [--dir DIR]" >&2; exit 2 ;; esac
fi
prefix=kvd
dir="${KVD_CLUSTER_DIR:-/tmp/kvd-cluster}"
replicas=2
mode=async
min_replicas=0
topology=star
etcd=0
etcd_port="${KVD_ETCD_PORT:-23790}"
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --replicas) replicas=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --min-replicas) min_replicas=$2; shift 2 ;;
    --topology) topology=$2; shift 2 ;;
    --etcd) etcd=1; shift ;;
    --etcd-port) etcd_port=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --no-huge) extra+=(--no-huge); shift ;;
    *) echo "cluster.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
DP=target/release/dataplane
CTL=target/release/ctlplane

node_count() { ls "$dir"/node*.json 2>/dev/null | wc -l; }

wait_ready() { # log timeout_s
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    grep -q "dataplane ready" "$1" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "cluster.sh: $1 did not become ready:" >&2
  tail -5 "$1" >&2
  return 1
}

wait_role() { # node role timeout_s
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    "$CTL" replication status --json --config "$dir/node$1.json" 2>/dev/null | grep -q "\"role\": *\"$2\"" && return 0
    sleep 0.1
  done
  echo "cluster.sh: node$1 did not become $2 in $3 s" >&2
  return 1
}

up() {
  if [ -f "$dir/pids" ]; then
    echo "cluster.sh: a cluster is already up in $dir (run down first)" >&2
    exit 1
  fi
  [ -x "$DP" ] || cargo build --release -q -p dataplane -p ctlplane -p pktgen
  mkdir -p "$dir"
  local url=""
  if [ "$etcd" -eq 1 ]; then
    scripts/etcd.sh start --port "$etcd_port" --dir "$dir/etcd" >/dev/null
    url="http://127.0.0.1:$etcd_port"
  fi
  python3 scripts/cluster_config.py "$dir" "$replicas" --mode "$mode" \
    --min-replicas "$min_replicas" --topology "$topology" ${url:+--etcd "$url"} \
    --prefix "$prefix" --cluster "$prefix" >/dev/null
  # What restart needs: the dataplane flags and the etcd port.
  printf '%s\n' "${extra[@]:-}" >"$dir/extra_flags"
  echo "$etcd_port" >"$dir/etcd_port"
  : >"$dir/pids"
  local k
  # One after the other: a node is the memif server of its links to later nodes, and a
  # memif client whose server socket does not exist yet fails to start.
  for ((k = 0; k <= replicas; k++)); do
    "$DP" --config "$dir/node$k.json" "${extra[@]}" >"$dir/node$k.log" 2>&1 &
    echo "node$k $!" >>"$dir/pids"
    wait_ready "$dir/node$k.log" 30
  done
  if [ "$etcd" -eq 1 ]; then
    # The cluster's first election waits for every node; node0, the configured
    # master, ranks first (docs/FAILOVER.md "Election safety").
    wait_role 0 master 15
  fi
  echo "cluster up in $dir: node0 master, $replicas replicas ($topology), mode $mode, min_replicas $min_replicas"
}

status() {
  local k n
  n=$(node_count)
  [ "$n" -gt 0 ] || { echo "cluster.sh: no cluster in $dir" >&2; exit 1; }
  for ((k = 0; k < n; k++)); do
    echo "== node$k"
    "$CTL" replication status --config "$dir/node$k.json" || true
  done
}

restart() {
  local k=$node_arg pid old
  [ -f "$dir/node$k.json" ] || { echo "cluster.sh: no node$k in $dir" >&2; exit 1; }
  old=$(awk -v n="node$k" '$1 == n {print $2}' "$dir/pids" 2>/dev/null | tail -1)
  if [ -n "$old" ] && kill -0 "$old" 2>/dev/null; then
    kill -KILL "$old" 2>/dev/null || true
    while kill -0 "$old" 2>/dev/null; do sleep 0.05; done
  fi
  # A killed node leaves the memif server sockets it listened on: bind anew (its
  # peers' memif clients redial the newer socket file by themselves).
  rm -f "$dir/client$k.sock" "$dir"/link"$k"-*.sock
  local flags=()
  [ -f "$dir/extra_flags" ] && mapfile -t flags < <(grep -v '^$' "$dir/extra_flags")
  echo "== restart $(date +%T)" >>"$dir/node$k.log"
  "$DP" --config "$dir/node$k.json" "${flags[@]}" >>"$dir/node$k.log" 2>&1 &
  pid=$!
  grep -v "^node$k " "$dir/pids" >"$dir/pids.new" 2>/dev/null || true
  echo "node$k $pid" >>"$dir/pids.new"
  mv "$dir/pids.new" "$dir/pids"
  wait_ready_since "$dir/node$k.log" 30
  echo "node$k restarted (pid $pid)"
}

# wait_ready_since LOG TIMEOUT_S: "dataplane ready" after the log's last restart mark.
wait_ready_since() {
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    awk '/^== restart/ {r = 0} /dataplane ready/ {r = 1} END {exit !r}' "$1" && return 0
    sleep 0.1
  done
  echo "cluster.sh: $1 did not become ready:" >&2
  tail -5 "$1" >&2
  return 1
}

down() {
  if [ -f "$dir/pids" ]; then
    while read -r name pid; do
      kill "$pid" 2>/dev/null || true
    done <"$dir/pids"
    sleep 1
    while read -r name pid; do
      kill -9 "$pid" 2>/dev/null || true
    done <"$dir/pids"
    rm -f "$dir/pids"
  fi
  [ -f "$dir/etcd_port" ] && etcd_port=$(cat "$dir/etcd_port")
  [ -x scripts/etcd.sh ] && [ -d "$dir/etcd" ] && scripts/etcd.sh stop --port "$etcd_port" --dir "$dir/etcd" >/dev/null 2>&1 || true
  echo "cluster down"
}

case "$cmd" in
  up) up ;;
  status) status ;;
  restart) restart ;;
  down) down ;;
  *) echo "usage: scripts/cluster.sh up|status|restart K|down [options]" >&2; exit 2 ;;
esac
