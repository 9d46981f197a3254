"""The child processes of `gpuperf ab`: each session in a process group of its own, started, stopped and its strays
ended (core/record/children.py does the signalling); AbError, the one-line failure of a comparison."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import IO, TYPE_CHECKING

from pytest_gpuperf.core.record import children

if TYPE_CHECKING:
    from pytest_gpuperf.ab.engine import AbResult


class AbError(Exception):
    """A comparison that cannot go on (bad command, different machines, sessions that keep failing); one line.

    ``result`` holds what was measured until then, so the caller can still write it."""

    def __init__(self, message: str, result: AbResult | None = None) -> None:
        super().__init__(message)
        self.result = result


_STARTED: list[subprocess.Popen[bytes]] = []
"""Sessions started and not yet known to be gone with their groups: the taking-turns runner (ab/turns.py)
starts and waits for its own, so the engine ends their strays after each pair and stops them all on its way out."""


def start_session(argv: list[str], log: IO[bytes], *, cwd: Path | None, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """One session's process, output to ``log``, no shell, leading a process group of its own (a wrapper's
    children are stopped with it); AbError names a command that cannot be run."""
    try:
        process = children.start_group(argv, stdout=log, cwd=cwd, env=env)
    except FileNotFoundError:
        raise AbError(f"command not found: {shlex.quote(argv[0])} (from {shlex.join(argv[:3])} ...)") from None
    except PermissionError:
        raise AbError(f"command not executable: {shlex.quote(argv[0])}") from None
    _STARTED.append(process)
    return process


def stop_session(process: subprocess.Popen[bytes]) -> None:
    """The session's whole process group: SIGINT (pytest writes what it has), SIGTERM, SIGKILL, 5 s apart."""
    children.stop_group(process)


def end_strays() -> None:
    """End what finished sessions left running in their groups (a wrapper's background job)."""
    for process in list(_STARTED):
        if process.poll() is not None:
            children.end_strays(process)
            _STARTED.remove(process)


def stop_all() -> None:
    """Every session still running, with its group: the comparison is over (an error, Ctrl-C)."""
    for process in list(_STARTED):
        if process.poll() is None:
            stop_session(process)
        else:
            children.end_strays(process)
        _STARTED.remove(process)
