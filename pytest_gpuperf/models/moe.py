"""Mixtral-style sparse mixture-of-experts decoder: the Llama blocks with a top-k routed SwiGLU layer.

Attention, norms, RoPE and the KV cache are those of ``llama.py``; only the feed-forward differs.
Module names follow Mixtral's layout: ``layers[i].feed_forward.gate`` (router) and
``layers[i].feed_forward.experts[e].{w1,w2,w3}``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from pytest_gpuperf.models.llama import FeedForward, LlamaConfig, Transformer

__all__ = ["MoEConfig", "MoEFeedForward", "build_moe_transformer", "load_balancing_loss"]


@dataclass(frozen=True, kw_only=True, slots=True)
class MoEConfig:
    """Routing of a sparse MoE layer."""

    n_experts: int
    """Experts per layer (Mixtral: 8)."""
    top_k: int
    """Experts each token is sent to (Mixtral: 2)."""

    def __post_init__(self) -> None:
        if self.n_experts < 1 or not 1 <= self.top_k <= self.n_experts:
            raise ValueError(
                f"MoEConfig: need 1 <= top_k <= n_experts, got top_k={self.top_k}, n_experts={self.n_experts}"
            )


def load_balancing_loss(router_probs: torch.Tensor, expert_index: torch.Tensor, n_experts: int) -> torch.Tensor:
    """Switch Transformer auxiliary loss ``n_experts * sum_e f_e * P_e`` (Fedus et al. 2021, eq. 4-6).

    ``f_e`` is the fraction of the (token, slot) assignments that went to expert ``e`` and ``P_e`` the mean
    router probability of ``e`` over tokens. With top-k routing the assignments of all k slots are counted
    (as Mixtral's implementation does) and normalised to sum to one, so perfectly uniform routing gives 1.0
    whatever k is. Only ``P_e`` carries a gradient; ``f_e`` comes from a non-differentiable top-k.

    router_probs: (tokens, n_experts) softmax over all experts; expert_index: (tokens, k).
    """
    counts = torch.bincount(expert_index.reshape(-1), minlength=n_experts).float()
    fraction = counts / expert_index.numel()
    mean_prob = router_probs.float().mean(0)
    return n_experts * torch.sum(fraction * mean_prob)


class MoEFeedForward(nn.Module):
    """Top-k token-choice router over SwiGLU experts; renormalised top-k weights, as in Mixtral.

    After each forward, ``aux_loss`` holds the load-balancing loss of that forward (see
    :func:`load_balancing_loss`); :meth:`Transformer.aux_loss` sums it over layers.

    ``token_alignment``: the rows each expert receives are padded with zero rows to a multiple of it. fp8
    training sets 16 (training/precision.py): ``torch._scaled_mm`` needs every dimension of its operands to be a
    multiple of 16, and in the weight gradient of an expert the routed tokens are the reduction dimension, whose
    count the router decides (923 tokens for one expert of Mixtral 8x7B on an H200 made the step fail), as
    torchao's MoE training aligns its token groups. Zero rows change no real row's output, and add nothing to the
    weights' gradients (their inputs and their output gradients are zero); their outputs are dropped.
    """

    token_alignment: int = 1

    def __init__(self, d_model: int, hidden: int, moe: MoEConfig) -> None:
        super().__init__()
        self.n_experts = moe.n_experts
        self.top_k = moe.top_k
        self.gate = nn.Linear(d_model, moe.n_experts, bias=False)
        self.experts = nn.ModuleList(FeedForward(d_model, hidden) for _ in range(moe.n_experts))
        self.aux_loss: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        router_logits = self.gate(flat)
        probs = F.softmax(router_logits, dim=-1, dtype=torch.float32)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        self.aux_loss = load_balancing_loss(probs, chosen, self.n_experts)
        out = torch.zeros_like(flat)
        # Loop over experts, gathering the tokens routed to each: readable, and exact (no capacity drop).
        for e, expert in enumerate(self.experts):
            token_idx, slot = torch.where(chosen == e)
            if token_idx.numel() == 0:
                continue
            rows = flat[token_idx]
            padding = -token_idx.numel() % self.token_alignment
            if padding:
                rows = F.pad(rows, (0, 0, 0, padding))
            contribution = expert(rows)[: token_idx.numel()] * weights[token_idx, slot, None]
            out.index_add_(0, token_idx, contribution.to(out.dtype))
        return out.reshape(shape)


def build_moe_transformer(cfg: LlamaConfig, moe: MoEConfig) -> Transformer:
    """A :class:`Transformer` whose blocks use :class:`MoEFeedForward` (``cfg.ffn_dim`` is each expert's width)."""
    return Transformer(cfg, ffn_factory=lambda c: MoEFeedForward(c.d_model, c.ffn_dim, moe))
