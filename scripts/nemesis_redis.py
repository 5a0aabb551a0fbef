#!/usr/bin/env python3
"""The nemesis against Redis 7 with Sentinel, side by side with ours (issue 29's
comparison): the same history workload, the same kill and freeze faults drawn from a
seed, the same checker (scripts/history_check.py).

Per schedule, on this host: three redis-server processes (one master, two replicas,
append-only file with fsync every second, as Redis's durable configuration) and three
Sentinels (quorum 2, down-after 1 s — our lease — failover timeout 4 s); three client
processes (redis-py through the Sentinels, no automatic retries: a retried INCR would
be the client's duplicate, not the store's) record every operation as
scripts/history_client.py does ours. Then the faults:

  kill_master            kill -9 of the master, restarted from its files after 1.5-3 s
  kill_replica           kill -9 of a replica, restarted from its files after 0.2-2 s
  freeze / freeze_master SIGSTOP of a replica / the master past down-after, then SIGCONT
  freeze_empty_restart   kill -9 of one node, SIGSTOP of the others past down-after, the
                         killed one restarted with no files, then SIGCONT

Healing: every process continued or started, one master named by the Sentinels and
every replica linked and at its offset; the clients stop, the final state is read from
the master and the histories are checked.

Two write modes: `async` (Redis's replication as shipped) and `wait` (each write
followed by WAIT 1 500 and `min-replicas-to-write 1`: an acknowledgement once a
replica has it, the nearest to our `mode: sync, min_replicas: 1`; a write whose WAIT
saw no replica is recorded "unknown", as Redis documents that it is not rolled back).

Usage: scripts/nemesis_redis.py [--schedules N] [--first-seed S] [--seed S]
[--mode async|wait|both] [--out results/nemesis_redis.json]
(scripts/bench.sh nemesis-redis). Needs redis-server and redis-py (scripts/setup.sh).
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import history_check  # noqa: E402
from benchlib import ROOT, Signalled, log  # noqa: E402

DOWN_AFTER_MS = 1000  # nemesis.py's LEASE_MS: the same detection time
FAILOVER_TIMEOUT_MS = 4000
NAME = "kvd"
PORT = 7410
SENTINEL_PORT = 27410
CLIENTS, ACCOUNTS, REGISTERS, START = 3, 8, 8, 100
FAULTS = ["kill_master", "kill_replica", "freeze", "freeze_master", "freeze_empty_restart"]
MIX = [("put", 30), ("get", 30), ("incr", 20), ("transfer", 15), ("audit", 5)]
# A transfer commits only if both balances are still the ones read before (as ours).
TRANSFER = """
if redis.call('GET', KEYS[1]) == ARGV[1] and redis.call('GET', KEYS[2]) == ARGV[2] then
  redis.call('SET', KEYS[1], ARGV[3]); redis.call('SET', KEYS[2], ARGV[4]); return 1
