"""`Supervised`: a child process that must not outlive what started it, stopped as a group with what it started.

Invariants: a child leads a process group (and session) of its own, so everything it starts is stopped with it;
stopping signals the whole group, one signal after another from ``Stopping.first`` on (SIGINT, SIGTERM, SIGKILL),
each after its grace; what a child leaves in its group after it exits is ended; on Linux the kernel sends the
child a death signal when its caller dies without stopping it. Members that exited but were not reaped
(zombies) count as gone unless the caller waits for their reaping; ``catching_orphans`` ends a daemon that left
its group. ``signals_interrupt`` makes SIGTERM and SIGHUP stop an entry point as Ctrl-C does. Used by `gpuperf
ab` and `bisect`, the pytest session, ``perf.run_command``, the inference servers and the rank pool. Standard
library only (the ranks import it before torch). Why: docs/design/supervised-children.md.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType, TracebackType
from typing import IO

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGKILL)
"""The order a group is stopped in: SIGINT lets pytest write its results, SIGTERM ends what ignores SIGINT."""
GRACE_S = 5.0
"""How long each signal is given before the next, unless the caller says."""
POLL_S = 0.05
STRAY_SIGNALS = (signal.SIGTERM, signal.SIGKILL)
"""What strays get: the leader has exited, nothing is left that writes results on SIGINT."""
INTERRUPTING_SIGNALS = tuple(
    sig for sig in (signal.SIGINT, getattr(signal, "SIGTERM", None), getattr(signal, "SIGHUP", None)) if sig
)
"""Ctrl-C, a job's cancel or eviction (SIGTERM: Slurm's --time and scancel, Kubernetes) and a closed terminal
(SIGHUP): each stops a long-running entry point as Ctrl-C does (``signals_interrupt``)."""


@contextlib.contextmanager
def signals_interrupt(
    signals: Sequence[int] = INTERRUPTING_SIGNALS, *, defer_first: Callable[[int], bool] | None = None
) -> Iterator[list[int]]:
    """While inside, each of ``signals`` raises KeyboardInterrupt in the main thread, so every entry point stops
    on SIGTERM or SIGHUP along the path Ctrl-C takes (its children's groups stopped, what finished written);
    yields the signals received. One stop is enough: later signals are noted, not raised again, so they cannot
    cut short the stopping of the children or the writing of the results. ``defer_first``: asked at the first
    signal whether raising now would only lose what is being kept (True: noted, and only a second signal
    raises): xdist's controller has passed it to workers that stop on their own, or a session is already
    writing its results. Off the main thread: nothing is set."""
    received: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield received
        return
    raise_at = [1]

    def interrupt(number: int, frame: FrameType | None) -> None:
        received.append(number)
        if len(received) == 1 and defer_first is not None and defer_first(number):
            raise_at[0] = 2
        elif len(received) == raise_at[0]:
            raise KeyboardInterrupt

    previous = {number: signal.signal(number, interrupt) for number in signals}
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


@dataclass(frozen=True, slots=True, kw_only=True)
class Stopping:
    """How a supervised group is stopped: the signals of ``STOP_SIGNALS`` from ``first`` on, each given its grace
    before the next; after SIGKILL's grace the leader is waited for as long again (a process stuck in the kernel)."""

    first: signal.Signals = signal.SIGINT
    """Where the sequence starts: SIGINT for a pytest session or a user's command (it writes what it has), SIGTERM
    for a server."""
    grace: float = GRACE_S
    """Seconds each signal before SIGKILL is given."""
    kill_grace: float | None = None
    """Seconds SIGKILL is given, and then the leader's wait; None: ``grace``."""
    poll_s: float = POLL_S
    """How often the group is looked at while a grace runs."""
    until_reaped: bool = False
    """Whether the group is gone only once its exited members are reaped too (``killpg`` finds none), as servers
    have waited; else a zombie counts as gone (a container's PID 1 may never reap one)."""

    def __post_init__(self) -> None:
        if self.first not in STOP_SIGNALS:
            raise ValueError(f"Stopping(first={self.first!r}): expected one of {[s.name for s in STOP_SIGNALS]}")
        graces = {"grace": self.grace, "kill_grace": self.kill_grace, "poll_s": self.poll_s}
        for name, value in graces.items():
            if value is not None and not value > 0:
                raise ValueError(f"Stopping({name}={value!r}): expected seconds > 0")

    def steps(self) -> tuple[tuple[signal.Signals, float], ...]:
        """(signal, seconds it is given) in the order they are sent."""
        kill = self.grace if self.kill_grace is None else self.kill_grace
        chosen = STOP_SIGNALS[STOP_SIGNALS.index(self.first) :]
        return tuple((sig, kill if sig == signal.SIGKILL else self.grace) for sig in chosen)


class Supervised:
    """``argv`` started as the leader of a new process group and session: standard input closed, output and errors
    to ``stdout``, no shell. OSError (FileNotFoundError, PermissionError) when it cannot be started.

    ``death_signal``: what the kernel sends the child when this process dies without stopping it (Linux; None:
    nothing). As a context manager, the group is stopped (or, after the leader exited, its strays ended) on exit."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        stdout: IO[bytes] | int | None = None,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        stopping: Stopping | None = None,
        death_signal: signal.Signals | None = signal.SIGTERM,
    ) -> None:
        self.argv = list(argv)
        self.stopping = stopping if stopping is not None else Stopping()
        self.process: subprocess.Popen[bytes] = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=env,
            start_new_session=True,  # its own group: stop() reaches what it starts; a terminal's Ctrl-C does not
            preexec_fn=None if death_signal is None else death_signal_step(death_signal, parent=os.getpid()),
        )

    @property
    def pid(self) -> int:
        """The leader's pid, which is also its process group's id."""
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.returncode

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        """The leader's exit status; subprocess.TimeoutExpired after ``timeout`` seconds (nothing is stopped)."""
        return self.process.wait(timeout=timeout)

    def running(self, *, until_reaped: bool = False) -> bool:
        """Whether the leader or anything of its group still runs (``until_reaped``: or is not yet reaped)."""
        if self.process.poll() is None:
            return True
        return _group_exists(self.pid) if until_reaped else group_alive(self.pid)

    def stop(self, stopping: Stopping | None = None) -> bool:
        """Stop the leader and everything in its group, one signal after another (``stopping``, else the one it was
        started with); returns once the group is gone, or after the SIGKILL's grace and the leader's wait: True
        when the leader was reaped. Interrupted while it waits out a grace (a test's budget raising again, a second
        Ctrl-C), it kills the group at once and lets the interruption go on: an abandoned stop left running what
        ignored the signals sent so far."""
        plan = self.stopping if stopping is None else stopping
        group = self.pid
        steps = plan.steps()
        try:
            for sig, grace in steps:
                if not self.running(until_reaped=plan.until_reaped):
                    return True
                # the leader is in the group for good (a session leader cannot move), so it gets each signal once
                signal_group(group, sig)
                deadline = time.monotonic() + grace
                while time.monotonic() < deadline:
                    if not self.running(until_reaped=plan.until_reaped):
                        return True
                    time.sleep(plan.poll_s)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=steps[-1][1])
        except BaseException:
            signal_group(group, signal.SIGKILL)
            raise
        return self.process.returncode is not None

    def end_strays(self, *, grace: float | None = None) -> bool:
        """After the leader has exited: end what it left running in its group (a wrapper's background job, a
        grandchild that outlived the wrapper), SIGTERM then SIGKILL, each given ``grace`` (default: the stopping
        grace); True when there was something."""
        if self.process.poll() is None or not group_alive(self.pid):
            return False
        wait_s = self.stopping.grace if grace is None else grace
        for sig in STRAY_SIGNALS:
            signal_group(self.pid, sig)
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline and group_alive(self.pid):
                time.sleep(self.stopping.poll_s)
            if not group_alive(self.pid):
                break
        return True

    def close(self) -> None:
        """Nothing of the child may run on: stop the group while the leader runs, else end its strays."""
        if self.process.poll() is None:
            self.stop()
        else:
            self.end_strays()

    def __enter__(self) -> Supervised:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()


