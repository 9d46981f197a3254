"""`gpuperf bisect`: stack specs, the cached builder, and the proof end to end: two tiny local packages at two
versions each (slowpkg 2.0 makes the workload 3x slower, samepkg 2.0 changes nothing), installed into layered
venvs from local wheels only (PIP_NO_INDEX, PIP_FIND_LINKS), and bisect names slowpkg and only it.

The timed metric is thread CPU time with a 3x effect, and a second metric is a fixed figure scaled by the
package's version: what must be decided cannot be missed on a loaded machine.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.ab.builders import BuildError, CachedBuilder, mixed_stack
from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.cli.bisect import parse_spec
from pytest_gpuperf.cli.loading import InputError


def test_spec_from_pins_and_from_a_requirements_file(tmp_path: Path) -> None:
    assert parse_spec("Torch_Audio==2.1.0, numpy==2.1.0", "--good") == {"torch-audio": "2.1.0", "numpy": "2.1.0"}
    spec = tmp_path / "good.txt"
    spec.write_text("# the release stack\nnumpy==2.1.0  # pinned\n\ntorch==2.13.0\n")
    assert parse_spec(str(spec), "--good") == {"numpy": "2.1.0", "torch": "2.13.0"}


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("numpy>=2", "neither a file nor name==version"),
        ("numpy==2.1 torch>=2", "'torch>=2' is not an exact pin"),
        ("numpy==2.1 numpy==2.2", "numpy pinned twice"),
    ],
)
def test_bad_specs_are_one_line(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words):
        parse_spec(text, "--bad")


def test_mixed_stack_takes_bad_versions_and_drops_what_bad_lacks() -> None:
    good = {"a": "1", "b": "1", "c": "1", "driver": "550"}
    bad = {"a": "2", "b": "2", "driver": "560"}
    assert mixed_stack(good, bad, frozenset({"a", "c"})) == {"a": "2", "b": "1"}


def test_a_failing_template_is_unbuildable_and_cached(tmp_path: Path) -> None:
    builder = CachedBuilder(tmp_path / "envs", "echo ERROR: ResolutionImpossible {pins} >&2; exit 1")
    for _ in range(2):
        with pytest.raises(BuildError, match="ResolutionImpossible"):
            builder({"a": "1"})
    assert builder.built == 1


def test_a_template_names_the_stacks_python(tmp_path: Path) -> None:
    builder = CachedBuilder(tmp_path / "envs", "cp {requirements} {dir}/pins && echo 'env X=1 {python}' > "
                            "{dir}/gpuperf-python")  # fmt: skip
    prefix = builder({"b": "2", "a": "1"})
    assert prefix == ("env", "X=1", sys.executable)
    assert builder({"a": "1", "b": "2"}) == prefix and builder.built == 1
    pins = next((tmp_path / "envs").glob("*/pins")).read_text()
    assert pins == "a==1\nb==2\n"


def test_bad_input_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bisect", "--good", "a==1", "--bad", "a==1", "--", "x.py"]) == 2
    assert "pin the same versions" in capsys.readouterr().err
    assert cli.main(["bisect", "--good", "a==1", "--bad", "a==2", "--metric", "nometric", "--", "x.py"]) == 2
    assert "give TEST::METRIC" in capsys.readouterr().err


def test_a_good_vs_bad_comparison_that_compared_nothing_exits_3_not_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No pair completed (every session failed, say): nothing was judged, so it is not a pass (exit 3, as
    `gpuperf ab`), and the reason is said."""
    from pytest_gpuperf.ab.model import AbPlan, AbResult
    from pytest_gpuperf.cli import bisect as bisect_cli

    def nothing(bisection: object, chosen: object) -> tuple[AbResult, dict]:
        plan = AbPlan(cmd_a=("a",), cmd_b=("b",), pytest_args=("x.py",), out_dir=tmp_path / "out")
        return AbResult(plan=plan, stopped="max dropped"), {}

    monkeypatch.setattr(bisect_cli, "bisect", nothing)
    code = cli.main(["bisect", "--good", "a==1", "--bad", "a==2", "--out", str(tmp_path / "out"), "--", "x.py"])
    out, err = capsys.readouterr()
    assert code == 3, out + err
    assert "nothing to bisect" in out and "nothing compared: no pair completed (stopped: max dropped)" in err


