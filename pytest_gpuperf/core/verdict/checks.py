"""The "not comparable" rules: each a small object whose ``check`` returns a reason, or None when it has none, and
whose ``explains`` says the largest effect its condition can account for.

Owns ``Doubt`` (a reason with the factors it can make a metric look worse or better by: a condition never vetoes
a verdict outright, it explains at most that much), the order the rules apply in (before a comparison, the
metric's own word, ``Unjudgeable``, then the device's clocks, ``DeviceClocks``; the machine's state comes from
machine/contention.py as a ``MachineCheck``), and the confirmation of a REGRESSED (``Unconfirmed``). Each reads
facts recorded in a result's context, so a session and a reader of its results apply the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from pytest_gpuperf.core.verdict.vocabulary import Comparison, Verdict
from pytest_gpuperf.machine.contention import MachineCheck

UNBOUNDED = math.inf
"""The factor a condition explains when nothing bounds its effect."""
TRANSIENT_EXPLAINS = 1.5
"""What a slowdown that no second measurement could check may be, with no other sign of it: a burst of load in one
sitting. A change whose whole interval lies beyond it is more than a transient explains (why 1.5x:
docs/verdicts.md)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Doubt:
    """A condition that makes a comparison doubtful and the largest effect it can explain: the factor (>= 1,
    UNBOUNDED where nothing bounds it) by which it can make the metric look worse, and the one by which it can
    make it look better. A change whose whole interval lies beyond that factor stands whatever the condition."""

    reason: str
    worse: float = UNBOUNDED
    better: float = UNBOUNDED

    def __post_init__(self) -> None:
        if not (self.worse >= 1 and self.better >= 1):
            raise ValueError(f"a doubt explains a factor >= 1, got worse={self.worse!r}, better={self.better!r}")

    def __and__(self, other: Doubt) -> Doubt:
        """Both conditions at once: their effects may stack, so their factors multiply."""
        return Doubt(
            reason=f"{self.reason}; {other.reason}", worse=self.worse * other.worse, better=self.better * other.better
        )

    def stands(self, comparison: Comparison, threshold: float) -> str | None:
        """Why ``comparison``'s change stands despite this doubt (its whole interval lies beyond what the doubt
        explains, and beyond the threshold after that), or None where the doubt could explain it."""
        low, high, ratio = comparison.ci_low, comparison.ci_high, comparison.ratio
        if low is None or high is None or ratio is None or ratio <= 0:
            return None
        if comparison.verdict is Verdict.REGRESSED and high * self.worse < 1 - threshold:
            return f"{1 / ratio:.2f}x worse, beyond the {self.worse:.2f}x worse that it explains at most: {self.reason}"
        if comparison.verdict is Verdict.IMPROVED and low / self.better > 1 + threshold:
            return f"{ratio:.2f}x better, beyond the {self.better:.2f}x better that it explains at most: {self.reason}"
        return None

    def bound(self) -> str:
        """The factors in words, for the reason of a verdict the doubt keeps undecided."""
        if math.isinf(self.worse) and math.isinf(self.better):
            return "nothing bounds what it explains"
        return f"it explains up to {_factor(self.worse)} worse and {_factor(self.better)} better"


def _factor(value: float) -> str:
    return "any factor" if math.isinf(value) else f"{value:.2f}x"


def combined(doubts: Iterable[Doubt | None]) -> Doubt | None:
    """Every doubt at once (``Doubt.__and__``), or None where there is none."""
    found: Doubt | None = None
    for doubt in doubts:
        if doubt is not None:
            found = doubt if found is None else found & doubt
    return found


class NotComparable(Protocol):
    """One reason a measurement cannot support a verdict, read from its recorded context."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        """Why the measurement is not comparable, or None."""
        ...

    def explains(self, context: Mapping[str, Any]) -> tuple[float, float]:
        """The largest factors (worse, better) by which the condition ``check`` found can move the metric."""
        ...


@dataclass(frozen=True, slots=True)
class Unjudgeable:
    """The workload says its samples, though valid, cannot support a verdict (``perf.record(unjudgeable=...)``:
    a p99 of too few requests, say)."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        why = context.get("unjudgeable")
        return why if isinstance(why, str) and why else None

    def explains(self, context: Mapping[str, Any]) -> tuple[float, float]:
        # The workload's own word that the figure is not a measurement of what it names (a p99 of 24 requests is
        # their maximum; a load generator that lagged timed itself): nothing here can bound it.
        return UNBOUNDED, UNBOUNDED


@dataclass(frozen=True, slots=True)
class DeviceClocks:
    """The device's clocks or throttling differed from the baseline's (machine/telemetry.py ``check_conditions``,
    recorded as ``context["clock_check"]``)."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        clocks = context.get("clock_check")
        if isinstance(clocks, dict) and clocks.get("comparable") is False:
            return f"measured under different device conditions ({clocks.get('detail', 'clocks differ')})"
        return None

    def explains(self, context: Mapping[str, Any]) -> tuple[float, float]:
        # A device clocked at a fraction r of the baseline's does at most 1/r less work in a time (a kernel bound
        # by another clock moves less); throttling whose clocks were not read bounds nothing.
        clocks = context.get("clock_check")
        slower = clocks.get("clock_factor") if isinstance(clocks, dict) else None
        if isinstance(slower, (int, float)) and not isinstance(slower, bool) and math.isfinite(slower) and slower >= 1:
            return float(slower), 1.0
        return UNBOUNDED, UNBOUNDED


BEFORE_COMPARISON: tuple[NotComparable, ...] = (Unjudgeable(), DeviceClocks())
"""The checks a measurement's recorded context answers before any comparison, in the order their reasons read."""


