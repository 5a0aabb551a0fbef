"""kvdirect against a real dataplane (see conftest.py for the environment).

Run by scripts/e2e/python.sh inside a network namespace with the dataplane on
kvtap0. The "server gone" test pauses the dataplane, so it is the last one here.
"""

import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

import kvdirect

U64 = 1 << 64


def le(n):
    """An int as the 8-byte little-endian value incr/cas work on."""
    return (n % U64).to_bytes(8, "little")


# ---------------------------------------------------------------- plain methods


def test_put_get_delete(client, key):
    k = key("a")
    assert client.get(k) is None
    assert client.put(k, b"v1") is None
    assert client.get(k) == b"v1"
    client.put(k, b"second value")
    assert client.get(k) == b"second value"
    assert client.delete(k) is True
    assert client.get(k) is None
    assert client.delete(k) is False


def test_compare_delete_releases_only_its_owners_lock(client, key):
    k = key("lock")
    client.put(k, b"owner-1")
    assert client.compare_delete(k, b"owner-2") is False
    assert client.get(k) == b"owner-1"
    assert client.compare_delete(k, "owner-1") is True
    assert client.get(k) is None
    assert client.compare_delete(k, b"owner-1") is False
    client.put(k, b"owner-3")
    assert client.batch([("compare_delete", k, b"x"), ("compare_delete", k, b"owner-3"),
                         ("get", k)]) == [False, True, None]
    p = client.pipeline()
    p.put(k, b"v").compare_delete(k, b"v").get(k)
    assert p.execute() == [None, True, None]


def test_str_bytearray_and_int_arguments(client, key):
    k = key("ключ")  # a UTF-8 key
    client.put(k.decode(), "значение")
    v = client.get(k)
    assert isinstance(v, bytes) and v == "значение".encode()
    client.put(bytearray(k), bytearray(b"\x00\x01\xff"))
    assert client.get(k.decode()) == b"\x00\x01\xff"
    client.put(k, 7)
    assert client.get(k) == le(7)
    client.put(k, -1)
    assert client.get(k) == b"\xff" * 8
    assert client.delete(k.decode()) is True


@pytest.mark.parametrize("size", [0, 1, 8, 15, 16, 17, 64, 255, 256, 1000])
def test_value_sizes(client, key, size):
    k = key(str(size))
    v = bytes(random.Random(size).randrange(256) for _ in range(size))
    client.put(k, v)
    assert client.get(k) == v
    assert client.delete(k)


def test_incr(client, key):
    k = key("n")
    client.put(k, 0)
    assert client.incr(k) == 1
    assert client.incr(k, 5) == 6
    assert client.incr(k, -2) == 4
    assert client.get(k) == le(4)
    assert client.incr(k, -7) == -3  # signed, as kvcli prints it
    assert client.incr(k, 7) == 4
    assert client.incr(k, U64 - 1) == 3  # wraps mod 2**64
    client.put(k, U64 - 1)
    assert client.incr(k, 1) == 0
    # A missing counter is created (Redis's INCR), with the delta as its value.
    m = key("fresh")
    assert client.incr(m, -5) == -5
    assert client.get(m) == le(-5)
    assert client.incr(m) == -4
    assert client.delete(m)
    assert client.incr(m) == 1


def test_pipeline(client, key):
    k, n = key("p"), key("pn")
    p = client.pipeline()
    p.put(k, b"v").get(k).put(n, 0).incr(n, 2).cas(n, 2, 7).delete(k)
    assert len(p) == 6
    assert p.execute() == [None, b"v", None, 2, 2, True]
    assert len(p) == 0
    assert client.get(n) == le(7)
    with client.pipeline() as q:
        q.get(k)
    assert len(q) == 0  # what was not executed is dropped on exit


def test_cas(client, key):
    k = key("c")
    client.put(k, 10)
    assert client.cas(k, 10, 20) == 10  # swapped
    assert client.get(k) == le(20)
    assert client.cas(k, 10, 30) == 20  # not swapped
    assert client.get(k) == le(20)
    assert client.cas(k, 20, -1) == 20
    assert client.get(k) == le(-1)
    assert client.cas(k, -1, 5) == -1


