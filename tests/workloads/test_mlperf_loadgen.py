"""MLPerf LoadGen driving an inference test (inference/loadgen.py): Offline runs and a SUT that drops the first-token
call, each run in its own process, against a local OpenAI-compatible streaming server, and nothing left running
after. The suite's LoadGen cases on transformers serve, VALID, saved, and REGRESSED on a 2x slower server:
test_engine_transformers.py."""

from __future__ import annotations

import http.server
import json
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from local_http import serve

if platform.system() == "Linux" and platform.machine() == "aarch64":
    pytest.skip("mlcommons-loadgen has no Linux aarch64 wheel (6.0.17)", allow_module_level=True)
pytest.importorskip("mlperf_loadgen", reason="mlperf_loadgen is not installed: pip install 'pytest-gpuperf[mlperf]'")

from pytest_gpuperf.inference.loadgen import LoadgenSettings, record, run_loadgen  # noqa: E402

SERVER = LoadgenSettings(scenario="Server", qps=100, duration_s=0.6, min_queries=50)


class Streaming(http.server.BaseHTTPRequestHandler):
    """A server that streams ``max_tokens`` tokens, ``delay_s`` apart after a prefill of four delays."""

    delay_s = 0.01

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        found = self.path == "/v1/models"
        body = json.dumps({"data": [{"id": "stub", "owned_by": "vllm"}]} if found else {}).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        time.sleep(4 * self.delay_s)
        for i in range(body["max_tokens"]):
            time.sleep(self.delay_s)
            chunk = {"choices": [{"text": f"t{i}", "logprobs": {"tokens": [f"t{i}"], "token_ids": [i]}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    yield from serve(Streaming, backlog=256)  # Offline issues every query at once


def loadgen_processes() -> list[int]:
    """This process's LoadGen children still alive (another xdist worker's LoadGen run is not ours to count)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
                if parent == os.getpid() and b"loadgen_sut" in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return found


def test_offline_is_valid_and_reports_samples_per_second(server: str, tmp_path: Path) -> None:
    # 32 client threads on 130 ms requests top out near 250 samples/s: asking for 400 keeps the run longer than its
    # minimum duration (LoadGen calls an Offline run that ends sooner INVALID)
    offline = LoadgenSettings(scenario="Offline", qps=400, duration_s=0.6)
    result = run_loadgen(server, offline, tmp_path)
    assert result.valid, result.problems
    assert result.samples_per_s > 10


def test_a_sut_that_drops_the_first_token_call_fails_with_loadgens_reason(server: str, tmp_path: Path) -> None:
    result = run_loadgen(server, SERVER, tmp_path, extra=["--skip-first-token"])
    assert not result.valid

    class Recorder:
        def record(self, *args: object, **kwargs: object) -> None:
            raise AssertionError("an INVALID run records nothing")

    with pytest.raises(pytest.fail.Exception, match="is INVALID: LoadGen error: Attempted to record a sample latency"):
        record(Recorder(), [result], settings=SERVER)  # type: ignore[arg-type]
    assert not loadgen_processes()
