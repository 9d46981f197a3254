"""Device telemetry around a measurement: clocks, power, temperature, throttle reasons, energy.

Reads NVML (``pynvml``) or AMD SMI (``amdsmi``), neither of which touches the CUDA/HIP runtime, so sampling never
initialises CUDA in the process. Where neither is usable the answer is a ``TelemetryUnavailable`` with the reason,
never invented values. Flow: ``open_reader`` -> ``TelemetrySampler`` around the measurement -> its ``trace`` ->
a summary stored with the run, which a later run's clocks are compared with. Everything below the readers is pure
and tested on recorded samples. machine/: facts only, imports no core/.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from types import ModuleType
from typing import Any, Protocol, TypeVar

__all__ = [
    "BENIGN_THROTTLE_REASONS",
    "LOAD_THROTTLE_REASONS",
    "ClockCheck",
    "DeviceReader",
    "TelemetrySample",
    "TelemetrySampler",
    "TelemetrySummary",
    "TelemetryTrace",
    "TelemetryUnavailable",
    "check_conditions",
    "compare_clocks",
    "decode_throttle_reasons",
    "stored_summary",
    "open_reader",
    "traces_summary",
]

# NVML clocks-event (formerly "clocks throttle") reason bits, nvml.h nvmlClocksEventReason*.
_THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x001, "gpu_idle"),
    (0x002, "app_clocks"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal"),
    (0x040, "hw_thermal"),
    (0x080, "hw_power_brake"),
    (0x100, "display_clocks"),
)

BENIGN_THROTTLE_REASONS: frozenset[str] = frozenset({"gpu_idle", "app_clocks"})
"""Reasons that do not make a measurement untrustworthy: the GPU idling between kernels, and
clocks pinned by the administrator (application clocks), which the baseline sees too."""

LOAD_THROTTLE_REASONS: frozenset[str] = frozenset({"sw_power_cap"})
"""Reasons a heavy kernel causes by itself: an H100/H200 GEMM or attention step runs at the board's power limit
and NVML reports the software power cap for as long as it does. They make a measurement incomparable only when
its baseline did not see them too (a lowered power limit, say); the clock floor against the baseline applies
either way. Counting them as throttling would mark every heavy GPU workload NOISY, run after run."""

_FIELDS = ("sm_clock_mhz", "mem_clock_mhz", "power_w", "temperature_c", "throttle_mask", "energy_mj")


def decode_throttle_reasons(mask: int) -> tuple[str, ...]:
    """Names of the reasons set in an NVML clocks-event bitmask, in bit order.

    Bits this module does not know are kept as "unknown_0x..." rather than dropped.
    """
    names = [name for bit, name in _THROTTLE_BITS if mask & bit]
    known = 0
    for bit, _ in _THROTTLE_BITS:
        known |= bit
    if rest := mask & ~known:
        names.append(f"unknown_{rest:#x}")
    return tuple(names)


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryUnavailable:
    """Why no telemetry could be read; str() is the line the plugin reports."""

    reason: str

    def __str__(self) -> str:
        return f"telemetry unavailable: {self.reason}"


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetrySample:
    """One reading of the device. A field is None when it could not be read at that moment or is
    not supported by the device or library (see TelemetryTrace.unsupported)."""

    t_s: float
    """Seconds since the sampler started (monotonic clock)."""
    sm_clock_mhz: float | None = None
    mem_clock_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    throttle_mask: int | None = None
    """NVML clocks-event reasons bitmask; decode with decode_throttle_reasons."""
    energy_mj: float | None = None
    """The device's cumulative energy counter in millijoules (only differences are meaningful)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetrySummary:
    """What a verdict needs from a trace, and what a baseline stores with its figures."""

    samples: int
    busy_samples: int
    """Samples without the gpu_idle reason; clock statistics use these when there are any."""
    duration_s: float
    sm_clock_mhz_min: float | None
    sm_clock_mhz_median: float | None
    mem_clock_mhz_min: float | None
    mem_clock_mhz_median: float | None
    power_w_median: float | None
    power_w_max: float | None
    temperature_c_max: float | None
    energy_j: float | None
    """Energy used over the window (last counter reading minus first), joules."""
    throttled: bool
    throttle_reasons: tuple[str, ...]
    """Non-benign throttle reasons seen in any sample."""
    throttle_known: bool
    """False when no sample carried throttle reasons (library or device does not report them)."""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["throttle_reasons"] = list(self.throttle_reasons)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TelemetrySummary:
        """Rebuild a stored summary; keys this version does not know are ignored."""
        names = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in names}
        kwargs["throttle_reasons"] = tuple(kwargs.get("throttle_reasons", ()))
        missing = names - kwargs.keys()
        if missing:
            raise ValueError(
                f"stored telemetry summary lacks {', '.join(sorted(missing))}; re-save the baseline with --gpuperf-save"
            )
        return cls(**kwargs)


