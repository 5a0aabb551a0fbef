#!/usr/bin/env bash
# Deep fuzzing of the wire decoders with cargo-fuzz (libFuzzer).
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS  libFuzzer time per target (default 60)
#   TARGET   subset of the targets in fuzz/Cargo.toml (default: all of them)
# Environment:
#   FUZZ_SANITIZER  cargo-fuzz sanitizer (default address; "none" is ~2x faster,
#                   kvwire itself forbids unsafe code)
#
# For each target: runs libFuzzer for SECONDS starting from fuzz/seeds/<t>/ and the
# committed corpus fuzz/corpus/<t>/ (new inputs are written there), then minimizes
# that corpus (cargo fuzz cmin) so it stays small enough to commit; the stable
# `cargo test -p kvwire --test fuzz_lite` replays it in every CI run.
# Writes results/fuzz.json. Exits non-zero if any target left a crash, leak,
# timeout or OOM artifact, printing how to reproduce it.
#
# cargo-fuzz wants nightly; on a stable toolchain RUSTC_BOOTSTRAP=1 unlocks the
# -Z flags it passes. On a shared machine, run it under the team's lock.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

seconds="${1:-60}"
shift || true
case "$seconds" in
  '' | *[!0-9]*) echo "usage: scripts/fuzz.sh [SECONDS] [TARGET...]" >&2; exit 2 ;;
esac
sanitizer="${FUZZ_SANITIZER:-address}"
# cargo-fuzz version known to build and run on the stable toolchain.
cargo_fuzz_version="0.13.2"

export RUSTC_BOOTSTRAP=1
export CARGO_TERM_COLOR=never

if ! cargo fuzz --version >/dev/null 2>&1; then
  echo "== cargo install cargo-fuzz $cargo_fuzz_version"
  cargo install cargo-fuzz --version "$cargo_fuzz_version" --locked
fi
echo "== $(cargo fuzz --version)"

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(cargo fuzz list)
fi

# Frames up to a jumbo MTU; batches are payloads of at most one frame.
max_len_of() {
  case "$1" in
    batch_reader) echo 9000 ;;
    *) echo 9100 ;;
  esac
}

# --debug-assertions: integer overflow and debug_assert! panics count as crashes.
build_flags=(--sanitizer "$sanitizer" --debug-assertions)
echo "== cargo fuzz build ${build_flags[*]}"
cargo fuzz build "${build_flags[@]}"

logs="$root/fuzz/artifacts/logs"
mkdir -p "$logs"
summary="$logs/summary.tsv"
: >"$summary"
failed=0

list_artifacts() {
  # Failure artifacts libFuzzer writes (slow-unit-* files are only reports).
  find "$root/fuzz/artifacts/$1" -maxdepth 1 -type f \
    \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) \
    2>/dev/null | sort
}

for t in "${targets[@]}"; do
  corpus="$root/fuzz/corpus/$t"
  seeds="$root/fuzz/seeds/$t"
  max_len=$(max_len_of "$t")
  mkdir -p "$corpus" "$root/fuzz/artifacts/$t"
  before=$(list_artifacts "$t")
  log="$logs/$t.log"
  echo "== $t: ${seconds}s (max_len $max_len)"
  set +e
  cargo fuzz run "${build_flags[@]}" "$t" "$corpus" "$seeds" -- \
    -max_total_time="$seconds" -max_len="$max_len" -timeout=10 \
    -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  grep -E '^#[0-9]+[[:space:]]+DONE|^Done [0-9]+ runs|^stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' "$log" || true
  new_artifacts=$(comm -13 <(echo "$before") <(list_artifacts "$t") | sed '/^$/d')
  if [ "$rc" -ne 0 ] && [ -z "$new_artifacts" ]; then
    tail -n 30 "$log" >&2
    echo "$t: cargo fuzz run failed (exit $rc) without an artifact; log: $log" >&2
    exit 1
  fi
  if [ -n "$new_artifacts" ]; then
    failed=1
    tail -n 40 "$log" >&2
  fi

  files_found=$(find "$corpus" -type f | wc -l)
  echo "== $t: cargo fuzz cmin ($files_found files)"
  cargo fuzz cmin "${build_flags[@]}" "$t" "$corpus" -- -max_len="$max_len" \
    >"$logs/$t.cmin.log" 2>&1 || {
    tail -n 30 "$logs/$t.cmin.log" >&2
    echo "$t: cargo fuzz cmin failed; log: $logs/$t.cmin.log" >&2
    exit 1
  }
  files=$(find "$corpus" -type f | wc -l)
  bytes=$(find "$corpus" -type f -printf '%s\n' | awk '{s += $1} END {print s + 0}')
  echo "== $t: corpus $files_found -> $files files, $bytes bytes"
  artifacts_field=$(echo "$new_artifacts" | sed "s#^$root/##" | paste -sd ' ' -)
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$log" "$files_found" "$files" "$bytes" \
    "$max_len" "$artifacts_field" >>"$summary"
