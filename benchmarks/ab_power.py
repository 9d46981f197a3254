"""Detection power and error rates of `gpuperf ab` on this machine, with injected slowdowns and a CPU hog.

Each trial is one whole `gpuperf ab` comparison (the engine, ab/engine.run_ab, with its defaults: threshold
2%, alpha 0.01, 4..16 pairs, 10 repeats per session) of a pytest workload against itself (A/A) or against a copy
that does more work. The workload is exact work, as in detection_power.py: a fixed count of one-thread 128x128
matmuls per call, and a slowdown of s adds round(PRODUCTS * s) products. In half the trials a CPU hog runs: a busy
loop pinned to one core, switching on and off every 20-60 s (seeded), the kind of neighbour a shared CI runner has.

    python benchmarks/ab_power.py --trials 20 [--levels 0,1,2,3,5] [--max-pairs 16] [--out ab-power.json]
                                  [--sessions DIR] [--take-turns] [--cpus LIST] [--repeats N] [--threshold PCT]
                                  [--hog alternate|off]
    python benchmarks/ab_power.py --rejudge ab-power.json

Prints, per level and hog condition: the share flagged (REGRESSED or IMPROVED), the share SAME (PASS),
AMBIGUOUS, pairs used (median, max) and wall time per comparison. Trials of the levels are interleaved, so a
change of the machine's state over the run spreads over every level.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.ab.engine import run_ab  # noqa: E402
from pytest_gpuperf.ab.model import AbPlan  # noqa: E402
from pytest_gpuperf.cli.main import cpu_list  # noqa: E402

PRODUCTS = 100

WORKLOAD = """
import os
import pytest
import torch

@pytest.mark.perf
def test_matmuls(perf):
    torch.set_num_threads(1)
    products = int(os.environ.get("AB_POWER_PRODUCTS", "100"))
    g = torch.Generator().manual_seed(0)
    a = torch.randn(128, 128, generator=g)
    b = torch.randn(128, 128, generator=g)
    def call():
        for _ in range(products):
            torch.mm(a, b)
    perf.measure("call_time", call, warmup=3)
"""

# A busy loop on one core that switches on and off every 20-60 s; killed by the parent, and gone when the parent
# is (a benchmark killed from outside must not leave it running).
HOG = """
import os, random, sys, time
os.sched_setaffinity(0, {0})
parent = os.getppid()
rng = random.Random(int(sys.argv[1]))
while os.getppid() == parent:
    end = time.monotonic() + rng.uniform(20, 60)
    while time.monotonic() < end and os.getppid() == parent:
        pass
    end = time.monotonic() + rng.uniform(20, 60)
    while time.monotonic() < end and os.getppid() == parent:
        time.sleep(0.5)
"""

SESSION_FLAGS = ("-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist")


def one_trial(
    folder: Path,
    level: float,
    hog: bool,
    seed: int,
    max_pairs: int = 16,
    take_turns: bool = False,
    cpus: frozenset[int] | None = None,
    repeats: int = 10,
    threshold: float | None = None,
) -> dict[str, Any]:
    python = shlex.quote(sys.executable)
    extra = round(PRODUCTS * (1 + level))
    out = folder / f"trial-{seed:03d}"
    plan = AbPlan(
        cmd_a=tuple(shlex.split(f"env AB_POWER_PRODUCTS={PRODUCTS} {python}")),
        cmd_b=tuple(shlex.split(f"env AB_POWER_PRODUCTS={extra} {python}")),
        pytest_args=("test_ab_power.py", "--gpuperf-device", "cpu", *SESSION_FLAGS),
        out_dir=out,
        seed=seed,
        cwd=folder,
        max_pairs=max_pairs,
        take_turns=take_turns,
        cpus=cpus,
        repeats=repeats,
        threshold=threshold,
    )
    hog_process = subprocess.Popen([sys.executable, "-c", HOG, str(seed)]) if hog else None
    started = time.monotonic()
    try:
        result = run_ab(plan)
    finally:
        if hog_process is not None:
            hog_process.kill()
            hog_process.wait()
    [metric] = result.judged()
    return {
        "level": level,
        "hog": hog,
        "take_turns": take_turns,
        "cpus": None if cpus is None else sorted(cpus),
        "repeats": repeats,
        "threshold": result.rules.threshold if result.rules is not None else threshold,
        "seed": seed,
        "verdict": metric.verdict.value,
        "pairs": len(metric.log_ratios),
        "pairs_run": result.complete_pairs,
        "left_out": len(metric.contended),
        "left_out_why": metric.contended,
        "ratio": metric.judgement.ratio if metric.judgement else None,
        "log_ratios": metric.log_ratios,
        "dropped": len(result.dropped_pairs),
        "wall_s": time.monotonic() - started,
        "stopped": result.stopped,
    }


def pair_sd(log_ratios: list[float]) -> float:
    """The spread of one comparison's pairs (1.4826 x MAD: robust to the bursts the rule itself shrugs off)."""
    if len(log_ratios) < 2:
        return float("nan")
    centre = statistics.median(log_ratios)
    return 1.4826 * statistics.median(abs(x - centre) for x in log_ratios)


