#!/usr/bin/env bash
# Benchmarks. Usage: scripts/bench.sh {engine|e2e|ooo|scale|transport|clients|hardening|replication|tx|nemesis|nemesis-redis|repl-cost|idle|idle-tap|tenants|paper|all}
# Each suite writes JSON (+ PNG plots) into results/ with the command and machine.
set -euo pipefail
cd "$(dirname "$0")/.."
suite="${1:-all}"
shift || true
case "$suite" in
  engine) exec scripts/bench-engine.sh "$@" ;;
  e2e) exec scripts/bench-e2e.sh "$@" ;;
  ooo)
    # Reservation station: atomics on 1..1024 keys, Zipf PUT sweep, vector updates.
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    exec python3 scripts/bench_ooo.py "$@" ;;
  scale)
    # Partitions: 1 vs 2 worker lcores, Zipf partition skew, workers during slab merges.
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    cargo build --release -q -p dataplane --example server_scale
    exec python3 scripts/bench_scale.py "$@" ;;
  transport)
    # Reliable transport: kv/echo, 4..4096 QPs, loss 0.1 % / 1 %, exactly-once under loss.
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    cargo build --release -q -p ctlplane
    cargo build --release -q -p dataplane --example server_qps
    exec python3 scripts/bench_transport.py "$@" ;;
  clients)
    # Everyday use: latency-sampling overhead, kvcli and the Python binding over the
    # kernel transport (net_tap in a private netns).
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen -p kvcli
    cargo build --release -q -p dataplane --example sampling_overhead
    exec python3 scripts/bench_clients.py "$@" ;;
  hardening)
    # The 10 M-frame live fuzz run and the 10-minute soak (scripts/soak.py).
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    cargo build --release -q -p ctlplane
    exec python3 scripts/bench_hardening.py "$@" ;;
  paper)
    # The KV-Direct evaluation figure by figure, YCSB and the peers (scripts/reproduce.sh).
    exec scripts/reproduce.sh "$@" ;;
  replication)
    # Replication (issue 14): PUT/GET with 0-3 async replicas, value-size sweep,
    # replica-failure timeline, Redis 7 master + replica side by side; then offload vs
    # inline replication (SKV Fig. 7/11) and sync mode; failover through etcd (kill -9
    # of a sync master: failover_ms, lost_acked_writes); the replica log file's cost per
    # fsync policy (results/replica_log.json); completion records on vs off
    # (results/completions.json). --quick and --no-huge pass on.
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    python3 scripts/bench_replication.py "$@" || exit 1
    more=()
    for x in "$@"; do case "$x" in --quick|--no-huge) more+=("$x") ;; esac; done
    python3 scripts/bench_offload.py "${more[@]}" || exit 1
    python3 scripts/bench_replica_log.py "${more[@]}" || exit 1
    cargo build --release -q -p ctlplane
    python3 scripts/bench_failover.py "${more[@]}" || exit 1
    # The same kill with pktgen following the master (RESUME): exactly once across it
    # (results/failover_follow.json).
    python3 scripts/bench_failover.py --follow "${more[@]}" || exit 1
    # What completion records (exactly-once across a failover) cost
    # (results/completions.json).
    exec python3 scripts/bench_completions.py "${more[@]}" ;;
  tx)
    # Transactions (issue 15): pktgen --tx vs --tx-baseline (HyperLoop-style), one
    # node and chains of 2 and 3 (results/tx.json); then 1 against 2 workers, where
    # transactions span partitions (results/tx_partitions.json).
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    python3 scripts/bench_tx.py "$@" || exit 1
    python3 scripts/bench_tx_partitions.py "$@" || exit 1
    # A chain's reconfiguration: kill -9 of the middle, then its restart
    # (results/chain_reconfig.json).
    exec python3 scripts/bench_chain.py "$@" ;;
  nemesis)
    # Seeded fault schedules against a real 3-node etcd-managed cluster, with the
    # history checker (issue 29, docs/FAILOVER.md "Election safety"): 100 schedules by
    # default, about 30 s each (results/nemesis.json); --workload history for the
    # per-operation histories only, --soak-minutes M for the loaded run with no fault.
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    cargo build --release -q -p ctlplane
    exec python3 scripts/nemesis.py "$@" ;;
  nemesis-redis)
    # The same kill and freeze schedules and history checker against Redis 7 with
    # Sentinel, async and with WAIT 1 (results/nemesis_redis.json).
    scripts/setup.sh >/dev/null
    exec python3 scripts/nemesis_redis.py "$@" ;;
  repl-cost)
    # CPU per replicated PUT (issue 31): standalone vs master + 1 async replica, idle
    # policies yield and adaptive, Redis 7 master + replica side by side
    # (results/repl_cost.json).
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    exec python3 scripts/bench_repl_cost.py "$@" ;;
  idle-tap)
    # Idle lcores on net_tap with Rx interrupts (issue 31): yield vs adaptive vs
    # adaptive without Rx interrupts; idle CPU, sparse and back-to-back GET latency
    # from the Python binding (results/idle_tap.json). Needs root.
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane
    exec python3 scripts/bench_idle_tap.py "$@" ;;
  tenants)
    # Connections and tenants (issue 32): opens/s, 10 000 QPs vs 4, tenant checks on vs
    # off, 1000 tenants vs 1, hijack and isolation counts, Redis ACL users side by
    # side, pktgen end to end on static vs opened QPs vs as a tenant
    # (results/tenants.json).
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane --example tenants_bench
    cargo build --release -q -p dataplane -p pktgen -p ctlplane
    exec python3 scripts/bench_tenants.py "$@" ;;
  idle)
    # Idle lcores (issue 31): poll vs yield vs adaptive, idle CPU, saturation, half
    # and sparse load (results/idle.json); with --doorbell first: a sync master and
    # replica under yield, adaptive and adaptive without doorbells
    # (results/idle_doorbell.json).
    scripts/setup.sh >/dev/null
    cargo build --release -q -p dataplane -p pktgen
    if [ "${1:-}" = --doorbell ]; then
      shift
      exec python3 scripts/bench_doorbell.py "$@"
    fi
    exec python3 scripts/bench_idle.py "$@" ;;
  all) scripts/bench-engine.sh "$@"; scripts/bench-e2e.sh "$@"; "$0" ooo; "$0" scale; "$0" transport; "$0" clients; "$0" hardening; "$0" replication; "$0" tx ;;
  *) echo "usage: scripts/bench.sh {engine|e2e|ooo|scale|transport|clients|hardening|replication|tx|nemesis|nemesis-redis|repl-cost|idle|idle-tap|tenants|paper|all}" >&2; exit 2 ;;
esac