def test_status_errors(client, key):
    k = key("missing")
    with pytest.raises(kvdirect.StatusError) as e:
        client.cas(k, 0, 1)
    assert e.value.status == "not_found"
    assert isinstance(e.value, kvdirect.Error)
    client.put(k, b"abc")  # not one 8-byte element
    with pytest.raises(kvdirect.StatusError) as e:
        client.incr(k, 1)
    assert e.value.status == "bad_length"
    assert client.get(k) == b"abc"  # unchanged


def test_oversized_values(client, key):
    k = key("big")
    for size in (2000, 10_000, 1 << 20):
        with pytest.raises(ValueError, match="does not fit|cannot be encoded"):
            client.put(k, b"x" * size)
    with pytest.raises(ValueError):
        client.batch([("put", k, b"y" * 5000)])
    # The client is still fine afterwards, and nothing was stored.
    assert client.get(k) is None
    client.put(k, b"small")
    assert client.get(k) == b"small"


def test_oversized_key(client):
    with pytest.raises((ValueError, kvdirect.StatusError)):
        client.put(b"k" * 5000, b"v")
    with pytest.raises((ValueError, kvdirect.StatusError)):
        client.get(b"k" * 300)


def test_bad_arguments(client, key):
    k = key("args")
    cases = [
        (TypeError, lambda: client.get(5)),
        (TypeError, lambda: client.get(None)),
        (ValueError, lambda: client.get(b"")),
        (ValueError, lambda: client.put("", b"v")),
        (TypeError, lambda: client.put(k, None)),
        (TypeError, lambda: client.put(k, 1.5)),
        (TypeError, lambda: client.put(k, True)),
        (TypeError, lambda: client.put(k, [1, 2])),
        (ValueError, lambda: client.put(k, 1 << 64)),
        (ValueError, lambda: client.put(k, -(1 << 63) - 1)),
        (TypeError, lambda: client.incr(k, "1")),
        (TypeError, lambda: client.incr(k, 1.0)),
        (ValueError, lambda: client.incr(k, 1 << 64)),
        (TypeError, lambda: client.cas(k, None, 1)),
        (TypeError, lambda: client.delete(object())),
        (TypeError, lambda: client.batch(5)),
        (TypeError, lambda: client.batch([5])),
        (TypeError, lambda: client.batch(["get"])),
        (TypeError, lambda: client.batch([()])),
        (TypeError, lambda: client.batch([("get",)])),
        (TypeError, lambda: client.batch([("put", k)])),
        (TypeError, lambda: client.batch([("cas", k, 1)])),
        (TypeError, lambda: client.batch([(1, k)])),
        (ValueError, lambda: client.batch([("frobnicate", k)])),
        (ValueError, lambda: client.batch([("get", b"")])),
        (TypeError, lambda: client.get()),
        (TypeError, lambda: client.put(k)),
    ]
    for exc, call in cases:
        with pytest.raises(exc):
            call()
    # A batch with one bad op sends nothing at all.
    with pytest.raises(TypeError, match="batch op 1"):
        client.batch([("put", k, b"1"), ("get", 5)])
    assert client.get(k) is None


# ------------------------------------------------------------------------ batch


def test_batch_basics(client, key):
    a, n = key("a"), key("n")
    assert client.batch([]) == []
    r = client.batch(
        [
            ("put", a, b"1"),
            ("get", a),
            ("put", n, 0),
            ("incr", n, 5),
            ("incr", n),
            ("cas", n, 6, 10),
            ("get", n),
            ["delete", a],  # lists work as well as tuples
            ("get", a),
            ("delete", a),
        ]
    )
    assert r == [None, b"1", None, 5, 6, 6, le(10), True, None, False]


def test_batch_errors(client, key):
    k, missing = key("k"), key("missing")
    client.put(k, b"v")
    with pytest.raises(kvdirect.StatusError) as e:
        client.batch([("get", k), ("incr", missing, 1), ("get", k)])
    assert e.value.status == "not_found" and e.value.index == 1
    r = client.batch(
        [("get", k), ("incr", missing, 1), ("get", k)], return_exceptions=True
    )
    assert r[0] == b"v" and r[2] == b"v"
    assert isinstance(r[1], kvdirect.StatusError) and r[1].index == 1


