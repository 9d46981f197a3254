"""The stored-baseline path end to end, before and after the machine-state verdict, under a CPU hog.

Each trial records a baseline of BASELINE_RUNS pytest sessions with ``--gpuperf-save``, then one judged session per
injected slowdown (0, 1, 2, 3, 5%), each through the real plugin (its re-measure rounds, sequential sampling and
confirmation attempt included). Both codes run every trial, alternating session by session, on the same
schedule: "before" is the rules of commit 5eefc03 (a ``git worktree`` of it, put first on PYTHONPATH), "after" is
this checkout. In half the trials a CPU hog (one busy-looping process) runs during the baseline's recording (so the
baseline is recorded under load), then switches off and on every 20-60 s (random) while the judged sessions run.

The workload is the one of detection_power.py: a fixed count of one-thread 128x128 matmuls per call; a slowdown of
s adds round(PRODUCTS * s) products, so the injected extra work is exact.

    python benchmarks/stored_baseline.py --trials 20 --out stored.json            # measure (~1.5 min a trial)
    python benchmarks/stored_baseline.py --old /tmp/verdict-old --trials 4        # a short check
    python benchmarks/stored_baseline.py --rejudge stored.json more.json          # the tables again, merged

Prints how often each verdict came out per level, trial kind and code, the time a session took, and the effect of
normalising by the reference canary (the "after" sessions' samples and their baselines' runs, each divided by its
own canary median, judged by the same rules without the machine check) against the raw samples.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.core.config.settings import DEVICE_DEFAULTS  # noqa: E402
from pytest_gpuperf.core.stats.unpaired import Rules  # noqa: E402
from pytest_gpuperf.core.verdict.stored import compare  # noqa: E402

PRODUCTS = 100
LEVELS = (0.0, 0.01, 0.02, 0.03, 0.05)
BASELINE_RUNS = 3
VERDICTS = ("PASS", "REGRESSED", "IMPROVED", "NOISY", "AMBIGUOUS", "NO_BASELINE", "ERROR")

TEST_FILE = """
import os
import pytest
import torch

torch.set_num_threads(1)
PRODUCTS = int(os.environ["BENCH_PRODUCTS"])
g = torch.Generator().manual_seed(0)
A = torch.randn(128, 128, generator=g)
B = torch.randn(128, 128, generator=g)


def call():
    for _ in range(PRODUCTS):
        torch.mm(A, B)


@pytest.mark.perf
def test_matmul(perf):
    perf.measure("matmul", call)
