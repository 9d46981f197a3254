"""Inference area: metrics math, Pareto interpolation, the continuous-batching scheduler, parity checks, the
HTTP adapter against a local server, and end to end: a slower decode step is REGRESSED, a thin p99 NOISY."""

from __future__ import annotations

import dataclasses
import http.server
import json
import math
import time
from collections.abc import Iterator

import local_http
import pytest
from virtual_clock import VIRTUAL_CLOCK

from pytest_gpuperf.inference.metrics import (
    SLO,
    RunFailed,
    check_completions,
    e2e_of,
    itls_of,
    min_samples,
    percentile,
    run_metrics,
    tpot_of,
    ttft_of,
)
from pytest_gpuperf.inference.openai import OpenAIEngine
from pytest_gpuperf.inference.pareto import OperatingPoint, interactivity_targets, pareto_front, throughput_at
from pytest_gpuperf.inference.requests import Completion, Request


def completion(id: int, sent: float, times: list[float], prompt: int = 10) -> Completion:
    return Completion(
        id=id,
        prompt_tokens=prompt,
        requested_tokens=len(times),
        sent=sent,
        token_times=times,
        tokens=list(range(len(times))),
    )


# -- metrics --------------------------------------------------------------------------------------------


def test_metrics_of_synthetic_timestamps() -> None:
    # Request 0: sent at 0, first token at 0.1, then every 0.01 s (5 tokens); request 1: sent at 0.05, first
    # token at 0.25, then gaps 0.02, 0.04 (3 tokens).
    done = [completion(0, 0.0, [0.1, 0.11, 0.12, 0.13, 0.14]), completion(1, 0.05, [0.25, 0.27, 0.31])]
    metrics = run_metrics(done, devices=2, slo=SLO(ttft_s=0.15, tpot_s=0.05))
    ttft = metrics.latency["ttft"]
    assert ttft[50].value == pytest.approx(0.15)  # midway between 0.1 and 0.2
    assert metrics.latency["e2e"][50].value == pytest.approx((0.14 + 0.26) / 2)
    # TPOT = (E2E - TTFT) / (n - 1): 0.04/4 = 0.01 and 0.06/2 = 0.03
    assert metrics.latency["tpot"][50].value == pytest.approx(0.02)
    assert metrics.latency["itl"][50].value == pytest.approx(0.01)
    assert metrics.latency["itl"][50].count == 6
    assert metrics.wall_s == pytest.approx(0.31)
    assert metrics.output_tok_s == pytest.approx(8 / 0.31)
    assert metrics.total_tok_s == pytest.approx(28 / 0.31)
    assert metrics.requests_s == pytest.approx(2 / 0.31)
    assert metrics.tok_s_per_device == pytest.approx(4 / 0.31)
    assert metrics.interactivity == pytest.approx(1000 / 20)  # 1000 / p50(TPOT in ms)
    assert metrics.good_requests == 1  # request 1's TTFT 0.2 s misses the 0.15 s SLO
    assert metrics.goodput == pytest.approx(1 / 0.31)


def test_tokens_of_one_stream_event_share_its_gap() -> None:
    # Events at 0.10 (1 token), 0.12 (2 tokens), 0.15 (1 token): the 0.02 s gap is 0.01 per token it brought,
    # never a 0 s gap between two tokens of one event; the gaps sum to E2E - TTFT.
    done = [completion(0, 0.0, [0.10, 0.12, 0.12, 0.15])]
    assert itls_of(done[0]) == pytest.approx([0.01, 0.01, 0.03])
    assert sum(itls_of(done[0])) == pytest.approx(e2e_of(done[0]) - ttft_of(done[0]))
    # Tokens that came with the first are part of the TTFT.
    assert itls_of(completion(1, 0.0, [0.1, 0.1, 0.2])) == pytest.approx([0.1])
    # All tokens in one event: no decode gap, so no ITL and no TPOT (not a TPOT of 0).
    together = completion(2, 0.0, [0.1, 0.1, 0.1])
    assert itls_of(together) == [] and tpot_of(together) is None
    latency = run_metrics([together]).latency
    assert "itl" not in latency and "tpot" not in latency and latency["e2e"][50].value == pytest.approx(0.1)


