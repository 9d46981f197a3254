"""Hugging Face architectures as model specs: built by ``transformers`` from a ``config.json`` with random weights.

``HFSpec`` stands wherever the suites take a ``ModelSpec`` (models/registry.py). Names (``--gpuperf-models``):
``hf:NAME`` a configuration shipped in ``models/hf_configs/``, ``hf:PATH`` a user's ``config.json``; ``+lora``
adds LoRA adapters (peft), ``@N`` cuts the model to N layers (``hf:llama3.1-8b+lora@2``). The cut rule
(``cut_fields``) keeps every kind of layer the full model has and, on the CPU tiers, shrinks the widths to
hidden 128 and the vocabulary to 256 (docs/training.md). Parameter counts are exact (built on the meta device).
Initial weights come from models/init.py, filled by parameter name. The module imports neither torch nor
transformers; the methods that need them do.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.core.store.schema import UnreadableFile, read_file

if TYPE_CHECKING:
    import torch
    from torch import nn

__all__ = [
    "HFModelError",
    "HFSpec",
    "INSTALL_HINT",
    "cut_fields",
    "get_hf_spec",
    "init_weights",
    "is_hf_name",
    "load_config",
    "read_config",
    "shipped_names",
]

PREFIX = "hf:"
CONFIG_DIR = Path(__file__).parent / "hf_configs"
INSTALL_HINT = "pip install 'pytest-gpuperf[hf]'"
CONFIG_MAX_BYTES = 16 * 1024 * 1024
"""A config.json is a few kilobytes; anything near this is not one."""

CPU_HIDDEN = 128
CPU_VOCAB = 256
CPU_SEQ_LEN = 64
CPU_MAX_SEQ_LEN = 128
CPU_LAYERS = 2
"""Layers of the CPU tiers' cut when the name gives no ``@N``: one layer of each kind the cut keeps."""
HEAD_DIM_DIVISOR = 4
GPU_SEQ_LEN = 4096
"""Training sequence of a GPU (layer-only) cut: the GPU tier's throughput sequence."""
LORA_FULL = (16, 32.0)
"""(rank, alpha) of LoRA on a full-width model: the MLPerf llama2_70b_lora recipe's r=16, alpha=32."""
LORA_CPU = (16, 32.0)
"""(rank, alpha) at the CPU width, on every linear as the built-in tiny-lora: its r=8 leaves the three seeds of
the fine-tune a few hundredths of a nat short of the target within the budget (measured), r=16 reaches it."""

_EXPERT_COUNT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
_NAME = re.compile(r"^(?P<ref>.+?)(?P<lora>\+lora)?(?:@(?P<layers>\d+))?$")


class HFModelError(ValueError):
    """An ``hf:`` model that cannot be used; the message is one line naming the model or file and what to do."""


def is_hf_name(name: str) -> bool:
    return name.startswith(PREFIX)


def shipped_names() -> list[str]:
    """The shipped configurations as ``hf:`` names."""
    return [PREFIX + path.stem for path in sorted(CONFIG_DIR.glob("*.json"))]


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise HFModelError(f"Hugging Face models need transformers and peft: {INSTALL_HINT}") from None
    return transformers


def _config_path(ref: str) -> Path:
    if ref.endswith(".json") or "/" in ref or "\\" in ref:
        return Path(ref).expanduser()
    path = CONFIG_DIR / f"{ref}.json"
    if not path.is_file():
        known = ", ".join(shipped_names())
        raise HFModelError(f"no shipped configuration {PREFIX}{ref}; shipped: {known} (or hf:PATH/config.json)")
    return path


