"""Node acceptance as one Slurm job on a local Slurm of 4 nodes: time from nothing to the first judged verdict, then
trials of four equal nodes and of one node (n3) made 2x slower through its own environment.

    .venv/bin/python benchmarks/slurm_fleet.py --workload spin --trials 10 --out benchmarks/data/slurm-fleet.jsonl

Each job is ``examples/slurm/acceptance.sbatch`` on every node, running ``spin`` (tests/helpers/slurm_spin.py, the
CI test's loop in thread CPU time; n3 with SPIN_FACTOR=2) or ``tier`` (the tier's ``test_memory[cpu-copy]``; n3
with acceptance=99). One JSON line per job. Needs root and Debian's Slurm (slurm/local.py installs it).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path

from pytest_gpuperf.slurm.local import LocalSlurm, install

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
from slurm_spin import SPIN  # noqa: E402

TIER = "--pyargs pytest_gpuperf.suites.test_acceptance -k test_memory[cpu-copy] -q"
"""One word for -k: the recipe splits GPUPERF_PYTEST_ARGS on spaces."""
SLOWED = {"spin": {"SPIN_FACTOR": "2"}, "tier": {"GPUPERF_INJECT_SLOWDOWN": "acceptance=99"}}


def job(cluster: LocalSlurm, folder: Path, name: str, selection: str) -> dict[str, object]:
    output = folder / f"{name}.out"
    env = {
        **cluster.env,
        "PYTHON": sys.executable,
        "GPUPERF_CHECKOUT": str(ROOT),
        "GPUPERF_OUT": str(folder / name),
        "GPUPERF_NODE_TIMEOUT": "300",
        "GPUPERF_PYTEST_ARGS": selection,
    }
    started = time.monotonic()
    status = cluster.run_batch(
        ["--nodes=4", f"--output={output}", str(ROOT / "examples/slurm/acceptance.sbatch")], env=env
    )
    text = output.read_text() if output.exists() else ""
    return {
        "exit": status,
        "listed": re.findall(r"^LISTED (\S+)", text, re.M),
        "lost": re.findall(r"^LOST (\S+)", text, re.M),
        "seconds": round(time.monotonic() - started, 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--workload", choices=tuple(SLOWED), default="spin")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    reason = install()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="slurm-fleet-"))
    selection = TIER
    if args.workload == "spin":
        (folder / "test_spin.py").write_text(SPIN)
        selection = f"{folder / 'test_spin.py'} -q --rootdir {folder}"
    with args.out.open("a") as sink:

        def write(record: dict[str, object]) -> None:
            print(json.dumps(record), flush=True)
            sink.write(json.dumps(record) + "\n")
            sink.flush()

        started = time.monotonic()
        cluster = LocalSlurm(folder / "cluster", nodes=4).start()
        try:
            idle = time.monotonic() - started
            first = job(cluster, folder, "first", selection)
            write(
                {
                    "workload": args.workload,
                    "case": "first verdict",
                    "cluster_idle_s": round(idle, 1),
                    "total_s": round(time.monotonic() - started, 1),
                    **first,
                }
            )
            for trial in range(args.trials):
                for case in ("equal", "slowed"):
                    cluster.set_node_env("n3", SLOWED[args.workload] if case == "slowed" else {})
                    record = job(cluster, folder, f"{case}-{trial}", selection)
                    write({"workload": args.workload, "case": case, "trial": trial, **record})
        finally:
            cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
