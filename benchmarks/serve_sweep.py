"""A `transformers serve` sweep: the Pareto front (tok/s per device against tok/s per user) of a real engine.

Launches `transformers serve` on a registry model with random weights (pytest_gpuperf/inference/servers.py, as
`--gpuperf-engine transformers` does) and drives it over HTTP, one of two ways:

- closed loop (`--concurrencies`, inference/sweep.py `run_sweep`): c clients, each sending its next request when
  its previous one completed; one untimed warm-up, then `--runs` interleaved runs of each concurrency.
- open loop (`--rates`, `run_rate_sweep`): requests sent at Poisson (or gamma, `--burstiness`) arrival times
  whatever the server does, at most `--cap` in flight, latency from the scheduled send time, `--requests` per
  run with `--edge-gaps` mean gaps of warm-up and cool-down sent but not measured. `--rates auto` first
  measures the server's capacity (a closed loop at the cap) and sweeps 20-120% of it.

It prints every operating point with its medians over the runs, the front, and the throughput at interactivity
points inside it; an open loop also shows goodput under `--slo`, the client's send lag (sent - scheduled: cap
queueing and the client's own lateness) and whether the client kept its schedule well enough to be judged
(`sweep.lag_reason`). `--out` writes them as JSON.

    python benchmarks/serve_sweep.py [--model tiny-llama] [--isl 128] [--osl 128] [--concurrencies 1,2,4,8,16]
        [--runs 3] [--engine-args='--continuous-batching'] [--out front.json]
    python benchmarks/serve_sweep.py --rates auto|R,R,.. [--cap 32] [--requests 60] [--burstiness 1]
        [--lengths fixed|sharegpt] [--slo ttft=500,tpot=25] [--out front.json]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PROBE_FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0, 1.2)
"""`--rates auto`: the rates swept, as fractions of the capacity the probe measured."""


def _ints(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return sorted(set(values))


def _rates(text: str) -> list[float] | str:
    if text.strip().lower() == "auto":
        return "auto"
    try:
        values = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected auto or comma-separated requests/s, got {text!r}") from None
    if not values or not all(v > 0 and math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"expected positive requests/s, got {text!r}")
    return sorted(set(values))


def _slo(text: str) -> Any:
    from pytest_gpuperf.core.config.settings import SettingError
    from pytest_gpuperf.inference.plugin import _parse_slo

    try:
        return _parse_slo(text)
    except SettingError as error:
        raise argparse.ArgumentTypeError(f"--slo {text!r}: {error}") from None


def _sig(value: float, digits: int = 2) -> float:
    return float(f"{value:.{digits}g}")


def probe_capacity(engine: Any, *, lengths: Any, cap: int, vocab_size: int) -> float:
    """Requests/s the server completes with ``cap`` requests always in flight (a closed loop of 2 x cap
    requests after a warm-up): the open loop's saturation rate, near which queueing starts to grow."""
    from pytest_gpuperf.inference.metrics import run_metrics
    from pytest_gpuperf.inference.sweep import requests_of_lengths

    warm = lengths.draw(cap)
    engine.generate(
        requests_of_lengths([(i, min(o, 8)) for i, o in warm], vocab_size=vocab_size, seed=2), concurrency=cap
    )
    requests = requests_of_lengths(lengths.draw(2 * cap), vocab_size=vocab_size, seed=3)
    return run_metrics(engine.generate(requests, concurrency=cap), where=" in the capacity probe").requests_s


def closed_rows(sweep: Any) -> list[dict[str, Any]]:
    rows = []
    for concurrency, runs in sorted(sweep.runs.items()):
        rows.append(
            {
                "concurrency": concurrency,
                "step": sweep.step(concurrency),
                "interactivity": statistics.median(r.interactivity for r in runs),
                "tok_s_per_device": statistics.median(r.tok_s_per_device for r in runs),
                "ttft_p50_ms": 1e3 * statistics.median(r.latency["ttft"][50].value for r in runs),
                "tpot_p50_ms": 1e3 * statistics.median(r.latency["tpot"][50].value for r in runs),
                "requests_per_run": runs[0].requests,
            }
        )
    return rows


