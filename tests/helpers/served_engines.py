"""What the tests of launched engines (test_engine_transformers.py, test_engine_vllm.py) share: one server per
module, and the closed-loop check every engine must pass."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpuperf.inference.engine import make_prompts
from pytest_gpuperf.inference.metrics import run_metrics
from pytest_gpuperf.inference.openai import OpenAIEngine
from pytest_gpuperf.inference.requests import Request
from pytest_gpuperf.inference.servers import EngineChoice, ServerPool

MODEL = "tiny-llama"
VOCAB = 256


def module_pool(kind: str, workdir: Path) -> Iterator[ServerPool]:
    """The body of a module-scoped fixture: a pool of ``kind`` whose servers stop when the module ends."""
    pool = ServerPool(choice=EngineChoice(kind), workdir=workdir)
    try:
        yield pool
    finally:
        pool.close()


def assert_closed_loop_gets_every_token_in_order(served: OpenAIEngine, *, concurrency: int) -> None:
    """Six prompts of 24 tokens, 10-15 new tokens each: every asked-for token streamed, in order, counted."""
    prompts = make_prompts(count=6, length=24, vocab_size=VOCAB, seed=3)
    requests = [Request(id=i, prompt=p, max_new_tokens=10 + i) for i, p in enumerate(prompts)]
    done = served.generate(requests, concurrency=concurrency)
    for request, completion in zip(requests, done):
        # no error also says the server's usage agreed: 24 prompt tokens, all tokens streamed
        assert completion.error is None, completion.error
        assert completion.prompt_tokens == 24
        assert completion.output_tokens == len(completion.tokens) == request.max_new_tokens
        assert all(0 <= token < VOCAB for token in completion.tokens)
        times = [completion.sent, *completion.token_times]
        assert times == sorted(times)
    metrics = run_metrics(done)
    assert metrics.output_tokens == sum(r.max_new_tokens for r in requests) and metrics.prompt_tokens == 6 * 24
    assert metrics.latency["ttft"][50].value > 0 and metrics.output_tok_s > 0


def session_flags(pytester: pytest.Pytester, results: Path | None = None) -> list[str]:
    """The inner session's own folders, no machine check (the figures are not judged here), no cache, quiet."""
    written = [f"--gpuperf-results={results}"] if results is not None else []
    return [*written, f"--gpuperf-baselines={pytester.path / 'baselines'}", "--gpuperf-machine-check=off",
            "-p", "no:cacheprovider", "-W", "ignore"]  # fmt: skip