# -- the proof: real builds, real sessions ---------------------------------------------------------------------


def wheel(folder: Path, name: str, version: str, source: str) -> None:
    """A pure-Python wheel written directly (no build backend, no network)."""
    info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": source,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: gpuperf-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = []
    for path, text in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(text.encode())}")
    files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
    with zipfile.ZipFile(folder / f"{name}-{version}-py3-none-any.whl", "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)


SLOW = """
FACTOR = {factor}

def work(n):
    total = 0
    for i in range(n * FACTOR):
        total += i * i
    return total
"""

WORKLOAD = """
import time
import pytest
import samepkg
import slowpkg

try:
    import six  # the real package, where it could be fetched: used, and changes nothing that is timed
except ImportError:
    six = None

@pytest.mark.perf
def test_work(perf):
    samples = []
    for repeat in range(7):  # the first 2 warm the interpreter up
        start = time.thread_time()
        slowpkg.work(samepkg.SIZE)
        if repeat >= 2:
            samples.append(time.thread_time() - start)
    perf.record("cpu_time", samples, unit="s", higher_is_better=False)
    # a fixed figure the package version scales: decided the same way on any machine
    perf.record("latency", [0.01 * slowpkg.FACTOR * j for j in (1.0, 1.0004, 0.9997, 1.0002, 0.9999)], unit="s",
                higher_is_better=False)
"""

REAL = ("six", "1.16.0", "1.17.0")
"""A tiny pure-Python package from PyPI, pinned differently by the two specs, where pip can fetch it."""


def real_wheels(folder: Path) -> tuple[str, str]:
    """Both versions' wheels of REAL into ``folder`` (pip's cache or the index: no retries, 5 s a connection,
    60 s at most); the extra pins, or
    ("", "") offline: the proof then runs on the local packages only."""
    import subprocess

    name, old, new = REAL
    for version in (old, new):
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "--retries", "0",
                "--timeout", "5", "-q", "-d",
                str(folder), f"{name}=={version}"]  # fmt: skip
        try:
            if subprocess.run(argv, capture_output=True, timeout=60).returncode != 0:
                return "", ""
        except subprocess.TimeoutExpired:
            return "", ""
    return f" {name}=={old}", f" {name}=={new}"


FAST = ["-q", "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-p", "no:xdist", "--gpuperf-device", "cpu"]


def test_bisect_names_the_slow_package_and_only_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for version, factor in (("1.0", 1), ("2.0", 3)):
        wheel(wheels, "slowpkg", version, SLOW.format(factor=factor))
        wheel(wheels, "samepkg", version, f"SIZE = 20000\nVERSION = {version!r}\n")
    real = real_wheels(wheels)
    (tmp_path / "test_bisect_workload.py").write_text(WORKLOAD)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    perf: a perf test\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    code = cli.main(
        ["bisect", "--good", "slowpkg==1.0 samepkg==1.0" + real[0], "--bad", "slowpkg==2.0 samepkg==2.0" + real[1],
         "--alpha", "0.4", "--min-pairs", "4", "--max-pairs", "5", "--out", "out", "--junitxml", "bisect.xml",
         "--", "test_bisect_workload.py",
         *FAST]
    )  # fmt: skip
    out, err = capsys.readouterr()
    assert code == 1, out + err
    verdicts = [line for line in out.splitlines() if line.startswith("test_bisect_workload.py::test_work")]
    assert len(verdicts) == 2, out
    for line in verdicts:
        others = "samepkg, six together:" if real[0] else "samepkg alone:"
        assert "comes with slowpkg 1.0 -> 2.0;" in line and others in line
        assert "samepkg 1.0" not in line
    # good vs bad and bad's slowpkg decide at 4 pairs; samepkg's unchanged latency needs 5 for SAME
    assert "4 build(s) (0 failed), 3 ab run(s), 0 unbuildable split(s), 26 session(s)" in out
    assert "step 1 " in err and "(split)" in err
    document = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert document["builds"] == 4 and document["sessions"] == 26 and document["ab_runs"] == 3
    assert document["inherited_warnings"] == {}  # the probe ran on each layered venv and found nothing
    assert {tuple(s["culprits"]) for s in document["searches"]} == {("slowpkg",)}
    rest = "samepkg,six" if real[0] else "samepkg"
    assert set(document["runs"]) == {f"{rest},slowpkg", rest, "slowpkg"}
    latency = next(s for s in document["searches"] if s["metric"] == "latency")
    assert latency["alone"]["rest"]["outcome"] == "SAME"
    assert f"{others} SAME (+0.0%)" in latency["verdict"]
    xml = (tmp_path / "bisect.xml").read_text()
    assert xml.count("<failure") == 2 and 'name="gpuperf.bisect.culprits" value="slowpkg"' in xml
    # each step's ab result is kept beside the search
    assert all((Path(run["out_dir"]) / "ab.json").is_file() for run in document["runs"].values())


