#!/usr/bin/env python3
"""A TCP forwarder: listens on 127.0.0.1:PORT and relays every connection to
127.0.0.1:TARGET. The nemesis puts one between each node and etcd (scripts/nemesis.py,
fault `etcd_cut_master`): SIGSTOP of this process cuts that node from etcd — its
requests and lease renewals go unanswered, as in a network partition — while its
clients and replication links go on; SIGCONT heals the cut.

Usage: tcp_proxy.py PORT TARGET
"""
import socket
import sys
import threading


def pump(src, dst):
    try:
        while True:
            b = src.recv(65536)
            if not b:
                break
            dst.sendall(b)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main():
    port, target = int(sys.argv[1]), int(sys.argv[2])
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(64)
    while True:
        c, _ = ls.accept()
        try:
            u = socket.create_connection(("127.0.0.1", target))
        except OSError:
            c.close()
            continue
        for a, b in ((c, u), (u, c)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
