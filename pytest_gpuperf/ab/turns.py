"""`gpuperf ab --take-turns`: both sessions of a pair run at once and hand one turn between them, so the same
test of the two stacks is measured seconds apart; and whether a comparison takes turns by default.

Each session asks for the turn before each perf test and each measured round (core/session/turns.py) and keeps
it until it asks again. The first turn goes, once both have asked, to the side the pair's order puts first; then
it alternates, and a session that is done keeps it until its process has exited (EXIT_WAIT_S at most). The
channel per side is two named pipes ``<out>/sessions/NNN-S.ask`` and ``.grant``, held open here (POSIX only).
docs/design/ab-taking-turns.md says why each choice; docs/ab.md when taking turns is the default. May import
core/, machine/ and ab/sessions.py; never cli/ or ab/engine.py.
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pytest_gpuperf.ab.sessions import start_session
from pytest_gpuperf.core.record.children import Supervised
from pytest_gpuperf.core.session.turns import ASK, DONE, GRANT
from pytest_gpuperf.machine.fingerprint import read_accelerators

POLL_S = 0.05
"""How often the broker looks for a session's exit while nobody writes."""
EXIT_WAIT_S = 30.0
"""How long a session that said "done" may take to exit before its partner gets the turn anyway."""


UNPINNED = "unpinned (--cpus all)"
PINNED = (
    "both sides on CPU {cpu}: one core for both sessions of a pair is what met the targets on 2-core VMs, unpinned "
    "did not (docs/ab.md); a session whose tests start their own ranks or servers widens to CPUs {every}; "
    "--cpus all: unpinned"
)
"""Said when taking turns without --cpus: unpinned, the two sessions of a pair tend to stay on different cores
and their pair sd was 1.4-1.5% against 0.9-1.0% pinned (benchmarks/README.md). Tests that start their own ranks or
servers would have one core for all of them, so their sessions widen again (``widen_cpus``)."""


def pinned_by_default() -> tuple[frozenset[int], frozenset[int]] | None:
    """(the one CPU both sides' sessions run on, every CPU this process may use) for a comparison that takes turns
    without --cpus; None where there is no affinity to set or a single CPU (nothing to choose)."""
    if not hasattr(os, "sched_getaffinity"):
        return None
    allowed = frozenset(os.sched_getaffinity(0))
    if len(allowed) < 2:
        return None
    return frozenset({min(allowed)}), allowed


def turns_by_default(
    pytest_args: Sequence[str],
    commands: Sequence[Sequence[str]],
    *,
    accelerator: Callable[[], dict[str, Any] | None] = lambda: read_accelerators()[0],
    environ: Mapping[str, str] | None = None,
) -> tuple[bool, str]:
    """Whether a comparison that neither asks for --take-turns nor refuses it takes turns, and why (one clause,
    printed with the comparison's first line). ``commands`` are the sides' command prefixes (may be empty, as
    for `gpuperf bisect`, whose sides are built later); ``accelerator`` reads this machine's GPU as the sessions'
    fingerprint will (machine/fingerprint.py: NVML, amdsmi, the vendors' tools, else a torch subprocess; ~3 s on
    a CPU machine, once per command); ``environ`` is the sessions' environment (this process's)."""
    if not hasattr(os, "mkfifo"):
        return False, "one session after the other: this system has no named pipes"
    gpu = accelerator()
    if gpu:
        return False, (
            f"one session after the other: this machine has a GPU ({gpu.get('name') or gpu.get('vendor')}), which "
            "both sessions at once would share; --take-turns to take turns anyway"
        )
    workers = _xdist_workers(pytest_args)
    if workers:
        return False, f"one session after the other: PYTEST_ARGS ask for xdist workers ({workers})"
    ranks = _ranks(commands, environ if environ is not None else os.environ)
    if ranks:
        return False, f"one session after the other: {ranks} (a session taking turns refuses torchrun ranks)"
    return True, "taking turns (no GPU on this machine; --no-take-turns: one session after the other)"


def _xdist_workers(pytest_args: Sequence[str]) -> str:
    """The -n/--numprocesses option in PYTEST_ARGS that starts workers ("" when none, or -n 0)."""
    for index, arg in enumerate(pytest_args):
        if arg in ("-n", "--numprocesses"):
            value = pytest_args[index + 1] if index + 1 < len(pytest_args) else ""
        elif arg.startswith("--numprocesses="):
            value = arg.partition("=")[2]
        elif arg.startswith("-n") and not arg.startswith("--"):
            value = arg[2:]
        else:
            continue
        if value.strip() not in ("0", ""):
            return f"{arg} {value}" if arg in ("-n", "--numprocesses") else arg
    return ""


def _ranks(commands: Sequence[Sequence[str]], environ: Mapping[str, str]) -> str:
    """What starts several ranks: torchrun in a side's command prefix, or WORLD_SIZE above 1 set by its `env` or
    inherited from ``environ`` ("" when nothing does)."""
    settings = [("WORLD_SIZE", environ.get("WORLD_SIZE", ""))]
    for words in commands:
        for word in words:
            if Path(word).name in ("torchrun", "torch.distributed.run"):
                return f"a side runs {Path(word).name}"
            name, _, value = word.partition("=")
            settings.append((name, value))
    for name, value in settings:
        if name == "WORLD_SIZE" and value.strip().isdigit() and int(value) > 1:
            return f"the sessions' environment sets WORLD_SIZE={value.strip()}"
    return ""


