"""A real serving engine on CPU: ``transformers serve`` on a tiny random-weight Llama, launched by servers.py.

One server for the module (start-up, ~5-10 s on this machine, is the cost); the plugin's end-to-end run
launches its own, as a user's session does. Skipped where transformers' serving extras are not installed (the
torch-free CI venv).
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from served_engines import (  # noqa: E402
    MODEL,
    VOCAB,
    assert_closed_loop_gets_every_token_in_order,
    module_pool,
    session_flags,
)

from pytest_gpuperf.inference.arrivals import Arrivals, schedule  # noqa: E402
from pytest_gpuperf.inference.engine import make_prompts  # noqa: E402
from pytest_gpuperf.inference.metrics import e2e_of, run_metrics, ttft_of  # noqa: E402
from pytest_gpuperf.inference.openai import OpenAIEngine  # noqa: E402
from pytest_gpuperf.inference.requests import Request  # noqa: E402
from pytest_gpuperf.inference.servers import (  # noqa: E402
    EngineError,
    ServerPool,
    attach,
    engine_stack,
    parse_engine,
)


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    yield from module_pool("transformers", tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def served(pool: ServerPool) -> OpenAIEngine:
    return pool.engine(model=MODEL, max_len=128, device="cpu", dtype="float32")


def test_closed_loop_on_transformers_serve_gets_every_token_in_order(served: OpenAIEngine) -> None:
    assert_closed_loop_gets_every_token_in_order(served, concurrency=2)


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


def test_the_injected_slowdown_runs_each_forward_twice_and_changes_no_token(served: OpenAIEngine) -> None:
    """slowed_serve.py's doubled forward (inference=100) on the served folder: twice the forwards, the same greedy
    tokens (the growing KV cache is cut back after the extra forward)."""
    import torch
    from transformers import AutoModelForCausalLM

    from pytest_gpuperf.inference.slowed_serve import slow_down

    prompt = torch.tensor([make_prompts(count=1, length=16, vocab_size=VOCAB, seed=4)[0]])
    outputs, calls = [], []
    for fraction in (0.0, 1.0):
        model = AutoModelForCausalLM.from_pretrained(served.model, dtype=torch.float32).eval()
        forward = model.forward
        counted: list[int] = []
        model.forward = lambda *args, _f=forward, _c=counted, **kwargs: _c.append(1) or _f(*args, **kwargs)
        if fraction:
            slow_down(model, fraction)
        with torch.inference_mode():
            out = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
        outputs.append(out[0, 16:].tolist())
        calls.append(len(counted))
    assert outputs[0] == outputs[1] and len(outputs[0]) == 8
    assert calls[1] == 2 * calls[0] > 0


def test_the_launch_is_recorded_with_the_engine_version(served: OpenAIEngine, pool: ServerPool) -> None:
    [launch] = pool.launches
    assert launch.engine == "transformers" and launch.version == transformers.__version__
    assert " -m transformers.cli.transformers serve " in launch.command and "--device cpu" in launch.command
    assert 0 < launch.startup_s < 180
    assert served.info["launch"] == launch.command and served.info["version"] == transformers.__version__
    # asking again for the same model reuses the running server
    assert pool.engine(model=MODEL, max_len=64, device="cpu", dtype="float32") is served


def test_an_open_loop_on_transformers_serve_times_from_the_schedule(served: OpenAIEngine) -> None:
    """Poisson arrivals at a low rate on the real server (serial: no --continuous-batching here), two slots."""
    plan = schedule(Arrivals(rate=20.0, count=8, seed=5))
    prompts = make_prompts(count=8, length=12, vocab_size=VOCAB, seed=11)
    requests = [Request(id=i, prompt=p, max_new_tokens=4 + i % 3) for i, p in enumerate(prompts)]
    done = served.generate(requests, concurrency=2, schedule=plan.offsets)
    assert [c.id for c in done] == [r.id for r in requests]
    first = done[0].scheduled
    assert first is not None
    for request, offset, completion in zip(requests, plan.offsets, done):
        assert completion.error is None, completion.error
        assert completion.output_tokens == len(completion.tokens) == request.max_new_tokens
        assert completion.prompt_tokens == 12  # the server's usage agreed, or error would say otherwise
        assert completion.scheduled is not None and completion.ready is not None
        assert completion.scheduled - first == pytest.approx(offset, abs=1e-9)  # due exactly on the schedule
        assert completion.scheduled <= completion.ready <= completion.sent <= completion.token_times[0]
        assert completion.token_times == sorted(completion.token_times)
        # latency runs from the due time, so the wait before sending (for one of the two slots) is in it
        assert completion.start == completion.scheduled
        assert ttft_of(completion) == completion.token_times[0] - completion.scheduled
        assert e2e_of(completion) >= ttft_of(completion) >= completion.send_lag >= completion.client_lag >= 0
    metrics = run_metrics(done)
    assert metrics.output_tokens == sum(r.max_new_tokens for r in requests) and metrics.prompt_tokens == 8 * 12
    assert metrics.wall_s == max(c.token_times[-1] for c in done) - first


def test_a_token_id_prompt_is_refused_by_transformers_serve_with_its_reason(served: OpenAIEngine) -> None:
    """What the openai dialect (vLLM, SGLang) sends is not what transformers serve takes: the error says so."""
    as_openai = OpenAIEngine(served.url, model=served.model, timeout=30.0)
    [done] = as_openai.generate([Request(id=0, prompt=(1, 2, 3), max_new_tokens=4)], concurrency=1)
    assert done.error is not None and done.error.startswith("HTTP 4"), done.error
    assert "Unexpected fields in the request" in done.error or "prompt must be a string" in done.error


def test_a_hand_run_transformers_serve_is_attached_in_its_dialect(served: OpenAIEngine) -> None:
    """openai:URL on a transformers serve: found by its routes, spoken to with the served folder's tokenizer."""
    with pytest.raises(EngineError, match=r"is transformers serve, which takes text prompts: name the model folder"):
        attach(served.url, served_model=None, devices=1)
    with pytest.raises(EngineError, match=r"\('/nowhere' holds no tokenizer\.json\)"):
        attach(served.url, served_model="/nowhere", devices=1)
    engine = attach(served.url, served_model=served.model, devices=1)
    assert engine.dialect == "transformers" and engine.model == served.model
    plan = schedule(Arrivals(rate=10.0, count=3, seed=1))
    prompts = make_prompts(count=3, length=8, vocab_size=VOCAB, seed=2)
    done = engine.generate(
        [Request(id=i, prompt=p, max_new_tokens=5) for i, p in enumerate(prompts)], concurrency=2, schedule=plan.offsets
    )
    assert all(c.error is None and c.output_tokens == 5 for c in done), [c.error for c in done]
    assert engine_stack(parse_engine(f"openai:{served.url}")) == {
        "inference_engine": "transformers",
        "inference_engine_version": "unknown",  # it serves no version; the local package's may not be the server's
    }