def test_interactivity_is_not_output_rate_per_user() -> None:
    # One user, a slow prefill: tokens stream at 100 tok/s, but output tok/s over the run is far lower.
    done = [completion(0, 0.0, [1.0 + 0.01 * i for i in range(11)])]
    metrics = run_metrics(done)
    assert metrics.interactivity == pytest.approx(100)
    assert metrics.output_tok_s == pytest.approx(11 / 1.1)


def test_minimum_counts_for_percentiles() -> None:
    assert (min_samples(0.5), min_samples(0.9), min_samples(0.99)) == (6, 29, 299)
    for q in (0.5, 0.9, 0.99):
        n = min_samples(q)
        assert 1 - q**n - (1 - q) ** n >= 0.95 > 1 - q ** (n - 1) - (1 - q) ** (n - 1)
    done = [completion(i, 0.0, [0.1 * (i + 1), 0.1 * (i + 1) + 0.01]) for i in range(6)]
    ttft = run_metrics(done).latency["ttft"]
    assert ttft[50].enough and not ttft[90].enough and not ttft[99].enough


def test_percentile_matches_numpy() -> None:
    import numpy as np

    values = [3.0, 1.0, 4.0, 1.5, 9.0, 2.6, 5.0]
    for p in (0, 10, 50, 90, 99, 100):
        assert percentile(values, p) == pytest.approx(float(np.percentile(values, p)))


def test_wrong_token_counts_and_failures_fail_the_run() -> None:
    short = Completion(id=3, prompt_tokens=4, requested_tokens=5, sent=0.0, token_times=[0.1, 0.2])
    failed = Completion(id=4, prompt_tokens=4, requested_tokens=5, sent=0.0, error="HTTPError: 500")
    with pytest.raises(RunFailed, match=r"request 3 produced 2 tokens, 5 requested.*request 4 failed"):
        check_completions([completion(0, 0.0, [0.1]), short, failed])


# -- Pareto -----------------------------------------------------------------------------------------------

POINTS = [
    OperatingPoint(concurrency=c, interactivity=x, throughput=y)
    for c, x, y in ((1, 100.0, 100.0), (2, 90.0, 170.0), (4, 70.0, 260.0), (8, 40.0, 300.0), (16, 30.0, 280.0))
]  # 16 is dominated by 8: slower for every user and less in total


def test_pareto_front_drops_dominated_points() -> None:
    front = pareto_front(POINTS)
    assert [p.concurrency for p in front] == [8, 4, 2, 1]
    assert [p.interactivity for p in front] == sorted(p.interactivity for p in front)


def test_throughput_at_fixed_interactivity_is_monotone_and_exact_at_points() -> None:
    front = pareto_front(POINTS)
    grid = [40 + 0.5 * i for i in range(121)]
    values = throughput_at(front, grid)
    assert all(v is not None for v in values)
    assert all(b <= a + 1e-9 for a, b in zip(values, values[1:]))  # no bump PCHIP would be blamed for
    assert throughput_at(front, [40.0, 70.0, 90.0, 100.0]) == pytest.approx([300, 260, 170, 100])
    assert throughput_at(front, [10.0]) == [300.0]  # slower users than any point: the best throughput
    assert throughput_at(front, [100.5]) == [None]  # faster than any configuration: not reached
    assert 170 < throughput_at(front, [80.0])[0] < 260


def test_interactivity_targets_lie_inside_the_front() -> None:
    front = pareto_front(POINTS)
    targets = interactivity_targets(front)
    assert targets == sorted(targets) and 40 < targets[0] and targets[-1] < 100
    assert targets[1] == pytest.approx(math.exp(math.log(40) + 0.4 * math.log(100 / 40)), rel=1e-2)


