"""The throttle rule end to end: telemetry sampled around measurements, stored with baselines, and a measurement
taken at lower clocks or while throttling reported NOISY, never REGRESSED."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest
from session_settings import cpu_settings, this_machine

from pytest_gpuperf.core.record.perf import Perf
from pytest_gpuperf.core.session.session import GpuperfSession
from pytest_gpuperf.core.store.baselines import MetricRun, NewMetric
from pytest_gpuperf.core.verdict.vocabulary import Verdict
from pytest_gpuperf.machine.telemetry import TelemetrySample, TelemetryTrace, TelemetryUnavailable

RECORDED_NOW = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
"""The baselines here were recorded minutes before they are judged: one sitting (core/stats/sittings.py)."""

BASELINE = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2, 99.8, 100.1, 100.3, 99.7]
WORSE = [value * 0.8 for value in BASELINE]  # 20% fewer TFLOP/s: REGRESSED on equal terms


def clock_trace(sm_mhz: list[float], *, mask: int = 0) -> TelemetryTrace:
    """A synthetic trace: one sample per SM clock reading, memory clock steady, the given throttle mask."""
    return TelemetryTrace(
        device_name="Synthetic GPU",
        backend="nvml",
        samples=tuple(
            TelemetrySample(
                t_s=0.05 * i,
                sm_clock_mhz=mhz,
                mem_clock_mhz=2619.0,
                power_w=600.0,
                temperature_c=60.0,
                throttle_mask=mask,
                energy_mj=1000.0 * i,
            )
            for i, mhz in enumerate(sm_mhz)
        ),
    )


def make_session(tmp_path: Path) -> GpuperfSession:
    settings = cpu_settings(tmp_path)
    session = GpuperfSession(settings)
    stack = session.fingerprint.stack
    full_clock = clock_trace([1980.0, 1980.0, 1965.0, 1980.0]).summary()
    session.store.save(
        [
            NewMetric(
                test="m.py::t",
                name="gemm",
                unit="TFLOP/s",
                higher_is_better=True,
                run=MetricRun(
                    samples=samples,
                    stack=stack,
                    date=RECORDED_NOW,
                    summary={},
                    context={"telemetry": full_clock.to_dict()} | this_machine(),
                ),
            )
            for samples in (BASELINE, [v * 1.002 for v in BASELINE], [v * 0.998 for v in BASELINE])
        ],
        [],
        keep_runs=5,
    )
    return session


def judge_one(session: GpuperfSession, samples: list[float], trace: TelemetryTrace | None):
    perf = session.new_perf("m.py::t")
    context = {"telemetry": trace.summary().to_dict()} if trace is not None else {}
    perf.record("gemm", samples, unit="TFLOP/s", higher_is_better=True, context=context)
    [result] = session.judge(perf)
    return result


@pytest.mark.parametrize(
    ("trace", "reason"),
    [
        (clock_trace([1500.0, 1490.0, 1510.0, 1500.0]), "SM clock 1500 MHz < 90% of baseline 1980 MHz"),
        (clock_trace([1980.0, 1700.0, 1650.0, 1700.0], mask=0x4), "throttled during the measurement (sw_power_cap)"),
        (clock_trace([1980.0] * 4, mask=0x40 | 0x1), "throttled during the measurement (hw_thermal)"),
    ],
)
def test_low_clock_or_throttled_run_is_noisy_not_regressed(tmp_path: Path, trace: TelemetryTrace, reason: str) -> None:
    session = make_session(tmp_path)
    result = judge_one(session, WORSE, trace)
    assert result.verdict is Verdict.NOISY
    assert reason in result.comparison.reason
    assert result.comparison.ratio == pytest.approx(0.8, rel=0.01)  # the figures are kept for the report
    assert result.context["clock_check"]["comparable"] is False
    assert reason in result.context["clock_check"]["detail"]


def test_same_drop_at_baseline_clocks_is_regressed(tmp_path: Path) -> None:
    session = make_session(tmp_path)
    result = judge_one(session, WORSE, clock_trace([1980.0, 1975.0, 1980.0]))
    assert result.verdict is Verdict.REGRESSED
    assert result.context["clock_check"]["comparable"] is True
    assert judge_one(make_session(tmp_path / "again"), WORSE, None).verdict is Verdict.REGRESSED  # no telemetry


def test_clock_summary_is_saved_with_the_run(tmp_path: Path) -> None:
    session = make_session(tmp_path)
    judge_one(session, BASELINE, clock_trace([1980.0, 1980.0]))
    [path] = session.save_baselines()
    runs = json.loads(path.read_text())["tests"]["t"]["metrics"]["gemm"]["runs"]
    assert runs[-1]["context"]["telemetry"]["sm_clock_mhz_median"] == 1980.0
    assert "clock_check" not in runs[-1]["context"]  # the verdict's note is not part of the measurement


class ScriptedReader:
    """A device whose throttle mask follows a script, one entry per measurement round."""

    device_name = "Scripted GPU"
    backend = "nvml"
    unsupported = ()

    def __init__(self, masks: list[int]) -> None:
        self.masks = masks
        self.round = 0

    def read(self) -> dict[str, float | int | None]:
        return {
            "sm_clock_mhz": 1980.0,
            "mem_clock_mhz": 2619.0,
            "power_w": 650.0,
            "temperature_c": 70.0,
            "throttle_mask": self.masks[min(self.round, len(self.masks) - 1)],
            "energy_mj": 0.0,
        }

    def close(self) -> None:
        pass


def test_a_throttled_round_is_measured_again_and_the_clean_round_kept() -> None:
    reader = ScriptedReader([0x20, 0x0])
    settings = cpu_settings(Path("."), warmup=0, repeats=5, remeasure=2)
    perf = Perf(
        nodeid="m.py::t",
        device="cuda",
        settings=settings,
        noise_limit=0.05,
        telemetry=reader,
    )
    calls = []

    def counted_timer(fn, repeats: int) -> list[float]:
        calls.append(repeats)
        samples = [0.010, 0.0101, 0.0099, 0.010, 0.0100]
        reader.round = len(calls)  # the exit sample of round n reads script entry n
        return samples

    perf.measure("t", lambda: None, timer=counted_timer, work=2.0, unit="TFLOP/s")
    [metric] = perf.metrics
    assert metric.rounds == 2
    assert metric.higher_is_better and metric.samples[0] == pytest.approx(200.0)
    assert metric.context["telemetry"]["throttled"] is False


def test_without_a_reader_nothing_is_sampled_or_invented() -> None:
    perf = Perf(
        nodeid="m.py::t",
        device="cpu",
        settings=cpu_settings(Path("."), warmup=0, repeats=5, remeasure=0),
        noise_limit=0.5,
    )
    with perf.watch() as window:
        pass
    assert window.summary is None and window.context == {}


# -- through pytest, with the telemetry hook replaced by a fake device --

FAKE_DEVICE = """
import os
from pytest_gpuperf.machine.telemetry import TelemetryUnavailable

