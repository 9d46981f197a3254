"""Issue 15 end to end: an upgrade between two small stacks, read as a release engineer reads it.

Stack A (a hook-injected component ``mylib 1.0``) records a 3-run baseline while the machine is slowed by an
injected 1.5x (its canary 1.7x slower); stack B (``mylib 2.0``) runs on a quiet machine with one workload
(SDPA) slowed 2x. Every figure is a known sample, no timing: the session, ``gpuperf compare`` and
``gpuperf report`` must then agree on verdicts, state the stack difference once, call the speed-ups seen only
against the contended baseline "differs from baseline" with the machine's state beside them (never caused by
mylib 2.0), chart every judged family, and a save of stack B must not absorb the regression.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from pytest_gpuperf.cli import main as cli

WORKLOAD = """
import os
import pytest

SLOW = float(os.environ.get("T_SLOW", "1"))
SDPA = float(os.environ.get("T_SDPA", "1"))
CANARY = float(os.environ.get("T_CANARY", "1"))
RUN = float(os.environ.get("T_RUN", "0"))
SHAPE = [1.0, 1.01, 0.99, 1.02, 0.98, 1.005, 0.995, 1.015, 0.985, 1.0, 1.008, 0.992]

def machine():
    # the machine state a measurement records (machine/contention.py's "machine" context)
    return {"machine": {"wall_s": 1.0, "cpu_per_wall": 1.0, "canary_s": [0.01 * CANARY] * 3}}

def rates(peak, slow):
    return [peak / (v * slow * (1 + 0.002 * RUN)) for v in SHAPE]

@pytest.mark.perf
def test_gemm(perf):
    perf.record("tflops", rates(100.0, SLOW), unit="TFLOP/s", higher_is_better=True, context=machine())

@pytest.mark.perf
def test_copy_bandwidth(perf):
    perf.record("bandwidth", rates(20.0, SLOW), unit="GB/s", higher_is_better=True, context=machine())

@pytest.mark.perf
def test_sdpa(perf):
    perf.record("it_per_s", rates(50.0, SLOW * SDPA), unit="it/s", higher_is_better=True, context=machine())

@pytest.mark.perf
def test_steps(perf):
    perf.record("steps_to_target", [30.0, 30.0, 30.0], unit="steps", higher_is_better=False)
    perf.judge_elsewhere("steps_to_target", rule="convergence t-test", verdict="PASS", reason="same steps")
"""

CONFTEST = """
import os

def pytest_gpuperf_stack(config):
    return {"mylib": os.environ.get("T_STACK", "1.0")}
