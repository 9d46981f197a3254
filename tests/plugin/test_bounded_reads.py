"""One bounded reader of regular files for every document gpuperf parses (issue 38, item 4).

A FIFO named ``*.json`` under ``baselines/<key>/`` hung every perf session at collection, and a ``*.json`` link to
``/dev/zero`` or ``/dev/urandom`` ate memory: the store read with ``read_bytes()``, unchecked and unbounded, as
did ``--gpuperf-models hf:PATH`` and ``gpuperf models hf:PATH``. Cases that hang or eat memory without the fix
run in a child process with a time limit and an address-space limit.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pytest_gpuperf.cli import loading
from pytest_gpuperf.core.store import schema
from pytest_gpuperf.core.store.baselines import (
    BaselineFileError,
    BaselineStore,
    MetricRun,
    NewMetric,
    SaveError,
    read_document,
)

KEY = {"device": "cpu", "accelerator": None, "cpu": {"model": "x", "cores": 2, "ram_gib": 4}, "nodes": 1}
DEVICES = [device for device in ("/dev/zero", "/dev/urandom") if Path(device).exists()]
SESSION = """
import pytest

@pytest.mark.perf
def test_a(perf):
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)
"""


def bounded(argv: list[str], *, timeout: float = 60, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``argv`` in a child: 4 GiB of address space, ``timeout`` seconds (a hang is a TimeoutExpired)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))

    return subprocess.run(
        argv, capture_output=True, text=True, timeout=timeout, preexec_fn=limit, cwd=cwd, env=dict(os.environ)
    )


def open_and_close(fifo: Path) -> None:
    """Give a reader blocked in opening ``fifo`` a writer that closes at once; nothing when none waits."""
    try:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        pass


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


# -- the reader itself --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_devices_are_refused_unread_by_every_reader(tmp_path: Path, device: str) -> None:
    link = tmp_path / "module.json"
    link.symlink_to(device)
    with pytest.raises(schema.UnreadableFile, match=r"module.json: is a character device, not a regular file"):
        schema.read_file(link)
    with pytest.raises(BaselineFileError, match=r"is a character device, not a regular file; remove it"):
        read_document(link)
    with pytest.raises(loading.InputError, match=r"is a character device, not a regular file; save the data"):
        loading.read_bytes(link)


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "module.json"
    os.mkfifo(fifo)
    code = (
        "import sys; from pathlib import Path\n"
        "from pytest_gpuperf.core.store.baselines import read_document, StoreError\n"
        "try:\n    read_document(Path(sys.argv[1]))\nexcept StoreError as error:\n    print(error)\n"
    )
    done = bounded([sys.executable, "-c", code, str(fifo)], timeout=30)
    assert one_line(done.stdout) == (
        f"baseline file {fifo} is a FIFO (named pipe), not a regular file; remove it (a baseline is a regular JSON "
        "file)"
    )


def test_the_bound_holds_whatever_size_a_file_reports(tmp_path: Path) -> None:
    proc = Path("/proc/self/maps")
    if not proc.exists():
        pytest.skip("no /proc here")
    with pytest.raises(schema.UnreadableFile, match="more than the 64 bytes a file may have") as raised:
        schema.read_file(proc, limit=64)
    assert raised.value.kind == "large"
    exact = tmp_path / "exact.json"
    exact.write_bytes(b"x" * 64)
    assert schema.read_file(exact, limit=64) == b"x" * 64


def test_a_save_into_a_folder_with_a_fifo_writes_the_other_files(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    (tmp_path / "cpu-x").mkdir()
    fifo = tmp_path / "cpu-x" / "b.json"
    os.mkfifo(fifo)
    run = MetricRun(samples=[1.0, 2.0, 3.0], stack={}, date="2026-01-01", summary={})
    metrics = [
        NewMetric(test=f"{name}.py::t", name="time", unit="s", higher_is_better=False, run=run) for name in "abc"
    ]
    release = threading.Timer(20, open_and_close, [fifo])  # a reader blocked on the FIFO gets its end of file
    release.daemon = True
    release.start()
    try:
        with pytest.raises(SaveError) as raised:
            store.save(metrics, [], keep_runs=3)
    finally:
        release.cancel()
    assert [path.name for path in raised.value.written] == ["a.json", "c.json"]
    [(path, reason)] = raised.value.failed
    assert path.name == "b.json" and "FIFO (named pipe), not a regular file" in reason


# -- a perf session -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", *DEVICES])
def test_a_perf_session_stops_with_one_line_instead_of_hanging(pytester: pytest.Pytester, kind: str) -> None:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    pytester.makepyfile(test_a=SESSION)
    first = pytester.runpytest("-m", "perf", "--gpuperf-device", "cpu", "--gpuperf-save")
    first.assert_outcomes(passed=1)
    [folder] = (pytester.path / "baselines").iterdir()
    planted = folder / "other.json"
    if kind == "fifo":
        os.mkfifo(planted)
    else:
        planted.symlink_to(kind)
    done = bounded(
        [sys.executable, "-m", "pytest", "-m", "perf", "--gpuperf-device", "cpu", "-q"], cwd=pytester.path, timeout=90
    )
    text = done.stdout + done.stderr
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, text
    assert "Traceback" not in text and "MemoryError" not in text, text
    what = "FIFO (named pipe)" if kind == "fifo" else "character device"
    assert f"baseline file {planted} is a {what}, not a regular file; remove it" in text, text


# -- model configurations: --gpuperf-models hf:PATH and gpuperf models hf:PATH -----------------------------------


def hostile_config(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / "config.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "nested":
        path.write_text("[" * 100_000 + "]" * 100_000)
    elif kind == "large":
        path.write_bytes(b" " * (17 << 20) + b"{}")
    else:
        path.symlink_to(kind)
    return path


KINDS = ["fifo", "nested", "large", *DEVICES]
EXPECTED = {
    "fifo": "is a FIFO (named pipe), not a regular file",
    "nested": "not valid JSON (nested too deeply to read)",
    "large": "is larger than the 16777216 bytes a file may have",
    "/dev/zero": "is a character device, not a regular file",
    "/dev/urandom": "is a character device, not a regular file",
}


@pytest.mark.parametrize("kind", KINDS)
def test_gpuperf_models_refuses_a_hostile_config_in_one_line(tmp_path: Path, kind: str) -> None:
    path = hostile_config(tmp_path, kind)
    done = bounded([sys.executable, "-m", "pytest_gpuperf.cli", "models", f"hf:{path}"])
    assert done.returncode == 2, done.stderr[-2000:]
    line = one_line(done.stderr)
    assert line.startswith(f"gpuperf models: error: {path}: ") and EXPECTED[kind] in line, line


@pytest.mark.parametrize("kind", KINDS)
def test_the_models_option_refuses_a_hostile_config_in_one_line(pytester: pytest.Pytester, kind: str) -> None:
    path = hostile_config(pytester.path, kind)
    pytester.makepyfile("def test_nothing(model):\n    pass\n")
    done = bounded(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--gpuperf-models", f"hf:{path}"], cwd=pytester.path
    )
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stdout + done.stderr
    assert EXPECTED[kind] in one_line(done.stderr)


def test_a_plain_config_still_reads(tmp_path: Path) -> None:
    from pytest_gpuperf.models import hf

    path = tmp_path / "mine.json"
    path.write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 2, "_gpuperf": {"source": "mine"}}))
    fields, meta = hf.read_config(str(path))
    assert fields == {"model_type": "llama", "num_hidden_layers": 2} and meta == {"source": "mine"}
