"""The README's first steps as a typed program (checked with mypy --strict in
scripts/e2e/python.sh). Run as root beside a dataplane on kvtap0:

    python3 python/examples/quickstart.py configs/tap.json
"""
import sys

import kvdirect


def main(config: str) -> int:
    with kvdirect.Client("kvtap0", config=config) as c:
        c.put(b"greeting", b"hello")
        value = c.get(b"greeting")
        assert value == b"hello"
        c.put(b"hits", 0)
        hits: int = c.incr(b"hits", 5)
        old: int = c.cas(b"hits", hits, -1)
        results = c.batch([("put", b"a", b"1"), ("get", b"a"), ("incr", b"hits"), ("delete", b"a")])
        pipe = c.pipeline().put(b"b", b"2").get(b"b").delete(b"b")
        print(value, hits, old, results, pipe.execute(), c.stats()["sent"])
        c.vput(b"scores", [3, 9, 4])
        before: list[int] = c.vupdate(b"scores", "add", 1)
        top: int = c.reduce(b"scores", "max")
        print(before, top, c.filter(b"scores", "gt", 4), c.vget(b"scores"))
        tx = c.pipeline(transaction=True)
        tx.get(b"greeting", equals=b"hello").put(b"greeting", b"bonjour")
        try:
            print(tx.execute())
        except kvdirect.TransactionAborted as e:
            print("aborted:", e.reason, e.op, e.results)
        try:
            c.incr(b"no-such-counter")
        except kvdirect.StatusError as e:
            print("as expected:", e.status)
        except kvdirect.UnreachableError as e:
            print("server unreachable:", e.reason)
            return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "configs/tap.json"))
