"""Llama-3-style dense decoder in plain torch: RMSNorm, RoPE, grouped-query attention, SwiGLU.

Layout follows Meta's reference implementation so distributed plans can target modules by name:
``tok_embeddings``, ``layers[i].attention.{wq,wk,wv,wo}``, ``layers[i].feed_forward.{w1,w2,w3}``,
``layers[i].{attention_norm,ffn_norm}``, ``norm``, ``output``. Each block is one entry of the ``layers``
ModuleList, so FSDP2 can shard block by block; views use ``-1`` for the head count, so a tensor-parallel
plan that shards ``wq/wk/wv`` column-wise and ``wo`` row-wise works without touching this file.

The MoE family (``moe.py``) reuses everything here and swaps the feed-forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

__all__ = [
    "FeedForward",
    "KVCache",
    "LlamaConfig",
    "RMSNorm",
    "RotaryEmbedding",
    "Attention",
    "Transformer",
    "TransformerBlock",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class LlamaConfig:
    """Architecture of a Llama-style decoder (no training settings)."""

    vocab_size: int
    """Number of token ids; embedding rows and output logits."""
    d_model: int
    """Residual stream width (Meta's ``dim``)."""
    n_layers: int
    """Number of transformer blocks."""
    n_heads: int
    """Query heads; ``d_model`` must be divisible by it."""
    n_kv_heads: int
    """Key/value heads (grouped-query attention); must divide ``n_heads``."""
    ffn_dim: int
    """Hidden width of the SwiGLU MLP (``w1``/``w3`` output, ``w2`` input)."""
    max_seq_len: int
    """Longest sequence the rotary table covers (training or cache length)."""
    rope_theta: float = 500_000.0
    """RoPE base frequency (Llama 3: 500000; Llama 2: 10000; Mixtral: 1e6)."""
    norm_eps: float = 1e-5
    """Epsilon of every RMSNorm."""
    tie_embeddings: bool = False
    """Share the output projection with the token embedding (Llama 3 8B+ are untied)."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "n_kv_heads", "ffn_dim", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"LlamaConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads:
            raise ValueError(
                f"LlamaConfig: d_model {self.d_model} is not divisible by n_heads {self.n_heads}; "
                "pick a head count that divides the width"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"LlamaConfig: n_heads {self.n_heads} is not a multiple of n_kv_heads {self.n_kv_heads} "
                "(grouped-query attention shares each kv head among n_heads/n_kv_heads query heads)"
            )
        if (self.d_model // self.n_heads) % 2:
            raise ValueError(f"LlamaConfig: head_dim {self.d_model // self.n_heads} must be even for RoPE")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


class RMSNorm(nn.Module):
    """Root-mean-square layer norm, computed in fp32 and cast back (as Meta's reference does)."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        normed = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.type_as(x) * self.weight.to(x.dtype)

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


class RotaryEmbedding(nn.Module):
    """Rotary position embedding on adjacent pairs of each head's channels (Meta's complex form, in reals).

    The cos/sin tables are non-persistent buffers; they are cast to the activation dtype in ``forward``
    because DeepSpeed's bf16 engine no longer casts buffers, and fp32 tables meeting bf16 q/k fail in SDPA.
    """

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, head_dim: int, max_seq_len: int, theta: float) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.max_seq_len = max_seq_len
        self.theta = theta
        cos, sin = self._tables(None)  # on the device of the enclosing torch.device context, if any
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def _tables(self, device: torch.device | None) -> tuple[torch.Tensor, torch.Tensor]:
        inv_freq = 1.0 / (
            self.theta ** (torch.arange(0, self.head_dim, 2, device=device, dtype=torch.float64) / self.head_dim)
        )
        angles = torch.outer(torch.arange(self.max_seq_len, device=device, dtype=torch.float64), inv_freq)
        return angles.cos().float(), angles.sin().float()

    def reset_parameters(self) -> None:
        """Recompute the tables in place (after ``to_empty`` from the meta device)."""
        cos, sin = self._tables(self.cos.device)
        with torch.no_grad():
            self.cos.copy_(cos)
            self.sin.copy_(sin)

    def forward(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotate ``x`` of shape (batch, seq, heads, head_dim) at integer ``positions`` (seq,) or (batch, seq)."""
        cos = self.cos[positions].to(x.dtype)
        sin = self.sin[positions].to(x.dtype)
        if positions.dim() == 1:  # shared positions: (seq, half) -> broadcast over batch
            cos, sin = cos[None], sin[None]
        cos, sin = cos[:, :, None, :], sin[:, :, None, :]  # (batch, seq, 1, half)
        pairs = x.unflatten(-1, (-1, 2))
        even, odd = pairs[..., 0], pairs[..., 1]
        rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
        return rotated.flatten(-2)


GPU_KEY_MULTIPLE = 256
"""``KVCache.key_multiple`` that ``KVCache.for_model`` gives a cache off the CPU: a 1k-token decode attends over 4
key lengths instead of 1023, for at most 255 masked keys more per row."""


def _on_meta() -> bool:
    """True while modules are being built under ``torch.device('meta')`` (deferred init for FSDP2)."""
    return torch.empty(0).device.type == "meta"


class KVCache:
    """Preallocated key/value cache for incremental decoding, one (k, v) pair per layer.

    Tensors are (batch, max_len, n_kv_heads, head_dim). A forward with ``start_pos`` writes its T new keys
    at positions ``start_pos : start_pos + T`` of each row. ``start_pos`` may be an int (every row at the same
    position) or a LongTensor (batch,) so that rows of a continuous batch sit at different positions. Entries
    past a row's current position are never attended to (the attention mask hides them), so a slot is
    reused for a new request simply by prefilling it again from position 0.

    ``key_multiple``: a forward onto an existing cache (a decode step, or a prefill that continues one) attends
    over the keys up to its ``end`` rounded up to this multiple (at most ``max_len``); the mask hides the extra
    keys, so the outputs are those of the exact length. The decode's key length otherwise grows by one every
    step, and on a GPU each new shape may cost the attention kernel a new plan (docs/inference.md has what that
    cost on an H200); a rounded length keeps a whole decode at a handful of shapes. ``for_model`` takes
    :data:`GPU_KEY_MULTIPLE` on accelerators and 1 (exact lengths) on a CPU, where a step is host-bound and the
    stored baselines were recorded at exact lengths.
    """

    def __init__(
        self,
        *,
        n_layers: int,
        batch_size: int,
        max_len: int,
        n_kv_heads: int,
        head_dim: int,
        device: torch.device | str = "cpu",
        dtype: torch.dtype = torch.float32,
        key_multiple: int = 1,
    ) -> None:
        if not isinstance(key_multiple, int) or key_multiple < 1:
            raise ValueError(f"KVCache: key_multiple must be a positive int, got {key_multiple!r}")
        shape = (batch_size, max_len, n_kv_heads, head_dim)
        self.batch_size = batch_size
        self.max_len = max_len
        self.key_multiple = key_multiple
        self.k = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]
        self.v = [torch.zeros(shape, device=device, dtype=dtype) for _ in range(n_layers)]

    @classmethod
    def for_model(
        cls,
        model: Transformer,
        *,
        batch_size: int,
        max_len: int | None = None,
        dtype: torch.dtype | None = None,
        key_multiple: int | None = None,
    ) -> KVCache:
        """A cache shaped for ``model`` (on its device, in its parameter dtype unless ``dtype`` is given); its
        ``key_multiple`` is 1 on a CPU and :data:`GPU_KEY_MULTIPLE` on any other device unless given."""
        cfg = model.config
        param = next(model.parameters())
        if key_multiple is None:
            key_multiple = 1 if param.device.type == "cpu" else GPU_KEY_MULTIPLE
        return cls(
            n_layers=len(model.layers),
            batch_size=batch_size,
            max_len=cfg.max_seq_len if max_len is None else max_len,
            n_kv_heads=cfg.n_kv_heads,
            head_dim=cfg.head_dim,
            device=param.device,
            dtype=dtype or param.dtype,
            key_multiple=key_multiple,
        )

    def rows(self, start: int, stop: int) -> KVCache:
        """A cache over rows ``start:stop`` sharing this cache's storage: a continuous-batching engine
        prefills the slots a new request joins, or decodes only the occupied leading slots, without copies."""
        if not 0 <= start < stop <= self.batch_size:
            raise ValueError(f"KVCache.rows({start}, {stop}): need 0 <= start < stop <= {self.batch_size}")
        view = object.__new__(KVCache)
        view.batch_size = stop - start
        view.max_len = self.max_len
        view.key_multiple = self.key_multiple
        view.k = [t[start:stop] for t in self.k]
        view.v = [t[start:stop] for t in self.v]
        return view

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, end: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``k, v`` (batch, T, kv_heads, head_dim) at ``positions`` (batch, T); return keys/values so far.

        ``end`` is ``max(positions) + 1``, computed once per forward by the caller (it costs a device sync).
        The returned tensors cover positions ``0 .. end`` of every row for a fresh prefill (``end == T``: its
        causal attention needs exactly its own keys), else ``0 .. key_length(end)``.
        """
        batch, seq = positions.shape
        if batch != self.batch_size:
            raise ValueError(f"KVCache holds {self.batch_size} rows, forward got a batch of {batch}")
        if end > self.max_len:
            raise ValueError(
                f"KVCache: writing position {end - 1} but max_len is {self.max_len}; allocate a longer cache"
            )
        rows = torch.arange(batch, device=positions.device)[:, None].expand(batch, seq)
        k_cache, v_cache = self.k[layer], self.v[layer]
        k_cache[rows, positions] = k.to(k_cache.dtype)
        v_cache[rows, positions] = v.to(v_cache.dtype)
        keys = end if end == seq else self.key_length(end)
        return k_cache[:, :keys], v_cache[:, :keys]

    def key_length(self, end: int) -> int:
        """Keys a forward onto the cache attends over when its rows reach at most position ``end - 1``: ``end``
        rounded up to ``key_multiple``, at most ``max_len``."""
        return min(-(-end // self.key_multiple) * self.key_multiple, self.max_len)


def _cached_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Attention of queries at ``positions`` (batch, seq) over cached keys 0..k.shape[1]; (batch, seq, heads, dim).

    A key at j is visible to a query at p when j <= p, so keys past every row's position (``KVCache.key_length``
    rounds the length up) are hidden. Grouped-query heads are folded into the query length
    instead of repeating the keys: q (batch, seq, kv * rep, dim) becomes (batch, kv, rep * seq, dim), which
    attends to the cache's own kv heads. Repeating them would copy the whole cache ``rep`` times on every
    decode step (Llama 3: 4x, ~5 GB per layer at 64 rows x 9k positions), which dominates a long decode.
    """
    batch, seq, heads, dim = q.shape
    kv_heads = k.shape[2]
    rep = heads // kv_heads
    key_pos = torch.arange(k.shape[1], device=q.device)
    mask = (key_pos[None, None, :] <= positions[:, :, None])[:, None]  # (batch, 1, seq, keys)
    # query head h uses kv head h // rep (as repeat_interleave pairs them); folded row r * seq + s
    folded = q.unflatten(2, (kv_heads, rep)).permute(0, 2, 3, 1, 4).reshape(batch, kv_heads, rep * seq, dim)
    if rep > 1 and seq > 1:
        mask = mask.repeat(1, 1, rep, 1)
    out = F.scaled_dot_product_attention(folded, k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
    return out.view(batch, kv_heads, rep, seq, dim).permute(0, 3, 1, 2, 4)


class Attention(nn.Module):
    """Grouped-query self-attention through ``F.scaled_dot_product_attention``."""

    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.head_dim = cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.n_kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        *,
        rope: RotaryEmbedding,
        positions: torch.Tensor,
        cache: KVCache | None,
        layer: int,
        end: int,
    ) -> torch.Tensor:
        batch, seq, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds n_heads/tp of them.
        q = self.wq(x).view(batch, seq, -1, self.head_dim)
        k = self.wk(x).view(batch, seq, -1, self.head_dim)
        v = self.wv(x).view(batch, seq, -1, self.head_dim)
        q, k = rope(q, positions), rope(k, positions)
        if cache is not None:
            k, v = cache.update(layer, k, v, positions, end)
            k, v = k.to(q.dtype), v.to(q.dtype)
            if end != seq:
                return self.wo(_cached_attention(q, k, v, positions).reshape(batch, seq, -1))
            # end == seq: every row holds exactly this forward's keys at positions 0..seq-1 (a fresh prefill),
            # so the visibility mask is the causal one and the mask-free kernels (flash) can serve it.
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (batch, heads, seq, head_dim)
        n_rep = q.shape[1] // k.shape[1]
        if n_rep > 1:
            k = k.repeat_interleave(n_rep, dim=1)
            v = v.repeat_interleave(n_rep, dim=1)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(out.transpose(1, 2).reshape(batch, seq, -1))


class FeedForward(nn.Module):
    """SwiGLU MLP: ``w2(silu(w1 x) * w3 x)``."""

    def __init__(self, d_model: int, hidden: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(d_model, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d_model, bias=False)
        self.w3 = nn.Linear(d_model, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    """Pre-norm block: ``h = x + attn(norm(x)); out = h + ffn(norm(h))``."""

    def __init__(self, cfg: LlamaConfig, feed_forward: nn.Module) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = feed_forward

    def forward(
        self,
        x: torch.Tensor,
        *,
        rope: RotaryEmbedding,
        positions: torch.Tensor,
        cache: KVCache | None,
        layer: int,
        end: int,
    ) -> torch.Tensor:
        h = x + self.attention(
            self.attention_norm(x), rope=rope, positions=positions, cache=cache, layer=layer, end=end
        )
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    """Decoder-only language model. ``forward(tokens) -> logits`` (batch, seq, vocab).

    Families differ only by the feed-forward each block gets (``ffn_factory``); the dense Llama uses
    :class:`FeedForward`. ``forward(..., return_aux_loss=True)`` returns ``(logits, aux)`` where ``aux`` is
    the sum of the blocks' auxiliary losses (zero for dense models; the MoE load-balancing loss otherwise),
    so one training loop serves both families and DDP/FSDP wrappers still see a plain ``forward`` call.
    """

    def __init__(
        self,
        cfg: LlamaConfig,
        *,
        ffn_factory: Callable[[LlamaConfig], nn.Module] | None = None,
    ) -> None:
        super().__init__()
        self.config = cfg
        factory = ffn_factory or (lambda c: FeedForward(c.d_model, c.ffn_dim))
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.rope = RotaryEmbedding(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        self.layers = nn.ModuleList(TransformerBlock(cfg, factory(cfg)) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        if not _on_meta():
            self.init_weights()

    def init_weights(self, seed: int | None = None) -> None:
        """(Re)initialise every parameter and buffer; call after ``to_empty`` when built on meta.

        Weights come from :mod:`pytest_gpuperf.models.init`, a function of ``seed`` (default: the seed
        ``torch.manual_seed`` last set) and each parameter's name, so one seed gives the same model in every
        torch release and on every device. Truncated normal (±3 sd) with std 0.02; residual output projections
        (``wo``, ``w2``, the experts' ``w2``) scaled by 1/sqrt(2 n_layers) as in GPT-2/Megatron; the untied
        output head at d_model^-0.5; norms at one; LoRA adapters as :class:`~pytest_gpuperf.models.lora.LoRALinear`
        initialises them.
        """
        from pytest_gpuperf.models import init
        from pytest_gpuperf.models.lora import LoRALinear

        seed = torch.initial_seed() if seed is None else seed
        self.rope.reset_parameters()
        adapters = [(name, module) for name, module in self.named_modules() if isinstance(module, LoRALinear)]
        for _, adapter in adapters:
            adapter.reset_parameters(seed)
        owned_by_adapters = {f"{name}.{part}.weight" for name, _ in adapters for part in ("lora_a", "lora_b")}
        for name, param in self.named_parameters():
            if name in owned_by_adapters:
                continue
            rule, scale = init_rule(name, self.config)
            key = name.replace(".base.weight", ".weight")  # a LoRA-wrapped linear starts as it did unwrapped
            if rule == "ones":
                with torch.no_grad():
                    param.fill_(1.0)
            else:
                init.normal_(param, seed=seed, key=key, std=scale, truncate=3.0 if rule == "truncated" else None)

    def forward(
        self,
        tokens: torch.Tensor,
        *,
        cache: KVCache | None = None,
        start_pos: int | torch.Tensor = 0,
        return_aux_loss: bool = False,
        last_only: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Logits for ``tokens`` (batch, seq).

        Without ``cache``: a causal training forward over positions ``start_pos .. start_pos + seq``.
        With ``cache``: keys/values are written to it at ``start_pos`` (int, or LongTensor (batch,) for
        rows at different positions) and every query attends to all cached positions up to its own, so a
        prefill followed by one-token decode steps yields the logits of a full forward.
        ``last_only`` returns the logits of the last position only (batch, 1, vocab): all a prefill needs. The
        output projection of every position would cost a prefill as much as two Llama 3 8B layers and 4 GB
        for 16k tokens x 128k vocabulary, which no serving engine spends before its first token.
        """
        batch, seq = tokens.shape
        offsets = torch.arange(seq, device=tokens.device)
        if isinstance(start_pos, torch.Tensor):
            if start_pos.shape != (batch,):
                raise ValueError(f"start_pos tensor must have shape ({batch},), got {tuple(start_pos.shape)}")
            positions = start_pos.to(tokens.device, torch.long)[:, None] + offsets
        else:
            positions = offsets + start_pos
            if cache is not None:
                positions = positions[None].expand(batch, seq)
        # One host sync at most per forward (none for the int start_pos of training).
        end = int(positions.max()) + 1 if isinstance(start_pos, torch.Tensor) else start_pos + seq
        if end > self.config.max_seq_len:
            raise ValueError(
                f"position {end - 1} exceeds max_seq_len {self.config.max_seq_len} of the model; "
                "build the spec with a larger max_seq_len"
            )
        h = self.tok_embeddings(tokens)
        for i, block in enumerate(self.layers):
            h = block(h, rope=self.rope, positions=positions, cache=cache, layer=i, end=end)
        if last_only:
            h = h[:, -1:]
        logits = self.output(self.norm(h))
        if not return_aux_loss:
            return logits
        return logits, self.aux_loss()

    def aux_loss(self) -> torch.Tensor:
        """Sum of the auxiliary losses the blocks' feed-forwards recorded in the last forward (0 if none)."""
        found = (getattr(block.feed_forward, "aux_loss", None) for block in self.layers)
        terms: list[torch.Tensor] = [t for t in found if t is not None]
        if not terms:
            return self.norm.weight.new_zeros(())
        return torch.stack(terms).sum()


_INPUT_PROJECTIONS = ("wq", "wk", "wv", "w1", "w3", "gate")
_RESIDUAL_PROJECTIONS = ("wo", "w2")


def init_rule(name: str, cfg: LlamaConfig) -> tuple[str, float]:
    """How the parameter called ``name`` starts: ("truncated" | "normal" | "ones", scale). LoRA adapters are not
    covered here: :class:`~pytest_gpuperf.models.lora.LoRALinear` initialises its own."""
    parts = name.split(".")
    if parts[-1] != "weight":
        raise ValueError(f"init_rule: no initialisation rule for parameter {name!r}")
    owner = parts[-2] if len(parts) >= 2 else ""
    if owner == "base" and len(parts) >= 3:  # a LoRA-wrapped linear keeps its own rule
        owner = parts[-3]
    std = 0.02
    if name == "tok_embeddings.weight":
        return "normal", std if cfg.tie_embeddings else 1.0
    if name == "output.weight":
        return "truncated", cfg.d_model**-0.5
    if owner.endswith("norm"):
        return "ones", 1.0
    if owner in _INPUT_PROJECTIONS:
        return "truncated", std
    if owner in _RESIDUAL_PROJECTIONS:
        return "truncated", std / math.sqrt(2 * cfg.n_layers)
    raise ValueError(f"init_rule: no initialisation rule for parameter {name!r}; add one to models/llama.py")
