"""Environment fingerprint: the hardware key that baselines are matched on, and the stack that explains changes.

The hardware key must match for two measurements to be compared. The stack (driver, runtimes, libraries) is
recorded and diffed to attribute a change, never used as a key. Hostname, GPU UUID, temperatures and current
clocks are never keyed.

Nothing here initialises CUDA in the calling process: accelerators are read through NVML or amdsmi when
installed, else nvidia-smi / rocm-smi, else a short-lived subprocess that asks torch. Worker ranks are forked
or spawned later, and a CUDA context in the parent would break them. What cannot be read is "unknown".
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import platform
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any

UNKNOWN = "unknown"

# Versions read from package metadata, so none of these packages is imported.
_PACKAGES = ("torch", "triton", "deepspeed", "torchao", "numpy", "pytorch-triton-rocm")


@dataclass(frozen=True, slots=True, kw_only=True)
class Fingerprint:
    """Where a measurement was taken."""

    hardware_key: dict[str, Any]
    """Must match for a comparison: device kind, accelerator model/count/memory/arch/partition, CPU, nodes."""
    stack: dict[str, str]
    """Recorded to attribute a change: driver, CUDA/HIP, cuDNN/MIOpen, NCCL/RCCL, torch, python, kernel..."""

    @property
    def slug(self) -> str:
        return hardware_slug(self.hardware_key)

    def as_dict(self) -> dict[str, Any]:
        return {"hardware_key": self.hardware_key, "hardware_slug": self.slug, "stack": self.stack}


def hardware_slug(key: dict[str, Any]) -> str:
    """A folder name for a hardware key: readable, lowercase, only [a-z0-9-]."""
    cpu = key.get("cpu", {})
    cpu_part = f"{_short_cpu(str(cpu.get('model', UNKNOWN)))}-{cpu.get('cores', 0)}c-{cpu.get('ram_gib', 0)}gib"
    accel = key.get("accelerator")
    parts: list[str] = []
    if accel:
        parts.append(f"{accel.get('count', 0)}x-{accel.get('name', UNKNOWN)}-{accel.get('memory_gib', 0)}gib")
        parts.append(str(accel.get("arch", UNKNOWN)))
        if accel.get("partition") not in (None, "none", UNKNOWN):
            parts.append(str(accel["partition"]))
        parts.append("host-" + cpu_part)
    else:
        parts.append("cpu-" + cpu_part)
    if key.get("nodes", 1) != 1:
        parts.append(f"{key['nodes']}nodes")
    return slugify("-".join(parts))


def slugify(text: str) -> str:
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    return slug or UNKNOWN


def _short_cpu(model: str) -> str:
    # Marketing noise that does not identify the part.
    cleaned = re.sub(r"\((r|tm)\)|\bcpu\b|\bprocessor\b|@.*$|\b\d+-core\b", " ", model, flags=re.I)
    return " ".join(cleaned.split())


def collect(device: str, *, extra_stack: dict[str, str] | None = None) -> Fingerprint:
    """Read the fingerprint for measurements on ``device`` ("cpu" or "cuda")."""
    stack = read_stack()
    accelerator = None
    if device == "cuda":
        accelerator, accel_stack = read_accelerators()
        stack.update({k: v for k, v in accel_stack.items() if v != UNKNOWN or k not in stack})
    if extra_stack:
        stack.update(extra_stack)
    key: dict[str, Any] = {"device": device, "accelerator": accelerator, "cpu": read_cpu(), "nodes": read_nodes()}
    return Fingerprint(hardware_key=key, stack=dict(sorted(stack.items())))


def read_cpu() -> dict[str, Any]:
    model = UNKNOWN
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
            for line in handle:
                name, _, value = line.partition(":")
                if name.strip() in ("model name", "Model", "Hardware") and value.strip():
                    model = value.strip()
                    break
    except OSError:
        pass
    if model == UNKNOWN and platform.processor():
        model = platform.processor()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    return {"model": model, "cores": cores, "ram_gib": _ram_gib()}


def _ram_gib() -> int | str:
    try:
        with open("/proc/meminfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("MemTotal:"):
                    return ram_size_class(int(line.split()[1]) / 1024**2)
    except (OSError, ValueError, IndexError):
        pass
    return UNKNOWN


def ram_size_class(mem_total_gib: float) -> int:
    """The memory size a machine was configured with, from the kernel's MemTotal, for the hardware key.

    MemTotal is the configured size less what firmware and kernel reserve (1-4%), and it differs by a fraction
    of a GiB between two machines of one type (kernel version, ballooning). Rounding to the nearest GiB keyed one
    24 GiB VM type as 24 or 23 (MemTotal 23.54 GiB), so the same runner found no baseline. Rounding up to a step
    of about 1/8 of the size (at least 2 GiB) lands machines of one configured size on one key: 23.0-24.0 -> 24,
    15.6 -> 16, 1007 -> 1024.
    """
    if mem_total_gib <= 0:
        return 0
    step = max(2, 2 ** (math.floor(math.log2(mem_total_gib)) - 3))
    return int(math.ceil(mem_total_gib / step - 1e-9) * step)


def read_nodes() -> int:
    """Node count of a torchrun job (WORLD_SIZE / LOCAL_WORLD_SIZE), 1 otherwise."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        local = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
        return max(1, world // max(1, local))
    except ValueError:
        return 1


def read_stack() -> dict[str, str]:
    stack = {
        "python": platform.python_version(),
        "kernel": platform.release() or UNKNOWN,
        "os": _os_name(),
    }
    for package in _PACKAGES:
        try:
            stack[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            continue
    stack.update(_torch_build())
    return stack


def _os_name() -> str:
    try:
        with open("/etc/os-release", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("PRETTY_NAME="):
                    return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.system() or UNKNOWN


def _torch_build() -> dict[str, str]:
    """torch's compiled-in versions, read from torch/version.py without importing torch (4-5 s on a loaded CPU
    machine, for every session of a pure-Python suite and every `gpuperf ab` session); from the module when
    torch is already imported or its version file cannot be read."""
    module = sys.modules.get("torch")
    version = getattr(module, "version", None) if module is not None else None
    values = _torch_version_file() if version is None else None
    if values is None:
        try:
            import torch
        except ImportError:
            return {}
        values = {name: getattr(torch.version, name, None) for name in ("git_version", "cuda", "hip")}
    return {
        "torch_git": str(values.get("git_version") or UNKNOWN),
        "cuda_runtime": str(values["cuda"]) if values.get("cuda") else "none",
        "hip_runtime": str(values["hip"]) if values.get("hip") else "none",
    }


def _torch_version_file() -> dict[str, Any] | None:
    """The constants torch/version.py assigns (it holds nothing else), or None where it cannot be read."""
    import ast
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        try:
            tree = ast.parse(open(os.path.join(folder, "version.py"), encoding="utf-8").read())
        except (OSError, SyntaxError, ValueError):
            continue
        values: dict[str, Any] = {}
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else getattr(
                node, "target", None)  # fmt: skip
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
                values[target.id] = value.value
        if "git_version" in values:
            return values
    return None


def read_accelerators() -> tuple[dict[str, Any] | None, dict[str, str]]:
    """(accelerator part of the hardware key, stack fields) without touching CUDA in this process."""
    for reader in (_read_nvml, _read_amdsmi, _read_nvidia_smi, _read_torch_subprocess):
        found = reader()
        if found is not None:
            return found
    return None, {}


def _read_nvml() -> tuple[dict[str, Any], dict[str, str]] | None:
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver, no device: NVML raises its own error classes
        return None
    try:
        found = _nvml_accelerator(pynvml)
    except Exception:
        # A sandbox (gVisor's nvproxy, a container runtime) may pass nvmlInit and refuse a later query with an
        # NVMLError: NVML cannot tell, so the next reader is asked instead of the session failing here.
        return None
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass
    if found is None:
        return None
    key, stack = found
    stack.update(_torch_libraries())
    return key, stack


def _nvml_accelerator(pynvml: Any) -> tuple[dict[str, Any], dict[str, str]] | None:
    """The key and driver fields from an initialised NVML; a required query that fails raises."""
    count = pynvml.nvmlDeviceGetCount()
    if count == 0:
        return None
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    name = _text(pynvml.nvmlDeviceGetName(handle))
    memory = pynvml.nvmlDeviceGetMemoryInfo(handle).total
    major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
    stack = {"driver": _text(pynvml.nvmlSystemGetDriverVersion())}
    partition = "none"
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        partition = "mig" if current else "none"
    except Exception:  # MIG not supported on this part
        pass
    try:
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        stack["cuda_driver"] = f"{cuda // 1000}.{(cuda % 1000) // 10}"
    except Exception:
        pass
    key = {
        "vendor": "nvidia",
        "name": name,
        "count": count,
        "memory_gib": round(memory / 1024**3),
        "arch": f"sm_{major}{minor}",
        "partition": partition,
    }
    return key, stack


def _read_amdsmi() -> tuple[dict[str, Any], dict[str, str]] | None:
    try:
        import amdsmi
    except ImportError:
        return None
    try:
        amdsmi.amdsmi_init()
        handles = amdsmi.amdsmi_get_processor_handles()
        if not handles:
            return None
        asic = amdsmi.amdsmi_get_gpu_asic_info(handles[0])
        vram = amdsmi.amdsmi_get_gpu_vram_info(handles[0])
        driver = amdsmi.amdsmi_get_gpu_driver_info(handles[0])
        partition = UNKNOWN
        try:
            partition = str(amdsmi.amdsmi_get_gpu_compute_partition(handles[0])).lower()
        except Exception:
            pass
        key = {
            "vendor": "amd",
            "name": str(asic.get("market_name", UNKNOWN)),
            "count": len(handles),
            "memory_gib": round(int(vram.get("vram_size", 0)) / 1024),  # reported in MB
            "arch": str(asic.get("target_graphics_version", UNKNOWN)),
            "partition": partition,
        }
        stack = {"driver": str(driver.get("driver_version", UNKNOWN))}
        stack.update(_torch_libraries())
        return key, stack
    except Exception:
        return None
    finally:
        try:
            amdsmi.amdsmi_shut_down()
        except Exception:
            pass


def _read_nvidia_smi() -> tuple[dict[str, Any], dict[str, str]] | None:
    if shutil.which("nvidia-smi") is None:
        return None
    try:
        out = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,memory.total,compute_cap,driver_version,mig.mode.current",
                "--format=csv,noheader,nounits",
            ],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[cell.strip() for cell in line.split(",")] for line in out.strip().splitlines() if line.strip()]
    if not rows or len(rows[0]) < 4:
        return None
    name, memory_mib, cap, driver = rows[0][:4]
    mig = rows[0][4] if len(rows[0]) > 4 else "[N/A]"
    key = {
        "vendor": "nvidia",
        "name": name,
        "count": len(rows),
        "memory_gib": round(float(memory_mib) / 1024) if memory_mib.replace(".", "").isdigit() else UNKNOWN,
        "arch": "sm_" + cap.replace(".", "") if cap[:1].isdigit() else UNKNOWN,
        "partition": "mig" if mig.lower() == "enabled" else "none",
    }
    stack = {"driver": driver}
    stack.update(_torch_libraries())
    return key, stack


_PROBE = """
import json, torch
props = [torch.cuda.get_device_properties(i) for i in range(torch.cuda.device_count())]
arch = getattr(props[0], "gcnArchName", "") if props else ""
print(json.dumps({"count": len(props), "name": props[0].name if props else "",
  "memory": props[0].total_memory if props else 0,
  "cap": f"{props[0].major}{props[0].minor}" if props else "", "gcn": arch}))
"""


def _read_torch_subprocess() -> tuple[dict[str, Any], dict[str, str]] | None:
    """Last resort: ask torch in a child process, so CUDA is initialised there and not here."""
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=120, check=True)
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None
    if not found.get("count"):
        return None
    gcn = str(found.get("gcn") or "").split(":")[0]
    key = {
        "vendor": "amd" if gcn else "nvidia",
        "name": found["name"],
        "count": found["count"],
        "memory_gib": round(found["memory"] / 1024**3),
        "arch": gcn or f"sm_{found['cap']}",
        "partition": UNKNOWN,
    }
    return key, {"driver": UNKNOWN, **_torch_libraries()}


