#!/usr/bin/env bash
# The nemesis suite's short form (issue 29): six named seeded schedules against a
# real 3-node etcd-managed cluster — freeze + empty restart, etcd wiped with the
# master killed while a replica lags, kill/etcd stall/freeze on a chain, async mode
# with a killed replica and a frozen master, and the history workload (kernel clients
# recording every operation; scripts/history_check.py) through a master kill and a
# master freeze, and through the master cut from etcd (not from its clients) — each
# checked for lost acknowledged writes, stale reads, wipes, split
# brain, crashes, duplicate effects and bank totals (scripts/nemesis.py; the long form
# is scripts/bench.sh nemesis). The history schedule needs the kvdirect wheel
# (scripts/e2e/python.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp /tmp/kvd-nemesis.XXXXXX.json)
trap 'rm -f "$out"' EXIT
if python3 scripts/nemesis.py --quick --no-huge --out "$out"; then
  echo "PASS: nemesis short form: $(python3 -c "import json,sys; d=json.load(open(sys.argv[1])); print(d['schedules'], 'schedules,', d['operations'], 'operations, 0 failed')" "$out")"
else
  echo "FAIL: nemesis short form (each failing schedule is printed with its seed)"
  python3 -c "import json,sys; d=json.load(open(sys.argv[1])); [print(r['seed'], r['verdict'], r.get('error', ''), r.get('events')) for r in d['runs'] if r['verdict'] != 'ok']" "$out" || true
  exit 1
fi
