"""Parts 8-10 of benchmarks/malformed_inputs.py: the surfaces of issue 48.

Part 8 feeds every framework adapter hostile text in this process (a fair line with a number garbled, beyond float
range, thousands of digits long, NaN, nested 100,000 deep, bytes flipped) and hostile files at ``{output}`` (a
folder, a FIFO, missing): an adapter must read it or raise OutputError, never another exception, never block.
Part 9 points each writer option of `gpuperf` at its own inputs (the file, a hard link, a symbolic link, a new
results file inside the input folder) or beside them; no input may change, and the folder must read as before.
Part 10 sends SIGTERM, SIGHUP or SIGINT at a random moment of a pytest session, of `gpuperf ab` (its sessions) and
of `gpuperf bisect` mid-build: the results must hold every test that finished (ab.json, bisect.json written), and
nothing the session, ab or build started may run on.
"""

from __future__ import annotations

import argparse
import collections
import functools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

Defects = list[str]

HOSTILE_NUMBERS = ["5.7.1", "1.2.3", "inf", "-inf", "nan", "1e400", "9" * 5000, "-1", "0", "", "1,2,3", "0x10",
                   "１２", "1e-400", "12%", "+", "10" + "0" * 400]  # fmt: skip
TITAN = "step: {a}  loss: {b}  memory: {c}GiB(6.01%)  tps: {d}  tflops: {e}  mfu: {f}%"
MAXTEXT = ("completed step: {a}, seconds: {b}, TFLOP/s/device: {c}, Tokens/s/device: {d}, total_weights: 4096, "
           "loss: {e}")  # fmt: skip
MEGATRON = (" iteration {a}/ 100 | elapsed time per iteration (ms): {b} | throughput per GPU (TFLOP/s/GPU): {c} | "
            "global batch size: {d} | lm loss: {e} | number of nan iterations: {f} |")  # fmt: skip
FAIR = {"a": "10", "b": "7.1", "c": "5.71", "d": "57,729", "e": "78.76", "f": "7.96"}


def case_folders(name: str, count: int) -> Iterator[tuple[int, Path]]:
    """``count`` fresh folders under one temporary folder, each removed once its case is done."""
    with tempfile.TemporaryDirectory(prefix=f"gpuperf-fuzz-{name}-") as scratch:
        for number in range(count):
            case = Path(scratch) / str(number)
            case.mkdir()
            yield number, case
            shutil.rmtree(case, ignore_errors=True)


