"""A suspected regression is confirmed by running the whole test again through pytest's runtest protocol."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

# SLOW_ATTEMPTS_<test> attempts of a test run slow (a burst of load), later ones at speed. Each attempt records
# which fixture instances it saw, so the test can tell a fresh function-scoped fixture from a reused one.
PROJECT = """
import json, os, pytest
from pathlib import Path

SEEN = Path("seen.jsonl")
MODULE_SETUPS = []

@pytest.fixture(scope="module")
def shared():
    MODULE_SETUPS.append(1)
    yield len(MODULE_SETUPS)

@pytest.fixture
def scratch():
    return {"touched": False, "id": os.urandom(4).hex()}

def measure(name, perf, scratch, shared):
    # a test that changes its fixture's state: a reused instance would show it on the next attempt
    fresh = not scratch["touched"]
    scratch["touched"] = True
    seen = [json.loads(line) for line in SEEN.read_text().splitlines()] if SEEN.exists() else []
    attempt = 1 + sum(1 for entry in seen if entry["test"] == name)
    with SEEN.open("a") as out:
        out.write(json.dumps({"test": name, "fresh": fresh, "id": scratch["id"], "module_setups": shared}) + "\\n")
    slow = 1.3 if attempt <= int(os.environ.get("SLOW_ATTEMPTS_" + name, "0")) else 1.0
    perf.record("t", [slow * (1 + 0.001 * i) for i in range(10)], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_a(perf, scratch, shared):
    measure("a", perf, scratch, shared)

@pytest.mark.perf
def test_b(perf, scratch, shared):
    measure("b", perf, scratch, shared)
"""

JUDGE = ["--gpuperf-device", "cpu", "--gpuperf-run-noise", "0.1", "--gpuperf-results", "run.json"]


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_attempts=PROJECT)
    pytester.makeini("[pytest]\nmarkers =\n    perf: a gpuperf test (a project registers its own markers)\n")
    pytester.runpytest("--gpuperf-save", "--gpuperf-device", "cpu").assert_outcomes(passed=2)
    (pytester.path / "seen.jsonl").unlink()
    return pytester


def outcomes(result: pytest.RunResult) -> dict[str, int]:
    """The session's counts, re-runs included (assert_outcomes knows no "rerun")."""
    return result.parseoutcomes()


def seen(pytester: pytest.Pytester, test: str) -> list[dict[str, object]]:
    lines = (pytester.path / "seen.jsonl").read_text().splitlines()
    return [entry for entry in map(json.loads, lines) if entry["test"] == test]


def verdicts(pytester: pytest.Pytester) -> dict[str, dict[str, object]]:
    document = json.loads((pytester.path / "run.json").read_text())
    return {result["test"].rsplit("::", 1)[1]: result for result in document["results"]}


def test_recovered_attempt_gets_fresh_fixtures_and_reports_of_its_own(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_a", "1")
    result = project.runpytest(*JUDGE, "--junitxml", "junit.xml", "--durations", "0", "-vv")
    assert outcomes(result) == dict(passed=2, rerun=1)
    attempts = seen(project, "a")
    assert len(attempts) == 2
    assert all(entry["fresh"] for entry in attempts), attempts  # the second attempt did not inherit the state
    assert attempts[0]["id"] != attempts[1]["id"]
    assert {entry["module_setups"] for entry in attempts + seen(project, "b")} == {1}  # module fixture kept
    assert len(seen(project, "b")) == 1  # a test that passed at once runs once
    result.stdout.fnmatch_lines(["*test_a RERUN*", "*test_a PASSED*"])
    # each attempt is a call of its own for --durations
    assert len([line for line in result.stdout.lines if " call " in line and line.endswith("::test_a")]) == 2
    a = verdicts(project)["test_a"]
    assert a["verdict"] == "PASS"  # the verdict of the attempt that measured at speed
    assert "attempt 1 was REGRESSED, attempt 2 did not confirm it" in a["comparison"]["reason"]
    assert a["context"]["attempts"] == 2
    cases = ET.parse(project.path / "junit.xml").getroot().iter("testcase")
    assert sorted(case.get("name") for case in cases) == ["test_a", "test_b"]  # one test case per test


def test_confirmed_regression_fails_after_two_fresh_attempts(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_b", "2")
    result = project.runpytest(*JUDGE)
    assert outcomes(result) == dict(passed=1, failed=1, rerun=1)
    result.stdout.fnmatch_lines(["*t: REGRESSED*(confirmed in 2 attempts)*"])
    attempts = seen(project, "b")
    assert [entry["fresh"] for entry in attempts] == [True, True]
    assert verdicts(project)["test_b"]["verdict"] == "REGRESSED"


def test_confirm_zero_runs_each_test_once(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_a", "1")
    result = project.runpytest(*JUDGE, "--gpuperf-confirm", "0")
    result.assert_outcomes(passed=1, failed=1)
    assert len(seen(project, "a")) == 1


def test_confirmation_under_xdist(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLOW_ATTEMPTS_a", "1")
    monkeypatch.setenv("SLOW_ATTEMPTS_b", "2")
    result = project.runpytest(*JUDGE, "-n", "2")
    assert outcomes(result) == dict(passed=1, failed=1, rerun=2)
    result.stdout.fnmatch_lines(["*t: REGRESSED*(confirmed in 2 attempts)*"])
    judged = verdicts(project)
    assert judged["test_a"]["verdict"] == "PASS"
    assert "did not confirm" in judged["test_a"]["comparison"]["reason"]
    assert judged["test_b"]["verdict"] == "REGRESSED"
    assert all(entry["fresh"] for entry in seen(project, "a") + seen(project, "b"))
