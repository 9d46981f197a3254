"""Run state of one pytest session (or one xdist worker): loads baselines, judges each test's metrics, saves,
writes the results.

Data flows one way: the `perf` fixture measures (core/record/perf.py), this module gathers each metric's evidence
(the stored runs of core/store/baselines.py, this machine's runs and sittings, device and machine conditions) and
gets its verdict from core/verdict/, and core/session/report.py renders the results. A worker's results reach the
controller as a plain-JSON payload (``worker_payload``, ``absorb_worker``); docs/architecture.md, flows 1 and 2.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from pytest_gpuperf import __version__
from pytest_gpuperf.core.config.settings import Settings
from pytest_gpuperf.core.record.gate import OPEN, Gate
from pytest_gpuperf.core.record.perf import MetricRecord, Perf
from pytest_gpuperf.core.session.report import rollup_rows
from pytest_gpuperf.core.session.turns import TakingTurns, Turns
from pytest_gpuperf.core.stats.sittings import group_sittings
from pytest_gpuperf.core.stats.unpaired import (
    Rules,
    smallest_decided_change,
    summarize,
    with_siblings,
)
from pytest_gpuperf.core.store import results as results_format
from pytest_gpuperf.core.store.baselines import (
    BaselineStore,
    Curve,
    MetricRun,
    NewCurve,
    NewMetric,
    NotStorable,
    SaveError,
    entry_key,
    os_reason,
    write_atomic,
)
from pytest_gpuperf.core.store.results import MetricResult
from pytest_gpuperf.core.store.schema import SchemaError, non_finite
from pytest_gpuperf.core.verdict import coverage
from pytest_gpuperf.core.verdict.checks import doubt_before
from pytest_gpuperf.core.verdict.coverage import Coverage, Shortfall
from pytest_gpuperf.core.verdict.judge import (
    ANOTHER_MACHINE,
    ANOTHER_SITTING,
    THIS_SITTING,
    UNMOVED_BY_LOAD,
    judge_on_machine,
    machine_state,
    runs_of_this_machine,
)
from pytest_gpuperf.core.verdict.policy import RULE_SETTINGS, policy_for
from pytest_gpuperf.core.verdict.rollup import machine_note
from pytest_gpuperf.core.verdict.vocabulary import Comparison, Verdict
from pytest_gpuperf.machine.contention import MachineState
from pytest_gpuperf.machine.fingerprint import Fingerprint, LazyFingerprint, stack_changes
from pytest_gpuperf.machine.telemetry import (
    DeviceReader,
    TelemetrySummary,
    TelemetryUnavailable,
    check_conditions,
    stored_summary,
)

__all__ = ["GpuperfSession", "MetricResult", "resolve_device"]
"""MetricResult belongs to the results format (results.py); it is named here for the hooks that receive it."""

TelemetryOpener = Callable[[str], "DeviceReader | TelemetryUnavailable | None"]
"""Given the device ("cpu"/"cuda"): a telemetry reader, why there is none, or None where none is expected."""

# Verdicts that fail a test: always, and additionally under --gpuperf-strict.
FAILING = frozenset({Verdict.REGRESSED})
FAILING_STRICT = frozenset({Verdict.REGRESSED, Verdict.NO_BASELINE, Verdict.NOISY, Verdict.AMBIGUOUS, Verdict.IMPROVED})


class GpuperfSession:
    """Everything the plugin keeps for one pytest session (or one xdist worker)."""

    def __init__(
        self,
        settings: Settings,
        *,
        extra_stack: dict[str, str] | None = None,
        telemetry: TelemetryOpener | None = None,
        machine_name: str | None = None,
        adapter_named: Callable[[str], Any] | None = None,
    ) -> None:
        self.settings = settings
        self._adapter_named = adapter_named
        """The adapter a name stands for in ``perf.run_command`` (the pytest_gpuperf_adapter hook)."""
        self.run_stack: dict[str, str] = {}
        """Stack components the tests added to their own metrics (a framework ``perf.run_command`` ran): the
        results' fingerprint names them too, so `gpuperf compare` and `gpuperf ab` show a framework's change."""
        self._extra_stack = extra_stack or {}
        self._machine_name = machine_name
        self._open_telemetry = telemetry
        self._telemetry: DeviceReader | None = None
        self._telemetry_opened = False
        self.telemetry_note: str | None = None
        """"telemetry unavailable: <reason>" when telemetry was expected and could not be read; reported once."""
        self._device: str | None = None
        self._fingerprint: LazyFingerprint | None = None
        self._store: BaselineStore | None = None
        self._sibling_rules: dict[tuple[Path, str, str], Rules] = {}
        self.results: list[MetricResult] = []
        self.curves: list[dict[str, Any]] = []
        self._to_save: list[NewMetric] = []
        self._curves_to_save: list[NewCurve] = []
        self.saved_files: list[Path] = []
        self.not_saved: list[tuple[str, str, str]] = []
        """(test, metric, why) of measurements --gpuperf-save left out: they regressed against the entry they would
        join, and --gpuperf-accept was not given."""
        self.save_failures: list[tuple[Path, str]] = []
        """Baseline files that could not be written, with the reason (the others were written)."""
        self.save_interrupted = False
        """Ctrl-C stopped the save: save_failures lists what was not saved."""
        self.results_failure: str | None = None
        """Why ``--gpuperf-results`` could not be written, naming the file."""
        self.interrupted_by: str | None = None
        """The signal that ended the session early (SIGINT, SIGTERM, SIGHUP), recorded in the results' settings."""
        self.unresolved: list[tuple[str, str, float]] = []
        """(test, metric, smallest decidable change) of saved metrics whose runs vary more than the threshold can
        resolve: a stored baseline cannot decide a change of the threshold's size for them."""
        self.planned_tests: list[str] = []
        """The stable ids of the perf tests this session collected: the job whose metrics form one family."""
        self._family_size: int | None = None
        self.gate: Gate = TakingTurns(Turns(settings.take_turns)) if settings.take_turns else OPEN
        """Where this session's tests may be held back (core/record/gate.py): in a `gpuperf ab --take-turns` session
        each perf test, and each measured call or round, waits there for the turn; otherwise it is open."""

    # -- lazily resolved context (needs torch; never touched by sessions without perf tests) --

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = resolve_device(self.settings.device_request)
        return self._device

    @property
    def fingerprint(self) -> Fingerprint:
        if self._fingerprint is None:
            self._fingerprint = LazyFingerprint(self.device, self._extra_stack, machine_name=self._machine_name)
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
                return stored_summary(stored)  # None when written by another version: clocks not compared
        return None

    def baseline_machine(self, nodeid: str, name: str) -> list[MachineState | None]:
        """The machine state stored with each of the baseline's runs (None for a run that has none)."""
        baseline = self.store.metric(nodeid, name)
        return [machine_state(run.context) for run in baseline.runs] if baseline else []

    def rules(self) -> Rules:
        given = {name: getattr(self.settings, name) for name in RULE_SETTINGS}
        return policy_for(given=given, device=self.device, family_size=self.family_size())

    def family_size(self) -> int:
        """How many metrics this job may decide: those stored for this hardware key of the perf tests collected
        (``planned_tests``; every xdist worker collects them all, so each counts the same family), less those no
        current run can turn REGRESSED (``decidable``). At least 1."""
        if self._family_size is None:
            count = 0
            for test in sorted(set(self.planned_tests)):
                count += sum(self.decidable(test, name) for name in self.store.metric_names(test))
            self._family_size = max(1, count)
        return self._family_size

    def decidable(self, nodeid: str, name: str) -> bool:
        """Whether a stored metric can be decided whatever is measured now: not when its baseline's spread is past
        the noise limit (NOISY whatever the run, unless the change is beyond what that spread explains: such a
        change is too large for the job's level to matter)."""
        baseline = self.store.metric(nodeid, name)
        if baseline is None or not baseline.runs:
            return False
        runs = [run.samples for run in baseline.runs]
        if float(np.median([summarize(run).spread for run in runs])) > self.settings.for_device(
            self.device, "noise_limit"
        ):
            return False
        return True

    def sibling_rules(self, nodeid: str, name: str) -> Rules:
        """The rules for one metric: the device's, with the between-run noise its sibling baselines show here."""
        key = (self.store.path_for(nodeid), entry_key(nodeid), name)  # each test leaves itself out of its siblings
        if key not in self._sibling_rules:
            rules = with_siblings(self.rules(), self.store.sibling_runs(nodeid, name))
            if self.settings.machine_spread is not None:  # the fleet's figure for this metric, not its pooled one
                rules = replace(rules, machine_noise=self.settings.noise_for(nodeid, name, self.device))
            self._sibling_rules[key] = rules
        return self._sibling_rules[key]

    def new_perf(self, nodeid: str) -> Perf:
        return Perf(
            nodeid=nodeid,
            device=self.device,
            settings=self.settings,
            noise_limit=self.settings.for_device(self.device, "noise_limit"),
            baselines=SessionBaselines(session=self, nodeid=nodeid),
            telemetry=self.telemetry,
            gate=self.gate,
            adapter_named=self._adapter_named,
        )

    # -- verdict --

    def judge(self, perf: Perf) -> list[MetricResult]:
        """Judge every metric of a finished test; remembers results, and new runs to save."""
        results = self.evaluate(perf)
        self.accept(perf, results)
        return results

    def evaluate(self, perf: Perf) -> list[MetricResult]:
        """The verdict on every metric of a finished test, remembering nothing (an attempt may be repeated)."""
        return [self.evaluate_metric(perf.nodeid, metric) for metric in perf.metrics]

    def evaluate_metric(self, nodeid: str, metric: MetricRecord) -> MetricResult:
        """The verdict on one metric (also asked mid-measurement, by sequential sampling), remembering nothing."""
        rules = self.sibling_rules(nodeid, metric.name)
        stack = {**self.fingerprint.stack, **metric.stack}
        baseline = self.store.metric(nodeid, metric.name)
        stored = list(baseline.runs) if baseline else []
        if baseline and baseline.higher_is_better != metric.higher_is_better:
            stored = []  # the metric's meaning changed: an old baseline says nothing about it
        mine = runs_of_this_machine(self.fingerprint.machine_id, [run.context for run in stored])
        across = bool(stored) and mine is None
        if mine is not None:  # this machine's own runs are the comparison; another machine's are not its noise
            stored = [stored[index] for index in mine]
        runs = [run.samples for run in stored]
        context = self._check_conditions(nodeid, metric.name, metric.context, bool(runs))
        # the checks read the context the results keep, so `gpuperf compare` reading them finds the same reasons
        doubt = doubt_before({**context, "unjudgeable": metric.unjudgeable})
        sittings = group_sittings(
            [run.date for run in stored], dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        )
        judged = judge_on_machine(
            metric.samples,
            runs,
            [run.context for run in stored],
            context=metric.context,
            sittings=sittings,
            unit=metric.unit,
            higher_is_better=metric.higher_is_better,
            rules=rules,
            doubt=doubt,
            rule=metric.rule,
            machine_check=self.settings.machine_check == "on",
            across_machines=across,
            looks=metric.looks,
        )
        if runs:
            kind = ANOTHER_MACHINE if across else THIS_SITTING if sittings.joined else ANOTHER_SITTING
            context = {**context, "comparison": kind}
        comparison, runs = judged.comparison, judged.runs
        if judged.check is not None:
            context = {**context, "machine_check": judged.check.as_dict()}
        if metric.rule is not None:  # its own rule decided; the comparison's figures stay for the report
            context = {**context, "judged_by": metric.rule.name}
        baseline_stack = stored[-1].stack if runs else None
        note = machine_note(metric.context, [run.context for run in stored]) if runs else None
        if note:
            context = {**context, "machine_note": note}
        context = self._profile_diff(context, stored if runs else [], comparison.verdict)
        return MetricResult(
            test=nodeid,
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

    @staticmethod
    def _profile_diff(context: dict[str, Any], stored: list[MetricRun], verdict: Verdict) -> dict[str, Any]:
        """The context with the diff of the baseline's operator summary and this run's (--gpuperf-profile on both
        sides), its movers those of the verdict's change; without a summary on either side, none (a stale one a
        confirmation's results carried is dropped), and a note where only one side was measured under the
        profiler."""
        baseline = [run.context for run in stored]
        if "profile" not in context and not any("profile" in run for run in baseline):
            return context  # profiling off on both sides: core/record/profiling.py is not imported
        from pytest_gpuperf.core.record.profiling import PROFILE_DIFF, PROFILE_NOTE, mixed_note, stored_diff

        context = {key: value for key, value in context.items() if key not in (PROFILE_DIFF, PROFILE_NOTE)}
        diff, note = stored_diff(baseline, context, verdict.value), mixed_note(baseline, context)
        return context | ({PROFILE_DIFF: diff} if diff else {}) | ({PROFILE_NOTE: note} if note else {})

    def accept(self, perf: Perf, results: list[MetricResult]) -> None:
        """Keep a test's final results for the report, and its measurements as runs to save.

        Raises NotStorable, keeping nothing of the test, when a figure is NaN or infinite: perf.record checks
        what it is given, but a workload may add to a metric's context afterwards (perf.metric(name).context),
        and one such value must fail its own test rather than the save or the results of every test. A numpy or
        torch number added so is made a Python one; a set, an array or an object is NotStorable too."""
        perf.make_storable(results)
        for metric in perf.metrics:
            where = non_finite(metric.context)
            if where is not None:
                raise NotStorable(f"metric {metric.name!r} context {where!r} is not a finite number (nan or inf)")
        for curve in perf.curves:
            where = non_finite(curve.values)
            if where is not None:
                raise NotStorable(f"curve {curve.name!r} {where} is not a finite number: the run diverged")
        stack = self.fingerprint.stack
        machine_id = self.fingerprint.machine_id
        machine = {"machine_id": machine_id} if machine_id else {}  # whose run it is: the next verdict's comparison
        today = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        verdicts = {result.metric: result for result in results}
        for metric in perf.metrics:
            judged = verdicts.get(metric.name)
            if self.settings.save and not self.settings.accept and judged and judged.verdict is Verdict.REGRESSED:
                ratio = judged.comparison.ratio
                size = f" by {1 - ratio:.1%}" if ratio is not None else ""
                self.not_saved.append(
                    (
                        perf.nodeid,
                        metric.name,
                        f"REGRESSED{size} against the entry it would join; --gpuperf-accept stores it",
                    )
                )
                continue
            if self.settings.save:
                self._note_resolution(perf.nodeid, metric)
            self.run_stack.update(metric.stack)
            self._to_save.append(
                NewMetric(
                    test=perf.nodeid,
                    name=metric.name,
                    unit=metric.unit,
                    higher_is_better=metric.higher_is_better,
                    run=MetricRun(
                        samples=metric.samples,
                        stack={**stack, **metric.stack},
                        date=today,
                        summary=summarize(metric.samples).as_dict(),
                        context=metric.context | machine,
                    ),
                )
            )
        for curve in perf.curves:
            self.curves.append({"test": perf.nodeid, "name": curve.name, "steps": curve.steps, "values": curve.values})
            self._curves_to_save.append(
                NewCurve(
                    test=perf.nodeid,
                    name=curve.name,
                    curve=Curve(steps=curve.steps, values=curve.values, stack={**stack, **curve.stack}, date=today),
                )
            )
        self.results.extend(results)

    def _note_resolution(self, nodeid: str, metric: MetricRecord) -> None:
        """Remember a saved metric whose runs on this machine, this one included, vary more than its threshold can
        resolve (``stats.smallest_decided_change``): the save summary says so once."""
        if metric.unit in UNMOVED_BY_LOAD or metric.unjudgeable:
            return
        baseline = self.store.metric(nodeid, metric.name)
        stored = list(baseline.runs) if baseline and baseline.higher_is_better == metric.higher_is_better else []
        mine = runs_of_this_machine(self.fingerprint.machine_id, [run.context for run in stored]) or []
        rules = self.sibling_rules(nodeid, metric.name)
        smallest = smallest_decided_change([*(stored[i].samples for i in mine), metric.samples], rules)
        if smallest is not None and smallest > rules.threshold:
            self.unresolved.append((nodeid, metric.name, smallest))

    def suspects_regression(self, results: list[MetricResult]) -> bool:
        return self.settings.gating and any(result.verdict is Verdict.REGRESSED for result in results)

    def _check_conditions(self, nodeid: str, name: str, context: dict[str, Any], has_baseline: bool) -> dict[str, Any]:
        """The context with the device conditions of a measurement against its baseline's (``clock_check``, that
        core/verdict/checks.py ``DeviceClocks`` reads). A measurement without telemetry is not checked."""
        stored = context.get("telemetry")
        if not isinstance(stored, dict):
            return context
        baseline = self.baseline_telemetry(nodeid, name) if has_baseline else None
        return {**context, "clock_check": check_conditions(stored, baseline).as_dict()}

    def failing(self, results: list[MetricResult]) -> list[MetricResult]:
        if not self.settings.gating:
            return []  # recording baselines or measuring for `gpuperf ab`: report, don't gate
        verdicts = FAILING_STRICT if self.settings.strict else FAILING
        return [result for result in results if result.verdict in verdicts]

    # -- end of session --

    def save_baselines(self) -> list[Path]:
        """Save every file that can be; the ones that cannot (and a Ctrl-C) are kept in save_failures for the
        report, so one unwritable file never costs the others."""
        if not (self._to_save or self._curves_to_save):
            return []
        try:
            written = self.store.save(self._to_save, self._curves_to_save, keep_runs=self.settings.baseline_runs)
        except SaveError as error:
            written = error.written
            self.save_failures.extend(error.failed)
            self.save_interrupted = self.save_interrupted or error.interrupted
        self.saved_files.extend(written)
        self._to_save, self._curves_to_save = [], []
        return written

    def unwritten_measurements(self) -> dict[Path, int]:
        """How many of the measurements meant to be saved are in each baseline file of save_failures (keyed as
        there): they are not saved, and the summary must not count them as saved. A measurement left out because
        it regressed is counted in not_saved, not here. Works on what xdist workers sent too."""
        if not (self.save_failures and self.results):
            return {}
        failed = {os.path.abspath(path): path for path, _ in self.save_failures}
        regressed = {(test, metric) for test, metric, _ in self.not_saved}
        counts: dict[Path, int] = {}
        for result in self.results:
            path = failed.get(os.path.abspath(self.store.path_for(result.test)))
            if path is not None and (result.test, result.metric) not in regressed:
                counts[path] = counts.get(path, 0) + 1
        return counts

    def coverage(self) -> Coverage:
        """The job's coverage (core/verdict/coverage.py): what the summary, the results and JUnit show."""
        return coverage.build(rollup_rows(self.results))

    def coverage_shortfalls(self) -> list[Shortfall]:
        """The suites that fail --gpuperf-require-coverage; none when it is off or the job does not gate."""
        required = self.settings.require_coverage
        if required is None or not self.settings.gating:
            return []
        return coverage.shortfalls(rollup_rows(self.results), required, self.planned_tests)

    def coverage_document(self) -> dict[str, Any] | None:
        """The results document's ``coverage`` block: the job's figure, each suite's, and the policy's outcome."""
        if not self.results:
            return None
        return {
            **self.coverage().as_dict(),
            "required": self.settings.require_coverage,
            "short": [item.suite for item in self.coverage_shortfalls()],
        }

    def measured_anything(self) -> bool:
        return bool(self.results or self.curves)

    def worker_payload(self) -> dict[str, Any]:
        """What an xdist worker sends to the controller (plain JSON types)."""
        return {
            "results": [result.as_dict() for result in self.results],
            "curves": self.curves,
            "fingerprint": self._fingerprint_document() if self.measured_anything() else None,
            "device": self._device,
            "saved_files": [str(path) for path in self.saved_files],
            "not_saved": [list(entry) for entry in self.not_saved],
            "save_failures": [[str(path), reason] for path, reason in self.save_failures],
            "save_interrupted": self.save_interrupted,
            "telemetry_note": self.telemetry_note,
            "unresolved": [list(entry) for entry in self.unresolved],
            "family_size": self._family_size,
        }

    def absorb_worker(self, payload: dict[str, Any]) -> None:
        self.results.extend(MetricResult.from_dict(data) for data in payload.get("results", []))
        self.curves.extend(payload.get("curves", []))
        self.saved_files.extend(Path(path) for path in payload.get("saved_files", []))
        self.not_saved.extend((str(t), str(m), str(why)) for t, m, why in payload.get("not_saved", []))
        self.save_failures.extend((Path(path), reason) for path, reason in payload.get("save_failures", []))
        self.save_interrupted = self.save_interrupted or bool(payload.get("save_interrupted"))
        self.telemetry_note = self.telemetry_note or payload.get("telemetry_note")
        self.unresolved.extend((str(t), str(m), float(x)) for t, m, x in payload.get("unresolved", []))
        if isinstance(payload.get("family_size"), int):  # every worker counts the same family
            self._family_size = payload["family_size"]
        if payload.get("fingerprint") and self._fingerprint is None:
            fingerprint = payload["fingerprint"]
            lazy = LazyFingerprint(payload.get("device") or "cpu")
            lazy._value = Fingerprint(
                hardware_key=fingerprint["hardware_key"],
                stack=fingerprint["stack"],
                labels=fingerprint.get("labels") or {},
                machine=fingerprint.get("machine") or {},
            )
            self._fingerprint = lazy
            self._device = payload.get("device")

    def _fingerprint_document(self) -> dict[str, Any]:
        """The fingerprint as the results hold it: the session's stack with what its tests ran added
        (``run_stack``), so comparing two results names a framework's version change."""
        document = self.fingerprint.as_dict()
        if self.run_stack:
            document["stack"] = dict(sorted({**document["stack"], **self.run_stack}.items()))
        return document

    def results_document(self) -> dict[str, Any]:
        device = self._device or "cpu"
        return results_format.build_document(
            version=__version__,
            created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            fingerprint=self._fingerprint_document() if self.measured_anything() else None,
            telemetry_note=self.telemetry_note,
            settings={
                **self.settings.as_results(device),
                "device": self._device,
                "family_size": self._family_size,
                "not_saved": [{"test": t, "metric": m, "why": why} for t, m, why in self.not_saved],
                **({"interrupted": self.interrupted_by} if self.interrupted_by else {}),
            },
            results=self.results,
            curves=self.curves,
            coverage=self.coverage_document(),
        )

    def write_results(self) -> Path | None:
        """Write ``--gpuperf-results``; a failure is kept in results_failure (reported, exit status non-zero).

        Ctrl-C is kept there too and raised again, so the caller ends the session as interrupted (exit 2), not
        as a file that could not be written (exit 4)."""
        path = self.settings.results_path
        if path is None:
            return None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, self.results_document())
        except OSError as error:
            self.results_failure = f"{path}: {os_reason(error, path)}"
        except SchemaError as error:
            self.results_failure = f"{path}: {error}"
        except KeyboardInterrupt:  # noted for the summary, and raised on: the session ends as interrupted
            self.results_failure = f"{path}: interrupted (Ctrl-C) before it was written"
            raise
        return None if self.results_failure else path

    @property
    def end_failed(self) -> bool:
        """Whether something of the session's end (a baseline file, the results) could not be written."""
        return bool(self.save_failures or self.results_failure)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionBaselines:
    """One test's view of the session (the recorder's ``BaselineView``): its stored baseline, as the session
    reads it, and the verdict a metric would get now."""

    session: GpuperfSession
    nodeid: str

    def curves(self, name: str) -> list[Curve]:
        return self.session.store.curves(self.nodeid, name)

    def telemetry(self, name: str) -> TelemetrySummary | None:
        return self.session.baseline_telemetry(self.nodeid, name)

    def machine(self, name: str) -> list[MachineState | None] | None:
        if self.session.settings.machine_check != "on":
            return None  # recorded at most ("record"), never judged
        return self.session.baseline_machine(self.nodeid, name)

    def preview(self, metric: MetricRecord) -> Comparison | None:
        return self.session.evaluate_metric(self.nodeid, metric).comparison


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
