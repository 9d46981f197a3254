#!/usr/bin/env python3
"""The one-command GPU check: record baselines of the GPU tier and the acceptance tier, then run the same again
judged against what was just recorded, within one boot of a lent machine; print a summary.

    scripts/gpu_check.sh                 # on a machine with one GPU; within --budget (8 minutes) at most
    scripts/gpu_check.sh --record-only   # record only, no judged re-run
    scripts/gpu_check.sh --no-save       # judge against the stored baselines instead of recording
    scripts/gpu_check.sh --summary results/gpu-check/judge/*.json   # print the summary of earlier results

Steps run a group at a time (GROUPS: micro and acceptance, then training, then inference), each a pytest run of
its own with --gpuperf-device cuda and --gpuperf-results <out>/<phase>/<step>.json: first recorded
(--gpuperf-save), then judged; a group starts only where twice its steps' bounds fit in what is left of the
budget. A suite file absent from the checkout is skipped, as is a step whose marker expression selects nothing.
Only the standard library is imported here: this script checks the Python it runs pytest with before using it.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NO_TESTS_COLLECTED = 5  # pytest.ExitCode.NO_TESTS_COLLECTED


@dataclass(frozen=True, slots=True, kw_only=True)
class Step:
    name: str
    path: str
    """Suite file, relative to the repository root; the step is skipped when it is absent."""
    marker: str
    """The -m expression that selects the GPU tier of that file."""
    timeout_s: int
    """Wall-clock bound of one run of the step (recording or judged); the budget decides which groups run."""


# On one H200 (2026-12-04) micro took 26 s and training 36 s plus ~28 s for its fp8 MoE workload; inference
# finished nothing in its former 90 s and is sized for ~110 s of its 210 (pytest_gpuperf/suites/test_inference.py).
STEPS: tuple[Step, ...] = (
    Step(name="micro", path="pytest_gpuperf/suites/test_micro.py", marker="micro", timeout_s=90),
    Step(name="training", path="pytest_gpuperf/suites/test_training.py", marker="perf and gpu_tier", timeout_s=150),
    Step(name="inference", path="pytest_gpuperf/suites/test_inference.py", marker="perf and gpu_tier", timeout_s=210),
    # Every GPU measured on its own against the datasheet floors (docs/acceptance.md); sized for one GPU, not yet
    # run on one. A node with more GPUs runs `pytest -m acceptance` itself (~15 s a GPU, 3 minutes for eight).
    Step(
        name="acceptance",
        path="pytest_gpuperf/suites/test_acceptance.py",
        marker="acceptance and not burnin",
        timeout_s=60,
    ),
)

GROUPS: tuple[tuple[str, ...], ...] = (("micro", "acceptance"), ("training",), ("inference",))
"""The order the steps run in, a group at a time: a group is recorded, then run again and judged against what it
just recorded, before the next starts. Micro and acceptance first (~4 minutes at their bounds, both phases): the
first GPU session leaves a judged baseline of the kernels and of every device even if nothing else fits."""
DEFAULT_BUDGET_S = 480.0
"""Eight minutes: one command on a lent machine may run 8.5, and the lease's 15 minutes include its boot."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Phase:
    name: str
    """The folder under --out its results documents and logs go to: record or judge."""
    save: bool
    """Whether its runs record baselines (--gpuperf-save); a judged run gates, a recording one does not."""


RECORD = Phase(name="record", save=True)
JUDGE = Phase(name="judge", save=False)


def phases(args: argparse.Namespace) -> tuple[Phase, ...]:
    """Record then judge (the default), record only (--record-only), or judge only (--no-save)."""
    if args.no_save:
        return (JUDGE,)
    return (RECORD,) if args.record_only else (RECORD, JUDGE)


