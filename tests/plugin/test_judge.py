"""core/verdict/judge.py: one verdict per metric, from the baseline comparison or the metric's own rule."""

from __future__ import annotations

import json

import pytest

from pytest_gpuperf.core.stats.unpaired import Rules
from pytest_gpuperf.core.verdict.checks import Doubt
from pytest_gpuperf.core.verdict.judge import CurveMatch, External, StepsToTarget, judge
from pytest_gpuperf.core.verdict.vocabulary import Verdict

RULES = Rules(threshold=0.02, noise_limit=0.10, run_noise=0.01)


def _curves(offset: float, seeds: int = 3) -> list[list[float]]:
    return [[max(1.0, 3.0 - 0.1 * i) + offset + 0.001 * seed for i in range(60)] for seed in range(seeds)]


def test_a_metric_without_a_rule_is_the_baseline_comparison() -> None:
    samples = [1.0 + 0.001 * i for i in range(10)]
    assert judge(samples, [], higher_is_better=False, rules=RULES).verdict is Verdict.NO_BASELINE
    slower = judge([1.5 * s for s in samples], [samples, samples], higher_is_better=False, rules=RULES)
    assert slower.verdict is Verdict.REGRESSED


def test_a_rule_decides_and_the_comparisons_figures_stay() -> None:
    samples = [100.0 + i for i in range(5)]
    rule = StepsToTarget(current=[100, 101, 102, 103, 104], reference=[100, 101, 102])
    judged = judge([2 * s for s in samples], [samples, samples], higher_is_better=False, rules=RULES, rule=rule)
    assert judged.ratio is not None and judged.ratio < 0.6  # the timing comparison's figures, for the report
    assert judged.verdict is Verdict.PASS and judged.reason.startswith(rule.name)


@pytest.mark.parametrize(
    ("current", "reference", "verdict", "says"),
    [
        ([100, 101, 99, 100, 102], [100, 98, 102], Verdict.PASS, "consistent"),
        ([130, 131, 129, 132, 130], [100, 98, 102], Verdict.REGRESSED, "converges slower"),
        ([60, 61, 59, 60, 62], [100, 98, 102], Verdict.REGRESSED, "converges faster"),
        ([100, None, 100], [100, 98, 102], Verdict.REGRESSED, "never reached"),
        ([100, 101, 99], [100], Verdict.NO_BASELINE, "--gpuperf-save"),
    ],
)
def test_steps_to_target_rule(current: list[int | None], reference: list[int], verdict: Verdict, says: str) -> None:
    decision = StepsToTarget(current=current, reference=reference).decide()
    assert decision.verdict is verdict and says in decision.reason, decision


def _curve_rule(current: list[list[float]], reference: list[list[float]], steps: list[int | None]) -> CurveMatch:
    return CurveMatch(current=current, reference=reference, current_steps=steps, reference_steps=[20, 20, 20],
                      target="1.05 within 60 steps", warmup=5, window=5)  # fmt: skip


def test_curve_match_rule() -> None:
    assert _curve_rule(_curves(0.0), _curves(0.0), [20, 20, 20]).decide().verdict is Verdict.PASS
    off = _curve_rule(_curves(0.2), _curves(0.0), [20, 20, 20]).decide()
    assert off.verdict is Verdict.REGRESSED and "left the golden band" in off.reason
    missed = _curve_rule(_curves(0.0), _curves(0.0), [20, None, 20]).decide()
    assert missed.verdict is Verdict.REGRESSED and "never reached" in missed.reason
    alone = _curve_rule(_curves(0.0), [], [20, 20, 20]).decide()
    assert alone.verdict is Verdict.NO_BASELINE and "every seed reached" in alone.reason
    assert _curve_rule(_curves(0.0), [], [20, None, 20]).decide().verdict is Verdict.REGRESSED


def test_an_external_verdict_is_one_a_rule_may_give() -> None:
    with pytest.raises(ValueError, match="must be one of PASS, REGRESSED, NO_BASELINE, got 'IMPROVED'"):
        External(rule="mine", verdict=Verdict.IMPROVED, reason="x")


def test_a_failed_convergence_check_keeps_the_tests_throughput_metrics(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(
        test_train="""
        import os, pytest
        from pytest_gpuperf.core.verdict.judge import CurveMatch

        def curves(offset):
            return [[max(1.0, 3.0 - 0.1 * i) + offset + 0.001 * s for i in range(60)] for s in range(3)]

        @pytest.mark.perf
        def test_t(perf):
            perf.record("tokens_per_s", [1000.0 + i for i in range(10)], unit="tok/s", higher_is_better=True)
            offset = float(os.environ.get("LOSS_OFFSET", "0"))
            current = curves(offset)
            reference = [list(c.values) for c in perf.baseline_curves("loss")]
            for curve in current:
                perf.record_curve("loss", range(60), curve)
            perf.record("final_loss", [c[-1] for c in current], unit="nats", higher_is_better=False,
                        rule=CurveMatch(current=current, reference=reference, current_steps=[20, 20, 20],
                                        reference_steps=[20, 20, 20], target="1.05", warmup=5, window=5))
        """
    )
    pytester.runpytest("--gpuperf-save", "--gpuperf-device", "cpu").assert_outcomes(passed=1)
    pytester.runpytest("--gpuperf-save", "--gpuperf-device", "cpu").assert_outcomes(passed=1)  # 2 golden runs
    monkeypatch.setenv("LOSS_OFFSET", "0.3")
    result = pytester.runpytest("--gpuperf-device", "cpu", "--gpuperf-results", "run.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*final_loss: REGRESSED - loss curve vs golden band*left the golden band*"])
    judged = {r["metric"]: r for r in json.loads((pytester.path / "run.json").read_text())["results"]}
    assert set(judged) == {"tokens_per_s", "final_loss"}  # the throughput is judged and kept beside it
    assert judged["final_loss"]["verdict"] == "REGRESSED"
    assert judged["final_loss"]["context"]["judged_by"].startswith("loss curve vs golden band")