"""


class Hog:
    """One busy-looping process, paused (SIGSTOP) or running (SIGCONT); ``toggle`` switches it on a schedule."""

    def __init__(self, seed: int) -> None:
        self._process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        self._rng = random.Random(seed)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.on = True
        self.switches: list[tuple[float, bool]] = [(time.time(), True)]

    def set(self, on: bool) -> None:
        self._process.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
        self.on = on
        self.switches.append((time.time(), on))

    def toggle(self) -> None:
        """From now on, switch every 20-60 s (uniform), starting with a random state."""
        self.set(self._rng.random() < 0.5)

        def run() -> None:
            while not self._stop.wait(self._rng.uniform(20, 60)):
                self.set(not self.on)

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._process.send_signal(signal.SIGCONT)
        self._process.kill()
        self._process.wait()


def session(code: Path, project: Path, side: str, level: float, *, save: bool) -> dict[str, Any]:
    """One pytest session of the benchmark test under one code; its verdict and figures."""
    results = project / f"results-{side}.json"
    results.unlink(missing_ok=True)
    command = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "test_bench.py",
        "--gpuperf-device",
        "cpu",
        "--gpuperf-baselines",
        f"baselines-{side}",
        "--gpuperf-results",
        str(results),
    ] + (["--gpuperf-save"] if save else [])
    env = {**os.environ, "PYTHONPATH": str(code), "BENCH_PRODUCTS": str(round(PRODUCTS * (1 + level)))}
    env.pop("GPUPERF_MACHINE_CHECK", None)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    if not results.exists():
        return {"verdict": "ERROR", "seconds": seconds, "error": (done.stdout + done.stderr)[-2000:]}
    [metric] = json.loads(results.read_text())["results"]
    return {
        "verdict": metric["verdict"],
        "ratio": metric["comparison"]["ratio"],
        "reason": metric["comparison"]["reason"],
        "samples": metric["samples"],
        "machine": metric["context"].get("machine"),
        "rounds": metric["rounds"],
        "looks": (metric["context"].get("extended") or {}).get("looks", 1),
        "attempts": metric["context"].get("attempts", 1),
        "seconds": seconds,
    }


def baseline_runs(project: Path, side: str) -> list[dict[str, Any]]:
    [path] = sorted((project / f"baselines-{side}").glob("*/*.json"))
    return json.loads(path.read_text())["tests"]["test_matmul"]["metrics"]["matmul"]["runs"]


def trial(index: int, hogged: bool, old: Path, seed: int, levels: list[float]) -> dict[str, Any]:
    codes = {"before": old, "after": ROOT}
    with tempfile.TemporaryDirectory(prefix="gpuperf-stored-") as folder:
        project = Path(folder)
        (project / "test_bench.py").write_text(TEST_FILE)
        (project / "pytest.ini").write_text("[pytest]\n")
        hog = Hog(seed) if hogged else None
        try:
            for _ in range(BASELINE_RUNS):  # under the hog when there is one: a baseline recorded under load
                for side, code in codes.items():
                    session(code, project, side, 0.0, save=True)
            if hog is not None:
                hog.toggle()
            judged: dict[str, dict[str, Any]] = {side: {} for side in codes}
            order = list(levels)
            random.Random(seed + 1).shuffle(order)
            for level in order:
                sides = list(codes.items())
                random.Random(seed + int(level * 1000)).shuffle(sides)
                for side, code in sides:
                    hog_before = hog.on if hog else False
                    outcome = session(code, project, side, level, save=False)
                    outcome["hog"] = "off" if hog is None else ("on" if hog_before and hog.on else "mixed")
                    judged[side][str(level)] = outcome
            stored = {side: baseline_runs(project, side) for side in codes}
        finally:
            if hog is not None:
                hog.close()
    return {"trial": index, "hog": hogged, "judged": judged, "baselines": stored}


def normalised(samples: list[float], machine: dict[str, Any] | None, reference: float) -> list[float] | None:
    canary = (machine or {}).get("canary_s") or []
    if not canary:
        return None
    median = sorted(canary)[len(canary) // 2]
    return [value * reference / median for value in samples]


def report(data: dict[str, Any]) -> None:
    trials = data["trials"]
    print(f"{len(trials)} trials ({sum(t['hog'] for t in trials)} with the hog), {BASELINE_RUNS} baseline runs each")
    for hogged in (False, True):
        group = [t for t in trials if t["hog"] == hogged]
        if not group:
            continue
        kind = "hog: baseline recorded under load, then on/off every 20-60 s" if hogged else "no hog"
        print(f"\n{kind} ({len(group)} trials)\n")
        print("| slowdown | before (--old) | after |")
        print("| --- | --- | --- |")
        for level in data.get("levels", LEVELS):
            cells = []
            for side in ("before", "after"):
                counts = Counter(t["judged"][side][str(level)]["verdict"] for t in group)
                cells.append(", ".join(f"{v} {counts[v]}" for v in VERDICTS if counts[v]) or "-")
            print(f"| {level:.0%} | {cells[0]} | {cells[1]} |")
    for side in ("before", "after"):
        seconds = sorted(s["seconds"] for t in trials for s in t["judged"][side].values())
        looks = Counter(s.get("looks", 1) for t in trials for s in t["judged"][side].values())
        print(
            f"\n{side}: a judged session took median {seconds[len(seconds) // 2]:.1f} s, max {seconds[-1]:.1f} s; "
            f"looks {dict(sorted(looks.items()))}"
        )
    reasons = Counter(
        re.sub(r"[-+]?[0-9.]+%?", "N", s["reason"].split(";")[0].split("(")[0]).strip()[:70]
        for t in trials
        for s in t["judged"]["after"].values()
        if s["verdict"] == "NOISY"
    )
    print("\nafter: most frequent NOISY reasons:", "; ".join(f"{r} ({n})" for r, n in reasons.most_common(4)))

    defaults = DEVICE_DEFAULTS["cpu"]
    rules = Rules(threshold=defaults["threshold"], noise_limit=defaults["noise_limit"], run_noise=defaults["run_noise"])
    print("\ncanary normalisation (after's samples, same rules, no machine check, no confirmation):\n")
    print(
        "| slowdown | raw: REGRESSED / PASS / other | normalised: REGRESSED / PASS / other | median ratio raw, norm |"
    )
    print("| --- | --- | --- | --- |")
    for level in data.get("levels", LEVELS):
        raw: Counter[str] = Counter()
        norm: Counter[str] = Counter()
        ratios: tuple[list[float], list[float]] = ([], [])
        for t in trials:
            current = t["judged"]["after"][str(level)]
            runs = t["baselines"]["after"]
            if current["verdict"] == "ERROR":
                continue
            canaries = [r.get("context", {}).get("machine", {}).get("canary_s") for r in runs]
            if not all(canaries):
                continue
            reference = sorted(sorted(c)[len(c) // 2] for c in canaries)[len(canaries) // 2]
            base_norm = [normalised(r["samples"], r["context"]["machine"], reference) for r in runs]
            now_norm = normalised(current["samples"], current["machine"], reference)
            if now_norm is None or any(b is None for b in base_norm):
                continue
            plain = compare(current["samples"], [r["samples"] for r in runs], higher_is_better=False, rules=rules)
            scaled = compare(now_norm, base_norm, higher_is_better=False, rules=rules)  # type: ignore[arg-type]
            for counter, result, into in ((raw, plain, ratios[0]), (norm, scaled, ratios[1])):
                verdict = result.verdict.value
                counter[verdict if verdict in ("REGRESSED", "PASS") else "other"] += 1
                into.append(result.ratio or 0.0)
        if not raw:
            continue
        med = [sorted(r)[len(r) // 2] for r in ratios]
        print(
            f"| {level:.0%} | {raw['REGRESSED']} / {raw['PASS']} / {raw['other']} "
            f"| {norm['REGRESSED']} / {norm['PASS']} / {norm['other']} | {med[0]:.4f}, {med[1]:.4f} |"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=20, help="half of them with the hog (default 20)")
    parser.add_argument("--old", type=Path, default=Path("/tmp/verdict-old"), help="checkout of the code before")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--levels", default=",".join(f"{100 * level:g}" for level in LEVELS), help="slowdowns in percent (0,3,5)"
    )
    parser.add_argument("--out", type=Path, help="keep every session's outcome and the baselines here")
    parser.add_argument("--rejudge", type=Path, nargs="+", help="print the tables of files kept by --out, merged")
    args = parser.parse_args()
    if args.rejudge:
        documents = [json.loads(path.read_text()) for path in args.rejudge]
        report({"trials": [t for d in documents for t in d["trials"]], "levels": documents[0].get("levels", LEVELS)})
        return 0
    if not (args.old / "pytest_gpuperf" / "plugin.py").exists():
        print(f"--old {args.old}: no pytest_gpuperf checkout there; git worktree add {args.old} 5eefc03")
        return 2
    levels = [float(part) / 100 for part in args.levels.split(",")]
    started = time.perf_counter()
    trials = []
    for index in range(args.trials):
        trials.append(trial(index, hogged=index % 2 == 1, old=args.old, seed=args.seed + 1000 * index, levels=levels))
        print(f"trial {index + 1}/{args.trials} done ({time.perf_counter() - started:.0f} s)", flush=True)
        data = {"trials": trials, "levels": levels, "started": started}
        if args.out:
            args.out.write_text(json.dumps(data))
    report(data)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
