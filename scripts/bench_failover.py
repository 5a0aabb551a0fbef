#!/usr/bin/env python3
"""Failover benchmark (called by scripts/bench.sh replication; issue 14 item 7):
`failover_ms` and `lost_acked_writes`.

Per repetition: a fresh etcd-managed cluster of 3 nodes on memif (scripts/cluster_config.py
--etcd, lease --lease-ms), `mode: sync` with min_replicas 1; node0 is elected first.
The write load is fetch-adds of 1 to one 8-byte counter from pktgen (every one it saw
acknowledged counts); node0 gets SIGKILL --kill-at s into it. Measured:

  * failover_ms: from the SIGKILL to the first telemetry sample (every 20 ms) in which a
    surviving node reports role "master" with enough replicas (its write gate open: it
    takes writes; scripts/e2e/failover.sh checks that with a client);
  * lost_acked_writes: acknowledged fetch-adds missing from the new master's counter
    (read from a snapshot of it, scripts/snapshot_dump.py): max(0, acknowledged −
    growth). Sync mode promises 0; the growth may exceed the acknowledged count by the
    fetch-adds in flight at the kill (applied and replicated, never acknowledged).

Also checked per run: the surviving replica ends with the new master's contents.
Writes results/failover.json and copies `failover_ms` (median) and
`lost_acked_writes` (sum over the runs) into results/replication.json.

With --follow (results/failover_follow.json) one pktgen is attached to every node and
follows the master across the kill (`--follow-ports`: its requests in flight are
resumed on the next node with a RESUME, docs/PROTOCOL.md §6.6), running on past the
election. Also measured: client_resumed_ms (from the SIGKILL to the first telemetry
sample in which the new master executed requests), and exactly-once: every answered
fetch-add counts once, so the counter's growth minus the acknowledged ones, the ones
answered OUTCOME_UNKNOWN and the ones given up (applied_twice_bound) must be 0; the
new master's `restored_replays` counts the requests it answered from the old master's
completion records instead of running them again.
"""
import argparse
import contextlib
import json
import os
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import PG, ROOT, free_port, log  # noqa: E402
import benchlib  # noqa: E402
import snapshot_dump  # noqa: E402

PREFIX = "kvd-hbfo"


class Node:
    def __init__(self, d, k, huge):
        self.d, self.k, self.huge = d, k, huge
        self.proc = None

    @property
    def cfg(self):
        return os.path.join(self.d, f"node{self.k}.json")

    @property
    def stats(self):
        return os.path.join(self.d, f"node{self.k}.stats.json")

    @property
    def log(self):
        return os.path.join(self.d, f"node{self.k}.log")

    def start(self):
        # Own session: a frozen node must not get the kernel's SIGHUP for stopped
        # members of an orphaned process group (scripts/nemesis.py).
        self.proc, _ = benchlib.launch(self.cfg, self.log, huge=self.huge, stats=self.stats,
                                       new_session=True)
        benchlib.wait_ready(self.proc, self.log, what=f"node{self.k}")

    def status(self):
        try:
            return benchlib.telemetry(f"{PREFIX}-node{self.k}", "/kvd/replication")
        except (OSError, ValueError, KeyError):
            return {}

    def stop(self, sig=signal.SIGINT):
        if self.proc is None:
            return
        self.proc.send_signal(sig)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None


@contextlib.contextmanager
def etcd(tmp):
    """A private etcd (scripts/etcd.sh) under `tmp` for the run; yields its URL."""
    port = free_port()
    cmd = [os.path.join(ROOT, "scripts/etcd.sh"), "{}", "--port", str(port), "--dir", os.path.join(tmp, "etcd")]
    subprocess.run([c.format("start") for c in cmd], check=True, stdout=subprocess.DEVNULL)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        subprocess.run([c.format("stop") for c in cmd], check=False, stdout=subprocess.DEVNULL)


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.02)
    raise RuntimeError(f"timed out: {what}")


def pktgen(node, args, name, wait=True):
    out = os.path.join(node.d, f"{name}.json")
    cmd = [PG, "--config", node.cfg, "--json", out] + args
    if not node.huge:
        cmd.append("--no-huge")
    p = subprocess.Popen(cmd, stdout=open(os.path.join(node.d, f"{name}.out"), "w"),
                         stderr=subprocess.STDOUT)
    if not wait:
        return p, out
    rc = p.wait(120)
    return rc, (json.load(open(out)) if os.path.exists(out) else None)


def counter(node, path):
    """The value of the one 8-byte counter of `node`, read from a snapshot of it."""
    subprocess.run([os.path.join(ROOT, "target/release/ctlplane"), "snapshot", "save", path,
                    "--file-prefix", f"{PREFIX}-node{node.k}"], check=True, stdout=subprocess.DEVNULL)
    kv = snapshot_dump.read(path)
    if len(kv) != 1:
        raise RuntimeError(f"{len(kv)} keys in {path}, want the one counter")
    return struct.unpack("<Q", next(iter(kv.values())))[0]


