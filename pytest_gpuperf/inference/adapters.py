"""What an inference engine is to the tests: requests in, timed completions out.

The in-process engine (engine.py) is the default. ``OpenAIEngine`` measures an external server with an
OpenAI-compatible completions API (vLLM, SGLang) through the same tests: selected with
``--gpuperf-inference-endpoint URL``. Only the in-process engine runs in the CPU tier. No torch here.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One generation request: a prompt of token ids and exactly how many tokens to produce (EOS ignored)."""

    id: int
    prompt: tuple[int, ...]
    max_new_tokens: int

    def __post_init__(self) -> None:
        if not self.prompt:
            raise ValueError(f"request {self.id}: empty prompt")
        if self.max_new_tokens < 1:
            raise ValueError(f"request {self.id}: max_new_tokens must be >= 1, got {self.max_new_tokens}")


@dataclass(slots=True, kw_only=True)
class Completion:
    """What happened to one request: when it was sent and when each output token reached the client.

    Times are ``time.perf_counter()`` seconds. ``error`` is set when the request failed; its tokens are then
    whatever arrived before the failure.
    """

    id: int
    prompt_tokens: int
    requested_tokens: int
    sent: float
    token_times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    error: str | None = None

    @property
    def output_tokens(self) -> int:
        return len(self.token_times)


@runtime_checkable
class InferenceEngine(Protocol):
    """An engine the inference tests can measure."""

    name: str
    """Short name for reports ("in-process", "openai:http://host:8000")."""
    devices: int
    """Accelerators (or CPU sockets) serving the requests: the denominator of tok/s per device."""

    def generate(self, requests: Sequence[Request], *, concurrency: int) -> list[Completion]:
        """Serve ``requests`` as a closed loop of ``concurrency`` clients: each client sends its next request
        when its previous one completed. Returns one completion per request, in request order."""
        ...


class OpenAIEngine:
    """An OpenAI-compatible ``/v1/completions`` server (vLLM, SGLang) measured over HTTP with streaming.

    Prompts are sent as token ids (both servers accept a list of ints as ``prompt``); ``ignore_eos`` and
    ``min_tokens`` ask for exactly ``max_new_tokens`` tokens, and ``temperature=0`` for greedy decoding. Each
    streamed chunk's arrival time is a token time; a chunk carrying several tokens (server-side batching of the
    stream) is counted as that many tokens arriving together, so ITL shows it as zero gaps, as clients see it.
    """

    def __init__(self, url: str, *, model: str, devices: int = 1, timeout: float = 600.0) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"inference endpoint {url!r} must be an http:// or https:// URL")
        self.url = url.rstrip("/")
        self.model = model
        self.devices = devices
        self.timeout = timeout
        self.name = f"openai:{self.url}"

    def generate(self, requests: Sequence[Request], *, concurrency: int) -> list[Completion]:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        results: dict[int, Completion] = {}
        pending = list(reversed(requests))
        lock = threading.Lock()

        def client() -> None:
            while True:
                with lock:
                    if not pending:
                        return
                    request = pending.pop()
                results[request.id] = self._one(request)

        threads = [threading.Thread(target=client, daemon=True) for _ in range(min(concurrency, len(requests)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [results[request.id] for request in requests]

    def _one(self, request: Request) -> Completion:
        body = {
            "model": self.model, "prompt": list(request.prompt), "max_tokens": request.max_new_tokens,
            "min_tokens": request.max_new_tokens, "ignore_eos": True, "temperature": 0.0, "stream": True,
            "stream_options": {"include_usage": True}, "logprobs": 1,
        }
        http_request = urllib.request.Request(
            f"{self.url}/v1/completions", data=json.dumps(body).encode(), method="POST",
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        done = Completion(id=request.id, prompt_tokens=len(request.prompt),
                          requested_tokens=request.max_new_tokens, sent=time.perf_counter())
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout) as response:
                for raw in response:
                    line = raw.decode("utf-8", errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    payload = line[len("data:"):].strip()
                    if payload == "[DONE]":
                        break
                    now = time.perf_counter()
                    self._absorb(done, json.loads(payload), now)
        except (urllib.error.URLError, OSError, ValueError) as error:
            done.error = f"{type(error).__name__}: {error}"
        return done

    @staticmethod
    def _absorb(done: Completion, chunk: dict[str, Any], now: float) -> None:
        for choice in chunk.get("choices") or []:
            logprobs = choice.get("logprobs") or {}
            count = len(logprobs.get("tokens") or []) or (1 if choice.get("text") else 0)
            done.token_times.extend([now] * count)
            ids = logprobs.get("token_ids")
            if ids:
                done.tokens.extend(int(token) for token in ids)
