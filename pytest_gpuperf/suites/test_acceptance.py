"""Node acceptance (``pytest -m acceptance``): every local device measured on its own, for ``gpuperf fleet``.

Quick tier, per device (``gpu0``, ``gpu1``, ... or ``cpu``, the first test-id component): GEMM in bf16 and fp8,
memory copy and read, forced-flash attention, host<->device copies (GPU only) and one training step; once per
node, the all-reduce bus bandwidth. A metric below its floor (micro/acceptance.py) on a part whose healthy figure
is known is REGRESSED with the figures and the datasheet's source. Burn-in (``pytest -m burnin``): sustained load
per device with its health counters read before and after (micro/burnin.py). Neither is part of ``-m perf``;
kernels and sizing are the micro suite's. docs/acceptance.md.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pytest

from pytest_gpuperf.core.config.settings import get_settings
from pytest_gpuperf.core.session.parametrize import parametrized_by_test
from pytest_gpuperf.core.stats.unpaired import summarize
from pytest_gpuperf.micro.acceptance import NODE, LocalDevice, judge_floor, local_devices
from pytest_gpuperf.micro.kernels import (
    BANDWIDTH_BYTES,
    SDPA_SHAPE,
    SQUARE,
    attach_peak,
    datasheet_peak,
    heavier,
    make_gemm,
    measure_gemm,
    measure_memory,
    memory_call,
    note_slowdown,
    sdpa_step,
)

if TYPE_CHECKING:
    from pytest_gpuperf.micro.burnin import HealthSource

pytestmark = [pytest.mark.acceptance]

SUITE = "acceptance"
"""The suite's name for --gpuperf-inject-slowdown."""
HOST_COPY_BYTES = 256 * 2**20
"""Pinned host memory each way: ~5 ms over PCIe Gen5 x16, long past any copy engine's start-up."""
TRAINING = {"cpu": ("tiny-llama", 8, 64, None), "cuda": ("llama3-8b@1", 2, 2048, "bfloat16")}
"""(model spec, batch, sequence, dtype) of the training step per device kind."""
ALLREDUCE_MAX_BYTES = {"cpu": 1 << 20, "cuda": 256 << 20}
"""Largest all-reduce message: gloo over loopback peaks around 1 MiB; 256 MiB is past NVLink's ramp-up."""
CPU_RANKS = 2


def _devices(config: pytest.Config) -> tuple[LocalDevice, ...]:
    """This node's devices, at collection. A machine with no GPU driver at all answers without importing torch."""
    from pytest_gpuperf.distributed.devices import count_devices

    request = get_settings(config).device_request
    if request == "cpu" or (request == "auto" and count_devices()[1] == 0):
        return local_devices("cpu", 0)
    from pytest_gpuperf.core.session.state import gpuperf_session

    device = gpuperf_session(config).device
    if device == "cpu":
        return local_devices("cpu", 0)
    import torch

    return local_devices(device, torch.cuda.device_count())


