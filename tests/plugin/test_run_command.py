"""``perf.run_command`` end to end through pytester, with a tiny Python script as the "framework": it prints known
figures (so nothing here depends on this machine's speed), a regex log, nothing, a failure, or hangs."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from pytest_gpuperf.core.record import children

FRAMEWORK = r"""
import json, os, subprocess, sys, time

mode = sys.argv[1]
slow = float(os.environ.get("SLOW", "1"))
rates = [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0, 998.0, 1001.0, 999.0]
if mode == "jsonl":
    print("loading the model")
    for step, rate in enumerate([100.0] + rates, start=1):  # step 1: the warm-up, 10x slower
        loss = 4.0 - step * 0.1 + float(os.environ.get("LOSS_SHIFT", "0"))
        print(json.dumps({"step": step, "tps": rate / slow, "loss": loss}), flush=True)
elif mode == "file":
    with open(sys.argv[2], "w") as out:
        for step, rate in enumerate([100.0] + rates, start=1):
            out.write(json.dumps({"step": step, "tps": rate / slow}) + "\n")
elif mode == "regex":
    for step, rate in enumerate([100.0] + rates, start=1):
        print(f"iter {step} | {1000.0 / rate * slow:.4f} ms | loss {3.0 - step * 0.01:.3f}")
elif mode == "silent":
    print("initialising")
    print("done, nothing measured")
elif mode == "fail":
    print("step 1 ok")
    print("RuntimeError: CUDA error: an illegal memory access", file=sys.stderr)
    sys.exit(3)
elif mode == "deep":
    print(json.dumps({"step": 1, "tps": 1000.0}))
    print('{"tps": ' + "[" * 100000 + "]" * 100000 + "}", flush=True)
elif mode == "folder":
    os.mkdir(sys.argv[2])
    print("wrote a folder where the result file goes")
elif mode == "hang":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(sys.argv[2], "w") as out:
        out.write(f"{os.getpid()} {child.pid}")
    print("training...", flush=True)
    time.sleep(600)
"""

TESTS = r"""
import os, sys
from pathlib import Path

import pytest

from pytest_gpuperf.frameworks import JsonlAdapter, Metric, RegexAdapter

HERE = Path(__file__).parent
SCRIPT = str(HERE / "framework.py")
TPS = JsonlAdapter(metrics={"tokens_per_s": Metric(key="tps", unit="tok/s", higher_is_better=True)}, loss="loss")


@pytest.mark.perf
def test_jsonl(perf):
    readings = perf.run_command(
        [sys.executable, SCRIPT, "jsonl"], adapter=TPS, warmup=1, framework="fakefw",
        version=os.environ.get("FW_VERSION", "1.0"), log_dir=HERE / "logs",
    )
    assert len(readings) == 1


@pytest.mark.perf
def test_curves(perf):
    perf.run_command([sys.executable, SCRIPT, "jsonl"], adapter=TPS, runs=3, version="1.0")


@pytest.mark.perf
def test_file(perf):
    adapter = JsonlAdapter(
        metrics={"tokens_per_s": Metric(key="tps", unit="tok/s", higher_is_better=True)}, source="file"
    )
    perf.run_command([sys.executable, SCRIPT, "file", "{output}"], adapter=adapter, warmup="10%", version="1.0")


@pytest.mark.perf
def test_regex(perf):
    adapter = RegexAdapter(
        pattern=r"iter (?P<step>\d+) \| (?P<ms>[\d.]+) ms \| loss (?P<loss>[\d.]+)",
        metrics={"step_time": Metric(key="ms", unit="s", higher_is_better=False, scale=1e-3)},
        loss="loss",
    )
    perf.run_command([sys.executable, SCRIPT, "regex"], adapter=adapter, warmup=1, version="1.0")


@pytest.mark.perf
def test_silent(perf):
    perf.run_command([sys.executable, SCRIPT, "silent"], adapter=TPS, version="1.0")


@pytest.mark.perf
def test_fail(perf):
    perf.run_command([sys.executable, SCRIPT, "fail"], adapter=TPS, version="1.0")


@pytest.mark.perf
def test_hang(perf):
    perf.run_command(
        [sys.executable, SCRIPT, "hang", str(HERE / "pids.txt")], adapter=TPS, timeout=2, version="1.0"
    )


@pytest.mark.perf
@pytest.mark.gpuperf_timeout(3)
def test_budget(perf):
    perf.run_command([sys.executable, SCRIPT, "hang", str(HERE / "budget_pids.txt")], adapter=TPS, version="1.0")


@pytest.mark.perf
def test_unknown_name(perf):
    perf.run_command([sys.executable, SCRIPT, "jsonl"], adapter="jsonl")


@pytest.mark.perf
def test_deep(perf):
    perf.run_command([sys.executable, SCRIPT, "deep"], adapter=TPS, version="1.0")


