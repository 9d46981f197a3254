"""DistributedDataParallel over the ``dp`` dimension: replicated weights, gradients averaged by all-reduce."""

from __future__ import annotations

from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from pytest_gpuperf.distributed.strategies import Prepared


def prepare(model: torch.nn.Module, *, mesh: Any, device: torch.device, lr: float, batch_per_rank: int) -> Prepared:
    model = model.to(device)
    wrapped = DistributedDataParallel(
        model,
        device_ids=[device.index] if device.type == "cuda" else None,
        process_group=mesh["dp"].get_group() if mesh.ndim > 1 else mesh.get_group(),
    )
    return Prepared(model=wrapped, optimizer=torch.optim.AdamW(wrapped.parameters(), lr=lr))
