"""The engine of `gpuperf ab`: runs two stacks' pytest sessions in interleaved pairs and judges every metric.

A library first (``run_ab(plan) -> AbResult``), so `gpuperf bisect` can run one comparison per step with other
command prefixes and a chosen set of metrics; the CLI (cli/ab.py) only parses arguments and prints.

Sessions run one at a time, in blocks of two pairs ordered ABBA or BAAB (chosen by a seeded coin per block and
recorded), so a drift of the machine that is linear over a block cancels between its two pairs. Each session is
``CMD -m pytest PYTEST_ARGS --gpuperf-results FILE --gpuperf-measure-only ...``: it measures and writes its
results, fails no test on a verdict, saves nothing. After every complete pair each undecided metric is judged on
its paired log-ratios (core/stats/paired.py); a decided metric keeps its verdict, and the run stops when every metric
is decided or has had its last look (max_pairs judged pairs; pairs the machine's state left out of a metric are
replaced, up to max_left_out more), at the time budget, on Ctrl-C (with the verdicts so far) or on an error.

A pair is left out of one metric's statistics when either session measured that metric on a contended machine
(the machine state each session records with a metric: steal, run-queue wait, other processes' busy cores, the
canary's own CPU share; machine/contention.py), or when its two sessions' canaries differ beyond their noise (the
machine was not in the same state for both sides). One burst on one side gave a pair a log-ratio of +0.6 among
fifteen of -0.02..-0.06 and undid a 3% decision (benchmarks/README.md): the signed-rank statistic gives that pair
the top rank. On this project's 2-core VM such bursts are states that last seconds, in which a one-thread matmul
runs ~20% slower and the pure-Python canary 40-60% slower, with no steal or run-queue wait to show for them; a
session caught in one made 3-7 of 16 pairs outliers of 10-35%. The selection reads the machine's counters and the
canaries, never the metric's figures, and strikes either side alike, so the pairs left keep the null's symmetry
and the error rates hold.

**Each session's figure** for a metric is, by default, its best sample: the fastest call of a time, the highest
value of a rate (``session_figure="best"``); ``"median"`` takes the session's median. Noise on a shared machine
only ever adds time, so a session's best call is the one the machine impeded least; a state of the machine that
covers part of a session moves its median (on this VM: 6 of 10 calls 15% slower, the canary catching it in 2 of
its 5 samples) and not its best call. Re-judged on the 40 comparisons of benchmarks/README.md, the best sample
decided 3% slowdowns that the median left AMBIGUOUS, in fewer pairs. What it gives up: a change that slows only
some of the calls (a periodic stall) moves the median and not the best call; judge such a metric with
``--session-figure median`` or record the tail as a metric of its own (the serving suites' p90/p99 are). Either
figure is computed from one session's samples alone, so A and B are treated alike and the null's symmetry, and
with it the calibrated error rates, hold.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import os
import random
import shlex
import signal
import stat
import statistics
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_gpuperf.ab.sessions import AbError, end_strays, start_session, stop_all, stop_session
from pytest_gpuperf.core.config.device_defaults import DEVICE_DEFAULTS
from pytest_gpuperf.core.stats.paired import PairedJudgement, PairedRules, judge, log_ratio
from pytest_gpuperf.core.stats.unpaired import Verdict
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.results import parse_document
from pytest_gpuperf.core.store.schema import SchemaError
from pytest_gpuperf.core.verdict.judge import machine_state, timed_on_device
from pytest_gpuperf.machine.contention import (
    CANARIES,
    MachineState,
    canary_deviation,
    contention_reasons,
    others_limit,
)
from pytest_gpuperf.machine.fingerprint import hardware_slug, stack_changes
from pytest_gpuperf.machine.telemetry import check_conditions

AB_SCHEMA = "gpuperf-ab/2"
"""/2: each metric's per-pair session figures are a_figures/b_figures, and session_figure says which (/1:
a_medians/b_medians, always medians)."""
SIDES = ("A", "B")
SESSION_FIGURES = ("best", "median")
"""A session's figure for a metric: its best sample (lowest time, highest rate) or its median."""
MAX_PAIR_COUNT = 500
"""The most max_pairs, max_left_out or max_dropped may be. The sequential boundary's calibration simulates
40,000 sequences of max_pairs looks (~20 s and ~1 GB at 500, growing with the square), and 500 pairs of even
one-second sessions take hours; a larger number is a typo, which must not hang building the order."""
MAX_BUDGET_S = 366 * 24 * 3600.0
"""The longest --budget: a year. Beyond it a budget is a typo (or overflows to infinity)."""
MAX_RESULTS_DEPTH = 100
"""A session's results document nested deeper than this is refused: ab.json embeds it, and writing it must not
hit the interpreter's recursion limit (results documents are ~6 levels deep; a test's context adds a few)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AbPlan:
    """One comparison: what to run and how to judge it."""

    cmd_a: tuple[str, ...]
    """Side A's Python as a command prefix (already split): ("/venv-a/bin/python",), ("env", "X=1", "python")."""
    cmd_b: tuple[str, ...]
    pytest_args: tuple[str, ...]
    out_dir: Path
    """Where each session's results and log, and the comparison's ab.json, are written."""
    rules: PairedRules | None = None
    """None: PairedRules from threshold, alpha, min_pairs and max_pairs below (the threshold, when None, from the
    sessions' own setting: their device's default)."""
    threshold: float | None = None
    """Used when rules is None; None: the sessions' own threshold setting."""
    min_pairs: int = 4
    max_pairs: int = 16
    alpha: float = 0.01
    budget_s: float | None = None
    seed: int = 0
    repeats: int | None = 10
    """--gpuperf-repeats for each session (the pairs carry the statistics); None: the suite's own."""
    metrics: frozenset[tuple[str, str]] | None = None
    """Only these (test node id, metric) pairs are judged; None: every metric the sessions record."""
    max_dropped: int = 3
    """More dropped pairs than this end the run with an error."""
    max_left_out: int | None = None
    """Pairs run beyond max_pairs to replace pairs the machine's state left out of a metric (the machine not
    itself); None: max_pairs (so at most twice max_pairs pairs in all). 0: left-out pairs count against max_pairs."""
    cwd: Path | None = None
    env: dict[str, str] | None = None
    """Environment of the sessions (default: this process's); CMD may still set variables with `env`."""
    session_figure: str = "best"
    """Each session's figure for a metric: "best" (its fastest call, or highest rate) or "median" (SESSION_FIGURES)."""
    take_turns: bool = False
    """Run both sessions of a pair at once, taking turns test by test and round by round (ab/turns.py)."""
    take_turns_why: str = ""
    """Why take_turns is what it is (the command line's choice, or ab/turns.py turns_by_default's), for ab.json."""
    cpus: frozenset[int] | None = None
    """Run every session on these CPUs only (the engine sets its own affinity, which the sessions inherit; a
    container started by a daemon does not); None: wherever this process may run."""
    widen_cpus: frozenset[int] | None = None
    """Where ``cpus`` was chosen by default (one core while taking turns): the CPUs a session whose tests start their
    own ranks or servers widens to (``--gpuperf-widen-cpus``); None: sessions stay on ``cpus``."""

    def __post_init__(self) -> None:
        if self.session_figure not in SESSION_FIGURES:
            raise ValueError(f"session_figure must be one of {', '.join(SESSION_FIGURES)}, got {self.session_figure!r}")
        for name in ("min_pairs", "max_pairs", "max_left_out", "max_dropped"):
            value = getattr(self, name)
            if value is not None and not 0 <= value <= MAX_PAIR_COUNT:
                raise ValueError(f"{name} must be a whole number from 0 to {MAX_PAIR_COUNT}, got {value}")
        if self.budget_s is not None and not 0 < self.budget_s <= MAX_BUDGET_S:
            raise ValueError(f"budget_s must be above 0 and at most {MAX_BUDGET_S:.0f} s (a year), got {self.budget_s}")


