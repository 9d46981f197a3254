"""The main loop of a pooled rank process: set up once, then run every task the parent sends.

Protocol over one duplex pipe (pickled tuples sent with ``send_bytes``, so tensors are copied by plain pickle and
leave no files in /dev/shm): parent -> rank ``("run", sys.path, pickled Task)`` or ``("stop",)``; rank -> parent
``("ready", pid)``, ``("startup-error", summary, traceback)``, ``("ok", value)`` or ``("error", summary,
traceback)``. First of all the rank arms its parent-death signal and a faulthandler dump on SIGUSR1 (the parent's
way to learn where a hung rank is), then leads a process group of its own (``setsid``), so the parent stops
whatever the rank started with it. Why: docs/design/rank-processes.md.
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import traceback
from typing import Any

from pytest_gpuperf.core.record.children import die_with_parent
from pytest_gpuperf.distributed import wire
from pytest_gpuperf.distributed.errors import is_out_of_memory

DUMP_SIGNAL = signal.SIGUSR1


def _send(conn: Any, message: tuple[Any, ...]) -> None:
    try:
        payload = wire.encode(message)
    except Exception as exc:  # the result (or an exception in it) cannot be pickled
        summary = f"the return value could not be pickled to send to the parent: {type(exc).__name__}: {exc}"
        payload = wire.encode(("error", summary, traceback.format_exc()))
    conn.send_bytes(payload)


_OWN_DIR = os.path.dirname(os.path.abspath(__file__))


def format_user_traceback(exc: BaseException) -> str:
    """The traceback of ``exc`` without the launcher's own leading frames: it starts in the user's function."""
    tb = exc.__traceback__
    while (
        tb is not None
        and tb.tb_next is not None
        and os.path.dirname(os.path.abspath(tb.tb_frame.f_code.co_filename)) == _OWN_DIR
    ):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def summarize_exception(exc: BaseException) -> str:
    """One line for a failure header: the exception type, its first line, and an out-of-memory hint."""
    text = str(exc).strip().splitlines()
    summary = f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__
    return f"out of memory: {summary}" if is_out_of_memory(exc) else summary


def rank_main(
    *,
    conn: Any,
    environ: dict[str, str],
    backend: str,
    device_type: str,
    store_port: int,
    pg_timeout_s: float,
    dump_path: str,
    parent_pid: int,
) -> None:
    """Entry point of a spawned rank (the ``target`` of its ``multiprocessing`` process)."""
    # A rank must not outlive pytest (e.g. pytest killed by a CI timeout while a rank hangs in a collective), nor
    # start up as an orphan when pytest died before this line. What the rank starts is killed by the pool's reaper
    # (reaper.py): the death signal is not inherited.
    die_with_parent(signal.SIGKILL, parent=parent_pid)
    if hasattr(os, "setsid"):
        os.setsid()
    # Ctrl-C is the parent's to handle (it tears the ranks down), should one reach this process anyway.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Kept open for the life of the rank (faulthandler writes to its fd); the parent may delete the name.
    dump_file = open(dump_path, "a")
    faulthandler.register(DUMP_SIGNAL, file=dump_file, all_threads=True)
    os.environ.update(environ)
    rank = int(environ["RANK"])
    world_size = int(environ["WORLD_SIZE"])
    try:
        import datetime

        import torch.distributed as dist

        from pytest_gpuperf.distributed import rank as rank_state

        store = dist.TCPStore(
            environ["MASTER_ADDR"],
            store_port,
            world_size,
            is_master=False,
            timeout=datetime.timedelta(seconds=pg_timeout_s),
        )
        rank_state.init_process_group(
            backend=backend,
            device_type=device_type,
            timeout_s=pg_timeout_s,
            rank=rank,
            world_size=world_size,
            store=store,
            local_rank=int(environ["LOCAL_RANK"]),
        )
    except BaseException as exc:
        _send(conn, ("startup-error", summarize_exception(exc), traceback.format_exc()))
        return
    _send(conn, ("ready", os.getpid()))
    while True:
        try:
            message = wire.decode(conn.recv_bytes())
        except EOFError:  # the parent went away
            break
        if message[0] == "stop":
            break
        _, parent_path, task_bytes = message
        # The parent's import path now, not at spawn time: a later test module may live in a new directory.
        sys.path[:] = [*parent_path, *(p for p in sys.path if p not in parent_path)]
        try:
            task = wire.decode(task_bytes)
        except Exception as exc:  # fn or an argument is not importable here
            _send(
                conn,
                (
                    "error",
                    f"the task could not be unpickled in the rank: {summarize_exception(exc)}",
                    traceback.format_exc(),
                ),
            )
            continue
        try:
            value = rank_state.run_task(task)
        except BaseException as exc:
            _send(conn, ("error", summarize_exception(exc), format_user_traceback(exc)))
        else:
            _send(conn, ("ok", value))
    try:
        dist.destroy_process_group()
    finally:
        # Skip the interpreter's teardown of torch (seconds per rank): nothing is left to clean up here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
