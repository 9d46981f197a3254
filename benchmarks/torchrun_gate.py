"""A real 2-rank gloo `torchrun -m pytest` test with the defaults: does a 2x slowdown fail every time, and does the
unchanged test never fail? (Issue 49: under torchrun a REGRESSED could not be confirmed, so it never failed.)

A fresh folder gets a perf test whose step is 12 real matmuls on each rank and an all_reduce of their result
(``SLOW=2`` runs the whole step twice), timed by ``perf.measure``; two
`torchrun --standalone --nproc-per-node 2 -m pytest --gpuperf-save` runs record the baseline, then ``--trials``
judged runs per slowdown, with no option but ``--gpuperf-device cpu`` and ``--gpuperf-results``.

    python benchmarks/torchrun_gate.py --trials 10 --out benchmarks/data/torchrun-gate.jsonl

One JSON line per judged run (slowdown, exit status, rank 0's verdict, ratio, comparison, the reason's end, load
average); the end prints, per slowdown, how many runs failed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from quickstart_busy import verdict_row  # noqa: E402

TEST = """import os

import torch
import torch.distributed as dist


def test_step(perf):
    if not dist.is_initialized():
        dist.init_process_group("gloo")
    torch.set_num_threads(1)
    slow = float(os.environ.get("SLOW", "1"))
    a = torch.randn(192, 192)

    def step():
        for _ in range(round(slow)):  # SLOW=2: the whole step twice
            out = a
            for _ in range(12):
                out = torch.tanh(out @ a)
            dist.all_reduce(out)

    perf.measure("step", step)
"""
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def torchrun(folder: Path, *args: str, slowdown: float = 1.0) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in RANK_ENV} | {"SLOW": str(slowdown), "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m",
               "pytest", "test_step.py", "-q", "-p", "no:cacheprovider", "--gpuperf-device", "cpu", *args]  # fmt: skip
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=900)


def judged(folder: Path, slowdown: float) -> dict[str, Any]:
    results = folder / "run.json"
    results.unlink(missing_ok=True)
    done = torchrun(folder, "--gpuperf-results", str(results), slowdown=slowdown)
    return verdict_row(results, done, reason_chars=1200)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--slowdowns", default="1,2")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cells: dict[float, list[int]] = collections.defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="gpuperf-torchrun-") as name:
        folder = Path(name)
        (folder / "test_step.py").write_text(TEST)
        for _ in range(2):
            saved = torchrun(folder, "--gpuperf-save")
            if saved.returncode != 0:
                sys.exit(f"recording the baseline failed (exit {saved.returncode}):\n{saved.stdout[-2000:]}")
        for trial in range(args.trials):
            for slowdown in (float(s) for s in args.slowdowns.split(",")):
                record = {"slowdown": slowdown, "trial": trial, "load1": os.getloadavg()[0], **judged(folder, slowdown)}
                cells[slowdown].append(record["exit"])
                with args.out.open("a") as out:
                    out.write(json.dumps(record, sort_keys=True) + "\n")
                print(
                    f"trial {trial} {slowdown}x: exit {record['exit']} {record['verdict']} ({record.get('comparison')})"
                    f" ratio {record.get('ratio')}",
                    flush=True,
                )
    print("\nslowdown | failed / runs")
    for slowdown, exits in sorted(cells.items()):
        print(f"{slowdown} | {sum(e != 0 for e in exits)} / {len(exits)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
