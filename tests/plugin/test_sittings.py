"""Sittings: grouping a baseline's runs by their dates, and the shift between sittings in the verdict."""

from __future__ import annotations

import datetime as dt
import json
import math
from dataclasses import replace

import numpy as np
import pytest

from pytest_gpuperf.core.stats.sittings import Sittings, group_sittings, parse_date
from pytest_gpuperf.core.stats.unpaired import Rules, pooled_run_noise, sitting_shift_noise
from pytest_gpuperf.core.verdict.stored import compare
from pytest_gpuperf.core.verdict.vocabulary import Verdict

RECORDING = ["2026-12-02T18:52:36+00:00", "2026-12-02T18:58:45+00:00", "2026-12-02T19:01:52+00:00"]
NEXT_DAY = "2026-12-03T12:50:00+00:00"
RULES = Rules(threshold=0.02, run_noise=0.015, noise_limit=0.10, sitting_noise=0.08)


def test_runs_minutes_apart_are_one_sitting_and_the_next_day_is_another() -> None:
    later = group_sittings(RECORDING, NEXT_DAY)
    assert later.groups == ((0, 1, 2),)
    assert not later.joined
    assert group_sittings(RECORDING, "2026-12-02T19:10:00+00:00").joined  # the recording's own sitting


def test_sittings_chain_by_gap_in_time_order_whatever_the_store_order() -> None:
    dates = ["2026-12-03T09:00:00+00:00", "2026-12-01T09:00:00+00:00", "2026-12-01T09:40:00+00:00",
             "2026-12-01T10:30:00+00:00"]  # fmt: skip
    sittings = group_sittings(dates, "2026-12-03T09:05:00+00:00")
    assert sittings.groups == ((1, 2, 3), (0,))  # 40 and 50 minutes apart chain; two days later is another
    assert not sittings.joined  # the measurement shares only one of the two sittings


def test_undated_runs_and_an_undated_measurement_err_toward_another_sitting() -> None:
    assert group_sittings(["", RECORDING[0]], RECORDING[0]).groups == ((1,), (0,))
    assert not group_sittings(["", RECORDING[0]], RECORDING[0]).joined
    assert not group_sittings(RECORDING, None).joined
    assert not group_sittings(RECORDING, "yesterday").joined
    assert parse_date("2026-12-02T18:52:36") == parse_date("2026-12-02T18:52:36+00:00")  # naive is UTC


def test_leaving_runs_out_renumbers_the_sittings() -> None:
    sittings = Sittings(groups=((0, 2), (1,), (3,)), joined=False)
    assert sittings.without([1]) == Sittings(groups=((0, 1), (2,)), joined=False)
    assert sittings.without([0, 2]).groups == ((0,), (1,))


def recorded(rng: np.random.Generator, medians: list[float], n: int = 10, sd: float = 0.02) -> list[list[float]]:
    return [list(m * np.exp(rng.normal(0, sd, n))) for m in medians]


def test_a_shift_within_what_sittings_move_is_not_regressed_in_a_new_sitting() -> None:
    # The main job's false REGRESSED of 2026-12-03: tiny-lora-bf16 step time 22.6/21.7 ms in the baseline's
    # sitting, 28.0 ms (20.8% slower) the next day, stack and code unchanged, the canaries within their bands.
    rng = np.random.default_rng(3)
    baseline = recorded(rng, [0.02261, 0.02172])
    now = list(0.0280 * np.exp(rng.normal(0, 0.02, 10)))
    same_sitting = compare(
        now, baseline, higher_is_better=False, rules=RULES, sittings=group_sittings(RECORDING[:2], RECORDING[2])
    )
    assert same_sitting.verdict is Verdict.REGRESSED  # minutes apart, 20% is far beyond the runs' noise
    assert same_sitting.sitting_noise is None
    next_day = compare(
        now, baseline, higher_is_better=False, rules=RULES, sittings=group_sittings(RECORDING[:2], NEXT_DAY)
    )
    assert next_day.verdict is Verdict.AMBIGUOUS
    assert next_day.sitting_noise == pytest.approx(0.08)
    assert next_day.p_worse > RULES.alpha  # the run-level test, with the shift, finds no significant change
    assert "another sitting" in next_day.reason and "gpuperf ab" in next_day.reason


