"""MLPerf LoadGen against the project's own load generator on one server: ``transformers serve`` (tiny-llama,
fp32, CPU), the same prompts, output length and Poisson rate, in alternating rounds.

    python benchmarks/loadgen_compare.py [--rate 40] [--seconds 1.5] [--rounds 3]

Each round is one LoadGen Server run (inference/loadgen.py, its own process, percentile 0.9) and one open-loop run
of ``OpenAIEngine.generate`` on a Poisson schedule of the same rate and length (cap 32, as LoadGen's SUT pool).
Printed per round: TTFT and TPOT p50/p90 (ms) and completed requests/s, as each tool computes them.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from pytest_gpuperf.inference.arrivals import Arrivals, schedule
from pytest_gpuperf.inference.engine import make_prompts
from pytest_gpuperf.inference.loadgen import LoadgenSettings, run_loadgen
from pytest_gpuperf.inference.metrics import run_metrics
from pytest_gpuperf.inference.requests import Request
from pytest_gpuperf.inference.servers import EngineChoice, ServerPool

MODEL, VOCAB, PROMPT, TOKENS, SAMPLES = "tiny-llama", 256, 16, 8, 32


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=40.0)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loadgen-compare-"))
    pool = ServerPool(choice=EngineChoice("transformers"), workdir=work)
    try:
        served = pool.engine(model=MODEL, max_len=128, device="cpu", dtype="float32")
        prompts = make_prompts(count=SAMPLES, length=PROMPT, vocab_size=VOCAB, seed=0)
        settings = LoadgenSettings(scenario="Server", qps=args.rate, duration_s=args.seconds,
                                   min_queries=int(args.rate * args.seconds), samples=SAMPLES, prompt_len=PROMPT,
                                   max_new_tokens=TOKENS)  # fmt: skip
        print("round  tool       ttft_p50  ttft_p90  tpot_p50  tpot_p90  req/s  queries")
        for round_ in range(1, args.rounds + 1):
            result = run_loadgen(served.url, settings, work / f"loadgen-{round_}", served_model=served.model)
            invalid = "" if result.valid else "  INVALID: " + "; ".join(result.problems)
            print(f"{round_:5d}  LoadGen    {result.ttft_s[50] * 1e3:8.1f}  {result.ttft_s[90] * 1e3:8.1f}  "
                  f"{result.tpot_s[50] * 1e3:8.2f}  {result.tpot_s[90] * 1e3:8.2f}  {result.samples_per_s:5.1f}  "
                  f"{result.queries:7d}{invalid}")  # fmt: skip
            plan = schedule(Arrivals(rate=args.rate, duration_s=args.seconds, seed=round_))
            requests = [Request(id=i, prompt=prompts[i % SAMPLES], max_new_tokens=TOKENS) for i in range(len(plan))]
            done = served.generate(requests, concurrency=32, schedule=list(plan.offsets))
            ours = run_metrics(done)
            print(f"{round_:5d}  ours       {ours.latency['ttft'][50].value * 1e3:8.1f}  "
                  f"{ours.latency['ttft'][90].value * 1e3:8.1f}  {ours.latency['tpot'][50].value * 1e3:8.2f}  "
                  f"{ours.latency['tpot'][90].value * 1e3:8.2f}  {ours.requests_s:5.1f}  {len(done):7d}")  # fmt: skip
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
