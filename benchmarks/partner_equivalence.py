"""Nine simulated partners, each a signed bundle of runs, judged by `gpuperf variance --trust` against a signed
reference: who shows "within 1%", and how many runs the others are told they need.

    python benchmarks/partner_equivalence.py [--seeds 0,1,2] [--runs 5] [--repeats 20] [--reference-runs 10]
        [--within 1] [--between 0.5] [--edge-trials 200] [--out benchmarks/data]

Per seed: a reference of ``--reference-runs`` runs and nine partners of ``--runs`` runs, three workloads each
(bf16 GEMM TFLOP/s, HBM GB/s, a decode step's seconds). A run's median is shifted from the true value by
lognormal noise of sd ``--between`` percent, its ``--repeats`` samples by sd ``--within`` percent about it. Eight
partners are truly -0.5, -0.4, -0.25, -0.1, +0.1, +0.25, +0.4, +0.5% from the reference, the ninth 2% slower.
Each bundle is signed with its own key (`gpuperf keygen`, `gpuperf sign`); the reference with the vendor's. One
`gpuperf variance --trust keys/` process judges all nine. Then:

- a byte of one partner's samples is changed: the command must refuse (exit 2, one line, no table);
- every partner left INCONCLUSIVE with a figure (its own runs N, or R reference runs with K of its own; at most
  ``--max-rerun``) is drawn again with those runs, signed, judged: twice, once at its true offset (what would
  happen) and once at the ratios it was measured at (the figure's premise, "if the ratio holds": each workload's
  true value set to the reference's measured centre times the measured ratio);
- ``--edge-trials`` partners exactly 1% slower (the edge of the band), judged in this process: TOST at 5% per
  side should call at most ~5% of them PASS.

Raw output per seed goes to OUT/partner_equivalence-seed<S>.txt (the table) and .json; one summary line per seed
to OUT/partner_equivalence.jsonl. It is a statistics benchmark on simulated samples, not a timing one.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_gpuperf.cli import main as cli  # noqa: E402
from pytest_gpuperf.cli import variance  # noqa: E402
from pytest_gpuperf.cli.loading import load_side  # noqa: E402

FINGERPRINT = {
    "hardware_key": {"device": "cuda", "accelerator": {"name": "H200", "count": 8}, "cpu": {"cores": 96}},
    "hardware_slug": "8x-h200-141gib-sm-90-host-cpu-96c",
    "stack": {"driver": "580.95", "torch": "2.12.0", "nccl": "2.27.3"},
}
WORKLOADS = (
    ("suites/test_micro.py::test_gemm[bf16-square]", "tflops", "TFLOP/s", True, 780.0),
    ("suites/test_micro.py::test_memory_bandwidth[read]", "bandwidth", "GB/s", True, 4300.0),
    ("suites/test_llm.py::test_decode[bf16]", "step_time", "s", False, 0.0125),
)
OFFSETS = (-0.005, -0.004, -0.0025, -0.001, 0.001, 0.0025, 0.004, 0.005, -0.02)
"""Each partner's true throughput change from the reference (a step time moves the other way)."""


def write_bundle(
    folder: Path,
    ratio: float,
    rng: np.random.Generator,
    *,
    runs: int,
    repeats: int,
    within: float,
    between: float,
    values: tuple[float, ...] | None = None,
) -> Path:
    """``runs`` results files of every workload at ``ratio`` times its nominal value (``values``: true values per
    workload instead)."""
    folder.mkdir(parents=True)
    for index in range(runs):
        results = []
        for number, (test, metric, unit, higher, value) in enumerate(WORKLOADS):
            true = values[number] if values else value * (ratio if higher else 1 / ratio)
            centre = true * math.exp(rng.normal(0, between))
            samples = centre * np.exp(rng.normal(0, within, repeats))
            results.append(
                {"test": test, "metric": metric, "unit": unit, "higher_is_better": higher, "samples": samples.tolist()}
            )
        document = {
            "schema": 1,
            "created": "2026-12-06T01:00:00+00:00",
            "fingerprint": FINGERPRINT,
            "settings": {"device": "cuda"},
            "results": results,
        }
        (folder / f"run{index:02d}.json").write_text(json.dumps(document, indent=1))
    return folder


def gpuperf_quietly(*argv: str) -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        return cli.main(list(argv))


def judge(work: Path, partners: list[str], *fmt: str) -> subprocess.CompletedProcess[str]:
    """The real command, in its own process."""
    argv = ["variance", "--trust", "keys", "--reference", "ref", *partners, *fmt]  # relative: run in work
    return subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", *argv], capture_output=True, text=True, cwd=work, check=False
    )


