"""scripts/suites.py, the benchmark suites' registry: every step it would run exists,
builds are shared and never mix ctlplane into the dataplane's build, and arguments
reach the steps that take them (run by scripts/test.sh with pytest)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import suites  # noqa: E402


def all_plans():
    yield suites.plan(suites.ALL, [])
    for name in suites.SUITES:
        yield suites.plan([name], ["--quick"])
    yield suites.plan(["idle"], ["--doorbell", "--reps", "1"])


def test_every_step_runs_a_file_of_the_repository():
    for _, _, steps in all_plans():
        for argv in steps:
            path = argv[1] if argv[0] == "python3" else argv[0]
            assert os.path.isfile(os.path.join(suites.ROOT, path)), argv


def test_ctlplane_is_always_built_alone():
    # Its `accounting` feature must not be unified into the dataplane binary.
    for _, builds, _ in all_plans():
        for b in builds:
            assert "ctlplane" not in b or b == suites.CTL, b


def test_all_builds_each_thing_once():
    _, builds, steps = suites.plan(suites.ALL, ["--reps", "2"])
    assert len(builds) == len(set(builds))
    assert builds.count(suites.DP_PG) == 1
    # Arguments go to engine and e2e only.
    with_args = [s for s in steps if "--reps" in s]
    assert [s[1] if s[0] == "python3" else s[0] for s in with_args] == [
        "scripts/bench-engine.sh", "scripts/bench_e2e.py"]


def test_shared_flags_pass_on_and_others_stay():
    _, _, steps = suites.plan(["replication"], ["--quick", "--reps", "1"])
    assert steps[0] == ["python3", "scripts/bench_replication.py", "--quick", "--reps", "1"]
    assert all(s[-1] == "--quick" and "--reps" not in s for s in steps[1:])
    assert ["python3", "scripts/bench_failover.py", "--follow", "--quick"] in steps


def test_idle_doorbell_picks_the_pair_benchmark():
    _, _, steps = suites.plan(["idle"], ["--doorbell", "--reps", "1"])
    assert steps == [["python3", "scripts/bench_doorbell.py", "--reps", "1"]]
    _, _, steps = suites.plan(["idle"], ["--reps", "1"])
    assert steps == [["python3", "scripts/bench_idle.py", "--reps", "1"]]


def test_unknown_suite_is_refused():
    assert suites.main(["nope"]) == 2
