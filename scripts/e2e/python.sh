#!/usr/bin/env bash
# The Python bindings (python/, module kvdirect) against a real dataplane on net_tap,
# inside a private netns.
#
# Builds the dataplane and the kvdirect wheel (maturin, release), installs the wheel
# with pip (--force-reinstall), starts the dataplane on kvtap0 (configs/tap.json,
# --no-huge, its own --file-prefix) and runs python/tests with pytest inside the
# namespace: every method of kvdirect.Client over the kernel transport (AF_PACKET on
# kvtap0), a 10 000-op batch checked op by op against a dict model, error cases,
# and the server gone (dataplane paused with SIGSTOP) -> UnreachableError within a
# bounded time, then back (SIGCONT) -> the client reconnects. Finally the dataplane
# must stop cleanly on SIGINT.
#
# Environment: CARGO_TARGET_DIR (default ./target) holds both builds; KVD_PYTEST_ARGS
# adds pytest arguments (e.g. "-k batch"); KVD_PY_BENCH=FILE also runs
# python/bench/bench_client.py in the namespace and writes its JSON to FILE.
set -euo pipefail
cd "$(dirname "$0")/../.."

TARGET_DIR=${CARGO_TARGET_DIR:-$PWD/target}
fail() { echo "FAIL: python: $*"; exit 1; }
source scripts/e2e/tapns.sh
tapns_init python

python3 -m maturin --version >/dev/null 2>&1 || fail "maturin not installed (run scripts/setup.sh)"
python3 -c 'import pytest' 2>/dev/null || fail "pytest not installed (run scripts/setup.sh)"

START=$(date +%s)
CARGO_TARGET_DIR="$TARGET_DIR" timeout 1800 cargo build --release -q -p dataplane -p kvcli \
  || fail "dataplane/kvcli build failed"
DP_BIN="$TARGET_DIR/release/dataplane"

# The wheel: its own Cargo workspace (python/Cargo.lock), built into the same target dir.
W0=$(date +%s)
timeout 1800 python3 -m maturin build --release -q -m python/Cargo.toml -i python3 \
  --target-dir "$TARGET_DIR" -o "$TMP/wheels" >"$TMP/maturin.log" 2>&1 \
  || { cat "$TMP/maturin.log"; fail "maturin build failed"; }
WHEEL=$(ls "$TMP"/wheels/kvdirect-*.whl 2>/dev/null | head -n 1)
[ -n "$WHEEL" ] || { cat "$TMP/maturin.log"; fail "no wheel built"; }
echo "python: wheel $(basename "$WHEEL") built in $(( $(date +%s) - W0 )) s"

# Same fallback as scripts/setup.sh: PEP 668 system interpreters need --break-system-packages.
PIP=(python3 -m pip install -q --disable-pip-version-check --force-reinstall --no-deps)
timeout 300 "${PIP[@]}" "$WHEEL" 2>/dev/null \
  || timeout 300 "${PIP[@]}" --break-system-packages "$WHEEL" \
  || fail "pip install of the wheel failed"

# The wheel carries type stubs (python/kvdirect.pyi, py.typed): the examples pass
# mypy --strict against the installed package.
python3 -c 'import mypy' 2>/dev/null || fail "mypy not installed (run scripts/setup.sh)"
SITE=$(python3 -c 'import kvdirect, os; print(os.path.dirname(kvdirect.__file__))')
[ -f "$SITE/py.typed" ] || [ -f "$SITE/kvdirect/py.typed" ] || ls "$SITE" | grep -q "kvdirect.pyi" \
  || fail "the wheel has no type stubs"
python3 -m mypy --strict python/examples >"$TMP/mypy.log" 2>&1 \
  || { cat "$TMP/mypy.log"; fail "mypy --strict python/examples"; }
echo "PASS: python/mypy: $(tail -n 1 "$TMP/mypy.log")"

tapns_start "$DP_BIN"

rc=0
# shellcheck disable=SC2086  # KVD_PYTEST_ARGS: words on purpose
timeout 600 ip netns exec "$NS" env KVD_IFACE=kvtap0 KVD_CONFIG=configs/tap.json \
  KVD_DATAPLANE_PID="$DP_PID" \
  python3 -m pytest -p no:cacheprovider -q -rs python/tests ${KVD_PYTEST_ARGS:-} \
  2>&1 | tee "$TMP/pytest.log" || rc=$?
SUMMARY=$(grep -E "^=* ?[0-9]+ (passed|failed|error)" "$TMP/pytest.log" | tail -n 1 | tr -d '=' | sed 's/^ *//; s/ *$//')

# Optional: the client benchmark (python/bench/bench_client.py) after passing tests.
if [ "$rc" -eq 0 ] && [ -n "${KVD_PY_BENCH:-}" ]; then
  kill -CONT "$DP_PID" 2>/dev/null || true
  timeout 300 ip netns exec "$NS" python3 python/bench/bench_client.py \
    --iface kvtap0 --config configs/tap.json >"$TMP/bench.json" \
    || fail "bench_client.py failed"
  cp "$TMP/bench.json" "$KVD_PY_BENCH"
  cat "$TMP/bench.json"
fi

# Shared appliance (issue 32): a Python application and two kvcli loops at once, each
# process on QPs the server opened for it; none may ever fail.
if [ "$rc" -eq 0 ]; then
  kill -CONT "$DP_PID" 2>/dev/null || true
  ip netns exec "$NS" timeout 60 python3 scripts/e2e/py/shared_app.py --iface kvtap0 \
    --config configs/tap.json --seconds 6 >"$TMP/app.json" 2>&1 &
  APP=$!
  kv_loop() {
    local n=0 bad=0
    while [ "$n" -lt 40 ]; do
      ip netns exec "$NS" timeout 10 "$TARGET_DIR/release/kvcli" --config configs/tap.json \
        --iface kvtap0 put "cli$1:$n" "x$n" >/dev/null 2>>"$TMP/cli$1.err" || bad=$((bad + 1))
      n=$((n + 1))
    done
    echo "$bad" >"$TMP/cli$1.bad"
  }
  kv_loop 1 & L1=$!
  kv_loop 2 & L2=$!
  wait "$L1" "$L2"
  wait "$APP" || { cat "$TMP/app.json"; fail "shared: the application exited with an error"; }
  APP_OUT=$(tail -n 1 "$TMP/app.json")
  FAILS=$(python3 -c 'import json,sys; d=json.loads(sys.argv[1]); print(d["failures"] if d["ops"] > 0 else -1)' "$APP_OUT")
  BAD="$(cat "$TMP/cli1.bad") $(cat "$TMP/cli2.bad")"
  [ "$FAILS" = 0 ] && [ "$BAD" = "0 0" ] \
    || { cat "$TMP/app.json" "$TMP"/cli*.err; fail "shared: app failures $FAILS, kvcli failures $BAD"; }
  echo "PASS: python/shared: app $APP_OUT beside 2 x 40 kvcli puts, none failed"
fi

tapns_stop  # also resumes it, in case a test left it paused
[ "$rc" -eq 0 ] || { tail -n 20 "$TMP/dp.log"; fail "pytest failed (rc $rc): ${SUMMARY:-no summary}"; }
echo "PASS: python: ${SUMMARY} ($(( $(date +%s) - START )) s)"
