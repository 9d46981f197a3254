"""The ``:::MLLOG`` lines of an MLPerf Training log, read with bounds: one event per line, a run's summary.

The format is what ``mlperf_logging.mllog`` writes (mlcommons/logging 4.1.68, mllog/mllog.py ``_encode_log``): the
token, then one JSON object with ``namespace``, ``time_ms``, ``event_type``, ``key``, ``value``, ``metadata``. Every
malformed line is an ``OutputError`` naming the file and line; lines, numbers and the log itself have a size limit,
so a hostile or never-ending log costs bounded time. No mlperf_logging import: the checkers are mlperf_checks.py.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_gpuperf.core.record.readings import OutputError

TOKEN = ":::MLLOG "
MAX_LINE_CHARS = 64 * 1024
"""The longest line read; mllog's own lines are a few hundred characters (a hyperparameter dump: a few KiB)."""
MAX_LOG_BYTES = 64 * 1024 * 1024
"""The largest log read; a time-to-train log of a real system is a few MiB at most."""
MAX_NUMBER_CHARS = 40
"""A JSON number longer than this is no figure any logger writes."""
FIELDS = ("time_ms", "event_type", "key", "value", "metadata")
EVENT_TYPES = ("INTERVAL_START", "INTERVAL_END", "POINT_IN_TIME")
SUBMISSION = ("submission_benchmark", "submission_division", "submission_org", "submission_platform")
LIFECYCLE = frozenset(
    {
        "init_start", "init_stop", "run_start", "run_stop", "block_start", "block_stop", "epoch_start",
        "epoch_stop", "eval_start", "eval_stop", "eval_accuracy", "cache_clear", "tracked_stats", "train_loss",
        *SUBMISSION,
    }
)  # fmt: skip
"""Keys that are events of the run; every other key with a scalar value is a hyperparameter."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """One ``:::MLLOG`` line."""

    line: int
    time_ms: float
    event_type: str
    key: str
    value: Any
    metadata: dict[str, Any]


@dataclass(slots=True, kw_only=True)
class RunLog:
    """What one run's log says."""

    where: str
    """The file (or output) it was read from, for messages."""
    events: list[Event]
    submission: dict[str, str] = field(default_factory=dict)
    """benchmark, division, org, platform: as logged, without the ``submission_`` prefix."""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    status: str | None = None
    """run_stop's ``status``: "success", "aborted"; None without a run_stop."""
    start_ms: float | None = None
    stop_ms: float | None = None
    evals: list[tuple[int, float]] = field(default_factory=list)
    """(samples_count, eval_accuracy) in the order logged."""
    throughput: list[tuple[int, float]] = field(default_factory=list)
    """(step, samples/s) of the ``tracked_stats`` events that carry one."""

    @property
    def benchmark(self) -> str:
        return self.submission.get("benchmark", "")

    @property
    def converged(self) -> bool:
        """run_stop says success: an aborted run never counts as converged, whatever the checker says of it."""
        return self.status == "success" and self.start_ms is not None and self.stop_ms is not None

    @property
    def time_to_train_s(self) -> float | None:
        """run_start to run_stop in seconds, for a converged run only (MLPerf's time-to-train)."""
        if not self.converged or self.start_ms is None or self.stop_ms is None:
            return None
        return (self.stop_ms - self.start_ms) / 1000.0


def read_bounded(path: Path) -> str:
    """A log file's text, refusing what is not a regular file or is larger than ``MAX_LOG_BYTES``."""
    if not path.is_file():
        raise OutputError(f"{path}: not a regular file; expected an MLPerf log (`{TOKEN.strip()}` lines)")
    with path.open("rb") as handle:
        data = handle.read(MAX_LOG_BYTES + 1)
    if len(data) > MAX_LOG_BYTES:
        raise OutputError(
            f"{path}: more than {MAX_LOG_BYTES:,} bytes, which no MLPerf log is; is it still being written, or is "
            "it another file?"
        )
    return data.decode("utf-8", errors="replace")


