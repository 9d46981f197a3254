"""The verdict rules on seeded synthetic samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.core.stats.unpaired import (
    Rules,
    pooled_run_noise,
    samples_needed,
    sibling_run_noise,
    summarize,
)
from pytest_gpuperf.core.verdict.checks import Doubt
from pytest_gpuperf.core.verdict.stored import compare
from pytest_gpuperf.core.verdict.vocabulary import Verdict

RULES = Rules(threshold=0.02, run_noise=0.005, noise_limit=0.10)


def runs_of(
    rng: np.random.Generator, median: float, *, runs: int, n: int = 20, sd: float = 0.01, run_sd: float = 0.003
) -> list[list[float]]:
    """Timing-like samples: a per-run offset (between-run noise) times within-run noise."""
    out = []
    for _ in range(runs):
        run_median = median * math.exp(rng.normal(0, run_sd))
        out.append(list(run_median * np.exp(rng.normal(0, sd, size=n))))
    return out


def test_summary_is_robust() -> None:
    summary = summarize([1.0, 1.0, 1.0, 1.0, 100.0])
    assert summary.median == 1.0
    assert summary.spread == 0.0
    assert summary.n == 5


def test_no_baseline() -> None:
    assert compare([1.0, 1.1, 0.9], [], higher_is_better=False, rules=RULES).verdict is Verdict.NO_BASELINE


def test_unchanged_passes() -> None:
    rng = np.random.default_rng(1)
    baseline = runs_of(rng, 1.0, runs=5)
    current = runs_of(rng, 1.0, runs=1)[0]
    result = compare(current, baseline, higher_is_better=False, rules=RULES)
    assert result.verdict is Verdict.PASS, result
    assert result.ci_low <= 1 <= result.ci_high


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_ten_percent_worse_regresses_in_either_orientation(higher_is_better: bool) -> None:
    rng = np.random.default_rng(2)
    baseline = runs_of(rng, 1.0, runs=5)
    worse = 1.10 if not higher_is_better else 1 / 1.10
    current = runs_of(rng, worse, runs=1)[0]
    result = compare(current, baseline, higher_is_better=higher_is_better, rules=RULES)
    assert result.verdict is Verdict.REGRESSED, result
    assert result.ratio == pytest.approx(1 / 1.10, rel=0.02)
    assert result.p_worse < 0.01


def test_ten_percent_better_is_improved() -> None:
    rng = np.random.default_rng(3)
    baseline = runs_of(rng, 1.0, runs=5)
    current = runs_of(rng, 0.9, runs=1)[0]
    result = compare(current, baseline, higher_is_better=False, rules=RULES)
    assert result.verdict is Verdict.IMPROVED
    assert result.ratio > 1.08


def test_significant_but_smaller_than_delta_is_not_regressed() -> None:
    rng = np.random.default_rng(4)
    baseline = runs_of(rng, 1.0, runs=10, n=200, sd=0.001, run_sd=0.0005)
    current = runs_of(rng, 1.01, runs=1, n=200, sd=0.001, run_sd=0.0005)[0]
    result = compare(current, baseline, higher_is_better=False, rules=Rules(threshold=0.02, run_noise=0.001))
    assert result.p_worse < 0.01  # detectable ...
    assert result.verdict is Verdict.PASS  # ... but smaller than what matters, and the interval is inside the band


def test_noisy_side_is_reported_noisy_never_pass() -> None:
    rng = np.random.default_rng(5)
    baseline = runs_of(rng, 1.0, runs=3)
    current = list(np.exp(rng.normal(0, 0.3, size=20)))
    result = compare(current, baseline, higher_is_better=False, rules=RULES)
    assert result.verdict is Verdict.NOISY
    assert "current run" in result.reason


def test_between_run_noise_prevents_a_false_regression() -> None:
    """A run-level shift of 2.5% that the baseline's own runs show is normal must not be REGRESSED,
    although a Mann-Whitney test on the raw samples alone finds it significant."""
    rng = np.random.default_rng(6)
    baseline = [list(m * np.exp(rng.normal(0, 0.002, size=30))) for m in (1.0, 1.02, 0.98, 1.025, 0.975)]
    current = list(1.025 * np.exp(rng.normal(0, 0.002, size=30)))
    result = compare(current, baseline, higher_is_better=False, rules=RULES)
    assert result.verdict is not Verdict.REGRESSED
    assert result.run_noise > 0.015


def test_pooled_run_noise_tends_to_the_data_with_many_runs() -> None:
    rules = Rules(threshold=0.02, run_noise=0.01, prior_runs=4)
    few, _ = pooled_run_noise(np.log([1.0, 1.0]), rules)
    many, dof = pooled_run_noise(np.log(np.exp(np.random.default_rng(0).normal(0, 0.03, 400))), rules)
    assert few < 0.01  # one degree of freedom of zero variance pulls the prior down a little
    assert many == pytest.approx(0.03, rel=0.1)
    assert dof == 399 + 4


def test_false_positive_rate_under_noise_is_at_most_alpha() -> None:
    """Unchanged runs drawn from the model the rule assumes: flagged REGRESSED at most ~alpha of the time."""
    rng = np.random.default_rng(7)
    rules = Rules(threshold=0.01, run_noise=0.005, resamples=300)
    flagged = 0
    trials = 300
    for _ in range(trials):
        runs = runs_of(rng, 1.0, runs=6, n=20, sd=0.01, run_sd=0.005)
        if compare(runs[0], runs[1:], higher_is_better=False, rules=rules).verdict is Verdict.REGRESSED:
            flagged += 1
    assert flagged / trials <= 0.02


def test_minimum_samples_to_reach_alpha() -> None:
    assert samples_needed(Rules(threshold=0.02), 5) == 4  # 1/C(9,4) = 1/126 < 0.01; 3 vs 5 gives 1/56
    assert samples_needed(Rules(threshold=0.02), 20) == 2


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [[1.0]]])
def test_bad_samples_are_refused(bad: list) -> None:
    with pytest.raises(ValueError):
        compare(bad, [[1.0, 2.0, 3.0]], higher_is_better=False, rules=RULES)


def test_rules_validate() -> None:
    with pytest.raises(ValueError, match="threshold"):
        Rules(threshold=2.0)


def test_device_conditions_make_a_regression_noisy_and_keep_the_figures() -> None:
    rng = np.random.default_rng(6)
    baseline = runs_of(rng, 1.0, runs=5)
    current = runs_of(rng, 1.20, runs=1)[0]
    plain = compare(current, baseline, higher_is_better=False, rules=RULES)
    assert plain.verdict is Verdict.REGRESSED
    result = compare(
        current,
        baseline,
        higher_is_better=False,
        rules=RULES,
        doubt=Doubt(reason="SM clock 1500 MHz < 90% of baseline 1980 MHz"),
    )
    assert result.verdict is Verdict.NOISY
    assert "SM clock 1500 MHz" in result.reason
    assert (result.ratio, result.ci_low, result.p_worse) == (plain.ratio, plain.ci_low, plain.p_worse)


def test_device_conditions_do_not_invent_a_baseline() -> None:
    result = compare([1.0, 1.1, 0.9], [], higher_is_better=False, rules=RULES, doubt=Doubt(reason="throttled"))
    assert result.verdict is Verdict.NO_BASELINE


def test_too_few_samples_to_decide_say_so() -> None:
    result = compare([1.2, 1.21], [[1.0, 1.01]], higher_is_better=False, rules=RULES)
    assert result.verdict is Verdict.AMBIGUOUS
    assert "cannot reach p < 0.01" in result.reason


# -- exact figures: the between-run noise is the metric's own --


@pytest.mark.parametrize(
    ("current", "baseline"),
    [
        ([412.0] * 5, [[412.0] * 5] * 5),  # a count, constant in every run
        ([412.0, 412.0, 412.0], [[412.0] * 3]),  # one baseline run is enough when both are constant
        ([2.3125, 2.375, 2.3438], [[2.3438, 2.3125, 2.375]] * 3),  # loss values of three seeds, reproduced
        ([2.3125, 2.375, 2.3438], [[2.375, 2.3438, 2.3125]]),  # ... repeated exactly against one run
    ],
)
def test_an_unchanged_exact_figure_passes_not_ambiguous(current: list[float], baseline: list[list[float]]) -> None:
    result = compare(current, baseline, higher_is_better=False, rules=Rules(threshold=0.02, run_noise=0.015))
    assert result.verdict is Verdict.PASS, result
    assert result.run_noise == 0.0 and result.ratio == 1.0
    assert "exact figure" in result.reason


def test_an_exact_figure_that_changed_beyond_the_threshold_is_decided() -> None:
    rules = Rules(threshold=0.02, run_noise=0.015)
    worse = compare([420.0] * 5, [[400.0] * 5] * 3, higher_is_better=False, rules=rules)
    assert worse.verdict is Verdict.REGRESSED and worse.p_worse is not None and worse.p_worse < 0.01
    better = compare([380.0] * 5, [[400.0] * 5] * 3, higher_is_better=False, rules=rules)
    assert better.verdict is Verdict.IMPROVED
    within = compare([401.0] * 5, [[400.0] * 5] * 3, higher_is_better=False, rules=rules)
    assert within.verdict is Verdict.PASS  # 0.25% is a real change, but below what matters


def test_exact_runs_at_different_values_use_their_own_spread() -> None:
    """Constant runs that differ from each other: a deterministic figure per run (a seed's loss), whose own
    between-run spread, not the prior, is the noise."""
    rules = Rules(threshold=0.02, run_noise=0.0001)
    result = compare([101.0] * 4, [[100.0] * 4, [104.0] * 4, [98.0] * 4], higher_is_better=False, rules=rules)
    assert result.run_noise == pytest.approx(float(np.std(np.log([100.0, 104.0, 98.0]), ddof=1)))
    assert result.verdict is Verdict.AMBIGUOUS  # ~3% spread of its own on 2 degrees of freedom decides nothing


def test_timings_still_shrink_toward_the_prior() -> None:
    """Runs that merely agree closely are timings, not exact figures: the prior still weighs."""
    rng = np.random.default_rng(11)
    baseline = runs_of(rng, 1.0, runs=2, sd=0.01, run_sd=0.0)
    result = compare(baseline[0], baseline, higher_is_better=False, rules=Rules(threshold=0.02, run_noise=0.015))
    assert result.run_noise is not None and result.run_noise > 0.005
    assert "exact figure" not in result.reason


def test_sibling_run_noise_pools_the_siblings_that_can_lend_a_drift() -> None:
    rng = np.random.default_rng(21)
    drifting = [runs_of(rng, 1.0, runs=3, sd=0.01, run_sd=0.05) for _ in range(30)]
    noise, dof = sibling_run_noise(drifting, RULES)
    assert dof == 60
    assert noise == pytest.approx(0.05, rel=0.2)
    count = [[7.0] * 5, [7.0] * 5]  # an exact figure: no drift to lend
    noisy = [list(np.exp(rng.normal(0, 0.5, 20))), list(np.exp(rng.normal(0.3, 0.5, 20)))]  # NOISY by spread
    one_run = [[1.0, 1.01]]
    assert sibling_run_noise([count, noisy, one_run], RULES) == (0.0, 0.0)
    assert sibling_run_noise([*drifting, count, noisy, one_run], RULES) == (noise, dof)


def test_the_prior_is_raised_by_noisy_siblings_and_never_lowered_by_quiet_ones() -> None:
    rules = Rules(threshold=0.02, run_noise=0.015, prior_runs=4)
    assert rules.prior_noise == 0.015
    raised = Rules(threshold=0.02, run_noise=0.015, prior_runs=4, sibling_noise=0.05, sibling_dof=36)
    assert raised.prior_noise == pytest.approx(math.sqrt((4 * 0.015**2 + 36 * 0.05**2) / 40))
    assert Rules(threshold=0.02, run_noise=0.015, sibling_noise=0.002, sibling_dof=400).prior_noise == 0.015
    thin = Rules(threshold=0.02, run_noise=0.015, prior_runs=4, sibling_noise=0.05, sibling_dof=1)
    assert 0.015 < thin.prior_noise < 0.03  # one sibling degree of freedom moves it a little, not to 5%
    with pytest.raises(ValueError):
        Rules(threshold=0.02, sibling_dof=-1)


def test_a_run_slower_by_what_its_siblings_drift_is_not_regressed_and_a_large_change_still_is() -> None:
    """The newest VM's case: a training step's two baseline runs agreed within 3%, the next process read it 11%
    slower, confirmed, with nothing changed; its siblings' baseline runs drifted ~5% between processes."""
    rng = np.random.default_rng(22)
    baseline = [list(m * np.exp(rng.normal(0, 0.01, 10))) for m in (1.0, 1.03)]
    slower = list(1.13 * np.exp(rng.normal(0, 0.01, 10)))
    alone = Rules(threshold=0.02, run_noise=0.015)
    assert compare(slower, baseline, higher_is_better=False, rules=alone).verdict is Verdict.REGRESSED
    siblings = [runs_of(rng, 1.0, runs=3, sd=0.01, run_sd=0.05) for _ in range(12)]
    noise, dof = sibling_run_noise(siblings, alone)
    moderated = Rules(threshold=0.02, run_noise=0.015, sibling_noise=noise, sibling_dof=dof)
    result = compare(slower, baseline, higher_is_better=False, rules=moderated)
    assert result.verdict is Verdict.AMBIGUOUS
    assert "other parameters vary" in result.reason and "gpuperf ab" in result.reason
    assert result.run_noise is not None and result.run_noise > 0.03
    much_slower = list(1.5 * np.exp(rng.normal(0, 0.01, 10)))
    assert compare(much_slower, baseline, higher_is_better=False, rules=moderated).verdict is Verdict.REGRESSED


def test_rules_for_looks_spend_alpha_and_coverage() -> None:
    rules = Rules(threshold=0.02, alpha=0.01, confidence=0.95)
    assert rules.for_looks(1) is rules
    three = rules.for_looks(3)
    assert three.alpha == pytest.approx(0.01 / 3) and three.confidence == pytest.approx(1 - 0.05 / 3)
    with pytest.raises(ValueError, match="looks"):
        rules.for_looks(0)


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_a_change_whose_interval_holds_no_change_is_not_flagged(
    higher_is_better: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tests say 8% worse (or better) at p < alpha, but the interval printed beside the verdict still holds
    1.0 (a rate point of three runs read [0.871, 1.015] beside p=0.0088): the verdict must not contradict it."""
    import pytest_gpuperf.core.stats.unpaired as stats

    base = [[0.0290, 0.0296, 0.0301], [0.0293, 0.0297, 0.0300], [0.0291, 0.0295, 0.0299], [0.0294, 0.0296, 0.0302]]
    worse = [0.0303, 0.0323, 0.0324]
    current = [1 / v for v in worse] if higher_is_better else worse
    baseline = [[1 / v for v in run] for run in base] if higher_is_better else base
    clear = compare(current, baseline, higher_is_better=higher_is_better, rules=RULES)
    assert clear.verdict is Verdict.REGRESSED and clear.ci_high < 1
    monkeypatch.setattr(stats, "ratio_interval", lambda *args, **kwargs: (0.871, 1.015))
    straddling = compare(current, baseline, higher_is_better=higher_is_better, rules=RULES)
    assert straddling.p_worse < RULES.alpha and straddling.verdict is Verdict.AMBIGUOUS
    # mirrored: a clear improvement, then the same figures beside an interval that holds 1.0
    slow = [[0.0310, 0.0323, 0.0324], [0.0312, 0.0320, 0.0326], [0.0311, 0.0322, 0.0325], [0.0313, 0.0321, 0.0327]]
    fast = [0.0290, 0.0296, 0.0301, 0.0293, 0.0297, 0.0300]
    if higher_is_better:
        slow, fast = [[1 / v for v in run] for run in slow], [1 / v for v in fast]
    monkeypatch.undo()
    assert compare(fast, slow, higher_is_better=higher_is_better, rules=RULES).verdict is Verdict.IMPROVED
    monkeypatch.setattr(stats, "ratio_interval", lambda *args, **kwargs: (0.985, 1.15))
    straddling = compare(fast, slow, higher_is_better=higher_is_better, rules=RULES)
    assert straddling.p_better < RULES.alpha and straddling.verdict is Verdict.AMBIGUOUS


def test_a_time_and_the_rate_of_the_same_samples_share_one_spread_and_one_verdict() -> None:
    """Step times with a tail of slow steps (a loaded machine) and the tokens/s computed from them: IQR / median
    of the times is above the noise limit and of the rates below it, which made the same steps NOISY as a time
    and REGRESSED as a rate. The spread the NOISY rule reads (log Q3/Q1) is the same for both."""
    rng = np.random.default_rng(7)
    times = list(4.0 * np.exp(np.abs(rng.normal(0.0, 0.35, size=30))))  # 4x slower, skewed to the slow side
    rates = [1.0 / t for t in times]
    base_times = runs_of(rng, 1.0, runs=3)
    base_rates = [[1.0 / t for t in run] for run in base_times]
    raw_times, raw_rates = (float(np.subtract(*np.percentile(x, [75, 25])) / np.median(x)) for x in (times, rates))
    rules = Rules(threshold=0.10, run_noise=0.015, noise_limit=(raw_times + raw_rates) / 2)
    assert raw_rates < rules.noise_limit < raw_times  # the figure the rule read before parted the two
    assert summarize(times).spread == pytest.approx(summarize(rates).spread, rel=1e-9)
    as_time = compare(times, base_times, higher_is_better=False, rules=rules)
    as_rate = compare(rates, base_rates, higher_is_better=True, rules=rules)
    assert as_time.verdict is as_rate.verdict is Verdict.REGRESSED
    assert as_time.ratio == pytest.approx(as_rate.ratio, rel=1e-3)  # an even count: a median averages two samples


def test_both_policies_share_one_threshold() -> None:
    from pytest_gpuperf.core.stats.paired import PairedRules
    from pytest_gpuperf.core.stats.thresholds import Thresholds

    for rules in (Rules(threshold=0.03), PairedRules(threshold=0.03)):
        assert isinstance(rules, Thresholds) and rules.threshold == 0.03
        assert rules.band == pytest.approx((math.log(0.97), math.log(1.03)))
    with pytest.raises(ValueError, match="threshold must be a fraction"):
        PairedRules(threshold=0)


def stepped(rng: np.random.Generator, work: float, *, slow_share: float, n: int = 20) -> list[float]:
    """Step times of a call that waits on a collective: its work (1% noise) plus, in ``slow_share`` of the calls,
    a wait of 0.1 to 1.5 times the work (the steps of two gloo ranks on a 2-core VM: deciles 3.2 to 7.5 ms)."""
    times = work * np.exp(rng.normal(0, 0.01, size=n))
    waits = round(n * slow_share)
    times[:waits] += work * rng.uniform(0.1, 1.5, size=waits)
    return list(rng.permutation(times))


@pytest.mark.parametrize("higher_is_better", [False, True])
def test_a_wide_spread_does_not_hide_a_doubled_step(higher_is_better: bool) -> None:
    """Issue 49: the spread of bimodal steps explained any change of their median (2.5x), so a doubled step read
    NOISY. The fastest quarter of the calls is what the work costs: read there, the doubling stands."""
    rng = np.random.default_rng(7)
    baseline = [stepped(rng, 3.3e-3, slow_share=0.5) for _ in range(2)]
    current = stepped(rng, 6.6e-3, slow_share=0.5)
    if higher_is_better:  # the same steps as a rate
        baseline = [[1 / t for t in run] for run in baseline]
        current = [1 / t for t in current]
    result = compare(current, baseline, higher_is_better=higher_is_better, rules=RULES)
    assert result.verdict is Verdict.REGRESSED, result.reason
    assert "read at the fast quartile" in result.reason and "spread" in result.reason
    assert result.ratio == pytest.approx(0.5, rel=0.05)


def test_a_second_population_taking_more_of_the_calls_is_not_a_regression() -> None:
    """The median of steps whose slow calls went from half to 70% moves; the fast quarter does not: NOISY."""
    rng = np.random.default_rng(8)
    baseline = [stepped(rng, 3.3e-3, slow_share=0.5) for _ in range(2)]
    current = stepped(rng, 3.3e-3, slow_share=0.7)
    result = compare(current, baseline, higher_is_better=False, rules=RULES)
    assert result.verdict is Verdict.NOISY, result.reason
    assert result.ratio is not None and result.ratio < 0.8  # the median did move: only the fast quartile holds it


def test_the_other_doubts_still_bound_the_fast_quartile() -> None:
    """A machine state that explains 3x explains a doubled fast quartile too; one of 1.05x does not."""
    rng = np.random.default_rng(9)
    baseline = [stepped(rng, 3.3e-3, slow_share=0.5) for _ in range(2)]
    current = stepped(rng, 6.6e-3, slow_share=0.5)
    busy = compare(current, baseline, higher_is_better=False, rules=RULES, doubt=Doubt(reason="busy", worse=3.0))
    assert busy.verdict is Verdict.NOISY, busy.reason
    mild = compare(current, baseline, higher_is_better=False, rules=RULES, doubt=Doubt(reason="busy", worse=1.05))
    assert mild.verdict is Verdict.REGRESSED and "busy" in mild.reason, mild.reason
