"""How small a change a job could have caught: its coverage, per suite and for the job.

Owns ``Coverage`` (per suite and for the job: how many metrics, the smallest change any of them could have read
REGRESSED, the change at least half of them could, and how many could catch nothing below 2x) and ``shortfalls``
(the suites that could not have caught a change of a given size, for --gpuperf-require-coverage, and why).
Invariants: pure, on the roll-up's rows; a metric that cannot be judged (no baseline, missing, NOISY for a reason
nothing bounds) catches nothing. Each metric's figure is
core/stats/unpaired.py ``detectable_change``. Imports core/verdict/rollup only.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pytest_gpuperf.core.verdict.rollup import UNDECIDED_BECAUSE, UNDECIDED_WHY, Row, suite_of

TWICE = 0.5
"""A change of 2x as a fraction worse: a time doubled or a rate halved (ratio 0.5)."""
JUDGEABLE = ("REGRESSED", "IMPROVED", "PASS", "AMBIGUOUS", "NOISY")
"""The verdicts whose figures could have read REGRESSED (a NOISY one beyond what made it doubtful, its figure
then says how far); any other verdict's metric catches nothing."""
TOO_WIDE = "too wide"
"""A shortfall's cause for a judged metric whose noise hides a change of the size asked for."""
NOT_MEASURED = "not measured"
"""A shortfall's cause for a suite whose collected perf tests measured nothing (each skipped, say)."""
CURES = {
    **{key: cure for key, (_, cure) in UNDECIDED_BECAUSE.items()},
    **{key: cure for key, (_, cure) in UNDECIDED_WHY.items()},
    TOO_WIDE: UNDECIDED_WHY["AMBIGUOUS"][1],
    NOT_MEASURED: "running its tests where they can run (pytest -rs says why each was skipped)",
}
"""What would let a metric that catches too little catch more, per cause (the roll-up's cures)."""


def judged(row: Row) -> bool:
    """Whether a metric's figures could have read REGRESSED at all (a NOISY one without a figure could not: nothing
    bounded what made it doubtful)."""
    return row.verdict in JUDGEABLE and (row.verdict != "NOISY" or row.detectable is not None)


def catchable(row: Row) -> float | None:
    """The smallest change (a fraction worse) a metric could have caught; None: none at all."""
    return row.detectable if judged(row) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """The coverage of a set of metrics (a suite's, the job's)."""

    metrics: int
    smallest: float | None
    """The smallest change any metric could have caught: a change of every metric (a slowdown of the whole suite)
    this size or larger fails the job. None: no metric could catch any change."""
    half: float | None
    """The smallest change at least half the metrics could have caught; None: half or more catch nothing."""
    beyond_twice: int
    """Metrics that could catch nothing below 2x (a time doubled, a rate halved): no baseline, NOISY, or noise
    that wide."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "metrics": self.metrics,
            "smallest": self.smallest,
            "half": self.half,
            "beyond_2x": self.beyond_twice,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Coverage:
    suites: dict[str, Figure]
    job: Figure

    def as_dict(self) -> dict[str, Any]:
        """The results document's ``coverage`` block: the job's figure, and each suite's under ``suites``."""
        return {**self.job.as_dict(), "suites": {suite: figure.as_dict() for suite, figure in self.suites.items()}}


@dataclass(frozen=True, slots=True, kw_only=True)
class Shortfall:
    """A suite that could not have caught a change of the size asked for."""

    suite: str
    figure: Figure
    causes: dict[str, int]
    """Why its metrics catch too little: a key of the roll-up's reasons (or ``TOO_WIDE``) -> how many metrics;
    ``NOT_MEASURED`` -> how many of its tests, where none measured anything."""

    @property
    def cure(self) -> str:
        """What would decide the most frequent cause."""
        top = min(self.causes.items(), key=lambda item: (-item[1], item[0]))[0] if self.causes else TOO_WIDE
        return CURES.get(top, CURES[TOO_WIDE])


def figure(changes: Iterable[float | None]) -> Figure:
    """The coverage of metrics that could catch these changes each (None: nothing)."""
    ordered = sorted(math.inf if change is None else change for change in changes)
    if not ordered:
        return Figure(metrics=0, smallest=None, half=None, beyond_twice=0)
    half = ordered[(len(ordered) - 1) // 2]  # ceil(n / 2) metrics catch this or less
    return Figure(
        metrics=len(ordered),
        smallest=ordered[0] if math.isfinite(ordered[0]) else None,
        half=half if math.isfinite(half) else None,
        beyond_twice=sum(change > TWICE for change in ordered),
    )


def build(rows: Iterable[Row]) -> Coverage:
    rows = list(rows)
    by_suite: dict[str, list[float | None]] = {}
    for row in rows:
        by_suite.setdefault(row.suite, []).append(catchable(row))
    return Coverage(
        suites={suite: figure(changes) for suite, changes in sorted(by_suite.items())},
        job=figure(catchable(row) for row in rows),
    )


def shortfalls(rows: Iterable[Row], change: float, planned: Iterable[str] = ()) -> list[Shortfall]:
    """The suites none of whose metrics could have caught a change of ``change`` (a fraction worse), with why;
    ``planned`` (the perf tests the job collected) adds each suite none of whose tests measured anything."""
    rows = list(rows)
    unmeasured: dict[str, int] = {}
    for test in planned:
        unmeasured[suite_of(test)] = unmeasured.get(suite_of(test), 0) + 1
    for suite in {row.suite for row in rows}:
        unmeasured.pop(suite, None)
    nothing = figure([])
    coverage = build(rows)
    short = []
    for suite, suite_figure in coverage.suites.items():
        if suite_figure.smallest is not None and suite_figure.smallest <= change:
            continue
        causes: dict[str, int] = {}
        for row in rows:
            if row.suite == suite:
                cause = (row.because or TOO_WIDE) if judged(row) else row.because or row.verdict
                causes[cause] = causes.get(cause, 0) + 1
        short.append(Shortfall(suite=suite, figure=suite_figure, causes=causes))
    short += [Shortfall(suite=suite, figure=nothing, causes={NOT_MEASURED: n}) for suite, n in unmeasured.items()]
    return sorted(short, key=lambda item: item.suite)