# Import name -> (distribution to install from .whl/, why the check needs it). Required ones stop the check.
REQUIRED = {
    "torch": ("torch", "runs every workload (keep the one the GPU stack ships; never installed from here)"),
    "pytest": ("pytest", "runs the suites"),
    "numpy": ("numpy", "statistics of the verdict"),
    "scipy": ("scipy", "statistics of the verdict (Mann-Whitney, t distribution)"),
    "filelock": ("filelock", "the baseline store locks files while it merges runs"),
}
OPTIONAL = {
    "pynvml": (
        "nvidia-ml-py",
        "device telemetry (clocks, power, throttling) and the driver version; without it "
        "the run says 'telemetry unavailable' and the fingerprint falls back to nvidia-smi",
    ),
    "torchao": ("torchao", "fp8 training (its float8 recipe); without it the fp8 training tests skip and say so"),
    "xdist": ("pytest-xdist", "not used by the check itself"),
    "junitparser": ("junitparser", "only the gpuperf command line needs it, not the check"),
}

# Figures measured on real parts, to put the summary's numbers in context (not used by any verdict).
REFERENCE = {
    "NVIDIA H200": {
        "gemm_bf16_tflops": 790.0,
        "copy_gbps": 4300.0,
        "source": "measured on one H200 SXM (issue 7 of this project)",
    },
}


def with_path(env: dict[str, str], *folders: Path) -> dict[str, str]:
    """A copy of ``env`` whose PYTHONPATH starts with ``folders``."""
    joined = os.pathsep.join(filter(None, [*(str(folder) for folder in folders), env.get("PYTHONPATH")]))
    return {**env, "PYTHONPATH": joined}


def missing_modules(python: str, names: Sequence[str], site: Path | None = None) -> list[str]:
    """Which of ``names`` the given Python cannot import, ``site`` on its path (found without importing them)."""
    probe = (
        "import importlib.util, sys\nprint(' '.join(n for n in sys.argv[1:] if importlib.util.find_spec(n) is None))"
    )
    env = with_path(dict(os.environ), site) if site else None
    out = subprocess.run([python, "-c", probe, *names], capture_output=True, text=True, check=True, env=env).stdout
    return out.split()


def carried(distribution: str, wheel_dir: Path) -> bool:
    """Whether ``wheel_dir`` holds a wheel of ``distribution`` (wheel names normalise '-' and '.' to '_')."""
    wanted = re.sub(r"[-_.]+", "_", distribution).lower()
    return any(wheel.name.split("-", 1)[0].lower() == wanted for wheel in wheel_dir.glob("*.whl"))


def install_from_wheels(python: str, distributions: Sequence[str], wheel_dir: Path, site: Path) -> bool:
    """Install distributions from carried wheels only (no index: a GPU machine may have no network) into
    ``site``, a folder of this run's own: the Python the stack ships is never modified."""
    if not distributions:
        return False
    command = [
        python,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-index",
        "--find-links",
        str(wheel_dir),
        "--no-deps",
        "--no-compile",
        "--target",
        str(site),
        *distributions,
    ]
    print(f"gpu-check: installing {', '.join(distributions)} from {wheel_dir} into {site}")
    return subprocess.run(command).returncode == 0


def preflight(python: str, wheel_dir: Path, site: Path) -> list[str]:
    """Check the Python the suites will run under; returns problems that stop the check (empty: go).

    A missing package whose wheel is carried in ``wheel_dir`` is installed into ``site`` first."""
    missing = missing_modules(python, [*REQUIRED, *OPTIONAL], site)
    wanted = [(REQUIRED | OPTIONAL)[module][0] for module in missing if module != "torch"]
    installable = [distribution for distribution in wanted if wheel_dir.is_dir() and carried(distribution, wheel_dir)]
    if installable and install_from_wheels(python, installable, wheel_dir, site):
        missing = missing_modules(python, [*REQUIRED, *OPTIONAL], site)
    problems = []
    for module in missing:
        if module in REQUIRED:
            distribution, why = REQUIRED[module]
            problems.append(
                f"{python} cannot import {module} ({why}): install {distribution}, or put its wheel "
                f"in {wheel_dir}/ (scripts/gpu_check_wheels.sh fetches them) and run again"
            )
        else:
            distribution, why = OPTIONAL[module]
            print(f"gpu-check: note: {distribution} is not installed: {why}")
    return problems


