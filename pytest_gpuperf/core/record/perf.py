"""The `perf` fixture's object: what a test measured (samples, curves), nothing judged yet.

Around every measurement it also records what the device reported (telemetry) and what the machine did
(machine/contention.py: steal, run-queue wait, a reference canary), so the verdict can tell a slower stack from a
busier machine. A round measured on a machine that was not itself is measured again (``--gpuperf-remeasure``);
a clean round whose verdict would be AMBIGUOUS is extended with more rounds of samples (``--gpuperf-extend``)."""

from __future__ import annotations

import contextlib
import itertools
import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from pytest_gpuperf.core.record import ranks
from pytest_gpuperf.core.record.baseline_view import NO_BASELINE, BaselineView
from pytest_gpuperf.core.record.gate import OPEN, Gate
from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.baselines import Curve, NotStorable
from pytest_gpuperf.core.store.schema import SchemaError
from pytest_gpuperf.core.verdict.judge import DEVICE_CLOCK, RULE_VERDICTS, External, Rule
from pytest_gpuperf.core.verdict.vocabulary import Verdict
from pytest_gpuperf.machine.contention import MachineState, MachineWindow, TurnWaits, compare_machine
from pytest_gpuperf.machine.telemetry import DeviceReader, TelemetrySampler, TelemetrySummary, check_conditions

if TYPE_CHECKING:
    from collections.abc import Mapping
    from os import PathLike

    from pytest_gpuperf.core.config.settings import Settings
    from pytest_gpuperf.core.store.results import MetricResult

Timer = Callable[[Callable[[], object], int], list[float]]
"""Times ``repeats`` calls of a function: ``timer(fn, repeats) -> seconds per call`` (CUDA events, say). A timer
that reads the accelerator's own clock says so with an attribute ``clock = "device"`` (CUDA events time the
device's own work; any other timer, like the default, reads the host's wall clock, which the host's load moves)."""


@dataclass(slots=True, kw_only=True)
class MetricRecord:
    """One metric of one test: its repeated samples and how to read them."""

    name: str
    unit: str
    higher_is_better: bool
    samples: list[float]
    rounds: int = 1
    """How many measurement rounds were taken (a noisy round is measured again, up to a bound)."""
    looks: int = 1
    """How many rounds' samples are pooled in ``samples``: more than 1 when an AMBIGUOUS measurement was extended
    (sequential sampling); the verdict then spends its alpha over the looks (``Rules.for_looks``)."""
    context: dict[str, Any] = field(default_factory=dict)
    """What else was observed while measuring (device telemetry, for example); stored in the results."""
    unjudgeable: str | None = None
    """Why these samples cannot support a verdict although they are valid figures (too few requests behind a
    p99, say): the verdict is then NOISY, never PASS or REGRESSED. Stored in the results' context."""
    rule: Rule | None = None
    """The rule of its own that judges this metric (core/verdict/judge.py: steps to target, curve match, a user's
    verdict); None: the samples are compared with the baseline's. Never both: one figure, one verdict."""
    stack: dict[str, str] = field(default_factory=dict)
    """Stack components of what this test ran beyond the session's (a framework ``run_command`` ran, with its
    version): stored with the metric's runs and named in its stack changes."""


@dataclass(slots=True, kw_only=True)
class CurveRecord:
    name: str
    steps: list[int]
    values: list[float]
    stack: dict[str, str] = field(default_factory=dict)


