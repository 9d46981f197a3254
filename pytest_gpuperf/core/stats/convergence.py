"""Convergence statistics: pure functions on loss curves from several seeds (no pytest, no torch).

Owns ``check_curve`` (the seeds' smoothed loss curve against the golden band of the reference seeds, a per-step
t interval with a floor), ``compare_steps`` (steps to target, MLPerf's olympic-mean one-sided t-test, which also
rejects converging significantly faster), ``steps_to_target`` and ``smooth``. Invariants: step i depends only on
steps <= i; the target is never guessed (the corpus's loss floor plus a margin). Its checks say PASS, SLOWER,
FASTER, NOT_CONVERGED or NO_REFERENCE of the steps; core/verdict/judge.py (``StepsToTarget``, ``CurveMatch``)
turns them into Verdicts. Imports only core/stats/. Rationale: docs/design/convergence-checks.md.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

__all__ = [
    "CurveCheck",
    "StepsCheck",
    "StepsOutcome",
    "check_curve",
    "compare_steps",
    "olympic_mean",
    "smooth",
    "steps_to_target",
]


def smooth(values: Sequence[float], window: int) -> np.ndarray:
    """Trailing mean over the last ``window`` values (fewer at the start): step ``i`` uses steps ``<= i`` only,
    so "reached at step i" never depends on later steps."""
    array = np.asarray(values, dtype=float)
    if window < 1:
        raise ValueError(f"smooth: window must be >= 1, got {window}")
    cumulative = np.concatenate(([0.0], np.cumsum(array)))
    index = np.arange(1, array.size + 1)
    start = np.maximum(index - window, 0)
    return (cumulative[index] - cumulative[start]) / (index - start)


def steps_to_target(losses: Sequence[float], target: float, *, window: int) -> int | None:
    """Optimizer steps taken when the trailing mean of ``window`` losses first reaches ``target`` (the 1-based
    count, so it is comparable to a step budget), or None if it never does."""
    if not losses:
        return None
    smoothed = smooth(losses, window)
    hits = np.flatnonzero(smoothed <= target)
    # A trailing mean over fewer than `window` steps is too noisy to call a hit: start at a full window.
    hits = hits[hits >= min(window, len(losses)) - 1]
    return int(hits[0]) + 1 if hits.size else None


def olympic_mean(values: Sequence[float]) -> float:
    """Mean without the single best and worst value (MLPerf's olympic scoring); the plain mean below 3 values."""
    ordered = sorted(float(v) for v in values)
    if not ordered:
        raise ValueError("olympic_mean: no values")
    if len(ordered) >= 3:
        ordered = ordered[1:-1]
    return float(np.mean(ordered))


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveCheck:
    """The verdict of a loss curve against its golden band."""

    passed: bool
    worst_step: int | None
    """Step (index into the curve) where the current mean left the band by the most, relative to its width."""
    deviation: float
    """Current minus reference mean at ``worst_step`` (nats; positive: the current loss is higher)."""
    tolerance: float
    """Half-width of the band at ``worst_step``."""
    outside: int
    """How many steps after warm-up lie outside the band."""
    checked: int
    """How many steps were checked."""
    message: str


def check_curve(
    current: Sequence[Sequence[float]],
    reference: Sequence[Sequence[float]],
    *,
    warmup: int,
    window: int = 10,
    alpha: float = 0.01,
    rel_floor: float = 0.005,
    abs_floor: float = 1e-3,
) -> CurveCheck:
    """Judge the mean of the ``current`` seeds' curves against the ``reference`` seeds' band (module docstring).

    ``k`` is the two-sided critical value of Student's t with ``n_ref - 1`` degrees of freedom at ``alpha``
    divided among the ``window``-step stretches checked (Bonferroni: a curve of 180 checked steps makes 18
    roughly independent tests, and without the correction an unchanged workload on fresh seeds left the band in
    16% of synthetic trials). The reference sd comes from few seeds (3 seeds: 2 degrees of freedom), which is
    why the t quantile, not a normal one, is used.
    Curves are compared over their common length; steps before ``warmup`` are not checked (early loss falls
    steeply and the seeds' spread there says little about numerics).
    """
    if len(reference) < 2:
        raise ValueError(f"check_curve: need at least 2 reference curves to derive a tolerance, got {len(reference)}")
    if not current:
        raise ValueError("check_curve: no current curves")
    length = min(len(c) for c in (*current, *reference))
    if length <= warmup:
        raise ValueError(f"check_curve: curves of {length} steps leave nothing after warm-up {warmup}")
    ref = np.stack([smooth(c[:length], window) for c in reference])
    cur = np.stack([smooth(c[:length], window) for c in current])
    mean_ref = ref.mean(0)
    sd_ref = ref.std(0, ddof=1)
    mean_cur = cur.mean(0)
    scale = math.sqrt(1 / len(reference) + 1 / len(current))
    tests = max(1, math.ceil((length - warmup) / window))  # smoothed steps within a window are not independent
    k = float(scipy_stats.t.ppf(1 - alpha / (2 * tests), len(reference) - 1))
    tolerance = np.maximum(k * sd_ref * scale, rel_floor * np.abs(mean_ref) + abs_floor)
    deviation = mean_cur - mean_ref
    excess = np.abs(deviation[warmup:]) / tolerance[warmup:]
    outside = int((excess > 1).sum())
    worst = int(np.argmax(excess)) + warmup
    passed = outside == 0
    if passed:
        message = (
            f"loss curve within the golden band at all {length - warmup} steps after warm-up {warmup} "
            f"(largest excursion {excess.max():.2f} of the band, at step {worst})"
        )
    else:
        side = "above" if deviation[worst] > 0 else "below"
        message = (
            f"loss curve left the golden band at {outside} of {length - warmup} steps after warm-up; worst "
            f"at step {worst}: mean loss {mean_cur[worst]:.4f} is {abs(deviation[worst]):.4f} {side} the "
            f"reference {mean_ref[worst]:.4f} (band ±{tolerance[worst]:.4f}: t quantile {k:.3g} x sd of "
            f"{len(reference)} reference seeds, floor {rel_floor:.1%}+{abs_floor:g})"
        )
    return CurveCheck(passed=passed, worst_step=worst, deviation=float(deviation[worst]),
                      tolerance=float(tolerance[worst]), outside=outside, checked=length - warmup,
                      message=message)  # fmt: skip


class StepsOutcome(str, enum.Enum):
    """What the steps-to-target test found: a figure's reading, not a verdict (core/verdict/judge.py
    ``STEPS_VERDICTS`` maps each to the Verdict it means)."""

    PASS = "PASS"
    SLOWER = "SLOWER"
    """Significantly more steps than the reference: a convergence regression."""
    FASTER = "FASTER"
    """Significantly fewer steps than the reference: the workload or its numerics changed (MLPerf rejects it)."""
    NOT_CONVERGED = "NOT_CONVERGED"
    """A current seed never reached the target within the step budget."""
    NO_REFERENCE = "NO_REFERENCE"


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsCheck:
    outcome: StepsOutcome
    current_mean: float | None
    """Olympic mean of the current seeds' steps to target."""
    reference_mean: float | None
    reference_sd: float | None
    p_slower: float | None
    p_faster: float | None
    message: str

    @property
    def passed(self) -> bool:
        return self.outcome in (StepsOutcome.PASS, StepsOutcome.NO_REFERENCE)


def compare_steps(
    current: Sequence[int | None],
    reference: Sequence[int | None],
    *,
    alpha: float = 0.05,
    min_effect: float = 0.05,
    sd_floor: float = 1.0,
) -> StepsCheck:
    """Steps to target of the current seeds vs the reference seeds (module docstring).

    The statistic is ``t = (olympic_mean(current) - mean(reference)) / (sd · sqrt(1/n_ref + 1/n_olympic))``
    with ``n_ref - 1`` degrees of freedom, ``sd`` the reference seeds' standard deviation but at least
    ``sd_floor`` steps (identical seeds would otherwise make any one-step change significant). SLOWER and
    FASTER also need the change to exceed ``min_effect`` of the reference mean.
    """
    if not 0 < alpha < 0.5:
        raise ValueError(f"compare_steps: alpha must be in (0, 0.5), got {alpha}")
    missing = [i for i, steps in enumerate(current) if steps is None]
    reached_ref = [float(s) for s in reference if s is not None]
    if len(reached_ref) < 2 or len(reached_ref) < len(reference):
        return StepsCheck(
            outcome=StepsOutcome.NO_REFERENCE,
            current_mean=None,
            reference_mean=None,
            reference_sd=None,
            p_slower=None,
            p_faster=None,
            message=f"reference seeds reached the target in {len(reached_ref)} of {len(reference)} "
            "runs: no reference convergence point to compare with (re-record the goldens)",
        )
    mean_ref = float(np.mean(reached_ref))
    sd_ref = max(float(np.std(reached_ref, ddof=1)), sd_floor)
    if missing:
        return StepsCheck(outcome=StepsOutcome.NOT_CONVERGED, current_mean=None, reference_mean=mean_ref,
                          reference_sd=sd_ref, p_slower=None, p_faster=None,
                          message=f"seed(s) {missing} never reached the target within the step budget; the "
                                  f"reference seeds reached it in {mean_ref:.1f} steps on average")  # fmt: skip
    values = [float(s) for s in current if s is not None]
    mean_cur = olympic_mean(values)
    n_cur = len(values) - 2 if len(values) >= 3 else len(values)
    t = (mean_cur - mean_ref) / (sd_ref * math.sqrt(1 / len(reached_ref) + 1 / n_cur))
    dof = len(reached_ref) - 1
    p_slower = float(scipy_stats.t.sf(t, dof))
    p_faster = float(scipy_stats.t.cdf(t, dof))
    change = mean_cur / mean_ref - 1
    figures = (f"olympic mean {mean_cur:.1f} steps vs reference {mean_ref:.1f} ± {sd_ref:.1f} "
               f"({len(reached_ref)} seeds; {change:+.1%})")  # fmt: skip
    if p_slower < alpha and change > min_effect:
        outcome = StepsOutcome.SLOWER
        message = f"converges slower: {figures}, one-sided t-test p={p_slower:.2g} < {alpha}"
    elif p_faster < alpha and change < -min_effect:
        outcome = StepsOutcome.FASTER
        message = (f"converges faster than the reference: {figures}, p={p_faster:.2g} < {alpha}; "
                   "the workload, data or loss may have changed (re-record the goldens if intended)")  # fmt: skip
    else:
        outcome = StepsOutcome.PASS
        message = f"steps to target consistent with the reference: {figures}"
    return StepsCheck(
        outcome=outcome,
        current_mean=mean_cur,
        reference_mean=mean_ref,
        reference_sd=sd_ref,
        p_slower=p_slower,
        p_faster=p_faster,
        message=message,
    )
