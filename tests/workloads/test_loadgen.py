"""The load generator: arrival schedules, length distributions, latency from the scheduled send time
(coordinated-omission-correct), the open-loop dispatcher against a local HTTP server, a lagging client judged
NOISY, failed requests failing the run with their count, and the load options' errors."""

from __future__ import annotations

import dataclasses
import http.server
import json
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from local_http import serve
from virtual_clock import VIRTUAL_CLOCK

from pytest_gpuperf.inference.arrivals import Arrivals, coefficient_of_variation, schedule
from pytest_gpuperf.inference.lengths import Lengths, load
from pytest_gpuperf.inference.metrics import RunFailed, e2e_of, run_metrics, ttft_of
from pytest_gpuperf.inference.openai import OpenAIEngine
from pytest_gpuperf.inference.requests import Completion, Request
from pytest_gpuperf.inference.sweep import CLIENT_LAG_FRACTION, SweepResult, lag_reason, run_rate_sweep

# -- arrival schedules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("cv", [0.5, 1.0, 2.0])
def test_schedule_has_the_asked_rate_and_burstiness(cv: float) -> None:
    plan = Arrivals(rate=20.0, burstiness=cv, count=20_000, seed=7)
    sched = schedule(plan)
    gaps = np.diff(sched.offsets)
    assert len(sched) == 20_000 and sched.offsets[0] == 0.0 and np.all(gaps >= 0)
    # 20k gamma gaps: the sample mean is within ~1.5% (4 se at CV 2) and the CV within a few percent.
    assert 1 / gaps.mean() == pytest.approx(20.0, rel=0.06 * cv / 2 + 0.01)
    assert coefficient_of_variation(gaps) == pytest.approx(cv, rel=0.05)
    assert plan.shape == pytest.approx(1 / cv**2)


def test_schedule_is_seeded_and_bounded_by_count_or_duration() -> None:
    a = schedule(Arrivals(rate=5.0, count=50, seed=3))
    assert a == schedule(Arrivals(rate=5.0, count=50, seed=3))
    assert a != schedule(Arrivals(rate=5.0, count=50, seed=4))
    timed = schedule(Arrivals(rate=50.0, duration_s=30.0, seed=1))
    assert timed.span_s < 30.0 and len(timed) == pytest.approx(1500, rel=0.1)  # Poisson count: sd ~ 39
    with pytest.raises(ValueError, match="exactly one of count and duration_s"):
        Arrivals(rate=1.0)
    with pytest.raises(ValueError, match="exactly one of count and duration_s"):
        Arrivals(rate=1.0, count=3, duration_s=2.0)
    with pytest.raises(ValueError, match="positive number of requests/s"):
        Arrivals(rate=0.0, count=3)


def test_warmup_and_cooldown_requests_are_scheduled_but_not_measured() -> None:
    sched = schedule(Arrivals(rate=10.0, duration_s=20.0, warmup_s=2.0, cooldown_s=3.0, seed=0))
    offsets, measured = np.array(sched.offsets), np.array(sched.measured)
    assert np.all(measured == ((offsets >= 2.0) & (offsets <= sched.span_s - 3.0)))
    assert 0 < measured.sum() < len(sched) and not measured[0] and not measured[-1]
    with pytest.raises(ValueError, match="leave no measured request"):
        schedule(Arrivals(rate=10.0, count=5, warmup_s=10.0))


# -- lengths --------------------------------------------------------------------------------------------------


def test_sharegpt_lengths_are_seeded_filtered_and_shaped_like_the_source() -> None:
    dist = load("sharegpt")
    pairs = Lengths(kind="sharegpt", seed=11).draw(5000)
    assert pairs == Lengths(kind="sharegpt", seed=11).draw(5000)
    isl, osl = np.array(pairs).T
    assert isl.min() >= dist.min_input and osl.min() >= dist.min_output and isl.max() <= dist.max_input
    assert (isl + osl).max() <= dist.max_total
    # The log-normals' means are the published ones; vLLM's filter trims the tails, which lowers them a little.
    assert 0.8 * dist.input.mean < isl.mean() < dist.input.mean
    assert 0.8 * dist.output.mean < osl.mean() < dist.output.mean
    assert np.median(osl) < osl.mean()  # right-skewed, as chat outputs are
    capped = np.array(Lengths(kind="sharegpt", seed=11, max_total=256).draw(2000))
    assert capped.sum(axis=1).max() <= 256 and len(set(capped[:, 0].tolist())) > 50  # redrawn, not piled at the cap
    described = Lengths(kind="sharegpt", seed=11, max_total=256).describe()
    assert described["seed"] == 11 and described["filter"][-1] == 256 and described["kind"] == "sharegpt"
    assert Lengths(isl=8192, osl=1024).draw(3) == [(8192, 1024)] * 3
    with pytest.raises(ValueError, match="no room"):
        Lengths(kind="sharegpt", max_total=6).draw(1)


