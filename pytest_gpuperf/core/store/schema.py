"""The one validator of what gpuperf's JSON documents may hold: strict parsing and the rules for each field.

Baseline files (baselines.py) and results files (results.py) share their parts (samples, curves, the stack, text,
flags); each owner checks its document's shape with these rules, so the plugin and every ``gpuperf`` command
accept and refuse exactly the same files, and a value a test records passes them when it is recorded. Stricter
than ``json``: a key given twice, ``NaN``/``Infinity``, numbers beyond float range and nesting the parser cannot
follow are errors. Every document is read through ``read_file``: regular files only, a bounded number of bytes.
Why not a JSON Schema library: docs/design/own-json-validator.md. Imports nothing of the package above it.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Literal, TypeGuard

SAMPLE_MIN = 1e-100
SAMPLE_MAX = 1e100
"""Samples are positive times, rates or sizes. Within [1e-100, 1e100] every ratio, product and sum of millions
of them stays finite in float64, so the statistics cannot overflow; no physical measurement comes near."""
VALUE_MAX = 1e100
"""Largest magnitude of a curve value (losses, throughputs) for the same reason."""
MAX_INTEGER_DIGITS = 100
MAX_DEPTH = 64
"""Deepest nesting of a recorded context: far beyond any real one, far within what the parser can read back."""
MAX_BYTES = 256 * 1024 * 1024
"""Larger files are refused rather than read into memory (a 200 MB baseline file is still read whole)."""
SLUG_PATTERN = re.compile(r"[a-z0-9][a-z0-9-]*")
"""A hardware slug names a folder under the baselines root: lower-case words and dashes, nothing else."""


class SchemaError(ValueError):
    """What is wrong with a document, in one line; the caller adds the file's name."""


FileProblemKind = Literal["missing", "folder", "special", "large", "unreadable"]


class UnreadableFile(Exception):
    """A path that is no regular file of a size gpuperf reads, or that cannot be read.

    ``problem`` says what is wrong without the path, ``hint`` the usual next step; ``kind`` lets a reader with a
    better next step of its own (the baseline store) say that instead. ``str()`` is the whole one-line message."""

    def __init__(self, path: Path, kind: FileProblemKind, problem: str, hint: str = "") -> None:
        super().__init__(f"{path}: {problem}" + (f"; {hint}" if hint else ""))
        self.path = path
        self.kind = kind
        self.problem = problem
        self.hint = hint


# -- strict JSON ------------------------------------------------------------------------------------------------


