"""A replicated cluster for the benchmarks (scripts/bench_replication.py and the
scripts built on it: offload, replica log, failover, completions, chain, tx, idle,
nemesis): a master with replicas on this host's memif links (scripts/cluster_config.py),
the placement of bench_replication.py's docs, pktgen against it, a run's summary
with the replicas checked equal to the master, and the host-quietness helpers.
"""
import contextlib
import glob
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from benchlib import PG, ROOT, launch, log, telemetry, wait_ready  # noqa: E402

PREFIX = "kvd-hbench"


class Cluster:
    """A master with `replicas` replicas (0 and standalone=True: one standalone node),
    fresh configs in their own directory, placement as in the module doc."""

    # Every node's idle policy (scripts/bench_replication.py --idle).
    IDLE = "yield"
    # The master's EAL lcore map (scripts/bench_replication.py --master-lcores; None:
    # the documented placement, its replication lcore on pktgen's CPU 0).
    MASTER_LCORES = None

    def __init__(self, tmp, tag, replicas, huge, standalone=False, probe_ms=100, waiting_ms=500,
                 topology="star", mtu=1500):
        self.dir = os.path.join(tmp, tag)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.huge = huge
        # Extra dataplane flags of every node: the placement's documented idle policy
        # (`yield`, or `--idle`; the dataplane's default is `adaptive`) unless a caller
        # sets others.
        self.flags = ["--idle", Cluster.IDLE]
        self.n = 1 + replicas
        subprocess.run([sys.executable, os.path.join(ROOT, "scripts/cluster_config.py"), self.dir,
                        str(replicas), "--prefix", PREFIX, "--probe-ms", str(probe_ms),
                        "--waiting-ms", str(waiting_ms), "--topology", topology,
                        "--mtu", str(mtu),
                        "--base", os.path.join(ROOT, "configs/memif.json")],
                       check=True, stdout=subprocess.DEVNULL)
        for k in range(self.n):
            c = json.load(open(self.cfg(k)))
            # "on": a node that cannot get its hugepages fails instead of silently
            # running on the heap.
            c["dataplane"]["hugepages"] = c["pktgen"]["hugepages"] = "on" if huge else "off"
            if k == 0:
                c["pktgen"]["lcores"] = "0"
                if standalone:
                    del c["replication"]
                    c["dataplane"]["lcores"] = "1"
                else:
                    c["dataplane"]["extra_eal"] = c["dataplane"].get("extra_eal", []) + ["--main-lcore", "1"]
                    if Cluster.MASTER_LCORES:
                        c["dataplane"]["lcores"] = Cluster.MASTER_LCORES
            json.dump(c, open(self.cfg(k), "w"), indent=2)
        self.procs = {}

    def cfg(self, k):
        return os.path.join(self.dir, f"node{k}.json")

    def prefix(self, k):
        return f"{PREFIX}-node{k}"

    def stats_path(self, k):
        return os.path.join(self.dir, f"node{k}.stats.json")

    def log_path(self, k):
        return os.path.join(self.dir, f"node{k}.log")

    def start(self, k, flags=()):
        """Starts node `k` with the cluster's flags and `flags`."""
        self.procs[k], _ = launch(self.cfg(k), self.log_path(k), self.flags + list(flags),
                                  self.huge, self.stats_path(k))

    def wait_ready(self, k, timeout=40):
        wait_ready(self.procs[k], self.log_path(k), timeout=timeout, what=f"node{k}")

    def up(self, count=None):
        """Starts nodes 0..count-1 (all by default)."""
        self.started = self.n if count is None else count
        # In order: the lower-numbered node of a link is its memif server, and a
        # memif client whose server socket is not there yet fails to start.
        for k in range(self.started):
            self.start(k)
            self.wait_ready(k)

    def status(self):
        return telemetry(self.prefix(0), "/kvd/replication")

    def wait_online(self, timeout=60):
        """Every replica Online on the master; returns the seconds it took."""
        t0 = time.monotonic()
        st = {}
        while time.monotonic() - t0 < timeout:
            st = self.status()
            peers = st.get("peers", {})
            if len(peers) == self.n - 1 and all(p["state"] == "online" for p in peers.values()):
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"replicas not online within {timeout} s: {json.dumps(st)}")

    def wait_chain_online(self, timeout=60):
        """A chain: each node's successor Online on it (the head's peer on link 0, a
        middle node's relay peer on its link to the next node); returns the seconds."""
        t0 = time.monotonic()
        st = {}
        while time.monotonic() - t0 < timeout:
            ok = True
            for k in range(self.n - 1):
                st = telemetry(self.prefix(k), "/kvd/replication")
                view = st if k == 0 else (st.get("relay") or {})
                # Node k's links go to the other nodes in order, skipping itself:
                # its successor k+1 is on link k.
                if view.get("peers", {}).get(str(k), {}).get("state") != "online":
                    ok = False
                    break
            if ok:
                return time.monotonic() - t0
            time.sleep(0.05)
        raise RuntimeError(f"chain not online within {timeout} s: {json.dumps(st)}")

    def wait_drained(self, timeout=30):
        """Every replica acknowledged the whole stream; returns (seconds, status)."""
        t0 = time.monotonic()
        st = {}
        while time.monotonic() - t0 < timeout:
            st = self.status()
            peers = st.get("peers", {}).values()
            if all(p["state"] == "online" and p["lag_bytes"] == 0 for p in peers):
                return time.monotonic() - t0, st
            time.sleep(0.05)
        return None, st

    def stop(self, k, sig=signal.SIGINT):
        p = self.procs.pop(k, None)
        if p is None:
            return
        p.send_signal(sig)
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def down(self):
        for k in sorted(self.procs, reverse=True):
            self.stop(k)
        for k in range(self.n):
            for f in glob.glob(f"/dev/hugepages/{self.prefix(k)}*"):
                with contextlib.suppress(OSError):
                    os.remove(f)

    def pktgen(self, args, name, timeout=300, wait=True, node=0):
        """pktgen on node `node`'s client port (node 0: the master's)."""
        out = os.path.join(self.dir, f"{name}.json")
        cmd = [PG, "--config", self.cfg(node), "--json", out] + args
        if not self.huge:
            cmd.append("--no-huge")
        logf = open(os.path.join(self.dir, f"{name}.out"), "w")
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)
        if not wait:
            return p, out
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError(f"{name}: pktgen hung")
        if rc != 0:
            raise RuntimeError(f"{name}: pktgen failed:\n" + open(logf.name).read()[-3000:])
        return json.load(open(out))


