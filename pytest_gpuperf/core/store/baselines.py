"""Baseline store: plain, diffable JSON under ``<baselines>/<hardware-slug>/<test-module>.json``.

One file per test module and hardware key; each test's metrics keep their runs (samples, summary, stack, date and
an optional context of what was observed while measuring), and its curves theirs. The format: docs/baselines.md.
Invariants: writes are atomic (temporary file, fsync, rename) and merge under an inter-process lock
(``<file>.json.lock``, never followed through a symbolic link), so concurrent xdist workers lose nothing; each
file is saved on its own, so one that cannot be written leaves the others; file names are injective (a path the
readable form would mangle gets ``~`` and a hash); data is parsed strictly (core/store/schema.py). Imports only
core/store.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.schema import SchemaError

SCHEMA_VERSION = 1
LOCK_TIMEOUT_S = 120.0
STALE_TEMPORARY_S = 10.0
"""A temporary file of a process that is gone is removed once this old (a writer on another host of a shared
filesystem has a pid this host cannot see, and its write takes milliseconds)."""
ABANDONED_TEMPORARY_S = 3600.0
"""A temporary file this old is abandoned whoever wrote it."""
_TEMPORARY = re.compile(r"\.(?P<name>.+\.json)\.(?P<pid>[0-9]+)\.[^.]+\.tmp")


class StoreError(Exception):
    """A baseline file that cannot be used; the message names the file, the problem and the next step."""


class BaselineFileError(StoreError):
    """One baseline file that cannot be read or is not a baseline; ``problem`` says why, without the path."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"baseline file {path} {problem}")
        self.path = path
        self.problem = problem


class NotStorable(StoreError):
    """A test's figures hold a value no baseline or results file can (NaN, infinity): a verdict on that test."""


class SaveError(StoreError):
    """Some files of a save were not written (the others were); each with the reason."""

    def __init__(self, written: list[Path], failed: list[tuple[Path, str]], *, interrupted: bool = False) -> None:
        self.written = written
        self.failed = failed
        self.interrupted = interrupted
        super().__init__("; ".join(f"{path}: {reason}" for path, reason in failed))


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


_PLAIN_PART = re.compile(r"[A-Za-z0-9.-]+(?:_[A-Za-z0-9.-]+)*")
"""A path part that comes out of the readable form unchanged and unambiguous: ASCII letters, digits, dots and
dashes, single underscores between them (``__`` joins parts), no leading or trailing dot."""