# -- the bisection over the ab engine, with scripted builds and sessions (fast) --------------------------------


def scripted_stack(stack: dict[str, str]) -> tuple[str, ...]:
    if stack.get("b") == "2" and stack.get("d") == "1":
        raise BuildError("ERROR: ResolutionImpossible: b 2 needs d 2")
    return ("python:" + json.dumps(stack, sort_keys=True),)


class Sessions:
    """Each session's metric is 3x slower where component c is at version 2."""

    def __init__(self) -> None:
        self.count = 0
        self.profiled: list[dict[str, str]] = []

    def __call__(
        self, argv: list[str], *, log_file: Path, timeout: object, cwd: object, env: object
    ) -> tuple[int, float]:
        self.count += 1
        stack = json.loads(argv[0].removeprefix("python:"))
        log_file.write_text("session\n")
        value = 0.010 * (3.0 if stack.get("c") == "2" else 1.0) * (1 + 0.004 * math.sin(self.count * 1.7))
        document = {
            "schema": 1,
            "fingerprint": {"hardware_key": {"device": "cpu"}, "hardware_slug": "cpu-x", "stack": stack},
            "settings": {"threshold": 0.02},
            "results": [
                {"test": "t.py::test_x", "metric": "step_s", "unit": "s", "higher_is_better": False,
                 "samples": [value * j for j in (1.0, 1.0004, 0.9997)]},
            ],
        }  # fmt: skip
        Path(argv[argv.index("--gpuperf-results") + 1]).write_text(json.dumps(document))
        if "--gpuperf-profile" in argv:  # a profiled session: its matrix product runs 3x where c is at 2
            self.profiled.append(stack)
            calls = 3 if stack.get("c") == "2" else 1
            ops = [{"name": "aten::mm", "count": 7 * calls, "self_cpu_us": 140.0 * calls, "self_device_us": 0.0},
                   {"name": "aten::relu", "count": 7, "self_cpu_us": 30.0, "self_device_us": 0.0}]  # fmt: skip
            entry = {"activities": ["cpu"], "ops": ops, "implementations": [], "calls": 7}
            summary = {"schema": "gpuperf-profile/1", "notes": [], "tests": {"t.py::test_x": entry}}
            Path(argv[argv.index("--gpuperf-profile") + 1]).write_text(json.dumps(summary))
        return 0, 0.01


def test_bisection_over_the_ab_engine_skips_unbuildable_stacks(tmp_path: Path) -> None:
    from pytest_gpuperf.ab.bisection import Bisection, bisect
    from pytest_gpuperf.ab.model import AbPlan

    good = {"a": "1", "b": "1", "c": "1", "d": "1", "driver": "550"}
    bad = {"a": "2", "b": "2", "c": "2", "d": "2", "driver": "560"}
    base = AbPlan(cmd_a=(), cmd_b=(), pytest_args=("t.py",), out_dir=tmp_path)
    lines: list[str] = []
    sessions = Sessions()
    bisection = Bisection(
        good=good, bad=bad, out=tmp_path, base=base, builder=scripted_stack, runner=sessions, say=lines.append
    )
    whole, searches = bisect(bisection, None)
    assert whole.regressed()
    ((key, result),) = searches.items()
    assert key == ("t.py::test_x", "step_s") and result.culprits == {"c"}
    assert result.non_swappable == ["driver"]
    assert result.unbuildable == [frozenset({"a", "b"})]
    assert any("UNBUILDABLE" in line and "ResolutionImpossible" in line for line in lines)
    assert bisection.sessions == sessions.count > 0
    assert result.alone["rest"].outcome.value == "SAME", lines


