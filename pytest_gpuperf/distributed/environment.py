"""torchrun's environment contract: reading it (are we a rank already?), writing it (for spawned ranks), and
deriving it from a Slurm step's whose tasks are the ranks (``GPUPERF_SLURM_RANKS=1``).

Pure module (no torch), so the plugin can ask ``is_reporting_rank()`` at any time without importing torch.
"""

from __future__ import annotations

import os
import re
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


SLURM_RANKS = "GPUPERF_SLURM_RANKS"
"""Set to 1 where each task of a Slurm step is a rank (``srun -n 8 pytest ...``); not set, a step's tasks are
independent sessions (node acceptance runs one per node)."""
SLURM_PORT_BASE = 20000
"""The rendezvous port without MASTER_PORT: 20000 + (job id x 16 + step id) mod 10000, the same in every task."""


def slurm_rank_variables(environ: Mapping[str, str] | None = None) -> dict[str, str] | None:
    """torchrun's variables for this task of a Slurm step, where ``GPUPERF_SLURM_RANKS=1`` asks for them and
    torchrun's own are absent; None otherwise. The rendezvous host is the step's first node, at its Slurm
    NodeAddr (node names need not resolve); MASTER_ADDR and MASTER_PORT, where set, win."""
    env = os.environ if environ is None else environ
    from pytest_gpuperf.core.config.settings import SettingError, parse_bool  # the option table's one reading

    try:
        asked = parse_bool(env.get(SLURM_RANKS, ""))
    except SettingError as error:
        raise ValueError(f"{SLURM_RANKS}={env[SLURM_RANKS]!r}: {error}") from None
    if not asked or "RANK" in env:
        return None
    needed = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NODEID")
    missing = [name for name in needed if name not in env]
    if missing:
        raise ValueError(
            f"{SLURM_RANKS}=1 but {', '.join(missing)} unset: it takes the ranks from a Slurm step; start pytest "
            "with srun (docs/distributed.md), or unset it"
        )
    try:
        job, step = int(env["SLURM_JOB_ID"]), int(env.get("SLURM_STEP_ID", "0"))
        node_index = int(env["SLURM_NODEID"])
        port = int(env.get("MASTER_PORT", SLURM_PORT_BASE + (job * 16 + step) % 10000))
    except ValueError as exc:
        raise ValueError(f"Slurm step variable is not an integer: {exc}") from None
    per_node = _tasks_per_node(env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE", ""))
    local_world = per_node[node_index] if node_index < len(per_node) else int(env["SLURM_NTASKS"])
    address = env.get("MASTER_ADDR")
    if not address:
        from pytest_gpuperf.slurm.nodelist import expand, node_address

        nodes = expand(env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST", ""))
        address = node_address(nodes[0], env=dict(env))
    return {
        "RANK": env["SLURM_PROCID"],
        "LOCAL_RANK": env["SLURM_LOCALID"],
        "WORLD_SIZE": env["SLURM_NTASKS"],
        "LOCAL_WORLD_SIZE": str(local_world),
        "GROUP_RANK": str(node_index),
        "MASTER_ADDR": address,
        "MASTER_PORT": str(port),
    }


def _tasks_per_node(text: str) -> list[int]:
    """Slurm's ``2(x3),1`` -> [2, 2, 2, 1]."""
    counts: list[int] = []
    for part in filter(None, text.split(",")):
        found = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if found is None:
            return []
        counts.extend([int(found.group(1))] * int(found.group(2) or 1))
    return counts


def adopt_slurm_ranks() -> bool:
    """Set torchrun's variables in this process from its Slurm step's (see ``slurm_rank_variables``), once,
    before anything reads them; True when it did."""
    found = slurm_rank_variables()
    if found is None:
        return False
    os.environ.update(found)
    return True
