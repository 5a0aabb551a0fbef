"""scripts/history_check.py on small histories: each rule passes a correct history and
catches the anomaly it names (run by scripts/test.sh with pytest)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import history_check as hc  # noqa: E402


def op(f, k, v, t0, t1, r="ok", out=None, p=0):
    return {"p": p, "f": f, "k": k, "v": v, "t0": t0, "t1": t1, "r": r, "out": out}


def regs(ops, final):
    return hc.check_registers(ops, final)


def test_sequential_register_history_is_clean():
    ops = [op("put", "r", "a", 0, 1), op("get", "r", None, 2, 3, out="a"),
           op("put", "r", "b", 4, 5), op("get", "r", None, 6, 7, out="b")]
    r = regs(ops, {"r": "b"})
    assert (r["stale_reads"], r["lost_acked_writes"], r["read_never_written"]) == (0, 0, 0)


def test_stale_read_of_an_overwritten_value():
    ops = [op("put", "r", "a", 0, 1), op("put", "r", "b", 2, 3), op("get", "r", None, 4, 5, out="a")]
    assert regs(ops, {"r": "b"})["stale_reads"] == 1


def test_concurrent_writes_may_be_read_in_either_order():
    # a overlaps b: reading a after both is allowed, and so is a final a.
    ops = [op("put", "r", "a", 0, 10), op("put", "r", "b", 2, 3), op("get", "r", None, 11, 12, out="a")]
    r = regs(ops, {"r": "a"})
    assert (r["stale_reads"], r["lost_acked_writes"]) == (0, 0)


def test_absent_after_an_acknowledged_put_is_stale_and_lost():
    ops = [op("put", "r", "a", 0, 1), op("get", "r", None, 2, 3, out=None)]
    r = regs(ops, {})
    assert (r["stale_reads"], r["lost_acked_writes"]) == (1, 1)


def test_unknown_puts_may_surface_any_time_later():
    ops = [op("put", "r", "a", 0, 1), op("put", "r", "x", 2, 9, r="info"),
           op("get", "r", None, 3, 4, out="a"), op("get", "r", None, 20, 21, out="x")]
    r = regs(ops, {"r": "x"})
    assert r["stale_reads"] == 0 and r["lost_acked_writes"] == 0
    # Not a full linearizability check: only reads an acknowledged write contradicts
    # are flagged (here "a" after "x" would need a second write of "a"; not caught).
    ops.append(op("get", "r", None, 22, 23, out="a"))
    assert regs(ops, {"r": "x"})["stale_reads"] == 0
    # A failed put must never be read.
    ops.append(op("put", "r", "f", 30, 31, r="fail"))
    ops.append(op("get", "r", None, 32, 33, out="f"))
    assert regs(ops, {"r": "x"})["read_never_written"] == 1


def test_read_of_a_value_from_the_future_or_nowhere():
    ops = [op("get", "r", None, 0, 1, out="a"), op("put", "r", "a", 2, 3), op("get", "r", None, 4, 5, out="zz")]
    assert regs(ops, {"r": "a"})["read_never_written"] == 2


def test_final_state_losing_the_last_acknowledged_put():
    ops = [op("put", "r", "a", 0, 1), op("put", "r", "b", 2, 3)]
    assert regs(ops, {"r": "a"})["lost_acked_writes"] == 1
    assert regs(ops, {"r": "b"})["lost_acked_writes"] == 0


def incr(t0, t1, out, r="ok"):
    return op("incr", "ctr", 1, t0, t1, r=r, out=out)


def test_counter_rules():
    clean = [incr(0, 1, 1), incr(2, 3, 2), incr(2, 5, 3), incr(6, 7, None, r="info")]
    r = hc.check_counter(clean, 4)
    assert (r["duplicate_incr_results"], r["non_monotonic_incr"], r["lost_acked_increments"],
            r["duplicate_effects"]) == (0, 0, 0, 0)
    assert hc.check_counter(clean, 3)["duplicate_effects"] == 0  # the unknown one did not land
    assert hc.check_counter(clean, 2)["lost_acked_increments"] == 1
    assert hc.check_counter(clean, 5)["duplicate_effects"] == 1
    # A refused increment that landed anyway: the value nobody was told of is named.
    refused = [incr(0, 1, 1), incr(2, 3, None, r="fail"), incr(4, 5, 3)]
    r = hc.check_counter(refused, 3)
    assert r["duplicate_effects"] == 1 and "returned 2" in r["examples"][0]
    # Rolled back and redone: two acknowledged increments saw the same new value.
    rolled = [incr(0, 1, 1), incr(2, 3, 2), incr(4, 5, 2)]
    r = hc.check_counter(rolled, 2)
    assert r["duplicate_incr_results"] == 1 and r["non_monotonic_incr"] == 1


def test_bank_totals():
    good = [op("audit", None, None, 0, 1, out=[100, 100]), op("audit", None, None, 2, 3, out=[95, 105])]
    assert hc.check_bank(good, [90, 110], 2, 100)["wrong_bank_totals"] == 0
    bad = good + [op("audit", None, None, 4, 5, out=[95, 100])]
    assert hc.check_bank(bad, [90, 110], 2, 100)["wrong_bank_totals"] == 1
    assert hc.check_bank(good, [-1, 201], 2, 100)["wrong_bank_totals"] == 1
    assert hc.check_bank(good, None, 2, 100)["wrong_bank_totals"] == 1
    # Accounts gone (a store that wiped its data answers "absent"): wrong, not a crash.
    wiped = good + [op("audit", None, None, 4, 5, out=[None, None])]
    assert hc.check_bank(wiped, [None, 110], 2, 100)["wrong_bank_totals"] == 2


def test_check_reports_every_violation_count():
    ops = [op("put", "r", "a", 0, 1), incr(0, 1, 1)]
    res = hc.check(ops, {"registers": {"r": "a"}, "counter": 1, "accounts": [100] * 8}, 8, 100)
    assert all(res[v] == 0 for v in hc.VIOLATIONS)
    res = hc.check(ops, {"registers": {}, "counter": 0, "accounts": [100] * 8}, 8, 100)
    assert res["lost_acked_writes"] == 1 and res["lost_acked_increments"] == 1
