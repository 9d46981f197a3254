"""The GPU check's CPU-side logic: preflight, commands, the summary printer, and one run on the CPU tier.

No GPU here: nothing in this file claims the GPU path works; it checks what the script does around it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"


@pytest.fixture(scope="module")
def gpu_check() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_check"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def result(test: str, metric: str, unit: str, median: float, verdict: str = "PASS", **context: object) -> dict:
    return {
        "test": f"pytest_gpuperf/suites/test_micro.py::{test}",
        "metric": metric,
        "unit": unit,
        "samples": [median] * 5,
        "summary": {"median": median},
        "verdict": verdict,
        "context": context,
    }


H200_PEAK = {
    "kind": "datasheet",
    "value": 989.5,
    "unit": "TFLOP/s",
    "percent": 79.8,
    "source": "NVIDIA H200 Tensor Core GPU datasheet",
}
H200_RESULTS = {
    "created": "2026-01-01T00:00:00+00:00",
    "telemetry_note": None,
    "fingerprint": {
        "hardware_slug": "1x-nvidia-h200-140gib-sm-90-host-x",
        "hardware_key": {"accelerator": {"name": "NVIDIA H200"}},
        "stack": {"driver": "570.86", "cuda_runtime": "12.8", "torch": "2.13.0", "python": "3.12"},
    },
    "results": [
        result("test_gemm[bf16-square]", "tflops", "TFLOP/s", 790.0, peak=H200_PEAK),
        result(
            "test_gemm[bf16-llama3_8b_qkv]",
            "tflops",
            "TFLOP/s",
            700.0,
            "NOISY",
            peak=H200_PEAK,
            clock_check={"comparable": False, "detail": "SM clock 1500 MHz < 90% of baseline 1980 MHz"},
        ),
        result("test_gemm[fp8-square]", "tflops", "TFLOP/s", 1200.0),
        result("test_gemm[fp8-llama3_8b_o]", "tflops", "TFLOP/s", 1300.0),
        result(
            "test_memory_bandwidth[copy]",
            "bandwidth",
            "GB/s",
            4300.0,
            peak={"kind": "datasheet", "value": 4800.0, "unit": "GB/s", "percent": 89.6},
        ),
        result("test_sdpa[flash]", "tflops", "TFLOP/s", 450.0),
    ],
}
TRAINING_RESULTS = {
    "results": [
        {
            "test": "pytest_gpuperf/suites/test_training.py::test_llama_gpu",
            "metric": "mfu",
            "unit": "%",
            "samples": [41.0, 42.0, 40.0],
            "verdict": "NO_BASELINE",
            "context": {},
        }
    ]
}


def test_summary_reports_gemm_bandwidth_attention_mfu_and_provenance(gpu_check: ModuleType, tmp_path: Path) -> None:
    micro, training = tmp_path / "micro.json", tmp_path / "training.json"
    micro.write_text(json.dumps(H200_RESULTS))
    training.write_text(json.dumps(TRAINING_RESULTS))
    text = "\n".join(gpu_check.summary([micro, training]))
    assert "hardware: 1x-nvidia-h200-140gib-sm-90-host-x" in text
    assert "stack: driver 570.86, cuda_runtime 12.8, torch 2.13.0" in text
    assert "bf16-square: 790 TFLOP/s = 79.8% of datasheet peak 989.5 TFLOP/s (PASS)" in text
    assert "[device conditions: SM clock 1500 MHz < 90% of baseline 1980 MHz]" in text
    assert "reference: ~790 TFLOP/s" in text
    assert "fp8 (llama3_8b_o): 1,300 TFLOP/s" in text  # the best fp8 shape, not the first
    assert "copy bandwidth: 4,300 GB/s = 89.6% of datasheet peak 4,800 GB/s (PASS)" in text
    assert "flash: 450 TFLOP/s" in text
    assert "training MFU (pytest_gpuperf/suites/test_training.py::test_llama_gpu mfu): 41 % (NO_BASELINE)" in text
    assert "verdicts: 1 NOISY, 1 NO_BASELINE, 5 PASS" in text


def test_summary_of_nothing_says_so(gpu_check: ModuleType, tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"results": []}))
    assert gpu_check.summary([empty]) == ["gpu-check summary: no results were recorded"]


def test_acceptance_results_are_listed_per_device_with_their_floors_apart_from_the_micro_suite(
    gpu_check: ModuleType, tmp_path: Path
) -> None:
    def acceptance(test: str, device: str, median: float, floor: dict | None) -> dict:
        found = result(test, "tflops", "TFLOP/s", median, "REGRESSED" if floor and floor["passed"] is False else "PASS")
        found["test"] = f"pytest_gpuperf/suites/test_acceptance.py::{test}"
        found["context"] = {"device": device, **({"floor": floor} if floor else {})}
        return found

    below = {"applies": True, "passed": False, "message": "bf16 GEMM 300.0 TFLOP/s = 30.3% of the ... floor"}
    document = {
        **H200_RESULTS,
        "results": [
            *H200_RESULTS["results"],
            acceptance("test_gemm[gpu0-bf16]", "gpu0", 800.0, {"applies": True, "passed": True, "message": "ok"}),
            acceptance("test_gemm[gpu1-bf16]", "gpu1", 300.0, below),
            acceptance("test_sdpa[gpu0]", "gpu0", 500.0, {"applies": False, "passed": None, "message": "none"}),
        ],
    }
    path = tmp_path / "acceptance.json"
    path.write_text(json.dumps(document))
    text = "\n".join(gpu_check.summary([path]))
    assert "    gpu0 test_gemm[bf16] tflops: 800 TFLOP/s (PASS)" in text
    assert "    gpu1 test_gemm[bf16] tflops: 300 TFLOP/s (REGRESSED)\n      BELOW FLOOR: bf16 GEMM 300.0" in text
    assert "    gpu0 test_sdpa tflops: 500 TFLOP/s (PASS)" in text
    assert "datasheet floors: 1 cleared, 1 below, 1 not applied" in text
    assert "gpu0-bf16" not in text.split("acceptance, per device:")[0]  # not mistaken for a micro GEMM
    assert gpu_check.below_floor(path) == [f"gpu1 test_gemm[gpu1-bf16]: {below['message']}"]


def test_summary_mode_refuses_missing_or_foreign_files(
    gpu_check: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert gpu_check.main(["--summary", str(tmp_path / "absent.json")]) == 2
    assert "no results document at" in capsys.readouterr().err
    foreign = tmp_path / "foreign.json"
    foreign.write_text(json.dumps({"results": [{"name": "x"}]}))
    assert gpu_check.main(["--summary", str(foreign)]) == 2
    assert "is not a gpuperf results document" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        gpu_check.main(["--only", "everything"])


def test_step_command(gpu_check: ModuleType, tmp_path: Path) -> None:
    step = gpu_check.STEPS[0]
    command = gpu_check.step_command(
        "py",
        step,
        out_dir=tmp_path,
        device="cuda",
        save=True,
        extra=["-x"],
        plugin=["-p", "pytest_gpuperf.plugin"],
        baselines=tmp_path / "b",
    )
    assert command[:6] == ["py", "-m", "pytest", "pytest_gpuperf/suites/test_micro.py", "-m", "micro"]
    assert "--gpuperf-save" in command and command[-1] == "-x"
    assert command[command.index("--gpuperf-results") + 1] == str(tmp_path / "micro.json")
    assert command[command.index("--gpuperf-baselines") + 1] == str(tmp_path / "b")
    judged = gpu_check.step_command("py", step, out_dir=tmp_path, device="cuda", save=False, extra=[], plugin=[])
    assert "--gpuperf-save" not in judged
    # every step belongs to one group; the first group, recorded and judged at its bounds, fits the default budget
    assert sorted(name for group in gpu_check.GROUPS for name in group) == sorted(s.name for s in gpu_check.STEPS)
    first = [s for s in gpu_check.STEPS if s.name in gpu_check.GROUPS[0]]
    assert 2 * sum(s.timeout_s for s in first) <= gpu_check.DEFAULT_BUDGET_S <= 8.5 * 60


class FakeSteps:
    """Stands in for pytest: each step "runs" for its recorded duration on a fake clock and writes a results
    document (with --gpuperf-save: NO_BASELINE; judged: PASS against this machine, this sitting)."""

    def __init__(self, gpu_check: ModuleType, monkeypatch: pytest.MonkeyPatch, durations: dict[str, float]) -> None:
        self.now = 0.0
        self.ran: list[tuple[str, str]] = []
        self.durations = durations
        monkeypatch.setattr(gpu_check.time, "monotonic", lambda: self.now)
        monkeypatch.setattr(gpu_check, "run_step", self.run_step)

    def run_step(self, command: list[str], *, env: dict, timeout_s: float, log: Path | None = None) -> int:
        step = Path(command[command.index("--gpuperf-results") + 1])
        phase = "record" if "--gpuperf-save" in command else "judge"
        self.ran.append((step.stem, phase))
        self.now += self.durations[step.stem]
        verdict, kind = ("NO_BASELINE", None) if phase == "record" else ("PASS", "this machine, this sitting")
        found = result("test_gemm[bf16-square]", "tflops", "TFLOP/s", 800.0, verdict)
        if kind:
            found["context"]["comparison"] = kind
        coverage = {"metrics": 1, "smallest": 0.012, "half": 0.012, "beyond_2x": 0, "suites": {}}
        step.write_text(json.dumps({**H200_RESULTS, "results": [found], "coverage": coverage}))
        if log is not None:
            log.write_text("pytest output\n")
        return 0


def check_args(gpu_check: ModuleType, tmp_path: Path, *extra: str) -> object:
    return gpu_check.build_parser().parse_args(["--out", str(tmp_path / "out"), *extra])


def test_each_group_is_recorded_then_judged_and_a_group_past_the_budget_waits(
    gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = FakeSteps(gpu_check, monkeypatch, {"micro": 30, "acceptance": 15, "training": 60, "inference": 110})
    args = check_args(gpu_check, tmp_path, "--budget", "480", "--archive", str(tmp_path / "check.tar.gz"))
    assert gpu_check.run_all(args, python="py", plugin=[], env={}) == 0
    # micro and acceptance recorded, then judged; training's 2 x 150 s fit the 390 s left; inference's 420 do not
    assert fake.ran == [
        ("micro", "record"),
        ("acceptance", "record"),
        ("micro", "judge"),
        ("acceptance", "judge"),
        ("training", "record"),
        ("training", "judge"),
    ]
    out = capsys.readouterr().out
    assert "gpu-check: inference: not run: 270 s of the 480 s budget left, and record and judge may take 420 s" in out
    assert "judged re-run, against the baselines just recorded:" in out
    assert "micro: 1 PASS; compared with: this machine, this sitting (1)" in out
    assert "coverage: any metric 1.2%, half of them 1.2%; 0 of 1 catch nothing below 2x" in out
    for phase in ("record", "judge"):
        assert (tmp_path / "out" / phase / "micro.json").is_file()
        assert (tmp_path / "out" / phase / "micro.log").read_text() == "pytest output\n"
    with tarfile.open(tmp_path / "check.tar.gz") as tar:
        names = tar.getnames()
    assert "results/record/micro.json" in names and "results/judge/training.log" in names


def test_record_only_and_judge_only_run_one_phase(
    gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeSteps(gpu_check, monkeypatch, {"micro": 30, "acceptance": 15, "training": 60, "inference": 110})
    for option, phase in (("--record-only", "record"), ("--no-save", "judge")):
        fake.ran.clear()
        gpu_check.run_all(check_args(gpu_check, tmp_path, option, "--only", "micro"), python="py", plugin=[], env={})
        assert fake.ran == [("micro", phase)]
    with pytest.raises(SystemExit):
        gpu_check.main(["--no-save", "--record-only"])
    with pytest.raises(SystemExit):
        gpu_check.main(["--budget", "0"])


def test_preflight_stops_on_a_missing_store_dependency_and_notes_telemetry(
    gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(gpu_check, "missing_modules", lambda python, names, site: ["filelock", "pynvml", "junitparser"])
    problems = gpu_check.preflight("py", tmp_path / ".whl", tmp_path / "site")
    assert len(problems) == 1
    assert "cannot import filelock" in problems[0] and f"{tmp_path / '.whl'}/" in problems[0]
    out = capsys.readouterr().out
    assert "nvidia-ml-py is not installed" in out and "telemetry unavailable" in out
    assert "junitparser is not installed: only the gpuperf command line needs it" in out


def test_preflight_installs_carried_wheels_into_its_own_folder_without_an_index(
    gpu_check: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wheels = tmp_path / ".whl"
    wheels.mkdir()
    (wheels / "filelock-3.0-py3-none-any.whl").write_bytes(b"")
    (wheels / "nvidia_ml_py-13.0-py3-none-any.whl").write_bytes(b"")
    # torchao is missing too but no wheel of it is carried: asking pip for it would fail the whole install
    missing = [["filelock", "pynvml", "torchao"], ["torchao"]]
    commands = []
    monkeypatch.setattr(gpu_check, "missing_modules", lambda python, names, site: missing.pop(0))
    monkeypatch.setattr(
        gpu_check.subprocess,
        "run",
        lambda command, **kw: commands.append(command) or subprocess.CompletedProcess(command, 0),
    )
    assert gpu_check.preflight("py", wheels, tmp_path / "site") == []
    [command] = commands
    assert command[:4] == ["py", "-m", "pip", "install"] and "--no-index" in command
    assert command[command.index("--target") + 1] == str(tmp_path / "site")
    assert command[-2:] == ["filelock", "nvidia-ml-py"]


def test_carried_matches_normalised_wheel_names(gpu_check: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "nvidia_ml_py-13.580.82-py3-none-any.whl").write_bytes(b"")
    (tmp_path / "torchao-0.18.0-cp310-abi3-manylinux_2_24_x86_64.whl").write_bytes(b"")
    assert gpu_check.carried("nvidia-ml-py", tmp_path) and gpu_check.carried("torchao", tmp_path)
    assert not gpu_check.carried("pytest-xdist", tmp_path) and not gpu_check.carried("nvidia", tmp_path)


def test_a_step_past_its_bound_is_interrupted_so_pytest_still_writes_what_finished(
    gpu_check: ModuleType, tmp_path: Path
) -> None:
    marker = tmp_path / "finished"
    script = (
        "import signal, sys, time\n"
        "def finish(*_):\n"
        f"    open({str(marker)!r}, 'w').write('session finished')\n"
        "    sys.exit(2)\n"
        "signal.signal(signal.SIGINT, finish)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    code = gpu_check.run_step([sys.executable, "-c", script], env=dict(os.environ), timeout_s=2, grace_s=20)
    assert code is None and marker.read_text() == "session finished"
    assert time.monotonic() - started < 20


def test_archive_holds_the_results_and_the_baselines_of_their_hardware(gpu_check: ModuleType, tmp_path: Path) -> None:
    results = tmp_path / "judge" / "micro.json"
    results.parent.mkdir()
    results.write_text(json.dumps(H200_RESULTS))
    baselines = tmp_path / "baselines"
    slug = H200_RESULTS["fingerprint"]["hardware_slug"]
    (baselines / slug).mkdir(parents=True)
    (baselines / slug / "test_micro.json").write_text("{}")
    (baselines / "cpu-other").mkdir()
    (baselines / "cpu-other" / "test_micro.json").write_text("{}")
    names = gpu_check.write_archive(tmp_path / "out" / "check.tar.gz", [results], baselines)
    assert names == ["results/judge/micro.json", f"baselines/{slug}/test_micro.json"]
    with tarfile.open(tmp_path / "out" / "check.tar.gz") as tar:
        assert sorted(tar.getnames()) == sorted(names)
        assert json.load(tar.extractfile("results/judge/micro.json")) == H200_RESULTS


def test_cpu_tier_run_end_to_end(tmp_path: Path) -> None:
    """The whole script on the CPU tier, one GEMM selected: preflight, plugin loading, the step recorded and then
    judged against what it just recorded (this machine, this sitting), summary, logs and the archive a borrowed
    machine sends back. The GPU path itself is not run here."""
    pytest.importorskip("torch")  # the suite's GEMM runs in torch
    done = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--device",
            "cpu",
            "--only",
            "micro",
            "--out",
            str(tmp_path),
            "--baselines",
            str(tmp_path / "baselines"),
            "--archive",
            str(tmp_path / "check.tar.gz"),
            "--",
            "-k",
            "fp32-square",
            "--gpuperf-threshold",
            "50",  # a shared CPU's sitting must not flake the judged re-run; the flow is what is checked
        ],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "gpu-check: micro (record): exit 0" in done.stdout and "gpu-check: micro (judge): exit 0" in done.stdout
    assert done.stdout.index("micro (record)") < done.stdout.index("micro (judge)")
    assert "fp32 (square): " in done.stdout and "TFLOP/s" in done.stdout
    recorded = json.loads((tmp_path / "record" / "micro.json").read_text())
    judged = json.loads((tmp_path / "judge" / "micro.json").read_text())
    test = "pytest_gpuperf/suites/test_micro.py::test_gemm[fp32-square]"
    assert [r["test"] for r in recorded["results"]] == [test] and recorded["results"][0]["verdict"] == "NO_BASELINE"
    [again] = judged["results"]
    assert again["test"] == test and again["context"]["comparison"] == "this machine, this sitting"
    assert again["verdict"] in {"PASS", "AMBIGUOUS", "NOISY"} and judged["coverage"]["metrics"] == 1
    assert "judged re-run, against the baselines just recorded:" in done.stdout
    assert "1 passed" in (tmp_path / "judge" / "micro.log").read_text()  # the judged run's own output, kept
    slug = recorded["fingerprint"]["hardware_slug"]
    with tarfile.open(tmp_path / "check.tar.gz") as tar:
        assert sorted(tar.getnames()) == [
            f"baselines/{slug}/pytest_gpuperf__suites__test_micro.json",
            "results/judge/micro.json",
            "results/judge/micro.log",
            "results/record/micro.json",
            "results/record/micro.log",
        ]
        saved = json.load(tar.extractfile(f"baselines/{slug}/pytest_gpuperf__suites__test_micro.json"))
    assert "test_gemm[fp32-square]" in json.dumps(saved)
