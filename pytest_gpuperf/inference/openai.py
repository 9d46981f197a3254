"""An external server with an OpenAI-compatible completions API (vLLM, SGLang) as an inference engine.

Selected with ``--gpuperf-inference-endpoint URL``; only the in-process engine runs in the CPU tier. No torch here.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from pytest_gpuperf.inference.requests import Completion, Request, check_schedule


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

    def generate(
        self, requests: Sequence[Request], *, concurrency: int, schedule: Sequence[float] | None = None
    ) -> list[Completion]:
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if schedule is not None:
            check_schedule(requests, schedule)
            return self._open_loop(requests, concurrency, schedule)
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

    def _open_loop(self, requests: Sequence[Request], cap: int, schedule: Sequence[float]) -> list[Completion]:
        """A dispatcher thread (this one) starts each request at its scheduled time on one of ``cap`` workers.

        Workers wait on a queue rather than being started per request: starting a thread costs ~100 us, which
        would be client lag at every send. ``ready`` is the due time when a slot was free then, else the moment
        the dispatcher got one, so ``sent - ready`` is the dispatcher's own lateness (a late wake-up from
        sleep, the hand-off to a worker, the worker's wake-up) and not the wait the cap imposes by design. It errs
        on the side of lag: a slot that freed after the due time while the dispatcher overslept counts as free
        at the due time, so that wait is called the client's (a NOISY verdict too many, never one too few)."""
        results: dict[int, Completion] = {}
        slots = threading.Semaphore(cap)
        work: queue.SimpleQueue[tuple[Request, float, float] | None] = queue.SimpleQueue()

        def worker() -> None:
            while (item := work.get()) is not None:
                request, due, ready = item
                try:
                    done = self._one(request)
                except Exception as error:  # noqa: BLE001 - a worker that died would lose its request silently
                    done = Completion(
                        id=request.id,
                        prompt_tokens=len(request.prompt),
                        requested_tokens=request.max_new_tokens,
                        sent=ready,
                        error=f"{type(error).__name__}: {error}",
                    )
                done.scheduled, done.ready = due, ready
                results[request.id] = done
                slots.release()

        workers = [threading.Thread(target=worker, daemon=True) for _ in range(min(cap, len(requests)))]
        for thread in workers:
            thread.start()
        began = time.perf_counter()
        for request, offset in zip(requests, schedule):
            due = began + offset
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if slots.acquire(blocking=False):
                ready = due
            else:
                slots.acquire()
                ready = max(due, time.perf_counter())
            work.put((request, due, ready))
        for _ in workers:
            work.put(None)
        for thread in workers:
            thread.join()
        return [results[request.id] for request in requests]

    def _one(self, request: Request) -> Completion:
        body = {
            "model": self.model,
            "prompt": list(request.prompt),
            "max_tokens": request.max_new_tokens,
            "min_tokens": request.max_new_tokens,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "logprobs": 1,
        }
        http_request = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        done = Completion(
            id=request.id,
            prompt_tokens=len(request.prompt),
            requested_tokens=request.max_new_tokens,
            sent=time.perf_counter(),
        )
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout) as response:
                for raw in response:
                    line = raw.decode("utf-8", errors="replace").strip()
                    if not line.startswith("data:"):
                        continue
                    payload = line[len("data:") :].strip()
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