def plugin_arguments(python: str, site: Path) -> tuple[list[str], dict[str, str]]:
    """Load pytest-gpuperf from this checkout, whether or not it is pip-installed in that Python; the packages
    installed from carried wheels (``site``) come after the checkout on the path."""
    probe = "import importlib.metadata as m\nprint(any(e.name == 'gpuperf' for e in m.entry_points(group='pytest11')))"
    installed = subprocess.run([python, "-c", probe], capture_output=True, text=True).stdout.strip() == "True"
    return ([] if installed else ["-p", "pytest_gpuperf.plugin"]), with_path(dict(os.environ), ROOT, site)


def gpu_visible(python: str) -> str | None:
    """None when torch sees a GPU, else why not (asked in a child process, like the plugin does)."""
    probe = (
        "import torch\n"
        "n = torch.cuda.device_count()\n"
        "print(n, torch.cuda.get_device_name(0) if n else '', torch.__version__, torch.version.cuda, "
        "getattr(torch.version, 'hip', None), sep='|')"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"torch failed to start: {done.stderr.strip().splitlines()[-1:]}"
    count, name, version, cuda, hip = done.stdout.strip().split("|")
    if int(count) == 0:
        return f"torch {version} (CUDA {cuda}, HIP {hip}) sees no GPU"
    print(f"gpu-check: {count} GPU(s), {name}; torch {version}, CUDA {cuda}, HIP {hip}")
    return None


def step_command(
    python: str,
    step: Step,
    *,
    out_dir: Path,
    device: str,
    save: bool,
    extra: Sequence[str],
    plugin: Sequence[str],
    baselines: Path | None = None,
) -> list[str]:
    command = [
        python,
        "-m",
        "pytest",
        step.path,
        "-m",
        step.marker,
        "--gpuperf-device",
        device,
        "--gpuperf-results",
        str(out_dir / f"{step.name}.json"),
        "-p",
        "no:cacheprovider",
        "-q",
        "-rs",
        *plugin,
    ]
    if save:
        command.append("--gpuperf-save")
    if baselines is not None:
        command += ["--gpuperf-baselines", str(baselines)]
    return [*command, *extra]


def run_step(
    command: Sequence[str], *, env: dict[str, str], timeout_s: float, grace_s: int = 20, log: Path | None = None
) -> int | None:
    """Run one pytest step; past its bound it gets SIGINT first, so pytest still ends its session and writes the
    results of the tests that finished, and is killed only if it does not stop within ``grace_s``. ``log`` keeps a
    copy of its output (shown as it comes too): a lent machine's terminal may be gone when its files come back.
    Returns the exit code, or None when the step ran out of time."""
    if log is None:
        process = subprocess.Popen(command, cwd=ROOT, env=env, text=True)  # text: the same type as below
        copier = None
    else:
        process = subprocess.Popen(
            command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )
        copier = threading.Thread(target=_tee, args=(process, log), daemon=True)
        copier.start()
    try:
        return process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        return None
    finally:
        if copier is not None:
            copier.join(timeout=5)


def _tee(process: subprocess.Popen[str], log: Path) -> None:
    assert process.stdout is not None
    with log.open("w") as kept:
        for line in process.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            kept.write(line)


def run_steps(args: argparse.Namespace) -> int:
    python = args.python
    with tempfile.TemporaryDirectory(prefix="gpu-check-site-") as site:
        problems = preflight(python, ROOT / ".whl", Path(site))
        if problems:
            for problem in problems:
                print(f"gpu-check: {problem}", file=sys.stderr)
            return 2
        if args.device == "cuda":
            why = gpu_visible(python)
            if why is not None:
                print(
                    f"gpu-check: {why}; this check needs a GPU (for the CPU tier run: pytest -m perf)", file=sys.stderr
                )
                return 2
        plugin, env = plugin_arguments(python, Path(site))
        return run_all(args, python=python, plugin=plugin, env=env)


def run_all(args: argparse.Namespace, *, python: str, plugin: Sequence[str], env: dict[str, str]) -> int:
    out_dir = Path(args.out)
    baselines = Path(args.baselines).resolve() if args.baselines else None
    started = time.monotonic()
    deadline = started + args.budget
    status = 0
    ran = phases(args)
    written: dict[str, list[Path]] = {phase.name: [] for phase in ran}
    for phase in ran:
        (out_dir / phase.name).mkdir(parents=True, exist_ok=True)
    for group in GROUPS:
        steps = [step for step in STEPS if step.name in group and (not args.only or step.name in args.only)]
        present = []
        for step in steps:
            if (ROOT / step.path).exists():
                present.append(step)
            else:
                print(f"gpu-check: {step.name}: skipped, {step.path} is not in this checkout")
        if not present:
            continue
        names = ", ".join(step.name for step in present)
        need = len(ran) * sum(step.timeout_s for step in present)
        left = deadline - time.monotonic()
        if need > left:
            print(
                f"gpu-check: {names}: not run: {left:.0f} s of the {args.budget:.0f} s budget left, and "
                f"{' and '.join(phase.name for phase in ran)} may take {need} s at the steps' bounds; raise --budget "
                f"or run it on its own (--only {present[0].name})"
            )
            continue
        for phase in ran:
            for step in present:
                code = run_one(step, phase, args, python=python, plugin=plugin, env=env, baselines=baselines)
                status = status or code
                document = out_dir / phase.name / f"{step.name}.json"
                if document.exists():
                    written[phase.name].append(document)
    print()
    shown = written.get(JUDGE.name) or written.get(RECORD.name) or []
    for line in summary(shown):
        print(line)
    if JUDGE in ran and RECORD in ran:
        for line in judged_lines(written[JUDGE.name]):
            print(line)
    print(f"gpu-check: {time.monotonic() - started:.0f} s in all; results in {out_dir}")
    if args.archive:
        documents = [path for phase in ran for path in written[phase.name]]
        archived = write_archive(Path(args.archive), documents, baselines or ROOT / "baselines")
        print(f"gpu-check: archived {len(archived)} files in {args.archive}")
    return status


def run_one(
    step: Step,
    phase: Phase,
    args: argparse.Namespace,
    *,
    python: str,
    plugin: Sequence[str],
    env: dict[str, str],
    baselines: Path | None,
) -> int:
    """One run of one step in one phase; 0, or 1 for a failure of any kind (a step with nothing to run is 0)."""
    folder = Path(args.out) / phase.name
    (folder / f"{step.name}.json").unlink(missing_ok=True)  # a stale document must not pass for this run's
    command = step_command(
        python,
        step,
        out_dir=folder,
        device=args.device,
        save=phase.save,
        extra=args.pytest_args,
        plugin=plugin,
        baselines=baselines,
    )
    label = f"{step.name} ({phase.name})"
    print(f"gpu-check: {label}: {shlex.join(command)}", flush=True)
    step_start = time.monotonic()
    code = run_step(command, env=env, timeout_s=step.timeout_s, log=folder / f"{step.name}.log")
    took = time.monotonic() - step_start
    status = 0
    if code is None:
        print(
            f"gpu-check: {label}: interrupted after {step.timeout_s} s (its bound in STEPS); what it finished is "
            "kept, the other steps still run",
            file=sys.stderr,
        )
        status = 1
    elif code == NO_TESTS_COLLECTED:
        print(
            f"gpu-check: {label}: no test of {step.path} matches -m {step.marker!r}; mark its GPU-tier workload "
            "with @pytest.mark.gpu_tier"
        )
        return 0
    else:
        print(f"gpu-check: {label}: exit {code} in {took:.0f} s")
        status = 0 if code == 0 else 1
    document = folder / f"{step.name}.json"
    if document.exists():
        below = below_floor(document)
        for line in below:
            print(f"gpu-check: {label}: below its datasheet floor: {line}", file=sys.stderr)
        status = status or (1 if below else 0)  # a recording run (--gpuperf-save) gates nothing itself
    return status


def write_archive(archive: Path, documents: Sequence[Path], baselines: Path) -> list[str]:
    """One file to bring back from a borrowed machine: the results documents and the baseline folder of the
    hardware they ran on (its runs carry their provenance). Returns the names stored."""
    slugs = set()
    for document in documents:
        try:
            slug = (json.loads(document.read_text()).get("fingerprint") or {}).get("hardware_slug")
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(slug, str) and slug and "/" not in slug and not slug.startswith("."):
            slugs.add(slug)
    names = []
    archive.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(archive, "w:gz") as tar:
        for document in documents:
            name = f"results/{document.parent.name}/{document.name}"  # the phase's folder: record or judge
            tar.add(document, arcname=name)
            names.append(name)
            log = document.with_suffix(".log")
            if log.is_file():
                tar.add(log, arcname=name.removesuffix(".json") + ".log")
                names.append(name.removesuffix(".json") + ".log")
        for slug in sorted(slugs):
            for path in sorted((baselines / slug).glob("*.json")):
                tar.add(path, arcname=f"baselines/{slug}/{path.name}")
                names.append(f"baselines/{slug}/{path.name}")
    return names


# -- the summary (pure: results documents in, lines out) --


ACCEPTANCE = "test_acceptance.py::"


def below_floor(path: Path) -> list[str]:
    """The acceptance results of a document that fell below their datasheet floor, as "device test: message"."""
    try:
        results = json.loads(path.read_text()).get("results", [])
    except (OSError, json.JSONDecodeError, AttributeError):
        return []
    return [
        f"{(r.get('context') or {}).get('device', '?')} {r['test'].split('::', 1)[-1]}: {floor.get('message')}"
        for r in results
        if isinstance(r, dict)
        and ACCEPTANCE in str(r.get("test"))
        and isinstance(floor := (r.get("context") or {}).get("floor"), dict)
        and floor.get("passed") is False
    ]


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _figure(result: dict[str, Any]) -> str:
    median = result["summary"]["median"] if "summary" in result else _median(result["samples"])
    text = f"{median:,.4g} {result['unit']}"
    peak = result.get("context", {}).get("peak") or {}
    if peak.get("kind"):
        text += f" = {peak['percent']:.1f}% of {peak['kind']} peak {peak['value']:,.4g} {peak['unit']}"
    clocks = result.get("context", {}).get("clock_check") or {}
    if clocks.get("comparable") is False:
        text += f" [device conditions: {clocks['detail']}]"
    return f"{text} ({result['verdict']})"


def summary(paths: Sequence[Path]) -> list[str]:
    """The lines the check ends with, from the results documents the steps wrote."""
    documents = [json.loads(Path(path).read_text()) for path in paths]
    results = [result for document in documents for result in document.get("results", [])]
    if not results:
        return ["gpu-check summary: no results were recorded"]
    first = next((d for d in documents if d.get("fingerprint")), documents[0])
    fingerprint = first.get("fingerprint") or {}
    stack = fingerprint.get("stack", {})
    accelerator = (fingerprint.get("hardware_key") or {}).get("accelerator") or {}
    lines = [
        "gpu-check summary",
        f"  hardware: {fingerprint.get('hardware_slug', 'unknown')}",
        "  stack: "
        + ", ".join(
            f"{name} {stack[name]}"
            for name in ("driver", "cuda_runtime", "hip_runtime", "cudnn", "nccl", "torch")
            if name in stack
        ),
        f"  date: {first.get('created', 'unknown')}",
    ]
    notes = {d["telemetry_note"] for d in documents if d.get("telemetry_note")}
    lines += [f"  {note}" for note in sorted(notes)]

    def matching(test_part: str, metric: str) -> list[dict[str, Any]]:  # the micro suite's, not the acceptance tier's
        return [r for r in results if test_part in r["test"] and r["metric"] == metric and ACCEPTANCE not in r["test"]]

    reference = REFERENCE.get(str(accelerator.get("name", "")), {})
    bf16 = matching("test_gemm[bf16-", "tflops")
    if bf16:
        lines.append("  GEMM bf16:")
        lines += [f"    {r['test'].split('[', 1)[1].rstrip(']')}: {_figure(r)}" for r in bf16]
        if reference:
            lines.append(f"    reference: ~{reference['gemm_bf16_tflops']:,.0f} TFLOP/s ({reference['source']})")
    others = [r for r in matching("test_gemm[", "tflops") if r not in bf16]
    if others:
        best: dict[str, dict[str, Any]] = {}
        for result in others:
            precision = result["test"].split("[", 1)[1].split("-", 1)[0]
            if precision not in best or result["summary"]["median"] > best[precision]["summary"]["median"]:
                best[precision] = result
        lines.append("  GEMM, best shape per precision:")
        lines += [f"    {p} ({r['test'].split('-', 1)[1].rstrip(']')}): {_figure(r)}" for p, r in sorted(best.items())]
    for kind, label in (("copy", "copy bandwidth"), ("read", "read bandwidth (reduction)")):
        for result in matching(f"test_memory_bandwidth[{kind}]", "bandwidth"):
            lines.append(f"  {label}: {_figure(result)}")
            if kind == "copy" and reference:
                lines.append(f"    reference: ~{reference['copy_gbps']:,.0f} GB/s ({reference['source']})")
    sdpa = matching("test_sdpa[", "tflops")
    if sdpa:
        lines.append("  attention fwd+bwd per backend:")
        lines += [f"    {r['test'].split('[', 1)[1].rstrip(']')}: {_figure(r)}" for r in sdpa]
    lines += acceptance_lines([r for r in results if ACCEPTANCE in r["test"]])
    mfu = [r for r in results if "mfu" in r["metric"].lower()]
    lines += [f"  training MFU ({r['test']} {r['metric']}): {_figure(r)}" for r in mfu] or [
        "  training MFU: no training result with an 'mfu' metric was recorded"
    ]
    counts: dict[str, int] = {}
    for result in results:
        counts[result["verdict"]] = counts.get(result["verdict"], 0) + 1
    lines.append("  verdicts: " + ", ".join(f"{n} {verdict}" for verdict, n in sorted(counts.items())))
    return lines


def judged_lines(paths: Sequence[Path]) -> list[str]:
    """What the judged re-run found against the baselines recorded minutes before: the comparisons it made (this
    machine, this sitting, where the machine's identity held), its verdicts, and each step's coverage."""
    lines = ["  judged re-run, against the baselines just recorded:"]
    if not paths:
        return [*lines, "    nothing was judged"]
    for path in paths:
        document = json.loads(Path(path).read_text())
        results = document.get("results", [])
        verdicts: dict[str, int] = {}
        comparisons: dict[str, int] = {}
        for result in results:
            verdicts[result["verdict"]] = verdicts.get(result["verdict"], 0) + 1
            kind = (result.get("context") or {}).get("comparison", "none")
            comparisons[kind] = comparisons.get(kind, 0) + 1
        counts = ", ".join(f"{n} {verdict}" for verdict, n in sorted(verdicts.items())) or "no results"
        against = "; ".join(f"{kind} ({n})" for kind, n in sorted(comparisons.items()))
        lines.append(f"    {Path(path).stem}: {counts}; compared with: {against or 'nothing'}")
        coverage = document.get("coverage") or {}
        if coverage.get("metrics"):
            lines.append(
                f"      coverage: any metric {_catch(coverage.get('smallest'))}, half of them "
                f"{_catch(coverage.get('half'))}; {coverage.get('beyond_2x')} of {coverage['metrics']} catch nothing "
                "below 2x"
            )
    return lines


def _catch(change: Any) -> str:
    """A coverage figure as the session's summary writes it: a fraction worse, 'nothing' where none."""
    return f"{change:.1%}" if isinstance(change, (int, float)) else "nothing"


def acceptance_lines(results: Sequence[dict[str, Any]]) -> list[str]:
    """Each device's acceptance figures, with the floor each cleared or fell below, and the floors' count."""
    if not results:
        return []
    lines = ["  acceptance, per device:"]
    counts = {"cleared": 0, "below": 0, "not applied": 0}
    for result in results:
        context = result.get("context", {})
        device = context.get("device", "?")
        name = result["test"].split("::", 1)[-1]
        name = name.replace(f"[{device}-", "[").replace(f"[{device}]", "")  # the test as the fleet names it
        lines.append(f"    {device} {name} {result['metric']}: {_figure(result)}")
        floor = context.get("floor") or {}
        state = {True: "cleared", False: "below"}.get(floor.get("passed"), "not applied")
        counts[state] += 1
        if state == "below":
            lines.append(f"      BELOW FLOOR: {floor.get('message')}")
    lines.append("    datasheet floors: " + ", ".join(f"{n} {state}" for state, n in counts.items()))
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gpu_check", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--python", default=sys.executable, help="the Python whose torch and pytest run the suites (default: this one)"
    )
    parser.add_argument(
        "--out",
        default=str(ROOT / "results" / "gpu-check"),
        help="folder for the results documents and logs, in record/ and judge/ (default: results/gpu-check)",
    )
    parser.add_argument(
        "--no-save", action="store_true", help="judge against stored baselines instead of recording new ones"
    )
    parser.add_argument(
        "--record-only",
        action="store_true",
        help="record baselines without the judged re-run that follows each group by default",
    )
    parser.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET_S,
        metavar="SECONDS",
        help=f"time the steps may take in all (default {DEFAULT_BUDGET_S:.0f}); a group of steps starts only where "
        "its bounds, recorded and judged, fit in what is left",
    )
    parser.add_argument(
        "--baselines",
        metavar="DIR",
        help="baselines folder (default: baselines/ of this checkout; runs land in DIR/<hardware-key>/)",
    )
    parser.add_argument(
        "--only", action="append", choices=[step.name for step in STEPS], help="run only this step (repeatable)"
    )
    parser.add_argument(
        "--device",
        choices=("cuda", "cpu"),
        default="cuda",
        help="cpu runs the same steps on the CPU tier, to try the check without a GPU",
    )
    parser.add_argument(
        "--archive",
        metavar="FILE",
        help="also write FILE (.tar.gz) with the results documents and the baselines of the "
        "hardware they ran on: one file to bring back from a borrowed machine",
    )
    parser.add_argument(
        "--summary",
        nargs="+",
        metavar="RESULTS_JSON",
        help="only print the summary of results documents written earlier",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: extra pytest arguments for every step")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.no_save and args.record_only:
        parser.error("--no-save judges only and --record-only records only: give one of them")
    if not args.budget > 0:
        parser.error(f"--budget must be a positive number of seconds, got {args.budget}")
    if args.summary:
        missing = [path for path in args.summary if not Path(path).is_file()]
        if missing:
            print(f"gpu-check: no results document at {', '.join(missing)}", file=sys.stderr)
            return 2
        try:
            lines = summary([Path(path) for path in args.summary])
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            print(
                f"gpu-check: {args.summary} is not a gpuperf results document ({error!r}); "
                "write one with pytest --gpuperf-results FILE",
                file=sys.stderr,
            )
            return 2
        print("\n".join(lines))
        return 0
    return run_steps(args)


if __name__ == "__main__":
    raise SystemExit(main())
