"""Baseline store: plain, diffable JSON under ``<baselines>/<hardware-slug>/<test-module>.json``.

One file per test module and hardware key::

    {"schema": 1, "hardware_key": {...},
     "tests": {"<test id>": {
        "metrics": {"<metric>": {"unit": "s", "higher_is_better": false,
                                 "runs": [{"samples": [...], "summary": {...}, "stack": {...}, "date": "...",
                                           "context": {...}}]}},
        "curves": {"<curve>": {"runs": [{"steps": [...], "values": [...], "stack": {...}, "date": "..."}]}}}}}

A run's ``context`` is optional (files written before it existed stay valid): what was observed while measuring,
such as the device telemetry summary (clocks, throttling) that a later run's clocks are compared with.

Writes are atomic (temporary file, fsync, rename) and merge under an inter-process lock, so concurrent
writers (pytest-xdist workers) lose nothing. A file that cannot be read is reported and never overwritten.
Data is only ever parsed as JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

SCHEMA_VERSION = 1
LOCK_TIMEOUT_S = 120.0


class StoreError(Exception):
    """A baseline file that cannot be used; the message names the file, the problem and the next step."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricRun:
    """One run's samples of one metric, as saved."""

    samples: list[float]
    stack: dict[str, str]
    date: str
    summary: dict[str, Any]
    context: dict[str, Any] = field(default_factory=dict)
    """What was observed while measuring (``context["telemetry"]``: the device's clock summary); may be empty."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Curve:
    """One stored curve (a loss per step, for example)."""

    steps: list[int]
    values: list[float]
    stack: dict[str, str]
    date: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricBaseline:
    unit: str
    higher_is_better: bool
    runs: list[MetricRun]


@dataclass(frozen=True, slots=True, kw_only=True)
class NewMetric:
    """A measurement to merge into the store."""

    test: str
    name: str
    unit: str
    higher_is_better: bool
    run: MetricRun


@dataclass(frozen=True, slots=True, kw_only=True)
class NewCurve:
    test: str
    name: str
    curve: Curve


def module_file_name(nodeid: str) -> str:
    """'suites/test_micro.py::test_gemm[bf16]' -> 'suites__test_micro.json' (no separators, no traversal)."""
    module = nodeid.split("::", 1)[0]
    module = module.removesuffix(".py")
    parts = [part for part in re.split(r"[\\/]+", module) if part not in ("", ".", "..")]
    name = "__".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", part).strip(".") or "_" for part in parts)
    return (name or "unnamed") + ".json"


def entry_key(nodeid: str) -> str:
    """The test's id inside its module file: the nodeid after the module path."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


class BaselineStore:
    """Baselines of one hardware key."""

    def __init__(self, root: Path, hardware_slug: str, hardware_key: dict[str, Any]) -> None:
        if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", hardware_slug):
            raise ValueError(f"hardware slug {hardware_slug!r} is not a safe folder name")
        self.root = root
        self.folder = root / hardware_slug
        self.hardware_key = hardware_key
        self._cache: dict[Path, dict[str, Any]] = {}

    def path_for(self, nodeid: str) -> Path:
        return self.folder / module_file_name(nodeid)

    def metric(self, nodeid: str, name: str) -> MetricBaseline | None:
        entry = self._document(self.path_for(nodeid))["tests"].get(entry_key(nodeid), {}).get("metrics", {}).get(name)
        if entry is None:
            return None
        return MetricBaseline(
            unit=entry["unit"],
            higher_is_better=entry["higher_is_better"],
            runs=[MetricRun(**run) for run in entry["runs"]],
        )

    def curves(self, nodeid: str, name: str) -> list[Curve]:
        entry = self._document(self.path_for(nodeid))["tests"].get(entry_key(nodeid), {}).get("curves", {}).get(name)
        return [Curve(**run) for run in entry["runs"]] if entry else []

    def _document(self, path: Path) -> dict[str, Any]:
        if path not in self._cache:
            self._cache[path] = read_document(path) if path.exists() else empty_document(self.hardware_key)
        return self._cache[path]

    def save(self, metrics: Iterable[NewMetric], curves: Iterable[NewCurve], *, keep_runs: int) -> list[Path]:
        """Merge new runs into the files under a lock; returns the files written."""
        by_file: dict[Path, tuple[list[NewMetric], list[NewCurve]]] = {}
        for metric in metrics:
            by_file.setdefault(self.path_for(metric.test), ([], []))[0].append(metric)
        for curve in curves:
            by_file.setdefault(self.path_for(curve.test), ([], []))[1].append(curve)
        written = []
        for path, (new_metrics, new_curves) in sorted(by_file.items()):
            with _lock_for(path):
                document = read_document(path) if path.exists() else empty_document(self.hardware_key)
                merge(document, new_metrics, new_curves, keep_runs=keep_runs)
                write_atomic(path, document)
            self._cache.pop(path, None)
            written.append(path)
        return written


