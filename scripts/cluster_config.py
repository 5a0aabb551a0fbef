#!/usr/bin/env python3
"""Writes the config files of a one-host replicated cluster (scripts/cluster.sh).

Node 0 starts as master, nodes 1..N as replicas. Every node has:
  * a client port: a memif server its own pktgen (or a test) attaches to;
  * one replication link per other node: a memif pair, full mesh, so that whichever
    node becomes master reaches every other one (the lower-numbered node of a pair
    is the memif server);
  * two lcores: the worker (main lcore) and the replication lcore.
Usage: cluster_config.py DIR N_REPLICAS [--mode async|sync] [--min-replicas K]
       [--etcd URL [--cluster NAME] [--lease-ms MS]] [--base configs/memif.json]
       [--topology star|chain]
       [--log-fsync always|everysec|no]  (every node but a fixed master logs the
                                          stream it applies to DIR/nodeK.aof)
       [--clients memif|tap]
Node k serves clients at its own MAC and IP (02:00:00:00:20:kk, 10.78.0.k+1), and every
config lists all of them in `replication.client_nodes`, so a client reading any node's
config reaches whichever node answers and follows NOT_MASTER hints to the master.
Also writes DIR/follow.json: a pktgen attached to every node's client port, for
`pktgen --follow-ports net_memif20,net_memif21,...` (follows the master; with `--tx`
too).

--clients tap (for kvcli, the Python binding and other kernel clients): node k serves
a net_tap interface PREFIXtK instead of a memif client port. scripts/cluster.sh joins the
taps with a bridge PREFIXbr whose MAC is the config's client MAC (`pktgen.mac`): a
kernel client uses `--iface PREFIXbr`. No follow.json then (pktgen needs memif).
"""
import argparse
import copy
import json
import os


def node_config(base, d, k, n, args):
    c = copy.deepcopy(base)
    c["name"] = f"cluster-node{k}"
    sock = os.path.join(d, f"client{k}.sock")
    dp, pg = c["dataplane"], c["pktgen"]
    dp["file_prefix"] = f"{args.prefix}-node{k}"
    pg["file_prefix"] = f"{args.prefix}-node{k}-pktgen"
    dp["lcores"] = args.lcores
    # Small enough that several nodes and a pktgen fit the host's hugepages.
    dp["memory_mb"] = 96
    pg["memory_mb"] = 96
    # Jumbo frames take 9 KiB mbufs: half as many keep the pool within the 96 MB.
    dp["mbufs"] = pg["mbufs"] = 8191 if args.mtu <= 1500 else 4095
    c["server"]["mtu"] = args.mtu
    if args.idle:
        c["server"]["idle"] = args.idle
    memif = "net_memif0,role={},id=0,socket={},socket-abstract=no,rsize=11"
    dp["vdevs"] = [memif.format("server", sock)]
    pg["vdevs"] = [memif.format("client", sock)]
    # Every node its own client-facing address, so a NOT_MASTER hint names the master
    # and a client following the cluster (kvcli, Python, pktgen --follow-ports and
    # --tx) reaches each node by it.
    dp["mac"], dp["ip"] = client_addr(k)["mac"], client_addr(k)["ip"]
    if args.clients == "tap":
        dp["vdevs"] = [f"net_tap0,iface={tap_name(args.prefix, k)}"]
        dp["port"] = "net_tap0"
    c["engine"]["mem_mb"] = 128
    vdevs = []
    for peer in range(n):
        if peer == k:
            continue
        lo, hi = min(k, peer), max(k, peer)
        role = "server" if k == lo else "client"
        s = os.path.join(d, f"link{lo}-{hi}.sock")
        vdevs.append(
            f"net_memif{10 + peer},role={role},id=0,socket={s},socket-abstract=no,rsize=11"
        )
    repl = {
        "role": "master" if k == 0 else "replica",
        "node_id": f"node{k}",
        "mode": args.mode,
        "min_replicas": args.min_replicas,
        "vdevs": vdevs,
        "link": {"mac": f"02:00:00:00:10:{k:02x}", "ip": f"10.77.0.{k + 1}"},
        "probe_interval_ms": args.probe_ms,
        "backlog_mb": args.backlog_mb,
        "waiting_time_ms": args.waiting_ms,
    }
    def addr(j):
        return {"mac": f"02:00:00:00:10:{j:02x}", "ip": f"10.77.0.{j + 1}"}

    if args.topology == "chain":
        # Node k follows node k-1 and relays to node k+1; when its predecessor is
        # silent it joins the one before (the chain closes over a failed node).
        repl["topology"] = "chain"
        if k != 0:
            repl["master"] = addr(k - 1)
            repl["fallback"] = [addr(j) for j in range(k - 2, -1, -1)]
    elif k != 0:
        repl["master"] = addr(0)
    if args.log_fsync and (k != 0 or args.etcd):
        repl["log_file"] = os.path.join(d, f"node{k}.aof")
        repl["fsync"] = args.log_fsync
    if args.etcd:
        repl["etcd"] = {
            "endpoints": [args.etcd],
            "cluster": args.cluster,
            "lease_ttl_ms": args.lease_ms,
            "completion_records": not args.no_completions,
            # Every node of the cluster: the first election waits for all of them,
            # later ones for a quorum of data holders (docs/FAILOVER.md).
            "nodes": n,
        }
    repl["client_nodes"] = [client_addr(j) for j in range(n)]
    c["replication"] = repl
    return c


