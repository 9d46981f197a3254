"""Real multi-process gloo runs of the launcher: results, environment, meshes, reuse and failure containment.

The rank functions are at module level because ranks import them by reference. Ranks are pooled, so most tests
reuse the same two processes; each failure test pays for one fresh start (~3 s).
"""

from __future__ import annotations

import os
import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pytest_gpuperf.distributed import (  # noqa: E402
    FailureKind,
    LaunchError,
    RankFailed,
    current_mesh,
    launch,
    shutdown,
)

REPO_ROOT = Path(__file__).resolve().parents[2]


# --- functions run in the ranks -------------------------------------------------------------------------------


def all_reduce_rank_plus(offset: float) -> list[float]:
    import torch
    import torch.distributed as dist

    tensor = torch.tensor([float(dist.get_rank()) + offset, 1.0])
    dist.all_reduce(tensor)
    return tensor.tolist()


def environment_and_group() -> dict[str, object]:
    import torch.distributed as dist

    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    return {
        "env": {name: os.environ.get(name) for name in names},
        "rank": dist.get_rank(),
        "world_size": dist.get_world_size(),
        "backend": dist.get_backend(),
        "pid": os.getpid(),
    }


def mesh_description() -> dict[str, object]:
    import torch
    import torch.distributed as dist

    mesh = current_mesh()
    coordinate = mesh.get_coordinate()
    # A collective along every mesh dimension proves the sub-groups work, not just that the object exists.
    sums = []
    for dim in range(mesh.ndim):
        tensor = torch.tensor([float(dist.get_rank())])
        dist.all_reduce(tensor, group=mesh.get_group(dim))
        sums.append(tensor.item())
    return {
        "shape": tuple(mesh.shape),
        "names": mesh.mesh_dim_names,
        "coordinate": list(coordinate),
        "sums": sums,
    }


def raise_on_rank_1() -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        raise ValueError("rank one refuses this batch")
    dist.barrier()


def stuck_in_rank_1_forever() -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        while True:
            time.sleep(0.05)
    dist.barrier()


def sigkill_rank_1() -> None:
    import torch.distributed as dist

    if dist.get_rank() == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def process_id() -> int:
    return os.getpid()


# --- helpers ---------------------------------------------------------------------------------------------------


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _shm_entries_of(pids: list[int]) -> list[str]:
    shm = Path("/dev/shm")
    if not shm.is_dir():
        return []
    return [p.name for p in shm.iterdir() if any(str(pid) in p.name for pid in pids)]


def _assert_fresh_ranks_work(old_pids: list[int]) -> None:
    """After a failure: the old ranks are gone (no orphans, nothing in /dev/shm) and a new launch succeeds."""
    assert all(_gone(pid) for pid in old_pids), f"rank processes {old_pids} survived the failure"
    assert _shm_entries_of(old_pids) == []
    assert launch(all_reduce_rank_plus, 0.0, world_size=2, timeout=60) == [[1.0, 2.0], [1.0, 2.0]]
    assert set(launch(process_id, world_size=2, timeout=60)).isdisjoint(old_pids)


@pytest.fixture(scope="module", autouse=True)
def _stop_pools_after_module():
    yield
    shutdown()
    import multiprocessing

    assert multiprocessing.active_children() == []


# --- results, environment, meshes, reuse ---------------------------------------------------------------------


def test_all_reduce_result_comes_back_from_every_rank():
    # ranks contribute 0.5 and 1.5; the second element counts the ranks
    assert launch(all_reduce_rank_plus, 0.5, world_size=2, timeout=60) == [[2.0, 2.0], [2.0, 2.0]]


def test_ranks_get_torchruns_environment_and_a_gloo_group():
    results = launch(environment_and_group, world_size=2, timeout=60)
    ports = {r["env"]["MASTER_PORT"] for r in results}
    assert len(ports) == 1 and ports.pop().isdigit()
    for rank, result in enumerate(results):
        assert result["rank"] == rank
        assert result["world_size"] == 2
        assert result["backend"] == "gloo"
        env = result["env"]
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"


def test_ranks_are_reused_across_calls():
    first = launch(process_id, world_size=2, timeout=60)
    second = launch(process_id, world_size=2, timeout=60)
    assert first == second
    assert os.getpid() not in first and len(set(first)) == 2
    # warm ranks leave nothing on disk: the stack-dump files were unlinked once the ranks had opened them
    from pytest_gpuperf.distributed import pool

    assert pool._pools and not any(os.path.exists(p._dump_dir) for p in pool._pools.values())


