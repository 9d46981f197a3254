"""The training suite's GPU tier is sized for scripts/gpu_check.sh: its step (``test_throughput`` on the gpu
tier's models in bf16; fp8 skips without torchao) must end within 150 s on one H200, each step must be big
enough that MFU measures the math rather than kernel launches, and the weights with AdamW state must fit."""

from __future__ import annotations

import pytest

from pytest_gpuperf.models.registry import get_spec
from pytest_gpuperf.training.tiers import get_tier

H200_BF16_DENSE_FLOPS = 989.5e12
"""pytest_gpuperf.machine.peaks: NVIDIA H200 SXM, BF16 dense."""
CHECK_BOUND_S = 150.0
"""scripts/gpu_check.py, step "training"."""
START_S = 20.0
"""Python, torch and pytest start, CUDA init, fingerprint: ~10-20 s."""
PER_TEST_S = 5.0
"""Outside the timed steps: the 4096-state Markov chain and its batches, building ~1.5 G weights on the device,
first-step set-up (cuBLAS, attention kernels)."""


@pytest.mark.parametrize("name", get_tier("gpu").models)
def test_gpu_tier_step_measures_the_math_not_the_launches(name: str) -> None:
    tier, spec = get_tier("gpu"), get_spec(name)
    tokens = tier.throughput_batch * tier.throughput_seq_len
    step_flops = spec.training_flops_per_token(tier.throughput_seq_len) * tokens
    # >= 10 ms per step even at the full peak, against the ~1-2 ms a step's ~1-2k eager launches cost: MFU is
    # then at most a few points low from launch overhead, and the 10 timed steps are long enough to compare.
    assert step_flops / H200_BF16_DENSE_FLOPS > 10e-3
    # fp32 weights, gradients of the trainable ones and AdamW's two moments, within a third of 141 GB (the
    # rest: activations of 4096 tokens, the 128k-vocab logits in fp32 for the loss, allocator slack).
    state_bytes = 4 * spec.param_count + 12 * spec.trainable_param_count
    assert state_bytes < 47e9


def test_gpu_tier_fits_the_check_at_a_pessimistic_mfu() -> None:
    tier = get_tier("gpu")
    steps = tier.throughput_warmup + tier.throughput_steps
    seconds = START_S
    for name in tier.models:
        spec = get_spec(name)
        step_flops = (
            spec.training_flops_per_token(tier.throughput_seq_len) * tier.throughput_batch * tier.throughput_seq_len
        )
        seconds += PER_TEST_S + steps * step_flops / (0.10 * H200_BF16_DENSE_FLOPS)  # 10% MFU: 3-5x margin
    assert seconds < 0.7 * CHECK_BOUND_S, f"{seconds:.0f} s"
    assert tier.precisions == ("bf16", "fp8")  # fp8 skips on the check's machine (no torchao): bf16 measures
