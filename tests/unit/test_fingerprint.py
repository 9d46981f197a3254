"""The fingerprint: what is keyed, what is only recorded, and reading accelerators without CUDA."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import types
from pathlib import Path

import pytest

from pytest_gpuperf.machine import fingerprint
from pytest_gpuperf.machine.fingerprint import collect, cpu_type_slug, hardware_slug, parse_cpuinfo, stack_changes

CPUINFO = Path(__file__).parents[1] / "helpers" / "cpuinfo"
"""/proc/cpuinfo samples: amd-epyc-zen4-vm.txt is this project's CI machine, verbatim; the others are that file
with what a Zen 3 (family 25, model 1) VM or a hypervisor that hides AVX-512 changes, and the first processor of
a Sapphire Rapids host and a Graviton3 VM."""
REPO = Path(__file__).parents[2]

try:
    TORCH_INSTALLED = bool(importlib.metadata.version("torch"))
except importlib.metadata.PackageNotFoundError:
    TORCH_INSTALLED = False


def test_cpu_fingerprint_keys_hardware_not_host() -> None:
    found = collect("cpu")
    key = found.hardware_key
    assert key["device"] == "cpu" and key["accelerator"] is None and key["nodes"] == 1
    assert key["cpu"]["cores"] >= 1 and key["cpu"]["isa"] and found.labels["cpu"]
    assert found.labels["cpu"] not in repr(key) or key["cpu"]["vendor"] == "unknown"  # the name is for people
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
        "cpu": {"vendor": "intel", "family": "6", "model": "143", "isa": "amx-bf16", "cores": 112, "ram_gib": 2015},
        "accelerator": {"name": "NVIDIA H200", "count": 8, "memory_gib": 141, "arch": "sm_90", "partition": "none"},
    }
    slug = hardware_slug(h200)
    assert slug == "8x-nvidia-h200-141gib-sm-90-host-intel-f6m143-amx-bf16-112c-2015gib"
    mig = dict(h200, accelerator=dict(h200["accelerator"], partition="mig"), nodes=2)
    assert hardware_slug(mig) != slug and hardware_slug(mig).endswith(
        "-mig-host-intel-f6m143-amx-bf16-112c-2015gib-2nodes"
    )


def _sample_key(name: str, *, cores: int = 2, ram_gib: int = 24) -> tuple[dict, str]:
    cpu_type, model_name = parse_cpuinfo((CPUINFO / name).read_text())
    key = {"device": "cpu", "accelerator": None, "cpu": {**cpu_type, "cores": cores, "ram_gib": ram_gib}, "nodes": 1}
    return key, model_name


def test_one_cpu_name_with_and_without_avx512_gets_two_keys() -> None:
    """All three VMs call their CPU "AMD EPYC"; keyed by that name they shared baselines (issue 16, item 13)."""
    zen4, zen4_name = _sample_key("amd-epyc-zen4-vm.txt")
    hidden, hidden_name = _sample_key("amd-epyc-zen4-avx512-hidden-vm.txt")
    zen3, zen3_name = _sample_key("amd-epyc-zen3-vm.txt")
    assert zen4_name == hidden_name == zen3_name == "AMD EPYC"
    assert zen4["cpu"]["isa"] == "avx512-bf16" and hidden["cpu"]["isa"] == "avx2" and zen3["cpu"]["isa"] == "avx2"
    assert (zen4["cpu"]["family"], zen4["cpu"]["model"]) == ("25", "17")
    assert (zen3["cpu"]["family"], zen3["cpu"]["model"]) == ("25", "1")
    slugs = {hardware_slug(zen4), hardware_slug(hidden), hardware_slug(zen3)}
    assert len(slugs) == 3
    # ...and the old rule gave all three one folder:
    assert {fingerprint.legacy_hardware_slug(k, "AMD EPYC") for k in (zen4, hidden, zen3)} == {"cpu-amd-epyc-2c-24gib"}


def test_this_machine_keys_to_the_committed_baselines_folder() -> None:
    key, name = _sample_key("amd-epyc-zen4-vm.txt", cores=2, ram_gib=24)
    assert hardware_slug(key) == "cpu-amd-f25m17-avx512-bf16-2c-24gib"
    assert (REPO / "baselines" / hardware_slug(key)).is_dir()
    assert fingerprint.legacy_hardware_slug(key, name) == "cpu-amd-epyc-2c-24gib"  # what `baselines rekey` moves
    golden = f"tiny-llama-seed0-fp32-cpu-{cpu_type_slug(key['cpu'])}.json"
    assert (REPO / "pytest_gpuperf" / "suites" / "goldens" / "inference" / golden).is_file()


@pytest.mark.parametrize(
    ("sample", "cpu_type"),
    [
        ("intel-xeon-sapphire-rapids.txt", {"vendor": "intel", "family": "6", "model": "143", "isa": "amx-bf16"}),
        ("aws-graviton3.txt", {"vendor": "arm", "family": "8", "model": "0xd40", "isa": "sve-bf16"}),
    ],
)
def test_other_vendors_are_keyed_by_type_and_isa(sample: str, cpu_type: dict[str, str]) -> None:
    assert parse_cpuinfo((CPUINFO / sample).read_text())[0] == cpu_type


def test_without_cpuinfo_the_name_is_all_there_is_to_key_by(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fingerprint.platform, "processor", lambda: "arm")
    cpu, name = fingerprint.read_cpu("")
    assert {cpu["vendor"], cpu["isa"]} == {"unknown"} and cpu["name"] == name == "arm"
    assert cpu_type_slug(cpu) == "arm"


def test_isa_caps_set_in_the_environment_are_recorded_in_the_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    stack = fingerprint.read_stack()
    assert stack["onednn_max_cpu_isa"] == "AVX2" and "aten_cpu_capability" not in stack


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
    cpu, name = fingerprint.read_cpu()
    assert name == "unknown" and cpu["isa"] == "unknown" and cpu["ram_gib"] == "unknown"


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
