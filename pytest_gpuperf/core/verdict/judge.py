"""The one place that turns evidence into a metric's Verdict: ``judge``, ``judge_on_machine`` and ``rejudge``.

Owns the rules a metric may carry (``External``, ``StepsToTarget``, ``CurveMatch``: they decide PASS, REGRESSED or
NO_BASELINE and keep the comparison's figures for the report) and the order the evidence is read in: the
not-comparable checks (checks.py), the stored-baseline rule (stored.py), the machine's state, the spread between
machines. Invariant: the session, `gpuperf compare` (``rejudge``) and the report call these, so one figure never
carries two verdicts. Imports core/stats/, core/verdict/ and machine/'s facts. Rationale:
docs/design/one-verdict-per-metric.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pytest_gpuperf.core.stats import convergence
from pytest_gpuperf.core.stats.convergence import StepsOutcome
from pytest_gpuperf.core.stats.sittings import Sittings
from pytest_gpuperf.core.stats.unpaired import Rules, exact_agreement
from pytest_gpuperf.core.verdict.checks import UNCONFIRMED, Doubt, combined, doubt_before, machine_doubt
from pytest_gpuperf.core.verdict.stored import compare
from pytest_gpuperf.core.verdict.vocabulary import MEASURED, Comparison, Decision, Verdict
from pytest_gpuperf.machine.contention import MachineCheck, MachineState, compare_machine

UNMOVED_BY_LOAD = frozenset({"B", "KiB", "MiB", "GiB", "bytes", "steps", "tokens", "count"})
"""Units of figures a busy machine does not change (memory, counts): the machine-state rule leaves them alone.
Everything else (times, rates, and figures derived from them such as MFU or scaling efficiency) is judged by it."""

RULE_VERDICTS = (Verdict.PASS, Verdict.REGRESSED, Verdict.NO_BASELINE)
"""What a rule of its own may decide."""
STEPS_VERDICTS = {
    StepsOutcome.PASS: Verdict.PASS,
    StepsOutcome.NO_REFERENCE: Verdict.PASS,
    StepsOutcome.SLOWER: Verdict.REGRESSED,
    StepsOutcome.FASTER: Verdict.REGRESSED,  # the workload, data or loss changed: MLPerf rejects it too
    StepsOutcome.NOT_CONVERGED: Verdict.REGRESSED,
}
"""The Verdict each steps-to-target outcome means (core/stats/convergence.py finds the outcome)."""


class Rule(Protocol):
    """The evidence for one metric's verdict and the rule that reads it."""

    @property
    def name(self) -> str:
        """What decided the verdict, for the report and the results' context ("judged_by")."""
        ...

    def decide(self) -> Decision: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class External:
    """A verdict reached by a rule outside this module (a user's own check)."""

    rule: str
    verdict: Verdict
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in RULE_VERDICTS:
            raise ValueError(
                f"judge_elsewhere: verdict must be one of {', '.join(v.value for v in RULE_VERDICTS)}, "
                f"got {self.verdict.value!r}"
            )

    @property
    def name(self) -> str:
        return self.rule

    def decide(self) -> Decision:
        return Decision(verdict=self.verdict, reason=self.reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepsToTarget:
    """Steps to the target loss of the current seeds against the reference seeds' (from the stored goldens)."""

    current: Sequence[int | None]
    reference: Sequence[int | None]
    """One entry per stored golden curve: its steps to the same target (None: it never reached it)."""

    name = "convergence check (olympic mean of steps to target against the reference seeds, one-sided t-test)"

    def decide(self) -> Decision:
        if len(self.reference) < 2:
            return Decision(
                verdict=Verdict.NO_BASELINE,
                reason=f"{len(self.reference)} golden loss curve(s) stored for this hardware; record them with "
                "--gpuperf-save",
            )
        check = convergence.compare_steps(self.current, self.reference)
        return Decision(verdict=STEPS_VERDICTS[check.outcome], reason=check.message)


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveMatch:
    """The seeds' loss curves against the golden band, and whether every seed reached the target loss."""

    current: Sequence[Sequence[float]]
    reference: Sequence[Sequence[float]]
    """The stored golden curves (one per reference seed)."""
    current_steps: Sequence[int | None]
    """Each current seed's steps to the target (None: missed it within the budget)."""
    reference_steps: Sequence[int | None]
    target: str
    """The target loss in words, for the message ("1.2345 (floor 1.2000 + margin 0.0345) within 200 steps")."""
    warmup: int
    window: int

    name = "loss curve vs golden band (per-step t interval over seeds) and target loss reached"

    def decide(self) -> Decision:
        missed = [seed for seed, steps in enumerate(self.current_steps) if steps is None]
        if len(self.reference) < 2:
            if missed:
                return Decision(
                    verdict=Verdict.REGRESSED,
                    reason=f"seed(s) {missed} did not reach the target loss {self.target}",
                )
            return Decision(
                verdict=Verdict.NO_BASELINE,
                reason=f"every seed reached the target loss {self.target}; {len(self.reference)} golden loss "
                "curve(s) stored for this hardware: record them with --gpuperf-save",
            )
        curve = convergence.check_curve(self.current, self.reference, warmup=self.warmup, window=self.window)
        if missed:
            steps = convergence.compare_steps(self.current_steps, self.reference_steps)
            if steps.outcome is StepsOutcome.NOT_CONVERGED:
                return Decision(verdict=Verdict.REGRESSED, reason=f"{steps.message}; {curve.message}")
        return Decision(verdict=Verdict.PASS if curve.passed else Verdict.REGRESSED, reason=curve.message)


THIS_SITTING = "this machine, this sitting"
ANOTHER_SITTING = "this machine, another sitting"
ANOTHER_MACHINE = "another machine of this hardware key"
"""Which comparison a stored-baseline verdict made (``context["comparison"]``); `gpuperf ab`'s is "this sitting,
paired". Each is judged with its own noise: the runs' spread, plus the shift between sittings, plus the spread
between machines."""

ACROSS_UNMEASURED = "baseline recorded on another machine of this hardware key"
"""How the reason of a timing that another machine's baseline could not decide began in results written before
the spread between machines had a prior per device; read by the roll-up of such documents (docs/verdicts.md)."""


def runs_of_this_machine(machine_id: str | None, run_contexts: Sequence[Mapping[str, Any]]) -> list[int] | None:
    """The indices of the baseline runs recorded on this machine (``context["machine_id"]``), or None when none
    was: the comparison is then with another machine. A run that recorded no identity (older baselines) is not
    known to be this machine's."""
    if machine_id is None:
        return None
    mine = [index for index, context in enumerate(run_contexts) if context.get("machine_id") == machine_id]
    return mine or None


def judge(
    samples: Sequence[float],
    baseline_runs: Sequence[Sequence[float]],
    *,
    higher_is_better: bool,
    rules: Rules,
    doubt: Doubt | None = None,
    rule: Rule | None = None,
    sittings: Sittings | None = None,
    across_machines: bool = False,
) -> Comparison:
    """The verdict on one metric: the baseline comparison, or the metric's own rule with the comparison's
    figures kept for the report."""
    comparison = compare(
        samples,
        baseline_runs,
        higher_is_better=higher_is_better,
        rules=rules,
        doubt=doubt,
        sittings=sittings,
        across_machines=across_machines,
    )
    if rule is None:
        return comparison
    decision = rule.decide()
    return replace(comparison, verdict=decision.verdict, reason=f"{rule.name}: {decision.reason}")


DEVICE_CLOCK = "device"
"""``context["clock"]`` of a measurement timed by the accelerator's own clock (CUDA events), not the host's."""


def timed_on_device(context: Mapping[str, Any]) -> bool:
    """Whether a measurement was timed by the accelerator's own clock (``perf.measure`` with a timer whose
    ``clock`` is "device"). Such figures are the device's time: the host's state is not theirs to answer for
    (on the H200 an A/A's GEMM pairs agreed within 0.3% while the host canaries of their sessions differed by
    15-106%), so the machine check (host canaries, steal, run-queue wait) does not judge them; the device's
    telemetry (clocks, throttling) does."""
    return context.get("clock") == DEVICE_CLOCK


def machine_state(context: Mapping[str, Any]) -> MachineState | None:
    """The machine state a measurement's context holds, or None (none recorded, or written by another version)."""
    stored = context.get("machine")
    if not isinstance(stored, dict):
        return None
    try:
        return MachineState.from_dict(stored)
    except (ValueError, TypeError):
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineJudgement:
    comparison: Comparison
    check: MachineCheck | None
    """The machine-state rule's answer, where it applied (a timing with a baseline, the check on)."""
    runs: list[list[float]]
    """The baseline runs judged against: contended runs are left out while clean ones remain."""


OPEN_LOOP = "offered_req_s"
"""The context key of a figure measured at a fixed arrival rate (an open-loop sweep point, core/inference)."""


def queued(doubt: Doubt | None, context: Mapping[str, Any]) -> Doubt | None:
    """The machine's doubt about a figure measured at a fixed arrival rate: a server slowed by a factor f runs at
    f times the utilisation, and its queueing delay grows as 1 / (1 - utilisation), so no factor bounds what a
    busy machine does to such a latency (the measurement that showed it: benchmarks/README.md)."""
    if doubt is None or context.get(OPEN_LOOP) is None:
        return doubt
    return replace(
        doubt,
        reason=f"{doubt.reason} (at a fixed arrival rate, where queueing amplifies it)",
        worse=math.inf,
        better=math.inf,
    )


def judge_on_machine(
    samples: Sequence[float],
    runs: Sequence[Sequence[float]],
    run_contexts: Sequence[Mapping[str, Any]],
    *,
    context: Mapping[str, Any],
    unit: str,
    higher_is_better: bool,
    rules: Rules,
    doubt: Doubt | None = None,
    rule: Rule | None = None,
    machine_check: bool = True,
    sittings: Sittings | None = None,
    across_machines: bool = False,
    looks: int = 1,
) -> MachineJudgement:
    """``judge`` with the machine's state: a contended measurement or baseline is a doubt that explains at most
    what its figures bound (machine/contention.py ``explains``), so a change beyond that is decided and anything
    else is NOISY with the reason. A measurement timed on the device (``timed_on_device``) is judged without the
    host's state.

    ``across_machines``: the runs were recorded on another machine of this hardware key. A timing is then judged
    with the spread between machines (``Rules.machine_noise``: a fleet's figure, else the device's prior).

    ``looks``: how many rounds' samples sequential sampling pooled (perf.py ``_extend``); alpha is spent over
    them (``Rules.for_looks``) and the reason says so."""
    rules = rules.for_looks(looks)
    judged = [list(run) for run in runs]
    check: MachineCheck | None = None
    host_timed = not timed_on_device(context)
    timing = bool(judged) and unit not in UNMOVED_BY_LOAD and not exact_agreement(samples, judged)
    across_machines = across_machines and timing
    if judged and machine_check and host_timed and timing:
        # a size, a count or a figure that reproduces exactly is not a timing: the machine's load does not move it
        check = compare_machine(machine_state(context), [machine_state(c) for c in run_contexts])
        doubt = combined((doubt, queued(machine_doubt(check), context)))
        if check.dropped:
            judged = [run for i, run in enumerate(judged) if i not in check.dropped]
            sittings = sittings.without(check.dropped) if sittings is not None else None
    comparison = judge(
        samples,
        judged,
        higher_is_better=higher_is_better,
        rules=rules,
        doubt=doubt,
        rule=rule,
        sittings=sittings,
        across_machines=across_machines,
    )
    if check is not None and check.dropped:
        left_out = ", ".join(str(i + 1) for i in check.dropped)
        comparison = replace(
            comparison, reason=f"{comparison.reason} (baseline run(s) {left_out} left out: recorded under contention)"
        )
    if looks > 1:
        comparison = replace(
            comparison, reason=f"{comparison.reason} [{looks} looks, alpha {rules.alpha:.2g} each (sequential)]"
        )
    return MachineJudgement(comparison=comparison, check=check, runs=judged)


def recorded_looks(context: Mapping[str, Any]) -> int:
    """How many looks sequential sampling took, as perf.py records them (``context["extended"]["looks"]``)."""
    extended = context.get("extended")
    looks = extended.get("looks") if isinstance(extended, Mapping) else None
    return looks if isinstance(looks, int) and not isinstance(looks, bool) and looks >= 1 else 1


def rejudge(
    samples: Sequence[float],
    runs: Sequence[Sequence[float]],
    run_contexts: Sequence[Mapping[str, Any]],
    *,
    context: Mapping[str, Any],
    unit: str,
    higher_is_better: bool,
    rules: Rules,
    machine_check: bool = True,
    sittings: Sittings | None = None,
    across_machines: bool = False,
    recorded_verdict: str | None = None,
    recorded_reason: object = None,
) -> Comparison:
    """The session's verdict on samples it recorded, judged again from its results: the checks its ``context``
    records (core/verdict/checks.py, in their order), the machine-state rule of ``judge_on_machine``, the session's
    confirmation of a REGRESSED, and a verdict another rule gave (``judged_by``) kept as recorded, never re-judged
    as a timing. `gpuperf compare` calls it, so its row is the session's verdict by construction."""
    comparison = judge_on_machine(
        samples,
        runs,
        run_contexts,
        context=context,
        unit=unit,
        higher_is_better=higher_is_better,
        rules=rules,
        doubt=doubt_before(context),
        machine_check=machine_check,
        sittings=sittings,
        across_machines=across_machines,
        looks=recorded_looks(context),
    ).comparison
    comparison = UNCONFIRMED.apply(comparison, context, rules.threshold)
    judged_by = context.get("judged_by")
    if isinstance(judged_by, str) and recorded_verdict in MEASURED:
        comparison = replace(
            comparison,
            verdict=Verdict(recorded_verdict),
            reason=recorded_reason
            if isinstance(recorded_reason, str) and recorded_reason
            else f"{judged_by}: recorded verdict",
        )
    return comparison
