"""The progress text of `gpuperf ab`: one line per complete pair (pairs run, metrics decided, time used and an
estimate of the time left), and the typical time of a pair that the estimate and the budget check use.

Text and arithmetic only; the engine hands each line to its ``progress`` callable (cli/ab.py prints it). May
import ab/model.py; never cli/.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

from pytest_gpuperf.ab.model import AbResult, PairRecord

Progress = Callable[[str], None]
"""Where the engine's progress lines go (one line each, no newline)."""


def typical(seconds: list[float]) -> float:
    """A pair's typical duration: the median of the last four."""
    return statistics.median(seconds[-4:])


def progress_line(pair: PairRecord, result: AbResult, decided: int, pair_seconds: Sequence[float]) -> str:
    """The line said after a complete pair: pairs run, metrics decided, time used and ~time left."""
    assert result.rules is not None
    total = sum(1 for m in result.metrics.values() if not m.missing)
    pending = [m for m in result.metrics.values() if not m.decided and not m.missing]
    done = result.complete_pairs
    wanted = [
        min(result.rules.max_pairs, max(result.rules.min_pairs, m.judgement.needed_pairs or result.rules.max_pairs))
        if m.judgement
        else result.rules.max_pairs
        for m in pending
    ]
    left_pairs = max([w - done for w in wanted] + [0])
    left = left_pairs * typical(list(pair_seconds))
    if result.plan.budget_s is not None:
        left = min(left, max(0.0, result.plan.budget_s - result.wall_s))
    extra = done - result.rules.max_pairs
    count = (
        f"{result.rules.max_pairs}/{result.rules.max_pairs} + {extra}"
        if extra > 0
        else f"{done}/{result.rules.max_pairs}"
    )
    return (
        f"pair {count} ({pair.order}): {decided}/{total} metrics decided, "
        f"{_duration(result.wall_s)} used, ~{_duration(left)} left"
    )


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
