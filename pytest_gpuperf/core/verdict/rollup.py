"""The headline a release engineer reads first, shared by the session summary, `gpuperf compare` and `report`.

Owns the roll-up (per suite the counts of REGRESSED / IMPROVED / PASS / undecided, the worst regressions, one
line), the stack difference stated once (``stack_line``), what the evidence beside a metric supports
(``evidence``) and why an undecided metric was not decided (``undecided_because``). Invariants: pure, on plain
rows, so the three outputs cannot say different things; a component is never named as the cause of a change seen
only against a stored baseline. Imports core/stats/, core/verdict/ and machine/'s constants. Rationale:
docs/design/the-headline.md.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.core.verdict.judge import ACROSS_UNMEASURED, ANOTHER_MACHINE, timed_on_device
from pytest_gpuperf.core.verdict.stored import NOT_AMONG, OTHER_SITTING, OVER_NOISE_LIMIT
from pytest_gpuperf.core.verdict.vocabulary import Verdict
from pytest_gpuperf.machine.contention import CANARIES

DECIDED = ("REGRESSED", "IMPROVED", "PASS")
UNDECIDED_BECAUSE = {
    "another machine": (
        "baseline recorded on another machine of this hardware key: the spread between machines is in the noise",
        "a baseline recorded on this machine (--gpuperf-save), `gpuperf ab`, or a fleet's --gpuperf-machine-noise",
    ),
    "not among the job's metrics": (
        "a change significant for its metric alone, not among all the metrics the job judges",
        "running that test on its own, or `gpuperf ab`",
    ),
    "not confirmed": (
        "REGRESSED in one attempt, not in the fresh process that re-ran the test",
        "running the test again",
    ),
    "another sitting": (
        "baseline recorded in another sitting: the machine's shift between sittings is in the noise",
        "baseline runs recorded in several sittings, or `gpuperf ab` (one session, paired)",
    ),
    "for information": (
        "recorded for information only (a path this machine cannot time steadily)",
        "a machine with a native kernel for it",
    ),
    "unjudgeable": (
        "samples that cannot support a verdict, as the workload says (a p99 of too few requests, say)",
        "a longer measurement",
    ),
    "too noisy": ("spread above the noise limit", "a quiet machine, or more repeats (--gpuperf-repeats)"),
    "machine conditions": (
        "measured under other machine or device conditions than the baseline",
        "a quiet machine, or a baseline recorded on one",
    ),
}
"""Per reason an undecided metric was not decided (``undecided_because``): what it means, and what would decide it."""
UNDECIDED_WHY = {
    "NOISY": (
        "too noisy or measured under other machine conditions",
        "a quiet machine, or a baseline recorded on one",
    ),
    "AMBIGUOUS": (
        "interval straddles the threshold without a significant change",
        "more repeats (--gpuperf-repeats), baseline runs recorded in several sittings, or `gpuperf ab` (one "
        "session, paired)",
    ),
    "NO_BASELINE": ("no baseline on this hardware", "a baseline recorded with --gpuperf-save"),
    Verdict.MISSING.value: ("in the baseline but not measured now", "running the test again"),
}
"""Per undecided verdict: why it could not be judged, and what would decide it."""
CANARY_DIFFERS = 1.10
"""Canary medians further apart than this factor count as a different machine state (a loaded VM moves it 20-40%,
a quiet one ~3%: machine/contention.py of the machine-state verdict)."""
WORST = 5
"""Regressions listed by name in the roll-up; the table below it holds all."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Row:
    """One judged metric, as the roll-up needs it."""

    test: str
    metric: str
    verdict: str
    ratio: float | None = None
    """Oriented ratio (< 1 is worse), the stored-baseline comparison's definition (core/stats/unpaired.py)."""
    ci_low: float | None = None
    ci_high: float | None = None
    because: str | None = None
    """Why an undecided metric was not decided: a key of ``UNDECIDED_BECAUSE`` (None: its verdict's own why)."""
    detectable: float | None = None
    """The smallest change, a fraction worse, its figures could have read REGRESSED (core/verdict/coverage.py)."""

    @property
    def suite(self) -> str:
        return suite_of(self.test)


def undecided_because(verdict: str, reason: str, context: Mapping[str, Any]) -> str | None:
    """The reason an undecided verdict was reached, as a key of ``UNDECIDED_BECAUSE``; None for a decided verdict
    or one whose verdict alone says why (NO_BASELINE, MISSING, a plain AMBIGUOUS)."""
    if verdict in DECIDED:
        return None
    if reason.startswith(ACROSS_UNMEASURED):  # results written before the device's prior spread
        return "another machine"
    if context.get("unconfirmed_regression") is not None:
        return "not confirmed"
    if NOT_AMONG in reason:
        return "not among the job's metrics"
    if verdict == "NOISY":
        if isinstance(context.get("unjudgeable"), str):
            return "for information" if context.get("information_only") else "unjudgeable"
        if OVER_NOISE_LIMIT in reason:
            return "too noisy"
        return "machine conditions"
    if verdict == "AMBIGUOUS" and context.get("comparison") == ANOTHER_MACHINE:
        return "another machine"
    if verdict == "AMBIGUOUS" and OTHER_SITTING in reason:
        return "another sitting"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class RollUp:
    suites: dict[str, dict[str, int]]
    """Suite -> {"REGRESSED", "IMPROVED", "PASS", "undecided"} -> count."""
    worst: list[Row]
    undecided: dict[str, int]
    """Undecided verdict -> count."""
    total: int
    headline: str
    lines: list[str] = field(default_factory=list)


