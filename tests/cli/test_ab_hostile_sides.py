"""`gpuperf ab` against hostile sides (issue 38): malformed results documents, wrapper scripts and FIFOs, numbers
that would hang or overflow, escape sequences in a side's output, signals; and `keygen` with an undecodable name.

The sides are a tiny script standing in for `python -m pytest ...` (SIDE below): it finds --gpuperf-results in its
arguments and does what its mode says, in milliseconds, so the command runs end to end without pytest sessions.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.ab.engine import run_ab
from pytest_gpuperf.ab.model import AbError, AbPlan, AbResult, MetricOutcome
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.core.store import schema

# What these tests check is new (issue 38): its names are imported where used, so on the code before it each test
# fails on its own rather than the whole module failing to import.

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and FIFOs: POSIX")

PYTHON = shlex.quote(sys.executable)
SIDE = r"""
import json, os, signal, sys, time

mode = os.environ.get("SIDE_MODE", "good")
results = sys.argv[sys.argv.index("--gpuperf-results") + 1]
if os.environ.get("SIDE_PIDS"):
    with open(os.environ["SIDE_PIDS"], "a") as pids:
        pids.write(f"{os.getpid()}\n")


def document(fingerprint, samples, test="t.py::test_x"):
    return {
        "schema": 1,
        "created": "",
        "fingerprint": fingerprint,
        "settings": {"threshold": 0.02},
        "results": [{"test": test, "metric": "step_s", "unit": "s", "higher_is_better": False, "samples": samples}],
    }


GOOD = {"hardware_key": {"device": "cpu"}, "hardware_slug": "cpu-x", "stack": {"python": "3"}}
if mode == "good":
    json.dump(document(GOOD, [0.010, 0.011, 0.0105], os.environ.get("SIDE_TEST", "t.py::test_x")), open(results, "w"))
elif mode == "fingerprint-int":
    json.dump(document(5, [0.01]), open(results, "w"))
elif mode == "fingerprint-str":
    json.dump(document("cpu-x", [0.01]), open(results, "w"))
elif mode == "deep":
    text = json.dumps(document(GOOD, [0.01]))
    open(results, "w").write(text.replace('"cpu"}', '"cpu", "x": ' + "[" * 100_000 + "]" * 100_000 + "}", 1))
elif mode == "nan":
    open(results, "w").write(json.dumps(document(GOOD, [0.01])).replace("0.01", "NaN"))
elif mode == "huge":
    json.dump(document(GOOD, [1e308, 1e308]), open(results, "w"))
elif mode == "fifo":
    os.mkfifo(results)
elif mode == "ansi":
    print("collected 1 item\n\x1b[2J\x1b]0;owned\x07")
    print("E   RuntimeError: \x1b[31mred\x1b[0m\x08\x08 \x9b2J")
    sys.exit(1)
elif mode == "sleep":
    time.sleep(60)
elif mode in ("sigint-parent", "sigterm-parent"):
    os.kill(os.getppid(), signal.SIGINT if mode == "sigint-parent" else signal.SIGTERM)
    time.sleep(60)
"""


@pytest.fixture
def sides(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder holding side.py and a wrapper script, as the current folder."""
    (tmp_path / "side.py").write_text(SIDE)
    (tmp_path / "wrap.sh").write_text(f'{PYTHON} side.py "$@"\necho wrapper done\n')  # no exec: python is a grandchild
    monkeypatch.chdir(tmp_path)
    return tmp_path


def side(mode: str, *, wrapped: bool = False, **env: str) -> str:
    settings = " ".join(f"{name}={shlex.quote(value)}" for name, value in {"SIDE_MODE": mode, **env}.items())
    return f"env {settings} " + ("sh wrap.sh" if wrapped else f"{PYTHON} side.py")


def ab(*args: str) -> int:
    return cli.main(["ab", "--out", "out", "--no-take-turns", *args, "--", "t.py"])


def one_line_error(err: str) -> str:
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


# -- item 3: a malformed results document is a failed session, and ab.json is still written -------------------


