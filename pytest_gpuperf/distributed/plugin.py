"""pytest hooks of the distributed area: ``--gpuperf-mesh`` and the ``device_mesh`` fixture, the device split
per xdist worker, rank pools stopped with the session.

Listed in the foundation's ``pytest_plugins``; imports nothing heavy (torch only when a test asks for a mesh,
the pool module only if a test used it).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from pytest_gpuperf.core.config.settings import OptionSpec, SettingError, add_options, parse_count, resolve
from pytest_gpuperf.core.session.parametrize import uses_own_fixture
from pytest_gpuperf.distributed.devices import assign_worker_devices
from pytest_gpuperf.distributed.mesh import MeshError, MeshRequest, MeshSpec, parse_mesh, parse_meshes, unfit_reason


def _parse_meshes(text: str) -> tuple[MeshSpec, ...]:
    try:
        return parse_meshes(text)
    except MeshError as error:
        raise SettingError(f"{error}; expected meshes such as 2, 2x2 or dp=2,tp=2") from None


OPTIONS: tuple[OptionSpec[Any], ...] = (
    OptionSpec(
        name="mesh",
        help="meshes the tests using device_mesh run on, e.g. '2', '1,2,4', '2x2', 'dp=2,tp=2'; several "
        "separated by spaces, ';' or (unnamed) commas parametrize the tests (default 2)",
        parse=_parse_meshes,
        default=(MeshSpec(shape=(2,)),),
        metavar="MESHES",
    ),
    OptionSpec(
        name="cpu-ranks",
        help="most ranks a CPU (gloo) mesh may use; larger meshes skip (default 4)",
        parse=parse_count(1),
        default=4,
        metavar="N",
    ),
)

meshes_key = pytest.StashKey[tuple[MeshSpec, ...]]()
cpu_ranks_key = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser, OPTIONS)


def pytest_configure(config: pytest.Config) -> None:
    # Resolved now so that a bad value stops the run before collection, naming the value and its source.
    meshes: Any = resolve(config, OPTIONS[0])[0]  # both options have defaults: never None
    cpu_ranks: Any = resolve(config, OPTIONS[1])[0]
    config.stash[meshes_key] = meshes
    config.stash[cpu_ranks_key] = cpu_ranks
    # Before any test touches CUDA/ROCm: afterwards the visibility variable is no longer read.
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assign_worker_devices()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    # A test that parametrizes device_mesh itself (indirect=True) keeps its own meshes; a test that gets a
    # project's own device_mesh fixture is left alone.
    if uses_own_fixture(metafunc, "device_mesh", __name__):
        meshes = metafunc.config.stash[meshes_key]
        metafunc.parametrize(
            "device_mesh", [m.label for m in meshes], indirect=True, ids=[f"mesh={m.label}" for m in meshes]
        )


@pytest.fixture
def device_mesh(request: pytest.FixtureRequest) -> MeshRequest:
    """The mesh this test runs on (from ``--gpuperf-mesh``, or the test's own indirect parametrization); skips
    when the machine cannot host it. ``device_mesh.launch(fn, *args)`` runs ``fn`` on it."""
    param = getattr(request, "param", None)
    if param is None:
        spec = request.config.stash[meshes_key][0]
    elif isinstance(param, MeshSpec):
        spec = param
    else:
        try:
            spec = parse_mesh(str(param))
        except MeshError as error:
            raise pytest.UsageError(f"device_mesh parameter {param!r} of {request.node.nodeid}: {error}") from None
    from pytest_gpuperf.core.session.state import gpuperf_session
    from pytest_gpuperf.distributed.environment import torchrun_environment

    device = gpuperf_session(request.config).device
    job = torchrun_environment()
    if device == "cuda":
        import torch

        available = torch.cuda.device_count()
    else:
        available = request.config.stash[cpu_ranks_key]
    reason = unfit_reason(
        spec, device=device, available=available, job_world_size=job.world_size if job is not None else None
    )
    if reason is not None:
        pytest.skip(reason)
    return MeshRequest(spec=spec, device=device)


def pytest_unconfigure(config: pytest.Config) -> None:
    pool = sys.modules.get("pytest_gpuperf.distributed.pool")
    if pool is not None:
        pool.shutdown()
