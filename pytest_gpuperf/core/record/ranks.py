"""What the ranks of one multi-rank job agree on while they measure: whether a measurement takes another round.

A measurement whose calls are collectives must make the same calls on every rank: a round measured again, or an
extension, taken by one rank alone would wait for partners that have moved on. Each rank posts its wish to the
job's store (torch's public ``TCPStore`` client at MASTER_ADDR:MASTER_PORT, the store torchrun and env://
initialisation serve), under a key naming the measurement and the round, and every rank takes another round if
any asks. Outside an initialised process group of several ranks, or where torch was never imported, a rank's
wish is its own: nothing here imports torch.
"""

from __future__ import annotations

import itertools
import os
import sys
import warnings
from datetime import timedelta
from typing import Any

AGREE_SECONDS = 10.0
"""How long a rank waits for the others' wishes beyond the round it just took (the ranks of a collective end
their rounds together; a rank that measures alone, where the others never ask, waits this long once)."""

_store: Any = None
_measurements = itertools.count()


def next_measurement() -> int:
    """A number for the next measurement of this process: every rank runs the same tests in the same order, so
    the n-th measurement of each rank is the same one, even when a test is run twice."""
    return next(_measurements)


def any_rank_wants(key: str, wanted: bool, *, round_seconds: float) -> bool:
    """Whether any rank of the job wants another round of the measurement ``key`` (this rank: ``wanted``).

    A rank whose partners do not answer within the round's time plus AGREE_SECONDS (they measure nothing here, or
    the store is gone) keeps its own wish, with a warning saying so."""
    dist = _process_group()
    if dist is None:
        return wanted
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        store = _job_store(dist)
        store.set(f"gpuperf/{key}/{rank}", "1" if wanted else "0")
        keys = [f"gpuperf/{key}/{other}" for other in range(world)]
        store.wait(keys, timedelta(seconds=AGREE_SECONDS + 2 * round_seconds))
        return any(store.get(name) == b"1" for name in keys)
    except Exception as error:  # noqa: BLE001 (torch's store raises its own and RuntimeError types)
        warnings.warn(
            f"pytest-gpuperf: rank {rank} of {world} could not agree with the other ranks whether measurement "
            f"{key} takes another round ({type(error).__name__}: {error}); it decides alone, and a measurement "
            "whose calls are collectives may then wait for its partners",
            stacklevel=2,
        )
        return wanted


def _process_group() -> Any:
    """torch.distributed where it was imported and holds an initialised group of several ranks, else None."""
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist if dist.get_world_size() > 1 else None


def _job_store(dist: Any) -> Any:
    global _store
    if _store is None:
        address, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
        if not address or not port or not port.isdigit():
            raise RuntimeError("MASTER_ADDR/MASTER_PORT do not name the job's store")
        _store = dist.TCPStore(address, int(port), is_master=False, timeout=timedelta(seconds=60))
    return _store
