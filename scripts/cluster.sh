#!/usr/bin/env bash
# A replicated cluster on this host: (optionally etcd,) one master and N replicas,
# each a dataplane process with its own file prefix, joined by memif pairs
# (scripts/cluster_config.py writes their configs).
#
#   scripts/cluster.sh up [--replicas N] [--mode async|sync] [--min-replicas K]
#                         [--topology star|chain] [--etcd] [--dir DIR] [--no-huge]
#   scripts/cluster.sh status [--dir DIR]
#   scripts/cluster.sh down [--dir DIR]
#
# Node k's pktgen attaches with: target/release/pktgen --config DIR/nodek.json ...
# Logs: DIR/nodek.log. Everything runs until `down`. With --etcd, etcd runs on port
# $KVD_ETCD_PORT (default 23790) with its data in DIR/etcd, and roles are elected.
set -euo pipefail
cd "$(dirname "$0")/.."

cmd="${1:-}"
shift || true
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
    --min-replicas "$min_replicas" --topology "$topology" ${url:+--etcd "$url"} >/dev/null
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
  [ -x scripts/etcd.sh ] && [ -d "$dir/etcd" ] && scripts/etcd.sh stop --port "$etcd_port" --dir "$dir/etcd" >/dev/null 2>&1 || true
  echo "cluster down"
}

case "$cmd" in
  up) up ;;
  status) status ;;
  down) down ;;
  *) echo "usage: scripts/cluster.sh up|status|down [options]" >&2; exit 2 ;;
esac
