"""torchrun's environment contract: reading it (are we a rank already?) and writing it (for spawned ranks).

Pure module (no torch), so the plugin can ask ``is_reporting_rank()`` at any time without importing torch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
"""Variables torchrun (and ``srun`` with the recipe in docs/distributed.md) sets in every rank."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RankEnvironment:
    """Where this process sits in a job that torchrun (or Slurm) started."""

    rank: int
    """Global rank."""
    local_rank: int
    """Rank on this node: the device index."""
    world_size: int
    """Number of ranks over all nodes."""
    local_world_size: int
    """Number of ranks on this node."""
    master_addr: str
    master_port: int


def torchrun_environment(environ: Mapping[str, str] | None = None) -> RankEnvironment | None:
    """This process's place in a torchrun job, or None when it was not started as a rank.

    A half-set contract (some variables missing, or not numbers) is an error rather than a silent
    single-process run, since it would otherwise spawn ranks on every node of a multi-node job.
    """
    env = os.environ if environ is None else environ
    present = [name for name in TORCHRUN_VARIABLES if name in env]
    if not present:
        return None
    missing = [name for name in TORCHRUN_VARIABLES if name not in env]
    if missing:
        # WORLD_SIZE alone is exported by some schedulers and tools; it does not make a rank.
        if present == ["WORLD_SIZE"]:
            return None
        raise ValueError(
            f"the environment sets {', '.join(present)} but not {', '.join(missing)}: a rank needs all of "
            f"{', '.join(TORCHRUN_VARIABLES)}; start pytest with torchrun (see docs/distributed.md) or unset them"
        )
    try:
        rank = int(env["RANK"])
        local_rank = int(env["LOCAL_RANK"])
        world_size = int(env["WORLD_SIZE"])
        port = int(env["MASTER_PORT"])
        local_world_size = int(env.get("LOCAL_WORLD_SIZE", world_size))
    except ValueError as exc:
        raise ValueError(f"torchrun environment variable is not an integer: {exc}") from None
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} is outside 0..WORLD_SIZE-1 (WORLD_SIZE={world_size})")
    return RankEnvironment(
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        local_world_size=local_world_size,
        master_addr=env["MASTER_ADDR"],
        master_port=port,
    )


def is_reporting_rank(environ: Mapping[str, str] | None = None) -> bool:
    """True in the process that judges, saves and reports: global rank 0, or any process that is not a rank."""
    found = torchrun_environment(environ)
    return found is None or found.rank == 0


def rank_variables(*, rank: int, world_size: int, master_addr: str, master_port: int) -> dict[str, str]:
    """The variables a spawned single-node rank gets, the same names and meaning torchrun uses.

    LOCAL_RANK is always set: DeepSpeed refuses to start without it even when the process group exists.
    """
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "GROUP_RANK": "0",
        "MASTER_ADDR": master_addr,
        "MASTER_PORT": str(master_port),
    }
