"""FSDP2 (``fully_shard``) over ``dp``: each transformer block is one unit, the root holds embedding, final
norm and output. With ``with_tp=True`` the blocks are first split over ``tp`` (2-D FSDP x TP)."""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.fsdp import fully_shard

from pytest_gpuperf.distributed.strategies import Prepared
from pytest_gpuperf.distributed.strategies import tensor_parallel as tp_strategy


def prepare(
    model: torch.nn.Module, *, mesh: Any, device: torch.device, lr: float, batch_per_rank: int, with_tp: bool = False
) -> Prepared:
    model = model.to(device)
    if with_tp:
        tp_strategy.apply(model, mesh["tp"])
    dp_mesh = mesh["dp"] if mesh.ndim > 1 else mesh
    for block in model.get_submodule("layers").children():
        fully_shard(block, mesh=dp_mesh)
    fully_shard(model, mesh=dp_mesh)
    return Prepared(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=lr))
