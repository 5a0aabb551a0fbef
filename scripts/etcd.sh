#!/usr/bin/env bash
# A single-node etcd on localhost for the cluster control plane (crates/kvcluster).
#
#   scripts/etcd.sh start  [--port P] [--dir D]   start (idempotent) and wait until healthy
#   scripts/etcd.sh stop   [--port P] [--dir D]   stop (idempotent); the data dir is kept
#   scripts/etcd.sh status [--port P] [--dir D]   exit 0 and print the endpoint when healthy
#
# P is the client port (default 2379; the peer port is P+1). D holds the data dir, the pid
# file and the log (default: $TMPDIR/kvd-etcd-P, never inside the repository). The data
# dir survives `stop`, so the cluster's epoch key survives an etcd restart; remove D to
# start from nothing. etcd runs with a 25 ms heartbeat and a 250 ms election timeout, so
# that leases of 1 s are granted as asked (etcd's minimum lease TTL is 1.5 election
# timeouts, rounded up to whole seconds: 2 s with its defaults).
set -euo pipefail

usage() { echo "usage: $0 start|stop|status [--port P] [--dir D]" >&2; exit 2; }

[ $# -ge 1 ] || usage
cmd=$1; shift
port=2379
dir=""
while [ $# -gt 0 ]; do
  case "$1" in
    --port) [ $# -ge 2 ] || usage; port=$2; shift 2 ;;
    --dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
    *) usage ;;
  esac
done
case "$port" in ''|*[!0-9]*) echo "etcd.sh: --port must be a number" >&2; exit 2 ;; esac
if [ "$port" -lt 1 ] || [ "$port" -gt 65534 ]; then
  echo "etcd.sh: --port must be in 1..65534 (the peer port is P+1)" >&2; exit 2
fi
peer=$((port + 1))
dir=${dir:-${TMPDIR:-/tmp}/kvd-etcd-$port}
pidfile=$dir/etcd.pid
logfile=$dir/etcd.log
endpoint=http://127.0.0.1:$port

running_pid() {
  # The pid from the pid file when that process is alive and is an etcd.
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  case "$pid" in ''|*[!0-9]*) return 1 ;; esac
  kill -0 "$pid" 2>/dev/null || return 1
  grep -q etcd "/proc/$pid/comm" 2>/dev/null || return 1
  echo "$pid"
}

healthy() {
  ETCDCTL_API=3 etcdctl --endpoints "$endpoint" --dial-timeout 1s --command-timeout 1s \
    endpoint health >/dev/null 2>&1
}

case "$cmd" in
  start)
    command -v etcd >/dev/null || { echo "etcd.sh: etcd not found (scripts/setup.sh installs etcd-server)" >&2; exit 1; }
    command -v etcdctl >/dev/null || { echo "etcd.sh: etcdctl not found (scripts/setup.sh installs etcd-client)" >&2; exit 1; }
    if pid=$(running_pid) && healthy; then
      echo "etcd.sh: already running (pid $pid, $endpoint)"
      exit 0
    fi
    if pid=$(running_pid); then
      echo "etcd.sh: pid $pid is up but not healthy; see $logfile" >&2
      exit 1
    fi
    mkdir -p "$dir"
    rm -f "$pidfile"
    setsid etcd --name kvd --data-dir "$dir/data" \
      --listen-client-urls "$endpoint" --advertise-client-urls "$endpoint" \
      --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
      --initial-cluster "kvd=http://127.0.0.1:$peer" --initial-cluster-state new \
      --heartbeat-interval 25 --election-timeout 250 \
      --auto-compaction-mode periodic --auto-compaction-retention 1h \
      --logger zap --log-level warn \
      </dev/null >>"$logfile" 2>&1 &
    echo $! >"$pidfile"
    for _ in $(seq 1 100); do
      if healthy; then
        echo "etcd.sh: started (pid $(cat "$pidfile"), $endpoint, dir $dir)"
        exit 0
      fi
      if ! running_pid >/dev/null; then
        echo "etcd.sh: etcd exited during start-up; last log lines:" >&2
        tail -n 20 "$logfile" >&2 || true
        rm -f "$pidfile"
        exit 1
      fi
      sleep 0.1
    done
    echo "etcd.sh: not healthy after 10 s; see $logfile" >&2
    exit 1
    ;;
  stop)
    if ! pid=$(running_pid); then
      rm -f "$pidfile"
      echo "etcd.sh: not running"
      exit 0
    fi
    kill -TERM "$pid"
    for _ in $(seq 1 50); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    rm -f "$pidfile"
    echo "etcd.sh: stopped (pid $pid)"
    ;;
  status)
    if pid=$(running_pid) && healthy; then
      echo "etcd.sh: healthy (pid $pid, $endpoint)"
      exit 0
    fi
    if pid=$(running_pid); then
      echo "etcd.sh: pid $pid running but not healthy ($endpoint)"
    else
      echo "etcd.sh: not running ($endpoint)"
    fi
    exit 1
    ;;
  *) usage ;;
esac