class TelemetryWindow:
    """What the device reported, and what the machine did, while a ``with perf.watch()`` block ran.

    Without a telemetry reader (CPU runs, no NVML/amdsmi) it samples no device and ``context`` holds no
    "telemetry": nothing is invented. A reader that fails mid-window is reported in ``context`` instead of failing
    the measurement. With ``machine=True`` the machine's state (machine/contention.py) is kept under "machine".
    """

    def __init__(
        self, reader: DeviceReader | None, *, machine: bool = False, waited: Callable[[], TurnWaits] | None = None
    ) -> None:
        self._reader = reader
        self._sampler: TelemetrySampler | None = None
        self._machine = MachineWindow(waited=waited) if machine else None
        self.summary: TelemetrySummary | None = None
        """The window's summary (clocks, power, throttling), once the block has ended."""
        self.machine: MachineState | None = None
        """The machine's state over the window (steal, run-queue wait, canary), once the block has ended."""
        self.error: str | None = None

    def __enter__(self) -> TelemetryWindow:
        if self._machine is not None:
            self._machine.__enter__()
        if self._reader is not None:
            self._sampler = TelemetrySampler(self._reader)
            self._sampler.__enter__()
        return self

    def __exit__(self, *exc_info: object) -> None:
        try:
            if self._sampler is not None:
                try:
                    self._sampler.__exit__(*exc_info)
                except RuntimeError as error:
                    self.error = str(error)
                else:
                    self.summary = self._sampler.trace.summary()
        finally:
            if self._machine is not None:
                self._machine.__exit__(*exc_info)  # the canary runs after the device sampler has stopped
                self.machine = self._machine.state

    def between_calls(self, done: int, count: int) -> None:
        """For a timer of the block: call it after each timed call, outside the timed part, and the machine's
        canaries are taken between the calls instead of after the block (``MachineWindow.between_calls``)."""
        if self._machine is not None:
            self._machine.between_calls(done, count)

    @property
    def context(self) -> dict[str, Any]:
        """For ``perf.record(..., context=window.context)``: the device summary under "telemetry" (the key the
        verdict reads the clocks from) and the machine's state under "machine", where there are any."""
        context: dict[str, Any] = {}
        if self.summary is not None:
            assert self._reader is not None
            context["telemetry"] = {
                **self.summary.to_dict(),
                "device_name": self._reader.device_name,
                "backend": self._reader.backend,
            }
        elif self.error is not None:
            context["telemetry_error"] = self.error
        if self.machine is not None:
            context["machine"] = self.machine.to_dict()
        return context

    def conditions(
        self, baseline: TelemetrySummary | None, baseline_machine: list[MachineState | None] | None = None
    ) -> str | None:
        """Why this window's device or machine conditions make it incomparable with the baseline's, or None.

        Only what re-measuring can change counts here: a contended machine now, or a canary slower than the
        baseline's; a baseline recorded under load is the verdict's business (session.py)."""
        problems = []
        if self.summary is not None:
            problem = check_conditions(self.summary, baseline).problem
            if problem:
                problems.append(problem)
        if self.machine is not None and baseline_machine is not None:
            current = compare_machine(self.machine, baseline_machine).current
            if current:
                problems.append(current)
        return "; ".join(problems) or None