def add_run_args(ap, duration=2.0):
    """The flags of a saturated pktgen run against a cluster (repetitions, times,
    keys, window, QPs, batching, hugepages), as every replication benchmark takes them."""
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--duration", type=float, default=duration)
    ap.add_argument("--warmup", type=float, default=0.5)
    ap.add_argument("--keys", type=int, default=20000)
    ap.add_argument("--window", type=int, default=32)
    ap.add_argument("--qps", type=int, default=4)
    ap.add_argument("--ops-per-packet", type=int, default=8)
    ap.add_argument("--no-huge", dest="huge", action="store_false",
                    help="run every node and pktgen with --no-huge")


def pg_args(a, value_size, get, rep):
    return a.pg_extra + ["--keys", str(a.keys), "--key-size", "8", "--value-size", str(value_size),
            "--load", "--warmup", str(a.warmup), "--duration", str(a.duration),
            "--calibrate", "200", "--window", str(a.window), "--qps", str(a.qps),
            "--ops-per-packet", str(ops_per_packet(a, value_size)),
            "--get", "1" if get else "0", "--put", "0" if get else "1", "--seed", str(rep + 1)]


def ops_per_packet(a, value_size):
    """Ops per request packet: --ops-per-packet, fewer for large values so that a
    request (and its response) fits one 1500 B frame."""
    return max(1, min(a.ops_per_packet, 1400 // (value_size + 8 + 8)))


def fresh_run(make, a, tag, rep, replicas, value_size=8, get=False, up=None, after=None):
    """One fresh cluster (`make()`), one saturated pktgen run against it (`pg_args`),
    stopped and summarized (`summarize`, which counts `replicas` replicas). `up`: start
    only that many nodes; `after(c)` reads more from the running cluster before it
    stops. A failed run is retried once with a fresh cluster (memif PMD of DPDK 22.11:
    see benchlib). Returns (cluster, summary, what `after` returned)."""
    for attempt in range(2):
        c = make()
        try:
            t = time.monotonic()
            background = cpu_busy()
            c.up(up)
            sync_s = c.wait_online() if replicas else 0.0
            r = c.pktgen(pg_args(a, value_size, get, rep), "pg")
            drain_s, st = c.wait_drained() if replicas else (0.0, None)
            extra = after(c) if after else None
        except RuntimeError as e:
            if attempt == 1:
                raise
            log(f"  {tag} rep {rep}: failed, retrying: {str(e).splitlines()[0]}")
            continue
        finally:
            c.down()
        summary = summarize(c, r, replicas, sync_s, drain_s, st, time.monotonic() - t, background)
        return c, summary, extra


def one_run(tmp, a, tag, replicas, value_size, get, rep, alone=False):
    """One fresh cluster (standalone for replicas 0), one pktgen run. `alone`: a
    master configured with one replica whose process is not started (its replication
    lcore runs: idle for GETs, draining the log into the backlog for PUTs)."""
    def make():
        return Cluster(tmp, f"{tag}-r{rep}", 1 if alone else replicas, a.huge,
                       standalone=(replicas == 0 and not alone))
    return fresh_run(make, a, tag, rep, replicas, value_size, get, up=1 if alone else None)[1]


def cpu_busy(seconds=0.5):
    """Share of the host's CPU time busy over `seconds` (/proc/stat), measured before
    a run while none of this benchmark's processes run: the background load."""
    def snap():
        v = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(seconds)
    t1, i1 = snap()
    return round(1 - (i1 - i0) / max(1, t1 - t0), 3)


def wait_quiet(a):
    """Waits (up to --quiet-wait s) until the host's background CPU load is below
    --quiet-below: other sessions' compilers share the 2 cores and are not covered by
    the DPDK lock. Returns the seconds waited."""
    t0 = time.monotonic()
    logged = False
    while time.monotonic() - t0 < a.quiet_wait:
        b = cpu_busy(1.0)
        if b < a.quiet_below:
            break
        if not logged:
            log(f"  (background CPU busy {b:.0%}: waiting up to {a.quiet_wait:.0f} s for < {a.quiet_below:.0%})")
            logged = True
    return round(time.monotonic() - t0, 1)


def summarize(c, r, replicas, sync_s, drain_s, st, wall_s, background):
    stats = [json.load(open(c.stats_path(k))) for k in range(c.started)]
    dur = r["workload"]["duration_s"]
    good = r["ops"] - r["errors"]
    out = {
        "mops": good / dur / 1e6,
        "mops_incl_refused": r["throughput_mops"],
        "errors": r["errors"],
        "timeouts": r["timeouts"],
        "mismatches": r["mismatches"],
        "not_enough_replicas": r["not_enough_replicas"],
        "p50_us": r["latency_us"]["p50"],
        "p99_us": r["latency_us"]["p99"],
        "p99_raw_us": r["latency_raw_us"]["p99"],
        "calibration_us": r["calibration_us"],
        "retransmitted": (r.get("transport") or {}).get("retransmitted"),
        "requests_sent": (r.get("transport") or {}).get("sent"),
        "background_cpu_busy": background,
        "pktgen_hugepages": r["hugepages"],
        "master_kvs": stats[0].get("engine_kvs"),
        "wall_s": round(wall_s, 2),
    }
    if replicas:
        m = stats[0]
        # The master's PUTs (one post-image record each) and the records each replica
        # applied: equal when the whole stream arrived.
        out["master_puts"] = m.get("puts")
        out["replica_records_applied"] = [s.get("repl_applied") for s in stats[1:]]
        out["initial_sync_s"] = round(sync_s, 3)
        out["drain_s"] = None if drain_s is None else round(drain_s, 3)
        out["repl_log_lost"] = m.get("repl_log_lost")
        out["repl_link_frames_lost"] = m.get("repl_link_frames_lost")
        out["status_end"] = {
            "offset": st.get("offset"), "records": st.get("records"),
            "good_replicas": st.get("good_replicas"),
            "peers": {k: {f: p[f] for f in ("state", "lag_bytes", "acked_offset", "full_syncs",
                                            "partial_syncs", "invalidations", "resent")}
                      for k, p in st.get("peers", {}).items()},
        }
        out["replicas_equal_master"] = all(
            s.get("engine_digest") == m.get("engine_digest") and s.get("engine_kvs") == m.get("engine_kvs")
            for s in stats[1:])
        out["replica_kvs"] = [s.get("engine_kvs") for s in stats[1:]]
    return out


def ratio_med(num, den, f="mops"):
    v = [n[f] / d[f] for n, d in zip(num, den) if d[f]]
    return statistics.median(v) if v else None
