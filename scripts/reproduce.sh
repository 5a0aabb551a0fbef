#!/usr/bin/env bash
# Regenerates the evaluation: every KV-Direct figure and table this software can
# reproduce, YCSB A-F and the peers (Redis, memcached, testpmd), as JSON + PNG, and the
# index README.md (docs/BENCHMARKS.md).
#
# Usage: scripts/reproduce.sh [--quick] [--out DIR] [--only fig09,peers,...]
#   --quick   small sizes, one repetition: a smoke test of the pipeline (<= 5 min)
#   --out     where results go (default results/; the quick run in CI uses a scratch dir)
#   --only    run these steps only (ids: fig06 fig09 fig10 fig11 fig12 fig13 fig14 fig15
#             fig16 ycsb fig20 peers); the index lists the figures already on disk too
# Also reachable as `scripts/bench.sh paper [...]`. Wrap it in `flock /tmp/kvd-dpdk.lock`
# when other DPDK runs may share the machine.
set -euo pipefail
cd "$(dirname "$0")/.."
cmd="scripts/reproduce.sh${*:+ $*}"
out="results"
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case "${args[$i]}" in
    --out) out="${args[$((i + 1))]:-}" ;;
    --out=*) out="${args[$i]#--out=}" ;;
  esac
done
# A scratch --out is not recorded as an absolute path in the JSON.
case "$out" in
  results | results/) ;;
  *) cmd="${cmd//"$out"/<out>}" ;;
esac

scripts/setup.sh >/dev/null
target="${CARGO_TARGET_DIR:-target}"
echo "reproduce: building" >&2
cargo build --release -q -p dataplane -p pktgen
cargo build --release -q -p dataplane --example server_scale
# On its own: ctlplane enables the engine's line accounting (docs/TUNE.md).
cargo build --release -q -p ctlplane
# Run copies of the binaries, so a rebuild elsewhere cannot swap them mid-run.
bin="$(mktemp -d /tmp/kvd-repro-bin.XXXXXX)"
trap 'rm -rf "$bin"' EXIT
cp "$target"/release/{dataplane,pktgen,ctlplane,cpu_stalls,paper_plot,e2e_plot} "$target"/release/examples/server_scale "$bin"/
# A pktgen run of these sizes takes seconds: one still running after 3 minutes hung
# (it is retried; see scripts/repro/live_figs.py).
PYTHONDONTWRITEBYTECODE=1 KVD_BIN_DIR="$bin" KVD_PKTGEN_TIMEOUT="${KVD_PKTGEN_TIMEOUT:-180}" \
  python3 scripts/repro/main.py --command "$cmd" "$@"
