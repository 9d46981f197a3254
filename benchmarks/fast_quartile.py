"""The fast quartile of bimodal steps: how far it moves between unchanged runs, and what the stored rule reads.

Two gloo ranks of one thread each, on a 2-core VM, time a step of 12 matmuls and an all_reduce whose wait comes
and goes (deciles 3.2 to 7.5 ms): the median moves ~30% between unchanged runs, so the spread doubt left a
doubled step NOISY (issue 49). ``collect`` launches ``--runs`` torchrun jobs (two unchanged, one ``SLOW=2``, in
turn), each writing rank 0's three rounds of 20 step times (the plugin's default repeats and rounds); ``judge``
replays them through core/verdict/stored.py ``compare`` exactly as perf.measure keeps them (the round of least
spread), a baseline of two unchanged runs against a third unchanged run and against a doubled one, and prints the
fast quartile's shift between unchanged runs and the verdicts (no machine doubt: samples only).

    python benchmarks/fast_quartile.py collect --runs 40 --out benchmarks/data/fast-quartile.jsonl
    python benchmarks/fast_quartile.py judge benchmarks/data/fast-quartile.jsonl
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

STEPS = """import json, os, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.set_num_threads(1)
slow = int(os.environ["SLOW"])
a = torch.randn(192, 192)


def step():
    for _ in range(slow):
        out = a
        for _ in range(12):
            out = torch.tanh(out @ a)
        dist.all_reduce(out)


for _ in range(5):
    step()
rounds = []
for _ in range(3):
    times = []
    for _ in range(20):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    rounds.append(times)
if dist.get_rank() == 0:
    with open(os.environ["OUT"], "a") as out:
        out.write(json.dumps({"slow": slow, "rounds": rounds, "load1": os.getloadavg()[0]}) + "\\n")
dist.destroy_process_group()
"""
RANK_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def collect(runs: int, out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuperf-fastq-") as name:
        script = Path(name) / "steps.py"
        script.write_text(STEPS)
        base = {k: v for k, v in os.environ.items() if k not in RANK_ENV} | {"OMP_NUM_THREADS": "1"}
        for run in range(runs):
            for slow in (1, 1, 2):
                env = base | {"SLOW": str(slow), "OUT": str(out.resolve())}
                command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
                subprocess.run([*command, str(script)], env=env, capture_output=True, timeout=120, check=True)
            print(f"run {run + 1}/{runs}", flush=True)


def judge(data: Path, pairs: int, threshold: float) -> None:
    from pytest_gpuperf.core.stats.unpaired import Rules
    from pytest_gpuperf.core.verdict.stored import compare

    def kept(rounds: list[list[float]]) -> list[float]:  # perf.measure keeps the round of least spread
        return min(rounds, key=lambda r: float(np.subtract(*np.percentile(np.log(r), [75, 25]))))

    rows = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    same = [kept(r["rounds"]) for r in rows if r["slow"] == 1]
    slow = [kept(r["rounds"]) for r in rows if r["slow"] == 2]
    rng = random.Random(0)
    shifts = []
    for _ in range(2000):
        a, b, c = rng.sample(same, 3)
        shifts.append(np.median([np.percentile(a, 25), np.percentile(b, 25)]) / np.percentile(c, 25))
    low, high = np.percentile(shifts, [0.5, 99.5])
    print(f"{len(same)} unchanged and {len(slow)} doubled runs from {data}")
    print(f"fast quartile of an unchanged run against two others: 99% of ratios within [{low:.3f}, {high:.3f}]")
    usual = float(np.median([np.percentile(x, 10) for x in same]))
    calm = [s for s in same if np.percentile(s, 10) <= 1.2 * usual]
    print(f"unchanged runs whose fastest tenth was over 1.2x the usual (a busy machine): {len(same) - len(calm)}")
    rules = Rules(threshold=threshold)
    for label, unchanged in (("all unchanged runs", same), ("without the busy ones", calm)):
        verdicts: dict[str, collections.Counter[str]] = {
            "unchanged": collections.Counter(),
            "2x": collections.Counter(),
        }
        for _ in range(pairs):
            a, b, c = rng.sample(unchanged, 3)
            verdicts["unchanged"][compare(c, [a, b], higher_is_better=False, rules=rules).verdict.name] += 1
            verdicts["2x"][compare(rng.choice(slow), [a, b], higher_is_better=False, rules=rules).verdict.name] += 1
        for kind, counts in verdicts.items():
            print(f"{label}, {kind}: {dict(counts)} of {pairs} (threshold {threshold:.0%})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    take = commands.add_parser("collect")
    take.add_argument("--runs", type=int, default=40)
    take.add_argument("--out", type=Path, required=True)
    read = commands.add_parser("judge")
    read.add_argument("data", type=Path)
    read.add_argument("--pairs", type=int, default=300)
    read.add_argument("--threshold", type=float, default=0.02)
    args = parser.parse_args()
    if args.command == "collect":
        collect(args.runs, args.out)
    else:
        judge(args.data, args.pairs, args.threshold)
    return 0


if __name__ == "__main__":
    sys.exit(main())
