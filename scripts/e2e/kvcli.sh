#!/usr/bin/env bash
# kvcli end to end, over the kernel transport (AF_PACKET) on net_tap, inside a
# private netns.
#
# The dataplane serves kvtap0 (configs/tap.json); kvcli runs in the same netns and
# talks to it through a raw socket on kvtap0 (client = the config's pktgen MAC/IP,
# 127.0.0.3, which the kernel drops as a martian instead of answering). Every
# command is checked for its output and exit code: put/get of text and hex values,
# get of a missing key (1), del (0 then 1), cad (compare-and-delete), incr, cas that swaps and one that does
# not, the vector ops (vput, vget, vadd, vupdate, vapply, reduce, filter, update),
# transactions (commit, abort on a stale condition changing nothing, --json)
# and their server errors (BAD_LENGTH, UNKNOWN_FUNCTION -> 2), stats, --json
# (parsed with python3's json), input errors (2, before any connection), a piped
# interactive session, --iface nosuch0 (2, naming the interface), and after the
# dataplane froze (SIGSTOP) and after it stopped, requests and connections that
# exit 3 within a bounded time.
#
# KVD_TARGET_DIR: cargo target directory to build into and run from (default
# `target`, as the other e2e tests).
set -euo pipefail
cd "$(dirname "$0")/../.."

TGT=${KVD_TARGET_DIR:-target}
CARGO_TARGET_DIR="$TGT" cargo build --release -q -p dataplane -p kvcli
DPBIN="$TGT/release/dataplane"
KVCLI="$TGT/release/kvcli"

FAILS=0
CASES=0
fail() { echo "FAIL: kvcli: $*"; exit 1; }
source scripts/e2e/tapns.sh
tapns_init kvcli
START=$(date +%s)
tapns_start "$DPBIN"

# kv ARGS...: kvcli in the netns against kvtap0; sets OUT, ERR, RC (never exits).
kv() {
  set +e
  OUT=$(HOME="$TMP" timeout 20 ip netns exec "$NS" "$KVCLI" --config configs/tap.json \
    --iface kvtap0 "$@" 2>"$TMP/err")
  RC=$?
  set -e
  ERR=$(cat "$TMP/err")
}

result() {  # result NAME OK DETAIL
  CASES=$((CASES + 1))
  if [ "$2" = 1 ]; then echo "PASS: kvcli/$1: $3"; else echo "FAIL: kvcli/$1: $3"; FAILS=$((FAILS + 1)); fi
}

# check NAME WANT_RC WANT_OUT ARGS...: exact stdout and exit code.
check() {
  local name=$1 want_rc=$2 want_out=$3; shift 3
  kv "$@"
  if [ "$RC" = "$want_rc" ] && [ "$OUT" = "$want_out" ]; then
    result "$name" 1 "kvcli $* -> exit $RC, $(printf '%s' "$OUT" | head -c 60 | tr '\n' '|')"
  else
    result "$name" 0 "kvcli $*: exit $RC (want $want_rc), stdout '$OUT' (want '$want_out'), stderr '$ERR'"
  fi
}

# check_err NAME WANT_RC STDERR_SUBSTRING ARGS...: exit code and a stderr message.
check_err() {
  local name=$1 want_rc=$2 want_err=$3; shift 3
  kv "$@"
  if [ "$RC" = "$want_rc" ] && [[ "$ERR" == *"$want_err"* ]]; then
    result "$name" 1 "exit $RC, stderr: $(printf '%s' "$ERR" | head -n 1 | head -c 100)"
  else
    result "$name" 0 "kvcli $*: exit $RC (want $want_rc), stderr '$ERR' (want '$want_err')"
  fi
}

# check_json NAME WANT_RC PY_ASSERTION ARGS...: stdout is one JSON object `d`.
check_json() {
  local name=$1 want_rc=$2 expr=$3; shift 3
  kv --json "$@"
  if [ "$RC" = "$want_rc" ] && printf '%s' "$OUT" | python3 -c \
      "import json,sys; d=json.loads(sys.stdin.read()); assert $expr, d" 2>"$TMP/pyerr"; then
    result "$name" 1 "exit $RC, $OUT"
  else
    result "$name" 0 "kvcli --json $*: exit $RC (want $want_rc), stdout '$OUT', $(cat "$TMP/pyerr")"
  fi
}

# Plain KV: text and hex values, missing keys, delete.
check put_text 0 "OK" put greeting "hello world"
check get_text 0 "hello world" get greeting
check get_forced_hex 0 "0x68656c6c6f20776f726c64" get greeting --hex
check put_empty 0 "OK" put empty 0x
check get_empty 0 '""' get empty
# -x: the value from stdin, byte for byte (here with a NUL and a newline).
set +e
printf 'a\0b\n' | HOME="$TMP" timeout 20 ip netns exec "$NS" "$KVCLI" --config configs/tap.json \
  --iface kvtap0 -x put rawbytes >/dev/null 2>"$TMP/err"
