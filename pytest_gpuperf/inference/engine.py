"""The in-process inference engine: a KV-cached model behind a continuous-batching scheduler.

Every registry model runs through ``Transformer.forward(tokens, cache=..., start_pos=...)``; the engine owns one
``KVCache`` with a row per slot. Each scheduler iteration admits waiting requests (arrived ones, in an open loop)
into free slots and prefills them, then runs ONE decode forward over every occupied slot, each row at its own
position, as vLLM and SGLang share the decode step. In an open loop a request's latency counts from its scheduled
time, its wait for a slot included. Invariants: decoding is greedy for exactly ``max_new_tokens`` (no
end-of-sequence stop), so every run does the same work; a token's time is taken when it reaches the host.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_gpuperf.inference.requests import Completion, Request, check_schedule

if TYPE_CHECKING:
    import torch
    from torch import nn

    from pytest_gpuperf.models.llama import KVCache


@dataclass(slots=True, kw_only=True)
class SchedulerTrace:
    """What the scheduler did in the last ``generate``: proof that decode steps were shared."""

    decode_rows: list[int] = field(default_factory=list)
    """Requests advanced by each decode forward, in order (its length is the number of decode forwards)."""
    prefill_rows: list[int] = field(default_factory=list)
    """Requests prefilled by each prefill forward."""

    @property
    def decode_steps(self) -> int:
        return len(self.decode_rows)


@dataclass(slots=True)
class _Active:
    request: Request
    slot: int
    done: Completion

    @property
    def position(self) -> int:
        """Position of the last generated token: the next decode step feeds it there."""
        return len(self.request.prompt) + len(self.done.tokens) - 1

    @property
    def finished(self) -> bool:
        return len(self.done.tokens) >= self.request.max_new_tokens


class LocalEngine:
    """Greedy generation with a KV cache and continuous batching, in this process.

    ``decode_hook`` runs after every decode forward (tests inject a delay there to prove a slower decode step
    is caught); ``autocast`` wraps the forwards (mixed precision). ``max_prefill_tokens`` caps the tokens of one
    prefill forward, as serving engines cap a batch's tokens: the forward returns logits for every position, so
    8 prompts of 8k tokens with a 128k vocabulary would otherwise ask for 16 GB of logits at once. The model
    must be in eval mode already. ``clock`` gives the request and token times (``time.perf_counter`` unless a
    test injects one whose time passes as it says, so a timing verdict does not depend on the machine's load);
    ``sleep`` waits for the next arrival of an open loop (an injected clock brings its own, which advances it).

    In an open loop ``ready`` stays None (no client lag): the scheduler itself admits each request at the first
    iteration boundary after it arrived, as a serving engine's scheduler does, and that wait is the engine's,
    counted in the latency from ``scheduled``.
    """

    name = "in-process"

    def __init__(
        self,
        model: nn.Module,
        *,
        max_len: int,
        devices: int = 1,
        autocast: Callable[[], object] | None = None,
        decode_hook: Callable[[], None] | None = None,
        max_prefill_tokens: int = 16384,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if max_prefill_tokens < 1:
            raise ValueError(f"max_prefill_tokens must be >= 1, got {max_prefill_tokens}")
        self.model = model
        self.max_prefill_tokens = max_prefill_tokens
        self.max_len = max_len
        self.devices = devices
        self._autocast = autocast
        self._decode_hook = decode_hook
        self._clock = clock
        self._sleep = sleep
        self._cache: KVCache | None = None
        self.trace = SchedulerTrace()

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self, requests: Sequence[Request], *, concurrency: int, schedule: Sequence[float] | None = None
    ) -> list[Completion]:
        import contextlib

        import torch

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        check_schedule(requests, schedule)
        self.trace = SchedulerTrace()
        cache = self._cache_for(concurrency)
        slots: list[_Active | None] = [None] * concurrency
        queue: deque[Request] = deque()
        completions: dict[int, Completion] = {}
        began = self._clock()
        due = {r.id: began + offset for r, offset in zip(requests, schedule)} if schedule is not None else {}
        for request in requests:
            if len(request.prompt) + request.max_new_tokens > self.max_len:
                at = due.get(request.id)
                completions[request.id] = Completion(
                    id=request.id,
                    prompt_tokens=len(request.prompt),
                    requested_tokens=request.max_new_tokens,
                    sent=self._clock() if at is None else at,
                    scheduled=at,
                    error=f"prompt {len(request.prompt)} + {request.max_new_tokens} new tokens exceed the "
                    f"engine's max_len {self.max_len}",
                )
            else:
                queue.append(request)
        autocast = self._autocast() if self._autocast is not None else contextlib.nullcontext()
        with torch.inference_mode(), autocast:  # type: ignore[attr-defined]
            while queue or any(slot is not None for slot in slots):
                now = self._clock()
                if due and queue and due[queue[0].id] > now and all(slot is None for slot in slots):
                    self._sleep(due[queue[0].id] - now)  # idle until the next arrival
                    continue
                joining = []
                for index, slot in enumerate(slots):
                    if slot is None and queue and (not due or due[queue[0].id] <= now):
                        request = queue.popleft()
                        active = _Active(
                            request,
                            index,
                            Completion(
                                id=request.id,
                                prompt_tokens=len(request.prompt),
                                requested_tokens=request.max_new_tokens,
                                sent=self._clock(),
                                scheduled=due.get(request.id),
                            ),
                        )
                        slots[index] = active
                        joining.append(active)
                if joining:
                    self._prefill(joining, cache)
                    self._retire(slots, completions)
                if any(slot is not None for slot in slots):
                    self._decode(slots, cache)
                    self._retire(slots, completions)
        return [completions[request.id] for request in requests]

    def _cache_for(self, concurrency: int) -> KVCache:
        from pytest_gpuperf.models.llama import KVCache

        cache = self._cache
        if cache is None or cache.batch_size != concurrency:
            self._cache = None  # free the old one before allocating the new
            cache = KVCache.for_model(self.model, batch_size=concurrency, max_len=self.max_len)  # type: ignore[arg-type]
            self._cache = cache
        return cache

    def _prefill(self, joining: list[_Active], cache: KVCache) -> None:
        import torch

        # Adjacent slots with equal prompt lengths share one forward on a view of their cache rows.
        groups: list[list[_Active]] = []
        for active in sorted(joining, key=lambda a: a.slot):
            last = groups[-1][-1] if groups else None
            if (
                last is not None
                and last.slot + 1 == active.slot
                and len(last.request.prompt) == len(active.request.prompt)
                and (len(groups[-1]) + 1) * len(active.request.prompt) <= self.max_prefill_tokens
            ):
                groups[-1].append(active)
            else:
                groups.append([active])
        for group in groups:
            tokens = torch.tensor([a.request.prompt for a in group], dtype=torch.long, device=self.device)
            view = cache.rows(group[0].slot, group[-1].slot + 1)
            logits = self.model(tokens, cache=view, start_pos=0, last_only=True)
            first = logits[:, -1].argmax(dim=-1).tolist()
            now = self._clock()
            for active, token in zip(group, first):
                active.done.tokens.append(int(token))
                active.done.token_times.append(now)
            self.trace.prefill_rows.append(len(group))

    def _decode(self, slots: list[_Active | None], cache: KVCache) -> None:
        import torch

        # Rows up to the last occupied slot decode together; a free slot inside that range carries a dummy
        # token at position 0 (its cache row is rewritten by the prefill of whoever takes the slot next).
        rows = max(index for index, slot in enumerate(slots) if slot is not None) + 1
        tokens = [[slot.done.tokens[-1]] if slot is not None else [0] for slot in slots[:rows]]
        positions = [slot.position if slot is not None else 0 for slot in slots[:rows]]
        logits = self.model(
            torch.tensor(tokens, dtype=torch.long, device=self.device),
            cache=cache.rows(0, rows),
            start_pos=torch.tensor(positions, dtype=torch.long, device=self.device),
        )
        following = logits[:, -1].argmax(dim=-1).tolist()
        if self._decode_hook is not None:
            self._decode_hook()
        now = self._clock()
        advanced = 0
        for slot, token in zip(slots[:rows], following):
            if slot is not None:
                slot.done.tokens.append(int(token))
                slot.done.token_times.append(now)
                advanced += 1
        self.trace.decode_rows.append(advanced)

    @staticmethod
    def _retire(slots: list[_Active | None], completions: dict[int, Completion]) -> None:
        for index, slot in enumerate(slots):
            if slot is not None and slot.finished:
                completions[slot.request.id] = slot.done
                slots[index] = None


def sequential_greedy(model: nn.Module, prompt: Sequence[int], max_new_tokens: int) -> list[int]:
    """Reference generation without a cache or a batch: a full forward per token (slow, for checks)."""
    import torch

    tokens = list(prompt)
    device = next(model.parameters()).device
    with torch.inference_mode():
        for _ in range(max_new_tokens):
            logits = model(torch.tensor([tokens], dtype=torch.long, device=device))
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt) :]


def make_prompts(*, count: int, length: int, vocab_size: int, seed: int) -> list[tuple[int, ...]]:
    """Deterministic random prompts (token ids), the same for the same arguments on any machine."""
    import random

    rng = random.Random(seed)
    return [tuple(rng.randrange(vocab_size) for _ in range(length)) for _ in range(count)]
