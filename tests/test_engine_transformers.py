"""A real serving engine on CPU: ``transformers serve`` on a tiny random-weight Llama, launched by servers.py.

One server for the module (start-up, ~5-10 s on this machine, is the cost); the plugin's end-to-end run
launches its own, as a user's session does. Skipped where transformers' serving extras are not installed (the
torch-free CI venv).
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from pytest_gpuperf.inference.engine import make_prompts  # noqa: E402
from pytest_gpuperf.inference.metrics import run_metrics  # noqa: E402
from pytest_gpuperf.inference.openai import OpenAIEngine  # noqa: E402
from pytest_gpuperf.inference.requests import Request  # noqa: E402
from pytest_gpuperf.inference.servers import EngineChoice, ServerPool  # noqa: E402

MODEL = "tiny-llama"
VOCAB = 256


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    pool = ServerPool(choice=EngineChoice("transformers"), workdir=tmp_path_factory.mktemp("serve"))
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture(scope="module")
def served(pool: ServerPool) -> OpenAIEngine:
    return pool.engine(model=MODEL, max_len=128, device="cpu", dtype="float32")


def test_closed_loop_on_transformers_serve_gets_every_token_in_order(served: OpenAIEngine) -> None:
    prompts = make_prompts(count=6, length=24, vocab_size=VOCAB, seed=3)
    requests = [Request(id=i, prompt=p, max_new_tokens=10 + i) for i, p in enumerate(prompts)]
    done = served.generate(requests, concurrency=2)
    for request, completion in zip(requests, done):
        # no error also says the server's usage agreed: 24 prompt tokens read from the text, all tokens streamed
        assert completion.error is None, completion.error
        assert completion.output_tokens == len(completion.tokens) == request.max_new_tokens
        assert all(0 <= token < VOCAB for token in completion.tokens)
        times = [completion.sent, *completion.token_times]
        assert times == sorted(times)
    metrics = run_metrics(done)
    assert metrics.output_tokens == sum(r.max_new_tokens for r in requests) and metrics.prompt_tokens == 6 * 24
    assert metrics.latency["ttft"][50].value > 0 and metrics.output_tok_s > 0


def test_served_tokens_are_the_models_greedy_tokens(served: OpenAIEngine, pool: ServerPool) -> None:
    """The prompt went over as text and came back as ids: both mappings are exact only if these agree."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = Path(served.model)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prompts = make_prompts(count=2, length=16, vocab_size=VOCAB, seed=9)
    done = served.generate([Request(id=i, prompt=p, max_new_tokens=8) for i, p in enumerate(prompts)], concurrency=1)
    for prompt, completion in zip(prompts, done):
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([prompt]), max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0
            )
        assert completion.tokens == out[0, len(prompt) :].tolist()


def test_the_launch_is_recorded_with_the_engine_version(served: OpenAIEngine, pool: ServerPool) -> None:
    [launch] = pool.launches
    assert launch.engine == "transformers" and launch.version == transformers.__version__
    assert " -m transformers.cli.transformers serve " in launch.command and "--device cpu" in launch.command
    assert 0 < launch.startup_s < 180
    assert served.info["launch"] == launch.command and served.info["version"] == transformers.__version__
    # asking again for the same model reuses the running server
    assert pool.engine(model=MODEL, max_len=64, device="cpu", dtype="float32") is served


def test_a_token_id_prompt_is_refused_by_transformers_serve_with_its_reason(served: OpenAIEngine) -> None:
    """What the openai dialect (vLLM, SGLang) sends is not what transformers serve takes: the error says so."""
    as_openai = OpenAIEngine(served.url, model=served.model, timeout=30.0)
    [done] = as_openai.generate([Request(id=0, prompt=(1, 2, 3), max_new_tokens=4)], concurrency=1)
    assert done.error is not None and done.error.startswith("HTTP 4"), done.error
    assert "Unexpected fields in the request" in done.error or "prompt must be a string" in done.error


SWEEP_TEST = """
    from pytest_gpuperf.inference.sweep import record_sweep, run_sweep


    def test_sweep(perf, gpuperf_servers):
        engine = gpuperf_servers.engine(model="tiny-llama", max_len=64, device="cpu", dtype="float32")
        sweep = run_sweep(engine, isl=16, osl=8, concurrencies=(1, 2), runs=3, vocab_size=256, per_client=2,
                          minimum=3)
        sweep.contexts = {c: {**context, "engine": engine.info} for c, context in sweep.contexts.items()}
        record_sweep(perf, sweep)
"""


def test_the_plugin_launches_transformers_serve_and_records_it_in_the_stack(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_served=textwrap.dedent(SWEEP_TEST))
    results = pytester.path / "results.json"
    result = pytester.runpytest_inprocess(
        "--gpuperf-engine",
        "transformers",
        f"--gpuperf-results={results}",
        f"--gpuperf-baselines={pytester.path / 'baselines'}",
        "--gpuperf-machine-check=off",
        "-p",
        "no:cacheprovider",
        "-W",
        "ignore",
    )
    result.assert_outcomes(passed=1)
    version = transformers.__version__
    result.stdout.fnmatch_lines([f"gpuperf engine: transformers {version} serving tiny-llama, ready in *: *serve *"])
    document = json.loads(results.read_text())
    stack = document["fingerprint"]["stack"]
    assert stack["inference_engine"] == "transformers" and stack["inference_engine_version"] == version
    contexts = [m["context"] for m in document["results"] if m["metric"].startswith("c2.")]
    assert contexts and all(c["engine"]["engine"] == "transformers" for c in contexts)
    assert all("--port" in c["engine"]["launch"] for c in contexts)
    port = contexts[0]["engine"]["url"].rsplit(":", 1)[1]
    assert not _processes_with(f"--port {port}")  # the session stopped its server


def _processes_with(text: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline and "transformers" in cmdline:
                found.append(int(entry.name))
    return found