def open_rows(sweep: Any) -> list[dict[str, Any]]:
    from pytest_gpuperf.inference.sweep import lag_reason

    def median_ms(runs: Any, name: str, p: int) -> float:
        return 1e3 * statistics.median(r.latency[name][p].value for r in runs)

    rows = []
    for rate, runs in sorted(sweep.runs.items()):
        sends = sweep.send_lag[rate]
        rows.append(
            {
                "rate": rate,
                "step": sweep.step(rate),
                "offered_req_s": sweep.offered_req_s[rate],
                "achieved_req_s": statistics.median(r.requests_s for r in runs),
                "interactivity": statistics.median(r.interactivity for r in runs),
                "tok_s_per_device": statistics.median(r.tok_s_per_device for r in runs),
                "ttft_p50_ms": median_ms(runs, "ttft", 50),
                "ttft_p99_ms": median_ms(runs, "ttft", 99),
                "tpot_p50_ms": median_ms(runs, "tpot", 50),
                "tpot_p99_ms": median_ms(runs, "tpot", 99),
                "goodput_req_s": statistics.median(r.goodput or 0.0 for r in runs),
                "good_fraction": statistics.median((r.good_requests or 0) / r.requests for r in runs),
                "send_lag_p50_ms": 1e3 * statistics.median(p50 for p50, _ in sends),
                "send_lag_p99_ms": 1e3 * statistics.median(p99 for _, p99 in sends),
                "client_lag_p99_ms": 1e3 * max(sweep.client_lag_p99[rate]),
                "measured_per_run": runs[0].requests,
                "noisy": lag_reason(sweep, rate),
            }
        )
    return rows