def module_file_name(nodeid: str) -> str:
    """'suites/test_micro.py::test_gemm[bf16]' -> 'suites__test_micro.json'; injective, no separators, no
    traversal. A path the readable form would change gets '~' and 16 hex digits of its hash (see the module
    docstring); '~' never appears in a plain name, so hashed and plain names never meet."""
    module = nodeid.split("::", 1)[0]
    stem = module.removesuffix(".py")
    raw_parts = stem.split("/")
    if stem and module.endswith(".py") and all(_PLAIN_PART.fullmatch(part) and part[0] != "." for part in raw_parts):
        if not any(part.endswith(".") for part in raw_parts):
            return "__".join(raw_parts) + ".json"
    parts = [part for part in re.split(r"[\\/]+", stem) if part not in ("", ".", "..")]
    name = "__".join(re.sub(r"[^A-Za-z0-9_.-]+", "_", part).strip(".") or "_" for part in parts)
    digest = hashlib.sha256(module.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return f"{(name or 'unnamed')[:100]}~{digest}.json"


def entry_key(nodeid: str) -> str:
    """The test's id inside its module file: the nodeid after the module path."""
    return nodeid.split("::", 1)[1] if "::" in nodeid else nodeid


def is_sibling(test_id: str, other_id: str) -> bool:
    """Whether ``other_id`` is another parameter of ``test_id``'s test function: 'test_gemm[bf16]' of
    'test_gemm[fp32]', never the test itself. The same for node ids, entry keys and JUnit addresses (both of one
    kind): the one rule the session's store and `gpuperf compare`/`variance` find a metric's siblings by."""
    return other_id != test_id and other_id.split("[", 1)[0] == test_id.split("[", 1)[0]


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
            runs=[MetricRun(**{**run, "stack": schema.stack(run["stack"], nodeid)}) for run in entry["runs"]],
        )

    def sibling_runs(self, nodeid: str, name: str) -> list[list[list[float]]]:
        """Each sibling metric's baseline runs (their samples): the metric ``name`` of the other parameters of the
        same test function in the same file ('test_gemm[bf16]' for 'test_gemm[fp32]'), the test itself left out."""
        own = entry_key(nodeid)
        siblings = []
        for key, entry in self._document(self.path_for(nodeid))["tests"].items():
            if not is_sibling(own, key):
                continue
            metric = entry.get("metrics", {}).get(name)
            if metric is not None:
                siblings.append([list(run["samples"]) for run in metric["runs"]])
        return siblings

    def metric_names(self, nodeid: str) -> list[str]:
        """The metrics stored for a test that hold at least one run: what a session will judge of it."""
        entry = self._document(self.path_for(nodeid))["tests"].get(entry_key(nodeid), {})
        return [name for name, metric in entry.get("metrics", {}).items() if metric.get("runs")]

    def curves(self, nodeid: str, name: str) -> list[Curve]:
        entry = self._document(self.path_for(nodeid))["tests"].get(entry_key(nodeid), {}).get("curves", {}).get(name)
        return [Curve(**{**run, "stack": schema.stack(run["stack"], nodeid)}) for run in entry["runs"]] if entry else []

    def _document(self, path: Path) -> dict[str, Any]:
        if path not in self._cache:
            self._cache[path] = read_document(path) if path.exists() else empty_document(self.hardware_key)
        return self._cache[path]

    def save(self, metrics: Iterable[NewMetric], curves: Iterable[NewCurve], *, keep_runs: int) -> list[Path]:
        """Merge new runs into the files, each under its lock; returns the files written.

        Each file is saved on its own: when some cannot be (unreadable, not a baseline, a filesystem error, the
        lock not had) the others are still written and SaveError lists both. Ctrl-C stops the save between or
        inside files (a file is written whole or not at all) and is a SaveError with ``interrupted`` set."""
        by_file: dict[Path, tuple[list[NewMetric], list[NewCurve]]] = {}
        for metric in metrics:
            by_file.setdefault(self.path_for(metric.test), ([], []))[0].append(metric)
        for curve in curves:
            by_file.setdefault(self.path_for(curve.test), ([], []))[1].append(curve)
        remove_stale_temporaries(self.folder)
        written: list[Path] = []
        failed: list[tuple[Path, str]] = []
        pending = sorted(by_file)
        for index, path in enumerate(pending):
            new_metrics, new_curves = by_file[path]
            try:
                self._save_file(path, new_metrics, new_curves, keep_runs=keep_runs)
            except KeyboardInterrupt:
                failed.extend((other, "interrupted (Ctrl-C) before it was written") for other in pending[index:])
                raise SaveError(written, failed, interrupted=True) from None
            except BaselineFileError as error:
                failed.append((path, error.problem))
            except OSError as error:
                failed.append((path, os_reason(error, path)))
            except (StoreError, SchemaError) as error:
                failed.append((path, str(error)))
            else:
                written.append(path)
            finally:
                self._cache.pop(path, None)
        if failed:
            raise SaveError(written, failed)
        return written

    def _save_file(self, path: Path, metrics: list[NewMetric], curves: list[NewCurve], *, keep_runs: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        with _lock_for(path):
            exists = os.path.lexists(path)
            if exists and not os.access(path, os.W_OK):  # the rename could replace it; its owner said not to
                raise PermissionError(errno.EACCES, "the file is read-only; make it writable to save into it")
            document = read_document(path) if exists else empty_document(self.hardware_key)
            merge(document, metrics, curves, keep_runs=keep_runs)
            write_atomic(path, document)


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
    """Parse and validate one baseline file, or raise BaselineFileError naming it."""
    restore = (
        "restore it from version control (git checkout -- FILE) or delete it and record new baselines with "
        "--gpuperf-save"
    )
    try:
        data = schema.read_file(path)  # regular files only, bounded: a FIFO or /dev/zero here must not hang a run
    except schema.UnreadableFile as error:
        if error.kind == "folder":
            raise BaselineFileError(path, "is a folder where a baseline file should be; move it away") from None
        if error.kind == "special":
            raise BaselineFileError(path, f"{error.problem}; remove it (a baseline is a regular JSON file)") from None
        raise BaselineFileError(path, f"{error.problem}; fix its permissions or remove it") from None
    try:
        document = schema.loads(data)
    except SchemaError as error:
        raise BaselineFileError(path, f"is {error}; {restore}") from None
    try:
        check_document(document)
    except SchemaError as error:
        raise BaselineFileError(path, f"is not a gpuperf baseline: {error}; {restore}") from None
    return document


def validate(document: Any) -> str | None:
    """The first structural problem of a baseline document, or None."""
    try:
        check_document(document)
    except SchemaError as error:
        return str(error)
    return None


def check_document(document: Any) -> None:
    """Raise SchemaError with the first problem of a baseline document (the rules of each field: schema.py)."""
    if not isinstance(document, dict):
        raise SchemaError(f"the top level is {schema.kind(document)}, not an object")
    version = document.get("schema")
    if version != SCHEMA_VERSION:
        raise SchemaError(
            f"schema version {schema.quote(version)} is not the supported version {SCHEMA_VERSION} "
            "(written by another pytest-gpuperf version?)"
        )
    schema.require_object(document.get("hardware_key"), "the document", "hardware_key")
    tests = schema.require_object(document.get("tests"), "the document", "tests")
    for test, entry in tests.items():
        where = f"test {schema.quote(test)}"
        schema.require_object(entry, where, "test")
        for name, metric in schema.require_object(entry.get("metrics", {}), where, "metrics").items():
            _check_metric(metric, f"{where} metric {schema.quote(name)}")
        for name, curve in schema.require_object(entry.get("curves", {}), where, "curves").items():
            curve_where = f"{where} curve {schema.quote(name)}"
            runs = schema.require_list(
                schema.require_object(curve, curve_where, "curve").get("runs"), curve_where, "runs"
            )
            for index, run in enumerate(runs):
                run_where = f"{curve_where} run {index}"
                schema.require_object(run, run_where, "run")
                schema.only_fields(run, run_where, ("steps", "values", "stack", "date"))
                schema.curve(run["steps"], run["values"], run_where)
                schema.stack(run["stack"], run_where)
                schema.text(run["date"], run_where, "date", empty=True)


def _check_metric(metric: Any, where: str) -> None:
    schema.require_object(metric, where, "metric")
    schema.text(metric.get("unit"), where, "unit")
    schema.flag(metric.get("higher_is_better"), where, "higher_is_better")
    runs = schema.require_list(metric.get("runs"), where, "runs")
    if not runs:
        raise SchemaError(f"{where} has no runs")
    for index, run in enumerate(runs):
        run_where = f"{where} run {index}"
        schema.require_object(run, run_where, "run")
        schema.only_fields(run, run_where, ("samples", "summary", "stack", "date"), optional=("context",))
        schema.samples(run["samples"], run_where)
        schema.require_object(run["summary"], run_where, "summary")
        schema.stack(run["stack"], run_where)
        schema.text(run["date"], run_where, "date", empty=True)
        schema.require_object(run.get("context", {}), run_where, "context")


def os_reason(error: OSError, path: Path | None = None) -> str:
    """An OSError in a few words: 'Permission denied', 'Not a directory (baselines/cpu-x)'."""
    reason = error.strerror or str(error) or type(error).__name__
    if error.filename is not None and (path is None or str(error.filename) != str(path)):
        reason += f" ({error.filename})"
    return reason


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def write_atomic(path: Path, document: dict[str, Any]) -> None:
    """Write JSON so a reader sees the old file or the new one, never half of either.

    The temporary file's name carries this process's id, so a file left by a killed writer is recognised and
    removed later (remove_stale_temporaries)."""
    text = schema.dumps(document)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(handle, 0o666 & ~_umask())  # mkstemp's 0600 would make shared baselines unreadable to others
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise


def remove_stale_temporaries(folder: Path) -> list[Path]:
    """Remove ``.<file>.json.<pid>.*.tmp`` files whose writer is gone; returns them. Never fails a run."""
    removed = []
    try:
        candidates = list(folder.iterdir())
    except OSError:
        return []
    now = time.time()
    for path in candidates:
        match = _TEMPORARY.fullmatch(path.name)
        if match is None:
            continue
        try:
            age = now - path.lstat().st_mtime
            if age > ABANDONED_TEMPORARY_S or (age > STALE_TEMPORARY_S and not _alive(int(match["pid"]))):
                path.unlink()
                removed.append(path)
        except OSError:
            continue
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process (or a number no process can have: keep the file, age decides)
    return True


@contextlib.contextmanager
def _lock_for(path: Path) -> Iterator[None]:
    """An inter-process lock per baseline file: ``<file>.lock`` beside it, gitignored. filelock opens it with
    O_NOFOLLOW, so a planted symbolic link fails the lock (reported) instead of truncating what it points to."""
    lock_path = path.with_name(path.name + ".lock")
    if lock_path.is_symlink():
        raise StoreError(f"its lock {lock_path} is a symbolic link; remove it (gpuperf never follows one)")
    lock = FileLock(str(lock_path), timeout=LOCK_TIMEOUT_S)  # its default mode follows the umask, as the data
    try:
        lock.acquire()
    except Timeout:
        raise StoreError(
            f"could not lock it within {LOCK_TIMEOUT_S:.0f} s; another process holds {lock_path}: wait for it, "
            "or remove that lock file if no pytest is running"
        ) from None
    try:
        yield
    finally:
        lock.release()


def check_folder(root: Path) -> None:
    """Validate every baseline file under ``root`` (a clear error at session start rather than mid-run), and
    remove the temporary files of writers that were killed."""
    if not root.is_dir():
        return
    try:
        folders = sorted(folder for folder in root.iterdir() if folder.is_dir())
        files = sorted(root.glob("*/*.json"))
    except OSError as error:
        raise StoreError(
            f"baselines folder {root} cannot be read ({os_reason(error, root)}); fix its permissions"
        ) from None
    for folder in folders:
        remove_stale_temporaries(folder)
    for path in files:
        read_document(path)
