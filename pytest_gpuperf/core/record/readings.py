"""What a framework's own output says, as gpuperf metrics: the adapter protocol and the warm-up rule.

An adapter reads what a command run by ``perf.run_command`` wrote into a ``Reading``: ``series`` (per-step figures,
their warm-up steps left out by a ``Warmup`` rule, never by hand, the rest of every run pooled into one metric),
``figures`` (one figure per run: one sample each, so at least 3 runs) and ``loss`` (the curve ``loss``). Adapters
are named through the ``pytest_gpuperf_adapter`` hook, whose default implementation (frameworks/plugin.py) knows
the built-in ones; a conftest.py adds its own, or a test passes an adapter object. Adapters read text through the
helpers here (``output_file``, ``at_line``, ``finite``, ``parse_number``, ``parse_step``), so any line they cannot
read is an OutputError naming it. Imports no workload and no pytest.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pytest_gpuperf.core.store import schema

MAX_FILE_BYTES = 256 * 1024 * 1024
"""The largest file an adapter reads (a benchmark's result, a metrics file): larger is refused, never read."""
MAX_NUMBER_CHARS = 64
"""A number written with more characters is no measurement (a 5,000-digit step counter, a garbled line)."""
MAX_STEP = 10**15
"""Steps (iterations) are counted from 0 or 1; one beyond this is no step counter."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOutput:
    """What one run of the command left: its output (standard output and errors, interleaved) and the file the
    command was told to write (``{output}`` in its arguments), if any."""

    log: str
    file: Path | None = None


@dataclass(slots=True, kw_only=True)
class Series:
    """One metric reported per step: (step, value) in the order the framework wrote them."""

    unit: str
    higher_is_better: bool
    points: list[tuple[int, float]] = field(default_factory=list)


@dataclass(frozen=True, slots=True, kw_only=True)
class Figure:
    """One metric reported once per run (a benchmark's p99 TTFT, say)."""

    value: float
    unit: str
    higher_is_better: bool
    unjudgeable: str | None = None
    """Why this figure, though valid, cannot carry a verdict (a p99 over too few requests): judged NOISY."""


@dataclass(slots=True, kw_only=True)
class Reading:
    """Everything an adapter found in one run's output."""

    series: dict[str, Series] = field(default_factory=dict)
    figures: dict[str, Figure] = field(default_factory=dict)
    loss: list[tuple[int, float]] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    """What the output says about the run (model, concurrency, global batch size): kept in every metric's context."""
    version: str | None = None
    """The framework's version where its output states it."""

    def holds_metrics(self) -> bool:
        return any(series.points for series in self.series.values()) or bool(self.figures)


class NoMetrics(Exception):
    """The output holds nothing the adapter reads; the message says what it expected."""


class OutputError(Exception):
    """The output says the run cannot be judged (failed requests, a file that is not the format expected)."""


def output_file(path: Path | None, *, missing: str) -> str:
    """The text of the file a command wrote for its adapter: a regular file of at most MAX_FILE_BYTES (a FIFO or
    a folder at ``{output}`` is refused without blocking); OutputError naming it otherwise. ``missing``: the
    message for a file that is not there."""
    if path is None:
        raise OutputError(missing)
    try:
        data = schema.read_file(path, limit=MAX_FILE_BYTES)
    except schema.UnreadableFile as error:
        if error.kind == "missing":
            raise OutputError(missing) from None
        raise OutputError(f"{error}; the {{output}} of the command's arguments must be a regular file") from None
    return data.decode("utf-8", errors="replace")


@contextlib.contextmanager
def at_line(where: str, number: int, line: str) -> Iterator[None]:
    """What goes wrong reading one line (a number out of range, nesting too deep, a value of the wrong type)
    becomes an OutputError naming ``where`` (the file, or "the output") and the line: interleaved ranks can write
    anything into a log."""
    try:
        yield
    except OutputError:
        raise
    except (ValueError, OverflowError, RecursionError, TypeError, KeyError, IndexError, AttributeError) as error:
        shown = line if len(line) <= 160 else line[:160] + f"... ({len(line)} characters)"
        raise OutputError(
            f"{where} line {number}: cannot be read ({type(error).__name__}: {str(error)[:200]}): {shown!r}"
        ) from None


def finite(value: Any) -> float | None:
    """A JSON value as a finite float, else None (a bool, text, an integer beyond float range, NaN, infinity)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def parse_number(text: str | None) -> float | None:
    """A finite number from text a framework printed ("1,234" and "12.5%" included), else None: at most
    MAX_NUMBER_CHARS characters, so a garbled or endless figure is refused before it is converted."""
    if text is None:
        return None
    cleaned = text.replace(",", "").rstrip("%").strip()
    if not cleaned or len(cleaned) > MAX_NUMBER_CHARS:
        return None
    try:
        return finite(float(cleaned))
    except ValueError:
        return None


def parse_step(value: Any) -> int | None:
    """A step number from text or a JSON value, else None: a whole number from 0 to MAX_STEP."""
    number = parse_number(value) if isinstance(value, str) else finite(value)
    if number is None or not 0 <= number <= MAX_STEP:
        return None
    return int(number)


@runtime_checkable
class Adapter(Protocol):
    """Reads one framework's output. One small object per framework (frameworks/*.py)."""

    name: str
    """How tests name it: "megatron", "vllm-bench", ..."""
    framework: str
    """The framework's name in the stack ("vllm" for the vllm-bench adapter); ``run_command(framework=...)``
    overrides it."""
    module: str | None
    """The Python module whose installed distribution is the framework's version in the stack (None: the test
    names the version)."""
    expects: str
    """What it reads, in words, for the failure of a run whose output holds none of it."""
    reads_file: bool
    """True: it reads the file the command writes, whose path the command gets where ``{output}`` stands."""
    min_runs: int
    """Runs of the command a verdict needs at least: 1 where each run reports per-step figures, 3 where each run
    yields one figure per metric (one sample per run; ``perf.run_command`` then runs it 5 times by default)."""

    def read(self, output: RunOutput) -> Reading:
        """The run's figures; raises OutputError for a run that must not be judged."""
        ...


DEFAULT_WARMUP_FRACTION = 0.2
"""Without a rule of the test's own, the first 20% of each run's logged steps, and at least the first one, are
warm-up: the first logged step holds compilation, autotuning and allocator growth in every framework here
(torch.compile, XLA, CUDA graphs), and a short debug run rarely reaches steady state before a fifth of it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Warmup:
    """Which logged steps of a run are warm-up: the first ``steps``, or the first ``fraction`` of them (rounded
    up), whichever is more. Steps are counted as logged (a Megatron line every ``--log-interval`` iterations is
    one step here)."""

    steps: int = 0
    fraction: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.steps, bool) or not isinstance(self.steps, int) or self.steps < 0:
            raise ValueError(f"warm-up steps must be a whole number >= 0, got {self.steps!r}")
        if not (0.0 <= self.fraction < 1.0):
            raise ValueError(f"warm-up fraction must be from 0 to below 1 (0.2: the first 20%), got {self.fraction!r}")

    def count(self, logged: int) -> int:
        return min(logged, max(self.steps, math.ceil(self.fraction * logged - 1e-9)))

    def describe(self) -> str:
        parts = []
        if self.steps:
            parts.append(f"the first {self.steps} logged step(s)")
        if self.fraction:
            parts.append(f"the first {self.fraction:.0%} of them")
        return " or ".join(parts) + (", whichever is more" if len(parts) == 2 else "") if parts else "none"


DEFAULT_WARMUP = Warmup(steps=1, fraction=DEFAULT_WARMUP_FRACTION)


def parse_warmup(value: int | str | Warmup | None) -> Warmup:
    """``None`` -> the default; ``3`` -> the first 3 steps; ``"10%"`` -> the first tenth; a ``Warmup`` as is."""
    if value is None:
        return DEFAULT_WARMUP
    if isinstance(value, Warmup):
        return value
    if isinstance(value, str) and value.strip().endswith("%"):
        try:
            return Warmup(fraction=float(value.strip()[:-1]) / 100)
        except ValueError:
            raise ValueError(f"warmup={value!r}: expected a percentage such as '10%'") from None
    if isinstance(value, int) and not isinstance(value, bool):
        return Warmup(steps=value)
    raise ValueError(f"warmup={value!r}: expected a number of steps (3), a percentage ('10%') or a Warmup")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pooled:
    """A per-step metric over every run, warm-up left out."""

    name: str
    unit: str
    higher_is_better: bool
    samples: list[float]
    kept_steps: list[list[int]]
    """Per run, the steps kept."""


def pool_series(readings: Sequence[Reading], warmup: Warmup) -> tuple[list[Pooled], dict[str, str]]:
    """Per metric, the values of every run after its warm-up; and, per metric that keeps fewer than 3, why it is
    not recorded (a verdict needs 3 samples)."""
    names = list(dict.fromkeys(name for reading in readings for name in reading.series))
    pooled: list[Pooled] = []
    too_few: dict[str, str] = {}
    for name in names:
        first = next(reading.series[name] for reading in readings if name in reading.series)
        samples: list[float] = []
        kept_steps: list[list[int]] = []
        logged = 0
        for reading in readings:
            points = reading.series[name].points if name in reading.series else []
            logged += len(points)
            # a value <= 0 is a figure the framework could not measure (TorchTitan's -1 without memory stats)
            kept = [(step, value) for step, value in points[warmup.count(len(points)) :] if value > 0]
            samples.extend(value for _, value in kept)
            kept_steps.append([step for step, _ in kept])
        if len(samples) < 3:
            too_few[name] = (
                f"{len(samples)} of {logged} logged value(s) left after the warm-up ({warmup.describe()}); a verdict "
                "needs 3: log more steps, or give a shorter warmup="
            )
            continue
        pooled.append(
            Pooled(
                name=name,
                unit=first.unit,
                higher_is_better=first.higher_is_better,
                samples=samples,
                kept_steps=kept_steps,
            )
        )
    return pooled, too_few


def tail_lines(text: str, lines: int) -> list[str]:
    """The last ``lines`` non-empty lines of ``text``."""
    found = [line.rstrip() for line in text.splitlines() if line.strip()]
    return found[-lines:]
