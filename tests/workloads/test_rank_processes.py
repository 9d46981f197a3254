"""Rank processes and what they start never outlive pytest, and ranks may start processes (issue 38, items 6, 7).

A pytest killed by SIGTERM (a CI cancel), SIGHUP (a closed terminal) or SIGKILL while its ranks run or start
must leave no rank, no process a rank started, and no ``gpuperf-ranks-*`` folder in its TMPDIR. These tests
start a real pytest in a subprocess whose test launches 2 gloo ranks that each start a sleeping child, signal
that pytest alone (not its group: the hardest case), and watch every process it had spawned, read from /proc.
Ranks are not daemonic, so a ``DataLoader`` with worker processes runs inside ``launch()``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("torch")

from torch.utils.data import Dataset  # noqa: E402

from pytest_gpuperf.distributed import launch, shutdown  # noqa: E402

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux's /proc")

READY_WAIT_S = 60.0
"""Bound on the inner pytest getting its ranks to the point of interest (import torch, 2 ranks on 2 cores: ~5 s)."""
GONE_WAIT_S = 15.0
"""Bound on everything being gone after the signal (the reaper acts within a quarter of a second)."""

INNER_TEST = textwrap.dedent(
    """
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    from pytest_gpuperf.distributed import launch
    from pytest_gpuperf.distributed import pool


    def _note(name, text):
        folder = Path(os.environ["GPUPERF_TEST_PIDS"])
        (folder / (name + ".tmp")).write_text(text)
        (folder / (name + ".tmp")).rename(folder / name)  # whole, or not there


    def start_a_child_and_wait():
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        _note("rank" + os.environ["RANK"], f"{os.getpid()} {child.pid}")
        while True:
            time.sleep(0.05)


    def slow_start(**kwargs):
        # In the rank: the process group takes long to join, as it does on a busy machine (import torch,
        # a slow peer). rank_main sets the rank up (parent death signal, session) before it gets here.
        from pytest_gpuperf.distributed import rank

        real = rank.init_process_group

        def late(**options):
            _note("starting" + os.environ["RANK"], str(os.getpid()))
            time.sleep(600)
            real(**options)

        rank.init_process_group = late
        from pytest_gpuperf.distributed.worker import rank_main

        rank_main(**kwargs)


    def test_ranks_run_until_killed():
        launch(start_a_child_and_wait, world_size=2, timeout=600)


    def test_ranks_start_until_killed(monkeypatch):
        monkeypatch.setattr(pool, "rank_main", slow_start)
        launch(start_a_child_and_wait, world_size=2, timeout=600)
    """
)


# --- functions run in the ranks -------------------------------------------------------------------------------


class Numbers(Dataset[tuple[float, int]]):
    """Items 0..n-1, each with the pid of the process that loaded it (a data-loader worker, not the rank)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[float, int]:
        return float(i), os.getpid()


@dataclass(frozen=True)
class Trained:
    rank_pid: int
    loader_pids: list[int]
    total: float
    weight: float


def train_from_two_loader_workers(n: int) -> Trained:
    """A data-parallel linear regression fed by ``DataLoader(num_workers=2)``: each rank reads its half."""
    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader_pids: set[int] = set()
    seen = 0.0
    for _ in range(2):
        loader: DataLoader[tuple[float, int]] = DataLoader(
            torch.utils.data.Subset(Numbers(n), range(rank, n, world)), batch_size=4, num_workers=2, shuffle=False
        )
        for values, pids in loader:
            loader_pids.update(int(p) for p in pids)
            seen += float(values.sum())
            x = values.float().unsqueeze(1) / n
            loss = ((model(x) - 3 * x) ** 2).mean()
            optimizer.zero_grad()
            loss.backward()
            for parameter in model.parameters():
                assert parameter.grad is not None
                dist.all_reduce(parameter.grad)
                parameter.grad /= world
            optimizer.step()
    total = torch.tensor([seen])
    dist.all_reduce(total)
    return Trained(
        rank_pid=os.getpid(), loader_pids=sorted(loader_pids), total=total.item(), weight=model.weight.item()
    )


# --- helpers ---------------------------------------------------------------------------------------------------


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent pid, state, start time) of ``pid`` from /proc, or None when there is no such process."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return int(fields[1]), fields[0], int(fields[19])


