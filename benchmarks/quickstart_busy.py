"""The README's quickstart on a busy machine: does a 2x slowdown of its `time.sleep` test always fail, and does the
unchanged test never fail, whatever the number of CPU hogs while the baseline is recorded and while it is judged?

For each baseline condition (hogs while recording), a fresh folder gets the README's test_speed.py and two
`--gpuperf-save` runs; then, for each judging condition and each slowdown (1, 1.25, 2), ``--trials`` judged runs
with ``--gpuperf-threshold 10`` as the README has them. A hog is a pure-Python busy loop in its own process.

    python benchmarks/quickstart_busy.py --record-hogs 0,2 --judge-hogs 0,2,4 --trials 3 \\
        --out benchmarks/data/quickstart-busy.jsonl

One JSON line per judged run (hogs, slowdown, exit status, verdict, ratio, reason); the end prints a table: per
cell, how many runs failed. Unchanged runs that failed are false alarms; 2x runs that passed are misses.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

QUICKSTART = """import os
import time


def test_nap(perf):  # the perf fixture makes it a gpuperf test
    slowdown = float(os.environ.get("SLOWDOWN", "1.0"))  # stands in for a change to your code
    perf.measure("nap", lambda: time.sleep(0.02 * slowdown))
"""
HOG = "while True: pass"


@contextlib.contextmanager
def hogs(count: int) -> Iterator[None]:
    procs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(count)]
    try:
        time.sleep(1.0 if count else 0.0)  # let the scheduler see them
        yield
    finally:
        for proc in procs:
            proc.kill()
        for proc in procs:
            proc.wait()


def pytest_run(folder: Path, *args: str, slowdown: float = 1.0) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLOWDOWN": str(slowdown)}
    command = [sys.executable, "-m", "pytest", "test_speed.py", "-q", "-p", "no:cacheprovider", *args]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def judged(folder: Path, slowdown: float) -> dict[str, Any]:
    done = pytest_run(folder, "--gpuperf-threshold", "10", "--gpuperf-results", "run.json", slowdown=slowdown)
    record: dict[str, Any] = {"exit": done.returncode}
    try:
        (result,) = json.loads((folder / "run.json").read_text())["results"]
    except (OSError, ValueError):
        return {**record, "verdict": None, "tail": done.stdout[-400:]}
    comparison = result["comparison"]
    return {
        **record,
        "verdict": result["verdict"],
        "ratio": comparison.get("ratio"),
        "ci_high": comparison.get("ci_high"),
        "reason": comparison.get("reason", "")[-300:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-hogs", default="0,2")
    parser.add_argument("--judge-hogs", default="0,2,4")
    parser.add_argument("--slowdowns", default="1,1.25,2")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    cells: dict[tuple[int, int, float], list[int]] = collections.defaultdict(list)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for record_hogs in (int(n) for n in args.record_hogs.split(",")):
        with tempfile.TemporaryDirectory(prefix="gpuperf-quickstart-") as name:
            folder = Path(name)
            (folder / "test_speed.py").write_text(QUICKSTART)
            with hogs(record_hogs):
                for _ in range(2):
                    pytest_run(folder, "--gpuperf-save")
            for judge_hogs in (int(n) for n in args.judge_hogs.split(",")):
                with hogs(judge_hogs):
                    for trial in range(args.trials):
                        for slowdown in (float(s) for s in args.slowdowns.split(",")):
                            record = {
                                "record_hogs": record_hogs,
                                "judge_hogs": judge_hogs,
                                "slowdown": slowdown,
                                "trial": trial,
                                "load1": os.getloadavg()[0],
                                **judged(folder, slowdown),
                            }
                            cells[(record_hogs, judge_hogs, slowdown)].append(record["exit"])
                            with args.out.open("a") as out:
                                out.write(json.dumps(record, sort_keys=True) + "\n")
                            print(
                                f"record {record_hogs} hogs, judge {judge_hogs} hogs, {slowdown}x: exit "
                                f"{record['exit']} {record['verdict']} ratio {record.get('ratio')}",
                                flush=True,
                            )
    print("\nrecord hogs | judge hogs | slowdown | failed / runs")
    for (record_hogs, judge_hogs, slowdown), exits in sorted(cells.items()):
        print(f"{record_hogs} | {judge_hogs} | {slowdown} | {sum(e != 0 for e in exits)} / {len(exits)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
