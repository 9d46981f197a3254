"""The acceptance tier (pytest_gpuperf/suites/test_acceptance.py) on CPU: one test per local device with the device
as the id's first component and in every metric's context, the datasheet floors decided from known figures (not
this machine's speed), the burn-in's decisions on recorded samples and fake NVML, four simulated nodes judged by
`gpuperf fleet`, and the Slurm and Kubernetes recipes. No GPU here: nothing in this file claims a GPU path works.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_gpuperf.micro import burnin
from pytest_gpuperf.micro.acceptance import FLOORS, HEALTHY, judge_floor, local_devices
from pytest_gpuperf.micro.burnin import Health, health_problems, judge_sag, windows

ROOT = Path(__file__).resolve().parents[2]
SUITE = ROOT / "pytest_gpuperf" / "suites" / "test_acceptance.py"
SBATCH = ROOT / "examples" / "slurm" / "acceptance.sbatch"
KUBERNETES = sorted((ROOT / "examples" / "kubernetes").glob("*.yaml"))
NODE_PLUGIN = """
import os


def pytest_gpuperf_machine(config):
    return os.environ.get("GPUPERF_TEST_NODE") or os.environ.get("SLURMD_NODENAME")
"""
"""A machine plugin (as benchmarks/main_job.py's): each process is the node its environment names."""


def run_suite(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", str(SUITE), "-p", "no:cacheprovider", "-q", "-rs", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def results_of(path: Path) -> list[dict[str, Any]]:
    return json.loads(path.read_text())["results"]


# -- devices and collection ------------------------------------------------------------------------------------------


def test_local_devices_name_each_gpu_and_the_cpu() -> None:
    assert [d.id for d in local_devices("cpu", 0)] == ["cpu"]
    gpus = local_devices("cuda", 3)
    assert [(d.id, d.torch_device, d.index) for d in gpus] == [("gpu0", "cuda:0", 0), ("gpu1", "cuda:1", 1),
                                                                ("gpu2", "cuda:2", 2)]  # fmt: skip
    with pytest.raises(ValueError, match="0 GPUs: nothing to accept"):
        local_devices("cuda", 0)


def test_the_tier_collects_one_test_per_device_with_the_device_first(pytester: pytest.Pytester) -> None:
    # The suite as it is, its device discovery replaced by a node of three GPUs (collection only: nothing runs).
    source = SUITE.read_text().replace("def _devices(", "def _real_devices(")
    source += '\n\ndef _devices(config):\n    return local_devices("cuda", 3)\n'
    pytester.makepyfile(test_node_acceptance=source)  # not this file's module name
    pytester.makeconftest((SUITE.parent / "conftest.py").read_text())
    result = pytester.runpytest("--collect-only", "-q", "-m", "acceptance", "-p", "no:cacheprovider")
    ids = [line.split("::", 1)[1] for line in result.outlines if "::" in line]
    assert ids[:6] == ["test_gemm[gpu0-bf16]", "test_gemm[gpu0-fp8]", "test_gemm[gpu1-bf16]", "test_gemm[gpu1-fp8]",
                       "test_gemm[gpu2-bf16]", "test_gemm[gpu2-fp8]"]  # fmt: skip
    for test in ("test_memory[gpu2-read]", "test_sdpa[gpu1]", "test_host_copy[gpu0-d2h]", "test_training_step[gpu2]",
                 "test_allreduce[node]", "test_burnin[gpu0]"):  # fmt: skip
        assert test in ids
    assert len(ids) == 3 * 9 + 1  # nine tests per GPU, one all-reduce per node
    # The burn-in's time budget follows the minutes asked for (30 min, one confirmation attempt, 5 min of slack).
    items, _ = pytester.inline_genitems("--gpuperf-burnin-minutes", "30", "-p", "no:cacheprovider")
    items = [item for item in items if item.get_closest_marker("burnin")]
    assert [item.name for item in items] == ["test_burnin[gpu0]", "test_burnin[gpu1]", "test_burnin[gpu2]"]
    assert {item.get_closest_marker("gpuperf_timeout").args for item in items} == {(2 * 30 * 60 + 300.0,)}


def test_the_main_job_does_not_collect_the_tier() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "perf", str(SUITE), "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, done.stdout + done.stderr
    assert "10 deselected" in done.stdout


# -- floors -----------------------------------------------------------------------------------------------------------


H200 = "NVIDIA H200 SXM"
SHEET = "NVIDIA H200 Tensor Core GPU datasheet, H200 SXM: BF16 Tensor Core 1,979 TFLOPS with sparsity; halved to dense"


def test_a_bf16_gemm_below_seventy_percent_of_the_datasheet_fails_naming_the_figures() -> None:
    decision = judge_floor("gemm_bf16", 600.0, "TFLOP/s", part=H200, peak=989.5, peak_source=SHEET)
    assert decision.applies and decision.passed is False
    assert "bf16 GEMM 600.0 TFLOP/s = 60.6% of the NVIDIA H200 SXM datasheet peak 989.5 TFLOP/s" in decision.message
    assert f"({SHEET}): below the 70% floor (692.6 TFLOP/s)" in decision.message
    assert "a healthy NVIDIA H200 SXM measured 80.9%" in decision.message


def test_a_healthy_figure_clears_its_floor() -> None:
    decision = judge_floor("gemm_bf16", 800.3, "TFLOP/s", part=H200, peak=989.5, peak_source=SHEET)
    assert (decision.applies, decision.passed) == (True, True)
    assert decision.message.endswith("above the 70% floor (692.6 TFLOP/s)")
    copy = judge_floor("memory_copy", 3000.0, "GB/s", part=H200, peak=4800.0)
    assert copy.passed is False and "memory copy bandwidth 3,000.0 GB/s = 62.5%" in copy.message


def test_every_floor_sits_below_the_healthy_figure_it_rests_on() -> None:
    for (part, metric), healthy in HEALTHY.items():
        assert metric in FLOORS, metric
        assert FLOORS[metric].fraction < 0.9 * healthy.fraction, (part, metric)


def test_no_floor_without_a_datasheet_peak_or_a_healthy_measurement() -> None:
    cpu = judge_floor("gemm_bf16", 0.9, "TFLOP/s", part=None, peak=None, no_peak="no vendor peak for a cpu run")
    assert (cpu.applies, cpu.passed) == (False, None)
    assert cpu.message == "no floor applied to the bf16 GEMM: no vendor peak for a cpu run (none is made up)"
    # An H100 has a datasheet peak but no healthy measurement here yet: its figure is reported, nothing failed.
    h100 = judge_floor("gemm_bf16", 100.0, "TFLOP/s", part="NVIDIA H100 SXM5", peak=989.5)
    assert (h100.applies, h100.passed) == (False, None)
    assert "10.1% of the NVIDIA H100 SXM5 datasheet peak" in h100.message
    assert "no healthy NVIDIA H100 SXM5 has been measured against the 70% floor yet" in h100.message
    sdpa = judge_floor("sdpa", 1.0, "TFLOP/s", part=H200, peak=989.5)
    assert sdpa.passed is None and sdpa.message.startswith("no floor for sdpa: the datasheet gives no figure")


# -- burn-in decisions ------------------------------------------------------------------------------------------------


def test_windows_take_the_first_and_last_minute_or_thirds_of_a_short_run() -> None:
    times = [float(t) for t in range(1, 301)]  # five minutes, one sample a second
    first, last = windows(times)
    assert (len(first), len(last)) == (60, 61) and first[0] == 0 and last[-1] == 299
    first, last = windows([0.5 * t for t in range(1, 19)])  # nine seconds
    assert first == [0, 1, 2, 3, 4, 5] and last == [11, 12, 13, 14, 15, 16, 17]


def test_a_sag_needs_both_the_test_and_a_drop_beyond_the_limit() -> None:
    steady = [100.0 + 0.1 * (i % 7) for i in range(20)]
    assert not judge_sag(steady, steady).sagged
    sagged = judge_sag(steady, [0.9 * v for v in steady])
    assert sagged.sagged and sagged.p_value is not None and sagged.p_value < 0.01
    assert "throughput sagged: " in sagged.message and "a 10.0% drop (> 5%)" in sagged.message
    small = judge_sag(steady, [0.997 * v for v in steady])  # significant, but 0.3%
    assert (
        not small.sagged and small.p_value is not None and small.p_value < 0.01 and "drop 0.3% <= 5%" in small.message
    )
    few = judge_sag(steady[:4], [0.5 * v for v in steady[:4]])  # four samples a window cannot reach p < 0.01
    assert not few.sagged and few.p_value is None and "too few samples" in few.message
    noisy = judge_sag([100.0, 60.0, 140.0, 90.0, 110.0, 70.0], [95.0, 55.0, 130.0, 85.0, 105.0, 65.0])
    assert not noisy.sagged  # 5% lower medians the spread cannot tell apart


def test_device_faults_fail_and_corrected_errors_are_noted() -> None:
    clean = Health(ecc_corrected=2, ecc_uncorrected=0, retired_pages=0, remapped_uncorrectable=0, remap_pending=False)
    assert health_problems(clean, clean) == ([], [])
    corrected = Health(ecc_corrected=5, ecc_uncorrected=0, retired_pages=0, remapped_uncorrectable=0)
    assert health_problems(clean, corrected) == ([], ["corrected ECC errors rose from 2 to 5 during the burn-in"])
    broken = Health(ecc_corrected=2, ecc_uncorrected=1, retired_pages=0, remapped_uncorrectable=1, remap_pending=True)
    problems, _ = health_problems(clean, broken, xids=[79])
    assert problems == [
        "uncorrectable ECC errors rose from 0 to 1 during the burn-in",
        "rows remapped for uncorrectable errors rose from 0 to 1 during the burn-in",
        "a row remapping is pending (reset the GPU to apply it)",
        "Xid event(s) 79 during the burn-in (NVIDIA's Xid catalogue says what each means; the kernel log has them "
        "too: dmesg | grep -i xid)",
    ]
    unread = Health(unsupported=("retired pages: Not Supported",))
    assert health_problems(unread, unread) == ([], ["not read: retired pages: Not Supported"])


class FakeNvml:
    """The pynvml calls the burn-in makes, with a device whose counters the test sets."""

    NVML_VOLATILE_ECC = 0
    NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS = 0
    NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR = 1
    nvmlEventTypeXidCriticalError = 8

    class NVMLError(Exception):
        pass

    class NVMLError_Timeout(NVMLError):
        pass

    def __init__(self) -> None:
        self.ecc = [0, 0]
        self.rows = (0, 0, 0, 0)
        self.events: list[int] = []
        self.shutdowns = 0

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return 8

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return f"handle{index}"

    def nvmlDeviceGetTotalEccErrors(self, handle: str, kind: int, counter: int) -> int:
        return self.ecc[kind]

    def nvmlDeviceGetRetiredPages(self, handle: str, cause: int) -> list[int]:
        raise self.NVMLError("Not Supported")  # Hopper remaps rows instead

    def nvmlDeviceGetRemappedRows(self, handle: str) -> tuple[int, int, int, int]:
        return self.rows

    def nvmlEventSetCreate(self) -> str:
        return "set"

    def nvmlDeviceRegisterEvents(self, handle: str, kinds: int, events: str) -> None: ...

    def nvmlEventSetWait_v2(self, events: str, timeout_ms: int) -> Any:
        if not self.events:
            raise self.NVMLError_Timeout("Timeout")
        return SimpleNamespace(eventType=self.nvmlEventTypeXidCriticalError, eventData=self.events.pop(0))

    def nvmlEventSetFree(self, events: str) -> None: ...


def test_nvml_counters_and_xid_events_are_read_around_the_load() -> None:
    nvml = FakeNvml()
    source = burnin.open_health(1, nvml=nvml, environ={"CUDA_VISIBLE_DEVICES": "4,5"})
    assert isinstance(source, burnin.HealthSource) and source._handle == "handle5"  # CUDA's 1 is NVML's 5
    before = source.read()
    assert (before.ecc_uncorrected, before.retired_pages, before.remapped_uncorrectable) == (0, None, 0)
    assert before.unsupported == ("retired pages: Not Supported",)
    source.watch_xids()
    nvml.ecc[1], nvml.rows, nvml.events = 2, (0, 1, 1, 0), [48, 94]
    xids, unread = source.xids()
    problems, _ = health_problems(before, source.read(), xids)
    source.close()
    assert (xids, unread, nvml.shutdowns) == ([48, 94], None, 1)
    assert problems[0] == "uncorrectable ECC errors rose from 0 to 2 during the burn-in"
    assert len(problems) == 4 and problems[-1].startswith("Xid event(s) 48, 94 during the burn-in")


def test_without_nvml_or_amdsmi_the_reason_is_given() -> None:
    class Broken(FakeNvml):
        def nvmlInit(self) -> None:
            raise self.NVMLError("Driver Not Loaded")

    class NoAmd:
        class AmdSmiException(Exception):
            pass

        def amdsmi_init(self) -> None:
            raise self.AmdSmiException("no ROCm")

    why = burnin.open_health(0, nvml=Broken(), amdsmi=NoAmd(), environ={})
    assert why == (
        "NVML did not start (Driver Not Loaded); no NVIDIA driver here?; "
        "amdsmi did not start (no ROCm); no AMD driver here?"
    )


def test_sustain_runs_each_load_in_turn_until_the_time_is_up() -> None:
    now = [0.0]

    def clock() -> float:
        return now[0]

    def load(rate: float) -> Any:
        def run() -> float:
            now[0] += 0.5
            return rate

        return run

    gemm, copy = burnin.sustain([load(10.0), load(20.0)], 3.0, clock=clock)
    assert gemm == [(0.5, 10.0), (1.5, 10.0), (2.5, 10.0)] and copy == [(1.0, 20.0), (2.0, 20.0), (3.0, 20.0)]


# -- the tier on this CPU ---------------------------------------------------------------------------------------------


def test_every_metric_names_its_device_and_says_why_no_floor_applies(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    done = run_suite("-m", "acceptance", "-k", "memory and copy or sdpa or host_copy or training or allreduce",
                     "--gpuperf-device", "cpu", "--gpuperf-results", str(tmp_path / "run.json"),
                     "--gpuperf-baselines", str(tmp_path / "baselines"), "--gpuperf-repeats", "5")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "host<->device copies need a GPU: on a cpu run the host's memory is the device's" in done.stdout
    results = {r["test"].split("::")[1]: r for r in results_of(tmp_path / "run.json")}
    assert sorted(results) == ["test_allreduce[node]", "test_memory[cpu-copy]", "test_sdpa[cpu]",
                               "test_training_step[cpu]"]  # fmt: skip
    assert {name: r["context"]["device"] for name, r in results.items()} == {
        "test_allreduce[node]": "node",
        "test_memory[cpu-copy]": "cpu",
        "test_sdpa[cpu]": "cpu",
        "test_training_step[cpu]": "cpu",
    }
    copy = results["test_memory[cpu-copy]"]["context"]["floor"]
    assert copy == {"applies": False, "passed": None,
                    "message": "no floor applied to the memory copy bandwidth: no vendor peak for a cpu run (none is "
                               "made up)"}  # fmt: skip
    assert results["test_sdpa[cpu]"]["context"]["floor"]["message"].startswith("no floor for sdpa")
    allreduce = results["test_allreduce[node]"]
    assert allreduce["metric"] == "busbw" and allreduce["context"]["world_size"] == 2
    assert allreduce["context"]["backend"] == "gloo" and allreduce["context"]["bytes"] == 1 << 20


def test_the_burn_in_skips_unless_asked_and_on_cpu_runs_the_load_without_device_telemetry(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    off = run_suite("-m", "burnin", "--gpuperf-device", "cpu")
    assert off.returncode == 0 and "the burn-in runs when asked for: --gpuperf-burnin-minutes N" in off.stdout
    done = run_suite("-m", "burnin", "--gpuperf-device", "cpu", "--gpuperf-burnin-minutes", "0.2",
                     "--gpuperf-results", str(tmp_path / "run.json"),
                     "--gpuperf-baselines", str(tmp_path / "baselines"))  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    results = {r["metric"]: r for r in results_of(tmp_path / "run.json")}
    assert sorted(results) == ["sustained_copy_gbps", "sustained_tflops"]
    for result in results.values():
        context = result["context"]
        assert context["device"] == "cpu" and context["burnin_minutes"] == 0.2
        assert "device telemetry is absent on CPU: no clocks, throttle reasons, ECC or Xid to read" in context["notes"]
        # 12 s of load: how many samples fall in each third depends on the box (a stalled chunk on a loaded CI box
        # leaves two); the sag test ran where both windows had enough, and says so where they had not
        sag = context["sag"]
        assert sag["first_n"] >= 1 and sag["last_n"] >= 1, sag
        assert (sag["p_value"] is None) == (min(sag["first_n"], sag["last_n"]) < 5), sag
        assert sag["message"].startswith("too few samples" if sag["p_value"] is None else ("no sag", "throughput")), sag
        assert "health" not in context and "telemetry" not in context
        # ~30 chunks of 0.2 s per load on a quiet box; a loaded one (load ~10) stretched them to 11 in 12 s
        assert len(result["samples"]) >= 3 and sag["first_n"] + sag["last_n"] <= len(result["samples"]), sag


# -- many nodes -------------------------------------------------------------------------------------------------------

FLEET_BUILT = importlib.util.find_spec("pytest_gpuperf.cli.fleet") is not None


def fleet(*args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest_gpuperf.cli", "fleet", *args, "--format", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return done.returncode, json.loads(done.stdout)


def node_run(folder: Path, node: str, tmp_path: Path, *, slowdown: str | None = None) -> None:
    env = {
        "GPUPERF_TEST_NODE": node,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])),
    }
    if slowdown:
        env["GPUPERF_INJECT_SLOWDOWN"] = slowdown
    done = run_suite("-m", "acceptance", "-k", "gemm and bf16", "-p", "fake_node", "--gpuperf-device", "cpu",
                     "--gpuperf-results", str(folder / f"{node}.json"), "--gpuperf-machine-check", "record",
                     "--gpuperf-baselines", str(tmp_path / "baselines"), env=env)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_four_simulated_nodes_one_made_twice_as_slow(tmp_path: Path) -> None:
    """Four `pytest -m acceptance` processes, each its own machine through the pytest_gpuperf_machine hook, each
    writing its results into one folder with its machine's state (``--gpuperf-machine-check record``); one node's
    acceptance work is made larger (99% injected, the most the option takes). The fleet, with its default rules,
    lists that node and only it (exit 1), unless its own machine's state while it ran explains the deficit (a CI
    box busy with other work: it is then EXPLAINED, and the bound must truly cover it); the four unslowed nodes
    list nothing (exit 0): a node that ran while the box was loaded is EXPLAINED, not listed (issue 49)."""
    pytest.importorskip("torch")
    (tmp_path / "fake_node.py").write_text(NODE_PLUGIN)
    equal, slowed = tmp_path / "equal", tmp_path / "slowed"
    equal.mkdir()
    slowed.mkdir()
    for node in ("node-1", "node-2", "node-3", "node-4"):
        node_run(equal, node, tmp_path)
    for node in ("node-1", "node-2", "node-3"):
        shutil.copy(equal / f"{node}.json", slowed / f"{node}.json")
    node_run(slowed, "node-4", tmp_path, slowdown="acceptance=99")
    for folder in (equal, slowed):
        for path in folder.iterdir():
            document = json.loads(path.read_text())
            assert document["fingerprint"]["machine"]["host"] == path.stem  # a distinct identity per node
            [result] = document["results"]
            assert result["test"].endswith("::test_gemm[cpu-bf16]") and result["context"]["device"] == "cpu"
    [slow] = results_of(slowed / "node-4.json")
    assert slow["context"]["injected_slowdown"] == 0.99
    if not FLEET_BUILT:
        pytest.skip("gpuperf fleet not built yet")
    code, report = fleet(str(slowed))
    [node_4] = [unit for unit in report["units"] if unit["node"] == "node-4"]
    if node_4["standing"] == "EXPLAINED":  # the box was busy while node-4 ran: the bound must cover its deficit
        assert node_4["performance"] * node_4["load_explains"] > 0.95, node_4
    else:
        assert node_4["standing"] == "LISTED", node_4
    assert [entry["unit"].split()[0] for entry in report["listed"]] == ["node-4"] * (node_4["standing"] == "LISTED")
    assert code == report["exit"] == (1 if report["listed"] else 0), report
    code, report = fleet(str(equal))
    assert code == 0 and report["listed"] == [], report["units"]


# -- recipes ----------------------------------------------------------------------------------------------------------


def test_the_slurm_recipe_is_valid_bash() -> None:
    """tests/workloads/test_slurm.py submits it to a real local Slurm."""
    done = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    text = SBATCH.read_text()
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --no-kill" in text
    assert "pytest_gpuperf.cli accept" in text


@pytest.mark.parametrize("path", KUBERNETES, ids=[path.name for path in KUBERNETES])
def test_the_kubernetes_recipe_is_an_indexed_job_one_pod_per_node(path: Path) -> None:
    text = path.read_text()
    try:
        import yaml
    except ImportError:  # a minimal structure check where PyYAML is not installed
        assert "apiVersion: batch/v1" in text and "kind: Job" in text
        return
    documents = [d for d in yaml.safe_load_all(text) if d]
    jobs = [d for d in documents if d["kind"] == "Job"]
    assert jobs and all(d["apiVersion"] == "batch/v1" for d in jobs)
    for job in jobs:
        [container] = job["spec"]["template"]["spec"]["containers"]
        assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"
        command = " ".join([*container.get("command", []), *container.get("args", [])])
        done = subprocess.run(["bash", "-n"], input=" ".join(container.get("args", [""])), text=True)
        assert done.returncode == 0, command
        if job["spec"].get("completionMode") == "Indexed":
            assert job["spec"]["completions"] == job["spec"]["parallelism"]
            anti = job["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
            [term] = anti["requiredDuringSchedulingIgnoredDuringExecution"]
            assert term["topologyKey"] == "kubernetes.io/hostname"
            assert '-m "acceptance and not burnin"' in command and "/results/nodes/${NODE_NAME}.json" in command
            assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in container["env"]
            assert "-p node_name" in command
            [plugin] = [d for d in documents if d["kind"] == "ConfigMap"]
            assert "def pytest_gpuperf_machine(config):" in plugin["data"]["node_name.py"]
        else:
            assert "pytest_gpuperf.cli fleet /results/nodes" in command
