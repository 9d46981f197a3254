"""Named model specs with real dimensions, their exact parameter counts and training FLOPs per token.

Importing this module does not import torch (the plugin can list and parametrize specs at collection time);
``ModelSpec.build`` imports the model code when a workload asks for a module.

Names: ``get_spec("llama3-70b")`` is the full model; ``get_spec("llama3-70b@2")`` (or
``spec.with_layers(2)``) is a proxy with the first 2 layers, same width, for one device.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = ["ModelSpec", "SPECS", "get_spec", "spec_names"]

_FAMILIES = ("llama", "moe")


@dataclass(frozen=True, kw_only=True, slots=True)
class ModelSpec:
    """One model configuration: architecture, training sequence length and (optional) LoRA adapters."""

    name: str
    """Registry name; a layer-cut proxy is named ``<base>@<n_layers>``."""
    family: str
    """``"llama"`` (dense, ``models/llama.py``) or ``"moe"`` (Mixtral-style, ``models/moe.py``)."""
    vocab_size: int
    """Token ids in the embedding and the output logits."""
    d_model: int
    """Residual width."""
    n_layers: int
    """Transformer blocks built (fewer than ``full_n_layers`` for a proxy)."""
    n_heads: int
    """Query heads."""
    n_kv_heads: int
    """Key/value heads (grouped-query attention)."""
    ffn_dim: int
    """SwiGLU hidden width (per expert for MoE)."""
    seq_len: int
    """Training sequence length; the attention term of the FLOPs uses it."""
    max_seq_len: int
    """Positions the RoPE table covers (>= seq_len; raise it for long inference with a KV cache)."""
    rope_theta: float = 500_000.0
    """RoPE base."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    tie_embeddings: bool = False
    """Output projection shares the embedding matrix."""
    n_experts: int = 0
    """Experts per MoE layer (0 for dense)."""
    top_k: int = 0
    """Experts per token (0 for dense)."""
    aux_loss_weight: float = 0.0
    """Weight of the load-balancing loss added to the LM loss (Switch Transformer used 0.01)."""
    lora_rank: int = 0
    """LoRA rank r (0: no adapters, full fine-tune / pretraining)."""
    lora_alpha: float = 0.0
    """LoRA alpha; the update is scaled by alpha / r."""
    lora_targets: tuple[str, ...] = ()
    """Attribute names of the linears that get adapters (``wq``, ``wk``, ``wv``, ``wo``, ``w1``, ``w2``, ``w3``)."""
    full_n_layers: int | None = None
    """Layers of the model this proxy was cut from; None when the spec is not a cut."""
    source: str = ""
    """Where the dimensions come from."""

    def __post_init__(self) -> None:
        if self.family not in _FAMILIES:
            raise ValueError(f"ModelSpec {self.name!r}: family {self.family!r} is not one of {_FAMILIES}")
        for field in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "seq_len"):
            if getattr(self, field) < 1:
                raise ValueError(f"ModelSpec {self.name!r}: {field} must be >= 1, got {getattr(self, field)}")
        if self.max_seq_len < self.seq_len:
            raise ValueError(f"ModelSpec {self.name!r}: max_seq_len {self.max_seq_len} < seq_len {self.seq_len}")
        if self.family == "moe" and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(
                f"ModelSpec {self.name!r}: MoE needs 1 <= top_k <= n_experts, got {self.top_k}, {self.n_experts}"
            )
        if self.family == "llama" and (self.n_experts or self.top_k):
            raise ValueError(f"ModelSpec {self.name!r}: dense family with n_experts/top_k set; use family 'moe'")
        if self.lora_rank:
            unknown = set(self.lora_targets) - set(_linear_shapes(self))
            if not self.lora_targets or unknown:
                raise ValueError(
                    f"ModelSpec {self.name!r}: lora_targets {self.lora_targets!r} must be a non-empty subset of "
                    f"{sorted(_linear_shapes(self))}"
                )
            if self.family != "llama":
                raise ValueError(f"ModelSpec {self.name!r}: LoRA is implemented for the dense family only")

    # -- derived facts -------------------------------------------------------------------------------

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0

    @property
    def is_proxy(self) -> bool:
        return self.full_n_layers is not None and self.full_n_layers != self.n_layers

    @property
    def param_count(self) -> int:
        """Exact number of parameters of the built module (adapters included, a tied matrix once)."""
        return (
            _embedding_params(self)
            + self.n_layers * _layer_params(self, active=False)
            + _head_params(self)
            + _lora_params(self)
        )

    @property
    def active_param_count(self) -> int:
        """Parameters one token passes through: for MoE only ``top_k`` experts per layer (plus the router)."""
        return (
            _embedding_params(self)
            + self.n_layers * _layer_params(self, active=True)
            + _head_params(self)
            + _lora_params(self)
        )

    @property
    def trainable_param_count(self) -> int:
        """Parameters the optimizer updates: the adapters for LoRA, everything otherwise."""
        return _lora_params(self) if self.is_lora else self.param_count

    def training_flops_per_token(self, seq_len: int | None = None) -> int:
        """Model FLOPs of one training token: ``6 N + 12 n_layers d_model seq_len``.

        The formula of PaLM (Chowdhery et al. 2022, appendix B) and Megatron-LM (Narayanan et al. 2021):
        each weight does one multiply-add (2 FLOPs) per token forward and two backward (input and weight
        gradients), and attention's two score/value matmuls add ``12 L d T`` (full, non-causal count, as
        those papers and torchtitan report it). ``N`` counts the weights that take part in matmuls for the
        token: the embedding lookup is excluded (no matmul) unless it is tied to the output projection; for
        MoE only the router and ``top_k`` experts count. For LoRA, frozen weights get no weight gradient, so
        they cost ``4 N_frozen`` and the adapters ``6 N_adapters``.
        """
        seq = self.seq_len if seq_len is None else seq_len
        matmul = self.active_param_count - (0 if self.tie_embeddings else _embedding_params(self))
        attention = 12 * self.n_layers * self.d_model * seq
        if self.is_lora:
            adapters = _lora_params(self)
            return 4 * (matmul - adapters) + 6 * adapters + attention
        return 6 * matmul + attention

    # -- derived specs and building -----------------------------------------------------------------

    def with_layers(self, n_layers: int) -> ModelSpec:
        """A proxy with the first ``n_layers`` blocks and every width unchanged (per-layer cost is comparable)."""
        full = self.full_n_layers or self.n_layers
        if not isinstance(n_layers, int) or not 1 <= n_layers <= full:
            raise ValueError(f"{self.name}: with_layers({n_layers!r}) needs an int in 1..{full}")
        base = self.name.split("@", 1)[0]
        name = base if n_layers == full else f"{base}@{n_layers}"
        return dataclasses.replace(self, name=name, n_layers=n_layers, full_n_layers=full)

    def base_spec(self) -> ModelSpec:
        """This spec without adapters: what a LoRA fine-tune starts from (pretrain it, then
        :meth:`apply_adapters`). Returns ``self`` for a spec without LoRA."""
        if not self.is_lora:
            return self
        return dataclasses.replace(self, name=f"{self.name}:base", lora_rank=0, lora_alpha=0.0, lora_targets=())

    def apply_adapters(self, model: nn.Module) -> list[str]:
        """Put this spec's LoRA adapters on ``model`` (built from :meth:`base_spec`) and freeze the rest."""
        if not self.is_lora:
            raise ValueError(f"{self.name}: spec has no LoRA adapters (lora_rank is 0)")
        from pytest_gpuperf.models.lora import apply_lora

        return apply_lora(model, rank=self.lora_rank, alpha=self.lora_alpha, targets=self.lora_targets)

    def llama_config(self) -> Any:
        """The :class:`~pytest_gpuperf.models.llama.LlamaConfig` of this spec (imports torch)."""
        from pytest_gpuperf.models.llama import LlamaConfig

        return LlamaConfig(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.n_layers,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            ffn_dim=self.ffn_dim,
            max_seq_len=self.max_seq_len,
            rope_theta=self.rope_theta,
            norm_eps=self.norm_eps,
            tie_embeddings=self.tie_embeddings,
        )

    def build(self, *, seed: int, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> nn.Module:
        """Random-initialised module: one seed gives the same weights on every device and in every torch release
        (:mod:`pytest_gpuperf.models.init`), so goldens recorded on one stack judge the next one.

        Built directly on ``device`` (no CPU copy of a large proxy). ``device="meta"`` returns an
        uninitialised module for deferred init: ``to_empty(device=...)`` then ``init_weights()``.
        LoRA specs come with adapters applied and the base frozen.
        """
        import torch

        from pytest_gpuperf.models.llama import Transformer

        device = torch.device(device)
        cuda_devices = [device.index or 0] if device.type == "cuda" else []
        with torch.random.fork_rng(devices=cuda_devices), device:
            torch.manual_seed(seed)
            cfg = self.llama_config()
            if self.family == "moe":
                from pytest_gpuperf.models.moe import MoEConfig, build_moe_transformer

                model = build_moe_transformer(cfg, MoEConfig(n_experts=self.n_experts, top_k=self.top_k))
            else:
                model = Transformer(cfg)
            if self.is_lora:
                self.apply_adapters(model)
        if dtype is not None:
            model.to(dtype)
        return model

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Training loss: next-token cross-entropy (nats) plus ``aux_loss_weight`` x the MoE balancing loss.

        ``model`` may be wrapped (DDP, FSDP); it is called once, through its ``forward``.
        """
        import torch.nn.functional as F

        logits, aux = model(inputs, return_aux_loss=True)
        ce = F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())
        if self.aux_loss_weight:
            return ce + self.aux_loss_weight * aux
        return ce


def _linear_shapes(spec: ModelSpec) -> dict[str, tuple[int, int]]:
    """(in, out) of each named linear in a block."""
    q = spec.n_heads * spec.head_dim
    kv = spec.n_kv_heads * spec.head_dim
    d, f = spec.d_model, spec.ffn_dim
    return {"wq": (d, q), "wk": (d, kv), "wv": (d, kv), "wo": (q, d), "w1": (d, f), "w3": (d, f), "w2": (f, d)}


def _embedding_params(spec: ModelSpec) -> int:
    return spec.vocab_size * spec.d_model


def _head_params(spec: ModelSpec) -> int:
    """Final norm plus the output projection unless it is the (already counted) embedding matrix."""
    return spec.d_model + (0 if spec.tie_embeddings else spec.vocab_size * spec.d_model)


def _layer_params(spec: ModelSpec, *, active: bool) -> int:
    shapes = _linear_shapes(spec)
    attention = sum(i * o for name, (i, o) in shapes.items() if name in ("wq", "wk", "wv", "wo"))
    mlp = sum(i * o for name, (i, o) in shapes.items() if name in ("w1", "w2", "w3"))
    norms = 2 * spec.d_model
    if spec.family == "moe":
        experts = spec.top_k if active else spec.n_experts
        return attention + norms + spec.d_model * spec.n_experts + experts * mlp
    return attention + norms + mlp


def _lora_params(spec: ModelSpec) -> int:
    if not spec.is_lora:
        return 0
    shapes = _linear_shapes(spec)
    return spec.n_layers * sum(spec.lora_rank * (shapes[t][0] + shapes[t][1]) for t in spec.lora_targets)


def _llama3(name: str, *, d_model: int, n_layers: int, n_heads: int, ffn_dim: int, source: str) -> ModelSpec:
    return ModelSpec(
        name=name, family="llama", vocab_size=128_256, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=8, ffn_dim=ffn_dim, seq_len=8192, max_seq_len=8192, rope_theta=500_000.0, source=source,
    )  # fmt: skip


def _mixtral(name: str, *, d_model: int, n_layers: int, n_heads: int, ffn_dim: int, source: str) -> ModelSpec:
    return ModelSpec(
        name=name, family="moe", vocab_size=32_000, d_model=d_model, n_layers=n_layers, n_heads=n_heads,
        n_kv_heads=8, ffn_dim=ffn_dim, seq_len=4096, max_seq_len=4096, rope_theta=1e6, n_experts=8, top_k=2,
        aux_loss_weight=0.01, source=source,
    )  # fmt: skip


_TINY_SOURCE = "sized for the CPU tier: ~14 ms/step at batch 8 on 2 cores (shared/CPU-FACTS.md)"

SPECS: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        _llama3("llama3-8b", d_model=4096, n_layers=32, n_heads=32, ffn_dim=14_336,
                source="Meta Llama 3 8B params.json (Llama 3 paper, table 3)"),
        _llama3("llama3-70b", d_model=8192, n_layers=80, n_heads=64, ffn_dim=28_672,
                source="Meta Llama 3 70B params.json (Llama 3 paper, table 3)"),
        # RoPE scaling for 128k context (Llama 3.1) is not modelled: pretraining runs at 8192.
        _llama3("llama3.1-405b", d_model=16_384, n_layers=126, n_heads=128, ffn_dim=53_248,
                source="Meta Llama 3.1 405B params.json (Llama 3 paper, table 3)"),
        _mixtral("mixtral-8x7b", d_model=4096, n_layers=32, n_heads=32, ffn_dim=14_336,
                 source="mistralai/Mixtral-8x7B-v0.1 config.json (Jiang et al. 2024, table 1)"),
        _mixtral("mixtral-8x22b", d_model=6144, n_layers=56, n_heads=48, ffn_dim=16_384,
                 source="mistralai/Mixtral-8x22B-v0.1 config.json"),
        ModelSpec(
            name="llama2-70b-lora", family="llama", vocab_size=32_000, d_model=8192, n_layers=80, n_heads=64,
            n_kv_heads=8, ffn_dim=28_672, seq_len=8192, max_seq_len=8192, rope_theta=10_000.0,
            lora_rank=16, lora_alpha=32.0, lora_targets=("wq", "wk", "wv", "wo"),
            source="Llama 2 70B params.json; LoRA r=16, alpha=32 on the attention projections at seq 8192 "
                   "as in the MLPerf Training llama2_70b_lora benchmark",
        ),
        ModelSpec(
            name="tiny-llama", family="llama", vocab_size=256, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
            ffn_dim=384, seq_len=64, max_seq_len=128, rope_theta=10_000.0, source=_TINY_SOURCE,
        ),
        ModelSpec(
            name="tiny-moe", family="moe", vocab_size=256, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
            ffn_dim=256, seq_len=64, max_seq_len=128, rope_theta=10_000.0, n_experts=4, top_k=2,
            aux_loss_weight=0.01, source=_TINY_SOURCE,
        ),
        ModelSpec(
            name="tiny-lora", family="llama", vocab_size=256, d_model=128, n_layers=2, n_heads=4, n_kv_heads=2,
            ffn_dim=384, seq_len=64, max_seq_len=128, rope_theta=10_000.0, lora_rank=8, lora_alpha=16.0,
            lora_targets=("wq", "wk", "wv", "wo", "w1", "w2", "w3"), source=_TINY_SOURCE,
        ),
    )
}  # fmt: skip


def spec_names() -> list[str]:
    return list(SPECS)


def get_spec(name: str) -> ModelSpec:
    """The spec called ``name``; ``"<name>@<n>"`` cuts it to its first ``n`` layers."""
    base, sep, layers = name.partition("@")
    if base not in SPECS:
        raise KeyError(
            f"unknown model spec {name!r}; known: {', '.join(SPECS)} "
            "(append @N for a proxy of N layers, e.g. llama3-70b@2)"
        )
    spec = SPECS[base]
    if not sep:
        return spec
    if not layers.isdigit():
        raise KeyError(f"model spec {name!r}: the part after '@' must be a layer count, e.g. {base}@2")
    return spec.with_layers(int(layers))
