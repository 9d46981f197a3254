"""What an inference engine is to the tests: requests in, timed completions out.

The in-process engine (engine.py) is the default; openai.py measures an external OpenAI-compatible server
through the same tests. No torch here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


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
