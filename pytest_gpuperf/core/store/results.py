"""The results format, in one place: a judged metric (MetricResult), the ``--gpuperf-results`` document of a
session (build, parse, validate) and the names it has in JUnit XML.

The session writes the document, xdist workers send their MetricResults in the same form, and every reader (the
commands, `gpuperf ab`, a confirmation) parses it with ``parse_document``; the field rules are
core/store/schema.py's, shared with the baseline files. Readers need only ``test``, ``metric``, ``unit``,
``higher_is_better`` and ``samples`` of a result; the rest is optional, so another tool may write one. The
document's shape: docs/baselines.md. Imports only core/store and, lazily, core/stats.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.schema import SchemaError

if TYPE_CHECKING:  # stats needs numpy and scipy; the plugin imports this module before any test runs
    from pytest_gpuperf.core.verdict.vocabulary import Comparison, Verdict

SCHEMA_VERSION = 1
FINGERPRINT_PROPERTY = "gpuperf.fingerprint"
"""The JUnit testsuite property holding the run's fingerprint (the JSON of ``Fingerprint.as_dict()``)."""
COVERAGE_PROPERTY = "gpuperf.coverage"
"""The prefix of the JUnit testsuite properties holding the job's coverage (``coverage_properties``)."""
COVERAGE_FIELDS = ("metrics", "smallest", "half", "beyond_2x")
"""The fields of a coverage figure, the job's and each suite's (core/verdict/coverage.py ``Figure.as_dict``)."""
JUNIT_METRIC_FIELDS = (
    "verdict",
    "unit",
    "higher_is_better",
    "median",
    "spread",
    "n",
    "samples",
    "baseline_median",
    "ratio",
    "ci_low",
    "ci_high",
    "p_worse",
    "detectable",
    "stack_changes",
)
"""The fields of a metric's ``gpuperf.<metric>.<field>`` JUnit testcase properties (junit_properties)."""


class GpuperfSamplesWarning(UserWarning):
    """A results document holds a metric of more samples than the bootstrap resamples whole."""


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
        """Its entry of the results document (and of an xdist worker's payload)."""
        from pytest_gpuperf.core.stats.unpaired import summarize

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
        """Back from ``as_dict`` (an xdist worker's results, in the controller)."""
        from pytest_gpuperf.core.verdict.vocabulary import Comparison, Verdict

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