@pytest.mark.perf
def test_folder(perf):
    perf.run_command([sys.executable, SCRIPT, "folder", "{output}"], adapter="vllm-bench", version="1.0")


class Raises:
    name = framework = "own"
    module = None
    expects = "anything"
    reads_file = False
    min_runs = 1

    def read(self, output):
        return {}["missing key"]


@pytest.mark.perf
def test_own_adapter_raises(perf):
    perf.run_command([sys.executable, SCRIPT, "silent"], adapter=Raises(), version="1.0")


@pytest.mark.perf
def test_serving_needs_three_runs(perf):
    perf.run_command(["vllm", "bench", "serve", "--result-filename", "{output}"], adapter="vllm-bench", runs=1)
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    (pytester.path / "framework.py").write_text(FRAMEWORK)
    pytester.makepyfile(test_frameworks_run=TESTS)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\nmarkers =\n    perf: a perf test\n")
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest("-m", "perf", "--gpuperf-device", "cpu", *args)


def test_jsonl_output_saved_then_judged_pass_then_a_slower_run_regressed_naming_the_framework(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, "-k", "jsonl or file or regex", "--gpuperf-save").assert_outcomes(passed=3)
    again = run(project, "-k", "jsonl or file or regex", "--gpuperf-results", "same.json", "--gpuperf-run-noise", "0.3")
    again.assert_outcomes(passed=3)
    document = json.loads((project.path / "same.json").read_text())
    verdicts = {(r["test"].split("::")[-1], r["metric"]): r for r in document["results"]}
    jsonl = verdicts[("test_jsonl", "tokens_per_s")]
    assert jsonl["verdict"] == "PASS"
    assert jsonl["samples"] == [1000.0, 1010.0, 990.0, 1005.0, 995.0, 1002.0, 998.0, 1001.0, 999.0]  # step 1 left out
    assert jsonl["context"]["framework"] == {"fakefw": "1.0"}
    assert jsonl["context"]["steps_kept"] == [[2, 3, 4, 5, 6, 7, 8, 9, 10]]
    assert len(verdicts[("test_file", "tokens_per_s")]["samples"]) == 9  # 10% of 10 steps: the first one
    assert verdicts[("test_regex", "step_time")]["samples"][0] == pytest.approx(1e-3)
    assert document["fingerprint"]["stack"]["fakefw"] == "1.0"
    assert [c["name"] for c in document["curves"] if c["test"].endswith("test_jsonl")] == ["loss"]
    baseline = json.loads(next((project.path / "baselines").glob("*/*.json")).read_text())
    assert "fakefw" in json.dumps(baseline)

    monkeypatch.setenv("SLOW", "2")
    monkeypatch.setenv("FW_VERSION", "2.0")
    slower = run(project, "-k", "jsonl or regex", "--gpuperf-results", "slow.json")
    slower.assert_outcomes(failed=2)
    slower.stdout.fnmatch_lines(["*REGRESSED*"])
    document = json.loads((project.path / "slow.json").read_text())
    jsonl = next(r for r in document["results"] if r["test"].endswith("test_jsonl"))
    assert jsonl["verdict"] == "REGRESSED"
    assert "fakefw 1.0 -> 2.0" in jsonl["stack_changes"]


def test_an_output_without_a_metric_fails_saying_what_was_expected_and_what_was_seen(project: pytest.Pytester) -> None:
    result = run(project, "-k", "silent")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*exited with status 0, but its output holds no metric the jsonl adapter reads: it expected JSON "
            "objects, one a line in its output, with the key(s) 'tps'",
            "*| done, nothing measured*",
        ]
    )


def test_output_an_adapter_cannot_read_fails_naming_the_line_and_the_tail(project: pytest.Pytester) -> None:
    """Issue 48, item 3: a raw RecursionError, IsADirectoryError or an adapter's own KeyError was a traceback."""
    result = run(project, "-k", "deep or folder or raises")
    result.assert_outcomes(failed=3)
    text = result.stdout.str()
    assert "Traceback" not in text and "During handling" not in text, text[-3000:]
    result.stdout.fnmatch_lines_random(
        [
            "*gpuperf: `* deep`: the output line 2: cannot be read (RecursionError: *",
            "*gpuperf: `* folder *` (run 1 of 5): *run-1.out: is a folder where a file was expected; the {output} of *",
            "*gpuperf: `* silent`: the own adapter could not read its output (KeyError: 'missing key'); fix *",
            "*| done, nothing measured*",
        ]
    )


def test_a_non_zero_exit_fails_with_the_tail_of_the_output(project: pytest.Pytester) -> None:
    result = run(project, "-k", "fail")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*exited with status 3*", "*| RuntimeError: CUDA error: an illegal memory access*"])


