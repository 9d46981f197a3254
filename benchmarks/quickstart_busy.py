"""The README's quickstart on a busy machine: does a 2x slowdown of its `time.sleep` test always fail, and does the
unchanged test never fail, whatever the number of CPU hogs while the baseline is recorded and while it is judged?

For each baseline condition (hogs while recording), a fresh folder gets the README's test_speed.py and two
`--gpuperf-save` runs; then, for each judging condition and each slowdown (1, 1.25, 2), ``--trials`` judged runs
with ``--gpuperf-threshold 10`` as the README has them. A hog is a pure-Python busy loop in its own process.

``--identities`` judges each cell as a container or a new boot would (root, util-linux ``unshare``): ``same`` as
recorded; ``new-hostname`` in a UTS namespace of its own with a random hostname (what ``docker run`` gives), which
must stay "this machine"; ``new-boot`` with another boot id bind-mounted over /proc/sys/kernel/random/boot_id in a
mount namespace of its own (a VM restarted, perhaps on another host), which must read "another machine of this
hardware key" and be judged with the key's between-machine noise. The 2x must fail in each.

    python benchmarks/quickstart_busy.py --record-hogs 0,2 --judge-hogs 0,2,4 --trials 3 \\
        --out benchmarks/data/quickstart-busy.jsonl
    python benchmarks/quickstart_busy.py --record-hogs 0 --judge-hogs 0 --identities same,new-hostname,new-boot \\
        --slowdowns 1,2 --trials 5 --out benchmarks/data/quickstart-identities.jsonl

One JSON line per judged run (hogs, slowdown, exit status, verdict, ratio, reason); the end prints a table: per
cell, how many runs failed. Unchanged runs that failed are false alarms; 2x runs that passed are misses.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import secrets
import shlex
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


IDENTITIES = ("same", "new-hostname", "new-boot")


def as_identity(identity: str, command: list[str], folder: Path) -> list[str]:
    """``command`` run as ``identity`` says (IDENTITIES): unchanged, in a UTS namespace with a random hostname, or
    in a mount namespace with another boot id over the kernel's."""
    if identity == "same":
        return command
    if identity == "new-hostname":
        name = f"ctr-{secrets.token_hex(6)}"
        return ["unshare", "--uts", "sh", "-c", f"hostname {name} && exec {shlex.join(command)}"]
    boot = folder / "other-boot-id"
    boot.write_text(f"{secrets.token_hex(4)}-0000-4000-8000-{secrets.token_hex(6)}\n")
    mount = f"mount --bind {shlex.quote(str(boot))} /proc/sys/kernel/random/boot_id"
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c", f"{mount} && exec {shlex.join(command)}"]


def pytest_run(
    folder: Path, *args: str, slowdown: float = 1.0, identity: str = "same"
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SLOWDOWN": str(slowdown)}
    command = [sys.executable, "-m", "pytest", "test_speed.py", "-q", "-p", "no:cacheprovider", *args]
    command = as_identity(identity, command, folder)
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600)


def judged(folder: Path, slowdown: float, identity: str = "same") -> dict[str, Any]:
    done = pytest_run(
        folder, "--gpuperf-threshold", "10", "--gpuperf-results", "run.json", slowdown=slowdown, identity=identity
    )
    return verdict_row(folder / "run.json", done)


def verdict_row(results: Path, done: subprocess.CompletedProcess[str], reason_chars: int = 300) -> dict[str, Any]:
    """One judged run's row: its exit status and its one result's verdict, comparison, ratio, interval top and the
    end of its reason (the output's tail where no results were written). benchmarks/torchrun_gate.py uses it too."""
    record: dict[str, Any] = {"exit": done.returncode}
    try:
        (result,) = json.loads(results.read_text())["results"]
    except (OSError, ValueError):
        return {**record, "verdict": None, "tail": (done.stdout + done.stderr)[-600:]}
    comparison = result["comparison"]
    return {
        **record,
        "verdict": result["verdict"],
        "comparison": result.get("context", {}).get("comparison"),
        "ratio": comparison.get("ratio"),
        "ci_high": comparison.get("ci_high"),
        "reason": comparison.get("reason", "")[-reason_chars:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-hogs", default="0,2")
    parser.add_argument("--judge-hogs", default="0,2,4")
    parser.add_argument("--slowdowns", default="1,1.25,2")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--identities", default="same", help=f"comma-separated, of {', '.join(IDENTITIES)}")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    identities = args.identities.split(",")
    if not set(identities) <= set(IDENTITIES):
        parser.error(f"--identities: {args.identities!r}: each must be one of {', '.join(IDENTITIES)}")
    cells: dict[tuple[int, int, str, float], list[int]] = collections.defaultdict(list)
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
                        for identity in identities:
                            for slowdown in (float(s) for s in args.slowdowns.split(",")):
                                record = {
                                    "record_hogs": record_hogs,
                                    "judge_hogs": judge_hogs,
                                    "identity": identity,
                                    "slowdown": slowdown,
                                    "trial": trial,
                                    "load1": os.getloadavg()[0],
                                    **judged(folder, slowdown, identity),
                                }
                                cells[(record_hogs, judge_hogs, identity, slowdown)].append(record["exit"])
                                with args.out.open("a") as out:
                                    out.write(json.dumps(record, sort_keys=True) + "\n")
                                print(
                                    f"record {record_hogs} hogs, judge {judge_hogs} hogs, {identity}, {slowdown}x: "
                                    f"exit {record['exit']} {record['verdict']} ({record.get('comparison')}) ratio "
                                    f"{record.get('ratio')}",
                                    flush=True,
                                )
    print("\nrecord hogs | judge hogs | identity | slowdown | failed / runs")
    for (record_hogs, judge_hogs, identity, slowdown), exits in sorted(cells.items()):
        print(f"{record_hogs} | {judge_hogs} | {identity} | {slowdown} | {sum(e != 0 for e in exits)} / {len(exits)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
