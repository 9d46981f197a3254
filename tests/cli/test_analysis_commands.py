"""The `gpuperf` analysis commands end to end, on files written by real runs of the plugin.

The runs: a small workload file run through pytest (nested in this process, so torch is imported once) with
environment variables that slow some tests, scale a partner's throughput or change the stack (the
``pytest_gpuperf_stack`` hook in the workload's conftest plays a driver update).
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_gpuperf.cli import main as cli

WORKLOAD = """
import os, time
import pytest

def env(name, default):  # read per test: the nested runs share one imported module
    return float(os.environ.get(name, default))

JITTER = [1.0, 1.0004, 0.9997, 1.0002, 0.9999, 1.0003, 0.9998, 1.0001, 1.0, 0.9996]

@pytest.mark.perf
def test_timed(perf):
    # A real measurement of real work; thread CPU time rather than wall time, so other processes on a shared
    # 2-core CI machine make it less noisy. Its slowed run does 3x the work: a smaller effect (1.5x was tried)
    # reads NOISY on a loaded box, and a real-timing case must be one that cannot be missed.
    n = int(30000 * env("GPUPERF_TEST_WORK", "1"))
    samples = []
    for repeat in range(15):  # the first 3 warm the interpreter's specialised bytecode up
        start = time.thread_time()
        total = 0
        for i in range(n):
            total += i * i
        if repeat >= 3:
            samples.append(time.thread_time() - start)
    perf.record("cpu_time", samples, unit="s", higher_is_better=False)

@pytest.mark.perf
def test_latency(perf):
    slow = env("GPUPERF_TEST_SLOWDOWN", "1")
    perf.record("latency", [0.010 * slow * j for j in JITTER], unit="s", higher_is_better=False)

@pytest.mark.perf
def test_rate(perf):
    scale = env("GPUPERF_TEST_SCALE", "1")
    perf.record("rate", [1000.0 * scale * j for j in JITTER], unit="tok/s", higher_is_better=True,
                context={"telemetry": {"sm_clock_mhz_median": env("GPUPERF_TEST_CLOCK", "1980")}})
    perf.record_curve("loss", [0, 10, 20, 30], [2.0, 1.2, 0.8, 0.6])

@pytest.mark.perf
@pytest.mark.parametrize("batch", [1, 4, 16])
def test_serve(perf, batch):
    perf.record("latency", [0.001 * (1 + batch / 4) * j for j in JITTER], unit="s", higher_is_better=False)
    perf.record("throughput", [100.0 * batch ** 0.5 * j for j in JITTER], unit="tok/s", higher_is_better=True)

@pytest.mark.perf
def test_sweep(perf):
    # operating points per concurrency, as an inference sweep records them
    perf.record_curve("pareto.interactivity", [1, 2, 4, 8], [100.0, 90.0, 70.0, 40.0])
    perf.record_curve("pareto.tok_s_per_device", [1, 2, 4, 8], [100.0, 180.0, 150.0, 320.0])
"""

CONFTEST = """
import os

def pytest_gpuperf_stack(config):
    return {"driver": os.environ.get("GPUPERF_TEST_DRIVER", "580.1")}