# -- engine -----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny() -> object:
    from pytest_gpuperf.models.registry import get_spec

    spec = dataclasses.replace(get_spec("tiny-llama"), max_seq_len=96)
    return spec.build(seed=0).eval()


@pytest.mark.parametrize("model_name", ["tiny-llama", "tiny-moe"])
def test_continuous_batching_shares_decode_steps_and_matches_sequential_generation(model_name: str) -> None:
    from pytest_gpuperf.inference.engine import LocalEngine, make_prompts, sequential_greedy
    from pytest_gpuperf.models.registry import get_spec

    model = dataclasses.replace(get_spec(model_name), max_seq_len=64).build(seed=3).eval()
    lengths = [5, 5, 9, 3, 7, 5, 11]
    news = [6, 3, 8, 1, 5, 12, 4]
    requests = [
        Request(id=i, prompt=make_prompts(count=1, length=n, vocab_size=256, seed=i)[0], max_new_tokens=m)
        for i, (n, m) in enumerate(zip(lengths, news))
    ]
    engine = LocalEngine(model, max_len=64)
    done = engine.generate(requests, concurrency=3)
    assert [c.id for c in done] == [r.id for r in requests]
    for request, result in zip(requests, done):
        assert result.error is None
        assert result.tokens == sequential_greedy(model, request.prompt, request.max_new_tokens)
        assert len(result.token_times) == request.max_new_tokens
        assert result.sent <= result.token_times[0] and result.token_times == sorted(result.token_times)
    trace = engine.trace
    # Each decode forward advances every active request: far fewer forwards than tokens decoded.
    decoded = sum(news) - len(news)
    assert sum(trace.decode_rows) == decoded
    assert max(trace.decode_rows) == 3 and trace.decode_steps < decoded
    assert sum(trace.prefill_rows) == len(requests) and trace.prefill_rows[0] == 2  # slots 0, 1: equal prompts