def one_seed(seed: int, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    work = Path(tempfile.mkdtemp(prefix=f"partners-{seed}-"))
    noise = {"runs": args.runs, "repeats": args.repeats, "within": args.within / 100, "between": args.between / 100}
    try:
        (work / "keys").mkdir()
        names = [f"partner-{index + 1}" for index in range(len(OFFSETS))]
        for name in ("vendor", *names):
            assert gpuperf_quietly("keygen", str(work / f"{name}.key")) == 0
            shutil.copy(work / f"{name}.key.pub", work / "keys")
        reference = write_bundle(work / "ref", 1.0, rng, **{**noise, "runs": args.reference_runs})
        assert gpuperf_quietly("sign", "--key", str(work / "vendor.key"), str(reference)) == 0
        for name, offset in zip(names, OFFSETS):
            bundle = write_bundle(work / name, 1 + offset, rng, **noise)
            assert gpuperf_quietly("sign", "--key", str(work / f"{name}.key"), str(bundle)) == 0
        started = time.perf_counter()
        done = judge(work, names, "--format", "json")
        seconds = time.perf_counter() - started
        assert done.returncode in (0, 1) and not done.stderr, (done.returncode, done.stderr)
        document = json.loads(done.stdout)
        table = judge(work, names)
        (out / f"partner_equivalence-seed{seed}.json").write_text(done.stdout)
        (out / f"partner_equivalence-seed{seed}.txt").write_text(table.stdout)
        partners, measured = [], []
        for name, offset, partner in zip(names, OFFSETS, document["partners"]):
            rows = [row for row in document["rows"] if row["submission"] == name]
            measured.append([row["ratio"] for row in rows])
            partners.append(
                {
                    "partner": name,
                    "offset": offset,
                    "verdict": partner["verdict"],
                    "runs_needed": partner["runs_needed"],
                    "reference_runs_needed": partner["reference_runs_needed"],
                    "runs_needed_with_reference": partner["runs_needed_with_reference"],
                    "ratios": [round(row["ratio"], 5) for row in rows],
                    "intervals": [row["interval"] for row in rows],
                    "signer": partner["signer"],
                    "detail": partner["detail"],
                }
            )
        refused = tampered_refusal(work, names)
        for partner, row_ratios in zip(partners, measured):
            partner["reruns"] = reruns(work, partner, row_ratios, rng, noise, args)
        return {
            "seed": seed,
            "seconds": round(seconds, 2),
            "exit_status": done.returncode,
            "summary": document["summary"],
            "tampered": refused,
            "partners": partners,
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def tampered_refusal(work: Path, names: list[str]) -> dict[str, Any]:
    target = work / names[0] / "run00.json"
    original = target.read_text()
    at = re.search(r'"samples": \[\s*\d+\.(\d)', original).start(1)  # type: ignore[union-attr]
    target.write_text(original[:at] + ("7" if original[at] != "7" else "3") + original[at + 1 :])
    try:
        done = judge(work, names)
    finally:
        target.write_text(original)
    return {"exit_status": done.returncode, "stdout": done.stdout, "stderr": done.stderr.strip()}


def reruns(
    work: Path,
    partner: dict[str, Any],
    ratios: list[float],
    rng: np.random.Generator,
    noise: dict[str, Any],
    args: argparse.Namespace,
) -> dict[str, str]:
    """The partner (and, where its answer asked for them, the reference) drawn again with the runs it was told,
    judged: at its true offset, and at the ratios it was measured at. Empty where it had no figure."""
    runs, reference_runs = partner["runs_needed"], None
    if runs is None and partner["reference_runs_needed"] is not None:
        runs, reference_runs = partner["runs_needed_with_reference"], partner["reference_runs_needed"]
    if partner["verdict"] != "INCONCLUSIVE" or runs is None or max(runs, reference_runs or 0) > args.max_rerun:
        return {}
    verdicts = {}
    for premise in ("true offset", "measured ratios"):
        folder = work / f"{partner['partner']}-{premise.replace(' ', '-')}"
        folder.mkdir()
        reference = work / "ref"
        if reference_runs is not None:
            reference = write_bundle(folder / "ref", 1.0, rng, **{**noise, "runs": reference_runs})
            assert gpuperf_quietly("sign", "--key", str(work / "vendor.key"), str(reference)) == 0
        values = None
        if premise == "measured ratios":
            centres = [float(np.median(m)) for m in run_medians(reference)]
            values = tuple(
                centre * (ratio if higher else 1 / ratio)
                for centre, ratio, (_, _, _, higher, _) in zip(centres, ratios, WORKLOADS)
            )
        bundle = write_bundle(folder / "partner", 1 + partner["offset"], rng, **{**noise, "runs": runs}, values=values)
        assert gpuperf_quietly("sign", "--key", str(work / f"{partner['partner']}.key"), str(bundle)) == 0
        argv = [
            "variance",
            "--trust",
            str(work / "keys"),
            "--reference",
            str(reference),
            str(bundle),
            "--format",
            "json",
        ]
        done = subprocess.run(
            [sys.executable, "-m", "pytest_gpuperf.cli", *argv], capture_output=True, text=True, cwd=work, check=False
        )
        verdicts[premise] = str(json.loads(done.stdout)["partners"][0]["verdict"])
    return verdicts


def run_medians(reference: Path) -> list[list[float]]:
    """Per workload, the median of each run of a reference bundle."""
    medians: list[list[float]] = [[] for _ in WORKLOADS]
    for path in sorted(reference.glob("*.json")):
        for number, result in enumerate(json.loads(path.read_text())["results"]):
            medians[number].append(float(np.median(result["samples"])))
    return medians


def edge_trials(trials: int, args: argparse.Namespace) -> dict[str, int]:
    """Partners exactly at the band's edge (1% slower) and 2% slower, judged in this process (no signing: the
    statistics alone). Returns how many of each came out PASS."""
    rng = np.random.default_rng(10_000)
    work = Path(tempfile.mkdtemp(prefix="partners-edge-"))
    noise = {"runs": args.runs, "repeats": args.repeats, "within": args.within / 100, "between": args.between / 100}
    counts = {"edge_pass": 0, "edge_fail": 0, "off2_pass": 0, "trials": trials}
    try:
        for trial in range(trials):
            reference = load_side(
                write_bundle(work / f"ref{trial}", 1.0, rng, **{**noise, "runs": args.reference_runs})
            )
            edge = load_side(write_bundle(work / f"edge{trial}", 0.99, rng, **noise))
            off = load_side(write_bundle(work / f"off{trial}", 0.98, rng, **noise))
            rows = variance.evaluate(reference, [edge, off], tolerance=0.01, run_noise=variance.DEFAULT_RUN_NOISE)
            for side, key in ((edge, "edge"), (off, "off2")):
                summary = variance.partner_summary(side, rows, None, tolerance=0.01)
                counts[f"{key}_pass"] += summary["verdict"] == "PASS"
                if key == "edge":
                    counts["edge_fail"] += summary["verdict"] == "FAIL"
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return counts


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds, one simulated submission round each")
    parser.add_argument("--runs", type=int, default=5, help="runs per partner bundle")
    parser.add_argument("--repeats", type=int, default=20, help="samples per run")
    parser.add_argument("--reference-runs", type=int, default=10, help="runs of the reference")
    parser.add_argument("--within", type=float, default=1.0, help="within-run sd, percent")
    parser.add_argument("--between", type=float, default=0.5, help="between-run sd of a run's median, percent")
    parser.add_argument("--max-rerun", type=int, default=200, help="largest runs-needed figure re-drawn to check it")
    parser.add_argument("--edge-trials", type=int, default=200, help="partners at the band's edge, judged in-process")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "data"), help="folder for the raw output")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for seed in (int(text) for text in args.seeds.split(",")):
        result = one_seed(seed, args, out)
        lines.append(result)
        print(f"seed {seed}: {result['summary']}; exit {result['exit_status']}; {result['seconds']} s")
        for partner in result["partners"]:
            figure = f"runs needed {partner['runs_needed']}"
            if partner["reference_runs_needed"] is not None:
                figure = (
                    f"reference runs needed {partner['reference_runs_needed']} "
                    f"with {partner['runs_needed_with_reference']} of its own"
                )
            again = "; ".join(f"redrawn at its {premise}: {verdict}" for premise, verdict in partner["reruns"].items())
            print(
                f"  {partner['partner']} ({partner['offset']:+.2%}): {partner['verdict']}; {figure}"
                f"{'; ' + again if again else ''}; ratios {partner['ratios']}"
            )
        tampered = result["tampered"]
        print(f"  one byte changed: exit {tampered['exit_status']}, {tampered['stderr']!r}")
    settings = {key: getattr(args, key) for key in ("runs", "repeats", "reference_runs", "within", "between")}
    edge = edge_trials(args.edge_trials, args) if args.edge_trials else None
    if edge:
        print(
            f"at the edge (1% slower), {edge['trials']} trials: {edge['edge_pass']} PASS, {edge['edge_fail']} FAIL; "
            f"2% slower: {edge['off2_pass']} PASS"
        )
    with (out / "partner_equivalence.jsonl").open("a") as handle:
        for line in lines:
            handle.write(json.dumps({"settings": settings, **line}) + "\n")
        if edge:
            handle.write(json.dumps({"settings": settings, "edge_trials": edge}) + "\n")
    never = all(p["verdict"] != "PASS" for line in lines for p in line["partners"] if p["offset"] <= -0.02)
    refused = all(line["tampered"]["exit_status"] == 2 and not line["tampered"]["stdout"] for line in lines)
    return 0 if never and refused else 1


if __name__ == "__main__":
    raise SystemExit(main())
