"""Training data with a known optimum: token sequences from a seeded random Markov chain.

For a stationary first-order chain with transitions P and stationary distribution pi, the entropy rate
``H = -sum_i pi_i sum_j P_ij log P_ij`` (Cover & Thomas eq. 4.27) is the lowest expected next-token cross-entropy
any predictor can reach, so convergence targets are ``entropy_rate + margin``, never guessed. Each state has
``branching`` successors with Dirichlet(``concentration``) weights, one of them on a random cyclic permutation of
all states (irreducible: pi unique); sequences start from pi. numpy builds and samples the chain; torch is imported
only when batches are requested.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["MarkovChain", "SecondOrderMarkovChain", "empirical_entropy_rate"]


class MarkovChain:
    """A sparse random Markov chain over ``vocab_size`` tokens. Build one with :meth:`random`."""

    def __init__(
        self,
        *,
        successors: np.ndarray,
        probs: np.ndarray,
        seed: int,
        concentration: float = 1.0,
        name: str = "markov",
    ) -> None:
        if successors.shape != probs.shape or successors.ndim != 2:
            raise ValueError(f"successors {successors.shape} and probs {probs.shape} must be equal 2-d shapes")
        if not np.allclose(probs.sum(1), 1.0):
            raise ValueError("every row of probs must sum to 1")
        self.successors = successors.astype(np.int64)
        self.probs = probs.astype(np.float64)
        self.seed = seed
        self.concentration = concentration
        self.name = name
        self.vocab_size = successors.shape[0]
        self._cumulative = np.cumsum(self.probs, axis=1)
        self._cumulative[:, -1] = 1.0  # guard the last bucket against rounding
        self.stationary = _stationary(self.transition_matrix())
        self._stationary_cumulative = np.cumsum(self.stationary)
        self._stationary_cumulative[-1] = 1.0

    @classmethod
    def random(
        cls, *, vocab_size: int = 256, branching: int = 4, concentration: float = 1.0, seed: int = 0
    ) -> MarkovChain:
        """A chain whose every state has ``branching`` distinct successors with Dirichlet weights."""
        if vocab_size < 2 or not 1 <= branching <= vocab_size:
            raise ValueError(f"MarkovChain: need vocab_size >= 2 and 1 <= branching <= vocab_size, "
                             f"got vocab_size={vocab_size}, branching={branching}")  # fmt: skip
        if concentration <= 0:
            raise ValueError(f"MarkovChain: concentration must be > 0, got {concentration}")
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x3A7C]))
        cycle = _random_cycle(rng, vocab_size)
        successors = np.stack([_row_successors(rng, cycle[i], vocab_size, branching) for i in range(vocab_size)])
        probs = rng.dirichlet(np.full(branching, concentration), size=vocab_size)
        return cls(
            successors=successors,
            probs=probs,
            seed=seed,
            concentration=concentration,
            name=f"markov(V={vocab_size},k={branching},alpha={concentration},seed={seed})",
        )

    def shifted(self, *, fraction: float = 0.5, seed: int | None = None) -> MarkovChain:
        """Same vocabulary and branching, with the rows of a random ``fraction`` of states redrawn.

        The fine-tuning source: related to this one (the other rows are unchanged) but with a different
        optimum, so a model trained here starts above the new entropy rate and must adapt.
        """
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"MarkovChain.shifted: fraction must be in (0, 1], got {fraction}")
        seed = self.seed + 1 if seed is None else seed
        rng = np.random.default_rng(np.random.SeedSequence([self.seed, seed, 0x5417]))
        vocab, branching = self.successors.shape
        moved = rng.choice(vocab, size=max(1, round(fraction * vocab)), replace=False)
        successors, probs = self.successors.copy(), self.probs.copy()
        for state in moved:
            # keep the cycle edge (column 0) so the chain stays irreducible; redraw the rest and the weights
            successors[state] = _row_successors(rng, successors[state, 0], vocab, branching)
            probs[state] = rng.dirichlet(np.full(branching, self.concentration))
        return MarkovChain(successors=successors, probs=probs, seed=seed, concentration=self.concentration,
                           name=f"{self.name}+shift({fraction})")  # fmt: skip

    def transition_matrix(self) -> np.ndarray:
        """Dense (V, V) transition matrix P."""
        matrix = np.zeros((self.vocab_size, self.vocab_size))
        np.add.at(matrix, (np.arange(self.vocab_size)[:, None], self.successors), self.probs)
        return matrix

    @property
    def entropy_rate(self) -> float:
        """Entropy rate in nats per token: the minimum expected cross-entropy of next-token prediction."""
        p = self.probs
        row_entropy = -np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0), axis=1)
        return float(self.stationary @ row_entropy)

    @property
    def uniform_loss(self) -> float:
        """Cross-entropy of a uniform guess, log V: where an untrained model starts."""
        return math.log(self.vocab_size)

    def optimal_loss(self, seq_len: int) -> float:
        """Lowest mean cross-entropy over the ``seq_len`` predictions of a batch row: the entropy rate (each
        row starts from the stationary distribution, so the first prediction is as hard as the others)."""
        return self.entropy_rate

    def sample(self, *, batch_size: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """(batch_size, length) int64 token ids, each row a stationary run of the chain."""
        out = np.empty((batch_size, length), dtype=np.int64)
        state = np.searchsorted(self._stationary_cumulative, rng.random(batch_size), side="right")
        out[:, 0] = state
        draws = rng.random((length - 1, batch_size))
        for t in range(1, length):
            column = (self._cumulative[state] < draws[t - 1][:, None]).sum(1)
            state = self.successors[state, column]
            out[:, t] = state
        return out

    def batch(
        self, step: int, *, batch_size: int, seq_len: int, stream: int = 0, device: str | torch.device = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets), each (batch_size, seq_len) int64, targets shifted by one token.

        Depends only on (chain seed, ``stream``, ``step``), not on call order, so every rank, seed and rerun
        sees the same batch for the same step. Use distinct streams for training and evaluation data.
        """
        import torch

        rng = np.random.default_rng(np.random.SeedSequence([self.seed, stream, step, 0xBA7C]))
        tokens = torch.from_numpy(self.sample(batch_size=batch_size, length=seq_len + 1, rng=rng))
        tokens = tokens.to(device)
        return tokens[:, :-1], tokens[:, 1:]


