"""Which machine a run was taken on: an identity kept apart from the hardware key.

The hardware key groups machines that may share baselines; the identity tells two of them apart, so a verdict can
say which comparison it made and judge with that comparison's noise. A machine with GPUs is its GPUs (their UUIDs
hold across reboots, VMs and containers); one without is its machine-id and DMI serials, plus its boot id on a
VM (restarted, it may run on another host). The hostname, random per container, is used only when nothing else
can be read. Values are hashed; ``parts`` names what was used.
"""

from __future__ import annotations

import hashlib
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_FILES = {
    "machine-id": "/etc/machine-id",
    "dmi-product-uuid": "/sys/class/dmi/id/product_uuid",
    "dmi-board-serial": "/sys/class/dmi/id/board_serial",
    "dmi-product-serial": "/sys/class/dmi/id/product_serial",
}
_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True, slots=True, kw_only=True)
class MachineIdentity:
    id: str
    """16 hex digits of a SHA-256 over the parts' values: equal on one machine, different between machines."""
    host: str
    """The hostname (of this UTS namespace), for people."""
    parts: tuple[str, ...]
    """What the id was made of (names only, never the values)."""

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "host": self.host, "parts": list(self.parts)}


def read_identity(*, gpu_uuids: list[str] | None = None, root: str = "/") -> MachineIdentity:
    """This machine's identity. ``gpu_uuids`` are the accelerators' UUIDs where the caller read them; ``root``
    lets tests point the readers at a fake file system."""
    host = socket.gethostname()
    values: dict[str, str] = {f"gpu{index}-uuid": uuid for index, uuid in enumerate(gpu_uuids or [])}
    if not values:
        for name, path in _FILES.items():
            text = _read(root, path)
            if text and text.lower() not in {"none", "0", "not specified", "to be filled by o.e.m."}:
                values[name] = text
        if values and _is_virtual(root):
            boot = _read(root, _BOOT_ID)
            if boot:
                values["boot-id"] = boot
    if not values:
        values["hostname"] = host
    digest = hashlib.sha256("\n".join(f"{k}={v}" for k, v in sorted(values.items())).encode()).hexdigest()
    return MachineIdentity(id=digest[:16], host=host, parts=tuple(sorted(values)))


def named_identity(name: str) -> MachineIdentity:
    """The identity of a machine a caller names (a scheduler's node name): the name alone makes the id."""
    digest = hashlib.sha256(f"name={name}".encode()).hexdigest()
    return MachineIdentity(id=digest[:16], host=name, parts=("name",))


def read_gpu_uuids() -> list[str]:
    """The NVIDIA GPUs' UUIDs through NVML, else nvidia-smi; [] where neither answers (AMD: not read yet)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return [
                _text(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(i)))
                for i in range(pynvml.nvmlDeviceGetCount())
            ]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no NVML, no driver, a sandbox refusing a query: try the command line tool
        pass
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()] if done.returncode == 0 else []


def _is_virtual(root: str) -> bool:
    text = _read(root, "/proc/cpuinfo", limit=1 << 20) or ""
    return any(line.startswith("flags") and " hypervisor" in line for line in text.splitlines())


def _read(root: str, path: str, *, limit: int = 4096) -> str | None:
    file = Path(root) / path.lstrip("/")
    try:
        if not file.is_file():
            return None
        with open(file, "rb") as handle:
            return handle.read(limit).decode("utf-8", errors="replace").strip() or None
    except OSError:
        return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
