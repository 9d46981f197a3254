"""The search of `gpuperf bisect` with a fake judge: which components it names, and how many steps it takes."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from pytest_gpuperf.ab.bisect_search import (
    Outcome,
    SearchResult,
    Trial,
    differing_components,
    search,
    verdict_line,
)

GOOD = {"torch": "2.13.0", "nccl": "2.21", "cudnn": "9.1", "deepspeed": "0.18.2", "triton": "3.1"}
BAD = {"torch": "2.14.1", "nccl": "2.23", "cudnn": "9.5", "deepspeed": "0.19.8", "triton": "3.2"}


def fake(rule: Callable[[frozenset[str]], Trial]) -> Callable[[frozenset[str]], Trial]:
    calls: list[frozenset[str]] = []

    def judge(swapped: frozenset[str]) -> Trial:
        calls.append(swapped)
        return rule(swapped)

    judge.calls = calls  # type: ignore[attr-defined]
    return judge


def slows(culprit: str, change: float = -0.04) -> Callable[[frozenset[str]], Trial]:
    def rule(swapped: frozenset[str]) -> Trial:
        extra = -0.001 if len(swapped) == len(GOOD) else 0.0  # the whole stack: 4.1%
        if culprit in swapped:
            return Trial(Outcome.REGRESSED, change + extra)
        return Trial(Outcome.SAME, 0.0)

    return rule


def test_differing_components_include_one_sided_pins() -> None:
    assert differing_components({"a": "1", "b": "1", "c": "1"}, {"a": "1", "b": "2", "d": "1"}) == ["b", "c", "d"]


def test_single_culprit_found_by_binary_splitting_and_checked_alone() -> None:
    judge = fake(slows("deepspeed"))
    result = search(GOOD, BAD, judge)
    assert result.conclusion == "culprit" and result.culprits == {"deepspeed"}
    assert result.target is Outcome.REGRESSED
    assert result.alone["rest"].outcome is Outcome.SAME
    # k = 5: the full stack, ~log2(5) splits, the rest: far fewer than one step per component and subset
    assert len(judge.calls) == len(set(judge.calls)) <= 2 + 2 * math.ceil(math.log2(5))  # type: ignore[attr-defined]
    line = verdict_line("tokens/s", result, GOOD, BAD)
    assert line.startswith("tokens/s: -4.0% of the -4.1% comes with deepspeed 0.18.2 -> 0.19.8; ")
    assert "cudnn, nccl, torch, triton together: SAME" in line


@pytest.mark.parametrize("culprit", sorted(GOOD))
def test_every_position_of_the_culprit_is_found(culprit: str) -> None:
    assert search(GOOD, BAD, fake(slows(culprit))).culprits == {culprit}


def test_interacting_pair_is_named_with_each_member_alone() -> None:
    def rule(swapped: frozenset[str]) -> Trial:
        both = {"torch", "triton"} <= swapped
        return Trial(Outcome.REGRESSED, -0.05) if both else Trial(Outcome.SAME, 0.0)

    result = search(GOOD, BAD, fake(rule))
    assert result.conclusion == "interaction" and result.culprits == {"torch", "triton"}
    assert result.alone["torch"].outcome is result.alone["triton"].outcome is Outcome.SAME
    line = verdict_line("step_s", result, GOOD, BAD)
    assert "only with torch 2.13.0 -> 2.14.1 + triton 3.1 -> 3.2 together, more than their parts" in line
    assert "torch alone: SAME +0.0%, triton alone: SAME +0.0%" in line


def test_no_change_between_the_stacks_bisects_nothing() -> None:
    judge = fake(lambda swapped: Trial(Outcome.SAME, 0.001))
    result = search(GOOD, BAD, judge)
    assert result.conclusion == "no change" and not result.culprits
    assert len(judge.calls) == 1  # type: ignore[attr-defined]
    assert "SAME as the good one" in verdict_line("tokens/s", result, GOOD, BAD)


def test_an_ambiguous_full_stack_bisects_nothing() -> None:
    result = search(GOOD, BAD, fake(lambda swapped: Trial(Outcome.AMBIGUOUS)))
    assert result.conclusion == "ambiguous" and not result.culprits


def test_unbuildable_middle_is_skipped_and_the_search_goes_on_around_it() -> None:
    def rule(swapped: frozenset[str]) -> Trial:
        # cudnn 9.5 with nccl 2.21 does not resolve (the good nccl stays in a mixed stack without bad's nccl)
        if "cudnn" in swapped and "nccl" not in swapped:
            return Trial(Outcome.UNBUILDABLE, detail="pip: conflict")
        return slows("deepspeed")(swapped)

    result = search(GOOD, BAD, fake(rule))
    assert result.culprits == {"deepspeed"}
    assert result.unbuildable and all("cudnn" in s and "nccl" not in s for s in result.unbuildable)
    assert "unbuildable, skipped" in verdict_line("tokens/s", result, GOOD, BAD)


def test_non_swappable_components_are_listed_never_bisected() -> None:
    good = {**GOOD, "driver": "550.54", "kernel": "6.8"}
    bad = {**BAD, "driver": "560.28", "kernel": "6.8"}
    judge = fake(slows("nccl"))
    result = search(good, bad, judge)
    assert result.non_swappable == ["driver"]
    assert all("driver" not in s for s in judge.calls)  # type: ignore[attr-defined]
    assert result.culprits == {"nccl"}
    line = verdict_line("tokens/s", result, good, bad)
    assert "not bisected" in line and "two nodes" in line and "driver 550.54 -> 560.28" in line


def test_only_non_swappable_differences_judge_nothing() -> None:
    judge = fake(slows("nccl"))
    result = search({"driver": "1"}, {"driver": "2"}, judge)
    assert result.conclusion == "no swappable component" and not judge.calls  # type: ignore[attr-defined]


def test_the_first_ab_run_is_not_repeated_and_every_step_is_recorded() -> None:
    judge = fake(slows("torch"))
    seen: list[int] = []
    full = Trial(Outcome.REGRESSED, -0.041)
    result: SearchResult = search(GOOD, BAD, judge, full=full, on_step=lambda step: seen.append(step.index))
    assert frozenset(GOOD) not in judge.calls  # type: ignore[attr-defined]
    assert seen == [step.index for step in result.steps] == list(range(1, len(result.steps) + 1))
    assert result.as_dict()["culprits"] == ["torch"] and result.full_change == -0.041


def test_an_improvement_is_bisected_like_a_regression() -> None:
    def rule(swapped: frozenset[str]) -> Trial:
        return Trial(Outcome.IMPROVED, 0.1) if "cudnn" in swapped else Trial(Outcome.SAME, 0.0)

    result = search(GOOD, BAD, fake(rule))
    assert result.target is Outcome.IMPROVED and result.culprits == {"cudnn"}


def test_a_small_change_of_the_same_sign_does_not_lead_the_search_away() -> None:
    # torch's subset regresses by 3% (noise at a loose alpha, or a minor real effect), triton carries the 3x
    def rule(swapped: frozenset[str]) -> Trial:
        if "triton" in swapped:
            return Trial(Outcome.REGRESSED, -0.66)
        return Trial(Outcome.REGRESSED, -0.03) if "torch" in swapped else Trial(Outcome.SAME, 0.0)

    result = search(GOOD, BAD, fake(rule))
    assert result.conclusion == "culprit" and result.culprits == {"triton"}
    assert result.alone["rest"].outcome is Outcome.REGRESSED  # reported, not hidden: "... together: REGRESSED (-3.0%)"


def test_two_halves_of_a_change_are_named_together_each_regressed_alone() -> None:
    def rule(swapped: frozenset[str]) -> Trial:
        change = (0.02 if "nccl" in swapped else 0.0) + (0.02 if "cudnn" in swapped else 0.0)
        return Trial(Outcome.REGRESSED, -change) if change else Trial(Outcome.SAME, 0.0)

    result = search(GOOD, BAD, fake(rule))
    assert result.culprits == {"nccl", "cudnn"}
    assert result.alone["nccl"].outcome is result.alone["cudnn"].outcome is Outcome.REGRESSED
    assert result.conclusion == "additive"  # measured apart, the parts add up: not an interaction
    assert "each carrying a part" in verdict_line("step_s", result, GOOD, BAD)


def test_components_that_cannot_be_built_apart_are_inseparable_never_an_interaction() -> None:
    # torch A pins nccl X exactly: every stack with one of them and not the other fails to resolve
    conflict = "torch 2.14.1 depends on nccl==2.23"

    def rule(swapped: frozenset[str]) -> Trial:
        if ("torch" in swapped) != ("nccl" in swapped):
            return Trial(Outcome.UNBUILDABLE, detail=conflict)
        return Trial(Outcome.REGRESSED, -0.3) if "torch" in swapped else Trial(Outcome.SAME, 0.0)

    result = search(GOOD, BAD, fake(rule))
    assert result.conclusion == "inseparable" and result.culprits == {"torch", "nccl"}
    line = verdict_line("step_s", result, GOOD, BAD)
    assert "nccl 2.21 -> 2.23 + torch 2.13.0 -> 2.14.1, not separable" in line and conflict in line
    assert "interaction" not in line and "together" not in line.split(";")[0]


def test_a_member_alone_that_measured_nothing_leaves_the_group_unresolved() -> None:
    def rule(swapped: frozenset[str]) -> Trial:
        if swapped == {"torch"}:
            return Trial(Outcome.AMBIGUOUS)
        return Trial(Outcome.REGRESSED, -0.05) if {"torch", "triton"} <= swapped else Trial(Outcome.SAME, 0.0)

    result = search(GOOD, BAD, fake(rule))
    assert result.culprits == {"torch", "triton"} and result.conclusion == "unresolved"