@dataclass(frozen=True, slots=True, kw_only=True)
class TelemetryTrace:
    """The samples taken around one measurement on one device."""

    device_name: str
    backend: str
    """"nvml" or "amdsmi"."""
    samples: tuple[TelemetrySample, ...]
    unsupported: tuple[str, ...] = ()
    """Fields the device or library does not provide (always None in the samples)."""

    @property
    def timestamps(self) -> tuple[float, ...]:
        return tuple(s.t_s for s in self.samples)

    def values(self, field_name: str) -> tuple[Any, ...]:
        """Every non-None reading of one field, in time order."""
        if field_name not in _FIELDS:
            raise ValueError(f"unknown telemetry field {field_name!r}; one of {', '.join(_FIELDS)}")
        return tuple(v for s in self.samples if (v := getattr(s, field_name)) is not None)

    def summary(self) -> TelemetrySummary:
        masks = self.values("throttle_mask")
        busy = [s for s in self.samples if s.throttle_mask is None or not s.throttle_mask & 0x001]
        # Clock statistics over busy samples: an idle gap between repeats drops the SM clock and
        # says nothing about how fast the kernels ran. All samples when none were busy.
        clock_samples = busy or list(self.samples)

        def clock(name: str) -> list[float]:
            return [v for s in clock_samples if (v := getattr(s, name)) is not None]

        sm, mem = clock("sm_clock_mhz"), clock("mem_clock_mhz")
        power, temp = self.values("power_w"), self.values("temperature_c")
        energy = self.values("energy_mj")
        seen: list[str] = []
        for mask in masks:
            for name in decode_throttle_reasons(mask):
                if name not in BENIGN_THROTTLE_REASONS and name not in seen:
                    seen.append(name)
        return TelemetrySummary(
            samples=len(self.samples),
            busy_samples=len(busy),
            duration_s=(self.samples[-1].t_s - self.samples[0].t_s) if self.samples else 0.0,
            sm_clock_mhz_min=min(sm) if sm else None,
            sm_clock_mhz_median=statistics.median(sm) if sm else None,
            mem_clock_mhz_min=min(mem) if mem else None,
            mem_clock_mhz_median=statistics.median(mem) if mem else None,
            power_w_median=statistics.median(power) if power else None,
            power_w_max=max(power) if power else None,
            temperature_c_max=max(temp) if temp else None,
            energy_j=(energy[-1] - energy[0]) / 1000.0 if len(energy) >= 2 else None,
            throttled=bool(seen),
            throttle_reasons=tuple(seen),
            throttle_known=bool(masks),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "device_name": self.device_name,
            "backend": self.backend,
            "unsupported": list(self.unsupported),
            "samples": [asdict(s) for s in self.samples],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TelemetryTrace:
        return cls(
            device_name=str(data["device_name"]),
            backend=str(data["backend"]),
            unsupported=tuple(data.get("unsupported", ())),
            samples=tuple(TelemetrySample(**s) for s in data["samples"]),
        )


def compare_clocks(
    current: TelemetryTrace | TelemetrySummary,
    baseline: TelemetrySummary | None,
    *,
    min_fraction: float = 0.9,
) -> tuple[bool, str]:
    """Whether a measurement's device conditions make it comparable with its baseline.

    Untrustworthy (False) when the median busy SM or memory clock fell below `min_fraction` of the
    baseline's, or when any throttle reason other than idle / application clocks was seen (the power
    cap of LOAD_THROTTLE_REASONS only when the baseline, if any, did not see it too). The
    message says which, with the figures; a caller marks the result NOISY, never REGRESSED.
    Without samples or without a baseline summary only what can be checked is checked.
    """
    if not 0.0 < min_fraction <= 1.0:
        raise ValueError(f"min_fraction must be in (0, 1], got {min_fraction!r}")
    summary = current.summary() if isinstance(current, TelemetryTrace) else current
    if summary.samples == 0:
        return True, "no telemetry samples in the window; clocks not checked"
    problems: list[str] = []
    notes: list[str] = []
    seen_by_baseline = set(baseline.throttle_reasons) if baseline is not None else set(LOAD_THROTTLE_REASONS)
    under_load = [r for r in summary.throttle_reasons if r in LOAD_THROTTLE_REASONS and r in seen_by_baseline]
    throttled = [r for r in summary.throttle_reasons if r not in under_load]
    if throttled:
        problems.append(f"throttled during the measurement ({', '.join(throttled)})")
    pct = f"{min_fraction:.0%}"
    for label, now, then in (
        ("SM clock", summary.sm_clock_mhz_median, baseline.sm_clock_mhz_median if baseline else None),
        ("memory clock", summary.mem_clock_mhz_median, baseline.mem_clock_mhz_median if baseline else None),
    ):
        if now is None or then is None:
            continue
        if now < min_fraction * then:
            problems.append(f"{label} {now:.0f} MHz < {pct} of baseline {then:.0f} MHz")
        else:
            notes.append(f"{label} {now:.0f} MHz vs baseline {then:.0f} MHz")
    if problems:
        return False, "; ".join(problems)
    if baseline is None:
        notes.append("no baseline clocks to compare")
    if under_load:
        notes.append(f"{', '.join(under_load)} under load" + (", as in the baseline" if baseline else ""))
    else:
        notes.append("no throttling" if summary.throttle_known else "throttle reasons not reported")
    return True, "; ".join(notes)


@dataclass(frozen=True, slots=True)
class ClockCheck:
    """The clock check of one measurement against its baseline, as the verdict and the results keep it."""

    comparable: bool | None
    """False: incomparable conditions (the verdict is NOISY); None: the stored summary could not be read."""
    detail: str
    clock_factor: float | None = None
    """Where only the clocks fell (no throttle reason seen): the largest baseline/current ratio of the SM and memory
    clocks' medians, what the lower clocks can explain (core/verdict/checks.py ``DeviceClocks``); None otherwise."""

    @property
    def problem(self) -> str | None:
        """Why the conditions make the measurement incomparable with its baseline, or None."""
        return self.detail if self.comparable is False else None

    def as_dict(self) -> dict[str, Any]:
        return {"comparable": self.comparable, "detail": self.detail, "clock_factor": self.clock_factor}


def stored_summary(data: Any) -> TelemetrySummary | None:
    """A summary kept in a run's context (``context["telemetry"]``), or None when there is none or it was written
    by a version whose fields differ (its clocks then cannot be compared; the figures still can)."""
    if not isinstance(data, Mapping):
        return None
    try:
        return TelemetrySummary.from_dict(data)
    except (ValueError, TypeError):
        return None


def check_conditions(
    current: TelemetrySummary | Mapping[str, Any], baseline: TelemetrySummary | None, *, min_fraction: float = 0.9
) -> ClockCheck:
    """The one clock check: ``compare_clocks`` on a live summary or one read back from a context; a stored summary
    that cannot be read is reported (comparable None), never an error."""
    if not isinstance(current, TelemetrySummary):
        try:
            current = TelemetrySummary.from_dict(current)
        except (ValueError, TypeError) as error:
            return ClockCheck(None, str(error))
    comparable, detail = compare_clocks(current, baseline, min_fraction=min_fraction)
    return ClockCheck(comparable, detail, None if comparable else clock_factor(current, baseline))


def clock_factor(current: TelemetrySummary, baseline: TelemetrySummary | None) -> float | None:
    """How much slower the device's clocks ran than the baseline's (the larger of the SM and memory clocks'
    ratios of medians), or None where a throttle reason was seen or a clock was not read on both sides."""
    if baseline is None or current.throttle_reasons:
        return None
    ratios = []
    for now, then in (
        (current.sm_clock_mhz_median, baseline.sm_clock_mhz_median),
        (current.mem_clock_mhz_median, baseline.mem_clock_mhz_median),
    ):
        if now is None or then is None or now <= 0:
            return None
        ratios.append(then / now)
    return max(1.0, *ratios)


# --- readers ----------------------------------------------------------------------------------


class DeviceReader(Protocol):
    """One device's telemetry source. read() must be cheap and thread-safe for one caller."""

    device_name: str
    backend: str
    unsupported: tuple[str, ...]

    def read(self) -> dict[str, float | int | None]:
        """Current values keyed by TelemetrySample field names (without t_s)."""
        ...

    def close(self) -> None: ...


class _NvmlReader:
    backend = "nvml"

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        name = nvml.nvmlDeviceGetName(handle)
        self.device_name = name.decode() if isinstance(name, bytes) else str(name)
        # Newer bindings name it "clocks event reasons"; older ones only have "throttle reasons".
        reasons = (
            getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or nvml.nvmlDeviceGetCurrentClocksThrottleReasons
        )
        self._getters: dict[str, Callable[[], float | int]] = {
            "sm_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM),
            "mem_clock_mhz": lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_MEM),
            "power_w": lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,  # mW
            "temperature_c": lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU),
            "throttle_mask": lambda: int(reasons(handle)),
            "energy_mj": lambda: nvml.nvmlDeviceGetTotalEnergyConsumption(handle),  # mJ
        }
        # A field the device does not support (e.g. the energy counter before Volta) fails the
        # same way every time: probe once and stop asking.
        unsupported = []
        for name_, getter in list(self._getters.items()):
            try:
                getter()
            except nvml.NVMLError:
                unsupported.append(name_)
                del self._getters[name_]
        self.unsupported = tuple(unsupported)

    def read(self) -> dict[str, float | int | None]:
        values: dict[str, float | int | None] = {}
        for name, getter in self._getters.items():
            try:
                values[name] = getter()
            except self._nvml.NVMLError:
                values[name] = None  # a transient failure is recorded as a gap, not a value
        return values

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


