"""An external server with an OpenAI-compatible completions API (vLLM, SGLang, transformers serve) as an engine.

Selected with ``--gpuperf-engine openai:URL`` (a server the user runs) or launched by servers.py. Invariant: every
way a request can fail (an HTTP error, an unreachable server, a timeout, a broken or malformed stream, an early
finish, usage that disagrees with the tokens streamed) ends in a ``Completion`` whose ``error`` says why, with the
tokens that arrived before it; once the server refused a connection, the requests not yet sent fail at once with
that reason. No torch here.
"""

from __future__ import annotations

import http.client
import json
import queue
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from pytest_gpuperf.inference.requests import Completion, Request, check_schedule

DIALECTS = ("openai", "transformers")
"""How a server takes its requests: ``openai`` (vLLM, SGLang: token-id prompts, ``ignore_eos``,
``min_tokens``) or ``transformers`` (``transformers serve``: text prompts, the token count through a
``generation_config``; it answers 422 to ``ignore_eos``/``min_tokens`` and 400 to a list prompt)."""


class TextCodec(Protocol):
    """Token ids <-> text with the served model's tokenizer (``model_folder.TokenCodec``)."""

    def decode(self, ids: list[int] | tuple[int, ...]) -> str: ...

    def encode(self, text: str) -> list[int]: ...


@dataclass(slots=True)
class _Stream:
    """What one response stream said about its own end."""

    finish_reason: str | None = None
    done: bool = False
    """``data: [DONE]`` arrived (vLLM, SGLang; ``transformers serve`` ends with a finish_reason instead)."""
    usage: dict[str, Any] | None = None


