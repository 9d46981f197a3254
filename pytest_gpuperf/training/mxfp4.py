"""MXFP4 (OCP Microscaling, e2m1 elements with a shared e8m0 scale) emulated by quantise-dequantise.

Used by the ``fp4`` precision where no native fp4 training kernel runs. Every operand of a linear layer's
three matmuls (forward, input gradient, weight gradient) is rounded to MXFP4 along that matmul's reduction
dimension, as MX training recipes do; the products are computed in fp32 on the rounded values. Gradients
pass through the rounding unchanged (straight-through estimator).

Imported lazily by ``precision.py`` (this module imports torch at top).
"""

from __future__ import annotations

from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["MXFP4EmulatedLinear", "quantize_dequantize"]

E2M1_MAX = 6.0
_E2M1_EMAX = 2  # exponent of the largest normal e2m1 value (6 = 1.5 * 2**2)


def quantize_dequantize(x: torch.Tensor, block_size: int = 32) -> torch.Tensor:
    """Round ``x`` to MXFP4 along its last dim and back, in fp32 of ``x``'s shape.

    Blocks of ``block_size`` elements share the scale ``2**(floor(log2(amax)) - 2)`` (an e8m0 power of two,
    OCP MX spec v1.0 section 6.3); elements round to the nearest e2m1 value (0, 0.5, 1, 1.5, 2, 3, 4, 6) with
    ties to even and saturate at 6. A last dim that is not a multiple of the block is zero-padded (zeros
    do not change a block's amax).
    """
    width = x.shape[-1]
    pad = (-width) % block_size
    xf = x.float()
    if pad:
        xf = F.pad(xf, (0, pad))
    blocks = xf.reshape(-1, block_size)
    amax = blocks.abs().amax(dim=-1, keepdim=True)
    exponent = torch.floor(torch.log2(amax)) - _E2M1_EMAX
    exponent = torch.where(amax > 0, exponent, torch.zeros_like(exponent)).clamp_(-127, 127)
    scale = torch.exp2(exponent)
    magnitude = (blocks / scale).abs_().clamp_(max=E2M1_MAX)
    # The e2m1 step is 0.5 below 2, 1 in [2, 4) and 2 in [4, 6], i.e. 2**(clamp(floor(log2 m), 0, 2) - 1).
    # Rounding m / step half-to-even (torch.round) rounds the mantissa half-to-even, as the spec asks.
    step = torch.log2(magnitude).floor_().clamp_(0, _E2M1_EMAX).sub_(1).exp2_()
    rounded = magnitude.div_(step).round_().mul_(step)
    out = torch.copysign(rounded, blocks).mul_(scale).reshape(xf.shape)
    return out[..., :width] if pad else out


class _MXFP4MatMul(torch.autograd.Function):
    """``x @ W.T`` on MXFP4-rounded operands, forward and backward; straight-through for the rounding."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, block_size: int) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        ctx.block_size = block_size
        x2 = x.reshape(-1, x.shape[-1])
        out = quantize_dequantize(x2, block_size) @ quantize_dequantize(weight, block_size).t()
        return out.reshape(*x.shape[:-1], weight.shape[0]).to(x.dtype)

    @staticmethod
    def backward(ctx: Any, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        x, weight = ctx.saved_tensors
        b = ctx.block_size
        g = grad_out.reshape(-1, grad_out.shape[-1]).float()
        x2 = x.reshape(-1, x.shape[-1]).float()
        # grad_x = g @ W reduces over out_features: g by rows, W by columns
        grad_x = quantize_dequantize(g, b) @ quantize_dequantize(weight.t().contiguous(), b).t()
        # grad_W = g.T @ x reduces over tokens: both blocked along the token dim
        grad_w = quantize_dequantize(g.t().contiguous(), b) @ quantize_dequantize(x2.t().contiguous(), b).t()
        return grad_x.reshape(x.shape).to(x.dtype), grad_w.to(weight.dtype), None


class MXFP4EmulatedLinear(nn.Linear):
    """An ``nn.Linear`` whose matmuls see MXFP4-rounded operands. Same parameters and module name, so
    optimizers, state dicts and name-based plans keep working."""

    block_size: int = 32

    @classmethod
    def convert(cls, linear: nn.Linear, block_size: int = 32) -> MXFP4EmulatedLinear:
        """Turn ``linear`` into this class in place (parameters, hooks and flags kept) and return it."""
        if type(linear) is not nn.Linear:
            raise TypeError(f"MXFP4EmulatedLinear.convert expects a plain nn.Linear, got {type(linear).__name__}")
        linear.__class__ = cls
        converted = cast("MXFP4EmulatedLinear", linear)  # the same object, now of this class
        converted.block_size = block_size
        return converted

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = _MXFP4MatMul.apply(x, self.weight, self.block_size)
        return out if self.bias is None else out + self.bias.to(out.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, mxfp4_block={self.block_size}"