"""

STEADY = "not timed"  # every workload whose figures the test controls exactly


def run_plugin(folder: Path, *args: str, env: dict[str, str] | None = None) -> None:
    saved = dict(os.environ)
    os.environ.update(env or {})
    cwd = Path.cwd()
    os.chdir(folder)
    try:
        code = pytest.main(
            [
                "-qq",
                "-p",
                "no:cacheprovider",
                "--import-mode=importlib",
                "--rootdir",
                str(folder),
                "--gpuperf-device",
                "cpu",
                "--gpuperf-noise-limit",
                "60",
                "--gpuperf-run-noise",
                "0.3",
                *args,
                "test_cli_workload.py",
            ]
        )
    finally:
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(saved)
        # Forget the workload's modules, so later in-process runs (pytester) of files with the same name import
        # their own.
        for name, module in list(sys.modules.items()):
            if str(getattr(module, "__file__", "") or "").startswith(str(folder)):
                del sys.modules[name]
    assert code == 0, f"plugin run {args} exited {code}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    (folder / "test_cli_workload.py").write_text(WORKLOAD)
    (folder / "conftest.py").write_text(CONFTEST)
    (folder / "pytest.ini").write_text("[pytest]\n")
    slow = {"GPUPERF_TEST_SLOWDOWN": "1.5", "GPUPERF_TEST_WORK": "3", "GPUPERF_TEST_DRIVER": "590.2"}
    run_plugin(folder, "--gpuperf-results", "base/run.json", "--junitxml", "base-xml/run.xml")
    run_plugin(folder, "--gpuperf-results", "new/run.json", "--junitxml", "new-xml/run.xml", env=slow)
    # A partner 5% slower whose GPU also ran 5% slower clocks: its cooling, not its software.
    run_plugin(
        folder,
        "-k",
        STEADY,
        "--gpuperf-results",
        "partner-off.json",
        env={"GPUPERF_TEST_SCALE": "0.95", "GPUPERF_TEST_CLOCK": "1881"},
    )
    for number in range(1, 7):  # the step: runs 5 and 6 are 30% slower on a new driver
        env = {"GPUPERF_TEST_SLOWDOWN": "1.3", "GPUPERF_TEST_DRIVER": "590.2"} if number >= 5 else {}
        run_plugin(folder, "-k", STEADY, "--gpuperf-results", f"history/run{number:02d}.json", env=env)
    return folder


def gpuperf(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def verdicts(document: dict) -> dict[tuple[str, str], str]:
    return {(row["test"].split("::")[-1], row["metric"]): row["verdict"] for row in document["rows"]}


def test_compare_flags_exactly_the_slowed_tests(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = gpuperf(capsys, "compare", str(runs / "base"), str(runs / "new"), "--format", "json")
    document = json.loads(out)
    found = verdicts(document)
    regressed = {key for key, verdict in found.items() if verdict == "REGRESSED"}
    assert regressed == {("test_timed", "cpu_time"), ("test_latency", "latency")}
    assert all(verdict == "PASS" for key, verdict in found.items() if key not in regressed), found
    assert code == 1
    row = next(r for r in document["rows"] if r["metric"] == "latency" and "serve" not in r["test"])
    assert document["stack_changes"] == ["driver 580.1 -> 590.2"]  # stated once, not per row
    assert "stack_changes" not in row and "driver" not in row["evidence"]
    assert row["ratio"] == pytest.approx(1 / 1.5, rel=1e-6)
    assert row["ci_low"] < row["ratio"] < row["ci_high"]
    # the same runs read from their JUnit files, stack from the testsuite property
    # JUnit files do not carry the run's settings: give the noise limit and run-noise prior the runs were made
    # with (60%, 0.3%: the workloads sleep or return fixed figures), as the JSON comparison reads them from BASE.
    code, out, _ = gpuperf(
        capsys, "compare", str(runs / "base-xml"), str(runs / "new-xml"), "--noise-limit", "60", "--run-noise", "0.3"
    )
    assert code == 1
    assert "driver 580.1 -> 590.2" in out
    assert "7 PASS, 2 REGRESSED" in out
    # unchanged against itself: exit 0, and the Markdown form
    code, out, _ = gpuperf(
        capsys, "compare", str(runs / "base" / "run.json"), str(runs / "base-xml" / "run.xml"), "--format", "md"
    )
    assert code == 0
    assert "| test | metric |" in out and "REGRESSED" not in out


def test_compare_adds_the_shift_between_sittings_where_new_was_run_another_day(
    runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    document = json.loads((runs / "base" / "run.json").read_text())
    document["created"] = (dt.datetime.fromisoformat(document["created"]) - dt.timedelta(days=1)).isoformat()
    yesterday = tmp_path / "yesterday.json"
    yesterday.write_text(json.dumps(document))
    new = str(runs / "new" / "run.json")
    code, out, _ = gpuperf(capsys, "compare", str(yesterday), new, "--format", "json", "--sitting-noise", "20")
    found = verdicts(json.loads(out))
    assert found[("test_latency", "latency")] == "AMBIGUOUS"  # 1.5x is within what a 20% shift between sittings does
    row = next(r for r in json.loads(out)["rows"] if r["metric"] == "latency" and "serve" not in r["test"])
    assert row["sitting_noise"] == pytest.approx(0.2) and row["sittings"] == 1
    code, out, _ = gpuperf(capsys, "compare", str(yesterday), new, "--format", "json", "--sitting-noise", "0")
    assert verdicts(json.loads(out))[("test_latency", "latency")] == "REGRESSED"  # none added: as the same sitting
    assert code == 1
    with pytest.raises(SystemExit) as usage:
        gpuperf(capsys, "compare", str(yesterday), new, "--sitting-noise", "lots")
    assert usage.value.code == 2
    assert "'lots': expected a percentage from 0" in capsys.readouterr().err


def test_variance_passes_identical_and_fails_five_percent_off(runs: Path, capsys: pytest.CaptureFixture[str]) -> None:
    history = runs / "history"
    code, out, _ = gpuperf(
        capsys,
        "variance",
        "--reference",
        str(history / "run01.json"),
        str(history / "run02.json"),
        str(history / "run03.json"),
        str(runs / "partner-off.json"),
        "--tolerance",
        "1%",
        "--format",
        "json",
    )
    document = json.loads(out)
    assert code == 1
    assert document["summary"] == "2 of 3 submissions within 1% on all workloads"
    off = [row for row in document["rows"] if row["submission"].endswith("partner-off.json")]
    assert {row["metric"] for row in off if row["verdict"] == "FAIL"} == {"rate"}
    rate = next(row for row in off if row["metric"] == "rate")
    assert rate["ratio"] == pytest.approx(0.95, rel=1e-6) and rate["ci_high"] < 0.99
    assert rate["clock_normalised_ratio"] == pytest.approx(1.0, abs=0.001)  # 5% slower at 5% lower clocks
    same = [row for row in document["rows"] if not row["submission"].endswith("partner-off.json")]
    assert {row["verdict"] for row in same} == {"PASS"}
    latency = next(row for row in same if row["metric"] == "latency")
    assert latency["clock_normalised"] == "clocks not recorded"
    code, out, _ = gpuperf(capsys, "variance", "--reference", str(history / "run01.json"), str(history / "run02.json"))
    assert code == 0 and "1 of 1 submissions within 1% on all workloads" in out


def test_variance_counts_a_submission_given_twice_once(
    runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Issue 48, item 4: the same file again, or through a link, is one submission (fleet reads a file once)."""
    history = runs / "history"
    link = tmp_path / "same.json"
    link.symlink_to(history / "run02.json")
    sub = str(history / "run02.json")
    code, out, _ = gpuperf(capsys, "variance", "--reference", str(history / "run01.json"), sub, sub, str(link))
    assert code == 0 and "1 of 1 submissions within 1% on all workloads" in out
    assert f"note: {sub} is {sub} given again: counted once" in out and f"note: {link} is {sub} given again" in out


