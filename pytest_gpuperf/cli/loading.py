"""Reading what runs leave behind: results JSON (``--gpuperf-results``) and JUnit XML (``--junitxml``) into Runs.

Every problem becomes an ``InputError`` whose one-line message names the file and what is wrong, so the CLI prints
it and exits 2 without a traceback. Nothing here judges: the commands ask core/verdict/. The results format and
its validation belong to core/store/results.py (field rules: core/store/schema.py); JUnit XML carries each metric
as ``gpuperf.<metric>.*`` testcase properties and the fingerprint as the ``gpuperf.fingerprint`` testsuite
property, and a file without it loads with an unknown hardware key and an empty stack.
"""

from __future__ import annotations

import math
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard
from xml.etree import ElementTree

from pytest_gpuperf.core.store import results as results_format
from pytest_gpuperf.core.store import schema, spread
from pytest_gpuperf.core.store.baselines import is_sibling
from pytest_gpuperf.core.store.results import FINGERPRINT_PROPERTY
from pytest_gpuperf.core.store.schema import SchemaError, quote

MAX_BYTES = schema.MAX_BYTES
"""Larger inputs are refused rather than read into memory."""
UNKNOWN_HARDWARE = "unknown-hardware"
SUFFIXES = (".json", ".xml")
__all__ = ["FINGERPRINT_PROPERTY", "InputError", "Run", "Side", "load_file", "load_path", "load_side", "quote"]


class InputError(Exception):
    """An input that cannot be used; the message is one line naming the file and the problem."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricData:
    """One metric of one test in one run."""

    test: str
    """The test as the file names it: a pytest node id (JSON) or 'classname::name' (JUnit)."""
    key: str
    """The test's address in JUnit form, so a JSON file and a JUnit file of the same run match."""
    metric: str
    unit: str
    higher_is_better: bool
    samples: tuple[float, ...]
    verdict: str | None = None
    context: dict[str, Any] = field(default_factory=dict)
    comparison: dict[str, Any] = field(default_factory=dict)
    """The comparison the session recorded (figures and reason), empty for JUnit input."""

    @property
    def clock_mhz(self) -> float | None:
        """The median SM clock recorded while measuring (telemetry), if any."""
        telemetry = self.context.get("telemetry")
        value = telemetry.get("sm_clock_mhz_median") if isinstance(telemetry, dict) else None
        return float(value) if _is_number(value) and value > 0 else None