end
return 0
"""


# ---- the servers ----

class Proc(Signalled):
    """One redis-server (a data node or, with `sentinel`, a Sentinel)."""

    def __init__(self, d, k, port, conf):
        self.d, self.k, self.port = d, k, port
        self.conf = os.path.join(d, "redis.conf")
        self.proc, self.frozen = None, False
        os.makedirs(d, exist_ok=True)
        with open(self.conf, "w") as f:
            f.write(conf)

    def start(self, sentinel=False, fresh=False):
        if fresh:
            for name in os.listdir(self.d):
                if name != "redis.conf" and name != "log":
                    p = os.path.join(self.d, name)
                    shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
        cmd = ["redis-server", self.conf] + (["--sentinel"] if sentinel else [])
        self.proc = subprocess.Popen(cmd, cwd=self.d, stdout=open(os.path.join(self.d, "log"), "a"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.frozen = False
        wait_for(lambda: ping(self.port), 10, f"redis on port {self.port}")



def no_retry():
    """redis-py's policy of no automatic retry (its default retries a command after a
    connection error: a second INCR the store would be blamed for)."""
    from redis.backoff import NoBackoff
    from redis.retry import Retry
    return Retry(NoBackoff(), 0)


def redis_conn(port, timeout=0.5):
    import redis
    return redis.Redis(host="127.0.0.1", port=port, socket_timeout=timeout,
                       socket_connect_timeout=timeout, retry=no_retry())


def ping(port):
    try:
        return redis_conn(port).ping()
    except Exception:
        return False


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            v = pred()
        except Exception:
            v = None
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


def node_conf(port, mode, master_port):
    lines = [f"port {port}", "bind 127.0.0.1", "appendonly yes", "appendfsync everysec",
             'save ""', "protected-mode no"]
    if mode == "wait":
        lines += ["min-replicas-to-write 1", "min-replicas-max-lag 5"]
    if master_port is not None:
        lines.append(f"replicaof 127.0.0.1 {master_port}")
    return "\n".join(lines) + "\n"


def sentinel_conf(port):
    return "\n".join([
        f"port {port}", "bind 127.0.0.1", "protected-mode no",
        f"sentinel monitor {NAME} 127.0.0.1 {PORT} 2",
        f"sentinel down-after-milliseconds {NAME} {DOWN_AFTER_MS}",
        f"sentinel failover-timeout {NAME} {FAILOVER_TIMEOUT_MS}",
        f"sentinel parallel-syncs {NAME} 1"]) + "\n"


# ---- one client process (--client) ----

def client_main(a):
    """Records operations until --stop-file exists (the format of
    scripts/history_client.py)."""
    import redis
    from redis.sentinel import Sentinel
    sentinels = [("127.0.0.1", SENTINEL_PORT + i) for i in range(3)]
    s = Sentinel(sentinels, socket_timeout=0.5, sentinel_kwargs={"socket_timeout": 0.5})
    c = s.master_for(NAME, socket_timeout=1.0, socket_connect_timeout=0.5, retry=no_retry())
    transfer = c.register_script(TRANSFER)
    rng = random.Random(a.seed)
    ops = [name for name, w in MIX for _ in range(w)]
    seq = 0

    def num(v):
        return None if v is None else int(v)

    def replicated(result):
        # `wait` mode: acknowledged once a replica has it; else its outcome is unknown.
        if a.mode == "wait" and c.execute_command("WAIT", 1, 500) < 1:
            raise Unreplicated(result)
        return result

    def step():
        nonlocal seq
        f = rng.choice(ops)
        if f == "put":
            k = f"r{rng.randrange(REGISTERS)}"
            seq += 1
            v = f"{a.client}-{seq}"
            return f, k, v, lambda: replicated(c.set(k, v) and None)
        if f == "get":
            k = f"r{rng.randrange(REGISTERS)}"
            return f, k, None, lambda: (lambda v: v.decode() if v is not None else None)(c.get(k))
        if f == "incr":
            return f, "ctr", 1, lambda: replicated(c.incr("ctr"))
        if f == "transfer":
            i, j = rng.sample(range(ACCOUNTS), 2)
            keys, amount = [f"a{i}", f"a{j}"], rng.randint(1, 5)

            def run():
                bs, bd = num(c.get(keys[0])), num(c.get(keys[1]))
                n = min(amount, bs)
                if not transfer(keys=keys, args=[bs, bd, bs - n, bd + n]):
                    raise Aborted()
                return replicated([bs, bd, n])
            return f, keys, amount, run
        return f, None, None, lambda: [num(v) for v in c.mget([f"a{i}" for i in range(ACCOUNTS)])]

    with open(a.out, "w") as out:
        while not os.path.exists(a.stop_file):
            f, k, v, fn = step()
            t0 = time.monotonic_ns()
            try:
                r, res = "ok", fn()
            except Aborted:
                r, res = "fail", "aborted: condition_failed"
            except Unreplicated:
                r, res = "info", "WAIT: no replica acknowledged"
            except (redis.exceptions.ReadOnlyError, redis.exceptions.NoPermissionError) as e:
                r, res = "fail", f"refused: {e}"
            except redis.exceptions.ResponseError as e:
                # NOREPLICAS (min-replicas-to-write), MASTERDOWN...: refused, not run.
                r, res = "fail", f"refused: {e}"
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as e:
                r, res = "info", f"{type(e).__name__}: {e}"
                time.sleep(0.05)
            t1 = time.monotonic_ns()
            out.write(json.dumps({"p": a.client, "f": f, "k": k, "v": v, "t0": t0, "t1": t1,
                                  "r": r, "out": res}) + "\n")
            out.flush()


class Aborted(Exception):
    pass


class Unreplicated(Exception):
    pass


# ---- one schedule ----

class Schedule:
    def __init__(self, tmp, seed, mode, faults):
        self.seed, self.mode, self.faults = seed, mode, faults
        self.rng = random.Random(seed)
        self.d = os.path.join(tmp, f"{mode}-s{seed}")
        shutil.rmtree(self.d, ignore_errors=True)
        self.nodes = [Proc(os.path.join(self.d, f"node{k}"), k, PORT + k,
                           node_conf(PORT + k, mode, None if k == 0 else PORT))
                      for k in range(3)]
        self.sentinels = [Proc(os.path.join(self.d, f"sentinel{k}"), k, SENTINEL_PORT + k,
                               sentinel_conf(SENTINEL_PORT + k)) for k in range(3)]
        self.events, self.clients, self.t0 = [], [], time.monotonic()
        self.stop_file = os.path.join(self.d, "stop")

    def note(self, what, **kw):
        self.events.append({"t": round(time.monotonic() - self.t0, 2), "what": what, **kw})

    def master_port(self):
        """The master as the Sentinels' majority names it."""
        seen = {}
        for s in self.sentinels:
            try:
                port = int(redis_conn(s.port).sentinel_get_master_addr_by_name(NAME)[1])
                seen[port] = seen.get(port, 0) + 1
            except Exception:
                pass
        best = max(seen.items(), key=lambda kv: kv[1], default=(None, 0))
        return best[0] if best[1] >= 2 else None

    def master(self):
        p = self.master_port()
        return next((n for n in self.nodes if n.port == p), None)

    def up(self):
        for n in self.nodes:
            n.start()
        for s in self.sentinels:
            s.start(sentinel=True)
        c = redis_conn(PORT, 10)
        wait_for(lambda: c.info("replication")["connected_slaves"] == 2, 15, "two replicas")
        # In `wait` mode writes are refused (NOREPLICAS) until the replicas count.
        wait_for(lambda: c.set("ctr", 0), 15, "the first write")
        for i in range(ACCOUNTS):
            c.set(f"a{i}", START)
        c.execute_command("WAIT", 2, 5000)
        # Every Sentinel has found the replicas and the other Sentinels.
        wait_for(lambda: all(
            (m := redis_conn(s.port).sentinel_master(NAME))["num-other-sentinels"] == 2
            and m["num-slaves"] == 2 for s in self.sentinels), 15, "the Sentinels to know each other")

    def start_clients(self):
        for i in range(CLIENTS):
            cmd = [sys.executable, os.path.abspath(__file__), "--client", str(i), "--mode", self.mode,
                   "--seed", str(self.seed * 100 + i), "--out", os.path.join(self.d, f"hist{i}.jsonl"),
                   "--stop-file", self.stop_file]
            self.clients.append(subprocess.Popen(cmd, stdout=open(os.path.join(self.d, f"client{i}.log"), "w"),
                                                 stderr=subprocess.STDOUT, start_new_session=True))

    def fault(self, name):
        down = DOWN_AFTER_MS / 1000
        m = self.master() or self.nodes[0]
        others = [n for n in self.nodes if n is not m]
        if name in ("kill_master", "kill_replica"):
            n = m if name == "kill_master" else self.rng.choice(others)
            n.kill()
            self.note("kill", node=n.k, master=n is m)
            time.sleep(down + self.rng.uniform(0.5, 2) if n is m else self.rng.uniform(0.2, 2))
            n.start()
            self.note("restart", node=n.k)
        elif name in ("freeze", "freeze_master"):
            n = m if name == "freeze_master" else self.rng.choice(others)
            n.freeze(True)
            self.note("SIGSTOP", node=n.k, master=n is m)
            time.sleep(down + self.rng.uniform(0.3, 2))
            n.freeze(False)
            self.note("SIGCONT", node=n.k)
        elif name == "freeze_empty_restart":
            x = self.rng.choice(self.nodes)
            x.kill()
            self.note("kill", node=x.k, master=x is m)
            rest = [n for n in self.nodes if n is not x]
            for n in rest:
                n.freeze(True)
            self.note("SIGSTOP", nodes=[n.k for n in rest])
            time.sleep(down + 1.5)
            x.start(fresh=True)
            self.note("restart empty", node=x.k)
            time.sleep(self.rng.uniform(1, 3))
            for n in rest:
                n.freeze(False)
            self.note("SIGCONT", nodes=[n.k for n in rest])
        else:
            raise ValueError(name)

    def healed(self):
        m = self.master()
        if m is None or m.proc is None:
            return False
        mi = redis_conn(m.port).info("replication")
        if mi.get("role") != "master" or mi.get("connected_slaves") != 2:
            return False
        for n in self.nodes:
            if n is m:
                continue
            ri = redis_conn(n.port).info("replication")
            if (ri.get("role") != "slave" or ri.get("master_port") != m.port
                    or ri.get("master_link_status") != "up"
                    or ri.get("slave_repl_offset") != mi.get("master_repl_offset")):
                return False
        return True

    def heal(self):
        for n in self.nodes + self.sentinels:
            if n.proc is None:
                n.start(sentinel=n in self.sentinels)
            elif n.frozen:
                n.freeze(False)
        open(self.stop_file, "w").close()
        for p in self.clients:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        wait_for(self.healed, 60, "one master with both replicas at its offset")
        self.note("healed", master=self.master().k)

    def final(self):
        c = redis_conn(self.master().port, 2)
        regs = {f"r{i}": v.decode() for i in range(REGISTERS) if (v := c.get(f"r{i}")) is not None}
        accounts = [None if v is None else int(v) for v in c.mget([f"a{i}" for i in range(ACCOUNTS)])]
        ctr = c.get("ctr")
        return {"registers": regs, "counter": None if ctr is None else int(ctr), "accounts": accounts}

    def down(self):
        for n in self.nodes + self.sentinels:
            if n.frozen:
                n.freeze(False)
            n.kill()

    def run(self):
        res = {"seed": self.seed, "mode": self.mode, "faults": self.faults}
        try:
            self.up()
            self.start_clients()
            time.sleep(2)
            for f in self.faults:
                self.fault(f)
                time.sleep(self.rng.uniform(0.5, 1.5))
            self.heal()
            final = self.final()
            ops = history_check.load([os.path.join(self.d, f"hist{i}.jsonl") for i in range(CLIENTS)])
            v = history_check.check(ops, final, ACCOUNTS, START)
            res.update(v)
            res["ok"] = all(v[k] == 0 for k in history_check.VIOLATIONS)
        except Exception as e:  # the schedule's own failure, reported with it
            res.update(ok=False, error=f"{type(e).__name__}: {e}")
        finally:
            self.down()
        res["events"] = self.events
        return res


