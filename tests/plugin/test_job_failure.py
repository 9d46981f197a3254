"""What fails a job: the comparison a verdict made, the job's family-wise level, and what is only information.

Each verdict says whether its baseline was recorded on this machine (this sitting or another) or on another machine
of the hardware key, and judges with that comparison's noise; a job's metrics share one false-failure level.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_gpuperf.core.session import report
from pytest_gpuperf.core.stats.unpaired import Rules, smallest_decided_change
from pytest_gpuperf.core.verdict import rollup
from pytest_gpuperf.core.verdict.judge import ACROSS_UNMEASURED, runs_of_this_machine
from pytest_gpuperf.core.verdict.stored import NOT_AMONG, compare
from pytest_gpuperf.core.verdict.vocabulary import Verdict
from pytest_gpuperf.machine.identity import named_identity, read_identity

# MACHINE names the node (the pytest_gpuperf_machine hook); SLOW scales every sample of the test.
PROJECT = """
import os, random, pytest

@pytest.mark.perf
def test_step(perf):
    slow = float(os.environ.get("SLOW", "1.0"))
    samples = [slow * (1 + 0.001 * i + 0.001 * random.random()) for i in range(15)]  # a timing: no two runs agree
    perf.record("step", samples, unit="s", higher_is_better=False)
"""
CONFTEST = """
import os

def pytest_gpuperf_machine(config):
    return os.environ.get("MACHINE")