class _AmdSmiReader:
    backend = "amdsmi"

    def __init__(self, amdsmi: Any, handle: Any) -> None:
        self._smi = amdsmi
        self._handle = handle
        try:
            self.device_name = str(amdsmi.amdsmi_get_gpu_asic_info(handle)["market_name"])
        except (amdsmi.AmdSmiException, KeyError):
            self.device_name = "AMD GPU (name not reported)"
        temp_type = next(
            (
                getattr(amdsmi.AmdSmiTemperatureType, t)
                for t in ("HOTSPOT", "JUNCTION", "EDGE")
                if hasattr(amdsmi.AmdSmiTemperatureType, t)
            ),
            None,
        )
        self._getters: dict[str, Callable[[], float | int | None]] = {
            "sm_clock_mhz": lambda: self._clock(amdsmi.AmdSmiClkType.GFX),
            "mem_clock_mhz": lambda: self._clock(amdsmi.AmdSmiClkType.MEM),
            "power_w": self._power,
            "energy_mj": self._energy,
        }
        if temp_type is not None:
            self._getters["temperature_c"] = lambda: _number(
                amdsmi.amdsmi_get_temp_metric(handle, temp_type, amdsmi.AmdSmiTemperatureMetric.CURRENT)
            )
        unsupported = ["throttle_mask"]  # amdsmi's throttle bits are not NVML's; not decoded yet
        for name_, getter in list(self._getters.items()):
            try:
                ok = getter() is not None
            except (amdsmi.AmdSmiException, KeyError):
                ok = False
            if not ok:
                unsupported.append(name_)
                del self._getters[name_]
        for name_ in _FIELDS:
            if name_ not in self._getters and name_ not in unsupported:
                unsupported.append(name_)
        self.unsupported = tuple(unsupported)

    def _clock(self, kind: Any) -> float | None:
        info = self._smi.amdsmi_get_clock_info(self._handle, kind)
        return _number(info.get("clk", info.get("cur_clk")))  # "cur_clk" before ROCm 6.2

    def _power(self) -> float | None:
        info = self._smi.amdsmi_get_power_info(self._handle)
        current = _number(info.get("current_socket_power"))
        return current if current is not None else _number(info.get("average_socket_power"))

    def _energy(self) -> float | None:
        info = self._smi.amdsmi_get_energy_count(self._handle)
        ticks = info.get("energy_accumulator", info.get("power"))  # "power" in older amdsmi
        resolution_uj = _number(info.get("counter_resolution"))
        ticks = _number(ticks)
        return None if ticks is None or resolution_uj is None else ticks * resolution_uj / 1000.0

    def read(self) -> dict[str, float | int | None]:
        values: dict[str, float | int | None] = {}
        for name, getter in self._getters.items():
            try:
                values[name] = getter()
            except (self._smi.AmdSmiException, KeyError):
                values[name] = None
        return values

    def close(self) -> None:
        try:
            self._smi.amdsmi_shut_down()
        except self._smi.AmdSmiException:
            pass


