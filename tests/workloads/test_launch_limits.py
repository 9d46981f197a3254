"""The launcher's limits and hygiene (issue 16, items 10 and 11): where its sockets listen, which arguments it
refuses before spawning anything, that a killed rank takes what it started with it, and what a start-up failure
says. Real gloo ranks; each failure test pays for one fresh start (~3 s)."""

from __future__ import annotations

import ipaddress
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from pytest_gpuperf.distributed import FailureKind, LaunchError, RankFailed, launch, shutdown  # noqa: E402
from pytest_gpuperf.distributed import pool as pool_module  # noqa: E402
from pytest_gpuperf.distributed import worker as worker_module  # noqa: E402

# --- functions run in the ranks -------------------------------------------------------------------------------


def port_and_pid() -> tuple[int, int]:
    import torch.distributed as dist

    dist.barrier()  # every rank has joined gloo: its listening sockets exist
    return int(os.environ["MASTER_PORT"]), os.getpid()


def start_a_sleeper_then_hang(marker: str) -> None:
    """Rank 1 starts a grandchild (as a data loader or a compiler would) and hangs; rank 0 waits in a barrier."""
    import torch.distributed as dist

    if dist.get_rank() == 1:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(marker).write_text(str(child.pid))
        while True:
            time.sleep(0.05)
    dist.barrier()


def start_a_sleeper_and_return(marker: str) -> int:
    import torch.distributed as dist

    if dist.get_rank() == 0:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(marker).write_text(str(child.pid))
    return dist.get_rank()


def rank_1_dies_during_start_up(**kwargs: object) -> None:
    """A rank main whose rank 1 exits before joining the process group: rank 0 then waits for a peer that is
    gone. Replaces the pool's ``rank_main`` in one test (the ranks import it from this module)."""
    environ = kwargs["environ"]
    assert isinstance(environ, dict)
    if environ["RANK"] == "1":
        time.sleep(1.0)
        os._exit(3)
    worker_module.rank_main(**kwargs)  # type: ignore[arg-type]


