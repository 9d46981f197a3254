"""Issue 36's "done when" on CPU: four simulated nodes, one 10% slower; `gpuperf fleet` must list that node and only
it (exit 1), and with all four equal list nothing (exit 0), at its default rules.

A trial runs five `pytest -m acceptance` processes of the acceptance tier, one after the other, each its own
machine through the ``pytest_gpuperf_machine`` hook (a plugin module on PYTHONPATH, as benchmarks/main_job.py
does): node-1..node-4 unslowed, and node-4 again with ``GPUPERF_INJECT_SLOWDOWN=acceptance=PCT``; with
``--passes N`` it does so N times, interleaved, each node's N results files pooled by the fleet (files of one
machine identity are one node). Folder "equal"
holds the four unslowed nodes, folder "slowed" the first three and the slowed node-4; `gpuperf fleet --format
json` judges each. A 10% effect over real timing on a shared 2-core VM is a benchmark's question, not a CI test's
(tests/workloads/test_acceptance_tier.py injects 99% there).

    python benchmarks/fleet_nodes.py --trials 5 --out benchmarks/data/fleet-nodes-10pct.jsonl
    python benchmarks/fleet_nodes.py --trials 4 --passes 3 --out benchmarks/data/fleet-nodes-10pct-3passes.jsonl

Each trial appends one JSON line: both verdicts (exit status, listed units and their lines), every node's median
and samples, the load average before and after; the end prints the totals.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "pytest_gpuperf" / "suites" / "test_acceptance.py"
MACHINE_PLUGIN = """
import os


def pytest_gpuperf_machine(config):
    return os.environ["BENCH_NODE"]
"""
NODES = ("node-1", "node-2", "node-3", "node-4")


def node(folder: Path, name: str, work: Path, selection: str, inject: str | None, run: int = 1) -> dict[str, Any]:
    env = {**os.environ, "BENCH_NODE": name}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(work), env.get("PYTHONPATH")]))
    env.pop("GPUPERF_INJECT_SLOWDOWN", None)
    if inject:
        env["GPUPERF_INJECT_SLOWDOWN"] = inject
    path = folder / f"{name}.run{run}.json"  # the fleet pools the files of one machine identity
    argv = [sys.executable, "-m", "pytest", str(SUITE), "-m", "acceptance", "-k", selection, "-p", "bench_node",
            "-p", "no:cacheprovider", "-q", "--gpuperf-device", "cpu", "--gpuperf-results", str(path),
            "--gpuperf-baselines", str(work / "baselines")]  # fmt: skip
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name}: pytest exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    results = json.loads(path.read_text())["results"]
    return {
        r["test"].split("::")[1]: {"median": statistics.median(r["samples"]), "samples": r["samples"]} for r in results
    }


def judge(folder: Path) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "fleet", str(folder), "--format", "json"],
        capture_output=True,
        text=True,
    )
    if done.returncode not in (0, 1):
        return {"exit": done.returncode, "error": done.stderr.strip()[-1000:]}
    report = json.loads(done.stdout)
    return {
        "exit": done.returncode,
        "listed": [entry["unit"] for entry in report["listed"]],
        "lines": [entry["line"] for entry in report["listed"]],
        "summary": report["summary"],
    }


def trial(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="gpuperf-fleet-nodes-"))
    try:
        (work / "bench_node.py").write_text(MACHINE_PLUGIN)
        equal, slowed = work / "equal", work / "slowed"
        equal.mkdir()
        slowed.mkdir()
        load_before = os.getloadavg()
        figures: dict[str, list[dict[str, Any]]] = {}
        for run in range(1, args.passes + 1):  # interleaved: a load that shifts for minutes reaches every node
            for name in NODES:
                figures.setdefault(name, []).append(node(equal, name, work, args.select, None, run))
                if name != NODES[-1]:
                    shutil.copy(equal / f"{name}.run{run}.json", slowed / f"{name}.run{run}.json")
            figures.setdefault("node-4-slowed", []).append(node(slowed, "node-4", work, args.select, args.inject, run))
        return {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "inject": args.inject,
            "select": args.select,
            "passes": args.passes,
            "equal": judge(equal),
            "slowed": judge(slowed),
            "nodes": figures,
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--inject", default="acceptance=10", help="SUITE=PCT for the slowed node (default 10%%)")
    parser.add_argument("--select", default="gemm and bf16", help="-k expression of the tier (default: bf16 GEMM)")
    parser.add_argument("--passes", type=int, default=1, help="runs of each node, interleaved, pooled by the fleet")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    args = parser.parse_args()
    right = {"equal": 0, "slowed": 0}
    for number in range(1, args.trials + 1):
        record = trial(args)
        record["trial"] = number
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
        equal_ok = record["equal"]["exit"] == 0
        slowed_ok = record["slowed"]["exit"] == 1 and [u.split()[0] for u in record["slowed"]["listed"]] == ["node-4"]
        right["equal"] += equal_ok
        right["slowed"] += slowed_ok
        ratio = {
            test: round(
                statistics.median(run[test]["median"] for run in record["nodes"]["node-4-slowed"])
                / statistics.median(run[test]["median"] for run in record["nodes"]["node-4"]),
                3,
            )
            for test in record["nodes"]["node-4"][0]
        }
        print(
            f"trial {number}/{args.trials}: equal exit {record['equal']['exit']} "
            f"listed {record['equal'].get('listed')}; slowed exit {record['slowed']['exit']} listed "
            f"{record['slowed'].get('listed')}; slowed/unslowed node-4 {ratio}; load {record['load_before']}",
            flush=True,
        )
    trials = args.trials
    print(f"equal fleets exit 0: {right['equal']}/{trials}; the slowed node alone listed: {right['slowed']}/{trials}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