class SecondOrderMarkovChain:
    """A sparse random second-order chain: the next token depends on the last two.

    A model cannot reach its floor through the embedding-to-output path alone (which carries the current
    token only): it has to move the previous token through attention and mix the pair in the MLP. That puts
    the attention and MLP linears, the layers fp8/fp4 convert, on the path to the optimum, which a first-order
    chain does not (there, a model can route around quantisation noise).

    The pair chain ``(a, b) -> (b, c)`` is first-order over ``V**2`` states; its stationary distribution is a
    sparse linear solve. Every pair has the successor ``cycle[b]`` (one random cycle through all tokens), so the
    cycle's pairs are reachable from every pair and the stationary distribution is unique (pairs off the
    closed class get probability 0). Entropy rate ``H = -sum_ab pi_ab sum_c P(c|ab) log P(c|ab)``.
    """

    def __init__(self, *, vocab_size: int, successors: np.ndarray, probs: np.ndarray, seed: int,
                 concentration: float, name: str) -> None:  # fmt: skip
        v = vocab_size
        if successors.shape != probs.shape or successors.shape[:2] != (v, v) or successors.ndim != 3:
            raise ValueError(f"successors {successors.shape} and probs {probs.shape} must both be (V, V, k)")
        self.vocab_size = v
        self.successors = successors.astype(np.int64)
        self.probs = probs.astype(np.float64)
        self.seed = seed
        self.concentration = concentration
        self.name = name
        self._cumulative = np.cumsum(self.probs, axis=2)
        self._cumulative[..., -1] = 1.0
        self.stationary = _pair_stationary(self.successors, self.probs)
        """(V, V): probability of the pair (previous, current) in the stationary process."""
        self._stationary_cumulative = np.cumsum(self.stationary.ravel())
        self._stationary_cumulative[-1] = 1.0

    @classmethod
    def random(cls, *, vocab_size: int = 32, branching: int = 2, concentration: float = 0.5,
               seed: int = 0) -> SecondOrderMarkovChain:  # fmt: skip
        """Every pair has ``branching`` distinct successors with Dirichlet(``concentration``) weights."""
        if not 2 <= vocab_size <= 256 or not 1 <= branching <= vocab_size:
            raise ValueError(f"SecondOrderMarkovChain: need 2 <= vocab_size <= 256 and 1 <= branching <= "
                             f"vocab_size, got vocab_size={vocab_size}, branching={branching}")  # fmt: skip
        if concentration <= 0:
            raise ValueError(f"SecondOrderMarkovChain: concentration must be > 0, got {concentration}")
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x2D2C]))
        cycle = _random_cycle(rng, vocab_size)
        successors = np.stack([
            np.stack([_row_successors(rng, cycle[b], vocab_size, branching) for b in range(vocab_size)])
            for _ in range(vocab_size)
        ])  # fmt: skip
        probs = rng.dirichlet(np.full(branching, concentration), size=(vocab_size, vocab_size))
        return cls(vocab_size=vocab_size, successors=successors, probs=probs, seed=seed,
                   concentration=concentration,
                   name=f"markov2(V={vocab_size},k={branching},alpha={concentration},seed={seed})")  # fmt: skip

    @property
    def entropy_rate(self) -> float:
        """Nats per token once two tokens of context are known."""
        return float((self.stationary * _row_entropy(self.probs)).sum())

    @property
    def first_token_entropy(self) -> float:
        """H(X1 | X0): the first prediction of a row, with one token of context (higher than the rate)."""
        pair = self.stationary.ravel()
        marginal = self.stationary.sum(1)
        h_pair = -float(np.sum(pair[pair > 0] * np.log(pair[pair > 0])))
        h_first = -float(np.sum(marginal[marginal > 0] * np.log(marginal[marginal > 0])))
        return h_pair - h_first

    @property
    def uniform_loss(self) -> float:
        return math.log(self.vocab_size)

    def optimal_loss(self, seq_len: int) -> float:
        """Lowest mean cross-entropy over a row's ``seq_len`` predictions: the first has one token of context
        (``first_token_entropy``), the other ``seq_len - 1`` have two (``entropy_rate``)."""
        if seq_len < 1:
            raise ValueError(f"optimal_loss: seq_len must be >= 1, got {seq_len}")
        return (self.first_token_entropy + (seq_len - 1) * self.entropy_rate) / seq_len

    def sample(self, *, batch_size: int, length: int, rng: np.random.Generator) -> np.ndarray:
        """(batch_size, length) token ids (length >= 2); each row starts from a stationary pair."""
        if length < 2:
            raise ValueError(f"SecondOrderMarkovChain.sample: length must be >= 2, got {length}")
        out = np.empty((batch_size, length), dtype=np.int64)
        start = np.searchsorted(self._stationary_cumulative, rng.random(batch_size), side="right")
        prev, cur = np.divmod(start, self.vocab_size)
        out[:, 0], out[:, 1] = prev, cur
        draws = rng.random((length - 2, batch_size))
        for t in range(2, length):
            column = (self._cumulative[prev, cur] < draws[t - 2][:, None]).sum(1)
            prev, cur = cur, self.successors[prev, cur, column]
            out[:, t] = cur
        return out

    def batch(
        self, step: int, *, batch_size: int, seq_len: int, stream: int = 0, device: str | torch.device = "cpu"
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(inputs, targets) as :meth:`MarkovChain.batch`: a function of (seed, stream, step) only."""
        import torch

        rng = np.random.default_rng(np.random.SeedSequence([self.seed, stream, step, 0xBA7D]))
        tokens = torch.from_numpy(self.sample(batch_size=batch_size, length=seq_len + 1, rng=rng)).to(device)
        return tokens[:, :-1], tokens[:, 1:]


def _row_entropy(probs: np.ndarray) -> np.ndarray:
    safe = np.where(probs > 0, probs, 1.0)
    return -np.sum(probs * np.log(safe), axis=-1)


def _pair_stationary(successors: np.ndarray, probs: np.ndarray) -> np.ndarray:
    """Stationary distribution of the pair chain (a, b) -> (b, c), by a sparse direct solve."""
    from scipy import sparse
    from scipy.sparse.linalg import spsolve

    v, _, k = successors.shape
    a, b, _ = np.meshgrid(np.arange(v), np.arange(v), np.arange(k), indexing="ij")
    source = (a * v + b).ravel()
    target = (b * v + successors).ravel()
    n = v * v
    # (P^T - I) pi = 0 with the last equation replaced by sum(pi) = 1
    system = sparse.coo_matrix((probs.ravel(), (target, source)), shape=(n, n)).tolil()
    system.setdiag(system.diagonal() - 1.0)
    system[n - 1, :] = np.ones(n)
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    pi = np.clip(spsolve(system.tocsr(), rhs), 0.0, None)
    return (pi / pi.sum()).reshape(v, v)


def empirical_entropy_rate(tokens: np.ndarray, vocab_size: int) -> float:
    """Plug-in estimate of the conditional entropy H(X_t+1 | X_t) from bigram counts of ``tokens`` (any shape,
    rows are independent sequences). Biased low by roughly (number of nonzero transitions) / (2 N)."""
    tokens = np.atleast_2d(tokens)
    prev, nxt = tokens[:, :-1].reshape(-1), tokens[:, 1:].reshape(-1)
    counts = np.zeros((vocab_size, vocab_size))
    np.add.at(counts, (prev, nxt), 1.0)
    row = counts.sum(1, keepdims=True)
    nz = counts > 0
    conditional = counts[nz] / np.broadcast_to(row, counts.shape)[nz]
    return float(-(counts[nz] * np.log(conditional)).sum() / counts.sum())


def _random_cycle(rng: np.random.Generator, n: int) -> np.ndarray:
    """next_state[i] along one random cycle through all n states."""
    order = rng.permutation(n)
    nxt = np.empty(n, dtype=np.int64)
    nxt[order] = np.roll(order, -1)
    return nxt


def _row_successors(rng: np.random.Generator, cycle_next: int, n: int, branching: int) -> np.ndarray:
    others = rng.choice(n - 1, size=branching - 1, replace=False)
    others = others + (others >= cycle_next)  # skip cycle_next so successors are distinct
    return np.concatenate(([cycle_next], others))


def _stationary(matrix: np.ndarray) -> np.ndarray:
    """pi with pi P = pi, sum pi = 1 (unique for an irreducible chain), by a direct linear solve."""
    n = matrix.shape[0]
    system = matrix.T - np.eye(n)
    system[-1] = 1.0
    rhs = np.zeros(n)
    rhs[-1] = 1.0
    pi = np.linalg.solve(system, rhs)
    return np.clip(pi, 0.0, None) / np.clip(pi, 0.0, None).sum()