@dataclass(slots=True, kw_only=True)
class SessionOutcome:
    """One pytest session of one side."""

    side: str
    pair: int
    argv: list[str]
    returncode: int | None
    """None: killed by the budget (not a failure of the stack)."""
    seconds: float
    results_file: Path
    log_file: Path
    document: dict[str, Any] | None = None
    error: str | None = None
    """Why this session cannot be used, or None."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "side": self.side,
            "argv": self.argv,
            "returncode": self.returncode,
            "seconds": round(self.seconds, 3),
            "results_file": str(self.results_file),
            "log_file": str(self.log_file),
            "error": self.error,
            "results": self.document,
        }


@dataclass(slots=True, kw_only=True)
class PairRecord:
    index: int
    order: str
    """"AB" or "BA": which side ran first."""
    sessions: list[SessionOutcome] = field(default_factory=list)
    dropped: str | None = None
    """Why the pair was dropped whole, or None."""

    def side(self, name: str) -> SessionOutcome:
        return next(session for session in self.sessions if session.side == name)

    def as_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "order": self.order,
            "dropped": self.dropped,
            "sessions": [s.as_dict() for s in self.sessions],
        }


@dataclass(slots=True, kw_only=True)
class MetricOutcome:
    """One metric's verdict and the figures behind it."""

    test: str
    metric: str
    unit: str
    higher_is_better: bool
    log_ratios: list[float] = field(default_factory=list)
    a_figures: list[float] = field(default_factory=list)
    """A's session figure (AbPlan.session_figure) in each judged pair; b_figures B's."""
    b_figures: list[float] = field(default_factory=list)
    judgement: PairedJudgement | None = None
    decided_at: int | None = None
    """Pairs used when it was decided; None while undecided."""
    missing: str | None = None
    """'only in A' / 'only in B' when one side never recorded it."""
    components: list[str] = field(default_factory=list)
    """Stack components that differ between the sides, beside a REGRESSED/IMPROVED verdict."""
    contended: list[str] = field(default_factory=list)
    """Pairs left out of this metric because a session measured it on a contended machine, or the two sessions'
    canaries differed beyond their noise: 'pair N: B: why'."""

    @property
    def verdict(self) -> Verdict:
        return self.judgement.verdict if self.judgement else Verdict.AMBIGUOUS

    @property
    def decided(self) -> bool:
        return self.decided_at is not None

    def reason(self) -> str:
        """The judgement's reason, and how many pairs the machine's state left out (with the first cause)."""
        text = self.judgement.reason if self.judgement else "no pairs"
        if self.contended:
            text += f"; {len(self.contended)} pair(s) left out, the machine not itself ({self.contended[0]})"
        return text

    def as_dict(self) -> dict[str, Any]:
        judgement = self.judgement
        low, high = judgement.interval_ratio() if judgement else (None, None)
        return {
            "test": self.test,
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "verdict": "MISSING" if self.missing else self.verdict.value,
            "missing": self.missing,
            "pairs": len(self.log_ratios),
            "decided_at": self.decided_at,
            "a_median": statistics.median(self.a_figures) if self.a_figures else None,
            "b_median": statistics.median(self.b_figures) if self.b_figures else None,
            "ratio": judgement.ratio if judgement else None,
            "interval": [_finite(low), _finite(high)],
            "flag_interval": [_finite(math.exp(v)) for v in judgement.flag_interval] if judgement else None,
            "equivalence_interval": [_finite(math.exp(v)) for v in judgement.equivalence_interval]
            if judgement
            else None,
            "needed_pairs": judgement.needed_pairs if judgement else None,
            "reason": self.missing or self.reason(),
            "contended_pairs": self.contended,
            "log_ratios": self.log_ratios,
            "a_figures": self.a_figures,
            "b_figures": self.b_figures,
            "components": self.components,
        }


