#!/usr/bin/env bash
# DPDK 22.11's memif PMD unmaps a departed peer's regions while the data path may be
# inside a burst on them (crates/dpdk/src/memif_unmap.rs has the story and the
# dataplane's workaround). This runs a dataplane that busy-polls (`--idle poll`) beside
# one busy thread (so a burst is sometimes preempted, as on a loaded host), lets
# ROUNDS short pktgen runs connect and end, and counts the dataplane's deaths,
# starting it again after each. Usage:
#   scripts/memif_disconnect_repro.sh [ROUNDS] [DATAPLANE_BINARY]
# (default 60 rounds, target/release/dataplane; build a dataplane without the
# workaround to see the crash: its `munmap` renamed, e.g. #[export_name = "munmap_off"]).
set -uo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-60}
dp_bin=${2:-target/release/dataplane}
dir=$(mktemp -d /tmp/kvd-disc-repro.XXXXXX)
exec 9>/tmp/kvd-dpdk.lock
flock 9
sock="$dir/m.sock"
vdev="id=0,socket=$sock,socket-abstract=no,rsize=11"
python3 -c 'import time; t = time.time()
while time.time() - t < 3600: pass' &
busy=$!
dp=
start_dp() {
  rm -f "$sock"
  "$dp_bin" --config configs/memif.json --idle poll --file-prefix kvd-disc \
    --vdev "net_memif0,role=server,$vdev" >"$dir/dp.log" 2>&1 &
  dp=$!
  for _ in $(seq 1 300); do grep -q "dataplane ready" "$dir/dp.log" && return; sleep 0.1; done
  echo "dataplane did not start"; cat "$dir/dp.log"; exit 1
}
cleanup() {
  kill "$busy" 2>/dev/null
  [ -n "$dp" ] && kill -INT "$dp" 2>/dev/null && wait "$dp" 2>/dev/null
  rm -rf "$dir" /dev/hugepages/kvd-disc* /var/run/dpdk/kvd-disc*
}
trap cleanup EXIT
start_dp
deaths=0
for _ in $(seq 1 "$rounds"); do
  target/release/pktgen --config configs/memif.json --file-prefix kvd-disc-pg \
    --vdev "net_memif0,role=client,$vdev" --keys 1000 --value-size 8 --get 0.9 --put 0.1 \
    --ops-per-packet 8 --duration 0.2 >"$dir/pg.log" 2>&1
  rm -rf /dev/hugepages/kvd-disc-pg* /var/run/dpdk/kvd-disc-pg
  sleep 0.1
  if ! kill -0 "$dp" 2>/dev/null; then
    deaths=$((deaths + 1))
    wait "$dp" 2>/dev/null
    start_dp
  fi
done
echo "memif disconnect: $dp_bin died $deaths times in $rounds disconnects"
