"""Coverage is a figure of every job: the smallest change each suite, and the job, could have caught, in the
summary, the results and JUnit; and --gpuperf-require-coverage fails a gating job whose suites could not have caught
a change of the size asked for, naming them and what would decide them."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ElementTree

import pytest

# Two suites: test_steady's metric varies a few tenths of a percent; test_wild's is past the noise limit (NOISY).
STEADY = """
import random, pytest

@pytest.mark.perf
def test_step(perf):
    perf.record("step", [1 + 0.001 * i + 0.001 * random.random() for i in range(15)], unit="s",
                higher_is_better=False)
"""
WILD = """
import random, pytest

@pytest.mark.perf
def test_jitter(perf):
    perf.record("jitter", [random.choice([1.0, 2.0, 3.0]) * (1 + 0.01 * random.random()) for _ in range(15)],
                unit="s", higher_is_better=False)
"""
BASE = ["-p", "no:cacheprovider", "--gpuperf-device", "cpu", "--gpuperf-run-noise", "1", "--gpuperf-machine-check",
        "off", "--gpuperf-remeasure", "0", "--gpuperf-extend", "0"]  # fmt: skip


@pytest.fixture
def recorded(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_steady=STEADY, test_wild=WILD)
    for _ in range(2):
        pytester.runpytest(*BASE, "--gpuperf-save").assert_outcomes(passed=2)
    return pytester


def test_the_figure_is_in_the_summary_the_results_and_junit(recorded: pytest.Pytester) -> None:
    result = recorded.runpytest(*BASE, "--gpuperf-results", "run.json", "--junitxml", "junit.xml")
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.OK  # the figure is reported; without the policy it fails nothing
    result.stdout.fnmatch_lines(
        [
            "coverage: the smallest change for the worse each suite could have caught in any metric*",
            "coverage: suite * any metric * half of them * nothing below 2x",
            "test_steady.py * [0-9].[0-9]% * [0-9].[0-9]% * 0 of 1",
            "test_wild.py * [0-9]*x * [0-9]*x * 1 of 1",  # only a change beyond what its wide spread explains
            "job * [0-9].[0-9]% * [0-9].[0-9]% * 1 of 2",  # one of two metrics is half of them
        ]
    )
    document = json.loads((recorded.path / "run.json").read_text())
    block = document["coverage"]
    steady = block["suites"]["test_steady.py"]
    assert block["metrics"] == 2 and block["beyond_2x"] == 1
    assert 0.02 <= steady["smallest"] < 0.10 and steady["smallest"] == block["smallest"] == block["half"]
    wild = block["suites"]["test_wild.py"]
    assert wild["metrics"] == 1 and wild["smallest"] > 0.5 and wild["beyond_2x"] == 1
    assert block["required"] is None and block["short"] == []
    (steady_result,) = [r for r in document["results"] if r["metric"] == "step"]
    assert steady_result["comparison"]["detectable"] == steady["smallest"]
    root = ElementTree.parse(recorded.path / "junit.xml").getroot()
    suite_properties = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert float(suite_properties["gpuperf.coverage.smallest"]) == pytest.approx(steady["smallest"])
    assert suite_properties["gpuperf.coverage.beyond_2x"] == "1"
    assert float(suite_properties["gpuperf.coverage.suite.test_wild.py.smallest"]) > 0.5
    assert float(suite_properties["gpuperf.step.detectable"]) == pytest.approx(steady["smallest"], abs=1e-6)


def test_the_policy_fails_a_job_below_coverage_and_passes_one_above(recorded: pytest.Pytester) -> None:
    above = recorded.runpytest(*BASE, "--gpuperf-require-coverage", "40", "-p", "no:randomly", "-k", "steady")
    above.assert_outcomes(passed=1)
    assert above.ret == pytest.ExitCode.OK

    below = recorded.runpytest(*BASE, "--gpuperf-require-coverage", "40", "--gpuperf-results", "run.json")
    below.assert_outcomes(passed=2)  # every test passed; the job fails for what it could not have caught
    assert below.ret == pytest.ExitCode.TESTS_FAILED
    below.stdout.fnmatch_lines(
        [
            "gpuperf: coverage below --gpuperf-require-coverage 40.0%: 1 of 2 suite(s) could not have caught a 40.0%*",
            "*test_wild.py: its best metric catches * (1 metric: 1 too noisy); decided by a quiet machine*",
            "*record baselines on this machine with --gpuperf-save*",
            "*`gpuperf ab`",
        ]
    )
    assert "test_steady.py: its best" not in below.stdout.str()
    block = json.loads((recorded.path / "run.json").read_text())["coverage"]
    assert block["required"] == 0.40 and block["short"] == ["test_wild.py"]


def test_a_job_without_baselines_is_told_to_record_them(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_steady=STEADY)
    pytester.makeini("[pytest]\ngpuperf_require_coverage = 10\n")
    result = pytester.runpytest(*BASE)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*test_steady.py: its best metric catches nothing (1 metric: 1 no baseline); decided*",
                                 "*--gpuperf-save"])  # fmt: skip


def test_a_job_whose_perf_tests_measured_nothing_could_have_caught_nothing(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_skipped="import pytest\n\n@pytest.mark.perf\ndef test_step(perf):\n    pytest.skip('no GPU')\n"
    )
    assert pytester.runpytest(*BASE).ret == pytest.ExitCode.OK  # the figure alone fails nothing
    result = pytester.runpytest(*BASE, "--gpuperf-require-coverage", "10")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*test_skipped.py: no metric measured (1 perf test collected); decided by running its*"]
    )


def test_recording_baselines_is_not_gated_by_coverage(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_steady=STEADY)
    result = pytester.runpytest(*BASE, "--gpuperf-save", "--gpuperf-require-coverage", "10")
    assert result.ret == pytest.ExitCode.OK
    assert "coverage below" not in result.stdout.str()


@pytest.mark.parametrize("value", ["abc", "-5", "0", "100"])
def test_a_bad_value_is_refused_with_where_it_came_from(pytester: pytest.Pytester, value: str) -> None:
    pytester.makepyfile(test_steady=STEADY)
    result = pytester.runpytest(*BASE, f"--gpuperf-require-coverage={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*Invalid value '{value}' from --gpuperf-require-coverage: expected a percentage*"])


def test_a_bad_environment_value_names_its_variable(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_steady=STEADY)
    monkeypatch.setenv("GPUPERF_REQUIRE_COVERAGE", "lots")
    result = pytester.runpytest(*BASE)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Invalid value 'lots' from environment variable GPUPERF_REQUIRE_COVERAGE*"])
