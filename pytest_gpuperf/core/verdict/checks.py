"""The "not comparable" rules: each a small object whose ``check`` returns a reason, or None when it has none.

Owns the order they apply in: before a comparison, the metric's own word (``Unjudgeable``), then the device's
clocks (``DeviceClocks``), then the machine's state (``judge_on_machine``, with ``beyond_the_machine``); after it,
the confirmation of a REGRESSED (``Unconfirmed``). A reason turns a verdict NOISY (AMBIGUOUS for an unconfirmed
change), never REGRESSED. Each reads facts that machine/ and the session recorded in a result's context, so a
session and a reader of its results apply the same rule. Imports core/stats/, core/verdict/ and machine/ facts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pytest_gpuperf.core.verdict.vocabulary import Comparison, Verdict
from pytest_gpuperf.machine.contention import CANARY_EXPLAINS_POWER, MachineCheck


class NotComparable(Protocol):
    """One reason a measurement cannot support a verdict, read from its recorded context."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        """Why the measurement is not comparable, or None."""
        ...


@dataclass(frozen=True, slots=True)
class Unjudgeable:
    """The workload says its samples, though valid, cannot support a verdict (``perf.record(unjudgeable=...)``:
    a p99 of too few requests, say)."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        why = context.get("unjudgeable")
        return why if isinstance(why, str) and why else None


@dataclass(frozen=True, slots=True)
class DeviceClocks:
    """The device's clocks or throttling differed from the baseline's (machine/telemetry.py ``check_conditions``,
    recorded as ``context["clock_check"]``)."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        clocks = context.get("clock_check")
        if isinstance(clocks, dict) and clocks.get("comparable") is False:
            return f"measured under different device conditions ({clocks.get('detail', 'clocks differ')})"
        return None


BEFORE_COMPARISON: tuple[NotComparable, ...] = (Unjudgeable(), DeviceClocks())
"""The checks a measurement's recorded context answers before any comparison, in the order their reasons read."""


def not_comparable(context: Mapping[str, Any], checks: tuple[NotComparable, ...] = BEFORE_COMPARISON) -> str | None:
    """Every reason ``checks`` find in ``context``, joined in their order, or None."""
    return "; ".join(why for check in checks if (why := check.check(context))) or None


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    """A REGRESSED that the session's confirming attempt (the test re-run in a fresh process) did not repeat: a
    transient slowdown turns one attempt's metrics REGRESSED, a real regression every attempt's. The session
    records it as ``context["unconfirmed_regression"]`` (the attempt), so a reader of its results applies it too."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        attempt = context.get("unconfirmed_regression")
        if isinstance(attempt, int) and not isinstance(attempt, bool):
            return f"REGRESSED, but the session's attempt {attempt - 1} did not regress: not confirmed"
        return None

    def apply(self, comparison: Comparison, context: Mapping[str, Any]) -> Comparison:
        """``comparison`` read back from the results: a REGRESSED the session did not confirm is AMBIGUOUS."""
        why = self.check(context) if comparison.verdict is Verdict.REGRESSED else None
        if why is None:
            return comparison
        return replace(comparison, verdict=Verdict.AMBIGUOUS, reason=f"{why}; {comparison.reason}")

    @staticmethod
    def not_repeated(attempt: int) -> str:
        """The session's word for a REGRESSED of this attempt that the attempt before did not show."""
        return f"REGRESSED in attempt {attempt} but not in attempt {attempt - 1}: not confirmed"

    @staticmethod
    def not_confirmable(attempt: int, why: str) -> str:
        """The session's word for a REGRESSED whose confirming attempt could not run or finish."""
        return f"REGRESSED in attempt {attempt - 1}, could not be confirmed ({why})"


UNCONFIRMED = Unconfirmed()


def beyond_the_machine(
    verdict: Verdict, ci_low: float | None, ci_high: float | None, check: MachineCheck, threshold: float
) -> str | None:
    """Why a verdict stands although the machine's state differed, or None when the machine could explain it.

    A machine the canary shows slower by a factor f makes a metric look worse, never better, by up to
    f ** CANARY_EXPLAINS_POWER: a REGRESSED whose whole interval stays beyond the threshold after giving the metric
    back that much is more than the machine explains, and an IMPROVED is what a slower machine cannot fake. The
    same holds mirrored for a baseline recorded on a slower machine. Contention seen any other way (steal,
    run-queue wait) has no such bound, so it decides nothing here. Ratios are oriented so that < 1 is worse."""
    if ci_low is None or ci_high is None:
        return None
    if check.slower_now is not None and check.baseline is None:
        factor = check.slower_now
        explained = factor**CANARY_EXPLAINS_POWER
        if verdict is Verdict.REGRESSED and ci_high * explained < 1 - threshold:
            return (
                f"the machine is {factor:.2f}x slower now (canary), which explains up to {explained:.2f}x; the "
                "change is larger than that"
            )
        if verdict is Verdict.IMPROVED:
            return f"better although the machine is {factor:.2f}x slower now (canary)"
    if check.slower_then is not None and check.current is None:
        factor = check.slower_then
        explained = factor**CANARY_EXPLAINS_POWER
        if verdict is Verdict.IMPROVED and ci_low / explained > 1 + threshold:
            return (
                f"the baseline's machine was {factor:.2f}x slower (canary), which explains up to {explained:.2f}x; "
                "the change is larger than that"
            )
        if verdict is Verdict.REGRESSED:
            return f"worse although the baseline's machine was {factor:.2f}x slower (canary)"
    return None