def adapters(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 8: every adapter on hostile lines and files, in this process."""
    from pytest_gpuperf.core.record.readings import OutputError, RunOutput
    from pytest_gpuperf.frameworks import JsonlAdapter, Metric, RegexAdapter
    from pytest_gpuperf.frameworks.maxtext import ADAPTER as MAXTEXT_ADAPTER
    from pytest_gpuperf.frameworks.megatron import ADAPTER as MEGATRON_ADAPTER
    from pytest_gpuperf.frameworks.serving import SGLANG, VLLM
    from pytest_gpuperf.frameworks.torchtitan import ADAPTER as TITAN_ADAPTER

    metric = {"tps": Metric(key="tps", unit="tok/s", higher_is_better=True)}
    regex = RegexAdapter(pattern=r"iter (?P<step>\S+) \| (?P<tps>\S+) tok/s", metrics=metric)
    readers: dict[str, tuple[Any, bool]] = {
        "torchtitan": (TITAN_ADAPTER, False),
        "maxtext": (MAXTEXT_ADAPTER, False),
        "megatron": (MEGATRON_ADAPTER, False),
        "jsonl": (JsonlAdapter(metrics=metric), False),
        "regex": (regex, False),
        "maxtext-file": (MAXTEXT_ADAPTER, True),
        "jsonl-file": (JsonlAdapter(metrics=metric, source="file"), True),
        "vllm-bench": (VLLM, True),
        "sglang-bench": (SGLANG, True),
    }
    rng = random.Random(args.seed + 8)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    defects: Defects = []
    with tempfile.TemporaryDirectory(prefix="gpuperf-fuzz-adapters-") as scratch:
        folder = Path(scratch)
        for number in range(args.adapter_inputs):
            values = {key: rng.choice(HOSTILE_NUMBERS) if rng.random() < 0.4 else fair for key, fair in FAIR.items()}
            json_line = json.dumps({"step": values["a"], "tps": values["d"]})
            if rng.random() < 0.5:  # numbers as JSON numbers, as far as the text allows
                json_line = f'{{"step": {values["a"] or "1"}, "tps": {values["d"] or "1"}}}'
            if rng.random() < 0.05:
                json_line = '{"tps": ' + "[" * 100_000 + "]" * 100_000 + "}"
            text = {
                "torchtitan": TITAN.format(**values),
                "maxtext": MAXTEXT.format(**values),
                "megatron": MEGATRON.format(**values),
                "jsonl": json_line,
                "regex": f"iter {values['a']} | {values['d']} tok/s",
            }
            name = rng.choice([*text, "maxtext-file", "jsonl-file", "vllm-bench", "sglang-bench"])
            line = text.get(name.split("-")[0], json_line)
            if rng.random() < 0.2:
                flip = rng.randrange(len(line) or 1)
                line = line[:flip] + chr(rng.randrange(1, 0x2FFF)) + line[flip + 1 :]
            path = folder / f"out-{number}"
            hazard = rng.choice(["file"] * 7 + ["folder", "fifo", "missing"])
            if hazard == "file":
                path.write_text(line + "\n", errors="surrogatepass")
            elif hazard == "folder":
                path.mkdir()
            elif hazard == "fifo":
                os.mkfifo(path)
            adapter, reads_file = readers[name]
            output = RunOutput(log="", file=path) if reads_file else RunOutput(log=line)
            kind = _bounded(functools.partial(adapter.read, output), OutputError, args.timeout)
            outcomes[(name, kind)] += 1
            if kind not in ("read", "OutputError"):
                defects.append(f"{name} ({hazard}): {kind}: {line[:200]!r}")
            if path.is_dir():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
    from malformed_inputs import outcome_table

    lines = [
        f"**Part 8, framework adapters.** {args.adapter_inputs} hostile inputs to the adapters (a fair line of each "
        "with numbers replaced by 5.7.1, inf, nan, 1e400, 5,000 digits, 401-digit integers, full-width digits; a "
        "character flipped; JSONL nested 100,000 deep; and at {output} a folder, a FIFO or nothing), in this process "
        f"with a {args.timeout:g} s limit each:",
        "",
        *outcome_table("adapter", outcomes),
    ]
    return lines, args.adapter_inputs, defects


def _bounded(reader: Callable[[], Any], expected: type[Exception], timeout: float) -> str:
    """'read', 'OutputError', 'hang' or the other exception's name, of ``reader()`` run in a thread."""
    answer: list[str] = []

    def run() -> None:
        try:
            reader()
            answer.append("read")
        except expected:
            answer.append("OutputError")
        except BaseException as error:  # noqa: BLE001 - what this part exists to count
            answer.append(f"{type(error).__name__}: {str(error)[:100]}")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout)
    return answer[0] if answer else "hang"


WRITERS = [
    ["fleet", "{inputs}", "-o"],
    ["fleet", "{inputs}", "--html"],
    ["fleet", "{inputs}", "--save-spread"],
    ["fleet", "{inputs}", "--format", "json", "-o"],
    ["report", "{inputs}", "-o"],
    ["history", "{inputs}", "-o"],
    ["compare", "{first}", "{second}", "-o"],
    ["variance", "--reference", "{first}", "{second}", "-o"],
]