# -- latency from the scheduled time, in-process engine with a virtual clock ----------------------------------


class VirtualClock:
    """Time passes only as the test says: each decode forward costs ``step_s``, a sleep what it asks."""

    def __init__(self, step_s: float) -> None:
        self.now, self.step_s, self.slept = 100.0, step_s, 0.0

    def __call__(self) -> float:
        return self.now

    def decode_step(self) -> None:
        self.now += self.step_s

    def sleep(self, seconds: float) -> None:
        self.slept += seconds
        self.now += seconds


@pytest.fixture(scope="module")
def tiny() -> Any:
    from pytest_gpuperf.models.registry import get_spec

    return dataclasses.replace(get_spec("tiny-llama"), max_seq_len=64).build(seed=0).eval()


def test_latency_is_measured_from_the_scheduled_time_and_holds_the_queueing(tiny: Any) -> None:
    from pytest_gpuperf.inference.engine import LocalEngine

    clock = VirtualClock(step_s=0.01)
    engine = LocalEngine(tiny, max_len=32, decode_hook=clock.decode_step, clock=clock, sleep=clock.sleep)
    requests = [Request(id=i, prompt=(i + 1,) * 4, max_new_tokens=5) for i in range(4)]
    # All four due at once and one slot: each waits for those before it (4 decode steps of 10 ms each).
    done = engine.generate(requests, concurrency=1, schedule=[0.0, 0.0, 0.0, 0.0])
    assert all(c.error is None and c.scheduled == 100.0 for c in done)
    for k, c in enumerate(done):
        assert c.send_lag == pytest.approx(0.04 * k)  # queued behind k requests of 4 decode steps
        assert ttft_of(c) == pytest.approx(0.04 * k)  # prefill costs no virtual time
        assert e2e_of(c) == pytest.approx(0.04 * (k + 1))
        assert c.token_times[-1] - c.sent == pytest.approx(0.04)  # what a sent-time clock would have said
        assert c.client_lag == 0.0  # the wait was the server's (its one slot), not the client's
    metrics = run_metrics(done)
    assert metrics.latency["e2e"][50].value == pytest.approx(0.1)  # not 0.04: coordinated omission avoided


def test_a_request_is_never_admitted_before_it_arrives_and_the_idle_engine_sleeps(tiny: Any) -> None:
    from pytest_gpuperf.inference.engine import LocalEngine

    clock = VirtualClock(step_s=0.001)
    engine = LocalEngine(tiny, max_len=32, decode_hook=clock.decode_step, clock=clock, sleep=clock.sleep)
    requests = [Request(id=i, prompt=(i + 1,) * 4, max_new_tokens=3) for i in range(3)]
    done = engine.generate(requests, concurrency=4, schedule=[0.0, 0.0005, 1.0])
    assert [c.scheduled for c in done] == pytest.approx([100.0, 100.0005, 101.0])
    assert all(c.sent >= c.scheduled for c in done if c.scheduled is not None)
    assert done[1].sent == pytest.approx(100.001)  # arrived mid-step: admitted at the next iteration boundary
    assert done[2].sent == pytest.approx(101.0) and clock.slept == pytest.approx(1.0 - 0.003)
    with pytest.raises(ValueError, match="nondecreasing"):
        engine.generate(requests, concurrency=1, schedule=[0.0, 1.0, 0.5])
    with pytest.raises(ValueError, match="2 send offsets for 3 requests"):
        engine.generate(requests, concurrency=1, schedule=[0.0, 1.0])


