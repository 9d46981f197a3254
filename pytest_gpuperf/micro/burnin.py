"""The burn-in tier's pieces: a sustained load loop, a device's health counters (ECC, retired pages and remapped
rows, Xid events) read before and after it, and the decision whether its throughput sagged.

Fails a burn-in: a fault the device reports (uncorrectable ECC, a page retired or row remapped, an Xid event), a
hardware slowdown reason, or throughput that sagged from the first minute to the last (a one-sided Mann-Whitney
test at ``SAG_ALPHA`` and a median drop beyond ``SAG_LIMIT``). Corrected ECC errors are reported, not failed.
Readers take the library module (``pynvml``, ``amdsmi``) as an argument, so tests pass recorded fakes; the rest
is pure. No torch (docs/acceptance.md).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

SAG_ALPHA = 0.01
"""Level of the one-sided test that the last minute's throughput is below the first minute's."""
SAG_LIMIT = 0.05
"""Least drop of the median (a fraction) that counts as a sag; the test alone would flag a 0.3% drop on a GPU,
whose samples spread by less than that. Not measured on a GPU yet (docs/acceptance.md)."""
HARDWARE_THROTTLE = frozenset({"hw_slowdown", "hw_thermal", "hw_power_brake"})
"""Throttle reasons (machine/telemetry.py names) that fail a burn-in."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Health:
    """A device's fault counters at one moment; None where the device or library does not report one."""

    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    retired_pages: int | None = None
    """Pages retired for single- or double-bit errors (NVIDIA before Hopper; AMD's bad pages)."""
    retired_pending: bool | None = None
    remapped_uncorrectable: int | None = None
    """Rows remapped for uncorrectable errors (NVIDIA A100 and later replace page retirement with this)."""
    remapped_correctable: int | None = None
    remap_pending: bool | None = None
    remap_failed: bool | None = None
    unsupported: tuple[str, ...] = ()
    """Counters that could not be read, with why, e.g. "ecc: NVML_ERROR_NOT_SUPPORTED"."""

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["unsupported"] = list(self.unsupported)
        return data


def health_problems(before: Health, after: Health, xids: Sequence[int] = ()) -> tuple[list[str], list[str]]:
    """(problems that fail the burn-in, notes) from the counters before and after it and the Xid events seen."""
    problems: list[str] = []
    notes: list[str] = []

    def rose(name: str, label: str, *, fail: bool = True) -> None:
        start, end = getattr(before, name), getattr(after, name)
        if start is None or end is None:
            return
        if end > start:
            (problems if fail else notes).append(f"{label} rose from {start} to {end} during the burn-in")

    rose("ecc_uncorrected", "uncorrectable ECC errors")
    rose("retired_pages", "retired pages")
    rose("remapped_uncorrectable", "rows remapped for uncorrectable errors")
    rose("ecc_corrected", "corrected ECC errors", fail=False)
    rose("remapped_correctable", "rows remapped for correctable errors", fail=False)
    for name, label in (
        ("retired_pending", "a page retirement is pending (it takes effect at the next driver reload)"),
        ("remap_pending", "a row remapping is pending (reset the GPU to apply it)"),
        ("remap_failed", "a row remapping failed: the GPU ran out of spare rows"),
    ):
        if getattr(after, name) and not getattr(before, name):
            problems.append(label)
    if xids:
        problems.append(
            f"Xid event(s) {', '.join(str(x) for x in xids)} during the burn-in (NVIDIA's Xid catalogue says what "
            "each means; the kernel log has them too: dmesg | grep -i xid)"
        )
    unread = sorted(set(before.unsupported) | set(after.unsupported))
    if unread:
        notes.append("not read: " + "; ".join(unread))
    return problems, notes


