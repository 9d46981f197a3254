"""What one `gpuperf ab` comparison is and what it found: AbPlan, the sessions and pairs it ran, each metric's
outcome, and ab.json, the document written from them (``AbResult.as_dict``, ``document_text``).

Records only: nothing here runs a session, reads one's results or judges a pair. Figures that are not finite are
written as null, so ab.json stays strict JSON. May import core/ and machine/fingerprint.py; never cli/ or the
rest of ab/.
"""

from __future__ import annotations

import datetime as dt
import math
import statistics
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pytest_gpuperf.core.stats.paired import PairedRules
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.schema import SchemaError
from pytest_gpuperf.core.verdict.paired import PairedJudgement
from pytest_gpuperf.core.verdict.vocabulary import Verdict
from pytest_gpuperf.machine.fingerprint import stack_changes

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


class AbError(Exception):
    """A comparison that cannot go on (bad command, different machines, sessions that keep failing); one line.

    ``result`` holds what was measured until then, so the caller can still write it."""

    def __init__(self, message: str, result: AbResult | None = None) -> None:
        super().__init__(message)
        self.result = result


def _paired_looks(name: str) -> int:
    """The paired policy's first or last look, the plan's unless the command line says otherwise: one declaration."""
    value = next(rule.default for rule in fields(PairedRules) if rule.name == name)
    assert isinstance(value, int)
    return value


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
    min_pairs: int = _paired_looks("min_pairs")
    max_pairs: int = _paired_looks("max_pairs")
    alpha: float = 0.01
    """The invocation's flag level, over all its metrics (each metric is judged at alpha / their number)."""
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
    profile: bool = False
    """After the paired verdict, one more session per side under torch.profiler (``--gpuperf-profile``), never
    judged; their operators compared in ``AbResult.profile``."""
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
    profile: dict[str, Any] | None = None
    """With ``plan.profile``: each side's operator summary file, the diff of the two (core/record/profiling.py
    ``kernel_diff``), or why there is none."""
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
            "profile": self.profile,
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


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) and value != 0.0 else None