@pytest.mark.parametrize(
    ("mode", "found"),
    [
        ("fingerprint-int", "'fingerprint' is a number, not an object"),
        ("fingerprint-str", "'fingerprint' is a string, not an object"),
        ("deep", "nested too deeply"),
    ],
)
def test_a_malformed_results_document_fails_its_session_and_ab_json_is_written(
    sides: Path, mode: str, found: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ab("--a", side("good"), "--b", side(mode), "--max-dropped", "1")
    err = capsys.readouterr().err
    assert code == 2
    last = one_line_error(err)
    assert last.startswith("gpuperf ab: error: 2 pairs dropped (at most 1 allowed)") and found in last, last
    assert "malformed results file" in err
    document = schema.loads((sides / "out" / "ab.json").read_bytes())
    assert document["dropped_pairs"] == 2
    assert all(found in pair["dropped"] for pair in document["pairs"])


# -- item 5: process groups, FIFOs, numbers that would hang --------------------------------------------------------


def _pids(path: Path) -> list[int]:
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    """Whether a process runs (a zombie left to a PID 1 that does not reap does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return state[state.rfind(")") + 2] not in "ZX"


@pytest.mark.parametrize("turns", ["--no-take-turns", "--take-turns"])
def test_budget_stops_a_wrapper_side_s_whole_process_group_and_nothing_compared_exits_3(
    sides: Path, turns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    pids = sides / "pids.txt"
    try:
        started = time.monotonic()
        code = cli.main(
            ["ab", "--out", "out", turns, "--budget", "2s", "--a", side("sleep", wrapped=True, SIDE_PIDS=str(pids)),
             "--b", side("sleep", wrapped=True, SIDE_PIDS=str(pids)), "--", "t.py"]
        )  # fmt: skip
        err = capsys.readouterr().err
        assert _pids(pids), err  # the real sides ran (as grandchildren of ab, under sh)
        assert not [pid for pid in _pids(pids) if _alive(pid)], "a side's Python outlived its session"
        assert time.monotonic() - started < 30
        assert code == 3, err
        last = one_line_error(err)
        assert last.startswith("gpuperf ab: nothing compared: --budget 2 s ran out before any pair completed"), last
        assert schema.loads((sides / "out" / "ab.json").read_bytes())["stopped"] == "budget"
    finally:
        for pid in _pids(pids):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_stop_group_escalates_to_sigterm_and_sigkill_for_a_group_that_ignores_them(tmp_path: Path) -> None:
    from pytest_gpuperf.core.record import children

    ignore = "import signal, time; signal.signal(signal.SIGINT, signal.SIG_IGN); "
    ignore += "signal.signal(signal.SIGTERM, signal.SIG_IGN)"
    script = tmp_path / "stubborn.py"
    script.write_text(
        f"{ignore}\nimport subprocess, sys\n"
        f"child = subprocess.Popen([sys.executable, '-c', {ignore + '; time.sleep(60)'!r}])\n"
        "print(child.pid, flush=True)\ntime.sleep(60)\n"
    )
    with (tmp_path / "log").open("wb") as log:
        process = children.Supervised(
            [sys.executable, str(script)],
            stdout=log,
            cwd=tmp_path,
            env=dict(os.environ),
            stopping=children.Stopping(grace=0.5),
        )
    deadline = time.monotonic() + 20
    while not (tmp_path / "log").read_text().strip() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int((tmp_path / "log").read_text().split()[0])
    started = time.monotonic()
    process.stop()
    assert process.returncode == -signal.SIGKILL
    assert not _alive(grandchild) and not children.group_alive(process.pid)
    assert time.monotonic() - started < 5


def test_strays_a_finished_session_left_in_its_group_are_ended(tmp_path: Path) -> None:
    from pytest_gpuperf.core.record import children

    with (tmp_path / "log").open("wb") as log:
        process = children.Supervised(
            ["sh", "-c", f"{PYTHON} -c 'import time; time.sleep(60)' & echo $!"],
            stdout=log,
            cwd=tmp_path,
            env=dict(os.environ),
        )
    process.wait(timeout=20)
    stray = int((tmp_path / "log").read_text().split()[0])
    assert _alive(stray)
    assert process.end_strays(grace=2.0)
    assert not _alive(stray)


def test_a_fifo_left_at_the_results_path_does_not_hang_ab(tmp_path: Path) -> None:
    def fifo_side(argv: list[str], *, log_file: Path, timeout: Any, cwd: Any, env: Any) -> tuple[int, float]:
        log_file.write_text("")
        os.mkfifo(argv[argv.index("--gpuperf-results") + 1])
        return 0, 0.1

    plan = AbPlan(cmd_a=("python-a",), cmd_b=("python-b",), pytest_args=("t.py",), out_dir=tmp_path, max_dropped=0)
    outcome: list[BaseException | None] = []
    worker = threading.Thread(target=lambda: outcome.append(_raised(lambda: run_ab(plan, runner=fifo_side))))
    worker.daemon = True
    worker.start()
    worker.join(timeout=20)
    if worker.is_alive():  # free the engine blocked on the FIFO, so the test process can end
        for fifo in tmp_path.glob("sessions/*.json"):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("gpuperf ab hung reading a FIFO a side left at its results path")
    [error] = outcome
    assert isinstance(error, AbError) and "is a FIFO (named pipe), not a regular file" in str(error)


def _raised(call: Any) -> BaseException | None:
    try:
        call()
    except BaseException as error:  # noqa: BLE001 - handed to the test thread
        return error
    return None


def _cli_env(**changes: str) -> dict[str, str]:
    """This process's environment, the child importing the pytest_gpuperf these tests import (not another copy)."""
    import pytest_gpuperf

    root = str(Path(pytest_gpuperf.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])), **changes}