class FakeReader:
    device_name = "Fake GPU"
    backend = "nvml"
    unsupported = ()
    def read(self):
        return {"sm_clock_mhz": float(os.environ["FAKE_SM_MHZ"]), "mem_clock_mhz": 2619.0, "power_w": 600.0,
                "temperature_c": 65.0, "throttle_mask": int(os.environ.get("FAKE_MASK", "0"), 0),
                "energy_mj": 0.0}
    def close(self):
        pass

def pytest_gpuperf_telemetry_reader(config, device):
    if "FAKE_UNAVAILABLE" in os.environ:
        return TelemetryUnavailable(reason="fake library missing")
    return FakeReader()
"""

WORKLOAD = """
import os
import pytest


@pytest.mark.perf
def test_gemm(perf):
    scale = float(os.environ.get("FAKE_SCALE", "1.0"))
    with perf.watch() as window:
        samples = [scale * (100.0 + 0.1 * (i % 5)) for i in range(12)]
    perf.record("tflops", samples, unit="TFLOP/s", higher_is_better=True, context=window.context)

@pytest.mark.perf
def test_timed(perf):
    perf.measure("call_time", lambda: sum(range(200)), repeats=5, warmup=0)
"""


def test_throttle_rule_through_the_hook(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(FAKE_DEVICE)
    pytester.makepyfile(test_gemm=WORKLOAD)
    monkeypatch.setenv("FAKE_SM_MHZ", "1980")
    for _ in range(3):  # three baseline runs at full clock
        pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-save", "--gpuperf-device", "cpu").assert_outcomes(
            passed=2
        )
    [path] = sorted((pytester.path / "baselines").glob("*/*.json"))
    stored = json.loads(path.read_text())["tests"]["test_gemm"]["metrics"]["tflops"]["runs"][0]
    assert stored["context"]["telemetry"]["sm_clock_mhz_median"] == 1980.0

    monkeypatch.setenv("FAKE_SCALE", "0.8")
    monkeypatch.setenv("FAKE_SM_MHZ", "1500")
    slow = pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-device", "cpu", "--gpuperf-results", "r.json")
    slow.assert_outcomes(passed=2)  # 20% slower at 76% clock: noise, not a regression
    results = {r["metric"]: r for r in json.loads((pytester.path / "r.json").read_text())["results"]}
    assert results["tflops"]["verdict"] == "NOISY"
    assert "SM clock 1500 MHz < 90% of baseline 1980 MHz" in results["tflops"]["comparison"]["reason"]
    assert results["call_time"]["verdict"] == "NOISY"
    assert results["call_time"]["rounds"] == 3  # measured again up to --gpuperf-remeasure, then reported

    monkeypatch.setenv("FAKE_SM_MHZ", "1980")
    monkeypatch.setenv("FAKE_MASK", "0x8")
    throttled = pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-device", "cpu", "test_gemm.py::test_gemm")
    throttled.assert_outcomes(passed=1)
    throttled.stdout.fnmatch_lines(["*test_gemm*tflops*NOISY*"])

    monkeypatch.setenv("FAKE_MASK", "0")
    same_clock = pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-device", "cpu", "test_gemm.py::test_gemm")
    same_clock.assert_outcomes(failed=1)  # the same drop at the baseline's clocks is a regression
    same_clock.stdout.fnmatch_lines(["*tflops: REGRESSED*"])


def test_unavailable_telemetry_is_reported_once(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeconftest(FAKE_DEVICE)
    pytester.makepyfile(test_gemm=WORKLOAD)
    monkeypatch.setenv("FAKE_UNAVAILABLE", "1")
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-device", "cpu")
    result.assert_outcomes(passed=2)
    assert result.stdout.str().count("telemetry unavailable: fake library missing") == 1


def test_cpu_runs_expect_no_telemetry(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_gemm=WORKLOAD.replace("test_timed", "_unused"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--gpuperf-device", "cpu", "--gpuperf-results", "r.json")
    result.assert_outcomes(passed=1)
    assert "telemetry unavailable" not in result.stdout.str()
    [metric] = json.loads((pytester.path / "r.json").read_text())["results"]
    assert metric["context"] == {}


def test_default_reader_on_cuda_reports_why_it_is_unavailable_here(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.plugin import pytest_gpuperf_telemetry_reader

    assert pytest_gpuperf_telemetry_reader(config=None, device="cpu") is None
    found = pytest_gpuperf_telemetry_reader(config=None, device="cuda")
    if isinstance(found, TelemetryUnavailable):  # this machine: no NVIDIA or AMD driver
        assert str(found).startswith("telemetry unavailable: ")
    else:
        found.close()