SWEEP_TEST = """
    from pytest_gpuperf.inference.sweep import record_sweep, run_sweep


    def test_sweep(perf, gpuperf_servers):
        engine = gpuperf_servers.engine(model="tiny-llama", max_len=64, device="cpu", dtype="float32")
        sweep = run_sweep(engine, isl=16, osl=8, concurrencies=(1, 2), runs=3, vocab_size=256, per_client=2,
                          minimum=3)
        sweep.contexts = {c: {**context, "engine": engine.info} for c, context in sweep.contexts.items()}
        record_sweep(perf, sweep)
"""


SUITE = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_inference.py"
OPEN_LOOP = [
    # two rates of 8 Poisson arrivals, 3 runs (the fewest): ~3 s a round on the serial server
    "--gpuperf-request-rate=4,8",
    "--gpuperf-load-requests=8",
    "--gpuperf-load-warmup=0",
    "--gpuperf-load-cooldown=0",
    "--gpuperf-inference-runs=3",
]


def test_the_plugin_launches_transformers_serve_and_records_it_in_the_stack(pytester: pytest.Pytester) -> None:
    """One session: a closed-loop test of its own, the suite's open-loop sweep and its LoadGen Server and Offline
    cases share one launched server (LoadGen's runs VALID, saved as baselines); a second session on a server made
    2x slower by --gpuperf-inject-slowdown is judged slower on LoadGen's TTFT and TPOT. Nothing is left running."""
    loadgen = importlib.util.find_spec("mlperf_loadgen") is not None  # the mlperf extra; no aarch64 wheel
    pytester.makepyfile(test_served=textwrap.dedent(SWEEP_TEST))
    results = pytester.path / "results.json"
    result = pytester.runpytest_inprocess(
        "test_served.py",
        str(SUITE),
        "-k",
        "test_sweep or (open_loop and cpu)" + (" or (loadgen and cpu)" if loadgen else ""),
        "--gpuperf-engine",
        "transformers",
        *OPEN_LOOP,
        *session_flags(pytester, results),
        "--gpuperf-save",
    )
    result.assert_outcomes(passed=4 if loadgen else 2)
    version = transformers.__version__
    result.stdout.fnmatch_lines([f"gpuperf engine: transformers {version} serving tiny-llama, ready in *: *serve *"])
    assert result.stdout.str().count("gpuperf engine: transformers") == 1  # one server for both tests
    document = json.loads(results.read_text())
    stack = document["fingerprint"]["stack"]
    assert stack["inference_engine"] == "transformers" and stack["inference_engine_version"] == version
    metrics = document["results"]
    contexts = [m["context"] for m in metrics if m["metric"].startswith("c2.")]
    assert contexts and all(c["engine"]["engine"] == "transformers" for c in contexts)
    assert all("--port" in c["engine"]["launch"] for c in contexts)

    open_loop = [m for m in metrics if "test_open_loop_sweep[engine-transformers-cpu]" in m["test"]]
    names = {m["metric"] for m in open_loop}
    for rate in ("rate4.", "rate8."):
        assert {rate + "ttft_p50", rate + "tpot_p50", rate + "e2e_p99", rate + "requests_s"} <= names, names
    ttft = next(m for m in open_loop if m["metric"] == "rate8.ttft_p50")
    assert len(ttft["samples"]) == 3  # one per run
    context = ttft["context"]
    assert context["rate"] == 8.0 and context["requests_per_run"] == 8 and context["concurrency_cap"] == 8
    assert context["arrivals"]["process"] == "poisson" and context["arrivals"]["count"] == 8
    assert context["lengths"] == {"kind": "fixed", "isl": 64, "osl": 32}
    assert context["engine"]["engine"] == "transformers" and context["engine"]["version"] == version
    assert context["engine"]["url"] == contexts[0]["engine"]["url"]  # the same server as the closed loop's
    assert context["send_lag_p99_s"] >= context["client_lag_p99_s"] >= 0
    port = contexts[0]["engine"]["url"].rsplit(":", 1)[1]
    assert not _processes_with(f"--port {port}")  # the session stopped its server
    if not loadgen:
        return
    server = {m["metric"]: m for m in metrics if "test_loadgen[engine-transformers-cpu-server]" in m["test"]}
    assert {"loadgen.server.ttft_p90", "loadgen.server.tpot_p90", "loadgen.server.samples_s"} <= set(server)
    assert server["loadgen.server.ttft_p50"]["context"]["engine"]["url"] == contexts[0]["engine"]["url"]
    assert any(m["metric"] == "loadgen.offline.samples_s" for m in metrics)

    slowed = pytester.path / "slowed.json"
    # in a process of its own: a second in-process session would import torch's lazily loaded modules again
    result = pytester.runpytest_subprocess(
        str(SUITE),
        "-k",
        "loadgen and cpu and server",
        "--gpuperf-engine=transformers",
        "--gpuperf-inject-slowdown=inference=100",
        # 8 runs against the 5 stored: at 5 against 5 one busy run on either side leaves the 2x TPOT AMBIGUOUS
        # (p < 0.01 needs all five apart; benchmarks/README.md)
        "--gpuperf-inference-runs=8",
        # a percentile of one short run spreads past the CPU noise limit of 10% on a busy 2-core machine; the
        # 2x step is judged at a wider one, and not confirmed in a fresh session (which would launch a third server)
        "--gpuperf-noise-limit=60",
        "--gpuperf-confirm=0",
        *session_flags(pytester, slowed),
    )
    verdicts = {m["metric"]: m for m in json.loads(slowed.read_text())["results"]}
    ratios = {name: (m["verdict"], m["comparison"]["ratio"]) for name, m in verdicts.items()}
    # TPOT is the server's decode step, doubled: ~1.5-2x slower on this busy 2-core machine. It reads REGRESSED
    # in most trials but not all (benchmarks/README.md: 5 of 8, and once an unchanged server), so the check asserts
    # what load cannot fake: both p50s slower, TPOT by a quarter at least, never PASS or IMPROVED, and a REGRESSED
    # verdict failing the test
    p50 = {name: verdicts[f"loadgen.server.{name}_p50"] for name in ("ttft", "tpot")}
    assert all(m["comparison"]["ratio"] < 1 for m in p50.values()), ratios
    assert p50["tpot"]["comparison"]["ratio"] <= 0.8, ratios
    assert {m["verdict"] for m in p50.values()} <= {"REGRESSED", "NOISY", "AMBIGUOUS"}, ratios
    regressed = any(m["verdict"] == "REGRESSED" for m in verdicts.values())
    result.assert_outcomes(**({"failed": 1} if regressed else {"passed": 1}))
    engine = verdicts["loadgen.server.ttft_p50"]["context"]["engine"]
    assert (
        engine["injected_slowdown_pct"] == 100
        and " -m pytest_gpuperf.inference.slowed_serve serve " in engine["launch"]
    )
    # neither server nor a LoadGen process (its command line names the URL and the served folder) is left
    assert not _processes_with(f"--port {engine['url'].rsplit(':', 1)[1]}") and not _processes_with(engine["url"])


