"""The training loop every training workload runs: single device, DDP/FSDP2/TP-wrapped modules, or a
DeepSpeed engine (through ``step``). It measures, it does not judge: losses and step times come back to the
test, which records them through ``perf``.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

Batch = tuple[torch.Tensor, torch.Tensor]


class NonFiniteLoss(AssertionError):
    """The loss became NaN or Inf; the message names the step and the precision."""


@dataclass(slots=True, kw_only=True)
class TrainResult:
    """What a run of training steps produced."""

    losses: list[float] = field(default_factory=list)
    """Loss of every step, in order (step i is losses[i])."""
    step_seconds: list[float] = field(default_factory=list)
    """Wall time of every step, device-synchronised."""
    tokens_per_step: int = 0
    """Tokens one step consumes on this process (batch x sequence)."""


def default_step(loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def train(
    model: Any,
    *,
    loss_fn: Callable[[Any, torch.Tensor, torch.Tensor], torch.Tensor],
    optimizer: Any,
    batches: Callable[[int], Batch],
    steps: int,
    step: Callable[[torch.Tensor, Any], None] = default_step,
    autocast: Callable[[], Any] | None = None,
    sync: Callable[[], None] | None = None,
    precision: str = "fp32",
    first_step: int = 0,
) -> TrainResult:
    """Run ``steps`` optimizer steps on ``batches(step)``; fail at once on a non-finite loss.

    ``step(loss, optimizer)`` does backward and the update (``PreparedModel.backward_and_step`` for loss-scaled
    precisions, ``engine.backward``/``engine.step`` for DeepSpeed); ``autocast`` is a context factory for the
    forward pass (``PreparedModel.autocast``). ``sync`` (``torch.cuda.synchronize``) brackets every step so
    its time includes the device work; reading the loss value synchronises on CPU anyway.
    """
    result = TrainResult()
    clock = time.perf_counter
    for index in range(first_step, first_step + steps):
        inputs, targets = batches(index)
        result.tokens_per_step = int(inputs.numel())
        if sync is not None:
            sync()
        start = clock()
        if autocast is not None:
            with autocast():
                loss = loss_fn(model, inputs, targets)
        else:
            loss = loss_fn(model, inputs, targets)
        value = float(loss.detach().float().item())
        if not math.isfinite(value):
            raise NonFiniteLoss(f"loss is {value} at step {index} in {precision}: training diverged")
        step(loss, optimizer)
        if sync is not None:
            sync()
        result.step_seconds.append(clock() - start)
        result.losses.append(value)
    return result