def one_rep(tmp, a, etcd_url, rep):
    d = os.path.join(tmp, f"r{rep}")
    shutil.rmtree(d, ignore_errors=True)
    subprocess.run([sys.executable, os.path.join(ROOT, "scripts/cluster_config.py"), d, "2",
                    "--prefix", PREFIX, "--etcd", etcd_url, "--cluster", f"bfo{rep}-{os.getpid()}",
                    "--lease-ms", str(a.lease_ms), "--mode", a.mode, "--min-replicas", "1",
                    "--probe-ms", "50", "--waiting-ms", "200", "--backlog-mb", "256"],
                   check=True, stdout=subprocess.DEVNULL)
    nodes = [Node(d, k, a.huge) for k in range(3)]
    try:
        # One after the other (memif servers first); the first election waits for
        # all three, and the configured master ranks first.
        for n in nodes:
            n.start()
        wait_for(lambda: nodes[0].status().get("role") == "master", 15, "node0 master")
        wait_for(lambda: sum(p["state"] == "online" for p in nodes[0].status().get("peers", {}).values()) == 2,
                 30, "replicas online")
        # One 8-byte counter; fetch-adds of 1 to it are the verified writes: every one
        # the master acknowledged must be in the new master's counter.
        rc, _ = pktgen(nodes[0], ["--keys", "1", "--key-size", "8", "--value-size", "8", "--load",
                                  "--get", "0", "--put", "1", "--duration", "0.1", "--warmup", "0"], "fill")
        if rc != 0:
            raise RuntimeError("fill failed")
        x0 = counter(nodes[0], os.path.join(d, "before.kvd"))
        load_args = ["--keys", "1", "--key-size", "8", "--get", "0", "--put", "0", "--atomic", "1",
                     "--warmup", "0", "--duration", str(a.kill_at + 2.5), "--timeout-ms", "300"]
        if a.follow:
            # One pktgen on every node's client port, following the master across the
            # kill (docs/PROTOCOL.md §6.6); long enough to go on after the election.
            load_args = ["--config", os.path.join(d, "follow.json"),
                         "--follow-ports", ",".join(f"net_memif{20 + k}" for k in range(3))] + \
                load_args[:-4] + ["--duration", str(a.kill_at + a.lease_ms / 1000 + 3), "--timeout-ms", "300"]
        p, load_json = pktgen(nodes[0], load_args, "load", wait=False)
        wait_for(lambda: nodes[0].status().get("offset", 0) > 100, 20, "load started")
        time.sleep(a.kill_at)
        t_kill = time.monotonic()
        nodes[0].proc.send_signal(signal.SIGKILL)
        nodes[0].proc.wait()
        nodes[0].proc = None

        def new_master():
            for n in nodes[1:]:
                st = n.status()
                if st.get("role") == "master" and not st.get("short_of_replicas"):
                    return n
            return None
        m = wait_for(new_master, 10, "a new master")
        failover_ms = (time.monotonic() - t_kill) * 1000
        resumed_ms = None
        if a.follow:
            # The client's view: the new master executes its requests.
            def ops(n):
                try:
                    return benchlib.telemetry(f"{PREFIX}-node{n.k}", "/kvd/stats")["total"]["ops"]
                except (OSError, ValueError, KeyError):
                    return None
            o0 = ops(m)
            wait_for(lambda: (ops(m) or 0) > (o0 or 0), 20, "the client's requests on the new master")
            resumed_ms = (time.monotonic() - t_kill) * 1000
        other = nodes[2] if m is nodes[1] else nodes[1]
        epoch = m.status().get("epoch")
        p.wait(60)
        if not os.path.exists(load_json):
            raise RuntimeError("the load wrote no report:\n" + open(os.path.join(d, "load.out")).read()[-2000:])
        r = json.load(open(load_json))
        # Following, every answer counts (the run goes on past the kill); otherwise the
        # measurement window's.
        acked = r["results_ok"] if a.follow else r["ops"] - r["errors"]
        unknown = r.get("outcome_unknown", 0)
        timed_out = r["timeouts"]
        x1 = counter(m, os.path.join(d, "after.kvd"))
        grew = (x1 - x0) % (1 << 64)
        wait_for(lambda: any(pp["state"] == "online" and pp["lag_bytes"] == 0
                             for pp in m.status().get("peers", {}).values()), 30, "survivor in sync")
        other.stop()
        m.stop()
        sm, so = json.load(open(m.stats)), json.load(open(other.stats))
        equal = sm["engine_digest"] == so["engine_digest"] and sm["engine_kvs"] == so["engine_kvs"]
        res = {
            "failover_ms": round(failover_ms, 1),
            "new_master": m.k,
            "epoch": epoch,
            "acked_fetch_adds": acked,
            "counter_growth": grew,
            "lost_acked_writes": max(0, acked - grew),
            "survivor_equals_new_master": equal,
        }
        if a.follow:
            # Exactly once: each acknowledged fetch-add counted once, and nothing more
            # than the ones whose outcome the client was told is unknown (answered
            # OUTCOME_UNKNOWN, or given up).
            res.update({
                "client_resumed_ms": round(resumed_ms, 1),
                "outcome_unknown_ops": unknown,
                "timed_out_ops": timed_out,
                "applied_twice_bound": max(0, grew - acked - unknown - timed_out),
                "follow_moves": r.get("follow", {}).get("moves"),
                "resumed_qps": r["transport"]["resumed"],
                # The new master's side: RESUMEs it continued, requests it answered
                # from the old master's completion records instead of running them.
                "new_master_resumes": sm.get("resumes"),
                "new_master_restored_replays": sm.get("restored_replays"),
            })
            log(f"  rep {rep} (following): requests executed on node{m.k} {res['client_resumed_ms']} ms after "
                f"the kill, {res['follow_moves']} moves, {res['resumed_qps']} QPs resumed, "
                f"{unknown} OUTCOME_UNKNOWN, {timed_out} given up, "
                f"{res['new_master_restored_replays']} answered from completion records; growth beyond "
                f"the acknowledged and unknown ones: {res['applied_twice_bound']}")
        log(f"  rep {rep}: node{m.k} master at epoch {epoch} after {res['failover_ms']} ms; "
            f"{acked} fetch-adds acknowledged, counter +{grew}: lost {res['lost_acked_writes']}; "
            f"survivor equal: {equal}")
        return res
    finally:
        for n in nodes:
            n.stop(signal.SIGKILL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--lease-ms", type=int, default=1000)
    ap.add_argument("--mode", default="sync", choices=["sync", "async"])
    ap.add_argument("--kill-at", type=float, default=1.5)
    ap.add_argument("--no-huge", dest="huge", action="store_false")
    ap.add_argument("--quick", action="store_true", help="1 rep")
    ap.add_argument("--follow", action="store_true",
                    help="pktgen follows the master across the kill (--follow-ports, RESUME): "
                         "also checks that no fetch-add ran twice (results/failover_follow.json)")
    ap.add_argument("--out", default=os.path.join(ROOT, "results/failover.json"))
    ap.add_argument("--merge-into", default=os.path.join(ROOT, "results/replication.json"))
    a = ap.parse_args()
    if a.quick:
        a.reps = 1
    if a.follow and a.out == os.path.join(ROOT, "results/failover.json"):
        a.out = os.path.join(ROOT, "results/failover_follow.json")
    tmp = tempfile.mkdtemp(prefix="kvd-bench-failover-")
    runs = []
    t0 = time.monotonic()
    with etcd(tmp) as url, benchlib.dpdk_lock():
        for rep in range(a.reps):
            runs.append(one_rep(tmp, a, url, rep))
    lost = [r["lost_acked_writes"] for r in runs]
    res = {
        "what": f"kill -9 of the master of 3 etcd-managed nodes under a verifying PUT load, mode {a.mode}, "
                f"min_replicas 1, lease {a.lease_ms} ms",
        "command": "scripts/bench_failover.py" + (" --follow" if a.follow else "") + (" --quick" if a.quick else ""),
        "reps": a.reps,
        "failover_ms": round(statistics.median(r["failover_ms"] for r in runs), 1),
        "failover_ms_runs": [r["failover_ms"] for r in runs],
        "lost_acked_writes": sum(x for x in lost if x is not None) if all(x is not None for x in lost) else None,
        "goals": {"failover_ms": "<= 3000", "lost_acked_writes": "0"},
        "wall_s": round(time.monotonic() - t0, 1),
        "runs": runs,
    }
    if a.follow:
        res["what"] += "; pktgen follows the master (--follow-ports: RESUME on the next node)"
        res["client_resumed_ms"] = round(statistics.median(r["client_resumed_ms"] for r in runs), 1)
        res["client_resumed_ms_runs"] = [r["client_resumed_ms"] for r in runs]
        res["outcome_unknown_ops"] = sum(r["outcome_unknown_ops"] for r in runs)
        res["timed_out_ops"] = sum(r["timed_out_ops"] for r in runs)
        res["applied_twice_bound"] = sum(r["applied_twice_bound"] for r in runs)
        res["goals"]["applied_twice_bound"] = "0"
        a.merge_into = ""
    os.makedirs(os.path.dirname(a.out), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(res, f, indent=2)
    log(f"failover: {res['failover_ms']} ms (median of {a.reps}), lost acked writes {res['lost_acked_writes']} -> {a.out}")
    if a.merge_into and os.path.exists(a.merge_into):
        j = json.load(open(a.merge_into))
        for f in ("failover_ms", "lost_acked_writes"):
            j[f] = res[f]
            if isinstance(j.get("not_measured"), dict):
                j["not_measured"].pop(f, None)
        j["failover_source"] = os.path.relpath(a.out, ROOT)
        with open(a.merge_into, "w") as f:
            json.dump(j, f, indent=2)
    bad = [r for r in runs if r["lost_acked_writes"] or not r["survivor_equals_new_master"]
           or r.get("applied_twice_bound")]
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