@dataclass(slots=True, kw_only=True)
class AbResult:
    """Everything one comparison did and decided."""

    plan: AbPlan
    rules: PairedRules | None = None
    pairs: list[PairRecord] = field(default_factory=list)
    metrics: dict[tuple[str, str], MetricOutcome] = field(default_factory=dict)
    fingerprints: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each side's fingerprint, from its first session's results."""
    stopped: str = "not started"
    """Why it stopped: 'every metric decided', 'max pairs', 'budget', 'interrupted', or an error."""
    wall_s: float = 0.0

    @property
    def complete_pairs(self) -> int:
        return sum(1 for pair in self.pairs if pair.dropped is None and len(pair.sessions) == 2)

    @property
    def dropped_pairs(self) -> list[PairRecord]:
        return [pair for pair in self.pairs if pair.dropped is not None]

    @property
    def stack_changes(self) -> list[str]:
        if not all(side in self.fingerprints for side in SIDES):
            return []
        return stack_changes(self.fingerprints["A"].get("stack", {}), self.fingerprints["B"].get("stack", {}))

    def judged(self) -> list[MetricOutcome]:
        return sorted(self.metrics.values(), key=lambda m: (m.test, m.metric))

    def regressed(self) -> list[MetricOutcome]:
        return [m for m in self.judged() if not m.missing and m.verdict is Verdict.REGRESSED]

    def as_dict(self) -> dict[str, Any]:
        plan, rules = self.plan, self.rules
        return {
            "schema": AB_SCHEMA,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "command": {"a": list(plan.cmd_a), "b": list(plan.cmd_b), "pytest_args": list(plan.pytest_args)},
            "seed": plan.seed,
            "rules": None
            if rules is None
            else {
                "threshold": rules.threshold,
                "alpha": rules.alpha,
                "invocation_alpha": plan.alpha,
                "equivalence_alpha": rules.equivalence_alpha,
                "min_pairs": rules.min_pairs,
                "max_pairs": rules.max_pairs,
                "boundary_shape": rules.boundary_shape,
                "method": "Wilcoxon signed-rank / Hodges-Lehmann on paired log-ratios, Wang-Tsiatis boundary "
                "calibrated by simulation",
            },
            "session_figure": plan.session_figure,
            "take_turns": plan.take_turns,
            "take_turns_why": plan.take_turns_why,
            "cpus": None if plan.cpus is None else sorted(plan.cpus),
            "widen_cpus": None if plan.widen_cpus is None else sorted(plan.widen_cpus),
            "budget_s": plan.budget_s,
            "order": [pair.order for pair in self.pairs],
            "stopped": self.stopped,
            "wall_s": round(self.wall_s, 2),
            "complete_pairs": self.complete_pairs,
            "dropped_pairs": len(self.dropped_pairs),
            "fingerprints": self.fingerprints,
            "stack_changes": self.stack_changes,
            "metrics": [m.as_dict() for m in self.judged()],
            "pairs": [pair.as_dict() for pair in self.pairs],
        }


def document_text(document: dict[str, Any]) -> str:
    """ab.json's text (and bisect.json's): strict JSON, sorted and indented. A figure that is not finite (an
    interval without a bound, a budget beyond float range) is written as null, never as NaN or Infinity, which
    strict readers (gpuperf's own included) refuse. Values of other types are written as their text."""
    try:
        return schema.dumps(_json_values(document))
    except SchemaError:  # nested too deeply to write: keep everything but the sessions' raw documents
        return schema.dumps(_json_values(_without_raw_results(document)))


def _json_values(value: Any, depth: int = 0) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if depth > 4 * MAX_RESULTS_DEPTH:
        return "(nested too deeply to keep)"
    if isinstance(value, dict):
        return {str(key): _json_values(child, depth + 1) for key, child in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_values(child, depth + 1) for child in value]
    return str(value)


def _without_raw_results(document: dict[str, Any]) -> dict[str, Any]:
    pairs = [
        {**pair, "sessions": [{**session, "results": None} for session in pair.get("sessions", [])]}
        for pair in document.get("pairs", [])
        if isinstance(pair, dict)
    ]
    return {**document, "pairs": pairs, "note": "the sessions' results documents are left out: nested too deeply"}


class SessionRunner(Protocol):
    """Runs one session: argv, where its output goes, an optional time limit; returns (returncode, seconds),
    returncode None when the limit killed it. Replaceable so tests and other front ends can drive the engine."""

    def __call__(
        self, argv: list[str], *, log_file: Path, timeout: float | None, cwd: Path | None, env: dict[str, str]
    ) -> tuple[int | None, float]: ...


def subprocess_runner(
    argv: list[str], *, log_file: Path, timeout: float | None, cwd: Path | None, env: dict[str, str]
) -> tuple[int | None, float]:
    """A real session: no shell, output to its log, in a process group of its own (core/record/children.py); at the
    time limit or on Ctrl-C the whole group is stopped (before re-raising), and what it leaves behind when it
    exits is ended, so no process of it measures beside the next session."""
    started = time.monotonic()
    with log_file.open("wb") as log:
        process = start_session(argv, log, cwd=cwd, env=env)
        try:
            returncode: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            stop_session(process)
            returncode = None
        except BaseException:  # Ctrl-C: the session must not outlive the comparison
            stop_session(process)
            raise
    end_strays()
    return returncode, time.monotonic() - started


def session_argv(plan: AbPlan, side: str, results_file: Path, turns: Path | None = None) -> list[str]:
    """CMD + -m pytest PYTEST_ARGS + what makes the session only measure and write its results (and, with
    ``turns``, take turns through the pipes of that prefix)."""
    prefix = plan.cmd_a if side == "A" else plan.cmd_b
    extra = ["--gpuperf-results", str(results_file), "--gpuperf-measure-only", "--gpuperf-remeasure", "0"]
    if turns is not None:
        extra += ["--gpuperf-take-turns", str(turns)]
    if plan.widen_cpus:
        extra += ["--gpuperf-widen-cpus", cpu_text(plan.widen_cpus)]
    if plan.repeats is not None:
        extra += ["--gpuperf-repeats", str(plan.repeats)]
    return [*prefix, "-m", "pytest", *plan.pytest_args, *extra]


def balanced_order(pairs: int, seed: int) -> list[str]:
    """Pair orders in blocks of two pairs, ABBA -> ["AB", "BA"] or BAAB -> ["BA", "AB"], a seeded coin per block."""
    rng = random.Random(seed)
    order: list[str] = []
    while len(order) < pairs:
        order += ["AB", "BA"] if rng.random() < 0.5 else ["BA", "AB"]
    return order[:pairs]


Progress = Callable[[str], None]


def run_ab(
    plan: AbPlan,
    *,
    runner: SessionRunner = subprocess_runner,
    progress: Progress | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> AbResult:
    """Run the comparison to its end and return what it decided; raises AbError (with the partial result) when
    it cannot go on. Ctrl-C returns the verdicts so far (stopped == 'interrupted')."""
    if not plan.cmd_a or not plan.cmd_b:
        raise AbError("--a and --b each need a command prefix (a Python, for example .venv/bin/python)")
    with _pinned(plan.cpus):
        try:
            return _run_pairs(plan, runner, progress, clock)
        finally:
            stop_all()


@contextlib.contextmanager
def _pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """This process (and so every session it starts) on ``cpus`` only, restored after."""
    if cpus is None:
        yield
        return
    if not hasattr(os, "sched_setaffinity"):
        raise AbError("--cpus needs CPU affinity (os.sched_setaffinity), which this system does not have")
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise AbError(
            f"--cpus {cpu_text(cpus)}: this process may run only on CPUs {cpu_text(allowed)}"
            + (f" (not on {cpu_text(cpus - allowed)})" if cpus - allowed and len(cpus) > 1 else "")
            + "; choose among those"
        )
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def cpu_text(cpus: Iterable[int]) -> str:
    """ "0,2" and "0-3,8" as taskset writes them: runs of three or more CPUs as a range."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    parts = [
        f"{low}-{high}" if high - low >= 2 else ",".join(str(cpu) for cpu in range(low, high + 1)) for low, high in runs
    ]
    return ",".join(parts) or "(none)"


def _run_pairs(plan: AbPlan, runner: SessionRunner, progress: Progress | None, clock: Callable[[], float]) -> AbResult:
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
    try:
        for index, first in enumerate(order, start=1):
            if _at_last_look(result, max_pairs, max_left_out):
                result.stopped = "max pairs"
                break
            elapsed = clock() - started
            if plan.budget_s is not None and pair_seconds and elapsed + _typical(pair_seconds) > plan.budget_s:
                result.stopped = "budget"
                break
            pair = PairRecord(index=index, order=first)
            result.pairs.append(pair)
            pair_started = clock()
            if plan.take_turns:
                remaining = None if plan.budget_s is None else max(1.0, plan.budget_s - (clock() - started))
                pair.sessions.extend(_run_pair_taking_turns(plan, first, index, sessions_dir, remaining, env))
            else:
                for side in first:
                    remaining = None if plan.budget_s is None else max(1.0, plan.budget_s - (clock() - started))
                    outcome = _run_session(plan, side, index, sessions_dir, runner, remaining, env)
                    pair.sessions.append(outcome)
                    if outcome.returncode is None or outcome.error is not None:
                        break  # killed at the budget, or failed: the pair is dropped whole, its other side need not run
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
                result.rules = _rules_from(plan, pair)
            _add_pair(pair, result)
            if not result.metrics:
                result.stopped = "error"
                raise AbError(_NO_METRICS, result)
            decided = _judge_all(result)
            result.wall_s = clock() - started
            say(_progress_line(pair, result, decided, pair_seconds))
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


def _typical(seconds: list[float]) -> float:
    return statistics.median(seconds[-4:])


def _run_session(
    plan: AbPlan,
    side: str,
    index: int,
    sessions_dir: Path,
    runner: SessionRunner,
    timeout: float | None,
    env: dict[str, str],
) -> SessionOutcome:
    results_file, log_file = _session_files(sessions_dir, index, side)
    argv = session_argv(plan, side, results_file)
    returncode, seconds = runner(argv, log_file=log_file, timeout=timeout, cwd=plan.cwd, env=env)
    return _outcome(side, index, argv, returncode, seconds, results_file, log_file)


def _session_files(sessions_dir: Path, index: int, side: str) -> tuple[Path, Path]:
    """(results file, log file) of one session, what an earlier try (or a side) left at either path removed: a
    FIFO left at the log's path would block opening it for writing."""
    results_file = sessions_dir / f"{index:03d}-{side}.json"
    log_file = sessions_dir / f"{index:03d}-{side}.log"
    for path in (results_file, log_file):
        try:
            path.unlink(missing_ok=True)
        except OSError as error:
            raise AbError(
                f"{path}: cannot be replaced for session {index:03d}-{side} ({error.strerror or error}); "
                "remove it, or give another --out"
            ) from None
    return results_file, log_file


def _run_pair_taking_turns(
    plan: AbPlan, order: str, index: int, sessions_dir: Path, timeout: float | None, env: dict[str, str]
) -> list[SessionOutcome]:
    """Both sessions of the pair at once, taking turns, the first of ``order`` granted the first turn."""
    from pytest_gpuperf.ab.turns import TurnChannelError, run_pair_taking_turns

    files = {side: _session_files(sessions_dir, index, side) for side in order}
    turns = {side: sessions_dir / f"{index:03d}-{side}.turn" for side in order}
    argvs = {side: session_argv(plan, side, files[side][0], turns[side]) for side in order}
    try:
        ran = run_pair_taking_turns(
            [argvs[side] for side in order],
            prefixes=[turns[side] for side in order],
            log_files=[files[side][1] for side in order],
            timeout=timeout,
            cwd=plan.cwd,
            env=env,
        )
    except TurnChannelError as error:
        raise AbError(str(error)) from None
    return [
        _outcome(side, index, argvs[side], returncode, seconds, *files[side])
        for side, (returncode, seconds) in zip(order, ran)
    ]


def _outcome(
    side: str,
    index: int,
    argv: list[str],
    returncode: int | None,
    seconds: float,
    results_file: Path,
    log_file: Path,
) -> SessionOutcome:
    """What one finished session gave: its results document, or why it gave none."""
    outcome = SessionOutcome(
        side=side,
        pair=index,
        argv=argv,
        returncode=returncode,
        seconds=seconds,
        results_file=results_file,
        log_file=log_file,
    )
    if returncode is None:
        return outcome
    if returncode != 0:
        outcome.error = _failure(returncode, log_file)
        return outcome
    document, outcome.error = read_session_results(results_file)
    outcome.document = document
    return outcome


def read_session_results(results_file: Path) -> tuple[dict[str, Any] | None, str | None]:
    """A session's results document, read as every gpuperf reader reads one (bounded, regular files only,
    strict JSON, validated by core/store/results.py), or why it cannot be used: a malformed document is a failed
    session, never a traceback in the engine."""
    if not os.path.lexists(results_file):
        return None, "exit status 0 but no results file was written"
    try:
        data = schema.read_file(results_file)
    except schema.UnreadableFile as error:
        return None, f"unusable results file: {error}"
    try:
        document = parse_document(data, where=str(results_file))
    except SchemaError as error:
        return None, f"malformed results file: {error}"
    depth = nesting_depth(document, MAX_RESULTS_DEPTH)
    if depth > MAX_RESULTS_DEPTH:
        return None, f"malformed results file: {results_file}: nested more than {MAX_RESULTS_DEPTH} levels deep"
    return document, None


def nesting_depth(value: Any, limit: int) -> int:
    """How deeply lists and objects nest in ``value``, counted up to ``limit + 1`` (iterative: any depth)."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            depth += 1
            if depth > limit:
                return depth
            deepest = max(deepest, depth)
            stack.extend((child, depth) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _failure(returncode: int, log_file: Path) -> str:
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    names = {1: "tests failed", 2: "interrupted", 3: "internal error", 4: "usage error", 5: "no tests collected"}
    return f"exit status {returncode} ({names.get(returncode, 'crashed')}): {_last_line(log_file)}"


LOG_TAIL_BYTES = 64 * 1024
"""How much of a session's log is read for its last line: a log can be gigabytes, or a FIFO a side left."""


def _last_line(log_file: Path) -> str:
    """The log's last telling line (an error if any), from its last LOG_TAIL_BYTES; raw text: printing it is
    the caller's business (cli/ab.py escapes control characters)."""
    try:
        descriptor = os.open(log_file, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC)
    except OSError:
        return "no log"
    with os.fdopen(descriptor, "rb", buffering=0) as handle:
        try:
            status = os.fstat(handle.fileno())
            if not stat.S_ISREG(status.st_mode):
                return "no log (not a regular file)"
            handle.seek(max(0, status.st_size - LOG_TAIL_BYTES))
            tail = handle.read(LOG_TAIL_BYTES) or b""
        except OSError:
            return "no log"
    lines = [line.strip() for line in tail.decode("utf-8", errors="replace").splitlines()]
    useful = [line for line in lines if line and not set(line) <= set("=-_ ")]
    errors = [line for line in useful if line.startswith(("ERROR", "E ", "FAILED")) or "Error" in line]
    text = (errors or useful or ["no output"])[-1]
    return text[:200]


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


def _rules_from(plan: AbPlan, pair: PairRecord) -> PairedRules:
    """The comparison's rules, from its first complete pair. The flag level is the invocation's: ``plan.alpha``
    over the metrics both sessions recorded (Bonferroni), so an A/A comparison of many metrics is flagged in at
    most ``alpha`` of runs, not one metric's ``alpha`` times their number."""
    threshold = plan.threshold
    if threshold is None:
        settings = (pair.side("A").document or {}).get("settings") or {}
        stored = settings.get("threshold")
        usable = isinstance(stored, (int, float)) and not isinstance(stored, bool) and 0 < stored < 1
        threshold = float(stored) if usable and stored is not None else DEVICE_DEFAULTS["cpu"]["threshold"]
    figure = plan.session_figure
    both = set(_session_metrics(pair.side("A").document or {}, figure))
    both &= set(_session_metrics(pair.side("B").document or {}, figure))
    if plan.metrics is not None:
        both &= plan.metrics
    return PairedRules(
        threshold=threshold, alpha=plan.alpha / max(1, len(both)), min_pairs=plan.min_pairs, max_pairs=plan.max_pairs
    )


@dataclass(frozen=True, slots=True)
class SessionMetric:
    """One metric as one session measured it."""

    figure: float
    """The session's figure for it: its best sample or its median (AbPlan.session_figure)."""
    unit: str
    higher_is_better: bool
    state: MachineState | None
    """The host's state while it was measured (None where the session recorded none, or where the metric was
    timed on the device: ``timed_on_device``)."""
    device_slowdown: str | None = None
    """For a metric timed on the device: why its telemetry shows the device slowed down for a reason of its own
    (thermal, a hardware slowdown, a power brake: not the power cap a heavy kernel reaches by itself), or None."""


def session_figure(samples: Sequence[float], *, higher_is_better: bool, figure: str) -> float:
    """One session's figure for a metric: "best" (the lowest time, the highest rate) or "median"."""
    if figure == "median":
        return statistics.median(samples)
    return max(samples) if higher_is_better else min(samples)


def _session_metrics(document: dict[str, Any], figure: str) -> dict[tuple[str, str], SessionMetric]:
    """Per metric: the session's figure for it, its unit, direction and the machine's state while it was measured."""
    found = {}
    for entry in document.get("results", []):
        try:
            samples = [float(v) for v in entry["samples"]]
            key = (str(entry["test"]), str(entry["metric"]))
            context = entry.get("context")
            context = context if isinstance(context, dict) else {}
            higher_is_better = bool(entry["higher_is_better"])
            on_device = timed_on_device(context)
            found[key] = SessionMetric(
                figure=session_figure(samples, higher_is_better=higher_is_better, figure=figure),
                unit=str(entry.get("unit", "")),
                higher_is_better=higher_is_better,
                state=None if on_device else machine_state(context),
                device_slowdown=device_slowdown(context) if on_device else None,
            )
        except (KeyError, TypeError, ValueError, statistics.StatisticsError):  # min/max of no samples: ValueError
            continue  # a malformed entry of another version: that metric is not compared in this pair
    return found


def device_slowdown(context: dict[str, Any]) -> str | None:
    """Why a measurement's device telemetry shows the device slowed down by itself, or None (none recorded, or
    none seen). The power cap a heavy kernel reaches is not such a reason: a stack whose kernels draw more power
    is slowed by it, and that is the stack's doing, which the comparison must see."""
    telemetry = context.get("telemetry")
    return check_conditions(telemetry, None).problem if isinstance(telemetry, dict) else None


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


def _add_pair(pair: PairRecord, result: AbResult) -> None:
    figure = result.plan.session_figure
    a = _session_metrics(pair.side("A").document or {}, figure)
    b = _session_metrics(pair.side("B").document or {}, figure)
    wanted = result.plan.metrics
    for key in sorted(set(a) | set(b)):
        if wanted is not None and key not in wanted:
            continue
        source = a.get(key) or b[key]
        metric = result.metrics.get(key)
        if metric is None:
            metric = result.metrics[key] = MetricOutcome(
                test=key[0], metric=key[1], unit=source.unit, higher_is_better=source.higher_is_better
            )
        if key in a and key in b:
            metric.missing = None
            if metric.decided or (result.rules is not None and len(metric.log_ratios) >= result.rules.max_pairs):
                continue  # decided, or its last look taken: AMBIGUOUS stays AMBIGUOUS
            left_out = devices_slowed(a[key], b[key]) or why_left_out(
                a[key].state, b[key].state, taking_turns=result.plan.take_turns
            )
            if left_out:
                metric.contended.append(f"pair {pair.index}: {left_out}")
                continue
            metric.a_figures.append(a[key].figure)
            metric.b_figures.append(b[key].figure)
            try:
                metric.log_ratios.append(
                    log_ratio(a[key].figure, b[key].figure, higher_is_better=metric.higher_is_better)
                )
            except ValueError:
                metric.a_figures.pop()
                metric.b_figures.pop()
        elif not metric.log_ratios:
            metric.missing = "only in A" if key in a else "only in B"


def _at_last_look(result: AbResult, max_pairs: int, max_left_out: int) -> bool:
    """Whether no further pair can change a verdict: every undecided metric has had its last look (max_pairs pairs
    judged), or the pairs run reach max_pairs plus the pairs that may replace those the machine's state left out.
    A metric's looks are its judged pairs, the count the sequential boundary is calibrated on, so replacing a
    left-out pair keeps the error rates (the choice never reads the metric's figures)."""
    done = result.complete_pairs
    if done >= max_pairs + max_left_out:
        return True
    if done < max_pairs:
        return False
    pending = [m for m in result.metrics.values() if not m.decided and not m.missing]
    return all(len(m.log_ratios) >= max_pairs for m in pending)


def _judge_all(result: AbResult) -> int:
    assert result.rules is not None
    boundary = result.rules.boundary()
    for metric in result.metrics.values():
        if metric.decided or metric.missing or not metric.log_ratios:
            continue
        metric.judgement = judge(metric.log_ratios, result.rules, boundary)
        if metric.judgement.verdict is not Verdict.AMBIGUOUS:
            metric.decided_at = len(metric.log_ratios)
            if metric.judgement.verdict in (Verdict.REGRESSED, Verdict.IMPROVED):
                metric.components = result.stack_changes
    return sum(1 for m in result.metrics.values() if m.decided)


def _progress_line(pair: PairRecord, result: AbResult, decided: int, pair_seconds: Sequence[float]) -> str:
    assert result.rules is not None
    total = sum(1 for m in result.metrics.values() if not m.missing)
    pending = [m for m in result.metrics.values() if not m.decided and not m.missing]
    done = result.complete_pairs
    wanted = [
        min(result.rules.max_pairs, max(result.rules.min_pairs, m.judgement.needed_pairs or result.rules.max_pairs))
        if m.judgement
        else result.rules.max_pairs
        for m in pending
    ]
    left_pairs = max([w - done for w in wanted] + [0])
    left = left_pairs * _typical(list(pair_seconds))
    if result.plan.budget_s is not None:
        left = min(left, max(0.0, result.plan.budget_s - result.wall_s))
    extra = done - result.rules.max_pairs
    count = (
        f"{result.rules.max_pairs}/{result.rules.max_pairs} + {extra}"
        if extra > 0
        else f"{done}/{result.rules.max_pairs}"
    )
    return (
        f"pair {count} ({pair.order}): {decided}/{total} metrics decided, "
        f"{_duration(result.wall_s)} used, ~{_duration(left)} left"
    )


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value != 0.0 else None
