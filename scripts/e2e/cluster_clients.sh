#!/usr/bin/env bash
# Kernel clients follow a real cluster through a failover, from the shipped configs
# alone (issue 29, hole 4).
#
# scripts/cluster.sh up --clients tap: three etcd-managed nodes (sync, min_replicas 1),
# each serving its own net_tap interface with its own MAC/IP, bridged; every node's
# config lists all of them (replication.client_nodes). Then, at the same time:
#   * a Python application (kvdirect, the installed wheel: scripts/e2e/python.sh builds
#     it) with node1's config — a replica's, so its first write is refused NOT_MASTER
#     and it must follow the hint — putting unique keys in a loop;
#   * a shell loop of kvcli processes with node0's config putting unique keys;
# while the master node0 is killed (-9), a new master elected, and node0 restarted as
# a replica. Checks: both clients acknowledge writes after the failover; every
# acknowledged write of both is read back from the new master; the Python application
# never sees an error (its requests in flight at the kill are resumed on the new
# master); kvcli invocations that failed did so with a status that says nothing was
# written or that the outcome is unknown, and are counted.
set -euo pipefail
cd "$(dirname "$0")/../.."

fail() { echo "FAIL: cluster_clients: $*"; [ -n "${D:-}" ] && tail -n 5 "$D"/node*.log; exit 1; }
[ "$(id -u)" -eq 0 ] || { echo "SKIP: cluster_clients: needs root (net_tap, bridge)"; exit 0; }
python3 -c 'import kvdirect' 2>/dev/null || fail "the kvdirect wheel is not installed (run scripts/e2e/python.sh)"
cargo build --release -q -p dataplane -p kvcli -p ctlplane
K=target/release/kvcli
CTL=target/release/ctlplane
P=kvcc
BR=${P}br
D=$(mktemp -d /tmp/kvd-e2e-cluster-clients.XXXXXX)
cleanup() {
  set +e
  touch "$D/stop"
  scripts/cluster.sh down --dir "$D" >/dev/null 2>&1
  [ -n "${KEEP_TMP:-}" ] && echo "kept $D" || rm -rf "$D"
}
trap cleanup EXIT

scripts/cluster.sh up --dir "$D" --etcd --etcd-port 23797 --prefix "$P" --clients tap \
  --mode sync --min-replicas 1 --no-huge >"$D/up.log" 2>&1 || { cat "$D/up.log"; fail "cluster up"; }
echo "PASS: cluster up, node taps bridged on $BR: $(ip -br link show master "$BR" | awk '{print $1}' | xargs)"

# The Python application: unique keys, each acknowledged one written to py.acked.
cat >"$D/app.py" <<'EOF'
import json, os, sys, time
import kvdirect
d = sys.argv[1]
c = kvdirect.Client(sys.argv[2], config=os.path.join(d, "node1.json"))
acked, errors, i = [], [], 0
while not os.path.exists(os.path.join(d, "stop")):
    k = f"py:{i}"
    try:
        c.put(k, str(i))
        acked.append((k, time.time()))
    except kvdirect.Error as e:
        errors.append(f"{k}: {type(e).__name__}: {e}")
    i += 1
def text(v):
    return v.decode() if isinstance(v, bytes) else v
missing = [k for k, _ in acked if text(c.get(k)) != k.split(":")[1]]
json.dump({"acked": len(acked), "errors": errors, "missing": missing,
           "times": [t for _, t in acked]}, open(os.path.join(d, "py.json"), "w"))
EOF
python3 "$D/app.py" "$D" "$BR" >"$D/app.log" 2>&1 &
APP=$!

# The kvcli loop: one process per put.
(
  i=0
  while [ ! -e "$D/stop" ]; do
    if out=$(timeout 20 "$K" --config "$D/node0.json" --iface "$BR" put "cli:$i" "$i" 2>&1); then
      echo "cli:$i $(date +%s.%N)" >>"$D/cli.acked"
    else
      echo "cli:$i rc=$? $out" >>"$D/cli.failed"
    fi
    i=$((i + 1))
  done
) &
LOOP=$!

sleep 3
[ -s "$D/cli.acked" ] || fail "kvcli acknowledged nothing before the failover"
M=$(awk '$1 == "node0" {print $2}' "$D/pids")
KILLED=$(date +%s.%N)
kill -9 "$M"
echo "PASS: master node0 killed"
new=""
for _ in $(seq 1 150); do
  for k in 1 2; do
    "$CTL" replication status --json --config "$D/node$k.json" 2>/dev/null | grep -q '"role": *"master"' && new=$k
  done
  [ -n "$new" ] && break
  sleep 0.1
