"""The words every verdict is said in: ``Verdict``, ``Decision`` and ``Comparison``.

Owns the one enum of verdicts (MISSING included: a metric in the baseline not measured now) and the records a
verdict travels in. Invariant: the string values are what results files and output show, so they never change.
May import nothing of the package but core/stats/.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Verdict(str, enum.Enum):
    PASS = "PASS"
    REGRESSED = "REGRESSED"
    IMPROVED = "IMPROVED"
    NOISY = "NOISY"
    AMBIGUOUS = "AMBIGUOUS"
    NO_BASELINE = "NO_BASELINE"
    MISSING = "MISSING"
    """In the baseline (or one side of a comparison) but not measured now: no figures to judge."""


CHANGES = (Verdict.REGRESSED, Verdict.IMPROVED)
"""The verdicts that say a metric changed."""
MEASURED = frozenset(verdict.value for verdict in Verdict if verdict is not Verdict.MISSING)
"""The verdicts a session gives a metric it measured: what a results file may record for one."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Decision:
    """What a rule decided and why, in words a user acts on."""

    verdict: Verdict
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    """The verdict on one metric against stored baseline runs, and the figures behind it
    (core/stats/unpaired.py ``Estimate``)."""

    verdict: Verdict
    ratio: float | None = None
    """median(current)/median(baseline), oriented so that < 1 is worse."""
    ci_low: float | None = None
    ci_high: float | None = None
    p_worse: float | None = None
    """p-value that the current run is worse: the larger of the sample test and the run-level test."""
    p_better: float | None = None
    run_noise: float | None = None
    """Between-run relative standard deviation that was used (prior and baseline runs pooled)."""
    sitting_noise: float | None = None
    """The sd of the shift between sittings that was added (prior and the baseline's sittings pooled); None when
    the measurement shares its baseline's sitting, or is an exact figure."""
    sittings: int = 0
    """How many sittings the baseline's runs were recorded in (0: not told)."""
    samples_can_decide: bool = True
    """False when the shift between sittings alone keeps the interval wider than the threshold band: no number
    of samples in this session can make the verdict PASS (sequential sampling stops extending)."""
    baseline_runs: int = 0
    detectable: float | None = None
    """The smallest change, a fraction worse, that these figures could have read REGRESSED (the minimum detectable
    effect at their noise: core/stats/unpaired.py ``detectable_change``); None: none could, or not computed."""
    reason: str = ""

    @property
    def decision(self) -> Decision:
        return Decision(verdict=self.verdict, reason=self.reason)

    def as_dict(self) -> dict[str, object]:
        return {
            "verdict": self.verdict.value,
            "ratio": self.ratio,
            "ci_low": self.ci_low,
            "ci_high": self.ci_high,
            "p_worse": self.p_worse,
            "p_better": self.p_better,
            "run_noise": self.run_noise,
            "sitting_noise": self.sitting_noise,
            "sittings": self.sittings,
            "samples_can_decide": self.samples_can_decide,
            "baseline_runs": self.baseline_runs,
            "detectable": self.detectable,
            "reason": self.reason,
        }
