"""Shared pieces of the benchmark scripts (bench_e2e.py, bench_ooo.py, bench_scale.py):
paths, a dataplane started on its own memif socket, a pktgen run, and repeated runs
against fresh dataplanes with a retry of a failed run; Redis 7 servers as peers.
"""
import contextlib
import fcntl
import glob
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# KVD_BIN_DIR: run binaries copied elsewhere (so a rebuild cannot swap them mid-run).
BIN = os.environ.get("KVD_BIN_DIR", os.path.join(ROOT, "target/release"))
DP = os.path.join(BIN, "dataplane")
PG = os.path.join(BIN, "pktgen")
CFG = os.path.join(ROOT, "configs/memif.json")
# KVD_PKTGEN_TIMEOUT: seconds before a pktgen run counts as hung (default 600).
PKTGEN_TIMEOUT = float(os.environ.get("KVD_PKTGEN_TIMEOUT", "600"))
# Held by every DPDK run and benchmark of this host (`flock`): they never overlap.
LOCK = "/tmp/kvd-dpdk.lock"


class Signalled:
    """A child process (`proc`, a Popen or None) that a fault kills (kill -9) or
    freezes (SIGSTOP, then SIGCONT): the nemesis's nodes, ours and Redis's."""

    proc = None
    frozen = False

    def kill(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def freeze(self, on):
        if self.proc:
            self.proc.send_signal(signal.SIGSTOP if on else signal.SIGCONT)
            self.frozen = on


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def launch(cfg, log_path, flags=(), huge=True, stats=None, new_session=False, append=False):
    """Starts a dataplane on config file `cfg` with `flags`, `--stats-json stats` if
    given and `--no-huge` unless `huge`, its output into `log_path` (appended to with
    `append`); in its own session with `new_session` (a node frozen with SIGSTOP in an
    orphaned process group gets the kernel's SIGHUP when another member exits, and
    the dataplane stops on SIGHUP). Returns (process, where in the log its output
    starts); `wait_ready` waits for it. The one way every benchmark starts a node."""
    offset = os.path.getsize(log_path) if append and os.path.exists(log_path) else 0
    cmd = [DP, "--config", cfg] + (["--stats-json", stats] if stats else []) + list(flags)
    if not huge:
        cmd.append("--no-huge")
    proc = subprocess.Popen(cmd, stdout=open(log_path, "a" if append else "w"),
                            stderr=subprocess.STDOUT, start_new_session=new_session)
    return proc, offset


def wait_ready(proc, log_path, offset=0, timeout=40, what="dataplane"):
    """Waits until the dataplane `proc` said "dataplane ready" in `log_path` (after
    `offset`); RuntimeError with the log's tail if it exits or `timeout` s pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        with open(log_path) as f:
            f.seek(offset)
            if "dataplane ready" in f.read():
                return
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    with open(log_path) as f:
        f.seek(offset)
        raise RuntimeError(f"{what} did not start:\n" + f.read()[-3000:])


class Dataplane:
    """A dataplane on its own memif socket (the server of the pair `pktgen` joins)."""

    def __init__(self, tmp, name, extra, cfg=CFG):
        self.prefix = f"kvd-bench-{name}"
        self.sock = os.path.join(tmp, f"{name}.sock")
        self.log = os.path.join(tmp, f"{name}.log")
        vdev = f"net_memif0,role=server,id=0,socket={self.sock},socket-abstract=no,rsize=11"
        self.cfg = cfg
        # The benchmarks' documented setting is `yield` (the default is `adaptive`):
        # kept unless the caller names a policy.
        idle = [] if "--idle" in extra else ["--idle", "yield"]
        flags = ["--vdev", vdev, "--file-prefix", self.prefix] + idle + extra
        self.proc, _ = launch(cfg, self.log, flags)
        wait_ready(self.proc, self.log, timeout=30)

    def stop(self):
        self.proc.send_signal(2)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        # EAL leaves hugepage files behind for secondary processes; free them.
        for f in glob.glob("/dev/hugepages/kvd-bench-*"):
            try:
                os.remove(f)
            except OSError:
                pass


def pktgen(dp, tmp, args, timeout=None):
    """Runs pktgen against `dp` (same config file); returns its JSON. Raises
    RuntimeError if it fails and subprocess.TimeoutExpired if it hangs (runs longer
    than `timeout`, default KVD_PKTGEN_TIMEOUT)."""
    timeout = timeout or PKTGEN_TIMEOUT
    out = os.path.join(tmp, "pg.json")
    vdev = f"net_memif0,role=client,id=0,socket={dp.sock},socket-abstract=no,rsize=11"
    cmd = [PG, "--config", dp.cfg, "--vdev", vdev, "--file-prefix", "kvd-bench-pg", "--json", out] + args
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"pktgen failed: {' '.join(cmd)}\n{r.stdout}")
    return json.load(open(out))


def run_fresh(tmp, name, dp_args, pg_args, attempts=2):
    """One pktgen run of `pg_args` against a dataplane started for it with `dp_args`
    (stopped afterwards); returns pktgen's JSON.

    A memif peer that disconnects while the server is inside rx_burst could crash the
    DPDK 22.11 memif PMD (it unmaps the shared region without synchronising with the
    data path; worked around since, crates/dpdk/src/memif_unmap.rs): a failed run is
    still retried with a fresh dataplane, up to `attempts` runs in all; the last
    failure is raised."""
    for attempt in range(attempts):
        dp = Dataplane(tmp, name, dp_args)
        try:
            return pktgen(dp, tmp, pg_args)
        except RuntimeError as e:
            if attempt == attempts - 1:
                raise
            log(f"  {name}: run failed, retrying: {str(e).splitlines()[0]}")
        finally:
            dp.stop()


def run_reps(tmp, tag, dp_args, pg_args, reps):
    """`reps` runs of pktgen `pg_args` (seeds 1..reps), each against a fresh dataplane
    started with `dp_args(stats_json_path)` (run_fresh: a failed run is retried once).
    A run with mismatches or errors is an error. Returns (median Mops, pktgen JSON of
    each run, dataplane stats JSON of each run)."""
    runs, stats = [], []
    for rep in range(reps):
        name = f"{tag}-{rep}"
        sj = os.path.join(tmp, f"{name}.stats.json")
        r = run_fresh(tmp, name, dp_args(sj), pg_args + ["--seed", str(rep + 1)])
        if r["mismatches"] or r["errors"]:
            raise RuntimeError(f"{name}: {r['mismatches']} mismatches, {r['errors']} errors")
        runs.append(r)
        stats.append(json.load(open(sj)))
    return statistics.median(r["throughput_mops"] for r in runs), runs, stats


@contextlib.contextmanager
def dpdk_lock():
    """Holds the host's DPDK lock (as `flock /tmp/kvd-dpdk.lock`): no other DPDK run
    or benchmark overlaps ours."""
    with open(LOCK, "a") as f:
        t = time.monotonic()
        fcntl.flock(f, fcntl.LOCK_EX)
        waited = time.monotonic() - t
        if waited > 1:
            log(f"  (waited {waited:.0f} s for {LOCK})")
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class Telemetry:
    """A persistent connection to a DPDK process's telemetry socket."""

    def __init__(self, prefix):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.settimeout(10)
        self.s.connect(f"/var/run/dpdk/{prefix}/dpdk_telemetry.v2")
        json.loads(self.s.recv(16384))  # greeting

    def __call__(self, cmd):
        self.s.send(cmd.encode())
        return json.loads(self.s.recv(1 << 20))[cmd.split(",")[0]]

    def close(self):
        self.s.close()


def telemetry(prefix, cmd):
    """One command to a DPDK process's telemetry socket (file prefix `prefix`);
    returns the value of its JSON reply."""
    t = Telemetry(prefix)
    try:
        return t(cmd)
    finally:
        t.close()


def med(runs, *path, digits=None):
    """The median of the values at `path` (keys) in each of `runs` — of `runs`
    themselves without a path — leaving out missing and None values; None when none
    is left; rounded to `digits` when given."""
    vals = []
    for v in runs:
        for k in path:
            v = v.get(k) if isinstance(v, dict) else None
        if v is not None:
            vals.append(v)
    if not vals:
        return None
    m = statistics.median(vals)
    return m if digits is None else round(m, digits)


class BusySampler:
    """The dataplane's worker busy share while something runs against it: a thread
    reads `/kvd/stats` every `period` s (TSC, busy cycles and received packets summed
    over the workers). `share()` is Δbusy_cycles / (Δtsc × workers) over the plateau:
    the sample intervals whose packet rate is at least 90 % of the highest, so start-up,
    load, calibration and drain do not dilute the figure. Use as a context manager."""

    def __init__(self, prefix, period=0.1):
        import threading
        self.prefix, self.period = prefix, period
        self.samples = []
        self.stop_ev = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop_ev.is_set():
            try:
                v = telemetry(self.prefix, "/kvd/stats")
                t = v["total"]
                self.samples.append((v["tsc"], t["busy_cycles"], t["rx_packets"], v["workers"]))
            except (OSError, KeyError, ValueError):
                pass
            self.stop_ev.wait(self.period)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_ev.set()
        self.thread.join()

    def share(self):
        """The busy share over the plateau, or None with fewer than two samples."""
        iv = [(b[0] - a[0], b[1] - a[1], b[2] - a[2], b[3])
              for a, b in zip(self.samples, self.samples[1:]) if b[0] > a[0]]
        if not iv:
            return None
        top = max(d_rx / d_tsc for d_tsc, _, d_rx, _ in iv)
        plateau = [x for x in iv if top > 0 and x[2] / x[0] >= 0.9 * top]
        d_tsc = sum(x[0] * x[3] for x in plateau)
        return sum(x[1] for x in plateau) / d_tsc if d_tsc else None


# Redis 7 as a peer (bench_replication, bench_repl_cost, bench_tenants).

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def redis_info(port, section):
    r = subprocess.run(["redis-cli", "-p", str(port), "info", section], stdout=subprocess.PIPE,
                       text=True, timeout=10)
    return dict(l.strip().split(":", 1) for l in r.stdout.splitlines() if ":" in l)


def start_redis(d, name, cpu, port, extra):
    """redis-server `name` on CPU `cpu` and `port` (no persistence, files in `d`, plus
    `extra` flags), once it answers PING."""
    cmd = ["taskset", "-c", str(cpu), "redis-server", "--port", str(port), "--bind", "127.0.0.1",
           "--save", "", "--appendonly", "no", "--dir", d, "--dbfilename", f"{name}.rdb",
           "--protected-mode", "no", "--logfile", os.path.join(d, f"{name}.log")] + extra
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(100):
        r = subprocess.run(["redis-cli", "-p", str(port), "ping"], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True)
        if r.stdout.strip() == "PONG":
            return p
        time.sleep(0.05)
    p.kill()
    raise RuntimeError(f"redis {name} did not start")


def stop_all(procs):
    """Terminates `procs` (Popen), killing any that has not exited after 10 s."""
    for p in procs:
        p.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)
        if p.poll() is None:
            p.kill()


def start_redis_replica(d, cpu, port, master_port):
    """A redis-server replica of the master on `master_port`, once its link is up."""
    p = start_redis(d, "replica", cpu, port, ["--replicaof", "127.0.0.1", str(master_port)])
    for _ in range(200):
        if redis_info(port, "replication").get("master_link_status") == "up":
            return p
        time.sleep(0.05)
    stop_all([p])
    raise RuntimeError("redis replica did not connect")


def redis_lag(master_port, replica_port):
    """Replication bytes the replica has not taken yet."""
    mo = int(redis_info(master_port, "replication").get("master_repl_offset", -1))
    so = int(redis_info(replica_port, "replication").get("slave_repl_offset", -2))
    return mo - so