BURNIN_SLACK_S = 300.0
"""A burn-in's time budget beyond its load: torch and CUDA start, buffers are made, the chunks are calibrated."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # Called before the parametrize marks are applied: the device is the test id's first component.
    if "accel" in metafunc.fixturenames and not parametrized_by_test(metafunc, "accel"):
        devices = _devices(metafunc.config)
        marks: list[pytest.MarkDecorator] = []
        settings = get_settings(metafunc.config)
        if metafunc.definition.get_closest_marker("burnin") is not None and settings.burnin_minutes is not None:
            # The budget follows the minutes asked for, each confirmation attempt measuring again
            # (core/session/budget.py).
            load_s = settings.burnin_minutes * 60 * (1 + settings.confirm)
            marks.append(pytest.mark.gpuperf_timeout(load_s + BURNIN_SLACK_S))
        params = [pytest.param(device, marks=marks, id=device.id) for device in devices]
        metafunc.parametrize("accel", params)


@dataclass(frozen=True, slots=True)
class Target:
    """The device a test measures, made current, with its telemetry reader (None on CPU or without NVML)."""

    device: LocalDevice
    reader: Any
    note: str | None
    """Why there is no telemetry on a GPU ("telemetry unavailable: ..."), or None."""

    @property
    def gpu(self) -> bool:
        return self.device.index is not None


@pytest.fixture
def target(accel: LocalDevice, perf: Any) -> Iterator[Target]:
    if accel.index is None:
        if perf.device != "cpu":
            pytest.fail(
                f"collected for the CPU (the driver listed no GPU), but this session runs on {perf.device}: run "
                "with --gpuperf-device cuda to measure the GPUs, or --gpuperf-device cpu",
                pytrace=False,
            )
        yield Target(accel, None, None)
        return
    import torch

    from pytest_gpuperf.machine.telemetry import TelemetryUnavailable, open_reader

    previous = torch.cuda.current_device()
    torch.cuda.set_device(accel.index)  # the micro kernels, the timer and attach_peak use the current device
    found = open_reader(device_index=accel.index)
    reader = None if isinstance(found, TelemetryUnavailable) else found
    try:
        with perf.telemetry_from(reader):
            yield Target(accel, reader, str(found) if reader is None else None)
    finally:
        torch.cuda.set_device(previous)
        if reader is not None:
            reader.close()


@pytest.fixture
def timer(target: Target) -> Any:
    """The micro suite's timer, on the target's GPU (CUDA events, L2 flushed between calls); None on CPU."""
    if not target.gpu:
        return None
    from pytest_gpuperf.micro.timing import CudaEventTimer

    return CudaEventTimer()


def stamp(perf: Any, target: Target) -> None:
    """Name the device on every metric of the test: the contract `gpuperf fleet` groups by."""
    name = None
    if target.gpu:
        import torch

        name = torch.cuda.get_device_name(target.device.index)
    for record in perf.metrics:
        record.context["device"] = target.device.id
        if name is not None:
            record.context["device_name"] = name
        if target.note is not None:
            record.context["telemetry_note"] = target.note


def apply_floor(perf: Any, metric: str, floor: str) -> None:
    """Judge ``metric`` against its datasheet floor (micro/acceptance.py); below it, the metric is REGRESSED by
    that rule instead of the baseline comparison, with the figures, so the results keep the broken device."""
    record = perf.metric(metric)
    peak = record.context.get("peak") or {}
    decision = judge_floor(
        floor,
        summarize(record.samples).median,
        record.unit,
        part=peak.get("device"),
        peak=peak.get("value"),
        peak_source=peak.get("source"),
        no_peak=str(peak.get("note") or "no datasheet peak is known for this device"),
    )
    record.context["floor"] = decision.as_dict()
    if decision.passed is False:
        perf.judge_elsewhere(metric, rule="datasheet floor", verdict="REGRESSED", reason=decision.message)


def _kind(perf: Any) -> str:
    return "cuda" if perf.device == "cuda" else "cpu"


@pytest.mark.parametrize("precision", ["bf16", "fp8"])
def test_gemm(perf: Any, target: Target, timer: Any, cpu_threads: None, gpuperf_sizing: Any, precision: str) -> None:
    side = SQUARE[_kind(perf)]
    measure_gemm(perf, gpuperf_sizing, timer, precision=precision, shape=(side, side, side),
                 device=target.device.torch_device, slowdown=perf.settings.slowdown(SUITE))  # fmt: skip
    apply_floor(perf, "tflops", f"gemm_{precision}")
    stamp(perf, target)


@pytest.mark.parametrize("kind", ["copy", "read"])
def test_memory(perf: Any, target: Target, timer: Any, cpu_threads: None, kind: str) -> None:
    measure_memory(perf, timer, kind=kind, size=BANDWIDTH_BYTES[_kind(perf)], device=target.device.torch_device,
                   slowdown=perf.settings.slowdown(SUITE))  # fmt: skip
    apply_floor(perf, "bandwidth", f"memory_{kind}")
    stamp(perf, target)


def test_sdpa(perf: Any, target: Target, timer: Any, cpu_threads: None) -> None:
    """Causal attention forward+backward, the flash backend forced (both CPU and GPU builds have one): a device
    that cannot run it fails here rather than falling back to a slower kernel."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = SDPA_SHAPE[_kind(perf)]
    slowdown = perf.settings.slowdown(SUITE)
    _, step, flops = sdpa_step(shape, target.device.torch_device, slowdown)
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION]):
        try:
            step()
        except RuntimeError as error:
            pytest.fail(f"flash attention did not run on {target.device.id} (shape {shape}): {error}", pytrace=False)
        perf.measure("tflops", step, unit="TFLOP/s", work=flops / 1e12, timer=timer)
    attach_peak(perf, "tflops", dtype=shape[4])
    note_slowdown(perf, "tflops", slowdown)
    apply_floor(perf, "tflops", "sdpa")
    stamp(perf, target)


