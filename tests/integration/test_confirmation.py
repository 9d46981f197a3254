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
    slow = 1.3 if attempt <= int(os.environ.get("SLOW_ATTEMPTS_" + name, "0")) else 1.0
    perf.record("t", [slow * (1 + 0.001 * i) for i in range(10)], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_a(perf, shared):
    measure("a", perf, shared)

@pytest.mark.perf
def test_b(perf, shared):
    measure("b", perf, shared)
"""

JUDGE = ["--gpuperf-device", "cpu", "--gpuperf-run-noise", "0.1", "--gpuperf-results", "run.json"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_attempts=PROJECT)
    pytester.makeini("[pytest]\nmarkers =\n    perf: a gpuperf test (a project registers its own markers)\n")
    pytester.runpytest("--gpuperf-save", "--gpuperf-device", "cpu").assert_outcomes(passed=2)
    (pytester.path / "seen.jsonl").unlink()
    return pytester


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
