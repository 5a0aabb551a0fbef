"""Vector operations and transactions of kvdirect against a real dataplane (see
conftest.py for the environment; skipped without one)."""

import pytest

import kvdirect


def le(n):
    """An int as the 8-byte little-endian value incr/cas/put(int) write."""
    return (n % (1 << 64)).to_bytes(8, "little")


def test_vector_ops(client, key):
    k = key("v")
    assert client.vget(k) is None
    client.vput(k, [1, 2, 3])
    assert client.get(k) == le(1) + le(2) + le(3)
    assert client.vget(k) == [1, 2, 3]
    assert client.vupdate(k, "add", 10) == [1, 2, 3], "the original elements"
    assert client.vget(k) == [11, 12, 13]
    assert client.vapply(k, "max", [20, 0, 5]) == [11, 12, 13]
    assert client.vget(k) == [20, 12, 13]
    assert client.reduce(k) == 45
    assert client.reduce(k, "MAX") == 20
    assert client.reduce(k, "add", init=5) == 50
    assert client.filter(k, "gt", 12) == [20, 13]
    assert client.filter(k, "eq", 99) == []


def test_vector_widths_and_signs(client, key):
    s = key("s")
    client.vput(s, [-1, 5, -3], width=2)
    assert client.get(s) == bytes([0xFF, 0xFF, 5, 0, 0xFD, 0xFF])
    assert client.vget(s, width=2) == [0xFFFF, 5, 0xFFFD]
    assert client.vget(s, width=2, signed=True) == [-1, 5, -3]
    assert client.reduce(s, "min", width=2, signed=True) == -3
    assert client.filter(s, "lt", 0, width=2, signed=True) == [-1, -3]
    # CAS by function id: elements equal to 5 become 7.
    assert client.vupdate(s, 3, 5, 7, width=2, signed=True) == [-1, 5, -3]
    assert client.vget(s, width=2, signed=True) == [-1, 7, -3]


def test_vector_errors(client, key):
    k = key("e")
    with pytest.raises(kvdirect.StatusError) as e:
        client.vupdate(k, "add", 1)
    assert e.value.status == "not_found"
    client.put(k, b"abc")
    with pytest.raises(ValueError, match="not a vector of 8-byte elements"):
        client.vget(k)
    with pytest.raises(kvdirect.StatusError) as e:
        client.reduce(k)
    assert e.value.status == "bad_length"
    with pytest.raises(ValueError, match="does not fit in 1 byte"):
        client.vput(k, [256], width=1)
    with pytest.raises(ValueError, match="width is 1, 2, 4 or 8"):
        client.vput(k, [1], width=3)
    with pytest.raises(ValueError, match="unknown function"):
        client.vupdate(k, "mul", 1)
    with pytest.raises(ValueError, match="unknown predicate"):
        client.filter(k, "between", 1)
    with pytest.raises(TypeError):
        client.vput(k, b"123")
    with pytest.raises(TypeError):
        client.vupdate(k, 1.5, 1)
    assert client.get(k) == b"abc", "nothing was sent for the bad calls"


def test_transaction_commits(client, key):
    a, b = key("a"), key("b")
    client.put(a, 100)
    client.put(b, 20)
    tx = client.pipeline(transaction=True)
    tx.get(a, equals=100).get(b, equals=20).put(a, 90).put(b, 30).get(a)
    assert tx.execute() == [le(100), le(20), None, None, le(90)]
    assert (client.get(a), client.get(b)) == (le(90), le(30))
    assert len(tx) == 0


def test_transaction_aborts_change_nothing(client, key):
    a, n, w = key("a"), key("new"), key("w")
    client.put(a, b"x")
    tx = client.pipeline(transaction=True)
    tx.get(a, equals=b"y").put(a, b"z")
    with pytest.raises(kvdirect.TransactionAborted) as e:
        tx.execute()
    assert (e.value.reason, e.value.op, e.value.status) == ("condition_failed", 0, "ok")
    assert e.value.results == [b"x", None]
    assert client.get(a) == b"x"
    tx.get(n, absent=True).put(n, b"1")
    assert tx.execute() == [None, None]
    tx.get(n, absent=True).put(n, b"2")
    with pytest.raises(kvdirect.TransactionAborted):
        tx.execute()
    assert client.get(n) == b"1"
    # An update of an absent key fails the transaction: the PUT before it is undone.
    tx.put(w, b"1").incr(key("absent"))
    with pytest.raises(kvdirect.TransactionAborted) as e:
        tx.execute()
    assert (e.value.reason, e.value.op, e.value.status) == ("op_failed", 1, "not_found")
    assert client.get(w) is None


def test_conditions_need_a_transaction(client, key):
    with pytest.raises(ValueError, match="transaction=True"):
        client.pipeline().get(key("a"), equals=b"1")
    with pytest.raises(ValueError, match="exclude each other"):
        client.pipeline(transaction=True).get(key("a"), equals=b"1", absent=True)