RC=$?
set -e
result put_stdin "$([ "$RC" = 0 ] && echo 1 || echo 0)" "-x put: exit $RC $(cat "$TMP/err")"
check get_stdin 0 "0x6100620a" get rawbytes
check_err put_no_value 2 "put needs a VALUE" put novalue
# -r N: the command N times (each line printed), --interval between.
check put_repctr 0 "OK" put repctr 0x0000000000000000
check incr_repeat 0 "$(printf '1\n2\n3')" -r 3 --interval 0.01 incr repctr
# Command names are case-insensitive (redis-cli's habit); keys keep their case.
check get_upper 0 "hello world" GET greeting
check get_key_case 1 "" Get GREETING
check put_hex 0 "OK" put bin 0x00ff10
check get_hex 0 "0x00ff10" get bin
check put_hex_key 0 "OK" put 0x6b01 v1
check get_hex_key 0 "v1" get 0x6b01
# Text that starts with 0x: a backslash in front (dropped); printed back as hex.
check put_0x_text 0 "OK" put hexlike '\0x12'
check get_0x_text 0 "0x30783132" get hexlike
check get_missing 1 "" get no-such-key
check put_del 0 "OK" put gone x
check del_present 0 "deleted" del gone
check del_absent 1 "" del gone
check get_deleted 1 "" get gone
# Compare-and-delete: only the holder's value deletes (a lock's release).
check put_lock 0 "OK" put lock owner-1
check cad_other 1 "not deleted (it holds owner-1)" cad lock owner-2
check_json cad_other_json 1 "d['deleted'] is False and d['value']=='owner-1'" cad lock owner-2
check cad_owner 0 "deleted" cad lock owner-1
check cad_absent 1 "" cad lock owner-1
check get_lock_gone 1 "" get lock

# Counters.
check put_counter 0 "OK" put ctr 0x0000000000000000
check incr_1 0 "1" incr ctr
check incr_5 0 "6" incr ctr 5
check incr_neg 0 "4" incr ctr -2
# Counters are signed 8-byte integers: below zero prints negative.
check incr_below_zero 0 "-3" incr ctr -7
check incr_back 0 "4" incr ctr 7
check cas_swaps 0 "swapped (was 4, now 10)" cas ctr 4 10
check cas_fails 0 "not swapped (value is 10, expected 4)" cas ctr 4 11
check get_counter 0 "0x0a00000000000000" get ctr
check update_xor 0 "old 10 new 11" update ctr xor 1
# A missing counter is created with the delta (redis-cli's INCR), once.
check incr_missing 0 "-2" incr no-such-counter -2
check incr_created 0 "-1" incr no-such-counter
check get_created 0 "0xffffffffffffffff" get no-such-counter
check put_text_counter 0 "OK" put textctr 7
check incr_text 2 "" incr textctr

# Vector ops (4-byte elements).
check vput 0 "OK" vput vec 1,2,3 --width 4
check vadd 0 "old: 1 2 3
new: 11 12 13" vadd vec 10 --width 4
check vget 0 "11 12 13" vget vec --width 4
check reduce_add 0 "36" reduce vec add --width 4
check reduce_max 0 "13" reduce vec max --width 4
check filter_gt 0 "12 13" filter vec gt 11 --width 4
check vapply_sub 0 "old: 11 12 13
new: 10 10 10" vapply vec sub 1,2,3 --width 4
check vupdate_min 0 "old: 10 10 10
new: 5 5 5" vupdate vec min 5 --width 4
check vput_signed 0 "OK" vput sv -5,3,-1 --width 2
check reduce_signed_min 0 "-5" reduce sv min --init 32767 --width 2 --signed
check filter_signed 0 "-5 -1" filter sv lt 0 --width 2 --signed
check_err vadd_bad_length 2 "server answered BAD_LENGTH" vadd vec 1 --width 8
check_err reduce_cas 2 "server answered UNKNOWN_FUNCTION" reduce vec cas --width 4

# stats: this client's counters and a measured round trip.
kv stats --count 200
if [ "$RC" = 0 ] && [[ "$OUT" == *"round trip (GET, 200 samples)"* ]] && [[ "$OUT" == *"ctlplane"* ]]; then
  result stats 1 "$(printf '%s' "$OUT" | head -n 1)"
else
  result stats 0 "exit $RC, stdout '$OUT', stderr '$ERR'"
