"""The stored path of operator profiles (core/record/profiling.py): a baseline saved with --gpuperf-profile keeps
each test's operator summary beside its samples, and a later profiled run whose verdict is a change names the
operators that moved, in the results, the terminal, `gpuperf compare` and `gpuperf report`."""

from __future__ import annotations

import io
import json

import pytest

from pytest_gpuperf.cli import main as cli

# test_slow runs its matrix product 1 + EXTRA_MM times: a real operator made 3x slower, no sleep. One thread: on a
# shared two-core machine torch's second thread waits for the busy core and a 96x96 product takes milliseconds.
# The sessions run in this process (torch is imported once); the regression is not confirmed in a fresh one.
WORKLOAD = """
import os
import pytest
import torch

A = torch.randn(96, 96)

@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)  # pytester runs this session in the test's own process

def step(extra):
    for _ in range(1 + extra):
        torch.mm(A, A)
    torch.relu(A + 1.0)

def test_slow(perf):
    extra = int(os.environ.get("EXTRA_MM", "0"))
    perf.measure("step_s", lambda: step(extra), warmup=1, repeats=15)

def test_same(perf):
    perf.measure("step_s", lambda: step(0), warmup=1, repeats=15)
"""

ARGS = ("-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", "--gpuperf-device", "cpu",
        "--gpuperf-machine-check", "off", "--gpuperf-confirm", "0", "--gpuperf-extend", "0")  # fmt: skip


@pytest.fixture
def imported_first() -> None:
    """torch.profiler, matplotlib (`gpuperf report`) and what a profile and a drawn figure import on first use,
    imported before pytester's snapshot of the modules: imported inside it, they would be removed after this test,
    and the next test of this process would register torch's libraries twice or mix two matplotlibs."""
    profiler = pytest.importorskip("torch.profiler")
    with profiler.profile(activities=[profiler.ProfilerActivity.CPU]) as prof:
        pytest.importorskip("torch").ones(2).add_(1)
    prof.key_averages(), prof.events()
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, _ = plt.subplots()
    figure.savefig(io.BytesIO(), format="png")
    plt.close(figure)


def test_a_regression_against_a_profiled_baseline_names_the_operator_that_moved(
    imported_first: None, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ONEDNN_VERBOSE", "1")  # what the profiler sets, undone after this test
    pytester.makepyfile(test_ops=WORKLOAD)
    saved = pytester.runpytest(*ARGS, "--gpuperf-save", "--gpuperf-profile", "base-ops.json",
                                          "--gpuperf-results", "base.json")  # fmt: skip
    saved.assert_outcomes(passed=2)
    [store] = (pytester.path / "baselines").glob("*/test_ops.json")
    stored = json.loads(store.read_text())["tests"]["test_slow"]["metrics"]["step_s"]["runs"][0]["context"]
    assert "aten::mm" in [op["name"] for op in stored["profile"]["ops"]]
    summary_size = len(json.dumps(stored["profile"]))
    assert summary_size < 20_000, summary_size  # a few kilobytes per test and run

    monkeypatch.setenv("EXTRA_MM", "2")
    run = pytester.runpytest(*ARGS, "--gpuperf-profile", "ops.json", "--gpuperf-results", "new.json")
    results = {entry["test"]: entry for entry in json.loads((pytester.path / "new.json").read_text())["results"]}
    slow, same = results["test_ops.py::test_slow"], results["test_ops.py::test_same"]
    assert slow["verdict"] == "REGRESSED", slow["comparison"]["reason"]
    assert "profile_note" not in slow["context"]  # both sides profiled: nothing to warn of
    diff = slow["context"]["profile_diff"]
    assert diff["movers"][0] == "aten::mm" and diff["ops"][0]["name"] == "aten::mm"
    mm = diff["ops"][0]  # per timed call of the test, whatever rounds each session took: 1 product -> 3
    assert mm["b_count"] / diff["b_calls"] == 3 * mm["a_count"] / diff["a_calls"] and mm["share"] > 0.5
    run.stdout.fnmatch_lines(
        ["moved (baseline -> this run, both profiled*", "  test_ops.py::test_slow: aten::mm carries *"]
    )
    run.stdout.fnmatch_lines(["*moved: test_ops.py::test_slow: aten::mm carries *"])  # the failure message too
    # the unchanged test was profiled on both sides too: its diff is kept, its product still once per timed call,
    # and, unless a burst of this shared machine's load made its verdict a change (one baseline run, no
    # confirmation here), nothing is named as moved
    same_diff = same["context"]["profile_diff"]
    same_mm = next(op for op in same_diff["ops"] if op["name"] == "aten::mm")
    assert same_mm["a_count"] / same_diff["a_calls"] == same_mm["b_count"] / same_diff["b_calls"] == 1
    if same["verdict"] not in ("REGRESSED", "IMPROVED"):
        assert same_diff["movers"] == []
        assert not [line for line in run.stdout.lines if "test_same: " in line and " carries " in line]

    capsys.readouterr()  # what the sessions above printed
    code = cli.main(["compare", str(pytester.path / "base.json"), str(pytester.path / "new.json")])
    out = capsys.readouterr().out
    assert code == 1 and "test_ops.py::test_slow: aten::mm carries " in out, out
    assert "measured under --gpuperf-profile" not in out  # both sides profiled
    assert cli.main(["report", str(pytester.path / "new.json"), "-o", str(pytester.path / "r.html")]) == 0
    page = (pytester.path / "r.html").read_text()
    assert "<h3>test_ops.py::test_slow step_s: REGRESSED</h3>" in page and '<td class="">aten::mm</td>' in page
    assert same["verdict"] in ("REGRESSED", "IMPROVED") or "<h3>test_ops.py::test_same" not in page
