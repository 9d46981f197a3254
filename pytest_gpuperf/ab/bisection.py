"""The bisection of `gpuperf bisect`: the good stack against the bad one (one `gpuperf ab` run), then, per metric
that REGRESSED (or was chosen), ab/bisect_search.py's search, each step an ab run of a mixed stack against the
good one on those metrics only; a stack built once and a step run once are shared by every search.

A stack that cannot be built, or whose sessions keep failing, is UNBUILDABLE and the search goes around it;
Ctrl-C ends the whole bisection. Builds through an injected Builder (ab/builders.py) and writes each step's ab.json
through an injected writer. May import core/ and the rest of ab/; never cli/.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.ab.bisect_search import (
    Outcome,
    SearchResult,
    Step,
    Trial,
    differing_components,
    is_swappable,
    search,
    verdict_line,
)
from pytest_gpuperf.ab.builders import Builder, BuildError, Stack, mixed_stack
from pytest_gpuperf.ab.engine import profile_sides, run_ab
from pytest_gpuperf.ab.model import AbError, AbPlan, AbResult
from pytest_gpuperf.ab.pairs.sequential import SessionRunner, subprocess_runner
from pytest_gpuperf.core.verdict.vocabulary import Verdict

BISECT_SCHEMA = "gpuperf-bisect/1"

DocumentWriter = Callable[[Path, dict[str, Any]], None]
"""Writes a document (a step's ab.json) at a path; the command line's writes strict JSON atomically."""


@dataclass(slots=True, kw_only=True)
class Bisection:
    """One bisection's inputs, its injected builder, session runner and writer, and the ab runs it has made."""

    good: Stack
    bad: Stack
    out: Path
    base: AbPlan
    """cmd_a/cmd_b/out_dir are replaced per step; rules, pairs, pytest args and metrics come from it."""
    builder: Builder
    runner: SessionRunner = subprocess_runner
    say: Callable[[str], None] = field(default=lambda line: None)
    runs: dict[frozenset[str], AbResult | str] = field(default_factory=dict)
    """Each mixed stack's ab result, or why it could not be built."""
    sessions: int = 0
    ab_runs: int = 0
    """Comparisons started (a stack that could not be built runs none)."""
    write: DocumentWriter | None = None
    """Writes each step's ab.json (cli/bisect.py passes its strict, atomic writer); None: nothing is written."""

    def ab(self, swapped: frozenset[str], metrics: frozenset[tuple[str, str]] | None) -> AbResult | str:
        if swapped in self.runs:
            return self.runs[swapped]
        name = "-".join(sorted(swapped)) or "good"
        index = len(self.runs) + 1
        try:
            cmd_a = self.builder(self.good)
            cmd_b = self.builder(mixed_stack(self.good, self.bad, swapped))
        except BuildError as error:
            self.runs[swapped] = str(error)
            return str(error)
        out_dir = self.out / "steps" / f"{index:02d}-{name}"[:80]
        plan = dataclasses.replace(self.base, cmd_a=cmd_a, cmd_b=cmd_b, out_dir=out_dir)
        plan = dataclasses.replace(plan, metrics=metrics, profile=False)  # only the last step is profiled
        self.ab_runs += 1
        try:
            result = run_ab(plan, runner=self.runner)
        except AbError as error:
            # a stack whose sessions keep failing cannot be judged: the search treats it as unbuildable
            if error.result is not None:
                self.sessions += sum(len(pair.sessions) for pair in error.result.pairs)
                self._write(plan.out_dir / "ab.json", error.result.as_dict())
            self.runs[swapped] = f"its sessions cannot run: {error}"
            return self.runs[swapped]
        self.sessions += sum(len(pair.sessions) for pair in result.pairs)
        self._write(plan.out_dir / "ab.json", result.as_dict())
        self.runs[swapped] = result
        if result.stopped == "interrupted":
            raise KeyboardInterrupt  # Ctrl-C ends the bisection, not only this step
        return result

    @property
    def unbuildable(self) -> int:
        """Mixed stacks (splits) that could not be built, so were never compared."""
        return len(self.runs) - self.ab_runs

    def counts(self, builds: int, failed_builds: int) -> str:
        """What ran: '4 build(s) (2 failed), 1 ab run(s), 2 unbuildable split(s), 8 session(s)'."""
        return (
            f"{builds} build(s) ({failed_builds} failed), {self.ab_runs} ab run(s), {self.unbuildable} unbuildable "
            f"split(s), {self.sessions} session(s)"
        )

    def profile_last_step(self, culprits: frozenset[str]) -> AbResult | None:
        """With ``base.profile``: the step that swapped exactly ``culprits`` (the last of a search that found them),
        profiled as `gpuperf ab --profile` does, one more session per side after its verdict (ab/engine.py
        ``profile_sides``), once; its ab.json written again. None: not asked, or that step has no ab run."""
        result = self.runs.get(culprits)
        if not self.base.profile or not culprits or not isinstance(result, AbResult):
            return None
        if result.profile is None:
            try:
                profile_sides(result, self.runner)
            except AbError as error:  # the search's verdict stands; only its profile is missing
                result.profile = {"error": str(error)}
            self.sessions += 2
            self._write(result.plan.out_dir / "ab.json", result.as_dict())
        return result

    def _write(self, path: Path, document: dict[str, Any]) -> None:
        if self.write is not None:
            self.write(path, document)


def trial_of(result: AbResult | str, key: tuple[str, str]) -> Trial:
    if isinstance(result, str):
        return Trial(Outcome.UNBUILDABLE, detail=result)
    metric = result.metrics.get(key)
    folder = str(result.plan.out_dir)
    if metric is None or metric.missing or metric.judgement is None:
        return Trial(Outcome.AMBIGUOUS, detail=f"not measured ({folder})")
    verdict = metric.verdict
    outcome = {
        Verdict.PASS: Outcome.SAME,
        Verdict.REGRESSED: Outcome.REGRESSED,
        Verdict.IMPROVED: Outcome.IMPROVED,
    }.get(verdict, Outcome.AMBIGUOUS)
    ratio = metric.judgement.ratio
    return Trial(outcome, None if ratio is None else ratio - 1, folder)


def step_line(key: tuple[str, str], step: Step) -> str:
    swapped = ", ".join(sorted(step.swapped)) or "(none)"
    change = "" if step.trial.change is None else f" {step.trial.change:+.1%}"
    extra = f" [{step.trial.detail}]" if step.trial.outcome is Outcome.UNBUILDABLE else ""
    outcome = step.trial.outcome.value
    return f"step {step.index} {key[0]} {key[1]}: bad's {swapped} ({step.purpose}) -> {outcome}{change}{extra}"


def bisect(
    bisection: Bisection, chosen: frozenset[tuple[str, str]] | None
) -> tuple[AbResult, dict[tuple[str, str], SearchResult]]:
    """The good-vs-bad run, then one search per regressed (or chosen) metric, sharing every step's ab run."""
    differing = differing_components(bisection.good, bisection.bad)
    whole = bisection.ab(frozenset(name for name in differing if is_swappable(name)), chosen)
    if isinstance(whole, str):
        raise AbError(f"the good-vs-bad comparison: {whole}")
    if whole.plan.cmd_a == whole.plan.cmd_b:
        raise AbError(same_stacks(differing, whole.plan.cmd_a))
    bisection.say(f"good vs bad: {summary(whole)} (sessions in {whole.plan.out_dir})")
    keys = sorted(chosen) if chosen else [(m.test, m.metric) for m in whole.judged() if m.verdict is Verdict.REGRESSED]
    searches: dict[tuple[str, str], SearchResult] = {}
    full_key = next(iter(bisection.runs))
    metrics = frozenset(keys)
    for key in keys:

        def judge(swapped: frozenset[str], key: tuple[str, str] = key) -> Trial:
            return trial_of(bisection.ab(swapped, metrics), key)

        def report(step: Step, key: tuple[str, str] = key) -> None:
            bisection.say(step_line(key, step))

        full = trial_of(bisection.runs[full_key], key)
        searches[key] = search(bisection.good, bisection.bad, judge, full=full, on_step=report)
        bisection.profile_last_step(searches[key].culprits)
    return whole, searches


def same_stacks(differing: list[str], command: tuple[str, ...]) -> str:
    """Why the good-vs-bad run would compare a stack with itself, naming what differs."""
    swappable = [name for name in differing if is_swappable(name)]
    fixed = [name for name in differing if not is_swappable(name)]
    if not swappable:
        return f"only non-swappable components differ ({', '.join(fixed)}): a process cannot swap them"
    shown = ", ".join(swappable[:5]) + (f" and {len(swappable) - 5} more" if len(swappable) > 5 else "")
    return (
        f"the good and the bad stack differ in {len(swappable)} swappable component(s) ({shown}), but both builds "
        f"run the same command ({shlex.join(command)}): the build does not install the pins; check --build"
    )


def summary(result: AbResult) -> str:
    counts: dict[str, int] = {}
    for metric in result.judged():
        name = "MISSING" if metric.missing else metric.verdict.value
        counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{n} {name}" for name, n in sorted(counts.items())) or "no metrics"


def last_step_profile(bisection: Bisection, test: str, culprits: frozenset[str]) -> dict[str, Any] | None:
    """The profiled last step's diff for one test (ab/engine.py ``profile_sides``: the good stack as A, the
    culprits swapped in as B), or why there is none; None where it was not profiled."""
    run = bisection.runs.get(culprits)
    if not isinstance(run, AbResult) or run.profile is None:
        return None
    profile = run.profile
    diff = profile.get("diff") or {}
    return {"step": str(run.plan.out_dir), "error": profile.get("error"), "diff": diff.get("tests", {}).get(test)}


def bisect_document(
    bisection: Bisection,
    builds: int,
    whole: AbResult | None,
    searches: dict[tuple[str, str], SearchResult],
    *,
    failed_builds: int = 0,
    warnings: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """bisect.json: the stacks, each search with its verdict line, and every ab run (or why its stack is
    unbuildable); ``whole`` None when the bisection ended before its good-vs-bad comparison was judged.
    ``warnings``: per built stack's folder, what its inherited packages break (ab/builders.py)."""
    runs = {
        ",".join(sorted(swapped)) or "(none)": (
            {"unbuildable": value}
            if isinstance(value, str)
            else {"out_dir": str(value.plan.out_dir), "ab": value.as_dict()}
        )
        for swapped, value in bisection.runs.items()
    }
    return {
        "schema": BISECT_SCHEMA,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "good": bisection.good,
        "bad": bisection.bad,
        "builds": builds,
        "failed_builds": failed_builds,
        "ab_runs": bisection.ab_runs,
        "unbuildable_splits": bisection.unbuildable,
        "sessions": bisection.sessions,
        "inherited_warnings": warnings or {},
        "good_vs_bad": None if whole is None else summary(whole),
        "searches": [
            {
                "test": test,
                "metric": metric,
                "verdict": verdict_line(f"{test} {metric}", result, bisection.good, bisection.bad),
                **result.as_dict(),
                "profile": last_step_profile(bisection, test, result.culprits),
            }
            for (test, metric), result in searches.items()
        ],
        "runs": runs,
    }
