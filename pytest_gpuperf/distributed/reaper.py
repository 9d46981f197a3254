"""What a dead pytest must not leave behind: its ranks' children, and the ranks' dump folder.

Each pool has a reaper: a small process, in a session of its own, that pytest tells which process groups (one per
rank) and which folder to watch. When pytest is gone, however it ended (SIGKILL runs no handler of pytest's), the
reaper kills those groups and removes the folder; it learns of the death from end-of-file on its stdin or from
its parent pid changing. When the reaper dies too, the folder's ``flock`` is free, and ``remove_stale_rank_folders``
removes it before the next pool starts. Standard library only: it runs as ``python -I -S reaper.py``, importing
nothing of the project or the user's environment. Why: docs/design/rank-processes.md.
"""

from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: the launcher is POSIX-only anyway (setsid, killpg)
    fcntl = None  # type: ignore[assignment]

RANK_FOLDER_PREFIX = "gpuperf-ranks-"
POLL_S = 0.25
"""How often the reaper checks that pytest is still its parent: the bound on an orphan's life when a forked
copy of pytest keeps the pipe open."""
KILL_WAIT_S = 5.0
"""How long the reaper repeats its kill while a group still has members (a fork racing the first kill)."""
STOP_WAIT_S = 5.0
"""How long ``Reaper.stop`` waits for the reaper to exit after being told to quit."""
EMPTY_FOLDER_GRACE_S = 60.0
"""An unlocked folder that is still empty may belong to an owner between ``mkdtemp`` and ``flock``; only past
this age is it taken for stale."""


class Reaper:
    """The parent's handle on one reaper process (one per rank pool)."""

    def __init__(self, executable: str) -> None:
        self._process: subprocess.Popen[bytes] | None = subprocess.Popen(
            [executable, "-I", "-S", os.path.abspath(__file__)],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            close_fds=True,
            start_new_session=True,
        )

    def _tell(self, *words: str) -> None:
        process = self._process
        if process is None or process.stdin is None:
            return
        try:
            process.stdin.write((" ".join(words) + "\n").encode())
            process.stdin.flush()
        except (BrokenPipeError, ValueError):
            pass  # the reaper is gone: the parent still kills its ranks itself while it lives

    def watch_group(self, pid: int) -> None:
        """Kill process group ``pid`` (a rank's session) if pytest dies."""
        self._tell("group", str(pid))

    def watch_folder(self, path: str) -> None:
        """Remove ``path`` if pytest dies."""
        self._tell("folder", os.fsencode(path).hex())  # hex: a TMPDIR may hold spaces or newlines

    def forget_folder(self, path: str) -> None:
        """``path`` is gone (removed by the parent): the reaper must not remove a later folder of that name."""
        self._tell("forget", os.fsencode(path).hex())

    def stop(self) -> None:
        """The parent has killed and reaped what it watched: let the reaper exit without touching anything
        (a reaped rank's pid may already name someone else's group)."""
        process, self._process = self._process, None
        if process is None:
            return
        try:
            if process.stdin is not None:
                process.stdin.write(b"quit\n")
                process.stdin.close()
        except (BrokenPipeError, ValueError):
            pass
        try:
            process.wait(STOP_WAIT_S)
        except subprocess.TimeoutExpired:  # pragma: no cover - a reaper stuck past its kill loop
            process.kill()
            process.wait()


def make_rank_folder(parent: str | None = None) -> tuple[str, int]:
    """A new ``gpuperf-ranks-*`` folder and the descriptor that holds its lock; close the descriptor only when
    the folder is removed (or the process ends: the kernel then releases the lock, marking the folder stale)."""
    path = tempfile.mkdtemp(prefix=RANK_FOLDER_PREFIX, dir=parent)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    if fcntl is not None:
        # Blocking: a cleaner holding the lock right now sees an empty, young folder and lets it go.
        fcntl.flock(fd, fcntl.LOCK_EX)
    return path, fd


def remove_stale_rank_folders(parent: str | None = None) -> list[str]:
    """Remove the rank folders left by dead owners under ``parent`` (the temporary folder by default).

    Only real folders (not links) of this user named ``gpuperf-ranks-*`` whose lock no live process holds; an
    empty one only past ``EMPTY_FOLDER_GRACE_S`` (its owner may not have locked it yet). Returns what was removed.
    """
    if fcntl is None:  # pragma: no cover - no locks, no way to tell a live owner
        return []
    parent = parent or tempfile.gettempdir()
    removed = []
    try:
        names = [n for n in os.listdir(parent) if n.startswith(RANK_FOLDER_PREFIX)]
    except OSError:
        return []
    for name in names:
        path = os.path.join(parent, name)
        try:
            # O_NOFOLLOW: a link named like a folder of ours is not opened, let alone emptied.
            fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if info.st_uid != os.getuid():
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # held: its owner lives
            if not os.listdir(fd) and time.time() - info.st_mtime < EMPTY_FOLDER_GRACE_S:
                continue
            if os.path.samestat(info, os.lstat(path)):  # still the folder we locked, not one renamed into place
                shutil.rmtree(path, ignore_errors=True)
                removed.append(path)
        except OSError:
            continue
        finally:
            os.close(fd)
    return removed


# --- the reaper process ----------------------------------------------------------------------------------------


def _kill_groups(groups: set[int]) -> None:
    """SIGKILL each group until it has no member left (bounded): a member forking during the first kill could
    leave a child behind."""
    deadline = time.monotonic() + KILL_WAIT_S
    while groups and time.monotonic() < deadline:
        for group in list(groups):
            try:
                os.killpg(group, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                # Empty (its rank had not yet called setsid, or all of it is gone), or not ours.
                groups.discard(group)
        if groups:
            time.sleep(0.02)


def _main() -> None:
    # Ctrl-C and a closed terminal are for pytest; this process acts when pytest is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    parent = os.getppid()
    groups: set[int] = set()
    folders: set[str] = set()
    stdin = sys.stdin.fileno()
    buffer = b""
    while True:
        readable, _, _ = select.select([stdin], [], [], POLL_S)
        if readable:
            chunk = os.read(stdin, 4096)
            if not chunk:
                break  # EOF: pytest is gone (or closed the pipe without "quit": treat it as gone)
            buffer += chunk
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                command, _, argument = line.decode().partition(" ")
                if command == "quit":
                    return
                if command == "group":
                    groups.add(int(argument))
                elif command == "folder":
                    folders.add(os.fsdecode(bytes.fromhex(argument)))
                elif command == "forget":
                    folders.discard(os.fsdecode(bytes.fromhex(argument)))
        elif os.getppid() != parent:
            break
    _kill_groups(groups)
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    _main()