def empty_document(hardware_key: dict[str, Any]) -> dict[str, Any]:
    return {"schema": SCHEMA_VERSION, "hardware_key": hardware_key, "tests": {}}


def merge(document: dict[str, Any], metrics: list[NewMetric], curves: list[NewCurve], *, keep_runs: int) -> None:
    """Add runs: a run on the same stack joins the entry (newest ``keep_runs`` kept); a new stack replaces it."""
    tests = document["tests"]
    for metric in metrics:
        metric_entries = tests.setdefault(entry_key(metric.test), {}).setdefault("metrics", {})
        entry = metric_entries.get(metric.name)
        run = _run_dict(metric.run)
        if (
            entry is None
            or entry["unit"] != metric.unit
            or entry["higher_is_better"] != metric.higher_is_better
            or any(old["stack"] != metric.run.stack for old in entry["runs"])
        ):
            metric_entries[metric.name] = {
                "unit": metric.unit,
                "higher_is_better": metric.higher_is_better,
                "runs": [run],
            }
        else:
            entry["runs"] = (entry["runs"] + [run])[-keep_runs:]
    fresh_curves: set[tuple[str, str]] = set()
    for curve in curves:
        key = (entry_key(curve.test), curve.name)
        curve_entries = tests.setdefault(key[0], {}).setdefault("curves", {})
        run = {
            "steps": curve.curve.steps,
            "values": curve.curve.values,
            "stack": curve.curve.stack,
            "date": curve.curve.date,
        }
        # All curves of one name from this save replace the stored ones together (reference seeds of one run).
        if key not in fresh_curves:
            curve_entries[curve.name] = {"runs": []}
            fresh_curves.add(key)
        curve_entries[curve.name]["runs"].append(run)


def _run_dict(run: MetricRun) -> dict[str, Any]:
    data = {"samples": run.samples, "summary": run.summary, "stack": run.stack, "date": run.date}
    if run.context:  # written only when there is something: a run without it reads as before
        data["context"] = run.context
    return data


