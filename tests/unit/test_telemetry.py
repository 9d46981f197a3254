"""Telemetry parsing on recorded readings, throttle decoding, energy, the 90%-clock rule.

The NVML readings below are in the units and magnitudes the real library returns on an H200
(clock MHz, power mW, temperature C, clocks-event bitmask, cumulative energy mJ). A small fake
module stands in for pynvml, offering exactly the functions telemetry.py calls, with the real
module's constant values, so the parsing is exercised without a GPU.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence

import pytest

from pytest_gpuperf.machine import telemetry
from pytest_gpuperf.machine.telemetry import (
    TelemetrySample,
    TelemetrySampler,
    TelemetrySummary,
    TelemetryTrace,
    TelemetryUnavailable,
    compare_clocks,
    decode_throttle_reasons,
    open_reader,
    traces_summary,
)

# (sm MHz, mem MHz, power mW, temp C, clocks-event mask, energy counter mJ), one row per reading.
H200_STEADY = [
    (1980, 3201, 612_400, 58, 0x000, 9_811_204_117),
    (1980, 3201, 655_900, 59, 0x000, 9_811_236_905),
    (1965, 3201, 671_250, 60, 0x000, 9_811_270_470),
    (1980, 3201, 668_010, 60, 0x000, 9_811_303_871),
]
H200_POWER_CAPPED = [
    (1980, 3201, 690_000, 66, 0x000, 9_900_000_000),
    (1755, 3201, 700_010, 71, 0x004, 9_900_035_000),
    (1410, 3201, 699_870, 84, 0x024, 9_900_070_000),  # sw power cap + sw thermal
    (1410, 3201, 700_120, 87, 0x024, 9_900_105_000),
]
H200_IDLE_GAPS = [
    (345, 3201, 75_300, 41, 0x001, 5_000_000_000),  # idle between repeats
    (1980, 3201, 640_000, 55, 0x000, 5_000_032_000),
    (1980, 3201, 652_000, 56, 0x000, 5_000_064_000),
    (345, 3201, 80_100, 50, 0x001, 5_000_070_000),
    (1980, 3201, 660_000, 57, 0x002, 5_000_102_000),  # application clocks set: benign
]


class FakeNvml:
    """The pynvml functions telemetry.py uses, fed from recorded rows.

    Each getter walks its own column, one row per call (the reader calls each getter once per
    sample), and repeats the last row when the recording runs out.
    """

    NVML_CLOCK_SM = 1  # pynvml.NVML_CLOCK_SM
    NVML_CLOCK_MEM = 2  # pynvml.NVML_CLOCK_MEM
    NVML_TEMPERATURE_GPU = 0  # pynvml.NVML_TEMPERATURE_GPU
    NVML_ERROR_NOT_SUPPORTED = 3
    NVML_ERROR_LIBRARY_NOT_FOUND = 12

    class NVMLError(Exception):
        def __init__(self, value: int) -> None:
            super().__init__(value)
            self.value = value

        def __str__(self) -> str:
            return {3: "Not Supported", 12: "NVML Shared Library Not Found"}.get(self.value, f"NVML error {self.value}")

    def __init__(
        self,
        rows: Sequence[tuple[int, int, int, int, int, int]],
        *,
        name: str = "NVIDIA H200",
        count: int = 1,
        init_error: int | None = None,
        unsupported: Sequence[str] = (),
        event_reasons_api: bool = True,
    ) -> None:
        self._columns = list(zip(*rows))
        self._calls: dict[int, int] = {}
        self._name, self._count, self._init_error = name, count, init_error
        self._unsupported = set(unsupported)
        self.opened_handles: list[object] = []
        self.init_calls = self.shutdown_calls = 0
        if event_reasons_api:
            self.nvmlDeviceGetCurrentClocksEventReasons = self._reasons

    def _next(self, column: int, what: str) -> int:
        if what in self._unsupported:
            raise self.NVMLError(self.NVML_ERROR_NOT_SUPPORTED)
        values = self._columns[column]
        i = self._calls.get(column, 0)
        self._calls[column] = i + 1
        return values[min(i, len(values) - 1)]

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self._init_error is not None:
            raise self.NVMLError(self._init_error)

    def nvmlShutdown(self) -> None:
        self.shutdown_calls += 1

    def nvmlDeviceGetCount(self) -> int:
        return self._count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> object:
        handle = ("index", index)
        self.opened_handles.append(handle)
        return handle

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> object:
        handle = ("uuid", uuid)
        self.opened_handles.append(handle)
        return handle

    def nvmlDeviceGetName(self, handle: object) -> str:
        return self._name

    def nvmlDeviceGetClockInfo(self, handle: object, kind: int) -> int:
        if kind == self.NVML_CLOCK_SM:
            return self._next(0, "sm")
        assert kind == self.NVML_CLOCK_MEM, kind
        return self._next(1, "mem")

    def nvmlDeviceGetPowerUsage(self, handle: object) -> int:
        return self._next(2, "power")

    def nvmlDeviceGetTemperature(self, handle: object, sensor: int) -> int:
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self._next(3, "temp")

    def _reasons(self, handle: object) -> int:
        return self._next(4, "reasons")

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: object) -> int:
        return self._next(4, "reasons")

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: object) -> int:
        return self._next(5, "energy")


def _trace_from(rows: Sequence[tuple[int, int, int, int, int, int]], **fake_kwargs: object) -> TelemetryTrace:
    """Read every recorded row through the real reader code, as the sampler would."""
    # The reader probes each field once when it opens; feed that probe a copy of the first row.
    fake = FakeNvml([rows[0], *rows], **fake_kwargs)  # type: ignore[arg-type]
    reader = open_reader(nvml=fake, environ={})
    assert not isinstance(reader, TelemetryUnavailable), reader
    samples = tuple(TelemetrySample(t_s=0.1 * i, **reader.read()) for i in range(len(rows)))
    reader.close()
    return TelemetryTrace(
        device_name=reader.device_name, backend=reader.backend, samples=samples, unsupported=reader.unsupported
    )


def _clock_trace(sm_clocks: Sequence[float], masks: Sequence[int] | None = None) -> TelemetryTrace:
    masks = masks or [0] * len(sm_clocks)
    return TelemetryTrace(
        device_name="NVIDIA H200",
        backend="nvml",
        samples=tuple(
            TelemetrySample(t_s=0.05 * i, sm_clock_mhz=c, mem_clock_mhz=3201, throttle_mask=m)
            for i, (c, m) in enumerate(zip(sm_clocks, masks, strict=True))
        ),
    )


# --- throttle decoding -------------------------------------------------------------------------


def test_fake_uses_the_real_pynvml_names_and_constants() -> None:
    pynvml = pytest.importorskip("pynvml")
    for name in (
        "nvmlInit",
        "nvmlShutdown",
        "nvmlDeviceGetCount",
        "nvmlDeviceGetHandleByIndex",
        "nvmlDeviceGetHandleByUUID",
        "nvmlDeviceGetName",
        "nvmlDeviceGetClockInfo",
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTemperature",
        "nvmlDeviceGetCurrentClocksEventReasons",
        "nvmlDeviceGetCurrentClocksThrottleReasons",
        "nvmlDeviceGetTotalEnergyConsumption",
        "NVMLError",
    ):
        assert hasattr(pynvml, name), name
    for name in (
        "NVML_CLOCK_SM",
        "NVML_CLOCK_MEM",
        "NVML_TEMPERATURE_GPU",
        "NVML_ERROR_NOT_SUPPORTED",
        "NVML_ERROR_LIBRARY_NOT_FOUND",
    ):
        assert getattr(FakeNvml, name) == getattr(pynvml, name), name


def test_throttle_bits_match_pynvml_constants() -> None:
    pynvml = pytest.importorskip("pynvml")
    expected = {
        "gpu_idle": pynvml.nvmlClocksEventReasonGpuIdle,
        "app_clocks": pynvml.nvmlClocksEventReasonApplicationsClocksSetting,
        "sw_power_cap": pynvml.nvmlClocksEventReasonSwPowerCap,
        "hw_slowdown": pynvml.nvmlClocksEventReasonHwSlowdown,
        "sync_boost": pynvml.nvmlClocksEventReasonSyncBoost,
        "sw_thermal": pynvml.nvmlClocksEventReasonSwThermalSlowdown,
        "hw_thermal": pynvml.nvmlClocksEventReasonHwThermalSlowdown,
        "hw_power_brake": pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown,
        "display_clocks": pynvml.nvmlClocksEventReasonDisplayClockSetting,
    }
    for name, bit in expected.items():
        assert decode_throttle_reasons(bit) == (name,)


@pytest.mark.parametrize(
    ("mask", "names"),
    [
        (0x0, ()),
        (0x1, ("gpu_idle",)),
        (0x24, ("sw_power_cap", "sw_thermal")),
        (0x48, ("hw_slowdown", "hw_thermal")),
        (0x1000 | 0x4, ("sw_power_cap", "unknown_0x1000")),
    ],
)
def test_decode_throttle_reasons(mask: int, names: tuple[str, ...]) -> None:
    assert decode_throttle_reasons(mask) == names


# --- parsing recorded readings -----------------------------------------------------------------


def test_steady_recording_parses_units_and_summary() -> None:
    trace = _trace_from(H200_STEADY)
    assert trace.device_name == "NVIDIA H200" and trace.backend == "nvml"
    assert trace.unsupported == ()
    assert trace.values("power_w") == (612.4, 655.9, 671.25, 668.01)  # mW -> W
    assert trace.timestamps == pytest.approx((0.0, 0.1, 0.2, 0.3))
    summary = trace.summary()
    assert summary.samples == 4 and summary.busy_samples == 4
    assert summary.sm_clock_mhz_min == 1965
    assert summary.sm_clock_mhz_median == 1980
    assert summary.mem_clock_mhz_median == 3201
    assert summary.temperature_c_max == 60
    assert summary.power_w_max == pytest.approx(671.25)
    assert not summary.throttled and summary.throttle_known
    # Energy: last minus first counter reading, mJ -> J.
    assert summary.energy_j == pytest.approx((9_811_303_871 - 9_811_204_117) / 1000)


def test_power_capped_recording_is_throttled_with_reasons() -> None:
    summary = _trace_from(H200_POWER_CAPPED).summary()
    assert summary.throttled
    assert summary.throttle_reasons == ("sw_power_cap", "sw_thermal")
    assert summary.temperature_c_max == 87
    assert summary.energy_j == pytest.approx(105.0)


def test_idle_samples_do_not_drag_the_clock_statistics() -> None:
    summary = _trace_from(H200_IDLE_GAPS).summary()
    assert summary.busy_samples == 3
    assert summary.sm_clock_mhz_min == 1980  # the 345 MHz idle readings are left out
    assert not summary.throttled  # gpu_idle and app_clocks are benign
    assert summary.throttle_known


def test_unsupported_fields_are_listed_not_invented() -> None:
    trace = _trace_from(H200_STEADY, unsupported=("energy", "reasons"))
    assert set(trace.unsupported) == {"energy_mj", "throttle_mask"}
    assert all(s.energy_mj is None and s.throttle_mask is None for s in trace.samples)
    summary = trace.summary()
    assert summary.energy_j is None
    assert not summary.throttle_known
    ok, why = compare_clocks(summary, None)
    assert ok and "throttle reasons not reported" in why


def test_older_bindings_use_the_throttle_reasons_function() -> None:
    trace = _trace_from(H200_POWER_CAPPED, event_reasons_api=False)
    assert trace.summary().throttle_reasons == ("sw_power_cap", "sw_thermal")


def test_trace_and_summary_round_trip_through_dicts() -> None:
    trace = _trace_from(H200_POWER_CAPPED)
    assert TelemetryTrace.from_dict(trace.to_dict()) == trace
    summary = trace.summary()
    assert TelemetrySummary.from_dict(summary.to_dict()) == summary
    with pytest.raises(ValueError, match="lacks sm_clock_mhz_median.*--gpuperf-save"):
        TelemetrySummary.from_dict({k: v for k, v in summary.to_dict().items() if k != "sm_clock_mhz_median"})


def test_unknown_field_name_is_an_error() -> None:
    with pytest.raises(ValueError, match="'gpu_util'"):
        _clock_trace([1980]).values("gpu_util")


def test_traces_summary_sums_energy_per_window_and_keeps_reasons() -> None:
    steady, capped = _trace_from(H200_STEADY), _trace_from(H200_POWER_CAPPED)
    merged = traces_summary([steady, capped])
    assert merged.samples == 8
    # The counter jump between the two recordings is not counted as measurement energy.
    assert merged.energy_j == pytest.approx(steady.summary().energy_j + 105.0)
    assert merged.throttle_reasons == ("sw_power_cap", "sw_thermal")
    with pytest.raises(ValueError):
        traces_summary([])


# --- the 90%-clock rule on synthetic clock traces --------------------------------------------

BASELINE = _clock_trace([1980, 1980, 1965, 1980]).summary()


def test_clocks_at_baseline_are_trustworthy() -> None:
    ok, why = compare_clocks(_clock_trace([1980, 1965, 1980, 1950]), BASELINE)
    assert ok
    assert "SM clock" in why and "no throttling" in why


def test_clock_below_90_percent_of_baseline_is_not_trustworthy() -> None:
    ok, why = compare_clocks(_clock_trace([1410, 1410, 1425, 1410]), BASELINE)
    assert not ok
    assert why == "SM clock 1410 MHz < 90% of baseline 1980 MHz"


def test_boundary_of_the_90_percent_rule() -> None:
    assert compare_clocks(_clock_trace([1782.0] * 3), BASELINE)[0]  # exactly 90% of 1980
    assert not compare_clocks(_clock_trace([1781.0] * 3), BASELINE)[0]
    assert compare_clocks(_clock_trace([1600.0] * 3), BASELINE, min_fraction=0.8)[0]


def test_memory_clock_drop_is_caught_too() -> None:
    low_mem = TelemetryTrace(
        device_name="NVIDIA H200",
        backend="nvml",
        samples=tuple(TelemetrySample(t_s=i, sm_clock_mhz=1980, mem_clock_mhz=1593, throttle_mask=0) for i in range(3)),
    )
    ok, why = compare_clocks(low_mem, BASELINE)
    assert not ok and why == "memory clock 1593 MHz < 90% of baseline 3201 MHz"


def test_any_non_benign_throttle_reason_is_not_trustworthy_even_at_full_clock() -> None:
    trace = _clock_trace([1980, 1980, 1980], masks=[0, 0x40, 0])
    ok, why = compare_clocks(trace, BASELINE)
    assert not ok and why == "throttled during the measurement (hw_thermal)"


def test_throttle_and_low_clock_are_both_reported() -> None:
    trace = _clock_trace([1410, 1410, 1410], masks=[0x4, 0x4, 0x4])
    ok, why = compare_clocks(trace, BASELINE)
    assert not ok
    assert why == ("throttled during the measurement (sw_power_cap); SM clock 1410 MHz < 90% of baseline 1980 MHz")


def test_power_cap_is_comparable_when_the_baseline_was_capped_too_or_there_is_none() -> None:
    """An H200 GEMM runs at its 700 W cap: counting that as throttling would make every heavy GEMM NOISY forever."""
    capped = _clock_trace([1755, 1740, 1755], masks=[0x4, 0x4, 0x4])
    capped_baseline = _clock_trace([1755, 1755, 1740], masks=[0x4, 0x4, 0x4]).summary()
    ok, why = compare_clocks(capped, capped_baseline)
    assert (
        ok
        and why
        == "SM clock 1755 MHz vs baseline 1755 MHz; memory clock 3201 MHz vs baseline 3201 MHz; "
        "sw_power_cap under load, as in the baseline"
    )
    ok, why = compare_clocks(capped, None)
    assert ok and why == "no baseline clocks to compare; sw_power_cap under load"


def test_power_cap_still_fails_the_clock_floor_or_a_baseline_that_never_saw_it() -> None:
    capped_baseline = _clock_trace([1755] * 3, masks=[0x4] * 3).summary()
    ok, why = compare_clocks(_clock_trace([1500] * 3, masks=[0x4] * 3), capped_baseline)
    assert not ok and why == "SM clock 1500 MHz < 90% of baseline 1755 MHz"  # a lowered power limit, say
    ok, why = compare_clocks(_clock_trace([1980] * 3, masks=[0x4] * 3), BASELINE)
    assert not ok and why == "throttled during the measurement (sw_power_cap)"
    ok, why = compare_clocks(_clock_trace([1755] * 3, masks=[0x4 | 0x20] * 3), capped_baseline)
    assert not ok and why == "throttled during the measurement (sw_thermal)"  # thermal is never "under load"


def test_idle_and_app_clock_reasons_alone_are_trustworthy() -> None:
    trace = _clock_trace([300, 1980, 1980, 300, 1975], masks=[0x1, 0x2, 0x2, 0x1, 0x0])
    ok, _ = compare_clocks(trace, BASELINE)
    assert ok


def test_without_baseline_or_samples_only_what_can_be_checked_is_checked() -> None:
    ok, why = compare_clocks(_clock_trace([1410, 1410]), None)
    assert ok and "no baseline clocks" in why
    empty = TelemetryTrace(device_name="NVIDIA H200", backend="nvml", samples=())
    ok, why = compare_clocks(empty, BASELINE)
    assert ok and "no telemetry samples" in why
    with pytest.raises(ValueError, match="min_fraction"):
        compare_clocks(empty, BASELINE, min_fraction=1.5)


# --- opening a reader, and the unavailable path ------------------------------------------------


def test_no_library_says_so() -> None:
    # Simulate a machine with neither library importable.
    saved = {name: sys.modules.get(name) for name in ("pynvml", "amdsmi")}
    sys.modules["pynvml"] = None  # type: ignore[assignment]  # makes `import pynvml` fail
    sys.modules["amdsmi"] = None  # type: ignore[assignment]
    try:
        result = open_reader(environ={})
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    assert isinstance(result, TelemetryUnavailable)
    assert str(result).startswith("telemetry unavailable: nvidia-ml-py not installed")
    assert "amdsmi not installed" in str(result)


def test_no_driver_says_so_and_invents_nothing() -> None:
    fake = FakeNvml(H200_STEADY, init_error=FakeNvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    result = open_reader(nvml=fake, backend="nvml", environ={})
    assert isinstance(result, TelemetryUnavailable)
    assert str(result) == (
        "telemetry unavailable: NVML did not start (NVML Shared Library Not Found); no NVIDIA driver here?"
    )


def test_real_pynvml_on_this_machine_reports_a_reason_or_a_reader() -> None:
    pytest.importorskip("pynvml")
    result = open_reader(backend="nvml")
    if isinstance(result, TelemetryUnavailable):
        assert str(result).startswith("telemetry unavailable: NVML")
    else:  # a machine with an NVIDIA driver
        result.close()


def test_no_device_at_that_index() -> None:
    fake = FakeNvml(H200_STEADY, count=1)
    result = open_reader(nvml=fake, backend="nvml", device_index=2, environ={})
    assert isinstance(result, TelemetryUnavailable)
    assert "NVML sees 1 device(s), asked for index 2" in result.reason
    assert fake.shutdown_calls == 1  # the failed open does not leave NVML initialised


def test_cuda_visible_devices_maps_to_the_nvml_device() -> None:
    fake = FakeNvml(H200_STEADY, count=8)
    reader = open_reader(nvml=fake, device_index=1, environ={"CUDA_VISIBLE_DEVICES": "4,6"})
    assert not isinstance(reader, TelemetryUnavailable)
    assert fake.opened_handles == [("index", 6)]
    fake = FakeNvml(H200_STEADY)
    open_reader(nvml=fake, environ={"CUDA_VISIBLE_DEVICES": "GPU-8f2c"})
    assert fake.opened_handles == [("uuid", "GPU-8f2c")]
    result = open_reader(nvml=FakeNvml(H200_STEADY), environ={"CUDA_VISIBLE_DEVICES": "MIG-1a"})
    assert isinstance(result, TelemetryUnavailable) and "MIG" in result.reason


def test_bad_backend_is_an_error() -> None:
    with pytest.raises(ValueError, match="'rocm'"):
        open_reader(backend="rocm")


def test_reading_telemetry_does_not_import_torch() -> None:
    source = open(telemetry.__file__, encoding="utf-8").read()
    assert "import torch" not in source
    assert "torch.cuda" not in source


# --- the sampler ------------------------------------------------------------------------------


def _wait_until(condition: Callable[[], bool]) -> None:
    """Poll until the sampler thread has done its part; the bound only guards against a hang."""
    for _ in range(10_000):
        if condition():
            return
        time.sleep(0.001)
    pytest.fail("the telemetry sampler thread made no progress")


def test_sampler_collects_entry_background_and_exit_samples() -> None:
    fake = FakeNvml([H200_STEADY[0], *H200_STEADY])
    reader = open_reader(nvml=fake, environ={})
    assert not isinstance(reader, TelemetryUnavailable)
    ticks = iter(range(1000))
    sampler = TelemetrySampler(reader, interval_s=0.001, clock=lambda: float(next(ticks)))
    with pytest.raises(RuntimeError, match="after the with block"):
        _ = sampler.trace
    with sampler:
        # Wait (without timing anything) until the background thread has read the recording.
        _wait_until(lambda: fake._calls.get(0, 0) >= len(H200_STEADY) + 1)
    trace = sampler.trace
    reader.close()
    assert len(trace.samples) >= 3  # entry, at least one background sample, exit
    assert trace.timestamps == tuple(sorted(trace.timestamps))
    assert trace.timestamps[0] == 0.0
    assert trace.values("sm_clock_mhz")[0] == 1980
    summary = trace.summary()
    assert summary.energy_j == pytest.approx((9_811_303_871 - 9_811_204_117) / 1000)
    assert fake.init_calls == 1 and fake.shutdown_calls == 1
    with pytest.raises(RuntimeError, match="one window"):
        with sampler:
            pass


def test_sampler_surfaces_a_reader_failure() -> None:
    class Broken:
        device_name, backend, unsupported = "NVIDIA H200", "nvml", ()
        calls = 0

        def read(self) -> dict[str, float | int | None]:
            Broken.calls += 1
            if Broken.calls > 1:
                raise OSError("device lost")
            return {"sm_clock_mhz": 1980}

        def close(self) -> None:
            pass

    sampler = TelemetrySampler(Broken(), interval_s=0.001)
    with pytest.raises(RuntimeError, match="device lost"):
        with sampler:
            _wait_until(lambda: Broken.calls >= 2)


def test_sampler_rejects_a_bad_interval() -> None:
    with pytest.raises(ValueError, match="interval"):
        TelemetrySampler(object(), interval_s=0)  # type: ignore[arg-type]


# --- amdsmi ----------------------------------------------------------------------------------


class FakeAmdSmi:
    """The amdsmi calls telemetry.py makes, returning dicts shaped as amdsmi documents them
    (clocks MHz under "clk", socket power W, energy ticks with a resolution in microjoules,
    "N/A" for what the device cannot report)."""

    class AmdSmiException(Exception):
        pass

    class AmdSmiClkType:
        GFX, MEM = 0, 1

    class AmdSmiTemperatureType:
        EDGE, HOTSPOT = 0, 1

    class AmdSmiTemperatureMetric:
        CURRENT = 0

    def __init__(self) -> None:
        self.ticks = 1_000_000
        self.shut = 0

    def amdsmi_init(self) -> None: ...

    def amdsmi_shut_down(self) -> None:
        self.shut += 1

    def amdsmi_get_processor_handles(self) -> list[str]:
        return ["gpu0"]

    def amdsmi_get_gpu_asic_info(self, handle: str) -> dict[str, str]:
        return {"market_name": "AMD Instinct MI300X"}

    def amdsmi_get_clock_info(self, handle: str, kind: int) -> dict[str, object]:
        return {"clk": 2100 if kind == self.AmdSmiClkType.GFX else 1300, "max_clk": 2100}

    def amdsmi_get_power_info(self, handle: str) -> dict[str, object]:
        return {"current_socket_power": "N/A", "average_socket_power": 702}

    def amdsmi_get_temp_metric(self, handle: str, kind: int, metric: int) -> int:
        assert kind == self.AmdSmiTemperatureType.HOTSPOT
        return 71

    def amdsmi_get_energy_count(self, handle: str) -> dict[str, object]:
        self.ticks += 65_536
        return {"energy_accumulator": self.ticks, "counter_resolution": 15.3, "timestamp": 0}


def test_amdsmi_reader_parses_and_marks_throttle_unsupported() -> None:
    fake = FakeAmdSmi()
    reader = open_reader(backend="amdsmi", amdsmi=fake, environ={})
    assert not isinstance(reader, TelemetryUnavailable), reader
    assert reader.device_name == "AMD Instinct MI300X" and reader.backend == "amdsmi"
    assert reader.unsupported == ("throttle_mask",)
    first, second = reader.read(), reader.read()
    reader.close()
    assert first["sm_clock_mhz"] == 2100 and first["mem_clock_mhz"] == 1300
    assert first["power_w"] == 702  # "N/A" current power falls back to the average
    assert first["temperature_c"] == 71
    assert second["energy_mj"] - first["energy_mj"] == pytest.approx(65_536 * 15.3 / 1000)
    assert fake.shut == 1
