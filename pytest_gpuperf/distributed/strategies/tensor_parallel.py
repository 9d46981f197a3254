"""Tensor parallelism on the Llama blocks (Megatron style, through ``parallelize_module``).

In every block the projections that fan out (wq, wk, wv, w1, w3) are split by output column and the ones that
fan back in (wo, w2) by input row, so each block costs one all-reduce forward and one backward. The models
reshape with ``-1`` heads, so a rank simply sees ``n_heads / tp`` of them. Embedding, norms and the output
projection stay replicated.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from pytest_gpuperf.distributed.strategies import Prepared

BLOCK_PLAN = {
    "attention.wq": "colwise",
    "attention.wk": "colwise",
    "attention.wv": "colwise",
    "attention.wo": "rowwise",
    "feed_forward.w1": "colwise",
    "feed_forward.w3": "colwise",
    "feed_forward.w2": "rowwise",
}


def check_divisible(model: torch.nn.Module, tp: int) -> None:
    """Heads and the FFN width must split evenly over ``tp`` ranks; say which does not."""
    cfg = getattr(model, "config", None)
    for field in ("n_heads", "n_kv_heads", "ffn_dim"):
        value = getattr(cfg, field, None)
        if value is not None and value % tp:
            raise ValueError(f"tensor parallel over {tp} ranks needs {field} divisible by {tp}, got {value}")


def apply(model: torch.nn.Module, tp_mesh: Any) -> None:
    """Parallelize every block of ``model`` in place over ``tp_mesh``."""
    check_divisible(model, tp_mesh.size())
    styles = {"colwise": ColwiseParallel, "rowwise": RowwiseParallel}
    plan = {name: styles[style]() for name, style in BLOCK_PLAN.items()}
    for block in model.get_submodule("layers").children():
        parallelize_module(block, tp_mesh, plan)


def prepare(model: torch.nn.Module, *, mesh: Any, device: torch.device, lr: float, batch_per_rank: int) -> Prepared:
    model = model.to(device)
    apply(model, mesh["tp"] if mesh.ndim > 1 else mesh)
    # foreach=False: the parameters mix DTensors (sharded projections) and plain tensors (replicated ones).
    return Prepared(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=lr, foreach=False))
