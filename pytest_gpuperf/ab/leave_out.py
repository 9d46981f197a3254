"""Which pairs are left out of a metric's statistics, and why: the machine was not itself while one or both of
the pair's sessions measured it (docs/design/ab-leave-out.md says why each rule is what it is).

Each rule is a small object whose ``check(a, b)`` returns the reason, or None to judge the pair; the engine
applies ``rules_for(...)`` in order and the first reason wins. A machine-state reason leaves a pair out only as
far as the states explain (``explained``): a pair whose change is larger is judged. Invariant: a rule reads the
machine's counters, canaries and device telemetry, the figures only against that bound, and treats A and B
alike. May import core/, machine/ and ab/reading.py; never cli/.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from pytest_gpuperf.ab.reading import SessionMetric
from pytest_gpuperf.machine.contention import (
    CANARIES,
    MachineState,
    canary_deviation,
    contention_reasons,
    explains,
    others_limit,
)


class LeaveOutRule(Protocol):
    """One reason to leave a pair out of a metric (pytest-benchmark's RegressionCheck shape)."""

    # ``bounded = True`` on a rule: the machine's states bound what its reason explains (``explained``); a rule
    # without it bounds nothing.

    def check(self, a: SessionMetric, b: SessionMetric) -> str | None:
        """Why the pair whose sides measured the metric as ``a`` and ``b`` is left out, or None to judge it."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class DevicesSlowed:
    """A metric timed on the device, whose telemetry shows a device that slowed down by itself (``devices_slowed``)."""

    bounded = False

    def check(self, a: SessionMetric, b: SessionMetric) -> str | None:
        return devices_slowed(a, b)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionsContended:
    """A session that ran on a contended machine (``sessions_contended``)."""

    shared_neighbour_cancels: bool = True

    bounded = True

    def check(self, a: SessionMetric, b: SessionMetric) -> str | None:
        return sessions_contended(a.state, b.state, shared_neighbour_cancels=self.shared_neighbour_cancels)


@dataclass(frozen=True, slots=True, kw_only=True)
class CanariesDiffer:
    """The two sessions' canaries differ beyond their noise (``canaries_differ``)."""

    bounded = True

    def check(self, a: SessionMetric, b: SessionMetric) -> str | None:
        return canaries_differ(a.state, b.state)


@dataclass(frozen=True, slots=True, kw_only=True)
class ContendedInOne:
    """Taking turns: a core shared inside the timed calls, or a state only one side saw (``contended_in_one``)."""

    bounded = True

    def check(self, a: SessionMetric, b: SessionMetric) -> str | None:
        return contended_in_one(a.state, b.state)


ONE_AFTER_THE_OTHER: tuple[LeaveOutRule, ...] = (DevicesSlowed(), SessionsContended(), CanariesDiffer())
"""The rules, in order, of pairs whose sessions ran one after the other."""
TAKING_TURNS: tuple[LeaveOutRule, ...] = (DevicesSlowed(), ContendedInOne())
"""The rules, in order, of pairs whose sessions took turns."""


def rules_for(*, taking_turns: bool) -> tuple[LeaveOutRule, ...]:
    """The leave-out rules of a comparison's pairs, in the order they are applied."""
    return TAKING_TURNS if taking_turns else ONE_AFTER_THE_OTHER


def left_out(a: SessionMetric, b: SessionMetric, rules: Sequence[LeaveOutRule]) -> str | None:
    """The first rule's reason to leave the pair out, or None to judge it: a pair whose change is larger than the
    machine's states explain is judged whatever they were (a 7% steal cannot make a loop 33% slower)."""
    for rule in rules:
        reason = rule.check(a, b)
        if reason and not (getattr(rule, "bounded", False) and beyond_explained(a, b)):
            return reason
    return None


def explained(a: MachineState | None, b: MachineState | None) -> float:
    """The largest factor by which the machine's states of a pair's two sessions can move its ratio: the larger
    of what either side's state explains against the other's (machine/contention.py ``explains``, the stored
    verdict's bound). Unbounded where a side has no state."""
    if a is None or b is None:
        return math.inf
    return max(explains(a, [b])[0], explains(b, [a])[0])


def beyond_explained(a: SessionMetric, b: SessionMetric) -> bool:
    """Whether the pair's change (either way) is larger than its sessions' machine states explain."""
    if a.figure <= 0 or b.figure <= 0:
        return False
    return abs(math.log(b.figure / a.figure)) > math.log(explained(a.state, b.state))


def devices_slowed(a: SessionMetric, b: SessionMetric) -> str | None:
    """Why a pair of a metric timed on the device is left out: a session whose device slowed down by itself."""
    slowed = [f"{side}: {why}" for side, why in (("A", a.device_slowdown), ("B", b.device_slowdown)) if why]
    return "; ".join(slowed) or None


def canaries_differ(a: MachineState | None, b: MachineState | None) -> str | None:
    """Why the two sides of a pair ran on a machine in different states (a canary of one side beyond the other's
    by more than its noise band), or None. Symmetric in A and B; canaries of another Python or numpy build on one
    side are not compared (machine/contention.py)."""
    if a is None or b is None:
        return None
    for canary in CANARIES:
        deviation = canary_deviation(b, [a], canary)
        if deviation is not None and abs(deviation[0]) > deviation[1]:
            slower, factor = ("B", math.exp(deviation[0])) if deviation[0] > 0 else ("A", math.exp(-deviation[0]))
            return f"the {canary.short} ran {factor - 1:.0%} slower in {slower}'s session than in the other's"
    return None


def shared_neighbour(a: MachineState | None, b: MachineState | None) -> bool:
    """Whether other processes kept both sessions of a pair busy alike: each at or above the limit, the two within
    the limit of each other. Such a neighbour (a steady job on the other core, the same through both sessions)
    slows A and B by one factor, which the pair's ratio cancels: that is what pairing is for. A neighbour in one
    session only, or one that changed between the two, does not cancel."""
    if a is None or b is None or a.others_cores is None or b.others_cores is None or not a.cpus:
        return False
    limit = others_limit(a.cpus)
    both = a.others_outside_tree and b.others_outside_tree and min(a.others_cores, b.others_cores) >= limit
    return bool(both) and abs(a.others_cores - b.others_cores) < limit


def sessions_contended(
    a: MachineState | None, b: MachineState | None, *, shared_neighbour_cancels: bool = True
) -> str | None:
    """Which of a pair's sessions ran on a contended machine, and why ("B: steal 20.0% ..."), or None. Other
    processes' load that both sessions shared alike (``shared_neighbour``) does not count; steal, run-queue wait
    and a descheduled canary always do (they come in bursts of seconds, which two sessions never share alike).
    ``shared_neighbour_cancels=False`` is the rule before 2026-12-03, which benchmarks/ab_rejudge.py replays."""
    shared = shared_neighbour_cancels and shared_neighbour(a, b)
    busy = []
    for side, state in (("A", a), ("B", b)):
        reasons = contention_reasons(state) if state is not None else {}
        if shared:
            reasons.pop("others", None)
        if reasons:
            busy.append(f"{side}: {'; '.join(reasons.values())}")
    return "; ".join(busy) or None


def why_left_out(a: MachineState | None, b: MachineState | None, *, taking_turns: bool = False) -> str | None:
    """Why a pair is left out of a metric, from the machine's states while its two sessions measured it: a
    contended session (``sessions_contended``; a neighbour both sessions shared alike is not), else canaries that
    differ (``canaries_differ``); None to judge it. Taking turns, see ``contended_in_one``.
    Reads only the machine's state, never the metric's figures, and treats A and B alike."""
    if taking_turns:
        return contended_in_one(a, b)
    return sessions_contended(a, b) or canaries_differ(a, b)


def contended_in_one(a: MachineState | None, b: MachineState | None) -> str | None:
    """The leave-out rule of a pair taking turns. The two sides' calls alternate one by one, ~10 ms apart, so a
    state of the machine that lasts seconds (steal, a neighbour on another core) is seen by both sides alike and
    cancels in the pair's ratio: such a pair is judged, and left out only when one session saw the state and the
    other did not (it changed inside the pair). A core shared inside the timed calls (run-queue wait, a canary
    that got too little CPU) leaves the pair out even when both saw it: time slices then decide which calls come
    out fast, and a session's best call is luck (on the f26m2 VM, a hog on the sessions' core gave A/A pairs
    of +4%, +11% and +61%). Canaries are not compared between the two sessions: within one machine state their
    difference is their own noise (on the f26m2 VM that rule left out half the pairs and changed no verdict:
    benchmarks/README.md)."""
    reasons = {side: contention_reasons(state) if state is not None else {} for side, state in (("A", a), ("B", b))}
    shared_core = [side for side, found in reasons.items() if {"runqueue", "canary_cpu"} & set(found)]
    if shared_core:
        return "; ".join(f"{side}: {'; '.join(reasons[side].values())}" for side in shared_core)
    if bool(reasons["A"]) == bool(reasons["B"]):
        return None
    side = "A" if reasons["A"] else "B"
    return f"{side} only: {'; '.join(reasons[side].values())}"