def _cli_bounded(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The command in a child with 2 GiB of address space and 60 s: a hang or a runaway allocation fails the test
    instead of the machine."""

    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))

    return subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=limit,
        env=_cli_env(),
    )


@pytest.mark.parametrize("option", ["--max-pairs", "--max-dropped", "--max-left-out"])
def test_a_pair_count_of_30_digits_is_refused_naming_the_option(sides: Path, option: str) -> None:
    ran = _cli_bounded("ab", "--out", "out", "--no-take-turns", "--a", side("good"), "--b", side("good"),
                       option, "9" * 30, "--", "t.py", cwd=sides)  # fmt: skip
    assert ran.returncode == 2, ran.stderr[-2000:]
    last = one_line_error(ran.stderr)
    assert last == (
        f"gpuperf ab: error: {option} of 30 digits: at most 500 pairs (a comparison of 500 pairs takes hours); "
        "give a smaller number, with --budget to bound the time"
    )


def test_a_cpu_range_beyond_the_machine_is_refused_naming_the_cpus(sides: Path) -> None:
    ran = _cli_bounded("ab", "--a", "x", "--b", "y", "--cpus", "0-99999999999", "--", "t.py", cwd=sides)
    assert ran.returncode == 2, ran.stderr[-2000:]
    last = one_line_error(ran.stderr)
    have = os.cpu_count() or 1
    assert f"'0-99999999999': CPUs {have}-99999999999 are not CPUs of this machine (it has {have}" in last, last


# -- item 8: nothing compared, or interrupted, is not a pass --------------------------------------------------------


def test_ctrl_c_exits_130_with_the_verdicts_so_far_written(sides: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = ab("--a", side("good"), "--b", side("sigint-parent"))
    err = capsys.readouterr().err
    assert code == 130, err
    last = one_line_error(err)
    assert last.startswith("gpuperf ab: interrupted (SIGINT) after 0 complete pair(s): not a pass"), last
    assert schema.loads((sides / "out" / "ab.json").read_bytes())["stopped"] == "interrupted"


def test_sigterm_stops_the_sessions_writes_ab_json_and_exits_143(sides: Path) -> None:
    pids = sides / "pids.txt"
    try:
        ran = subprocess.run(
            [sys.executable, "-m", "pytest_gpuperf.cli", "ab", "--out", "out", "--no-take-turns", "--a",
             side("good"), "--b", side("sigterm-parent", SIDE_PIDS=str(pids)), "--", "t.py"],
            cwd=sides, capture_output=True, text=True, timeout=60, env=_cli_env(),
        )  # fmt: skip
        assert ran.returncode == 128 + signal.SIGTERM, (ran.returncode, ran.stderr[-2000:])
        assert "gpuperf ab: interrupted (SIGTERM)" in one_line_error(ran.stderr)
        assert schema.loads((sides / "out" / "ab.json").read_bytes())["stopped"] == "interrupted"
        assert _pids(pids) and not [pid for pid in _pids(pids) if _alive(pid)]
    finally:
        for pid in _pids(pids):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_nothing_compared_says_why() -> None:
    from pytest_gpuperf.cli.ab import nothing_compared

    plan = AbPlan(cmd_a=("a",), cmd_b=("b",), pytest_args=("t.py",), out_dir=Path("out"))
    result = AbResult(plan=plan, stopped="max pairs")
    assert nothing_compared(result) == ("no pair completed (stopped: max pairs); see the sessions' logs in out")
    left_out = MetricOutcome(test="t", metric="m", unit="s", higher_is_better=False, contended=["pair 1: B: steal"])
    result.metrics[("t", "m")] = left_out
    result.pairs = []
    assert nothing_compared(result) is not None
    left_out.log_ratios.append(0.01)
    assert nothing_compared(result) is None


# -- item 10: ab.json is strict JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("mode", "found"), [("nan", "NaN is not a number"), ("huge", "samples must be between")])
def test_non_finite_or_extreme_samples_are_refused_and_ab_json_stays_strict(
    sides: Path, mode: str, found: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = ab("--a", side("good"), "--b", side(mode), "--max-dropped", "1")
    assert code == 2
    document = schema.loads((sides / "out" / "ab.json").read_bytes())  # strict: refuses NaN and Infinity
    assert all(found in pair["dropped"] for pair in document["pairs"]), document["pairs"][0]["dropped"]
    assert found in one_line_error(capsys.readouterr().err)


def test_a_budget_beyond_float_range_is_refused(sides: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert ab("--a", side("good"), "--b", side("good"), "--budget", "9" * 400) == 2
    assert one_line_error(capsys.readouterr().err).startswith("gpuperf ab: error: --budget of inf s: at most")
    assert not (sides / "out" / "ab.json").exists()


def test_ab_json_text_maps_non_finite_figures_to_null() -> None:
    from pytest_gpuperf.ab.model import document_text

    text = document_text({"budget_s": float("inf"), "interval": [float("nan"), 1.5], "path": Path("x")})
    assert schema.loads(text) == {"budget_s": None, "interval": [None, 1.5], "path": "x"}


# -- item 15: a side's output never reaches the terminal raw; keygen checks its names first ---------------------


def test_a_side_s_escape_sequences_are_escaped_on_the_terminal(sides: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = ab("--a", side("good"), "--b", side("ansi"), "--max-dropped", "0")
    out, err = capsys.readouterr()
    assert code == 2
    assert not {"\x1b", "\x08", "\x9b", "\x07"} & set(out + err)
    assert "RuntimeError: \\x1b[31mred\\x1b[0m\\x08\\x08 \\x9b2J" in one_line_error(err)


def test_escape_sequences_in_a_test_id_are_escaped_in_the_table(
    sides: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    test = "t.py::test_\x1b[2Jx"
    code = ab("--a", side("good", SIDE_TEST=test), "--b", side("good", SIDE_TEST=test), "--max-pairs", "4")
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "\x1b" not in out + err and "t.py::test_\\x1b[2Jx" in out


def test_terminal_text_escapes_controls_and_lone_surrogates() -> None:
    from pytest_gpuperf.cli.ab import terminal_text

    assert terminal_text("a\x1b[2J\r\n\x9b\u202e\udcff ok") == "a\\x1b[2J\\x0d\\x0a\\x9b\\u202e\\udcff ok"


def test_keygen_refuses_an_undecodable_name_before_writing_anything(tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    name = os.fsdecode(b"partner-\xff.key")
    ran = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "keygen", name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        errors="replace",
        env=_cli_env(PYTHONIOENCODING="utf-8"),
        timeout=60,
    )
    assert ran.returncode == 2, ran.stderr
    assert one_line_error(ran.stderr).startswith("gpuperf keygen: error: partner-\\udcff.key: the key's file name is")
    assert os.listdir(tmp_path) == []


def test_the_ab_json_a_run_writes_is_what_report_reads(tmp_path: Path) -> None:
    """The writer's document passes the report's strict reader (round trip)."""
    from pytest_gpuperf.ab.model import document_text
    from pytest_gpuperf.cli.loading import check_ab_document

    result = AbResult(plan=AbPlan(cmd_a=("a",), cmd_b=("b",), pytest_args=("t.py",), out_dir=tmp_path))
    document = schema.loads(document_text(result.as_dict()))
    check_ab_document(document, tmp_path / "ab.json")
    assert json.loads(document_text(result.as_dict()))["metrics"] == []
