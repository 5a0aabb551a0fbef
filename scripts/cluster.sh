#!/usr/bin/env bash
# A replicated cluster on this host: (optionally etcd,) one master and N replicas,
# each a dataplane process with its own file prefix, joined by memif pairs
# (scripts/cluster_config.py writes their configs).
#
#   scripts/cluster.sh up [--replicas N] [--mode async|sync] [--min-replicas K]
#                         [--topology star|chain] [--etcd] [--etcd-port P] [--dir DIR]
#                         [--prefix NAME] [--clients memif|tap] [--idle MODE] [--no-huge]
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
#
# --idle (default adaptive): server.idle of every node. Several nodes on one host share
# its cores, so by default their idle lcores sleep (a cluster at rest takes 0.09 of a
# core instead of all of them, at about 1 ms per sync write at low rates;
# docs/OPERATIONS.md "Idle lcores"); --idle yield for the lowest latency.
#
# --clients tap: each node serves kernel clients on its own net_tap interface PREFIXtK
# with its own address, joined by a bridge PREFIXbr (created here, removed by `down`):
#   target/release/kvcli --config DIR/node0.json --iface PREFIXbr put k v
# reaches whichever node answers and follows the master through failovers (every
# node's config lists them all; docs/FAILOVER.md "Clients"). The Python binding too:
#   kvdirect.Client("PREFIXbr", config="DIR/node0.json")
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
clients=memif
idle=adaptive
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
    --clients) clients=$2; shift 2 ;;
    --idle) idle=$2; shift 2 ;;
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

# The bridge of --clients tap: the kernel clients' side of every node's tap. Its MAC
# is the clients' (the config's pktgen.mac), so the nodes' answers are delivered to the
# host's raw sockets on it.
bridge_up() {
  local br=${prefix}br mac
  mac=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pktgen"]["mac"])' "$dir/node0.json")
  ip link del "$br" 2>/dev/null || true
  ip link add "$br" type bridge
  sysctl -qw "net.ipv6.conf.$br.disable_ipv6=1" 2>/dev/null || true
  ip link set "$br" address "$mac"
  ip link set "$br" up
}

# attach_tap K: node K's net_tap interface (made by its dataplane) into the bridge.
attach_tap() {
  [ "$(cat "$dir/clients" 2>/dev/null)" = tap ] || return 0
  local p i
  p=$(cat "$dir/prefix" 2>/dev/null || echo "$prefix")
  local br=${p}br tap=${p}t$1
  for ((i = 0; i < 50; i++)); do
    ip link show "$tap" >/dev/null 2>&1 && break
    sleep 0.1
  done
  sysctl -qw "net.ipv6.conf.$tap.disable_ipv6=1" 2>/dev/null || true
  ip link set "$tap" master "$br"
  ip link set "$tap" up
}

wait_replicas() { # count timeout_s: node0 counts `count` good replicas
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    "$CTL" replication status --json --config "$dir/node0.json" 2>/dev/null \
      | python3 -c 'import json,sys; sys.exit(json.load(sys.stdin).get("good_replicas", 0) < int(sys.argv[1]))' "$1" \
      && return 0
    sleep 0.1
  done
  echo "cluster.sh: node0 does not count $1 replica(s) in sync after $2 s" >&2
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
    --prefix "$prefix" --cluster "$prefix" --clients "$clients" --idle "$idle" >/dev/null
  # What restart and down need: the dataplane flags, the etcd port, the clients' way in.
  printf '%s\n' "${extra[@]:-}" >"$dir/extra_flags"
  echo "$etcd_port" >"$dir/etcd_port"
  echo "$clients" >"$dir/clients"
  echo "$prefix" >"$dir/prefix"
  if [ "$clients" = tap ]; then bridge_up; fi
  : >"$dir/pids"
  local k
  # One after the other: a node is the memif server of its links to later nodes, and a
  # memif client whose server socket does not exist yet fails to start.
  for ((k = 0; k <= replicas; k++)); do
    "$DP" --config "$dir/node$k.json" "${extra[@]}" >"$dir/node$k.log" 2>&1 &
    echo "node$k $!" >>"$dir/pids"
    wait_ready "$dir/node$k.log" 30
    attach_tap "$k"
  done
  if [ "$etcd" -eq 1 ]; then
    # The cluster's first election waits for every node; node0, the configured
    # master, ranks first (docs/FAILOVER.md "Election safety").
    wait_role 0 master 15
  fi
  # Writable: the master counts min_replicas replicas in sync.
  if [ "$min_replicas" -gt 0 ]; then
    wait_replicas "$min_replicas" 30
  fi
  echo "cluster up in $dir: node0 master, $replicas replicas ($topology), mode $mode, min_replicas $min_replicas, idle $idle"
  if [ "$clients" = tap ]; then
    echo "kernel clients: --config $dir/node0.json --iface ${prefix}br"
  fi
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
  attach_tap "$k"
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
  if [ "$(cat "$dir/clients" 2>/dev/null)" = tap ]; then
    ip link del "$(cat "$dir/prefix")br" 2>/dev/null || true
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
