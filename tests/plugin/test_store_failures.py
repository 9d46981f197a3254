"""Nothing lost: non-finite figures, filesystem errors, colliding file names, interruptions (issue 16, 1-5).

Each case is reproduced end to end where a user meets it (pytester) and at the store's own level.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_gpuperf.core.store.baselines import (
    BaselineStore,
    MetricRun,
    NewMetric,
    SaveError,
    StoreError,
    module_file_name,
    read_document,
)

ROOT = Path(__file__).resolve().parents[2]
KEY = {"device": "cpu", "accelerator": None, "cpu": {"model": "x", "cores": 2, "ram_gib": 4}, "nodes": 1}
STACK = {"torch": "2.13.0"}

TWO_TESTS = """
import pytest

@pytest.mark.perf
def test_good(perf):
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)
    perf.record_curve("loss", range(5), [5.0, 4.0, 3.0, 2.5, 2.0])

@pytest.mark.perf
def test_bad(perf):
    perf.record("t", [1.0, 1.01, 0.99, 1.0, 1.02], unit="s", higher_is_better=False)
    perf.record_curve("loss", range(0, 80, 1), [2.0] * 37 + [float("{bad}")] + [2.0] * 42)
"""


def new_metric(test: str, samples: list[float] | None = None) -> NewMetric:
    return NewMetric(
        test=test,
        name="time",
        unit="s",
        higher_is_better=False,
        run=MetricRun(samples=samples or [1.0, 2.0, 3.0], stack=STACK, date="2026-01-01", summary={}),
    )


def run_project(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester.runpytest("-m", "perf", "--gpuperf-device", "cpu", *args)


# -- 1. non-finite values are a verdict on their test, never a crash of the save ------------------------------


@pytest.mark.parametrize("bad", ["nan", "inf"])
def test_a_diverged_curve_fails_its_test_and_the_rest_is_saved(pytester: pytest.Pytester, bad: str) -> None:
    pytester.makepyfile(test_two=TWO_TESTS.replace("{bad}", bad))
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*_ test_bad _*", f"gpuperf: loss diverged at step 37: {bad}", "FAILED *::test_bad*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    [path] = sorted((pytester.path / "baselines").glob("*/*.json"))
    assert set(read_document(path)["tests"]) == {"test_good"}
    document = json.loads((pytester.path / "run.json").read_text())
    assert [r["test"] for r in document["results"]] == ["test_two.py::test_good"]


def test_a_sample_whose_statistics_overflow_fails_its_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_huge="""
        import pytest
        @pytest.mark.perf
        def test_huge(perf):
            perf.record("rate", [1e308, 1.7e308, 1e308], unit="tok/s", higher_is_better=True)
        @pytest.mark.perf
        def test_fine(perf):
            perf.record("rate", [100.0, 101.0, 99.0], unit="tok/s", higher_is_better=True)
        """
    )
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        ["*_ test_huge _*", "gpuperf: metric 'rate' sample 0 is 1e+308, beyond *: the measurement diverged"]
    )
    assert (pytester.path / "run.json").exists()
    [path] = sorted((pytester.path / "baselines").glob("*/*.json"))
    assert set(read_document(path)["tests"]) == {"test_fine"}


def test_a_non_finite_context_value_fails_its_test() -> None:
    from session_settings import cpu_settings

    from pytest_gpuperf.core.record.perf import Perf

    perf = Perf(nodeid="m.py::t", device="cpu", settings=cpu_settings(Path(".")), noise_limit=0.1)
    with pytest.raises(pytest.fail.Exception, match=r"metric 't' context 'peak.mib' is not a finite number"):
        perf.record("t", [1.0, 2.0, 3.0], unit="s", higher_is_better=False, context={"peak": {"mib": float("nan")}})
    assert perf.metrics == []


def test_a_non_finite_value_added_after_recording_fails_its_test_only(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_late="""
        import pytest
        @pytest.mark.perf
        def test_late(perf):
            perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False)
            perf.metric("t").context["t_statistic"] = float("nan")  # a workload's own statistics, added later
        @pytest.mark.perf
        def test_fine(perf):
            perf.record("t", [1.0, 1.01, 0.99], unit="s", higher_is_better=False)
        """
    )
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["gpuperf: metric 't' context 't_statistic' is not a finite number (nan or inf)"])
    document = json.loads((pytester.path / "run.json").read_text())
    assert [r["test"] for r in document["results"]] == ["test_late.py::test_fine"]


# -- 2. filesystem errors: each file on its own, failures named with the OS reason ----------------------------


def test_a_file_that_cannot_be_written_is_reported_and_the_others_are_written(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    (tmp_path / "cpu-x" / "b.json").mkdir(parents=True)  # where the file should go, a folder
    with pytest.raises(SaveError) as raised:
        store.save([new_metric("a.py::t"), new_metric("b.py::t"), new_metric("c.py::t")], [], keep_runs=3)
    assert [path.name for path in raised.value.written] == ["a.json", "c.json"]
    [(path, reason)] = raised.value.failed
    assert path.name == "b.json" and "folder" in reason
    assert str(path) in str(raised.value)


def test_permission_errors_are_reported_per_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    real_replace = os.replace

    def replace(source: str, target: str | Path) -> None:  # a read-only file or folder (the tests run as root)
        if Path(target).name == "a.json":
            raise PermissionError(13, "Permission denied", str(target))
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(SaveError, match=r"a\.json: Permission denied") as raised:
        store.save([new_metric("a.py::t"), new_metric("b.py::t")], [], keep_runs=3)
    assert [path.name for path in raised.value.written] == ["b.json"]
    assert not list((tmp_path / "cpu-x").glob(".*.tmp"))


def test_a_read_only_baseline_file_is_left_alone_and_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    store.save([new_metric("a.py::t"), new_metric("b.py::t")], [], keep_runs=3)
    before = (tmp_path / "cpu-x" / "a.json").read_bytes()
    real_access = os.access
    # chmod 0444 does not stop root (these tests run as root), so the check is asked the answer a user gets
    monkeypatch.setattr(os, "access", lambda p, mode: Path(p).name != "a.json" and real_access(p, mode))
    with pytest.raises(SaveError, match=r"a\.json: the file is read-only") as raised:
        store.save([new_metric("a.py::u"), new_metric("b.py::u")], [], keep_runs=3)
    assert [path.name for path in raised.value.written] == ["b.json"]
    assert (tmp_path / "cpu-x" / "a.json").read_bytes() == before


def test_locks_live_next_to_the_data_and_never_follow_a_planted_symlink(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    folder = tmp_path / "base" / "cpu-x"
    folder.mkdir(parents=True)
    (folder / "a.json.lock").symlink_to(victim)
    store = BaselineStore(tmp_path / "base", "cpu-x", KEY)
    try:
        store.save([new_metric("a.py::t"), new_metric("b.py::t")], [], keep_runs=3)
    except SaveError as error:
        assert [path.name for path, _ in error.failed] == ["a.json"]
        assert [path.name for path in error.written] == ["b.json"]
    assert victim.read_text() == "precious"
    assert (folder / "b.json.lock").exists()  # beside its file; *.lock is gitignored
    assert not (Path("/tmp") / "gpuperf-locks" / "x").exists()


def test_a_slug_path_that_is_a_file_is_a_reported_failure_in_a_session(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two=TWO_TESTS.replace("{bad}", "1.0"))
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")  # learns the slug
    [folder] = (pytester.path / "baselines").iterdir()
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()
    folder.write_text("not a folder")
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"*gpuperf: baselines not saved: {folder / 'test_two.json'}: *"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert result.ret != 0
    assert (pytester.path / "run.json").exists()


def test_xdist_workers_save_failures_reach_the_controller(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(test_a=TWO_TESTS.replace("{bad}", "1.0"), test_b=TWO_TESTS.replace("{bad}", "1.0"))
    run_project(pytester, "--gpuperf-save").assert_outcomes(passed=4)
    [folder] = (pytester.path / "baselines").iterdir()
    (folder / "test_b.json.lock").unlink()
    (folder / "test_b.json.lock").mkdir()  # where its lock should go, a folder
    result = pytester.runpytest_subprocess("-n", "2", "-m", "perf", "--gpuperf-device", "cpu", "--gpuperf-save")
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines([f"*gpuperf: baselines not saved: {folder / 'test_b.json'}: Is a directory*"])
    assert f"baselines saved: {folder / 'test_a.json'}" in result.stdout.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    # both workers merged into test_a.json under its lock: every test's entry holds this run too
    runs = [entry["metrics"]["t"]["runs"] for entry in read_document(folder / "test_a.json")["tests"].values()]
    assert [len(r) for r in runs] == [2, 2]


def test_results_that_cannot_be_written_are_reported(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_two=TWO_TESTS.replace("{bad}", "1.0"))
    (pytester.path / "out").write_text("a file where the results folder should be")
    result = run_project(pytester, "--gpuperf-results", "out/run.json")
    result.stdout.fnmatch_lines(["*gpuperf: results not written: *out/run.json*"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()
    assert result.ret != 0


# -- 3. injective file names, duplicate keys ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("tëst.py", "tüst.py"),
        ("a/b__c.py", "a__b/c.py"),
        ("a_/b.py", "a/_b.py"),
        ("a b.py", "a_b.py"),
        (".x.py", "x.py"),
    ],
)
def test_different_modules_never_share_a_file(one: str, other: str) -> None:
    assert module_file_name(f"{one}::t") != module_file_name(f"{other}::t")


@given(st.lists(st.text(alphabet="ab_ë./\\-", min_size=1, max_size=8), min_size=2, max_size=2, unique=True))
def test_file_names_are_injective_and_stay_in_the_folder(paths: list[str]) -> None:
    names = [module_file_name(f"{path}.py::t") for path in paths]
    assert names[0] != names[1]
    for name in names:
        assert "/" not in name and "\\" not in name and not name.startswith(".") and name.endswith(".json")


def test_the_committed_baselines_keep_their_names() -> None:
    committed = {path.name for path in ROOT.glob("baselines/*/*.json")}
    shipped = sorted(ROOT.glob("pytest_gpuperf/suites/test_*.py"))
    suites = {module_file_name(f"pytest_gpuperf/suites/{path.name}::t") for path in shipped}
    assert shipped and committed and committed <= suites


def test_duplicate_keys_are_an_error_naming_the_file(tmp_path: Path) -> None:
    path = tmp_path / "cpu-x" / "m.json"
    path.parent.mkdir()
    run = '{"samples": [1, 2, 3], "summary": {}, "stack": {}, "date": ""}'
    metric = '{"unit": "s", "higher_is_better": false, "runs": [' + run + "]}"
    path.write_text('{"schema": 1, "hardware_key": {}, "tests": {"t": {"metrics": {"m": ' + metric + '}}, "t": {}}}')
    with pytest.raises(StoreError, match=r"key 't' appears twice") as raised:
        read_document(path)
    assert str(path) in str(raised.value)


# -- 5. interruptions ---------------------------------------------------------------------------------------


def _dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_temp_files_of_dead_writers_are_removed_live_ones_kept(tmp_path: Path) -> None:
    folder = tmp_path / "cpu-x"
    folder.mkdir()
    dead = folder / f".a.json.{_dead_pid()}.x1y2.tmp"
    live = folder / f".a.json.{os.getppid()}.x1y2.tmp"
    dead.write_text("partial")
    live.write_text("being written")
    fresh = folder / f".a.json.{_dead_pid()}.z9.tmp"  # a writer on another host may be writing it now
    fresh.write_text("just now")
    a_minute_ago = os.path.getmtime(dead) - 60
    for path in (dead, live):
        os.utime(path, (a_minute_ago, a_minute_ago))
    BaselineStore(tmp_path, "cpu-x", KEY).save([new_metric("b.py::t")], [], keep_runs=3)
    assert not dead.exists() and live.exists() and fresh.exists()


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
from pytest_gpuperf.core.store import baselines as store
os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL)  # killed mid-write, after the data, before the rename
store.write_atomic(Path(sys.argv[1]), {"schema": 1})
"""


