"""What a workload records is what a file can hold, or its own test fails at the call (issue 38, items 1, 2, 13).

numpy and torch numbers in a context (peak memory, token counts) are made Python numbers; a set, an array or an
object is refused where it is recorded, naming the test, the metric and the key. A unit, a flag, a curve's name
or step that the baseline files would refuse is refused the same way, so no later session meets it on disk.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from session_settings import cpu_settings

from pytest_gpuperf.core.record.perf import Perf
from pytest_gpuperf.core.store.baselines import read_document

SAMPLES = [1.0, 1.01, 0.99, 1.0, 1.02]


def perf() -> Perf:
    return Perf(
        nodeid="m.py::t",
        device="cpu",
        settings=cpu_settings(Path(".")),
        noise_limit=0.1,
    )


def run_project(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    pytester.makeini("[pytest]\naddopts = -p no:cacheprovider\n")
    return pytester.runpytest("-m", "perf", "--gpuperf-device", "cpu", *args)


def saved_tests(pytester: pytest.Pytester) -> set[str]:
    return {test for path in (pytester.path / "baselines").glob("*/*.json") for test in read_document(path)["tests"]}


def results(pytester: pytest.Pytester) -> dict[tuple[str, str], dict[str, Any]]:
    document = json.loads((pytester.path / "run.json").read_text())
    return {(entry["test"].split("::")[1], entry["metric"]): entry for entry in document["results"]}


# -- item 1: a context's values -----------------------------------------------------------------------------------


def test_numpy_scalars_in_a_context_become_python_numbers() -> None:
    recorder = perf()
    context = {
        "peak": {"mib": np.int64(7), "ratio": np.float32(0.5)},
        "tokens": [np.int32(3), np.uint8(4)],
        "zero_d": np.array(2.5),
        "flag": np.bool_(True),
        "pair": (1, np.float64(2.0)),
        np.str_("name"): np.str_("text"),
    }
    record = recorder.record("t", SAMPLES, unit="s", higher_is_better=False, context=context)
    assert record.context == {
        "peak": {"mib": 7, "ratio": 0.5},
        "tokens": [3, 4],
        "zero_d": 2.5,
        "flag": True,
        "pair": [1, 2.0],
        "name": "text",
    }
    assert type(record.context["peak"]["mib"]) is int and type(record.context["zero_d"]) is float
    assert type(record.context["flag"]) is bool and type(record.context["name"]) is str
    json.dumps(record.context, allow_nan=False)


def test_torch_scalars_in_a_context_become_python_numbers() -> None:
    torch = pytest.importorskip("torch")
    record = perf().record(
        "t",
        torch.tensor(SAMPLES),
        unit="s",
        higher_is_better=False,
        context={"peak": torch.tensor(3), "loss": torch.tensor(1.5, dtype=torch.bfloat16)},
    )
    assert record.context == {"peak": 3, "loss": 1.5} and type(record.context["peak"]) is int
    assert record.samples == pytest.approx(SAMPLES) and all(type(value) is float for value in record.samples)
    with pytest.raises(ValueError, match=r"context 'x' is an array of shape \(2,\) \(Tensor\).*x.tolist\(\)"):
        perf().record("t", SAMPLES, unit="s", higher_is_better=False, context={"x": torch.ones(2)})


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ({1, 2}, r"context 'bad' is a set, which no gpuperf file can hold; record sorted\(x\)"),
        (np.arange(3), r"context 'bad' is an array of shape \(3,\) \(ndarray\)"),
        (object(), r"context 'bad' is a object"),
        ({3: "x"}, r"context 'bad' has the key 3 \(int\); keys must be text"),
        (10**120, r"context 'bad' is an integer of more than 100 digits"),
        (np.complex64(1j), r"context 'bad' is a complex64"),
    ],
)
def test_a_value_no_file_can_hold_is_refused_at_the_call(value: object, words: str) -> None:
    recorder = perf()
    with pytest.raises(ValueError, match=r"perf.record\('t'\) in m.py::t: " + words):
        recorder.record("t", SAMPLES, unit="s", higher_is_better=False, context={"bad": value})
    assert recorder.metrics == []


def test_a_context_nested_beyond_the_bound_is_refused() -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(100):
        inner["a"] = {}
        inner = inner["a"]
    with pytest.raises(ValueError, match="nested more than 64 levels"):
        perf().record("t", SAMPLES, unit="s", higher_is_better=False, context={"deep": deep})
    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    with pytest.raises(ValueError, match="nested more than 64 levels"):
        perf().record("t", SAMPLES, unit="s", higher_is_better=False, context=cycle)


def test_a_non_finite_numpy_value_is_a_diverged_measurement() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"metric 't' context 'peak' is not a finite number"):
        perf().record("t", SAMPLES, unit="s", higher_is_better=False, context={"peak": np.float32("nan")})


CONTEXTS = f"""
import numpy as np
import pytest

@pytest.mark.perf
def test_numpy(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=False,
                context={{"peak_mib": np.int64(7), "ratio": np.float32(0.5)}})
    perf.metric("t").context["tokens"] = np.int64(3)  # a workload's figure, added after recording

