"""DeepSpeed ZeRO stages 1-3 (optimizer state, + gradients, + parameters partitioned over ``dp``).

Runs inside the launcher's ranks and reuses their process group; never through the ``deepspeed`` launcher
(fixed port 29500, files left in /dev/shm). On CPU: ``DS_ACCELERATOR=cpu``, and the ``deepspeed_shm_comm`` op
is marked incompatible before DeepSpeed initialises its communication, so nothing is compiled (see the notes
in ``distributed/rank.py``). A client ``torch.optim.AdamW`` serves stages 1-3; ZeRO-Offload refuses client
optimizers and uses DeepSpeed's own AdamW, which builds the ``cpu_adam`` extension on first use.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

import torch

from pytest_gpuperf.distributed.strategies import Prepared


def import_deepspeed(device: torch.device) -> Any:
    """Import DeepSpeed set up for this device, its communication bound to the existing process group."""
    if device.type == "cpu":
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    os.environ.setdefault("LOCAL_RANK", "0")  # DeepSpeed reads it even when the process group exists
    import deepspeed
    import deepspeed.ops

    if device.type == "cpu":
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
    # DeepSpeed 0.19 calls torch's deprecated all_gather_into_tensor/reduce_scatter_tensor every step: one
    # FutureWarning per call would bury the rank's real output.
    warnings.filterwarnings("ignore", message=r".*is deprecated\. Please use .*_single", category=FutureWarning)
    deepspeed.init_distributed(dist_backend=torch.distributed.get_backend(), auto_mpi_discovery=False)
    return deepspeed


def config(*, stage: int, micro_batch: int, dp: int, lr: float, offload: bool) -> dict[str, Any]:
    """The DeepSpeed config: fp32, one micro-batch per step, no clipping (to match plain AdamW exactly)."""
    cfg: dict[str, Any] = {
        "train_micro_batch_size_per_gpu": micro_batch,
        "train_batch_size": micro_batch * dp,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": 0.0,
        "zero_optimization": {"stage": stage},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }
    if offload:
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu"}
        cfg["optimizer"] = {"type": "AdamW", "params": {"lr": lr, "weight_decay": 0.01}}
    return cfg


def prepare(
    model: torch.nn.Module,
    *,
    mesh: Any,
    device: torch.device,
    lr: float,
    batch_per_rank: int,
    stage: int,
    offload: bool = False,
) -> Prepared:
    deepspeed = import_deepspeed(device)
    model = model.to(device)
    dp = mesh.size()
    cfg = config(stage=stage, micro_batch=batch_per_rank, dp=dp, lr=lr, offload=offload)
    optimizer = None if offload else torch.optim.AdamW(model.parameters(), lr=lr)
    engine, engine_optimizer, _, _ = deepspeed.initialize(
        model=model,
        optimizer=optimizer,
        model_parameters=model.parameters() if offload else None,
        config=cfg,
        dist_init_required=False,
    )

    def step(loss: torch.Tensor, _optimizer: Any) -> None:
        engine.backward(loss)
        engine.step()

    return Prepared(model=engine, optimizer=engine_optimizer, step=step)
