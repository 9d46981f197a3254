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
    """What happened to one request: when it was due, when it was sent and when each output token reached the
    client.

    Times are ``time.perf_counter()`` seconds (or an injected clock's). ``error`` is set when the request failed;
    its tokens are then whatever arrived before the failure.

    In an open loop ``scheduled`` is the time the arrival process fixed for the request, and latency is measured
    from it, not from ``sent``: a request that waited inside the client (for a free slot under the concurrency
    cap, or behind a late dispatcher) waited as a user would, and leaving that wait out is coordinated
    omission. ``ready`` is when the client could first have sent it (the later of ``scheduled`` and a free
    slot), so ``sent - ready`` is the client's own lateness: what says whether the load generator kept up.
    In a closed loop both are None: the client sends when its previous request completed, which is ``sent``.
    """

    id: int
    prompt_tokens: int
    requested_tokens: int
    sent: float
    token_times: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    error: str | None = None
    scheduled: float | None = None
    ready: float | None = None

    @property
    def output_tokens(self) -> int:
        return len(self.token_times)

    @property
    def start(self) -> float:
        """Where latency is measured from: the scheduled send time in an open loop, else the send time."""
        return self.sent if self.scheduled is None else self.scheduled

    @property
    def send_lag(self) -> float:
        """sent - scheduled: all the wait before the request left (cap queueing and client lateness); 0 closed."""
        return 0.0 if self.scheduled is None else self.sent - self.scheduled

    @property
    def client_lag(self) -> float:
        """sent - ready: the client's own lateness, not counting the wait for a free slot under the cap."""
        return 0.0 if self.ready is None else max(0.0, self.sent - self.ready)


def check_schedule(requests: Sequence[Request], schedule: Sequence[float] | None) -> None:
    """An open loop's schedule: one finite offset >= 0 per request, nondecreasing (requests in send order)."""
    if schedule is None:
        return
    if len(schedule) != len(requests):
        raise ValueError(f"schedule has {len(schedule)} send offsets for {len(requests)} requests")
    if any(not (offset >= 0) or offset == float("inf") for offset in schedule):
        raise ValueError("schedule offsets must be finite seconds >= 0")
    if any(later < earlier for earlier, later in zip(schedule, schedule[1:])):
        raise ValueError("schedule offsets must be nondecreasing: give the requests in send order")


@runtime_checkable
class InferenceEngine(Protocol):
    """An engine the inference tests can measure."""

    name: str
    """Short name for reports ("in-process", "openai:http://host:8000")."""
    devices: int
    """Accelerators (or CPU sockets) serving the requests: the denominator of tok/s per device."""

    def generate(
        self, requests: Sequence[Request], *, concurrency: int, schedule: Sequence[float] | None = None
    ) -> list[Completion]:
        """Serve ``requests`` and return one completion per request, in request order.

        Without ``schedule``: a closed loop of ``concurrency`` clients, each sending its next request when its
        previous one completed. With ``schedule`` (one send offset per request, seconds from the start of the
        call, nondecreasing): an open loop; request i is due at start + schedule[i] and is sent then, or as
        soon as fewer than ``concurrency`` requests are in flight (the cap), never before. Each completion then
        carries ``scheduled`` (the due time) and ``ready``. Callers pass ``schedule`` only for an open loop, so
        an engine written before it existed still serves closed loops."""
        ...