def summarise(trials: list[dict[str, Any]]) -> None:
    levels = sorted({t["level"] for t in trials})
    print(
        "| injected slowdown | hog | trials | flagged (REGRESSED / IMPROVED) | SAME (PASS) | AMBIGUOUS "
        "| judged pairs median, max | pairs run median, max | median ratio | pair sd (median) "
        "| wall per comparison (median) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for level in levels:
        for hog in (False, True, None):
            chosen = [t for t in trials if t["level"] == level and (hog is None or t["hog"] == hog)]
            if not chosen:
                continue
            n = len(chosen)

            def count(name: str, chosen: list[dict[str, Any]] = chosen) -> int:
                return sum(1 for t in chosen if t["verdict"] == name)

            regressed, improved, same, ambiguous = (count(v) for v in ("REGRESSED", "IMPROVED", "PASS", "AMBIGUOUS"))
            pairs = [t["pairs"] for t in chosen]
            run = [t.get("pairs_run", t["pairs"]) for t in chosen]  # trials kept before it was recorded: judged
            ratios = [t["ratio"] for t in chosen if t["ratio"]]
            label = {False: "off", True: "on", None: "**all**"}[hog]
            print(
                f"| {level:.0%} | {label} | {n} | {regressed + improved}/{n} ({(regressed + improved) / n:.0%}; "
                f"{regressed} / {improved}) | {same}/{n} ({same / n:.0%}) | {ambiguous}/{n} | "
                f"{statistics.median(pairs):.0f}, {max(pairs)} | {statistics.median(run):.0f}, {max(run)} | "
                f"{statistics.median(ratios) if ratios else float('nan'):.4f} | "
                f"{statistics.median(pair_sd(t['log_ratios']) for t in chosen):.1%} | "
                f"{statistics.median(t['wall_s'] for t in chosen):.0f} s |"
            )
    dropped = sum(t["dropped"] for t in trials)
    print(f"\n{len(trials)} comparisons, {dropped} dropped pairs, {sum(t['wall_s'] for t in trials) / 60:.0f} min")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help="comparisons per level (half of them with the hog)")
    parser.add_argument("--levels", default="0,1,2,3,5", help="injected slowdowns in percent")
    parser.add_argument(
        "--max-pairs", type=int, default=16, help="the engine's last look (its default 16; `gpuperf ab --max-pairs`)"
    )
    parser.add_argument("--take-turns", action="store_true", help="the engine's --take-turns (ab/turns.py)")
    parser.add_argument(
        "--cpus",
        type=cpu_list,
        help="the engine's --cpus: every session on these CPUs (the hog always runs on CPU 0)",
    )
    parser.add_argument(
        "--repeats", type=int, default=10, help="timed calls per session (the engine's --repeats, default 10)"
    )
    parser.add_argument(
        "--hog", choices=("alternate", "off"), default="alternate", help="the CPU hog in half the trials, or never"
    )
    parser.add_argument(
        "--seed-from", type=int, default=0, help="seeds (order, hog) start after this: another run's are not repeated"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=None,
        metavar="PCT",
        help="the engine's --threshold in percent (default: the sessions' own, 2%% on CPU)",
    )
    parser.add_argument("--out", type=Path, help="keep every trial here (JSON)")
    parser.add_argument("--rejudge", type=Path, help="print the table of trials kept by --out")
    parser.add_argument(
        "--sessions", type=Path, help="keep every comparison's folder (its sessions' raw results) here, not in a temp"
    )
    args = parser.parse_args()
    if args.rejudge:
        summarise(json.loads(args.rejudge.read_text())["trials"])
        return 0
    levels = [float(text) / 100 for text in args.levels.split(",")]
    trials: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ab-power-") as name:
        folder = args.sessions or Path(name)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "test_ab_power.py").write_text(WORKLOAD)
        started = time.monotonic()
        seed = args.seed_from
        for round_index in range(args.trials):
            for level in levels:  # interleaved: every level sees the machine's state of every period
                seed += 1
                # The hog alternates from trial to trial (levels x rounds): every level has it in half its trials,
                # and a run stopped early still has both conditions.
                hog = args.hog == "alternate" and (round_index + levels.index(level)) % 2 == 1
                trial = one_trial(
                    folder,
                    level,
                    hog=hog,
                    seed=seed,
                    max_pairs=args.max_pairs,
                    take_turns=args.take_turns,
                    cpus=args.cpus,
                    repeats=args.repeats,
                    threshold=None if args.threshold is None else args.threshold / 100,
                )
                trials.append(trial)
                print(
                    f"trial {len(trials)}/{args.trials * len(levels)}: {level:.0%} hog {'on' if hog else 'off'}"
                    f" -> {trial['verdict']} after {trial['pairs']} pairs ({trial['wall_s']:.0f} s; "
                    f"{(time.monotonic() - started) / 60:.0f} min so far)",
                    flush=True,
                )
                if args.out:
                    args.out.write_text(json.dumps({"trials": trials, "cpus": os.cpu_count()}))
    summarise(trials)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
