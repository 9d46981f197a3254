"""The `perf` fixture's object: what a test measured (samples, curves), nothing judged yet."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.stats import summarize
from pytest_gpuperf.store import Curve


@dataclass(slots=True, kw_only=True)
class MetricRecord:
    """One metric of one test: its repeated samples and how to read them."""

    name: str
    unit: str
    higher_is_better: bool
    samples: list[float]
    rounds: int = 1
    """How many measurement rounds were taken (a noisy round is measured again, up to a bound)."""
    context: dict[str, Any] = field(default_factory=dict)
    """What else was observed while measuring (device telemetry, for example); stored in the results."""


@dataclass(slots=True, kw_only=True)
class CurveRecord:
    name: str
    steps: list[int]
    values: list[float]


class Perf:
    """Records a test's metrics and curves; the plugin judges them against the baseline after the test."""

    def __init__(
        self,
        *,
        nodeid: str,
        device: str,
        settings: Any,
        noise_limit: float,
        baseline_curves: Callable[[str], list[Curve]],
    ) -> None:
        self.nodeid = nodeid
        self.device = device
        """The device the workloads run on: "cpu" or "cuda"."""
        self.settings = settings
        self._noise_limit = noise_limit
        self._baseline_curves = baseline_curves
        self.metrics: list[MetricRecord] = []
        self.curves: list[CurveRecord] = []

    def record(
        self,
        name: str,
        samples: Sequence[float],
        *,
        unit: str,
        higher_is_better: bool,
        rounds: int = 1,
        context: dict[str, Any] | None = None,
    ) -> MetricRecord:
        """Record a metric with its repeated samples (several values, so the verdict can judge noise)."""
        self._check_name(name)
        values = [float(value) for value in samples]
        if len(values) < 3:
            raise ValueError(
                f"perf.record({name!r}): {len(values)} sample(s) given; a verdict needs at least 3 repeated "
                "samples (more is better: a Mann-Whitney test of n vs n needs n >= 5 to reach p < 0.01)"
            )
        bad = [value for value in values if not math.isfinite(value) or value <= 0]
        if bad:
            raise ValueError(
                f"perf.record({name!r}): samples must be finite positive numbers (times, rates, sizes: the "
                f"verdict compares ratios), got {bad[:4]}"
            )
        record = MetricRecord(
            name=name, unit=unit, higher_is_better=higher_is_better, samples=values, rounds=rounds,
            context=dict(context or {}),
        )
        self.metrics.append(record)
        return record

    def measure(
        self,
        name: str,
        fn: Callable[[], object],
        *,
        unit: str = "s",
        warmup: int | None = None,
        repeats: int | None = None,
        sync: Callable[[], object] | None = None,
    ) -> list[float]:
        """Run ``fn`` ``warmup`` times, then time ``repeats`` calls; records seconds per call (lower is better).

        ``sync`` (for example ``torch.cuda.synchronize``) is called before starting and before stopping each
        timer, so asynchronous device work is inside the measurement. A round whose spread exceeds the noise
        limit is measured again, up to ``--gpuperf-remeasure`` times; the least noisy round is kept.
        """
        self._check_name(name)
        warmup = self.settings.warmup if warmup is None else warmup
        repeats = self.settings.repeats if repeats is None else repeats
        if repeats < 3:
            raise ValueError(f"perf.measure({name!r}): repeats={repeats}; a verdict needs at least 3")
        for _ in range(warmup):
            fn()
        best: list[float] | None = None
        rounds = 0
        for rounds in range(1, self.settings.remeasure + 2):
            samples = _time_calls(fn, repeats, sync)
            if best is None or summarize(samples).spread < summarize(best).spread:
                best = samples
            if summarize(best).spread <= self._noise_limit:
                break
        assert best is not None
        self.record(name, best, unit=unit, higher_is_better=False, rounds=rounds)
        return best

    def record_curve(self, name: str, steps: Sequence[int], values: Sequence[float]) -> CurveRecord:
        """Record a curve (loss per step, say); stored with the baseline as a golden for convergence checks."""
        steps_list = [int(step) for step in steps]
        values_list = [float(value) for value in values]
        if len(steps_list) != len(values_list):
            raise ValueError(
                f"perf.record_curve({name!r}): {len(steps_list)} steps but {len(values_list)} values"
            )
        record = CurveRecord(name=name, steps=steps_list, values=values_list)
        self.curves.append(record)
        return record

    def baseline_curves(self, name: str) -> list[Curve]:
        """The stored reference curves of this test under ``name`` for this hardware (empty if none)."""
        return self._baseline_curves(name)

    def _check_name(self, name: str) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"metric name must be a non-empty string, got {name!r}")
        if any(metric.name == name for metric in self.metrics):
            raise ValueError(f"metric {name!r} recorded twice in {self.nodeid}; give each metric its own name")


def _time_calls(fn: Callable[[], object], repeats: int, sync: Callable[[], object] | None) -> list[float]:
    samples = []
    clock = time.perf_counter
    for _ in range(repeats):
        if sync is not None:
            sync()
        start = clock()
        fn()
        if sync is not None:
            sync()
        samples.append(clock() - start)
    return samples
