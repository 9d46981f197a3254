"""The parent side of the launcher: a pool of spawned rank processes reused across calls of the same shape.

A pool is keyed by (world size, backend, device type), started on first use, kept while calls succeed and torn
down after any failure, so the next call gets fresh ranks and a fresh process group. Invariants: the ranks
rendezvous through a ``TCPStore`` on a port the kernel picked, bound to loopback only (single node by
construction; torchrun says where a multi-node job listens); each rank leads its own process group, and nothing a
rank started outlives pytest (stopped at close, after a failure, at exit, else by the parent-death signal and
the pool's reaper, reaper.py). Why: docs/design/rank-processes.md. No torch at import.
"""

from __future__ import annotations

import atexit
import datetime
import multiprocessing
import multiprocessing.spawn
import os
import shutil
import signal
import socket
import time
from dataclasses import dataclass
from multiprocessing.connection import wait
from typing import Any

from pytest_gpuperf.core.config.settings import SettingError, environment_setting
from pytest_gpuperf.core.record.children import signal_group
from pytest_gpuperf.distributed import wire
from pytest_gpuperf.distributed.environment import rank_variables
from pytest_gpuperf.distributed.errors import FailureKind, LaunchError, RankFailed, RankFailure, describe_exitcode
from pytest_gpuperf.distributed.reaper import Reaper, make_rank_folder, remove_stale_rank_folders
from pytest_gpuperf.distributed.worker import DUMP_SIGNAL, rank_main

STARTUP_TIMEOUT_S = 180.0
"""Ranks must be ready (torch imported, process group joined) within this; 4 ranks on 2 busy cores take ~10 s."""
FAILURE_GRACE_S = 0.5
"""After a first failure, how long the other ranks get to report before they are stopped and dumped."""
DUMP_WAIT_S = 2.0
"""How long to wait for a signalled rank to finish writing its faulthandler dump."""
STOP_WAIT_S = 5.0
"""How long a graceful shutdown waits for a rank to leave its process group before killing it."""
MASTER_ADDR = "127.0.0.1"
RANKS_PER_CORE = 4
"""Spawned CPU ranks allowed per core (``max_local_ranks``): each rank is a process with its own ``import torch``
(~0.3 GB resident, seconds of CPU), and 4 ranks on 2 cores already run collectives 3-5x slower (CPU-FACTS);
far beyond that, start-up and process-group timeouts expire before the work does, or descriptors run out."""
MIN_RANK_LIMIT = 8
"""The rank limit on a machine with few cores: the suites' 2-D meshes need 4 ranks, an 8-rank mesh should still
be expressible on a 2-core CI runner (slowly)."""