def doubt_before(context: Mapping[str, Any], checks: tuple[NotComparable, ...] = BEFORE_COMPARISON) -> Doubt | None:
    """Every condition ``checks`` find in ``context``, in their order, with what they explain together; or None."""
    return combined(
        Doubt(reason=why, worse=worse, better=better)
        for check in checks
        if (why := check.check(context))
        for worse, better in (check.explains(context),)
    )


def not_comparable(context: Mapping[str, Any], checks: tuple[NotComparable, ...] = BEFORE_COMPARISON) -> str | None:
    """Every reason ``checks`` find in ``context``, joined in their order, or None."""
    doubt = doubt_before(context, checks)
    return doubt.reason if doubt is not None else None


def machine_doubt(check: MachineCheck) -> Doubt | None:
    """The machine-state rule's conditions as a doubt, with the factors machine/contention.py measured for them."""
    why = check.conditions
    return Doubt(reason=why, worse=check.explains_worse, better=check.explains_better) if why else None


@dataclass(frozen=True, slots=True)
class Unconfirmed:
    """The one owner of the confirmation rule. A REGRESSED that the session's confirming attempt (the test re-run
    in a fresh process) did not repeat is AMBIGUOUS: a transient slowdown turns one attempt's metrics REGRESSED, a
    real regression every attempt's. A REGRESSED whose confirmation could not run at all is AMBIGUOUS only as far
    as a transient explains (TRANSIENT_EXPLAINS): beyond that it fails, saying it was not re-measured. The session
    records both in the context (``unconfirmed_regression``: the attempt; ``unconfirmable``: why it could not
    run; ``regressed_before``: the attempt before this one regressed), so a reader of its results applies the same
    rule, in the same words."""

    def check(self, context: Mapping[str, Any]) -> str | None:
        attempt = context.get("unconfirmed_regression")
        if not isinstance(attempt, int) or isinstance(attempt, bool):
            return None
        cannot = context.get("unconfirmable")
        if isinstance(cannot, str):
            return self.not_confirmable(attempt + 1, cannot)
        return self.not_repeated(attempt)

    def explains(self, context: Mapping[str, Any]) -> tuple[float, float]:
        if isinstance(context.get("unconfirmable"), str):
            return TRANSIENT_EXPLAINS, 1.0
        return UNBOUNDED, 1.0  # a second measurement that did not regress: the change was not there

    def apply(self, comparison: Comparison, context: Mapping[str, Any], threshold: float) -> Comparison:
        """``comparison`` under the confirmation the session recorded in ``context``: a REGRESSED it did not
        confirm is AMBIGUOUS, unless no confirmation could run and the change is beyond what a transient explains."""
        before = context.get("regressed_before")
        if isinstance(before, int) and not isinstance(before, bool):  # this attempt's verdict stands, worded
            if comparison.verdict is Verdict.REGRESSED:
                return replace(comparison, reason=f"{comparison.reason} (confirmed in {before + 1} attempts)")
            return replace(comparison, reason=f"{self.withdrawn(before + 1)}; {comparison.reason}")
        why = self.check(context) if comparison.verdict is Verdict.REGRESSED else None
        if why is None:
            return comparison
        worse, better = self.explains(context)
        stands = Doubt(reason="a transient slowdown", worse=worse, better=better).stands(comparison, threshold)
        if stands is not None:
            return replace(comparison, reason=f"{comparison.reason} ({why}: not re-measured; {stands})")
        return replace(comparison, verdict=Verdict.AMBIGUOUS, reason=f"{why}; {comparison.reason}" + self._bound(worse))

    @staticmethod
    def _bound(worse: float) -> str:
        if math.isinf(worse):
            return ""
        return f" (a transient explains up to {worse:.2f}x: a larger change fails unconfirmed)"

    @staticmethod
    def not_repeated(attempt: int) -> str:
        """The session's word for a REGRESSED of this attempt that the attempt before did not show."""
        return f"REGRESSED in attempt {attempt} but not in attempt {attempt - 1}: not confirmed"

    @staticmethod
    def withdrawn(attempt: int) -> str:
        """The session's word for a metric REGRESSED in the attempt before this one and not in this one."""
        return f"attempt {attempt - 1} was REGRESSED, attempt {attempt} did not confirm it"

    @staticmethod
    def not_confirmable(attempt: int, why: str) -> str:
        """The session's word for a REGRESSED whose confirming attempt could not run or finish."""
        return f"REGRESSED in attempt {attempt - 1}, could not be confirmed ({why})"


UNCONFIRMED = Unconfirmed()