def client_addr(k):
    """Node k's client-facing address."""
    return {"mac": f"02:00:00:00:20:{k:02x}", "ip": f"10.78.0.{k + 1}"}


def tap_name(prefix, k):
    """Node k's net_tap interface with --clients tap (scripts/cluster.sh bridges them)."""
    name = f"{prefix}t{k}"
    if len(name) > 15:
        raise SystemExit(f"cluster_config.py: interface name {name!r} is over 15 characters: "
                         "use a shorter --prefix")
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("replicas", type=int)
    ap.add_argument("--mode", default="async", choices=["async", "sync"])
    ap.add_argument("--min-replicas", type=int, default=0)
    ap.add_argument("--probe-ms", type=int, default=100)
    ap.add_argument("--waiting-ms", type=int, default=500)
    ap.add_argument("--backlog-mb", type=int, default=64)
    ap.add_argument("--etcd", default="")
    ap.add_argument("--cluster", default="kvd")
    ap.add_argument("--lease-ms", type=int, default=1000,
                    help="etcd lease TTL: a dead master is replaced after about this long")
    ap.add_argument("--base", default="configs/memif.json")
    ap.add_argument("--log-fsync", default="", choices=["", "always", "everysec", "no"],
                    help="replicas append the stream to DIR/nodeK.aof with this policy")
    ap.add_argument("--topology", default="star", choices=["star", "chain"],
                    help="chain: node k follows node k-1 (docs/TRANSACTIONS.md)")
    ap.add_argument("--prefix", default="kvd", help="EAL file prefix stem of the nodes")
    ap.add_argument("--no-completions", action="store_true",
                    help="etcd nodes log and keep no completion records (docs/PROTOCOL.md §6.6)")
    ap.add_argument("--lcores", default="0,1",
                    help="dataplane.lcores of every node (e.g. 0@0,1@1,2@1: two workers and "
                         "the replication lcore on 2 CPUs)")
    ap.add_argument("--mtu", type=int, default=1500,
                    help="server.mtu of every node (up to 9000: jumbo frames)")
    ap.add_argument("--idle", default="", choices=["", "poll", "yield", "adaptive"],
                    help="server.idle of every node (docs/OPERATIONS.md 'Idle lcores'); "
                         "default: the base config's")
    ap.add_argument("--clients", default="memif", choices=["memif", "tap"],
                    help="tap: each node serves kernel clients on its own net_tap interface "
                         "and address, listed in replication.client_nodes")
    args = ap.parse_args()
    with open(args.base) as f:
        base = json.load(f)
    os.makedirs(args.dir, exist_ok=True)
    n = args.replicas + 1
    for k in range(n):
        path = os.path.join(args.dir, f"node{k}.json")
        with open(path, "w") as f:
            json.dump(node_config(base, args.dir, k, n, args), f, indent=2)
        print(path)
    if args.clients == "tap":
        return
    # A pktgen that follows the master: node0's config with a client port on every
    # node's client socket (`pktgen --config DIR/follow.json --follow-ports
    # net_memif20,net_memif21,...`; no node's own pktgen may run at the same time).
    c = node_config(base, args.dir, 0, n, args)
    pg = c["pktgen"]
    pg["file_prefix"] = f"{args.prefix}-follow-pktgen"
    pg["vdevs"] = [
        f"net_memif{20 + k},role=client,id=0,socket={os.path.join(args.dir, f'client{k}.sock')},"
        "socket-abstract=no,rsize=11"
        for k in range(n)
    ]
    pg["port"] = "net_memif20"
    with open(os.path.join(args.dir, "follow.json"), "w") as f:
        json.dump(c, f, indent=2)


if __name__ == "__main__":
    main()
