"""Which CPUs a comparison's sessions run on: this process pinned to ``--cpus`` for the run (the sessions it
starts inherit the affinity), and CPU sets written as taskset writes them.

Restores the process's affinity on the way out. May import ab/sessions.py; never cli/.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator

from pytest_gpuperf.ab.model import AbError


@contextlib.contextmanager
def pinned(cpus: frozenset[int] | None) -> Iterator[None]:
    """This process (and so every session it starts) on ``cpus`` only, restored after."""
    if cpus is None:
        yield
        return
    if not hasattr(os, "sched_setaffinity"):
        raise AbError("--cpus needs CPU affinity (os.sched_setaffinity), which this system does not have")
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise AbError(
            f"--cpus {cpu_text(cpus)}: this process may run only on CPUs {cpu_text(allowed)}"
            + (f" (not on {cpu_text(cpus - allowed)})" if cpus - allowed and len(cpus) > 1 else "")
            + "; choose among those"
        )
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def cpu_text(cpus: Iterable[int]) -> str:
    """ "0,2" and "0-3,8" as taskset writes them: runs of three or more CPUs as a range."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    parts = [
        f"{low}-{high}" if high - low >= 2 else ",".join(str(cpu) for cpu in range(low, high + 1)) for low, high in runs
    ]
    return ",".join(parts) or "(none)"