def _model_apply(model, op):
    """What the server must answer for `op` given the state `model` (mutated)."""
    name, k = op[0], op[1]
    if name == "get":
        return model.get(k)
    if name == "put":
        v = op[2]
        model[k] = le(v) if isinstance(v, int) else v
        return None
    if name == "delete":
        return model.pop(k, None) is not None
    v = model.get(k)
    if v is None:
        return ("error", "not_found")
    if len(v) != 8:
        return ("error", "bad_length")
    old = int.from_bytes(v, "little")
    # Counters come back signed (two's complement), as kvcli prints them.
    signed = lambda x: x - U64 if x >= U64 // 2 else x  # noqa: E731
    if name == "incr":
        new = (old + op[2]) % U64
        model[k] = le(new)
        return signed(new)
    if name == "cas":
        if old == op[2] % U64:
            model[k] = le(op[3])
        return signed(old)
    raise AssertionError(name)


def test_batch_10000_against_model(client, key):
    rng = random.Random(20240611)
    keys = [key(str(i)) for i in range(400)]
    model = {}
    ops = []
    for _ in range(10_000):
        k = rng.choice(keys)
        x = rng.random()
        if x < 0.30:
            if rng.random() < 0.4:
                v = rng.randrange(1 << 20)
            else:
                v = rng.randbytes(rng.choice([0, 1, 3, 8, 16, 17, 40, 200]))
            ops.append(("put", k, v))
        elif x < 0.60:
            ops.append(("get", k))
        elif x < 0.70:
            ops.append(("delete", k))
        elif x < 0.90:
            ops.append(("incr", k, rng.randrange(-1000, 1000)))
        else:
            # Mostly misses (test_batch_cas_succeeds covers the swaps).
            ops.append(("cas", k, rng.randrange(1 << 20), rng.randrange(1 << 20)))
    # The expected answers, op by op (same-key ops run in order on the server).
    expected = [_model_apply(model, op) for op in ops]
    before = client.stats()
    t0 = time.monotonic()
    results = client.batch(ops, return_exceptions=True)
    elapsed = time.monotonic() - t0
    after = client.stats()
    assert len(results) == len(ops)
    for i, (op, want, got) in enumerate(zip(ops, expected, results)):
        if isinstance(want, tuple):
            assert isinstance(got, kvdirect.StatusError), (i, op, want, got)
            assert got.status == want[1], (i, op, want, got.status)
            assert got.index == i
        else:
            assert got == want, (i, op, want, got)
    # The final state, read back in one batch.
    final = client.batch([("get", k) for k in keys])
    assert final == [model.get(k) for k in keys]
    # Pipelined: many ops per request packet.
    packets = after["sent"] - before["sent"]
    assert 0 < packets <= len(ops) // 4, packets
    assert after["failed"] == before["failed"]
    print(f"10000-op batch: {elapsed * 1e3:.0f} ms, {packets} request packets")


def test_batch_cas_succeeds(client, key):
    """CAS with the right expected value (the random batch mostly misses)."""
    keys = [key(str(i)) for i in range(50)]
    client.batch([("put", k, i) for i, k in enumerate(keys)])
    r = client.batch([("cas", k, i, i + 100) for i, k in enumerate(keys)])
    assert r == list(range(50))
    assert client.batch([("get", k) for k in keys]) == [le(i + 100) for i in range(50)]


# ------------------------------------------------------------ stats, lifecycle


def test_stats(client, key):
    s = client.stats()
    for name in ("sent", "completed", "failed", "retransmitted", "timeouts",
                 "in_flight", "qps_connected", "tx_frames", "rx_frames"):
        assert isinstance(s[name], int), name
    client.put(key("s"), b"x")
    s2 = client.stats()
    assert s2["completed"] >= s["completed"] + 1
    assert s2["tx_frames"] > s["tx_frames"]
    assert s2["in_flight"] == 0


def test_close_and_context_manager(iface, config_path, key):
    with kvdirect.Client(iface, config=str(config_path)) as c:
        c.put(key("x"), b"1")
        assert "kvdirect.Client" in repr(c) and c.iface == iface
    assert "closed" in repr(c)
    with pytest.raises(kvdirect.Error, match="closed"):
        c.get(key("x"))
    with pytest.raises(kvdirect.Error):
        c.stats()