"""

CHANGE = "mylib 1.0 -> 2.0"


def run_stack(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], *args: str):
    for name in ("T_STACK", "T_SLOW", "T_SDPA", "T_CANARY", "T_RUN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "--gpuperf-device", "cpu", *args)


def gpuperf_section(output: str) -> str:
    """The plugin's own section of the terminal summary, up to pytest's next section line (pytest prints the
    whole failure message in its short summary when it runs on CI, and that message names the stack too)."""
    section = output.split(" gpuperf ", 1)[1]
    return re.split(r"\n=+ ", section, maxsplit=1)[0]


def test_an_upgrade_reads_as_the_evidence_supports(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytester.makepyfile(test_upgrade=WORKLOAD, conftest=CONFTEST)
    contended = {"T_STACK": "1.0", "T_SLOW": "1.5", "T_CANARY": "1.7"}
    for number in range(3):
        run = run_stack(
            pytester,
            monkeypatch,
            {**contended, "T_RUN": str(number)},
            "--gpuperf-save",
            f"--gpuperf-results=base/run{number}.json",
        )
        run.assert_outcomes(passed=4)
    baseline_file = next((pytester.path / "baselines").glob("*/test_upgrade.json"))
    stored = json.loads(baseline_file.read_text())["tests"]

    upgrade = {"T_STACK": "2.0", "T_SLOW": "1.0", "T_SDPA": "2.0", "T_CANARY": "1.0"}
    new = run_stack(pytester, monkeypatch, upgrade, "--gpuperf-results=new.json")
    new.assert_outcomes(passed=3, failed=1)
    summary = gpuperf_section(new.stdout.str())
    document = json.loads((pytester.path / "new.json").read_text())
    session = {(r["test"], r["metric"]): r["verdict"] for r in document["results"]}
    assert session == {
        ("test_upgrade.py::test_gemm", "tflops"): "IMPROVED",
        ("test_upgrade.py::test_copy_bandwidth", "bandwidth"): "IMPROVED",
        ("test_upgrade.py::test_sdpa", "it_per_s"): "REGRESSED",
        ("test_upgrade.py::test_steps", "steps_to_target"): "PASS",
    }
    # the roll-up first, its counts, the worst regression with size and interval
    lines = summary.splitlines()[1:]
    assert lines[1].startswith("verdict: 1 regression")
    assert any(line.split() == ["test_upgrade.py", "1", "2", "1", "0"] for line in lines), summary
    worst = [line for line in lines if line.startswith("worst: ")]
    assert len(worst) == 1 and re.match(
        r"worst: test_upgrade.py::test_sdpa it_per_s: 24.9% worse \(ratio 0.751", worst[0]
    )
    assert "95% CI [" in worst[0], worst
    # the stack difference once; beside a metric only what the evidence supports
    assert summary.count(CHANGE) == 1
    machine = "differs from baseline; the machine's state also differed: canary 1.7x slower when the baseline"
    assert summary.count("differs from baseline *") == 3
    # how the machine's state differed: one line under the table, counted, not a footnote per metric
    assert "* the machine's state differed from the baseline's for 3 of 4 metrics: canary slower when the " in (
        " ".join(summary.split())
    )
    assert "caused by" not in summary and "mylib" not in summary.split(CHANGE, 1)[1]
    assert all(len(line) <= 120 for line in summary.splitlines() if not line.startswith("results written: "))

    # compare judges the same data the same way: identical verdicts, the ratio from the medians it prints
    capsys.readouterr()
    code = cli.main(["compare", str(pytester.path / "base"), str(pytester.path / "new.json"), "--format", "json"])
    compared = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {(r["test"], r["metric"]): r["verdict"] for r in compared["rows"]} == session
    for row in compared["rows"]:
        expected = row["new_median"] / row["base_median"]
        assert row["ratio"] == pytest.approx(expected if row["higher_is_better"] else 1 / expected, rel=1e-9)
    assert compared["headline"][0].startswith("verdict: 1 regression")
    code = cli.main(["compare", str(pytester.path / "base"), str(pytester.path / "new.json")])
    table = capsys.readouterr().out
    assert table.count(CHANGE) == 1 and "caused by" not in table
    assert machine.replace("baseline;", "BASE;") in table

    # report: roll-up first, a chart for each judged throughput family
    report = pytester.path / "report.html"
    assert cli.main(["report", str(pytester.path / "base"), str(pytester.path / "new.json"), "-o", str(report)]) == 0
    capsys.readouterr()
    text = report.read_text()
    assert text.index("<h2>Verdict") < text.index("<h2>Ratio to baseline") < text.index("<h2>Throughput")
    for family in ("GEMM", "SDPA", "bandwidth"):
        assert f'data-family="{family}"' in text
    screenshot(report, pytester.path)

    # saving stack B does not absorb the regression; --gpuperf-accept does
    saved = run_stack(pytester, monkeypatch, upgrade, "--gpuperf-save")
    saved.assert_outcomes(passed=4)  # recording does not gate; it leaves the regression out
    out = gpuperf_section(saved.stdout.str())
    assert "baselines: 3 of 4 measurements saved, 1 not saved (regressed):" in out
    assert "not saved: test_upgrade.py::test_sdpa it_per_s: REGRESSED by 24.9% against the entry it would join" in out
    after = json.loads(baseline_file.read_text())["tests"]
    assert after["test_sdpa"] == stored["test_sdpa"]
    assert after["test_gemm"]["metrics"]["tflops"]["runs"][-1]["stack"]["mylib"] == "2.0"
    accepted = run_stack(pytester, monkeypatch, upgrade, "--gpuperf-save", "--gpuperf-accept")
    assert "not saved" not in gpuperf_section(accepted.stdout.str())
    final = json.loads(baseline_file.read_text())["tests"]
    assert final["test_sdpa"]["metrics"]["it_per_s"]["runs"][-1]["stack"]["mylib"] == "2.0"


def screenshot(report: Path, where: Path) -> None:
    """The report as headless Chromium draws it, kept beside the test's files (pytest keeps the last three
    runs' tmp folders); skipped quietly where Chromium is not installed."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        return
    shot = where / "report.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={where / 'profile'}",
            "--window-size=1280,2400",
            f"--screenshot={shot}",
            report.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert shot.exists() and shot.stat().st_size > 10_000, "chromium drew no screenshot of the report"
    print(f"report screenshot: {shot}")


