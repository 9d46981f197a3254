"""Mesh specs of ``--gpuperf-mesh``: parsing, checking against a world size, fitting onto the machine.

Pure module (no torch): the plugin parses the option and parametrizes tests at collection time. The real
``DeviceMesh`` is built in the ranks (``rank.py``); here a mesh is only its shape and dimension names.

Accepted forms: ``2`` (one dimension), ``2x2`` (two unnamed dimensions), ``dp=2,tp=2`` (named). Several meshes
are separated by spaces or ``;``, or by commas between unnamed meshes: ``"1,2,4"``, ``"2 dp=2,tp=2"``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class MeshError(ValueError):
    """A mesh spec that cannot be parsed or built; the message holds the numbers."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshSpec:
    """A mesh to run on: its shape and (optionally) one name per dimension."""

    shape: tuple[int, ...]
    """Ranks along each dimension; their product is the world size."""
    names: tuple[str, ...] | None = None
    """Dimension names (``dp``, ``tp``...), or None for unnamed dimensions."""

    def __post_init__(self) -> None:
        if not self.shape or any(not isinstance(n, int) or n < 1 for n in self.shape):
            raise MeshError(f"mesh shape must be whole numbers >= 1, got {self.shape!r}")
        if self.names is not None:
            if len(self.names) != len(self.shape):
                raise MeshError(f"mesh names {self.names!r} do not match its {len(self.shape)} dimensions")
            if len(set(self.names)) != len(self.names):
                raise MeshError(f"mesh names {self.names!r} repeat a name")

    @property
    def world_size(self) -> int:
        return math.prod(self.shape)

    @property
    def label(self) -> str:
        """The canonical text form, also the test id: ``2``, ``2x2``, ``dp=2,tp=2``."""
        if self.names is None:
            return "x".join(str(n) for n in self.shape)
        return ",".join(f"{name}={n}" for name, n in zip(self.names, self.shape))

    def size(self, name: str) -> int:
        """Ranks along dimension ``name``; 1 for a dimension the mesh does not have."""
        if self.names is None or name not in self.names:
            return 1
        return self.shape[self.names.index(name)]

    def named(self, names: tuple[str, ...]) -> MeshSpec:
        """This mesh with ``names`` given to unnamed dimensions; a named mesh must already use exactly them."""
        if self.names is None:
            if len(names) != len(self.shape):
                raise MeshError(
                    f"mesh {self.label} has {len(self.shape)} dimension(s) but {len(names)} are needed "
                    f"({', '.join(names)}); pass e.g. {','.join(f'{n}=2' for n in names)}"
                )
            return MeshSpec(shape=self.shape, names=names)
        if self.names != names:
            raise MeshError(f"mesh {self.label} has dimensions {', '.join(self.names)}; needed {', '.join(names)}")
        return self

    def check_world_size(self, world_size: int) -> None:
        """torchtitan ParallelDims style: the product of the dimensions must equal the world size."""
        if self.world_size != world_size:
            names = self.names or tuple(f"dim{i}" for i in range(len(self.shape)))
            raise MeshError(
                f"{' * '.join(names)} != world size ({' * '.join(str(n) for n in self.shape)} != {world_size})"
            )


def parse_mesh(text: str) -> MeshSpec:
    """One mesh: ``4``, ``2x2`` or ``dp=2,tp=2``."""
    raw = text.strip()
    if not raw:
        raise MeshError("empty mesh")
    if "=" in raw:
        names: list[str] = []
        shape: list[int] = []
        for part in raw.split(","):
            name, sep, size = part.partition("=")
            name = name.strip()
            if not sep or not _NAME.match(name):
                raise MeshError(f"mesh {raw!r}: expected name=size pairs such as dp=2,tp=2, got {part.strip()!r}")
            shape.append(_size(size, raw))
            names.append(name)
        return MeshSpec(shape=tuple(shape), names=tuple(names))
    return MeshSpec(shape=tuple(_size(part, raw) for part in raw.lower().split("x")))


def _size(text: str, whole: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise MeshError(f"mesh {whole!r}: {text.strip()!r} is not a whole number of ranks") from None
    if value < 1:
        raise MeshError(f"mesh {whole!r}: a dimension of {value} ranks; each needs at least 1")
    return value


def parse_meshes(text: str) -> tuple[MeshSpec, ...]:
    """Several meshes, each test is run on each: ``"1,2,4"``, ``"2 2x2"``, ``"dp=2,tp=2; 4"``."""
    meshes: list[MeshSpec] = []
    for chunk in re.split(r"[\s;]+", text.strip()):
        if not chunk:
            continue
        if "=" in chunk:
            meshes.append(parse_mesh(chunk))
        else:
            meshes.extend(parse_mesh(part) for part in chunk.split(",") if part.strip())
    if not meshes:
        raise MeshError("expected at least one mesh such as 2, 2x2 or dp=2,tp=2")
    labels = [m.label for m in meshes]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise MeshError(f"mesh {', '.join(repeated)} is given twice")
    return tuple(meshes)


def unfit_reason(mesh: MeshSpec, *, device: str, available: int, job_world_size: int | None = None) -> str | None:
    """Why ``mesh`` cannot run here (a skip reason with the numbers), or None when it fits.

    ``available`` is the number of ranks the machine can host: visible CUDA/ROCm devices, or the CPU rank
    limit. Under torchrun (``job_world_size``) the mesh must span exactly the job's ranks.
    """
    if job_world_size is not None:
        try:
            mesh.check_world_size(job_world_size)
        except MeshError as error:
            return f"mesh {mesh.label} does not fit this torchrun job: {error}"
        return None
    if mesh.world_size > available:
        what = "visible CUDA/ROCm device(s)" if device == "cuda" else "CPU ranks allowed (--gpuperf-cpu-ranks)"
        return f"mesh {mesh.label} needs {mesh.world_size} ranks but this machine has {available} {what}"
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshRequest:
    """What the ``device_mesh`` fixture gives a test: the mesh to run on, and ``launch`` onto it.

    The ``DeviceMesh`` itself lives in the ranks (the test process is not a rank unless pytest runs under
    torchrun): functions run through ``launch`` read it with ``pytest_gpuperf.current_mesh()``.
    """

    spec: MeshSpec
    device: str
    """"cpu" (gloo) or "cuda" (nccl)."""

    @property
    def shape(self) -> tuple[int, ...]:
        return self.spec.shape

    @property
    def names(self) -> tuple[str, ...] | None:
        return self.spec.names

    @property
    def world_size(self) -> int:
        return self.spec.world_size

    @property
    def backend(self) -> str:
        return "nccl" if self.device == "cuda" else "gloo"

    def launch(self, fn: Any, *args: Any, timeout: float = 300.0, names: tuple[str, ...] | None = None) -> list[Any]:
        """``launch(fn, *args)`` over this mesh; ``names`` names an unnamed mesh's dimensions (a named mesh
        must already carry exactly those names)."""
        from pytest_gpuperf.distributed.launch import launch

        spec = self.spec.named(names) if names is not None else self.spec
        return launch(
            fn,
            *args,
            world_size=spec.world_size,
            mesh_shape=spec.shape,
            mesh_dim_names=spec.names,
            timeout=timeout,
            device=self.device,
        )