@pytest.mark.perf
def test_set_at_the_call(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=False, context={{"ranks": {{0, 1}}}})

@pytest.mark.perf
def test_set_added_later(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=False)
    perf.metric("t").context["ranks"] = {{0, 1}}

@pytest.mark.perf
def test_array_added_later(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=False)
    perf.metric("t").context["per_step"] = np.ones(4)

@pytest.mark.perf
def test_fine(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=False)
"""


def test_one_tests_value_never_costs_another_tests_save(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_contexts=CONTEXTS)
    result = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=2, failed=3)
    result.stdout.fnmatch_lines(
        [
            "*perf.record('t') in test_contexts.py::test_set_at_the_call: context 'ranks' is a set, which no "
            "gpuperf file can hold; record sorted(x)",
            "gpuperf: test_contexts.py::test_set_added_later: metric 't' context 'ranks' is a set, *; record "
            "sorted(x) (a value added after perf.record)",
            "gpuperf: test_contexts.py::test_array_added_later: metric 't' context 'per_step' is an array of "
            "shape (4,) (ndarray)*",
        ]
    )
    assert "not JSON serializable" not in result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert saved_tests(pytester) == {"test_numpy", "test_fine"}
    found = results(pytester)
    assert set(found) == {("test_numpy", "t"), ("test_fine", "t")}
    context = found[("test_numpy", "t")]["context"]
    assert (context["peak_mib"], context["ratio"], context["tokens"]) == (7, 0.5, 3)
    [path] = (pytester.path / "baselines").glob("*/*.json")
    [run] = read_document(path)["tests"]["test_numpy"]["metrics"]["t"]["runs"]
    assert (run["context"]["peak_mib"], run["context"]["tokens"]) == (7, 3)
    again = run_project(pytester, "-k", "numpy or fine")  # the saved files serve the next session
    again.assert_outcomes(passed=2)


# -- item 2: the store's rules, at the call -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keywords", "words"),
    [
        ({"unit": 5}, r"'unit' is a number, not a non-empty string"),
        ({"unit": ""}, r"'unit' is a string, not a non-empty string"),
        ({"unit": ["s"]}, r"'unit' is a list, not a non-empty string"),
        ({"higher_is_better": 1}, r"'higher_is_better' is a number, not true/false"),
        ({"higher_is_better": "yes"}, r"'higher_is_better' is a string, not true/false"),
        ({"rounds": 0}, r"'rounds' is 0, not a whole number >= 1"),
        ({"unjudgeable": 5}, r"'unjudgeable' is a number, not a non-empty string"),
    ],
)
def test_a_field_the_store_would_refuse_is_refused_at_the_call(keywords: dict[str, Any], words: str) -> None:
    recorder = perf()
    arguments: dict[str, Any] = {"unit": "s", "higher_is_better": False, **keywords}
    with pytest.raises(ValueError, match=r"perf.record\('t'\) in m.py::t: " + words):
        recorder.record("t", SAMPLES, **arguments)
    assert recorder.metrics == []


def test_measure_refuses_a_unit_before_measuring() -> None:
    calls: list[int] = []
    with pytest.raises(ValueError, match=r"perf.measure\('t'\) in m.py::t: 'unit' is a number, not a non-empty"):
        perf().measure("t", lambda: calls.append(1), unit=5, warmup=0, repeats=3)  # type: ignore[arg-type]
    assert calls == []


def test_numpy_flags_and_units_are_taken() -> None:
    flag: Any = np.bool_(True)  # what a workload's own comparison gives
    record = perf().record("t", np.array(SAMPLES), unit=np.str_("s"), higher_is_better=flag)
    assert (record.unit, record.higher_is_better) == ("s", True) and type(record.higher_is_better) is bool


@pytest.mark.parametrize(
    ("name", "steps", "values", "words"),
    [
        ("c", [10**200, 10**201], [1.0, 2.0], r"'steps\[0\]' is an integer of more than 100 digits"),
        ("c", [1e150, 2e150], [1.0, 2.0], r"steps\[0\] is 1e\+150; steps must be whole numbers of at most 100"),
        ("c", [0.5, 1.5], [1.0, 2.0], r"steps\[0\] is 0.5; steps must be whole numbers"),
        ("c", [0, 1], [1.0, "x"], r"values\[1\] holds 'x', not a number"),
        ("c", [0, 1], [1.0, {1}], r"values\[1\]' is a set"),
        (7, [0, 1], [1.0, 2.0], r"the curve's name must be a non-empty string, got 7"),
        ("", [0, 1], [1.0, 2.0], r"the curve's name must be a non-empty string, got ''"),
    ],
)
def test_a_curve_the_store_would_refuse_is_refused_at_the_call(
    name: Any, steps: list[Any], values: list[Any], words: str
) -> None:
    recorder = perf()
    with pytest.raises(ValueError, match=r"perf.record_curve\(.*\) in m.py::t: .*" + words):
        recorder.record_curve(name, steps, values)
    assert recorder.curves == []


def test_numpy_steps_and_values_are_taken() -> None:
    record = perf().record_curve("loss", np.arange(3), np.array([3.0, 2.0, 1.5], dtype=np.float32))
    assert (record.steps, record.values) == ([0, 1, 2], [3.0, 2.0, 1.5])
    assert all(type(step) is int for step in record.steps)


FIELDS = f"""
import pytest

