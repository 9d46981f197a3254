"""The paired rule: what one metric's log-ratios of `gpuperf ab`'s pairs decide at a look.

Owns ``judge`` (a ``PairedEstimate`` from core/stats/paired.py to a ``PairedJudgement``) and ``first_decision``.
Invariants: REGRESSED or IMPROVED only when the flag interval excludes no change and the estimate is at or beyond
the threshold; PASS (the SAME decision) only when the equivalence interval lies inside the threshold band; no
decision before ``min_pairs``. Imports core/stats/ and core/verdict/ only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pytest_gpuperf.core.stats.paired import Boundary, PairedRules, estimate_pairs, first_decidable, needed_pairs
from pytest_gpuperf.core.verdict.vocabulary import CHANGES, Verdict

AB_VERDICTS = (Verdict.PASS, Verdict.REGRESSED, Verdict.IMPROVED, Verdict.AMBIGUOUS)
"""What a metric of `gpuperf ab` can end as; PASS is the SAME decision."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PairedJudgement:
    """One metric after n pairs."""

    verdict: Verdict
    pairs: int
    estimate: float | None
    """Hodges-Lehmann estimate of the log-ratio (< 0 is worse); None without pairs."""
    flag_interval: tuple[float, float]
    """Log-ratio interval at the flag level (infinite where too few pairs for any)."""
    equivalence_interval: tuple[float, float]
    needed_pairs: int | None
    """For AMBIGUOUS: the pairs a decision would take if the estimate and the spread held (None: no estimate)."""
    reason: str

    @property
    def ratio(self) -> float | None:
        return None if self.estimate is None else math.exp(self.estimate)

    def interval_ratio(self) -> tuple[float, float]:
        """The interval that decided (flag for REGRESSED/IMPROVED, equivalence otherwise), as ratios."""
        low, high = self.flag_interval if self.verdict in CHANGES else self.equivalence_interval
        return _exp(low), _exp(high)


def judge(x: list[float] | np.ndarray, rules: PairedRules, boundary: Boundary | None = None) -> PairedJudgement:
    """The verdict on one metric's log-ratios so far; AMBIGUOUS until the boundary allows a decision."""
    values = np.asarray(x, dtype=float)
    boundary = boundary or rules.boundary()
    figures = estimate_pairs(values, boundary)
    n, estimate = figures.pairs, figures.estimate
    flag, equivalence = figures.flag_interval, figures.equivalence_interval
    if estimate is None:
        return PairedJudgement(verdict=Verdict.AMBIGUOUS, pairs=0, estimate=None, flag_interval=flag,
                               equivalence_interval=equivalence, needed_pairs=None, reason="no pairs yet")  # fmt: skip
    low_band, high_band = rules.band
    looked = n >= rules.min_pairs
    verdict, reason = Verdict.AMBIGUOUS, ""
    if looked and flag[1] < 0 and estimate <= low_band:
        verdict = Verdict.REGRESSED
        reason = f"worse at the flag level and {-math.expm1(estimate):.2%} beyond the {rules.threshold:.1%} threshold"
    elif looked and flag[0] > 0 and estimate >= high_band:
        verdict = Verdict.IMPROVED
        reason = f"better at the flag level and {math.expm1(estimate):.2%} beyond the {rules.threshold:.1%} threshold"
    elif looked and low_band < equivalence[0] and equivalence[1] < high_band:
        verdict = Verdict.PASS
        reason = f"equivalence interval inside +-{rules.threshold:.1%}"
    needed = None if verdict is not Verdict.AMBIGUOUS else needed_pairs(values, estimate, flag, equivalence, rules)
    if needed is not None:  # never fewer than the first look at which the boundary can decide at all
        within = low_band < estimate < high_band
        first = first_decidable(boundary.equivalence if within else boundary.flag)
        needed = max(needed, first) if first is not None else needed
    if verdict is Verdict.AMBIGUOUS:
        reason = _ambiguous_reason(n, rules, equivalence, estimate)
    return PairedJudgement(
        verdict=verdict,
        pairs=n,
        estimate=estimate,
        flag_interval=flag,
        equivalence_interval=equivalence,
        needed_pairs=needed,
        reason=reason,
    )


def _ambiguous_reason(n: int, rules: PairedRules, equivalence: tuple[float, float], estimate: float) -> str:
    if n < rules.min_pairs or not math.isfinite(equivalence[0]):
        return f"{n} pair(s): too few for a decision at these error rates"
    low_band, high_band = rules.band
    if low_band < estimate < high_band:
        return "the change is within the threshold, but the interval is still wider than +-threshold"
    return "the change is at or beyond the threshold, but not yet significant at the flag level"


def first_decision(x: list[float] | np.ndarray, rules: PairedRules) -> tuple[Verdict, int]:
    """The sequential rule run look by look over a known sequence of log-ratios, as the engine runs it pair by
    pair: the first verdict other than AMBIGUOUS and the pairs it took (AMBIGUOUS and all of them if none)."""
    boundary = rules.boundary()
    for n in range(1, len(x) + 1):
        verdict = judge(x[:n], rules, boundary).verdict
        if verdict is not Verdict.AMBIGUOUS:
            return verdict, n
    return Verdict.AMBIGUOUS, len(x)


def _exp(value: float) -> float:
    return math.exp(value) if math.isfinite(value) else (math.inf if value > 0 else 0.0)
