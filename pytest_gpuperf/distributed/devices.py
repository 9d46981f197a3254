"""Which accelerators each pytest-xdist worker may use, so parallel workers never share a device.

Pure functions plus one helper that applies the result to an environment; no torch (device counting reads the
driver's files), so it can run in ``pytest_configure`` before anything initialises CUDA or ROCm.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

VISIBLE_DEVICE_VARIABLES = ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def worker_index(worker_id: str) -> int:
    """The number in an xdist worker id: ``gw3`` -> 3."""
    digits = worker_id.removeprefix("gw")
    if not digits.isdigit():
        raise ValueError(f"PYTEST_XDIST_WORKER={worker_id!r} is not of the form gwN")
    return int(digits)


def devices_for_worker(index: int, worker_count: int, device_count: int) -> tuple[int, ...]:
    """Device indices worker ``index`` of ``worker_count`` gets out of ``device_count``.

    Devices are dealt in contiguous blocks as even as possible (8 devices, 3 workers: 3, 3, 2), so that a
    multi-rank test in one worker keeps its ranks on neighbouring devices. With fewer devices than workers each
    worker gets one device, shared round-robin: timings are then contended, which is the user's choice of -n.
    """
    if worker_count < 1:
        raise ValueError(f"worker count must be at least 1, got {worker_count}")
    if not 0 <= index < worker_count:
        raise ValueError(f"worker index {index} is outside 0..{worker_count - 1}")
    if device_count < 0:
        raise ValueError(f"device count must not be negative, got {device_count}")
    if device_count == 0:
        return ()
    if device_count < worker_count:
        return (index % device_count,)
    base, extra = divmod(device_count, worker_count)
    start = index * base + min(index, extra)
    size = base + (1 if index < extra else 0)
    return tuple(range(start, start + size))


def count_devices(environ: MutableMapping[str, str] | None = None) -> tuple[str, int]:
    """(visibility variable, number of devices) of this machine, without initialising any runtime.

    An existing CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES list is what the workers split; otherwise the
    driver's own listing (/proc/driver/nvidia/gpus, the ROCm KFD topology) is counted.
    """
    env = os.environ if environ is None else environ
    for name in VISIBLE_DEVICE_VARIABLES:
        if name in env:
            return name, len(_parse_visible(env[name]))
    nvidia = Path("/proc/driver/nvidia/gpus")
    if nvidia.is_dir():
        return "CUDA_VISIBLE_DEVICES", sum(1 for _ in nvidia.iterdir())
    kfd = Path("/sys/class/kfd/kfd/topology/nodes")
    if kfd.is_dir():
        count = 0
        for node in kfd.iterdir():
            gpu_id = node / "gpu_id"
            if gpu_id.is_file() and gpu_id.read_text().strip() not in ("", "0"):
                count += 1
        return "HIP_VISIBLE_DEVICES", count
    return "CUDA_VISIBLE_DEVICES", 0


def _parse_visible(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


def assign_worker_devices(environ: MutableMapping[str, str] | None = None) -> tuple[str, str] | None:
    """Restrict this xdist worker to its own devices by setting the visibility variable in ``environ``.

    Returns the (variable, value) set, or None when this is not an xdist worker, or there is nothing to split.
    Must run before the first CUDA/ROCm call of the process.
    """
    env = os.environ if environ is None else environ
    worker_id = env.get("PYTEST_XDIST_WORKER")
    count = env.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker_id or not count:
        return None
    variable, device_count = count_devices(env)
    if device_count == 0:
        return None
    chosen = devices_for_worker(worker_index(worker_id), int(count), device_count)
    # Index into an existing list so that a user's own restriction is kept, not widened.
    existing = _parse_visible(env[variable]) if variable in env else [str(i) for i in range(device_count)]
    value = ",".join(existing[i] for i in chosen)
    env[variable] = value
    return variable, value
