#!/usr/bin/env bash
# Snapshots and --load over memif (docs/OPERATIONS.md, "Snapshots and persistence").
#
# 1. A dataplane with 2 workers; pktgen loads 20000 keys and runs a verified write mix
#    (PUT/DELETE/fetch-add, every answer checked against its model, every key read back
#    at the end); meanwhile `ctlplane snapshot save` writes s1: it must complete, hold
#    post-images of the writes made during the scan, and pktgen must see no mismatch.
# 2. With the load stopped, s2. The dataplane stops; its final key count is noted.
# 3. A dataplane with 1 worker starts with --load s2: it must report every key of the
#    first one. Every key is read back by saving s3 from it and comparing s2 and s3 key
#    by key (records replayed in file order, by an independent decoder here), and
#    through the request path: a GET sweep's hit ratio must match the loaded keys.
# 4. A copy of s2 with one byte flipped and a truncated copy: --load refuses each with
#    exit 1 and the reason, before serving.
set -euo pipefail
cd "$(dirname "$0")/../.."
. scripts/e2e/lib.sh
CP=target/release/ctlplane
KEYS=20000

# decode FILE: key -> value (hex) after replaying the records in order, as JSON.
decode() {
  python3 - "$1" <<'PY'
import json, struct, sys
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"KVDSNAP\0", "magic"
pos, state = 64, {}
while b[pos:pos + 4] == b"KVB\x01":
    n, plen = struct.unpack_from("<II", b, pos + 4)
    p = b[pos + 28:pos + 28 + plen]
    i = 0
    for _ in range(n):
        kind, klen, vlen = p[i], p[i + 1], struct.unpack_from("<H", p, i + 2)[0]
        k, v = p[i + 4:i + 4 + klen], p[i + 4 + klen:i + 4 + klen + vlen]
        if kind == 1:
            state[k.hex()] = v.hex()
        elif kind == 2:
            state.pop(k.hex(), None)
        i += 4 + klen + vlen
    assert i == plen, "block length"
    pos += 28 + plen
assert b[pos:pos + 4] == b"KVT\x01" and pos + 28 == len(b), "trailer"
json.dump(state, sys.stdout)
PY
}

save() {  # save NAME PREFIX: ctlplane snapshot save, output in $E2E_TMP/NAME.out
  "$CP" snapshot save "$E2E_TMP/$1.kvd" --file-prefix "$2" >"$E2E_TMP/$1.out" 2>&1 \
    || { cat "$E2E_TMP/$1.out"; fail "snapshot $1 failed"; }
}

# 1. Save under a verified write load (2 workers).
start_dataplane snapA --lcores 0,1 --stats-json "$E2E_TMP/a.json"
PREFIX_A=kvd-e2e-snapA-dp
run_pktgen load --partitions 2 --qps 4 --keys $KEYS --value-size 8 --load --verify \
  --get 0.3 --put 0.4 --atomic 0.2 --ops-per-packet 8 --window 16 --warmup 0 --duration 4 \
  --calibrate 0 --timeout-ms 5000 --json "$E2E_TMP/load.json" >"$E2E_TMP/load.out" 2>&1 &
PG_PID=$!
E2E_PIDS+=("$PG_PID")
# Wait until the load phase is through (every key PUT), then save while writes go on.
for _ in $(seq 1 100); do
  puts=$("$CP" stats --json --file-prefix $PREFIX_A 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin)["total"]["puts"])' || echo 0)
  [ "$puts" -gt $((KEYS + 2000)) ] && break
  sleep 0.1
done
[ "$puts" -gt $((KEYS + 2000)) ] || { cat "$E2E_TMP/load.out"; fail "the write load did not start"; }
save s1 $PREFIX_A
wait "$PG_PID" || { cat "$E2E_TMP/load.out"; fail "pktgen (verified write load) failed"; }
bad=$(json_field "$E2E_TMP/load.json" 'd["mismatches"] + d["timeouts"] + d["errors"] + d["readback"]["mismatches"] + d["readback"]["errors"]')
[ "$bad" -eq 0 ] || { cat "$E2E_TMP/load.out"; fail "pktgen saw $bad wrong answers around the snapshot"; }
"$CP" snapshot status --file-prefix $PREFIX_A --json >"$E2E_TMP/s1.json"
s1_records=$(json_field "$E2E_TMP/s1.json" 'd["records"]')
s1_scanned=$(json_field "$E2E_TMP/s1.json" 'd["scanned"]')
[ "$(json_field "$E2E_TMP/s1.json" 'd["state"]')" = done ] || fail "status of s1: $(cat "$E2E_TMP/s1.json")"
[ "$s1_records" -gt "$s1_scanned" ] || fail "s1 holds no post-images of live writes ($s1_records records, $s1_scanned scanned)"
decode "$E2E_TMP/s1.kvd" >/dev/null || fail "s1 does not decode"
pass "saved under load: $(tail -n 1 "$E2E_TMP/s1.out"); pktgen verified $(json_field "$E2E_TMP/load.json" 'd["ops"]') ops, 0 wrong"