def writers(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 9: each writer option aimed at its own inputs, or beside them."""
    from fuzz_inputs import RESULTS  # tests/helpers, on the path malformed_inputs.py set
    from malformed_inputs import classify, run_forked

    from pytest_gpuperf.cli import main as cli

    rng = random.Random(args.seed + 9)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    defects: Defects = []
    for _, case in case_folders("writers", args.writer_cases):
        runs = case / "runs"
        runs.mkdir()
        for node in ("node-1.json", "node-2.json", "node-3.json"):
            (runs / node).write_text(json.dumps(RESULTS))
        before = {path.name: path.read_bytes() for path in runs.iterdir()}
        target_kind = rng.choice(["the input", "a hard link to it", "a link to it", "new .json inside", "beside"])
        target = {
            "the input": runs / "node-1.json",
            "a hard link to it": case / "hard.json",
            "a link to it": case / "soft.json",
            "new .json inside": runs / "written.json",
            "beside": case / "out.file",
        }[target_kind]
        if target_kind == "a hard link to it":
            os.link(runs / "node-1.json", target)
        elif target_kind == "a link to it":
            target.symlink_to(runs / "node-1.json")
        template = rng.choice(WRITERS)
        inputs = {"inputs": str(runs), "first": str(runs / "node-1.json"), "second": str(runs / "node-2.json")}
        argv = [part.format(**inputs) for part in template] + [str(target)]
        status, _, err, _ = run_forked(cli.main, argv, args.timeout, case)
        kind = classify(status, err)
        outcomes[(" ".join(template[:1] + template[-1:]), f"{target_kind}: {kind}")] += 1
        after = {path.name: path.read_bytes() for path in runs.iterdir() if path.name in before}
        if after != before:
            defects.append(f"lost: gpuperf {' '.join(argv)} changed {sorted(set(before) - set(after)) or 'a'} file")
        if kind in ("hang", "traceback") or kind.startswith("other"):
            defects.append(f"{kind}: gpuperf {' '.join(argv)}\n{err[-800:]}")
        again, _, err, _ = run_forked(cli.main, ["history", str(runs)], args.timeout, case)
        if again not in ("exit 0", "exit 1"):
            defects.append(f"the folder no longer reads after gpuperf {' '.join(argv)}: {err[-400:]}")
    lines = [
        f"**Part 9, outputs aimed at inputs.** {args.writer_cases} `gpuperf` writer runs (fleet -o/--html/"
        "--save-spread/--format json -o, report -o, history -o, compare -o, variance -o) whose output is an input, "
        "a hard or symbolic link to one, a new results file inside the input folder, or a file beside them; every "
        "input must be unchanged and the folder must still read (`gpuperf history`) afterwards:",
        "",
        "| writer | target: outcome | runs |",
        "| --- | --- | --- |",
        *[f"| {writer} | {kind} | {outcomes[(writer, kind)]} |" for writer, kind in sorted(outcomes)],
        "",
    ]
    return lines, args.writer_cases, defects


SESSION = """
import os, pathlib, subprocess, sys, time
import pytest

@pytest.mark.perf
@pytest.mark.parametrize("n", range(12))
def test_quick(perf, n):
    time.sleep(0.05 * (n % 4))
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_command(perf, tmp_path):
    script = "import time; time.sleep(60)"
    child = subprocess.Popen([sys.executable, "-c", script])
    try:
        time.sleep(1.0)
    finally:
        child.kill()
        child.wait()
    perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False)
"""
FINISHED = """
import os

def pytest_runtest_logreport(report):
    if report.when == "call":
        with open(os.environ["FINISHED"], "a") as out:
            out.write(report.nodeid + "\\n")
