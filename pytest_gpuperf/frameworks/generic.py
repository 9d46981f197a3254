"""The two adapters a test configures in a few lines: ``JsonlAdapter`` (one JSON object per line, on the output or
in the file the command writes) and ``RegexAdapter`` (a regular expression per log line, named groups).

Each maps the framework's keys (or groups) to gpuperf metrics with ``Metric``: which key, its unit, which way is
better, and a scale (1e-3 turns milliseconds into seconds). Every matching line is one step; the warm-up rule
(core/record/readings.py) drops the first ones.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.core.record.readings import (
    Reading,
    RunOutput,
    Series,
    at_line,
    finite,
    output_file,
    parse_number,
    parse_step,
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Metric:
    """One gpuperf metric read from a key (JSONL) or a named group (regex)."""

    key: str
    """The JSON key (dots reach into nested objects: "perf.tps") or the regex group's name."""
    unit: str
    higher_is_better: bool
    scale: float = 1.0
    """Multiplies the value: 1e-3 for milliseconds recorded as seconds."""


def _number(raw: Any) -> float | None:
    """A finite number from a JSON value or a matched group ("1,234" and "12.5%" included), else None."""
    return parse_number(raw) if isinstance(raw, str) else finite(raw)


def _dig(document: Mapping[str, Any], key: str) -> Any:
    if key in document:
        return document[key]
    value: Any = document
    for part in key.split("."):
        if not isinstance(value, Mapping) or part not in value:
            return None
        value = value[part]
    return value


def _check_metrics(metrics: Mapping[str, Metric], kind: str) -> dict[str, Metric]:
    if not metrics:
        raise ValueError(f"{kind}: give at least one metric, e.g. metrics={{'tokens_per_s': Metric(key='tps', ...)}}")
    for name, metric in metrics.items():
        if not isinstance(metric, Metric):
            raise ValueError(f"{kind}: metrics[{name!r}] is {metric!r}, expected a frameworks.Metric")
    return dict(metrics)


@dataclass(kw_only=True)
class JsonlAdapter:
    """One JSON object per line: ``source="output"`` reads the command's output (lines that are not JSON objects
    are skipped), ``source="file"`` the file the command writes where ``{output}`` stands in its arguments.

    ``JsonlAdapter(metrics={"tokens_per_s": Metric(key="tps", unit="tok/s", higher_is_better=True)},
    step="step", loss="loss")``"""

    metrics: Mapping[str, Metric]
    step: str | None = "step"
    """The key of the step number; None (or a line without it): the line's position."""
    loss: str | None = None
    """The key of the loss, recorded as the curve "loss"."""
    source: str = "output"
    name: str = "jsonl"
    framework: str = "jsonl"
    """The name in the stack; ``run_command(framework=...)`` gives yours."""
    module: str | None = None
    min_runs: int = 1
    expects: str = field(init=False, default="")
    reads_file: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.metrics = _check_metrics(self.metrics, "JsonlAdapter")
        if self.source not in ("output", "file"):
            raise ValueError(f"JsonlAdapter: source={self.source!r}, expected 'output' or 'file'")
        self.reads_file = self.source == "file"
        keys = ", ".join(repr(m.key) for m in self.metrics.values())
        where = "the file the command writes" if self.reads_file else "its output"
        self.expects = f"JSON objects, one a line in {where}, with the key(s) {keys}"

    def read(self, output: RunOutput) -> Reading:
        if self.reads_file:
            missing = f"the command wrote no file at {output.file} (the {{output}} of its arguments)"
            text, where = output_file(output.file, missing=missing), str(output.file)
        else:
            text, where = output.log, "the output"
        reading = Reading(
            series={n: Series(unit=m.unit, higher_is_better=m.higher_is_better) for n, m in self.metrics.items()}
        )
        position = 0
        for number, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line.startswith("{"):
                continue
            with at_line(where, number, line):
                try:
                    document = json.loads(line)
                except ValueError:
                    continue
            if not isinstance(document, dict):
                continue
            values = {n: _number(_dig(document, m.key)) for n, m in self.metrics.items()}
            if all(v is None for v in values.values()):
                continue
            raw_step = parse_step(_dig(document, self.step)) if self.step else None
            step = raw_step if raw_step is not None else position
            position += 1
            for name, value in values.items():
                if value is not None:
                    reading.series[name].points.append((step, value * self.metrics[name].scale))
            if self.loss is not None:
                loss = _number(_dig(document, self.loss))
                if loss is not None:
                    reading.loss.append((step, loss))
        return reading


@dataclass(kw_only=True)
class RegexAdapter:
    """A regular expression matched against each line of the command's output; its named groups are the metrics
    (``Metric.key`` names the group), ``step`` and ``loss``.

    ``RegexAdapter(pattern=r"step (?P<step>\\d+) .* tps (?P<tps>[\\d,.]+)",
    metrics={"tokens_per_s": Metric(key="tps", unit="tok/s", higher_is_better=True)})``"""

    pattern: str
    metrics: Mapping[str, Metric]
    step: str | None = "step"
    loss: str | None = None
    name: str = "regex"
    framework: str = "regex"
    """The name in the stack; ``run_command(framework=...)`` gives yours."""
    module: str | None = None
    min_runs: int = 1
    reads_file: bool = False
    expects: str = field(init=False, default="")
    _compiled: re.Pattern[str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.metrics = _check_metrics(self.metrics, "RegexAdapter")
        try:
            self._compiled = re.compile(self.pattern)
        except re.error as error:
            raise ValueError(f"RegexAdapter: pattern {self.pattern!r} is not a regular expression: {error}") from None
        groups = set(self._compiled.groupindex)
        wanted = [m.key for m in self.metrics.values()] + [g for g in (self.step, self.loss) if g]
        missing = [g for g in wanted if g not in groups and g != self.step]
        if missing:
            raise ValueError(
                f"RegexAdapter: pattern {self.pattern!r} has no named group(s) {missing}; its groups are "
                f"{sorted(groups) or 'none'} (name one with (?P<name>...))"
            )
        self.expects = f"lines matching {self.pattern!r}"

    def read(self, output: RunOutput) -> Reading:
        reading = Reading(
            series={n: Series(unit=m.unit, higher_is_better=m.higher_is_better) for n, m in self.metrics.items()}
        )
        position = 0
        has_step = self.step is not None and self.step in self._compiled.groupindex
        for line in output.log.splitlines():
            match = self._compiled.search(line)
            if match is None:
                continue
            raw_step = parse_step(match.group(self.step)) if has_step and self.step else None
            step = raw_step if raw_step is not None else position
            position += 1
            for name, metric in self.metrics.items():
                value = _number(match.group(metric.key))
                if value is not None:
                    reading.series[name].points.append((step, value * metric.scale))
            if self.loss is not None:
                loss = _number(match.group(self.loss))
                if loss is not None:
                    reading.loss.append((step, loss))
        return reading