def read_document(path: Path) -> dict[str, Any]:
    """Parse and validate one baseline file, or raise StoreError naming it."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise StoreError(f"baseline file {path} cannot be read ({error}); fix its permissions or remove it") from None
    try:
        document = json.loads(text, parse_constant=_reject_constant)
    except (json.JSONDecodeError, ValueError) as error:
        detail = (
            f"{error.msg} at line {error.lineno} column {error.colno}"
            if isinstance(error, json.JSONDecodeError)
            else str(error)
        )
        raise StoreError(
            f"baseline file {path} is not valid JSON ({detail}); restore it from version control "
            "(git checkout -- FILE) or delete it and record new baselines with --gpuperf-save"
        ) from None
    problem = validate(document)
    if problem:
        raise StoreError(
            f"baseline file {path} is not a gpuperf baseline: {problem}; restore it from version control "
            "or delete it and record new baselines with --gpuperf-save"
        )
    return document


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a number a baseline may hold")


def validate(document: Any) -> str | None:
    """The first structural problem of a baseline document, or None."""
    if not isinstance(document, dict):
        return "the top level is not an object"
    version = document.get("schema")
    if version != SCHEMA_VERSION:
        return (
            f"schema version {version!r} is not the supported version {SCHEMA_VERSION} "
            "(written by another pytest-gpuperf version?)"
        )
    if not isinstance(document.get("hardware_key"), dict):
        return "'hardware_key' is missing or not an object"
    tests = document.get("tests")
    if not isinstance(tests, dict):
        return "'tests' is missing or not an object"
    for test, entry in tests.items():
        if not isinstance(entry, dict):
            return f"test {test!r} is not an object"
        for name, metric in (entry.get("metrics") or {}).items():
            where = f"test {test!r} metric {name!r}"
            if not isinstance(metric, dict) or not isinstance(metric.get("unit"), str):
                return f"{where} has no unit"
            if not isinstance(metric.get("higher_is_better"), bool):
                return f"{where} has no boolean 'higher_is_better'"
            runs = metric.get("runs")
            if not isinstance(runs, list) or not runs:
                return f"{where} has no runs"
            for run in runs:
                problem = _check_run(run, ("samples", "summary", "stack", "date"), optional=("context",))
                if problem:
                    return f"{where}: {problem}"
                if not isinstance(run.get("context", {}), dict):
                    return f"{where}: a run's 'context' is not an object"
                if not _numbers(run["samples"]):
                    return f"{where}: samples must be a non-empty list of finite numbers"
        for name, curve in (entry.get("curves") or {}).items():
            where = f"test {test!r} curve {name!r}"
            if not isinstance(curve, dict) or not isinstance(curve.get("runs"), list):
                return f"{where} has no runs"
            for run in curve["runs"]:
                problem = _check_run(run, ("steps", "values", "stack", "date"))
                if problem:
                    return f"{where}: {problem}"
                if len(run["steps"]) != len(run["values"]) or not _numbers(run["values"], allow_empty=True):
                    return f"{where}: steps and values must be equal-length lists of numbers"
    return None


def _check_run(run: Any, fields: tuple[str, ...], *, optional: tuple[str, ...] = ()) -> str | None:
    if not isinstance(run, dict):
        return "a run is not an object"
    missing = [name for name in fields if name not in run]
    if missing:
        return f"a run lacks {', '.join(missing)}"
    extra = sorted(set(run) - set(fields) - set(optional))
    if extra:
        return f"a run has unknown fields {', '.join(extra)}"
    return None


def _numbers(values: Any, *, allow_empty: bool = False) -> bool:
    if not isinstance(values, list) or (not values and not allow_empty):
        return False
    return all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomic(path: Path, document: dict[str, Any]) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of either."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_umask())  # mkstemp's 0600 would make shared baselines unreadable to others
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        try:
            os.unlink(temporary)
        except FileNotFoundError:
            pass
        raise


@contextlib.contextmanager
def _lock_for(path: Path) -> Iterator[None]:
    """An inter-process lock per baseline file, kept outside the baselines folder so it never gets committed."""
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:24]
    folder = Path(tempfile.gettempdir()) / "gpuperf-locks"
    folder.mkdir(exist_ok=True)
    lock = FileLock(str(folder / f"{digest}.lock"), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout:
        raise StoreError(
            f"could not lock baseline file {path} within {LOCK_TIMEOUT_S:.0f} s; another process holds "
            f"{lock.lock_file}: wait for it, or remove that lock file if no pytest is running"
        ) from None
    try:
        yield
    finally:
        lock.release()


def check_folder(root: Path) -> None:
    """Validate every baseline file under ``root`` (a clear error at session start rather than mid-run)."""
    if not root.is_dir():
        return
    for path in sorted(root.glob("*/*.json")):
        read_document(path)
