"""The in-process engine for transformers models (``hf:`` specs, models/hf.py): greedy decoding with the model's
own KV cache, as ``model.generate`` would run it, timed token by token.

It batches in waves (static batching, as ``model.generate`` does): the next ``concurrency`` requests are
left-padded, prefilled in one forward and decoded together through the model's KV cache; the next
wave starts when this one is done. Continuous batching (engine.py) needs cache rows at different positions,
which transformers' cache is not. Decoding runs for exactly ``max_new_tokens``; a token's time is taken when it
reaches the host. ``HFLogits`` makes ``model(tokens)`` return logits, the interface parity.py calls.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pytest_gpuperf.inference.requests import Completion, Request, check_schedule

if TYPE_CHECKING:
    import torch
    from torch import nn

PAD_ID = 0
"""Token id of left padding (masked out: any id in the vocabulary does)."""


@functools.cache
def _logits_module() -> type:
    from torch import nn

    class HFLogits(nn.Module):
        """``model(tokens)`` -> logits (batch, seq, vocab) of a transformers causal LM, no cache."""

        def __init__(self, model: nn.Module) -> None:
            super().__init__()
            self.model = model

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            logits: torch.Tensor = self.model(input_ids=tokens, use_cache=False).logits
            return logits

    return HFLogits


def HFLogits(model: nn.Module) -> nn.Module:  # noqa: N802 - a class, built lazily so this module needs no torch
    """Wrap ``model`` (see the module docstring); the class is defined on first use (torch is imported then)."""
    module: nn.Module = _logits_module()(model)
    return module


def cache_name(model: Any) -> str:
    """``cache`` where the model's forward takes it (newer transformers, where ``past_key_values`` is deprecated),
    else ``past_key_values``."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in parameters else "past_key_values"


class HFEngine:
    """Greedy generation of a transformers causal LM in waves of ``concurrency`` requests (module docstring).

    ``model`` is the transformers model or its :func:`HFLogits` wrapper, in eval mode. ``autocast`` wraps the
    forwards; ``clock`` gives the request and token times (``time.perf_counter`` unless a test injects one).
    """

    name = "in-process:transformers"

    def __init__(
        self,
        model: nn.Module,
        *,
        max_len: int,
        devices: int = 1,
        autocast: Callable[[], object] | None = None,
        clock: Callable[[], float] = time.perf_counter,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model: Any = model.model if isinstance(model, _logits_module()) else model
        self.cache_name = cache_name(self.model)
        """The forward's key-value cache argument and output field (``cache_name``)."""
        self.max_len = max_len
        self.devices = devices
        self._autocast = autocast
        self._clock = clock
        self._sleep = sleep
        self.waves: list[int] = []
        """Requests in each wave of the last ``generate`` (proof that forwards were shared)."""
        self.decode_steps = 0
        """Decode forwards of the last ``generate``."""

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def generate(
        self, requests: Sequence[Request], *, concurrency: int, schedule: Sequence[float] | None = None
    ) -> list[Completion]:
        """Closed loop: waves of ``concurrency`` requests in order. Open loop (``schedule``: send offsets from
        now): a wave takes the requests already due when it starts, at most ``concurrency`` (the cap); when none
        is due the engine sleeps until the next is. A request that arrives during a wave waits for the next one:
        static batching's queueing, the engine's own, counted in its latency from ``scheduled`` (``ready`` stays
        None: there is no client to lag)."""
        import torch

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        check_schedule(requests, schedule)
        self.waves, self.decode_steps = [], 0
        began = self._clock()
        due = {r.id: began + offset for r, offset in zip(requests, schedule)} if schedule is not None else {}
        completions: dict[int, Completion] = {}
        queue: list[Request] = []
        for request in requests:
            if len(request.prompt) + request.max_new_tokens > self.max_len:
                completions[request.id] = Completion(
                    id=request.id,
                    prompt_tokens=len(request.prompt),
                    requested_tokens=request.max_new_tokens,
                    sent=self._clock(),
                    error=f"prompt {len(request.prompt)} + {request.max_new_tokens} new tokens exceed the "
                    f"engine's max_len {self.max_len}",
                )
            else:
                queue.append(request)
        autocast = self._autocast() if self._autocast is not None else contextlib.nullcontext()
        with torch.inference_mode(), autocast:  # type: ignore[attr-defined]
            start = 0
            while start < len(queue):
                if due:
                    wait = due[queue[start].id] - self._clock()
                    if wait > 0:
                        self._sleep(wait)
                    now = self._clock()
                    end = start + 1
                    while end < len(queue) and end - start < concurrency and due[queue[end].id] <= now:
                        end += 1
                else:
                    end = start + concurrency
                for done in self._wave(queue[start:end]):
                    completions[done.id] = done
                start = end
        for request in requests:  # every request, one refused for its length too, was due at its time
            completions[request.id].scheduled = due.get(request.id)
        return [completions[request.id] for request in requests]

    def _wave(self, wave: list[Request]) -> list[Completion]:
        import torch

        now = self._clock()
        done = [
            Completion(id=r.id, prompt_tokens=len(r.prompt), requested_tokens=r.max_new_tokens, sent=now) for r in wave
        ]
        longest = max(len(r.prompt) for r in wave)
        ids = torch.full((len(wave), longest), PAD_ID, dtype=torch.long, device=self.device)
        mask = torch.zeros((len(wave), longest), dtype=torch.long, device=self.device)
        for row, request in enumerate(wave):
            ids[row, longest - len(request.prompt) :] = torch.tensor(request.prompt, device=self.device)
            mask[row, longest - len(request.prompt) :] = 1
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        steps = max(r.max_new_tokens for r in wave)
        for step in range(steps):
            following = out.logits[:, -1].argmax(dim=-1)
            tokens = following.tolist()
            now = self._clock()
            for completion, request, token in zip(done, wave, tokens):
                if len(completion.tokens) < request.max_new_tokens:
                    completion.tokens.append(int(token))
                    completion.token_times.append(now)
            if step == steps - 1:
                break
            mask = torch.cat([mask, mask.new_ones((len(wave), 1))], dim=-1)
            positions = positions[:, -1:] + 1
            out = self.model(
                input_ids=following.unsqueeze(-1),
                attention_mask=mask,
                position_ids=positions,
                **{self.cache_name: getattr(out, self.cache_name)},
                use_cache=True,
            )
            self.decode_steps += 1
        self.waves.append(len(wave))
        return done