class OpenAIEngine:
    """An OpenAI-compatible ``/v1/completions`` server measured over HTTP with streaming.

    ``openai`` dialect: prompts are sent as token ids (vLLM and SGLang accept a list of ints as ``prompt``);
    ``ignore_eos`` and ``min_tokens`` ask for exactly ``max_new_tokens`` tokens, and ``temperature=0`` for
    greedy decoding. ``transformers`` dialect: the prompt is the codec's text of its ids and
    ``generation_config`` fixes ``min_new_tokens = max_new_tokens`` without sampling.

    Each streamed chunk's arrival time is a token time. A chunk's tokens are counted from its logprobs
    (``logprobs.tokens``), its token ids, the codec's reading of its text, or else one per non-empty text; a
    chunk carrying several tokens (server-side batching of the stream) counts as that many tokens arriving
    together, so ITL shows zero gaps, as clients see it. A final ``usage`` is checked against that count.
    """

    def __init__(
        self,
        url: str,
        *,
        model: str,
        devices: int = 1,
        timeout: float = 600.0,
        dialect: str = "openai",
        codec: TextCodec | None = None,
        name: str | None = None,
        info: dict[str, Any] | None = None,
        max_len: int | None = None,
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"inference endpoint {url!r} must be an http:// or https:// URL")
        if dialect not in DIALECTS:
            raise ValueError(f"dialect {dialect!r} is not one of {', '.join(DIALECTS)}")
        if dialect == "transformers" and codec is None:
            raise ValueError("the transformers dialect sends text prompts: it needs the model's codec")
        self.url = url.rstrip("/")
        self.model = model
        self.devices = devices
        self.timeout = timeout
        self.dialect = dialect
        self.codec = codec
        self.name = name or f"openai:{self.url}"
        self.info: dict[str, Any] = dict(info or {})
        """What the engine is (name, version, launch command, URL), for each metric's context."""
        self.max_len = max_len
        """The longest prompt + output the server takes, where it is known (a launched server's context, an
        attached one's ``max_model_len``, a served folder's ``max_position_embeddings``); None where not."""
        self._refused: str | None = None
        self._refused_lock = threading.Lock()

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
        the dispatcher got one (or got the slot of an earlier request it was waiting for: sends keep the
        schedule's order), so ``sent - ready`` is the dispatcher's own lateness (a late wake-up from sleep, the
        hand-off to a worker, the worker's wake-up) and not the wait the cap imposes by design. It errs
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
        freed = began  # when the dispatcher last got a slot it had waited for
        for request, offset in zip(requests, schedule):
            due = began + offset
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            if slots.acquire(blocking=False):
                # Requests go out in schedule order: one due while the dispatcher waited for an earlier one's
                # slot could not go before that one got its slot; that wait is the cap's, not the client's.
                ready = max(due, freed)
            else:
                slots.acquire()
                ready = freed = max(due, time.perf_counter())
            work.put((request, due, ready))
        for _ in workers:
            work.put(None)
        for thread in workers:
            thread.join()
        return [results[request.id] for request in requests]

    def _body(self, request: Request) -> dict[str, Any]:
        n = request.max_new_tokens
        if self.dialect == "transformers":
            assert self.codec is not None
            return {
                "model": self.model,
                "prompt": self.codec.decode(request.prompt),
                "max_tokens": n,
                "stream": True,
                "generation_config": json.dumps({"max_new_tokens": n, "min_new_tokens": n, "do_sample": False}),
            }
        return {
            "model": self.model,
            "prompt": list(request.prompt),
            "max_tokens": n,
            "min_tokens": n,
            "ignore_eos": True,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
            "logprobs": 1,
        }

    def complete(self, request: Request, *, on_first_token: Callable[[], None] | None = None) -> Completion:
        """One request, streamed; ``on_first_token`` is called the moment its first token arrives (what MLPerf
        LoadGen's ``FirstTokenComplete`` must be told when it happens, not after the request)."""
        return self._one(request, on_first_token)

    def _one(self, request: Request, on_first_token: Callable[[], None] | None = None) -> Completion:
        done = Completion(
            id=request.id,
            prompt_tokens=len(request.prompt),
            requested_tokens=request.max_new_tokens,
            sent=time.perf_counter(),
        )
        if self._refused is not None:
            done.error = f"not sent: {self._refused}"
            return done
        http_request = urllib.request.Request(
            f"{self.url}/v1/completions",
            data=json.dumps(self._body(request)).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
        )
        stream = _Stream()
        try:
            with urllib.request.urlopen(http_request, timeout=self.timeout) as response:
                kind = response.headers.get_content_type()
                if kind != "text/event-stream":
                    done.error = (
                        f"the server answered {kind}, not an event stream: it did not stream the completion "
                        "(token times need stream=true)"
                    )
                    return done
                for raw in response:
                    line = raw.decode("utf-8", errors="replace").strip()
                    if not line.startswith("data:"):
                        continue  # blank separators, ": keep-alive" comments, event:/id: fields
                    payload = line[len("data:") :].strip()
                    if payload == "[DONE]":
                        stream.done = True
                        break
                    now = time.perf_counter()
                    try:
                        chunk = json.loads(payload)
                    except ValueError:
                        chunk = None
                    if not isinstance(chunk, dict):
                        done.error = f"malformed stream event after {self._so_far(done)}: {payload[:120]!r}"
                        return done
                    problem = self._absorb(done, chunk, now, stream)
                    if problem is not None:
                        done.error = problem
                        return done
                    if on_first_token is not None and done.token_times:
                        on_first_token()
                        on_first_token = None
        except urllib.error.HTTPError as error:
            done.error = f"HTTP {error.code} {error.reason} from {self.url}/v1/completions: {_detail(error)}"
        except urllib.error.URLError as error:
            done.error = f"cannot reach {self.url}: {error.reason}"
            if isinstance(error.reason, (ConnectionRefusedError, socket.gaierror)):
                with self._refused_lock:
                    self._refused = self._refused or f"the server at {self.url} refused a connection ({error.reason})"
        except TimeoutError:
            done.error = f"no data from {self.url} for {self.timeout:g} s after {self._so_far(done)} (read timeout)"
        except (OSError, http.client.HTTPException) as error:
            done.error = f"connection to {self.url} broke after {self._so_far(done)}: {type(error).__name__}: {error}"
        else:
            done.error = self._end_problem(done, stream)
        return done

    @staticmethod
    def _so_far(done: Completion) -> str:
        return f"{done.output_tokens} of {done.requested_tokens} tokens"

    def _absorb(self, done: Completion, chunk: dict[str, Any], now: float, stream: _Stream) -> str | None:
        """Add one event's tokens to ``done``; returns why the request failed if the event says so."""
        if "error" in chunk or chunk.get("object") == "error":
            error = chunk.get("error", chunk)
            message = error.get("message", error) if isinstance(error, dict) else error
            return f"the server reported an error mid-stream after {self._so_far(done)}: {message}"
        if isinstance(chunk.get("usage"), dict):
            stream.usage = chunk["usage"]
        for choice in chunk.get("choices") or []:
            if not isinstance(choice, dict):
                return f"malformed stream event after {self._so_far(done)}: a choice is {choice!r}"
            if choice.get("finish_reason"):
                stream.finish_reason = str(choice["finish_reason"])
            logprobs = choice.get("logprobs") or {}
            ids = choice.get("token_ids") or logprobs.get("token_ids")
            text = choice.get("text") or ""
            if not ids and text and self.codec is not None:
                ids = self.codec.encode(text)
            count = len(logprobs.get("tokens") or []) or len(ids or []) or (1 if text else 0)
            done.token_times.extend([now] * count)
            if ids:
                done.tokens.extend(int(token) for token in ids)
        return None

    def _end_problem(self, done: Completion, stream: _Stream) -> str | None:
        """Why a stream that closed normally is still a failed request, or None."""
        if not stream.done and stream.finish_reason is None:
            return (
                f"the stream ended after {self._so_far(done)} without a finish_reason or [DONE]: "
                "the server closed it early"
            )
        usage = stream.usage or {}
        reported = usage.get("completion_tokens")
        if isinstance(reported, int) and reported != done.output_tokens:
            return f"the server reports {reported} completion tokens but streamed {done.output_tokens}"
        prompt = usage.get("prompt_tokens")
        if isinstance(prompt, int) and prompt != done.prompt_tokens:
            return f"the server read {prompt} prompt tokens, {done.prompt_tokens} were sent"
        if done.output_tokens < done.requested_tokens:
            reason = stream.finish_reason or "[DONE]"
            return (
                f"the server finished ({reason}) after {self._so_far(done)}: it did not generate the tokens "
                "asked for (does it honour ignore_eos/min_tokens?)"
            )
        return None


def _detail(error: urllib.error.HTTPError) -> str:
    """The first line of an error response's body (FastAPI's ``{"detail": ...}``), for the message."""
    try:
        text = error.read(400).decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException):
        return "(no body)"
    try:
        payload = json.loads(text)
        if isinstance(payload, dict):
            text = str(payload.get("detail") or payload.get("error") or payload.get("message") or payload)
    except ValueError:
        pass
    return " ".join(text.split())[:200] or "(empty body)"
