"""Baseline files: naming, validation, atomic writes and merging concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import re
from pathlib import Path

import pytest

from pytest_gpuperf.core.store.baselines import (
    BaselineStore,
    Curve,
    MetricRun,
    NewCurve,
    NewMetric,
    StoreError,
    entry_key,
    module_file_name,
    read_document,
)

KEY = {"device": "cpu", "accelerator": None, "cpu": {"model": "x", "cores": 2, "ram_gib": 4}, "nodes": 1}
STACK = {"torch": "2.13.0"}


def new_metric(test: str, name: str, samples: list[float], stack: dict[str, str] = STACK) -> NewMetric:
    return NewMetric(
        test=test,
        name=name,
        unit="s",
        higher_is_better=False,
        run=MetricRun(samples=samples, stack=stack, date="2026-01-01", summary={}),
    )


@pytest.mark.parametrize(
    ("nodeid", "expected"),
    [
        ("suites/test_micro.py::test_gemm[bf16]", r"suites__test_micro\.json"),
        # paths the readable form changes keep it and add a hash of the exact path (injective, test_store_failures)
        ("../../etc/passwd::t", r"etc__passwd~[0-9a-f]{16}\.json"),
        ("a/./b\\c d.py::t", r"a__b__c_d~[0-9a-f]{16}\.json"),
        ("/abs/x.py::t", r"abs__x~[0-9a-f]{16}\.json"),
    ],
)
def test_module_file_names_never_leave_the_folder(nodeid: str, expected: str) -> None:
    assert re.fullmatch(expected, module_file_name(nodeid))


def test_entry_key_is_the_part_after_the_module() -> None:
    assert entry_key("suites/test_x.py::TestA::test_b[1-2]") == "TestA::test_b[1-2]"


def test_save_then_read_back(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    store.save(
        [new_metric("m.py::t", "time", [1.0, 2.0, 3.0])],
        [NewCurve(test="m.py::t", name="loss", curve=Curve(steps=[0, 1], values=[2.0, 1.0], stack=STACK, date="d"))],
        keep_runs=3,
    )
    baseline = store.metric("m.py::t", "time")
    assert baseline is not None and baseline.runs[0].samples == [1.0, 2.0, 3.0]
    assert store.curves("m.py::t", "loss")[0].values == [2.0, 1.0]
    text = (tmp_path / "cpu-x" / "m.json").read_text()
    assert text == json.dumps(json.loads(text), indent=1, sort_keys=True) + "\n"  # diffable: sorted, indented


def test_sibling_runs_are_the_same_metric_of_the_test_function_s_other_parameters(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    store.save(
        [
            new_metric("m.py::test_gemm[bf16]", "tflops", [1.0, 1.1]),
            new_metric("m.py::test_gemm[fp32]", "tflops", [2.0, 2.1]),
            new_metric("m.py::test_gemm[fp32]", "time", [5.0]),  # another metric
            new_metric("m.py::test_gemm_other[fp32]", "tflops", [6.0]),  # another function
            new_metric("n.py::test_gemm[fp8]", "tflops", [7.0]),  # another module
        ],
        [],
        keep_runs=3,
    )
    store.save([new_metric("m.py::test_gemm[fp32]", "tflops", [2.2, 2.3])], [], keep_runs=3)
    assert store.sibling_runs("m.py::test_gemm[bf16]", "tflops") == [[[2.0, 2.1], [2.2, 2.3]]]
    assert store.sibling_runs("m.py::test_gemm[fp32]", "tflops") == [[[1.0, 1.1]]]
    assert store.sibling_runs("m.py::test_gemm[fp16]", "tflops") == [[[1.0, 1.1]], [[2.0, 2.1], [2.2, 2.3]]]
    assert store.sibling_runs("m.py::test_gemm[fp32]", "missing") == []


def test_same_stack_appends_runs_up_to_the_limit_new_stack_replaces(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    for value in (1.0, 2.0, 3.0):
        store.save([new_metric("m.py::t", "time", [value] * 3)], [], keep_runs=2)
    assert [run.samples[0] for run in store.metric("m.py::t", "time").runs] == [2.0, 3.0]
    store.save([new_metric("m.py::t", "time", [9.0] * 3, stack={"torch": "2.14.0"})], [], keep_runs=2)
    assert [run.samples[0] for run in store.metric("m.py::t", "time").runs] == [9.0]


def _writer(root: str, worker: int) -> None:
    store = BaselineStore(Path(root), "cpu-x", KEY)
    for index in range(10):
        store.save([new_metric(f"m.py::t{worker}_{index}", "time", [1.0, 2.0, 3.0])], [], keep_runs=5)


def test_concurrent_writers_lose_nothing(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_writer, args=(str(tmp_path), n)) for n in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    document = read_document(tmp_path / "cpu-x" / "m.json")
    assert len(document["tests"]) == 40
    assert not list((tmp_path / "cpu-x").glob("*.tmp"))


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ('{"schema": 1, "hardware_key": {}, "tests": {', "truncated, the JSON ends early"),
        ('{"schema": 99, "hardware_key": {}, "tests": {}}', "schema version 99"),
        ("[1, 2]", "top level is a list, not an object"),
        (
            '{"schema": 1, "hardware_key": {}, "tests": {"t": {"metrics": {"m": {"unit": "s", '
            '"higher_is_better": false, "runs": [{"samples": [NaN], "summary": {}, "stack": {}, "date": ""}]}}}}}',
            "not valid JSON",
        ),
        (
            '{"schema": 1, "hardware_key": {}, "tests": {"t": {"metrics": {"m": {"unit": "s", '
            '"higher_is_better": false, "runs": [{"samples": ["1"], "summary": {}, "stack": {}, "date": ""}]}}}}}',
            "finite numbers",
        ),
        (
            '{"schema": 1, "hardware_key": {}, "tests": {"t": {"metrics": {"m": {"unit": "s", "higher_is_better": '
            'false, "runs": [{"samples": [1], "summary": {}, "stack": {}, "date": "", "context": [1]}]}}}}}',
            "'context' is a list, not an object",
        ),
        (
            '{"schema": 1, "hardware_key": {}, "tests": {"t": {"metrics": {"m": {"unit": "s", "higher_is_better": '
            'false, "runs": [{"samples": [1], "summary": {}, "stack": {}, "date": "", "clocks": {}}]}}}}}',
            "unknown fields clocks",
        ),
    ],
)
def test_bad_files_are_named_and_left_alone(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "cpu-x" / "m.json"
    path.parent.mkdir()
    path.write_text(content)
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    with pytest.raises(StoreError, match=problem) as raised:
        store.save([new_metric("m.py::t", "time", [1.0, 2.0, 3.0])], [], keep_runs=2)
    assert str(path) in str(raised.value)
    assert path.read_text() == content


def test_unsafe_slug_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        BaselineStore(tmp_path, "../x", KEY)


def test_run_context_is_stored_and_read_back_and_absent_when_empty(tmp_path: Path) -> None:
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    telemetry = {"telemetry": {"sm_clock_mhz_median": 1980.0, "throttled": False}}
    with_context = NewMetric(
        test="m.py::t",
        name="time",
        unit="s",
        higher_is_better=False,
        run=MetricRun(samples=[1.0, 2.0, 3.0], stack=STACK, date="d", summary={}, context=telemetry),
    )
    store.save([with_context, new_metric("m.py::u", "time", [1.0, 2.0, 3.0])], [], keep_runs=3)
    assert store.metric("m.py::t", "time").runs[0].context == telemetry
    assert store.metric("m.py::u", "time").runs[0].context == {}
    document = read_document(tmp_path / "cpu-x" / "m.json")
    assert "context" not in document["tests"]["u"]["metrics"]["time"]["runs"][0]


def test_files_written_before_run_context_existed_stay_valid(tmp_path: Path) -> None:
    path = tmp_path / "cpu-x" / "m.json"
    path.parent.mkdir()
    path.write_text(
        '{"schema": 1, "hardware_key": {}, "tests": {"t": {"metrics": {"m": {"unit": "s", '
        '"higher_is_better": false, "runs": [{"samples": [1, 2, 3], "summary": {}, "stack": {}, '
        '"date": ""}]}}}}}'
    )
    store = BaselineStore(tmp_path, "cpu-x", KEY)
    assert store.metric("m.py::t", "m").runs[0].context == {}
    store.save([new_metric("m.py::t", "m", [1.0, 2.0, 3.0], stack={})], [], keep_runs=3)
    assert len(store.metric("m.py::t", "m").runs) == 2


def test_written_files_follow_the_umask_not_mkstemp(tmp_path: Path) -> None:
    import os
    import stat

    from pytest_gpuperf.core.store.baselines import write_atomic

    previous = os.umask(0o022)
    try:
        write_atomic(tmp_path / "b.json", {"x": 1})
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o644
