"""``launch()``: run a function in N ranks and return each rank's result, spawned locally or under torchrun.

Two modes, chosen by the environment:

- pytest was started normally: N rank processes are spawned (and pooled, see ``pool.py``) with torchrun's
  environment contract and an initialised process group; pytest itself is not a rank.
- pytest was started by torchrun or ``srun`` (the torchrun variables are set): nothing is spawned. This process
  is one rank of the job; ``fn`` runs here and the results of all ranks are gathered so every rank returns the
  same list. Only ``is_reporting_rank()`` judges, saves and reports.
"""

from __future__ import annotations

import faulthandler
import math
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from pytest_gpuperf.distributed import pool as pool_module
from pytest_gpuperf.distributed import wire
from pytest_gpuperf.distributed.environment import RankEnvironment, torchrun_environment
from pytest_gpuperf.distributed.errors import FailureKind, LaunchError, RankFailed, RankFailure
from pytest_gpuperf.distributed.rank import Task, init_process_group, run_task, validate_mesh

T = TypeVar("T")

DEFAULT_TIMEOUT_S = 300.0


def _function_name(fn: Callable[..., Any]) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _resolve_device(device: str | None) -> str:
    if device is None:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cpu", "cuda"):
        raise LaunchError(f"launch(device={device!r}): expected 'cpu' or 'cuda' (ROCm devices are 'cuda' in torch)")
    return device


def launch(
    fn: Callable[..., T],
    *args: Any,
    world_size: int | None = None,
    timeout: float = DEFAULT_TIMEOUT_S,
    mesh_shape: Sequence[int] | None = None,
    mesh_dim_names: Sequence[str] | None = None,
    backend: str | None = None,
    device: str | None = None,
) -> list[T]:
    """Run ``fn(*args)`` in every rank and return the list of the ranks' return values, by rank.

    ``fn`` must be a module-level function (it is pickled by reference), its arguments and return value
    picklable; return CPU values, so that the parent does not initialise an accelerator to unpickle them.
    In each rank the torchrun variables (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
    MASTER_PORT) are set and the default process group is initialised (gloo on CPU, nccl on CUDA, with a short
    timeout, GPUPERF_PG_TIMEOUT seconds, default 60). With ``mesh_shape`` (and optional ``mesh_dim_names``) a
    ``DeviceMesh`` of that shape is available to ``fn`` through ``current_mesh()``.

    ``world_size`` defaults to the product of ``mesh_shape``, or under torchrun to WORLD_SIZE. ``timeout`` bounds
    the call in seconds (rank start-up excluded). ``device`` is "cpu" or "cuda" (default: cuda when available).

    Raises ``RankFailed`` (with the failing rank, a ``FailureKind``, its traceback or a stack dump of where it
    hung) when a rank raises, hangs past ``timeout``, exits or is killed; the ranks are then torn down and the
    next call starts fresh ones. Raises ``LaunchError`` when the call cannot be started as asked.
    """
    shape = tuple(mesh_shape) if mesh_shape is not None else None
    names = tuple(mesh_dim_names) if mesh_dim_names is not None else None
    try:
        job = torchrun_environment()
    except ValueError as exc:
        raise LaunchError(f"launch(): {exc}") from None
    if world_size is None:
        if shape is not None:
            world_size = math.prod(shape)
        elif job is not None:
            world_size = job.world_size
        else:
            raise LaunchError("launch() needs world_size=N (or mesh_shape=...) outside torchrun")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise LaunchError(f"launch(world_size={world_size!r}): expected a whole number of ranks >= 1")
    if (
        isinstance(timeout, bool)
        or not isinstance(timeout, (int, float))
        or not math.isfinite(timeout)
        or not timeout > 0
    ):
        raise LaunchError(f"launch(timeout={timeout!r}): expected a finite, positive number of seconds")
    try:
        validate_mesh(world_size, shape, names)
    except ValueError as exc:
        raise LaunchError(f"launch(): {exc}") from None
    task = Task(fn=fn, args=tuple(args), mesh_shape=shape, mesh_dim_names=names)
    device_type = _resolve_device(device)
    backend = backend or ("nccl" if device_type == "cuda" else "gloo")
    if job is not None:
        return _run_in_this_rank(
            task, job, world_size=world_size, timeout_s=timeout, backend=backend, device_type=device_type
        )
    limit = pool_module.max_local_ranks()
    if world_size > limit:
        raise LaunchError(
            f"launch(world_size={world_size}) is more than the {limit} ranks this machine may spawn "
            f"({pool_module.RANKS_PER_CORE} per core, at least {pool_module.MIN_RANK_LIMIT}); lower world_size, "
            "set GPUPERF_MAX_RANKS to allow more, or run under torchrun across nodes"
        )
    if device_type == "cuda":
        import torch

        available = torch.cuda.device_count()
        if world_size > available:
            raise LaunchError(
                f"launch(world_size={world_size}) needs {world_size} CUDA devices but {available} are visible "
                "(CUDA_VISIBLE_DEVICES/HIP_VISIBLE_DEVICES and the xdist split count); lower world_size or -n"
            )
    try:
        payload = wire.encode(("run", list(sys.path), wire.encode(task)))
    except Exception as exc:
        raise LaunchError(
            f"launch() could not pickle {_function_name(fn)} or its arguments ({type(exc).__name__}: {exc}); "
            "the function must be defined at module level and its arguments picklable"
        ) from exc
    key = pool_module.PoolKey(world_size=world_size, backend=backend, device_type=device_type)
    ranks = pool_module.get_pool(key)
    try:
        return ranks.run(payload, timeout_s=timeout, function=_function_name(fn))
    except BaseException:
        # RankFailed has already killed the ranks; anything else (Ctrl-C) must not leave them running.
        pool_module.discard_pool(key)
        raise


