"""The end of a session tells the truth about what it kept (issue 38, items 11 and 12).

A full disk must not be summarised as "44 of 44 measurements saved", and Ctrl-C while the results file is written
is an interrupted session (exit 2), not a usage error (exit 4).
"""

from __future__ import annotations

import errno
import json
from pathlib import Path
from typing import Any

import pytest

import pytest_gpuperf.core.session.session as session
import pytest_gpuperf.core.store.baselines as store

THREE_MODULES = {
    f"test_{name}": """
import pytest

@pytest.mark.perf
def test_one(perf):
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)
    perf.record("m", [3.0, 3.0, 3.0], unit="MiB", higher_is_better=False)

@pytest.mark.perf
def test_two(perf):
    perf.record("t", [2.0, 2.01, 1.99, 2.0, 2.02], unit="s", higher_is_better=False)
"""
    for name in ("a", "b", "c")
}


def fill_the_disk(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every baseline file but test_a's meets a full disk (the store writes each through store.write_atomic)."""
    real = store.write_atomic

    def full(path: Path, document: dict[str, Any]) -> None:
        if path.parent.parent.name == "baselines" and path.name != "test_a.json":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        real(path, document)

    monkeypatch.setattr(store, "write_atomic", full)


def press_ctrl_c_on_the_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C arrives while --gpuperf-results is written (core/session/session.py holds its own name for
    write_atomic)."""

    def interrupted(path: Path, document: dict[str, Any]) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(session, "write_atomic", interrupted)


def run_project(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester.runpytest_inprocess("-m", "perf", "--gpuperf-device", "cpu", *args)


def test_measurements_in_files_that_could_not_be_written_are_not_counted_as_saved(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(**THREE_MODULES)
    fill_the_disk(monkeypatch)
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output
    result.assert_outcomes(passed=6)
    # 9 measurements: 3 in test_a.json (written), 6 in test_b.json and test_c.json (disk full)
    result.stdout.fnmatch_lines(
        [
            "baselines: 3 of 9 measurements saved, 6 not saved (their 2 baseline files could not be written: "
            "No space left on device)",
            "*gpuperf: baselines not saved: *test_b.json: No space left on device (3 measurements)",
            "*gpuperf: baselines not saved: *test_c.json: No space left on device (3 measurements)",
        ]
    )
    assert "9 of 9 measurements saved" not in output
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert json.loads((pytester.path / "run.json").read_text())["results"]  # the results are still written


def test_a_written_save_still_counts_every_measurement(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(**THREE_MODULES)
    result = run_project(pytester, "--gpuperf-save")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(["baselines: 9 of 9 measurements saved"])
    assert "not saved" not in result.stdout.str()
    assert result.ret == pytest.ExitCode.OK


def test_ctrl_c_while_the_results_are_written_exits_as_interrupted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_a=THREE_MODULES["test_a"])
    press_ctrl_c_on_the_results(monkeypatch)
    result = run_project(pytester, "--gpuperf-results", "run.json")
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "raise KeyboardInterrupt" not in output
    result.stdout.fnmatch_lines(["*gpuperf: results not written: *run.json: interrupted (Ctrl-C)*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert not (pytester.path / "run.json").exists()
    assert not list(pytester.path.glob(".run.json.*.tmp"))


def test_ctrl_c_while_the_results_are_written_after_a_save_keeps_the_baselines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_a=THREE_MODULES["test_a"])
    press_ctrl_c_on_the_results(monkeypatch)
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["baselines: 3 of 3 measurements saved", "*results not written: *interrupted*"])
    [saved] = (pytester.path / "baselines").glob("*/test_a.json")
    assert json.loads(saved.read_text())["tests"]


# -- found by benchmarks/malformed_inputs.py: a context that is itself a tensor or an array ------------------------


@pytest.mark.parametrize("make", ["torch.tensor([1, 2])", "torch.tensor([])", "np.array([1, 2])"])
def test_a_context_that_is_a_tensor_or_an_array_is_refused_naming_the_call(make: str) -> None:
    np = pytest.importorskip("numpy")
    torch = pytest.importorskip("torch")
    from session_settings import cpu_settings

    from pytest_gpuperf.core.record.perf import Perf

    perf = Perf(
        nodeid="m.py::t",
        device="cpu",
        settings=cpu_settings(Path(".")),
        noise_limit=0.1,
    )
    context = eval(make, {"torch": torch, "np": np})  # noqa: S307 - the test's own literals
    with pytest.raises(ValueError, match=r"perf\.record\('t'\) in m\.py::t: context is"):
        perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False, context=context)