_CAUSE_ORDER = {
    FailureKind.SIGNALED: 0,
    FailureKind.EXITED: 0,
    FailureKind.STARTUP: 1,
    FailureKind.RAISED: 2,
    FailureKind.TIMEOUT: 3,
    FailureKind.STOPPED: 4,
    FailureKind.LOST: 5,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolKey:
    """What a pool of ranks is reusable for."""

    world_size: int
    backend: str
    device_type: str


def default_pg_timeout_s() -> float:
    """Process-group timeout: GPUPERF_PG_TIMEOUT seconds, or 60 (gloo's own default is 30 minutes)."""
    try:
        value: float = environment_setting("pg-timeout")
    except SettingError as error:
        raise LaunchError(str(error)) from None
    return value


def max_local_ranks() -> int:
    """Most ranks one ``launch()`` may spawn on this machine: GPUPERF_MAX_RANKS, else ``RANKS_PER_CORE`` per core
    this process may run on (at least ``MIN_RANK_LIMIT``). Checked before anything is spawned."""
    try:
        value: int | None = environment_setting("max-ranks")
    except SettingError as error:
        raise LaunchError(str(error)) from None
    if value is not None:
        return value
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(MIN_RANK_LIMIT, RANKS_PER_CORE * cores)


def loopback_store(timeout_s: float) -> Any:
    """A master ``TCPStore`` listening on 127.0.0.1 only, on a port the kernel picks (see the module docstring)."""
    import torch
    import torch.distributed as dist

    errors = []
    # libuv, torch's default server, adopts a listening socket since torch 2.8 (pytorch#150215); before that it
    # would bind its own, on every interface. The classic server has adopted one since long before torch 2.4.
    servers = (True, False) if torch.__version__ >= (2, 8) else (False,)  # type: ignore[operator]
    for use_libuv in servers:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.bind((MASTER_ADDR, 0))
            listener.listen(socket.SOMAXCONN)
            port = listener.getsockname()[1]
        except OSError:
            listener.close()
            raise
        fd = listener.detach()  # the store owns (and closes) the socket from here on
        try:
            store = dist.TCPStore(
                MASTER_ADDR,
                port,
                None,
                is_master=True,
                timeout=datetime.timedelta(seconds=timeout_s),
                wait_for_workers=False,
                master_listen_fd=fd,
                use_libuv=use_libuv,
            )
        except (RuntimeError, TypeError, ValueError) as exc:
            errors.append(f"{'libuv' if use_libuv else 'classic'} server: {type(exc).__name__}: {exc}")
            try:
                os.close(fd)
            except OSError:
                pass
            continue
        if store.port != port:  # the server bound a port of its own instead of adopting the socket
            raise LaunchError(f"the launcher's rendezvous store ignored its loopback socket (port {store.port})")
        return store
    raise LaunchError(
        "the launcher could not start its rendezvous store on 127.0.0.1 with a pre-bound socket "
        f"({'; '.join(errors)}); torch 2.4 or later is required"
    )


def _kill_group(process: Any) -> None:
    """SIGKILL a rank's process group (the rank leads it, see worker.py), then the rank itself.

    Done before the rank is reaped where possible: while the rank (or a zombie of it, or any process of its group)
    exists, no other process can get its pid as a group id. A rank killed before it called ``setsid`` has no group
    of its own yet (ESRCH) and started nothing."""
    pid = process.pid
    if pid is None:
        return
    signal_group(pid, signal.SIGKILL)
    if process.is_alive():
        process.kill()


class RankPool:
    """Rank processes of one ``PoolKey``, each holding its process group, each running every submitted task."""

    def __init__(self, key: PoolKey, *, pg_timeout_s: float) -> None:
        self.key = key
        self._closed = False
        self._processes: list[Any] = []
        self._conns: list[Any] = []
        self._dumps: list[Any] = []
        self._dump_dir = ""
        self._dump_lock: int | None = None
        """Held while the dump folder exists: its ``flock`` tells later runs that its owner lives."""
        self._reaper: Reaper | None = None
        self._store: Any = None
        self.pids: tuple[int, ...] = ()
        self._started = time.monotonic()
        try:
            # Folders of pytest runs killed with their reaper (a container or cgroup kill).
            remove_stale_rank_folders()
            try:
                self._reaper = Reaper(multiprocessing.spawn.get_executable())
            except OSError as exc:
                raise LaunchError(
                    f"launch() could not start the process that cleans up after the ranks ({exc}); "
                    "check that sys.executable can be run and that processes and descriptors are not exhausted"
                ) from exc
            # One dump file per rank. The parent keeps a read handle on each and deletes the folder as soon as
            # the ranks have opened them: the files then vanish with the last process, however this one ends.
            self._dump_dir, self._dump_lock = make_rank_folder()
            self._reaper.watch_folder(self._dump_dir)
            self._store = loopback_store(pg_timeout_s)
            self._spawn(pg_timeout_s)
            ready, failures, pending = self._collect(time.monotonic() + STARTUP_TIMEOUT_S, startup=True)
            if failures or pending:
                raise self._fail(failures, pending, "rank start-up", timeout_s=STARTUP_TIMEOUT_S, startup=True)
            self.pids = tuple(ready[r] for r in range(key.world_size))
            self._remove_dump_dir()
        except BaseException:
            self.kill()
            raise

    def _spawn(self, pg_timeout_s: float) -> None:
        ctx = multiprocessing.get_context("spawn")
        assert self._store is not None, "ranks are spawned by __init__, before close() drops the store"
        assert self._reaper is not None and self._dump_lock is not None, "made by __init__ before the ranks"
        port = self._store.port
        extra: dict[str, str] = {}
        if self.key.device_type == "cpu":
            # Single host: keep gloo on loopback even where the hostname does not resolve.
            extra.setdefault("GLOO_SOCKET_IFNAME", os.environ.get("GLOO_SOCKET_IFNAME", "lo"))
        if "OMP_NUM_THREADS" not in os.environ:
            # As torchrun does: N ranks each using every core oversubscribe the machine.
            extra["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.key.world_size))
        for rank in range(self.key.world_size):
            environ = rank_variables(
                rank=rank,
                world_size=self.key.world_size,
                master_addr=MASTER_ADDR,
                master_port=port,
            )
            environ.update(extra)
            dump_path = os.path.join(self._dump_dir, f"rank{rank}.stack")
            open(dump_path, "w").close()
            self._dumps.append(open(dump_path, errors="replace"))
            parent_conn, child_conn = ctx.Pipe(duplex=True)
            process = ctx.Process(
                target=rank_main,
                kwargs={
                    "conn": child_conn,
                    "environ": environ,
                    "backend": self.key.backend,
                    "device_type": self.key.device_type,
                    "store_port": port,
                    "pg_timeout_s": pg_timeout_s,
                    "dump_path": dump_path,
                    "parent_pid": os.getpid(),
                },
                name=f"gpuperf-rank{rank}",
                # Not daemonic: a daemonic process may not start children, and ranks run data-loader workers.
                daemon=False,
            )
            process.start()
            # Before anything else can fail: from here on a killed pytest leaves no process of this rank.
            assert process.pid is not None, "a started process has a pid"
            self._reaper.watch_group(process.pid)
            child_conn.close()
            self._processes.append(process)
            self._conns.append(parent_conn)

    def healthy(self) -> bool:
        return not self._closed and all(p.is_alive() for p in self._processes)

    def run(self, payload: bytes, *, timeout_s: float, function: str) -> list[Any]:
        """Run one pickled ``("run", sys.path, Task)`` message in every rank; the return values in rank order."""
        for conn in self._conns:
            try:
                conn.send_bytes(payload)
            except OSError:
                pass  # that rank is dead; _collect reports how it ended
        values, failures, pending = self._collect(time.monotonic() + timeout_s, startup=False)
        if failures or pending:
            raise self._fail(failures, pending, function, timeout_s=timeout_s, startup=False)
        return [values[r] for r in range(self.key.world_size)]

    def _collect(self, deadline: float, *, startup: bool) -> tuple[dict[int, Any], list[RankFailure], set[int]]:
        """Wait for every rank's answer; stop early (after a short grace) once one rank failed."""
        pending = set(range(self.key.world_size))
        values: dict[int, Any] = {}
        failures: list[RankFailure] = []
        grace_end: float | None = None
        while pending:
            limit = deadline if grace_end is None else min(deadline, grace_end)
            remaining = limit - time.monotonic()
            if remaining <= 0:
                break
            owners: dict[Any, int] = {}
            for r in pending:
                owners[self._conns[r]] = r
                owners[self._processes[r].sentinel] = r
            for ready in wait(list(owners), timeout=remaining):
                r = owners[ready]
                if r not in pending:
                    continue
                outcome = self._receive(r, startup=startup)
                if outcome is None:
                    continue
                pending.discard(r)
                if isinstance(outcome, RankFailure):
                    failures.append(outcome)
                else:
                    values[r] = outcome[0]
            if failures and grace_end is None:
                grace_end = time.monotonic() + FAILURE_GRACE_S
        return values, failures, pending

    def _receive(self, r: int, *, startup: bool) -> RankFailure | tuple[Any] | None:
        """The rank's next answer, its death, or None when it has neither yet."""
        conn = self._conns[r]
        try:
            has_message = conn.poll(0)
        except OSError:
            has_message = False
        if has_message:
            try:
                message = wire.decode(conn.recv_bytes())
            except EOFError:
                message = None
            except Exception as exc:
                return RankFailure(
                    rank=r,
                    kind=FailureKind.RAISED,
                    summary=f"its answer could not be unpickled in the parent: {type(exc).__name__}: {exc}",
                )
            if message is not None:
                status = message[0]
                if status in ("ok", "ready"):
                    return (message[1],)
                kind = FailureKind.STARTUP if status == "startup-error" else FailureKind.RAISED
                return RankFailure(rank=r, kind=kind, summary=message[1], detail=message[2])
        process = self._processes[r]
        if process.is_alive():
            return None
        process.join(1.0)
        kind, summary = describe_exitcode(process.exitcode)
        if startup:
            kind, summary = FailureKind.STARTUP, f"{summary} during start-up"
        return RankFailure(rank=r, kind=kind, summary=summary, exitcode=process.exitcode)

    def _fail(
        self, failures: list[RankFailure], pending: set[int], function: str, *, timeout_s: float, startup: bool
    ) -> RankFailed:
        """Dump the stacks of ranks still running, kill the pool and build the exception."""
        stacks = self._dump_stacks(sorted(pending))
        # A dead process is the likeliest cause: its peers then raise gloo/NCCL "connection closed" errors,
        # which may reach the parent first. Stable sort keeps arrival order within a kind.
        failures.sort(key=lambda f: _CAUSE_ORDER[f.kind])
        first_failed = failures[0].rank if failures else None
        elapsed = time.monotonic() - self._started
        for r in sorted(pending):
            if startup and first_failed is not None:
                # Waiting for the peer that failed, most likely: say so, and how long it really waited.
                kind = FailureKind.STOPPED
                summary = f"not ready after {elapsed:.1f} s: stopped because rank {first_failed} failed during start-up"
            elif startup:
                kind = FailureKind.STARTUP
                summary = f"not ready after {elapsed:.1f} s (the start-up limit, STARTUP_TIMEOUT_S, is {timeout_s:g} s)"
            elif first_failed is not None:
                kind, summary = FailureKind.STOPPED, f"stopped because rank {first_failed} failed"
            else:
                kind, summary = FailureKind.TIMEOUT, f"still running after the {timeout_s:g} s timeout"
            failures.append(RankFailure(rank=r, kind=kind, summary=summary, stack=stacks.get(r, "")))
        self.kill()
        return RankFailed(failures, world_size=self.key.world_size, function=function)

    def _dump_stacks(self, ranks: list[int]) -> dict[int, str]:
        signalled = []
        for r in ranks:
            pid = self._processes[r].pid
            if pid is None or not self._processes[r].is_alive():
                continue
            try:
                os.kill(pid, DUMP_SIGNAL)
                signalled.append(r)
            except ProcessLookupError:
                pass
        stacks: dict[int, str] = {}
        deadline = time.monotonic() + DUMP_WAIT_S
        sizes: dict[int, int] = {}
        while signalled and time.monotonic() < deadline:
            time.sleep(0.05)
            done = True
            for r in signalled:
                size = os.fstat(self._dumps[r].fileno()).st_size
                # Written, and not growing since the last look.
                if size == 0 or sizes.get(r) != size:
                    done = False
                sizes[r] = size
            if done:
                break
        for r in signalled:
            try:
                self._dumps[r].seek(0)
                stacks[r] = _without_launcher_frames(self._dumps[r].read())
            except OSError:
                pass
        return stacks

    def kill(self) -> None:
        """Kill every rank and what it started now, and release the store, pipes and dump files."""
        for process in self._processes:
            _kill_group(process)
        self._release()

    def close(self) -> None:
        """Let each rank leave its process group and exit; kill the ones that do not in time."""
        if self._closed:
            return
        stop = wire.encode(("stop",))
        for conn in self._conns:
            try:
                conn.send_bytes(stop)
            except OSError:
                pass
        deadline = time.monotonic() + STOP_WAIT_S
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
        self.kill()

    def _release(self) -> None:
        for process in self._processes:
            process.join(5.0)
            if process.is_alive():  # pragma: no cover - SIGKILL not delivered within 5 s
                os.kill(process.pid, signal.SIGKILL)
                process.join()
            process.close()
        for handle in [*self._conns, *self._dumps]:
            handle.close()
        self._processes, self._conns, self._dumps = [], [], []
        self._store = None
        self._remove_dump_dir()
        if self._reaper is not None:
            # Only now: every rank is reaped, so no group it watched can still hold a process of ours.
            self._reaper.stop()
            self._reaper = None
        self._closed = True

    def _remove_dump_dir(self) -> None:
        if self._dump_lock is None:  # not made yet, or already removed
            return
        shutil.rmtree(self._dump_dir, ignore_errors=True)
        if self._reaper is not None:
            self._reaper.forget_folder(self._dump_dir)
        os.close(self._dump_lock)
        self._dump_lock = None


_OWN_DIR = os.path.dirname(os.path.abspath(__file__))
_MULTIPROCESSING_DIR = os.path.dirname(os.path.abspath(multiprocessing.__file__))


def _without_launcher_frames(dump: str) -> str:
    """A faulthandler dump without the frames of the rank's own loop and of multiprocessing's bootstrap."""
    kept = []
    for line in dump.splitlines():
        stripped = line.strip()
        if stripped.startswith('File "'):
            path = stripped[len('File "') :].split('"', 1)[0]
            if path == "<string>" or os.path.dirname(path) in (_OWN_DIR, _MULTIPROCESSING_DIR):
                continue
        kept.append(line)
    return "\n".join(kept) + "\n"


_pools: dict[PoolKey, RankPool] = {}


def get_pool(key: PoolKey) -> RankPool:
    """The warm pool for ``key``, started (or restarted, if a rank died since the last call) when needed."""
    pool = _pools.get(key)
    if pool is not None and not pool.healthy():
        pool.kill()
        pool = None
    if pool is None:
        _pools.pop(key, None)
        pool = RankPool(key, pg_timeout_s=default_pg_timeout_s())
        _pools[key] = pool
    return pool


def discard_pool(key: PoolKey) -> None:
    """Forget (and kill) the pool of ``key``: after a failure, or when the caller was interrupted."""
    pool = _pools.pop(key, None)
    if pool is not None:
        pool.kill()


def shutdown() -> None:
    """Stop every pool (registered at exit; call it to free the ranks' memory earlier)."""
    while _pools:
        _, pool = _pools.popitem()
        pool.close()


atexit.register(shutdown)