def build_document(
    *,
    version: str,
    created: str,
    fingerprint: dict[str, Any] | None,
    telemetry_note: str | None,
    settings: dict[str, Any],
    results: list[MetricResult],
    curves: list[dict[str, Any]],
    coverage: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The ``--gpuperf-results`` document of a session, results and curves in a stable order; ``coverage`` is the
    job's coverage block (core/verdict/coverage.py, with the --gpuperf-require-coverage outcome), None without one.

    Warns (GpuperfSamplesWarning) of each metric with more samples than the bootstrap resamples whole: its file
    is large, and its verdicts' intervals are m-out-of-n bootstrap ones (stats.BOOTSTRAP_SAMPLES)."""
    from pytest_gpuperf.core.stats.unpaired import BOOTSTRAP_SAMPLES

    large = [result for result in results if len(result.samples) > BOOTSTRAP_SAMPLES]
    if large:
        named = ", ".join(f"{r.test} {r.metric!r} ({len(r.samples)})" for r in large[:3])
        warnings.warn(
            GpuperfSamplesWarning(
                f"gpuperf: {len(large)} metric(s) hold more than {BOOTSTRAP_SAMPLES} samples: {named}"
                f"{' and more' if len(large) > 3 else ''}; their bootstrap intervals resample {BOOTSTRAP_SAMPLES} "
                "of them (m out of n) and every results and baseline file holds all of them: record a summary "
                "per block of steps (the median of each 100, say) rather than every step"
            ),
            stacklevel=2,
        )
    return {
        "schema": SCHEMA_VERSION,
        "tool": {"name": "pytest-gpuperf", "version": version},
        "created": created,
        "fingerprint": fingerprint,
        "telemetry_note": telemetry_note,
        "settings": settings,
        "results": [result.as_dict() for result in sorted(results, key=lambda r: (r.test, r.metric))],
        "curves": sorted(curves, key=lambda c: (c["test"], c["name"])),
        "coverage": coverage,
    }


def parse_document(data: bytes | str, *, where: str) -> dict[str, Any]:
    """Parse and validate a results document; SchemaError's one-line message starts with ``where``."""
    try:
        document = schema.loads(data)
        check_document(document)
    except SchemaError as error:
        raise SchemaError(f"{where}: {error}") from None
    return document


def check_document(document: Any) -> None:
    """Raise SchemaError with the first problem of a results document."""
    if not isinstance(document, dict):
        raise SchemaError(f"the top level is {schema.kind(document)}, not a gpuperf results object")
    if document.get("schema") != SCHEMA_VERSION:
        raise SchemaError(
            f"schema {schema.quote(document.get('schema'))} is not the supported results schema {SCHEMA_VERSION} "
            "(written by another pytest-gpuperf version, or not a --gpuperf-results file)"
        )
    schema.text(document.get("created", ""), "the document", "created", empty=True)
    read_fingerprint(document.get("fingerprint"), "'fingerprint'")
    schema.require_object(document.get("settings") or {}, "the document", "settings")
    seen: set[tuple[str, str]] = set()
    for index, entry in enumerate(schema.require_list(document.get("results"), "the document", "results")):
        where = f"results[{index}]"
        schema.require_object(entry, where, "result")
        test = schema.text(entry.get("test"), where, "test")
        name = schema.text(entry.get("metric"), where, "metric")
        schema.text(entry.get("unit"), where, "unit")
        schema.flag(entry.get("higher_is_better"), where, "higher_is_better")
        schema.samples(entry.get("samples"), f"{where} ({schema.quote(test)} {schema.quote(name)})")
        schema.require_object(entry.get("context", {}), where, "context")
        if (test, name) in seen:
            raise SchemaError(f"{where}: test {schema.quote(test)} metric {schema.quote(name)} appears twice")
        seen.add((test, name))
    check_coverage(document.get("coverage"))
    for index, entry in enumerate(schema.require_list(document.get("curves", []), "the document", "curves")):
        where = f"curves[{index}]"
        schema.require_object(entry, where, "curve")
        test = schema.text(entry.get("test"), where, "test")
        name = schema.text(entry.get("name"), where, "name")
        schema.curve(entry.get("steps"), entry.get("values"), f"{where} ({schema.quote(test)} {schema.quote(name)})")


def check_coverage(raw: Any) -> None:
    """Raise SchemaError for a ``coverage`` block that is not the job's figure and an object of suites' (absent or
    null: a document of a version before coverage, or one that measured nothing)."""
    if raw is None:
        return
    block = schema.require_object(raw, "the document", "coverage")
    figures = {"job": block, **schema.require_object(block.get("suites", {}), "coverage", "suites")}
    for name, figure in figures.items():
        where = "coverage" if name == "job" else f"coverage suite {schema.quote(name)}"
        schema.require_object(figure, where, "figure")
        for field_name in COVERAGE_FIELDS:
            value = figure.get(field_name)
            if value is not None and not schema.is_number(value):
                raise SchemaError(f"{where}: {field_name!r} is {schema.kind(value)}, not a number or null")


def coverage_properties(coverage: dict[str, Any]) -> list[tuple[str, object]]:
    """The job's coverage as JUnit testsuite properties: ``gpuperf.coverage.<field>`` for the job and
    ``gpuperf.coverage.suite.<suite>.<field>`` for each suite; a change no metric could catch is "none"."""
    properties: list[tuple[str, object]] = []
    named = [("", coverage), *((f"suite.{suite}.", figure) for suite, figure in coverage.get("suites", {}).items())]
    for prefix, figure in named:
        for field_name in COVERAGE_FIELDS:
            value = figure.get(field_name)
            properties.append((f"{COVERAGE_PROPERTY}.{prefix}{field_name}", "none" if value is None else value))
    if coverage.get("required") is not None:
        properties.append((f"{COVERAGE_PROPERTY}.required", coverage["required"]))
        properties.append((f"{COVERAGE_PROPERTY}.short", ",".join(coverage.get("short", []))))
    return properties


def read_fingerprint(raw: Any, what: str) -> tuple[dict[str, Any] | None, str | None, dict[str, str]]:
    """(hardware key, slug, stack) of a stored fingerprint; (None, None, {}) when there is none."""
    if raw is None:
        return None, None, {}
    if not isinstance(raw, dict):
        raise SchemaError(f"{what} is {schema.kind(raw)}, not an object")
    key = raw.get("hardware_key")
    if not isinstance(key, dict):
        raise SchemaError(f"{what} has no 'hardware_key' object")
    slug = schema.slug(raw.get("hardware_slug"), what)
    if not isinstance(raw.get("stack"), dict):
        raise SchemaError(f"{what} 'stack' is not an object of component versions")
    stack = schema.stack(raw["stack"], what)
    return key, slug, dict(sorted(stack.items()))


def read_machine(raw: Any) -> str | None:
    """The machine identity's id of a stored fingerprint (machine/identity.py), or None: none recorded (files of
    older versions), or not a short text."""
    machine = raw.get("machine") if isinstance(raw, dict) else None
    value = machine.get("id") if isinstance(machine, dict) else None
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


def junit_properties(result: MetricResult) -> list[tuple[str, object]]:
    """Name/value pairs for record_property, so --junitxml carries every metric and verdict."""
    from pytest_gpuperf.core.stats.unpaired import summarize

    prefix = f"gpuperf.{result.metric}"
    now = summarize(result.samples)
    comparison = result.comparison
    properties: list[tuple[str, object]] = [
        (f"{prefix}.verdict", comparison.verdict.value),
        (f"{prefix}.unit", result.unit),
        (f"{prefix}.higher_is_better", result.higher_is_better),
        (f"{prefix}.median", now.median),
        (f"{prefix}.spread", round(now.spread, 6)),
        (f"{prefix}.n", now.n),
        (f"{prefix}.samples", ",".join(f"{value:.9g}" for value in result.samples)),
    ]
    if comparison.ratio is not None:
        pooled = summarize([value for run in result.baseline_runs for value in run])
        properties += [
            (f"{prefix}.baseline_median", pooled.median),
            (f"{prefix}.ratio", round(comparison.ratio, 6)),
            (f"{prefix}.ci_low", round(comparison.ci_low or 0.0, 6)),
            (f"{prefix}.ci_high", round(comparison.ci_high or 0.0, 6)),
            (f"{prefix}.p_worse", comparison.p_worse),
            (f"{prefix}.detectable", "none" if comparison.detectable is None else round(comparison.detectable, 6)),
        ]
    if result.stack_changes:
        properties.append((f"{prefix}.stack_changes", "; ".join(result.stack_changes)))
    return properties