def test_explicit_endpoint(iface, config, key):
    dp, pg = config["dataplane"], config["pktgen"]
    qps = [(q["qpn"], q["rkey"]) for q in config["clients"]]
    c = kvdirect.Client(
        iface,
        server_ip=dp["ip"],
        server_mac=dp["mac"],
        client_ip=pg["ip"],
        client_mac=bytes(int(b, 16) for b in pg["mac"].split(":")),
        qps=qps[:1],
        partitions=1,
    )
    try:
        c.put(key("e"), b"explicit")
        assert c.get(key("e")) == b"explicit"
        assert c.stats()["qps_connected"] == 1
    finally:
        c.close()


def test_clients_do_not_disturb_each_other(iface, config_path, key):
    # Issue 32: on shared static QPs another process's connect took the QP over and
    # this client's next operations failed. Every client now has QPs of its own.
    a = kvdirect.Client(iface, config=str(config_path))
    try:
        for i in range(20):
            b = kvdirect.Client(iface, config=str(config_path))
            b.put(key("b%d" % i), b"x")
            b.close()
            a.put(key("a"), b"%d" % i)
            assert a.get(key("a")) == b"%d" % i
    finally:
        a.close()


def test_other_thread_refused(client, key):
    """A client belongs to its thread (kvclient's Client is not Send): another
    thread's call is refused with RuntimeError, and the client still works."""
    caught = []

    def other():
        try:
            client.get(key("t"))
        except BaseException as e:
            caught.append(e)

    t = threading.Thread(target=other)
    t.start()
    t.join()
    assert len(caught) == 1 and isinstance(caught[0], RuntimeError), caught
    assert "thread" in str(caught[0])
    client.put(key("t"), b"ok")
    assert client.get(key("t")) == b"ok"


def test_gil_released_while_waiting(client, key):
    """Another Python thread runs while the client waits for the network. With a
    long switch interval the interpreter never takes the GIL from the main thread
    on its own during the call, so the spinner advances only if the call released
    it."""
    ops = [("put", key(str(i)), b"v") for i in range(5000)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(0.05)
    stop = threading.Event()
    count = [0]

    def spin():
        while not stop.is_set():
            count[0] += 1

    t = threading.Thread(target=spin)
    try:
        t.start()
        time.sleep(0.01)
        before = count[0]
        client.batch(ops)
        during = count[0] - before
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)
    assert during > 0


# -------------------------------------------------------- configuration errors


def test_no_such_interface(config_path):
    with pytest.raises(kvdirect.Error, match="nosuchif0") as e:
        kvdirect.Client("nosuchif0", config=str(config_path))
    assert isinstance(e.value, kvdirect.ConfigError)
    assert "available" in str(e.value)


def test_config_errors(tmp_path, config_path):
    with pytest.raises(kvdirect.ConfigError):
        kvdirect.Client("lo", config=str(tmp_path / "missing.json"))
    bad = tmp_path / "bad.json"
    bad.write_text("{ not json")
    with pytest.raises(kvdirect.ConfigError):
        kvdirect.Client("lo", config=bad)  # os.PathLike works too
    endpoint = dict(server_ip="127.0.0.2", server_mac="02:00:00:00:00:01",
                    client_ip="127.0.0.3", client_mac="02:00:00:00:00:02")
    with pytest.raises(kvdirect.ConfigError, match="partition"):
        # QPN 17 serves partition 1 of 2 only: nothing serves partition 0.
        kvdirect.Client("lo", qps=[(17, 1)], partitions=2, **endpoint)
    with pytest.raises(TypeError, match="missing: server_ip"):
        kvdirect.Client("lo", qps=[(17, 1)])
    for bad_kw, exc in [
        (dict(server_ip="1.2.3"), ValueError),
        (dict(server_ip=5), TypeError),
        (dict(server_mac="02:00:00:00:00"), ValueError),
        (dict(server_mac=b"\x02\x00"), ValueError),
        (dict(qps=[]), ValueError),
        (dict(qps="17"), TypeError),
        (dict(qps=[(17, -1)]), ValueError),
        (dict(qps=[(1 << 24, 1)]), ValueError),
        (dict(partitions=0), ValueError),
        (dict(udp_src_port=70000), ValueError),
        (dict(timeout=0), ValueError),
        (dict(timeout=float("nan")), ValueError),
        (dict(connect_timeout="1"), TypeError),
    ]:
        kw = dict(endpoint, qps=[(17, 1)])
        kw.update(bad_kw)
        with pytest.raises(exc):
            kvdirect.Client("lo", **kw)
    with pytest.raises(TypeError):
        kvdirect.Client(5, config=str(config_path))
    with pytest.raises(ValueError):
        kvdirect.Client("", config=str(config_path))
    with pytest.raises(TypeError):
        kvdirect.Client("lo", config=5)


