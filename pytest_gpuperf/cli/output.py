"""Writing what the commands produce: reports, tables, signatures, keys.

Every failure to write (a folder where a file was asked for, a path under a file, no permission, a full disk, a
FIFO nobody reads, a folder that does not exist: none is created, as `keygen` creates none) becomes an
``InputError`` naming the path and what to do. A regular file is written to a temporary file beside it and
renamed over it, so a failed write leaves any earlier file whole; devices, pipes (``-o /dev/stdout``) and a
writable file in a folder that cannot take new files are written in place. Text is made printable first: a lone
surrogate (from a test id of undecodable bytes) is written as its ``\\udXXX`` escape instead of failing the
UTF-8 encoder. No output may be one of the command's inputs (``check_not_an_input``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from pytest_gpuperf.cli.loading import SUFFIXES as READ_SUFFIXES
from pytest_gpuperf.cli.loading import InputError, walk_files


def printable(text: str) -> str:
    """``text`` with lone surrogates replaced by their backslash escapes, so any UTF-8 encoder takes it."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def emit(text: str) -> None:
    """Print to standard output in whatever encoding it has, escaping what it cannot encode."""
    text = printable(text)
    encoding = getattr(sys.stdout, "encoding", None) or "utf-8"
    try:
        text.encode(encoding)
    except UnicodeEncodeError:  # an ASCII terminal (LANG=C without UTF-8 mode) and a '±' in a note
        text = text.encode(encoding, "backslashreplace").decode(encoding)
    sys.stdout.write(text)


OUTPUT_HINT = "give another path with -o/--output"


def write_text(path: Path, text: str, *, what: str = "output file", hint: str = OUTPUT_HINT) -> None:
    write_bytes(path, printable(text).encode("utf-8"), what=what, hint=hint)


def write_bytes(
    path: Path, data: bytes, *, what: str = "output file", hint: str = OUTPUT_HINT, mode: int | None = None
) -> None:
    """``data`` into ``path``; ``mode`` (e.g. 0o600) for a new regular file, else the umask's default.
    ``what`` and ``hint`` complete the error message: what was being written, and what to do instead."""
    try:
        status: os.stat_result | None = os.stat(path)
    except FileNotFoundError:
        status = None
    except OSError as error:
        raise _cannot(path, error, what, hint) from None
    if status is not None and stat.S_ISDIR(status.st_mode):
        raise InputError(f"{path}: cannot write the {what}: it is a folder; give a file name inside it")
    if status is not None and not stat.S_ISREG(status.st_mode):
        _write_in_place(path, data, what, hint)
        return
    target = Path(os.path.realpath(path))  # through a link to the file it names, keeping the link
    check_folder(target, what=what, shown=path)
    try:
        descriptor, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except PermissionError as error:
        if status is None:
            raise _cannot(path, error, what, hint) from None
        _write_in_place(path, data, what, hint)  # a writable file in a folder we may not add files to
        return
    except OSError as error:
        raise _cannot(path, error, what, hint) from None
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(temporary, mode if mode is not None else (status.st_mode & 0o7777 if status else _default_mode()))
        os.replace(temporary, target)
    except BaseException as error:  # Ctrl-C included: no temporary file is left beside the target
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(error, OSError):
            raise _cannot(path, error, what, hint) from None
        raise


def check_folder(path: Path, *, what: str = "output file", shown: Path | None = None) -> None:
    """Refuse an output whose folder does not exist, as `gpuperf keygen` does: a typo in a path must not create a
    tree of folders somewhere else. Any other problem with the path is left to the write, which names it."""
    folder = path.parent
    try:
        os.stat(folder)
    except FileNotFoundError:
        raise InputError(
            f"{shown or path}: cannot write the {what}: no such folder {folder}; create it (mkdir -p {folder}) "
            f"first or {OUTPUT_HINT}"
        ) from None
    except OSError:
        return


def check_not_an_input(
    path: Path, inputs: Sequence[Path], *, option: str, suffixes: tuple[str, ...] = READ_SUFFIXES
) -> None:
    """Refuse an output that is one of the command's inputs (the same file by real path or inode, a hard link
    included) or a file its folder input reads again (a results suffix under it): the write would replace a
    node's only results, or the next run would read the output as one."""
    real = os.path.realpath(path)
    try:
        written = os.stat(path)
    except OSError:
        written = None
    for given in inputs:
        try:
            status = os.stat(given)
        except OSError:
            continue  # not a path (a pin list such as 'torch==2.1') or not there: the command itself says so
        folder = os.path.realpath(given)
        same = real == folder or (
            written is not None and (written.st_dev, written.st_ino) == (status.st_dev, status.st_ino)
        )
        inside = (
            stat.S_ISDIR(status.st_mode)
            and real.startswith(folder.rstrip(os.sep) + os.sep)
            and Path(real).suffix.lower() in suffixes
        )
        linked = (
            not same
            and written is not None
            and written.st_nlink > 1
            and stat.S_ISDIR(status.st_mode)
            and any(_same_file(file, written) for file in walk_files(Path(given), suffixes))
        )
        if same:
            problem = f"names the input {given}: writing it would destroy that input"
        elif linked:
            problem = f"is a hard link to a file of the input folder {given}, which writing it would destroy"
        elif inside and written is not None:
            problem = f"would overwrite a file of the input folder {given}"
        elif inside:
            problem = f"is inside the input folder {given}, whose next reading would take it for results"
        else:
            continue
        raise InputError(f"{path}: {option} {problem}; write it outside the inputs")


def _same_file(path: Path, status: os.stat_result) -> bool:
    try:
        found = os.stat(path)
    except OSError:
        return False
    return (found.st_dev, found.st_ino) == (status.st_dev, status.st_ino)


def _write_in_place(path: Path, data: bytes, what: str, hint: str) -> None:
    """A device, a pipe, or a file whose folder we may not write: opened without blocking (a FIFO nobody reads
    fails at once instead of hanging) and truncated only once open."""
    try:
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
        descriptor = os.open(path, flags)
        if stat.S_ISREG(os.fstat(descriptor).st_mode):
            os.ftruncate(descriptor, 0)
    except OSError as error:
        if error.errno == errno.ENXIO:
            raise InputError(
                f"{path}: cannot write the {what}: it is a FIFO no program is reading; start the reader first or "
                "give a regular file"
            ) from None
        raise _cannot(path, error, what, hint) from None
    try:
        os.set_blocking(descriptor, True)  # a pipe with a reader: wait for it rather than fail when it is full
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
    except OSError as error:
        raise _cannot(path, error, what, hint) from None


def _cannot(path: Path, error: OSError, what: str, hint: str) -> InputError:
    reason = error.strerror or str(error)
    if error.errno in (errno.ENOTDIR, errno.EEXIST):
        reason = "a part of the path is a file, not a folder"
    elif error.errno == errno.ENOSPC:
        reason = "no space left on the device"
    return InputError(f"{path}: cannot write the {what} ({reason}); {hint}")


def _default_mode() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask
