"""Real 2-rank gloo runs: the curve match catches a broken collective, and a session survives failing ranks.

The fault injectors are module-level functions (ranks import them by reference) that replace DDP's gradient
all-reduce through a communication hook, as a miscompiled or misconfigured collective would.
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pytest_gpuperf.distributed import launch, shutdown  # noqa: E402
from pytest_gpuperf.distributed.training import (  # noqa: E402
    LOSS_TOLERANCE,
    TrainJob,
    combine,
    loss_mismatch,
    train_rank,
    train_single,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


def drop_gradient_all_reduce(prepared, mesh) -> None:
    """Each rank keeps its own gradient: the all-reduce never happens."""
    import torch

    def hook(state, bucket):
        future = torch.futures.Future()
        future.set_result(bucket.buffer())
        return future

    prepared.model.register_comm_hook(None, hook)


def skew_rank_1_gradient(prepared, mesh) -> None:
    """Rank 1 contributes its gradient 1% too large to an otherwise correct average."""
    import torch.distributed as dist

    def hook(state, bucket):
        buffer = bucket.buffer()
        if dist.get_rank() == 1:
            buffer.mul_(1.01)
        buffer.div_(dist.get_world_size())
        return dist.all_reduce(buffer, async_op=True).get_future().then(lambda done: done.value()[0])

    prepared.model.register_comm_hook(None, hook)


@pytest.fixture(scope="module", autouse=True)
def _stop_pools_after_module():
    yield
    shutdown()


@pytest.fixture(scope="module")
def reference():
    return train_single(TrainJob(strategy="ddp"), threads=1)


def _ddp(after_prepare=None):
    job = TrainJob(strategy="ddp", after_prepare=after_prepare)
    return combine(launch(train_rank, job, mesh_shape=(2,), mesh_dim_names=("dp",), timeout=120))


def test_intact_ddp_matches_the_single_rank_curve(reference):
    run = _ddp()
    assert run.threads == 1  # 2 ranks on 2 cores: the reference above used the same thread count
    assert loss_mismatch(run.losses, reference.losses, tolerance=LOSS_TOLERANCE["cpu"]) is None


@pytest.mark.parametrize("fault", [drop_gradient_all_reduce, skew_rank_1_gradient])
def test_a_broken_gradient_collective_fails_the_match(fault, reference):
    run = _ddp(fault)
    message = loss_mismatch(run.losses, reference.losses, tolerance=LOSS_TOLERANCE["cpu"], what="ddp")
    assert message is not None, f"{fault.__name__} went unnoticed: curve {run.losses}"
    assert "left the single-rank loss curve" in message


FAILING_SESSION = """
import os, signal, time
import torch.distributed as dist
from pytest_gpuperf import launch

def total():
    import torch
    t = torch.ones(1)
    dist.all_reduce(t)
    return t.item()

def raises():
    if dist.get_rank() == 1:
        raise ValueError("rank one refuses this batch")
    dist.barrier()

def hangs():
    if dist.get_rank() == 1:
        while True:
            time.sleep(0.05)
    dist.barrier()

def killed():
    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()

def test_1_raises():
    launch(raises, world_size=2, timeout=60)

def test_2_next_passes():
    assert launch(total, world_size=2, timeout=60) == [2.0, 2.0]

def test_3_hangs():
    launch(hangs, world_size=2, timeout=3)

def test_4_next_passes():
    assert launch(total, world_size=2, timeout=60) == [2.0, 2.0]

def test_5_killed():
    launch(killed, world_size=2, timeout=60)

def test_6_next_passes():
    assert launch(total, world_size=2, timeout=60) == [2.0, 2.0]
"""


def test_failing_ranks_fail_only_their_test_and_the_session_goes_on(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_failing_ranks=textwrap.dedent(FAILING_SESSION))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", timeout=240)
    result.assert_outcomes(failed=3, passed=3)
    output = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*RankFailed: test_failing_ranks.raises failed on rank 1 of 2: raised: ValueError: rank one refuses*",
            # rank 0 waits in the barrier for rank 1: both are still running when the timeout passes
            "*RankFailed: test_failing_ranks.hangs failed on ranks 0, 1 of 2: timeout: still running after the 3 s*",
            "*RankFailed: test_failing_ranks.killed failed on rank 1 of 2: signaled: killed by SIGKILL*",
        ]
    )
    assert "--- rank 1 stack when stopped (faulthandler) ---" in output and "in hangs" in output