# -- the open-loop dispatcher against a local HTTP server ---------------------------------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    delay_s = 0.0
    fail_first_token = -1

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["prompt"][0] == self.fail_first_token:
            self.send_error(500, "boom")
            return
        time.sleep(self.delay_s)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i in range(body["max_tokens"]):
            chunk = {"choices": [{"text": f"t{i}", "logprobs": {"tokens": [f"t{i}"], "token_ids": [i]}}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def fast_server() -> Iterator[str]:
    yield from serve(type("Fast", (_Handler,), {"fail_first_token": 0}))


@pytest.fixture
def slow_server() -> Iterator[str]:
    yield from serve(type("Slow", (_Handler,), {"delay_s": 0.2}))


def test_open_loop_run_against_a_local_server(fast_server: str) -> None:
    engine = OpenAIEngine(fast_server, model="stub", timeout=10.0)
    sched = schedule(Arrivals(rate=100.0, count=30, seed=2))
    requests = [Request(id=i, prompt=(i + 1, 5), max_new_tokens=4) for i in range(30)]
    done = engine.generate(requests, concurrency=8, schedule=sched.offsets)
    assert [c.id for c in done] == list(range(30))
    assert all(c.error is None and c.tokens == [0, 1, 2, 3] for c in done)
    first = done[0].scheduled
    assert first is not None
    for c, offset in zip(done, sched.offsets):
        assert c.scheduled is not None and c.ready is not None
        assert c.scheduled - first == pytest.approx(offset, abs=1e-9)  # due times are the schedule's, exactly
        assert c.ready >= c.scheduled and c.sent >= c.scheduled and c.token_times[0] >= c.sent
    assert run_metrics(done).requests == 30


def test_queueing_under_the_cap_counts_in_latency_but_not_as_client_lag(slow_server: str) -> None:
    # 200 ms per request, one slot, four requests due at once: the k-th waits k x 200 ms (a large effect).
    engine = OpenAIEngine(slow_server, model="stub", timeout=10.0)
    requests = [Request(id=i, prompt=(i + 1,), max_new_tokens=2) for i in range(4)]
    done = engine.generate(requests, concurrency=1, schedule=[0.0] * 4)
    for k, c in enumerate(done):
        assert c.error is None
        assert ttft_of(c) >= 0.2 * (k + 1) - 0.01  # the server's 200 ms, after k requests' worth of queueing
        assert c.send_lag >= 0.2 * k - 0.01
        assert c.client_lag < 0.1  # the cap's wait is by design, not the dispatcher falling behind


class _Batched(_Handler):
    """Answers on a 100 ms clock, every request in flight together (a batching engine's shared decode steps)."""

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        tick = 0.1
        time.sleep(tick - time.monotonic() % tick + tick / 2)  # the next tick at least 50 ms away
        super().do_POST()


@pytest.fixture
def batched_server() -> Iterator[str]:
    yield from serve(_Batched)


def test_requests_due_while_the_dispatcher_waits_for_a_slot_are_not_client_lag(batched_server: str) -> None:
    # 16 requests due at once on 4 slots of a server that frees its slots 4 at a time: after each wait for a slot
    # the next requests find the slots freed with it. They were due long before, but could not be sent before
    # the one the dispatcher waited for (sends keep the schedule's order): their wait is the cap's. Counted as
    # the client's, the saturated rates of a served sweep read "the load generator fell behind" (~1-3 s p99).
    engine = OpenAIEngine(batched_server, model="stub", timeout=10.0)
    requests = [Request(id=i, prompt=(i + 1,), max_new_tokens=2) for i in range(16)]
    done = engine.generate(requests, concurrency=4, schedule=[0.0] * 16)
    assert all(c.error is None for c in done)
    assert max(c.send_lag for c in done) >= 0.25  # the last wave waited 3 ticks or more (a large effect) ...
    assert max(c.client_lag for c in done) < 0.05, [round(c.client_lag, 3) for c in done]  # ... for the cap


def test_failed_requests_fail_the_run_with_their_count(fast_server: str) -> None:
    # Prompts start with their id, so the server fails request 0 (and the warm-up's request 0).
    engine = OpenAIEngine(fast_server, model="stub", timeout=10.0)
    with pytest.raises(RunFailed) as failure:
        run_rate_sweep(
            engine,
            rates=[200.0],
            lengths=Lengths(isl=3, osl=2),
            cap=4,
            runs=1,
            vocab_size=1,  # every prompt token is 0: every request fails, none is dropped silently
            count=10,
        )
    message = str(failure.value)
    assert "10 of 10 request(s) wrong at rate200 (10 failed)" in message
    assert "not left out of the latency percentiles" in message


# -- a lagging client is NOISY ---------------------------------------------------------------------------------


def test_lag_reason_compares_the_p99_client_lag_with_the_median_ttft() -> None:
    def run(ttft: float) -> object:
        done = [
            Completion(id=i, prompt_tokens=1, requested_tokens=2, sent=0.0, token_times=[ttft, ttft + 0.01])
            for i in range(6)
        ]
        return run_metrics(done)

    sweep = SweepResult(isl=1, osl=2, axis="rate", runs={2.0: [run(0.1)] * 3})  # type: ignore[list-item]
    sweep.client_lag_p99[2.0] = [0.001, 0.002, 0.1 * CLIENT_LAG_FRACTION * 0.9]
    assert lag_reason(sweep, 2.0) is None
    sweep.client_lag_p99[2.0] = [0.001, 0.1 * CLIENT_LAG_FRACTION * 1.5, 0.002]
    reason = lag_reason(sweep, 2.0)
    assert reason is not None and "fell behind its schedule" in reason and "rate2" in reason


LAGGING = """
import os
from pytest_gpuperf.inference.lengths import Lengths
from pytest_gpuperf.inference.requests import Completion
from pytest_gpuperf.inference.sweep import record_sweep, run_rate_sweep

class KnownEngine:
    # Known timestamps, no clock: each request's TTFT is 20 ms from its scheduled time, then 2 ms per token;
    # the client sends it LAG_S late (its dispatcher fell behind), so the figures cannot be trusted.
    name, devices = "known", 1
    def generate(self, requests, *, concurrency, schedule=None):
        lag = float(os.environ["LAG_S"])
        out = []
        for request, offset in zip(requests, schedule or [0.0] * len(requests)):
            due = 1000.0 + offset
            first = due + 0.02 + 0.0005 * (request.id % 3)
            out.append(Completion(
                id=request.id, prompt_tokens=len(request.prompt), requested_tokens=request.max_new_tokens,
                sent=due + lag, scheduled=due, ready=due,
                token_times=[first + 0.002 * i for i in range(request.max_new_tokens)],
                tokens=list(range(request.max_new_tokens))))
        return out

def test_rates(perf):
    sweep = run_rate_sweep(KnownEngine(), rates=[10.0, 20.0], lengths=Lengths(isl=4, osl=5), cap=4, runs=3,
                           vocab_size=16, count=40)
    record_sweep(perf, sweep)
"""


def test_a_client_that_falls_behind_its_schedule_is_noisy(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_lagging=LAGGING)
    common = ["-p", "no:cacheprovider", "--gpuperf-device", "cpu", "--gpuperf-machine-check", "off"]
    monkeypatch.setenv("LAG_S", "0.0")
    pytester.runpytest_inprocess(*common, "--gpuperf-save").assert_outcomes(passed=1)
    pytester.runpytest_inprocess(*common, "--gpuperf-results", "on_time.json").assert_outcomes(passed=1)
    on_time = {r["metric"]: r for r in json.loads((pytester.path / "on_time.json").read_text())["results"]}
    assert on_time["rate10.ttft_p50"]["verdict"] == "PASS"
    monkeypatch.setenv("LAG_S", "0.005")  # 5 ms late against a 20 ms TTFT: 25%, over the 5% bound
    pytester.runpytest_inprocess(*common, "--gpuperf-results", "late.json").assert_outcomes(passed=1)
    late = {r["metric"]: r for r in json.loads((pytester.path / "late.json").read_text())["results"]}
    for name in ("rate10.ttft_p50", "rate20.output_tok_s", "rate20.interactivity"):
        assert late[name]["verdict"] == "NOISY", (name, late[name]["comparison"])
        assert "fell behind its schedule" in late[name]["comparison"]["reason"]
    assert late["rate10.ttft_p50"]["context"]["client_lag_p99_s"] == pytest.approx(0.005)


# -- options ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--gpuperf-slo", "ttft=abc,tpot=50"], "*Invalid value 'ttft=abc,tpot=50' from --gpuperf-slo: ttft limit*"),
        (["--gpuperf-slo", "ttft=200"], "*Invalid value 'ttft=200' from --gpuperf-slo: expected both limits*"),
        (["--gpuperf-slo", "ttft=200,e2e=5"], "*from --gpuperf-slo: expected ttft=MS,tpot=MS*"),
        (["--gpuperf-request-rate", "0"], "*Invalid value '0' from --gpuperf-request-rate: expected positive*"),
        (["--gpuperf-request-rate", "1,x"], "*Invalid value '1,x' from --gpuperf-request-rate*"),
        (["--gpuperf-burstiness", "-1"], "*Invalid value '-1' from --gpuperf-burstiness*"),
        (["--gpuperf-lengths", "alpaca"], "*Invalid value 'alpaca' from --gpuperf-lengths: expected one of fixed*"),
        (["--gpuperf-interactivity", "0"], "*Invalid value '0' from --gpuperf-interactivity*"),
        (
            ["--gpuperf-load-requests", "10", "--gpuperf-load-duration", "5"],
            "*--gpuperf-load-requests and --gpuperf-load-duration both bound the open-loop runs: give one*",
        ),
    ],
)
def test_bad_load_options_are_one_line_usage_errors(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    pytester.makepyfile("def test_x(): pass\n")
    result = pytester.runpytest_inprocess(*args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "Traceback" not in result.stderr.str()


def test_load_options_reach_the_settings(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_x(gpuperf_inference):
            s = gpuperf_inference
            assert s.request_rates == (1.0, 4.0) and s.burstiness == 2.0 and s.lengths == "sharegpt"
            assert (s.slo.ttft_s, s.slo.tpot_s) == (0.2, 0.05) and s.interactivity == (32.0,)
            assert s.load_duration_s == 30.0 and s.max_concurrency == 16
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "--gpuperf-request-rate", "4,1", "--gpuperf-burstiness", "2",
        "--gpuperf-lengths", "sharegpt", "--gpuperf-slo", "ttft=200,tpot=50", "--gpuperf-interactivity", "32",
        "--gpuperf-load-duration", "30s", "--gpuperf-max-concurrency", "16",
    )  # fmt: skip
    result.assert_outcomes(passed=1)


OPEN_LOOP_WORKLOAD = (
    VIRTUAL_CLOCK
    + """
import dataclasses, os
import torch
from pytest_gpuperf.inference.engine import LocalEngine
from pytest_gpuperf.inference.lengths import Lengths
from pytest_gpuperf.inference.sweep import record_sweep, run_rate_sweep
from pytest_gpuperf.models.registry import get_spec

def test_rates(perf):
    torch.set_num_threads(1)
    clock = VirtualClock(float(os.environ.get("DECODE_STEP_S", "0.0005")), os.environ.get("CLOCK_SEED", "0"))
    model = dataclasses.replace(get_spec("tiny-llama"), max_seq_len=64).build(seed=0).eval()
    engine = LocalEngine(model, max_len=32, decode_hook=clock.decode_step, clock=clock, sleep=clock.sleep)
    sweep = run_rate_sweep(engine, rates=[50.0, 200.0], lengths=Lengths(isl=8, osl=12), cap=4, runs=5,
                           vocab_size=256, count=16, edge_gaps=2)
    record_sweep(perf, sweep)
"""
)


def test_an_open_loop_sweep_catches_a_slower_decode_step(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_open=OPEN_LOOP_WORKLOAD)
    common = ["-p", "no:cacheprovider", "--gpuperf-device", "cpu"]
    pytester.runpytest_inprocess(*common, "--gpuperf-save").assert_outcomes(passed=1)
    monkeypatch.setenv("DECODE_STEP_S", "0.0008")  # 1.6x
    monkeypatch.setenv("CLOCK_SEED", "1")
    result = pytester.runpytest_inprocess(*common, "--gpuperf-results", "results.json")
    result.assert_outcomes(failed=1)
    verdicts = {r["metric"]: r for r in json.loads((pytester.path / "results.json").read_text())["results"]}
    for name in ("rate50.tpot_p50", "rate200.e2e_p50", "rate200.itl_p50", "rate50.interactivity"):
        assert verdicts[name]["verdict"] == "REGRESSED", (name, verdicts[name]["comparison"])
    context = verdicts["rate50.tpot_p50"]["context"]
    assert context["arrivals"]["process"] == "poisson" and context["lengths"] == {"kind": "fixed", "isl": 8, "osl": 12}
    assert context["concurrency_cap"] == 4 and context["client_lag_p99_s"] == 0.0


class _Recorder:
    """What record_sweep needs of ``perf``: it keeps the names it was given."""

    def __init__(self) -> None:
        self.metrics: dict[str, dict[str, object]] = {}

    def record(self, name: str, samples: list[float], **kw: object) -> None:
        self.metrics[name] = {"samples": samples, **kw}

    def record_curve(self, name: str, steps: list[int], values: list[float]) -> None:
        self.metrics[name] = {"steps": steps, "values": values}

    def baseline_curves(self, name: str) -> list[object]:
        return []


def test_a_chosen_interactivity_point_is_recorded_or_left_out_naming_the_short_front() -> None:
    from pytest_gpuperf.inference.sweep import record_sweep

    def run(tpot: float, tokens: int) -> object:
        done = [
            Completion(
                id=i,
                prompt_tokens=1,
                requested_tokens=tokens,
                sent=0.0,
                token_times=[0.01 + tpot * k for k in range(tokens)],
            )
            for i in range(6)
        ]
        return run_metrics(done)

    # Two rates, three runs. Runs 1-2: rate 1 serves 400 tok/s/user (TPOT 2.5 ms) and beats rate 4 (200) on
    # both axes; run 3: rate 1 drops to 1 / 6.6 ms = 152, so that run's front reaches 200 at most.
    runs = {1.0: [run(0.0025, 9), run(0.0025, 9), run(0.0066, 9)], 4.0: [run(0.005, 9)] * 3}
    sweep = SweepResult(isl=1, osl=9, axis="rate", runs=runs)  # type: ignore[arg-type]
    perf = _Recorder()
    with pytest.warns(UserWarning, match=r"a run's front reaches 200 tok/s/user at most, below 300"):
        problems = record_sweep(perf, sweep, targets=[300.0, 100.0])
    assert len(problems) == 1 and "pareto.tok_s_per_device@100_tok_s_user" in perf.metrics
    assert perf.metrics["pareto.interactivity"]["steps"] == [1000, 4000]  # rates in milli-requests/s
    assert "rate1.ttft_p50" in perf.metrics and "rate4.interactivity" in perf.metrics


def test_a_run_without_decode_gaps_leaves_its_latencies_out_by_name() -> None:
    from pytest_gpuperf.inference.sweep import record_sweep

    def run(times: list[float]) -> object:
        done = [
            Completion(id=i, prompt_tokens=1, requested_tokens=len(times), sent=0.0, token_times=list(times))
            for i in range(6)
        ]
        return run_metrics(done)

    # Run 2 got every token in its first stream event: it has no TPOT or ITL, so neither is recorded from two
    # runs of three, and the rate's interactivity (1 / TPOT) goes with them; TTFT, E2E and the rates stay.
    streamed, together = run([0.01, 0.02, 0.03]), run([0.03, 0.03, 0.03])
    sweep = SweepResult(isl=1, osl=3, axis="rate", runs={1.0: [streamed, together, streamed]})  # type: ignore[arg-type]
    perf = _Recorder()
    with pytest.warns(UserWarning, match=r"left out: 1 of 3 run\(s\) had no sample of it \(every request"):
        problems = record_sweep(perf, sweep)
    assert [p.split(" left out")[0] for p in problems] == ["rate1.tpot", "rate1.itl"]
    assert "rate1.ttft_p50" in perf.metrics and "rate1.output_tok_s" in perf.metrics
    assert not any(name.startswith(("rate1.tpot", "rate1.itl", "rate1.interactivity")) for name in perf.metrics)
