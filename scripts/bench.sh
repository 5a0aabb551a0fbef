#!/usr/bin/env bash
# Benchmarks: scripts/bench.sh SUITE [args]. The suites — what each measures, needs
# built and runs — are declared once in scripts/suites.py (`scripts/bench.sh --list`);
# each writes JSON (+ PNG plots) into results/ with its command and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 scripts/suites.py "$@"
