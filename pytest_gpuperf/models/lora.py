"""LoRA adapters (Hu et al. 2021) on the linears of a dense model: frozen base, trainable low-rank update.

``y = base(x) + (alpha / r) * B(A(x))`` with ``A`` (r x in) Kaiming-uniform and ``B`` (out x r) zero, so an
adapted model starts out computing exactly what its base computes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

__all__ = ["LoRALinear", "apply_lora", "lora_parameters"]


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable rank-``rank`` update scaled by ``alpha / rank``."""

    def __init__(self, base: nn.Linear, *, rank: int, alpha: float, name: str = "") -> None:
        """``name``: the wrapped module's qualified name in its model; it keys the adapter's initial weights
        (see :mod:`pytest_gpuperf.models.init`), so two adapters of one model never start alike."""
        super().__init__()
        self.name = name
        if rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {rank}")
        self.base = base
        self.rank = rank
        self.scaling = alpha / rank
        factory = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = nn.Linear(base.in_features, rank, bias=False, **factory)
        self.lora_b = nn.Linear(rank, base.out_features, bias=False, **factory)
        base.requires_grad_(False)
        if base.weight.device.type != "meta":
            self.reset_parameters()

    @property
    def in_features(self) -> int:
        return self.base.in_features

    @property
    def out_features(self) -> int:
        return self.base.out_features

    def reset_parameters(self, seed: int | None = None) -> None:
        """A uniform in +-1/sqrt(fan_in) (nn.Linear's own default), B zero: the adapted model starts as the base
        model. Drawn from ``seed`` (default: the seed torch.manual_seed last set), the same in every torch release."""
        from pytest_gpuperf.models import init

        seed = torch.initial_seed() if seed is None else seed
        prefix = f"{self.name}." if self.name else ""
        init.uniform_(
            self.lora_a.weight, seed=seed, key=f"{prefix}lora_a.weight", bound=1.0 / math.sqrt(self.base.in_features)
        )
        with torch.no_grad():
            self.lora_b.weight.zero_()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.lora_b(self.lora_a(x)) * self.scaling


def apply_lora(
    model: nn.Module, *, rank: int, alpha: float, targets: Sequence[str] = ("wq", "wk", "wv", "wo")
) -> list[str]:
    """Wrap every ``nn.Linear`` whose attribute name is in ``targets`` with :class:`LoRALinear`.

    Freezes every other parameter of ``model`` (embeddings, norms, untargeted linears), so that only the
    adapters train. Returns the qualified names of the wrapped modules, in module order. Raises if no
    module matched, naming the targets and the linear names the model does have.
    """
    matches = [
        (name, module)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and name.rsplit(".", 1)[-1] in targets
    ]
    if not matches:
        linears = sorted({n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, nn.Linear)})
        raise ValueError(f"apply_lora: no nn.Linear named any of {list(targets)}; the model's linears are {linears}")
    model.requires_grad_(False)
    for name, module in matches:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        setattr(parent, attr, LoRALinear(module, rank=rank, alpha=alpha, name=name))
    return [name for name, _ in matches]


def lora_parameters(model: nn.Module) -> list[torch.Tensor]:
    """The adapters' parameters (what an optimizer of a LoRA fine-tune should get)."""
    return [p for m in model.modules() if isinstance(m, LoRALinear) for p in (m.lora_a.weight, m.lora_b.weight)]