def print_front(rows: list[dict[str, Any]], front: list[Any]) -> dict[float, float | None]:
    """The throughput at three interactivity points inside the front (25/50/75% of its linear range)."""
    from pytest_gpuperf.inference.pareto import throughput_at

    if len(front) < 2:
        return {}
    low, high = front[0].interactivity, front[-1].interactivity
    targets = sorted({_sig(low + (high - low) * f) for f in (0.25, 0.5, 0.75)})
    at = dict(zip(targets, throughput_at(front, targets)))
    for target, value in at.items():
        print(f"throughput at {target:g} tok/s/user: {value:.0f} tok/s/device" if value else f"{target}: beyond")
    return at


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--model", default="tiny-llama", help="registry model (llama or moe family)")
    parser.add_argument("--isl", type=int, default=128)
    parser.add_argument("--osl", type=int, default=128)
    parser.add_argument("--concurrencies", type=_ints, default=[1, 2, 4, 8, 16])
    parser.add_argument("--rates", type=_rates, default=None, help="open loop: auto, or requests/s R,R,..")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--per-client", type=int, default=3, help="closed loop: requests per client in one run")
    parser.add_argument("--cap", type=int, default=32, help="open loop: most requests in flight")
    parser.add_argument("--requests", type=int, default=60, help="open loop: requests scheduled per run")
    parser.add_argument("--edge-gaps", type=float, default=3.0, help="open loop: warm-up/cool-down, mean gaps")
    parser.add_argument("--burstiness", type=float, default=1.0, help="open loop: CV of the gaps (1 Poisson)")
    parser.add_argument("--lengths", default="fixed", choices=("fixed", "sharegpt"))
    parser.add_argument("--slo", type=_slo, default=None, help="open loop goodput SLO ttft=MS,tpot=MS (500/25)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--engine-args", default="--continuous-batching", help="extra `transformers serve` args")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)

    from pytest_gpuperf.inference.lengths import Lengths
    from pytest_gpuperf.inference.metrics import SLO, RunFailed
    from pytest_gpuperf.inference.pareto import OperatingPoint, pareto_front
    from pytest_gpuperf.inference.servers import EngineChoice, EngineError, ServerPool
    from pytest_gpuperf.inference.sweep import run_rate_sweep, run_sweep
    from pytest_gpuperf.models.registry import get_spec

    vocab = get_spec(args.model).vocab_size
    open_loop = args.rates is not None
    max_len = 2048 if args.lengths == "sharegpt" else args.isl + args.osl
    lengths = Lengths(kind=args.lengths, isl=args.isl, osl=args.osl, seed=0, max_total=max_len)
    slo = args.slo or SLO(ttft_s=0.5, tpot_s=0.025)
    pool = ServerPool(
        choice=EngineChoice("transformers"),
        workdir=Path(tempfile.mkdtemp(prefix="serve-sweep-")),
        extra_args=tuple(shlex.split(args.engine_args)),
    )
    started = time.perf_counter()
    capacity = None
    print(f"# load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    try:
        try:
            engine = pool.engine(model=args.model, max_len=max_len, device=args.device, dtype=args.dtype)
        except EngineError as error:
            print(f"serve_sweep: {error}", file=sys.stderr)
            return 2
        [launch] = pool.launches
        print(f"# {launch.engine} {launch.version}, ready in {launch.startup_s:.1f} s: {launch.command}")
        try:
            if open_loop:
                rates = args.rates
                if rates == "auto":
                    capacity = probe_capacity(engine, lengths=lengths, cap=args.cap, vocab_size=vocab)
                    rates = sorted({_sig(capacity * f) for f in PROBE_FRACTIONS})
                    print(f"# probe: {capacity:.2f} req/s with {args.cap} in flight; rates {rates}")
                sweep = run_rate_sweep(
                    engine,
                    rates=rates,
                    lengths=lengths,
                    cap=args.cap,
                    runs=args.runs,
                    vocab_size=vocab,
                    burstiness=args.burstiness,
                    count=args.requests,
                    edge_gaps=args.edge_gaps,
                    slo=slo,
                )
            else:
                sweep = run_sweep(
                    engine,
                    isl=args.isl,
                    osl=args.osl,
                    concurrencies=args.concurrencies,
                    runs=args.runs,
                    vocab_size=vocab,
                    per_client=args.per_client,
                )
        except (RunFailed, ValueError) as error:
            print(f"serve_sweep: {error}", file=sys.stderr)
            return 1
    finally:
        pool.close()
    rows = open_rows(sweep) if open_loop else closed_rows(sweep)
    front = pareto_front(
        OperatingPoint(concurrency=row["step"], interactivity=row["interactivity"], throughput=row["tok_s_per_device"])
        for row in rows
    )
    on_front = {p.concurrency for p in front}
    if open_loop:
        print(
            "| rate req/s | offered / achieved req/s | tok/s/user (1 / p50 TPOT) | tok/s/device | TTFT p50 / p99 | "
            f"TPOT p50 / p99 | goodput req/s (SLO {slo.ttft_s * 1e3:g}/{slo.tpot_s * 1e3:g} ms) | "
            "send lag p50 / p99 | client lag p99 | judged | on the front |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for row in rows:
            print(
                f"| {row['rate']:g} | {row['offered_req_s']:.2f} / {row['achieved_req_s']:.2f} | "
                f"{row['interactivity']:.0f} | "
                f"{row['tok_s_per_device']:.0f} | {row['ttft_p50_ms']:.1f} / {row['ttft_p99_ms']:.0f} ms | "
                f"{row['tpot_p50_ms']:.2f} / {row['tpot_p99_ms']:.1f} ms | {row['goodput_req_s']:.2f} "
                f"({row['good_fraction']:.0%}) | {row['send_lag_p50_ms']:.2f} / {row['send_lag_p99_ms']:.1f} ms | "
                f"{row['client_lag_p99_ms']:.1f} ms | {'NOISY' if row['noisy'] else 'yes'} | "
                f"{'yes' if row['step'] in on_front else 'no'} |"
            )
        for row in rows:
            if row["noisy"]:
                print(f"# rate {row['rate']:g}: {row['noisy']}")
    else:
        print("| concurrency | tok/s/user (1 / p50 TPOT) | tok/s/device | TTFT p50 | TPOT p50 | on the front |")
        print("| --- | --- | --- | --- | --- | --- |")
        for row in rows:
            print(
                f"| {row['concurrency']} | {row['interactivity']:.0f} | {row['tok_s_per_device']:.0f} | "
                f"{row['ttft_p50_ms']:.1f} ms | {row['tpot_p50_ms']:.2f} ms | "
                f"{'yes' if row['step'] in on_front else 'no'} |"
            )
    at = print_front(rows, front)
    print(f"# load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"# sweep wall time {time.perf_counter() - started:.0f} s (server start-up included)")
    if args.out is not None:
        document = {
            "engine": {"name": launch.engine, "version": launch.version, "command": launch.command},
            "startup_s": launch.startup_s,
            "isl": args.isl,
            "osl": args.osl,
            "runs": args.runs,
            "axis": sweep.axis,
            "setup": sweep.setup,
            "slo_ms": {"ttft": slo.ttft_s * 1e3, "tpot": slo.tpot_s * 1e3} if open_loop else None,
            "probe_req_s": capacity,
            "points": rows,
            "front": [p.concurrency for p in front],
            "throughput_at": {str(k): v for k, v in at.items()},
        }
        args.out.write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
