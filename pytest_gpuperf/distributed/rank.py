"""Rank-side state: the process group, the device mesh and the task being run, in whichever process is a rank.

Used both by the pooled rank processes (``worker.py``) and, under torchrun, by pytest itself. torch is imported
inside the functions so that importing this module stays cheap. What DeepSpeed needs to run inside these ranks on
a CPU (LOCAL_RANK, the ops it must not compile, no fp16, a client optimizer, never its own launcher):
docs/design/deepspeed-on-cpu.md.
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.distributed.device_mesh import DeviceMesh


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One call of ``fn(*args)`` to run in every rank (pickled by reference: fn must be importable)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    mesh_shape: tuple[int, ...] | None = None
    mesh_dim_names: tuple[str, ...] | None = None


class _RankState:
    __slots__ = ("device_type", "meshes", "mesh")

    def __init__(self) -> None:
        self.device_type = "cpu"
        self.meshes: dict[tuple[tuple[int, ...], tuple[str, ...] | None], DeviceMesh] = {}
        self.mesh: DeviceMesh | None = None


_state = _RankState()


def init_process_group(
    *,
    backend: str,
    device_type: str,
    timeout_s: float,
    rank: int | None = None,
    world_size: int | None = None,
    store: Any = None,
    local_rank: int = 0,
) -> None:
    """Initialise the default process group once, with a short timeout (gloo's default is 30 minutes)."""
    import torch
    import torch.distributed as dist

    _state.device_type = device_type
    if dist.is_initialized():
        return
    if device_type == "cuda":
        # Before the process group so that NCCL binds this rank's device, not device 0 on every rank.
        torch.cuda.set_device(local_rank)
    kwargs: dict[str, Any] = {"backend": backend, "timeout": datetime.timedelta(seconds=timeout_s)}
    if store is not None:
        kwargs.update(store=store, rank=rank, world_size=world_size)
    dist.init_process_group(**kwargs)


def _mesh(shape: tuple[int, ...], names: tuple[str, ...] | None) -> DeviceMesh:
    # Built once per shape and reused: each 2-D mesh creates sub-groups, which must not pile up across tasks.
    key = (shape, names)
    mesh = _state.meshes.get(key)
    if mesh is None:
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh(_state.device_type, shape, mesh_dim_names=names)
        _state.meshes[key] = mesh
    return mesh


def run_task(task: Task) -> Any:
    """Run one task in this rank with its mesh (if any) available through ``current_mesh()``."""
    _state.mesh = _mesh(task.mesh_shape, task.mesh_dim_names) if task.mesh_shape else None
    try:
        return task.fn(*task.args)
    finally:
        _state.mesh = None


def current_mesh() -> DeviceMesh:
    """The DeviceMesh of the ``launch()`` call running in this rank."""
    if _state.mesh is None:
        raise RuntimeError(
            "current_mesh() has no mesh: call it from a function run by launch(..., mesh_shape=(...)); "
            "launch() without mesh_shape sets up only the process group"
        )
    return _state.mesh


def validate_mesh(world_size: int, mesh_shape: tuple[int, ...] | None, mesh_dim_names: tuple[str, ...] | None) -> None:
    """Reject a mesh that cannot be built, with the numbers in the message."""
    if mesh_shape is None:
        if mesh_dim_names is not None:
            raise ValueError(f"mesh_dim_names={mesh_dim_names!r} given without mesh_shape")
        return
    if not mesh_shape or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in mesh_shape):
        raise ValueError(f"mesh_shape must be positive integers, got {mesh_shape!r}")
    if math.prod(mesh_shape) != world_size:
        product = " * ".join(str(n) for n in mesh_shape)
        raise ValueError(
            f"mesh_shape {mesh_shape!r} needs {math.prod(mesh_shape)} ranks ({product}) "
            f"but world_size is {world_size}; make them agree"
        )
    if mesh_dim_names is not None:
        if len(mesh_dim_names) != len(mesh_shape):
            raise ValueError(
                f"mesh_dim_names {mesh_dim_names!r} has {len(mesh_dim_names)} names "
                f"for {len(mesh_shape)} mesh dimensions {mesh_shape!r}"
            )
        if len(set(mesh_dim_names)) != len(mesh_dim_names):
            raise ValueError(f"mesh_dim_names {mesh_dim_names!r} repeats a name")