def _number(text: str) -> float | int:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number of {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    value = float(text) if any(c in text for c in ".eE") else int(text)
    if not math.isfinite(value):
        raise ValueError(f"a number out of range ({text[:20]})")
    return value


def _constant(text: str) -> Any:
    raise ValueError(f"{text} is not a number JSON allows")


def parse_events(text: str, where: str) -> list[Event]:
    """The ``:::MLLOG`` events of ``text`` (other lines skipped, as the checker does); the first malformed one
    raises ``OutputError`` naming ``where`` and its line."""
    events: list[Event] = []
    for number, line in enumerate(text.splitlines(), start=1):
        at = line.find(TOKEN)
        if at < 0:
            continue
        if len(line) > MAX_LINE_CHARS:
            raise OutputError(
                f"{where}:{number}: an MLLOG line of {len(line)} characters, at most {MAX_LINE_CHARS} are read"
            )
        body = line[at + len(TOKEN) :]
        try:
            document = json.loads(body, parse_int=_number, parse_float=_number, parse_constant=_constant)
        except (ValueError, RecursionError) as error:
            raise OutputError(f"{where}:{number}: the MLLOG line is not JSON ({error}): {body[:120]}") from None
        events.append(_event(document, where, number))
    return events


def _event(document: Any, where: str, number: int) -> Event:
    if not isinstance(document, dict):
        found = type(document).__name__
        raise OutputError(f"{where}:{number}: expected a JSON object after {TOKEN.strip()}, found {found}")
    missing = [name for name in FIELDS if name not in document]
    if missing:
        raise OutputError(
            f"{where}:{number}: the MLLOG event lacks {', '.join(missing)} (mllog writes {', '.join(FIELDS)})"
        )
    time_ms, event_type, key, metadata = (document[k] for k in ("time_ms", "event_type", "key", "metadata"))
    if isinstance(time_ms, bool) or not isinstance(time_ms, (int, float)) or time_ms < 0:
        raise OutputError(f"{where}:{number}: time_ms is {time_ms!r}, expected milliseconds since the epoch")
    if event_type not in EVENT_TYPES:
        raise OutputError(f"{where}:{number}: event_type is {event_type!r}, expected one of {', '.join(EVENT_TYPES)}")
    if not isinstance(key, str) or not key:
        raise OutputError(f"{where}:{number}: key is {key!r}, expected a name such as 'run_start'")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise OutputError(f"{where}:{number}: metadata of '{key}' is {type(metadata).__name__}, expected an object")
    return Event(line=number, time_ms=float(time_ms), event_type=event_type, key=key, value=document["value"],
                 metadata=metadata)  # fmt: skip


def _count(event: Event, name: str, where: str) -> int:
    value = event.metadata.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or value != int(value):
        raise OutputError(
            f"{where}:{event.line}: '{event.key}' has metadata {name}={value!r}, expected a whole number >= 0"
        )
    return int(value)


def _figure(event: Event, value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise OutputError(f"{where}:{event.line}: '{event.key}' is {value!r}, expected a number")
    return float(value)


def summarize(events: list[Event], where: str) -> RunLog:
    """One run from its events; a second run_start (two runs in one file) or a log without its run's ends
    raises ``OutputError``."""
    run = RunLog(where=where, events=events)
    for event in events:
        key = event.key
        if key in SUBMISSION:
            if not isinstance(event.value, str):
                raise OutputError(f"{where}:{event.line}: '{key}' is {event.value!r}, expected a name")
            run.submission[key.removeprefix("submission_")] = event.value
        elif key == "run_start":
            if run.start_ms is not None:
                raise OutputError(f"{where}:{event.line}: a second run_start: one run per log (result_N.txt)")
            run.start_ms = event.time_ms
        elif key == "run_stop":
            status = event.metadata.get("status")
            if not isinstance(status, str):
                raise OutputError(
                    f"{where}:{event.line}: run_stop has status {status!r}, expected 'success' or 'aborted'"
                )
            run.stop_ms, run.status = event.time_ms, status
        elif key == "eval_accuracy":
            run.evals.append((_count(event, "samples_count", where) if "samples_count" in event.metadata
                              else _count(event, "epoch_num", where), _figure(event, event.value, where)))  # fmt: skip
        elif key == "tracked_stats" and isinstance(event.value, dict) and "throughput" in event.value:
            step = _count(event, "step", where) if "step" in event.metadata else len(run.throughput)
            run.throughput.append((step, _figure(event, event.value["throughput"], where)))
        elif key not in LIFECYCLE and event.event_type == "POINT_IN_TIME":
            if isinstance(event.value, (str, int, float, bool)):
                run.hyperparameters.setdefault(key, event.value)
    if run.start_ms is None:
        raise OutputError(f"{where}: no run_start in {len(events)} MLLOG line(s): the run never started timing")
    if run.stop_ms is None:
        last = events[-1].line if events else 0
        raise OutputError(
            f"{where}:{last}: the log ends without run_stop (truncated, or the run still going): no time-to-train"
        )
    if run.stop_ms < run.start_ms:
        raise OutputError(f"{where}: run_stop ({run.stop_ms:.0f} ms) is before run_start ({run.start_ms:.0f} ms)")
    return run


def read_run(text: str, where: str) -> RunLog:
    """``parse_events`` then ``summarize``."""
    return summarize(parse_events(text, where), where)
