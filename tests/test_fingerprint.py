"""The fingerprint: what is keyed, what is only recorded, and reading accelerators without CUDA."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import types

import pytest

from pytest_gpuperf.machine import fingerprint
from pytest_gpuperf.machine.fingerprint import collect, hardware_slug, stack_changes

try:
    TORCH_INSTALLED = bool(importlib.metadata.version("torch"))
except importlib.metadata.PackageNotFoundError:
    TORCH_INSTALLED = False


def test_cpu_fingerprint_keys_hardware_not_host() -> None:
    found = collect("cpu")
    key = found.hardware_key
    assert key["device"] == "cpu" and key["accelerator"] is None and key["nodes"] == 1
    assert key["cpu"]["cores"] >= 1 and key["cpu"]["model"]
    assert "python" in found.stack
    assert ("torch" in found.stack) == TORCH_INSTALLED  # the torch-free run (.ci/run) has none to record
    flat = repr(key)
    import socket

    assert socket.gethostname() not in flat  # hostnames are never keyed
    assert found.slug.startswith("cpu-") and found.slug == hardware_slug(key)


def test_slug_is_a_safe_folder_name_and_separates_parts() -> None:
    h200 = {
        "device": "cuda",
        "nodes": 1,
        "cpu": {"model": "Intel(R) Xeon(R) Platinum 8480+ @ 2.0GHz", "cores": 112, "ram_gib": 2015},
        "accelerator": {"name": "NVIDIA H200", "count": 8, "memory_gib": 141, "arch": "sm_90", "partition": "none"},
    }
    slug = hardware_slug(h200)
    assert slug == "8x-nvidia-h200-141gib-sm-90-host-intel-xeon-platinum-8480-112c-2015gib"
    mig = dict(h200, accelerator=dict(h200["accelerator"], partition="mig"), nodes=2)
    assert hardware_slug(mig) != slug and hardware_slug(mig).endswith(
        "-mig-host-intel-xeon-platinum-8480-112c-2015gib-2nodes"
    )


def test_stack_changes_name_each_component() -> None:
    assert stack_changes(
        {"driver": "580.1", "torch": "2.11", "nccl": "2.27"}, {"driver": "590.2", "torch": "2.11", "rccl": "2.27"}
    ) == ["driver 580.1 -> 590.2", "nccl 2.27 -> absent", "rccl absent -> 2.27"]


def test_nvml_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 8,
        nvmlDeviceGetHandleByIndex=lambda index: "h0",
        nvmlDeviceGetName=lambda handle: b"NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=150_754_820_096),
        nvmlDeviceGetCudaComputeCapability=lambda handle: (9, 0),
        nvmlDeviceGetMigMode=lambda handle: (0, 0),
        nvmlSystemGetDriverVersion=lambda: "580.159.03",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    key, stack = fingerprint._read_nvml()
    assert key == {
        "vendor": "nvidia",
        "name": "NVIDIA H200",
        "count": 8,
        "memory_gib": 140,
        "arch": "sm_90",
        "partition": "none",
    }
    assert stack["driver"] == "580.159.03" and stack["cuda_driver"] == "13.0"


def test_an_nvml_query_refused_after_init_falls_through_to_the_next_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    """gVisor's nvproxy, for one, lets nvmlInit succeed and may refuse a later query: the session must not fail."""

    class NVMLError(Exception):
        pass

    def refused(handle: object) -> tuple[int, int]:
        raise NVMLError("Not Supported")

    shutdowns = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: shutdowns.append(1),
        nvmlDeviceGetCount=lambda: 1,
        nvmlDeviceGetHandleByIndex=lambda index: "h0",
        nvmlDeviceGetName=lambda handle: "NVIDIA H200",
        nvmlDeviceGetMemoryInfo=lambda handle: types.SimpleNamespace(total=150_754_820_096),
        nvmlDeviceGetCudaComputeCapability=refused,
        nvmlSystemGetDriverVersion=lambda: "580.1",
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert fingerprint._read_nvml() is None and shutdowns == [1]
    from_smi = ({"vendor": "nvidia", "name": "NVIDIA H200"}, {"driver": "580.1"})
    monkeypatch.setattr(fingerprint, "_read_nvidia_smi", lambda: from_smi)
    assert fingerprint.read_accelerators() == from_smi


def test_nvidia_smi_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    out = "NVIDIA H100 80GB HBM3, 81559, 9.0, 570.86.15, Disabled\n" * 2
    monkeypatch.setattr(fingerprint.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(
        fingerprint.subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=out, stderr="")
    )
    key, stack = fingerprint._read_nvidia_smi()
    assert key["count"] == 2 and key["arch"] == "sm_90" and key["memory_gib"] == 80 and key["partition"] == "none"
    assert stack["driver"] == "570.86.15"


def test_reading_accelerators_never_initialises_cuda_here() -> None:
    pytest.importorskip("torch")  # what it checks is torch's CUDA state
    code = (
        "import torch\n"
        "from pytest_gpuperf.machine.fingerprint import collect\n"
        "collect('cuda')\n"
        "print('initialised' if torch.cuda.is_initialized() else 'clean')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip().endswith("clean")


def test_missing_pieces_are_unknown_not_guessed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fingerprint, "_ram_gib", lambda: fingerprint.UNKNOWN)
    monkeypatch.setattr(fingerprint.platform, "processor", lambda: "")

    def no_file(*args, **kwargs):
        raise OSError("no /proc")

    monkeypatch.setattr("builtins.open", no_file)
    cpu = fingerprint.read_cpu()
    assert cpu["model"] == "unknown" and cpu["ram_gib"] == "unknown"


@pytest.mark.parametrize(
    ("mem_total_gib", "configured"),
    [
        (23.54, 24),
        (23.49, 24),
        (23.0, 24),
        (24.0, 24),
        (15.6, 16),
        (7.7, 8),
        (31.3, 32),
        (47.1, 48),
        (62.8, 64),
        (125.7, 128),
        (251.5, 256),
        (503.0, 512),
        (1007.4, 1024),
        (2015.0, 2048),
    ],
)
def test_ram_is_keyed_by_the_configured_size_not_the_kernel_remainder(mem_total_gib: float, configured: int) -> None:
    assert fingerprint.ram_size_class(mem_total_gib) == configured