def test_a_change_beyond_what_sittings_move_is_still_decided_in_a_new_sitting() -> None:
    rng = np.random.default_rng(4)
    baseline = recorded(rng, [1.00, 1.02, 0.99])
    sittings = group_sittings(RECORDING, NEXT_DAY)
    worse = compare(list(1.9 * np.exp(rng.normal(0, 0.02, 10))), baseline, higher_is_better=False, rules=RULES,
                    sittings=sittings)  # fmt: skip
    assert worse.verdict is Verdict.REGRESSED
    better = compare(list(0.5 * np.exp(rng.normal(0, 0.02, 10))), baseline, higher_is_better=False, rules=RULES,
                     sittings=sittings)  # fmt: skip
    assert better.verdict is Verdict.IMPROVED


def test_false_regressions_across_sittings_stay_rare_when_sittings_shift_as_the_prior_says() -> None:
    # Simulated: each sitting shifts the machine by N(0, 8%), each run by N(0, 1.5%) more.
    rng = np.random.default_rng(11)
    flagged = 0
    trials = 400
    for _ in range(trials):
        then, now_shift = rng.normal(0, 0.08, 2)
        baseline = recorded(rng, list(np.exp(then + rng.normal(0, 0.015, 3))))
        now = list(math.exp(now_shift + rng.normal(0, 0.015)) * np.exp(rng.normal(0, 0.02, 10)))
        verdict = compare(now, baseline, higher_is_better=False, rules=RULES,
                          sittings=group_sittings(RECORDING, NEXT_DAY)).verdict  # fmt: skip
        flagged += verdict is Verdict.REGRESSED
    assert flagged / trials <= 0.02  # one-sided alpha 0.01, with room for the prior's own uncertainty


def test_the_shift_is_learnt_from_a_baseline_recorded_over_several_sittings() -> None:
    logs = np.log([1.0, 1.01, 1.30, 1.31, 0.80, 0.81])  # three sittings far apart, runs agreeing within each
    groups = ((0, 1), (2, 3), (4, 5))
    within, within_dof = pooled_run_noise(logs, RULES, groups=groups)
    assert within_dof == 3 + RULES.prior_runs  # k - s degrees of freedom of its own
    assert within < 0.015  # the sittings' shifts are not counted as run noise...
    shift, shift_dof = sitting_shift_noise(logs, groups, RULES)
    assert shift_dof == 2 + RULES.prior_runs
    assert shift > 0.08  # ...but as shift between sittings, raised above the prior by what they show
    quiet = sitting_shift_noise(np.log([1.0, 1.001, 1.0, 1.001]), ((0, 1), (2, 3)), RULES)[0]
    assert quiet < 0.08  # sittings that agree lower it toward what they show


def test_without_sittings_a_comparison_is_what_it_was() -> None:
    rng = np.random.default_rng(5)
    baseline = recorded(rng, [1.0, 1.01, 0.99])
    now = list(1.1 * np.exp(rng.normal(0, 0.02, 10)))
    plain = compare(now, baseline, higher_is_better=False, rules=RULES)
    joined = compare(
        now, baseline, higher_is_better=False, rules=RULES, sittings=group_sittings(RECORDING, RECORDING[2])
    )
    assert replace(plain, sittings=1) == joined
    assert plain.verdict is Verdict.REGRESSED


def test_an_exact_figure_is_not_widened_by_sittings() -> None:
    baseline = [[5.0, 5.0], [5.0, 5.0]]
    result = compare(
        [5.0, 5.0], baseline, higher_is_better=True, rules=RULES, sittings=group_sittings(RECORDING[:2], NEXT_DAY)
    )
    assert result.verdict is Verdict.PASS
    assert result.sitting_noise is None