fi
check_json stats_json 0 "d['cmd']=='stats' and d['rtt_us']['samples']==50 and d['rtt_us']['p50']>0 and d['transport']['completed']>=50" stats --count 50

# --json.
check_json get_json 0 "d=={'cmd':'get','key':'greeting','found':True,'value':'hello world','encoding':'text'}" get greeting
check_json get_json_hex 0 "d['value']=='0x00ff10' and d['encoding']=='hex'" get bin
check_json get_json_missing 1 "d=={'cmd':'get','key':'no-such-key','found':False}" get no-such-key
check_json put_json 0 "d['cmd']=='put' and d['ok'] is True" put j "{\"a\": 1}"
check_json incr_json 0 "d['cmd']=='incr' and d['old']==11 and d['value']==12" incr ctr
check_json cas_json 0 "d['swapped'] is False and d['old']==12" cas ctr 0 1
check_json vadd_json 0 "d['old']==[5,5,5] and d['new']==[6,6,6] and d['width']==4" vadd vec 1 --width 4
check_json error_json 2 "d['cmd']=='put' and d['exit']==2 and 'hex' in d['error']" put k 0xzz

# Transactions (docs/CLIENTS.md's example, exactly).
check tx_setup_a 0 "OK" put alice 100
check tx_setup_b 0 "OK" put bob 20
check tx_commit 0 "committed
0 get alice: 100
1 get bob: 20
2 put alice: OK
3 put bob: OK" tx get alice =100 , get bob =20 , put alice 90 , put bob 30
check tx_abort 1 "aborted: condition_failed at op 0 (ok); nothing changed
0 get alice: 90
1 put alice: ABORTED" tx get alice =100 , put alice 80
check tx_unchanged 0 "90" get alice
check tx_setup_c 0 "OK" put txctr 0x0000000000000000
check_json tx_json 0 "d['cmd']=='tx' and d['committed'] is True and d['results'][1]['old']==0" tx get nobody absent , incr txctr , get alice =90 , put txctr2 1
check tx_after 0 "1" incr txctr 0
check tx_cad 0 "committed
0 cad txctr2: not deleted (it holds 1)
1 cad txctr2: not deleted (it holds 1)" tx cad txctr2 2 , cad txctr2 0x3100
check tx_cad_own 0 "committed
0 cad txctr2: deleted" tx cad txctr2 1
check_err tx_bad 2 "ops are" tx frob alice

# Bad input: exit 2 with a message naming the limit, before any connection.
check_err bad_hex 2 "'z' is not a hex digit" put k 0xzz
check_err odd_hex 2 "odd number of hex digits" put k 0xabc
check_err empty_key 2 "key must not be empty" get ""
check_err long_key 2 "at most 255" get "$(printf 'k%.0s' $(seq 1 300))"
check_err huge_value 2 "at most 1427 fit in one request" put k "$(head -c 5000 /dev/zero | tr '\0' v)"
check_err bad_width 2 "use 1, 2, 4 or 8" vget vec --width 3
check_err int_too_big 2 "does not fit in 1 byte" vadd vec 300 --width 1
check_err bad_func 2 "unknown function" reduce vec mul
check_err usage 2 "unrecognized subcommand" frobnicate
check_err missing_arg 2 "required" cas k 1
check_err bad_timeout 2 "--timeout-ms" get k --timeout-ms 0

# Interactive mode over a pipe (rustyline reads plain lines when stdin is no tty).
set +e
OUT=$(printf 'put a 1\nget a\n\nhelp\nget --hex a\nbogus\nquit\nget a\n' | HOME="$TMP" timeout 20 \
  ip netns exec "$NS" "$KVCLI" --config configs/tap.json --iface kvtap0 2>"$TMP/err")
RC=$?
set -e
# The bad line makes the piped session exit 2 (the highest code of its lines).
if [ "$RC" = 2 ] && [ "$(printf '%s\n' "$OUT" | sed -n '1,2p')" = "$(printf 'OK\n1')" ] \
  && [ "$(printf '%s\n' "$OUT" | tail -n 1)" = "0x31" ] && printf '%s' "$OUT" | grep -q "vadd" \
  && grep -q "unrecognized subcommand 'bogus'" "$TMP/err"; then
  result interactive_pipe 1 "put/get/help/--hex/bad line/quit through a pipe"
else
  result interactive_pipe 0 "exit $RC, stdout '$OUT', stderr '$(cat "$TMP/err")'"
fi

