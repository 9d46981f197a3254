"""The README's main job (`pytest -m perf`) on fresh clones: how often it fails with nothing changed, and whether a
slowdown injected into one suite fails that suite.

Each run clones this checkout's HEAD into a new folder and runs ``python -m pytest -m perf`` there with this
interpreter (its venv has the project's dependencies; the clone's own code is what runs, first on sys.path),
writing ``--gpuperf-results``. ``--inject SUITE=PCT`` sets GPUPERF_INJECT_SLOWDOWN for every run;
``--as-machine NAME`` makes the runs another machine of this hardware key (the ``pytest_gpuperf_machine`` hook,
through a plugin module put on PYTHONPATH), so a baseline recorded here is judged as another machine's would be.

    python benchmarks/main_job.py --runs 5 --out benchmarks/data/main-job-unchanged.jsonl
    python benchmarks/main_job.py --runs 3 --inject micro=10 --out benchmarks/data/main-job-micro10.jsonl

Each run appends one JSON line (exit status, minutes, verdict counts, the REGRESSED metrics, the family size, the
comparison each judged metric made, why the undecided ones were not decided, each injected metric's verdict and
ratio, the load average before and after) and prints a line; the end prints the
totals. A failed job with nothing injected is the defect this measures.
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from pytest_gpuperf.core.verdict.rollup import DECIDED, undecided_because  # noqa: E402

MACHINE_PLUGIN = """
def pytest_gpuperf_machine(config):
    return {name!r}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--inject", help="SUITE=PCT, set as GPUPERF_INJECT_SLOWDOWN")
    parser.add_argument("--as-machine", help="judge as this named machine (another machine of the key)")
    parser.add_argument("--out", type=Path, required=True, help="JSON lines, appended")
    parser.add_argument("--pytest-args", default="-m perf", help="what the main job runs (default: -m perf)")
    args = parser.parse_args()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    lines = []
    for number in range(1, args.runs + 1):
        record = one_run(args, head.stdout.strip())
        record["run"] = number
        lines.append(record)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        with args.out.open("a") as out:
            out.write(json.dumps(record, sort_keys=True) + "\n")
        print(
            f"run {number}/{args.runs}: exit {record['exit']}, {record['minutes']:.1f} min, "
            f"{dict(record['verdicts'])}, regressed {record['regressed'] or '-'}, family {record['family_size']}",
            flush=True,
        )
    failed = sum(record["exit"] != 0 for record in lines)
    judged = sum(sum(record["verdicts"].values()) for record in lines)
    regressed = sum(len(record["regressed"]) for record in lines)
    print(f"{failed} of {len(lines)} jobs failed; {regressed} REGRESSED of {judged} metrics judged")
    return 0


def one_run(args: argparse.Namespace, head: str) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="gpuperf-main-job-"))
    try:
        clone = folder / "clone"
        subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPERF_")}
        if args.inject:
            env["GPUPERF_INJECT_SLOWDOWN"] = args.inject
        argv = [sys.executable, "-m", "pytest", *args.pytest_args.split(), "-p", "no:cacheprovider"]
        argv += ["--gpuperf-results", str(folder / "results.json")]
        if args.as_machine:
            (folder / "bench_machine.py").write_text(MACHINE_PLUGIN.format(name=args.as_machine))
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(folder), env.get("PYTHONPATH")]))
            argv += ["-p", "bench_machine"]
        load_before = os.getloadavg()
        started = time.monotonic()
        done = subprocess.run(argv, cwd=clone, env=env, capture_output=True, text=True)
        minutes = (time.monotonic() - started) / 60
        record: dict[str, Any] = {
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "head": head,
            "inject": args.inject,
            "as_machine": args.as_machine,
            "exit": done.returncode,
            "minutes": round(minutes, 2),
            "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "summary": done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-500:],
        }
        record.update(read_results(folder / "results.json"))
        if done.returncode not in (0, 1):
            record["tail"] = done.stdout[-3000:] + done.stderr[-2000:]
        return record
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def read_results(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {"verdicts": {}, "regressed": [], "family_size": None, "comparisons": {}, "injected": []}
    document = json.loads(path.read_text())
    verdicts = collections.Counter(result["verdict"] for result in document["results"])
    regressed = [
        {
            "test": result["test"],
            "metric": result["metric"],
            "ratio": result["comparison"].get("ratio"),
            "p_worse": result["comparison"].get("p_worse"),
            "reason": result["comparison"].get("reason", "")[:300],
        }
        for result in document["results"]
        if result["verdict"] == "REGRESSED"
    ]
    comparisons = collections.Counter(str(result["context"].get("comparison")) for result in document["results"])
    suites = collections.defaultdict(collections.Counter)
    for result in document["results"]:
        suites[result["test"].split("::", 1)[0].rsplit("/", 1)[-1]][result["verdict"]] += 1
    because = collections.Counter(
        undecided_because(result["verdict"], result["comparison"].get("reason", ""), result["context"])
        or result["verdict"]
        for result in document["results"]
        if result["verdict"] not in DECIDED
    )
    injected = [
        {
            "test": result["test"].rsplit("/", 1)[-1],
            "metric": result["metric"],
            "verdict": result["verdict"],
            "ratio": result["comparison"].get("ratio"),
            "ci": [result["comparison"].get("ci_low"), result["comparison"].get("ci_high")],
            "reason": result["comparison"].get("reason", "")[:200],
        }
        for result in document["results"]
        if result["context"].get("injected_slowdown")
    ]
    return {
        "verdicts": dict(verdicts),
        "undecided_because": dict(because),
        "injected": injected,
        "regressed": regressed,
        "family_size": document["settings"].get("family_size"),
        "comparisons": dict(comparisons),
        "suites": {suite: dict(counts) for suite, counts in suites.items()},
    }


if __name__ == "__main__":
    sys.exit(main())
