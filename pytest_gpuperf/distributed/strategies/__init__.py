"""Parallel training strategies, one module each, behind one small interface.

A strategy takes the freshly built model (identical on every rank) and the rank's ``DeviceMesh`` and returns what
the shared training loop needs: the module to call, the optimizer and the ``step`` function. The strategies
(``ddp``, ``fsdp``, ``tp``, ``fsdp_tp``, ``zero1``..``zero3``, ``zero2_offload``), their mesh dimensions and what
each does: docs/distributed.md. Importing this package imports no torch; a strategy's module is imported when used.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True, kw_only=True)
class Prepared:
    """A model made parallel: what ``training.loop.train`` is called with."""

    model: Any
    """The module (or DeepSpeed engine) the loss function calls."""
    optimizer: Any
    """Passed to ``step``."""
    step: Callable[[Any, Any], None] | None = None
    """``step(loss, optimizer)``; None for the loop's default backward/step/zero_grad."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Strategy:
    """One way of spreading training over a mesh."""

    name: str
    dims: tuple[str, ...]
    """Mesh dimension names the strategy uses, in mesh order; ``dp`` shards the batch, ``tp`` the weights."""
    module: str
    """Module of this package holding ``prepare``."""
    needs: str | None = None
    """Optional package it needs (skip with a reason when missing)."""
    options: tuple[tuple[str, Any], ...] = ()
    """Keyword arguments for the module's ``prepare`` (the ZeRO stage, say)."""
    compiles: bool = False
    """Builds a C++ extension on first use (tens of seconds on a small CPU): kept out of the CPU tier."""

    def prepare(self, model: Any, *, mesh: Any, device: Any, lr: float, batch_per_rank: int) -> Prepared:
        """Make ``model`` parallel over ``mesh`` (``batch_per_rank``: rows each rank trains on; DeepSpeed's
        config states it)."""
        module = importlib.import_module(f"{__name__}.{self.module}")
        return module.prepare(
            model, mesh=mesh, device=device, lr=lr, batch_per_rank=batch_per_rank, **dict(self.options)
        )

    def missing(self) -> str | None:
        """Why this strategy cannot run in this environment, or None."""
        if self.needs is None:
            return None
        if importlib.util.find_spec(self.needs) is None:
            return (
                f"strategy {self.name} needs {self.needs}, which is not installed "
                f"(pip install 'pytest-gpuperf[{self.needs}]')"
            )
        return None


STRATEGIES: dict[str, Strategy] = {
    s.name: s
    for s in (
        Strategy(name="ddp", dims=("dp",), module="ddp"),
        Strategy(name="fsdp", dims=("dp",), module="fsdp"),
        Strategy(name="tp", dims=("tp",), module="tensor_parallel"),
        Strategy(name="fsdp_tp", dims=("dp", "tp"), module="fsdp", options=(("with_tp", True),)),
        Strategy(name="zero1", dims=("dp",), module="zero", needs="deepspeed", options=(("stage", 1),)),
        Strategy(name="zero2", dims=("dp",), module="zero", needs="deepspeed", options=(("stage", 2),)),
        Strategy(name="zero3", dims=("dp",), module="zero", needs="deepspeed", options=(("stage", 3),)),
        Strategy(
            name="zero2_offload",
            dims=("dp",),
            module="zero",
            needs="deepspeed",
            options=(("stage", 2), ("offload", True)),
            compiles=True,
        ),
    )
}


def get_strategy(name: str) -> Strategy:
    try:
        return STRATEGIES[name]
    except KeyError:
        raise KeyError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}") from None


def data_parallel_rank(mesh: Any) -> tuple[int, int]:
    """(index, count) of this rank's share of the global batch: its ``dp`` coordinate, or (0, 1) without one."""
    names = mesh.mesh_dim_names or ()
    if "dp" not in names:
        return 0, 1
    sub = mesh["dp"]
    return sub.get_local_rank(), sub.size()
