"""MLPerf Training logs through the official checkers, end to end: the LoRA proxy's log (written by mlperf_logging)
passes the compliance checker under ruleset 5.1.0 and is judged; the same log tampered with fails with the checker's
own message and costs no other test its baseline; a folder of the proxy's ten runs gets MLPerf's score, a baseline,
and REGRESSED when its runs take twice as long. Needs the mlperf extra (and torch for the proxy)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytest.importorskip("mlperf_logging", reason="mlperf_logging is not installed: pip install 'pytest-gpuperf[mlperf]'")

SEEDS = Path(__file__).parents[1] / "helpers" / "data" / "mlperf" / "lora_proxy"
"""result_1..10.txt: training/mlperf_proxy.py, seeds 1-10 (tests/helpers/data/mlperf/README.md)."""

TESTS = r"""
import os, sys
from pathlib import Path

import pytest

from pytest_gpuperf.frameworks.mlperf import MlperfAdapter, record_results

HERE = Path(__file__).parent
PROXY = [sys.executable, "-m", "pytest_gpuperf.training.mlperf_proxy", "--seed", "1", "--output", "{output}"]
PRINT = "import sys; sys.stdout.write(open(sys.argv[1], encoding='utf-8').read())"
TAMPER = {
    "key_removed": lambda text: "\n".join(l for l in text.splitlines() if '"key": "lora_alpha"' not in l),
    "aborted": lambda text: text.replace('"status": "success"', '"status": "aborted"'),
    "hyperparameter_changed": lambda text: text.replace('"lora_rank", "value": 16', '"lora_rank", "value": 8'),
    "truncated": lambda text: text[: text.rindex('"status"')],
}


@pytest.mark.perf
def test_proxy(perf):
    perf.run_command(PROXY, adapter=MlperfAdapter(source="file"), runs=3, log_dir=HERE / "proxy", timeout=300)
    assert perf.metric("time_to_train").context["mlperf"]["benchmark"] == "llama2_70b_lora"


@pytest.mark.perf
@pytest.mark.parametrize("tamper", sorted(TAMPER))
def test_tampered(perf, tamper):
    path = HERE / f"{tamper}.txt"
    path.write_text(TAMPER[tamper](Path(os.environ["MLPERF_FOLDER"], "result_1.txt").read_text()))
    perf.run_command([sys.executable, "-c", PRINT, str(path)], adapter="mlperf")


@pytest.mark.perf
def test_folder(perf):
    score = record_results(perf, os.environ["MLPERF_FOLDER"])
    assert len(score.times_s) == 10 and not score.not_converged
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_mlperf_runs=TESTS)
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\nmarkers =\n    perf: a perf test\n")
    return pytester