@pytest.mark.perf
def test_bad_unit(perf):
    perf.record("t", {SAMPLES}, unit=5, higher_is_better=False)

@pytest.mark.perf
def test_bad_flag(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=1)

@pytest.mark.perf
def test_bad_curve(perf):
    perf.record_curve("c", [10**200, 10**201], [1.0, 2.0])

@pytest.mark.perf
def test_curve_named_7(perf):
    perf.record_curve(7, [0, 1], [1.0, 2.0])

@pytest.mark.perf
def test_fine(perf):
    perf.record("t", {SAMPLES}, unit="s", higher_is_better=False)
    perf.record_curve("loss", [0, 1], [2.0, 1.0])
"""


def test_nothing_the_store_refuses_reaches_disk_and_the_next_session_runs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_fields=FIELDS)
    first = run_project(pytester, "--gpuperf-save", "--gpuperf-results", "run.json")
    first.assert_outcomes(passed=1, failed=4)
    first.stdout.fnmatch_lines(["*perf.record('t') in test_fields.py::test_bad_unit: 'unit' is a number*"])
    assert saved_tests(pytester) == {"test_fine"}
    assert set(results(pytester)) == {("test_fine", "t")}
    second = run_project(pytester, "-k", "fine", "--gpuperf-results", "run.json")
    second.assert_outcomes(passed=1)
    assert second.ret == pytest.ExitCode.OK


# -- item 13: a metric of more samples than the bootstrap resamples whole -------------------------------------


def test_writing_a_metric_above_the_bootstrap_bound_warns(pytester: pytest.Pytester) -> None:
    from pytest_gpuperf.core.stats.unpaired import BOOTSTRAP_SAMPLES

    pytester.makepyfile(
        test_many=f"""
        import pytest
        @pytest.mark.perf
        def test_every_step(perf):
            perf.record("step_s", [1.0 + (i % 7) / 1000 for i in range({BOOTSTRAP_SAMPLES + 1})], unit="s",
                        higher_is_better=False)
        @pytest.mark.perf
        def test_few(perf):
            perf.record("t", {SAMPLES}, unit="s", higher_is_better=False)
        """
    )
    result = run_project(pytester, "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            f"*GpuperfSamplesWarning: gpuperf: 1 metric(s) hold more than {BOOTSTRAP_SAMPLES} samples: "
            f"test_many.py::test_every_step 'step_s' ({BOOTSTRAP_SAMPLES + 1}); *"
        ]
    )
    quiet = run_project(pytester, "-k", "few", "--gpuperf-results", "run.json")
    quiet.assert_outcomes(passed=1)
    assert "GpuperfSamplesWarning" not in quiet.stdout.str()


def test_the_bootstrap_of_a_large_run_is_bounded_and_agrees_with_the_whole_one() -> None:
    import tracemalloc

    from pytest_gpuperf.core.stats import unpaired as stats

    rng = np.random.default_rng(1)
    rules = stats.Rules(threshold=0.02, resamples=300)
    base = [np.exp(rng.normal(0.0, 0.05, 20_000)), np.exp(rng.normal(0.0, 0.05, 20_000))]
    now = np.exp(rng.normal(0.01, 0.05, 20_000))
    tracemalloc.start()
    bounded = stats.ratio_interval(now, base, 0.0, higher_is_better=False, rules=rules)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 40 << 20, peak  # whole resamples of one 20k-sample run: 300 x 20k draws and indices, 96 MB
    whole = _whole_interval(now, base, rules)
    width, whole_width = bounded[1] - bounded[0], whole[1] - whole[0]
    assert abs(width / whole_width - 1) < 0.25, (bounded, whole)
    assert abs((bounded[0] + bounded[1]) / 2 - (whole[0] + whole[1]) / 2) < whole_width / 4


def _whole_interval(now: np.ndarray, base: list[np.ndarray], rules: Any) -> tuple[float, float]:
    """ratio_interval as it was before the bound: every resample whole."""
    rng = np.random.default_rng(rules.seed)
    b = rules.resamples
    current = np.median(rng.choice(now, size=(b, now.size)), axis=1)
    per_run = np.stack([np.median(rng.choice(run, size=(b, run.size)), axis=1) for run in base], axis=1)
    per_run = np.take_along_axis(per_run, rng.integers(0, len(base), size=(b, len(base))), axis=1)
    log_ratio = -(np.log(current) - np.log(np.median(per_run, axis=1)))
    low, high = np.quantile(log_ratio, [0.025, 0.975])
    return float(np.exp(low)), float(np.exp(high))