def _number(value: object) -> float | None:
    """amdsmi reports "N/A" for values it cannot read."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _import(name: str) -> ModuleType | None:
    try:
        return __import__(name)
    except ImportError:
        return None
    except Exception:  # amdsmi raises its own errors at import when librocm is missing
        return None


def _nvml_index(device_index: int, environ: Mapping[str, str]) -> int | str:
    """The NVML index (or UUID) of the `device_index`-th device this process's CUDA sees.

    CUDA_VISIBLE_DEVICES renumbers devices for CUDA but not for NVML. This assumes CUDA's default
    enumeration matches NVML's PCI order, true on the homogeneous servers this targets.
    """
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None or not visible.strip():
        return device_index
    entries = [e.strip() for e in visible.split(",") if e.strip()]
    if device_index >= len(entries):
        raise IndexError(f"device index {device_index} is not among CUDA_VISIBLE_DEVICES={visible!r}")
    entry = entries[device_index]
    return int(entry) if entry.isdigit() else entry


Opened = TypeVar("Opened")


def _open_nvml(
    nvml: Any,
    device_index: int,
    environ: Mapping[str, str],
    wrap: Callable[[str, Any, Any], Opened],
    *,
    allow_mig: bool,
) -> Opened | TelemetryUnavailable:
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as error:
        return TelemetryUnavailable(reason=f"NVML did not start ({error}); no NVIDIA driver here?")
    try:
        target = _nvml_index(device_index, environ)
        if isinstance(target, str):
            if target.startswith("MIG-") and not allow_mig:
                raise LookupError(f"MIG instance {target} has no per-instance clocks or energy")
            handle = nvml.nvmlDeviceGetHandleByUUID(target)
        else:
            count = nvml.nvmlDeviceGetCount()
            if target >= count:
                raise LookupError(f"NVML sees {count} device(s), asked for index {target}")
            handle = nvml.nvmlDeviceGetHandleByIndex(target)
        return wrap("nvml", nvml, handle)
    except (nvml.NVMLError, LookupError, IndexError, ValueError) as error:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass
        return TelemetryUnavailable(reason=f"NVML could not open device {device_index}: {error}")


def _open_amdsmi(
    amdsmi: Any, device_index: int, wrap: Callable[[str, Any, Any], Opened]
) -> Opened | TelemetryUnavailable:
    try:
        amdsmi.amdsmi_init()
    except amdsmi.AmdSmiException as error:
        return TelemetryUnavailable(reason=f"amdsmi did not start ({error}); no AMD driver here?")
    try:
        handles = list(amdsmi.amdsmi_get_processor_handles())
        if device_index >= len(handles):
            raise LookupError(f"amdsmi sees {len(handles)} GPU(s), asked for index {device_index}")
        return wrap("amdsmi", amdsmi, handles[device_index])
    except (amdsmi.AmdSmiException, LookupError) as error:
        try:
            amdsmi.amdsmi_shut_down()
        except amdsmi.AmdSmiException:
            pass
        return TelemetryUnavailable(reason=f"amdsmi could not open device {device_index}: {error}")


def open_device(
    wrap: Callable[[str, Any, Any], Opened],
    *,
    device_index: int = 0,
    backend: str = "auto",
    nvml: Any = None,
    amdsmi: Any = None,
    environ: Mapping[str, str] | None = None,
    allow_mig: bool = False,
) -> Opened | TelemetryUnavailable:
    """``wrap(backend, library, handle)`` of the `device_index`-th GPU this process sees, or why there is none.

    `backend` is "auto" (NVML, then amdsmi), "nvml" or "amdsmi". `nvml` / `amdsmi` substitute the library modules
    (tests pass recorded fakes); by default they are imported here, lazily. The library is left open for what
    ``wrap`` made; a library error inside ``wrap`` shuts it down and counts as that library's failure.
    ``allow_mig``: a MIG instance is opened too (its fault counters exist; its clocks and energy do not).
    """
    if backend not in {"auto", "nvml", "amdsmi"}:
        raise ValueError(f"telemetry backend {backend!r}: use auto, nvml or amdsmi")
    environ = os.environ if environ is None else environ
    reasons: list[str] = []
    if backend in {"auto", "nvml"}:
        nvml = nvml if nvml is not None else _import("pynvml")
        if nvml is None:
            reasons.append("nvidia-ml-py not installed (pip install nvidia-ml-py)")
        else:
            opened = _open_nvml(nvml, device_index, environ, wrap, allow_mig=allow_mig)
            if not isinstance(opened, TelemetryUnavailable):
                return opened
            reasons.append(opened.reason)
    if backend in {"auto", "amdsmi"}:
        amdsmi = amdsmi if amdsmi is not None else _import("amdsmi")
        if amdsmi is None:
            reasons.append("amdsmi not installed (it ships with ROCm)")
        else:
            # amdsmi enumerates every GPU on the host; HIP_VISIBLE_DEVICES is not mapped yet.
            amd = _open_amdsmi(amdsmi, device_index, wrap)
            if not isinstance(amd, TelemetryUnavailable):
                return amd
            reasons.append(amd.reason)
    return TelemetryUnavailable(reason="; ".join(reasons))


def _reader(backend: str, library: Any, handle: Any) -> DeviceReader:
    return _NvmlReader(library, handle) if backend == "nvml" else _AmdSmiReader(library, handle)


def open_reader(
    *,
    device_index: int = 0,
    backend: str = "auto",
    nvml: Any = None,
    amdsmi: Any = None,
    environ: Mapping[str, str] | None = None,
) -> DeviceReader | TelemetryUnavailable:
    """A reader for the `device_index`-th GPU this process sees, or why there is none (``open_device``). The
    reader holds the library open: close() it when done (it is reusable across measurements)."""
    return open_device(_reader, device_index=device_index, backend=backend, nvml=nvml, amdsmi=amdsmi, environ=environ)


# --- sampler ----------------------------------------------------------------------------------


class TelemetrySampler:
    """Samples a reader on a background thread while the `with` block runs.

    One sample is taken on entry and one on exit, so even a measurement shorter than the interval
    gets an energy difference and a throttle check. The trace is available after the block.
    """

    def __init__(
        self,
        reader: DeviceReader,
        *,
        interval_s: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"telemetry interval must be > 0 s, got {interval_s!r}")
        self._reader = reader
        self._interval_s = interval_s
        self._clock = clock
        self._samples: list[TelemetrySample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._start = 0.0
        self._trace: TelemetryTrace | None = None
        self._error: BaseException | None = None

    def _sample(self, now: float | None = None) -> None:
        values: dict[str, Any] = dict(self._reader.read())
        now = self._clock() if now is None else now
        self._samples.append(TelemetrySample(t_s=now - self._start, **values))

    def _run(self) -> None:
        try:
            while not self._stop.wait(self._interval_s):
                self._sample()
        except BaseException as error:  # surfaced on exit instead of dying silently
            self._error = error

    def __enter__(self) -> TelemetrySampler:
        if self._thread is not None:
            raise RuntimeError("a TelemetrySampler is used for one window; make a new one")
        self._start = self._clock()
        self._sample(now=self._start)
        self._thread = threading.Thread(target=self._run, name="gpuperf-telemetry", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        assert self._thread is not None
        self._stop.set()
        self._thread.join()
        if self._error is None:
            try:
                self._sample()
            except Exception as error:
                self._error = error
        self._trace = TelemetryTrace(
            device_name=self._reader.device_name,
            backend=self._reader.backend,
            samples=tuple(self._samples),
            unsupported=tuple(self._reader.unsupported),
        )
        if self._error is not None:
            raise RuntimeError(f"telemetry sampling failed: {self._error!r}") from self._error

    @property
    def trace(self) -> TelemetryTrace:
        if self._trace is None:
            raise RuntimeError("TelemetrySampler.trace is available after the with block ends")
        return self._trace


def traces_summary(traces: Iterable[TelemetryTrace]) -> TelemetrySummary:
    """One summary over several windows of the same device (e.g. the repeats of one metric)."""
    traces = list(traces)
    if not traces:
        raise ValueError("no telemetry traces to summarise")
    samples: list[TelemetrySample] = []
    offset = 0.0
    energy_j = 0.0
    energy_known = False
    for trace in traces:
        summary = trace.summary()
        if summary.energy_j is not None:
            energy_j += summary.energy_j
            energy_known = True
        # Shift each window after the previous one; the counter jumps between windows are not
        # energy of the measurement, so energy is summed per window instead.
        samples.extend(
            TelemetrySample(**{**asdict(s), "t_s": s.t_s + offset, "energy_mj": None}) for s in trace.samples
        )
        offset = samples[-1].t_s if samples else offset
    merged = TelemetryTrace(
        device_name=traces[0].device_name,
        backend=traces[0].backend,
        samples=tuple(samples),
        unsupported=traces[0].unsupported,
    ).summary()
    fields_ = asdict(merged)
    fields_["throttle_reasons"] = merged.throttle_reasons
    fields_["energy_j"] = energy_j if energy_known else None
    return TelemetrySummary(**fields_)