def loads(text: str | bytes) -> Any:
    """Parse JSON strictly (see the module docstring); raises SchemaError with the position of the problem."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as error:
            raise SchemaError(f"not UTF-8 text (byte {error.start})") from None
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_reject_constant,
            parse_int=_parse_int,
            parse_float=_parse_float,
        )
    except json.JSONDecodeError as error:
        tail = text[error.pos :].rstrip()
        ends_early = error.pos >= len(text.rstrip()) - 1 or (error.msg.startswith("Unterminated") and "\n" not in tail)
        what = "truncated, the JSON ends early" if ends_early else "not valid JSON"
        raise SchemaError(f"{what} ({error.msg} at line {error.lineno} column {error.colno})") from None
    except RecursionError:
        raise SchemaError("not valid JSON: nested too deeply to read") from None


def dumps(document: Any) -> str:
    """The text written to disk: sorted and indented (diffable), never NaN or Infinity."""
    try:
        return json.dumps(document, indent=1, sort_keys=True, allow_nan=False) + "\n"
    except ValueError as error:
        where = non_finite(document)
        raise SchemaError(f"holds a value JSON cannot carry{f' at {where}' if where else ''} ({error})") from None
    except TypeError as error:  # recorders refuse such values (plain); this is the last guard, never a traceback
        raise SchemaError(f"holds a value JSON cannot carry ({error})") from None
    except RecursionError:
        raise SchemaError("nested too deeply to write") from None


# -- reading files ----------------------------------------------------------------------------------------------


def read_file(path: Path, *, limit: int = MAX_BYTES) -> bytes:
    """The bytes of one regular file, at most ``limit`` of them; UnreadableFile says why not.

    The one reader of every document gpuperf parses (baseline files, results files, model configurations).
    Devices and FIFOs are refused before anything is read: ``/dev/zero`` reports size 0 and never ends, a FIFO
    blocks its reader until someone writes. The file is opened non-blocking (a FIFO swapped in after the check
    does not hang the open) and checked again on the open descriptor; the read itself stops at ``limit + 1``
    bytes, because the reported size can lie (``/proc`` files report 0, a file can grow while it is read).
    """
    try:
        _check_regular(path, os.stat(path).st_mode)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | os.O_CLOEXEC)
        with os.fdopen(descriptor, "rb", buffering=0) as handle:
            status = os.fstat(handle.fileno())
            _check_regular(path, status.st_mode)
            if status.st_size > limit:
                raise UnreadableFile(
                    path, "large", f"{status.st_size} bytes is larger than the {limit} bytes a file may have"
                )
            chunks, total = [], 0
            while total <= limit:
                chunk = handle.read(min(1 << 20, limit + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > limit:
                raise UnreadableFile(
                    path, "large", f"more than the {limit} bytes a file may have (larger than its reported size)"
                )
            return b"".join(chunks)
    except FileNotFoundError:
        raise UnreadableFile(path, "missing", "no such file or folder") from None
    except NotADirectoryError:
        raise UnreadableFile(path, "missing", "no such file (a part of the path is a file, not a folder)") from None
    except IsADirectoryError:
        raise UnreadableFile(path, "folder", "is a folder where a file was expected") from None
    except OSError as error:
        hint = "check its permissions" if isinstance(error, PermissionError) else ""
        raise UnreadableFile(path, "unreadable", f"cannot be read ({error.strerror or error})", hint) from None


def check_regular_file(path: Path) -> None:
    """Refuse, as ``read_file`` would, a path that is no regular file, without opening it."""
    try:
        _check_regular(path, os.stat(path).st_mode)
    except FileNotFoundError:
        raise UnreadableFile(path, "missing", "no such file or folder") from None
    except OSError as error:
        hint = "check its permissions" if isinstance(error, PermissionError) else ""
        raise UnreadableFile(path, "unreadable", f"cannot be read ({error.strerror or error})", hint) from None


def _check_regular(path: Path, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    if stat.S_ISDIR(mode):
        raise UnreadableFile(path, "folder", "is a folder where a file was expected")
    kind = (
        "character device"
        if stat.S_ISCHR(mode)
        else "block device"
        if stat.S_ISBLK(mode)
        else "FIFO (named pipe)"
        if stat.S_ISFIFO(mode)
        else "socket"
        if stat.S_ISSOCK(mode)
        else "special file"
    )
    raise UnreadableFile(path, "special", f"is a {kind}, not a regular file", "save the data to a file and give that")


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in pairs:
        if key in document:
            raise SchemaError(f"not valid JSON: key {quote(key)} appears twice in one object")
        document[key] = value
    return document


def _reject_constant(name: str) -> None:
    raise SchemaError(f"not valid JSON: {name} is not a number a gpuperf file may hold")


def _parse_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INTEGER_DIGITS:
        raise SchemaError(f"not valid JSON: an integer of {digits} digits is beyond any figure gpuperf stores")
    return int(text)


def _parse_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise SchemaError(f"not valid JSON: {text[:30]} is beyond the range of a float")
    return value


def non_finite(value: Any) -> str | None:
    """Where a nested value holds NaN or infinity ("peak.mib", "values[3]"), or None. Iterative: any depth."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        where, item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return where or "the value"
        if isinstance(item, dict):
            stack.extend((f"{where}.{key}" if where else str(key), child) for key, child in item.items())
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{where}[{index}]", child) for index, child in enumerate(item))
    return None