# 2. Quiescent snapshot; the first dataplane's final key count.
save s2 $PREFIX_A
stop_dataplane
kvs=$(json_field "$E2E_TMP/a.json" 'd["engine_kvs"]')
pass "saved quiescent: $(tail -n 1 "$E2E_TMP/s2.out")"

# 3. Load into one worker, read everything back.
start_dataplane snapB --load "$E2E_TMP/s2.kvd" --stats-json "$E2E_TMP/b.json"
loaded=$(sed -n 's/.*loaded [0-9]* records (\([0-9]*\) keys.*/\1/p' "$DP_LOG")
[ "$loaded" = "$kvs" ] || { cat "$DP_LOG"; fail "loaded $loaded keys, the saver had $kvs"; }
save s3 kvd-e2e-snapB-dp
decode "$E2E_TMP/s2.kvd" >"$E2E_TMP/s2.map"
decode "$E2E_TMP/s3.kvd" >"$E2E_TMP/s3.map"
python3 - "$E2E_TMP/s2.map" "$E2E_TMP/s3.map" "$kvs" <<'PY' || fail "the reloaded store differs from the snapshot"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
assert len(a) == int(sys.argv[3]), (len(a), sys.argv[3])
diff = [k for k in set(a) | set(b) if a.get(k) != b.get(k)]
assert not diff, f"{len(diff)} keys differ, e.g. {diff[:3]}"
PY
run_pktgen readback --keys $KEYS --value-size 8 --get 1 --put 0 --ops-per-packet 16 \
  --window 16 --warmup 0 --duration 1 --calibrate 0 >"$E2E_TMP/rb.out" 2>&1 \
  || { cat "$E2E_TMP/rb.out"; fail "GET sweep failed"; }
stop_dataplane
python3 - "$E2E_TMP/b.json" "$kvs" $KEYS <<'PY' || fail "GET hit ratio does not match the loaded keys"
import json, sys
d = json.load(open(sys.argv[1])); kvs, keys = int(sys.argv[2]), int(sys.argv[3])
ratio, want = d["get_hits"] / d["gets"], kvs / keys
assert d["gets"] > 20000 and abs(ratio - want) < 0.02, (d["gets"], ratio, want)
print(f"GET sweep: {d['gets']} GETs, hit ratio {ratio:.4f} (loaded keys / key space {want:.4f})")
PY
pass "loaded with 1 worker (saved by 2): $kvs keys; a snapshot of the reloaded store equals s2 key by key"

# 4. Corrupt and truncated copies are refused before serving.
refuse() {  # refuse NAME FILE WANT
  local out="$E2E_TMP/$1.log" rc=0
  timeout 60 "$DP" --config configs/memif.json \
    --vdev "net_memif0,role=server,id=0,socket=$E2E_TMP/$1.sock,socket-abstract=no" \
    --file-prefix "kvd-e2e-$1-dp" --load "$2" >"$out" 2>&1 || rc=$?
  [ "$rc" -eq 1 ] || { cat "$out"; fail "$1: exit $rc, want 1"; }
  grep -q "$3" "$out" || { cat "$out"; fail "$1: no '$3' in the error"; }
  grep -q "dataplane ready" "$out" && fail "$1: served"
  pass "$1 refused: $(grep -o 'error: .*' "$out" | head -c 160)"
}
python3 - "$E2E_TMP/s2.kvd" "$E2E_TMP/flip.kvd" <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read()); b[len(b) // 2] ^= 0x04
open(sys.argv[2], "wb").write(b)
PY
refuse flipped "$E2E_TMP/flip.kvd" "corrupt block"
head -c $(( $(stat -c %s "$E2E_TMP/s2.kvd") - 100 )) "$E2E_TMP/s2.kvd" >"$E2E_TMP/short.kvd"
refuse truncated "$E2E_TMP/short.kvd" "truncated"
