"""Operator profiles compared (core/record/profiling.py): oneDNN's verbose lines as torch 2.13 CPU prints them,
the diff of two sides ranked by share of the test's change, and movers named only for a decided change."""

from __future__ import annotations

from typing import Any

from pytest_gpuperf.core.record.profiling import (
    kernel_diff,
    mixed_note,
    mover_lines,
    onednn_implementations,
    stored_diff,
    stored_lines,
)

# Printed by torch 2.13.0+cpu (oneDNN v3.12.0) for conv2d of an 8x64x56x56 input, contiguous then channels-last
VERBOSE = "\n".join(
    [
        "onednn_verbose,v1,info,oneDNN v3.12.0 (commit 80afa71049cd69a3df32adcccb623b12cd7baa22)",
        "onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 "
        "dst:f32::blocked:ABcd16b16a::f0,attr-scratchpad:user,,64x64x3x3,41.856",
        *[
            "onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx512_core,forward_training,"
            "src:f32:a:blocked:aBcd16b::f0 wei:f32:a:blocked:ABcd16b16a::f0 bia:undef::undef::: "
            "dst:f32:a:blocked:aBcd16b::f0,attr-scratchpad:user,alg:convolution_direct,"
            f"mb8_ic64oc64_ih56oh56kh3sh1dh0ph1_iw56ow56kw3sw1dw0pw1,{ms}"
            for ms in ("12.5", "11.5")
        ],
        "some other line a test printed",
    ]
)
CONV = "mb8_ic64oc64_ih56oh56kh3sh1dh0ph1_iw56ow56kw3sw1dw0pw1"


def op(name: str, count: int, us: float) -> dict[str, Any]:
    return {"name": name, "count": count, "self_cpu_us": us, "self_device_us": 0.0}


def side(*ops: dict[str, Any], implementations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"tests": {"t.py::test_x": {"activities": ["cpu"], "ops": list(ops), "implementations": implementations
                                       or []}}, "notes": []}  # fmt: skip


def test_onednn_exec_lines_become_implementations_per_primitive_and_problem() -> None:
    found = onednn_implementations(VERBOSE)
    conv = next(row for row in found if row["primitive"] == "convolution")
    assert conv == {"primitive": "convolution", "problem": CONV, "implementation": "jit:avx512_core", "count": 2,
                    "ms": 24.0}  # fmt: skip
    assert [row["primitive"] for row in found] == ["reorder", "convolution"]  # by time
    assert onednn_implementations("") == []


def test_the_operator_made_slower_is_ranked_first_with_its_share() -> None:
    a = side(op("aten::mm", 10, 1000.0), op("aten::add", 10, 200.0), op("aten::relu", 10, 100.0))
    b = side(op("aten::mm", 30, 3000.0), op("aten::add", 10, 210.0), op("aten::relu", 10, 95.0))
    entry = kernel_diff(a, b, {"t.py::test_x": 1})["tests"]["t.py::test_x"]
    first = entry["ops"][0]
    assert first["name"] == "aten::mm" and entry["movers"] == ["aten::mm"]
    assert abs(first["share"] - 2000 / 2010) < 1e-9 and first["a_us_per_call"] == first["b_us_per_call"] == 100.0
    [line] = mover_lines(kernel_diff(a, b, {"t.py::test_x": 1}))
    assert line.startswith("t.py::test_x: aten::mm carries 100% of the profiled slowdown (1 ms -> 3 ms cpu self time")
    assert "10 -> 30 calls" in line


def test_a_one_off_setup_operator_is_never_a_mover() -> None:
    """One session's first allocation took 12 ms: it is in the diff, marked setup, and aten::mm still leads."""
    a = side(op("aten::mm", 7, 517.0), op("aten::empty", 1, 18.8), op("aten::normal_", 1, 4000.0))
    b = side(op("aten::mm", 21, 790.0), op("aten::empty", 1, 12200.0), op("aten::normal_", 1, 300.0))
    entry = kernel_diff(a, b, {"t.py::test_x": 1})["tests"]["t.py::test_x"]
    assert entry["movers"] == ["aten::mm"] and entry["ops"][0]["share"] == 1.0
    assert {op["name"]: op["setup"] for op in entry["ops"]} == {"aten::mm": False, "aten::empty": True,
                                                                 "aten::normal_": True}  # fmt: skip


def test_one_held_up_call_does_not_stand_for_all_and_the_verdict_sets_the_direction() -> None:
    """A loaded machine held one of 21 resolve_conj calls for 58 ms in A's session: by totals B looks faster;
    by calls x median call, aten::mm carries the slowdown the pairs decided."""
    held = op("aten::resolve_conj", 21, 58600.0) | {"self_cpu_median_us": 0.2}
    a = side(op("aten::mm", 7, 460.0) | {"self_cpu_median_us": 65.0}, held)
    b = side(op("aten::mm", 21, 780.0) | {"self_cpu_median_us": 37.0},
             op("aten::resolve_conj", 63, 12.0) | {"self_cpu_median_us": 0.19})  # fmt: skip
    entry = kernel_diff(a, b, {"t.py::test_x": 1})["tests"]["t.py::test_x"]
    assert entry["movers"] == ["aten::mm"] and entry["direction"] == "slowdown"
    assert entry["ops"][0]["a_us"] == 7 * 65.0 and entry["ops"][0]["b_us"] == 21 * 37.0


