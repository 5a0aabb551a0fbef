#!/usr/bin/env python3
"""The nemesis suite (issue 29): seeded schedules of faults against a real 3-node
etcd-managed cluster on this host, a workload whose acknowledgements are recorded, and
a checker of what survived.

Per schedule (each a fresh cluster and a fresh etcd; `--seed S` reruns one exactly):

  1. 3 dataplanes (scripts/cluster_config.py --etcd, lease 1 s), star or chain, sync
     (min_replicas 1) or async; node0 elected first, both replicas in sync.
  2. Acknowledged writes: pktgen loads --keys keys (8 B values) and PUTs over them;
     once it has exited, a snapshot of the master is the acknowledged state S0.
  3. Under faults: pktgen on every node's client port (--follow-ports: it follows the
     master, RESUMEs its requests there) sends fetch-adds of 1 to one counter key for
     the whole schedule; every fetch-add it was answered is acknowledged.
  4. Faults, from the seeded schedule, one after the other: kill -9 of a node (the
     master or a replica) and its restart empty; SIGSTOP of a node past its lease,
     then SIGCONT; etcd paused (SIGSTOP); etcd killed and restarted with its data
     wiped while the master is killed and a replica lags; the issue's schedule: kill a
     node, freeze the two others past their leases, restart the killed one empty, thaw
     (which is also "SIGSTOP while the memif peer restarted"); with --partitions (and
     the short form's schedule 6) also the master cut from etcd but not from its
     clients or replicas: each node reaches etcd through scripts/tcp_proxy.py, whose
     SIGSTOP blackholes that node's etcd traffic past the lease.
  5. Heal: every node running and thawed, etcd up; wait for a master with both
     replicas in sync.
  6. Check: the master's snapshot holds every key of S0 with its value (but the counter
     key), and nothing else (`lost_acked_writes`, `foreign_values`); the counter grew
     by at least the acknowledged fetch-adds (`lost_acked_increments`) and by at most
     those plus the ones whose outcome the client was told is unknown
     (`duplicate_effects`); all three nodes stop with the same digest and count
     (`survivors_differ`) and none holds less than S0 (`data_wipes`); no epoch had two
     masters (each node logs BecameMaster { epoch }: `split_brain_epochs`); no node
     died unasked (a PANIC or an exit: `crashes`). Also measured: `failover_ms` after
     each kill of the master, `unavailable_ms` (telemetry sampled every 100 ms: no node
     master with its gate open).

Async mode acknowledges before the replicas have a write: its lost acknowledged
increments are reported (the documented window), not failed; everything else is
checked in both modes.

The history workload (`--workload history`, and each schedule the long form draws
for it): steps 2-3 are replaced by kernel clients on bridged net_tap nodes
(scripts/nemesis_history.py) that record every operation — puts of unique values and
reads of 8 registers, fetch-adds on a counter, bank transfers and audits as
transactions — with its invocation, completion and outcome; step 6 adds
scripts/history_check.py's verdicts: no read of a value never written, no read or
final state that loses an acknowledged write (`stale_reads`, `lost_acked_writes`), no
two acknowledged increments with one result or out of real-time order, the counter
within [acknowledged, acknowledged + unknown], every audit's bank total conserved.

Usage:
  scripts/nemesis.py --quick                 # CI's short form: the 6 named schedules
  scripts/nemesis.py --schedules 100         # the long form (scripts/bench.sh nemesis)
  scripts/nemesis.py --seed 17               # rerun one schedule exactly
Writes --out (results/nemesis.json by default; --quick: a scratch file). Exits 1 when a
schedule breaks a safety check; a failing schedule is printed with its seed.
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import ROOT, log  # noqa: E402
import bench_failover as bf  # noqa: E402
import benchlib  # noqa: E402
import nemesis_history  # noqa: E402
import snapshot_dump  # noqa: E402
from nemesis_cluster import PREFIX, Etcd, EtcdProxy, Node, Sampler  # noqa: E402

LEASE_MS = 1000
CTL = os.path.join(ROOT, "target/release/ctlplane")
# The named schedules of the short form: (seed, topology, mode, faults, workload).
QUICK = [
    (1, "star", "sync", ["freeze_empty_restart"], "counter"),
    (2, "star", "sync", ["etcd_wipe_master_killed"], "counter"),
    (3, "chain", "sync", ["kill_master", "etcd_pause", "freeze"], "counter"),
    (4, "star", "async", ["kill_replica", "freeze_master"], "counter"),
    (5, "star", "sync", ["kill_master", "freeze_master"], "history"),
    (6, "star", "sync", ["etcd_cut_master"], "history"),
]
FAULTS = ["kill_master", "kill_replica", "freeze", "freeze_master", "etcd_pause",
          "freeze_empty_restart", "etcd_wipe_master_killed"]
# Drawn as well with --partitions (not by default, so earlier seeds keep their faults):
# the master cut from etcd, not from its clients or replicas.
PARTITION_FAULTS = ["etcd_cut_master"]


class BeyondTolerance(Exception):
    """The faults took every copy of the data: nothing to check but the rest."""


class Schedule:
    def __init__(self, tmp, seed, topology, mode, faults, workload, a):
        self.seed, self.topology, self.mode, self.faults, self.a = seed, topology, mode, faults, a
        self.rng = random.Random(seed)
        self.d = os.path.join(tmp, f"s{seed}")
        shutil.rmtree(self.d, ignore_errors=True)
        self.hist = nemesis_history.History(self.d, PREFIX, seed) if workload == "history" else None
        # Per node, its way to etcd when a fault cuts it (else the nodes dial etcd).
        self.proxies = []
        self.etcd = Etcd(os.path.join(self.d, "etcd"))
        self.nodes = []
        self.events = []
        self.failovers = []

    def note(self, what, **kw):
        self.events.append(dict(t=round(time.monotonic() - self.t0, 2), what=what, **kw))

    def master(self):
        for n in self.nodes:
            if n.proc is not None and not n.frozen and n.status().get("role") == "master":
                return n
        return None

    def setup(self):
        self.etcd.start()
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/cluster_config.py"), self.d, "2",
                        "--prefix", PREFIX, "--etcd", self.etcd.url, "--cluster", f"nem{self.seed}",
                        "--lease-ms", str(LEASE_MS), "--mode", self.mode, "--min-replicas", "1",
                        "--topology", self.topology, "--probe-ms", "50", "--waiting-ms", "200",
                        "--backlog-mb", "64"] + (["--clients", "tap"] if self.hist else [])
                       + (["--idle", self.a.idle] if self.a.idle else []),
                       check=True, stdout=subprocess.DEVNULL)
        if self.hist:
            self.hist.bridge_up()
        if any(f in PARTITION_FAULTS for f in self.faults):
            self.proxies = [EtcdProxy(self.d, k, self.etcd.port) for k in range(3)]
            for k, p in enumerate(self.proxies):
                cfg = os.path.join(self.d, f"node{k}.json")
                c = json.load(open(cfg))
                c["replication"]["etcd"]["endpoints"] = [p.url]
                json.dump(c, open(cfg, "w"), indent=2)
        attach = self.hist.attach if self.hist else None
        self.nodes = [Node(self.d, k, self.a.huge, attach) for k in range(3)]
        for n in self.nodes:
            n.start()
        bf.wait_for(lambda: self.nodes[0].status().get("role") == "master", 15, "node0 master")
        self.wait_synced(self.nodes[0], 30)

    def wait_synced(self, m, timeout):
        def synced():
            st = m.status()
            peers = st.get("peers", {}).values()
            # A chain's head ships to its successor only (which relays to the tail and
            # acknowledges once the tail has it); a star's master to both replicas.
            want = 1 if self.topology == "chain" else 2
            return st.get("role") == "master" and sum(
                p["state"] == "online" and int(p["acked_offset"]) == int(st["offset"]) for p in peers) >= want
        bf.wait_for(synced, timeout, f"node{m.k}'s replicas in sync")

    def wait_all_applied(self, m, timeout):
        """Every node stands at the master's offset (writes have stopped): a chain's
        tail, or a node restarted empty, synced through a relay too."""
        def applied():
            end = m.status().get("offset")
            return end is not None and all(
                n is m or n.status().get("offset") == end for n in self.nodes)
        bf.wait_for(applied, timeout, "every node at the master's offset")

    # ---- faults: each runs to its end (the node or etcd back) ----

    def kill_node(self, n, restart_after):
        was_master = n.status().get("role") == "master"
        n.kill()
        t = time.monotonic()
        self.note("kill", node=n.k, master=was_master)
        time.sleep(restart_after)
        if was_master:
            self.failovers.append((t, n.k))
        n.start(fresh=True)
        self.note("restart empty", node=n.k)

    def fault(self, name):
        lease = LEASE_MS / 1000
        # The roles the fault picks from (master, replicas) are the current ones: wait
        # for the cluster to have a master again after the previous fault.
        try:
            m = bf.wait_for(self.master, 15, "a master before the next fault")
        except RuntimeError:
            m = self.nodes[0]
            self.note("no master before the fault")
        others = [n for n in self.nodes if n is not m]
        if name == "kill_master":
            self.kill_node(m, lease + self.rng.uniform(0.5, 2))
        elif name == "kill_replica":
            self.kill_node(self.rng.choice(others), self.rng.uniform(0.2, 2))
        elif name in ("freeze", "freeze_master"):
            n = m if name == "freeze_master" else self.rng.choice(others)
            n.freeze(True)
            self.note("SIGSTOP", node=n.k, master=n is m)
            if n is m:
                self.failovers.append((time.monotonic(), n.k))
            time.sleep(lease + self.rng.uniform(0.3, 2))
            n.freeze(False)
            self.note("SIGCONT", node=n.k)
        elif name == "etcd_cut_master":
            p = self.proxies[m.k]
            p.cut(True)
            self.note("cut from etcd", node=m.k, master=True)
            self.failovers.append((time.monotonic(), m.k))
            time.sleep(lease + self.rng.uniform(1, 2.5))
            p.cut(False)
            self.note("etcd reachable again", node=m.k)
        elif name == "etcd_pause":
            self.etcd.signal(signal.SIGSTOP)
            self.note("etcd SIGSTOP")
            time.sleep(self.rng.uniform(0.5, 2.5))
            self.etcd.signal(signal.SIGCONT)
            self.note("etcd SIGCONT")
        elif name == "freeze_empty_restart":
            x = self.rng.choice(self.nodes)
            x.kill()
            self.note("kill", node=x.k)
            rest = [n for n in self.nodes if n is not x]
            for n in rest:
                n.freeze(True)
            self.note("SIGSTOP", nodes=[n.k for n in rest])
            time.sleep(lease + 1.5)
            x.start(fresh=True)
            self.note("restart empty", node=x.k)
            time.sleep(self.rng.uniform(1, 3))
            if self.master() is x:
                self.note("VIOLATION: the empty node was elected", node=x.k)
                self.empty_elected = True
            for n in rest:
                n.freeze(False)
            self.note("SIGCONT", nodes=[n.k for n in rest])
        elif name == "etcd_wipe_master_killed":
            stale = self.rng.choice(others)
            stale.freeze(True)
            self.note("SIGSTOP", node=stale.k)
            time.sleep(self.rng.uniform(0.5, 1.5))  # the master and the other replica go on
            self.etcd.wipe_and_restart()
            self.note("etcd killed, wiped, restarted")
            t = time.monotonic()
            m.kill()
            self.note("kill", node=m.k, master=True)
            self.failovers.append((t, m.k))
            # The holder comes back late (as from its reconnect back-off), the stale
            # replica first.
            holder = next(n for n in others if n is not stale)
            holder.freeze(True)
            stale.freeze(False)
            self.note("SIGCONT, holder late", node=stale.k, holder=holder.k)
            time.sleep(self.rng.uniform(1.5, 2.5))
            if self.master() is stale:
                self.note("VIOLATION: the stale replica was elected", node=stale.k)
                self.stale_elected = True
            holder.freeze(False)
            self.note("SIGCONT", node=holder.k)
            time.sleep(lease + self.rng.uniform(0.5, 1.5))
            m.start(fresh=True)
            self.note("restart empty", node=m.k)
        else:
            raise ValueError(name)

    def heal(self):
        for p in self.proxies:
            p.cut(False)
        if self.etcd.proc is None:
            self.etcd.start()
        self.etcd.signal(signal.SIGCONT)
        for n in self.nodes:
            if n.proc is None:
                n.start(fresh=True)
            elif n.frozen:
                n.freeze(False)
        try:
            m = bf.wait_for(self.master, 15, "a master after healing")
        except RuntimeError:
            m = self.force_best()
            # Nodes holding data the forced master may lack refuse its full sync
            # (they keep it and say "diverged"): the operator restarts them empty.
            time.sleep(3)
            for n in self.nodes:
                if n is not m and int(n.status().get("diverged", 0) or 0) > 0:
                    self.note("diverged from the forced master: restarted empty", node=n.k)
                    n.kill()
                    n.start(fresh=True)
        self.wait_synced(m, 30)
        return m

    def force_best(self):
        """Every node is up and no master was elected: the election waits for a
        quorum of members that kept their data, which faults beyond the tolerance took
        (e.g. two of three nodes restarted empty). The operator's way out
        (docs/FAILOVER.md): force the election of the live member holding the most of
        the newest history. Counted; losses after it are reported apart."""
        waits = [n.status().get("election_wait") for n in self.nodes]
        if not any(waits):
            raise RuntimeError("no master after healing, and no node says it waits for a quorum")
        out = subprocess.run([CTL, "replication", "members", "--json", "--config", self.nodes[0].cfg],
                             check=True, capture_output=True, text=True).stdout
        ms = [m for m in json.loads(out)["members"] if m.get("data", "none") != "none"]
        if not ms:
            # Every copy is gone (the last holder died while the others were empty or
            # in a full sync): beyond what any election can save.
            raise BeyondTolerance("no member holds data")
        best = max(ms, key=lambda m: (m.get("hist", 0), m["offset"], -m.get("rank", 0), -m["id"]))
        name = next(f"node{k}" for k in range(3) if self.node_id(k) == best["id"])
        self.note("unavailable: the election waits for a quorum; forced", node=name, waits=waits)
        self.forced += 1
        subprocess.run([CTL, "replication", "force-elect", "--config", self.nodes[0].cfg, "--node", name,
                        "--i-accept-data-loss"], check=True, stdout=subprocess.DEVNULL)
        return bf.wait_for(self.master, 20, "a master after the forced election")

    @staticmethod
    def node_id(k):
        """The etcd id of node k (kvcluster::node_id_from_name of "nodeK": FNV-1a
        folded to 32 bits)."""
        h = 0xcbf29ce484222325
        for b in f"node{k}".encode():
            h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
        return max(1, (h ^ (h >> 32)) & 0xFFFFFFFF)

    # ---- the run ----

    def snapshot(self, n, name):
        path = os.path.join(self.d, name)
        subprocess.run([CTL, "snapshot", "save", path, "--file-prefix", f"{PREFIX}-node{n.k}"],
                       check=True, stdout=subprocess.DEVNULL)
        return snapshot_dump.read(path)

    def run(self):
        self.t0 = time.monotonic()
        self.empty_elected = False
        self.stale_elected = False
        self.forced = 0
        self.interrupted = False
        self.load = None
        res = dict(seed=self.seed, topology=self.topology, mode=self.mode, faults=self.faults,
                   workload="history" if self.hist else "counter")
        try:
            self.setup()
            if self.hist:
                return self.run_history(res)
            rc, _ = bf.pktgen(self.nodes[0], ["--keys", str(self.a.keys), "--key-size", "8",
                                              "--value-size", "8", "--load", "--get", "0", "--put", "1",
                                              "--duration", "0.3", "--warmup", "0"], "fill")
            if rc != 0:
                raise RuntimeError("the fill failed")
            self.wait_synced(self.nodes[0], 30)
            s0 = self.snapshot(self.nodes[0], "s0.kvd")
            sampler = Sampler(self.nodes)
            sampler.start()
            # The client runs through the faults and the healing, and ends by itself
            # (an interrupted pktgen would leave requests of unknown outcome uncounted).
            budget = 7 * len(self.faults) + 8
            self.load, load_json = bf.pktgen(
                self.nodes[0],
                ["--config", os.path.join(self.d, "follow.json"),
                 "--follow-ports", ",".join(f"net_memif{20 + k}" for k in range(3)),
                 "--keys", "1", "--key-size", "8", "--get", "0", "--put", "0", "--atomic", "1",
                 "--warmup", "0", "--duration", str(budget), "--timeout-ms", "300"],
                "load", wait=False)
            load = self.load
            self.t_load = time.monotonic()
            time.sleep(1)
            for f in self.faults:
                self.fault(f)
                time.sleep(self.rng.uniform(0.5, 1.5))
            m = self.heal()
            self.note("healed", master=m.k)
            # pktgen does not redial a node that restarted (its memif client port to it
            # stays down), so it may find no node to answer: stopped by SIGINT then, it
            # reports what it was answered but abandons its requests in flight, whose
            # effects can then not be bounded (duplicates unchecked).
            left = budget - (time.monotonic() - self.t_load) + 15
            try:
                load.wait(max(left, 5))
                self.interrupted = False
            except subprocess.TimeoutExpired:
                self.interrupted = True
                load.send_signal(signal.SIGINT)
                try:
                    load.wait(20)
                except subprocess.TimeoutExpired:
                    load.kill()
            sampler.stop.set()
            sampler.join()
            r = json.load(open(load_json)) if os.path.exists(load_json) else None
            m = bf.wait_for(self.master, 30, "a master at the end")
            self.wait_synced(m, 30)
            self.wait_all_applied(m, 60)
            s1 = self.snapshot(m, "s1.kvd")
            res.update(self.check(s0, s1, r, m, sampler))
        except BeyondTolerance as e:
            res["beyond_tolerance"] = str(e)
        except Exception as e:  # noqa: BLE001 - a schedule that could not run is reported
            res["error"] = str(e)
            self.dump_status()
        finally:
            self.teardown(res)
        return res

    def teardown(self, res):
        # A schedule cut short by an error must not leave its client running: the
        # next schedule's pktgen (same EAL file prefix) could not start.
        if self.load is not None and self.load.poll() is None:
            self.load.kill()
            self.load.wait()
        if self.hist:
            self.hist.stop()
        for n in self.nodes:
            if n.frozen:
                n.freeze(False)
        crashes = [n.k for n in self.nodes if n.died_unasked()]
        for n in self.nodes:
            n.stop()
        self.etcd.kill()
        for p in self.proxies:
            p.kill()
        if self.hist:
            self.hist.bridge_down()
        res["crashes"] = len(crashes) + self.panics()
        res["split_brain_epochs"] = self.split_brain()
        res["events"] = self.events
        res["wall_s"] = round(time.monotonic() - self.t0, 1)
        res.update(self.survivors(res))

    def run_history(self, res):
        """The history workload through the faults (the caller's finally tears down)."""
        self.hist.seed_state()
        self.wait_synced(self.nodes[0], 30)
        s0 = self.snapshot(self.nodes[0], "s0.kvd")
        sampler = Sampler(self.nodes)
        sampler.start()
        self.hist.start()
        time.sleep(1)
        for f in self.faults:
            self.fault(f)
            time.sleep(self.rng.uniform(0.5, 1.5))
        if not self.faults:
            # The no-fault soak: the load alone, for --soak-minutes.
            time.sleep(self.a.soak_minutes * 60)
        m = self.heal()
        self.note("healed", master=m.k)
        time.sleep(1)  # the clients find the master and work on the healed cluster
        died = self.hist.stop()
        sampler.stop.set()
        sampler.join()
        m = bf.wait_for(self.master, 30, "a master at the end")
        self.wait_synced(m, 30)
        self.wait_all_applied(m, 60)
        h = self.hist.check(self.hist.final())
        res.update({
            "acked_keys": len(s0),
            "history": {k: v for k, v in h.items() if k != "examples"},
            "history_examples": h["examples"],
            "clients_died": died,
            "lost_acked_writes": h["lost_acked_writes"],
            "lost_acked_increments": h["lost_acked_increments"],
            "duplicate_effects": h["duplicate_effects"],
            "foreign_values": h["read_never_written"],
            "stale_reads": h["stale_reads"],
            "duplicate_incr_results": h["duplicate_incr_results"],
            "non_monotonic_incr": h["non_monotonic_incr"],
            "wrong_bank_totals": h["wrong_bank_totals"],
            "acked_increments": h["acked_increments"],
            **self.elections_and_timing(sampler, m),
            "operations": h["operations"],
            # Masters elected after the first: with no fault injected, each is a
            # failover the load alone caused (leases lapsing on a starved host).
            "elections_after_first": self.elections() - 1,
        })
        return res

    def count_in_logs(self, text):
        """Occurrences of `text` in the three nodes' logs."""
        n = 0
        for k in range(3):
            p = os.path.join(self.d, f"node{k}.log")
            if os.path.exists(p):
                n += open(p, errors="replace").read().count(text)
        return n

    def elections(self):
        """How many times a node became master (each node logs BecameMaster)."""
        return self.count_in_logs("BecameMaster { epoch:")

    def dump_status(self):
        """Every answering node's /kvd/replication beside its log (statusK.json): what
        a schedule that did not heal left behind."""
        for n in self.nodes:
            if n.proc is not None and not n.frozen:
                with open(os.path.join(self.d, f"status{n.k}.json"), "w") as f:
                    json.dump(n.status(), f, indent=1)

    def check(self, s0, s1, r, m, sampler):
        changed = [k for k in s0 if k in s1 and s1[k] != s0[k]]
        missing = [k for k in s0 if k not in s1]
        foreign = [k for k in s1 if k not in s0]
        growth = 0
        if len(changed) == 1:
            ck = changed[0]
            growth = (struct.unpack("<Q", s1[ck])[0] - struct.unpack("<Q", s0[ck])[0]) % (1 << 64)
        acked = r["results_ok"] if r else 0
        unknown = (r.get("outcome_unknown", 0) + r.get("timeouts", 0)) if r else 0
        bounded = r is not None and not self.interrupted
        return {
            "acked_keys": len(s0),
            "acked_increments": acked,
            "outcome_unknown": unknown,
            "counter_growth": growth,
            # A key of S0 missing, or two changed: acknowledged data not held.
            "lost_acked_writes": len(missing) + max(0, len(changed) - 1),
            "foreign_values": len(foreign),
            "lost_acked_increments": max(0, acked - growth),
            # Only when the client ended by itself: an interrupted one abandons its
            # requests in flight, whose effects are then unknown.
            "duplicate_effects": max(0, growth - acked - unknown) if bounded else None,
            "client_interrupted": self.interrupted,
            "client_report": r is not None,
            **self.elections_and_timing(sampler, m),
            "operations": len(s0) + acked,
        }

    def elections_and_timing(self, sampler, m):
        """What both workloads report of the elections, failovers and availability."""
        fo = [sampler.first_master_after(t, k) for t, k in self.failovers]
        # Time-weighted: a sample stands until the next one (a sample may take long
        # while a node starts or etcd is paused).
        sm = sampler.samples
        unavailable = sum(b[0] - a[0] for a, b in zip(sm, sm[1:]) if a[1] is None)
        return {
            "empty_node_elected": self.empty_elected,
            # Informational: the replica frozen first may still hold the most (a chain's
            # middle, whose freeze stops the head's acknowledgements; or a holder that
            # re-registered before its late freeze): lost writes are what fail.
            "stale_node_elected": self.stale_elected,
            "forced_elections": self.forced,
            "failover_ms": [round((t2 - t) * 1000) for (t, _), t2 in zip(self.failovers, fo) if t2],
            "unavailable_ms": round(unavailable * 1000),
            "final_master": m.k,
        }

    def survivors(self, res):
        if "beyond_tolerance" in res:
            return {"survivors_differ": None, "data_wipes": None}
        stats = []
        for n in self.nodes:
            try:
                stats.append(json.load(open(n.stats)))
            except (OSError, ValueError):
                stats.append(None)
        if any(s is None for s in stats):
            return {"survivors_differ": None, "data_wipes": None}
        digests = {(s["engine_digest"], s["engine_kvs"]) for s in stats}
        wipes = sum(1 for s in stats if s["engine_kvs"] < res.get("acked_keys", 0))
        return {"survivors_differ": len(digests) > 1, "data_wipes": wipes}

    def panics(self):
        return self.count_in_logs("PANIC")

    def split_brain(self):
        masters = {}
        for k in range(3):
            p = os.path.join(self.d, f"node{k}.log")
            if not os.path.exists(p):
                continue
            for line in open(p, errors="replace"):
                if "BecameMaster { epoch:" in line:
                    e = int(line.split("epoch:")[1].split("}")[0])
                    masters.setdefault(e, set()).add(k)
        return sum(1 for s in masters.values() if len(s) > 1)


SAFETY = ["lost_acked_writes", "foreign_values", "duplicate_effects", "split_brain_epochs", "crashes",
          "data_wipes", "wrong_bank_totals", "clients_died"]
# What async mode's documented window may lose (a write acknowledged, not yet shipped,
# when the master died): reported, not failed, in async mode.
ASYNC_WINDOW = ["lost_acked_increments", "stale_reads", "duplicate_incr_results", "non_monotonic_incr"]


def verdict(r):
    """The broken safety checks of one schedule's result (async: its lost increments
    are the documented window)."""
    forced = r.get("forced_elections")
    # A forced election may lose acknowledged writes (the operator accepted it).
    bad = [f for f in SAFETY if r.get(f) and not (forced and f in ("lost_acked_writes", "data_wipes"))]
    if r.get("mode") == "sync" and not forced:
        bad += [f for f in ASYNC_WINDOW if r.get(f)]
    elif r.get("workload") == "history" and r.get("mode") == "async":
        # A lost write within the window is not a failure there either.
        bad = [f for f in bad if f != "lost_acked_writes"]
    if r.get("empty_node_elected"):
        bad.append("empty_node_elected")
    if r.get("survivors_differ"):
        bad.append("survivors_differ")
    if "error" in r:
        bad.append("error")
    return bad


def summary(runs, t0, planned):
    """The results of the schedules run so far."""
    fo = [x for r in runs for x in r.get("failover_ms", [])]
    total = {f: sum(r.get(f) or 0 for r in runs) for f in SAFETY + ["lost_acked_increments"]}
    res = {
        "what": "seeded fault schedules against 3 etcd-managed dataplanes (lease 1 s): the counter "
                "workload (memif; acknowledged PUTs then fetch-adds from a pktgen following the master) "
                "or the history workload (net_tap; kernel clients recording every put, get, "
                "fetch-add, bank transfer and audit, checked by scripts/history_check.py); "
                "docs/FAILOVER.md 'Election safety'",
        "command": "scripts/nemesis.py " + " ".join(sys.argv[1:]),
        "schedules": len(runs),
        "schedules_planned": planned,
        "failed_schedules": [r["seed"] for r in runs if r["verdict"] != "ok"],
        "operations": sum(r.get("operations", 0) for r in runs),
        "lost_acked_writes": total["lost_acked_writes"],
        "lost_acked_increments_sync": sum(r.get("lost_acked_increments") or 0 for r in runs
                                          if r["mode"] == "sync"),
        "lost_acked_increments_async": sum(r.get("lost_acked_increments") or 0 for r in runs
                                           if r["mode"] == "async"),
        "data_wipes": total["data_wipes"],
        "split_brain_epochs": total["split_brain_epochs"],
        "crashes": total["crashes"],
        "duplicate_effects": total["duplicate_effects"],
        # Schedules whose faults took the quorum of data holders (the cluster waited
        # until the nemesis, as an operator, forced an election), and what those lost.
        "forced_elections": sum(r.get("forced_elections") or 0 for r in runs),
        "lost_after_forced": sum((r.get("lost_acked_writes") or 0) + (r.get("lost_acked_increments") or 0)
                                 for r in runs if r.get("forced_elections")),
        "foreign_values": total["foreign_values"],
        "history_schedules": sum(1 for r in runs if r.get("workload") == "history"),
        "history_operations": sum(r.get("operations", 0) for r in runs if r.get("workload") == "history"),
        **{f: sum(r.get(f) or 0 for r in runs if r.get("mode") == "sync")
           for f in ["stale_reads", "duplicate_incr_results", "non_monotonic_incr"]},
        "wrong_bank_totals": total["wrong_bank_totals"],
        # Runs with no fault injected (--soak-minutes): masters the load alone changed.
        "spontaneous_failovers": sum(r.get("elections_after_first") or 0 for r in runs if not r["faults"]),
        # Schedules whose faults took every copy (no member held data at the end).
        "beyond_tolerance": [r["seed"] for r in runs if "beyond_tolerance" in r],
        "failover_ms_p50": statistics.median(fo) if fo else None,
        "failover_ms_p99": sorted(fo)[min(len(fo) - 1, int(len(fo) * 0.99))] if fo else None,
        "unavailable_ms": [r.get("unavailable_ms") for r in runs],
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
    }
    return res


def plan(seed, workload, partitions=False):
    """A seed's schedule (the workload drawn last: earlier seeds keep their faults)."""
    rng = random.Random(seed)
    faults = FAULTS + (PARTITION_FAULTS if partitions else [])
    p = (rng.choice(["star", "chain"]), rng.choice(["sync", "sync", "async"]),
         [rng.choice(faults) for _ in range(rng.randint(2, 3))])
    return p + (rng.choice(["counter", "history"]) if workload == "mixed" else workload,)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="the short form: the named schedules")
    ap.add_argument("--schedules", type=int, default=100)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--seed", type=int, help="run only this schedule")
    ap.add_argument("--keys", type=int, default=5000)
    ap.add_argument("--workload", default="mixed", choices=["counter", "history", "mixed"],
                    help="pktgen's acknowledged PUTs and fetch-adds, recorded per-operation "
                         "histories of kernel clients, or a seeded choice per schedule")
    ap.add_argument("--no-huge", dest="huge", action="store_false")
    ap.add_argument("--idle", default="", choices=["", "poll", "yield", "adaptive"],
                    help="server.idle of the nodes (default: configs/memif.json's)")
    ap.add_argument("--partitions", action="store_true",
                    help="also draw etcd_cut_master (a node cut from etcd through a proxy "
                         "SIGSTOPped; its clients and links go on)")
    ap.add_argument("--soak-minutes", type=float, default=0,
                    help="instead of fault schedules: one history run with no fault for this "
                         "long; reports spontaneous_failovers (issue 29, hole 3)")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.soak_minutes:
        todo = [(a.seed or 900, "star", "sync", [], "history")]
    elif a.quick:
        todo = QUICK
    elif a.seed is not None:
        named = {s[0]: s for s in QUICK}
        todo = [named.get(a.seed) or (a.seed, *plan(a.seed, a.workload, a.partitions))]
    else:
        todo = [(s, *plan(s, a.workload, a.partitions))
                for s in range(a.first_seed, a.first_seed + a.schedules)]
    out = a.out or (os.path.join(tempfile.gettempdir(), "kvd-nemesis-quick.json") if a.quick
                    else os.path.join(ROOT, "results/nemesis.json"))
    tmp = tempfile.mkdtemp(prefix="kvd-nemesis-")
    runs, t0 = [], time.monotonic()
    with benchlib.dpdk_lock():
        for seed, topo, mode, faults, workload in todo:
            r = Schedule(tmp, seed, topo, mode, faults, workload, a).run()
            bad = verdict(r)
            r["verdict"] = "FAIL: " + ", ".join(bad) if bad else "ok"
            runs.append(r)
            h = r.get("history", {})
            what = (f"{h.get('operations', '?')} operations recorded ({h.get('acknowledged', '?')} acknowledged, "
                    f"{h.get('unknown', '?')} unknown, {h.get('audits', '?')} audits)" if workload == "history" else
                    f"{r.get('acked_keys', '?')} keys and {r.get('acked_increments', '?')} increments acknowledged, "
                    f"counter +{r.get('counter_growth', '?')}")
            log(f"nemesis seed {seed} ({topo}, {mode}, {' + '.join(faults)}, {workload}): {r['verdict']}; "
                f"{what}, failover {r.get('failover_ms')} ms, "
                f"unavailable {r.get('unavailable_ms')} ms"
                + (f"  [rerun: scripts/nemesis.py --seed {seed}]" if bad else "")
                + (f"\n  error: {r['error']}" if "error" in r else ""))
            # After every schedule: a run cut short still leaves its results.
            res = summary(runs, t0, len(todo))
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with open(out, "w") as f:
                json.dump(res, f, indent=2)
    ok = not res["failed_schedules"]
    if ok or os.environ.get("KVD_NEMESIS_CLEAN"):
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        log(f"nemesis: the failing schedules' logs are kept in {tmp}")
    log(f"nemesis: {len(runs)} schedules, {len(res['failed_schedules'])} failed "
        f"{res['failed_schedules'] or ''} -> {out}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