def suite_of(test: str) -> str:
    """The test module of a node id ('suites/test_micro.py::test_gemm[x]' -> 'test_micro.py') or of a JUnit
    address ('suites.test_micro::test_gemm[x]' -> 'test_micro')."""
    module = test.split("::", 1)[0]
    if module.endswith(".py") or "/" in module:
        return module.rsplit("/", 1)[-1]
    parts = module.split(".")
    named = [part for part in parts if part.startswith("test")]
    return named[0] if named else parts[-1]


def build(rows: Iterable[Row]) -> RollUp:
    rows = list(rows)
    suites: dict[str, dict[str, int]] = {}
    undecided: dict[str, int] = {}
    for row in rows:
        counts = suites.setdefault(row.suite, dict.fromkeys((*DECIDED, "undecided"), 0))
        if row.verdict in DECIDED:
            counts[row.verdict] += 1
        else:
            counts["undecided"] += 1
            key = row.because if row.because in UNDECIDED_BECAUSE else row.verdict
            undecided[key] = undecided.get(key, 0) + 1
    regressed = sorted((r for r in rows if r.verdict == "REGRESSED"), key=lambda r: (r.ratio or 1.0, r.test, r.metric))
    return RollUp(
        suites=dict(sorted(suites.items())),
        worst=regressed[:WORST],
        undecided=undecided,
        total=len(rows),
        headline=headline(len(regressed), undecided, len(rows)),
    )


def headline(regressions: int, undecided: Mapping[str, int], total: int) -> str:
    """The one line: no regression found / N regressions / undecided: X of Y could not be judged (the reasons
    follow, a line each: ``undecided_lines``)."""
    count = sum(undecided.values())
    if total == 0:
        return "no metrics were measured"
    if regressions:
        text = f"{regressions} regression{'s' if regressions != 1 else ''}"
        return text + (f" (and {count} of {total} metrics undecided)" if count else "")
    if count:
        return f"undecided: {count} of {total} metrics could not be judged"
    return "no regression found"


def undecided_lines(undecided: Mapping[str, int]) -> list[str]:
    """One line per reason metrics were left undecided, most frequent first: count, why, what would decide."""
    lines = []
    for key, n in sorted(undecided.items(), key=lambda item: (-item[1], item[0])):
        if key in UNDECIDED_BECAUSE:
            cause, cure = UNDECIDED_BECAUSE[key]
            lines.append(f"  {n} undecided: {cause}; decided by {cure}")
        else:
            cause, cure = UNDECIDED_WHY.get(key, ("not judged", "a rerun"))
            lines.append(f"  {n} {key}: {cause}; decided by {cure}")
    return lines


def render(rollup: RollUp, *, width: int = 120) -> list[str]:
    """The roll-up as text lines, none wider than ``width``."""
    lines = textwrap.wrap(f"verdict: {rollup.headline}", width, subsequent_indent="  ")
    for line in undecided_lines(rollup.undecided):
        lines += textwrap.wrap(line, width, subsequent_indent="      ")
    if not rollup.suites:
        return lines
    name_width = min(max(len(suite) for suite in rollup.suites), 48)
    heading = "suite".ljust(name_width) + "  regressed  improved  pass  undecided"
    lines.append(heading)
    for suite, counts in rollup.suites.items():
        lines.append(
            shorten(suite, name_width).ljust(name_width)
            + f"  {counts['REGRESSED']:>9}  {counts['IMPROVED']:>8}  {counts['PASS']:>4}  {counts['undecided']:>9}"
        )
    for row in rollup.worst:
        lines.append("worst: " + regression_text(row, width - 7))
    return [fit(line, width) for line in lines]


def regression_text(row: Row, width: int) -> str:
    size = f"{1 - row.ratio:.1%} worse" if row.ratio is not None else "worse"
    interval = ""
    if row.ci_low is not None and row.ci_high is not None:
        interval = f" (ratio {row.ratio:.3f}, 95% CI [{row.ci_low:.3f}, {row.ci_high:.3f}])"
    tail = f" {row.metric}: {size}{interval}"
    return shorten_test_id(row.test, max(width - len(tail), 20)) + tail


def stack_line(base: Mapping[str, str] | None, new: Mapping[str, str], *, against: str = "baseline") -> str:
    """The stack difference, once: what differs between the baseline's stack and this one."""
    if not base:
        return f"stack: {against} stack unknown"
    changed = [
        f"{name} {base.get(name, 'absent')} -> {new.get(name, 'absent')}"
        for name in sorted(set(base) | set(new))
        if base.get(name) != new.get(name)
    ]
    if not changed:
        return f"stack: same as the {against}"
    return (
        f"stack differs from the {against}: "
        + "; ".join(changed)
        + " (one of the differences; a change below is not attributed to it)"
    )