def plain(value: Any, where: str) -> Any:
    """``value`` as the JSON a gpuperf file may hold, or SchemaError naming ``where`` and the entry ("peak.mib").

    What a workload records passes here at the call: numpy and torch scalars, and 0-d arrays and tensors, become
    Python numbers (their ``item()``), tuples become lists, a ``str`` subclass plain text. Refused: other arrays
    and tensors, sets, other objects, keys that are not text (JSON has none, and sorting mixed keys fails),
    integers of more than MAX_INTEGER_DIGITS digits (the parser refuses them), nesting deeper than MAX_DEPTH.
    NaN and infinity pass: ``non_finite`` finds them, a verdict of their own (the measurement diverged). numpy and
    torch are never imported here: such a value is known by its ``shape`` and ``item``."""
    return _plain(value, where, "", 0)


def _plain(value: Any, where: str, path: str, depth: int) -> Any:
    label = f"{where} {quote(path)}" if path else where
    if depth > MAX_DEPTH:
        raise SchemaError(f"{label} is nested more than {MAX_DEPTH} levels deep; record a flatter object")
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):
        return str(value)
    if isinstance(value, int):
        if abs(value) >= 10**MAX_INTEGER_DIGITS:
            raise SchemaError(
                f"{label} is an integer of more than {MAX_INTEGER_DIGITS} digits, which no gpuperf file can hold; "
                "record float(x) instead"
            )
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, dict):
        converted: dict[str, Any] = {}
        for key, child in value.items():
            if not isinstance(key, str):
                raise SchemaError(
                    f"{label} has the key {quote(key)} ({type(key).__name__}); keys must be text: use str(key)"
                )
            converted[str(key)] = _plain(child, where, f"{path}.{key}" if path else str(key), depth + 1)
        return converted
    if isinstance(value, (list, tuple)):
        return [_plain(child, where, f"{path}[{index}]", depth + 1) for index, child in enumerate(value)]
    shape, item = getattr(value, "shape", None), getattr(value, "item", None)
    if shape is not None and callable(item):
        try:
            dims = tuple(shape)
        except TypeError:
            dims = None
        if dims == ():  # a numpy or torch scalar, or a 0-d array or tensor
            number = item()
            if isinstance(number, (bool, int, float)):
                return _plain(number, where, path, depth)
        elif dims is not None:
            raise SchemaError(
                f"{label} is an array of shape {dims} ({type(value).__name__}), which no gpuperf file can hold; "
                "record a number (float(x)) or a list (x.tolist())"
            )
    if isinstance(value, (set, frozenset)):
        raise SchemaError(f"{label} is a {type(value).__name__}, which no gpuperf file can hold; record sorted(x)")
    raise SchemaError(
        f"{label} is a {type(value).__name__} ({quote(value, 40)}), which no gpuperf file can hold; record numbers, "
        "text, True/False, None, lists and dicts with text keys"
    )


# -- field rules --------------------------------------------------------------------------------------------------