"""
BASE = ["-p", "no:cacheprovider", "--gpuperf-device", "cpu", "--gpuperf-run-noise", "1"]


def verdict_of(pytester: pytest.Pytester) -> dict[str, object]:
    document = json.loads((pytester.path / "run.json").read_text())
    (result,) = document["results"]
    return result


@pytest.fixture
def recorded_on_node_a(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    pytester.makepyfile(test_node=PROJECT, conftest=CONFTEST)
    monkeypatch.setenv("MACHINE", "node-a")
    for _ in range(2):
        pytester.runpytest(*BASE, "--gpuperf-save").assert_outcomes(passed=1)
    stored = json.loads(next((pytester.path / "baselines").glob("*/test_node.json")).read_text())
    runs = stored["tests"]["test_step"]["metrics"]["step"]["runs"]
    assert {run["context"]["machine_id"] for run in runs} == {named_identity("node-a").id}
    return pytester


def test_a_baseline_from_another_machine_is_judged_with_the_devices_prior_spread(
    recorded_on_node_a: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No fleet measured the spread between machines of this key: the CPU's prior (12% sd) is added. A 1.3x
    change stays within it, AMBIGUOUS; 2x is beyond anything another machine of the key explains, and fails."""
    monkeypatch.setenv("MACHINE", "node-b")
    monkeypatch.setenv("SLOW", "1.3")
    result = recorded_on_node_a.runpytest(*BASE, "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=1)
    judged = verdict_of(recorded_on_node_a)
    assert judged["verdict"] == "AMBIGUOUS", judged["comparison"]["reason"]
    assert judged["context"]["comparison"] == "another machine of this hardware key"
    monkeypatch.setenv("SLOW", "2.0")
    result = recorded_on_node_a.runpytest(*BASE, "--gpuperf-results", "run.json", "--gpuperf-confirm", "0")
    result.assert_outcomes(failed=1)
    judged = verdict_of(recorded_on_node_a)
    assert judged["verdict"] == "REGRESSED", judged["comparison"]["reason"]
    assert judged["context"]["comparison"] == "another machine of this hardware key"
    assert json.loads((recorded_on_node_a.path / "run.json").read_text())["settings"]["machine_noise"] == 0.12


def test_a_runner_names_itself_and_a_new_boot_or_container_is_the_same_gpu_machine(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_node=PROJECT)
    pytester.runpytest(*BASE, "--gpuperf-save", "--gpuperf-machine-id", "runner-7").assert_outcomes(passed=1)
    stored = json.loads(next((pytester.path / "baselines").glob("*/test_node.json")).read_text())
    (run,) = stored["tests"]["test_step"]["metrics"]["step"]["runs"]
    assert run["context"]["machine_id"] == named_identity("runner-7").id
    monkeypatch.setenv("GPUPERF_MACHINE_ID", "runner-7")
    pytester.runpytest(*BASE, "--gpuperf-results", "run.json").assert_outcomes(passed=1)
    assert verdict_of(pytester)["context"]["comparison"] != "another machine of this hardware key"


def test_a_measured_spread_between_machines_lets_it_decide(
    recorded_on_node_a: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MACHINE", "node-b")
    monkeypatch.setenv("SLOW", "1.5")
    result = recorded_on_node_a.runpytest(*BASE, "--gpuperf-results", "run.json", "--gpuperf-machine-noise", "3")
    result.assert_outcomes(failed=1)
    assert verdict_of(recorded_on_node_a)["verdict"] == "REGRESSED"


def test_the_same_machine_decides_and_says_which_comparison(
    recorded_on_node_a: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLOW", "1.5")
    result = recorded_on_node_a.runpytest(*BASE, "--gpuperf-results", "run.json")
    result.assert_outcomes(failed=1)
    judged = verdict_of(recorded_on_node_a)
    assert judged["verdict"] == "REGRESSED"
    assert judged["context"]["comparison"] == "this machine, this sitting"


def test_runs_of_this_machine_are_the_comparison_where_there_are_any() -> None:
    mine, other = {"machine_id": "a"}, {"machine_id": "b"}
    assert runs_of_this_machine("a", [other, mine, {}, mine]) == [1, 3]
    assert runs_of_this_machine("a", [other, {}]) is None  # an older run without an identity is not known as ours
    assert runs_of_this_machine(None, [mine]) is None


def test_identity_tells_machines_apart_and_a_vm_by_its_boot(tmp_path: Path) -> None:
    def machine(root: Path, *, boot: str, virtual: bool, gpus: list[str] | None = None) -> str:
        (root / "etc").mkdir(parents=True, exist_ok=True)
        (root / "etc/machine-id").write_text("3d1219c7c4c5404aaa1f6d2a48adfda4\n")
        (root / "proc/sys/kernel/random").mkdir(parents=True, exist_ok=True)
        (root / "proc/sys/kernel/random/boot_id").write_text(boot)
        (root / "proc/cpuinfo").write_text("flags\t\t: fpu sse avx2" + (" hypervisor" if virtual else "") + "\n")
        return read_identity(root=str(root), gpu_uuids=gpus).id

    vm_1, vm_2 = machine(tmp_path / "a", boot="b1", virtual=True), machine(tmp_path / "b", boot="b2", virtual=True)
    assert vm_1 != vm_2  # the same image on two boots of a CPU VM: perhaps two hosts
    metal_1 = machine(tmp_path / "c", boot="b1", virtual=False)
    assert metal_1 == machine(tmp_path / "d", boot="b2", virtual=False)  # bare metal keeps its identity
    identity = read_identity(root=str(tmp_path / "a"))
    assert identity.parts == ("boot-id", "machine-id") and "3d12" not in json.dumps(identity.as_dict())
    assert read_identity().id == read_identity().id
    gpus = ["GPU-5e0b6f2a-0000-0000-0000-000000000001"]
    gpu_vm = machine(tmp_path / "e", boot="b1", virtual=True, gpus=gpus)
    assert gpu_vm == machine(tmp_path / "f", boot="b2", virtual=True, gpus=gpus)  # a GPU machine is its GPUs
    assert gpu_vm != machine(tmp_path / "g", boot="b1", virtual=True, gpus=["GPU-other"])
    empty = tmp_path / "h"
    empty.mkdir()
    assert read_identity(root=str(empty)).parts == ("hostname",)  # the hostname only where nothing else is read


def test_a_change_significant_alone_is_not_decided_among_many_metrics() -> None:
    baseline = [[1.0 + 0.002 * i + 0.004 * run for i in range(15)] for run in range(3)]
    now = [1.04 * v for v in baseline[1]]
    alone = compare(now, baseline, higher_is_better=False, rules=Rules(threshold=0.02, run_noise=0.01))
    assert alone.verdict is Verdict.REGRESSED
    among = compare(now, baseline, higher_is_better=False, rules=Rules(threshold=0.02, run_noise=0.01, family_size=400))
    assert among.verdict is Verdict.AMBIGUOUS and NOT_AMONG in among.reason
    assert among.ratio == alone.ratio and among.p_worse == alone.p_worse  # the metric's own figures stay
    big = compare([2 * v for v in now], baseline, higher_is_better=False, rules=Rules(threshold=0.02, family_size=400))
    assert big.verdict is Verdict.REGRESSED  # a change far beyond the noise is still decided
    assert Rules(threshold=0.02, family_size=400).for_looks(2).decisive_alpha == pytest.approx(0.01 / 400 / 2)


def test_the_job_counts_the_metrics_of_its_collected_tests(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_many="""
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_two(perf, n):
            perf.record("a", [1.0 + 0.001 * i for i in range(10)], unit="s", higher_is_better=False)
            perf.record("b", [2.0 + 0.001 * i for i in range(10)], unit="s", higher_is_better=False)
        """
    )
    pytester.runpytest(*BASE, "--gpuperf-save").assert_outcomes(passed=3)
    pytester.runpytest(*BASE, "--gpuperf-results", "run.json").assert_outcomes(passed=3)
    settings = json.loads((pytester.path / "run.json").read_text())["settings"]
    assert settings["family_size"] == 6 and settings["job_alpha"] == 0.01
    pytester.runpytest(*BASE, "--gpuperf-results", "run.json", "-k", "0").assert_outcomes(passed=1)
    assert json.loads((pytester.path / "run.json").read_text())["settings"]["family_size"] == 2


def test_undecided_metrics_are_grouped_by_reason() -> None:
    rows = [
        rollup.Row(test="t.py::a", metric="m", verdict="AMBIGUOUS", because="another machine"),
        rollup.Row(test="t.py::b", metric="m", verdict="AMBIGUOUS", because="another machine"),
        rollup.Row(test="t.py::c", metric="m", verdict="NOISY", because="for information"),
        rollup.Row(test="t.py::d", metric="m", verdict="NO_BASELINE"),
        rollup.Row(test="t.py::e", metric="m", verdict="PASS"),
    ]
    built = rollup.build(rows)
    assert built.headline == "undecided: 4 of 5 metrics could not be judged"
    lines = rollup.render(built, width=200)
    assert lines[1].startswith("  2 undecided: baseline recorded on another machine")
    assert any(line.startswith("  1 undecided: recorded for information only") for line in lines)
    assert any(line.startswith("  1 NO_BASELINE: no baseline on this hardware") for line in lines)
    because = rollup.undecided_because
    assert because("AMBIGUOUS", f"{ACROSS_UNMEASURED}, and ...", {}) == "another machine"
    assert because("AMBIGUOUS", f"worse by 4%, p=0.001: {NOT_AMONG} 400 metrics", {}) == "not among the job's metrics"
    assert because("AMBIGUOUS", "x", {"unconfirmed_regression": 1}) == "not confirmed"
    assert because("NOISY", "slow path", {"unjudgeable": "slow path", "information_only": True}) == "for information"
    assert because("NOISY", "current run spread 12% (log Q3/Q1) exceeds the noise limit 10%", {}) == "too noisy"
    assert because("PASS", "", {}) is None


def test_saving_says_once_which_metrics_vary_more_than_the_threshold_resolves(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_node=PROJECT)
    for slow in ("1.0", "1.12", "0.9"):
        monkeypatch.setenv("SLOW", slow)
        result = pytester.runpytest(*BASE, "--gpuperf-save")
    result.stdout.fnmatch_lines(
        ["*1 saved metric(s) vary between runs on this machine more than the 2.0% threshold can resolve*",
         "*test_node.py::test_step step: beyond *%"]
    )  # fmt: skip
    huge = report.unresolved_lines([("t.py::a", "busbw", 9210.06), ("t.py::b", "busbw", 1.5)], 0.02, width=200)
    assert huge[-2:] == ["  t.py::a busbw: beyond 9,211x", "  t.py::b busbw: beyond 2.5x"]
    steady = [[1.0 + 0.001 * i + 0.0001 * run for i in range(15)] for run in range(3)]
    assert smallest_decided_change(steady, Rules(threshold=0.02, run_noise=0.001)) < 0.02
    assert smallest_decided_change(steady[:1], Rules(threshold=0.02)) is None


def test_an_injected_slowdown_is_never_saved(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_node=PROJECT)
    result = pytester.runpytest(*BASE, "--gpuperf-save", "--gpuperf-inject-slowdown", "micro=10")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--gpuperf-inject-slowdown*slows the workloads on purpose*"])
    result = pytester.runpytest(*BASE, "--gpuperf-inject-slowdown", "micro")
    result.stderr.fnmatch_lines(["*Invalid value 'micro' from --gpuperf-inject-slowdown: expected SUITE=PCT*"])
    result = pytester.runpytest(*BASE, "--gpuperf-inject-slowdown", "micro=1001")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*from --gpuperf-inject-slowdown: micro=1001: expected a percentage above 0 and*"])
    # the inference suite slows a launched transformers serve only: with the in-process engine it is refused
    result = pytester.runpytest(*BASE, "--gpuperf-inject-slowdown", "inference=100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*inference=100: the inference suite slows a launched transformers serve only*"])