def test_more_samples_cannot_decide_what_the_shift_between_sittings_leaves_open() -> None:
    rng = np.random.default_rng(6)
    baseline = recorded(rng, [1.0, 1.01, 0.99])
    now = list(1.0 * np.exp(rng.normal(0, 0.02, 10)))
    new_sitting = compare(
        now, baseline, higher_is_better=False, rules=RULES, sittings=group_sittings(RECORDING, NEXT_DAY)
    )
    assert new_sitting.verdict is Verdict.AMBIGUOUS
    assert not new_sitting.samples_can_decide  # 1.96 x 8% is wider than the 2% band
    small = replace(RULES, sitting_noise=0.005)
    assert compare(
        now, baseline, higher_is_better=False, rules=small, sittings=group_sittings(RECORDING, NEXT_DAY)
    ).samples_can_decide
    assert compare(now, baseline, higher_is_better=False, rules=RULES).samples_can_decide


# -- the session: a stored baseline from another sitting --

SLOWABLE = """
import os, pytest
@pytest.mark.perf
def test_t(perf):
    base = float(os.environ.get("BASE", "1.0"))
    perf.record("t", [base * (1 + 0.002 * (i % 5)) for i in range(10)], unit="s", higher_is_better=False)
"""


def record_then_move(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, *, days: int) -> None:
    """Three baseline runs (medians 1.0, 1.01, 0.99), their dates moved ``days`` into the past."""
    pytester.makepyfile(test_slowable=SLOWABLE)
    for base in ("1.0", "1.01", "0.99"):
        monkeypatch.setenv("BASE", base)
        pytester.runpytest("--gpuperf-save", "--gpuperf-device", "cpu").assert_outcomes(passed=1)
    [path] = (pytester.path / "baselines").rglob("*.json")
    document = json.loads(path.read_text())
    for entry in document["tests"].values():
        for metric in entry["metrics"].values():
            for run in metric["runs"]:
                stamp = dt.datetime.fromisoformat(run["date"]) - dt.timedelta(days=days)
                run["date"] = stamp.isoformat(timespec="seconds")
    path.write_text(json.dumps(document))


def test_a_slowdown_within_the_shift_between_sittings_is_ambiguous_the_next_day(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_then_move(pytester, monkeypatch, days=1)
    monkeypatch.setenv("BASE", "1.2")
    result = pytester.runpytest("--gpuperf-device", "cpu", "--gpuperf-strict", "--gpuperf-results", "out.json")
    result.assert_outcomes(failed=1)  # strict: AMBIGUOUS fails it, and says why
    result.stdout.fnmatch_lines(["*t: AMBIGUOUS*another sitting*gpuperf ab*", "*shift between sittings 8.00%*"])
    [row] = json.loads((pytester.path / "out.json").read_text())["results"]
    assert row["comparison"]["sitting_noise"] == pytest.approx(0.08)
    assert row["comparison"]["sittings"] == 1
    assert not row["comparison"]["samples_can_decide"]

    monkeypatch.setenv("BASE", "2.0")  # beyond what a sitting moves: decided
    result = pytester.runpytest("--gpuperf-device", "cpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*t: REGRESSED*"])


def test_the_same_slowdown_minutes_after_the_baseline_is_regressed(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_then_move(pytester, monkeypatch, days=0)
    monkeypatch.setenv("BASE", "1.2")
    result = pytester.runpytest("--gpuperf-device", "cpu")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*t: REGRESSED*"])
    assert "sitting" not in result.stdout.str()


def test_the_option_sets_the_shift_and_zero_turns_it_off(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_then_move(pytester, monkeypatch, days=1)
    monkeypatch.setenv("BASE", "1.2")
    off = pytester.runpytest("--gpuperf-device", "cpu", "--gpuperf-sitting-noise", "0")
    off.assert_outcomes(failed=1)  # no shift added: judged as if recorded minutes before
    off.stdout.fnmatch_lines(["*t: REGRESSED*"])
    bad = pytester.runpytest("--gpuperf-device", "cpu", "--gpuperf-sitting-noise", "lots")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["ERROR: Invalid value 'lots' from --gpuperf-sitting-noise*"])