def test_a_timeout_stops_the_whole_process_group(project: pytest.Pytester) -> None:
    started = time.monotonic()
    result = run(project, "-k", "hang")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        ["*did not finish within its 2 s timeout; its process group was stopped*", "*training...*"]
    )
    pids = [int(pid) for pid in (project.path / "pids.txt").read_text().split()]
    assert not any(children.alive(pid) for pid in pids), pids  # the framework and the child it started
    assert time.monotonic() - started < 60


def test_the_test_budget_stops_the_command_too(project: pytest.Pytester) -> None:
    result = run(project, "-k", "budget")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*exceeded its 3 s budget*"])
    written = project.path / "budget_pids.txt"
    assert written.exists(), f"the command wrote no pids before the budget ran out:\n{result.stdout.str()[-4000:]}"
    pids = [int(pid) for pid in written.read_text().split()]
    assert not any(children.alive(pid) for pid in pids), pids


STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGINT, signal.SIG_IGN)
with open(sys.argv[1], "w") as out:
    out.write(str(os.getpid()))
time.sleep(600)
"""


def test_a_stop_interrupted_again_kills_the_group_instead_of_leaving_it(tmp_path: Path) -> None:
    """A command that ignores SIGINT keeps a stop waiting 5 s for it; an interruption stops the wait, a second
    one comes half a second into the stop (as the budget's watchdog raises again after its grace): the group is
    killed then, not left running while the interruption goes on."""
    from pytest_gpuperf.core.record.children import alive
    from pytest_gpuperf.core.record.command import run_once

    class Interrupted(Exception):
        pass

    raised: list[float] = []

    def interrupt(signum: int, frame: object) -> None:
        raised.append(time.monotonic())
        if len(raised) == 2:
            signal.setitimer(signal.ITIMER_REAL, 0)
        raise Interrupted

    (tmp_path / "stubborn.py").write_text(STUBBORN)
    pid_file = tmp_path / "pid"
    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 2.0, 0.5)  # the first after the command has started, the second mid-stop
    try:
        with pytest.raises(Interrupted):
            run_once([sys.executable, str(tmp_path / "stubborn.py"), str(pid_file)], log_path=tmp_path / "run.log",
                     cwd=None, env=dict(os.environ), timeout=None)  # fmt: skip
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert len(raised) == 2, raised
    pid = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(pid), f"the command {pid} outlived a stop interrupted {raised[1] - raised[0]:.1f} s in"


def test_misuse_is_a_clear_error(project: pytest.Pytester) -> None:
    result = run(project, "-k", "unknown_name or serving_needs")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(["*no adapter named 'jsonl'*JsonlAdapter*"])
    result.stdout.fnmatch_lines(["*vllm-bench adapter reads one figure per metric from each run*runs=3*"])


def test_the_version_is_read_from_the_commands_own_python() -> None:
    from pytest_gpuperf.core.record.command import module_version

    assert module_version("pytest", sys.executable) == pytest.__version__
    assert module_version("no_such_module_here", sys.executable) is None
    assert module_version("pytest", str(Path(sys.executable).parent / "pytest")) == pytest.__version__


def test_the_python_of_a_script_is_read_from_its_shebang(tmp_path: Path) -> None:
    from pytest_gpuperf.core.record.command import _python_of

    folder = tmp_path / "tools"
    folder.mkdir()
    script = folder / "bench"
    script.write_text(f"#!{sys.executable} -u\nprint('hi')\n")
    script.chmod(0o755)
    assert _python_of(str(script)) == sys.executable
    (folder / "plain").write_text("#!/bin/sh\necho hi\n")
    assert _python_of(str(folder / "plain")) is None
    assert _python_of("no-such-program-here") is None


def test_three_runs_loss_curves_are_judged_against_the_golden_band(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, "-k", "curves", "--gpuperf-save").assert_outcomes(passed=1)
    same = run(project, "-k", "curves", "--gpuperf-results", "same.json")
    same.assert_outcomes(passed=1)
    document = json.loads((project.path / "same.json").read_text())
    final = next(r for r in document["results"] if r["metric"] == "final_loss")
    assert final["verdict"] == "PASS" and final["context"]["judged_by"].startswith("loss curve vs golden band")
    monkeypatch.setenv("LOSS_SHIFT", "0.5")  # the same speed, a worse loss: only the curve check can see it
    worse = run(project, "-k", "curves", "--gpuperf-results", "worse.json")
    worse.assert_outcomes(failed=1)
    worse.stdout.fnmatch_lines(["*final_loss*REGRESSED*"])
    document = json.loads((project.path / "worse.json").read_text())
    verdicts = {r["metric"]: r["verdict"] for r in document["results"]}
    assert verdicts == {"tokens_per_s": "PASS", "final_loss": "REGRESSED"}