# Optional benchmark (scripts/bench.sh clients): KVD_KVCLI_BENCH=FILE writes the
# round trips of `kvcli stats` (GETs timed in one process, 3 runs) and the wall time
# of whole `kvcli get` commands (process start, socket, CONNECT of every QP, one GET).
if [ -n "${KVD_KVCLI_BENCH:-}" ]; then
  for r in 1 2 3; do
    HOME="$TMP" timeout 120 ip netns exec "$NS" "$KVCLI" --config configs/tap.json --iface kvtap0 \
      --json stats --count 10000 >"$TMP/bench-stats-$r.json"
  done
  : >"$TMP/bench-cmd.txt"
  for _ in $(seq 1 50); do
    t0=$(date +%s%N)
    HOME="$TMP" timeout 20 ip netns exec "$NS" "$KVCLI" --config configs/tap.json --iface kvtap0 \
      get greeting >/dev/null
    echo $(( $(date +%s%N) - t0 )) >>"$TMP/bench-cmd.txt"
  done
  python3 - "$TMP" "$KVD_KVCLI_BENCH" <<'PY'
import json, statistics, sys
tmp, out = sys.argv[1], sys.argv[2]
runs = [json.load(open(f"{tmp}/bench-stats-{r}.json")) for r in (1, 2, 3)]
ms = sorted(int(x) / 1e6 for x in open(f"{tmp}/bench-cmd.txt"))
pct = lambda v, q: v[min(len(v) - 1, int(round(q * (len(v) - 1))))]
json.dump({
    "kvcli_rtt_us_p50": statistics.median(r["rtt_us"]["p50"] for r in runs),
    "kvcli_rtt_us_p99": statistics.median(r["rtt_us"]["p99"] for r in runs),
    "kvcli_rtt_runs": [r["rtt_us"] for r in runs],
    "kvcli_retransmitted": [r["transport"]["retransmitted"] for r in runs],
    "kvcli_command_ms_p50": pct(ms, 0.5), "kvcli_command_ms_p99": pct(ms, 0.99),
    "kvcli_commands": len(ms),
}, open(out, "w"), indent=1)
PY
  echo "kvcli bench: $(cat "$KVD_KVCLI_BENCH" | tr -d '\n ' | head -c 300)"
fi

# Wrong interface: exit 2 naming it.
check_err no_such_iface 2 "no network interface named \"nosuch0\"" get greeting --iface nosuch0

# Server gone: exit 3 within a bounded time. First frozen (SIGSTOP: kvtap0 stays,
# nothing answers): a run of requests in flight times out, then a new connection
# does. Then stopped for good: the tap goes with the dataplane, so a veth named
# kvtap0 stands in for a link with no server behind it.
set +e
(HOME="$TMP" timeout 20 ip netns exec "$NS" "$KVCLI" --config configs/tap.json --iface kvtap0 \
  stats --count 100000 --timeout-ms 1000 >"$TMP/bg.out" 2>"$TMP/bg.err"; echo $? >"$TMP/bg.rc") &
BG=$!
set -e
# 100 000 GETs take ~2.5 s at ~25 us each: the server freezes in the middle.
sleep 1
[ -f "$TMP/bg.rc" ] && result request_timeout 0 "stats finished before the server froze"
kill -STOP "$DP_PID"
T0=$(date +%s%N)
wait "$BG" || true
MS=$(( ($(date +%s%N) - T0) / 1000000 ))
RC=$(cat "$TMP/bg.rc")
if [ "$RC" = 3 ] && grep -q "request timed out" "$TMP/bg.err"; then
  result request_timeout 1 "exit 3 $MS ms after the server froze: $(head -n 1 "$TMP/bg.err")"
else
  result request_timeout 0 "exit $RC, stderr '$(cat "$TMP/bg.err")'"
fi
bounded() {  # bounded NAME ARGS...: exit 3 "server unreachable" within 5 s
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  check_err "$name" 3 "server unreachable" "$@"
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  if [ "$ms" -lt 5000 ]; then result "$name-time" 1 "exit after $ms ms"
  else result "$name-time" 0 "took $ms ms"; fi
}
bounded unreachable_frozen get greeting --timeout-ms 500
check_json unreachable_json 3 "d['cmd']=='get' and d['exit']==3" get greeting --timeout-ms 300
tapns_stop
# The dataplane's own tap is gone with it: unreachable (3), saying so.
check_err dataplane_stopped 3 "is the dataplane running?" get greeting
if nsx ip link add kvtap0 type veth peer name kvpeer0 2>/dev/null; then
  nsx ip link set kvpeer0 up
  nsx ip link set kvtap0 up
  bounded unreachable_stopped get greeting
else
  echo "SKIP: kvcli/unreachable_stopped: no veth support here (the frozen case covers exit 3)"
fi

if [ "$FAILS" -ne 0 ]; then
  fail "$FAILS of $CASES cases failed"
fi
echo "PASS: kvcli: all $CASES cases ($(( $(date +%s) - START )) s)"