@pytest.mark.parametrize("direction", ["h2d", "d2h"])
def test_host_copy(perf: Any, target: Target, timer: Any, direction: str) -> None:
    """Pinned host memory to the GPU and back: the PCIe (or NVLink-C2C) link of this GPU."""
    if not target.gpu:
        pytest.skip(f"host<->device copies need a GPU: on a {perf.device} run the host's memory is the device's")
    import torch

    slowdown = perf.settings.slowdown(SUITE)
    host = torch.empty(heavier(HOST_COPY_BYTES // 4, slowdown), dtype=torch.float32, pin_memory=True)
    device = torch.empty_like(host, device=target.device.torch_device)
    source, destination = (host, device) if direction == "h2d" else (device, host)
    perf.measure("bandwidth", lambda: destination.copy_(source, non_blocking=True), unit="GB/s",
                 work=HOST_COPY_BYTES / 1e9, timer=timer)  # fmt: skip
    perf.metric("bandwidth").context["bytes_moved"] = HOST_COPY_BYTES
    note_slowdown(perf, "bandwidth", slowdown)
    apply_floor(perf, "bandwidth", "host_copy")
    stamp(perf, target)


def test_training_step(perf: Any, target: Target, cpu_threads: None) -> None:
    """One optimizer step (forward, backward, AdamW) of a model on this device, in tokens per second; a slowed one
    trains on more sequences while the rate counts the nominal ones."""
    import torch

    from pytest_gpuperf.models.registry import get_spec

    name, batch, seq, dtype_name = TRAINING[_kind(perf)]
    spec = get_spec(name)
    device = target.device.torch_device
    slowdown = perf.settings.slowdown(SUITE)
    model = spec.build(seed=0, device=device, dtype=getattr(torch, dtype_name) if dtype_name else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    generator = torch.Generator(device=device).manual_seed(0)
    tokens = torch.randint(0, spec.vocab_size, (heavier(batch, slowdown), seq + 1), device=device, generator=generator)
    inputs, targets = tokens[:, :-1], tokens[:, 1:]

    def step() -> Any:
        loss = spec.loss(model, inputs, targets)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    first = step().item()
    assert math.isfinite(first), f"the first training step's loss is {first}"
    sync = torch.cuda.synchronize if target.gpu else None
    perf.measure("tokens_per_s", step, unit="tok/s", work=batch * seq, sync=sync)
    record = perf.metric("tokens_per_s")
    record.context.update(model=name, batch=batch, seq_len=seq, dtype=dtype_name or "float32")
    if target.gpu:
        found = datasheet_peak(torch.cuda.get_device_name(), dtype_name)
        if not isinstance(found, str):
            achieved = summarize(record.samples).median * spec.training_flops_per_token(seq) / 1e12
            record.context["mfu_percent"] = round(100 * achieved / found[1], 2)
    note_slowdown(perf, "tokens_per_s", slowdown)
    apply_floor(perf, "tokens_per_s", "training_step")
    stamp(perf, target)


@pytest.fixture
def node_mesh(perf: Any, request: pytest.FixtureRequest) -> Any:
    """Every GPU of the node as one mesh (NCCL/RCCL), or CPU_RANKS gloo ranks on CPU: the distributed suite's
    machinery (distributed/mesh.py), sized by the node rather than by --gpuperf-mesh."""
    from pytest_gpuperf.distributed.environment import torchrun_environment
    from pytest_gpuperf.distributed.mesh import MeshRequest, parse_mesh, unfit_reason
    from pytest_gpuperf.distributed.plugin import cpu_ranks_key

    if perf.device == "cuda":
        import torch

        available = torch.cuda.device_count()
        if available < 2:
            pytest.skip(f"an all-reduce across the node's GPUs needs 2 or more; this process sees {available}")
        spec = parse_mesh(str(available))
    else:
        available = request.config.stash[cpu_ranks_key]
        spec = parse_mesh(str(CPU_RANKS))
    job = torchrun_environment()
    reason = unfit_reason(spec, device=perf.device, available=available, job_world_size=job.world_size if job else None)
    if reason is not None:
        pytest.skip(reason)
    return MeshRequest(spec=spec, device=perf.device)


@pytest.mark.parametrize("accel", [NODE], ids=[NODE.id])
def test_allreduce(perf: Any, accel: LocalDevice, node_mesh: Any) -> None:
    """Bus bandwidth of the largest all-reduce message (nccl-tests' formula), the slowest rank's time per call.
    Node-wide: --gpuperf-inject-slowdown does not reach it (the per-device tests carry the injected slowdown)."""
    from pytest_gpuperf.distributed.collectives import algbw_gbps, bus_factor, time_collective

    max_bytes = ALLREDUCE_MAX_BYTES[_kind(perf)]
    table = node_mesh.launch(
        time_collective, "all_reduce", max_bytes, perf.settings.repeats, perf.settings.warmup, timeout=300
    )[0]
    size = max(table)
    world = node_mesh.world_size
    factor = bus_factor("all_reduce", world)
    perf.record(
        "busbw",
        [algbw_gbps(size, seconds) * factor for seconds in table[size]],
        unit="GB/s",
        higher_is_better=True,
        context={"op": "all_reduce", "bytes": size, "world_size": world, "backend": node_mesh.backend,
                 "bus_factor": factor, "seconds_median": statistics.median(table[size])},
    )  # fmt: skip
    apply_floor(perf, "busbw", "allreduce")
    stamp(perf, Target(accel, None, None))


# -- burn-in --


def _chunk(call: Callable[[], Any], work: float, timer: Any, seconds: float) -> Callable[[], float]:
    """A function that runs ``call`` for about ``seconds`` and returns its rate (``work`` per call per second),
    timed by ``timer`` (CUDA events) or the wall clock."""

    def timed(calls: int) -> float:
        if timer is not None:
            return sum(timer(call, calls))
        started = time.perf_counter()
        for _ in range(calls):
            call()
        return time.perf_counter() - started

    timed(1)  # a first call pays for set-up (cuBLAS handles, page faults): not what one call takes
    once = max(timed(1), 1e-6)
    calls = max(1, math.ceil(seconds / once))
    return lambda: work * calls / timed(calls)


@pytest.mark.burnin
def test_burnin(perf: Any, target: Target, timer: Any, cpu_threads: None) -> None:
    minutes = perf.settings.burnin_minutes
    if minutes is None:
        pytest.skip("the burn-in runs when asked for: --gpuperf-burnin-minutes N (e.g. 30)")
    from pytest_gpuperf.machine.telemetry import TelemetrySampler
    from pytest_gpuperf.micro.burnin import HARDWARE_THROTTLE, health_problems, judge_sag, open_health, sustain
    from pytest_gpuperf.micro.burnin import windows as first_and_last

    kind, device, seconds = _kind(perf), target.device.torch_device, minutes * 60
    slowdown = perf.settings.slowdown(SUITE)
    precision = "bf16" if target.gpu else "fp32"  # fp32: every CPU has a native kernel for it
    side = SQUARE[kind]
    gemm = make_gemm(precision, heavier(side, slowdown), side, side, device)  # more rows: measure_gemm's why
    copy, traffic = memory_call("copy", BANDWIDTH_BYTES[kind], device, slowdown)
    chunk_s = min(1.0, seconds / 60)  # ~30 samples of each load at least, ~1 s each on a long run
    loads = [_chunk(gemm, 2 * side**3 / 1e12, timer, chunk_s), _chunk(copy, traffic / 1e9, timer, chunk_s)]

    problems: list[str] = []
    notes: list[str] = []
    health: HealthSource | None = None
    if target.gpu:
        assert target.device.index is not None
        opened = open_health(target.device.index)
        if isinstance(opened, str):
            pytest.fail(f"the burn-in of {target.device.id} cannot read its fault counters ({opened}): a burn-in "
                        "that cannot see ECC errors or Xid events proves nothing", pytrace=False)  # fmt: skip
        health = opened
        if target.reader is None:
            notes.append(f"no clocks or throttle reasons: {target.note}")
    else:
        notes.append("device telemetry is absent on CPU: no clocks, throttle reasons, ECC or Xid to read")
    before = health.read() if health is not None else None
    if health is not None:
        health.watch_xids()
    sampler = TelemetrySampler(target.reader, interval_s=1.0) if target.reader is not None else None
    with contextlib.ExitStack() as stack:
        if sampler is not None:
            stack.enter_context(sampler)
        series = sustain(loads, seconds)
    context: dict[str, Any] = {"burnin_minutes": minutes, "precision": precision}
    if health is not None and before is not None:
        xids, unread = health.xids()
        after = health.read()
        health.close()
        found, noted = health_problems(before, after, xids)
        problems += found
        notes += noted + ([unread] if unread else [])
        context["health"] = {"before": before.as_dict(), "after": after.as_dict(), "xids": xids}
    if sampler is not None:
        summary = sampler.trace.summary()
        context["telemetry"] = {**summary.to_dict(), "device_name": target.reader.device_name}
        hardware = [reason for reason in summary.throttle_reasons if reason in HARDWARE_THROTTLE]
        if hardware:
            problems.append(f"hardware slowdown during the burn-in ({', '.join(hardware)})")
    for (name, unit, label), samples in zip(
        (("sustained_tflops", "TFLOP/s", f"{precision} GEMM"), ("sustained_copy_gbps", "GB/s", "memory copy")),
        series,
    ):
        rates = [rate for _, rate in samples]
        first, last = first_and_last([t for t, _ in samples])
        sag = judge_sag([rates[i] for i in first], [rates[i] for i in last])
        if sag.sagged and target.gpu:
            problems.append(f"{label}: {sag.message}")
        elif sag.sagged:
            notes.append(f"{label}: {sag.message} (on a CPU, whose throughput over minutes follows the host's other "
                         "work, a sag is reported, not failed)")  # fmt: skip
        perf.record(name, rates, unit=unit, higher_is_better=True,
                    context={**context, "sag": sag.as_dict(), "notes": list(notes)})  # fmt: skip
        note_slowdown(perf, name, slowdown)
    stamp(perf, target)
    if problems:
        pytest.fail(f"burn-in of {target.device.id} over {minutes:g} min: " + "; ".join(problems), pytrace=False)
