"""The distributed suite's DDP test as a 2-node ``srun ... torchrun`` job on a local Slurm: one baseline job, then
trials alternating an unchanged job and one whose steps do 2x the work (``--gpuperf-inject-slowdown
distributed=99``), each judged against the baseline at the settings of tests/workloads/test_slurm.py, with the
machine-state check on (the default) or recording only (the CI test's).

    .venv/bin/python benchmarks/slurm_distributed.py --trials 5 --machine-check record --out benchmarks/data/x.jsonl

One JSON line per job: exit status, each metric's verdict, ratio and interval, seconds, the load average. Needs
root and Debian's Slurm (slurm/local.py installs it).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

from pytest_gpuperf.slurm.local import LocalSlurm, install

ROOT = Path(__file__).resolve().parents[1]
SLOWED = "--gpuperf-inject-slowdown distributed=99"


def _port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def job(cluster: LocalSlurm, folder: Path, name: str, extra: str, check: str) -> dict[str, object]:
    results = folder / f"{name}.json"
    env = {
        **cluster.env,
        "PYTHON": sys.executable,
        "GPUPERF_CHECKOUT": str(ROOT),
        "GPUPERF_NPROC_PER_NODE": "1",
        "GPUPERF_RDZV_PORT": str(_port()),
        "GLOO_SOCKET_IFNAME": "lo",
        "OMP_NUM_THREADS": "1",
        "GPUPERF_PYTEST_ARGS": f"--pyargs pytest_gpuperf.suites.test_distributed -k ddp --rootdir {folder} "
        f"--gpuperf-baselines {folder / 'baselines'} --gpuperf-machine-id two-node-job "
        f"--gpuperf-machine-check {check} --gpuperf-results {results} {extra}",
    }
    load = os.getloadavg()[0]
    started = time.monotonic()
    status = cluster.run_batch(
        ["--nodes=2", f"--output={folder / name}.out", str(ROOT / "examples/slurm/distributed.sbatch")],
        env=env,
        limit_s=600,
    )
    row: dict[str, object] = {"job": name, "machine_check": check, "exit": status}
    row["seconds"] = round(time.monotonic() - started, 1)
    row["load1_before"] = round(load, 2)
    row["load1_after"] = round(os.getloadavg()[0], 2)
    if results.exists():
        for result in json.loads(results.read_text())["results"]:
            comparison = result["comparison"]
            row[result["metric"]] = {
                "verdict": comparison["verdict"],
                "ratio": comparison["ratio"],
                "interval": [comparison["ci_low"], comparison["ci_high"]],
                "spread": result["summary"]["spread"],
                "reason": comparison["reason"],
            }
    return row


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--machine-check", choices=("on", "record"), default="on")
    args = parser.parse_args()
    missing = install()
    if missing:
        print(missing, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="gpuperf-slurm-ddp-") as scratch:
        folder = Path(scratch)
        with LocalSlurm(folder / "slurm", nodes=2) as cluster, open(args.out, "a") as out:
            runs = [("save", "--gpuperf-save")]
            for trial in range(args.trials):
                runs += [(f"same-{trial}", ""), (f"slow-{trial}", SLOWED)]
            for name, extra in runs:
                row = job(cluster, folder, name, extra, args.machine_check)
                print(json.dumps(row), flush=True)
                out.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
