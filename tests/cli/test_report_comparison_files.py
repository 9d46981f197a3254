"""`gpuperf report` on hand-edited `ab.json` / `bisect.json` (issue 38): every malformed shape is one line on
stderr and exit 2, as a malformed results or JUnit file is; a valid one at the limits still draws."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from pytest_gpuperf.cli import main as cli

pytest.importorskip("matplotlib")

AB = {
    "schema": "gpuperf-ab/2",
    "created": "2026-12-05T10:00:00+00:00",
    "command": {"a": ["python"], "b": ["env", "X=1", "python"], "pytest_args": ["t.py"]},
    "seed": 0,
    "rules": {"threshold": 0.02, "alpha": 0.01},
    "order": ["AB", "BA"],
    "stopped": "max pairs",
    "stack_changes": ["torch 2.13.0 -> 2.14.1"],
    "metrics": [
        {
            "test": "t.py::test_x",
            "metric": "step_s",
            "unit": "s",
            "verdict": "REGRESSED",
            "a_median": 0.01,
            "b_median": 0.0105,
            "ratio": 0.952,
            "interval": [0.93, 0.97],
            "pairs": 2,
            "components": ["torch 2.13.0 -> 2.14.1"],
            "log_ratios": [-0.05, -0.048],
        }
    ],
    "pairs": [],
}
BISECT = {
    "schema": "gpuperf-bisect/1",
    "good": {"torch": "2.13.0"},
    "bad": {"torch": "2.14.1"},
    "builds": 2,
    "sessions": 8,
    "good_vs_bad": "1 REGRESSED",
    "searches": [
        {
            "test": "t.py::test_x",
            "metric": "step_s",
            "verdict": "t.py::test_x step_s: torch",
            "steps": [
                {
                    "index": 1,
                    "purpose": "full",
                    "swapped": ["torch"],
                    "outcome": "REGRESSED",
                    "change": -0.05,
                    "detail": None,
                }
            ],  # fmt: skip
        }
    ],
    "runs": {},
}
DEEP = '{"schema": "gpuperf-ab/2", "metrics": [], "x": ' + "[" * 100_000 + "]" * 100_000 + "}"


def edited(base: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``base`` with the field at ``path`` ("metrics.0.log_ratios") set to ``value``."""
    document = copy.deepcopy(base)
    *parents, last = path.split(".")
    target: Any = document
    for part in parents:
        target = target[int(part)] if isinstance(target, list) else target[part]
    target[int(last) if isinstance(target, list) else last] = value
    return document


AB_SHAPES = [
    ("metrics.0", 1, "metrics[0] is a number, not an object"),
    ("metrics", "x", "'metrics' is a string, not a list"),
    ("metrics.0.log_ratios", [1000], "metrics[0].log_ratios[0] is 1000, not a pair's log ratio"),
    ("metrics.0.log_ratios", 5, "'log_ratios' is a number, not a list"),
    ("metrics.0.log_ratios", ["x"], "metrics[0].log_ratios[0] is 'x'"),
    ("rules", 5, "rules is a number, not an object"),
    ("rules.threshold", "x", "rules.threshold is 'x', not a fraction"),
    ("command.a", [1, 2], "command.a[0] is 1, not a string"),
    ("command", [], "command is a list, not an object"),
    ("order", 5, "order is a number, not a list of strings"),
    ("stack_changes", [None], "stack_changes[0] is None, not a string"),
    ("stopped", 5, "stopped is a number, not a string"),
    ("metrics.0.test", 5, "'test' is a number, not a non-empty string"),
    ("metrics.0.verdict", None, "'verdict' is missing, not a non-empty string"),
    ("metrics.0.ratio", "x", "metrics[0].ratio is 'x', not a positive number"),
    ("metrics.0.ratio", -1, "metrics[0].ratio is -1, not a positive number"),
    ("metrics.0.ratio", 1e300, "metrics[0].ratio is 1e+300, not a positive number"),
    ("metrics.0.a_median", [1], "metrics[0].a_median is [1]"),
    ("metrics.0.interval", 5, "metrics[0].interval is 5, not a list of two bounds"),
    ("metrics.0.interval", [1], "metrics[0].interval is [1], not a list of two bounds"),
    ("metrics.0.interval", ["x", 1], "metrics[0].interval (low) is 'x'"),
    ("metrics.0.pairs", "x", "metrics[0].pairs is 'x', not a count of pairs"),
    ("metrics.0.components", 5, "metrics[0].components is a number, not a list of strings"),
]
BISECT_SHAPES = [
    ("searches", 5, "'searches' is a number, not a list"),
    ("searches.0", 1, "searches[0] is a number, not an object"),
    ("searches.0.steps", 5, "'steps' is a number, not a list"),
    ("searches.0.steps.0", "x", "searches[0].steps[0] is a string, not an object"),
    ("searches.0.steps.0.swapped", 5, "searches[0].steps[0].swapped is a number, not a list of strings"),
    ("searches.0.steps.0.index", "1", "searches[0].steps[0].index is '1', not a step number"),
    ("searches.0.steps.0.change", "x", "searches[0].steps[0].change is 'x', not a number"),
    ("searches.0.test", [1], "'test' is a list, not a non-empty string"),
    ("good", 5, "good is a number, not an object"),
    ("good", {"torch": 1}, "good pins 'torch' to a number, not a version string"),
    ("builds", "x", "builds is 'x', not a count"),
    ("good_vs_bad", 5, "good_vs_bad is a number, not a string"),
]