def _torch_libraries() -> dict[str, str]:
    """cuDNN/MIOpen and NCCL/RCCL versions as torch links them (reading them loads libraries, no context)."""
    found: dict[str, str] = {}
    try:
        import torch
    except ImportError:
        return found
    hip = bool(getattr(torch.version, "hip", None))
    try:
        version = torch.backends.cudnn.version()
        if version:
            found["miopen" if hip else "cudnn"] = str(version)
    except Exception:
        pass
    try:
        nccl = torch.cuda.nccl.version()
        found["rccl" if hip else "nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
    except Exception:
        pass
    return found


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def stack_changes(baseline: dict[str, str], current: dict[str, str]) -> list[str]:
    """Components that differ, as 'name old -> new', in a stable order."""
    changes = []
    for name in sorted(set(baseline) | set(current)):
        old, new = baseline.get(name, "absent"), current.get(name, "absent")
        if old != new:
            changes.append(f"{name} {old} -> {new}")
    return changes


@dataclass(slots=True)
class LazyFingerprint:
    """Reads the fingerprint once, on first use, so sessions without perf tests never import torch."""

    device: str
    extra_stack: dict[str, str] = field(default_factory=dict)
    _value: Fingerprint | None = None

    def get(self) -> Fingerprint:
        if self._value is None:
            self._value = collect(self.device, extra_stack=self.extra_stack)
        return self._value
