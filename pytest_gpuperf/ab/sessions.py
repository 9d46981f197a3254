"""The child processes of `gpuperf ab`: each session a `Supervised` child (core/record/children.py), started,
stopped with its group and its strays ended; AbError, the one-line failure of a comparison. The runners
(ab/engine.py, ab/turns.py) hold each session's ``Popen``; this module keeps the `Supervised` behind it until its
group is known to be gone."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pytest_gpuperf.core.record.children import Stopping, Supervised

if TYPE_CHECKING:
    from pytest_gpuperf.ab.engine import AbResult


class AbError(Exception):
    """A comparison that cannot go on (bad command, different machines, sessions that keep failing); one line.

    ``result`` holds what was measured until then, so the caller can still write it."""

    def __init__(self, message: str, result: AbResult | None = None) -> None:
        super().__init__(message)
        self.result = result


STOPPING = Stopping()
"""SIGINT (pytest writes what it has), SIGTERM, SIGKILL, 5 s apart."""

_STARTED: list[Supervised] = []
"""Sessions started and not yet known to be gone with their groups: the taking-turns runner (ab/turns.py)
starts and waits for its own, so the engine ends their strays after each pair and stops them all on its way out."""


def start_session(argv: list[str], log: IO[bytes], *, cwd: Path | None, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """One session's process, output to ``log``, no shell, leading a process group of its own (a wrapper's
    children are stopped with it); AbError names a command that cannot be run."""
    try:
        child = Supervised(argv, stdout=log, cwd=cwd, env=env, stopping=STOPPING)
    except FileNotFoundError:
        raise AbError(f"command not found: {shlex.quote(argv[0])} (from {shlex.join(argv[:3])} ...)") from None
    except PermissionError:
        raise AbError(f"command not executable: {shlex.quote(argv[0])}") from None
    _STARTED.append(child)
    return child.process


def stop_session(process: subprocess.Popen[bytes]) -> None:
    """The session's whole process group: SIGINT (pytest writes what it has), SIGTERM, SIGKILL, 5 s apart."""
    child = next((child for child in _STARTED if child.process is process), None)
    if child is not None:  # else its group was found gone already (end_strays, stop_all): nothing is left to stop
        child.stop()


def end_strays() -> None:
    """End what finished sessions left running in their groups (a wrapper's background job)."""
    for child in list(_STARTED):
        if child.poll() is not None:
            child.end_strays()
            _STARTED.remove(child)


def stop_all() -> None:
    """Every session still running, with its group: the comparison is over (an error, Ctrl-C)."""
    for child in list(_STARTED):
        child.close()
        _STARTED.remove(child)