def is_number(value: Any) -> TypeGuard[int | float]:
    """A JSON number: int or float, never a boolean, finite (a huge int counts as not finite)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    return abs(value) <= 1.7e308


def samples(raw: Any, where: str) -> list[float]:
    """Repeated samples of one metric: a non-empty list of positive numbers within [SAMPLE_MIN, SAMPLE_MAX]."""
    values = require_list(raw, where, "samples")
    if not values:
        raise SchemaError(f"{where}: samples must be a non-empty list of numbers")
    for index, value in enumerate(values):
        if not is_number(value):
            raise SchemaError(f"{where}: samples[{index}] is {kind(value)}; samples must be finite numbers")
        if value <= 0:
            raise SchemaError(f"{where}: samples[{index}] is {value!r}; samples must be positive (times, rates, sizes)")
        if not SAMPLE_MIN <= value <= SAMPLE_MAX:
            raise SchemaError(
                f"{where}: samples[{index}] is {float(value):.4g}; samples must be between "
                f"{SAMPLE_MIN:g} and {SAMPLE_MAX:g}"
            )
    return [float(value) for value in values]


def sample_problem(values: list[float]) -> tuple[int, str] | None:
    """For a recorder: the first sample that is no number the verdict can use, as (index, why), or None."""
    for index, value in enumerate(values):
        if not math.isfinite(value):
            return index, f"is {value}"
        if value > 0 and not SAMPLE_MIN <= value <= SAMPLE_MAX:
            return index, f"is {value:.4g}, beyond what the statistics can hold ({SAMPLE_MIN:g} to {SAMPLE_MAX:g})"
    return None


def curve(steps: Any, values: Any, where: str) -> tuple[list[int], list[float]]:
    """A curve: whole-number steps and finite values of equal length."""
    step_list = require_list(steps, where, "steps")
    value_list = require_list(values, where, "values")
    if len(step_list) != len(value_list):
        raise SchemaError(f"{where}: {len(step_list)} steps but {len(value_list)} values; they must pair up")
    for index, step in enumerate(step_list):
        if not is_number(step) or float(step) != int(step) or abs(step) >= 10.0**MAX_INTEGER_DIGITS:
            raise SchemaError(
                f"{where}: steps[{index}] is {quote(step)}; steps must be whole numbers of at most "
                f"{MAX_INTEGER_DIGITS} digits"
            )
    for index, value in enumerate(value_list):
        if not is_number(value) or abs(value) > VALUE_MAX:
            raise SchemaError(
                f"{where}: values[{index}] is {quote(value)}; values must be numbers within +-{VALUE_MAX:g}"
            )
    return [int(step) for step in step_list], [float(value) for value in value_list]


def value_problem(values: list[float]) -> tuple[int, str] | None:
    """For a recorder: the first curve value that is not finite or beyond VALUE_MAX, as (index, why), or None."""
    for index, value in enumerate(values):
        if not math.isfinite(value):
            return index, f"{value}"
        if abs(value) > VALUE_MAX:
            return index, f"{value:.4g} (beyond +-{VALUE_MAX:g})"
    return None


def stack(raw: Any, where: str) -> dict[str, str]:
    """Component versions: an object of names to text (numbers are read as text)."""
    data = require_object(raw, where, "stack")
    for name, version in data.items():
        if isinstance(version, bool) or not isinstance(version, (str, int, float)):
            raise SchemaError(
                f"{where}: 'stack' entry {quote(name)} is {kind(version)}; a stack is an object of component versions"
            )
    return {str(name): str(version) for name, version in data.items()}


def text(raw: Any, where: str, name: str, *, empty: bool = False) -> str:
    if not isinstance(raw, str) or (not raw and not empty):
        raise SchemaError(f"{where}: {quote(name)} is {kind(raw)}, not {'a' if empty else 'a non-empty'} string")
    return raw


def flag(raw: Any, where: str, name: str) -> bool:
    if not isinstance(raw, bool):
        raise SchemaError(f"{where}: {quote(name)} is {kind(raw)}, not true/false")
    return raw


def require_object(raw: Any, where: str, name: str) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise SchemaError(f"{where}: {quote(name)} is {kind(raw)}, not an object")
    return raw


def require_list(raw: Any, where: str, name: str) -> list[Any]:
    if not isinstance(raw, list):
        raise SchemaError(f"{where}: {quote(name)} is {kind(raw)}, not a list")
    return raw


def only_fields(data: dict[str, Any], where: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> None:
    missing = [name for name in required if name not in data]
    if missing:
        raise SchemaError(f"{where} lacks {', '.join(missing)}")
    extra = sorted(set(data) - set(required) - set(optional))
    if extra:
        raise SchemaError(f"{where} has unknown fields {', '.join(extra)}")


def slug(raw: Any, where: str) -> str:
    if not isinstance(raw, str) or not SLUG_PATTERN.fullmatch(raw):
        raise SchemaError(f"{where}: 'hardware_slug' is {quote(raw)}, not a slug (lower-case letters, digits, dashes)")
    return raw


# -- message parts ------------------------------------------------------------------------------------------------


def quote(value: Any, limit: int = 60) -> str:
    """A value for a one-line message: its repr, cut to ``limit`` characters."""
    shown = repr(value)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."


def kind(value: Any) -> str:
    if value is None:
        return "missing"
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), "a number")
