"""One MLPerf LoadGen run against an OpenAI-compatible server, in a process of its own (inference/loadgen.py starts
it): LoadGen loads its built-in settings only at its first ``FromConfig`` of a process, so one run per process.

The system under test sends each query LoadGen issues as a streamed completion (inference/openai.py) from a thread
pool, tells LoadGen the first token when it arrives and the query when it ends, with its token count. Failed
requests are written to ``errors.json`` in the output folder. Run: ``python -m pytest_gpuperf.inference.loadgen_sut``.
"""

from __future__ import annotations

import argparse
import array
import json
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import mlperf_loadgen as lg

from pytest_gpuperf.inference.engine import make_prompts
from pytest_gpuperf.inference.requests import Request
from pytest_gpuperf.inference.servers import attach

SCENARIOS = {"Server": lg.TestScenario.Server, "Offline": lg.TestScenario.Offline}


def _respond(sample_id: int, tokens: int | None) -> Any:
    """A response whose data LoadGen may copy: one token id per token (LoadGen logs, it does not read them)."""
    data = array.array("i", [0] * max(tokens or 1, 1))
    address, count = data.buffer_info()
    size = count * data.itemsize
    response = (
        lg.QuerySampleResponse(sample_id, address, size, tokens)
        if tokens
        else lg.QuerySampleResponse(sample_id, address, size)
    )
    return response, data


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pytest_gpuperf.inference.loadgen_sut")
    parser.add_argument("--url", required=True)
    parser.add_argument("--served-model", default=None)
    parser.add_argument("--scenario", choices=sorted(SCENARIOS), required=True)
    parser.add_argument("--qps", type=float, required=True, help="Server: target QPS; Offline: expected QPS")
    parser.add_argument("--duration-ms", type=int, required=True)
    parser.add_argument("--min-queries", type=int, required=True)
    parser.add_argument("--percentile", type=float, required=True)
    parser.add_argument("--ttft-limit-ms", type=float, required=True)
    parser.add_argument("--tpot-limit-ms", type=float, required=True)
    parser.add_argument("--samples", type=int, default=32)
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--vocab-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=32)
    parser.add_argument("--outdir", type=Path, required=True)
    parser.add_argument("--skip-first-token", action="store_true", help="a SUT that never reports the first token")
    args = parser.parse_args(argv)
    engine = attach(args.url, served_model=args.served_model, devices=1)
    prompts = make_prompts(count=args.samples, length=args.prompt_len, vocab_size=args.vocab_size, seed=0)
    pool = ThreadPoolExecutor(args.threads)
    errors: list[str] = []
    lock = threading.Lock()

    def first_token(sample_id: int) -> None:
        response, data = _respond(sample_id, None)
        lg.FirstTokenComplete([response])
        del data

    def one(sample: Any) -> None:
        request = Request(id=sample.index, prompt=prompts[sample.index], max_new_tokens=args.max_new_tokens)
        hook = None if args.skip_first_token else (lambda: first_token(sample.id))
        done = engine.complete(request, on_first_token=hook)
        if done.error is not None:
            with lock:
                errors.append(done.error)
        response, data = _respond(sample.id, done.output_tokens)
        lg.QuerySamplesComplete([response])
        del data

    def issue(samples: list[Any]) -> None:
        for sample in samples:
            pool.submit(one, sample)

    settings = lg.TestSettings()
    settings.scenario = SCENARIOS[args.scenario]
    settings.mode = lg.TestMode.PerformanceOnly
    settings.use_token_latencies = True
    settings.min_duration_ms = args.duration_ms
    settings.min_query_count = args.min_queries
    settings.ttft_latency = int(args.ttft_limit_ms * 1e6)
    settings.tpot_latency = int(args.tpot_limit_ms * 1e6)
    if args.scenario == "Server":
        settings.server_target_qps = args.qps
        settings.server_target_latency_percentile = args.percentile
        settings.server_target_latency_ns = int((args.ttft_limit_ms + args.tpot_limit_ms * args.max_new_tokens) * 1e6)
    else:
        settings.offline_expected_qps = args.qps
    logs = lg.LogSettings()
    logs.log_output.outdir = str(args.outdir)
    logs.log_output.copy_summary_to_stdout = False
    logs.enable_trace = False
    sut = lg.ConstructSUT(issue, lambda: None)
    qsl = lg.ConstructQSL(args.samples, args.samples, lambda indices: None, lambda indices: None)
    try:
        lg.StartTestWithLogSettings(sut, qsl, settings, logs)
    finally:
        lg.DestroyQSL(qsl)
        lg.DestroySUT(sut)
        pool.shutdown(wait=True)
    (args.outdir / "errors.json").write_text(json.dumps(errors))
    return 0


if __name__ == "__main__":
    sys.exit(main())