@pytest.mark.skipif(not shutil.which("setpriv"), reason="needs setpriv")
def test_no_permission(iface, config_path):
    """Without CAP_NET_RAW the raw socket is refused: PermissionError naming the
    interface (run in a child without the capability)."""
    code = (
        "import kvdirect\n"
        "try:\n"
        f"    kvdirect.Client({iface!r}, config={str(config_path)!r})\n"
        "except PermissionError as e:\n"
        "    print('PermissionError', e)\n"
    )
    if os.geteuid() == 0:
        cmd = ["setpriv", "--bounding-set", "-net_raw", "--inh-caps", "-net_raw",
               sys.executable, "-c", code]
    else:
        cmd = [sys.executable, "-c", code]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    assert out.stdout.startswith("PermissionError"), (out.stdout, out.stderr)
    assert iface in out.stdout


# --------------------------------------------------------------- unreachable


def test_connect_to_nobody(iface, config):
    """No server at that address: UnreachableError within the connect timeout."""
    pg = config["pktgen"]
    t0 = time.monotonic()
    with pytest.raises(kvdirect.UnreachableError) as e:
        kvdirect.Client(iface, server_ip="127.0.0.9", server_mac="02:00:00:00:00:99",
                        client_ip=pg["ip"], client_mac=pg["mac"], qps=[(17, 1)],
                        connect_timeout=0.3)
    assert time.monotonic() - t0 < 2.0
    assert e.value.reason == "connect_timeout"
    assert iface in str(e.value)


def test_server_gone(iface, config_path, key, dataplane_pid):
    """The dataplane stops answering (SIGSTOP): operations raise UnreachableError
    within a bounded time; a new client cannot connect; once it is back (SIGCONT)
    the same client reconnects and works. Last test: it pauses the server."""
    c = kvdirect.Client(iface, config=str(config_path), timeout=1.0,
                        connect_timeout=0.5)
    k = key("g")
    c.put(k, b"before")
    os.kill(dataplane_pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        with pytest.raises(kvdirect.UnreachableError) as e:
            c.get(k)
        first = time.monotonic() - t0
        assert e.value.reason in ("timeout", "connection_lost", "deadline")
        assert first < 3.0, first
        t0 = time.monotonic()
        r = c.batch([("get", k)] * 100 + [("put", k, b"lost?")], return_exceptions=True)
        assert all(isinstance(x, kvdirect.UnreachableError) for x in r)
        assert time.monotonic() - t0 < 3.0
        t0 = time.monotonic()
        with pytest.raises(kvdirect.UnreachableError) as e:
            kvdirect.Client(iface, config=str(config_path), connect_timeout=0.5)
        assert e.value.reason == "connect_timeout"
        assert time.monotonic() - t0 < 2.0
    finally:
        os.kill(dataplane_pid, signal.SIGCONT)
    # Back: the client reconnects its QPs on next use.
    deadline = time.monotonic() + 10
    while True:
        try:
            v = c.get(k)
            break
        except kvdirect.UnreachableError:
            assert time.monotonic() < deadline, "no reconnect within 10 s"
    # The PUT sent while the server was paused has an unknown outcome.
    assert v in (b"before", b"lost?")
    c.put(k, b"after")
    assert c.get(k) == b"after"
    c.close()


def test_decode_responses(client, key, iface, config_path):
    k, raw = key("text"), key("raw")
    client.put(k, "héllo")
    client.put(raw, b"\xff\xfe")
    client.close()  # one client per QP at a time
    with kvdirect.Client(iface, config=str(config_path), decode_responses=True) as c:
        assert c.get(k) == "héllo"
        assert c.batch([("get", k), ("get", key("absent"))]) == ["héllo", None]
        with pytest.raises(UnicodeDecodeError):
            c.get(raw)