def _dump_all_threads(rank: int, timeout_s: float) -> None:
    sys.stderr.write(f"gpuperf: rank {rank} still running after the {timeout_s:g} s launch() timeout; its threads:\n")
    sys.stderr.flush()
    try:
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
    except (AttributeError, OSError, ValueError):  # a stderr without a descriptor (an in-process capture)
        faulthandler.dump_traceback(file=2, all_threads=True)


def _run_in_this_rank(
    task: Task, job: RankEnvironment, *, world_size: int, timeout_s: float, backend: str, device_type: str
) -> list[Any]:
    """torchrun mode: run here, gather every rank's outcome, raise the same RankFailed on every rank."""
    if world_size != job.world_size:
        raise LaunchError(
            f"launch(world_size={world_size}) but this process is rank {job.rank} of a torchrun job of "
            f"WORLD_SIZE={job.world_size}; under torchrun a test must use the job's world size"
        )
    import torch.distributed as dist

    init_process_group(
        backend=backend,
        device_type=device_type,
        timeout_s=pool_module.default_pg_timeout_s(),
        local_rank=job.local_rank,
    )
    # No process to kill here: print where this rank is when the timeout passes, and let the process group
    # timeout end a collective that waits for a dead peer. A thread, not faulthandler.dump_traceback_later:
    # that timer is one per process and the test's time budget (core/session/budget.py) holds it.
    dump = threading.Timer(timeout_s, _dump_all_threads, args=(job.rank, timeout_s))
    dump.daemon = True
    dump.start()
    try:
        outcome: tuple[Any, ...] = ("ok", run_task(task))
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        from pytest_gpuperf.distributed.worker import format_user_traceback, summarize_exception

        outcome = ("error", summarize_exception(exc), format_user_traceback(exc))
    finally:
        dump.cancel()
    gathered: list[Any] = [None] * world_size
    try:
        dist.all_gather_object(gathered, outcome)
    except RuntimeError as exc:
        # A peer process or a whole node is gone (killed, out of memory, node lost): the gather fails at once on
        # a closed connection, or after the process-group timeout when the node vanished without one.
        from pytest_gpuperf.distributed.worker import summarize_exception

        raise RankFailed(
            [
                RankFailure(
                    rank=job.rank,
                    kind=FailureKind.LOST,
                    summary=(
                        "a peer rank is gone (its process or its node died): the outcomes of the other ranks "
                        f"could not be gathered ({summarize_exception(exc)}); torchrun cannot replace a rank "
                        "inside a pytest session, so the job ends"
                    ),
                    detail=outcome[2] if outcome[0] == "error" else "",
                )
            ],
            world_size=world_size,
            function=_function_name(task.fn),
            spawned=False,
        ) from None
    failures = [
        RankFailure(rank=r, kind=FailureKind.RAISED, summary=o[1], detail=o[2])
        for r, o in enumerate(gathered)
        if o[0] == "error"
    ]
    if failures:
        raise RankFailed(failures, world_size=world_size, function=_function_name(task.fn), spawned=False)
    return [o[1] for o in gathered]
