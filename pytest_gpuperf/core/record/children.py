"""Child processes that must not outlive what started them: each in a process group of its own, stopped as a
group.

A command run as a child is often a wrapper (`sh wrap.sh`, `env X=1 python`, a container client) whose real work
runs in a grandchild. Signalling only the direct child leaves the grandchild running: it keeps measuring after its
caller moved on, beside the next child. So a child starts a new session (``start_new_session``, which also keeps
a terminal's Ctrl-C from reaching it before its caller decides), everything it starts inherits that process group,
and stopping signals the whole group: SIGINT first (pytest then writes what it has), SIGTERM, then SIGKILL, each
after a grace period. On Linux the child also asks the kernel to SIGTERM it when its caller dies without stopping
it (PR_SET_PDEATHSIG), so a killed caller takes its children along (a wrapper that ignores SIGTERM keeps its
grandchildren; nothing outside the killed process can help that).

The same scheme as inference/servers.py (servers) and distributed/pool.py (ranks); this module is the small,
torch-free form the command line uses. Group members that have exited but were not reaped (zombies, which a
container's PID 1 may never reap) count as gone.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
"""The order a group is stopped in: SIGINT lets pytest write its results, SIGTERM ends what ignores SIGINT."""
GRACE_S = 5.0
"""How long each signal is given before the next."""
POLL_S = 0.05


def start_group(
    argv: Sequence[str], *, stdout: IO[bytes] | int | None, cwd: Path | None, env: dict[str, str]
) -> subprocess.Popen[bytes]:
    """``argv`` as the leader of a new process group (and session), standard input closed, output (and errors)
    to ``stdout``; no shell. OSError (FileNotFoundError, PermissionError) when it cannot be started."""
    return subprocess.Popen(
        list(argv),
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.STDOUT,
        cwd=cwd,
        env=env,
        start_new_session=True,
        preexec_fn=_die_with_parent(),
    )


def stop_group(process: subprocess.Popen[bytes], *, grace: float = GRACE_S) -> None:
    """Stop ``process`` and everything in its process group: SIGINT, SIGTERM, SIGKILL, each given ``grace``
    seconds; returns once the group is gone, or after the SIGKILL's grace (a process stuck in the kernel)."""
    group = process.pid  # start_group: the child leads its own group
    for sig in STOP_SIGNALS:
        if process.poll() is not None and not group_alive(group):
            return
        _signal(process, group, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if process.poll() is not None and not group_alive(group):
                return
            time.sleep(POLL_S)
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=grace)


def end_strays(process: subprocess.Popen[bytes], *, grace: float = GRACE_S) -> bool:
    """After ``process`` has exited: stop what it left running in its group (a wrapper's background job, a
    grandchild that outlived the wrapper); True when there was something. Strays get SIGTERM, then SIGKILL."""
    if process.poll() is None or not group_alive(process.pid):
        return False
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and group_alive(process.pid):
            time.sleep(POLL_S)
        if not group_alive(process.pid):
            break
    return True


def group_alive(group: int) -> bool:
    """Whether any process of the group ``group`` still runs (zombies do not count where /proc shows them)."""
    members = _members_from_proc(group)
    if members is not None:
        return members > 0
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def alive(pid: int) -> bool:
    """Whether the process ``pid`` runs (a zombie does not), for callers and tests checking nothing was left."""
    state = _proc_state(Path(f"/proc/{pid}/stat"))
    if state is not None:
        return state[0] not in "ZX"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal(process: subprocess.Popen[bytes], group: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)
    if process.poll() is None:  # a leader that left its group (setsid of its own) still gets the signal
        with contextlib.suppress(ProcessLookupError, PermissionError):
            process.send_signal(sig)


def _members_from_proc(group: int) -> int | None:
    """How many running (not zombie) processes are in the group, from /proc; None where there is no /proc."""
    proc = Path("/proc")
    if not (proc / "self" / "stat").exists():
        return None
    try:
        names = os.listdir(proc)
    except OSError:
        return None
    count = 0
    for name in names:
        if not name.isdigit():
            continue
        state = _proc_state(proc / name / "stat")
        if state is not None and state[1] == group and state[0] not in "ZX":
            count += 1
    return count


def _proc_state(stat_file: Path) -> tuple[str, int] | None:
    """(state letter, process group) from a /proc/PID/stat file, or None when it is gone or unreadable."""
    try:
        text = stat_file.read_bytes().decode("ascii", "replace")
    except OSError:
        return None
    # "pid (comm) state ppid pgrp ...": the command name may hold spaces and parentheses, so split after the last ")"
    fields = text[text.rfind(")") + 1 :].split()
    try:
        return fields[0], int(fields[2])
    except (IndexError, ValueError):
        return None


def _die_with_parent() -> Callable[[], None] | None:
    """On Linux, a pre-exec step asking the kernel to SIGTERM the child when its caller dies without stopping it
    (``gpuperf ab`` killed by a CI timeout). The libc function is looked up here, before the fork, so the child
    only makes system calls; a caller that died before the request took effect makes the child exit at once."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))
        if os.getppid() != parent:
            os._exit(128 + int(signal.SIGTERM))

    return set_death_signal
