"""The nemesis's history workload (scripts/nemesis.py --workload history): kernel
clients that record every operation, on a cluster whose nodes serve net_tap
interfaces bridged on this host (scripts/cluster_config.py --clients tap), and the
check of what they saw (scripts/history_check.py).

Per schedule: the bank accounts and the counter are created; CLIENTS processes of
scripts/history_client.py (client i starts on node i's config, so two of them begin at
a replica and follow the master) run through the faults and the healing; then they are
stopped, the final state is read once every node has applied everything, and the
histories are checked.
"""
import json
import os
import subprocess
import sys
import time

import history_check

CLIENTS = 3
ACCOUNTS = 8
REGISTERS = 8
START = 100


def ip(*args):
    subprocess.run(["ip", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def disable_ipv6(iface):
    subprocess.run(["sysctl", "-qw", f"net.ipv6.conf.{iface}.disable_ipv6=1"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


class History:
    def __init__(self, d, prefix, seed):
        self.d, self.seed = d, seed
        self.bridge = f"{prefix}br"
        self.prefix = prefix
        self.procs = []
        self.stop_file = os.path.join(d, "stop")

    # ---- the network: node taps on one bridge whose MAC is the clients' ----

    def bridge_up(self):
        mac = json.load(open(os.path.join(self.d, "node0.json")))["pktgen"]["mac"]
        subprocess.run(["ip", "link", "del", self.bridge], stderr=subprocess.DEVNULL)
        ip("link", "add", self.bridge, "type", "bridge")
        disable_ipv6(self.bridge)
        ip("link", "set", self.bridge, "address", mac)
        ip("link", "set", self.bridge, "up")

    def bridge_down(self):
        subprocess.run(["ip", "link", "del", self.bridge], stderr=subprocess.DEVNULL)

    def attach(self, k):
        """Node k's tap (made anew by each start of its dataplane) into the bridge."""
        tap = f"{self.prefix}t{k}"
        end = time.monotonic() + 5
        while subprocess.run(["ip", "link", "show", tap], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL).returncode != 0:
            if time.monotonic() > end:
                raise RuntimeError(f"{tap} did not appear")
            time.sleep(0.05)
        disable_ipv6(tap)
        ip("link", "set", tap, "master", self.bridge)
        ip("link", "set", tap, "up")

    # ---- the workload ----

    def client(self):
        import kvdirect
        return kvdirect.Client(self.bridge, config=os.path.join(self.d, "node0.json"), timeout=5.0)

    def seed_state(self):
        c = self.client()
        for i in range(ACCOUNTS):
            c.put(f"a{i}", START)
        c.put("ctr", 0)
        c.close()

    def start(self):
        here = os.path.dirname(os.path.abspath(__file__))
        for i in range(CLIENTS):
            out = os.path.join(self.d, f"hist{i}.jsonl")
            cmd = [sys.executable, os.path.join(here, "history_client.py"), "--config",
                   os.path.join(self.d, f"node{i % 3}.json"), "--iface", self.bridge,
                   "--client", str(i), "--seed", str(self.seed * 100 + i), "--out", out,
                   "--stop-file", self.stop_file, "--registers", str(REGISTERS),
                   "--accounts", str(ACCOUNTS)]
            log = open(os.path.join(self.d, f"client{i}.log"), "w")
            self.procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                               start_new_session=True))

    def stop(self):
        """Stops the clients after their operation in flight (each ends within its
        operation timeout); returns how many had died on their own."""
        died = sum(1 for p in self.procs if p.poll() is not None)
        open(self.stop_file, "w").close()
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        return died

    def final(self):
        """The final state, read through the master once every node applied it."""
        c = self.client()

        def num(v):
            return None if v is None else int.from_bytes(v, "little", signed=True)

        regs = {}
        for i in range(REGISTERS):
            v = c.get(f"r{i}")
            if v is not None:
                regs[f"r{i}"] = v.decode()
        tx = c.pipeline(transaction=True)
        for i in range(ACCOUNTS):
            tx.get(f"a{i}")
        f = {"registers": regs, "counter": num(c.get("ctr")), "accounts": [num(v) for v in tx.execute()]}
        c.close()
        with open(os.path.join(self.d, "final.json"), "w") as out:
            json.dump(f, out)
        return f

    def check(self, final):
        ops = history_check.load([os.path.join(self.d, f"hist{i}.jsonl") for i in range(CLIENTS)
                                  if os.path.exists(os.path.join(self.d, f"hist{i}.jsonl"))])
        return history_check.check(ops, final, ACCOUNTS, START)