def test_bisect_profile_profiles_only_the_culprits_step_and_keeps_its_diff(tmp_path: Path) -> None:
    from pytest_gpuperf.ab.bisection import Bisection, bisect, bisect_document
    from pytest_gpuperf.ab.model import AbPlan

    good, bad = {"a": "1", "c": "1"}, {"a": "2", "c": "2"}
    base = AbPlan(cmd_a=(), cmd_b=(), pytest_args=("t.py",), out_dir=tmp_path, profile=True)
    sessions = Sessions()
    bisection = Bisection(good=good, bad=bad, out=tmp_path, base=base, builder=scripted_stack, runner=sessions)
    whole, searches = bisect(bisection, None)
    (result,) = searches.values()
    assert result.culprits == {"c"} and whole.profile is None  # the good-vs-bad run is not the last step
    assert sessions.profiled == [good, {"a": "1", "c": "2"}]  # one session per side of the culprit's step
    [search] = bisect_document(bisection, 2, whole, searches)["searches"]
    assert search["profile"]["error"] is None and search["profile"]["diff"]["movers"] == ["aten::mm"]
    assert bisection.sessions == sessions.count
    from pytest_gpuperf.cli.bisect import last_step_lines

    lines = last_step_lines(bisection, searches)
    assert lines[0].startswith("last step ") and lines[1].startswith("t.py::test_x: aten::mm carries "), lines


