"""Does the inference suite's LoadGen Server case catch a 2x slower ``transformers serve``? Catch rate over trials.

    python benchmarks/loadgen_slowdown.py [--trials 5] [--slowdown 100] [--runs 8]

Two servers of the tiny Llama (fp32, CPU) are launched once: one as the suite launches it, one with the injected
slowdown (``ServerPool.slowdown``, what ``--gpuperf-inject-slowdown inference=PCT`` sets: every forward of the
served model run again at 100). Each trial is three pytest sessions of the suite's
``test_loadgen[engine-openai-cpu-server]`` (``--gpuperf-engine openai:URL``) on a fresh baselines folder: the
plain server saved as the baseline (5 LoadGen runs), then the slowed server (``--runs`` runs; it should read
REGRESSED on TTFT/TPOT), then the plain server again (it should not). Printed per trial: each session's TTFT/TPOT
p50 and p90 medians and the verdicts.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from pytest_gpuperf.inference.servers import EngineChoice, ServerPool

SUITE = Path(__file__).resolve().parents[1] / "pytest_gpuperf" / "suites" / "test_inference.py"
METRICS = ("loadgen.server.ttft_p50", "loadgen.server.tpot_p50", "loadgen.server.ttft_p90", "loadgen.server.tpot_p90")
FLAGS = ["-m", "perf", "-k", "loadgen and cpu and server", "--gpuperf-device", "cpu", "--gpuperf-noise-limit", "60",
         "--gpuperf-machine-check", "off", "--gpuperf-confirm", "0", "-p", "no:cacheprovider", "-q", "-W",
         "ignore"]  # fmt: skip
"""As tests/workloads/test_engine_transformers.py's check runs it (the noise limit: a percentile of one short run
spreads past the CPU default of 10% on a busy 2-core machine)."""


def session(url: str, folder: str, work: Path, name: str, *, save: bool, runs: int = 5) -> dict[str, dict]:
    results = work / f"{name}.json"
    argv = [sys.executable, "-m", "pytest", str(SUITE), *FLAGS, f"--gpuperf-engine=openai:{url}",
            f"--gpuperf-inference-served-model={folder}", f"--gpuperf-baselines={work / 'baselines'}",
            f"--gpuperf-results={results}", f"--gpuperf-inference-runs={runs}",
            *(["--gpuperf-save"] if save else [])]  # fmt: skip
    run = subprocess.run(argv, capture_output=True, text=True, check=False)
    if not results.exists():
        print(f"  {name}: no results (exit {run.returncode})\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
        return {}
    if run.returncode and "REGRESSED" not in run.stdout:
        failed = [line for line in run.stdout.splitlines() if "gpuperf:" in line or line.startswith("E ")]
        print(f"  {name}: exit {run.returncode}: " + " | ".join(failed[:3]))
    return {r["metric"]: r for r in json.loads(results.read_text())["results"]}


def line(name: str, found: dict[str, dict]) -> str:
    cells = []
    for metric in METRICS:
        record = found.get(metric)
        if record is None:
            cells.append(f"{metric.rsplit('.', 1)[1]}=-")
            continue
        value = statistics.median(record["samples"]) * 1e3
        cells.append(f"{metric.rsplit('.', 1)[1]}={value:.1f}ms {record['verdict']}")
    return f"  {name:8s} " + "  ".join(cells)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--slowdown", type=float, default=100.0, help="percent more forwards of the slowed server")
    parser.add_argument("--runs", type=int, default=8, help="LoadGen runs of the judged sessions (the baseline: 5)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="loadgen-slowdown-"))
    plain = ServerPool(choice=EngineChoice("transformers"), workdir=work / "plain")
    slowed = ServerPool(choice=EngineChoice("transformers"), workdir=work / "slowed", slowdown=args.slowdown / 100)
    (work / "plain").mkdir()
    (work / "slowed").mkdir()
    caught = false_alarms = 0
    try:
        served = {name: pool.engine(model="tiny-llama", max_len=128, device="cpu", dtype="float32")
                  for name, pool in (("plain", plain), ("slowed", slowed))}  # fmt: skip
        for trial in range(1, args.trials + 1):
            folder = work / f"trial-{trial}"
            folder.mkdir()
            base = session(served["plain"].url, served["plain"].model, folder, "baseline", save=True)
            slow = session(served["slowed"].url, served["slowed"].model, folder, "slowed", save=False, runs=args.runs)
            again = session(served["plain"].url, served["plain"].model, folder, "again", save=False, runs=args.runs)
            print(f"trial {trial}")
            for name, found in (("baseline", base), ("slowed", slow), ("again", again)):
                print(line(name, found))
            caught += any(slow.get(m, {}).get("verdict") == "REGRESSED" for m in METRICS[:2])
            false_alarms += any(again.get(m, {}).get("verdict") == "REGRESSED" for m in METRICS)
            sys.stdout.flush()
    finally:
        plain.close()
        slowed.close()
    print(f"slowed read REGRESSED on TTFT or TPOT p50: {caught} of {args.trials}; plain again REGRESSED on any: "
          f"{false_alarms} of {args.trials}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
