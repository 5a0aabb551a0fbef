# A dataplane on net_tap inside a private network namespace, for the end-to-end tests
# whose client speaks from a raw socket on kvtap0 in the same namespace (malformed,
# kvcli, python). Sourced; the caller defines `fail MSG` first.
#
#   tapns_init NAME          namespace, temp dir and cleanup trap; exits 0 with a SKIP
#                            line when not root or netns is not permitted
#   tapns_start DPBIN [ARGS] dataplane on configs/tap.json (--no-huge, its own file
#                            prefix, 64 MiB store) + ARGS; waits until it is ready and
#                            kvtap0 is up. Sets DP_PID and DP_BASE (mbufs in use at
#                            start)
#   tapns_stop               SIGCONT (a test may have paused it), SIGINT, and checks it
#                            stops within 10 s with status 0
#   nsx CMD...               runs CMD in the namespace
#
# The namespace keeps the host's IPv6 chatter and routing away from kvtap0: only the
# test's own frames reach the dataplane. `ip netns exec` execs the program, so DP_PID is
# the dataplane's own PID.

tapns_init() {
  TAPNS_NAME=$1
  NS="kvd-e2e-$1-$$"
  PREFIX="kvd-e2e-$1-dp-$$"
  TMP=$(mktemp -d "/tmp/kvd-e2e-$1.XXXXXX")
  DP_PID=""
  trap tapns_cleanup EXIT
  if [ "$(id -u)" -ne 0 ] || ! ip netns add "$NS" 2>/dev/null; then
    echo "SKIP: needs root/netns (ip netns add not permitted)"; trap - EXIT; rm -rf "$TMP"; exit 0
  fi
  nsx ip link set lo up
  nsx sysctl -qw net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1
}

nsx() { ip netns exec "$NS" "$@"; }

tapns_cleanup() {
  set +e
  if [ -n "$DP_PID" ] && kill -0 "$DP_PID" 2>/dev/null; then
    kill -CONT "$DP_PID" 2>/dev/null; kill -KILL "$DP_PID" 2>/dev/null; wait "$DP_PID" 2>/dev/null
  fi
  ip netns del "$NS" 2>/dev/null
  if [ -n "${KEEP_TMP:-}" ]; then echo "kept $TMP"; else rm -rf "$TMP"; fi
  rm -rf "/var/run/dpdk/$PREFIX" 2>/dev/null
}

tapns_start() {
  local bin=$1; shift
  : >"$TMP/dp.log"  # exists before the wait loop greps it
  ip netns exec "$NS" "$bin" --config configs/tap.json --no-huge \
    --file-prefix "$PREFIX" --mem-mb 64 "$@" >"$TMP/dp.log" 2>&1 &
  DP_PID=$!
  for _ in $(seq 1 200); do
    grep -q "dataplane ready" "$TMP/dp.log" && break
    kill -0 "$DP_PID" 2>/dev/null || { cat "$TMP/dp.log"; fail "dataplane exited early"; }
    sleep 0.1
  done
  grep -q "dataplane ready" "$TMP/dp.log" || { cat "$TMP/dp.log"; fail "dataplane not ready in 20 s"; }
  DP_BASE=$(sed -n 's/.*dataplane ready (mbufs in use \([0-9]*\)).*/\1/p' "$TMP/dp.log")
  for _ in $(seq 1 50); do
    nsx ip link show kvtap0 2>/dev/null | grep -q ",UP" && break
    sleep 0.1
  done
  nsx ip link show kvtap0 | grep -q ",UP" || fail "kvtap0 not up"
}

tapns_stop() {
  kill -CONT "$DP_PID" 2>/dev/null || true
  kill -INT "$DP_PID"
  for _ in $(seq 1 100); do kill -0 "$DP_PID" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$DP_PID" 2>/dev/null; then fail "dataplane did not stop on SIGINT"; fi
  local rc=0
  wait "$DP_PID" || rc=$?
  DP_PID=""
  [ "$rc" -eq 0 ] || fail "dataplane exited with status $rc"
}