def run(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    return project.runpytest_subprocess("-m", "perf", "--gpuperf-device", "cpu", *args, timeout=600)


def baselines(project: pytest.Pytester) -> str:
    return "".join(path.read_text() for path in sorted((project.path / "baselines").glob("*/*.json")))


def test_the_proxy_log_passes_the_checker_and_a_tampered_one_fails_with_its_message(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("torch")
    monkeypatch.setenv("MLPERF_FOLDER", str(SEEDS))
    saved = run(project, "-k", "proxy or tampered", "--gpuperf-save", "--gpuperf-results", "saved.json")
    saved.assert_outcomes(passed=1, failed=4)
    output = saved.stdout.str()
    # the checker's own words, for each tampering
    assert "Required EXACTLY_ONE occurrence of 'lora_alpha' but found 0" in output
    assert "CHECK for 'lora_rank' failed" in output and "failed test:  v['value'] == 16" in output
    assert "Required EXACTLY_ONE occurrence of 'run_stop' but found 0" in output
    assert "the MLLOG line is not JSON" in output  # truncated in run_stop's line
    assert "run_stop has status 'aborted': the run did not converge" in output
    assert "(the compliance checker passes it: it checks what the log says)" in output
    document = json.loads((project.path / "saved.json").read_text())
    proxy = next(r for r in document["results"] if r["test"].endswith("test_proxy") and r["metric"] == "time_to_train")
    assert "passed the MLCommons compliance checker (mlperf-logging 4.1.68, training 5.1.0)" in json.dumps(proxy)
    assert proxy["context"]["hyperparameters"]["lora_rank"] == 16
    before = baselines(project)
    assert "test_proxy" in before
    # a session of failing logs saves nothing over the proxy's baseline
    run(project, "-k", "tampered", "--gpuperf-save").assert_outcomes(failed=4)
    assert baselines(project) == before


def slower(source: Path, target: Path, factor: float) -> Path:
    """The runs of ``source`` with every event after run_start ``factor`` times later (a slower system)."""
    target.mkdir()
    for path in source.glob("result_*.txt"):
        lines, start = [], None
        for text in path.read_text().splitlines():
            event = json.loads(text.split(":::MLLOG ", 1)[1])
            if event["key"] == "run_start":
                start = event["time_ms"]
            if start is not None:
                event["time_ms"] = start + (event["time_ms"] - start) * factor
            lines.append(":::MLLOG " + json.dumps(event))
        (target / path.name).write_text("\n".join(lines) + "\n")
    return target


LOADED = ("--gpuperf-noise-limit", "60")
"""The committed runs were timed on a shared, loaded 2-core machine: their spread (log Q3/Q1) is ~40%, above the
CPU default limit of 10%, so the folder's verdicts are asked for with a wider one."""


def test_a_folder_of_ten_runs_is_scored_saved_passes_again_and_regresses_twice_as_slow(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    folder = shutil.copytree(SEEDS, tmp_path / "reference")
    monkeypatch.setenv("MLPERF_FOLDER", str(folder))
    run(project, "-k", "folder", "--gpuperf-save", *LOADED).assert_outcomes(passed=1)
    again = run(project, "-k", "folder", "--gpuperf-results", "same.json", *LOADED)
    again.assert_outcomes(passed=1)
    result = json.loads((project.path / "same.json").read_text())["results"][0]
    assert result["verdict"] == "PASS"
    assert len(result["samples"]) == 8  # the fastest and the slowest of ten left out, as MLPerf's score does
    assert result["context"]["mlperf_score_s"] == pytest.approx(sum(result["samples"]) / 8, rel=1e-4)
    assert result["context"]["rcp_checker"].startswith("failed (RCP found): the runs converge in fewer samples")
    stack = json.loads((project.path / "same.json").read_text())["fingerprint"]["stack"]
    assert stack["mlperf-logging"] == "4.1.68" and stack["mlperf-platform"].startswith("1xx86_64 CPU, torch ")
    monkeypatch.setenv("MLPERF_FOLDER", str(slower(folder, tmp_path / "slower", 2.0)))
    regressed = run(project, "-k", "folder", "--gpuperf-results", "slow.json", *LOADED)
    regressed.assert_outcomes(failed=1)
    assert json.loads((project.path / "slow.json").read_text())["results"][0]["verdict"] == "REGRESSED"
    # `gpuperf variance`: is the second folder within 1% of the reference's score?
    from pytest_gpuperf.cli import main as cli

    out = project.path / "variance.json"
    reference, submission = str(project.path / "same.json"), str(project.path / "slow.json")
    code = cli.main(["variance", "--reference", reference, submission, "--tolerance", "1%", "--format", "json",
                     "-o", str(out)])  # fmt: skip
    rows = json.loads(out.read_text())["rows"]
    assert code == 1 and [row["verdict"] for row in rows] == ["FAIL"], rows


def test_the_pretraining_proxy_never_claims_the_closed_llama31_8b() -> None:
    pytest.importorskip("torch")
    from pytest_gpuperf.training.mlperf_proxy import PROXIES

    pretrain = PROXIES["pretrain"]()
    assert (pretrain.division, pretrain.benchmark) == ("open", "gpuperf_tiny_pretrain")
    lora = PROXIES["lora"]()
    assert (lora.division, lora.benchmark, lora.spec.lora_rank) == ("closed", "llama2_70b_lora", 16)
