"""The figures of a run against its stored baseline's runs: ratio of medians, its bootstrap interval, p-values.

Owns ``Rules`` (the stored-baseline policy), ``estimate`` (an ``Estimate``: figures, no verdict; core/verdict/stored.py
decides) and the noise model: within-run noise (Mann-Whitney U on the samples), between-run noise (run medians
pooled with a prior that the test's siblings may raise, never lower), the shift between sittings and between
machines. Invariants: pure (no pytest, no torch); ratios oriented so < 1 is worse; the same stored samples give the
same figures (seeded bootstrap, memory bounded by BOOTSTRAP_SAMPLES). Imports only core/stats/; never a Verdict.
Rationale: docs/design/stored-baseline-noise.md.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats as scipy_stats

from pytest_gpuperf.core.stats.sittings import Sittings
from pytest_gpuperf.core.stats.thresholds import Thresholds

BOOTSTRAP_SAMPLES = 4096
"""Most samples of one run the bootstrap interval resamples whole (``ratio_interval``); a larger run is resampled
m out of n (``_bootstrap_medians``), so the draws never exceed resamples x BOOTSTRAP_SAMPLES values (~130 MiB with
their indices at 2,000 resamples) whatever the count: 2,000 whole resamples of a 1M-sample run asked for ~15 GiB."""
BOOTSTRAP_BLOCK = 1 << 22
"""Values drawn at once for a run above BOOTSTRAP_SAMPLES (~64 MiB of draws and indices)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Rules(Thresholds):
    """How a comparison with stored baseline runs is decided. Fractions, not percentages."""

    alpha: float = 0.01
    """One-sided significance level of both the sample test and the run-level test."""
    confidence: float = 0.95
    """Coverage of the bootstrap interval of the ratio that decides PASS."""
    noise_limit: float = 0.10
    """Largest robust spread (``Summary.spread``, log Q3/Q1) of either side that is still judged; above it, NOISY."""
    run_noise: float = 0.01
    """Prior for the between-run relative standard deviation (log scale) of a run's median."""
    prior_runs: float = 4.0
    """Weight of that prior, in degrees of freedom: a baseline of many runs outweighs it."""
    sibling_noise: float = 0.0
    """Pooled between-run sd (log scale) of the sibling metrics' baseline runs (``sibling_run_noise``)."""
    sibling_dof: float = 0.0
    """Its degrees of freedom; 0 when no sibling holds two judged runs, and the prior is ``run_noise`` alone."""
    sitting_noise: float = 0.0
    """Prior sd (log scale) of the machine's shift between sittings, at ``prior_runs`` degrees of freedom: what a
    measurement in another sitting than its baseline's runs may move with nothing changed (0: no such shift)."""
    machine_noise: float = 0.0
    """Sd (log scale) of the spread between machines of one hardware key, for a baseline recorded on another
    machine than this one: a fleet's figure, else the device's prior (core/verdict/policy.py)."""
    family_size: int = 1
    """How many metrics the job judges: a change is decided only at ``job_alpha / family_size`` (Bonferroni over
    the job), so the job, not each metric, holds the false-failure rate."""
    job_alpha: float = 0.01
    """The job's family-wise level: the chance that a job with nothing changed fails on sampling noise."""
    resamples: int = 2000
    """Bootstrap resamples for the interval."""
    seed: int = 0
    """Seed of the bootstrap, so a verdict is reproducible from the stored samples."""

    def __post_init__(self) -> None:
        Thresholds.__post_init__(self)  # zero-argument super() does not work in a slotted dataclass
        if not 0 < self.alpha < 0.5:
            raise ValueError(f"alpha must be in (0, 0.5), got {self.alpha!r}")
        if not 0.5 < self.confidence < 1:
            raise ValueError(f"confidence must be in (0.5, 1), got {self.confidence!r}")
        if self.noise_limit <= 0 or self.run_noise < 0 or self.prior_runs < 0:
            raise ValueError("noise_limit must be > 0, run_noise and prior_runs >= 0")
        if self.sibling_noise < 0 or self.sibling_dof < 0 or self.sitting_noise < 0 or self.machine_noise < 0:
            raise ValueError("sibling_noise, sibling_dof, sitting_noise and machine_noise must be >= 0")
        if self.family_size < 1 or not 0 < self.job_alpha < 0.5:
            raise ValueError(
                f"family_size must be >= 1 and job_alpha in (0, 0.5), got {self.family_size!r}, {self.job_alpha!r}"
            )

    @property
    def decisive_alpha(self) -> float:
        """The level a change must reach to be decided (REGRESSED or IMPROVED): the metric's own ``alpha``, or the
        job's share of its family-wise level where that is stricter."""
        return min(self.alpha, self.job_alpha / self.family_size)

    @property
    def prior_noise(self) -> float:
        """The prior for a metric's between-run sd: ``run_noise`` at ``prior_runs`` degrees of freedom pooled
        with the siblings' evidence, never below ``run_noise`` (siblings recorded back to back understate drift
        as much as the metric's own runs do; they may say the machine is noisier, not quieter)."""
        if self.sibling_dof <= 0:
            return self.run_noise
        weight = self.prior_runs + self.sibling_dof
        var = (self.prior_runs * self.run_noise**2 + self.sibling_dof * self.sibling_noise**2) / weight
        return max(self.run_noise, math.sqrt(var))

    @property
    def prior_dof(self) -> float:
        """The prior's weight in degrees of freedom: the configured ``prior_runs`` plus what the siblings measured
        (limma's d0 + the evidence behind it). With the siblings' runs the noise is known well enough that a
        change can be decided at a job's level (1% over hundreds of metrics) without a t of five degrees of freedom,
        whose tail at that level asks for a change of ten standard deviations."""
        return self.prior_runs + self.sibling_dof

    def for_looks(self, looks: int) -> Rules:
        """The rules for the last of ``looks`` sequential looks at one measurement: alpha and the interval's
        non-coverage divided by ``looks``, so that repeated looks do not buy false verdicts."""
        if looks < 1:
            raise ValueError(f"looks must be >= 1, got {looks!r}")
        if looks == 1:
            return self
        return replace(
            self,
            alpha=self.alpha / looks,
            job_alpha=self.job_alpha / looks,
            confidence=1 - (1 - self.confidence) / looks,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Summary:
    """Robust summary of one set of samples."""

    n: int
    median: float
    iqr: float
    spread: float
    """log(Q3 / Q1), the interquartile range of the samples' logs: the robust relative spread the NOISY rule
    reads. For a small spread it is IQR / median; unlike IQR / median it is the same for a time and for the
    rate computed from it (1/x only mirrors the logs), so a step time and the tokens/s of the same steps are
    NOISY together or not at all. IQR / median is not: a tail of slow steps spreads the times far more than the
    rates, and the same steps once read AMBIGUOUS as step times (NOISY in the first attempt, so the second's
    REGRESSED stood unconfirmed) and REGRESSED as tokens/s."""
    mean: float
    minimum: float
    maximum: float

    def as_dict(self) -> dict[str, float | int]:
        return {
            "n": self.n,
            "median": self.median,
            "iqr": self.iqr,
            "spread": self.spread,
            "mean": self.mean,
            "min": self.minimum,
            "max": self.maximum,
        }


def summarize(samples: Sequence[float] | np.ndarray) -> Summary:
    values = _as_array(samples, "samples")
    q25, median, q75 = (float(q) for q in np.percentile(values, [25, 50, 75]))
    log_q25, log_q75 = (float(q) for q in np.percentile(np.log(values), [25, 75]))
    return Summary(
        n=int(values.size),
        median=median,
        iqr=q75 - q25,
        spread=log_q75 - log_q25,
        mean=float(values.mean()),
        minimum=float(values.min()),
        maximum=float(values.max()),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """The figures of the current run against the baseline's runs: what a rule (core/verdict/stored.py) decides on."""

    ratio: float
    """median(current)/median(baseline), oriented so that < 1 is worse."""
    ci_low: float
    ci_high: float
    p_worse: float
    """p-value that the current run is worse: the larger of the sample test and the run-level test."""
    p_better: float
    p_run_worse: float
    """The run-level test's p-value alone (it carries the noise between runs; the job's level applies to it)."""
    p_run_better: float
    run_noise: float
    """Between-run relative standard deviation that was used (prior and baseline runs pooled)."""
    sitting_noise: float | None
    """The sd of the shift between sittings that was added; None when none was."""
    sittings: int
    """How many sittings the baseline's runs were recorded in (0: not told)."""
    sitting_groups: int
    """How many sittings the runs were taken as (1 when not told)."""
    samples_can_decide: bool
    """False when the shift between sittings alone keeps the interval wider than the threshold band."""
    baseline_runs: int
    current_spread: float
    """``Summary.spread`` of the current run."""
    baseline_spread: float
    """The median ``Summary.spread`` of the baseline's runs."""
    exact: bool
    """The metric's runs agree exactly (``exact_agreement``): its noise is its own, not the prior."""
    samples: int
    """How many samples the current run holds."""
    baseline_samples: int
    """How many samples the baseline's runs hold together."""
    detectable: float | None = None
    """The smallest change (a fraction worse, as the threshold is) these figures could have read REGRESSED
    (``detectable_change``); None: none, the sample test cannot reach its level with these sample counts."""

    def figures(self) -> dict[str, Any]:
        """The figures a ``Comparison`` carries beside its verdict."""
        return {
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
        }


def estimate(
    current: Sequence[float],
    baseline_runs: Sequence[Sequence[float]],
    *,
    higher_is_better: bool,
    rules: Rules,
    sittings: Sittings | None = None,
    across_machines: bool = False,
    location: float = 50.0,
) -> Estimate | None:
    """The figures of the current run's samples against the baseline's runs (each run a list of samples); None
    when the baseline holds no samples.

    ``across_machines``: the baseline's runs were recorded on another machine of this hardware key; the spread
    between machines (``Rules.machine_noise``) then adds to the noise like a shift between sittings.

    ``location`` is the percentile of each run's samples that is compared (50: the median, the ratio of
    medians): core/verdict/stored.py reads the fast quartile of a side whose spread the median cannot be trusted
    over (``FAST_QUARTILE``). The rank test and the spreads read the whole samples whatever it is.

    ``sittings`` groups the baseline's runs by sitting and says whether the current run shares theirs
    (``sittings.group_sittings``, from the stored dates); without it every run is taken as one sitting with the
    current one, and no shift between sittings is added.

    """
    runs = [_as_array(run, "baseline run") for run in baseline_runs if len(run) > 0]
    if not runs:
        return None
    now = _as_array(current, "current samples")

    now_spread = summarize(now).spread
    base_spread = float(np.median([summarize(run).spread for run in runs]))
    run_medians = np.array([_at(run, location) for run in runs])

    log_ratio = math.log(_at(now, location)) - math.log(np.median(run_medians))
    if not higher_is_better:
        log_ratio = -log_ratio
    ratio = math.exp(log_ratio)

    exact = exact_agreement(now, runs)
    groups = _sitting_groups(sittings, len(runs))
    run_sd, dof = pooled_run_noise(np.log(run_medians), rules, own_only=exact, groups=groups)
    scale = run_sd * math.sqrt(1.0 + 1.0 / len(runs))
    shift_sd: float | None = None
    shift_scale = 0.0  # the shift's sd for a new sitting against the mean of the baseline's sittings
    if sittings is not None and not sittings.joined and not exact and rules.sitting_noise > 0:
        shift_sd, shift_dof = sitting_shift_noise(np.log(run_medians), groups, rules)
        shift_scale = shift_sd * math.sqrt(1.0 + 1.0 / len(groups))
        dof = _satterthwaite((scale, dof), (shift_scale, shift_dof))
        scale = math.hypot(scale, shift_scale)
    if across_machines and rules.machine_noise > 0 and not exact:
        dof = _satterthwaite((scale, dof), (rules.machine_noise, rules.prior_runs))
        scale = math.hypot(scale, rules.machine_noise)
        shift_scale = math.hypot(shift_scale, rules.machine_noise)
    if scale > 0:
        p_run_worse = float(scipy_stats.t.cdf(log_ratio / scale, dof))
        p_run_better = float(scipy_stats.t.sf(log_ratio / scale, dof))
    elif log_ratio == 0:
        p_run_worse = p_run_better = 1.0
    else:  # no between-run noise at all: any difference is certain, in its direction
        p_run_worse, p_run_better = (0.0, 1.0) if log_ratio < 0 else (1.0, 0.0)

    pooled = np.concatenate(runs)
    # "worse" means larger when lower is better (times), smaller when higher is better (rates)
    worse_side = "less" if higher_is_better else "greater"
    better_side = "greater" if higher_is_better else "less"
    p_mw_worse = float(scipy_stats.mannwhitneyu(now, pooled, alternative=worse_side).pvalue)
    p_mw_better = float(scipy_stats.mannwhitneyu(now, pooled, alternative=better_side).pvalue)
    p_worse = max(p_mw_worse, p_run_worse)
    p_better = max(p_mw_better, p_run_better)

    if exact:  # each run's figure is what it is: no resampling inside a run, the runs' own spread only
        half = float(scipy_stats.t.ppf(0.5 + rules.confidence / 2, dof)) * scale
        ci_low, ci_high = math.exp(log_ratio - half), math.exp(log_ratio + half)
    else:
        extra_sd = math.hypot(run_sd, shift_scale)  # = run_sd without a shift: the same draws as before
        ci_low, ci_high = ratio_interval(
            now, runs, extra_sd, higher_is_better=higher_is_better, rules=rules, location=location
        )
    return Estimate(
        ratio=ratio,
        ci_low=ci_low,
        ci_high=ci_high,
        p_worse=p_worse,
        p_better=p_better,
        p_run_worse=p_run_worse,
        p_run_better=p_run_better,
        run_noise=run_sd,
        sitting_noise=shift_sd,
        sittings=len(groups) if sittings is not None else 0,
        sitting_groups=len(groups),
        samples_can_decide=float(scipy_stats.norm.ppf(0.5 + rules.confidence / 2)) * shift_scale <= rules.threshold,
        baseline_runs=len(runs),
        current_spread=now_spread,
        baseline_spread=base_spread,
        exact=exact,
        samples=int(now.size),
        baseline_samples=int(pooled.size),
        detectable=detectable_change(
            now,
            pooled,
            log_ratio=log_ratio,
            ci_high=ci_high,
            scale=scale,
            dof=dof,
            higher_is_better=higher_is_better,
            rules=rules,
        ),
    )


def detectable_change(
    current: np.ndarray,
    pooled: np.ndarray,
    *,
    log_ratio: float,
    ci_high: float,
    scale: float,
    dof: float,
    higher_is_better: bool,
    rules: Rules,
) -> float | None:
    """The minimum detectable effect of one comparison: the smallest change, as a fraction worse (the threshold's
    sense: 0.5 is a time doubled or a rate halved), that core/verdict/stored.py would read REGRESSED at the noise
    these figures show. None when no change can: the sample test cannot reach ``alpha`` with these sample counts.

    Every part of that rule bounds the oriented log ratio x from above, the figures' spread held as observed: the
    threshold (x <= log(1 - threshold)); the interval moved with the ratio must exclude 1 (x < log_ratio -
    log(ci_high)); the run-level t test at the job's level (x < t(decisive_alpha, dof) * scale); the Mann-Whitney
    test of the current samples moved to x against the baseline's at ``alpha`` (searched by bisection; skipped for
    a side above BOOTSTRAP_SAMPLES, where it is never the binding part). The change is the tightest of them."""
    if current.size < samples_needed(rules, pooled.size):
        return None
    bound = min(math.log1p(-rules.threshold), log_ratio - math.log(ci_high))
    if scale > 0:
        bound = min(bound, float(scipy_stats.t.ppf(rules.decisive_alpha, dof)) * scale)
    if max(current.size, pooled.size) <= BOOTSTRAP_SAMPLES:
        moved = _sample_test_bound(current, pooled, log_ratio, bound, higher_is_better=higher_is_better, rules=rules)
        if moved is None:
            return None
        bound = moved
    return -math.expm1(bound)


def _sample_test_bound(
    current: np.ndarray, pooled: np.ndarray, log_ratio: float, start: float, *, higher_is_better: bool, rules: Rules
) -> float | None:
    """The largest oriented log ratio x <= ``start`` at which the current samples, scaled so their ratio reads x,
    are worse than the baseline's by the one-sided Mann-Whitney test at ``alpha``; None if not even a 1000x change
    is. Mostly the test agrees at ``start`` already, and one test call answers (the session makes one per metric)."""
    side = "less" if higher_is_better else "greater"

    def significant(x: float) -> bool:
        factor = math.exp(x - log_ratio) if higher_is_better else math.exp(log_ratio - x)
        return float(scipy_stats.mannwhitneyu(current * factor, pooled, alternative=side).pvalue) < rules.alpha

    if significant(start):
        return start
    low, high = -math.log(1000.0), start
    if not significant(low):
        return None
    for _ in range(16):  # to ~1e-4 in log ratio: a tenth of the figure's printed precision
        middle = (low + high) / 2
        low, high = (middle, high) if significant(middle) else (low, middle)
    return low


def exact_agreement(
    current: Sequence[float] | np.ndarray, baseline_runs: Sequence[Sequence[float] | np.ndarray]
) -> bool:
    """Whether the metric's own evidence says it has no between-run noise: a deterministic figure.

    True when the baseline holds several runs with exactly the same samples, when the current run repeats the
    only baseline run's samples exactly (a timing never does, to the last bit), or when every run, the current
    one included, is constant. A prior for the noise of timings then has nothing to stand in for.
    """
    runs = [np.sort(np.asarray(run, dtype=float)) for run in baseline_runs if len(run) > 0]
    if not runs:
        return False
    now = np.sort(np.asarray(current, dtype=float))
    if len(runs) >= 2 and all(np.array_equal(run, runs[0]) for run in runs[1:]):
        return True
    if len(runs) == 1 and np.array_equal(now, runs[0]):
        return True
    return all(run.size > 0 and run[0] == run[-1] for run in [*runs, now])


def pooled_run_noise(
    log_run_medians: np.ndarray,
    rules: Rules,
    *,
    own_only: bool = False,
    groups: Sequence[Sequence[int]] | None = None,
) -> tuple[float, float]:
    """Between-run sd of log medians, pooled with the prior; returns (sd, degrees of freedom).

    A scaled-inverse-chi-square prior of ``prior_runs`` degrees of freedom at ``run_noise`` combined with the
    sample variance of the baseline's run medians (k - 1 degrees of freedom). ``own_only`` (an exact figure,
    ``exact_agreement``) leaves the prior out: the runs' own variance, zero when they agree or there is one.
    ``groups`` (the runs' indexes by sitting, several sittings) takes each run's deviation from its own sitting's
    mean, k - s degrees of freedom: the shift between sittings is ``sitting_shift_noise``'s, not counted twice.
    """
    k = len(log_run_medians)
    if groups is not None and len(groups) > 1 and not own_only:
        residuals = [float(log_run_medians[i] - np.mean(log_run_medians[list(g)])) for g in groups for i in g]
        sample_dof = k - len(groups)
        sample_var = sum(r * r for r in residuals) / sample_dof if sample_dof > 0 else 0.0
    else:
        sample_dof = max(k - 1, 0)
        sample_var = float(np.var(log_run_medians, ddof=1)) if k >= 2 else 0.0
    if own_only:  # runs that agree exactly have no spread, not a rounding error's worth
        exact_var = 0.0 if k < 2 or np.ptp(log_run_medians) == 0 else sample_var
        return math.sqrt(exact_var), float(max(sample_dof, 1))
    dof = sample_dof + rules.prior_dof
    if dof == 0:
        return 0.0, 1.0
    var = (sample_dof * sample_var + rules.prior_dof * rules.prior_noise**2) / dof
    return math.sqrt(var), dof


def smallest_decided_change(runs: Sequence[Sequence[float]], rules: Rules) -> float | None:
    """The smallest change (a fraction) a baseline of these runs can decide in the sitting it was recorded in, at
    the job's level: the run-level test's critical value times its scale. None with fewer than two runs, or for a
    figure whose runs agree exactly (it has no between-run noise). Said once at save time, so a metric whose runs
    vary more than its threshold can resolve is known for what it is before any verdict is read."""
    kept = [_as_array(run, "baseline run") for run in runs if len(run) > 0]
    if len(kept) < 2 or exact_agreement(kept[-1], kept[:-1]):
        return None
    log_medians = np.log([np.median(run) for run in kept])
    run_sd, dof = pooled_run_noise(log_medians, rules)
    scale = run_sd * math.sqrt(1.0 + 1.0 / len(kept))
    return math.expm1(float(scipy_stats.t.ppf(1 - rules.decisive_alpha, dof)) * scale)


def sitting_shift_noise(
    log_run_medians: np.ndarray, groups: Sequence[Sequence[int]], rules: Rules
) -> tuple[float, float]:
    """The sd (log scale) of the machine's shift between sittings: the spread of the sittings' mean log medians
    (s - 1 degrees of freedom) pooled with the prior ``sitting_noise`` at ``prior_runs``; returns (sd, dof).

    A sitting's mean also carries its runs' own noise, so this errs wide where runs are few per sitting, never
    narrow. With one sitting it is the prior alone."""
    means = [float(np.mean(log_run_medians[list(group)])) for group in groups if len(group) > 0]
    sample_dof = max(len(means) - 1, 0)
    sample_var = float(np.var(means, ddof=1)) if len(means) >= 2 else 0.0
    dof = sample_dof + rules.prior_runs
    if dof == 0:
        return 0.0, 1.0
    return math.sqrt((sample_dof * sample_var + rules.prior_runs * rules.sitting_noise**2) / dof), dof


def _sitting_groups(sittings: Sittings | None, runs: int) -> tuple[tuple[int, ...], ...]:
    """The runs' indexes by sitting; one sitting of all when not told (or told of another number of runs)."""
    if sittings is None or sorted(i for group in sittings.groups for i in group) != list(range(runs)):
        return (tuple(range(runs)),)
    return sittings.groups


def _satterthwaite(*terms: tuple[float, float]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of variances, each given as (sd, its dof)."""
    total = sum(sd**2 for sd, _ in terms)
    spread = sum(sd**4 / dof for sd, dof in terms if dof > 0 and sd > 0)
    return total**2 / spread if spread > 0 else min(dof for _, dof in terms)


def sibling_run_noise(siblings: Sequence[Sequence[Sequence[float]]], rules: Rules) -> tuple[float, float]:
    """Pooled between-run sd (log scale) of sibling metrics, each given as its baseline runs' samples; returns
    (sd, degrees of freedom), (0, 0) when none counts.

    A sibling counts with k - 1 degrees of freedom when it holds k >= 2 runs, its runs' medians are not all one
    figure (a count or a loss value has no drift to lend), and no run is NOISY by spread (``Rules.noise_limit``:
    a metric never judged would lend the others a noise they do not have). The pool is the plain pooled
    variance, sum((k - 1) s^2) / sum(k - 1): unbiased where the siblings share one noise, and where they do not
    it errs toward wider (AMBIGUOUS), never toward a false flag.
    """
    total, dof = 0.0, 0
    for runs in siblings:
        arrays = [np.asarray(run, dtype=float) for run in runs if len(run) > 0]
        if len(arrays) < 2 or any(a.ndim != 1 or not np.all(np.isfinite(a)) or np.any(a <= 0) for a in arrays):
            continue
        log_medians = np.log([np.median(a) for a in arrays])
        if np.ptp(log_medians) == 0 or any(summarize(a).spread > rules.noise_limit for a in arrays):
            continue
        total += float(np.var(log_medians, ddof=1)) * (len(arrays) - 1)
        dof += len(arrays) - 1
    return (math.sqrt(total / dof), float(dof)) if dof else (0.0, 0.0)


def with_siblings(rules: Rules, siblings: Sequence[Sequence[Sequence[float]]]) -> Rules:
    """``rules`` with the prior raised by what the sibling metrics' baseline runs show (``sibling_run_noise``):
    the one place the session, `gpuperf compare` and `gpuperf variance` form a metric's rules from its siblings."""
    noise, dof = sibling_run_noise(siblings, rules)
    return replace(rules, sibling_noise=noise, sibling_dof=dof)


def ratio_interval(
    current: np.ndarray,
    runs: Sequence[np.ndarray],
    run_sd: float,
    *,
    higher_is_better: bool,
    rules: Rules,
    location: float = 50.0,
) -> tuple[float, float]:
    """Bootstrap interval of the oriented ratio of medians (of the ``location`` percentiles: ``estimate``).

    Resamples samples inside the current run and inside each baseline run, resamples baseline runs when
    there are several, and adds the current run's own between-run deviation (normal, ``run_sd``) that no
    resampling of one run can see.
    """
    rng = np.random.default_rng(rules.seed)
    b = rules.resamples
    current_medians = _bootstrap_medians(rng, current, b, location)
    per_run = np.stack([_bootstrap_medians(rng, run, b, location) for run in runs], axis=1)
    if len(runs) > 1:
        picks = rng.integers(0, len(runs), size=(b, len(runs)))
        per_run = np.take_along_axis(per_run, picks, axis=1)
    baseline_medians = np.median(per_run, axis=1)
    log_ratio = np.log(current_medians) - np.log(baseline_medians)
    if not higher_is_better:
        log_ratio = -log_ratio
    log_ratio = log_ratio + rng.normal(0.0, run_sd, size=b)
    tail = (1 - rules.confidence) / 2
    low, high = np.quantile(log_ratio, [tail, 1 - tail])
    return math.exp(float(low)), math.exp(float(high))


def _bootstrap_medians(rng: np.random.Generator, values: np.ndarray, b: int, location: float = 50.0) -> np.ndarray:
    """``b`` bootstrap medians (``location`` percentiles) of ``values``, in memory bounded whatever their count
    (BOOTSTRAP_SAMPLES).

    Up to BOOTSTRAP_SAMPLES values, each resample is a whole one, drawn as always (the same draws, so the same
    verdicts). A larger run is resampled m out of n (m = BOOTSTRAP_SAMPLES), in blocks of rows, and each median's
    deviation from the run's median scaled by sqrt(m / n): the m-out-of-n bootstrap (Bickel, Goetze and van Zwet
    1997), whose spread of the median matches the full resample's for large n."""
    n = values.size
    if n <= BOOTSTRAP_SAMPLES:
        return _at(rng.choice(values, size=(b, n), replace=True), location)
    m = BOOTSTRAP_SAMPLES
    rows = max(1, BOOTSTRAP_BLOCK // m)
    medians = np.empty(b)
    for start in range(0, b, rows):
        stop = min(b, start + rows)
        medians[start:stop] = _at(rng.choice(values, size=(stop - start, m), replace=True), location)
    centre = float(_at(values, location))
    return centre + (medians - centre) * math.sqrt(m / n)


def samples_needed(rules: Rules, baseline_n: int) -> int:
    """Smallest n for which a one-sided Mann-Whitney test of n against baseline_n can reach p < alpha.

    The smallest attainable exact p-value is 1 / C(n + m, n); asv's 5-vs-5 (1/252) barely clears 0.01.
    """
    n = 1
    while math.comb(n + baseline_n, n) * rules.alpha <= 1:
        n += 1
    return n


def _at(values: np.ndarray, location: float) -> Any:
    """The ``location`` percentile of ``values`` (of each row of a 2-d array); np.median's own path at 50, so
    the median's verdicts keep their exact draws."""
    if location == 50.0:
        return np.median(values, axis=-1)
    return np.percentile(values, location, axis=-1)


def _as_array(samples: Sequence[float] | np.ndarray, what: str) -> np.ndarray:
    values = np.asarray(samples, dtype=float)
    if values.ndim != 1 or values.size == 0:
        raise ValueError(f"{what}: need a non-empty flat list of numbers, got shape {values.shape}")
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise ValueError(f"{what}: samples must be finite positive numbers, got {values.tolist()[:8]}")
    return values
