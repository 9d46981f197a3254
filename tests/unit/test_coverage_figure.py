"""The job's coverage from the roll-up's rows (core/verdict/coverage.py): which metrics catch what, the figures of
a suite and of the job, and the suites a required coverage finds short, with why."""

from __future__ import annotations

from pytest_gpuperf.core.verdict import coverage
from pytest_gpuperf.core.verdict.rollup import Row


def row(test: str, verdict: str, detectable: float | None, because: str | None = None) -> Row:
    return Row(test=test, metric="m", verdict=verdict, detectable=detectable, because=because)


ROWS = [
    row("suites/test_micro.py::test_gemm[a]", "PASS", 0.03),
    row("suites/test_micro.py::test_gemm[b]", "AMBIGUOUS", 0.6),  # judged, but catches nothing below 2x
    row("suites/test_micro.py::test_gemm[c]", "NOISY", 0.02, "too noisy"),  # beyond what its spread explains
    row("suites/test_micro.py::test_gemm[d]", "NOISY", None, "unjudgeable"),  # nothing bounds it: catches nothing
    row("suites/test_training.py::test_step", "AMBIGUOUS", 0.04, "another machine"),
    row("suites/test_training.py::test_loss", "NO_BASELINE", None),
]


def test_a_metric_that_cannot_be_judged_catches_nothing_whatever_its_figure() -> None:
    """A NOISY metric's figure is the change beyond what made it doubtful (core/verdict/stored.py); without one,
    nothing bounds the doubt and it catches nothing. Another machine's baseline is judged with the prior spread."""
    assert [coverage.catchable(r) for r in ROWS] == [0.03, 0.6, 0.02, None, 0.04, None]
    assert coverage.catchable(row("t.py::x", "MISSING", 0.01)) is None


def test_the_figures_of_each_suite_and_of_the_job() -> None:
    figures = coverage.build(ROWS)
    micro, training = figures.suites["test_micro.py"], figures.suites["test_training.py"]
    assert (micro.metrics, micro.smallest, micro.half, micro.beyond_twice) == (4, 0.02, 0.03, 2)
    assert (training.metrics, training.smallest, training.half, training.beyond_twice) == (2, 0.04, 0.04, 1)
    job = figures.job
    assert (job.metrics, job.smallest, job.half, job.beyond_twice) == (6, 0.02, 0.04, 3)
    micro_block = {"metrics": 4, "smallest": 0.02, "half": 0.03, "beyond_2x": 2}
    assert figures.as_dict()["suites"]["test_micro.py"] == micro_block
    assert coverage.figure([]) == coverage.Figure(metrics=0, smallest=None, half=None, beyond_twice=0)


def test_a_required_coverage_names_the_short_suites_with_their_causes_and_cure() -> None:
    assert [s.suite for s in coverage.shortfalls(ROWS, 0.03)] == ["test_training.py"]
    [micro, training] = coverage.shortfalls(ROWS, 0.01)
    assert micro.causes == {"too wide": 2, "too noisy": 1, "unjudgeable": 1} and "--gpuperf-repeats" in micro.cure
    assert training.causes == {"another machine": 1, "NO_BASELINE": 1}
    planned = ["suites/test_micro.py::test_gemm[a]", "suites/test_infer.py::test_a", "suites/test_infer.py::test_b"]
    [infer, _] = coverage.shortfalls(ROWS, 0.03, planned)
    assert infer.suite == "test_infer.py" and infer.figure.metrics == 0 and infer.causes == {"not measured": 2}
