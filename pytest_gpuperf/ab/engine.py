"""The engine of `gpuperf ab`: ``run_ab(plan) -> AbResult`` runs two stacks' pytest sessions in pairs and judges
every metric after each complete pair, until every metric is decided or has had its last look, at the budget,
on Ctrl-C (the verdicts so far) or on an error (AbError, carrying the partial result); with ``plan.profile``, one
profiled session per side after the verdict (``profile_sides``).

The loop owns the pairs' order (blocks ABBA or BAAB, a seeded coin per block), dropping failed pairs, the
fingerprint checks and when to stop; a PairRunner (ab/pairs/) runs each pair, ab/judging.py judges it and
ab/progress.py words it. Injectable: the SessionRunner, the PairRunner, the clock and the progress callable.
docs/ab.md says what a comparison does; docs/design/ab-leave-out.md and ab-session-figure.md say why.
May import core/, machine/ and the rest of ab/; never cli/.
"""

from __future__ import annotations

import os
import random
import shlex
import time
from collections.abc import Callable
from typing import Any

from pytest_gpuperf.ab.cpus import pinned
from pytest_gpuperf.ab.judging import add_pair, at_last_look, judge_all, rules_from
from pytest_gpuperf.ab.model import AbError, AbPlan, AbResult, PairRecord, SessionOutcome
from pytest_gpuperf.ab.pairs.protocol import PairRunner, session_argv, session_files
from pytest_gpuperf.ab.pairs.sequential import Sequential, SessionRunner, subprocess_runner
from pytest_gpuperf.ab.pairs.taking_turns import TakingTurns
from pytest_gpuperf.ab.progress import Progress, progress_line, typical
from pytest_gpuperf.ab.sessions import end_strays, stop_all
from pytest_gpuperf.core.verdict.vocabulary import Verdict
from pytest_gpuperf.machine.fingerprint import hardware_slug


def balanced_order(pairs: int, seed: int) -> list[str]:
    """Pair orders in blocks of two pairs, ABBA -> ["AB", "BA"] or BAAB -> ["BA", "AB"], a seeded coin per block."""
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < pairs:
        order += ["AB", "BA"] if rng.random() < 0.5 else ["BA", "AB"]
    return order[:pairs]


def pair_runner(plan: AbPlan, sessions: SessionRunner = subprocess_runner) -> PairRunner:
    """The plan's way of running a pair: taking turns (``plan.take_turns``), else one session after the other,
    each through ``sessions``."""
    return TakingTurns() if plan.take_turns else Sequential(sessions=sessions)


def run_ab(
    plan: AbPlan,
    *,
    runner: SessionRunner = subprocess_runner,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
    pairs: PairRunner | None = None,
) -> AbResult:
    """Run the comparison to its end and return what it decided; raises AbError (with the partial result) when
    it cannot go on. Ctrl-C returns the verdicts so far (stopped == 'interrupted'). ``runner`` runs each session
    of a pair run one after the other; ``pairs`` replaces the plan's PairRunner (``pair_runner``)."""
    if not plan.cmd_a or not plan.cmd_b:
        raise AbError("--a and --b each need a command prefix (a Python, for example .venv/bin/python)")
    with pinned(plan.cpus):
        try:
            result = _run_pairs(plan, pairs or pair_runner(plan, runner), progress, clock)
            if plan.profile and result.complete_pairs and result.stopped != "interrupted":
                try:
                    profile_sides(result, runner)
                except KeyboardInterrupt:
                    result.profile = {"error": "interrupted"}
                except AbError as error:  # the verdict stands; only its profile is missing
                    result.profile = {"error": str(error)}
            return result
        finally:
            stop_all()


def profile_sides(result: AbResult, runner: SessionRunner) -> None:
    """One more session per side, after the paired verdict, with ``--gpuperf-profile``: their operators compared
    (core/record/profiling.py) into ``result.profile``. Never judged, so profiling's cost enters no verdict."""
    from pytest_gpuperf.core.record.profiling import kernel_diff, read_profile

    plan = result.plan
    folder = plan.out_dir / "profile"
    folder.mkdir(parents=True, exist_ok=True)
    env = dict(plan.env if plan.env is not None else os.environ)
    longest = max((s.seconds for pair in result.pairs for s in pair.sessions), default=60.0)
    files, summaries, errors = {}, {}, []
    for side in "AB":
        results_file, log_file = session_files(folder, 0, side)
        files[side] = folder / f"{side}-operators.json"
        argv = [*session_argv(plan, side, results_file), "--gpuperf-profile", str(files[side])]
        code, _ = runner(argv, log_file=log_file, timeout=max(60.0, 5 * longest), cwd=plan.cwd, env=env)
        end_strays()
        summary = read_profile(files[side]) if code in (0, 1) else None
        if isinstance(summary, str) or summary is None:
            errors.append(f"side {side}: {summary or f'the profiled session exited {code}'} (log {log_file})")
        else:
            summaries[side] = summary
    changed: dict[str, int] = {}  # +1: a metric of the test REGRESSED (its slowdown is explained); -1: IMPROVED
    for metric in result.judged():
        if (
            not metric.missing
            and metric.verdict in (Verdict.REGRESSED, Verdict.IMPROVED)
            and changed.get(metric.test) != 1
        ):
            changed[metric.test] = 1 if metric.verdict is Verdict.REGRESSED else -1
    result.profile = {
        "files": {side: str(path) for side, path in files.items()},
        "error": "; ".join(errors) or None,
        "diff": kernel_diff(summaries["A"], summaries["B"], changed) if len(summaries) == 2 else None,
    }


