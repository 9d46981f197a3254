"""Run state of one pytest session: loads baselines, judges each test's metrics, saves, writes the results.

Data flows one way: the `perf` fixture measures (measure.py), this module turns measurements into judged
results (stats.py against store.py), report.py renders them.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from pytest_gpuperf import __version__
from pytest_gpuperf.core.perf import Perf
from pytest_gpuperf.core.settings import Settings
from pytest_gpuperf.core.stats import Comparison, Rules, Verdict, compare, summarize
from pytest_gpuperf.core.store import BaselineStore, Curve, MetricRun, NewCurve, NewMetric, write_atomic
from pytest_gpuperf.machine.fingerprint import Fingerprint, LazyFingerprint, stack_changes
from pytest_gpuperf.machine.telemetry import DeviceReader, TelemetrySummary, TelemetryUnavailable, judge_clocks

TelemetryOpener = Callable[[str], "DeviceReader | TelemetryUnavailable | None"]
"""Given the device ("cpu"/"cuda"): a telemetry reader, why there is none, or None where none is expected."""

RESULTS_SCHEMA_VERSION = 1

# Verdicts that fail a test: always, and additionally under --gpuperf-strict.
FAILING = frozenset({Verdict.REGRESSED})
FAILING_STRICT = frozenset({Verdict.REGRESSED, Verdict.NO_BASELINE, Verdict.NOISY, Verdict.AMBIGUOUS, Verdict.IMPROVED})


@dataclass(slots=True, kw_only=True)
class MetricResult:
    """One judged metric: what was measured, what it was compared with, and the verdict."""

    test: str
    metric: str
    unit: str
    higher_is_better: bool
    samples: list[float]
    rounds: int
    context: dict[str, Any]
    comparison: Comparison
    baseline_runs: list[list[float]] = field(default_factory=list)
    baseline_stack: dict[str, str] | None = None
    stack_changes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> Verdict:
        return self.comparison.verdict

    def as_dict(self) -> dict[str, Any]:
        pooled = [value for run in self.baseline_runs for value in run]
        return {
            "test": self.test,
            "metric": self.metric,
            "unit": self.unit,
            "higher_is_better": self.higher_is_better,
            "samples": self.samples,
            "rounds": self.rounds,
            "summary": summarize(self.samples).as_dict(),
            "context": self.context,
            "baseline": None
            if not self.baseline_runs
            else {
                "runs": self.baseline_runs,
                "summary": summarize(pooled).as_dict(),
                "stack": self.baseline_stack,
            },
            "comparison": self.comparison.as_dict(),
            "verdict": self.verdict.value,
            "stack_changes": self.stack_changes,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricResult:
        comparison = dict(data["comparison"])
        comparison["verdict"] = Verdict(comparison["verdict"])
        baseline = data.get("baseline") or {}
        return cls(
            test=data["test"],
            metric=data["metric"],
            unit=data["unit"],
            higher_is_better=data["higher_is_better"],
            samples=data["samples"],
            rounds=data["rounds"],
            context=data.get("context", {}),
            comparison=Comparison(**comparison),
            baseline_runs=baseline.get("runs", []),
            baseline_stack=baseline.get("stack"),
            stack_changes=data.get("stack_changes", []),
        )


class GpuperfSession:
    """Everything the plugin keeps for one pytest session (or one xdist worker)."""

    def __init__(
        self, settings: Settings, *, extra_stack: dict[str, str] | None = None, telemetry: TelemetryOpener | None = None
    ) -> None:
        self.settings = settings
        self._extra_stack = extra_stack or {}
        self._open_telemetry = telemetry
        self._telemetry: DeviceReader | None = None
        self._telemetry_opened = False
        self.telemetry_note: str | None = None
        """"telemetry unavailable: <reason>" when telemetry was expected and could not be read; reported once."""
        self._device: str | None = None
        self._fingerprint: LazyFingerprint | None = None
        self._store: BaselineStore | None = None
        self.results: list[MetricResult] = []
        self.curves: list[dict[str, Any]] = []
        self._to_save: list[NewMetric] = []
        self._curves_to_save: list[NewCurve] = []
        self.saved_files: list[Path] = []

    # -- lazily resolved context (needs torch; never touched by sessions without perf tests) --

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = resolve_device(self.settings.device_request)
        return self._device

    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            self._fingerprint = LazyFingerprint(self.device, self._extra_stack)
        return self._fingerprint.get()

    @property
    def store(self) -> BaselineStore:
        if self._store is None:
            fingerprint = self.fingerprint
            self._store = BaselineStore(self.settings.baselines_dir, fingerprint.slug, fingerprint.hardware_key)
        return self._store

    @property
    def telemetry(self) -> DeviceReader | None:
        """The device's telemetry reader, opened on first use; None without one (the reason is telemetry_note)."""
        if not self._telemetry_opened:
            self._telemetry_opened = True
            found = self._open_telemetry(self.device) if self._open_telemetry is not None else None
            if isinstance(found, TelemetryUnavailable):
                self.telemetry_note = str(found)
            else:
                self._telemetry = found
        return self._telemetry

    def close_telemetry(self) -> None:
        if self._telemetry is not None:
            self._telemetry.close()
            self._telemetry = None

    def baseline_telemetry(self, nodeid: str, name: str) -> TelemetrySummary | None:
        """The device conditions the newest baseline run with telemetry was measured under, if any."""
        baseline = self.store.metric(nodeid, name)
        for run in reversed(baseline.runs if baseline else []):
            stored = run.context.get("telemetry")
            if isinstance(stored, dict):
                try:
                    return TelemetrySummary.from_dict(stored)
                except (ValueError, TypeError):
                    return None  # written by another version: the clocks cannot be compared, the figures can
        return None

    def rules(self) -> Rules:
        return Rules(
            delta=self.settings.for_device(self.device, "threshold"),
            noise_limit=self.settings.for_device(self.device, "noise_limit"),
            run_noise=self.settings.for_device(self.device, "run_noise"),
        )

    def new_perf(self, nodeid: str) -> Perf:
        return Perf(
            nodeid=nodeid,
            device=self.device,
            settings=self.settings,
            noise_limit=self.settings.for_device(self.device, "noise_limit"),
            baseline_curves=lambda name: self.store.curves(nodeid, name),
            telemetry=self.telemetry,
            baseline_telemetry=lambda name: self.baseline_telemetry(nodeid, name),
        )

    # -- verdict --

    def judge(self, perf: Perf) -> list[MetricResult]:
        """Judge every metric of a finished test; remembers results, and new runs to save."""
        results = self.evaluate(perf)
        self.accept(perf, results)
        return results

    def evaluate(self, perf: Perf) -> list[MetricResult]:
        """The verdict on every metric of a finished test, remembering nothing (an attempt may be repeated)."""
        rules = self.rules()
        stack = self.fingerprint.stack
        judged = []
        for metric in perf.metrics:
            baseline = self.store.metric(perf.nodeid, metric.name)
            runs = [run.samples for run in baseline.runs] if baseline else []
            if baseline and baseline.higher_is_better != metric.higher_is_better:
                runs = []  # the metric's meaning changed: an old baseline says nothing about it
            context, conditions = self._check_conditions(perf.nodeid, metric.name, metric.context, bool(runs))
            if metric.unjudgeable:
                conditions = "; ".join(filter(None, (metric.unjudgeable, conditions)))
            comparison = compare(
                metric.samples, runs, higher_is_better=metric.higher_is_better, rules=rules, conditions=conditions
            )
            external = metric.judged_elsewhere
            if external is not None:  # its own rule decided; the comparison's figures stay for the report
                comparison = replace(comparison, verdict=external.verdict, reason=f"{external.rule}: {external.reason}")
                context = {**context, "judged_by": external.rule}
            baseline_stack = baseline.runs[-1].stack if baseline and runs else None
            result = MetricResult(
                test=perf.nodeid,
                metric=metric.name,
                unit=metric.unit,
                higher_is_better=metric.higher_is_better,
                samples=metric.samples,
                rounds=metric.rounds,
                context=context,
                comparison=comparison,
                baseline_runs=runs,
                baseline_stack=baseline_stack,
                stack_changes=stack_changes(baseline_stack, stack) if baseline_stack else [],
            )
            judged.append(result)
        return judged

    def accept(self, perf: Perf, results: list[MetricResult]) -> None:
        """Keep a test's final results for the report, and its measurements as runs to save."""
        stack = self.fingerprint.stack
        today = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        for metric in perf.metrics:
            self._to_save.append(
                NewMetric(
                    test=perf.nodeid,
                    name=metric.name,
                    unit=metric.unit,
                    higher_is_better=metric.higher_is_better,
                    run=MetricRun(
                        samples=metric.samples,
                        stack=stack,
                        date=today,
                        summary=summarize(metric.samples).as_dict(),
                        context=metric.context,
                    ),
                )
            )
        for curve in perf.curves:
            self.curves.append({"test": perf.nodeid, "name": curve.name, "steps": curve.steps, "values": curve.values})
            self._curves_to_save.append(
                NewCurve(
                    test=perf.nodeid,
                    name=curve.name,
                    curve=Curve(steps=curve.steps, values=curve.values, stack=stack, date=today),
                )
            )
        self.results.extend(results)

    def suspects_regression(self, results: list[MetricResult]) -> bool:
        return self.settings.gating and any(result.verdict is Verdict.REGRESSED for result in results)

    def _check_conditions(
        self, nodeid: str, name: str, context: dict[str, Any], has_baseline: bool
    ) -> tuple[dict[str, Any], str | None]:
        """The device conditions of a measurement against its baseline's: (context with the check, why not
        comparable or None). A measurement without telemetry is not checked."""
        stored = context.get("telemetry")
        if not isinstance(stored, dict):
            return context, None
        try:
            current = TelemetrySummary.from_dict(stored)
        except (ValueError, TypeError) as error:
            return {**context, "clock_check": {"comparable": None, "detail": str(error)}}, None
        baseline = self.baseline_telemetry(nodeid, name) if has_baseline else None
        comparable, detail = judge_clocks(current, baseline)
        return (
            {**context, "clock_check": {"comparable": comparable, "detail": detail}},
            None if comparable else f"measured under different device conditions ({detail})",
        )

    def failing(self, results: list[MetricResult]) -> list[MetricResult]:
        if not self.settings.gating:
            return []  # recording baselines or measuring for `gpuperf ab`: report, don't gate
        verdicts = FAILING_STRICT if self.settings.strict else FAILING
        return [result for result in results if result.verdict in verdicts]

    # -- end of session --

    def save_baselines(self) -> list[Path]:
        if not (self._to_save or self._curves_to_save):
            return []
        written = self.store.save(self._to_save, self._curves_to_save, keep_runs=self.settings.baseline_runs)
        self.saved_files.extend(written)
        self._to_save, self._curves_to_save = [], []
        return written

    def measured_anything(self) -> bool:
        return bool(self.results or self.curves)

    def worker_payload(self) -> dict[str, Any]:
        """What an xdist worker sends to the controller (plain JSON types)."""
        return {
            "results": [result.as_dict() for result in self.results],
            "curves": self.curves,
            "fingerprint": self.fingerprint.as_dict() if self.measured_anything() else None,
            "device": self._device,
            "saved_files": [str(path) for path in self.saved_files],
            "telemetry_note": self.telemetry_note,
        }

    def absorb_worker(self, payload: dict[str, Any]) -> None:
        self.results.extend(MetricResult.from_dict(data) for data in payload.get("results", []))
        self.curves.extend(payload.get("curves", []))
        self.saved_files.extend(Path(path) for path in payload.get("saved_files", []))
        self.telemetry_note = self.telemetry_note or payload.get("telemetry_note")
        if payload.get("fingerprint") and self._fingerprint is None:
            fingerprint = payload["fingerprint"]
            lazy = LazyFingerprint(payload.get("device") or "cpu")
            lazy._value = Fingerprint(hardware_key=fingerprint["hardware_key"], stack=fingerprint["stack"])
            self._fingerprint = lazy
            self._device = payload.get("device")

    def results_document(self) -> dict[str, Any]:
        return {
            "schema": RESULTS_SCHEMA_VERSION,
            "tool": {"name": "pytest-gpuperf", "version": __version__},
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "fingerprint": self.fingerprint.as_dict() if self.measured_anything() else None,
            "telemetry_note": self.telemetry_note,
            "settings": {
                "device": self._device,
                "threshold": self.settings.for_device(self._device or "cpu", "threshold"),
                "noise_limit": self.settings.for_device(self._device or "cpu", "noise_limit"),
                "run_noise": self.settings.for_device(self._device or "cpu", "run_noise"),
                "repeats": self.settings.repeats,
                "warmup": self.settings.warmup,
                "strict": self.settings.strict,
                "saved": self.settings.save,
                "measure_only": self.settings.measure_only,
            },
            "results": [result.as_dict() for result in sorted(self.results, key=lambda r: (r.test, r.metric))],
            "curves": sorted(self.curves, key=lambda c: (c["test"], c["name"])),
        }

    def write_results(self) -> Path | None:
        path = self.settings.results_path
        if path is None:
            return None
        write_atomic(path, self.results_document())
        return path