class Perf:
    """Records a test's metrics and curves; the plugin judges them against the baseline after the test."""

    def __init__(
        self,
        *,
        nodeid: str,
        device: str,
        settings: Settings,
        noise_limit: float,
        baselines: BaselineView = NO_BASELINE,
        telemetry: DeviceReader | None = None,
        gate: Gate = OPEN,
        adapter_named: Callable[[str], Any] | None = None,
    ) -> None:
        self.nodeid = nodeid
        self.device = device
        """The device the workloads run on: "cpu" or "cuda"."""
        self.settings = settings
        self._noise_limit = noise_limit
        self._baselines = baselines
        """What this test reads of its session: the stored baseline's curves, telemetry and machine states, and
        the verdict a metric would get now (sequential sampling)."""
        self._telemetry = telemetry
        self._gate = gate
        """Where the session may hold this test back (core/record/gate.py): before the test's own machine window
        opens, then before each call a measurement times, or each round a custom timer times. Taking turns
        (core/session/turns.py) waits there, so the two sides' calls of one measurement alternate, call by call."""
        self._adapter_named = adapter_named
        """The adapter a name stands for in ``run_command`` (the pytest_gpuperf_adapter hook), or None."""
        self._gate.before_test()
        self._machine_check = settings.machine_check
        self._extend_spent = 0.0
        """Seconds this test has spent on extension rounds (bounded by --gpuperf-extend-seconds)."""
        self.metrics: list[MetricRecord] = []
        self.curves: list[CurveRecord] = []
        self._test_window = self._start_test_window()

    def record(
        self,
        name: str,
        samples: Iterable[float],
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
        requests; a p99 needs >= 299"): the metric is then stored and reported, and judged NOISY.

        A sample that is NaN, infinite or beyond what the statistics can hold (schema.SAMPLE_MAX), or such a value
        in ``context``, fails the test at once (the measurement diverged): that is a verdict on this test, and
        nothing of it reaches the baselines or the results, which stay writable for every other test.

        ``context`` holds what a JSON file can: numpy and torch scalars (and 0-d arrays or tensors) become Python
        numbers here; a set, an array, an object or a key that is not text raises ValueError at this call, as
        does a ``unit`` or ``higher_is_better`` the baseline files would refuse (schema.py's rules, applied now
        rather than by every later session that reads the file).

        ``rule`` (from core/verdict/judge.py) judges the metric instead of the baseline comparison: ``StepsToTarget``
        for steps to a target loss over seeds, ``CurveMatch`` for a final loss whose curves meet a golden band."""
        self._check_name(name)
        call = f"perf.record({name!r}) in {self.nodeid}"
        unit = self._field(call, "unit", unit, schema.text)
        higher_is_better = self._field(call, "higher_is_better", higher_is_better, schema.flag)
        rounds = self._field(call, "rounds", rounds, _whole_count)
        if unjudgeable:  # "" says nothing, as None
            unjudgeable = self._field(call, "unjudgeable", unjudgeable, schema.text)
        values = self._numbers(call, "samples", samples)
        context = self._storable(call, {} if context is None else context)  # no truth test: a tensor has none
        problem = schema.sample_problem(values)
        if problem is not None:
            index, why = problem
            _diverged(f"metric {name!r} sample {index} {why}: the measurement diverged")
        where = schema.non_finite(context)
        if where is not None:
            _diverged(f"metric {name!r} context {where!r} is not a finite number (nan or inf)")
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
        try:
            schema.samples(values, call)  # the store's rule, the last word on what a file may hold
        except SchemaError as error:
            raise ValueError(str(error)) from None
        if "machine" not in context and self._test_window is not None:
            # samples timed by the test itself, outside perf.watch(): the machine's state since the test began
            context["machine"] = self._test_window.close().to_dict()
        record = MetricRecord(
            name=name,
            unit=unit,
            higher_is_better=higher_is_better,
            samples=values,
            rounds=rounds,
            context=context | ({"unjudgeable": unjudgeable} if unjudgeable else {}),
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

        Device telemetry, where there is a reader, and the machine's state are sampled around each round and kept
        in the metric's context. A round whose spread exceeds the noise limit, in which the device throttled or
        ran its clocks below 90% of the baseline's, or in which the machine was contended (or its reference
        canary ran slower than the baseline's) is measured again, up to ``--gpuperf-remeasure`` times; the best
        round is kept (comparable conditions first, then the least spread). A ``timer`` on the device's own
        clock (``clock = "device"``: CUDA events) is judged by the device's telemetry alone; the host's state is
        still kept in the results.

        Sequential sampling: when that round is clean and its verdict against the baseline would be AMBIGUOUS,
        up to ``--gpuperf-extend`` more rounds are taken and pooled with it, while each stays clean and the test's
        extension time stays within ``--gpuperf-extend-seconds``; the verdict spends its alpha over the looks.
        """
        self._check_name(name)
        unit = self._field(f"perf.measure({name!r}) in {self.nodeid}", "unit", unit, schema.text)  # before the work
        if work is not None and (unit == "s" or not work > 0):
            raise ValueError(
                f"perf.measure({name!r}): work={work!r} with unit={unit!r}; a rate needs positive work per call "
                "and its own unit (for example work=flops / 1e12, unit='TFLOP/s')"
            )
        warmup = self.settings.warmup if warmup is None else warmup
        repeats = self.settings.repeats if repeats is None else repeats
        if repeats < 3:
            raise ValueError(f"perf.measure({name!r}): repeats={repeats}; a verdict needs at least 3")

        # The gate: call by call where this module times the calls, else round by round (a custom timer's calls
        # are its own); the warm-up and the first round then pass it once, back to back.
        by_call = timer is None
        on_device = getattr(timer, "clock", None) == DEVICE_CLOCK
        gate_passed = False
        if not by_call:
            self._gate.before_round()
            gate_passed = True
        for _ in range(warmup):
            if by_call:
                self._gate.before_call()
            fn()
        baseline_telemetry = self._baselines.telemetry(name)
        baseline_machine = self._baselines.machine(name)

        def one_round() -> tuple[list[float], str | None, float, dict[str, Any], float]:
            """(samples, why not comparable, spread, context, seconds the round took)."""
            nonlocal gate_passed
            if not by_call and not gate_passed:  # a round measured again, or an extra one: the partner's turn between
                self._gate.before_round()
            gate_passed = False
            started = time.perf_counter()
            with self.watch() as window:
                if timer is None:
                    seconds = _time_calls(fn, repeats, sync, window.between_calls, self._gate.before_call)
                else:
                    seconds = timer(fn, repeats)
            if len(seconds) != repeats or not all(math.isfinite(t) and t > 0 for t in seconds):
                raise ValueError(
                    f"perf.measure({name!r}): the timer returned {seconds[:4]}..., expected "
                    f"{repeats} positive durations in seconds"
                )
            samples = [work / t for t in seconds] if work is not None else list(seconds)
            if on_device:  # the device's time: its telemetry says whether it was itself, not the host's canaries
                conditions = window.conditions(baseline_telemetry)
                context = {**window.context, "clock": DEVICE_CLOCK}
            else:
                conditions = window.conditions(baseline_telemetry, baseline_machine)
                context = window.context
            return samples, conditions, summarize(samples).spread, context, time.perf_counter() - started

        # Every rank of a multi-rank job takes the rounds any rank asks for (ranks.py): calls that are collectives
        # must be made on all of them.
        measurement = f"{ranks.next_measurement()}/{self.nodeid}/{name}"
        best: tuple[tuple[bool, float], list[float], dict[str, Any], float] | None = None
        rounds = 0
        for rounds in range(1, self.settings.remeasure + 2):  # noqa: B007 (the count is reported after the loop)
            samples, conditions, spread, context, took = one_round()
            rank = (conditions is None, -spread)
            if best is None or rank > best[0]:
                best = (rank, samples, context, took)
            clean_now = conditions is None and spread <= self._noise_limit
            last = rounds == self.settings.remeasure + 1
            if last or not ranks.any_rank_wants(f"{measurement}/{rounds}", not clean_now, round_seconds=took):
                break
        assert best is not None
        (no_conditions, negative_spread), samples, context, took = best
        clean = no_conditions and -negative_spread <= self._noise_limit
        higher_is_better = work is not None
        samples, context, looks, rounds = self._extend(
            name, unit, higher_is_better, samples, context, rounds, took, one_round, measurement, wanted=clean
        )
        record = self.record(
            name, samples, unit=unit, higher_is_better=higher_is_better, rounds=rounds, context=context
        )
        record.looks = looks
        return samples

    def _extend(
        self,
        name: str,
        unit: str,
        higher_is_better: bool,
        samples: list[float],
        context: dict[str, Any],
        rounds: int,
        took: float,
        one_round: Callable[[], tuple[list[float], str | None, float, dict[str, Any], float]],
        measurement: str,
        *,
        wanted: bool,
    ) -> tuple[list[float], dict[str, Any], int, int]:
        """Sequential sampling: pool more clean rounds while the verdict would be AMBIGUOUS, within the bounds.
        ``wanted``: this rank's kept round was clean, so it may extend. A round another rank of the job asks for
        is taken too (ranks.py) and not pooled.

        Returns (pooled samples, context, looks, rounds taken in all)."""
        if self.settings.extend <= 0 or self.settings.save:
            return samples, context, 1, rounds
        looks = 1
        stopped = ""
        for extra in itertools.count(1):
            go = False
            if wanted:
                pooled = MetricRecord(name=name, unit=unit, higher_is_better=higher_is_better, samples=samples)
                pooled.context, pooled.looks = context, looks
                stop = self._stop_extending(pooled, took)
                go, wanted = stop is None, stop is None
                stopped = stop or ""
            if not ranks.any_rank_wants(f"{measurement}/extend/{extra}", go, round_seconds=took):
                break
            more, conditions, spread, _, took = one_round()
            rounds += 1
            self._extend_spent += took
            if not go:  # another rank's round
                continue
            if conditions is not None or spread > self._noise_limit:
                why = conditions or f"spread {spread:.1%} above the noise limit"
                stopped = f"extra round {rounds} not pooled: {why}"
                wanted = False
                continue
            samples = samples + more
            looks += 1
        if looks > 1 or stopped:
            context = {**context, "extended": {"looks": looks, "stopped": stopped or "decided"}}
        return samples, context, looks, rounds

    def _stop_extending(self, candidate: MetricRecord, took: float) -> str | None:
        """Why the pooled samples of ``candidate`` take no further round ("" where the verdict is decided), or None
        to go on; ``took``: the last round's seconds."""
        preview = self._baselines.preview(candidate)
        if preview is None or preview.verdict is not Verdict.AMBIGUOUS:  # None: the view cannot tell
            return ""
        if not preview.samples_can_decide:
            shift = (
                f"the machine's shift between the baseline's sitting and this one ({preview.sitting_noise:.1%} sd)"
                if preview.sitting_noise is not None
                else "the spread between machines of this hardware key (the baseline is another machine's)"
            )
            return f"{shift} is wider than the threshold: more rounds cannot decide it"
        if candidate.looks > self.settings.extend:
            return f"still AMBIGUOUS after {self.settings.extend} extra round(s) (--gpuperf-extend)"
        if self._extend_spent + took > self.settings.extend_seconds:
            return (
                f"the next round (~{took:.1f} s) would exceed the test's {self.settings.extend_seconds:g} s for extra "
                "rounds (--gpuperf-extend-seconds)"
            )
        return None

    def _start_test_window(self) -> MachineWindow | None:
        return MachineWindow(waited=self._gate.waited).start() if self._machine_check != "off" else None

    def watch(self) -> TelemetryWindow:
        """Sample device telemetry around a block you time yourself; pass ``window.context`` to ``record``::

        with perf.watch() as window:
            samples = my_timed_loop()
        perf.record("tokens_per_s", samples, unit="tok/s", higher_is_better=True, context=window.context)
        """
        return TelemetryWindow(self._telemetry, machine=self._machine_check != "off", waited=self._gate.waited)

    @contextlib.contextmanager
    def telemetry_from(self, reader: DeviceReader | None) -> Iterator[None]:
        """Within the block, sample ``reader``'s device around measurements instead of the session's, whose GPU is
        this process's (its LOCAL_RANK's): a test that measures each local GPU in turn (the acceptance tier) reads
        the telemetry of the GPU it measures."""
        previous, self._telemetry = self._telemetry, reader
        try:
            yield
        finally:
            self._telemetry = previous

    def run_command(
        self,
        argv: Sequence[str],
        *,
        adapter: Any,
        runs: int | None = None,
        warmup: int | str | Any = None,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        cwd: str | PathLike[str] | None = None,
        framework: str | None = None,
        version: str | None = None,
        log_dir: str | PathLike[str] | None = None,
    ) -> list[Any]:
        """Run a framework's own command (a training launch, ``vllm bench serve``) and record what it reports.

        ``adapter`` reads the framework's output: a name ("megatron", "torchtitan", "maxtext", "vllm-bench",
        "sglang-bench", "mlperf", or one a conftest.py adds with the ``pytest_gpuperf_adapter`` hook) or an adapter
        object (``frameworks.JsonlAdapter``, ``frameworks.RegexAdapter``: docs/frameworks.md). Each run is a process
        group of its own, its output streamed to ``log_dir/run-N.log``, stopped at ``timeout`` seconds, at the
        test's budget or on Ctrl-C; ``{output}`` in ``argv`` becomes the path of a fresh file per run, for the
        adapters that read the file the command writes.

        Per-step figures (step time, tokens/s, TFLOP/s, MFU, memory) of every run are pooled after each run's
        ``warmup`` (a number of logged steps, a percentage such as "10%", or a ``readings.Warmup``; default: the
        first 20%, at least one step); a per-run figure (a serving benchmark's p99 TTFT) is one sample per run,
        so those adapters run the command ``runs=5`` times by default (3 at least; 5 vs 5 is the smallest
        comparison that can reach p < 0.01). The loss, where reported, is recorded as
        the curve "loss". The framework's name (``framework``, else the adapter's) and ``version`` (else what the
        output or the command's Python says) join the stack of the metrics recorded here.

        A non-zero exit, a timeout or an output without a metric fails the test with the tail of the output.
        Returns each run's ``Reading``."""
        from pytest_gpuperf.core.record.command import run_command

        if isinstance(adapter, str):
            found = self._adapter_named(adapter) if self._adapter_named is not None else None
            if found is None:
                raise ValueError(
                    f"perf.run_command: no adapter named {adapter!r}; the built-in ones are megatron, torchtitan, "
                    "maxtext, vllm-bench, sglang-bench and mlperf; jsonl and regex are configured objects "
                    "(pytest_gpuperf.frameworks.JsonlAdapter, RegexAdapter: docs/frameworks.md)"
                )
            adapter = found
        return run_command(
            self,
            argv,
            adapter=adapter,
            runs=runs,
            warmup=warmup,
            timeout=timeout,
            env=env,
            cwd=cwd,
            framework=framework,
            version=version,
            log_dir=log_dir,
        )

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

    def record_curve(self, name: str, steps: Iterable[int], values: Iterable[float]) -> CurveRecord:
        """Record a curve (loss per step, say); stored with the baseline as a golden for convergence checks.

        A NaN or infinite value (a diverged run) fails the test at once, naming the curve and the step. A name that
        is not text, a step that is not a whole number a file can hold, or a value that is not a number raises
        ValueError at this call (schema.py's rules for stored curves); numpy and torch numbers are taken."""
        call = f"perf.record_curve({name!r}) in {self.nodeid}"
        if not isinstance(name, str) or not name:
            raise ValueError(f"{call}: the curve's name must be a non-empty string, got {schema.quote(name)}")
        steps_list = [self._field(call, f"steps[{index}]", step, _real) for index, step in enumerate(steps)]
        values_list = self._numbers(call, "values", values)
        if len(steps_list) != len(values_list):
            raise ValueError(f"perf.record_curve({name!r}): {len(steps_list)} steps but {len(values_list)} values")
        problem = schema.value_problem(values_list)
        if problem is not None:
            index, shown = problem
            _diverged(f"{name} diverged at step {steps_list[index]}: {shown}")
        steps_list, values_list = self._field(
            call, "curve", (steps_list, values_list), lambda raw, where, _: schema.curve(raw[0], raw[1], where)
        )
        record = CurveRecord(name=name, steps=steps_list, values=values_list)
        self.curves.append(record)
        return record

    def baseline_curves(self, name: str) -> list[Curve]:
        """The stored reference curves of this test under ``name`` for this hardware (empty if none)."""
        return self._baselines.curves(name)

    @staticmethod
    def _field(call: str, name: str, raw: Any, rule: Callable[[Any, str, str], Any]) -> Any:
        """``raw`` through one of schema.py's field rules (numpy and torch scalars first made Python values), or
        ValueError naming the call and the field: a value no gpuperf file could hold fails the test recording it.
        """
        try:
            value = schema.plain(raw, f"{call}: {name!r}")
        except SchemaError as error:
            raise ValueError(str(error)) from None
        try:
            return rule(value, call, name)
        except SchemaError as error:
            raise ValueError(f"{error}; fix the value given to {call.split(' in ', 1)[0]}") from None

    @classmethod
    def _numbers(cls, call: str, name: str, raw: Iterable[Any]) -> list[float]:
        """Samples or curve values as floats: numpy and torch numbers taken, anything else a ValueError."""
        values = []
        for index, value in enumerate(raw):
            values.append(value if type(value) is float else float(cls._field(call, f"{name}[{index}]", value, _real)))
        return values

    @staticmethod
    def _storable(call: str, context: Any) -> dict[str, Any]:
        """A context as the files hold it (schema.plain), or ValueError naming the call and the key."""
        try:
            converted = schema.plain(context, f"{call}: context")
        except SchemaError as error:
            raise ValueError(str(error)) from None
        if not isinstance(converted, dict):
            raise ValueError(f"{call}: context is {schema.kind(converted)}, not a dict of what was observed")
        return converted

    def make_storable(self, results: Sequence[MetricResult]) -> None:
        """Convert what a workload added to its metrics' contexts after recording them (``perf.metric(name)
        .context[...] = np.int64(3)``), in the records and in their ``results``, as ``record`` converts a context;
        NotStorable names the test, the metric and the key of a value no file can hold: that test fails, and
        nothing of it reaches the baselines or the results, which every other test still gets."""
        try:
            for metric in self.metrics:
                metric.context = schema.plain(metric.context, f"{self.nodeid}: metric {metric.name!r} context")
            for result in results:
                result.context = schema.plain(result.context, f"{self.nodeid}: metric {result.metric!r} context")
        except SchemaError as error:
            raise NotStorable(f"{error} (a value added after perf.record)") from None

    def _check_name(self, name: str) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"metric name must be a non-empty string, got {name!r}")
        if any(metric.name == name for metric in self.metrics):
            raise ValueError(f"metric {name!r} recorded twice in {self.nodeid}; give each metric its own name")


