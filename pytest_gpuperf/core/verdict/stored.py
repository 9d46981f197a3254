"""The stored-baseline rule: what the figures of a run against its baseline's runs decide.

Owns ``decide`` (an ``Estimate`` from core/stats/unpaired.py to a ``Comparison``) and ``compare`` (both steps).
Invariants: REGRESSED needs the sample test, the run-level test at the job's level, the threshold and the
interval to agree, so a verdict never contradicts the interval printed beside it; PASS needs the whole interval
inside the threshold band; anything between is AMBIGUOUS. A doubt (a wide spread, a condition of checks.py) keeps
a change undecided only as far as it explains it. Imports core/stats/ and core/verdict/ only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from pytest_gpuperf.core.stats.sittings import Sittings
from pytest_gpuperf.core.stats.unpaired import Estimate, Rules, estimate, samples_needed
from pytest_gpuperf.core.verdict.checks import Doubt, combined
from pytest_gpuperf.core.verdict.vocabulary import Comparison, Verdict

NO_BASELINE = "no baseline for this test, metric and hardware"
OVER_NOISE_LIMIT = "exceeds the noise limit"
OTHER_SITTING = "measured in another sitting than the baseline's runs"
NOT_AMONG = "significant for this metric alone, not among the"
SPREAD_EXPLAINS = 1.0
"""A side whose samples spread s (log Q3/Q1) past the noise limit may be two populations (a bimodal step time, a
cache that comes and goes): its median can land anywhere between its quartiles, so each such side explains a
ratio up to exp(SPREAD_EXPLAINS * s) either way, the two sides together the product, and a change beyond that
is decided."""
FAST_QUARTILE = 25.0
"""The percentile of a time's samples (the mirror one, 75, of a rate's) read when a spread past the noise limit
keeps the median undecided. Interference adds time to a call and never removes it (Chen and Revels, "Robust
benchmarking in noisy environments", 2016): a second, slower population moves the median up to the other
quartile, while the fastest quarter of the calls moves only with the work itself or with a state that slows
nearly every call, which the machine's doubts bound. So the spread bounds the median's ratio, not this one's."""
FAST_QUARTILE_SHARE = 0.25
"""What part of the spread's doubt (a power of its factor) still bounds the fast quartile's ratio: a side's fast
quartile moves between unchanged runs too (benchmarks/README.md, "The fast quartile")."""
"""How the reason of a change that the job's family-wise level did not decide begins its second part."""


def compare(
    current: Sequence[float],
    baseline_runs: Sequence[Sequence[float]],
    *,
    higher_is_better: bool,
    rules: Rules,
    doubt: Doubt | None = None,
    sittings: Sittings | None = None,
    across_machines: bool = False,
) -> Comparison:
    """Judge the current run's samples against the baseline's runs (each run a list of samples): the figures
    (``unpaired.estimate``: sittings, machines and noise are its arguments), then the rule (``decide``).

    Where a spread past the noise limit keeps the median's change undecided, the fast quartile's figures
    (``FAST_QUARTILE``) are judged under the other doubts alone (``_fast_quartile``)."""

    def figures_at(location: float) -> Estimate | None:
        return estimate(
            current,
            baseline_runs,
            higher_is_better=higher_is_better,
            rules=rules,
            sittings=sittings,
            across_machines=across_machines,
            location=location,
        )

    figures = figures_at(50.0)
    judged = decide(figures, rules=rules, doubt=doubt)
    spread = _spread_doubt(figures, rules) if figures is not None else None
    if judged.verdict is not Verdict.NOISY or spread is None or figures is None:
        return judged
    fast = figures_at(100.0 - FAST_QUARTILE if higher_is_better else FAST_QUARTILE)
    return _fast_quartile(figures, fast, spread, rules, doubt) or judged


def decide(figures: Estimate | None, *, rules: Rules, doubt: Doubt | None = None) -> Comparison:
    """The verdict the figures support under ``rules``; NO_BASELINE without figures.

    ``doubt`` says why the current run may not be comparable (core/verdict/checks.py: the device's clocks, the
    machine's state, a metric that calls its own samples too thin) and how much it explains; a spread past the
    noise limit is one more. A change whose whole interval lies beyond what they explain stands, saying both
    figures; anything else they touch is NOISY, with the figures still kept for the report.
    """
    if figures is None:
        return Comparison(verdict=Verdict.NO_BASELINE, reason=NO_BASELINE)
    doubts = combined((doubt, _spread_doubt(figures, rules)))
    judged = _ladder(figures, rules)
    if doubts is None:
        return judged
    judged = replace(judged, detectable=_beyond_doubt(judged, figures, doubts, rules))
    stands = doubts.stands(judged, rules.threshold)
    if stands is not None:
        return replace(judged, reason=f"{judged.reason} ({stands})")
    return replace(judged, verdict=Verdict.NOISY, reason=f"{doubts.reason}; not judged ({doubts.bound()})")


def _beyond_doubt(judged: Comparison, figures: Estimate, doubt: Doubt, rules: Rules) -> float | None:
    """The smallest change these figures could have read REGRESSED past ``doubt``: the interval, moved with the
    ratio, must end below (1 - threshold) / what the doubt explains; None where nothing bounds the doubt."""
    if judged.detectable is None or math.isinf(doubt.worse) or figures.ratio <= 0:
        return None
    upper = figures.ci_high / figures.ratio  # how far the interval reaches above its ratio
    return max(judged.detectable, 1 - (1 - rules.threshold) / (doubt.worse * upper))


def _fast_quartile(
    median: Estimate, fast: Estimate | None, spread: Doubt, rules: Rules, doubt: Doubt | None
) -> Comparison | None:
    """The verdict of the fast quartile's figures where the spread leaves the median undecided, or None.

    It stands only as a change the median shows too, past the threshold and in the same direction (the fast
    quarter alone moving is no regression of the typical call), and only beyond what the other doubts explain
    (``doubt``: the machine's state, the device's clocks), which bound it as they bound the median."""
    if fast is None:
        return None
    judged = _ladder(fast, rules)
    if judged.verdict is Verdict.REGRESSED:
        agrees = median.ratio <= 1 - rules.threshold
    elif judged.verdict is Verdict.IMPROVED:
        agrees = median.ratio >= 1 + rules.threshold
    else:
        return None
    if not agrees:
        return None
    factor = spread.worse**FAST_QUARTILE_SHARE
    doubt = combined((doubt, Doubt(reason=spread.reason, worse=factor, better=factor)))
    why = (
        f"read at the fast quartile: {spread.reason}, which explains the median's ratio {median.ratio:.3f} up to "
        f"{spread.worse:.2f}x either way but not the fastest quarter of the calls"
    )
    assert doubt is not None
    stands = doubt.stands(judged, rules.threshold)
    if stands is None:
        return None
    return replace(judged, reason=f"{judged.reason} ({why}; {stands})")


def _spread_doubt(figures: Estimate, rules: Rules) -> Doubt | None:
    over = [
        (side, spread)
        for side, spread in (("current run", figures.current_spread), ("baseline", figures.baseline_spread))
        if spread > rules.noise_limit
    ]
    if not over:
        return None
    factor = math.exp(SPREAD_EXPLAINS * sum(spread for _, spread in over))
    words = " and ".join(f"{side} spread {spread:.1%}" for side, spread in over)
    return Doubt(reason=f"{words} (log Q3/Q1) {OVER_NOISE_LIMIT} {rules.noise_limit:.1%}", worse=factor, better=factor)


def _ladder(figures: Estimate, rules: Rules) -> Comparison:
    """The verdict of the figures alone: the tests, the threshold and the interval."""
    kept = figures.figures()
    ratio, ci_low, ci_high = figures.ratio, figures.ci_low, figures.ci_high
    # The tests and the interval must agree: a change whose interval still holds "no change" is not shown as
    # REGRESSED or IMPROVED. The job's level applies to the run-level test, which carries the noise between runs;
    # the sample test must agree at the metric's own level. A conjunction is no likelier than either part, so the
    # job's rate holds, and a metric of six requests (whose Mann-Whitney p cannot go below 1/924) can still be
    # decided among many.
    decisive = rules.decisive_alpha
    if figures.p_worse < rules.alpha and ratio <= 1 - rules.threshold and ci_high < 1:
        change = f"worse by {1 - ratio:.1%} (threshold {rules.threshold:.1%})"
        if figures.p_run_worse < decisive:
            reason = _decided(change, figures.p_worse, figures.p_run_worse, rules)
            return Comparison(verdict=Verdict.REGRESSED, reason=reason, **kept)
        return Comparison(verdict=Verdict.AMBIGUOUS, reason=_not_among(change, figures.p_run_worse, rules), **kept)
    if figures.p_better < rules.alpha and ratio >= 1 + rules.threshold and ci_low > 1:
        change = f"better by {ratio - 1:.1%} (threshold {rules.threshold:.1%})"
        if figures.p_run_better < decisive:
            reason = _decided(change, figures.p_better, figures.p_run_better, rules)
            return Comparison(verdict=Verdict.IMPROVED, reason=reason, **kept)
        return Comparison(verdict=Verdict.AMBIGUOUS, reason=_not_among(change, figures.p_run_better, rules), **kept)
    if 1 - rules.threshold <= ci_low and ci_high <= 1 + rules.threshold:
        reason = f"{rules.confidence:.0%} interval of the ratio lies within 1 ± {rules.threshold:.1%}"
        if figures.exact:
            reason += " (an exact figure: its runs agree exactly, so its between-run noise is its own, not the prior)"
        return Comparison(verdict=Verdict.PASS, reason=reason, **kept)
    return Comparison(verdict=Verdict.AMBIGUOUS, reason=_undecided(figures, rules), **kept)


def _undecided(figures: Estimate, rules: Rules) -> str:
    """Why an AMBIGUOUS comparison is undecided, and what would decide it."""
    cure = "more repeats or more baseline runs would decide it"
    if not figures.samples_can_decide:
        cure = "no number of repeats in this session can decide it (below)"
    reason = (
        f"ratio {figures.ratio:.3f}, {rules.confidence:.0%} interval [{figures.ci_low:.3f}, {figures.ci_high:.3f}] "
        f"is not inside 1 ± {rules.threshold:.1%} and the evidence of a change is not significant: {cure}"
    )
    needed = samples_needed(rules, figures.baseline_samples)
    if figures.samples < needed:
        reason += (
            f" ({figures.samples} samples against {figures.baseline_samples} cannot reach p < {rules.alpha}: "
            f"take >= {needed})"
        )
    if figures.sitting_noise:
        where = "its one sitting" if figures.sitting_groups == 1 else f"its {figures.sitting_groups} sittings"
        reason += (
            f" ({OTHER_SITTING}, {where}: the machine's shift between "
            f"sittings, {figures.sitting_noise:.1%} sd, is in the noise; record baseline runs in several sittings, "
            "or let `gpuperf ab` compare two stacks paired in one session)"
        )
    if not figures.exact and rules.prior_noise > rules.run_noise:
        reason += (
            f" (between-run noise {figures.run_noise:.1%}: this test's other parameters vary "
            f"{rules.sibling_noise:.1%} between baseline runs on this machine, over {rules.sibling_dof:.0f} degrees "
            f"of freedom, against the configured {rules.run_noise:.1%}; `gpuperf ab` compares two stacks paired, in "
            "one session)"
        )
    return reason


def _decided(change: str, p_value: float, p_run: float, rules: Rules) -> str:
    if rules.decisive_alpha >= rules.alpha:  # one metric, or a job whose share is the metric's own level
        return f"{change}, p={p_value:.2g} < {rules.alpha}"
    return (
        f"{change}, p={p_value:.2g} < {rules.alpha}, run-level p={p_run:.2g} < {rules.decisive_alpha:.2g} (the job's "
        f"family-wise {rules.job_alpha:.2g} over {rules.family_size} metrics)"
    )


def _not_among(change: str, p_run: float, rules: Rules) -> str:
    return (
        f"{change}, run-level p={p_run:.2g}: {NOT_AMONG} {rules.family_size} metrics this job judges (family-wise "
        f"{rules.job_alpha:.2g}: p < {rules.decisive_alpha:.2g} decides); a run on its own, or `gpuperf ab`, would "
        "decide it"
    )