def test_no_mover_is_named_for_a_test_whose_metrics_did_not_change() -> None:
    """An A/A: the profiles of two sessions differ by noise; with no decided change nothing is named."""
    a = side(op("aten::mm", 10, 1000.0), op("aten::add", 10, 200.0))
    b = side(op("aten::mm", 10, 1180.0), op("aten::add", 10, 190.0))
    diff = kernel_diff(a, b, {})
    assert diff["tests"]["t.py::test_x"]["movers"] == [] and mover_lines(diff) == []
    assert diff["tests"]["t.py::test_x"]["ops"][0]["name"] == "aten::mm"  # the whole diff is still kept


def test_an_operator_or_implementation_on_one_side_only_is_said_as_such() -> None:
    slow = {"primitive": "convolution", "problem": CONV, "implementation": "brg_conv_fwd:avx512_core", "count": 2,
            "ms": 90.0}  # fmt: skip
    fast = slow | {"implementation": "jit:avx512_core", "ms": 24.0}
    a = side(op("aten::mkldnn_convolution", 4, 24000.0), implementations=[fast])
    b = side(op("aten::mkldnn_convolution", 4, 24000.0), op("aten::_slow_conv2d_forward", 4, 66000.0),
             implementations=[slow])  # fmt: skip
    diff = kernel_diff(a, b, {"t.py::test_x": 1})
    entry = diff["tests"]["t.py::test_x"]
    assert entry["ops"][0]["name"] == "aten::_slow_conv2d_forward" and entry["ops"][0]["only_in"] == "B"
    assert entry["implementations"] == [
        {"primitive": "convolution", "problem": CONV, "a": ["jit:avx512_core"], "b": ["brg_conv_fwd:avx512_core"]}
    ]
    lines = mover_lines(diff)
    assert lines[0].endswith("; only in B")
    assert lines[1] == f"t.py::test_x: oneDNN convolution {CONV}: jit:avx512_core replaced by brg_conv_fwd:avx512_core"


def test_sessions_that_timed_a_different_number_of_calls_compare_per_call() -> None:
    """B's session measured one round of 8 calls, A's three rounds (22 calls): per timed call aten::mm went from
    1 call to 3 and leads; by totals A's extra rounds would have read as B being faster."""
    a = side(op("aten::mm", 22, 440.0), op("aten::add", 22, 220.0), op("aten::relu", 22, 110.0))
    b = side(op("aten::mm", 24, 480.0), op("aten::add", 8, 80.0), op("aten::relu", 8, 40.0))
    a["tests"]["t.py::test_x"]["calls"], b["tests"]["t.py::test_x"]["calls"] = 22, 8
    entry = kernel_diff(a, b, {"t.py::test_x": 1})["tests"]["t.py::test_x"]
    assert entry["movers"] == ["aten::mm"] and entry["a_scale"] == 8 / 22
    assert entry["ops"][0]["a_us"] == 440.0 * 8 / 22 and entry["ops"][0]["a_us_per_call"] == 20.0
    assert "1 -> 3 calls per timed call" in mover_lines(kernel_diff(a, b, {"t.py::test_x": 1}))[0]


def test_the_stored_path_diffs_the_newest_profiled_baseline_run_and_says_nothing_without_one() -> None:
    base = side(op("aten::mm", 10, 1000.0), op("aten::add", 10, 200.0))["tests"]["t.py::test_x"]
    now = side(op("aten::mm", 30, 3000.0), op("aten::add", 10, 200.0))["tests"]["t.py::test_x"]
    runs = [{"profile": now}, {"profile": base}, {"machine_id": "m"}]  # the newest profiled run is the baseline's
    diff = stored_diff(runs, {"profile": now}, "REGRESSED")
    assert diff is not None and diff["movers"] == ["aten::mm"] and diff["ops"][0]["a_us"] == 1000.0
    [line] = stored_lines("t.py::test_x", diff, "REGRESSED")
    assert line.startswith("t.py::test_x: aten::mm carries 100% of the profiled slowdown (1 ms -> 3 ms")
    assert stored_lines("t.py::test_x", stored_diff(runs, {"profile": now}, "PASS"), "PASS") == []
    assert stored_diff([{}], {"profile": now}, "REGRESSED") is None and stored_diff(runs, {}, "REGRESSED") is None
    assert stored_diff([{"profile": {"ops": 5}}], {"profile": now}, "REGRESSED") is None  # edited by hand
    assert mixed_note(runs, {"profile": now}) is None and mixed_note([{}], {}) is None
    assert mixed_note([], {"profile": now}) is None  # no baseline, nothing judged against it
    assert (mixed_note([{}], {"profile": now}) or "").startswith("this run was measured under --gpuperf-profile")
    assert (mixed_note(runs, {}) or "").startswith("its baseline was measured under --gpuperf-profile")