def test_the_suite_drives_a_hand_run_transformers_serve_in_open_loop(
    served: OpenAIEngine, pytester: pytest.Pytester
) -> None:
    """--gpuperf-engine openai:URL with --gpuperf-request-rate and gamma arrivals on the module's server."""
    results = pytester.path / "results.json"
    result = pytester.runpytest_inprocess(
        str(SUITE),
        "-k",
        "open_loop and cpu",
        f"--gpuperf-engine=openai:{served.url}",
        f"--gpuperf-inference-served-model={served.model}",
        "--gpuperf-burstiness=2",
        *OPEN_LOOP,
        *session_flags(pytester, results),
    )
    result.assert_outcomes(passed=1)
    document = json.loads(results.read_text())
    assert document["fingerprint"]["stack"]["inference_engine"] == "transformers"
    [ttft] = [m for m in document["results"] if m["metric"] == "rate8.ttft_p50"]
    assert "test_open_loop_sweep[engine-openai-cpu]" in ttft["test"]
    arrivals = ttft["context"]["arrivals"]
    assert arrivals["process"] == "gamma" and arrivals["burstiness_cv"] == 2.0 and arrivals["gamma_shape"] == 0.25
    assert ttft["context"]["engine"] == {
        "engine": "transformers",
        "version": "unknown",
        "url": served.url,
        "served_model": served.model,
    }


def test_lengths_longer_than_the_served_context_fail_once_before_any_request(
    served: OpenAIEngine, pytester: pytest.Pytester
) -> None:
    import shutil

    short = pytester.path / "short-context"
    shutil.copytree(served.model, short)
    config = json.loads((short / "config.json").read_text())
    (short / "config.json").write_text(json.dumps({**config, "max_position_embeddings": 1024}))
    result = pytester.runpytest_inprocess(
        str(SUITE),
        "-k",
        "open_loop and cpu",
        f"--gpuperf-engine=openai:{served.url}",
        f"--gpuperf-inference-served-model={short}",
        "--gpuperf-lengths=sharegpt",
        *session_flags(pytester),
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*--gpuperf-lengths sharegpt needs up to 2048 prompt + output tokens per request, but "
            f"openai:{served.url} takes at most 1024: serve the model with a context of at least 2048 tokens*"
        ]
    )


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
