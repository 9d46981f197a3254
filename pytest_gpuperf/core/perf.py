"""The `perf` fixture's object: what a test measured (samples, curves), nothing judged yet."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pytest_gpuperf.core.stats import Verdict, summarize
from pytest_gpuperf.core.store import Curve
from pytest_gpuperf.core.verdict import RULE_VERDICTS, External, Rule
from pytest_gpuperf.machine.telemetry import DeviceReader, TelemetrySampler, TelemetrySummary, judge_clocks

Timer = Callable[[Callable[[], object], int], list[float]]
"""Times ``repeats`` calls of a function: ``timer(fn, repeats) -> seconds per call`` (CUDA events, say)."""


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
    unjudgeable: str | None = None
    """Why these samples cannot support a verdict although they are valid figures (too few requests behind a
    p99, say): the verdict is then NOISY, never PASS or REGRESSED. Stored in the results' context."""
    rule: Rule | None = None
    """The rule of its own that judges this metric (core/verdict.py: steps to target, curve match, a user's
    verdict); None: the samples are compared with the baseline's. Never both: one figure, one verdict."""


@dataclass(slots=True, kw_only=True)
class CurveRecord:
    name: str
    steps: list[int]
    values: list[float]


class TelemetryWindow:
    """What the device reported while a ``with perf.watch()`` block ran.

    Without a telemetry reader (CPU runs, no NVML/amdsmi) it samples nothing and ``context`` is empty: nothing is
    invented. A reader that fails mid-window is reported in ``context`` instead of failing the measurement.
    """

    def __init__(self, reader: DeviceReader | None) -> None:
        self._reader = reader
        self._sampler: TelemetrySampler | None = None
        self.summary: TelemetrySummary | None = None
        """The window's summary (clocks, power, throttling), once the block has ended."""
        self.error: str | None = None

    def __enter__(self) -> TelemetryWindow:
        if self._reader is not None:
            self._sampler = TelemetrySampler(self._reader)
            self._sampler.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._sampler is None:
            return
        try:
            self._sampler.__exit__(*exc_info)
        except RuntimeError as error:
            self.error = str(error)
            return
        self.summary = self._sampler.trace.summary()

    @property
    def context(self) -> dict[str, Any]:
        """For ``perf.record(..., context=window.context)``: the summary under "telemetry" (the key the verdict
        reads the clocks from), or nothing."""
        if self.summary is not None:
            assert self._reader is not None
            return {
                "telemetry": {
                    **self.summary.to_dict(),
                    "device_name": self._reader.device_name,
                    "backend": self._reader.backend,
                }
            }
        if self.error is not None:
            return {"telemetry_error": self.error}
        return {}

    def conditions(self, baseline: TelemetrySummary | None) -> str | None:
        """Why this window's device conditions make it incomparable with the baseline's, or None."""
        if self.summary is None:
            return None
        comparable, why = judge_clocks(self.summary, baseline)
        return None if comparable else why


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
        telemetry: DeviceReader | None = None,
        baseline_telemetry: Callable[[str], TelemetrySummary | None] | None = None,
    ) -> None:
        self.nodeid = nodeid
        self.device = device
        """The device the workloads run on: "cpu" or "cuda"."""
        self.settings = settings
        self._noise_limit = noise_limit
        self._baseline_curves = baseline_curves
        self._telemetry = telemetry
        self._baseline_telemetry = baseline_telemetry or (lambda name: None)
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
        unjudgeable: str | None = None,
        rule: Rule | None = None,
    ) -> MetricRecord:
        """Record a metric with its repeated samples (several values, so the verdict can judge noise).

        ``unjudgeable`` says why the samples, though valid, cannot support a verdict (for example "p99 of 24
        requests; a p99 needs >= 299"): the metric is then stored and reported, and judged NOISY. ``rule`` (from
        core/verdict.py) judges the metric instead of the baseline comparison: ``StepsToTarget`` for steps to a
        target loss over seeds, ``CurveMatch`` for a final loss whose curves meet a golden band."""
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
            name=name,
            unit=unit,
            higher_is_better=higher_is_better,
            samples=values,
            rounds=rounds,
            context=dict(context or {}) | ({"unjudgeable": unjudgeable} if unjudgeable else {}),
            unjudgeable=unjudgeable,
            rule=rule,
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
        timer: Timer | None = None,
        work: float | None = None,
    ) -> list[float]:
        """Run ``fn`` ``warmup`` times, then time ``repeats`` calls; records seconds per call (lower is better).

        ``sync`` (for example ``torch.cuda.synchronize``) is called before starting and before stopping each
        timer, so asynchronous device work is inside the measurement. ``timer`` replaces the default wall-clock
        timing (and ``sync``): CUDA events with an L2 flush between calls, for example. With ``work`` (the amount
        of work one call does, in ``unit`` x seconds: FLOPs / 1e12 for TFLOP/s) the metric is work per second,
        higher is better. Returns the recorded samples.

        Device telemetry, where there is a reader, is sampled around each round and kept in the metric's context.
        A round whose spread exceeds the noise limit, or in which the device throttled or ran its clocks below
        90% of the baseline's, is measured again, up to ``--gpuperf-remeasure`` times; the best round is kept
        (comparable device conditions first, then the least spread).
        """
        self._check_name(name)
        if work is not None and (unit == "s" or not work > 0):
            raise ValueError(
                f"perf.measure({name!r}): work={work!r} with unit={unit!r}; a rate needs positive work per call "
                "and its own unit (for example work=flops / 1e12, unit='TFLOP/s')"
            )
        warmup = self.settings.warmup if warmup is None else warmup
        repeats = self.settings.repeats if repeats is None else repeats
        if repeats < 3:
            raise ValueError(f"perf.measure({name!r}): repeats={repeats}; a verdict needs at least 3")
        if timer is None:

            def timer(call: Callable[[], object], count: int) -> list[float]:
                return _time_calls(call, count, sync)

        for _ in range(warmup):
            fn()
        baseline_telemetry = self._baseline_telemetry(name)
        best: tuple[tuple[bool, float], list[float], dict[str, Any]] | None = None
        rounds = 0
        for rounds in range(1, self.settings.remeasure + 2):  # noqa: B007 (the count is reported after the loop)
            with self.watch() as window:
                seconds = timer(fn, repeats)
            if len(seconds) != repeats or not all(math.isfinite(t) and t > 0 for t in seconds):
                raise ValueError(
                    f"perf.measure({name!r}): the timer returned {seconds[:4]}..., expected "
                    f"{repeats} positive durations in seconds"
                )
            samples = [work / t for t in seconds] if work is not None else list(seconds)
            conditions = window.conditions(baseline_telemetry)
            spread = summarize(samples).spread
            rank = (conditions is None, -spread)
            if best is None or rank > best[0]:
                best = (rank, samples, window.context)
            if conditions is None and spread <= self._noise_limit:
                break
        assert best is not None
        _, samples, context = best
        self.record(name, samples, unit=unit, higher_is_better=work is not None, rounds=rounds, context=context)
        return samples

    def reset(self) -> None:
        """Forget what was recorded, before the test is measured again (a confirmation attempt)."""
        self.metrics.clear()
        self.curves.clear()

    def watch(self) -> TelemetryWindow:
        """Sample device telemetry around a block you time yourself; pass ``window.context`` to ``record``::

        with perf.watch() as window:
            samples = my_timed_loop()
        perf.record("tokens_per_s", samples, unit="tok/s", higher_is_better=True, context=window.context)
        """
        return TelemetryWindow(self._telemetry)

    def metric(self, name: str) -> MetricRecord:
        """The record of a metric already measured in this test (to add context such as the peak it reached)."""
        for metric in self.metrics:
            if metric.name == name:
                return metric
        raise KeyError(
            f"no metric {name!r} recorded in {self.nodeid}; recorded: "
            f"{', '.join(m.name for m in self.metrics) or 'none'}"
        )

    def judge_elsewhere(self, name: str, *, rule: str, verdict: str, reason: str) -> None:
        """Give metric ``name`` (already recorded) the verdict another rule reached instead of the baseline
        comparison: a figure with a rule of its own (MLPerf's steps-to-target test) must not also be judged as a
        timing, or the two verdicts can disagree."""
        if verdict not in {v.value for v in RULE_VERDICTS}:
            raise ValueError(
                f"judge_elsewhere({name!r}): verdict must be one of {', '.join(v.value for v in RULE_VERDICTS)}, "
                f"got {verdict!r}"
            )
        self.metric(name).rule = External(rule=rule, verdict=Verdict(verdict), reason=reason)

    def record_curve(self, name: str, steps: Sequence[int], values: Sequence[float]) -> CurveRecord:
        """Record a curve (loss per step, say); stored with the baseline as a golden for convergence checks."""
        steps_list = [int(step) for step in steps]
        values_list = [float(value) for value in values]
        if len(steps_list) != len(values_list):
            raise ValueError(f"perf.record_curve({name!r}): {len(steps_list)} steps but {len(values_list)} values")
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
