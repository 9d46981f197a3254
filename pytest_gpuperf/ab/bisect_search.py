"""The search of `gpuperf bisect`: which differing stack component(s) carry a change, with no subprocess in it.

``judge`` builds a mixed stack (the good stack with some components at the bad stack's version), compares it with
the good one and says SAME, REGRESSED, IMPROVED, AMBIGUOUS or UNBUILDABLE; the search is delta debugging (ddmin
with unresolved outcomes), then each member of the found set alone and the rest without it are judged. An
unbuildable or ambiguous combination reproduces nothing. A group is an interaction only where each member was
measured alone and their changes do not add up to the group's; a member that cannot be built alone makes the group
inseparable (they move together), not an interaction. Components a process environment cannot swap
(NON_SWAPPABLE) are never put in a mixed stack. docs/design/bisect-search.md says why. Pure: imports nothing
of pytest_gpuperf.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

NON_SWAPPABLE = frozenset(
    {
        "driver",
        "kernel",
        "firmware",
        "cuda_driver",
        "nvidia-driver",
        "nvidia_driver",
        "amdgpu",
        "amdgpu-dkms",
        "amdgpu_driver",
        "rocm_driver",
        "kernel_driver",
        "vbios",
    }
)
"""Components a venv or a command prefix cannot change: they live in the kernel or on the device, and one node
runs one of each. Names as the fingerprint's stack records them (machine/fingerprint.py) or as a spec may."""

NODE_ADVICE = (
    "not swappable in a process environment: compare two nodes that differ only in it "
    "(gpuperf compare of their runs, or gpuperf ab with a command that runs on the other node)"
)


class Outcome(enum.Enum):
    """A mixed stack compared with the good one."""

    SAME = "SAME"
    REGRESSED = "REGRESSED"
    IMPROVED = "IMPROVED"
    AMBIGUOUS = "AMBIGUOUS"
    UNBUILDABLE = "UNBUILDABLE"


@dataclass(frozen=True, slots=True)
class Trial:
    """What ``judge`` says of one mixed stack."""

    outcome: Outcome
    change: float | None = None
    """Relative change of the metric's performance against the good stack (-0.04: 4% worse), where measured."""
    detail: str = ""
    """Why unbuildable, the ab result's folder, ...: shown beside the step."""


Judge = Callable[[frozenset[str]], Trial]
"""``judge(swapped)``: the good stack with the components in ``swapped`` at the bad stack's version, judged."""


@dataclass(frozen=True, slots=True)
class Step:
    """One judged mixed stack, in the order the search asked for it."""

    index: int
    swapped: frozenset[str]
    trial: Trial
    purpose: str
    """'full', 'split', 'complement', 'alone', 'rest'."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "swapped": sorted(self.swapped),
            "purpose": self.purpose,
            "outcome": self.trial.outcome.value,
            "change": self.trial.change,
            "detail": self.trial.detail,
        }


@dataclass(slots=True, kw_only=True)
class SearchResult:
    differing: list[str]
    """Every component whose pin differs (swappable or not)."""
    non_swappable: list[str]
    target: Outcome | None = None
    """The full bad stack's outcome against the good one; None when that could not be judged."""
    full_change: float | None = None
    culprits: frozenset[str] = frozenset()
    """The 1-minimal set found: one component, an interacting group, or empty (no culprit)."""
    alone: dict[str, Trial] = field(default_factory=dict)
    """Each culprit alone (for a group), and the differing set without the culprits under the key 'rest'."""
    steps: list[Step] = field(default_factory=list)
    conclusion: str = ""
    """'culprit'; for a group: 'inseparable' (a member cannot be built without the others), 'additive' (each
    member measured alone, their changes add up to the group's), 'interaction' (measured alone, they do not add up),
    'unresolved' (a member alone measured nothing); or 'no change', 'unbuildable', 'ambiguous',
    'no swappable component'."""

    @property
    def unbuildable(self) -> list[frozenset[str]]:
        return [s.swapped for s in self.steps if s.trial.outcome is Outcome.UNBUILDABLE]

    @property
    def rest(self) -> frozenset[str]:
        return frozenset(self.differing) - self.culprits - frozenset(self.non_swappable)

    def as_dict(self) -> dict[str, Any]:
        return {
            "differing": self.differing,
            "non_swappable": self.non_swappable,
            "target": self.target.value if self.target else None,
            "full_change": self.full_change,
            "culprits": sorted(self.culprits),
            "conclusion": self.conclusion,
            "alone": {
                name: {"outcome": t.outcome.value, "change": t.change, "detail": t.detail}
                for name, t in self.alone.items()
            },
            "unbuildable": [sorted(s) for s in self.unbuildable],
            "steps": [step.as_dict() for step in self.steps],
        }