done
[ -n "$new" ] || fail "no new master within 15 s"
echo "PASS: node$new elected"
sleep 4
scripts/cluster.sh restart 0 --dir "$D" >"$D/restart.log" 2>&1 || { cat "$D/restart.log"; fail "restart node0"; }
sleep 3
touch "$D/stop"
wait "$LOOP"
wait "$APP" || { cat "$D/app.log"; fail "the Python application exited with an error"; }

# Python: acknowledged after the kill, none missing, no error.
read -r pa pe pm pafter < <(python3 - "$D/py.json" "$KILLED" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
t = float(sys.argv[2])
print(r["acked"], len(r["errors"]), len(r["missing"]), sum(1 for x in r["times"] if x > t))
for e in r["errors"][:5]:
    print("  error:", e, file=sys.stderr)
EOF
)
[ "$pm" -eq 0 ] || fail "python: $pm of $pa acknowledged writes missing"
[ "$pafter" -gt 0 ] || fail "python: nothing acknowledged after the failover"
[ "$pe" -eq 0 ] || fail "python: $pe errors (first ones above)"
echo "PASS: python (node1's config): $pa writes acknowledged, $pafter after the kill, none missing, no error"

# kvcli: every acknowledged key read back from the new master in one session.
ca=$(wc -l <"$D/cli.acked")
cafter=$(awk -v t="$KILLED" '$2 > t' "$D/cli.acked" | wc -l)
[ "$cafter" -gt 0 ] || fail "kvcli: nothing acknowledged after the failover"
awk '{print "get " $1}' "$D/cli.acked" | timeout 60 "$K" --config "$D/node0.json" --iface "$BR" \
  >"$D/cli.read" 2>"$D/cli.read.err" || { tail -3 "$D/cli.read.err"; fail "kvcli readback"; }
bad=$(paste <(awk '{sub("cli:", "", $1); print $1}' "$D/cli.acked") "$D/cli.read" | awk '$1 != $2' | wc -l)
[ "$bad" -eq 0 ] || fail "kvcli: $bad of $ca acknowledged writes not read back"
cf=$( [ -f "$D/cli.failed" ] && wc -l <"$D/cli.failed" || echo 0)
if [ "$cf" -gt 0 ]; then
  # A failed put says why: not written (NOT_MASTER, unreachable before sending) or
  # unknown — never a silent success.
  grep -v -E "NOT_MASTER|NOT_ENOUGH_REPLICAS|unreachable|outcome unknown|timed out|connection lost" "$D/cli.failed" \
    && fail "kvcli: a failure without a clear status (above)"
fi
echo "PASS: kvcli (node0's config): $ca puts acknowledged, $cafter after the kill, all read back; $cf invocations failed during the failover"

# The cluster's tenants, in etcd: added once, applied by every node (the restarted one
# too), used by a tenant client through whichever node is master, then removed
# everywhere.
on_every_node() {  # on_every_node PRED: every node's tenant list matches PRED (3 s)
  for _ in $(seq 1 30); do
    ok=1
    for k in 0 1 2; do
      "$CTL" tenants list --config "$D/node$k.json" 2>/dev/null | awk '{print $1}' | grep -qx 42
      if [ "$?" -ne "$1" ]; then ok=0; fi
    done
    [ "$ok" -eq 1 ] && return 0
    sleep 0.1
  done
  return 1
}
"$CTL" tenants add --cluster --config "$D/node0.json" --name e2e --id 42 --acl read,write \
  --credentials-out "$D/t42.json" >"$D/tenant.log" 2>&1 || { cat "$D/tenant.log"; fail "tenants add --cluster"; }
on_every_node 0 || fail "tenant 42 not on every node within 3 s"
"$K" --config "$D/node2.json" --iface "$BR" --tenant-file "$D/t42.json" put tk tv >/dev/null 2>"$D/tk.err" \
  || { cat "$D/tk.err"; fail "the cluster tenant's put"; }
got=$("$K" --config "$D/node0.json" --iface "$BR" --tenant-file "$D/t42.json" get tk 2>&1)
[ "$got" = tv ] || fail "the cluster tenant read $got"
"$CTL" tenants remove --cluster --config "$D/node1.json" --id 42 >>"$D/tenant.log" 2>&1 || fail "tenants remove --cluster"
on_every_node 1 || fail "tenant 42 still on a node 3 s after its removal"
if "$K" --config "$D/node0.json" --iface "$BR" --tenant-file "$D/t42.json" get tk >/dev/null 2>&1; then
  fail "a removed tenant's client was served"
fi
echo "PASS: cluster tenants (etcd): added once, on all 3 nodes, served through the master, removed everywhere"
echo "PASS: cluster_clients"
