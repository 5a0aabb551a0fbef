#!/usr/bin/env python3
"""The benchmark suites, declared once (called by scripts/bench.sh SUITE [args]).

Each suite names what it needs built and the commands it runs; the runner sets the
host up once (scripts/setup.sh), builds everything the chosen suites need in as few
cargo invocations as it can (ctlplane always alone: it turns on the engine's
`accounting` feature, which must not reach the dataplane binary — Cargo unifies
features within one build), then runs the steps in order and stops at the first that
fails. Every step writes its JSON (and plots) into results/ with its command line.

    scripts/bench.sh --list             the suites and what each measures
    scripts/bench.sh replication --quick
    scripts/bench.sh all                the core set, built once
"""
import os
import subprocess
import sys
from dataclasses import dataclass, field

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Placeholders in a step: the user's arguments, or only those of them every step of
# the suite understands (the shared run-size flags).
ARGS = "{args}"
PASS_ON = "{pass_on}"
SHARED_FLAGS = ("--quick", "--no-huge")

# Cargo builds (arguments after `cargo build --release -q`).
DP_PG = ("-p", "dataplane", "-p", "pktgen")
CTL = ("-p", "ctlplane")


def example(name):
    """A dataplane example (a benchmark driver built with the release profile)."""
    return ("-p", "dataplane", "--example", name)


def py(script, *rest):
    """A Python step in scripts/."""
    return ("python3", f"scripts/{script}") + rest


@dataclass
class Suite:
    """What a suite measures, what it needs built, and its steps in order."""

    help: str
    builds: list = field(default_factory=list)
    steps: list = field(default_factory=list)
    setup: bool = True


def idle_steps(args):
    """`idle` runs bench_idle.py; `idle --doorbell ...` the replicated pair instead."""
    if args[:1] == ["--doorbell"]:
        return [py("bench_doorbell.py", ARGS)], args[1:]
    return [py("bench_idle.py", ARGS)], args


SUITES = {
    "engine": Suite(
        "hash index and slab: lines per op, single-core GET/PUT against hashbrown "
        "(results/engine.json, engine_lines.json)",
        steps=[("scripts/bench-engine.sh", ARGS)], setup=False),
    "e2e": Suite(
        "dataplane + pktgen over memif: throughput and latency by batch size "
        "(results/e2e.json)",
        builds=[DP_PG], steps=[py("bench_e2e.py", ARGS)]),
    "ooo": Suite(
        "reservation station: atomics on 1..1024 keys, Zipf PUT sweep, vector updates "
        "(results/ooo.json)",
        builds=[DP_PG], steps=[py("bench_ooo.py", ARGS)]),
    "scale": Suite(
        "partitions: 1 vs 2 workers, Zipf partition skew, workers during slab merges "
        "(results/scale.json)",
        builds=[DP_PG, example("server_scale")], steps=[py("bench_scale.py", ARGS)]),
    "transport": Suite(
        "reliable transport: kv/echo, 4..4096 QPs, loss 0.1 % / 1 %, exactly-once "
        "under loss (results/transport.json)",
        builds=[DP_PG, CTL, example("server_qps")], steps=[py("bench_transport.py", ARGS)]),
    "clients": Suite(
        "everyday use: latency-sampling overhead, kvcli and the Python binding over the "
        "kernel transport (results/clients.json)",
        builds=[DP_PG + ("-p", "kvcli"), example("sampling_overhead")],
        steps=[py("bench_clients.py", ARGS)]),
    "hardening": Suite(
        "the 10 M-frame live fuzz run and the 10-minute soak (results/hardening.json)",
        builds=[DP_PG, CTL], steps=[py("bench_hardening.py", ARGS)]),
    "paper": Suite(
        "the KV-Direct evaluation figure by figure, YCSB and the peers "
        "(scripts/reproduce.sh)",
        steps=[("scripts/reproduce.sh", ARGS)], setup=False),
    "replication": Suite(
        "PUT/GET with 0-3 async replicas, value sizes, replica failure, Redis side by "
        "side; offload vs inline; replica log fsync policies; failover by kill -9 "
        "(also with pktgen following the master); completion records on vs off",
        builds=[DP_PG, CTL],
        steps=[py("bench_replication.py", ARGS), py("bench_offload.py", PASS_ON),
               py("bench_replica_log.py", PASS_ON), py("bench_failover.py", PASS_ON),
               py("bench_failover.py", "--follow", PASS_ON),
               py("bench_completions.py", PASS_ON)]),
    "tx": Suite(
        "transactions: --tx vs --tx-baseline on one node and chains of 2 and 3; 1 vs 2 "
        "workers; a chain's reconfiguration (results/tx*.json, chain_reconfig.json)",
        builds=[DP_PG],
        steps=[py("bench_tx.py", ARGS), py("bench_tx_partitions.py", ARGS),
               py("bench_chain.py", ARGS)]),
    "nemesis": Suite(
        "seeded fault schedules against a 3-node etcd cluster with the history checker "
        "(results/nemesis.json; --quick for the short form)",
        builds=[DP_PG, CTL], steps=[py("nemesis.py", ARGS)]),
    "nemesis-redis": Suite(
        "the same schedules and checker against Redis 7 with Sentinel "
        "(results/nemesis_redis.json)",
        steps=[py("nemesis_redis.py", ARGS)]),
    "repl-cost": Suite(
        "CPU per replicated PUT, ours (yield, adaptive) and Redis 7's "
        "(results/repl_cost.json)",
        builds=[DP_PG], steps=[py("bench_repl_cost.py", ARGS)]),
    "idle": Suite(
        "idle lcores: poll, yield, adaptive with and without memif ring signals — idle "
        "CPU, saturation, half and sparse load (results/idle.json); `idle --doorbell`: "
        "a sync master and replica (results/idle_doorbell.json)",
        builds=[DP_PG], steps=idle_steps),
    "idle-tap": Suite(
        "idle lcores on net_tap with Rx interrupts (results/idle_tap.json; needs root)",
        builds=[("-p", "dataplane")], steps=[py("bench_idle_tap.py", ARGS)]),
    "sim": Suite(
        "replica groups on Raft, the deterministic simulation: >= 10 000 seeds, the weaker "
        "modes, every seeded bug caught (results/sim.json)",
        builds=[("-p", "kvraft", "--examples")], steps=[py("bench_sim.py", ARGS)], setup=False),
    "tenants": Suite(
        "connections and tenants: opens/s, 10 000 QPs, tenant checks, purges, Redis ACL "
        "users, pktgen as a tenant, the noninterference fuzzer in process and live "
        "(results/tenants.json)",
        builds=[example("tenants_bench"), example("noninterference"), ("-p", "kviso"), DP_PG, CTL],
        steps=[py("bench_tenants.py", ARGS)]),
}

