#!/usr/bin/env bash
# A memif client that dies while its server is frozen (issue 29, the SIGCONT crash).
#
# DPDK 22.11's memif server accepts a connection whose client already closed it, fails
# to send its HELLO (EPIPE), and closes the socket without unregistering the interrupt
# callback it had just registered; its interrupt thread then panics ("Error adding fd N
# epoll_ctl, Bad file descriptor"). `scripts/memif_sigcont_repro.sh` shows it with
# dpdk-testpmd alone. The dataplane works around it (crates/dpdk/src/memif_fix.rs).
#
# The sequence, twice: the dataplane (memif server) is frozen with SIGSTOP; a pktgen
# connects (its connection waits in the frozen server's queue) and is killed; SIGCONT.
# The dataplane must live on, and then serve a verified pktgen run.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
cargo build --release -q -p dataplane -p pktgen

start_dataplane sigcont --stats-json "$E2E_TMP/dp.json"
for round in 1 2; do
  kill -STOP "$DP_PID"
  run_pktgen "doomed-$round" --keys 100 --duration 5 --warmup 0 >"$E2E_TMP/doomed-$round.out" 2>&1 &
  doomed=$!
  # Until its connect() is queued at the frozen server (EAL up, memif probed).
  for _ in $(seq 1 100); do
    grep -q "EAL\|pktgen" "$E2E_TMP/doomed-$round.out" 2>/dev/null && break
    sleep 0.1
  done
  sleep 3
  # The pktgen process itself (run_pktgen runs it under `timeout` in a subshell).
  pkill -KILL -f -- "--file-prefix kvd-e2e-doomed-$round-pg" || true
  wait "$doomed" 2>/dev/null || true
  kill -CONT "$DP_PID"
  sleep 2
  if ! kill -0 "$DP_PID" 2>/dev/null; then
    tail -5 "$DP_LOG"
    fail "round $round: the dataplane died after SIGCONT"
  fi
  grep -q "PANIC" "$DP_LOG" && { tail -5 "$DP_LOG"; fail "round $round: PANIC in the log"; }
  pass "round $round: a client killed while the server was frozen; the server lives on"
done
run_pktgen after --keys 2000 --load --get 0.5 --put 0.5 --duration 1 --warmup 0.2 --verify \
  >"$E2E_TMP/after.out" 2>&1 || { cat "$E2E_TMP/after.out"; fail "no verified run after the thaws"; }
stop_dataplane
pass "memif_sigcont: served a verified run after two clients died at a frozen server"