def differing_components(good: Mapping[str, str], bad: Mapping[str, str]) -> list[str]:
    """Names pinned differently, or pinned on one side only, sorted."""
    return sorted(name for name in set(good) | set(bad) if good.get(name) != bad.get(name))


def is_swappable(name: str, non_swappable: frozenset[str] = NON_SWAPPABLE) -> bool:
    return name.lower().replace(".", "_") not in {n.replace(".", "_") for n in non_swappable}


class _Cached:
    """The judge, each set judged once, every request recorded as a step."""

    def __init__(self, judge: Judge, steps: list[Step], on_step: Callable[[Step], None] | None) -> None:
        self.judge, self.steps, self.on_step = judge, steps, on_step
        self.seen: dict[frozenset[str], Trial] = {}

    def __call__(self, swapped: frozenset[str], purpose: str) -> Trial:
        if swapped in self.seen:
            return self.seen[swapped]
        trial = self.judge(swapped)
        self.seen[swapped] = trial
        step = Step(len(self.steps) + 1, swapped, trial, purpose)
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        return trial


def search(
    good: Mapping[str, str],
    bad: Mapping[str, str],
    judge: Judge,
    *,
    non_swappable: frozenset[str] = NON_SWAPPABLE,
    on_step: Callable[[Step], None] | None = None,
    full: Trial | None = None,
) -> SearchResult:
    """Find the smallest set of swappable differing components whose bad versions reproduce bad's change.

    ``full``: the bad stack's trial against the good one when the caller already has it (the first ab run);
    else it is judged as the first step."""
    differing = differing_components(good, bad)
    fixed = [name for name in differing if not is_swappable(name, non_swappable)]
    swappable = [name for name in differing if name not in fixed]
    result = SearchResult(differing=differing, non_swappable=fixed)
    cached = _Cached(judge, result.steps, on_step)
    everything = frozenset(swappable)
    if not swappable:
        result.conclusion = "no swappable component"
        return result
    if full is not None:
        cached.seen[everything] = full
    whole = full if full is not None else cached(everything, "full")
    result.full_change = whole.change
    if whole.outcome is Outcome.SAME:
        result.target, result.conclusion = Outcome.SAME, "no change"
        return result
    if whole.outcome in (Outcome.AMBIGUOUS, Outcome.UNBUILDABLE):
        result.conclusion = whole.outcome.value.lower()
        return result
    result.target = whole.outcome

    def reproduces(subset: list[str], purpose: str) -> bool:
        return carries(cached(frozenset(subset), purpose), whole)

    # ddmin: `current` always reproduces the change.
    current, parts = swappable, 2
    while len(current) > 1:
        chunks = _split(current, parts)
        reduced = False
        for chunk in chunks:
            if reproduces(chunk, "split"):
                current, parts, reduced = chunk, 2, True
                break
        if not reduced and parts > 2:
            for chunk in chunks:
                complement = [name for name in current if name not in chunk]
                if reproduces(complement, "complement"):
                    current, parts, reduced = complement, max(parts - 1, 2), True
                    break
        if not reduced:
            if parts >= len(current):
                break  # 1-minimal: removing any one member loses the change
            parts = min(len(current), parts * 2)
    result.culprits = frozenset(current)
    if len(current) > 1:
        for name in current:
            result.alone[name] = cached(frozenset({name}), "alone")
        group = next((s.trial for s in result.steps if s.swapped == result.culprits), whole)
        result.conclusion = group_conclusion([result.alone[name] for name in current], group)
    else:
        result.conclusion = "culprit"
    rest = frozenset(swappable) - result.culprits
    if rest:
        result.alone["rest"] = cached(rest, "rest")
    return result


SHARE = 0.5
"""A mixed stack reproduces the change when its verdict is the whole's and it carries at least this share of the
whole's change (on the log scale): a subset that is 5% slower does not explain a 3x slowdown, and at the loose
alpha of a short bisection a small false REGRESSED must not lead the search away from the culprit."""