def signal_group(group: int, sig: int) -> None:
    """Send ``sig`` to every process of the group ``group``; a group already gone (or no longer ours) is not an
    error: the caller looks at what is left."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, sig)


def group_alive(group: int) -> bool:
    """Whether any process of the group ``group`` still runs (zombies do not count where /proc shows them)."""
    members = _members_from_proc(group)
    if members is not None:
        return members > 0
    return _group_exists(group)


def _group_exists(group: int) -> bool:
    """Whether the group has any member, a zombie included."""
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


def death_signal_step(sig: int, *, parent: int) -> Callable[[], None] | None:
    """On Linux, a step for the child to run (a pre-exec step, or a spawned process's first line) asking the kernel
    to send it ``sig`` when ``parent`` dies without stopping it; a parent already dead before the request took
    effect ends the child at once, as the signal would have. None elsewhere, or where libc has no prctl.

    The libc function is looked up here, before a fork, so a pre-exec step only makes system calls."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def set_death_signal() -> None:
        prctl(pr_set_pdeathsig, int(sig), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(128 + int(sig))

    return set_death_signal


def die_with_parent(sig: int, *, parent: int) -> None:
    """In a child that was not started as `Supervised` (a spawned rank): arm the death signal now
    (``death_signal_step``), and end at once where ``parent`` is gone already, on any platform."""
    step = death_signal_step(sig, parent=parent)
    if step is not None:
        step()
    elif os.getppid() != parent:
        os._exit(128 + int(sig))


PR_SET_CHILD_SUBREAPER = 36


@contextlib.contextmanager
def catching_orphans(*, grace: float = GRACE_S) -> Iterator[bool]:
    """While inside, this process is a child subreaper (Linux): a daemon a command starts, which leaves its group
    (``setsid``, a double fork) and is orphaned, becomes this process's child instead of init's. On the way out,
    each such new child outside our process group is ended (SIGTERM to its group, then SIGKILL) and reaped.
    Yields whether the platform can do it; where it cannot (not Linux, no prctl), nothing is caught and
    docs/design/supervised-children.md says so."""
    prctl = _prctl()
    if prctl is None or prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        yield False
        return
    before = _own_children()
    try:
        yield True
    finally:
        prctl(PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0)
        ours = os.getpgrp()  # what this process starts itself without a group of its own stays in ours
        orphans = [pid for pid in _own_children() - before if _group(pid) not in (None, ours)]
        for sig in STRAY_SIGNALS:
            for pid in orphans:
                with contextlib.suppress(OSError):
                    if os.getpgid(pid) == pid:  # it leads a group of its own (setsid): what it started goes too
                        os.killpg(pid, sig)
                    else:
                        os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while orphans and time.monotonic() < deadline:
                orphans = [pid for pid in orphans if not _reaped(pid)]
                time.sleep(POLL_S)
            if not orphans:
                break
        for pid in orphans:  # still there after SIGKILL's grace (stuck in the kernel): not waited for, never a hang
            _reaped(pid)


def _prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        function: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
        return function
    except (OSError, AttributeError):
        return None


def _own_children() -> set[int]:
    """The pids whose parent is this process, from /proc (empty where there is none)."""
    me, found = os.getpid(), set()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if name.isdigit():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    text = Path(f"/proc/{name}/stat").read_bytes().decode("ascii", "replace")
                    if int(text[text.rfind(")") + 1 :].split()[1]) == me:
                        found.add(int(name))
    return found


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _reaped(pid: int) -> bool:
    try:
        return os.waitpid(pid, os.WNOHANG)[0] == pid
    except ChildProcessError:
        return True


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