def resolve_device(request: str) -> str:
    """auto -> cuda when torch sees an accelerator (ROCm builds present as cuda), else cpu."""
    if request == "cpu":
        return "cpu"
    import torch  # lazily: only sessions that measure need it

    # device_count() asks NVML where it can, so this does not create a CUDA context.
    available = torch.cuda.device_count() > 0
    if request == "cuda" and not available:
        import pytest

        raise pytest.UsageError(
            "--gpuperf-device cuda was asked for, but torch sees no CUDA/ROCm device "
            f"(torch {torch.__version__}, CUDA {torch.version.cuda}, HIP {getattr(torch.version, 'hip', None)}); "
            "install a GPU build of torch or use --gpuperf-device cpu"
        )
    return "cuda" if available else "cpu"


def dump_json(data: Any) -> str:
    return json.dumps(data, indent=1, sort_keys=True)


def is_xdist_worker() -> bool:
    return "PYTEST_XDIST_WORKER" in os.environ


def confirm(previous: list[MetricResult], latest: list[MetricResult], attempt: int) -> list[MetricResult]:
    """The verdicts of a repeated attempt, where REGRESSED stands only if the attempt before it regressed too.

    A transient slowdown of the machine (a neighbour's burst, lasting seconds) turns one attempt's metrics
    REGRESSED; a real regression turns every attempt's. A metric that regressed in one attempt only is AMBIGUOUS.
    """
    regressed_before = {result.metric for result in previous if result.verdict is Verdict.REGRESSED}
    for result in latest:
        result.context = {**result.context, "attempts": attempt}
        was, now = result.metric in regressed_before, result.verdict is Verdict.REGRESSED
        if now and was:
            note = f" (confirmed in {attempt} attempts)"
            result.comparison = replace(result.comparison, reason=result.comparison.reason + note)
        elif now:
            result.comparison = replace(
                result.comparison,
                verdict=Verdict.AMBIGUOUS,
                reason=(
                    f"REGRESSED in attempt {attempt} but not in attempt {attempt - 1}: not confirmed; "
                    + result.comparison.reason
                ),
            )
        elif was:
            result.comparison = replace(
                result.comparison,
                reason=(
                    f"attempt {attempt - 1} was REGRESSED, attempt {attempt} did not confirm it; "
                    + result.comparison.reason
                ),
            )
    return latest