def carries(trial: Trial, whole: Trial) -> bool:
    if trial.outcome is not whole.outcome:
        return False
    if trial.change is None or whole.change is None or whole.change <= -1 or trial.change <= -1:
        return True
    return abs(math.log1p(trial.change)) >= SHARE * abs(math.log1p(whole.change))


def group_conclusion(members: list[Trial], group: Trial) -> str:
    """What a 1-minimal group of two or more is, from each member judged alone and the group's own trial."""
    if any(t.outcome is Outcome.UNBUILDABLE for t in members):
        return "inseparable"
    if group.change is None or any(t.change is None or t.change <= -1 for t in members) or group.change <= -1:
        return "unresolved"
    summed = sum(math.log1p(t.change) for t in members if t.change is not None)
    whole = math.log1p(group.change)
    # adds up: the parts' sum is the group's change within the factor SHARE either way (log scale, same sign)
    adds_up = whole != 0 and SHARE <= summed / whole <= 1 / SHARE
    return "additive" if adds_up else "interaction"


def _split(names: list[str], parts: int) -> list[list[str]]:
    """``names`` in ``parts`` contiguous chunks as equal as they come."""
    size, extra = divmod(len(names), parts)
    chunks, start = [], 0
    for i in range(parts):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            chunks.append(names[start:end])
        start = end
    return chunks


def verdict_line(metric: str, result: SearchResult, good: Mapping[str, str], bad: Mapping[str, str]) -> str:
    """The final line: '<metric>: -4.0% of the -4.1% comes with pkg 1.0 -> 2.0; torch alone: SAME'."""
    fixed = ""
    if result.non_swappable:
        fixed = f"; not bisected ({NODE_ADVICE}): " + ", ".join(_change(n, good, bad) for n in result.non_swappable)
    if result.conclusion == "no swappable component":
        return f"{metric}: only non-swappable components differ{fixed}"
    if result.conclusion == "no change":
        return f"{metric}: the bad stack is SAME as the good one; nothing to bisect{fixed}"
    if result.conclusion in ("ambiguous", "unbuildable"):
        return f"{metric}: the bad stack against the good one is {result.conclusion.upper()}; nothing bisected{fixed}"
    culprits = sorted(result.culprits)
    whole = _percent(result.full_change)
    share = next((s.trial.change for s in result.steps if s.swapped == result.culprits), result.full_change)
    names = " + ".join(_change(n, good, bad) for n in culprits)
    if result.conclusion == "inseparable":
        why = next((t.detail for n, t in sorted(result.alone.items()) if n in result.culprits and t.detail), "")
        line = (
            f"{metric}: {_percent(share)} of the {whole} comes with {names}, not separable: they cannot be built "
            f"apart ({why or 'unbuildable'})"
        )
    elif result.conclusion in ("interaction", "additive", "unresolved"):
        alone = ", ".join(f"{n} alone: {_alone(result.alone[n])}" for n in culprits if n in result.alone)
        how = {
            "interaction": "only with {names} together, more than their parts add up to",
            "additive": "with {names}, each carrying a part",
            "unresolved": "with {names} together (not every part measured alone)",
        }[result.conclusion].format(names=names)
        line = f"{metric}: {_percent(share)} of the {whole} comes {how} ({alone})"
    else:
        line = f"{metric}: {_percent(share)} of the {whole} comes with {names}"
    rest = result.alone.get("rest")
    if rest is not None:
        together = "alone" if len(result.rest) == 1 else "together"
        line += f"; {', '.join(sorted(result.rest))} {together}: {rest.outcome.value}"
        if rest.change is not None and rest.outcome is not Outcome.UNBUILDABLE:
            line += f" ({_percent(rest.change)})"
    skipped = result.unbuildable
    if skipped:
        line += f"; {len(skipped)} combination(s) unbuildable, skipped"
    return line + fixed


def _alone(trial: Trial) -> str:
    return trial.outcome.value + ("" if trial.change is None else f" {_percent(trial.change)}")


def _change(name: str, good: Mapping[str, str], bad: Mapping[str, str]) -> str:
    return f"{name} {good.get(name, '(absent)')} -> {bad.get(name, '(absent)')}"


def _percent(change: float | None) -> str:
    if change is None:
        return "?"
    return f"{change:+.1%}"