def test_warm_ranks_import_functions_from_directories_added_after_they_started(tmp_path, monkeypatch):
    pids = launch(process_id, world_size=2, timeout=60)
    (tmp_path / "late_module_for_ranks.py").write_text("import os\ndef where():\n    return os.getpid()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import late_module_for_ranks

    assert launch(late_module_for_ranks.where, world_size=2, timeout=60) == pids


def test_one_dimensional_mesh():
    results = launch(mesh_description, mesh_shape=(2,), mesh_dim_names=("dp",), timeout=60)
    assert [r["coordinate"] for r in results] == [[0], [1]]
    assert all(r["shape"] == (2,) and r["names"] == ("dp",) for r in results)
    assert all(r["sums"] == [1.0] for r in results)


def test_two_by_two_mesh_on_four_ranks():
    results = launch(mesh_description, mesh_shape=(2, 2), mesh_dim_names=("dp", "tp"), timeout=120)
    assert [r["coordinate"] for r in results] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    # along "dp" rank r pairs with r^2, along "tp" with r^1
    assert [r["sums"] for r in results] == [[2.0, 1.0], [4.0, 1.0], [2.0, 5.0], [4.0, 5.0]]


def test_mesh_that_does_not_match_world_size_is_refused_with_the_numbers():
    with pytest.raises(LaunchError, match=r"mesh_shape \(2, 2\) needs 4 ranks .* world_size is 2"):
        launch(mesh_description, world_size=2, mesh_shape=(2, 2))


def test_function_that_cannot_be_pickled_is_refused_before_any_rank_runs():
    with pytest.raises(LaunchError, match="module level"):
        launch(lambda: 1, world_size=2)


# --- failure containment ------------------------------------------------------------------------------------


def test_rank_that_raises_fails_with_its_traceback_and_the_next_launch_works():
    pids = launch(process_id, world_size=2, timeout=60)
    with pytest.raises(RankFailed) as info:
        launch(raise_on_rank_1, world_size=2, timeout=60)
    failure = info.value
    assert failure.rank == 1
    assert failure.kind is FailureKind.RAISED
    assert "ValueError: rank one refuses this batch" in failure.detail
    assert "in raise_on_rank_1" in failure.detail
    # rank 0 was waiting in the barrier for rank 1: it is stopped, with a dump of where it waited
    (stopped,) = [f for f in failure.failures if f.rank == 0]
    assert stopped.kind is FailureKind.STOPPED
    assert "in raise_on_rank_1" in stopped.stack and "in barrier" in stopped.stack
    assert "rank one refuses this batch" in str(failure)
    _assert_fresh_ranks_work(pids)


def test_rank_that_hangs_is_killed_and_named_with_where_it_hung():
    pids = launch(process_id, world_size=2, timeout=60)
    start = time.monotonic()
    with pytest.raises(RankFailed) as info:
        launch(stuck_in_rank_1_forever, world_size=2, timeout=3)
    assert time.monotonic() - start < 30
    failure = info.value
    assert failure.kind is FailureKind.TIMEOUT
    assert 1 in failure.ranks(FailureKind.TIMEOUT)
    hung = next(f for f in failure.failures if f.rank == 1)
    assert "stuck_in_rank_1_forever" in hung.stack
    assert "after the 3 s timeout" in str(failure)
    _assert_fresh_ranks_work(pids)


def test_rank_killed_by_a_signal_is_named_with_its_exit_status():
    pids = launch(process_id, world_size=2, timeout=60)
    with pytest.raises(RankFailed) as info:
        launch(sigkill_rank_1, world_size=2, timeout=60)
    failure = info.value
    assert failure.rank == 1
    assert failure.kind is FailureKind.SIGNALED
    assert failure.first.exitcode == -signal.SIGKILL
    assert "killed by SIGKILL" in str(failure)
    _assert_fresh_ranks_work(pids)


def test_rank_that_cannot_start_is_named_with_its_error():
    with pytest.raises(RankFailed) as info:
        launch(process_id, world_size=2, timeout=60, backend="no-such-backend")
    assert info.value.kind is FailureKind.STARTUP
    assert sorted(f.rank for f in info.value.failures) == [0, 1]
    assert "no-such-backend" in str(info.value)


# --- several pytest processes at once ---------------------------------------------------------------------------


def test_xdist_workers_launch_in_parallel_without_port_collisions(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    pytester.makepyfile(
        test_parallel_ranks=textwrap.dedent(
            """
            import os
            import pytest
            from pytest_gpuperf import launch

            def rank_sum(value):
                import torch, torch.distributed as dist
                t = torch.tensor([float(value + dist.get_rank())])
                dist.all_reduce(t)
                return (t.item(), os.environ["MASTER_PORT"])

            @pytest.mark.parametrize("value", [0, 1, 2, 3, 4, 5])
            def test_sum(value):
                results = launch(rank_sum, value, world_size=2, timeout=60)
                assert [r[0] for r in results] == [2.0 * value + 1] * 2
            """
        )
    )
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", timeout=240)
    result.assert_outcomes(passed=6)


def test_under_torchrun_each_pytest_process_is_a_rank(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(
        test_torchrun_ranks=textwrap.dedent(
            """
            import os
            import multiprocessing
            import pytest
            from pytest_gpuperf import launch, is_reporting_rank, RankFailed

            def rank_and_pid(x):
                import torch.distributed as dist
                return (dist.get_rank(), os.getpid(), x)

            def fail_on_rank_1():
                import torch.distributed as dist
                if dist.get_rank() == 1:
                    raise RuntimeError("only rank one fails")
                return "fine"

            def test_runs_here_and_gathers():
                results = launch(rank_and_pid, 7, world_size=2, timeout=60)
                assert [r[0] for r in results] == [0, 1]
                mine = int(os.environ["RANK"])
                assert results[mine][1] == os.getpid()  # ran in this very process
                assert multiprocessing.active_children() == []  # nothing spawned
                assert is_reporting_rank() == (mine == 0)

            def test_a_failure_reaches_every_rank():
                with pytest.raises(RankFailed, match="only rank one fails") as info:
                    launch(fail_on_rank_1, timeout=60)
                assert info.value.rank == 1
            """
        )
    )
    result = pytester.run(
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "2",
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "test_torchrun_ranks.py",
        timeout=240,
    )
    assert result.ret == 0, result.stdout.str() + result.stderr.str()
    # both ranks ran both tests
    assert result.stdout.str().count("2 passed") == 2, result.stdout.str()
