"""Unit tests of the Markov-chain corpus: the entropy rate is the loss floor it claims to be."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pytest_gpuperf.training.corpus import MarkovChain, empirical_entropy_rate


@pytest.fixture(scope="module")
def chain() -> MarkovChain:
    return MarkovChain.random(vocab_size=64, branching=4, concentration=1.0, seed=7)


def test_stationary_distribution_is_stationary(chain: MarkovChain) -> None:
    p = chain.transition_matrix()
    np.testing.assert_allclose(p.sum(1), 1.0)
    np.testing.assert_allclose(chain.stationary @ p, chain.stationary, atol=1e-12)
    assert chain.stationary.sum() == pytest.approx(1.0) and (chain.stationary > 0).all()


def test_entropy_rate_matches_empirical_estimate(chain: MarkovChain) -> None:
    tokens = chain.sample(batch_size=32, length=8000, rng=np.random.default_rng(0))
    # plug-in bias is about (nonzero transitions) / (2N) = 256 / 512000: far below the tolerance
    assert empirical_entropy_rate(tokens, chain.vocab_size) == pytest.approx(chain.entropy_rate, abs=0.01)


def test_true_transition_probabilities_score_the_entropy_rate(chain: MarkovChain) -> None:
    # the best predictor's cross-entropy on the batches a model trains on is the entropy rate
    p = chain.transition_matrix()
    losses = []
    for step in range(40):
        x, y = chain.batch(step, batch_size=16, seq_len=64)
        losses.append(-np.log(p[x.numpy(), y.numpy()]).mean())
    assert float(np.mean(losses)) == pytest.approx(chain.entropy_rate, abs=0.02)


def test_entropy_is_controlled_by_branching_and_concentration() -> None:
    rates = {
        (k, a): MarkovChain.random(vocab_size=128, branching=k, concentration=a, seed=0).entropy_rate
        for k in (2, 4, 8)
        for a in (0.3, 1.0, 10.0)
    }
    for (k, _a), h in rates.items():
        assert 0 < h <= math.log(k) + 1e-12
    assert rates[(8, 10.0)] > rates[(8, 1.0)] > rates[(8, 0.3)]
    assert rates[(2, 1.0)] < rates[(4, 1.0)] < rates[(8, 1.0)]
    assert rates[(8, 10.0)] == pytest.approx(math.log(8), abs=0.05)  # near-uniform rows


def test_batches_are_deterministic_by_seed_step_and_stream(chain: MarkovChain) -> None:
    x, y = chain.batch(3, batch_size=4, seq_len=32)
    assert x.shape == y.shape == (4, 32) and str(x.dtype) == "torch.int64"
    assert (x[:, 1:] == y[:, :-1]).all()
    again = MarkovChain.random(vocab_size=64, branching=4, concentration=1.0, seed=7)
    x2, y2 = again.batch(3, batch_size=4, seq_len=32)
    assert (x == x2).all() and (y == y2).all()
    assert not (chain.batch(4, batch_size=4, seq_len=32)[0] == x).all()
    assert not (chain.batch(3, batch_size=4, seq_len=32, stream=1)[0] == x).all()
    # every transition in a batch is one the chain allows
    p = chain.transition_matrix()
    assert (p[x.numpy(), y.numpy()] > 0).all()


def test_shifted_source_changes_some_rows_and_keeps_the_vocabulary(chain: MarkovChain) -> None:
    shifted = chain.shifted(fraction=0.25)
    assert shifted.vocab_size == chain.vocab_size
    changed = ~np.isclose(shifted.transition_matrix(), chain.transition_matrix()).all(axis=1)
    assert changed.sum() == 16
    assert (shifted.successors[:, 0] == chain.successors[:, 0]).all()  # irreducibility edge kept
    assert shifted.entropy_rate != chain.entropy_rate
    assert shifted.shifted(fraction=0.25).entropy_rate == shifted.shifted(fraction=0.25).entropy_rate


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"branching": 0}, "branching"), ({"concentration": 0.0}, "concentration"), ({"vocab_size": 1}, "vocab_size")],
)
def test_bad_parameters_are_named(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        MarkovChain.random(**kwargs)


def test_second_order_chain_floor_matches_the_true_predictor() -> None:
    from pytest_gpuperf.training.corpus import SecondOrderMarkovChain

    chain = SecondOrderMarkovChain.random(vocab_size=16, branching=3, concentration=0.7, seed=3)
    assert chain.stationary.sum() == pytest.approx(1.0)
    assert 0 < chain.entropy_rate < chain.first_token_entropy <= math.log(16)
    # the best predictor's loss on training batches: P(x1 | x0) for the first position, P(c | a, b) after
    marginal = chain.stationary.sum(1)
    first = chain.stationary / marginal[:, None]
    dense = np.zeros((16, 16, 16))
    np.add.at(dense, (np.arange(16)[:, None, None], np.arange(16)[None, :, None], chain.successors), chain.probs)
    losses = []
    for step in range(30):
        x, y = (t.numpy() for t in chain.batch(step, batch_size=32, seq_len=32))
        nll = [-np.log(first[x[:, 0], y[:, 0]])]
        nll += [-np.log(dense[x[:, t - 1], x[:, t], y[:, t]]) for t in range(1, 32)]
        losses.append(np.mean(nll))
    assert float(np.mean(losses)) == pytest.approx(chain.optimal_loss(32), abs=0.02)
    again = SecondOrderMarkovChain.random(vocab_size=16, branching=3, concentration=0.7, seed=3)
    assert (again.batch(4, batch_size=2, seq_len=8)[0] == chain.batch(4, batch_size=2, seq_len=8)[0]).all()