def allocate_beyond_the_address_space_limit(headroom_bytes: int) -> int:
    """Rank 1 caps its address space at what it maps now plus ``headroom_bytes``, then asks for twice that: a
    real allocation failure from the kernel, not a raised fake. The headroom keeps Python itself working."""
    import resource

    import torch
    import torch.distributed as dist

    if dist.get_rank() == 1:
        mapped = int(Path("/proc/self/statm").read_text().split()[0]) * resource.getpagesize()
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (mapped + headroom_bytes, hard))
        tensor = torch.ones(2 * headroom_bytes // 4, dtype=torch.float32)
        return int(tensor.numel())
    dist.barrier()
    return 0


def process_id() -> int:
    return os.getpid()


# --- helpers ---------------------------------------------------------------------------------------------------


def _listening_addresses(pid: int) -> list[tuple[str, int]]:
    """(address, port) of every listening TCP socket that process ``pid`` holds, from /proc (no psutil)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    found = []
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: TCP_LISTEN
                continue
            raw_address, raw_port = local.split(":")
            assert len(raw_address) == width
            # /proc prints each 32-bit word of the address in host (little-endian) order.
            words = bytes.fromhex(raw_address)
            packed = b"".join(words[i : i + 4][::-1] for i in range(0, len(words), 4))
            found.append((str(ipaddress.ip_address(packed)), int(raw_port, 16)))
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is gone for our purpose (it runs nothing); its parent may not have reaped it yet.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _wait_gone(pid: int, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(autouse=True)
def _stop_pools():
    yield
    shutdown()


# --- item 10: loopback only ------------------------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from Linux's /proc")
def test_rendezvous_store_and_ranks_listen_on_loopback_only():
    answers = launch(port_and_pid, world_size=2, timeout=120)
    store_port = answers[0][0]
    parent = _listening_addresses(os.getpid())
    store = [address for address, port in parent if port == store_port]
    assert store, f"no listening socket on the store's port {store_port} in this process: {parent}"
    assert all(ipaddress.ip_address(a).is_loopback for a in store), f"the rendezvous store listens on {store}"
    for _, pid in answers:
        listening = _listening_addresses(pid)
        assert all(ipaddress.ip_address(a).is_loopback for a, _ in listening), f"rank {pid} listens on {listening}"


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="reads listening sockets from Linux's /proc")
@pytest.mark.parametrize(("version", "libuv"), [(None, True), ("2.4.1", False)])
def test_the_store_adopts_a_loopback_socket_with_either_server(version, libuv, monkeypatch):
    import torch
    from torch.torch_version import TorchVersion

    if version is not None:  # a torch whose libuv server would bind a socket of its own
        monkeypatch.setattr(torch, "__version__", TorchVersion(version))
    store = pool_module.loopback_store(10.0)
    try:
        assert store.libuvBackend is libuv
        addresses = [a for a, port in _listening_addresses(os.getpid()) if port == store.port]
        assert addresses == ["127.0.0.1"]
        store.set("key", "value")
        assert store.get("key") == b"value"
    finally:
        del store


# --- item 11: arguments refused before anything starts --------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"world_size": True}, r"world_size=True\): expected a whole number"),
        ({"world_size": 2.0}, r"world_size=2\.0\): expected a whole number"),
        ({"world_size": 0}, r"world_size=0\): expected a whole number"),
        ({"world_size": 10**6}, r"world_size=1000000\) is more than .* ranks .*GPUPERF_MAX_RANKS"),
        ({"world_size": 2, "timeout": math.inf}, r"timeout=inf\): expected a finite"),
        ({"world_size": 2, "timeout": math.nan}, r"timeout=nan\): expected a finite"),
        ({"world_size": 2, "timeout": True}, r"timeout=True\): expected a finite"),
        ({"world_size": 2, "timeout": "60"}, r"timeout='60'\): expected a finite"),
        ({"world_size": 2, "timeout": -1}, r"timeout=-1\): expected a finite"),
        ({"mesh_shape": (True, 2)}, r"mesh_shape must be positive integers"),
    ],
)
def test_bad_arguments_are_refused_before_any_rank_starts(kwargs, expected, monkeypatch):
    monkeypatch.setattr(pool_module, "RankPool", None)  # starting a pool would now fail loudly
    with pytest.raises(LaunchError, match=expected):
        launch(process_id, **kwargs)


def test_rank_limit_follows_the_cores_and_the_environment(monkeypatch):
    monkeypatch.delenv("GPUPERF_MAX_RANKS", raising=False)
    assert pool_module.max_local_ranks() == max(8, 4 * len(os.sched_getaffinity(0)))
    monkeypatch.setenv("GPUPERF_MAX_RANKS", "3")
    assert pool_module.max_local_ranks() == 3
    monkeypatch.setattr(pool_module, "RankPool", None)
    with pytest.raises(LaunchError, match=r"world_size=4\) is more than the 3 ranks"):
        launch(process_id, world_size=4, timeout=60)
    for bad in ("0", "many", "-2"):
        monkeypatch.setenv("GPUPERF_MAX_RANKS", bad)
        with pytest.raises(LaunchError, match=f"GPUPERF_MAX_RANKS={bad!r}"):
            pool_module.max_local_ranks()


# --- item 11: what a rank started dies with it ------------------------------------------------------------------


def test_grandchildren_of_a_hung_rank_are_killed_with_it(tmp_path):
    marker = tmp_path / "sleeper.pid"
    with pytest.raises(RankFailed) as info:
        launch(start_a_sleeper_then_hang, str(marker), world_size=2, timeout=10)
    assert info.value.kind is FailureKind.TIMEOUT
    sleeper = int(marker.read_text())
    assert _wait_gone(sleeper), f"the hung rank's child {sleeper} survived the rank"


def test_grandchildren_of_healthy_ranks_end_with_the_pool(tmp_path):
    marker = tmp_path / "sleeper.pid"
    assert launch(start_a_sleeper_and_return, str(marker), world_size=2, timeout=60) == [0, 1]
    sleeper = int(marker.read_text())
    assert _alive(sleeper)
    shutdown()
    assert _wait_gone(sleeper), f"a rank's child {sleeper} outlived the pool"


# --- item 11: a start-up failure says when and why ---------------------------------------------------------------


def test_start_up_failure_reports_the_real_elapsed_time_and_cause(monkeypatch):
    monkeypatch.setattr(pool_module, "rank_main", rank_1_dies_during_start_up)
    started = time.monotonic()
    with pytest.raises(RankFailed) as info:
        launch(process_id, world_size=2, timeout=60)
    elapsed = time.monotonic() - started
    failure = info.value
    message = str(failure)
    assert failure.rank == 1, message
    assert failure.first.summary == "exited with status 3 during start-up", message
    waiting = next(f for f in failure.failures if f.rank == 0)
    assert waiting.kind is FailureKind.STOPPED, message
    assert "rank 1 failed during start-up" in waiting.summary, message
    assert f"{pool_module.STARTUP_TIMEOUT_S:g} s" not in message, message
    reported = float(waiting.summary.split("not ready after ")[1].split(" s")[0])
    # the message rounds to 0.1 s: the real wait, within that rounding, and not the 180 s bound
    assert 0 < reported <= elapsed + 0.05 and elapsed < pool_module.STARTUP_TIMEOUT_S, message


# --- item 12: a real out-of-memory in a rank --------------------------------------------------------------------


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the mapped size from Linux's /proc")
def test_out_of_memory_in_a_rank_fails_its_test_and_the_next_launch_works():
    old = launch(process_id, world_size=2, timeout=120)
    with pytest.raises(RankFailed) as info:
        launch(allocate_beyond_the_address_space_limit, 2**30, world_size=2, timeout=120)
    failure = info.value
    assert failure.rank == 1
    assert failure.kind is FailureKind.RAISED
    assert "out of memory" in failure.first.summary, str(failure)
    assert "can't allocate memory" in str(failure) or "MemoryError" in str(failure), str(failure)
    new = launch(process_id, world_size=2, timeout=120)
    assert set(new).isdisjoint(old)