def test_report_draws_a_bisection(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from pytest_gpuperf.ab.bisection import Bisection, bisect
    from pytest_gpuperf.ab.builders import CachedBuilder
    from pytest_gpuperf.ab.model import AbPlan
    from pytest_gpuperf.cli.bisect import _write_result

    good, bad = {"a": "1", "c": "1"}, {"a": "2", "c": "2"}
    base = AbPlan(cmd_a=(), cmd_b=(), pytest_args=("t.py",), out_dir=tmp_path)
    bisection = Bisection(good=good, bad=bad, out=tmp_path / "out", base=base, builder=scripted_stack,
                          runner=Sessions())  # fmt: skip
    whole, searches = bisect(bisection, None)
    _write_result(bisection, CachedBuilder(tmp_path / "envs"), whole, searches)
    assert cli.main(["report", str(tmp_path / "out"), "-o", str(tmp_path / "report.html")]) == 0
    page = (tmp_path / "report.html").read_text()
    assert "Bisection" in page and "comes with c 1 -&gt; 2; a alone: SAME" in page
    assert page.count("<tr>") >= 3  # the heading and a row per step


def test_bisection_writes_each_steps_ab_json_through_its_writer(tmp_path: Path) -> None:
    from pytest_gpuperf.ab.bisection import Bisection, bisect
    from pytest_gpuperf.ab.model import AB_SCHEMA, AbPlan

    written: list[tuple[Path, dict[str, Any]]] = []
    good, bad = {"a": "1", "c": "1"}, {"a": "2", "c": "2"}
    base = AbPlan(cmd_a=(), cmd_b=(), pytest_args=("t.py",), out_dir=tmp_path)
    bisection = Bisection(good=good, bad=bad, out=tmp_path, base=base, builder=scripted_stack, runner=Sessions(),
                          write=lambda path, document: written.append((path, document)))  # fmt: skip
    bisect(bisection, None)
    steps = [run.plan.out_dir / "ab.json" for run in bisection.runs.values() if not isinstance(run, str)]
    assert [path for path, _ in written] == steps and len(steps) >= 2
    assert all(document["schema"] == AB_SCHEMA for _, document in written)


def pinned_wheel(folder: Path, name: str, version: str, requires: str = "", source: str = "") -> None:
    """``wheel`` with a Requires-Dist line: a torch that pins its nccl exactly."""
    wheel(folder, name, version, source)
    if requires:
        path = folder / f"{name}-{version}-py3-none-any.whl"
        info = f"{name}-{version}.dist-info"
        with zipfile.ZipFile(path) as archive:
            files = {item: archive.read(item).decode() for item in archive.namelist() if not item.endswith("RECORD")}
        files[f"{info}/METADATA"] += f"Requires-Dist: {requires}\n"
        path.unlink()
        record = []
        for item, text in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{item},sha256={digest},{len(text.encode())}")
        files[f"{info}/RECORD"] = "\n".join([*record, f"{info}/RECORD,,"]) + "\n"
        with zipfile.ZipFile(path, "w") as archive:
            for item, text in files.items():
                archive.writestr(item, text)


ABI = """
import warnings
import numpy  # inherited from the running environment: 2.x there
if int(numpy.__version__.split(".")[0]) >= 2:  # what an old torch built for numpy 1.x says when imported
    warnings.warn("Failed to initialize NumPy: _ARRAY_API not found")
"""


def test_real_pip_conflict_names_its_depends_on_line_and_the_probe_names_an_inherited_numpy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Real layered venvs, real pip from local wheels: a torch-like package pinning its nccl exactly cannot be
    installed beside the other nccl, and the reason is pip's own "depends on" line, not its generic last line; a
    stack that builds but whose package warns under the inherited numpy is named before any session runs."""
    pytest.importorskip("numpy")
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    pinned_wheel(wheels, "ncclish", "1.0")
    pinned_wheel(wheels, "ncclish", "2.0")
    pinned_wheel(wheels, "torchish", "1.0", "ncclish==1.0", ABI)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    said: list[str] = []
    builder = CachedBuilder(tmp_path / "envs", log=said.append)
    with pytest.raises(BuildError) as raised:
        builder({"torchish": "1.0", "ncclish": "2.0"})
    assert "torchish 1.0 depends on ncclish==1.0" in str(raised.value), str(raised.value)
    assert "for help visit" not in str(raised.value)
    builder({"torchish": "1.0", "ncclish": "1.0"})
    assert builder.built == 2 and builder.failed == 1
    ((folder, found),) = builder.warnings.items()
    assert any("import torchish: UserWarning: Failed to initialize NumPy" in line and "numpy 2." in line
               and "inherited from" in line for line in found), found  # fmt: skip
    assert any("warning: " in line and "Failed to initialize NumPy" in line for line in said)


def test_unbuildable_splits_are_inseparable_and_counted_apart_from_ab_runs(tmp_path: Path) -> None:
    """torch B pins nccl Y and torch A pins nccl X: both mixed stacks fail to resolve, so the two components move
    together (inseparable, with the resolver's line), one ab run happened, and two splits could not be built."""
    from pytest_gpuperf.ab.bisect_search import verdict_line
    from pytest_gpuperf.ab.bisection import Bisection, bisect, bisect_document
    from pytest_gpuperf.ab.model import AbPlan

    def builder(stack: dict[str, str]) -> tuple[str, ...]:
        if (stack["b"] == "2") != (stack["c"] == "2"):
            raise BuildError(f"exit 1: b {stack['b']} depends on c=={stack['b']} (log build.log)")
        return scripted_stack(stack)

    good, bad = {"b": "1", "c": "1"}, {"b": "2", "c": "2"}
    base = AbPlan(cmd_a=(), cmd_b=(), pytest_args=("t.py",), out_dir=tmp_path)
    bisection = Bisection(good=good, bad=bad, out=tmp_path, base=base, builder=builder, runner=Sessions())
    whole, searches = bisect(bisection, None)
    ((_, result),) = searches.items()
    assert result.conclusion == "inseparable" and result.culprits == {"b", "c"}
    line = verdict_line("t", result, good, bad)
    assert "not separable" in line and "depends on c==" in line and "interaction" not in line
    assert bisection.ab_runs == 1 and bisection.unbuildable == 2
    assert bisection.counts(3, 2) == f"3 build(s) (2 failed), 1 ab run(s), 2 unbuildable split(s), " \
        f"{bisection.sessions} session(s)"  # fmt: skip
    document = bisect_document(bisection, 3, whole, searches, failed_builds=2)
    assert document["ab_runs"] == 1 and document["unbuildable_splits"] == 2
    assert document["searches"][0]["conclusion"] == "inseparable"


def test_a_build_template_with_a_bad_placeholder_is_bad_input(tmp_path: Path) -> None:
    from pytest_gpuperf.ab.builders import TemplateError

    with pytest.raises(TemplateError, match=r"bad placeholder .*use \{pins\} \{requirements\} \{dir\} \{python\}"):
        CachedBuilder(tmp_path, template="make {nope}")({"a": "1"})