class TurnChannelError(Exception):
    """The pipes cannot be made (no named pipes on this system, an unwritable --out)."""


def make_channel(prefix: Path) -> tuple[int, int]:
    """The two named pipes of one side, made afresh; returns (ask fd to read, grant fd to write), both O_RDWR."""
    if not hasattr(os, "mkfifo"):
        raise TurnChannelError("--take-turns needs named pipes (os.mkfifo), which this system does not have")
    fds = []
    for suffix in (".ask", ".grant"):
        path = Path(f"{prefix}{suffix}")
        path.unlink(missing_ok=True)
        try:
            os.mkfifo(path, 0o600)
        except OSError as error:
            raise TurnChannelError(f"--take-turns: cannot make the named pipe {path}: {error.strerror}") from None
        fds.append(os.open(path, os.O_RDWR | os.O_NONBLOCK))
    return fds[0], fds[1]


def run_pair_taking_turns(
    argvs: Sequence[list[str]],
    *,
    prefixes: Sequence[Path],
    log_files: Sequence[Path],
    timeout: float | None,
    cwd: Path | None,
    env: dict[str, str],
) -> list[tuple[int | None, float]]:
    """Run the pair's two sessions at once, the first of ``argvs`` granted the first turn; returns each one's
    (returncode, seconds), returncode None when the time limit killed it. Each argv must already carry its
    ``--gpuperf-take-turns PREFIX``. Ctrl-C stops both before re-raising."""
    channels = [make_channel(prefix) for prefix in prefixes]
    logs = [path.open("wb") for path in log_files]
    processes: list[Supervised] = []
    started = time.monotonic()
    ended: list[float | None] = [None, None]
    timed_out = False
    try:
        for argv, log in zip(argvs, logs):
            processes.append(start_session(argv, log, cwd=cwd, env=env))
        timed_out = _broker(processes, channels, ended, started, timeout)
    except BaseException:
        for process in processes:
            process.stop()
        raise
    finally:
        for log in logs:
            log.close()
        for ask, grant in channels:
            os.close(ask)
            os.close(grant)
        for prefix in prefixes:
            for suffix in (".ask", ".grant"):
                Path(f"{prefix}{suffix}").unlink(missing_ok=True)
    outcomes: list[tuple[int | None, float]] = []
    for i, process in enumerate(processes):
        finished = ended[i]
        if finished is None:
            finished = time.monotonic()
        outcomes.append((None if timed_out else process.returncode, finished - started))
    return outcomes


def _broker(
    processes: list[Supervised],
    channels: list[tuple[int, int]],
    ended: list[float | None],
    started: float,
    timeout: float | None,
) -> bool:
    """Hand the turn until both sessions are done and have exited; True when the time limit stopped them."""
    waiting = [False, False]
    done = [False, False]
    exit_awaited = [False, False]
    holder: int | None = None
    granted_once = False
    last: int | None = None
    while not all(done):
        readable, _, _ = select.select([channels[i][0] for i in range(2) if not done[i]], [], [], POLL_S)
        for i in range(2):
            if channels[i][0] not in readable:
                continue
            try:
                data = os.read(channels[i][0], 64)
            except BlockingIOError:
                continue
            for byte in data:
                if bytes([byte]) == ASK:
                    waiting[i] = True
                    if holder == i:
                        holder = None  # it gives the turn back by asking again
                elif bytes([byte]) == DONE:
                    done[i], waiting[i] = True, False
                    if holder == i:
                        holder = None
        for i, process in enumerate(processes):
            if not done[i] and process.poll() is not None:
                done[i], waiting[i] = True, False  # exited without its "done" byte: crashed, or no perf test
                if holder == i:
                    holder = None
        for i, process in enumerate(processes):
            if done[i] and waiting[1 - i] and not exit_awaited[i] and process.poll() is None:
                exit_awaited[i] = True  # once: a session hanging on its way out costs its partner one wait
                # Its exit (writing results, the interpreter's teardown: a few hundred ms of CPU) would run
                # alongside the partner's last timed calls: the partner's turn waits for it.
                limit = EXIT_WAIT_S if timeout is None else min(EXIT_WAIT_S, timeout - (time.monotonic() - started))
                try:
                    process.wait(timeout=max(limit, 0.0))
                except subprocess.TimeoutExpired:
                    pass  # it hangs on its way out: the partner goes on beside it
        for i, process in enumerate(processes):
            if ended[i] is None and process.poll() is not None:
                ended[i] = time.monotonic()
        if holder is None:
            if not granted_once and not all(waiting[i] or done[i] for i in range(2)):
                pass  # the barrier: both sessions have asked (or one has ended) before the first turn
            else:
                order = [0, 1] if last is None else [1 - last, last]  # alternate; back to the holder when alone
                chosen = next((i for i in order if waiting[i]), None)
                if chosen is not None:
                    os.write(channels[chosen][1], GRANT)
                    waiting[chosen], holder, last, granted_once = False, chosen, chosen, True
        if timeout is not None and time.monotonic() - started > timeout:
            for process in processes:
                process.stop()
            return True
    for i, process in enumerate(processes):  # both said "done": they write their results and exit
        left = None if timeout is None else max(0.0, timeout - (time.monotonic() - started))
        try:
            process.wait(timeout=left)
        except subprocess.TimeoutExpired:
            for other in processes:
                other.stop()
            return True
        if ended[i] is None:
            ended[i] = time.monotonic()
    return False