# `all`: the core set, in this order; the user's arguments go to engine and e2e only.
ALL = ["engine", "e2e", "ooo", "scale", "transport", "clients", "hardening", "replication", "tx"]
ALL_TAKES_ARGS = {"engine", "e2e"}


def expand(step, args):
    """A step's argv with its placeholders filled."""
    shared = [a for a in args if a in SHARED_FLAGS]
    out = []
    for part in step:
        out.extend(args if part == ARGS else shared if part == PASS_ON else [part])
    return out


def plan(names, args):
    """(needs setup, cargo builds deduplicated in order, argv of every step)."""
    setup, builds, steps = False, [], []
    for name in names:
        s = SUITES[name]
        own = args if (len(names) == 1 or name in ALL_TAKES_ARGS) else []
        listed, own = s.steps(own) if callable(s.steps) else (s.steps, own)
        setup |= s.setup
        builds += [b for b in s.builds if b not in builds]
        steps += [expand(step, own) for step in listed]
    return setup, builds, steps


def run(argv):
    print("+ " + " ".join(argv), file=sys.stderr, flush=True)
    return subprocess.call(argv, cwd=ROOT)


def usage():
    names = "|".join(list(SUITES) + ["all"])
    return f"usage: scripts/bench.sh {{{names}}} [args] | --list"


def main(argv):
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), file=sys.stderr)
        return 2 if not argv else 0
    if argv[0] == "--list":
        for name, s in SUITES.items():
            print(f"{name:14} {s.help}")
        print(f"{'all':14} {', '.join(ALL)} (arguments to engine and e2e)")
        return 0
    name, args = argv[0], argv[1:]
    if name != "all" and name not in SUITES:
        print(usage(), file=sys.stderr)
        return 2
    setup, builds, steps = plan(ALL if name == "all" else [name], args)
    if setup and subprocess.call(["scripts/setup.sh"], cwd=ROOT, stdout=subprocess.DEVNULL):
        return 1
    for b in builds:
        if run(["cargo", "build", "--release", "-q", *b]):
            return 1
    for step in steps:
        rc = run(step)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