"""


def stop_signals(args: argparse.Namespace) -> tuple[list[str], int, Defects]:
    """Part 10: SIGTERM, SIGHUP or SIGINT at a random moment of a pytest session, an ab or a bisect build."""
    from malformed_inputs import MARK, ROOT, reap_left_behind

    rng = random.Random(args.seed + 10)
    outcomes: collections.Counter[tuple[str, str]] = collections.Counter()
    defects: Defects = []
    # Started under nohup or as a shell's background job, this process ignores SIGHUP or SIGINT, and so would each
    # run it starts until its own handlers are set: a signal during its imports would be dropped, not delivered.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    session = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "perf",
               "--gpuperf-device", "cpu"]  # fmt: skip
    for number, case in case_folders("stop", args.stop_signals):
        sig = rng.choice([signal.SIGTERM, signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
        env = {**os.environ, "GPUPERF_FUZZ_MARK": MARK, "PYTHONPATH": str(ROOT), "FINISHED": str(case / "done")}
        what = ("session", "ab", "session", "bisect")[number % 4]
        (case / "test_session.py").write_text(SESSION)
        (case / "conftest.py").write_text(FINISHED)
        if what == "bisect":
            build = "sleep 60 & echo $! > {dir}/child; wait"
            command = [sys.executable, "-m", "pytest_gpuperf.cli", "bisect", "--good", "a==1", "--bad", "a==2",
                       "--build", build, "--out", str(case / "out"), "--no-take-turns", "--", "x.py"]  # fmt: skip
        elif what == "ab":  # two pairs of sessions of the same stack, one after the other: signalled in one of them
            command = [sys.executable, "-m", "pytest_gpuperf.cli", "ab", "--a", sys.executable, "--b", sys.executable,
                       "--out", str(case / "out"), "--no-take-turns", "--min-pairs", "2", "--max-pairs", "2",
                       "--max-left-out", "0", "--",
                       *session[3:], "test_session.py"]  # fmt: skip
        else:
            command = [*session, "--gpuperf-results", "n.json", "test_session.py"]
        process = subprocess.Popen(command, cwd=case, env=env, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
        delay = rng.uniform(1.0, 20.0 if what == "ab" else 6.0)  # ab: across its four sessions
        time.sleep(delay)
        started = len(list((case / "out" / "sessions").glob("*.log")))  # ab: the session it is in (0: none yet)
        process.send_signal(sig)
        try:
            code = process.wait(args.timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
        where = f", in session {started} of 4" if what == "ab" else ""
        if code is None:
            outcomes[(what, f"hang{where}")] += 1
            defects.append(f"hang: {what} after {sig.name} at {delay:.1f} s")
            continue
        outcomes[(what, f"exit {code}{where}")] += 1
        if what == "bisect":
            # a build started (its folder holds its pins): else the signal came during imports, nothing ran
            built = any((case / "out").glob("envs/*/requirements.txt"))
            if code == 128 + sig and built and not (case / "out" / "bisect.json").is_file():
                defects.append(f"lost: bisect stopped by {sig.name} at {delay:.1f} s wrote no bisect.json")
        elif what == "ab":
            written = case / "out" / "ab.json"
            stopped = json.loads(written.read_text()).get("stopped") if written.is_file() else None
            # before its first session (still importing: Python's own Ctrl-C, exit 130), nothing ran to be lost
            if code == 128 + sig and stopped != "interrupted" and started:
                defects.append(f"lost: ab stopped by {sig.name} at {delay:.1f} s: ab.json says stopped={stopped}")
            elif code in (0, 1, 3) and stopped is None:
                defects.append(f"lost: ab ended {code} after {sig.name} at {delay:.1f} s with no ab.json")
        else:
            finished = (case / "done").read_text().split() if (case / "done").exists() else []
            results = case / "n.json"
            kept = {e["test"] for e in json.loads(results.read_text())["results"]} if results.exists() else set()
            missing = [test for test in finished if test not in kept]
            if missing:
                defects.append(f"lost: {sig.name} at {delay:.1f} s: {len(missing)} finished test(s) not in results")
        left = reap_left_behind(10.0)
        if left:
            defects.append(f"left running after {what} {sig.name} at {delay:.1f} s: {sorted(left.values())}")
    lines = [
        f"**Part 10, stop signals.** {args.stop_signals} runs, in turn: a pytest session of 13 perf tests (one with "
        "a child process), `gpuperf ab` of two pairs of such sessions, a session again, `gpuperf bisect` mid-build "
        "(a build shell with a child); sent SIGTERM, SIGHUP or SIGINT after 1-6 s (ab: 1-20 s, across its "
        "sessions; session 0: before the first started); every test that finished must be in the results file "
        "(ab: ab.json written, `stopped` = interrupted; bisect: bisect.json written), and no process the run "
        "started may be left:",
        "",
        "| run | outcome | runs |",
        "| --- | --- | --- |",
        *[f"| {what} | {kind} | {outcomes[(what, kind)]} |" for what, kind in sorted(outcomes)],
        "",
    ]
    return lines, args.stop_signals, defects


def main() -> int:
    """Parts 8-10 alone (the whole run: benchmarks/malformed_inputs.py): print their Markdown and the defects."""
    import malformed_inputs  # sets the path to tests/helpers

    parser = argparse.ArgumentParser(description="parts 8-10 of " + malformed_inputs.__name__)
    parser.add_argument("--adapter-inputs", type=int, default=5000)
    parser.add_argument("--writer-cases", type=int, default=100)
    parser.add_argument("--stop-signals", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    found = 0
    for part in (adapters, writers, stop_signals):
        began = time.monotonic()
        lines, inputs, defects = part(args)
        found += len(defects)
        print("\n".join(lines) + f"\n{inputs} inputs, {len(defects)} defects, {time.monotonic() - began:.0f} s\n")
        for defect in defects[:8]:
            print(f"DEFECT: {defect}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
