"""A `transformers serve` sweep: the Pareto front (tok/s per device against tok/s per user) of a real engine.

Launches `transformers serve` on a registry model with random weights (pytest_gpuperf/inference/servers.py, as
`--gpuperf-engine transformers` does), drives it with the closed loop of inference/sweep.py over the given
concurrencies (one untimed warm-up, then `--runs` interleaved runs of each), and prints every operating point
with its medians, the front, and the throughput at interactivity points inside it. `--out` writes them as JSON.

    python benchmarks/serve_sweep.py [--model tiny-llama] [--isl 128] [--osl 128] [--concurrencies 1,2,4,8,16]
        [--runs 3] [--engine-args='--continuous-batching'] [--out front.json]

`--rates R1,R2,..` (open-loop request rates) is refused until this build has open-loop arrivals: a closed loop
at concurrency c is what it measures today.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(values))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny-llama", help="registry model (llama or moe family)")
    parser.add_argument("--isl", type=int, default=128)
    parser.add_argument("--osl", type=int, default=128)
    parser.add_argument("--concurrencies", type=_ints, default=[1, 2, 4, 8, 16])
    parser.add_argument("--rates", default=None, help="open-loop request rates (not in this build)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-client", type=int, default=3, help="requests per concurrent client in one run")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--engine-args", default="--continuous-batching", help="extra `transformers serve` args")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.rates is not None:
        parser.error(
            "--rates: open-loop arrivals (requests/s with Poisson or gamma gaps) are not in this build of "
            "pytest-gpuperf; sweep --concurrencies (closed loop) instead"
        )

    from pytest_gpuperf.core.stats import summarize
    from pytest_gpuperf.inference.pareto import OperatingPoint, pareto_front, throughput_at
    from pytest_gpuperf.inference.servers import EngineChoice, EngineError, ServerPool
    from pytest_gpuperf.inference.sweep import run_sweep
    from pytest_gpuperf.models.registry import get_spec

    pool = ServerPool(
        choice=EngineChoice("transformers"),
        workdir=Path(tempfile.mkdtemp(prefix="serve-sweep-")),
        extra_args=tuple(shlex.split(args.engine_args)),
    )
    started = time.perf_counter()
    try:
        try:
            engine = pool.engine(model=args.model, max_len=args.isl + args.osl, device=args.device, dtype=args.dtype)
        except EngineError as error:
            print(f"serve_sweep: {error}", file=sys.stderr)
            return 2
        [launch] = pool.launches
        print(f"# {launch.engine} {launch.version}, ready in {launch.startup_s:.1f} s: {launch.command}")
        sweep = run_sweep(
            engine,
            isl=args.isl,
            osl=args.osl,
            concurrencies=args.concurrencies,
            runs=args.runs,
            vocab_size=get_spec(args.model).vocab_size,
            per_client=args.per_client,
        )
    finally:
        pool.close()
    points = []
    rows: list[dict[str, Any]] = []
    for concurrency, runs in sorted(sweep.runs.items()):
        median = {
            "interactivity": summarize([r.interactivity for r in runs]).median,
            "tok_s_per_device": summarize([r.tok_s_per_device for r in runs]).median,
            "ttft_p50_ms": 1e3 * statistics.median(r.latency["ttft"][50].value for r in runs),
            "tpot_p50_ms": 1e3 * statistics.median(r.latency["tpot"][50].value for r in runs),
            "requests_per_run": runs[0].requests,
        }
        rows.append({"concurrency": concurrency, **median})
        points.append(
            OperatingPoint(
                concurrency=concurrency, interactivity=median["interactivity"], throughput=median["tok_s_per_device"]
            )
        )
    front = pareto_front(points)
    on_front = {p.concurrency for p in front}
    print("| concurrency | tok/s/user (p50 TPOT) | tok/s/device | TTFT p50 | TPOT p50 | on the front |")
    print("| --- | --- | --- | --- | --- | --- |")
    for row in rows:
        print(
            f"| {row['concurrency']} | {row['interactivity']:.0f} | {row['tok_s_per_device']:.0f} | "
            f"{row['ttft_p50_ms']:.1f} ms | {row['tpot_p50_ms']:.2f} ms | "
            f"{'yes' if row['concurrency'] in on_front else 'no'} |"
        )
    low, high = front[0].interactivity, front[-1].interactivity
    targets = [round(low + (high - low) * f, -1) for f in (0.25, 0.5, 0.75)] if len(front) > 1 else []
    at = dict(zip(targets, throughput_at(front, targets))) if targets else {}
    for target, value in at.items():
        print(f"throughput at {target:.0f} tok/s/user: {value:.0f} tok/s/device" if value else f"{target}: beyond")
    print(f"# sweep wall time {time.perf_counter() - started:.0f} s (server start-up included)")
    if args.out is not None:
        document = {
            "engine": {"name": launch.engine, "version": launch.version, "command": launch.command},
            "startup_s": launch.startup_s,
            "isl": args.isl,
            "osl": args.osl,
            "runs": args.runs,
            "points": rows,
            "front": [p.concurrency for p in front],
            "throughput_at": {str(k): v for k, v in at.items()},
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