def test_long_test_ids_are_shortened_to_fit_120_columns() -> None:
    from pytest_gpuperf.core.session.report import fit_table

    rows = [
        [f"pytest_gpuperf/suites/test_inference.py::test_serving_sweep[{'x' * 80}-{end}]", "pareto.tok_s_per_device"]
        + ["1.2 tok/s", "1.1 tok/s", "1.091", "IMPROVED", "-"]
        for end in ("qkv", "o")
    ]
    lines = fit_table(
        ["test", "metric", "now", "baseline", "ratio", "verdict", "evidence"], rows, width=120, shrink=(1, 0, 6)
    )
    assert all(len(line) <= 120 for line in lines)
    cells = [line.split("  ")[0] for line in lines[1:]]
    # the folders go first, then the middle: rows that differ at their end stay told apart
    assert cells[0].startswith("test_inference") and "..." in cells[0] and cells[0].endswith("x-qkv]")
    assert cells[1].endswith("x-o]") and all("IMPROVED" in line for line in lines[1:])


def test_history_reports_the_step_at_a_stack_switch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 15.6: four runs of the old stack, one of the new 10% slower: the search alone (p < 0.001, two runs
    after) reported nothing; the switch is a known point and is tested there."""
    medians = [1.000, 1.004, 0.997, 1.002, 1.10]
    for number, median in enumerate(medians):
        document = {
            "schema": 1,
            "created": f"2026-12-01T0{number}:00:00+00:00",
            "fingerprint": {
                "hardware_key": {"cpu": "test"},
                "hardware_slug": "cpu-test",
                "stack": {"torch": "2.13.0" if number < 4 else "2.14.1"},
            },
            "settings": {},
            "results": [
                {
                    "test": "suites/test_micro.py::test_sdpa",
                    "metric": "latency",
                    "unit": "s",
                    "higher_is_better": False,
                    "samples": [median * f for f in (0.999, 1.0, 1.001)],
                }
            ],
        }
        (tmp_path / f"run{number}.json").write_text(json.dumps(document))
    assert cli.main(["history", str(tmp_path), "--format", "json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [(r["run"], r["found_by"], r["change"]) for r in rows] == [("run4.json", "stack switch", "+9.9%")]
    assert rows[0]["stack_changes"] == ["torch 2.13.0 -> 2.14.1"]


def test_headline_says_why_metrics_are_undecided_and_machine_notes_read_plain_contexts() -> None:
    from pytest_gpuperf.core.verdict import rollup

    rows = [
        rollup.Row(test="suites/test_micro.py::test_gemm[a]", metric="tflops", verdict="PASS"),
        rollup.Row(test="suites/test_micro.py::test_gemm[b]", metric="tflops", verdict="AMBIGUOUS"),
        rollup.Row(test="suites.test_inference::test_serve", metric="ttft", verdict="NO_BASELINE"),
    ]
    built = rollup.build(rows)
    assert built.suites["test_micro.py"] == {"REGRESSED": 0, "IMPROVED": 0, "PASS": 1, "undecided": 1}
    assert built.suites["test_inference"]["undecided"] == 1
    assert built.headline == "undecided: 2 of 3 metrics could not be judged"
    why = rollup.undecided_lines(built.undecided)  # one line per reason, its count first
    assert why[0].startswith("  1 AMBIGUOUS: ") and "more repeats" in why[0]
    assert why[1].startswith("  1 NO_BASELINE: ") and "--gpuperf-save" in why[1]
    assert rollup.build(rows[:1]).headline == "no regression found"
    quiet = {"machine": {"canary_s": [0.010, 0.011, 0.010], "steal_share": 0.0}}
    loaded = {"machine": {"canary_s": [0.017, 0.017, 0.018], "steal_share": 0.2}}
    note = rollup.machine_note(quiet, [loaded, loaded])
    assert note == "canary 1.7x slower when the baseline was recorded; steal 20% in the baseline, 0% now"
    assert rollup.machine_note(quiet, [quiet]) is None and rollup.machine_note({}, [loaded]) is None
    # timed on the device (CUDA events): the host's state is not the measurement's evidence
    assert rollup.machine_note(quiet | {"clock": "device"}, [loaded, loaded]) is None
    kernels = {"kernel_canary_s": {"sgemm": [0.0014], "copy": [0.0028]}, "kernel_library": "numpy 2.4.6"}
    fast = {"machine": quiet["machine"] | kernels | {"kernel_canary_s": {"sgemm": [0.001], "copy": [0.0014]}}}
    slow = {"machine": quiet["machine"] | kernels}
    assert rollup.machine_note(slow, [fast]) == "sgemm canary 1.4x slower now than when the baseline was recorded"
    other_build = {"machine": fast["machine"] | {"kernel_library": "numpy 2.5.0"}}
    assert rollup.machine_note(slow, [other_build]) is None  # another numpy build: not compared; copy: not told
    between = {"machine": loaded["machine"] | {"canary_version": "py-int-loop-20000-v1+between-calls"}}
    # canaries taken between the calls: another placement, not compared (the steal still is)
    assert rollup.machine_note(quiet, [between]) == "steal 20% in the baseline, 0% now"


def test_session_and_compare_agree_with_the_machine_check_on(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The same upgrade judged by the machine's state (the default outside this project's tests): the speed-ups
    seen only against a baseline whose canary ran 1.7x slower are NOISY in the session and in compare alike, and
    the SDPA regression, which a slower baseline machine cannot have caused, stands in both."""
    pytester.makepyfile(test_upgrade=WORKLOAD, conftest=CONFTEST)
    on = "--gpuperf-machine-check=on"
    for number in range(3):
        run_stack(
            pytester,
            monkeypatch,
            {"T_STACK": "1.0", "T_SLOW": "1.5", "T_CANARY": "1.7", "T_RUN": str(number)},
            on,
            "--gpuperf-save",
            f"--gpuperf-results=base/run{number}.json",
        ).assert_outcomes(passed=4)
    upgrade = {"T_STACK": "2.0", "T_SLOW": "1.0", "T_SDPA": "2.0", "T_CANARY": "1.0"}
    run_stack(pytester, monkeypatch, upgrade, on, "--gpuperf-results=new.json").assert_outcomes(passed=3, failed=1)
    document = json.loads((pytester.path / "new.json").read_text())
    session = {(r["test"], r["metric"]): r["verdict"] for r in document["results"]}
    assert session == {
        ("test_upgrade.py::test_gemm", "tflops"): "NOISY",
        ("test_upgrade.py::test_copy_bandwidth", "bandwidth"): "NOISY",
        ("test_upgrade.py::test_sdpa", "it_per_s"): "REGRESSED",
        ("test_upgrade.py::test_steps", "steps_to_target"): "PASS",
    }
    capsys.readouterr()
    code = cli.main(["compare", str(pytester.path / "base"), str(pytester.path / "new.json"), "--format", "json"])
    compared = json.loads(capsys.readouterr().out)
    assert code == 1
    assert {(r["test"], r["metric"]): r["verdict"] for r in compared["rows"]} == session
