"""SIGTERM at a random moment of an acceptance session: is every test that finished in its results file, and is
nothing of it left running? (Issue 48: what Slurm sends at --time and scancel.)

Each trial starts ``pytest --pyargs pytest_gpuperf.suites -m "acceptance and not burnin" --gpuperf-device cpu
--gpuperf-results FILE -rA`` in a fresh folder, in a process group of its own, waits until its first test has
finished plus a random 0-15 s, sends SIGTERM to pytest alone, and checks: the exit status (143), the results file
(written, ``settings.interrupted`` = SIGTERM, every test the output reported PASSED among its results unless it
recorded nothing), and the group (nothing left 5 s after exit).

    python benchmarks/acceptance_sigterm.py --trials 20 --out benchmarks/data/acceptance-sigterm.jsonl
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMAND = ["-m", "pytest", "--pyargs", "pytest_gpuperf.suites", "-m", "acceptance and not burnin",
           "--gpuperf-device", "cpu", "-p", "no:cacheprovider", "-rA", "-q"]  # fmt: skip


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def trial(seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="gpuperf-sigterm-") as name:
        folder = Path(name)
        results = folder / "n.json"
        log = folder / "out.txt"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, *COMMAND, "--gpuperf-results", str(results)],
                cwd=folder,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and proc.poll() is None:
                if "PASSED" in log.read_text(errors="replace") or "." in _progress(log):
                    break
                time.sleep(0.2)
            delay = rng.uniform(0, 15)
            time.sleep(delay)
            sent = proc.poll() is None
            if sent:
                proc.send_signal(signal.SIGTERM)
            try:
                code = proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                code = proc.wait()
        time.sleep(5)
        left = group_alive(proc.pid)
        if left:
            os.killpg(proc.pid, signal.SIGKILL)
        text = log.read_text(errors="replace")
        passed = {line.split()[1] for line in text.splitlines() if line.startswith("PASSED ")}
        document = json.loads(results.read_text()) if results.is_file() else None
        recorded = {entry["test"] for entry in document["results"]} if document else set()
        lost = sorted(test for test in passed if not any(test.endswith(r.split("::", 1)[-1]) for r in recorded))
        return {
            "seed": seed,
            "delay_s": round(delay, 2),
            "signalled": sent,
            "exit": code,
            "results_written": document is not None,
            "interrupted": (document or {}).get("settings", {}).get("interrupted"),
            "passed": len(passed),
            "recorded_tests": len(recorded),
            "passed_not_recorded": lost,
            "left_running": left,
        }


def _progress(log: Path) -> str:
    lines = log.read_text(errors="replace").splitlines()
    return next((line for line in lines if line.startswith(("pytest_gpuperf", "..", "s."))), "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for number in range(args.trials):
        record = trial(args.seed + number)
        with args.out.open("a") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
        print(json.dumps(record, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
