"""Environment fingerprint: the hardware key that baselines are matched on, and the stack that explains changes.

The hardware key must match for two measurements to be compared; the stack (driver, runtimes, libraries) is
recorded and diffed to attribute a change, never keyed. Hostname, GPU UUID, temperatures and clocks are never
keyed. The CPU is keyed by what changes its speed (vendor, family, model, the widest vector ISA the math libraries
use, cores, RAM class), not its marketing name, which is kept in ``labels`` (why: docs/baselines.md). Invariant:
nothing here initialises CUDA in the calling process (NVML, amdsmi, the vendors' tools, else a short-lived
subprocess), and what cannot be read is "unknown". machine/: imports no core/.
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

from pytest_gpuperf.machine.identity import named_identity, read_gpu_uuids, read_identity

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
    labels: dict[str, str] = field(default_factory=dict)
    """Names for people, never matched: ``labels["cpu"]`` is the CPU's model name ("AMD EPYC")."""
    machine: dict[str, Any] = field(default_factory=dict)
    """Which machine of the key this is (machine/identity.py): {"id", "host", "parts"}; empty where not read."""

    @property
    def slug(self) -> str:
        return hardware_slug(self.hardware_key)

    @property
    def machine_id(self) -> str | None:
        value = self.machine.get("id")
        return value if isinstance(value, str) and value else None

    def as_dict(self) -> dict[str, Any]:
        document = {
            "hardware_key": self.hardware_key,
            "hardware_slug": self.slug,
            "stack": self.stack,
            "labels": self.labels,
        }
        if self.machine:
            document["machine"] = self.machine
        return document

    @property
    def legacy_slug(self) -> str:
        """The folder name this machine had before the CPU was keyed by family/model/ISA (by its model name)."""
        return legacy_hardware_slug(self.hardware_key, self.labels.get("cpu", UNKNOWN))


def hardware_slug(key: dict[str, Any]) -> str:
    """A folder name for a hardware key: readable, lowercase, only [a-z0-9-]."""
    cpu = key.get("cpu", {})
    return _assemble_slug(key, f"{cpu_type_slug(cpu)}-{cpu.get('cores', 0)}c-{cpu.get('ram_gib', 0)}gib")


def cpu_type_slug(cpu: dict[str, Any]) -> str:
    """The CPU type without its size: 'amd-f25m17-avx512-bf16'. Goldens of numerics are keyed by this alone."""
    if cpu.get("vendor", UNKNOWN) == UNKNOWN and "name" in cpu:
        return slugify(_short_cpu(str(cpu["name"])))  # nothing but a name could be read: the name must do
    return slugify(
        f"{cpu.get('vendor', UNKNOWN)}-f{cpu.get('family', UNKNOWN)}m{cpu.get('model', UNKNOWN)}-"
        f"{cpu.get('isa', UNKNOWN)}"
    )


def legacy_hardware_slug(key: dict[str, Any], cpu_name: str) -> str:
    """The slug of ``key`` under the former rule, which keyed the CPU by its model name (for migrating)."""
    cpu = key.get("cpu", {})
    return _assemble_slug(key, f"{_short_cpu(cpu_name)}-{cpu.get('cores', 0)}c-{cpu.get('ram_gib', 0)}gib")


def _assemble_slug(key: dict[str, Any], cpu_part: str) -> str:
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


def collect(device: str, *, extra_stack: dict[str, str] | None = None, machine_name: str | None = None) -> Fingerprint:
    """Read the fingerprint for measurements on ``device`` ("cpu" or "cuda"); ``machine_name`` replaces the
    machine's identity read from the system (the ``pytest_gpuperf_machine`` hook)."""
    stack = read_stack()
    accelerator = None
    if device == "cuda":
        accelerator, accel_stack = read_accelerators()
        stack.update({k: v for k, v in accel_stack.items() if v != UNKNOWN or k not in stack})
    if extra_stack:
        stack.update(extra_stack)
    cpu, name = read_cpu()
    key: dict[str, Any] = {"device": device, "accelerator": accelerator, "cpu": cpu, "nodes": read_nodes()}
    if machine_name is not None:
        machine = named_identity(machine_name)
    else:
        machine = read_identity(gpu_uuids=read_gpu_uuids() if device == "cuda" else None)
    return Fingerprint(
        hardware_key=key, stack=dict(sorted(stack.items())), labels={"cpu": name}, machine=machine.as_dict()
    )