@lru_cache(maxsize=64)
def read_config(ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(config.json fields, the ``_gpuperf`` block or {}) of a shipped name or a path; JSON only, no transformers."""
    path = _config_path(ref)
    try:  # the one bounded reader of regular files: a FIFO, /dev/zero or a huge file is refused, not read
        data = json.loads(read_file(path, limit=CONFIG_MAX_BYTES).decode("utf-8"))
    except UnreadableFile as error:
        if error.kind == "missing":
            raise HFModelError(f"{path}: no such file (hf:PATH must name a config.json)") from None
        raise HFModelError(str(error)) from None
    except ValueError as error:  # UnicodeDecodeError included
        raise HFModelError(f"{path}: not valid JSON ({error})") from None
    except RecursionError:
        raise HFModelError(
            f"{path}: not valid JSON (nested too deeply to read); give the model's config.json"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("model_type"), str):
        raise HFModelError(f"{path}: a config.json object with a 'model_type' string is expected")
    if isinstance(data.get("text_config"), dict) and "num_hidden_layers" not in data:
        raise HFModelError(f"{path}: a multimodal config ({data['model_type']}); give its text_config as its own file")
    meta = data.pop("_gpuperf", {})
    return data, meta if isinstance(meta, dict) else {}


def load_config(ref: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """:func:`read_config`, and the model type checked against the installed transformers."""
    fields, meta = read_config(ref)
    _require_transformers()
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    if fields["model_type"] not in CONFIG_MAPPING:
        raise HFModelError(
            f"{_config_path(ref)}: model_type {fields['model_type']!r} is unknown to the installed transformers "
            "(a newer release, or trust_remote_code models, are not supported)"
        )
    return dict(fields), meta


def _config(fields: dict[str, Any]) -> Any:
    _require_transformers()
    from transformers import AutoConfig

    fields = dict(fields)
    return AutoConfig.for_model(fields.pop("model_type"), **fields)


def _round8(value: float) -> int:
    return max(8, int(round(value / 8)) * 8)


def _layer_cut(fields: dict[str, Any], full: Any, n: int) -> dict[str, Any]:
    total = full.num_hidden_layers
    if not 1 <= n <= total:
        raise HFModelError(f"@{n}: the model has {total} layers; cut to 1..{total}")
    out = dict(fields, num_hidden_layers=n)
    dense = fields.get("first_k_dense_replace")
    if isinstance(dense, int) and 0 < dense < total:
        out["first_k_dense_replace"] = 0 if n == 1 else min(n - 1, max(1, round(dense * n / total)))
    if isinstance(fields.get("mlp_only_layers"), list):
        out["mlp_only_layers"] = [i for i in fields["mlp_only_layers"] if i < n]
    if isinstance(fields.get("max_window_layers"), int):
        out["max_window_layers"] = min(fields["max_window_layers"], n)
    layer_types = getattr(full, "layer_types", None)
    if layer_types:
        kept = list(layer_types[:n])
        missing = [kind for kind in dict.fromkeys(layer_types) if kind not in kept]
        for offset, kind in enumerate(missing[: n - 1]):  # the first layer keeps its kind
            kept[n - 1 - offset] = kind
        out["layer_types"] = kept
    return out


def _width_cut(fields: dict[str, Any], full: Any) -> dict[str, Any]:
    out = dict(fields)
    hidden = full.hidden_size
    scale = hidden / CPU_HIDDEN
    out["hidden_size"] = CPU_HIDDEN
    for key in ("intermediate_size", "moe_intermediate_size", "q_lora_rank", "kv_lora_rank"):
        if isinstance(fields.get(key), int) and fields[key] > 0:
            out[key] = _round8(fields[key] / scale)
    heads, kv = full.num_attention_heads, getattr(full, "num_key_value_heads", None) or full.num_attention_heads
    ratio = max(1, heads // kv)
    kv_cut = max(1, round(kv * HEAD_DIM_DIVISOR / scale))
    out["num_key_value_heads"], out["num_attention_heads"] = kv_cut, kv_cut * ratio
    mla = "qk_nope_head_dim" in fields
    if mla:
        for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            out[key] = max(8, fields[key] // HEAD_DIM_DIVISOR)
    else:
        head_dim = getattr(full, "head_dim", None) or hidden // heads
        out["head_dim"] = max(8, head_dim // HEAD_DIM_DIVISOR)
    scalar = fields.get("query_pre_attn_scalar")
    if isinstance(scalar, (int, float)):
        out["query_pre_attn_scalar"] = type(scalar)(scalar / HEAD_DIM_DIVISOR) or scalar
    experts_key = next((k for k in _EXPERT_COUNT_KEYS if isinstance(fields.get(k), int) and fields[k] > 0), None)
    if experts_key is not None:
        top_k = int(fields.get("num_experts_per_tok", 1))
        groups = int(fields.get("n_group") or 1)
        experts = min(fields[experts_key], 2 * top_k)
        out[experts_key] = min(fields[experts_key], -(-experts // groups) * groups)
    layer_types = getattr(full, "layer_types", None) or ()
    if "sliding_attention" in layer_types and isinstance(fields.get("sliding_window"), int):
        out["sliding_window"] = max(8, fields["sliding_window"] * CPU_SEQ_LEN // GPU_SEQ_LEN)
    out["vocab_size"] = CPU_VOCAB
    for key in ("pad_token_id", "bos_token_id", "eos_token_id"):
        value = fields.get(key)
        if isinstance(value, list):
            value = [v for v in value if v < CPU_VOCAB] or None
        elif isinstance(value, int) and value >= CPU_VOCAB:
            value = None
        if key in fields:
            out[key] = value
    return out


def cut_fields(fields: dict[str, Any], *, layers: int | None, width: bool) -> dict[str, Any]:
    """The configuration fields of a cut (module docstring); ``layers=None`` keeps the depth."""
    full = _config(fields)
    out = dict(fields)
    if layers is not None:
        out = _layer_cut(out, full, layers)
    if width:
        out = _width_cut(out, full)
    return out


# -- counting on the meta device ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Counts:
    total: int
    """Parameters of the built model, a tied matrix once, adapters excluded."""
    embedding: int
    """Input embedding matrix."""
    tied: bool
    """The output projection is the embedding matrix."""
    routed: int
    """Parameters of routed experts (under an ``.experts.`` module)."""
    experts: int
    top_k: int
    adapters: int
    """LoRA parameters for the spec's rank (0 without LoRA)."""

    @property
    def active(self) -> int:
        if not self.routed:
            return self.total
        return self.total - self.routed + self.routed * self.top_k // self.experts


def _lora_targets(model: nn.Module, *, attention_only: bool) -> list[tuple[str, int, int]]:
    """(name, in, out) of the linears LoRA adapts: those directly under an attention module (``self_attn``), or
    with ``attention_only=False`` every linear of the decoder layers (attention and MLP, shared experts too;
    routers and fused routed experts are not ``nn.Linear``, the output head is outside the layers)."""
    from torch import nn

    def chosen(name: str) -> bool:
        if attention_only:
            return name.rsplit(".", 2)[-2:-1] == ["self_attn"]
        return ".layers." in f".{name}" and name.rsplit(".", 1)[-1] != "gate"  # a linear router stays frozen

    return [
        (name, module.in_features, module.out_features)
        for name, module in model.named_modules()
        if isinstance(module, nn.Linear) and chosen(name)
    ]


@lru_cache(maxsize=128)
def _counts(fields_json: str, lora_rank: int, attention_only: bool = True) -> Counts:
    import torch

    fields = json.loads(fields_json)
    config = _config(fields)
    _require_transformers()
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.tie_weights()
    total = sum(p.numel() for p in model.parameters())
    embedding = model.get_input_embeddings().weight
    output = model.get_output_embeddings()
    tied = output is not None and output.weight is embedding
    routed = sum(p.numel() for name, p in model.named_parameters() if ".experts." in f".{name}")
    experts = next((int(getattr(config, k)) for k in _EXPERT_COUNT_KEYS if getattr(config, k, None)), 0)
    top_k = int(getattr(config, "num_experts_per_tok", 0) or 0)
    if routed and not (experts and 1 <= top_k <= experts):
        raise HFModelError(f"{config.model_type}: routed experts found but no experts/top-k in the config")
    targets = _lora_targets(model, attention_only=attention_only) if lora_rank else []
    adapters = sum(lora_rank * (i + o) for _, i, o in targets)
    return Counts(total=total, embedding=embedding.numel(), tied=tied, routed=routed, experts=experts,
                  top_k=top_k, adapters=adapters)  # fmt: skip


def _attention_flops(config: Any, seq: int) -> int:
    """Score and value matmuls of one training token, forward and backward: ``6 T_l n_q (d_qk + d_v)`` summed
    over layers, ``T_l`` the keys a query attends (``min(T, window)`` on sliding-window layers). For Llama
    (``d_qk = d_v = d / n_q``) this is the built-in specs' ``12 L d T``."""
    heads = config.num_attention_heads
    if getattr(config, "qk_nope_head_dim", None):
        qk = config.qk_nope_head_dim + config.qk_rope_head_dim
        v = config.v_head_dim
    else:
        qk = v = getattr(config, "head_dim", None) or config.hidden_size // heads
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    window = getattr(config, "sliding_window", None)
    keys = [min(seq, window) if kind == "sliding_attention" and window else seq for kind in layer_types]
    return sum(6 * t * heads * (qk + v) for t in keys[: config.num_hidden_layers])


# -- the spec ------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class HFSpec:
    """A transformers architecture from a configuration, cut by the module's rule, with optional LoRA."""

    name: str
    """As given to ``--gpuperf-models`` (``hf:qwen3-30b-a3b@2``): the test id."""
    family: str
    """``"moe"`` when the configuration routes tokens to experts, else ``"dense"`` (for ``gpuperf_models``)."""
    model_type: str
    fields_json: str
    """The configuration this spec builds (cut), canonical JSON."""
    full_fields_json: str
    """The published configuration (full model)."""
    seq_len: int
    max_seq_len: int
    n_layers: int
    full_n_layers: int
    width_cut: bool
    """Width scaled down for the CPU tiers."""
    lora_rank: int = 0
    lora_alpha: float = 0.0
    lora_attention_only: bool = True
    """LoRA on the attention projections only (MLPerf's recipe, full width) or on every linear of the layers
    (the CPU cut, as the built-in tiny-lora: attention alone cannot follow the fine-tune's shifted chain)."""
    aux_loss_weight: float = 0.0
    """Router load-balancing weight (``router_aux_loss_coef`` where the configuration asks for router logits)."""
    source: str = ""
    meta_json: str = "{}"
    """The shipped ``_gpuperf`` block: source and published parameter counts."""

    # -- facts ---------------------------------------------------------------------------------------

    @property
    def fields(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.fields_json)
        return result

    @property
    def meta(self) -> dict[str, Any]:
        result: dict[str, Any] = json.loads(self.meta_json)
        return result

    @property
    def vocab_size(self) -> int:
        return int(self.fields["vocab_size"])

    @property
    def d_model(self) -> int:
        return int(self.fields["hidden_size"])

    @property
    def is_lora(self) -> bool:
        return self.lora_rank > 0

    @property
    def is_proxy(self) -> bool:
        return self.width_cut or self.n_layers != self.full_n_layers

    @property
    def cut(self) -> str:
        """The cut in words, for listings."""
        width = f", width {self.d_model} (CPU rule)" if self.width_cut else ""
        return f"{self.n_layers} of {self.full_n_layers} layers{width}"

    def counts(self) -> Counts:
        return _counts(self.fields_json, self.lora_rank, self.lora_attention_only)

    def full_counts(self) -> Counts:
        return _counts(self.full_fields_json, 0)

    @property
    def param_count(self) -> int:
        """Exact parameters of the built module (adapters included, a tied matrix once)."""
        counts = self.counts()
        return counts.total + counts.adapters

    @property
    def active_param_count(self) -> int:
        counts = self.counts()
        return counts.active + counts.adapters

    @property
    def trainable_param_count(self) -> int:
        return self.counts().adapters if self.is_lora else self.param_count

    def training_flops_per_token(self, seq_len: int | None = None) -> int:
        """The built-in specs' formula (``ModelSpec.training_flops_per_token``, PaLM appendix B): ``6 N`` over
        the matmul weights one token passes (active experts only; the embedding lookup excluded unless tied to
        the output) plus the attention term of :func:`_attention_flops`; LoRA: ``4 N_frozen + 6 N_adapters``."""
        counts = self.counts()
        seq = self.seq_len if seq_len is None else seq_len
        matmul = counts.active - (0 if counts.tied else counts.embedding) + counts.adapters
        attention = _attention_flops(self.config(), seq)
        if self.is_lora:
            return 4 * (matmul - counts.adapters) + 6 * counts.adapters + attention
        return 6 * matmul + attention

    def config(self) -> Any:
        """The transformers configuration object this spec builds."""
        return _config(self.fields)

    # -- derived specs -------------------------------------------------------------------------------

    def with_layers(self, n_layers: int) -> HFSpec:
        return _make(f"{self.name.split('@', 1)[0]}@{n_layers}", width=self.width_cut)

    def base_spec(self) -> HFSpec:
        """This spec without adapters (what a LoRA fine-tune pretrains first); ``self`` without LoRA."""
        if not self.is_lora:
            return self
        return dataclasses.replace(self, name=f"{self.name}:base", lora_rank=0, lora_alpha=0.0)

    # -- building ------------------------------------------------------------------------------------

    def build(self, *, seed: int, device: str | torch.device = "cpu", dtype: torch.dtype | None = None) -> nn.Module:
        """The transformers model with this spec's deterministic initial weights (:func:`init_weights`), LoRA
        adapters applied for a LoRA spec. ``device="meta"`` gives the uninitialised module (for counting)."""
        import torch

        _require_transformers()
        from transformers import AutoModelForCausalLM

        config = self.config()
        device = torch.device(device)
        if device.type == "meta":
            with device:
                return AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        with _no_init_weights(), device:
            model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        init_weights(model, seed=seed)
        if self.is_lora:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.apply_adapters(model)
        if dtype is not None:
            model.to(dtype)
        return model

    def apply_adapters(self, model: nn.Module) -> list[str]:
        """Wrap the linears of ``model`` that :attr:`lora_attention_only` names with peft LoRA adapters
        (``peft.get_peft_model``, which injects them into ``model`` in place and freezes the rest); the adapters'
        initial weights come from
        :mod:`~pytest_gpuperf.models.init` keyed by ``torch.initial_seed()`` (the workloads seed it) and their
        names: A uniform in +-1/sqrt(fan_in) (peft's own Kaiming bound), B zero. Returns the wrapped modules."""
        if not self.is_lora:
            raise ValueError(f"{self.name}: spec has no LoRA adapters")
        try:
            from peft import LoraConfig, get_peft_model
        except ImportError:
            raise HFModelError(f"{self.name}: LoRA on Hugging Face models needs peft: {INSTALL_HINT}") from None
        import torch

        from pytest_gpuperf.models import init

        targets = [name for name, _, _ in _lora_targets(model, attention_only=self.lora_attention_only)]
        lora = LoraConfig(r=self.lora_rank, lora_alpha=int(self.lora_alpha), target_modules=targets, lora_dropout=0.0,
                          bias="none")  # fmt: skip
        with warnings.catch_warnings():  # peft asks transformers a deprecated question (is_gradient_checkpointing)
            warnings.filterwarnings("ignore", category=FutureWarning)
            get_peft_model(model, lora)  # type: ignore[arg-type,unused-ignore]
        seed = torch.initial_seed()
        for name, param in model.named_parameters():
            if ".lora_A." in name:
                init.uniform_(param, seed=seed, key=name, bound=1.0 / math.sqrt(param.shape[1]))
            elif ".lora_B." in name:
                with torch.no_grad():
                    param.zero_()
        return targets

    def loss(self, model: nn.Module, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Next-token cross-entropy (nats) of the model's logits, plus ``aux_loss_weight`` x its router loss."""
        import torch.nn.functional as F

        out = model(input_ids=inputs, use_cache=False)
        ce = F.cross_entropy(out.logits.flatten(0, 1).float(), targets.flatten())
        aux = getattr(out, "aux_loss", None)
        if self.aux_loss_weight and aux is not None:
            return ce + self.aux_loss_weight * aux
        return ce


def _no_init_weights() -> Any:
    try:
        from transformers.initialization import no_init_weights  # transformers >= 5
    except ImportError:  # pragma: no cover - transformers 4
        from transformers.modeling_utils import no_init_weights  # type: ignore[attr-defined,no-redef]
    return no_init_weights()


# -- initial weights -----------------------------------------------------------------------------------


def _neutral_norm_value(module: nn.Module, dim: int) -> float:
    """1.0 or 0.0: the weight with which the norm returns x / rms(x) (Gemma's RMSNorm scales by 1 + weight)."""
    import torch

    weight: torch.Tensor = module.weight  # type: ignore[assignment]
    bias: torch.Tensor | None = getattr(module, "bias", None)
    x = torch.linspace(-2.0, 2.0, dim, device=weight.device, dtype=weight.dtype).unsqueeze(0)
    expected = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))
    for value in (1.0, 0.0):
        with torch.no_grad():
            weight.fill_(value)
            if bias is not None:
                bias.zero_()
            if torch.allclose(module(x).float(), expected.float(), atol=1e-3):
                return value
    raise HFModelError(f"{type(module).__name__}: neither weight 1 nor 0 makes it an identity norm")