def report(tmp_path: Path, path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli.main(["report", str(path), "-o", str(tmp_path / "report.html")])
    return code, capsys.readouterr().err


def refused(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("path", "value", "message"), AB_SHAPES, ids=[f"{p}={v!r}" for p, v, _ in AB_SHAPES])
def test_a_malformed_ab_json_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any, message: str
) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ab.json").write_text(json.dumps(edited(AB, path, value)))
    line = refused(*report(tmp_path, tmp_path / "out", capsys))
    assert line.startswith(f"gpuperf report: error: {tmp_path / 'out' / 'ab.json'}: a gpuperf ab result, but "), line
    assert message in line and line.endswith("give the ab.json gpuperf ab wrote"), line


@pytest.mark.parametrize(("path", "value", "message"), BISECT_SHAPES, ids=[f"{p}={v!r}" for p, v, _ in BISECT_SHAPES])
def test_a_malformed_bisect_json_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], path: str, value: Any, message: str
) -> None:
    (tmp_path / "bisect.json").write_text(json.dumps(edited(BISECT, path, value)))
    line = refused(*report(tmp_path, tmp_path / "bisect.json", capsys))
    assert line.startswith(f"gpuperf report: error: {tmp_path / 'bisect.json'}: a gpuperf bisect result, but "), line
    assert message in line, line


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (DEEP, "nested too deeply"),
        (json.dumps(AB).replace("-0.048", "NaN"), "NaN is not a number"),
        (json.dumps(AB).replace('"seed": 0', '"seed": 0, "seed": 1'), "key 'seed' appears twice"),
        ("[1, 2]", "the top level is a list, not a gpuperf ab or bisect result object"),
        (json.dumps(AB)[:-5], "truncated"),
    ],
    ids=["100k-nesting", "nan", "duplicate-key", "a-list", "truncated"],
)
def test_ab_json_that_is_not_strict_json_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    (tmp_path / "ab.json").write_text(text)
    line = refused(*report(tmp_path, tmp_path / "ab.json", capsys))
    assert line.startswith(f"gpuperf report: error: {tmp_path / 'ab.json'}: ") and message in line, line


def test_a_valid_ab_json_at_the_limits_still_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    document = edited(AB, "metrics.0.log_ratios", [460.0, -460.0, 0.0])
    document["metrics"][0]["interval"] = [None, None]
    (tmp_path / "ab.json").write_text(json.dumps(document))
    (tmp_path / "bisect.json").write_text(json.dumps(BISECT))
    code = cli.main(
        ["report", str(tmp_path / "ab.json"), str(tmp_path / "bisect.json"), "-o", str(tmp_path / "r.html")]
    )
    assert code == 0, capsys.readouterr().err
    page = (tmp_path / "r.html").read_text()
    assert "A/B comparison" in page and "Bisection" in page and "torch 2.13.0 -&gt; 2.14.1" in page


def test_an_ab_json_with_profiled_sides_draws_the_whole_diff_and_a_mangled_one_names_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_gpuperf.core.record.profiling import kernel_diff

    def side(mm_calls: int) -> dict[str, Any]:
        ops = [{"name": "aten::mm", "count": mm_calls, "self_cpu_us": 20.0 * mm_calls, "self_device_us": 0.0},
               {"name": "aten::relu", "count": 7, "self_cpu_us": 35.0, "self_device_us": 0.0}]  # fmt: skip
        return {"tests": {"t.py::test_x": {"activities": ["cpu"], "ops": ops, "implementations": [], "calls": 7}}}

    diff = kernel_diff(side(7), side(21), {"t.py::test_x": 1})
    (tmp_path / "ab.json").write_text(json.dumps({**AB, "profile": {"files": {}, "error": None, "diff": diff}}))
    assert cli.main(["report", str(tmp_path / "ab.json"), "-o", str(tmp_path / "r.html")]) == 0
    page = (tmp_path / "r.html").read_text()
    assert "t.py::test_x: aten::mm carries 100% of the profiled slowdown" in page
    assert page.count('<td class="">aten::mm</td>') == 1 and page.count('<td class="">aten::relu</td>') == 1
    mangled = {"error": None, "diff": {"tests": {"t.py::test_x": {"movers": ["aten::mm"], "ops": 5}}}}
    (tmp_path / "ab.json").write_text(json.dumps({**AB, "profile": mangled}))
    assert cli.main(["report", str(tmp_path / "ab.json"), "-o", str(tmp_path / "r.html")]) == 0, capsys.readouterr()
    assert "aten::mm" not in (tmp_path / "r.html").read_text()
