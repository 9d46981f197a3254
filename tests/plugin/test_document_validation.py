"""One validator for the documents gpuperf writes (baseline files, results files), used by the plugin and the
command line alike; one owner of the results format; one owner of the clock check (issue 16.4, 12.5)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.cli.loading import InputError, parse_results_json
from pytest_gpuperf.cli.main import main as gpuperf
from pytest_gpuperf.core.store import results as results_format
from pytest_gpuperf.core.store.baselines import StoreError, read_document

RUN = {"samples": [1.0, 2.0, 3.0], "summary": {}, "stack": {"torch": "2.13.0"}, "date": "2026-01-01"}
CURVE_RUN = {"steps": [0, 1], "values": [2.0, 1.0], "stack": {"torch": "2.13.0"}, "date": "2026-01-01"}


def baseline(metric_run: Any = None, *, metrics: Any = None, curves: Any = None) -> str:
    entry: dict[str, Any] = {
        "metrics": metrics
        if metrics is not None
        else {"m": {"unit": "s", "higher_is_better": False, "runs": [metric_run or RUN]}},
        "curves": curves if curves is not None else {"loss": {"runs": [CURVE_RUN]}},
    }
    return json.dumps({"schema": 1, "hardware_key": {"device": "cpu"}, "tests": {"t": entry}})


DEEP = '{"schema": 1, "hardware_key": ' + "[" * 100_000 + "]" * 100_000 + ', "tests": {}}'
BAD_BASELINES = {
    "metrics-list": (baseline(metrics=[1, 2]), "'metrics' is a list, not an object"),
    "curves-list": (baseline(curves=[1]), "'curves' is a list, not an object"),
    "integer-steps": (baseline(curves={"loss": {"runs": [{**CURVE_RUN, "steps": 3}]}}), "'steps' is a number"),
    "string-steps": (baseline(curves={"loss": {"runs": [{**CURVE_RUN, "steps": ["a", "b"]}]}}), "whole numbers"),
    "huge-integer": (baseline({**RUN, "samples": [10**400, 1, 2]}), "an integer of 401 digits"),
    "huge-float": (baseline({**RUN, "samples": [1e300, 1, 2]}), "between 1e-100 and 1e+100"),
    "deep": (DEEP, "nested too deeply"),
    "zero-sample": (baseline({**RUN, "samples": [0, 1, 2]}), "positive"),
    "negative-sample": (baseline({**RUN, "samples": [-1, 1, 2]}), "positive"),
    "stack-list": (baseline({**RUN, "stack": ["torch"]}), "'stack' is a list, not an object"),
    "stack-nested": (baseline({**RUN, "stack": {"torch": {"v": 1}}}), "component versions"),
    "curve-stack": (baseline(curves={"loss": {"runs": [{**CURVE_RUN, "stack": 1}]}}), "'stack' is a number"),
    "summary-list": (baseline({**RUN, "summary": []}), "'summary' is a list"),
    "date-number": (baseline({**RUN, "date": 5}), "'date' is a number"),
}


@pytest.mark.parametrize("case", sorted(BAD_BASELINES))
def test_bad_baseline_files_are_one_line_errors_naming_the_file(tmp_path: Path, case: str) -> None:
    content, problem = BAD_BASELINES[case]
    path = tmp_path / "cpu-x" / "m.json"
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(StoreError) as raised:
        read_document(path)
    message = str(raised.value)
    assert problem in message and str(path) in message and "\n" not in message and len(message) < 500


@pytest.mark.parametrize("case", ["metrics-list", "integer-steps", "huge-integer", "deep", "zero-sample"])
def test_a_bad_baseline_stops_the_session_as_a_usage_error(pytester: pytest.Pytester, case: str) -> None:
    content, problem = BAD_BASELINES[case]
    path = pytester.path / "baselines" / "cpu-x" / "m.json"
    path.parent.mkdir(parents=True)
    path.write_text(content)
    pytester.makepyfile("def test_x(perf): pass")  # the folder is checked in runs that use the plugin
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: baseline file {path} *{problem}*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("case", ["curves-list", "string-steps", "huge-float", "deep", "negative-sample"])
def test_a_bad_baseline_is_exit_2_in_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    content, problem = BAD_BASELINES[case]
    good, bad = tmp_path / "good" / "cpu-x", tmp_path / "bad" / "cpu-x"
    good.mkdir(parents=True)
    bad.mkdir(parents=True)
    (good / "m.json").write_text(baseline())
    (bad / "m.json").write_text(content)
    assert gpuperf(["baselines", "diff", str(good.parent), str(bad.parent)]) == 2
    error = capsys.readouterr().err
    assert problem in error and str(bad / "m.json") in error and error.count("\n") == 1


# -- the results document: written by one module, read back by the same one ----------------------------------


def results_document(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "schema": 1,
        "tool": {"name": "pytest-gpuperf", "version": "0"},
        "created": "2026-01-01T00:00:00+00:00",
        "fingerprint": {"hardware_key": {"device": "cpu"}, "hardware_slug": "cpu-x", "stack": {"torch": "2.13.0"}},
        "telemetry_note": None,
        "settings": {"threshold": 0.03},
        "results": [
            {"test": "m.py::t", "metric": "m", "unit": "s", "higher_is_better": False, "samples": [1.0, 2.0, 3.0]}
        ],
        "curves": [{"test": "m.py::t", "name": "loss", "steps": [0, 1], "values": [2.0, 1.0]}],
    }
    document.update(changes)
    return document


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        (json.dumps(results_document(results={"a": 1})), "'results' is an object, not a list"),
        (json.dumps(results_document(curves=[{"test": "m.py::t", "name": "l", "steps": 2, "values": [1]}])), "steps"),
        (
            json.dumps(results_document()).replace("[1.0, 2.0, 3.0]", "[" + "9" * 400 + ", 1, 2]"),
            "400 digits",
        ),
        (json.dumps(results_document()).replace("[1.0, 2.0, 3.0]", "[0, 1, 2]"), "positive"),
        ('{"schema": 1, "schema": 1}', "key 'schema' appears twice"),
        ('{"schema": 1, "x": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (
            json.dumps(results_document(fingerprint={"hardware_key": {}, "hardware_slug": "../x", "stack": {}})),
            "hardware_slug",
        ),
    ],
)
def test_bad_results_files_are_one_line_errors(text: str, problem: str) -> None:
    with pytest.raises(InputError) as raised:
        parse_results_json(text.encode(), Path("run.json"))
    message = str(raised.value)
    assert message.startswith("run.json: ") and problem in message and "\n" not in message


def test_what_the_session_writes_is_what_the_readers_accept(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_m="""
        import pytest
        @pytest.mark.perf
        def test_t(perf):
            perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False, context={"note": "x"})
            perf.record_curve("loss", [0, 1, 2], [3.0, 2.0, 1.0])
        """
    )
    pytester.runpytest("--gpuperf-device", "cpu", "--gpuperf-results", "run.json").assert_outcomes(passed=1)
    path = pytester.path / "run.json"
    document = results_format.parse_document(path.read_bytes(), where=str(path))
    assert document["schema"] == results_format.SCHEMA_VERSION
    run = parse_results_json(path.read_bytes(), path)
    [(key, metric)] = run.metrics.items()
    assert key == ("test_m::test_t", "t") and metric.context["note"] == "x" and metric.verdict == "NO_BASELINE"
    [curve] = run.curves
    assert curve.steps == (0.0, 1.0, 2.0)


def test_one_owner_per_format_name() -> None:
    from pytest_gpuperf.cli import loading
    from pytest_gpuperf.core.session import junit, report, session

    assert loading.FINGERPRINT_PROPERTY is results_format.FINGERPRINT_PROPERTY is junit.FINGERPRINT_PROPERTY
    assert session.MetricResult is results_format.MetricResult
    assert report.junit_properties is results_format.junit_properties


def test_the_clock_check_has_one_owner() -> None:
    """perf.py and session.py ask telemetry.py; neither restates the rule."""
    root = Path(__file__).resolve().parents[2] / "pytest_gpuperf"
    for name in ("core/record/perf.py", "core/session/session.py"):
        source = (root / name).read_text()
        assert "compare_clocks(" not in source and "check_conditions" in source, name
