"""Output parity: a new stack must not change what the model says.

A golden holds, for fixed prompts, the greedy tokens and the teacher-forced top-k logits of every generated
position, per hardware type and precision (``golden_key``). Three checks: teacher-forced logits within the
precision's tolerance, top-1 agreeing except at near-ties; greedy tokens identical up to the first near-tie; and
the engine's tokens equal to a plain forward's argmax while they follow the golden, so a golden recorded by this
very run cannot hide a KV-cache or batching bug. Goldens are JSON files written only where none exists, not curves
(docs/design/goldens-as-files.md). No torch at import.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import nn

GOLDEN_SCHEMA = 1
TOP_K = 8


@dataclass(frozen=True, slots=True, kw_only=True)
class Tolerance:
    max_abs: float
    """Largest absolute logit difference allowed (logits of the registry's models are O(1))."""
    min_top1: float
    """Smallest fraction of non-near-tie positions whose top-1 token must agree."""


# fp32 differs across CPUs/GPUs only by summation order (~1e-5 on O(1) logits); reduced precisions round
# weights and activations (bf16 keeps 8 mantissa bits, fp16 11, fp8 e4m3 4).
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(max_abs=2e-3, min_top1=1.0),
    "tf32": Tolerance(max_abs=3e-2, min_top1=0.99),
    "fp16": Tolerance(max_abs=5e-2, min_top1=0.98),
    "bf16": Tolerance(max_abs=2e-1, min_top1=0.97),
    "fp8": Tolerance(max_abs=6e-1, min_top1=0.9),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ParityReport:
    max_abs: float
    top1_agreement: float
    near_ties: int
    greedy_match: int
    """Greedy tokens equal to the golden's before the first difference (all of them when none)."""
    greedy_total: int
    problems: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.problems


def golden_key(*, device: str, precision: str, model: str, seed: int) -> str:
    """File stem of a golden: model, seed, precision and the hardware type it was recorded on.

    On CPU the type is the hardware key's CPU type (vendor, family/model, vector ISA; not cores or RAM, which do
    not change the numerics): two CPUs that share a name but not an ISA take different kernels, so different
    summation orders, and must not share a golden.
    """
    from pytest_gpuperf.machine.fingerprint import cpu_type_slug, read_cpu, slugify

    if device == "cuda":
        import torch

        hardware = torch.cuda.get_device_name()
    else:
        hardware = "cpu-" + cpu_type_slug(read_cpu()[0])
    return slugify(f"{model}-seed{seed}-{precision}-{hardware}")


def teacher_forced_topk(
    model: nn.Module, prompt: Sequence[int], continuation: Sequence[int], *, k: int = TOP_K, autocast: Any = None
) -> list[dict[str, Any]]:
    """Top-k logits (ids, values, top1-top2 margin) at each position predicting a continuation token."""
    import contextlib

    import torch

    device = next(model.parameters()).device
    tokens = torch.tensor([list(prompt) + list(continuation)[:-1]], dtype=torch.long, device=device)
    with torch.inference_mode(), autocast() if autocast is not None else contextlib.nullcontext():
        logits = model(tokens)[0, len(prompt) - 1 :].float()
    values, ids = logits.topk(k, dim=-1)
    return [
        {"ids": row_ids, "values": [round(v, 6) for v in row_values], "margin": row_values[0] - row_values[1]}
        for row_ids, row_values in zip(ids.tolist(), values.tolist())
    ]


def make_golden(
    model: nn.Module,
    *,
    prompts: Sequence[Sequence[int]],
    tokens: Sequence[Sequence[int]],
    key: str,
    autocast: Any = None,
) -> dict[str, Any]:
    return {
        "schema": GOLDEN_SCHEMA,
        "key": key,
        "prompts": [list(p) for p in prompts],
        "tokens": [list(t) for t in tokens],
        "topk": [teacher_forced_topk(model, p, t, autocast=autocast) for p, t in zip(prompts, tokens)],
    }


def compare_to_golden(
    model: nn.Module, golden: dict[str, Any], greedy: Sequence[Sequence[int]], *, precision: str, autocast: Any = None
) -> ParityReport:
    """Both checks of the module docstring; ``greedy`` are the tokens the engine produced for the prompts."""
    import contextlib

    import torch

    tolerance = TOLERANCES.get(precision)
    if tolerance is None:
        raise KeyError(f"no parity tolerance for precision {precision!r}; known: {', '.join(TOLERANCES)}")
    device = next(model.parameters()).device
    worst = 0.0
    agree = counted = ties = matched = total = 0
    problems: list[str] = []
    tie = 2 * tolerance.max_abs
    for index, (prompt, golden_tokens, golden_topk, produced) in enumerate(
        zip(golden["prompts"], golden["tokens"], golden["topk"], greedy)
    ):
        tokens = torch.tensor([prompt + golden_tokens[:-1]], dtype=torch.long, device=device)
        with torch.inference_mode(), autocast() if autocast is not None else contextlib.nullcontext():
            logits = model(tokens)[0, len(prompt) - 1 :].float().cpu()
        problems.extend(_engine_against_forward(index, logits, golden_tokens, produced, tie))
        for position, entry in enumerate(golden_topk):
            current = logits[position]
            diff = (current[entry["ids"]] - torch.tensor(entry["values"])).abs().max().item()
            worst = max(worst, diff)
            if entry["margin"] <= tie:
                ties += 1
                continue
            counted += 1
            agree += int(int(current.argmax()) == entry["ids"][0])
        total += len(golden_tokens)
        for position, (want, got) in enumerate(zip(golden_tokens, produced)):
            if want != got:
                margin = golden_topk[position]["margin"]
                if margin > tie:
                    problems.append(
                        f"prompt {index}: greedy token {position} is {got}, golden {want} (golden margin "
                        f"{margin:.3g} > near-tie {tie:.3g})"
                    )
                matched += position
                break
        else:
            matched += len(golden_tokens)
            if len(produced) != len(golden_tokens):
                problems.append(f"prompt {index}: {len(produced)} greedy tokens, golden has {len(golden_tokens)}")
    top1 = agree / counted if counted else 1.0
    if worst > tolerance.max_abs:
        problems.append(
            f"teacher-forced logits differ by up to {worst:.3g} > {tolerance.max_abs:g} allowed for {precision}"
        )
    if top1 < tolerance.min_top1:
        problems.append(
            f"teacher-forced top-1 agreement {top1:.1%} < {tolerance.min_top1:.0%} for {precision} "
            f"({counted} positions, {ties} near-ties excused)"
        )
    return ParityReport(
        max_abs=worst,
        top1_agreement=top1,
        near_ties=ties,
        greedy_match=matched,
        greedy_total=total,
        problems=tuple(problems),
    )


def _engine_against_forward(
    index: int, logits: Any, golden_tokens: Sequence[int], produced: Sequence[int], tie: float
) -> list[str]:
    """Problems where the engine's greedy token is not the argmax of ``logits`` (teacher-forced on the golden
    tokens), at the positions whose context the engine shared: up to and including its first departure."""
    shared = next(
        (i for i, (want, got) in enumerate(zip(golden_tokens, produced)) if want != got), len(golden_tokens) - 1
    )
    values, ids = logits.topk(2, dim=-1)
    problems = []
    for position in range(min(shared + 1, len(produced), len(golden_tokens))):
        margin = float(values[position, 0] - values[position, 1])
        expected = int(ids[position, 0])
        if produced[position] != expected and margin > tie:
            problems.append(
                f"prompt {index}: the engine's greedy token {position} is {produced[position]}, the plain forward's "
                f"argmax is {expected} (margin {margin:.3g} > near-tie {tie:.3g}): the KV-cached, batched decode "
                "disagrees with a forward over the whole sequence"
            )
            break
    return problems


def load_golden(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ValueError(
            f"golden {path} is unreadable ({error}); delete it and record it again with --gpuperf-save"
        ) from None
    if data.get("schema") != GOLDEN_SCHEMA:
        raise ValueError(
            f"golden {path} has schema {data.get('schema')!r}, expected {GOLDEN_SCHEMA}; delete it "
            "and record it again with --gpuperf-save"
        )
    return data


def save_golden(path: Path, golden: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(golden, indent=None, separators=(",", ":")) + "\n", encoding="utf-8")
    tmp.replace(path)