def test_the_figures_and_the_rule_are_two_steps_whose_composition_is_compare() -> None:
    from pytest_gpuperf.core.stats.unpaired import estimate
    from pytest_gpuperf.core.verdict.stored import compare, decide

    samples = [1.0 + 0.001 * i for i in range(10)]
    for current in (samples, [1.5 * s for s in samples], [0.7 * s for s in samples]):
        figures = estimate(current, [samples, samples], higher_is_better=False, rules=RULES)
        assert figures is not None and not hasattr(figures, "verdict")  # an estimator returns figures only
        decided = decide(figures, rules=RULES)
        assert decided == compare(current, [samples, samples], higher_is_better=False, rules=RULES)
        assert decide(figures, rules=RULES, doubt=Doubt(reason="clocks fell")).verdict is Verdict.NOISY
    assert estimate(samples, [], higher_is_better=False, rules=RULES) is None
    assert decide(None, rules=RULES).verdict is Verdict.NO_BASELINE


def test_one_vocabulary_holds_missing_with_the_strings_users_see() -> None:
    assert Verdict.MISSING.value == "MISSING" and Verdict("MISSING") is Verdict.MISSING
    assert [v.value for v in Verdict] == [
        "PASS", "REGRESSED", "IMPROVED", "NOISY", "AMBIGUOUS", "NO_BASELINE", "MISSING"
    ]  # fmt: skip


def test_the_not_comparable_checks_return_a_reason_or_none_in_their_stated_order() -> None:
    from pytest_gpuperf.core.verdict.checks import DeviceClocks, Unjudgeable, not_comparable

    clocks = {"clock_check": {"comparable": False, "detail": "SM clock 1410 MHz < 90% of baseline 1980 MHz"}}
    assert Unjudgeable().check({}) is None and DeviceClocks().check({}) is None
    assert DeviceClocks().check({"clock_check": {"comparable": True, "detail": "fine"}}) is None
    assert not_comparable({}) is None
    both = not_comparable({**clocks, "unjudgeable": "p99 of 24 requests"})
    assert both == (
        "p99 of 24 requests; measured under different device conditions (SM clock 1410 MHz < 90% of baseline 1980 MHz)"
    )


def test_rejudge_reads_the_sessions_facts_back_as_the_session_decided() -> None:
    from pytest_gpuperf.core.verdict.judge import rejudge

    samples = [1.0 + 0.001 * i for i in range(10)]
    slower = [1.5 * s for s in samples]
    plain = rejudge(slower, [samples, samples], [{}, {}], context={}, unit="s", higher_is_better=False, rules=RULES)
    assert plain == judge(slower, [samples, samples], higher_is_better=False, rules=RULES)
    assert plain.verdict is Verdict.REGRESSED
    unconfirmed = rejudge(
        slower, [samples, samples], [{}, {}], context={"unconfirmed_regression": 2}, unit="s",
        higher_is_better=False, rules=RULES,
    )  # fmt: skip
    assert unconfirmed.verdict is Verdict.AMBIGUOUS and unconfirmed.reason.startswith(
        "REGRESSED in attempt 2 but not in attempt 1: not confirmed; "
    )
    noisy = rejudge(
        slower, [samples, samples], [{}, {}], context={"unjudgeable": "too few"}, unit="s", higher_is_better=False,
        rules=RULES,
    )  # fmt: skip
    assert noisy.verdict is Verdict.NOISY and noisy.reason.startswith("too few; not judged")
    kept = rejudge(
        slower, [samples, samples], [{}, {}], context={"judged_by": "steps"}, unit="s", higher_is_better=False,
        rules=RULES, recorded_verdict="PASS", recorded_reason="",
    )  # fmt: skip
    assert kept.verdict is Verdict.PASS and kept.reason == "steps: recorded verdict" and kept.ratio == plain.ratio


def test_rejudge_spends_alpha_over_the_looks_the_session_recorded() -> None:
    """A measurement extended by sequential sampling (perf.py records ``extended.looks``) is judged at alpha / looks
    by the session; `gpuperf compare` reads the same looks back, so its row says the same."""
    from pytest_gpuperf.core.verdict.judge import judge_on_machine, rejudge

    samples = [1.0 + 0.001 * i for i in range(10)]
    slower = [1.5 * s for s in samples]
    extended = {"extended": {"looks": 3, "stopped": "decided"}}
    session = judge_on_machine(
        slower, [samples, samples], [{}, {}], context=extended, unit="s", higher_is_better=False, rules=RULES, looks=3
    ).comparison
    again = rejudge(slower, [samples, samples], [{}, {}], context=extended, unit="s", higher_is_better=False,
                    rules=RULES)  # fmt: skip
    assert again == session
    assert session.reason.endswith(f"[3 looks, alpha {RULES.alpha / 3:.2g} each (sequential)]"), session.reason
    once = rejudge(slower, [samples, samples], [{}, {}], context={}, unit="s", higher_is_better=False, rules=RULES)
    assert "looks" not in once.reason