# The widest vector ISA, best first, as (name, /proc/cpuinfo flags that must all be present). On x86 these are
# the levels oneDNN dispatches GEMMs on (its ONEDNN_MAX_CPU_ISA names avx512_core_amx_fp16 ... avx2) and ATen
# picks its AVX512/AVX2 kernels by; a hypervisor that hides AVX-512 changes the level, not the family/model.
_X86_ISA: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("amx-fp16", ("amx_tile", "amx_bf16", "amx_fp16")),
    ("amx-bf16", ("amx_tile", "amx_bf16")),
    ("avx512-fp16", ("avx512f", "avx512_fp16")),
    ("avx512-bf16", ("avx512f", "avx512_bf16")),
    ("avx512-vnni", ("avx512f", "avx512_vnni")),
    ("avx512", ("avx512f",)),
    ("avx2-vnni", ("avx2", "avx_vnni")),
    ("avx2", ("avx2",)),
    ("avx", ("avx",)),
    ("sse4", ("sse4_2",)),
)
# aarch64 "Features": SVE/SVE2 and the BF16 dot-product instructions are what KleidiAI/oneDNN/ACL select on.
_ARM_ISA: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("sve2-bf16", ("sve2", "bf16")),
    ("sve-bf16", ("sve", "bf16")),
    ("sve2", ("sve2",)),
    ("sve", ("sve",)),
    ("neon-bf16", ("asimd", "bf16")),
    ("neon", ("asimd",)),
)
_X86_VENDORS = {"AuthenticAMD": "amd", "GenuineIntel": "intel", "HygonGenuine": "hygon", "CentaurHauls": "centaur"}
# "CPU implementer" codes of the Arm ARM (MIDR_EL1.Implementer).
_ARM_IMPLEMENTERS = {
    "0x41": "arm",
    "0x42": "broadcom",
    "0x43": "cavium",
    "0x46": "fujitsu",
    "0x48": "hisilicon",
    "0x4e": "nvidia",
    "0x51": "qualcomm",
    "0x61": "apple",
    "0x6d": "microsoft",
    "0xc0": "ampere",
}


def parse_cpuinfo(text: str) -> tuple[dict[str, str], str]:
    """(the keyed CPU type: vendor, family, model, isa; the model name) from /proc/cpuinfo text.

    The first processor's block is read (all cores of one machine are one type). A field the text lacks is
    "unknown", so an unreadable detail never makes two different CPUs look alike by accident of a default.
    """
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields.get("flags") or fields.get("Features"):
                break  # end of the first processor's block
            continue
        name, _, value = line.partition(":")
        fields.setdefault(name.strip(), value.strip())
    name = next((fields[f] for f in ("model name", "Model", "Hardware") if fields.get(f)), UNKNOWN)
    if "vendor_id" in fields or "cpu family" in fields:
        vendor = _X86_VENDORS.get(fields.get("vendor_id", ""), fields.get("vendor_id") or UNKNOWN)
        family, model = fields.get("cpu family") or UNKNOWN, fields.get("model") or UNKNOWN
        isa = _best_isa(fields.get("flags", ""), _X86_ISA)
    elif "CPU implementer" in fields:
        implementer = fields["CPU implementer"].lower()
        vendor = _ARM_IMPLEMENTERS.get(implementer, implementer)
        family, model = fields.get("CPU architecture") or UNKNOWN, fields.get("CPU part") or UNKNOWN
        isa = _best_isa(fields.get("Features", ""), _ARM_ISA)
    else:
        vendor = family = model = isa = UNKNOWN
    return {"vendor": slugify(vendor), "family": family.lower(), "model": model.lower(), "isa": isa}, name


def _best_isa(flags: str, ladder: tuple[tuple[str, tuple[str, ...]], ...]) -> str:
    present = set(flags.split())
    if not present:
        return UNKNOWN
    return next((isa for isa, needed in ladder if present.issuperset(needed)), "baseline")


def read_cpu(cpuinfo: str | None = None) -> tuple[dict[str, Any], str]:
    """(the CPU part of the hardware key, the CPU's model name for people).

    ``cpuinfo`` is /proc/cpuinfo's text (read from the file when None). Without it (not Linux), vendor, family,
    model and ISA are unknown and the model name from ``platform`` joins the key, the only thing that tells
    two such machines apart.
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as handle:
                cpuinfo = handle.read()
        except OSError:
            cpuinfo = ""
    cpu_type, name = parse_cpuinfo(cpuinfo)
    if name == UNKNOWN and platform.processor():
        name = platform.processor()
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 0
    key: dict[str, Any] = dict(cpu_type)
    if cpu_type["vendor"] == UNKNOWN:
        key["name"] = name
    key.update(cores=cores, ram_gib=_ram_gib())
    return key, name


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
    # These cap the ISA torch's kernels use below what the CPU offers: recorded where set, so a run forced to
    # AVX2 on an AVX-512 machine says why it was slower (they are not keyed: the hardware did not change).
    for variable in ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA"):
        if os.environ.get(variable):
            stack[variable.lower()] = os.environ[variable]
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
    machine_name: str | None = None
    _value: Fingerprint | None = None

    def get(self) -> Fingerprint:
        if self._value is None:
            self._value = collect(self.device, extra_stack=self.extra_stack, machine_name=self.machine_name)
        return self._value
