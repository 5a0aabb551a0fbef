#!/usr/bin/env bash
# Idempotent machine set-up: DPDK runtime + dev packages, libclang for bindgen,
# pkg-config, capture tools for the tests, fonts for plots; hugepages when possible.
# Safe to run again: it installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

pkgs=(dpdk dpdk-dev libdpdk-dev pkg-config libclang-dev clang tshark tcpdump
      iproute2 libfontconfig1-dev libfreetype6-dev fonts-dejavu-core python3-pip
      prometheus
      redis-server memcached libmemcached-tools
      etcd-server etcd-client protobuf-compiler libprotobuf-dev)  # kvcluster: etcd 3.4, etcdctl; protoc + well-known .protos for etcd-client
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  $SUDO apt-get update -qq
  echo "wireshark-common wireshark-common/install-setuid boolean false" | $SUDO debconf-set-selections
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# scapy: an independent ICRC implementation used by the capture test.
if ! python3 -c 'import scapy' 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check scapy 2>/dev/null \
    || python3 -m pip install -q --disable-pip-version-check --break-system-packages scapy
fi
# maturin (builds the kvdirect wheel, python/), pytest (its tests) and mypy (its type
# stubs against the examples), for scripts/e2e/python.sh; redis (redis-py: the clients
# of scripts/nemesis_redis.py, Redis with Sentinel under the nemesis).
for mod in maturin pytest mypy redis; do
  if ! python3 -c "import $mod" 2>/dev/null; then
    python3 -m pip install -q --disable-pip-version-check "$mod" 2>/dev/null \
      || python3 -m pip install -q --disable-pip-version-check --break-system-packages "$mod"
  fi
done

if ! command -v cargo >/dev/null; then
  echo "setup: cargo not found; install a Rust toolchain (rustup) first" >&2
  exit 1
fi
pkg-config --exists libdpdk || { echo "setup: libdpdk not found by pkg-config" >&2; exit 1; }

# Hugepages: try to reserve 1 GiB of 2 MiB pages and mount hugetlbfs. When this is
# not allowed (containers, no root), the programs fall back to --no-huge.
want=${KVD_HUGEPAGES:-640}
if [ -w /proc/sys/vm/nr_hugepages ] || [ -n "$SUDO" ]; then
  have=$(cat /proc/sys/vm/nr_hugepages 2>/dev/null || echo 0)
  if [ "$have" -lt "$want" ]; then
    echo "$want" | $SUDO tee /proc/sys/vm/nr_hugepages >/dev/null 2>&1 || true
  fi
  if ! grep -q hugetlbfs /proc/mounts; then
    $SUDO mkdir -p /dev/hugepages 2>/dev/null || true
    $SUDO mount -t hugetlbfs nodev /dev/hugepages 2>/dev/null || true
  fi
fi
free_pages=$(awk '/HugePages_Free/ {print $2}' /proc/meminfo)
if grep -q hugetlbfs /proc/mounts && [ "${free_pages:-0}" -gt 0 ]; then
  echo "setup: ok (DPDK $(pkg-config --modversion libdpdk), ${free_pages} free 2 MiB hugepages)"
else
  echo "setup: ok (DPDK $(pkg-config --modversion libdpdk), no hugepages: --no-huge fallback)"
fi