def test_history_finds_the_step_and_attributes_it(
    runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, out, _ = gpuperf(capsys, "history", str(runs / "history"), "--format", "json")
    assert code == 0
    document = json.loads(out)
    [change] = document["rows"]
    assert (change["test"].split("::")[-1], change["metric"]) == ("test_latency", "latency")
    assert change["run"] == "run05.json" and change["index"] == 4 and change["runs_after"] == 2
    assert change["magnitude"] == pytest.approx(0.3, rel=1e-3)
    assert change["stack_changes"] == ["driver 580.1 -> 590.2"]
    # with only one run after the step it is not reported yet
    code, out, _ = gpuperf(
        capsys, "history", *(str(runs / "history" / f"run{n:02d}.json") for n in range(1, 6)), "--format", "json"
    )
    assert json.loads(out)["rows"] == []
    # an accepted change restarts the series at that run
    accepted = tmp_path / "accepted.json"
    accepted.write_text(json.dumps([{"run": "run05.json", "test": change["test"], "note": "new driver"}]))
    code, out, _ = gpuperf(capsys, "history", str(runs / "history"), "--accepted", str(accepted))
    assert code == 0 and "0 change point(s)" in out and "restarts at accepted run run05.json" in out


def test_report_is_self_contained_and_renders(runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="the report extra (matplotlib) is not installed")
    report = tmp_path / "report.html"
    code, _, _ = gpuperf(
        capsys, "report", str(runs / "base"), str(runs / "new"), str(runs / "history"), "-o", str(report)
    )
    assert code == 0
    text = report.read_text()
    headings = ("Verdict", "Ratio to baseline", "Throughput per stack version", "Every metric, by suite")
    for heading in (*headings, "Loss curves", "Inference Pareto fronts"):
        assert heading in text
    assert [text.index(f"<h2>{h}") for h in headings] == sorted(text.index(f"<h2>{h}") for h in headings)
    images = text.split('src="data:image/png;base64,')[1:]
    assert len(images) >= 3  # rate and throughput as small multiples of one suite; the loss curve; the Pareto front
    assert "Pareto front of test_cli_workload::test_sweep" in text
    assert "pareto.interactivity curve" not in text  # sweep operating points are fronts, not loss curves
    assert all(base64.b64decode(chunk.split('"', 1)[0])[:8] == b"\x89PNG\r\n\x1a\n" for chunk in images)
    assert "http://" not in text and "https://" not in text  # nothing fetched when opened
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    if browser is None:
        pytest.skip("chromium not installed (Debian: apt-get install chromium); the headless render check needs it")
    probe = tmp_path / "probe.html"
    probe.write_text(text.replace("</body>", RENDER_PROBE + "</body>"))
    done = subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            f"--user-data-dir={tmp_path / 'profile'}",
            "--virtual-time-budget=10000",
            "--dump-dom",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f'<div id="render-check">decoded {len(images)} of {len(images)} at least 100px</div>' in done.stdout, (
        done.stdout[-500:] + done.stderr[-2000:]
    )


RENDER_PROBE = """<script>window.addEventListener("load", function () {
  var images = Array.from(document.images);
  var good = images.filter(function (i) { return i.complete && i.naturalWidth >= 100; }).length;
  var marker = document.createElement("div");
  marker.id = "render-check";
  marker.textContent = "decoded " + good + " of " + images.length + " at least 100px";
  document.body.appendChild(marker);
});</script>"""


def test_sign_and_verify_catch_an_edited_number(runs: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("cryptography")
    bundle = tmp_path / "bundle"
    shutil.copytree(runs / "history", bundle)
    key = tmp_path / "partner.key"
    assert gpuperf(capsys, "keygen", str(key))[0] == 0
    assert gpuperf(capsys, "sign", "--key", str(key), str(bundle))[0] == 0
    public = f"{key}.pub"
    code, out, _ = gpuperf(capsys, "verify", "--public-key", public, str(bundle))
    assert code == 0 and out.startswith("OK: 6 file(s)")
    # re-indenting is not an edit; a changed sample or stack field is
    target = bundle / "run03.json"
    document = json.loads(target.read_text())
    target.write_text(json.dumps(document, indent=4))
    assert gpuperf(capsys, "verify", "--public-key", public, str(bundle))[0] == 0
    document["fingerprint"]["stack"]["driver"] = "999.9"
    target.write_text(json.dumps(document))
    code, out, _ = gpuperf(capsys, "verify", "--public-key", public, str(bundle))
    assert code == 1 and "run03.json: changed since signing" in out
    other = tmp_path / "other.key"
    gpuperf(capsys, "keygen", str(other))
    code, out, _ = gpuperf(capsys, "verify", "--public-key", f"{other}.pub", str(bundle))
    assert code == 1 and out.startswith("INVALID")


def test_baselines_diff(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_gpuperf.core.store.baselines import BaselineStore, MetricRun, NewMetric

    def save(root: Path, samples: list[float], driver: str, extra: bool) -> None:
        store = BaselineStore(root, "cpu-test-2c-8gib", {"device": "cpu"})
        metrics = [
            NewMetric(
                test="suites/test_a.py::test_x",
                name="t",
                unit="s",
                higher_is_better=False,
                run=MetricRun(samples=samples, stack={"driver": driver}, date="d", summary={}),
            )
        ]
        if extra:
            metrics.append(
                NewMetric(
                    test="suites/test_a.py::test_y",
                    name="t",
                    unit="s",
                    higher_is_better=False,
                    run=MetricRun(samples=[1.0, 1.0, 1.0], stack={}, date="d", summary={}),
                )
            )
        store.save(metrics, [], keep_runs=5)

    save(tmp_path / "old", [2.0, 2.0, 2.0], "580.1", extra=True)
    save(tmp_path / "new", [1.0, 1.0, 1.0], "590.2", extra=False)
    code, out, _ = gpuperf(
        capsys, "baselines", "diff", str(tmp_path / "old"), str(tmp_path / "new"), "--format", "json"
    )
    assert code == 0
    rows = {row["test"]: row for row in json.loads(out)["rows"]}
    assert rows["test_x"]["change"] == "changed" and rows["test_x"]["ratio"] == 0.5
    assert rows["test_x"]["detail"] == ["driver 580.1 -> 590.2"]
    assert rows["test_y"]["change"] == "removed"


@pytest.mark.parametrize(
    "case", ["missing", "empty", "truncated_json", "truncated_xml", "mixed_hardware", "not_results", "corrupt_baseline"]
)
def test_bad_input_is_one_line_and_exit_2(
    runs: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    good = runs / "base" / "run.json"
    bad = tmp_path / "bad"
    bad.mkdir()
    argv = ["compare", str(bad), str(good)]
    if case == "missing":
        argv = ["compare", str(tmp_path / "nowhere.json"), str(good)]
        expected = "nowhere.json: no such file or folder"
    elif case == "empty":
        expected = "folder holds no results files"
    elif case == "truncated_json":
        (bad / "run.json").write_text(good.read_text()[:-30])
        expected = "run.json: truncated"
    elif case == "truncated_xml":
        (bad / "run.xml").write_text((runs / "base-xml" / "run.xml").read_text()[:-30])
        expected = "run.xml: truncated"
    elif case == "mixed_hardware":
        shutil.copy(good, bad / "a.json")
        other = json.loads(good.read_text())
        other["fingerprint"]["hardware_key"]["cpu"]["cores"] = 96
        other["fingerprint"]["hardware_slug"] = "cpu-other-96c"
        (bad / "b.json").write_text(json.dumps(other))
        expected = "mixes hardware keys"
    elif case == "not_results":
        (bad / "x.json").write_text('{"schema": 1, "results": [{"test": "t"}]}')
        expected = "results[0]: 'metric' is missing"
    else:
        (bad / "slug").mkdir()
        (bad / "slug" / "m.json").write_text("{")
        argv = ["baselines", "diff", str(bad), str(bad)]
        expected = "is truncated, the JSON ends early"
    code, out, err = gpuperf(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and expected in err and err.startswith("gpuperf "), err
    assert "Traceback" not in out + err


def test_script_help_lists_every_command_with_an_example() -> None:
    script = Path(sys.executable).with_name("gpuperf")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "pytest_gpuperf.cli"]
    done = subprocess.run([*command, "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0
    for name in ("env", "compare", "variance", "history", "report", "baselines", "keygen", "sign", "verify"):
        assert f"  {name} " in done.stdout or f"  {name}\n" in done.stdout
        assert f"gpuperf {name}" in done.stdout, name
    broken = subprocess.run(
        [*command, "compare", "/nonexistent/a.json", "/nonexistent/b.json"], capture_output=True, text=True, timeout=60
    )
    assert broken.returncode == 2 and "Traceback" not in broken.stderr
    assert broken.stderr.strip() == "gpuperf compare: error: /nonexistent/a.json: no such file or folder"


@pytest.fixture(autouse=True)
def _no_display(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    yield
