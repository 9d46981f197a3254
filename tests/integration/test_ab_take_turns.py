"""`gpuperf ab --take-turns`: both sessions of a pair at once, one turn handed between them (real sessions)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.ab.turns import PINNED, UNPINNED
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.core.session.turns import ASK, DONE, GRANT, Turns

WORKLOAD = """
import json, os, time, pytest

def log(test, what):
    with open(os.environ["AB_EVENTS"], "a") as events:
        events.write(json.dumps([os.environ["AB_SIDE"], test, what, time.monotonic()]) + "\\n")

@pytest.mark.perf
@pytest.mark.parametrize("n", [1, 2, 3])
def test_step(perf, n):
    log(n, "start")
    time.sleep(0.05)  # long enough that a partner running alongside would overlap
    perf.record("t", [0.01 * (1 + 0.001 * i) for i in range(5)], unit="s", higher_is_better=False)
    log(n, "end")

@pytest.mark.perf
def test_measured(perf):
    calls = []
    def call():
        calls.append(time.monotonic())
        time.sleep(0.01)
        calls.append(time.monotonic())
    log("setup", "start")
    perf.measure("call", call, repeats=5, warmup=1)  # asks for the turn again before its round
    log("setup", "end")
    with open(os.environ["AB_EVENTS"], "a") as events:  # the warm-up call and the timed ones, each
        for number in range(0, len(calls), 2):
            for what, stamp in (("start", calls[number]), ("end", calls[number + 1])):
                events.write(json.dumps([os.environ["AB_SIDE"], f"call{number // 2}", what, stamp]) + "\\n")
