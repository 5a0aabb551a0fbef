#!/usr/bin/env bash
# Reproduces DPDK 22.11's memif server crash with dpdk-testpmd alone (issue 29; the
# dataplane's workaround is crates/dpdk/src/memif_fix.rs, its test
# scripts/e2e/memif_sigcont.sh). A testpmd memif server is frozen (SIGSTOP); a testpmd
# memif client connects (its connection waits in the frozen server's listen queue) and
# is killed; on SIGCONT the server accepts the dead connection, fails to send its HELLO
# (EPIPE), closes the socket without unregistering its interrupt callback, and its
# interrupt thread panics: "Error adding fd N epoll_ctl, Bad file descriptor".
# Prints what happened each round; exits 0 when the server died every round (the bug is
# there), 1 otherwise. Usage: scripts/memif_sigcont_repro.sh [ROUNDS]
set -uo pipefail
rounds=${1:-3}
dir=$(mktemp -d /tmp/kvd-memif-repro.XXXXXX)
trap 'kill -9 $(jobs -p) 2>/dev/null; rm -rf "$dir"' EXIT
exec 9>/tmp/kvd-dpdk.lock
flock 9
common="-l 0,1 --no-huge -m 512 --no-pci"
memif="id=0,socket=$dir/m.sock,socket-abstract=no"
fwd="-- --no-mlockall --total-num-mbufs 8192 --auto-start --stats-period 1"
died=0
for r in $(seq 1 "$rounds"); do
  rm -f "$dir/m.sock"
  # shellcheck disable=SC2086
  dpdk-testpmd $common --file-prefix kvd-repro-a --vdev "net_memif0,role=server,$memif" \
    $fwd --forward-mode=io >"$dir/a.log" 2>&1 &
  a=$!
  sleep 3
  kill -STOP "$a"
  # shellcheck disable=SC2086
  dpdk-testpmd $common --file-prefix kvd-repro-b --vdev "net_memif0,role=client,$memif" \
    $fwd --forward-mode=txonly >"$dir/b.log" 2>&1 &
  b=$!
  sleep 3
  kill -9 "$b"
  wait "$b" 2>/dev/null
  kill -CONT "$a"
  sleep 3
  if kill -0 "$a" 2>/dev/null; then
    echo "round $r: the server lives"
    kill -9 "$a"
  else
    died=$((died + 1))
    echo "round $r: the server died: $(grep -m1 -A1 'PANIC' "$dir/a.log" | tr '\n' ' ')"
  fi
  wait "$a" 2>/dev/null
done
echo "memif_sigcont_repro: the server died in $died of $rounds rounds"
[ "$died" -eq "$rounds" ]
