#!/usr/bin/env bash
# Benchmarks. Usage: scripts/bench.sh {engine|e2e|all}
# Each suite writes JSON (+ PNG plots) into results/ with the command and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
suite="${1:-all}"
shift || true
case "$suite" in
  engine) exec scripts/bench-engine.sh "$@" ;;
  e2e) exec scripts/bench-e2e.sh "$@" ;;
  all) scripts/bench-engine.sh "$@"; scripts/bench-e2e.sh "$@" ;;
  *) echo "usage: scripts/bench.sh {engine|e2e|all}" >&2; exit 2 ;;
esac
