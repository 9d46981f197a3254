"""Detection power of the verdict on a real CPU workload, with injected slowdowns.

Each round records a fresh baseline of BASELINE_RUNS separate processes, then, per slowdown level, two separate
"current" processes back to back: the first attempt and the one the plugin's --gpuperf-confirm (default 1)
measures before a REGRESSED verdict may fail a test. Every attempt is judged against that round's baseline with
the plugin's own rules (stats.compare with the CPU defaults), and a level counts as flagged when the first
attempt is REGRESSED and, with confirmation, the second one too (session.confirm's rule). Separate processes
matter: they carry the between-run noise that a single process never shows. The workload is a fixed count of
one-thread 128x128 matmuls; a slowdown of s adds round(PRODUCTS * s) products, so the injected extra work is exact.

    python benchmarks/detection_power.py --rounds 20 [--out samples.json] [--normalise]
    python benchmarks/detection_power.py --rejudge samples.json --threshold 3 --run-noise 1

Every run also times the plugin's reference canary (machine/contention.py) after its repeats, as perf.measure
does; ``--normalise`` judges the same runs a second time with each run's samples divided by its canary median, to
measure whether normalising by the canary helps or hurts detection (docs/machine-state.md).

Prints, per level, the fraction of rounds flagged REGRESSED on one attempt and confirmed (and the other
verdicts), and the time one "test" (one current run) took. --out keeps every raw sample, so --rejudge can judge
the same measurements under other rules without measuring again.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.core.config.settings import DEVICE_DEFAULTS  # noqa: E402
from pytest_gpuperf.core.stats.unpaired import Rules  # noqa: E402
from pytest_gpuperf.core.verdict.stored import compare  # noqa: E402
from pytest_gpuperf.core.verdict.vocabulary import Verdict  # noqa: E402

PRODUCTS = 100
LEVELS = (0.0, 0.01, 0.02, 0.03, 0.05, 0.10)
ATTEMPTS = 2  # the first attempt and the confirmation the plugin measures by default

# One process = one run: warm up, then time REPEATS calls, then the plugin's reference canary (as perf.measure takes
# it after each round); prints {"samples": [...], "canary": [...]} as JSON.
RUN = """
import json, sys, time, torch
sys.path.insert(0, sys.argv[4])
from pytest_gpuperf.machine.contention import run_canary
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
print(json.dumps({"samples": samples, "canary": run_canary()[0]}))
"""


def one_run(products: int, repeats: int, warmup: int) -> dict[str, list[float]]:
    out = subprocess.run(
        [sys.executable, "-c", RUN, str(products), str(repeats), str(warmup), str(ROOT)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout)


def samples_of(run: list[float] | dict[str, list[float]], reference: float | None = None) -> list[float]:
    """A run's samples (files kept before the canary was recorded hold plain lists); with ``reference``, divided
    by the run's canary median and multiplied by it (canary normalisation)."""
    if isinstance(run, list):
        return run
    if reference is None:
        return run["samples"]
    canary = sorted(run["canary"])
    return [value * reference / canary[len(canary) // 2] for value in run["samples"]]


def measure(rounds: int, baseline_runs: int, repeats: int, warmup: int) -> dict[str, object]:
    """Every round's baseline runs and one current run per level, raw."""
    recorded: list[dict[str, object]] = []
    test_seconds: list[float] = []
    started = time.perf_counter()
    for round_index in range(rounds):
        baseline = [one_run(PRODUCTS, repeats, warmup) for _ in range(baseline_runs)]
        current = {}
        for level in LEVELS:
            attempts = []
            for _ in range(ATTEMPTS):
                begin = time.perf_counter()
                attempts.append(one_run(round(PRODUCTS * (1 + level)), repeats, warmup))
                test_seconds.append(time.perf_counter() - begin)
            current[str(level)] = attempts
        recorded.append({"baseline": baseline, "current": current})
        print(f"round {round_index + 1}/{rounds} measured ({time.perf_counter() - started:.0f} s)", flush=True)
    return {"rounds": recorded, "test_seconds": test_seconds, "repeats": repeats, "baseline_runs": baseline_runs}


def attempts_of(recorded: dict[str, object], level: float) -> list[Any]:
    """The current runs of one level; samples kept before confirmation was measured hold one flat run."""
    current = recorded["current"][str(level)]  # type: ignore[index]
    return current if isinstance(current[0], (list, dict)) else [current]


def judge(data: dict[str, object], rules: Rules, *, normalise: bool = False) -> None:
    rounds = data["rounds"]
    assert isinstance(rounds, list)
    if normalise and isinstance(rounds[0]["baseline"][0], list):
        print("--normalise: these samples were kept without the canary; measure again")
        return
    print(
        f"\nrules: threshold {rules.threshold:.1%}, alpha {rules.alpha}, run-noise prior {rules.run_noise:.1%}, "
        f"{data['baseline_runs']} baseline runs x {data['repeats']} repeats, {len(rounds)} rounds"
        + (", every run normalised by its canary" if normalise else "")
    )
    print(
        "| injected slowdown | REGRESSED, one attempt | REGRESSED, confirmed | other verdicts (confirmed) "
        "| median ratio |"
    )
    print("| --- | --- | --- | --- | --- |")
    n = len(rounds)
    for level in LEVELS:
        first_flagged = 0
        confirmed: Counter[str] = Counter()
        ratios = []
        for recorded in rounds:
            verdicts = []
            reference = None
            if normalise:  # the baseline's canary median: what every run's canary is scaled to
                medians = sorted(sorted(run["canary"])[len(run["canary"]) // 2] for run in recorded["baseline"])
                reference = medians[len(medians) // 2]
            baseline = [samples_of(run, reference) for run in recorded["baseline"]]
            for attempt in attempts_of(recorded, level):
                result = compare(samples_of(attempt, reference), baseline, higher_is_better=False, rules=rules)
                verdicts.append(result.verdict)
                ratios.append(result.ratio or 0.0)
                if result.verdict is not Verdict.REGRESSED:
                    break  # the plugin measures a confirmation only after a REGRESSED attempt
            first_flagged += verdicts[0] is Verdict.REGRESSED
            if len(verdicts) == 1:
                confirmed[verdicts[0].value] += 1
            else:  # session.confirm: REGRESSED stands only when the confirmation regressed too
                confirmed["REGRESSED" if verdicts[1] is Verdict.REGRESSED else "AMBIGUOUS"] += 1
        others = ", ".join(f"{name} {k}" for name, k in sorted(confirmed.items()) if name != "REGRESSED") or "-"
        confirm_column = (
            f"{confirmed['REGRESSED']}/{n} ({confirmed['REGRESSED'] / n:.0%})"
            if len(attempts_of(rounds[0], level)) > 1
            else "not measured"
        )
        print(
            f"| {level:.0%} | {first_flagged}/{n} ({first_flagged / n:.0%}) | {confirm_column} | {others} "
            f"| {sorted(ratios)[len(ratios) // 2]:.4f} |"
        )
    seconds = sorted(data["test_seconds"])  # type: ignore[arg-type]
    if seconds:
        print(
            f"one test (one current run, separate process, judged): median {seconds[len(seconds) // 2]:.2f} s, "
            f"max {seconds[-1]:.2f} s"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--baseline-runs", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", type=Path, help="keep the raw samples here")
    parser.add_argument("--rejudge", type=Path, help="judge samples kept by --out instead of measuring")
    parser.add_argument("--threshold", type=float, help="percent (default: the plugin's CPU default)")
    parser.add_argument("--run-noise", type=float, help="percent (default: the plugin's CPU default)")
    parser.add_argument("--prior-runs", type=float, help="weight of the run-noise prior (default: the plugin's)")
    parser.add_argument(
        "--normalise", action="store_true", help="also judge every run divided by its reference canary's median"
    )
    args = parser.parse_args()

    defaults = DEVICE_DEFAULTS["cpu"]
    rules = Rules(
        threshold=args.threshold / 100 if args.threshold else defaults["threshold"],
        noise_limit=defaults["noise_limit"],
        run_noise=args.run_noise / 100 if args.run_noise else defaults["run_noise"],
        **({"prior_runs": args.prior_runs} if args.prior_runs is not None else {}),
    )
    if args.rejudge:
        data = json.loads(args.rejudge.read_text())
    else:
        data = measure(args.rounds, args.baseline_runs, args.repeats, args.warmup)
        if args.out:
            args.out.write_text(json.dumps(data))
    judge(data, rules)
    if args.normalise:
        judge(data, rules, normalise=True)
        normalisation_error(data)
    return 0


def normalisation_error(data: dict[str, Any]) -> None:
    """How far each run's median lands from where the injected slowdown puts it, raw and canary-normalised: the
    figure behind the decision not to normalise, free of the verdict's thresholds (a loaded machine turns every
    verdict NOISY, but the errors still say which estimate is closer)."""
    print(
        "\n| samples | between-run sd of the baseline's log medians (median over rounds) | sd of the current runs' "
        "log-ratio error | median abs error |"
    )
    print("| --- | --- | --- | --- |")
    for normalise in (False, True):
        errors: list[float] = []
        spreads: list[float] = []
        for recorded in data["rounds"]:
            medians = sorted(statistics.median(run["canary"]) for run in recorded["baseline"])
            reference = medians[len(medians) // 2] if normalise else None
            logs = [math.log(statistics.median(samples_of(run, reference))) for run in recorded["baseline"]]
            spreads.append(statistics.stdev(logs))
            for level, attempts in recorded["current"].items():
                for attempt in attempts:
                    now = math.log(statistics.median(samples_of(attempt, reference)))
                    errors.append(now - statistics.median(logs) - math.log(1 + float(level)))
        print(
            f"| {'normalised by the canary' if normalise else 'raw'} | {statistics.median(spreads):.2%} "
            f"| {statistics.pstdev(errors):.2%} | {statistics.median(abs(e) for e in errors):.2%} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
