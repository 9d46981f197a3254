"""A suspected regression is confirmed by running the test again in a fresh pytest process
(core/session/attempts.py)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

# SLOW_ATTEMPTS_<test> attempts of a test run slow (a burst of load), later ones at speed. Each attempt records
# the process it ran in and how often the module's fixture was set up there.
PROJECT = """
import json, os, pytest
from pathlib import Path

SEEN = Path("seen.jsonl")
MODULE_SETUPS = []

@pytest.fixture(scope="module")
def shared():
    MODULE_SETUPS.append(1)
    yield len(MODULE_SETUPS)

def measure(name, perf, shared):
    seen = [json.loads(line) for line in SEEN.read_text().splitlines()] if SEEN.exists() else []
    attempt = 1 + sum(1 for entry in seen if entry["test"] == name)
    with SEEN.open("a") as out:
        out.write(json.dumps({"test": name, "pid": os.getpid(), "module_setups": shared}) + "\\n")
    if attempt > 1 and os.environ.get("FAIL_IN_CHILD"):
        raise RuntimeError("the confirmation's own failure")
    slow = float(os.environ.get("SLOW_FACTOR", "1.3"))
    slow = slow if attempt <= int(os.environ.get("SLOW_ATTEMPTS_" + name, "0")) else 1.0
    perf.record("t", [slow * (1 + 0.001 * i) for i in range(10)], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_a(perf, shared):
    measure("a", perf, shared)

@pytest.mark.perf
def test_b(perf, shared):
    measure("b", perf, shared)
"""

SETTINGS = ["--gpuperf-device", "cpu", "--gpuperf-run-noise", "0.1", "--gpuperf-threshold", "5%",
            "--gpuperf-job-alpha", "5%", "--gpuperf-noise-limit", "20%", "--gpuperf-sitting-noise", "2%"]  # fmt: skip
"""None of them the default, so `gpuperf compare` agrees with the session only by reading what the results recorded."""
JUDGE = [*SETTINGS, "--gpuperf-results", "run.json"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_attempts=PROJECT)
    pytester.makeini("[pytest]\nmarkers =\n    perf: a gpuperf test (a project registers its own markers)\n")
    pytester.runpytest("--gpuperf-save", *SETTINGS, "--gpuperf-results", "base/run.json").assert_outcomes(passed=2)
    (pytester.path / "seen.jsonl").unlink()
    return pytester


def assert_compare_agrees(pytester: pytest.Pytester) -> None:
    """`gpuperf compare` of the saved run (BASE, its settings the only source of the rules) and the judged one
    gives each metric the session's verdict and reason, word for word."""
    from pytest_gpuperf.cli import main as cli

    cli.main(["compare", "base", "run.json", "--format", "json", "--output", "compare.json"])
    rows = json.loads((pytester.path / "compare.json").read_text())["rows"]
    compared = {row["test"].rsplit("::", 1)[1]: (row["verdict"], row["reason"]) for row in rows}
    judged = {test: (r["verdict"], r["comparison"]["reason"]) for test, r in verdicts(pytester).items()}
    assert compared == judged


def seen(pytester: pytest.Pytester, test: str) -> list[dict[str, object]]:
    lines = (pytester.path / "seen.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry["test"] == test]


def verdicts(pytester: pytest.Pytester) -> dict[str, dict[str, object]]:
    document = json.loads((pytester.path / "run.json").read_text())
    return {result["test"].rsplit("::", 1)[1]: result for result in document["results"]}


def test_recovered_attempt_runs_in_a_fresh_process(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_a", "1")
    result = project.runpytest(*JUDGE, "--junitxml", "junit.xml", "-vv")
    result.assert_outcomes(passed=2)
    attempts = seen(project, "a")
    assert len(attempts) == 2
    assert attempts[0]["pid"] != attempts[1]["pid"]  # the confirmation ran in another interpreter
    assert attempts[0]["pid"] == seen(project, "b")[0]["pid"]  # the first attempt in the session's own
    assert attempts[1]["module_setups"] == 1  # its fixtures were set up afresh there
    assert len(seen(project, "b")) == 1  # a test that passed at once runs once
    result.stdout.fnmatch_lines(
        ["*test_a*: t REGRESSED in attempt 1; confirming in a fresh process*", "*attempt 2 (*s): did not regress*"]
    )
    a = verdicts(project)["test_a"]
    assert a["verdict"] == "PASS"  # the verdict of the attempt that measured at speed
    assert "attempt 1 was REGRESSED, attempt 2 did not confirm it" in a["comparison"]["reason"]
    assert a["context"]["attempts"] == 2
    assert not list(project.path.glob("baselines/*/.*.tmp"))
    cases = ET.parse(project.path / "junit.xml").getroot().iter("testcase")
    assert sorted(case.get("name") for case in cases) == ["test_a", "test_b"]  # one test case per test, this run's
    assert_compare_agrees(project)


def test_confirmed_regression_fails_after_two_processes_regressed(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_b", "2")
    result = project.runpytest(*JUDGE)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*t: REGRESSED*(confirmed in 2 attempts)*"])
    attempts = seen(project, "b")
    assert len({entry["pid"] for entry in attempts}) == 2
    assert verdicts(project)["test_b"]["verdict"] == "REGRESSED"
    assert_compare_agrees(project)


def test_a_confirmation_that_cannot_run_leaves_the_metric_ambiguous(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_b", "2")
    monkeypatch.setenv("FAIL_IN_CHILD", "1")  # the fresh session's test raises: nothing measured there
    result = project.runpytest(*JUDGE)
    result.assert_outcomes(passed=2)
    b = verdicts(project)["test_b"]
    assert b["verdict"] == "AMBIGUOUS"
    assert "could not be confirmed (the confirmation session measured no t" in b["comparison"]["reason"]
    assert b["context"]["unconfirmed_regression"] == 1
    assert_compare_agrees(project)


def test_a_change_beyond_a_transient_fails_although_its_confirmation_could_not_run(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A confirmation that cannot run explains no more than a transient (1.5x): twice as slow fails anyway, saying
    it was not re-measured, and `gpuperf compare` reading the results keeps that verdict."""
    monkeypatch.setenv("SLOW_ATTEMPTS_b", "2")
    monkeypatch.setenv("SLOW_FACTOR", "2.0")
    monkeypatch.setenv("FAIL_IN_CHILD", "1")
    result = project.runpytest(*JUDGE)
    result.assert_outcomes(passed=1, failed=1)
    b = verdicts(project)["test_b"]
    assert b["verdict"] == "REGRESSED", b["comparison"]["reason"]
    assert "not re-measured; 2.00x worse, beyond the 1.50x worse" in b["comparison"]["reason"]
    assert b["context"]["unconfirmable"].startswith("the confirmation session measured no t")
    assert_compare_agrees(project)


TORCHRUN_PROJECT = """
import json, os, pytest
from pathlib import Path

@pytest.mark.perf
def test_step(perf):
    with open("ranks.jsonl", "a") as out:
        out.write(json.dumps({"pid": os.getpid(), "rank": os.environ.get("RANK")}) + "\\n")
    slow = float(os.environ.get("SLOW", "1.0"))
    once = Path("slowed-once")
    if os.environ.get("SLOW_ONCE") and os.environ.get("RANK") == "0":
        if once.exists():
            slow = 1.0  # the burst is over by the time the confirmation measures
        once.touch()
    perf.record("t", [slow * (1 + 0.001 * i) for i in range(10)], unit="s", higher_is_better=False)
"""


def _torchrun(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    import sys

    return pytester.run(
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "pytest",
        "-p", "no:cacheprovider", "-q", "--gpuperf-device", "cpu", "--gpuperf-run-noise", "0.1", *args,
        timeout=300,
    )  # fmt: skip


@pytest.mark.parametrize(("env", "regressed"), [({"SLOW": "1.5"}, True), ({"SLOW": "1.5", "SLOW_ONCE": "1"}, False)])
def test_a_regression_under_torchrun_is_confirmed_by_the_whole_job_relaunched(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], regressed: bool
) -> None:
    """Rank 0 of a 2-rank `torchrun -m pytest` job sees a REGRESSED: the job is launched again on this node, both
    ranks in fresh processes, and rank 0's figure there decides. 1.5x, within a transient's bound, fails only when
    the relaunched job repeats it."""
    pytest.importorskip("torch")
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_ranked=TORCHRUN_PROJECT)
    assert _torchrun(pytester, "--gpuperf-save").ret == 0
    (pytester.path / "ranks.jsonl").unlink()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    done = _torchrun(pytester, "--gpuperf-results", "run.json")
    out = done.stdout.str() + done.stderr.str()
    ranks = [json.loads(line) for line in (pytester.path / "ranks.jsonl").read_text().splitlines()]
    assert sorted(entry["rank"] for entry in ranks) == ["0", "0", "1", "1"], out  # the job, then the job again
    assert len({entry["pid"] for entry in ranks}) == 4
    (judged,) = json.loads((pytester.path / "run.json").read_text())["results"]
    reason = judged["comparison"]["reason"]
    assert judged["verdict"] == ("REGRESSED" if regressed else "PASS"), reason
    assert ("confirmed in 2 attempts" if regressed else "attempt 2 did not confirm it") in reason
    assert (done.ret != 0) is regressed, out


def test_confirm_zero_runs_each_test_once(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_a", "1")
    result = project.runpytest(*JUDGE, "--gpuperf-confirm", "0")
    result.assert_outcomes(passed=1, failed=1)
    assert len(seen(project, "a")) == 1


def test_confirmation_under_xdist(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_a", "1")
    monkeypatch.setenv("SLOW_ATTEMPTS_b", "2")
    result = project.runpytest(*JUDGE, "-n", "2")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*t: REGRESSED*(confirmed in 2 attempts)*"])
    judged = verdicts(project)
    assert judged["test_a"]["verdict"] == "PASS"
    assert "did not confirm" in judged["test_a"]["comparison"]["reason"]
    assert judged["test_b"]["verdict"] == "REGRESSED"
    assert len({entry["pid"] for entry in seen(project, "b")}) == 2
