"""Change points in a series of run medians: e-divisive means split, Student's t-test, then merge.

The method of Hunter (Fleming et al., ICPE 2023, arXiv:2301.03034; continued as Apache Otava) on E-Divisive
means (Matteson and James, JASA 2014): split each segment where the energy-distance statistic peaks while a
t-test between its sides gives p < split_pvalue, then merge back every candidate whose p exceeds max_pvalue,
least significant first, until every point stands. Why the pooled-variance t-test and a lenient split p:
docs/design/change-points.md. Pure numpy/scipy, no pytest, so it tests on synthetic series.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangePoint:
    index: int
    """Position of the first value of the new regime."""
    mean_before: float
    mean_after: float
    pvalue: float

    @property
    def magnitude(self) -> float:
        """Relative change of the segment means: after / before - 1."""
        return self.mean_after / self.mean_before - 1 if self.mean_before != 0 else math.inf


def split_point(values: np.ndarray, *, min_size: int = 2) -> tuple[int, float] | None:
    """The split (index into ``values``) maximising the e-divisive Q statistic (alpha = 1), with Q."""
    n = values.size
    if n < 2 * min_size:
        return None
    distances = np.abs(values[:, None] - values[None, :])
    prefix = np.zeros((n + 1, n + 1))
    prefix[1:, 1:] = distances.cumsum(0).cumsum(1)

    def block(a: int, b: int, c: int, d: int) -> float:
        return float(prefix[b, d] - prefix[a, d] - prefix[b, c] + prefix[a, c])

    best: tuple[int, float] | None = None
    for tau in range(min_size, n - min_size + 1):
        m, k = tau, n - tau
        between = 2 * block(0, tau, tau, n) / (m * k)
        within_a = block(0, tau, 0, tau) / (m * (m - 1)) if m > 1 else 0.0
        within_b = block(tau, n, tau, n) / (k * (k - 1)) if k > 1 else 0.0
        q = m * k / (m + k) * (between - within_a - within_b)
        if best is None or q > best[1]:
            best = (tau, q)
    return best


def t_test(before: np.ndarray, after: np.ndarray) -> float:
    """Two-sided Student's t-test p-value (pooled variance); two constant sides are 0 apart from equal means."""
    if before.size < 2 or after.size < 2:
        return 1.0
    if np.ptp(before) == 0 and np.ptp(after) == 0:
        return 1.0 if before[0] == after[0] else 0.0
    with warnings.catch_warnings():  # near-identical values: scipy warns, the p-value is still the answer
        warnings.simplefilter("ignore", RuntimeWarning)
        p = float(scipy_stats.ttest_ind(before, after, equal_var=True).pvalue)
    return 1.0 if math.isnan(p) else p


MAX_PVALUE = 0.001
"""The significance a split must reach to be kept (`gpuperf history --max-pvalue`)."""


def change_points(
    series: Sequence[float], *, max_pvalue: float = MAX_PVALUE, split_pvalue: float = 0.05, min_size: int = 2
) -> list[ChangePoint]:
    values = np.asarray(series, dtype=float)
    if values.ndim != 1 or not np.all(np.isfinite(values)):
        raise ValueError("a series must be a flat list of finite numbers")
    found: list[int] = []
    pending = [(0, values.size)]
    while pending:
        start, end = pending.pop()
        candidate = split_point(values[start:end], min_size=min_size)
        if candidate is None:
            continue
        tau = start + candidate[0]
        if t_test(values[start:tau], values[tau:end]) < max(split_pvalue, max_pvalue):
            found.append(tau)
            pending += [(start, tau), (tau, end)]
    points = sorted(found)
    while points:  # merge: drop the weakest point that no longer stands between its neighbours
        bounds = [0, *points, values.size]
        pvalues = [
            t_test(values[bounds[i] : bounds[i + 1]], values[bounds[i + 1] : bounds[i + 2]]) for i in range(len(points))
        ]
        weakest = int(np.argmax(pvalues))
        if pvalues[weakest] < max_pvalue:
            return [
                ChangePoint(
                    index=point,
                    mean_before=float(values[bounds[i] : point].mean()),
                    mean_after=float(values[point : bounds[i + 2]].mean()),
                    pvalue=pvalues[i],
                )
                for i, point in enumerate(points)
            ]
        points.pop(weakest)
    return []