def _run_pairs(plan: AbPlan, runner: PairRunner, progress: Progress | None, clock: Callable[[], float]) -> AbResult:
    sessions_dir = plan.out_dir / "sessions"
    sessions_dir.mkdir(parents=True, exist_ok=True)
    result = AbResult(plan=plan, rules=plan.rules)
    max_pairs = plan.rules.max_pairs if plan.rules is not None else plan.max_pairs
    max_left_out = max_pairs if plan.max_left_out is None else plan.max_left_out
    order = balanced_order(max_pairs + max_left_out + plan.max_dropped + 1, plan.seed)
    env = dict(plan.env if plan.env is not None else os.environ)
    say = progress or (lambda line: None)
    started = clock()
    pair_seconds: list[float] = []

    def time_left() -> float | None:
        return None if plan.budget_s is None else max(1.0, plan.budget_s - (clock() - started))

    try:
        for index, first in enumerate(order, start=1):
            if at_last_look(result, max_pairs, max_left_out):
                result.stopped = "max pairs"
                break
            elapsed = clock() - started
            if plan.budget_s is not None and pair_seconds and elapsed + typical(pair_seconds) > plan.budget_s:
                result.stopped = "budget"
                break
            pair = PairRecord(index=index, order=first)
            result.pairs.append(pair)
            pair_started = clock()
            # appended one by one: a pair Ctrl-C cuts short keeps the sessions it finished
            for outcome in runner.run_pair(plan, first, index, sessions_dir, env=env, time_left=time_left):
                pair.sessions.append(outcome)
            end_strays()
            if any(s.returncode is None for s in pair.sessions):
                pair.dropped = "killed at the end of the time budget"
                result.stopped = "budget"
                break
            failed = [s for s in pair.sessions if s.error is not None]
            if failed:
                pair.dropped = f"{failed[0].side}: {failed[0].error}"
                _check_fatal(failed[0], result)
                say(f"pair {index} {first}: dropped ({pair.dropped}; log {failed[0].log_file})")
                if len(result.dropped_pairs) > plan.max_dropped:
                    result.stopped = "too many dropped pairs"
                    raise AbError(
                        f"{len(result.dropped_pairs)} pairs dropped (at most {plan.max_dropped} allowed); the last: "
                        f"{pair.dropped}; see {failed[0].log_file}",
                        result,
                    )
                continue
            pair_seconds.append(clock() - pair_started)
            _absorb_fingerprints(pair, result)
            if result.rules is None:
                result.rules = rules_from(plan, pair)
            add_pair(pair, result)
            if not result.metrics:
                result.stopped = "error"
                raise AbError(_NO_METRICS, result)
            decided = judge_all(result)
            result.wall_s = clock() - started
            say(progress_line(pair, result, decided, pair_seconds))
            if result.metrics and all(m.decided or m.missing for m in result.metrics.values()):
                result.stopped = "every metric decided"
                break
        else:
            result.stopped = "max pairs"
    except KeyboardInterrupt:
        result.stopped = "interrupted"
        if result.pairs and len(result.pairs[-1].sessions) < 2 and result.pairs[-1].dropped is None:
            result.pairs[-1].dropped = "interrupted"
    result.wall_s = clock() - started
    return result


_NO_METRICS = (
    "the sessions recorded no perf metrics (or none of the metrics asked for): PYTEST_ARGS must select tests that "
    "use the `perf` fixture"
)


def _check_fatal(outcome: SessionOutcome, result: AbResult) -> None:
    """Failures no repetition can fix end the run at once: a usage error (a bad option or PYTEST_ARGS, a plugin
    too old for --gpuperf-measure-only), no tests selected, or a command that is not a Python with pytest."""
    code = outcome.returncode
    text = outcome.error or ""
    cmd = shlex.join(outcome.argv[: outcome.argv.index("-m")] if "-m" in outcome.argv else outcome.argv[:1])
    if code in (4, 5) or "No module named pytest" in text or (code == 127):
        result.stopped = "error"
        raise AbError(f"side {outcome.side} ({cmd}): {text}; see {outcome.log_file}", result)


def _absorb_fingerprints(pair: PairRecord, result: AbResult) -> None:
    for session in pair.sessions:
        fingerprint = (session.document or {}).get("fingerprint") or {}
        if not fingerprint:
            continue
        known = result.fingerprints.setdefault(session.side, fingerprint)
        if known.get("hardware_key") != fingerprint.get("hardware_key"):
            result.stopped = "error"
            raise AbError(
                f"side {session.side}'s hardware key changed between sessions ({_slug(known)} -> "
                f"{_slug(fingerprint)}); compare on one machine",
                result,
            )
    a, b = result.fingerprints.get("A"), result.fingerprints.get("B")
    if a and b and a.get("hardware_key") != b.get("hardware_key"):
        result.stopped = "error"
        differing = sorted(
            name
            for name in set(a.get("hardware_key", {})) | set(b.get("hardware_key", {}))
            if a["hardware_key"].get(name) != b["hardware_key"].get(name)
        )
        raise AbError(
            f"hardware keys differ between the sides: A is {_slug(a)}, B is {_slug(b)} (differs in "
            f"{', '.join(differing)}); two machines are not an A/B comparison (use gpuperf compare on runs of each)",
            result,
        )


def _slug(fingerprint: dict[str, Any]) -> str:
    return str(fingerprint.get("hardware_slug") or hardware_slug(fingerprint.get("hardware_key") or {}))
