"""SIGTERM at a random moment of an acceptance session: is every test that finished in its results file, and is
nothing of it left running? (Issue 48: what Slurm sends at --time and scancel.)

A first, unsignalled run of ``pytest --pyargs pytest_gpuperf.suites -m "acceptance and not burnin"
--gpuperf-device cpu -v`` measures when each test ends. Each trial then draws a moment uniformly between the end of
the first test and the start of the last one on that run's clock, and finds it on its own session's streamed
output (after the same number of finished tests, the same seconds later; at the latest when the last test starts),
so every signal comes while the session runs, whatever the load. It sends SIGTERM to pytest alone and checks: the
exit status (143), the results file (written, ``settings.interrupted`` = SIGTERM, every test the output reported
PASSED among its results), and that nothing the session started is left 5 s after exit (its process group, and
any process carrying the trial's marker in its environment, which finds one that left the group).

    python benchmarks/acceptance_sigterm.py --trials 20 --out benchmarks/data/acceptance-sigterm.jsonl
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
import uuid
from pathlib import Path

COMMAND = ["-m", "pytest", "--pyargs", "pytest_gpuperf.suites", "-m", "acceptance and not burnin",
           "--gpuperf-device", "cpu", "-p", "no:cacheprovider", "-p", "no:randomly", "-v"]  # fmt: skip
RESULT = re.compile(r"^(\S+::\S+) (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")
MARKER = "GPUPERF_SIGTERM_TRIAL"


class Session:
    """One pytest session in a group of its own, its -v result lines read as they come, each with its time."""

    def __init__(self, folder: Path, marker: str) -> None:
        self.results = folder / "n.json"
        self.lines: list[str] = []
        self.ends: list[tuple[float, str, str]] = []  # (monotonic time, test id, outcome)
        self.changed = threading.Condition()
        self.process = subprocess.Popen(
            [sys.executable, *COMMAND, "--gpuperf-results", str(self.results)],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            start_new_session=True,
            env={**os.environ, MARKER: marker},
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            found = RESULT.match(line)
            with self.changed:
                self.lines.append(line)
                if found:
                    self.ends.append((time.monotonic(), found.group(1), found.group(2)))
                self.changed.notify_all()
        with self.changed:
            self.changed.notify_all()

    def wait_ends(self, count: int, deadline: float) -> bool:
        """Until ``count`` tests have ended (True), the session exited or the deadline passed (False)."""
        with self.changed:
            while len(self.ends) < count:
                if self.process.poll() is not None or time.monotonic() >= deadline:
                    return False
                self.changed.wait(0.05)
        return True


def calibrate(folder: Path) -> tuple[list[float], float]:
    """The unsignalled run's test ends, in seconds after the first one, and its wall time."""
    started = time.monotonic()
    session = Session(folder, uuid.uuid4().hex)
    session.process.wait(timeout=600)
    session.reader.join(timeout=30)
    if len(session.ends) < 3:
        raise SystemExit(f"the calibration session reported {len(session.ends)} tests:\n{''.join(session.lines)}")
    first = session.ends[0][0]
    return [end - first for end, _, _ in session.ends], time.monotonic() - started


def moment(ends: list[float], rng: random.Random) -> tuple[float, int, float]:
    """A moment drawn uniformly between the first test's end and the last test's start (the end of the one before
    it): (seconds after the first end, tests ended by then, seconds after the last of those)."""
    at = rng.uniform(0, ends[-2])
    done = max(i for i, end in enumerate(ends, start=1) if end <= at)
    return at, done, at - ends[done - 1]


def others_with_marker(marker: str) -> list[int]:
    """Processes whose environment holds this trial's marker (what the session started, wherever its group)."""
    found = []
    needle = f"{MARKER}={marker}".encode()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if needle in Path(f"/proc/{name}/environ").read_bytes().split(b"\0"):
                    state = Path(f"/proc/{name}/stat").read_text().rpartition(")")[2].split()[0]
                    if state not in ("Z", "X"):
                        found.append(int(name))
            except OSError:
                continue
    return found


def trial(seed: int, ends: list[float]) -> dict[str, object]:
    rng = random.Random(seed)
    at, done, after = moment(ends, rng)
    marker = uuid.uuid4().hex
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="gpuperf-sigterm-") as name:
        session = Session(Path(name), marker)
        deadline = time.monotonic() + 600
        session.wait_ends(done, deadline)
        with session.changed:
            reached = session.ends[done - 1][0] if len(session.ends) >= done else time.monotonic()
        # the same seconds after the same test as on the calibration run, at the latest when the last test starts
        session.wait_ends(len(ends) - 1, min(deadline, reached + after))
        running = session.process.poll() is None
        with session.changed:
            ended_before = len(session.ends)
        if running:
            session.process.send_signal(signal.SIGTERM)
        try:
            code = session.process.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(session.process.pid, signal.SIGKILL)
            code = session.process.wait()
        session.reader.join(timeout=30)
        at_exit = others_with_marker(marker)
        time.sleep(5)
        left = others_with_marker(marker)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        passed = {test for _, test, outcome in session.ends if outcome == "PASSED"}
        document = json.loads(session.results.read_text()) if session.results.is_file() else None
    recorded = {entry["test"] for entry in document["results"]} if document else set()
    lost = sorted(test for test in passed if not any(test.endswith(r.split("::", 1)[-1]) for r in recorded))
    return {
        "seed": seed,
        "load_1min": round(load, 2),
        "signal_at_s": round(at, 2),
        "tests_ended_at_signal": ended_before,
        "tests": len(ends),
        "signalled_while_running": running,
        "exit": code,
        "results_written": document is not None,
        "interrupted": (document or {}).get("settings", {}).get("interrupted"),
        "passed": len(passed),
        "recorded_tests": len(recorded),
        "passed_not_recorded": lost,
        "running_at_exit": len(at_exit),
        "left_running_5s": left,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpuperf-sigterm-") as name:
        ends, wall = calibrate(Path(name))
    head = {"calibration": [round(end, 2) for end in ends], "wall_s": round(wall, 1), "load_1min": os.getloadavg()[0]}
    print(json.dumps(head), flush=True)
    with args.out.open("a") as out:
        out.write(json.dumps(head, sort_keys=True) + "\n")
    for number in range(args.trials):
        record = trial(args.seed + number, ends)
        with args.out.open("a") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
        print(json.dumps(record, sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
