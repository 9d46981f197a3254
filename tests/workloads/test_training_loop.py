"""The shared training loop on the tiny Llama and the Markov corpus."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_gpuperf.models.registry import get_spec
from pytest_gpuperf.training.corpus import MarkovChain
from pytest_gpuperf.training.loop import NonFiniteLoss, train


def test_tiny_llama_learns_and_times_every_step() -> None:
    spec = get_spec("tiny-llama")
    model = spec.build(seed=0)
    chain = MarkovChain.random(vocab_size=spec.vocab_size, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    result = train(
        model,
        loss_fn=spec.loss,
        optimizer=optimizer,
        steps=30,
        batches=lambda step: chain.batch(step, batch_size=8, seq_len=spec.seq_len),
    )
    assert len(result.losses) == len(result.step_seconds) == 30
    assert result.tokens_per_step == 8 * spec.seq_len
    assert result.losses[-1] < result.losses[0] - 1.0
    assert all(seconds > 0 for seconds in result.step_seconds)


def test_non_finite_loss_names_step_and_precision() -> None:
    spec = get_spec("tiny-llama")
    model = spec.build(seed=0)
    chain = MarkovChain.random(vocab_size=spec.vocab_size, seed=0)

    calls = []

    def poisoned(model, inputs, targets):  # a loss that overflows on the fourth step
        calls.append(1)
        loss = spec.loss(model, inputs, targets)
        return loss * math.inf if len(calls) == 4 else loss

    with pytest.raises(NonFiniteLoss, match=r"at step 3 in bf16"):
        train(
            model,
            loss_fn=poisoned,
            optimizer=torch.optim.SGD(model.parameters(), lr=0.01),
            steps=10,
            precision="bf16",
            batches=lambda step: chain.batch(step, batch_size=2, seq_len=16),
        )