def init_weights(model: nn.Module, *, seed: int) -> None:
    """Fill every parameter and persistent buffer of ``model`` by name (module docstring); ties first."""
    import torch

    from pytest_gpuperf.models import init

    config: Any = model.config
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    std = float(getattr(text, "initializer_range", None) or 0.02)
    tie: Any = model.tie_weights
    tie()
    done: set[int] = set()
    for module_name, module in model.named_modules():
        is_norm = "Norm" in type(module).__name__ and isinstance(getattr(module, "weight", None), torch.nn.Parameter)
        for param_name, param in module.named_parameters(recurse=False):
            if id(param) in done:
                continue
            done.add(id(param))
            key = f"{module_name}.{param_name}" if module_name else param_name
            if is_norm and param_name == "weight":
                _neutral_norm_value(module, param.shape[-1])
            elif param_name.endswith("bias"):
                with torch.no_grad():
                    param.zero_()
            else:
                init.normal_(param, seed=seed, key=key, std=std)
                padding = getattr(module, "padding_idx", None)
                if isinstance(module, torch.nn.Embedding) and padding is not None:
                    with torch.no_grad():
                        param[padding].zero_()
        for buffer_name, buffer in module.named_buffers(recurse=False):
            key = f"{module_name}.{buffer_name}"
            if buffer_name in module._non_persistent_buffers_set:
                if buffer.is_meta or (buffer.is_floating_point() and not bool(torch.isfinite(buffer).all())):
                    raise HFModelError(f"buffer {key}: not computed by its module (meta or non-finite)")
            elif buffer_name.endswith("bias"):
                buffer.zero_()
            else:
                raise HFModelError(f"buffer {key}: no initialisation rule for a persistent buffer of this name")
    tie()