def _whole_count(raw: Any, where: str, name: str) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
        raise SchemaError(f"{where}: {name!r} is {schema.quote(raw)}, not a whole number >= 1")
    return raw


def _real(raw: Any, where: str, name: str) -> int | float:
    """A number of a sample, step or curve value (NaN and infinity pass: they are a verdict, said by the caller)."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)):
        raise SchemaError(f"{where}: {name} holds {schema.quote(raw)}, not a number")
    return raw


def _diverged(message: str) -> NoReturn:
    """Fail the running test with a verdict, not a traceback: its figures are not numbers a baseline can hold."""
    pytest.fail(f"gpuperf: {message}", pytrace=False)


def _time_calls(
    fn: Callable[[], object],
    repeats: int,
    sync: Callable[[], object] | None,
    between: Callable[[int, int], None] | None = None,
    before: Callable[[], None] | None = None,
) -> list[float]:
    """Seconds per call of ``repeats`` calls; ``before()`` runs before each and ``between(done, repeats)`` after
    each, both untimed."""
    samples = []
    clock = time.perf_counter
    for done in range(1, repeats + 1):
        if before is not None:
            before()
        if sync is not None:
            sync()
        start = clock()
        fn()
        if sync is not None:
            sync()
        samples.append(clock() - start)
        if between is not None:
            between(done, repeats)
    return samples