done

total_kb=$(find "$root/fuzz/corpus" -type f -printf '%s\n' | awk '{s += $1} END {print int(s / 1024)}')
echo "== fuzz/corpus: ${total_kb} KB"
if [ "$total_kb" -gt 512 ]; then
  echo "warning: fuzz/corpus is over 512 KB; commit it only after a look" >&2
fi

FUZZ_CMD="scripts/fuzz.sh $seconds${*:+ $*}" FUZZ_SECONDS="$seconds" \
  FUZZ_SANITIZER="$sanitizer" FUZZ_VERSION="$(cargo fuzz --version)" \
  python3 - "$summary" <<'EOF'
"""Collects the per-target libFuzzer logs into results/fuzz.json."""
import datetime
import json
import os
import re
import sys


def cpu_model():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def parse_log(path):
    """Execs, exec/s, wall seconds and the last coverage line of a libFuzzer log."""
    text = open(path, errors="replace").read()
    out = {}
    status = re.findall(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/", text, re.M)
    if status:
        last = status[-1]
        out["cov"], out["ft"] = int(last[1]), int(last[2])
        out["execs"] = int(last[0])
    m = re.search(r"^stat::number_of_executed_units:\s+(\d+)", text, re.M)
    if m:
        out["execs"] = int(m.group(1))
    m = re.search(r"^Done \d+ runs in (\d+) second", text, re.M)
    if m:
        out["wall_seconds"] = int(m.group(1))
    m = re.search(r"^stat::average_exec_per_sec:\s+(\d+)", text, re.M)
    if m:
        out["execs_per_sec"] = int(m.group(1))
    m = re.search(r"^stat::new_units_added:\s+(\d+)", text, re.M)
    if m:
        out["new_units"] = int(m.group(1))
    return out


seconds = int(os.environ["FUZZ_SECONDS"])
targets = {}
for line in open(sys.argv[1]):
    name, log, found, files, size, max_len, artifacts = line.rstrip("\n").split("\t")
    stats = parse_log(log)
    arts = artifacts.split() if artifacts else []
    execs = stats.get("execs", 0)
    wall = stats.get("wall_seconds") or seconds
    targets[name] = {
        "seconds": seconds,
        "execs": execs,
        "execs_per_sec": stats.get("execs_per_sec", round(execs / max(wall, 1))),
        "cov": stats.get("cov"),
        "ft": stats.get("ft"),
        "new_units": stats.get("new_units"),
        "max_len": int(max_len),
        "corpus_files_before_cmin": int(found),
        "corpus_files": int(files),
        "corpus_bytes": int(size),
        "crashes": len(arts),
        "crash_artifacts": arts,
    }

result = {
    "command": os.environ["FUZZ_CMD"],
    "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
    "machine": {"cpu": cpu_model(), "cpus": os.cpu_count()},
    "fuzzer": os.environ["FUZZ_VERSION"] + " (libFuzzer), RUSTC_BOOTSTRAP=1",
    "sanitizer": os.environ["FUZZ_SANITIZER"],
    "debug_assertions": True,
    "targets": targets,
    "fuzz_execs_per_target": {k: v["execs"] for k, v in targets.items()},
    "crashes": sum(v["crashes"] for v in targets.values()),
}
os.makedirs("results", exist_ok=True)
with open("results/fuzz.json", "w") as f:
    json.dump(result, f, indent=1)
    f.write("\n")
for k, v in targets.items():
    print(f"{k}: {v['execs']} execs ({v['execs_per_sec']}/s), cov {v['cov']} ft {v['ft']}, "
          f"corpus {v['corpus_files']} files / {v['corpus_bytes']} B, crashes {v['crashes']}")
print("wrote results/fuzz.json")
EOF

if [ "$failed" -ne 0 ]; then
  echo >&2
  echo "FUZZ FAILURE: artifacts left by libFuzzer:" >&2
  while IFS=$'\t' read -r t _ _ _ _ _ arts; do
    for a in $arts; do
      echo "  $t: $a" >&2
      echo "    reproduce: RUSTC_BOOTSTRAP=1 cargo fuzz run $t $a" >&2
      echo "    minimize:  RUSTC_BOOTSTRAP=1 cargo fuzz tmin $t $a" >&2
    done
  done <"$summary"
  echo "Fix the decoder, add a regression test, and copy the input into fuzz/corpus/<target>/." >&2
  exit 1
fi
