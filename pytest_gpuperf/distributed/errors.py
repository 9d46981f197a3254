"""How a multi-rank call failed: named failure kinds and the exception that carries them.

Pure module (no torch): the parent builds these records from what each rank reported or how its process ended.
The kinds play the role of the named exit codes in torch's ``common_distributed`` so a test, a hook or a report
can branch on *how* a rank failed, not on message text.
"""

from __future__ import annotations

import enum
import signal
from dataclasses import dataclass


class FailureKind(enum.Enum):
    """How one rank ended a call that did not succeed."""

    RAISED = "raised"
    """The function raised in this rank; ``detail`` holds the rank's traceback."""
    TIMEOUT = "timeout"
    """The rank was still running when the call's timeout expired; ``stack`` holds where it was."""
    SIGNALED = "signaled"
    """The rank process was killed by a signal (SIGKILL is often the kernel's out-of-memory killer)."""
    EXITED = "exited"
    """The rank process exited with a status while running the function (``os._exit``, a crash in C code)."""
    STARTUP = "startup"
    """The rank failed before it could run anything: import, process group or device set-up."""
    STOPPED = "stopped"
    """The rank was healthy but was stopped because another rank failed; ``stack`` holds where it was."""
    LOST = "lost"
    """Under torchrun: a peer rank's process or node died, so this rank could not gather the others' outcomes;
    ``detail`` holds this rank's own error, if it had one (typically the collective's "connection closed")."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankFailure:
    """One rank's part in a failed call."""

    rank: int
    """Global rank number."""
    kind: FailureKind
    """How the rank ended."""
    summary: str
    """One line: the exception, the signal or the exit status."""
    detail: str = ""
    """The rank's traceback text (RAISED, STARTUP), empty otherwise."""
    stack: str = ""
    """faulthandler dump of every thread of the rank taken just before it was killed (TIMEOUT, STOPPED)."""
    exitcode: int | None = None
    """The process exit status as ``multiprocessing`` reports it (negative: killed by that signal)."""


def describe_exitcode(exitcode: int | None) -> tuple[FailureKind, str]:
    """Name how a rank process ended from its exit status (negative means killed by that signal)."""
    if exitcode is None:
        return FailureKind.EXITED, "process ended without an exit status"
    if exitcode < 0:
        signum = -exitcode
        try:
            name = signal.Signals(signum).name
        except ValueError:
            name = f"signal {signum}"
        hint = " (the kernel's out-of-memory killer sends SIGKILL: check 'dmesg')" if signum == signal.SIGKILL else ""
        return FailureKind.SIGNALED, f"killed by {name}{hint}"
    return FailureKind.EXITED, f"exited with status {exitcode}"


_OUT_OF_MEMORY_TEXT = ("can't allocate memory", "out of memory", "cannot allocate memory")


def is_out_of_memory(exc: BaseException) -> bool:
    """An allocation failure: Python's MemoryError, torch's OutOfMemoryError (CUDA/ROCm) or its CPU allocator's
    RuntimeError ("DefaultCPUAllocator: can't allocate memory", an address-space or cgroup limit reached)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    text = str(exc).lower()
    return isinstance(exc, RuntimeError) and any(marker in text for marker in _OUT_OF_MEMORY_TEXT)


class LaunchError(RuntimeError):
    """The call could not be started as asked (bad world size or mesh, unpicklable function)."""


class RankFailed(RuntimeError):
    """A multi-rank call failed in at least one rank.

    ``failures`` lists every rank that did not return, the first to fail first; ``rank``, ``kind`` and
    ``detail`` are those of that first failure. The launcher has already torn its ranks down: the next call
    starts fresh ones.
    """

    def __init__(self, failures: list[RankFailure], *, world_size: int, function: str, spawned: bool = True) -> None:
        if not failures:
            raise ValueError("RankFailed needs at least one RankFailure")
        self.failures: tuple[RankFailure, ...] = tuple(failures)
        self.world_size = world_size
        self.function = function
        self.spawned = spawned
        """True for ranks the launcher spawned (and has torn down); False under torchrun (nothing restarted)."""
        super().__init__(self._render())

    def __reduce__(self) -> tuple[object, ...]:
        # Picklable (xdist, multiprocessing) despite the keyword-only constructor.
        return (_rebuild_rank_failed, (list(self.failures), self.world_size, self.function, self.spawned))

    @property
    def first(self) -> RankFailure:
        return self.failures[0]

    @property
    def rank(self) -> int:
        return self.first.rank

    @property
    def kind(self) -> FailureKind:
        return self.first.kind

    @property
    def detail(self) -> str:
        return self.first.detail

    def ranks(self, kind: FailureKind) -> list[int]:
        """The ranks that ended with ``kind``."""
        return [f.rank for f in self.failures if f.kind is kind]

    def _render(self) -> str:
        first = self.first
        # Ranks that failed the same way as the first (e.g. every rank still running at a timeout) share the header.
        alike = [f for f in self.failures if f.kind is first.kind and f.summary == first.summary]
        where = ", ".join(str(r) for r in sorted(f.rank for f in alike))
        lines = [
            f"{self.function} failed on rank{'s' if len(alike) > 1 else ''} {where} of {self.world_size}: "
            f"{first.kind.value}: {first.summary}",
        ]
        others = [f for f in self.failures if f not in alike]
        if others:
            lines.append("other ranks: " + "; ".join(f"rank {f.rank} {f.kind.value} ({f.summary})" for f in others))
        if self.spawned:
            lines.append("The launcher killed the remaining ranks; the next launch starts fresh ones.")
        else:
            lines.append("Under torchrun every rank raises this; the job's ranks are not restarted.")
        for f in self.failures:
            if f.detail:
                lines.append(f"--- rank {f.rank} traceback ---")
                lines.append(f.detail.rstrip())
            if f.stack:
                lines.append(f"--- rank {f.rank} stack when stopped (faulthandler) ---")
                lines.append(f.stack.rstrip())
        return "\n".join(lines)


def _rebuild_rank_failed(
    failures: list[RankFailure], world_size: int, function: str, spawned: bool = True
) -> RankFailed:
    return RankFailed(failures, world_size=world_size, function=function, spawned=spawned)