def _running(pid: int) -> bool:
    stat = _stat(pid)
    return stat is not None and stat[1] != "Z"  # a zombie runs nothing; its parent may not have reaped it yet


def _descendants(root: int) -> dict[int, int]:
    """Every process below ``root``, by pid, with its start time (so that a reused pid is not taken for it)."""
    parents: dict[int, list[tuple[int, int]]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = _stat(int(entry.name))
            if stat is not None:
                parents.setdefault(stat[0], []).append((int(entry.name), stat[2]))
    found: dict[int, int] = {}
    todo = [root]
    while todo:
        for pid, started in parents.get(todo.pop(), []):
            if pid not in found:
                found[pid] = started
                todo.append(pid)
    return found


def _still_running(processes: dict[int, int]) -> dict[int, str]:
    """Those of ``processes`` that still run (a zombie runs nothing), with their command lines."""
    running = {}
    for pid, started in processes.items():
        stat = _stat(pid)
        if stat is not None and stat[2] == started and stat[1] != "Z":
            try:
                running[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:120]
            except OSError:
                running[pid] = "?"
    return running


def _rank_folders(tmpdir: Path) -> list[str]:
    return sorted(p.name for p in tmpdir.glob("gpuperf-ranks-*"))


def _default_hangup() -> None:
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


class InnerPytest:
    """A pytest running ``INNER_TEST`` in a subprocess with its own TMPDIR; kills what it left on exit."""

    def __init__(self, tmp_path: Path, test: str) -> None:
        self.tmpdir = tmp_path / "tmp"
        self.pids = tmp_path / "pids"
        self.tmpdir.mkdir()
        self.pids.mkdir()
        (tmp_path / "test_inner.py").write_text(INNER_TEST)
        self.log = tmp_path / "inner.log"
        env = {**os.environ, "TMPDIR": str(self.tmpdir), "GPUPERF_TEST_PIDS": str(self.pids)}
        env.pop("PYTEST_XDIST_WORKER", None)
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "no:randomly",
                    f"test_inner.py::{test}",
                ],
                cwd=tmp_path,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a signal to this test's group must not reach it: only ours does
                # as from a terminal: a run under nohup (or a CI runner ignoring SIGHUP) would pass the ignored
                # SIGHUP down through exec, and the SIGHUP case would wait on a pytest that cannot get it
                preexec_fn=_default_hangup,
            )
        self.seen: dict[int, int] = {}

    def wait_for(self, ready: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + READY_WAIT_S
        while not ready():
            if self.process.poll() is not None:
                pytest.fail(f"the inner pytest ended before {what}:\n{self.log.read_text()}")
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {READY_WAIT_S:g} s:\n{self.log.read_text()}")
            time.sleep(0.01)
        self.seen = _descendants(self.process.pid)

    def notes(self, prefix: str) -> list[str]:
        return sorted(p.read_text() for p in self.pids.glob(prefix + "[0-9]"))

    def assert_nothing_left_after(self, sig: signal.Signals) -> None:
        os.kill(self.process.pid, sig)
        self.process.wait(GONE_WAIT_S)
        deadline = time.monotonic() + GONE_WAIT_S
        while time.monotonic() < deadline:
            running, folders = _still_running(self.seen), _rank_folders(self.tmpdir)
            if not running and not folders:
                return
            time.sleep(0.05)
        pytest.fail(
            f"{GONE_WAIT_S:g} s after {sig.name} to pytest: still running {running}, folders left {folders}\n"
            f"(pytest had spawned {sorted(self.seen)})\n{self.log.read_text()}"
        )

    def close(self) -> None:
        """Kill whatever this run left (on a failed check, or on main before the fix)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        for pid in _still_running(self.seen):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture
def inner(tmp_path: Path) -> Iterator[Callable[[str], InnerPytest]]:
    started: list[InnerPytest] = []

    def start(test: str) -> InnerPytest:
        started.append(InnerPytest(tmp_path, test))
        return started[-1]

    yield start
    for process in started:
        process.close()


# --- item 6: a killed pytest leaves nothing behind ------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL], ids=lambda s: s.name)
def test_pytest_killed_while_ranks_run_leaves_no_process(inner, sig):
    run = inner("test_ranks_run_until_killed")
    run.wait_for(lambda: len(run.notes("rank")) == 2, "2 ranks with a child each")
    children = [int(note.split()[1]) for note in run.notes("rank")]
    assert set(children) <= set(run.seen), (children, run.seen)
    run.assert_nothing_left_after(sig)


def test_pytest_terminated_during_rank_start_up_leaves_no_process_and_no_folder(inner):
    run = inner("test_ranks_start_until_killed")
    run.wait_for(lambda: len(run.notes("starting")) == 2, "2 ranks in start-up")
    assert len(_rank_folders(run.tmpdir)) == 1, "the ranks' dump folder exists during start-up"
    run.assert_nothing_left_after(signal.SIGTERM)


def test_stale_rank_folders_of_dead_owners_are_removed_and_live_ones_kept(tmp_path):
    # A real owner that dies by SIGKILL with its folder (as pytest and its reaper under a cgroup kill), one
    # that lives on, and a look-alike that is not a folder of ours.
    code = (
        "import sys, time\n"
        "from pytest_gpuperf.distributed import reaper\n"
        "folder, lock = reaper.make_rank_folder(sys.argv[1])\n"
        "open(folder + '/rank0.stack', 'w').close()\n"
        "print(folder, flush=True)\n"
        "time.sleep(600)\n"
    )
    owners = [
        subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        dead, alive = (Path(owner.stdout.readline().strip()) for owner in owners)  # type: ignore[union-attr]
        owners[0].kill()
        owners[0].wait()
        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        (elsewhere / "keep").write_text("")
        (tmp_path / "gpuperf-ranks-link").symlink_to(elsewhere)
        from pytest_gpuperf.distributed.reaper import remove_stale_rank_folders

        removed = remove_stale_rank_folders(str(tmp_path))
        assert removed == [str(dead)]
        assert not dead.exists()
        assert alive.is_dir() and (alive / "rank0.stack").exists()
        assert (elsewhere / "keep").exists() and (tmp_path / "gpuperf-ranks-link").is_symlink()
    finally:
        for owner in owners:
            owner.kill()
            owner.wait()


# --- item 7: ranks may start processes -------------------------------------------------------------------------


EXITING_SCRIPT = textwrap.dedent(
    """
    import multiprocessing
    import os
    import sys
    import time
    from pathlib import Path

    from pytest_gpuperf.distributed import launch


    def start_a_process_and_return(folder):
        # Not daemonic, like a user's pool worker: at the rank's exit nothing joins or ends it but the launcher.
        child = multiprocessing.get_context("fork").Process(target=time.sleep, args=(600,))
        child.start()
        Path(folder, "rank" + os.environ["RANK"]).write_text(f"{os.getpid()} {child.pid}")
        return child.pid


    if __name__ == "__main__":
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import exiting

        print(launch(exiting.start_a_process_and_return, sys.argv[1], world_size=2, timeout=120), flush=True)
        # no shutdown(): the interpreter's exit must stop the ranks and what they started
    """
)


def test_ranks_that_started_processes_stop_at_interpreter_exit(tmp_path):
    script = tmp_path / "exiting.py"
    script.write_text(EXITING_SCRIPT)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path)], capture_output=True, text=True, timeout=READY_WAIT_S
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    notes = [tuple(int(n) for n in p.read_text().split()) for p in sorted(tmp_path.glob("rank[0-9]"))]
    assert len(notes) == 2, done.stderr
    left = [pid for note in notes for pid in note if _running(pid)]
    deadline = time.monotonic() + GONE_WAIT_S
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [pid for pid in left if _running(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert not left, f"still running after the interpreter exited: {sorted(left)}"
    # a hang joining non-daemonic ranks would reach the timeout; a clean exit takes the ranks' start-up only
    assert elapsed < READY_WAIT_S / 2, elapsed


@pytest.fixture
def _stop_pools() -> Iterator[None]:
    yield
    shutdown()
    import multiprocessing

    assert multiprocessing.active_children() == []


def test_a_dataloader_with_two_workers_trains_inside_launch(_stop_pools):
    results = launch(train_from_two_loader_workers, 64, world_size=2, timeout=120)
    assert [r.total for r in results] == [2 * float(sum(range(64)))] * 2  # two epochs, every item once each
    assert results[0].weight == results[1].weight  # the same update on both ranks: gradients were shared
    for result in results:
        # 2 workers per epoch (not persistent), none of them the rank itself
        assert len(result.loader_pids) == 4 and result.rank_pid not in result.loader_pids, result