# -- names -----------------------------------------------------------------------------------------------


def split_name(name: str) -> tuple[str, bool, int | None]:
    """``hf:REF[+lora][@N]`` -> (REF, LoRA or not, N or None)."""
    found = _NAME.match(name[len(PREFIX) :]) if is_hf_name(name) else None
    if found is None or not found.group("ref"):
        raise HFModelError(f"{name!r}: expected hf:NAME or hf:PATH/config.json, then +lora and @N if wanted")
    layers = found.group("layers")
    return found.group("ref"), found.group("lora") is not None, None if layers is None else int(layers)


def _make(name: str, *, width: bool) -> HFSpec:
    """The spec of ``name`` (``hf:REF[+lora][@N]``, kept as its name: the test id) cut to the name's ``@N``
    layers, else to the CPU tiers' default or (GPU) not at all, and in width on the CPU tiers."""
    ref, lora, layers = split_name(name)
    fields, meta = load_config(ref)
    if layers is None and width:
        layers = CPU_LAYERS
    try:
        full = _config(fields)
        if layers is not None and not 1 <= layers <= full.num_hidden_layers:
            raise HFModelError(f"the model has {full.num_hidden_layers} layers; cut to 1..{full.num_hidden_layers}")
        cut = cut_fields(fields, layers=None if layers is None else min(layers, full.num_hidden_layers), width=width)
        _config(cut)
    except HFModelError as error:
        raise HFModelError(f"{name}: {error}") from None
    except Exception as error:  # whatever the config class raises (huggingface_hub's strict-dataclass
        # validation error is no ValueError) is a problem of the user's file: one line, no traceback
        reason = " ".join(str(error).split())
        raise HFModelError(f"{name}: transformers rejects the configuration ({reason})") from None
    experts = any(isinstance(fields.get(k), int) and fields[k] > 0 for k in _EXPERT_COUNT_KEYS)
    rank, alpha = (LORA_CPU if width else LORA_FULL) if lora else (0, 0.0)
    positions = int(getattr(full, "max_position_embeddings", GPU_SEQ_LEN) or GPU_SEQ_LEN)
    seq_len, max_seq_len = (CPU_SEQ_LEN, CPU_MAX_SEQ_LEN) if width else (min(GPU_SEQ_LEN, positions),) * 2
    aux = float(fields.get("router_aux_loss_coef", 0.0) or 0.0) if fields.get("output_router_logits") else 0.0
    return HFSpec(
        name=name,
        family="moe" if experts else "dense",
        model_type=str(fields["model_type"]),
        fields_json=json.dumps(cut, sort_keys=True),
        full_fields_json=json.dumps(fields, sort_keys=True),
        seq_len=seq_len,
        max_seq_len=max_seq_len,
        n_layers=int(cut["num_hidden_layers"]),
        full_n_layers=int(full.num_hidden_layers),
        width_cut=width,
        lora_rank=rank,
        lora_alpha=alpha,
        lora_attention_only=not width,
        aux_loss_weight=aux,
        source=str(meta.get("source", _config_path(ref))),
        meta_json=json.dumps(meta, sort_keys=True),
    )


def get_hf_spec(name: str, *, cpu: bool) -> HFSpec:
    """The spec of ``hf:REF[+lora][@N]`` for a CPU tier (layers and width cut) or a GPU one (layers only)."""
    return _make(name, width=cpu)