@pytest.mark.parametrize("model_name", ["tiny-llama", "tiny-moe"])
def test_keys_rounded_up_to_the_caches_multiple_change_no_token(
    model_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A GPU's cache attends over key lengths rounded up to 256 (KVCache.key_multiple), so a decode's attention
    # sees a few shapes instead of a new one every step (each cost ~70 ms on an H200). The mask hides the extra
    # keys: with rows at different positions (continuous batching, decodes crossing 256), no token may change.
    import functools

    import torch

    from pytest_gpuperf.inference.engine import LocalEngine, make_prompts, sequential_greedy
    from pytest_gpuperf.models.llama import KVCache
    from pytest_gpuperf.models.registry import get_spec

    max_len = 320
    model = dataclasses.replace(get_spec(model_name), max_seq_len=max_len).build(seed=3).eval()
    lengths = [250, 240, 252, 230, 251]
    news = [12, 20, 9, 30, 6]
    requests = [
        Request(id=i, prompt=make_prompts(count=1, length=n, vocab_size=256, seed=i)[0], max_new_tokens=m)
        for i, (n, m) in enumerate(zip(lengths, news))
    ]
    reference = [sequential_greedy(model, r.prompt, r.max_new_tokens) for r in requests]

    for_model, update = KVCache.for_model, KVCache.update
    attended: list[tuple[int, int, int]] = []  # (the forward's tokens, its end, keys handed to attention)

    def spy(
        self: KVCache, layer: int, k: torch.Tensor, v: torch.Tensor, positions: torch.Tensor, end: int
    ) -> tuple[torch.Tensor, torch.Tensor]:
        keys = update(self, layer, k, v, positions, end)
        if layer == 0:
            attended.append((positions.shape[1], end, keys[0].shape[1]))
        return keys

    monkeypatch.setattr(KVCache, "update", spy)
    for multiple in (1, 256):
        monkeypatch.setattr(KVCache, "for_model", functools.partial(for_model, key_multiple=multiple))
        attended.clear()
        done = LocalEngine(model, max_len=max_len).generate(requests, concurrency=3)
        assert [c.tokens for c in done] == reference, f"key_multiple {multiple}"
        onto_cache = [(end, keys) for tokens, end, keys in attended if end != tokens]
        assert {end for end, _ in onto_cache} >= {255, 256, 257}  # decodes cross the multiple
        fresh = [(end, keys) for tokens, end, keys in attended if end == tokens]
        assert fresh and all(keys == end for end, keys in fresh)  # prefills keep the exact causal path
        if multiple == 1:
            assert all(keys == end for end, keys in onto_cache)
        else:
            assert {keys for _, keys in onto_cache} == {256, max_len}
            assert all(keys >= end for end, keys in onto_cache)


def test_engine_refuses_a_request_longer_than_its_cache(tiny: object) -> None:
    from pytest_gpuperf.inference.engine import LocalEngine

    done = LocalEngine(tiny, max_len=16).generate(
        [Request(id=0, prompt=(1,) * 12, max_new_tokens=8), Request(id=1, prompt=(2,) * 4, max_new_tokens=4)],
        concurrency=2,
    )
    assert done[0].error is not None and "max_len 16" in done[0].error
    assert done[1].error is None and len(done[1].tokens) == 4
    with pytest.raises(RunFailed, match="request 0 failed"):
        check_completions(done)


# -- parity -----------------------------------------------------------------------------------------------


def test_parity_passes_unchanged_and_fails_a_small_perturbation(tiny: object) -> None:
    import torch

    from pytest_gpuperf.inference import parity
    from pytest_gpuperf.inference.engine import make_prompts, sequential_greedy

    prompts = make_prompts(count=3, length=16, vocab_size=256, seed=5)
    tokens = [sequential_greedy(tiny, p, 12) for p in prompts]
    golden = parity.make_golden(tiny, prompts=prompts, tokens=tokens, key="test")
    same = parity.compare_to_golden(tiny, golden, tokens, precision="fp32")
    assert same.ok and same.max_abs < 1e-5 and same.top1_agreement == 1.0 and same.greedy_match == 36
    import copy

    model = copy.deepcopy(tiny)  # the module-scoped model stays intact
    with torch.no_grad():  # 1% on the final norm's scale, so ~1% on every logit: beyond fp32's tolerance
        model.norm.weight.mul_(1.01)
    changed = parity.compare_to_golden(
        model, golden, [sequential_greedy(model, p, 12) for p in prompts], precision="fp32"
    )
    assert not changed.ok and any("teacher-forced logits differ" in p for p in changed.problems)
    # The same perturbation is within bf16's rounding: the tolerance depends on the precision.
    assert parity.compare_to_golden(model, golden, tokens, precision="bf16").ok


def test_a_flipped_greedy_token_fails_unless_it_is_a_near_tie(tiny: object) -> None:
    from pytest_gpuperf.inference import parity
    from pytest_gpuperf.inference.engine import make_prompts, sequential_greedy

    prompts = make_prompts(count=1, length=16, vocab_size=256, seed=8)
    tokens = [sequential_greedy(tiny, prompts[0], 6)]
    # The golden's stack took another token at position 2 than this one (whose engine agrees with its forward).
    flipped = [tokens[0][:2] + [(tokens[0][2] + 1) % 256] + tokens[0][3:]]
    golden = parity.make_golden(tiny, prompts=prompts, tokens=flipped, key="test")
    report = parity.compare_to_golden(tiny, golden, tokens, precision="fp32")
    assert not report.ok and "greedy token 2" in report.problems[0] and report.greedy_match == 2
    golden["topk"][0][2]["margin"] = 1e-4  # the golden itself was a near-tie there: a flip is legitimate
    assert parity.compare_to_golden(tiny, golden, tokens, precision="fp32").ok


# -- HTTP adapter -------------------------------------------------------------------------------------------


class _StreamingHandler(http.server.BaseHTTPRequestHandler):
    tokens_per_event = 1

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["prompt"][0] == 0:
            self.send_error(500, "boom")
            return
        assert body["ignore_eos"] and body["temperature"] == 0.0 and body["stream"]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for first in range(0, body["max_tokens"], self.tokens_per_event):
            ids = list(range(first, min(first + self.tokens_per_event, body["max_tokens"])))
            texts = [f"t{i}" for i in ids]
            chunk = {"choices": [{"text": "".join(texts), "logprobs": {"tokens": texts, "token_ids": ids}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
            self.wfile.flush()
            time.sleep(0.001)
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


class _PairedHandler(_StreamingHandler):
    """Streams two tokens per event, as a batching server (transformers serve under load) can."""

    tokens_per_event = 2


@pytest.fixture(params=[_StreamingHandler, _PairedHandler], ids=["token-per-event", "two-tokens-per-event"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from local_http.serve(request.param)


def test_openai_adapter_streams_token_times_from_a_local_server(server: str) -> None:
    engine = OpenAIEngine(server, model="tiny", timeout=10.0)
    requests = [Request(id=i, prompt=(i, 5, 6), max_new_tokens=4 + i) for i in range(4)]
    done = engine.generate(requests, concurrency=2)
    assert done[0].error is not None and "500" in done[0].error
    for request, result in zip(requests[1:], done[1:]):
        assert result.error is None and result.tokens == list(range(request.max_new_tokens))
        assert len(result.token_times) == request.max_new_tokens and result.token_times[0] >= result.sent
    metrics = run_metrics(done[1:])
    assert metrics.output_tokens == 5 + 6 + 7
    # Every latency is a positive time the verdict can take a ratio of, however the tokens were grouped.
    assert all(p.value > 0 for series in metrics.latency.values() for p in series.values())
    for result in done[1:]:
        assert sum(itls_of(result)) == pytest.approx(e2e_of(result) - ttft_of(result))


def test_bad_endpoint_option_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_inprocess("--gpuperf-inference-endpoint", "localhost:8000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Invalid value 'localhost:8000' from --gpuperf-inference-endpoint*"])


# -- end to end: verdicts -------------------------------------------------------------------------------------

WORKLOAD = (
    VIRTUAL_CLOCK
    + """
import dataclasses, os
import torch
from pytest_gpuperf.inference.engine import LocalEngine
from pytest_gpuperf.inference.sweep import record_sweep, run_sweep
from pytest_gpuperf.models.registry import get_spec

def test_decode(perf):
    torch.set_num_threads(1)
    clock = VirtualClock(float(os.environ.get("DECODE_STEP_S", "0.0005")), os.environ.get("CLOCK_SEED", "0"))
    model = dataclasses.replace(get_spec("tiny-llama"), max_seq_len=64).build(seed=0).eval()
    engine = LocalEngine(model, max_len=48, decode_hook=clock.decode_step, clock=clock)
    sweep = run_sweep(engine, isl=16, osl=24, concurrencies=(1, 2), runs=5, vocab_size=256, minimum=6,
                      per_client=3, watch=perf.watch)
    record_sweep(perf, sweep)
"""
)


def test_slower_decode_step_is_regressed_and_a_thin_p99_is_noisy(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_workload=WORKLOAD)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    # The engine's clock is injected (VirtualClock): the decode step takes 0.5 ms, then 0.8 ms (1.6x), whatever
    # this machine's load; the plugin's CPU defaults judge it.
    common = ["--gpuperf-device", "cpu"]
    saved = pytester.runpytest_inprocess(*common, "--gpuperf-save")
    saved.assert_outcomes(passed=1)
    monkeypatch.setenv("DECODE_STEP_S", "0.0008")
    monkeypatch.setenv("CLOCK_SEED", "1")
    result = pytester.runpytest_inprocess(*common, "--gpuperf-results", "results.json")
    result.assert_outcomes(failed=1)
    verdicts = {r["metric"]: r for r in json.loads((pytester.path / "results.json").read_text())["results"]}
    for name in ("c1.tpot_p50", "c2.itl_p50", "c1.output_tok_s", "c2.interactivity"):
        assert verdicts[name]["verdict"] == "REGRESSED", (name, verdicts[name]["comparison"])
    # Six requests per run cannot carry a p99: NOISY, though it is just as much slower.
    thin = verdicts["c1.tpot_p99"]
    assert thin["verdict"] == "NOISY" and "a p99 needs >= 299" in thin["comparison"]["reason"]
    assert thin["comparison"]["ratio"] == pytest.approx(0.5 / 0.8, abs=0.05)
    # 1.6x slower: no run's front reaches the baseline's interactivity point, so its throughput there is left
    # out, saying why, rather than judged against a point the fronts never reach
    assert not [m for m in verdicts if m.startswith("pareto.")]
    result.stdout.fnmatch_lines(
        ["*LeftOut: pareto.tok_s_per_device@* the front reaches * below the fixed interactivity*"]
    )
    result.stdout.fnmatch_lines(["*c1.tpot_p50 REGRESSED*"])


def test_prefill_forwards_respect_the_token_cap(tiny: object) -> None:
    from pytest_gpuperf.inference.engine import LocalEngine

    engine = LocalEngine(tiny, max_len=32, max_prefill_tokens=20)
    done = engine.generate([Request(id=i, prompt=(i + 1,) * 8, max_new_tokens=3) for i in range(5)], concurrency=5)
    assert all(c.error is None and len(c.tokens) == 3 for c in done)
    assert engine.trace.prefill_rows == [2, 2, 1]  # 2 x 8 tokens fit under 20, 3 x 8 do not


def test_prefill_projects_only_the_last_position_to_the_vocabulary(tiny: object) -> None:
    # Logits of every prompt position would double a long prefill's work on a 128k-vocabulary model (and
    # inflate TTFT), while the first token needs the last position's only.
    from pytest_gpuperf.inference.engine import LocalEngine

    rows: list[int] = []
    handle = tiny.output.register_forward_hook(lambda module, args, out: rows.append(args[0].shape[1]))
    try:
        done = LocalEngine(tiny, max_len=32).generate(
            [Request(id=i, prompt=(i + 1,) * 8, max_new_tokens=3) for i in range(3)], concurrency=3
        )
    finally:
        handle.remove()
    assert all(c.error is None for c in done)
    assert rows and set(rows) == {1}  # one prefill forward and two decode forwards, one position each


def test_parity_fails_a_golden_recorded_from_a_decode_that_disagrees_with_the_forward(tiny: object) -> None:
    # A first run records its golden from the engine's own tokens, so comparing the run with that golden alone
    # proves nothing: a broken KV-cached decode on a new device must still fail against a plain forward.
    from pytest_gpuperf.inference import parity
    from pytest_gpuperf.inference.engine import make_prompts, sequential_greedy

    prompts = make_prompts(count=2, length=16, vocab_size=256, seed=9)
    right = [sequential_greedy(tiny, p, 8) for p in prompts]
    wrong = [right[0], right[1][:3] + [(right[1][3] + 1) % 256] + right[1][4:]]
    assert parity.compare_to_golden(
        tiny, parity.make_golden(tiny, prompts=prompts, tokens=right, key="t"), right, precision="fp32"
    ).ok
    recorded_wrong = parity.make_golden(tiny, prompts=prompts, tokens=wrong, key="t")
    report = parity.compare_to_golden(tiny, recorded_wrong, wrong, precision="fp32")
    assert not report.ok and len(report.problems) == 1
    assert "prompt 1: the engine's greedy token 3" in report.problems[0] and "disagrees" in report.problems[0]
