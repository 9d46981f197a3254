"""How many runs, or repeats per run, would decide an equivalence interval that is still undecided.

The interval of a ratio, on the log scale, is split into what more measurement would shrink: the submission's
within-run spread (repeats and runs), its between-run spread (runs only) and the reference's own uncertainty
(neither), each measured from the samples and the interval itself. Each figure is for a chance ``POWER`` of
deciding, the usual sizing of two one-sided tests (Chow, Shao and Wang, Sample Size Calculations in Clinical
Research, 3.2): the standard error must fit the margin z_(confidence) + z_(power) times, since a figure at which
the interval would just fit decides only half the time. Pure: no pytest, no torch.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

MAD_TO_SD = 1.4826  # a normal sample's sd over its median absolute deviation
POWER = 0.80
"""The chance, if the ratio holds, that the runs a figure names decide it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Noise:
    """The parts of a ratio interval's variance on the log scale, as measured, by what would shrink each.

    The half-width with ``k`` runs of ``n`` repeats is z * sqrt((within * repeats / n + between) / k + reference):
    more repeats shrink only the within-run part, more runs of the submission the submission's parts, and the
    reference's part neither. ``reference`` is what the observed interval holds beyond the submission's parts."""

    within: float
    """Variance of one submission run's median from the spread inside runs: pi/2 * w^2 / repeats, w the robust
    sd of a sample about its run's median (the large-sample variance of a median of normal samples)."""
    between: float
    """Variance of a run's median from run to run (``run_noise`` squared): repeats never shrink it."""
    reference: float
    """What the reference's runs add; only more reference runs shrink it."""
    runs: int
    repeats: int
    """Repeats per run of the submission (the median count)."""
    reference_runs: int = 1
    """Runs of the reference; its part is taken to shrink as 1 / runs (a median of run medians, resampled)."""

    def variance(self, runs: int, repeats: int) -> float:
        return (self.within * self.repeats / repeats + self.between) / runs + self.reference


def measure_noise(
    submission: Sequence[np.ndarray],
    run_sd: float,
    low: float,
    high: float,
    *,
    confidence: float,
    reference_runs: int,
) -> Noise:
    """The parts of the two-sided ``confidence`` interval [low, high] formed from ``submission``'s runs with
    between-run sd ``run_sd`` against a reference of ``reference_runs`` runs."""
    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    logs = [np.log(run[run > 0]) for run in submission]  # a run's median > 0 was checked; a sample may not be
    deviations = np.concatenate([np.abs(run - np.median(run)) for run in logs])
    within_sd = MAD_TO_SD * float(np.median(deviations))
    repeats = max(1, round(float(np.median([run.size for run in logs]))))
    runs = len(logs)
    within, between = math.pi / 2 * within_sd**2 / repeats, run_sd**2
    observed = ((math.log(high) - math.log(low)) / 2 / z) ** 2
    reference = max(observed - (within + between) / runs, 0.0)
    return Noise(
        within=within,
        between=between,
        reference=reference,
        runs=runs,
        repeats=repeats,
        reference_runs=reference_runs,
    )


def shrink_to_decide(ratio: float, low: float, high: float, tolerance: float) -> tuple[str, float]:
    """The verdict a narrower interval would reach if the ratio held (PASS inside the band, FAIL outside), and the
    factor its arms (the ratio to each end, log scale: a bootstrap interval need not be symmetric) must shrink
    by to reach it; 0 when no narrowing would (a ratio on an edge of the band)."""
    centre = min(max(math.log(ratio), math.log(low)), math.log(high))
    below, above = centre - math.log(low), math.log(high) - centre
    band_low, band_high = math.log(1 - tolerance), math.log(1 + tolerance)

    def fits(room: float, arm: float) -> float:
        return max(room, 0.0) / arm if arm > 0 else math.inf

    if band_low <= centre <= band_high:
        return "PASS", min(fits(centre - band_low, below), fits(band_high - centre, above), 1.0)
    if centre < band_low:
        return "FAIL", min(fits(band_low - centre, above), 1.0)
    return "FAIL", min(fits(centre - band_high, below), 1.0)


def for_power(factor: float, *, confidence: float, power: float = POWER) -> float:
    """The shrink ``factor`` at which the interval would just fit, tightened so that a new measurement decides
    with probability ``power`` if the ratio holds: z / (z + z_power), z the interval's own quantile."""
    normal = NormalDist()
    z = normal.inv_cdf(0.5 + confidence / 2)
    return factor * z / (z + normal.inv_cdf(power))


def runs_to_decide(noise: Noise, factor: float) -> int | None:
    """Runs of the submission (of its present repeats each) that would shrink the interval by ``factor``; None
    when no number would: the reference's part alone is that wide (more reference runs would help)."""
    room = noise.variance(noise.runs, noise.repeats) * factor**2 - noise.reference
    if room <= 0:
        return None
    return max(1, math.ceil((noise.within + noise.between) / room - 1e-9))


def repeats_to_decide(noise: Noise, factor: float) -> int | None:
    """Repeats per run (at the present number of runs) that would shrink the interval by ``factor``; None when
    none would: between-run noise and the reference do not shrink with repeats."""
    room = noise.variance(noise.runs, noise.repeats) * factor**2 - noise.reference - noise.between / noise.runs
    if room <= 0 or noise.within == 0:
        return None
    return max(1, math.ceil(noise.within * noise.repeats / noise.runs / room - 1e-9))


def reference_runs_to_decide(noise: Noise, factor: float) -> int | None:
    """Runs of the reference that would shrink the interval by ``factor`` with the submission as it is; None when
    no number would (the submission's own part is that wide)."""
    room = noise.variance(noise.runs, noise.repeats) * factor**2 - (noise.within + noise.between) / noise.runs
    if room <= 0:
        return None
    return max(1, math.ceil(noise.reference * noise.reference_runs / room - 1e-9))


def runs_of_both_to_decide(noise: Noise, factor: float) -> tuple[int, int] | None:
    """Runs of the submission and of the reference that together would shrink the interval by ``factor``, the
    fewest in all: minimising k + r under a / k + b / r <= target (a the submission's variance per run, b the
    reference's) gives k = (a + sqrt(ab)) / target, r = (b + sqrt(ab)) / target. None: nothing narrower decides."""
    target = noise.variance(noise.runs, noise.repeats) * factor**2
    if target <= 0:
        return None
    own, reference = noise.within + noise.between, noise.reference * noise.reference_runs
    shared = math.sqrt(own * reference)
    return (
        max(1, math.ceil((own + shared) / target - 1e-9)),
        max(1, math.ceil((reference + shared) / target - 1e-9)),
    )