def test_a_writer_killed_mid_write_leaves_a_temp_file_the_next_save_removes(tmp_path: Path) -> None:
    import sys

    folder = tmp_path / "cpu-x"
    folder.mkdir()
    done = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(folder / "a.json")], check=False, timeout=60)
    assert done.returncode == -9
    [left] = folder.glob(".a.json.*.tmp")
    assert not (folder / "a.json").exists()
    a_minute_ago = os.path.getmtime(left) - 60
    os.utime(left, (a_minute_ago, a_minute_ago))
    BaselineStore(tmp_path, "cpu-x", KEY).save([new_metric("b.py::t")], [], keep_runs=3)
    assert not left.exists()


def test_temp_and_lock_files_are_gitignored() -> None:
    names = ["baselines/cpu-x/.suites__test_micro.json.123.abcd.tmp", "baselines/cpu-x/suites__test_micro.json.lock"]
    result = subprocess.run(["git", "check-ignore", *names], cwd=ROOT, capture_output=True, text=True, check=False)
    assert result.stdout.split() == names


def test_ctrl_c_during_the_save_says_what_was_saved(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_a=TWO_TESTS.replace("{bad}", "1.0"), test_b=TWO_TESTS.replace("{bad}", "1.0"))
    pytester.makeconftest(
        """
        import pytest_gpuperf.core.store.baselines as store
        real = store.write_atomic
        calls = []
        def interrupted(path, document):
            calls.append(path)
            if len(calls) == 2:
                raise KeyboardInterrupt
            real(path, document)
        store.write_atomic = interrupted
        """
    )
    result = run_project(pytester, "--gpuperf-save")
    output = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in output and "raise KeyboardInterrupt" not in output
    result.stdout.fnmatch_lines(
        ["*gpuperf: interrupted while saving baselines*", "*saved: *test_a.json*", "*not saved: *test_b.json*"]
    )
    assert result.ret == pytest.ExitCode.INTERRUPTED