def read_nvml_health(nvml: Any, handle: Any) -> Health:
    """The counters of one NVML device (``nvml`` is the pynvml module)."""
    values: dict[str, Any] = {}
    unsupported: list[str] = []

    def read(label: str, call: Callable[[], Any]) -> Any:
        try:
            return call()
        except nvml.NVMLError as error:
            unsupported.append(f"{label}: {error}")
            return None

    volatile = nvml.NVML_VOLATILE_ECC
    values["ecc_corrected"] = read(
        "corrected ECC",
        lambda: int(nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, volatile)),
    )
    values["ecc_uncorrected"] = read(
        "uncorrectable ECC",
        lambda: int(nvml.nvmlDeviceGetTotalEccErrors(handle, nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, volatile)),
    )
    pages = read(
        "retired pages",
        lambda: sum(
            len(nvml.nvmlDeviceGetRetiredPages(handle, cause))
            for cause in (
                nvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                nvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR,
            )
        ),
    )
    values["retired_pages"] = pages
    if pages is not None:
        pending = read("retirement pending", lambda: nvml.nvmlDeviceGetRetiredPagesPendingStatus(handle))
        values["retired_pending"] = None if pending is None else bool(pending)
    rows = read("remapped rows", lambda: nvml.nvmlDeviceGetRemappedRows(handle))
    if rows is not None:
        correctable, uncorrectable, pending_rows, failed = rows
        values.update(
            remapped_correctable=int(correctable),
            remapped_uncorrectable=int(uncorrectable),
            remap_pending=bool(pending_rows),
            remap_failed=bool(failed),
        )
    return Health(**values, unsupported=tuple(unsupported))


def read_amdsmi_health(amdsmi: Any, handle: Any) -> Health:
    """The counters of one AMD SMI device: ECC totals and bad (retired) pages; AMD has no Xid."""
    unsupported: list[str] = []
    corrected = uncorrected = pages = None
    try:
        counts = amdsmi.amdsmi_get_gpu_total_ecc_count(handle)
        corrected, uncorrected = int(counts["correctable_count"]), int(counts["uncorrectable_count"])
    except (amdsmi.AmdSmiException, KeyError, TypeError, ValueError) as error:
        unsupported.append(f"ECC: {error!r}")
    try:
        pages = len(amdsmi.amdsmi_get_gpu_bad_page_info(handle) or [])
    except (amdsmi.AmdSmiException, TypeError) as error:
        unsupported.append(f"bad pages: {error!r}")
    return Health(
        ecc_corrected=corrected, ecc_uncorrected=uncorrected, retired_pages=pages, unsupported=tuple(unsupported)
    )


class XidWatch:
    """Collects NVML's critical Xid events of one device between ``start`` and ``drain`` (NVML queues them in
    the event set it registered, so nothing needs to wait on a thread meanwhile)."""

    def __init__(self, nvml: Any, handle: Any) -> None:
        self._nvml = nvml
        self._handle = handle
        self._set: Any = None
        self.unsupported: str | None = None

    def start(self) -> XidWatch:
        nvml = self._nvml
        try:
            self._set = nvml.nvmlEventSetCreate()
            nvml.nvmlDeviceRegisterEvents(self._handle, nvml.nvmlEventTypeXidCriticalError, self._set)
        except nvml.NVMLError as error:
            self.unsupported = f"Xid events: {error}"
            self._free()
        return self

    def drain(self) -> list[int]:
        """The Xids seen since ``start``; the event set is freed."""
        nvml = self._nvml
        xids: list[int] = []
        if self._set is None:
            return xids
        try:
            while len(xids) < 1000:  # a storm of events: a thousand say enough
                try:
                    event = nvml.nvmlEventSetWait_v2(self._set, 0)
                except nvml.NVMLError_Timeout:
                    break
                if event.eventType & nvml.nvmlEventTypeXidCriticalError:
                    xids.append(int(event.eventData))
        except nvml.NVMLError as error:
            self.unsupported = f"Xid events: {error}"
        finally:
            self._free()
        return xids

    def _free(self) -> None:
        if self._set is not None:
            try:
                self._nvml.nvmlEventSetFree(self._set)
            except self._nvml.NVMLError:
                pass
            self._set = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SagDecision:
    """Whether throughput fell from the start of a sustained run to its end."""

    sagged: bool
    first_median: float
    last_median: float
    ratio: float
    """last / first medians."""
    p_value: float | None
    """One-sided Mann-Whitney p that the last window is lower; None when a window had too few samples."""
    first_n: int
    last_n: int
    message: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def windows(times: Sequence[float], *, window_s: float = 60.0) -> tuple[list[int], list[int]]:
    """Indices of the samples in the first and in the last ``window_s`` of a run (sample ``i`` ended at
    ``times[i]`` seconds after the start); a run shorter than two windows compares its first and last thirds."""
    if not times:
        return [], []
    total = times[-1]
    width = window_s if total >= 2 * window_s else total / 3
    first = [i for i, t in enumerate(times) if t <= width]
    last = [i for i, t in enumerate(times) if t >= total - width and i not in first]
    return first, last


