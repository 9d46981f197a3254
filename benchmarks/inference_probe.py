"""Where an inference tier's time goes on this machine: model build, prefill and the shared decode step.

    python benchmarks/inference_probe.py [--device cuda] [--budget 100] [--tier cuda]

The inference suite sizes its GPU tier from an estimated decode-step time (test_inference.GPU_DECODE_STEP_S);
this measures the real figures with the suite's own model and engine, one short generation per point, so the
tier can be sized from them: build time, then per (prompt length, concurrency) the prefill wall time (first
token) and the decode step (median gap between tokens), and for one decode step the device's busy time against
the host's wall time (torch.profiler) with the kernel count, which says whether a step is host- or
device-bound. Each point is skipped once ``--budget`` seconds have passed, so a lent GPU's minutes are not
overrun. Prints one line per point and a JSON summary at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_gpuperf.inference.engine import LocalEngine

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

POINTS = ((1024, 1), (1024, 8), (1024, 64), (8192, 1), (8192, 64))
"""(prompt tokens, concurrency) measured, in order."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--tier", default="cuda", help="the suite's tier whose model and precision to use")
    parser.add_argument("--budget", type=float, default=100.0, help="seconds; later points are skipped")
    parser.add_argument("--new-tokens", type=int, default=33, help="tokens generated per request (default 33)")
    args = parser.parse_args()
    began = time.perf_counter()

    import torch

    from pytest_gpuperf.inference.engine import LocalEngine, make_prompts
    from pytest_gpuperf.inference.requests import Request
    from pytest_gpuperf.suites.test_inference import TIERS, build_model

    tier = TIERS[args.tier]
    max_len = max(isl for isl, _ in POINTS) + args.new_tokens

    def sync() -> None:
        if args.device == "cuda":
            torch.cuda.synchronize()

    built = time.perf_counter()
    model = build_model(tier, max_len=max_len, device=args.device)
    sync()
    figures: dict[str, object] = {"model": tier.model, "precision": tier.precision, "device": args.device}
    figures["build_s"] = round(time.perf_counter() - built, 2)
    print(f"build {tier.model} {tier.precision} on {args.device}: {figures['build_s']} s", flush=True)
    engine = LocalEngine(model, max_len=max_len)
    vocab = model.config.vocab_size
    points = []
    for isl, concurrency in POINTS:
        if time.perf_counter() - began > args.budget:
            print(f"isl {isl} x {concurrency}: skipped (budget)", flush=True)
            continue
        prompts = make_prompts(count=concurrency, length=isl, vocab_size=vocab, seed=0)
        requests = [Request(id=i, prompt=p, max_new_tokens=args.new_tokens) for i, p in enumerate(prompts)]
        engine.generate(requests[:1], concurrency=concurrency)  # warm-up (allocates the cache)
        sync()
        started = time.perf_counter()
        done = engine.generate(requests, concurrency=concurrency)
        wall = time.perf_counter() - started
        first = max(c.token_times[0] for c in done) - min(c.sent for c in done)
        gaps = [b - a for c in done for a, b in zip(c.token_times[1:], c.token_times[2:])]
        step = statistics.median(gaps)
        point = {"isl": isl, "concurrency": concurrency, "prefill_s": round(first, 4), "decode_step_ms":
                 round(step * 1e3, 3), "wall_s": round(wall, 3), "decode_steps": engine.trace.decode_steps}  # fmt: skip
        points.append(point)
        print(json.dumps(point), flush=True)
    figures["points"] = points
    if args.device == "cuda" and time.perf_counter() - began < args.budget:
        figures["profiled_step"] = profile_step(engine, vocab)
        print(json.dumps(figures["profiled_step"]), flush=True)
    figures["probe_s"] = round(time.perf_counter() - began, 1)
    print("summary " + json.dumps(figures), flush=True)
    return 0


def profile_step(engine: LocalEngine, vocab: int) -> dict[str, object]:
    """One generation of 64 requests x 8 tokens under torch.profiler: kernels and device time per decode step
    against its host wall time."""
    from torch.profiler import ProfilerActivity, profile

    from pytest_gpuperf.inference.engine import make_prompts
    from pytest_gpuperf.inference.requests import Request

    prompts = make_prompts(count=64, length=1024, vocab_size=vocab, seed=1)
    requests = [Request(id=i, prompt=p, max_new_tokens=9) for i, p in enumerate(prompts)]
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        done = engine.generate(requests, concurrency=64)
    steps = engine.trace.decode_steps
    kernels = [e for e in prof.events() if e.device_type.name == "CUDA"]
    device_us = sum(e.device_time for e in kernels)
    gaps = [b - a for c in done for a, b in zip(c.token_times[1:], c.token_times[2:])]
    return {"decode_steps": steps, "kernels": len(kernels), "device_busy_ms_total": round(device_us / 1e3, 2),
            "profiled_decode_step_ms": round(statistics.median(gaps) * 1e3, 3)}  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