"""

PYTHON = shlex.quote(sys.executable)
FAST = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist", "--gpuperf-device", "cpu"]
pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")


@pytest.fixture
def workload(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "test_turns_workload.py").write_text(WORKLOAD)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AB_EVENTS", str(tmp_path / "events.jsonl"))
    return tmp_path


def events(folder: Path) -> list[tuple[str, object, str, float]]:
    return [tuple(json.loads(line)) for line in (folder / "events.jsonl").read_text().splitlines()]


def test_the_two_sides_take_turns_test_by_test_and_never_overlap(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = cli.main([
        "ab", "--a", f"env AB_SIDE=A {PYTHON}", "--b", f"env AB_SIDE=B {PYTHON}", "--take-turns",
        "--min-pairs", "2", "--max-pairs", "2", "--seed", "1", "--out", "out", "--",
        "test_turns_workload.py", *FAST,
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code in (0, 1), out + err  # the verdict is the timings' business; the turns are what is checked here
    document = json.loads((workload / "out" / "ab.json").read_text())
    assert document["complete_pairs"] == 2 and document["dropped_pairs"] == 0
    seen = events(workload)
    by_pair: list[list[tuple[str, object, str, float]]] = [seen[: len(seen) // 2], seen[len(seen) // 2 :]]
    for order, pair_events in zip(document["order"], by_pair):
        starts = [
            (side, test) for side, test, what, _ in pair_events if what == "start" and not str(test).startswith("call")
        ]
        # each test of the first side, then the same test of the other: A1 B1 A2 B2 ... (or B first)
        first, second = order[0], order[1]
        expected = [(side, test) for test in (1, 2, 3, "setup") for side in (first, second)]
        assert starts == expected, (order, starts)
        spans: dict[tuple[str, object], dict[str, float]] = {}
        for side, test, what, stamp in pair_events:
            spans.setdefault((side, test), {})[what] = stamp
        held = [key for key in spans if key[1] != "setup"]  # the step tests, and each measured call: turn held
        for side, test in held:
            for other, other_test in held:
                if other != side:  # one side's test or call never runs while the other side's does
                    mine, theirs = spans[(side, test)], spans[(other, other_test)]
                    assert mine["end"] <= theirs["start"] or theirs["end"] <= mine["start"], (side, test, other_test)
        calls = sorted((span["start"], side) for (side, test), span in spans.items() if str(test).startswith("call"))
        assert len(calls) == 12  # 1 warm-up + 5 timed calls a side
        assert [side for _, side in calls] == [first, second] * 6  # call by call, the pair's first side first
    for pair in document["pairs"]:
        for session in pair["sessions"]:
            assert "--gpuperf-take-turns" in session["argv"]
    assert not list((workload / "out" / "sessions").glob("*.ask"))  # the pipes are removed after the pair


def test_a_partner_that_dies_leaves_the_other_to_run_alone_and_the_pair_dropped(
    workload: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workload / "conftest.py").write_text(
        "import os, signal\n"
        "def pytest_sessionstart(session):\n"
        "    if os.environ.get('AB_SIDE') == 'B' and not os.path.exists('crashed'):\n"
        "        open('crashed', 'w').close()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    code = cli.main([
        "ab", "--a", f"env AB_SIDE=A {PYTHON}", "--b", f"env AB_SIDE=B {PYTHON}", "--take-turns",
        "--min-pairs", "2", "--max-pairs", "2", "--out", "out", "--", "test_turns_workload.py", "-k", "step", *FAST,
    ])  # fmt: skip
    out, err = capsys.readouterr()
    assert code in (0, 1), out + err
    assert "dropped (B: killed by SIGKILL" in err
    document = json.loads((workload / "out" / "ab.json").read_text())
    assert document["dropped_pairs"] == 1 and document["complete_pairs"] == 2
    dropped = next(pair for pair in document["pairs"] if pair.get("dropped"))
    side_a = next(s for s in dropped["sessions"] if s["side"] == "A")
    assert side_a["returncode"] == 0  # A was granted its turns alone once B was gone, and finished


def test_the_option_refuses_missing_pipes_and_xdist(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x(): pass")
    result = pytester.runpytest("--gpuperf-take-turns", str(pytester.path / "nowhere"))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --gpuperf-take-turns *nowhere.ask is not a named pipe*gpuperf ab --take-turns*"]
    )
    result = pytester.runpytest("-n", "2", "--gpuperf-take-turns", "x")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --gpuperf-take-turns is one session's turn*xdist workers*"])


def test_a_session_whose_broker_is_gone_goes_on_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    prefix = tmp_path / "side"
    os.mkfifo(f"{prefix}.ask")
    os.mkfifo(f"{prefix}.grant")
    ask = os.open(f"{prefix}.ask", os.O_RDWR | os.O_NONBLOCK)  # the broker's ends
    grant = os.open(f"{prefix}.grant", os.O_RDWR | os.O_NONBLOCK)
    turns = Turns(str(prefix))
    os.write(grant, GRANT)
    turns.take()
    assert os.read(ask, 8) == ASK
    os.close(ask)
    os.close(grant)  # the broker is gone: end-of-file (or a broken pipe) on the next ask
    turns.take()
    turns.take()  # alone from now on: no more waiting
    assert turns.asked == 2
    assert "measuring without turns" in capsys.readouterr().err
    turns.done()


def test_done_tells_the_broker(tmp_path: Path) -> None:
    prefix = tmp_path / "side"
    os.mkfifo(f"{prefix}.ask")
    os.mkfifo(f"{prefix}.grant")
    ask = os.open(f"{prefix}.ask", os.O_RDWR | os.O_NONBLOCK)
    grant = os.open(f"{prefix}.grant", os.O_RDWR | os.O_NONBLOCK)
    turns = Turns(str(prefix))
    os.write(grant, GRANT)
    turns.take()
    turns.done()
    assert os.read(ask, 8) == ASK + DONE
    os.close(ask)
    os.close(grant)


def test_load_while_waiting_for_the_turn_is_counted_in_the_waits(tmp_path: Path) -> None:
    # A process outside this one's tree (started through a shell that exits: reparented) burns ~0.4 s of CPU
    # while this process waits at its taking-turns gate: the gate's totals hold its ticks and the wall time.
    from pytest_gpuperf.core.session.turns import TakingTurns
    from pytest_gpuperf.machine import contention

    done_file = tmp_path / "done"
    script = (
        "import sys, time\nend = time.process_time() + 0.4\nwhile time.process_time() < end: pass\n"
        f"open({str(done_file)!r}, 'w').close()"
    )
    gate = TakingTurns(Turns(str(tmp_path / "side")))  # its channel is never asked: the block is the wait
    before = contention.read_snapshot(gate.waited())
    with gate.waiting():
        subprocess.run(
            ["sh", "-c", f"{shlex.quote(sys.executable)} -c {shlex.quote(script)} >/dev/null 2>&1 &"], check=True
        )
        deadline = time.monotonic() + 30
        while not done_file.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
    after = contention.read_snapshot(gate.waited())
    assert done_file.exists()
    waits = after.turn_waits - before.turn_waits
    assert waits.wall_s >= 0.4
    assert waits.busy_ticks >= 0.3 * os.sysconf("SC_CLK_TCK")  # its CPU time, whatever else ran meanwhile
    state = contention.state_between(before, after)
    assert state.wall_s >= waits.wall_s  # the window itself is not shortened; its signals are read outside waits


def test_a_session_that_is_done_keeps_the_turn_until_it_has_exited(tmp_path: Path) -> None:
    from pytest_gpuperf.ab.turns import run_pair_taking_turns

    script = """
