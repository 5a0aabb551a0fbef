"""The nemesis's cluster on this host (scripts/nemesis.py): a private etcd that can be
paused, killed and wiped; dataplane nodes that can be killed, frozen and restarted;
and a sampler of which node is master."""
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import bench_failover as bf
import benchlib  # noqa: E402
from benchlib import Signalled

PREFIX = "kvd-nem"


class Etcd:
    """A private single-node etcd (the flags of scripts/etcd.sh) that can be paused,
    killed and wiped."""

    def __init__(self, d):
        self.d = d
        self.port = benchlib.free_port()
        self.peer = benchlib.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        os.makedirs(self.d, exist_ok=True)
        peer = f"http://127.0.0.1:{self.peer}"
        self.proc = subprocess.Popen(
            ["etcd", "--name", "nem", "--data-dir", os.path.join(self.d, "data"),
             "--listen-client-urls", self.url, "--advertise-client-urls", self.url,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"nem={peer}", "--initial-cluster-state", "new",
             "--heartbeat-interval", "25", "--election-timeout", "250",
             "--logger", "zap", "--log-level", "error"],
            stdout=open(os.path.join(self.d, "etcd.log"), "a"), stderr=subprocess.STDOUT)
        bf.wait_for(self.healthy, 10, "etcd healthy")

    def healthy(self):
        r = subprocess.run(["etcdctl", "--endpoints", self.url, "--dial-timeout", "1s",
                            "--command-timeout", "1s", "endpoint", "health"],
                           env=dict(os.environ, ETCDCTL_API="3"),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return r.returncode == 0

    def signal(self, sig):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)

    def kill(self):
        if self.proc:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def wipe_and_restart(self):
        self.kill()
        shutil.rmtree(os.path.join(self.d, "data"), ignore_errors=True)
        self.start()


class Node(Signalled, bf.Node):
    """A dataplane whose log is appended across restarts and whose unasked exits count."""

    def __init__(self, d, k, huge, after_start=None):
        super().__init__(d, k, huge)
        self.frozen = False
        # Called with k once the node is ready (the history workload bridges its tap).
        self.after_start = after_start

    def start(self, fresh=False):
        if fresh:
            # A crash leaves the memif server sockets: the restarted node binds anew
            # (its peers' clients redial a newer socket file).
            for f in [f"client{self.k}.sock"] + [f"link{self.k}-{j}.sock" for j in range(3)]:
                try:
                    os.remove(os.path.join(self.d, f))
                except FileNotFoundError:
                    pass
        # Its own session (nemesis seed 100 lost two frozen nodes to the kernel's
        # SIGHUP under nohup); the log appended to across restarts.
        self.proc, offset = benchlib.launch(self.cfg, self.log, huge=self.huge, stats=self.stats,
                                            new_session=True, append=True)
        self.frozen = False
        benchlib.wait_ready(self.proc, self.log, offset, what=f"node{self.k}")
        if self.after_start:
            self.after_start(self.k)

    def status(self):
        """The node's /kvd/replication, or {} when it does not answer (starting,
        stopped, frozen)."""
        try:
            v = benchlib.telemetry(f"{PREFIX}-node{self.k}", "/kvd/replication")
        except (OSError, ValueError, KeyError):
            return {}
        return v if isinstance(v, dict) else {}

    def died_unasked(self):
        return self.proc is not None and self.proc.poll() is not None


class Sampler(threading.Thread):
    """Every 100 ms: which node is master with its gate open (None: unavailable)."""

    def __init__(self, nodes):
        super().__init__(daemon=True)
        self.nodes, self.samples, self.stop = nodes, [], threading.Event()

    def master(self):
        for n in self.nodes:
            if n.proc is None or getattr(n, "frozen", False):
                continue
            st = n.status()
            if st.get("role") == "master" and not int(st.get("short_of_replicas", 0) or 0):
                return n.k
        return None

    def run(self):
        while not self.stop.is_set():
            self.samples.append((time.monotonic(), self.master()))
            time.sleep(0.1)

    def first_master_after(self, t, other_than):
        for ts, m in self.samples:
            if ts >= t and m is not None and m != other_than:
                return ts
        return None


class EtcdProxy:
    """A node's way to etcd through scripts/tcp_proxy.py: `cut(True)` (SIGSTOP of the
    proxy) blackholes that node's etcd traffic — a partition between it and etcd —
    while its clients and replication links go on."""

    def __init__(self, d, k, etcd_port):
        self.port = benchlib.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        here = os.path.dirname(os.path.abspath(__file__))
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(here, "tcp_proxy.py"), str(self.port), str(etcd_port)],
            stdout=open(os.path.join(d, f"proxy{k}.log"), "w"), stderr=subprocess.STDOUT,
            start_new_session=True)
        self.cut_now = False

    def cut(self, on):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP if on else signal.SIGCONT)
            self.cut_now = on

    def kill(self):
        if self.proc:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.kill()
            self.proc.wait()
            self.proc = None