def plan(seed):
    rng = random.Random(seed)
    return [rng.choice(FAULTS) for _ in range(rng.randint(2, 3))]


def summary(runs):
    keys = ["operations", "acknowledged", "unknown"] + history_check.VIOLATIONS
    out = {}
    for mode in sorted({r["mode"] for r in runs}):
        rs = [r for r in runs if r["mode"] == mode]
        s = {"schedules": len(rs), "errors": [r["seed"] for r in rs if "error" in r],
             "schedules_with_violations": [r["seed"] for r in rs if not r.get("ok") and "error" not in r]}
        for k in keys:
            s[k] = sum(r.get(k, 0) for r in rs)
        s["schedules_losing_acked_writes"] = sum(
            1 for r in rs if r.get("lost_acked_writes", 0) + r.get("lost_acked_increments", 0)
            + r.get("stale_reads", 0) > 0)
        s["acked_ops_median"] = statistics.median([r.get("acknowledged", 0) for r in rs]) if rs else 0
        out[mode] = s
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedules", type=int, default=10)
    ap.add_argument("--first-seed", type=int, default=100)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--mode", default="both", choices=["async", "wait", "both"])
    ap.add_argument("--out", default=os.path.join(ROOT, "results", "nemesis_redis.json"))
    # One client process (started by a schedule).
    ap.add_argument("--client", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--stop-file", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.client is not None:
        return client_main(a)
    seeds = [a.seed] if a.seed is not None else range(a.first_seed, a.first_seed + a.schedules)
    modes = ["async", "wait"] if a.mode == "both" else [a.mode]
    tmp = tempfile.mkdtemp(prefix="kvd-nemesis-redis-")
    runs, t0 = [], time.monotonic()
    for seed in seeds:
        for mode in modes:
            r = Schedule(tmp, seed, mode, plan(seed)).run()
            runs.append(r)
            verdict = "ok" if r.get("ok") else "FAIL: " + (r.get("error") or ", ".join(
                k for k in history_check.VIOLATIONS if r.get(k)))
            log(f"redis nemesis seed {seed} ({mode}, {' + '.join(r['faults'])}): {verdict}; "
                f"{r.get('operations', 0)} operations ({r.get('acknowledged', 0)} acknowledged, "
                f"{r.get('unknown', 0)} unknown), lost acked writes {r.get('lost_acked_writes', 0)}, "
                f"lost acked increments {r.get('lost_acked_increments', 0)}, stale reads {r.get('stale_reads', 0)}")
            res = {"what": "Redis 7 + Sentinel under the nemesis's kill and freeze schedules, "
                           "checked by scripts/history_check.py (scripts/nemesis_redis.py)",
                   "command": " ".join(["scripts/nemesis_redis.py"] + sys.argv[1:]),
                   "redis": subprocess.run(["redis-server", "--version"], capture_output=True,
                                           text=True).stdout.strip(),
                   "down_after_ms": DOWN_AFTER_MS, "failover_timeout_ms": FAILOVER_TIMEOUT_MS,
                   "wall_s": round(time.monotonic() - t0, 1), "by_mode": summary(runs), "runs": runs}
            os.makedirs(os.path.dirname(a.out), exist_ok=True)
            with open(a.out, "w") as f:
                json.dump(res, f, indent=2)
    shutil.rmtree(tmp, ignore_errors=True)
    log(f"redis nemesis: {json.dumps(summary(runs))} -> {a.out}")


if __name__ == "__main__":
    main()
