"""Peers on the same machine in the same run (OUT/peers.json + peers.png): Redis 7
(redis-benchmark, with and without pipelining), memcached 1.6 (memcslap, get and
multi-get), dpdk-testpmd in io-forward mode over the same memif pair (the I/O
ceiling), and this system, each server on core 1 and its client on core 0.

The servers listen on loopback at fixed ports and are always stopped at the end of the
step (and at exit). redis-benchmark and memcslap run one command type at a time, so
their 95 % GET / 5 % SET figure is the rate of that mix from the two measured rates:
1 / (0.95 / GET rate + 0.05 / SET rate).
"""
import atexit
import os
import re
import signal
import socket
import statistics
import subprocess
import time

import benchlib  # noqa: E402
from common import bars, log, stall_probe, stalls_summary
from paper import claim

REDIS_PORT = 26379
MEMCACHED_PORT = 21211
SERVER_CORE, CLIENT_CORE = "1", "0"
GET_SHARE = 0.95

_procs = []


def _stop(p):
    if p.poll() is None:
        p.send_signal(signal.SIGTERM)
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@atexit.register
def _stop_all():
    while _procs:
        _stop(_procs.pop())


def start(cmd, port, log_path):
    """Starts a peer server pinned to the server core; waits until `port` accepts."""
    if port is not None:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                raise RuntimeError(f"port {port} is already in use: stop what listens there first")
    p = subprocess.Popen(["taskset", "-c", SERVER_CORE] + cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    _procs.append(p)
    for _ in range(100):
        if p.poll() is not None:
            raise RuntimeError(f"{cmd[0]} exited: {open(log_path).read()[-2000:]}")
        if port is None:
            return p
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return p
        time.sleep(0.1)
    raise RuntimeError(f"{cmd[0]} did not listen on {port}")


def stop(p):
    _stop(p)
    if p in _procs:
        _procs.remove(p)


def client(cmd, timeout=600):
    r = subprocess.run(["taskset", "-c", CLIENT_CORE] + cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {r.stdout[-2000:]}")
    return r.stdout


def mix_rate(get, put):
    return 1.0 / (GET_SHARE / get + (1 - GET_SHARE) / put)


def redis(ctx, reps):
    n = ctx.pick(20_000, 200_000)
    keys = ctx.pick(100_000, 1_000_000)
    p = start(["redis-server", "--port", str(REDIS_PORT), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
               "--protected-mode", "yes", "--dir", ctx.tmp], REDIS_PORT, os.path.join(ctx.tmp, "redis.log"))
    res = {}
    try:
        version = subprocess.run(["redis-server", "--version"], stdout=subprocess.PIPE, text=True).stdout.split()[2]
        for pipe in (1, 32):
            runs = []
            for _ in range(reps):
                out = client(["redis-benchmark", "-p", str(REDIS_PORT), "-t", "set,get", "-n", str(n * 8 if pipe > 1 else n),
                              "-r", str(keys), "-d", "2", "-c", "50", "-P", str(pipe), "--csv"])
                rates = {m[0]: float(m[1]) for m in re.findall(r'^"(SET|GET)","([0-9.]+)"', out, re.M)}
                runs.append(rates)
            get = statistics.median(r["GET"] for r in runs) / 1e6
            put = statistics.median(r["SET"] for r in runs) / 1e6
            res[f"pipeline_{pipe}"] = {"get_mops": get, "set_mops": put, "mix_mops": mix_rate(get, put),
                                       "runs": runs, "requests_per_test": n * 8 if pipe > 1 else n}
            log(f"  redis -P {pipe}: GET {get:.3f} SET {put:.3f} -> mix {mix_rate(get, put):.3f} Mops")
    finally:
        stop(p)
    return {"version": version, "keyspace": keys, "value_bytes": 2, "clients": 50, **res}


def memcached_stats():
    with socket.create_connection(("127.0.0.1", MEMCACHED_PORT), timeout=5) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
    return {m[0]: m[1] for m in re.findall(r"STAT (\S+) (\S+)", buf.decode())}


def memcached(ctx, reps):
    n = ctx.pick(5_000, 50_000)
    conc = 4
    p = start(["memcached", "-p", str(MEMCACHED_PORT), "-U", "0", "-l", "127.0.0.1", "-t", "1", "-m", "1024", "-u", "root"],
              MEMCACHED_PORT, os.path.join(ctx.tmp, "memcached.log"))
    res = {}
    try:
        version = subprocess.run(["memcached", "-V"], stdout=subprocess.PIPE, text=True).stdout.split()[1]
        for test in ("set", "get", "mget"):
            rates = []
            for _ in range(reps):
                out = client(["memcslap", "-s", f"127.0.0.1:{MEMCACHED_PORT}", "--test", test,
                              "--concurrency", str(conc), "--execute-number", str(n)])
                m = re.search(rf"Time to {test}\s+(\d+) keys by\s+\d+ threads:\s+([0-9.]+) seconds", out)
                if not m:
                    raise RuntimeError(f"memcslap --test {test}: no timing line in {out!r}")
                rates.append(int(m.group(1)) / float(m.group(2)) / 1e6)
            res[test] = {"mops": statistics.median(rates), "runs": rates}
            log(f"  memcslap {test}: {res[test]['mops']:.3f} Mops")
        st = memcached_stats()
    finally:
        stop(p)
    items = int(st.get("curr_items", 0))
    return {"version": version, "threads": 1, "memcslap_concurrency": conc, "keys_per_thread": n,
            "item_bytes_mean": int(st.get("bytes", 0)) / items if items else None,
            "item_size_note": "memcslap has no value-size option: its own generator's items average this many bytes "
                              "in memcached (stats bytes / curr_items, item header included)",
            "mix_mops_get": mix_rate(res["get"]["mops"], res["set"]["mops"]),
            "mix_mops_mget": mix_rate(res["mget"]["mops"], res["set"]["mops"]), **res}


def testpmd(ctx, reps, opp):
    """dpdk-testpmd io-forward on the server side of the memif pair, pktgen --echo on
    the client side: the ops per second the bare link and a forwarding core carry."""
    sock = os.path.join(ctx.tmp, "testpmd.sock")
    huge = benchlib_hugepages_free() >= 512
    cmd = ["dpdk-testpmd", "-l", "0,1", "--main-lcore", "0", "--file-prefix", "kvd-bench-testpmd", "--no-pci",
           "--vdev", f"net_memif0,role=server,id=0,socket={sock},socket-abstract=no,rsize=11"] + \
          ([] if huge else ["--no-huge", "-m", "512"]) + \
          ["--", "--forward-mode=io", "--port-topology=loop", "--auto-start", "--stats-period", "1",
           "--total-num-mbufs=16384", "--nb-cores=1"]
    log_path = os.path.join(ctx.tmp, "testpmd.log")
    runs = []
    for rep in range(reps):
        p = subprocess.Popen(cmd, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
        _procs.append(p)
        try:
            for _ in range(100):
                if os.path.exists(sock) or p.poll() is not None:
                    break
                time.sleep(0.1)
            if p.poll() is not None:
                raise RuntimeError(f"dpdk-testpmd exited: {open(log_path).read()[-2000:]}")
            # The socket appears when its EAL starts, before its port is set up: a
            # client connecting in between may find the link never comes up.
            for _ in range(100):
                if "Start automatic packet forwarding" in open(log_path).read():
                    break
                time.sleep(0.1)
            dp = type("Peer", (), {"sock": sock, "cfg": benchlib.CFG})()
            r = benchlib.pktgen(dp, ctx.tmp, ["--echo", "--ops-per-packet", str(opp), "--window", "64",
                                              "--warmup", str(ctx.pick(0.2, 0.5)), "--duration", str(ctx.pick(0.5, 1.5)),
                                              "--calibrate", "50", "--seed", str(rep + 1)])
            runs.append(r["throughput_mops"])
        finally:
            # The 22.11 memif PMD may crash when its peer leaves (see benchlib): the
            # measurement is pktgen's, so testpmd's exit status is not checked.
            stop(p)
            for f in (sock,):
                if os.path.exists(f):
                    os.remove(f)
        log(f"  testpmd io-forward (pktgen --echo, {opp} ops/packet): {runs[-1]:.2f} Mops")
    return {"mops": statistics.median(runs), "runs": runs, "ops_per_packet": opp, "hugepages": huge,
            "command": " ".join(c if not c.startswith("net_memif0") else "net_memif0,role=server,...,socket=<scratch>"
                                for c in cmd)}


def benchlib_hugepages_free():
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("HugePages_Free:"):
                return int(line.split()[1]) * 2
    except OSError:
        pass
    return 0


def ours(ctx, reps, opp):
    keys = ctx.pick(100_000, 1_000_000)
    args = ["--keys", str(keys), "--key-size", "8", "--value-size", "2", "--load", "--get", "0.95", "--put", "0.05",
            "--ops-per-packet", str(opp), "--window", "64", "--warmup", str(ctx.pick(0.2, 0.5)),
            "--duration", str(ctx.pick(0.5, 1.5)), "--calibrate", "50"]
    m, runs, _ = benchlib.run_reps(ctx.tmp, f"peers-kv{opp}", lambda sj: ["--stats-json", sj], args, reps)
    log(f"  this system, {opp} ops/packet: {m:.2f} Mops")
    return {"mops": m, "runs": [r["throughput_mops"] for r in runs], "ops_per_packet": opp, "keys": keys,
            "p50_us": statistics.median(r["latency_us"]["p50"] for r in runs),
            "p99_us": statistics.median(r["latency_us"]["p99"] for r in runs)}


def peers(ctx):
    reps = ctx.pick(1, 3)
    stalls = stall_probe(ctx, ctx.pick(1, 3))
    log(f"  stall probe: {stalls_summary(stalls)}")
    try:
        r = redis(ctx, reps)
        mc = memcached(ctx, reps)
    finally:
        _stop_all()
    tp = testpmd(ctx, reps, 32)
    us = ours(ctx, reps, 32)
    us1 = ours(ctx, reps, 1)
    redis_best = max(r["pipeline_1"]["mix_mops"], r["pipeline_32"]["mix_mops"])
    mc_best = max(mc["mix_mops_get"], mc["mix_mops_mget"])
    fig = {
        "title": "Peers on the same machine, same run: per server core",
        "paper": claim("peers"),
        "config": {"mix": "95 % GET / 5 % SET (PUT)", "value_bytes": 2, "server_core": int(SERVER_CORE),
                   "client_core": int(CLIENT_CORE), "reps": reps,
                   "ours": "dataplane 1 worker lcore (core 1), pktgen (core 0), memif, 8 B keys, uniform",
                   "redis": f"redis-server (1 thread) on 127.0.0.1:{REDIS_PORT}, redis-benchmark -t set,get -d 2 -c 50 "
                            "-r KEYS, -P 1 and -P 32",
                   "memcached": f"memcached -t 1 on 127.0.0.1:{MEMCACHED_PORT}, memcslap --test set|get|mget "
                                "--concurrency 4 (its own keys and values: see memcached.item_bytes_mean)",
                   "testpmd": "dpdk-testpmd --forward-mode=io --port-topology=loop on the memif server side, "
                              "pktgen --echo on the client side, 32 ops/packet",
                   "mix_rate": "1 / (0.95 / GET rate + 0.05 / SET rate) for the tools that run one command type at a time"},
        "ours_mops_per_core": us["mops"],
        "ratio_vs_redis_per_core": us["mops"] / redis_best,
        "ratio_vs_memcached_per_core": us["mops"] / mc_best,
        "share_of_testpmd_io_limit": us["mops"] / tp["mops"],
        "numbers": {"ours_mops_per_core": us["mops"], "ours_mops_1_op_per_packet": us1["mops"],
                    "redis_mix_mops_pipelined": r["pipeline_32"]["mix_mops"], "redis_mix_mops": r["pipeline_1"]["mix_mops"],
                    "memcached_mix_mops_mget": mc["mix_mops_mget"], "memcached_mix_mops_get": mc["mix_mops_get"],
                    "testpmd_io_mops": tp["mops"], "ratio_vs_redis_per_core": us["mops"] / redis_best,
                    "ratio_vs_memcached_per_core": us["mops"] / mc_best,
                    "share_of_testpmd_io_limit": us["mops"] / tp["mops"]},
        "numbers_doc": {"ours_mops_per_core": "this system, 32 ops/packet, Mops per server core",
                        "ours_mops_1_op_per_packet": "this system without batching, Mops",
                        "redis_mix_mops_pipelined": "Redis, pipeline 32, 95/5 mix, Mops",
                        "redis_mix_mops": "Redis, no pipelining, 95/5 mix, Mops",
                        "memcached_mix_mops_mget": "memcached, multi-get + set, 95/5 mix, Mops",
                        "memcached_mix_mops_get": "memcached, get + set, 95/5 mix, Mops",
                        "testpmd_io_mops": "testpmd io-forward over memif at 32 ops/packet (the I/O ceiling), Mops",
                        "ratio_vs_redis_per_core": "ours / best Redis figure, per server core",
                        "ratio_vs_memcached_per_core": "ours / best memcached figure, per server core",
                        "share_of_testpmd_io_limit": "ours / testpmd io-forward"},
        "differs": "Redis and memcached speak TCP over the kernel's loopback, this system RoCEv2 frames over a "
                   "DPDK memif pair; memcslap cannot set the value size (it uses its own); each tool is its "
                   "project's standard benchmark, so client efficiency differs too.",
        "platform_stalls": stalls,
        "data": {"ours": us, "ours_1_op_per_packet": us1, "redis": r, "memcached": mc, "testpmd": tp},
        "plot": {"title": "Peers, same machine, same run (server on core 1, client on core 0)",
                 "panels": [bars("95 % GET / 5 % SET, per server core", "Mops (log)",
                                 ["Redis", "Redis -P 32", "memcached get", "memcached mget", "ours, 1 op/pkt",
                                  "ours, 32 ops/pkt", "testpmd io (ceiling)"],
                                 [("Mops", [r["pipeline_1"]["mix_mops"], r["pipeline_32"]["mix_mops"], mc["mix_mops_get"],
                                            mc["mix_mops_mget"], us1["mops"], us["mops"], tp["mops"]])], y_log=True)]},
    }
    from common import write_figure
    write_figure(ctx, "peers", fig, path=os.path.join(ctx.out, "peers.json"))
    return {}
