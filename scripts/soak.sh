#!/usr/bin/env bash
# Soak: scripts/soak.sh [MINUTES] (default 10). Verify-mode rounds with every op mix,
# client churn through ctlplane, slab merges and the live fuzzer against one dataplane;
# memory sampled every 10 s; accounting invariant and mbuf baseline checked at the end.
# Writes results/soak.json (scripts/soak.py has the details).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
scripts/setup.sh >/dev/null
cargo build --release -q -p dataplane -p pktgen
cargo build --release -q -p ctlplane
exec python3 scripts/soak.py --minutes "$minutes" "${@:2}"
