"""The training suite's tiers: which models, precisions, seeds and step budgets a run uses. Pure data, no torch.

* ``cpu`` (default on a CPU): the tiny models, 3 seeds, budgets that keep the suite within ~2 minutes on 2 cores.
* ``full`` (opt-in, ``--gpuperf-tier full``): the same tiny models with 5 seeds, longer budgets and the rowwise
  fp8 recipe too: tighter statistics for a nightly run.
* ``gpu`` (default with a GPU): real dimensions cut to one or two layers (per-layer throughput is what is
  compared across stacks), a few timed steps per model and precision for tokens/s and MFU; the convergence
  workloads keep their tiny models. Run by ``scripts/gpu_check.sh``: recorded once on an H200, not yet judged
  against a re-run (docs/training.md).
"""

from __future__ import annotations

from dataclasses import dataclass

TIERS = ("cpu", "full", "gpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class Budget:
    """How one convergence workload trains."""

    seeds: int
    """Reference seeds (model initialisation); the data of a step is the same for every seed."""
    steps: int
    """Optimizer steps per seed: the budget within which the target must be reached."""
    batch_size: int
    lr: float
    timing_warmup: int
    """Steps of each seed left out of step time and tokens/s (allocator, autotuning, first-touch)."""
    curve_warmup: int
    """Steps not checked against the golden band (loss falls steeply; seeds differ most there)."""
    window: int
    """Trailing-mean window for steps-to-target and the golden band."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Tier:
    name: str
    models: tuple[str, ...]
    """Default of ``--gpuperf-models``."""
    precisions: tuple[str, ...]
    """Default of ``--gpuperf-precisions``."""
    convergence_precision: str
    """Precision of the pretrain, MoE and LoRA convergence workloads."""
    pretrain: Budget
    finetune: Budget
    ladder: Budget
    throughput_warmup: int
    throughput_steps: int
    throughput_batch: int
    throughput_seq_len: int | None
    """Sequence length of the throughput test (None: the model spec's own)."""


_CPU_PRETRAIN = Budget(seeds=3, steps=100, batch_size=8, lr=3e-3, timing_warmup=5, curve_warmup=20, window=10)
_CPU_FINETUNE = Budget(seeds=3, steps=60, batch_size=8, lr=1e-2, timing_warmup=5, curve_warmup=10, window=10)
_CPU_LADDER = Budget(seeds=3, steps=120, batch_size=8, lr=6e-3, timing_warmup=5, curve_warmup=20, window=10)

TIER_TABLE: dict[str, Tier] = {
    "cpu": Tier(
        name="cpu", models=("tiny-llama", "tiny-moe", "tiny-lora"), precisions=("fp32", "bf16", "fp8", "fp4"),
        convergence_precision="fp32", pretrain=_CPU_PRETRAIN, finetune=_CPU_FINETUNE, ladder=_CPU_LADDER,
        throughput_warmup=3, throughput_steps=10, throughput_batch=8, throughput_seq_len=None,
    ),
    "full": Tier(
        name="full", models=("tiny-llama", "tiny-moe", "tiny-lora"),
        precisions=("fp32", "bf16", "fp8", "fp8-rowwise", "fp4"), convergence_precision="fp32",
        pretrain=Budget(seeds=5, steps=240, batch_size=8, lr=3e-3, timing_warmup=5, curve_warmup=20, window=10),
        finetune=Budget(seeds=5, steps=120, batch_size=8, lr=1e-2, timing_warmup=5, curve_warmup=10, window=10),
        ladder=Budget(seeds=5, steps=240, batch_size=8, lr=6e-3, timing_warmup=5, curve_warmup=20, window=10),
        throughput_warmup=5, throughput_steps=20, throughput_batch=8, throughput_seq_len=None,
    ),
    "gpu": Tier(
        name="gpu", models=("llama3-8b@2", "mixtral-8x7b@1", "llama2-70b-lora@1"), precisions=("bf16", "fp8"),
        convergence_precision="bf16", pretrain=_CPU_PRETRAIN, finetune=_CPU_FINETUNE, ladder=_CPU_LADDER,
        # 1 x 4096 tokens: Llama 3 8B's two-layer proxy is ~1.6e9 weights (the 128k-vocab embedding and head
        # dominate) and ~16 bytes per weight with AdamW: ~25 GB, well inside one 80+ GB part.
        throughput_warmup=3, throughput_steps=10, throughput_batch=1, throughput_seq_len=4096,
    ),
}  # fmt: skip

REQUIRED_TO_CONVERGE = frozenset({"fp32", "tf32", "bf16", "fp16", "fp8", "fp8-rowwise"})
"""Precisions the ladder requires to reach its target; the others (fp4) are reported, not required."""


GEMM_DTYPE: dict[str, str] = {
    "fp32": "fp32",
    "tf32": "fp32",
    "bf16": "bf16",
    "fp16": "fp16",
    "fp8": "fp8",
    "fp8-rowwise": "fp8",
    "fp4": "bf16",  # MXFP4 emulated: operands rounded to e2m1, the matmuls run in the bf16 autocast region
}
"""The GEMM dtype whose probed rate (machine/capability.py) sizes a training run in each precision."""


def training_flops(flops_per_token: float, *, steps: int, batch_size: int, seq_len: int) -> float:
    """Model FLOPs of ``steps`` optimizer steps of ``batch_size`` sequences of ``seq_len`` tokens."""
    return flops_per_token * steps * batch_size * seq_len


def get_tier(name: str) -> Tier:
    try:
        return TIER_TABLE[name]
    except KeyError:
        raise KeyError(f"unknown tier {name!r}; known: {', '.join(TIERS)}") from None
