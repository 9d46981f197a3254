"""Slurm's compressed node lists (pytest_gpuperf/slurm/nodelist.py) and a Slurm step's tasks as ranks
(distributed/environment.py's ``slurm_rank_variables``)."""

from __future__ import annotations

import pytest

from pytest_gpuperf.distributed.environment import slurm_rank_variables
from pytest_gpuperf.slurm.nodelist import NodeListError, expand


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("n1", ["n1"]),
        ("n[1-4]", ["n1", "n2", "n3", "n4"]),
        ("gpu-[01-03,07],login1", ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "login1"]),
        ("rack[1-2]-n[1,3]", ["rack1-n1", "rack1-n3", "rack2-n1", "rack2-n3"]),
        ("a[9-10]b", ["a9b", "a10b"]),
    ],
)
def test_node_lists_expand_as_slurm_writes_them(text: str, names: list[str]) -> None:
    assert expand(text) == names


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty node list"),
        ("n[1-", "'[' is never closed"),
        ("n1-4]", "']' without '['"),
        ("n[a-b]", "'a-b' in [a-b] is not a number"),
        ("n[4-1]", "runs backwards"),
        ("n1,,n2", "empty or blank name"),
    ],
)
def test_a_node_list_that_does_not_parse_is_quoted(text: str, message: str) -> None:
    with pytest.raises(NodeListError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")):
        expand(text)


STEP = {
    "GPUPERF_SLURM_RANKS": "1",
    "SLURM_JOB_ID": "41",
    "SLURM_STEP_ID": "2",
    "SLURM_PROCID": "5",
    "SLURM_NTASKS": "8",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_STEP_TASKS_PER_NODE": "2(x3),2",
    "SLURM_STEP_NODELIST": "n[1-4]",
    "MASTER_ADDR": "10.0.0.1",
}


def test_a_slurm_task_is_the_rank_slurm_numbered() -> None:
    assert slurm_rank_variables(STEP) == {
        "RANK": "5",
        "LOCAL_RANK": "1",
        "WORLD_SIZE": "8",
        "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "2",
        "MASTER_ADDR": "10.0.0.1",
        "MASTER_PORT": str(20000 + (41 * 16 + 2) % 10000),
    }


def test_slurm_tasks_are_ranks_only_when_asked_and_torchrun_is_absent() -> None:
    assert slurm_rank_variables({k: v for k, v in STEP.items() if k != "GPUPERF_SLURM_RANKS"}) is None
    assert slurm_rank_variables({**STEP, "RANK": "0"}) is None
    with pytest.raises(ValueError, match="SLURM_PROCID unset"):
        slurm_rank_variables({k: v for k, v in STEP.items() if k != "SLURM_PROCID"})
