"""Pure parts of the distributed area: device split per xdist worker, torchrun environment, failure messages."""

from __future__ import annotations

import pickle
import signal

import pytest

from pytest_gpuperf.distributed.devices import assign_worker_devices, devices_for_worker, worker_index
from pytest_gpuperf.distributed.environment import is_reporting_rank, rank_variables, torchrun_environment
from pytest_gpuperf.distributed.errors import FailureKind, RankFailed, RankFailure, describe_exitcode


@pytest.mark.parametrize(
    ("workers", "devices", "expected"),
    [
        (1, 8, [(0, 1, 2, 3, 4, 5, 6, 7)]),
        (2, 8, [(0, 1, 2, 3), (4, 5, 6, 7)]),
        (3, 8, [(0, 1, 2), (3, 4, 5), (6, 7)]),
        (4, 2, [(0,), (1,), (0,), (1,)]),
        (2, 0, [(), ()]),
    ],
)
def test_devices_are_dealt_in_contiguous_blocks(workers, devices, expected):
    assert [devices_for_worker(i, workers, devices) for i in range(workers)] == expected


def test_every_device_is_used_exactly_once_when_there_are_enough():
    for workers in range(1, 9):
        for devices in range(workers, 17):
            blocks = [devices_for_worker(i, workers, devices) for i in range(workers)]
            assert [d for block in blocks for d in block] == list(range(devices)), (workers, devices)
            sizes = [len(block) for block in blocks]
            assert max(sizes) - min(sizes) <= 1, (workers, devices, sizes)


def test_bad_worker_index_is_refused():
    with pytest.raises(ValueError, match="outside 0..1"):
        devices_for_worker(2, 2, 8)
    with pytest.raises(ValueError, match="gwN"):
        worker_index("worker-3")


def test_worker_gets_its_part_of_an_existing_visible_list():
    env = {"PYTEST_XDIST_WORKER": "gw1", "PYTEST_XDIST_WORKER_COUNT": "2", "CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert assign_worker_devices(env) == ("CUDA_VISIBLE_DEVICES", "6,7")
    assert env["CUDA_VISIBLE_DEVICES"] == "6,7"


def test_rocm_visible_list_is_split_too():
    env = {"PYTEST_XDIST_WORKER": "gw0", "PYTEST_XDIST_WORKER_COUNT": "2", "HIP_VISIBLE_DEVICES": "0,1,2,3"}
    assert assign_worker_devices(env) == ("HIP_VISIBLE_DEVICES", "0,1")


def test_not_an_xdist_worker_changes_nothing():
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert assign_worker_devices(env) is None
    assert env == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_torchrun_environment_is_read():
    env = rank_variables(rank=3, world_size=4, master_addr="node0", master_port=29400)
    found = torchrun_environment(env)
    assert (found.rank, found.local_rank, found.world_size, found.master_port) == (3, 3, 4, 29400)
    assert not is_reporting_rank(env)
    assert is_reporting_rank({**env, "RANK": "0"})
    assert is_reporting_rank({})
    assert torchrun_environment({"WORLD_SIZE": "8"}) is None


def test_half_set_torchrun_environment_is_an_error_naming_what_is_missing():
    with pytest.raises(ValueError, match="not LOCAL_RANK, MASTER_ADDR, MASTER_PORT"):
        torchrun_environment({"RANK": "0", "WORLD_SIZE": "2"})
    with pytest.raises(ValueError, match="outside 0..WORLD_SIZE-1"):
        torchrun_environment({**rank_variables(rank=0, world_size=2, master_addr="h", master_port=1), "RANK": "5"})


def test_exit_statuses_are_named():
    assert describe_exitcode(-signal.SIGKILL)[0] is FailureKind.SIGNALED
    assert "SIGKILL" in describe_exitcode(-signal.SIGKILL)[1] and "out-of-memory" in describe_exitcode(-9)[1]
    assert describe_exitcode(-signal.SIGSEGV) == (FailureKind.SIGNALED, "killed by SIGSEGV")
    assert describe_exitcode(3) == (FailureKind.EXITED, "exited with status 3")


def test_message_groups_ranks_that_failed_alike_and_shows_each_stack():
    failures = [
        RankFailure(rank=0, kind=FailureKind.TIMEOUT, summary="still running", stack="File x in wait_here"),
        RankFailure(rank=1, kind=FailureKind.TIMEOUT, summary="still running", stack="File y in spin_here"),
    ]
    error = RankFailed(failures, world_size=2, function="mod.fn")
    text = str(error)
    assert text.startswith("mod.fn failed on ranks 0, 1 of 2: timeout: still running")
    assert "wait_here" in text and "spin_here" in text
    assert error.ranks(FailureKind.TIMEOUT) == [0, 1]
    copy = pickle.loads(pickle.dumps(error))
    assert str(copy) == text and copy.failures == error.failures