import sys, time
from pytest_gpuperf.core.session.turns import Turns
turns = Turns(sys.argv[1])
turns.take()
if sys.argv[2] == "first":
    turns.done()
    time.sleep(0.5)  # its teardown, after its "done"
    stamp = time.monotonic()
else:
    stamp = time.monotonic()  # granted only once the first has exited
    turns.done()
open(sys.argv[3], "w").write(repr(stamp))
"""
    prefixes = [tmp_path / "first.turn", tmp_path / "second.turn"]
    argvs = [
        [sys.executable, "-c", script, str(prefix), name, str(tmp_path / f"{name}.stamp")]
        for prefix, name in zip(prefixes, ("first", "second"))
    ]
    ran = run_pair_taking_turns(
        argvs,
        prefixes=prefixes,
        log_files=[tmp_path / "first.log", tmp_path / "second.log"],
        timeout=60,
        cwd=Path(__file__).resolve().parents[2],
        env=dict(os.environ),
    )
    assert [code for code, _ in ran] == [0, 0], [p.read_text() for p in tmp_path.glob("*.log")]
    first_left = float((tmp_path / "first.stamp").read_text())
    second_granted = float((tmp_path / "second.stamp").read_text())
    assert second_granted > first_left


# -- whether a comparison takes turns when the command line does not say -------------------------------------

# Accelerator parts of a hardware key as machine/fingerprint.py reads them (NVML's has a name; one without)
H200 = {"vendor": "nvidia", "name": "NVIDIA H200", "count": 1, "memory_gib": 140, "arch": "sm_90"}
MI300X = {"vendor": "amd", "count": 8}


@pytest.mark.parametrize(
    ("gpu", "pytest_args", "commands", "environ", "turns", "why"),
    [
        (None, ["t.py"], [["python"], ["python"]], {}, True, "no GPU on this machine"),
        (H200, ["t.py"], [["python"]], {}, False, "has a GPU (NVIDIA H200), which both sessions"),
        (MI300X, ["t.py"], [["python"]], {}, False, "has a GPU (amd), which both sessions"),
        (None, ["t.py", "-n", "2"], [["python"]], {}, False, "xdist workers (-n 2)"),
        (None, ["t.py", "-nauto"], [["python"]], {}, False, "xdist workers (-nauto)"),
        (None, ["t.py", "--numprocesses=4"], [["python"]], {}, False, "(--numprocesses=4)"),
        (None, ["t.py", "-n", "0"], [["python"]], {}, True, "no GPU"),
        (None, ["t.py"], [["python"], ["torchrun", "--nproc-per-node", "2"]], {}, False, "a side runs torchrun"),
        (None, ["t.py"], [["env", "WORLD_SIZE=2", "python"]], {}, False, "sets WORLD_SIZE=2"),
        (None, ["t.py"], [["env", "WORLD_SIZE=1", "python"]], {}, True, "no GPU"),
        (None, ["t.py"], [["python"]], {"WORLD_SIZE": "4"}, False, "sets WORLD_SIZE=4"),
        (None, ["t.py"], [], {}, True, "no GPU"),  # gpuperf bisect: the sides are built later
    ],
)
def test_turns_by_default_takes_turns_only_where_they_work_and_says_why(
    gpu: dict[str, object] | None,
    pytest_args: list[str],
    commands: list[list[str]],
    environ: dict[str, str],
    turns: bool,
    why: str,
) -> None:
    from pytest_gpuperf.ab.turns import turns_by_default

    chosen, reason = turns_by_default(pytest_args, commands, accelerator=lambda: gpu, environ=environ)
    assert chosen is turns and why in reason, reason


@pytest.mark.parametrize(
    ("flag", "default", "turns", "why"),
    [
        ([], (True, "taking turns (no GPU)"), True, "taking turns (no GPU)"),
        ([], (False, "one session after the other: a GPU"), False, "one session after the other: a GPU"),
        (["--take-turns"], (False, "unused"), True, "taking turns (--take-turns)"),
        (["--no-take-turns"], (True, "unused"), False, "one session after the other (--no-take-turns)"),
    ],
)
def test_the_command_line_takes_turns_by_default_and_either_flag_overrides_it(
    flag: list[str],
    default: tuple[bool, str],
    turns: bool,
    why: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pytest_gpuperf.ab.model import AbPlan, AbResult
    from pytest_gpuperf.cli import ab as ab_cli

    plans: list[AbPlan] = []

    def run_ab(plan: AbPlan, **kwargs: object) -> AbResult:
        plans.append(plan)
        return AbResult(plan=plan, rules=None)

    asked: list[tuple[object, object]] = []
    monkeypatch.setattr(ab_cli, "run_ab", run_ab)
    monkeypatch.setattr(ab_cli, "turns_by_default", lambda args, commands: asked.append((args, commands)) or default)
    code = cli.main(["ab", "--a", PYTHON, "--b", f"env X=1 {PYTHON}", *flag, "--out", str(tmp_path), "--", "t.py"])
    assert code == 3  # the stub compared nothing: not a pass
    allowed = os.sched_getaffinity(0)
    first, every = min(allowed), ab_cli.cpu_text(allowed)
    pinned_why = PINNED.format(cpu=first, every=every)
    said = f"{why}; {pinned_why}" if turns and len(allowed) > 1 else why  # taking turns pins one core by default
    assert plans[0].take_turns is turns and plans[0].take_turns_why == said
    if turns and len(allowed) > 1:
        assert plans[0].cpus == {first} and plans[0].widen_cpus == allowed
    else:
        assert plans[0].cpus is None and plans[0].widen_cpus is None
    assert said in capsys.readouterr().err
    assert asked == ([] if flag else [(["t.py"], [(sys.executable,), ("env", "X=1", sys.executable)])])
    assert json.loads((tmp_path / "ab.json").read_text())["take_turns_why"] == said
    if turns:  # pinned by the user: nothing to add, no widening; --cpus all: unpinned, said so
        pinned = ["--cpus", str(first)]
        cli.main(["ab", "--a", PYTHON, "--b", PYTHON, *flag, *pinned, "--out", str(tmp_path / "p"), "--", "t.py"])
        assert plans[-1].take_turns_why == why and plans[-1].cpus and plans[-1].widen_cpus is None
        unpinned = ["--cpus", "all"]
        cli.main(["ab", "--a", PYTHON, "--b", PYTHON, *flag, *unpinned, "--out", str(tmp_path / "u"), "--", "t.py"])
        assert plans[-1].take_turns_why == f"{why}; {UNPINNED}" and plans[-1].cpus is None


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to pin one and widen to both")
def test_a_session_pinned_by_default_widens_only_for_tests_that_start_their_own_processes(
    pytester: pytest.Pytester,
) -> None:
    """`gpuperf ab` pins both sides to one core by default; a session whose tests start ranks or servers (the
    fixtures in plugin.MULTI_PROCESS_FIXTURES) takes every CPU again, a one-thread workload stays on its core."""
    allowed = sorted(os.sched_getaffinity(0))
    pytester.makepyfile(
        test_where="""
        import json, os, pytest

        @pytest.fixture
        def device_mesh():
            return None

        def record(name):
            with open(name, "w") as out:
                json.dump(sorted(os.sched_getaffinity(0)), out)

        def test_one_thread(perf):
            record("one_thread.json")
            perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False)

        def test_ranks(perf, device_mesh):
            record("ranks.json")
            perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False)
        """
    )
    widen = ["--gpuperf-widen-cpus", f"{allowed[0]}-{allowed[-1]}", "--gpuperf-device", "cpu", "-p", "no:cacheprovider"]

    def run(*selection: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "pytest", *selection, *widen, "--gpuperf-measure-only"],
            cwd=pytester.path,
            capture_output=True,
            text=True,
            preexec_fn=lambda: os.sched_setaffinity(0, {allowed[0]}),  # as gpuperf ab starts its sessions
            check=False,
        )

    alone = run("-k", "one_thread")
    assert alone.returncode == 0, alone.stdout + alone.stderr
    assert json.loads((pytester.path / "one_thread.json").read_text()) == [allowed[0]]
    both = run()
    assert both.returncode == 0, both.stdout + both.stderr
    assert json.loads((pytester.path / "ranks.json").read_text()) == allowed
    assert "the tests start their own ranks or servers (device_mesh)" in both.stdout