def judge_sag(
    first: Sequence[float], last: Sequence[float], *, alpha: float = SAG_ALPHA, limit: float = SAG_LIMIT
) -> SagDecision:
    """A sag: the last window's throughput is lower than the first's by a one-sided Mann-Whitney test at
    ``alpha``, and its median lower by more than ``limit``. Either alone is no sag: a significant 0.3% or a 6%
    drop the samples cannot tell from their spread."""
    import statistics

    if not first or not last:
        raise ValueError(f"a sag needs samples in both windows; got {len(first)} and {len(last)}")
    a, b = statistics.median(first), statistics.median(last)
    ratio = b / a
    p_value: float | None = None
    # n vs n needs n >= 5 for a one-sided Mann-Whitney p below 0.01 at all (1/252 at 5 vs 5)
    if min(len(first), len(last)) >= 5:
        from scipy.stats import mannwhitneyu

        p_value = float(mannwhitneyu(first, last, alternative="greater").pvalue)
    drop = 1 - ratio
    significant = p_value is not None and p_value < alpha
    sagged = significant and drop > limit
    figures = (
        f"median {a:,.4g} in the first window ({len(first)} samples), {b:,.4g} in the last ({len(last)}): {ratio:.3f}x"
    )
    if p_value is None:
        verdict = f"too few samples to test (need >= 5 per window); {figures}"
    elif sagged:
        verdict = (
            f"throughput sagged: {figures}, a {drop:.1%} drop (> {limit:.0%}), one-sided Mann-Whitney "
            f"p = {p_value:.2g} < {alpha:g}"
        )
    else:
        why = f"p = {p_value:.2g}" + (f" >= {alpha:g}" if not significant else f", drop {drop:.1%} <= {limit:.0%}")
        verdict = f"no sag: {figures} ({why})"
    return SagDecision(
        sagged=sagged,
        first_median=a,
        last_median=b,
        ratio=ratio,
        p_value=p_value if p_value is None or math.isfinite(p_value) else None,
        first_n=len(first),
        last_n=len(last),
        message=verdict,
    )


def sustain(
    chunks: Sequence[Callable[[], float]],
    seconds: float,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> list[list[tuple[float, float]]]:
    """Run each of ``chunks`` in turn (each times a short stretch of one load and returns its rate) until
    ``seconds`` have passed; per chunk, its (seconds since the start when it ended, rate) samples."""
    if seconds <= 0:
        raise ValueError(f"a sustained load of {seconds} s: give a positive duration")
    series: list[list[tuple[float, float]]] = [[] for _ in chunks]
    start = clock()
    while True:
        for index, chunk in enumerate(chunks):
            rate = chunk()
            series[index].append((clock() - start, rate))
        if clock() - start >= seconds:
            return series


class HealthSource:
    """One GPU's fault counters and Xid events, through NVML or AMD SMI, held open until ``close``."""

    def __init__(self, backend: str, library: Any, handle: Any) -> None:
        self.backend = backend
        self._library = library
        self._handle = handle
        self._watch: XidWatch | None = None

    def read(self) -> Health:
        if self.backend == "nvml":
            return read_nvml_health(self._library, self._handle)
        return read_amdsmi_health(self._library, self._handle)

    def watch_xids(self) -> None:
        """Start collecting Xid events (NVML); AMD has no Xid, and ``xids`` says so."""
        if self.backend == "nvml":
            self._watch = XidWatch(self._library, self._handle).start()

    def xids(self) -> tuple[list[int], str | None]:
        """(Xids seen since ``watch_xids``, why they could not be read or None)."""
        if self.backend != "nvml":
            return [], "Xid events: an NVIDIA notion; AMD SMI's event reader is not read here"
        if self._watch is None:
            return [], "Xid events: not watched"
        found = self._watch.drain()
        return found, self._watch.unsupported

    def close(self) -> None:
        try:
            if self.backend == "nvml":
                self._library.nvmlShutdown()
            else:
                self._library.amdsmi_shut_down()
        except Exception:  # shutting a library down must not fail a burn-in that finished
            pass


def open_health(
    device_index: int, *, nvml: Any = None, amdsmi: Any = None, environ: Mapping[str, str] | None = None
) -> HealthSource | str:
    """The fault counters of the ``device_index``-th GPU this process sees (NVML, then AMD SMI), or why none:
    opened as the telemetry reader opens its device (a MIG instance included: its counters exist)."""
    from pytest_gpuperf.machine.telemetry import TelemetryUnavailable, open_device

    opened = open_device(
        HealthSource, device_index=device_index, nvml=nvml, amdsmi=amdsmi, environ=environ, allow_mig=True
    )
    return opened.reason if isinstance(opened, TelemetryUnavailable) else opened
