"""The child processes of `gpuperf ab`: each session a `Supervised` child (core/record/children.py), started
with ab's stopping sequence and kept here until its group is known to be gone, so the engine can end the strays
of finished sessions after each pair and stop every session on its way out. May import ab/model.py and core/."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import IO

from pytest_gpuperf.ab.model import AbError
from pytest_gpuperf.core.record.children import Stopping, Supervised

STOPPING = Stopping()
"""SIGINT (pytest writes what it has), SIGTERM, SIGKILL, 5 s apart."""

_STARTED: list[Supervised] = []
"""Sessions started and not yet known to be gone with their groups: the taking-turns runner (ab/turns.py)
starts and waits for its own, so the engine ends their strays after each pair and stops them all on its way out."""


def start_session(argv: list[str], log: IO[bytes], *, cwd: Path | None, env: dict[str, str]) -> Supervised:
    """One session's process, output to ``log``, no shell, leading a process group of its own (a wrapper's
    children are stopped with it); AbError names a command that cannot be run."""
    try:
        child = Supervised(argv, stdout=log, cwd=cwd, env=env, stopping=STOPPING)
    except FileNotFoundError:
        raise AbError(f"command not found: {shlex.quote(argv[0])} (from {shlex.join(argv[:3])} ...)") from None
    except PermissionError:
        raise AbError(f"command not executable: {shlex.quote(argv[0])}") from None
    _STARTED.append(child)
    return child


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
