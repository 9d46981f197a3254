"""Detection power of the verdict on a real CPU workload, with injected slowdowns.

Each round records a fresh baseline of BASELINE_RUNS separate processes, then one separate "current" process
per slowdown level; every current run is judged against that round's baseline with the plugin's own rules
(stats.compare with the CPU defaults). Separate processes matter: they carry the between-run noise that a
single process never shows. The workload is a fixed count of one-thread 128x128 matmuls; a slowdown of s adds
round(PRODUCTS * s) products, so the injected extra work is exact.

    python benchmarks/detection_power.py --rounds 20 [--out results.json]

Prints, per level, the fraction of rounds flagged REGRESSED (and the other verdicts), and the time one
"test" (one current run) took.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.settings import DEVICE_DEFAULTS  # noqa: E402
from pytest_gpuperf.stats import Rules, compare  # noqa: E402

PRODUCTS = 100
LEVELS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.10)

# One process = one run: warm up, then time REPEATS calls; prints the samples as JSON.
RUN = """
import json, sys, time, torch
torch.set_num_threads(1)
products, repeats, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
g = torch.Generator().manual_seed(0)
a = torch.randn(128, 128, generator=g); b = torch.randn(128, 128, generator=g)
def call():
    for _ in range(products):
        torch.mm(a, b)
for _ in range(warmup):
    call()
samples = []
for _ in range(repeats):
    start = time.perf_counter(); call(); samples.append(time.perf_counter() - start)
print(json.dumps(samples))
"""


def one_run(products: int, repeats: int, warmup: int) -> list[float]:
    out = subprocess.run([sys.executable, "-c", RUN, str(products), str(repeats), str(warmup)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    defaults = DEVICE_DEFAULTS["cpu"]
    rules = Rules(delta=defaults["threshold"], noise_limit=defaults["noise_limit"], run_noise=defaults["run_noise"])
    verdicts: dict[float, Counter[str]] = {level: Counter() for level in LEVELS}
    test_seconds: list[float] = []
    ratios: dict[float, list[float]] = {level: [] for level in LEVELS}
    started = time.perf_counter()
    for round_index in range(args.rounds):
        baseline = [one_run(PRODUCTS, args.repeats, args.warmup) for _ in range(args.baseline_runs)]
        for level in LEVELS:
            begin = time.perf_counter()
            current = one_run(round(PRODUCTS * (1 + level)), args.repeats, args.warmup)
            result = compare(current, baseline, higher_is_better=False, rules=rules)
            test_seconds.append(time.perf_counter() - begin)
            verdicts[level][result.verdict.value] += 1
            ratios[level].append(result.ratio or 0.0)
        done = round_index + 1
        flagged = "  ".join(f"{level:.0%}:{verdicts[level]['REGRESSED']}/{done}" for level in LEVELS)
        print(f"round {done}/{args.rounds} ({time.perf_counter() - started:.0f} s)  REGRESSED {flagged}", flush=True)

    print(f"\nrules: threshold {rules.delta:.1%}, alpha {rules.alpha}, run-noise prior {rules.run_noise:.1%}, "
          f"{args.baseline_runs} baseline runs x {args.repeats} repeats, {args.rounds} rounds")
    print("| injected slowdown | flagged REGRESSED | other verdicts | median ratio |")
    print("| --- | --- | --- | --- |")
    for level in LEVELS:
        count = verdicts[level]
        others = ", ".join(f"{name} {n}" for name, n in sorted(count.items()) if name != "REGRESSED") or "-"
        ratio = sorted(ratios[level])[len(ratios[level]) // 2]
        print(f"| {level:.0%} | {count['REGRESSED']}/{args.rounds} ({count['REGRESSED'] / args.rounds:.0%}) "
              f"| {others} | {ratio:.4f} |")
    print(f"one test (one current run, separate process, judged): median "
          f"{sorted(test_seconds)[len(test_seconds) // 2]:.2f} s, max {max(test_seconds):.2f} s")
    if args.out:
        args.out.write_text(json.dumps({
            "rules": {"delta": rules.delta, "alpha": rules.alpha, "run_noise": rules.run_noise},
            "verdicts": {str(level): dict(count) for level, count in verdicts.items()},
            "ratios": {str(level): values for level, values in ratios.items()},
            "test_seconds": test_seconds,
        }, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