@dataclass(frozen=True, slots=True, kw_only=True)
class CurveData:
    test: str
    key: str
    name: str
    steps: tuple[float, ...]
    values: tuple[float, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Run:
    """Everything one results file says about one pytest session."""

    source: Path
    created: str
    """ISO timestamp of the run ('' when the file has none); orders runs in `history`."""
    hardware_key: dict[str, Any] | None
    hardware_slug: str
    stack: dict[str, str]
    settings: dict[str, Any]
    metrics: dict[tuple[str, str], MetricData]
    """By (test key, metric name)."""
    curves: tuple[CurveData, ...] = ()
    machine_id: str | None = None
    """The identity of the machine the run was taken on (its fingerprint's "machine"); None: not recorded."""

    @property
    def label(self) -> str:
        return self.source.name


@dataclass(frozen=True, slots=True, kw_only=True)
class Side:
    """The runs named by one argument (a file or a folder): one hardware key, one stack."""

    source: Path
    runs: tuple[Run, ...]

    @property
    def hardware_slug(self) -> str:
        known = [run.hardware_slug for run in self.runs if run.hardware_slug != UNKNOWN_HARDWARE]
        return known[0] if known else UNKNOWN_HARDWARE

    @property
    def stack(self) -> dict[str, str]:
        """Fields every run agrees on; a field whose value differs between runs reads 'mixed(a|b)'."""
        names = sorted({name for run in self.runs for name in run.stack})
        merged = {}
        for name in names:
            values = sorted({run.stack.get(name, "absent") for run in self.runs})
            merged[name] = values[0] if len(values) == 1 else "mixed(" + "|".join(values) + ")"
        return merged

    def keys(self) -> list[tuple[str, str]]:
        seen: dict[tuple[str, str], None] = {}
        for run in self.runs:
            seen.update(dict.fromkeys(run.metrics))
        return list(seen)

    def metric_runs(self, key: tuple[str, str]) -> list[MetricData]:
        return [run.metrics[key] for run in self.runs if key in run.metrics]

    def metric_machines(self, key: tuple[str, str]) -> list[str | None]:
        """The machine each of ``metric_runs(key)`` was measured on (None where its file does not say)."""
        return [run.machine_id for run in self.runs if key in run.metrics]

    def metric_dates(self, key: tuple[str, str]) -> list[str]:
        """When each of ``metric_runs(key)`` was measured (its file's ``created``; '' when the file has none)."""
        return [run.created for run in self.runs if key in run.metrics]

    def sibling_samples(self, key: tuple[str, str]) -> list[list[tuple[float, ...]]]:
        """Each sibling metric's runs' samples, as ``stats.with_siblings`` takes them: the same metric of the other
        parameters of the key's test function (``store.is_sibling``), as a session finds them in its store."""
        test, metric = key
        return [
            [run.samples for run in self.metric_runs(other)]
            for other in self.keys()
            if other[1] == metric and is_sibling(test, other[0])
        ]


# -- addresses -------------------------------------------------------------------------------------------------


def junit_address(nodeid: str) -> str:
    """'dir/test_a.py::TestX::test_y[p]' -> 'dir.test_a.TestX::test_y[p]', the classname::name pytest's
    junitxml writes for that node id."""
    path, bracket, params = nodeid.partition("[")
    names = path.split("::")
    names[0] = re.sub(r"\.py$", "", names[0].replace("/", "."))
    names[-1] += bracket + params
    return ".".join(names[:-1]) + "::" + names[-1]


# -- reading files ---------------------------------------------------------------------------------------------


def read_bytes(path: Path, *, limit: int = MAX_BYTES) -> bytes:
    """The bytes of one regular file, at most ``limit`` of them (``schema.read_file``, the reader of every
    gpuperf document: devices and FIFOs refused unopened, the read bounded whatever size the file reports)."""
    try:
        return schema.read_file(path, limit=limit)
    except schema.UnreadableFile as error:
        raise InputError(str(error)) from None


def check_regular_file(path: Path) -> None:
    """Refuse a path that is not a regular file before a reader outside this module opens it (baseline files)."""
    try:
        schema.check_regular_file(path)
    except schema.UnreadableFile as error:
        raise InputError(str(error)) from None


def _unreadable(path: Path, error: OSError) -> InputError:
    hint = "; check its permissions" if isinstance(error, PermissionError) else ""
    return InputError(f"{path}: cannot be read ({error.strerror or error}){hint}")


def walk_files(folder: Path, suffixes: tuple[str, ...] = SUFFIXES) -> list[Path]:
    """Regular files with one of ``suffixes`` under ``folder``, recursively, in path order.

    A subfolder that cannot be listed is an error rather than silently skipped (its runs would be missing from
    the answer without a word). Symbolic links to folders are not followed (no cycles); devices, FIFOs and
    sockets that carry a results suffix are skipped, never opened.
    """

    def refuse(error: OSError) -> None:
        where = error.filename if error.filename is not None else folder
        raise InputError(
            f"{where}: folder cannot be read ({error.strerror or error}); fix its permissions or give the "
            "readable folders one by one"
        )

    found = []
    for top, folders, names in os.walk(folder, onerror=refuse):
        folders.sort()
        for name in names:
            path = Path(top) / name
            if path.suffix.lower() not in suffixes:
                continue
            try:
                regular = stat.S_ISREG(os.stat(path).st_mode)
            except OSError:  # a dangling link or one that loops: not a results file
                regular = False
            if regular:
                found.append(path)
    return sorted(found)


def is_folder(path: Path) -> bool:
    """``path.is_dir()``, with the errors it lets through (a name too long, no permission) as InputError."""
    try:
        return stat.S_ISDIR(os.stat(path).st_mode)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as error:
        raise _unreadable(path, error) from None


def load_file(path: Path) -> Run:
    """One results JSON or JUnit XML file, told apart by suffix, else by its first character."""
    return load_bytes(read_bytes(path), path)


def load_bytes(data: bytes, path: Path) -> Run:
    """The run in ``data``, the bytes read from ``path`` (so a signature covers exactly the bytes validated)."""
    head = data.lstrip()[:1]
    if path.suffix.lower() == ".json" or (path.suffix.lower() != ".xml" and head == b"{"):
        return parse_results_json(data, path)
    if path.suffix.lower() == ".xml" or head == b"<" or data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return parse_junit_xml(data, path)
    raise InputError(f"{path}: neither a gpuperf results JSON file nor a JUnit XML file (expected .json or .xml)")


def load_path(path: Path) -> list[Run]:
    """A file, or every .json/.xml file under a folder (recursively, in name order) but the documents other
    commands write there (``other_document``), each skipped with a note on standard error."""
    if is_folder(path):
        files = walk_files(path)
        if not files:
            raise InputError(
                f"{path}: folder holds no results files (*.json from --gpuperf-results or *.xml from --junitxml)"
            )
        runs = []
        for file in files:
            data = read_bytes(file)
            if not skipped(file, data, given=path):
                runs.append(load_bytes(data, file))
        if not runs:
            raise InputError(f"{path}: folder holds no results files, only other gpuperf documents (noted above)")
        return runs
    data = read_bytes(path)
    skipped(path, data, given=path)  # another gpuperf document named on its own is refused
    return [load_bytes(data, path)]


def other_document(data: bytes) -> str | None:
    """What a gpuperf document that is not a run's results is (a fleet spread file, a command's JSON output, an
    ab.json or bisect.json), else None: commands write these beside the results they read."""
    head = data.lstrip()[:64]
    if head.startswith((b"gpuperf ", b"## gpuperf ", b"<!DOCTYPE html>")):
        return "the output of a gpuperf command (a table, Markdown or HTML page), not a run's results"
    if head[:1] != b"{":
        return None
    try:
        document = schema.loads(data)
    except SchemaError:
        return None
    if not isinstance(document, dict) or "results" in document:
        return None
    kind, title = document.get("kind"), document.get("title")
    if kind == spread.KIND:
        return "a fleet spread file (gpuperf fleet --save-spread), not a node's results"
    if isinstance(title, str) and title.startswith("gpuperf ") and isinstance(document.get("rows"), list):
        command = title.split()[1].rstrip(":") if len(title.split()) > 1 else "a command"
        return f"the JSON output of gpuperf {command} (--format json), not a run's results"
    if str(document.get("schema", "")).startswith(("gpuperf-ab/", "gpuperf-bisect/")):
        return "a gpuperf ab or bisect result (give it to gpuperf report), not a run's results"
    return None


def skipped(file: Path, data: bytes, *, given: Path) -> bool:
    """True, with a note on standard error, for another gpuperf document found in the folder ``given``; named on
    its own (``file == given``) such a document is refused in one line."""
    what = other_document(data)
    if what is None:
        return False
    if file == given:
        raise InputError(f"{file}: {what}; give the results files (--gpuperf-results, --junitxml) instead")
    print(f"gpuperf: note: {file}: {what}; skipped", file=sys.stderr)
    return True


def load_side(path: Path) -> Side:
    """The runs of one argument; mixing hardware keys in one side is an error."""
    runs = load_path(path)
    check_one_hardware(runs, path)
    return Side(source=path, runs=tuple(runs))


def check_one_hardware(runs: list[Run], where: Path | str) -> None:
    known = [run for run in runs if run.hardware_slug != UNKNOWN_HARDWARE]
    for run in known[1:]:
        if run.hardware_key != known[0].hardware_key:
            raise InputError(
                f"{where}: mixes hardware keys: {known[0].source} is {known[0].hardware_slug}, {run.source} is "
                f"{run.hardware_slug}; give results of one hardware key per argument"
            )


# -- results JSON ----------------------------------------------------------------------------------------------


def decode_json(data: bytes | str, source: Path) -> Any:
    """Parse JSON with the plugin's one strict parser (core.schema.loads): UTF-8, no NaN/Infinity, no number
    beyond float range, no key twice in one object. A duplicate key is refused because readers disagree on which
    copy counts: a signed file must say one thing to every reader."""
    try:
        return schema.loads(data)
    except SchemaError as error:
        raise InputError(f"{source}: {error}") from None


def parse_results_json(data: bytes | str, source: Path) -> Run:
    """A document written by ``--gpuperf-results``, validated by its owner (results.parse_document)."""
    try:
        document = results_format.parse_document(data, where=str(source))
    except SchemaError as error:
        raise InputError(str(error)) from None
    hardware_key, slug, stack = _fingerprint(document.get("fingerprint"), source, "'fingerprint'")
    metrics: dict[tuple[str, str], MetricData] = {}
    for entry in document["results"]:
        verdict = entry.get("verdict")
        metric = MetricData(
            test=entry["test"],
            key=junit_address(entry["test"]),
            metric=entry["metric"],
            unit=entry["unit"],
            higher_is_better=entry["higher_is_better"],
            samples=tuple(float(value) for value in entry["samples"]),
            verdict=verdict if isinstance(verdict, str) else None,
            context=entry.get("context", {}),
            comparison=entry["comparison"] if isinstance(entry.get("comparison"), dict) else {},
        )
        key = (metric.key, metric.metric)
        if key in metrics:  # two node ids with one JUnit address
            raise InputError(f"{source}: test {quote(metric.test)} metric {quote(metric.metric)} appears twice")
        metrics[key] = metric
    curves = tuple(
        CurveData(
            test=entry["test"],
            key=junit_address(entry["test"]),
            name=entry["name"],
            steps=tuple(float(step) for step in entry["steps"]),
            values=tuple(float(value) for value in entry["values"]),
        )
        for entry in document.get("curves", [])
    )
    return Run(
        source=source,
        created=document.get("created", ""),
        hardware_key=hardware_key,
        hardware_slug=slug,
        stack=stack,
        settings=document.get("settings") or {},
        metrics=metrics,
        curves=curves,
        machine_id=results_format.read_machine(document.get("fingerprint")),
    )


def _fingerprint(raw: Any, source: Path, what: str) -> tuple[dict[str, Any] | None, str, dict[str, str]]:
    try:
        key, slug, stack = results_format.read_fingerprint(raw, what)
    except SchemaError as error:
        raise InputError(f"{source}: {error}") from None
    return key, slug or UNKNOWN_HARDWARE, stack


# -- JUnit XML -------------------------------------------------------------------------------------------------

_METRIC_FIELDS = results_format.JUNIT_METRIC_FIELDS


def parse_junit_xml(data: bytes, source: Path) -> Run:
    """A file written by pytest's ``--junitxml``; metrics from the ``gpuperf.<metric>.*`` properties."""
    from defusedxml import DefusedXmlException  # type: ignore[import-untyped]
    from defusedxml.ElementTree import fromstring  # type: ignore[import-untyped]
    from junitparser import JUnitXml, JUnitXmlError, Properties  # lazily: only commands that read XML need it

    try:
        # defusedxml's expat parser refuses a DTD as the parser meets it, after decoding, so UTF-16 or UTF-32
        # cannot hide one (a check of the raw bytes can be fooled; pytest never writes a DTD). junitparser gets
        # the parsed tree; it never parses anything itself here.
        root = fromstring(data, forbid_dtd=True, forbid_entities=True, forbid_external=True)
        xml = JUnitXml.fromfile(str(source), parse_func=lambda _: ElementTree.ElementTree(root))
    except DefusedXmlException:
        raise InputError(f"{source}: XML with a DTD or entity declarations is not a pytest JUnit file") from None
    except ElementTree.ParseError as error:
        what = "truncated" if "no element found" in str(error) or "unclosed token" in str(error) else "not valid XML"
        raise InputError(f"{source}: {what} ({_short(error)})") from None
    except JUnitXmlError:
        raise InputError(f"{source}: the root element is not a JUnit <testsuites> or <testsuite>") from None
    except (ValueError, RecursionError, LookupError) as error:  # bad encodings, deep nesting
        raise InputError(f"{source}: not valid XML ({_short(error)})") from None
    hardware_key, slug, created, machine = None, UNKNOWN_HARDWARE, "", None
    stack: dict[str, str] = {}
    metrics: dict[tuple[str, str], MetricData] = {}
    for suite in xml:
        if suite.__class__.__name__ != "TestSuite":
            continue
        created = created or str(suite.timestamp or "")
        for prop in suite.properties():
            if prop.name == FINGERPRINT_PROPERTY and hardware_key is None:
                try:
                    raw = schema.loads(prop.value or "")
                except SchemaError:
                    raise InputError(f"{source}: testsuite property {FINGERPRINT_PROPERTY} is not valid JSON") from None
                hardware_key, slug, stack = _fingerprint(raw, source, f"testsuite property {FINGERPRINT_PROPERTY}")
                machine = results_format.read_machine(raw)
        for case in suite:
            if case.__class__.__name__ != "TestCase":
                continue
            properties = case.child(Properties)
            pairs = [(prop.name or "", prop.value or "") for prop in properties] if properties is not None else []
            for metric in _metrics_from_case(str(case.classname or ""), str(case.name or ""), pairs, source):
                key = (metric.key, metric.metric)
                if key in metrics:
                    raise InputError(f"{source}: test {quote(metric.test)} metric {quote(metric.metric)} appears twice")
                metrics[key] = metric
    return Run(
        source=source,
        created=created,
        hardware_key=hardware_key,
        hardware_slug=slug,
        stack=stack,
        settings={},
        metrics=metrics,
        machine_id=machine,
    )


def _metrics_from_case(classname: str, name: str, pairs: list[tuple[str, str]], source: Path) -> list[MetricData]:
    fields: dict[str, dict[str, str]] = {}
    for prop_name, value in pairs:
        if not prop_name.startswith("gpuperf."):
            continue
        metric, _, field_name = prop_name[len("gpuperf.") :].rpartition(".")
        if metric and field_name in _METRIC_FIELDS:
            fields.setdefault(metric, {})[field_name] = value
    if not fields:
        return []
    if not name:
        raise InputError(f"{source}: a testcase with gpuperf properties has no name")
    test = f"{classname}::{name}" if classname else name
    found = []
    for metric, values in fields.items():
        where = f"{source}: test {quote(test)} metric {quote(metric)}"
        missing = [f for f in ("unit", "higher_is_better", "samples") if f not in values]
        if missing:
            raise InputError(f"{where} lacks property gpuperf.{metric}.{missing[0]}")
        higher = values["higher_is_better"].strip().lower()
        if higher not in ("true", "false"):
            raise InputError(f"{where}: higher_is_better is {values['higher_is_better'][:20]!r}, not True/False")
        try:
            samples = [float(text) for text in values["samples"].split(",")]
        except ValueError:
            raise InputError(f"{where}: samples {values['samples'][:40]!r} are not comma-separated numbers") from None
        found.append(
            MetricData(
                test=test,
                key=test,
                metric=metric,
                unit=values["unit"],
                higher_is_better=higher == "true",
                samples=_samples(samples, where),
                verdict=values.get("verdict"),
            )
        )
    return found


# -- field checks (the rules themselves: core/store/schema.py) ---------------------------------------------------------


def _samples(raw: Any, where: str) -> tuple[float, ...]:
    try:
        return tuple(schema.samples(raw, where))
    except SchemaError as error:
        raise InputError(str(error)) from None


def _is_number(value: Any) -> TypeGuard[int | float]:
    return schema.is_number(value)


def _short(error: BaseException) -> str:
    return " ".join(str(error).split())[:160] or type(error).__name__


# -- gpuperf ab and bisect results (ab.json, bisect.json), as `report` draws them ---------------------------------

LOG_RATIO_MAX = math.log(schema.SAMPLE_MAX / schema.SAMPLE_MIN) * (1 + 1e-9)
"""The largest |log ratio| two valid session figures can have (~460.5, with room for rounding): beyond it a
pair's ratio is no measurement, and math.exp of it would overflow."""
RATIO_MAX = schema.SAMPLE_MAX / schema.SAMPLE_MIN * (1 + 1e-9)
"""The largest ratio (and interval bound) of two valid figures; the smallest is its inverse."""


def check_ab_document(document: dict[str, Any], source: Path) -> None:
    """Refuse, in one line, an ab.json whose fields the report reads are not what `gpuperf ab` writes."""
    try:
        _check_ab(document, "")
    except SchemaError as error:
        raise InputError(f"{source}: a gpuperf ab result, but {error}; give the ab.json gpuperf ab wrote") from None


def check_bisect_document(document: dict[str, Any], source: Path) -> None:
    """Refuse, in one line, a bisect.json whose fields the report reads are not what `gpuperf bisect` writes."""
    try:
        _check_bisect(document)
    except SchemaError as error:
        raise InputError(
            f"{source}: a gpuperf bisect result, but {error}; give the bisect.json gpuperf bisect wrote"
        ) from None


def _check_ab(document: dict[str, Any], where: str) -> None:
    command = _optional(document, "command", where, dict)
    for side in ("a", "b", "pytest_args"):
        _texts(command.get(side) if command else None, f"{where}command.{side}")
    rules = _optional(document, "rules", where, dict)
    if rules is not None:
        threshold = rules.get("threshold")
        if threshold is not None and not (schema.is_number(threshold) and 0 < threshold < 1):
            raise SchemaError(f"{where}rules.threshold is {quote(threshold)}, not a fraction between 0 and 1")
    _texts(document.get("order"), f"{where}order")
    _texts(document.get("stack_changes"), f"{where}stack_changes")
    _optional(document, "stopped", where, str)
    for index, metric in enumerate(schema.require_list(document.get("metrics"), where or "the document", "metrics")):
        at = f"{where}metrics[{index}]"
        if not isinstance(metric, dict):
            raise SchemaError(f"{at} is {schema.kind(metric)}, not an object")
        for name in ("test", "metric", "verdict"):
            schema.text(metric.get(name), at, name)
        for name in ("a_median", "b_median"):
            _positive(metric.get(name), f"{at}.{name}", schema.SAMPLE_MAX)
        _positive(metric.get("ratio"), f"{at}.ratio", RATIO_MAX)
        interval = metric.get("interval")
        if interval is not None:
            if not isinstance(interval, list) or len(interval) != 2:
                raise SchemaError(f"{at}.interval is {quote(interval)}, not a list of two bounds")
            for bound, value in zip(("low", "high"), interval):
                _positive(value, f"{at}.interval ({bound})", RATIO_MAX)
        pairs = metric.get("pairs")
        if pairs is not None and (isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 0):
            raise SchemaError(f"{at}.pairs is {quote(pairs)}, not a count of pairs")
        _texts(metric.get("components"), f"{at}.components")
        ratios = metric.get("log_ratios")
        if ratios is not None:
            for position, value in enumerate(schema.require_list(ratios, at, "log_ratios")):
                if not schema.is_number(value) or abs(value) > LOG_RATIO_MAX:
                    raise SchemaError(
                        f"{at}.log_ratios[{position}] is {quote(value)}, not a pair's log ratio (a number within "
                        f"+-{LOG_RATIO_MAX:.1f})"
                    )


def _check_bisect(document: dict[str, Any]) -> None:
    for side in ("good", "bad"):
        pins = _optional(document, side, "", dict)
        for name, version in (pins or {}).items():
            if not isinstance(version, str):
                raise SchemaError(f"{side} pins {quote(name)} to {schema.kind(version)}, not a version string")
    for name in ("builds", "sessions"):
        count = document.get(name)
        if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
            raise SchemaError(f"{name} is {quote(count)}, not a count")
    _optional(document, "good_vs_bad", "", str)
    for index, search in enumerate(schema.require_list(document.get("searches"), "the document", "searches")):
        at = f"searches[{index}]"
        if not isinstance(search, dict):
            raise SchemaError(f"{at} is {schema.kind(search)}, not an object")
        for name in ("test", "metric", "verdict"):
            schema.text(search.get(name), at, name)
        steps = search.get("steps")
        for position, step in enumerate(schema.require_list(steps, at, "steps") if steps is not None else []):
            where = f"{at}.steps[{position}]"
            if not isinstance(step, dict):
                raise SchemaError(f"{where} is {schema.kind(step)}, not an object")
            index_value = step.get("index")
            if isinstance(index_value, bool) or not isinstance(index_value, int):
                raise SchemaError(f"{where}.index is {quote(index_value)}, not a step number")
            for name in ("purpose", "outcome"):
                schema.text(step.get(name), where, name)
            _texts(step.get("swapped"), f"{where}.swapped")
            _optional(step, "detail", where + ".", str)
            change = step.get("change")
            if change is not None and not schema.is_number(change):
                raise SchemaError(f"{where}.change is {quote(change)}, not a number")


def _optional(document: dict[str, Any], name: str, where: str, kind: type) -> Any:
    """``document[name]`` when it is of ``kind`` or null/absent (None); SchemaError otherwise."""
    value = document.get(name)
    if value is not None and not isinstance(value, kind):
        wanted = "an object" if kind is dict else "a string" if kind is str else kind.__name__
        raise SchemaError(f"{where}{name} is {schema.kind(value)}, not {wanted}")
    return value


def _texts(value: Any, where: str) -> None:
    """A list of strings, or null/absent."""
    if value is None:
        return
    if not isinstance(value, list):
        raise SchemaError(f"{where} is {schema.kind(value)}, not a list of strings")
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise SchemaError(f"{where}[{index}] is {quote(item)}, not a string")


def _positive(value: Any, where: str, largest: float) -> None:
    """A positive number up to ``largest`` (a median, a ratio, a bound), or null/absent."""
    if value is None:
        return
    if not schema.is_number(value) or not 0 < value <= largest or value < 1 / largest:
        raise SchemaError(f"{where} is {quote(value)}, not a positive number within [{1 / largest:g}, {largest:g}]")