def evidence(verdict: str, machine_note: str | None, *, source: str = "baseline") -> str:
    """What the evidence supports next to one metric, never a cause."""
    if verdict in ("REGRESSED", "IMPROVED"):
        text = f"differs from {source}"
    elif verdict == "NOISY":
        text = "not judged"
    else:
        return "-" if not machine_note else f"the machine's state differed: {machine_note}"
    return text + (f"; the machine's state also differed: {machine_note}" if machine_note else "")


def machine_note(current: Mapping[str, Any] | None, baseline: Sequence[Mapping[str, Any] | None]) -> str | None:
    """How the machine's state differed between a measurement and its baseline runs, from the ``machine``
    context each measurement records (canary timings, the kernel canaries' too; steal; other cores' load), or None
    when it did not or when either side did not record it, or when the measurement was timed on the device (the
    host's state is not its evidence: ``timed_on_device``). Reads plain dicts: runs of any version slot in."""
    if current is not None and timed_on_device(current):
        return None
    now = _machine(current)
    before = [state for state in (_machine(context) for context in baseline) if state]
    if not now or not before:
        return None
    notes = []
    for canary in CANARIES:  # the judged ones: the copy canary is too noisy to tell anything
        now_canary = _canary(now, canary.name)
        same_build = [state for state in before if canary.build(state) == canary.build(now)]
        base_canaries = [c for c in (_canary(state, canary.name) for state in same_build) if c]
        if now_canary and base_canaries:
            ratio = statistics.median(base_canaries) / now_canary
            if ratio >= CANARY_DIFFERS:
                notes.append(f"{canary.short} {ratio:.2g}x slower when the baseline was recorded")
            elif ratio <= 1 / CANARY_DIFFERS:
                notes.append(f"{canary.short} {1 / ratio:.2g}x slower now than when the baseline was recorded")
    now_steal = _number(now.get("steal_share"))
    base_steal = [s for s in (_number(state.get("steal_share")) for state in before) if s is not None]
    if now_steal is not None and base_steal and abs(max(base_steal) - now_steal) >= 0.05:
        notes.append(f"steal {statistics.median(base_steal):.0%} in the baseline, {now_steal:.0%} now")
    now_others = _number(now.get("others_cores"))
    base_others = [s for s in (_number(state.get("others_cores")) for state in before) if s is not None]
    if now_others is not None and base_others and abs(statistics.median(base_others) - now_others) >= 0.5:
        notes.append(
            f"other processes kept {statistics.median(base_others):.1f} cores busy in the baseline, "
            f"{now_others:.1f} now"
        )
    return "; ".join(notes) or None


def machine_note_kind(part: str) -> str:
    """What one part of a ``machine_note`` says, without its figures: the key its count is grouped under."""
    name = part.split(" ", 1)[0]
    if "slower when the baseline was recorded" in part:
        return f"{name} slower when the baseline was recorded"
    if "slower now" in part:
        return f"{name} slower now"
    if part.startswith("steal"):
        return "steal differed"
    if part.startswith("other processes"):
        return "other processes' load differed"
    return part


def _machine(context: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    state = context.get("machine") if isinstance(context, Mapping) else None
    return state if isinstance(state, Mapping) else None


def _canary(state: Mapping[str, Any], name: str) -> float | None:
    """A canary's median ("python": the pure-Python loop; else a kernel canary's), None where not recorded."""
    kernels = state.get("kernel_canary_s")
    values = state.get("canary_s") if name == "python" else kernels.get(name) if isinstance(kernels, Mapping) else None
    if isinstance(values, list) and values and all(_number(v) for v in values):
        return float(statistics.median(values))
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        return None
    return float(value)


def baseline_median(runs: Sequence[Sequence[float]]) -> float:
    """The baseline figure the ratio is formed against: the median of the runs' medians (core/stats/unpaired.py), so a
    printed ratio always matches the printed medians."""
    return float(statistics.median(statistics.median(run) for run in runs))


def shorten(text: str, width: int) -> str:
    """Shorten a test id to ``width`` the way pytest shortens long lines: keep the start, end with '...'."""
    if len(text) <= width:
        return text
    if width <= 3:
        return text[:width]
    return text[: width - 3] + "..."


def shorten_test_id(nodeid: str, width: int) -> str:
    """Shorten a test id to ``width`` so that rows stay told apart: the module's folders go first, then the middle
    ('...'), keeping the end, where a parametrized test's parameters are (cutting the end made
    ``test_gemm[bf16-llama3_8b_qkv]`` and ``test_gemm[bf16-llama3_8b_o]`` read the same)."""
    if len(nodeid) <= width:
        return nodeid
    path, sep, rest = nodeid.partition("::")
    if sep:
        nodeid = path.rsplit("/", 1)[-1] + sep + rest
        if len(nodeid) <= width:
            return nodeid
    if width <= 3:
        return nodeid[-width:]
    head = (width - 3) // 3
    return nodeid[:head] + "..." + nodeid[len(nodeid) - (width - 3 - head) :]


def fit(line: str, width: int) -> str:
    return shorten(line, width)
