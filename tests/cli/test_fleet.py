"""`gpuperf fleet`: which node, which GPU, is slower than its siblings, and the spread it saves for the verdict.

The statistics (core/stats/fleet.py) are tested on known samples; the command on results documents written here per
the documented schema (core/store/results.py), one per node; the saved spread through pytest sessions that play two
machines of one hardware key (the ``pytest_gpuperf_machine`` hook).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_gpuperf.cli import main as cli
from pytest_gpuperf.core.stats.fleet import FleetRules, Standing, mad_sd, place, pooled_spread, smallest_p
from pytest_gpuperf.core.store.spread import MachineSpread, SpreadError, parse_spread, read_spread, without_device
from pytest_gpuperf.machine.contention import MachineState
from pytest_gpuperf.machine.identity import named_identity

RULES = FleetRules()
SLUG = "cpu-test-fleet"


def fleet_of(medians: Sequence[float], *, n: int = 20, jitter: float = 0.01, seed: int = 0) -> list[list[float]]:
    rng = np.random.default_rng(seed)
    return [list(m * np.exp(rng.normal(0.0, jitter, n))) for m in medians]


def standings(units: list[list[float]], *, higher: bool = True, level: float | None = None) -> list[Standing]:
    placed = place(units, higher_is_better=higher, rules=RULES, level=level or RULES.alpha / len(units))
    return [p.standing for p in placed.placements]


# -- the statistics ------------------------------------------------------------------------------------------------


def test_four_nodes_one_ten_percent_slower_lists_it_and_only_it() -> None:
    assert standings(fleet_of([1.0, 1.0, 1.0, 0.9])) == [Standing.OK] * 3 + [Standing.LISTED]
    # a time 10% longer is the same node, read the other way round
    assert standings(fleet_of([1.0, 1.0, 1.1, 1.0]), higher=False) == [Standing.OK] * 2 + [
        Standing.LISTED,
        Standing.OK,
    ]


def test_all_equal_lists_nothing() -> None:
    same = [[1.0] * 10 for _ in range(4)]
    placed = place(same, higher_is_better=True, rules=RULES, level=0.01)
    assert {p.standing for p in placed.placements} == {Standing.OK}
    assert all(p.z == 0 for p in placed.placements) and placed.spread == 0


def test_identical_units_with_half_percent_jitter_list_nothing() -> None:
    # 200 fleets of 8 identical units (the MAD of their medians can be ~0): the noise floor and the tolerance hold
    for seed in range(200):
        assert Standing.LISTED not in standings(fleet_of([1.0] * 8, jitter=0.005, seed=seed)), seed
    # a unit 0.5% off an otherwise exactly equal fleet is a z of thousands, and still not listed
    exact = [[1.0] * 20 for _ in range(5)] + [[0.995] * 20]
    placed = place(exact, higher_is_better=True, rules=RULES, level=0.01 / 6)
    assert math.isinf(placed.placements[-1].z) and placed.placements[-1].standing is Standing.OK


def test_three_units_one_twice_as_slow_is_decided() -> None:
    assert standings(fleet_of([1.0, 1.0, 0.5], n=10)) == [Standing.OK, Standing.OK, Standing.LISTED]
    assert standings(fleet_of([2.0, 1.0, 1.0], n=10), higher=False) == [Standing.LISTED, Standing.OK, Standing.OK]
    # judged against the others only: the median of all three (with the outlier) would sit between them
    placed = place(fleet_of([1.0, 1.0, 0.5], n=10), higher_is_better=True, rules=RULES, level=0.01)
    assert placed.placements[2].ratio == pytest.approx(0.5, rel=0.02)


def test_sixty_four_units_with_two_percent_spread_list_the_one_at_point_nine() -> None:
    rng = np.random.default_rng(7)
    medians = list(np.exp(rng.normal(0.0, 0.02, 63))) + [0.9]
    result = standings(fleet_of(medians, seed=3), level=0.01 / 64)
    assert result[-1] is Standing.LISTED
    assert Standing.LISTED not in result[:-1]


def test_healthy_fleets_rarely_list_their_tail_and_never_within_the_tolerance() -> None:
    # Healthy units spread normally by 2% between them: the tolerance (5%) is only 2.5 sds, so the tail of the
    # fleet meets it; the z against the others' spread at its upper bound keeps such fleets from listing one
    # (it would in 5-7% of them at the plain MAD: docs/fleet.md). At 1% spread the tolerance is 5 sds: never.
    def fleets_listing(spread: float) -> int:
        count = 0
        for seed in range(100):
            rng = np.random.default_rng(seed)
            medians = list(np.exp(rng.normal(0.0, spread, 16)))
            count += Standing.LISTED in standings(fleet_of(medians, seed=seed), level=0.01 / 16)
        return count

    assert fleets_listing(0.02) <= 3
    assert fleets_listing(0.01) == 0


def test_a_better_unit_is_reported_not_listed() -> None:
    result = standings(fleet_of([1.0, 1.0, 1.0, 1.25]))
    assert result == [Standing.OK] * 3 + [Standing.BETTER]


def test_a_difference_below_the_tolerance_is_never_listed() -> None:
    # 3% slower and far beyond the (tiny) spread: significant, but below the 5% that matters
    assert Standing.LISTED not in standings(fleet_of([1.0] * 7 + [0.97], jitter=0.001))
    loose = FleetRules(tolerance=0.02)
    placed = place(fleet_of([1.0] * 7 + [0.97], jitter=0.001), higher_is_better=True, rules=loose, level=0.01 / 8)
    assert placed.placements[-1].standing is Standing.LISTED


def test_a_unit_whose_samples_cannot_separate_is_suspect_not_listed() -> None:
    # two samples each: no Mann-Whitney p can fall below 1/C(6, 2) = 1/15, far above the level
    units = [[1.0, 1.001], [1.0, 1.002], [0.5, 0.501]]
    placed = place(units, higher_is_better=True, rules=RULES, level=0.01 / 3)
    assert placed.placements[2].standing is Standing.SUSPECT
    assert smallest_p(2, 4) == pytest.approx(1 / 15)


def test_an_outlier_few_units_cannot_tell_from_their_tail_is_reported_not_listed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # five units about 4% apart and one at 0.85: beyond 3.5 of their MADs as measured, not of that MAD's upper bound
    medians = [1.0, 0.96, 1.04, 0.98, 1.02, 0.85]
    assert standings(fleet_of(medians, jitter=0.002)) == [Standing.OK] * 5 + [Standing.TAIL]
    code, out, _ = gpuperf([str(write_nodes(tmp_path / "n", medians))], capsys)
    assert code == 0 and "TAIL node-6: test_gemm[bf16] tflops 0.8" in out and "not against its upper bound" in out
    assert "WIDE cpu-test-fleet test_gemm[bf16] tflops: the fleet's spread (" in out and "--tolerance " in out


def test_a_prior_spread_keeps_few_units_from_listing_one_a_process_apart() -> None:
    # Three units that agree within 1% (their MAD comes out tiny) and a fourth 13% lower: what four CPU "nodes",
    # processes of one quiet VM, gave with nothing changed (benchmarks/README.md). Against the three's own spread it
    # is listed; with the CPU's prior it is the tail of a wide kind, reported and not failing.
    units = fleet_of([1.26, 1.25, 1.255, 1.10], jitter=0.05)
    level = RULES.alpha / 4
    assert place(units, higher_is_better=True, rules=RULES, level=level).placements[-1].standing is Standing.LISTED
    cpu = FleetRules(spread_prior=0.08)
    assert [p.standing for p in place(units, higher_is_better=True, rules=cpu, level=level).placements] == [
        Standing.OK
    ] * 3 + [Standing.TAIL]
    # a node at half the others' speed is listed whatever the prior; sixty-four units outweigh it
    assert standings_with(cpu, fleet_of([1.0, 1.0, 1.0, 0.5])) == [Standing.OK] * 3 + [Standing.LISTED]
    rng = np.random.default_rng(7)
    many = fleet_of(list(np.exp(rng.normal(0.0, 0.01, 63))) + [0.9], seed=3)
    assert standings_with(cpu, many, level=0.01 / 64)[-1] is Standing.LISTED
    with pytest.raises(ValueError, match="spread_prior must be a fraction"):
        FleetRules(spread_prior=1.5)


def standings_with(rules: FleetRules, units: list[list[float]], *, level: float = 0.01 / 4) -> list[Standing]:
    return [p.standing for p in place(units, higher_is_better=True, rules=rules, level=level).placements]


def test_a_deficit_its_machines_state_explains_is_reported_not_listed() -> None:
    units = fleet_of([1.0, 1.0, 1.0, 0.8])
    level = RULES.alpha / 4
    explained = place(units, higher_is_better=True, rules=RULES, level=level, explains=[1.0, 1.0, 1.0, 1.3])
    assert [p.standing for p in explained.placements] == [Standing.OK] * 3 + [Standing.EXPLAINED]
    assert explained.placements[3].explains == 1.3
    # the bound, not a veto: 0.8 x 1.2 stays 4% short of the others, beyond the 5% tolerance it is not
    beyond = place(units, higher_is_better=True, rules=RULES, level=level, explains=[1.0, 1.0, 1.0, 1.15])
    assert beyond.placements[3].standing is Standing.LISTED
    # another unit's load credits nothing: contention is bounded from above only, its effect may have been nil
    others = place(units, higher_is_better=True, rules=RULES, level=level, explains=[2.0, 2.0, 2.0, 1.0])
    assert others.placements[3].standing is Standing.LISTED
    with pytest.raises(ValueError, match="one factor >= 1 per unit"):
        place(units, higher_is_better=True, rules=RULES, level=level, explains=[1.0, 0.5, 1.0, 1.0])


def test_fewer_than_three_units_are_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 units"):
        place([[1.0], [2.0]], higher_is_better=True, rules=RULES, level=0.01)


def test_robust_spread_and_pooling() -> None:
    assert mad_sd(np.array([1.0])) == 0
    values = np.random.default_rng(0).normal(0, 1, 20000)
    assert mad_sd(values) == pytest.approx(1.0, rel=0.03)
    assert pooled_spread([(0.02, 5), (0.02, 9)]) == pytest.approx(0.02)
    assert pooled_spread([]) == 0


def test_without_device() -> None:
    assert without_device("t.py::test_gemm[gpu3-bf16]", "gpu3") == "t.py::test_gemm[bf16]"
    assert without_device("t.py::test_copy[gpu0]", "gpu0") == "t.py::test_copy"
    assert without_device("t.py::test_gemm[bf16-gpu3]", "gpu3") == "t.py::test_gemm[bf16-gpu3]"
    assert without_device("t.py::test_gemm[cuda:1-bf16]") == "t.py::test_gemm[bf16]"
    assert without_device("t.py::test_gemm[small]") == "t.py::test_gemm[small]"


# -- results files -------------------------------------------------------------------------------------------------

Metrics = dict[tuple[str, str], Any]
"""(test, metric) -> samples, or {device: samples} for a per-device test (device the first parameter)."""


def document(
    host: str | None,
    metrics: Metrics,
    *,
    slug: str = SLUG,
    machine: str | None = None,
    unit: str = "TFLOP/s",
    timed_on: str | None = None,
) -> dict[str, Any]:
    results = []
    for (test, metric), samples in sorted(metrics.items()):
        per_device = samples if isinstance(samples, dict) else {None: samples}
        for device, values in per_device.items():
            name = test if device is None else test.replace("[", f"[{device}-", 1)
            results.append(
                {
                    "test": name,
                    "metric": metric,
                    "unit": unit,
                    "higher_is_better": True,
                    "samples": [float(v) for v in values],
                    "context": {} if device is None else {"device": device},
                }
            )
    fingerprint: dict[str, Any] = {"hardware_key": {"cpu": slug}, "hardware_slug": slug, "stack": {}}
    if host is not None or machine is not None:
        fingerprint["machine"] = {"id": named_identity(machine or host or "").id, "host": host or "", "parts": ["name"]}
    made = {"schema": 1, "created": "2026-12-06T00:00:00+00:00", "fingerprint": fingerprint, "results": results}
    return made | ({"settings": {"device": timed_on}} if timed_on else {})


def write_nodes(folder: Path, medians: Sequence[float], *, n: int = 20, **kwargs: Any) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index, samples in enumerate(fleet_of(medians, n=n, seed=len(medians))):
        host = f"node-{index + 1}"
        copy = [100.0 * (1 + 0.001 * (i % 5)) for i in range(n)]
        metrics = {
            ("tests/test_acc.py::test_gemm[bf16]", "tflops"): samples,
            ("tests/test_acc.py::test_copy", "gbps"): copy,
        }
        (folder / f"{host}.json").write_text(json.dumps(document(host, metrics, **kwargs)))
    return folder


def gpuperf(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = cli.main(["fleet", *args])
    out, err = capsys.readouterr()
    return code, out, err


# -- the command -----------------------------------------------------------------------------------------------------


def test_the_slower_node_and_only_it_is_listed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_nodes(tmp_path / "nodes", [1.0, 1.0, 0.9, 1.0])
    code, out, err = gpuperf([str(folder)], capsys)
    assert code == 1, err
    listed = [line for line in out.splitlines() if line.startswith("LISTED")]
    assert len(listed) == 1
    assert listed[0].startswith("LISTED node-3: test_gemm[bf16] tflops 0.90x the fleet median, ")
    assert "MADs below (fleet of 4 units, spread " in listed[0]
    assert "1 of 4 nodes listed (node-3)" in out


def test_equal_nodes_exit_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = gpuperf([str(write_nodes(tmp_path / "nodes", [1.0] * 4))], capsys)
    assert code == 0
    assert "0 of 4 nodes listed; exit 0" in out and "LISTED" not in out


def loaded(runqueue_share: float) -> dict[str, Any]:
    """A machine state whose threads waited for a CPU ``runqueue_share`` of their time (no canary)."""
    return MachineState(wall_s=10.0, cpu_per_wall=1.0, cpus=2, runqueue_share=runqueue_share).to_dict()


@pytest.mark.parametrize(("median", "standing", "code"), [(0.8, "EXPLAINED", 0), (0.5, "LISTED", 1)])
def test_a_node_measured_while_loaded_is_listed_only_beyond_what_the_load_explains(
    median: float, standing: str, code: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 49: the fleet read no machine state, so a node measured while its machine was busy was listed for
    what the load explains. Its threads waiting 30% of the time explain up to 1/(1-0.3) = 1.43x: a node 0.8x the
    others is reported, one 0.5x is listed whatever the load."""
    folder = write_nodes(tmp_path / "nodes", [1.0, 1.0, 1.0, median])
    document = json.loads((folder / "node-4.json").read_text())
    for result in document["results"]:
        result["context"]["machine"] = loaded(0.3)
    (folder / "node-4.json").write_text(json.dumps(document))
    code_seen, out, err = gpuperf([str(folder), "--format", "json"], capsys)
    assert code_seen == code, err
    report = json.loads(out)
    [unit] = [u for u in report["units"] if u["node"] == "node-4" and u["metric"] == "tflops"]
    assert unit["standing"] == standing and unit["load_explains"] == pytest.approx(1 / 0.7)
    if standing == "EXPLAINED":
        note = next(line for line in report["notes"] if line.startswith("EXPLAINED node-4"))
        assert "explains up to 1.43x worse (threads waited for a CPU 30.0% of the time" in note, note
        assert report["listed"] == []
    else:
        assert [entry["node"] for entry in report["listed"]] == ["node-4"]


def test_a_cpu_fleet_is_placed_with_the_cpu_prior_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cpu = write_nodes(tmp_path / "cpu", [1.0, 1.0, 1.0, 0.88], timed_on="cpu")
    code, out, _ = gpuperf([str(cpu)], capsys)
    assert code == 0 and "LISTED" not in out, out
    assert f"prior: {SLUG}'s units placed against their MAD pooled with a 8.0% prior spread" in out
    code, out, _ = gpuperf([str(cpu), "--spread-prior", "0"], capsys)  # the fleet's own spread alone
    assert code == 1 and "LISTED node-4" in out and "prior:" not in out
    code, out, _ = gpuperf([str(write_nodes(tmp_path / "slow", [1.0, 1.0, 1.0, 0.5], timed_on="cpu"))], capsys)
    assert code == 1 and "LISTED node-4" in out
    code, out, _ = gpuperf([str(write_nodes(tmp_path / "gpu", [1.0, 1.0, 1.0, 0.88], timed_on="cuda"))], capsys)
    assert code == 1 and "prior:" not in out  # none measured for a GPU yet: the fleet's own spread decides
    code, out, _ = gpuperf([str(cpu), "--spread-prior", "3", "--format", "json"], capsys)
    assert json.loads(out)["rules"]["spread_prior"] == {SLUG: pytest.approx(0.03)}


def test_a_device_context_that_disagrees_with_the_test_id_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 48, item 5: gpu5 in the id but gpu3 in the context made a series of its own, too small to judge."""
    for node in ("node-a", "node-b"):
        gpus = {f"gpu{i}": [1.0 + 0.001 * j for j in range(20)] for i in range(4)}
        doc = document(node, {("tests/test_acc.py::test_gemm[bf16]", "tflops"): gpus})
        if node == "node-b":
            doc["results"][3]["test"] = "tests/test_acc.py::test_gemm[gpu5-bf16]"
            doc["results"][3]["context"] = {"device": "gpu3"}
        (tmp_path / f"{node}.json").write_text(json.dumps(doc))
    code, out, err = gpuperf([str(tmp_path)], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1, (code, out, err)
    assert "names device 'gpu5' in its id but 'gpu3' in its context" in err and "node-b.json" in err


def test_each_gpu_of_each_node_is_a_unit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    for node in ("node-a", "node-b"):
        gpus = {f"gpu{i}": list(rng.normal(1.0, 0.005, 20)) for i in range(4)}
        if node == "node-b":
            gpus["gpu3"] = [0.71 * v for v in gpus["gpu3"]]
        metrics: Metrics = {
            ("tests/test_acc.py::test_gemm[bf16]", "tflops"): gpus,
            ("tests/test_acc.py::test_all_reduce[1mib]", "busbw"): {"node": [10.0, 10.1, 9.9]},
        }
        (tmp_path / f"{node}.json").write_text(json.dumps(document(node, metrics)))
    code, out, err = gpuperf([str(tmp_path / "node-a.json"), str(tmp_path / "node-b.json"), "--format", "json"], capsys)
    assert code == 1, err
    report = json.loads(out)
    (listed,) = report["listed"]
    assert listed["unit"] == "node-b gpu3" and listed["test"] == "tests/test_acc.py::test_gemm[bf16]"
    assert listed["line"].startswith("node-b gpu3: test_gemm[bf16] tflops 0.71x the fleet median, ")
    assert "(fleet of 8 units, spread " in listed["line"]
    assert {row["test"]: row["units"] for row in report["rows"]} == {"tests/test_acc.py::test_gemm[bf16]": 8}
    # the whole-node test is the node's unit, and two nodes are too few units to judge it: named in a note
    assert any("test_all_reduce[1mib] busbw (2 units)" in note for note in report["notes"])


def test_json_shape(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = gpuperf([str(write_nodes(tmp_path / "n", [1.0, 1.0, 0.9, 1.0])), "--format", "json"], capsys)
    report = json.loads(out)
    assert code == report["exit"] == 1
    assert {"title", "headline", "notes", "rows", "summary", "rules", "listed", "units", "nodes", "refused"} <= set(
        report
    )
    assert [node["name"] for node in report["nodes"] if node["listed"]] == ["node-3"]
    row = next(row for row in report["rows"] if row["metric"] == "tflops")
    assert row["units"] == 4 and row["listed"] == 1 and 0 < row["spread"] < 0.05
    assert {unit["standing"] for unit in report["units"]} == {"OK", "LISTED"}
    assert report["rules"] == {
        "tolerance": 0.05,
        "z": 3.5,
        "alpha": 0.01,
        "level": pytest.approx(0.01 / 8),
        "spread_prior": {SLUG: 0.0},  # results that do not say their device get no prior
    }


def test_html_has_a_strip_plot_per_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "fleet.html"
    out_file = tmp_path / "fleet.txt"
    code, out, _ = gpuperf(
        [str(write_nodes(tmp_path / "n", [1.0, 1.0, 0.9, 1.0])), "--html", str(page), "-o", str(out_file)], capsys
    )
    assert code == 1 and out == ""
    text = page.read_text()
    assert text.count("<svg") == 2 and text.count("<circle") == 8
    assert "#c62828" in text and re.search(r"<title>node-3: 0\.8\d\dx the others&#x27; median \(LISTED\)</title>", text)
    assert "LISTED node-3" in out_file.read_text()


def test_files_of_one_machine_are_one_node(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = write_nodes(tmp_path / "n", [1.0, 1.0, 1.0])
    again = json.loads((folder / "node-1.json").read_text())
    (folder / "node-1-again.json").write_text(json.dumps(again))
    code, out, _ = gpuperf([str(folder), "--format", "json"], capsys)
    report = json.loads(out)
    assert code == 0 and len(report["nodes"]) == 3
    node = next(node for node in report["nodes"] if node["name"] == "node-1")
    assert len(node["files"]) == 2
    assert next(u for u in report["units"] if u["node"] == "node-1")["samples"] == 40


def test_hosts_are_told_apart_and_a_file_without_one_is_named_by_its_stem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = fleet_of([1.0] * 4)
    key = ("tests/test_acc.py::test_gemm[bf16]", "tflops")
    (tmp_path / "a.json").write_text(json.dumps(document("gpu-box", {key: samples[0]}, machine="m1")))
    (tmp_path / "b.json").write_text(json.dumps(document("gpu-box", {key: samples[1]}, machine="m2")))
    (tmp_path / "rack7-slot3.json").write_text(json.dumps(document(None, {key: samples[2]})))
    (tmp_path / "odd.json").write_text(json.dumps(document("evil\x1b[31mhost\n", {key: samples[3]})))
    code, out, _ = gpuperf([str(tmp_path), "--format", "json"], capsys)
    names = sorted(node["name"] for node in json.loads(out)["nodes"])
    assert code == 0
    assert names == sorted(
        [
            f"gpu-box ({named_identity('m1').id[:8]})",
            f"gpu-box ({named_identity('m2').id[:8]})",
            "rack7-slot3",
            "evil\\x1b[31mhost",
        ]
    )


def test_mixed_keys_are_judged_apart_and_a_single_node_key_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = write_nodes(tmp_path / "n", [1.0, 1.0, 0.9, 1.0])
    key = ("tests/test_acc.py::test_gemm[bf16]", "tflops")
    (folder / "lonely.json").write_text(json.dumps(document("lonely", {key: [0.5] * 20}, slug="cpu-other")))
    code, out, _ = gpuperf([str(folder)], capsys)
    assert code == 1
    assert "the results hold 2 hardware keys (cpu-other, cpu-test-fleet): each key's nodes are judged among" in out
    assert "cpu-other: not judged: only one node (lonely, from " in out
    assert "LISTED node-3" in out and "LISTED lonely" not in out


REFUSALS = {
    "a single node": lambda root: write_nodes(root / "one", [1.0]),
    "mixed keys, each a single node": lambda root: _mixed_singletons(root),
    "an empty folder": lambda root: _made(root / "empty"),
    "a garbage file": lambda root: _file(root / "garbage.json", b"\x00\xffnot json"),
    "a truncated file": lambda root: _file(root / "cut.json", b'{"schema": 1, "results": [{"te'),
    "an empty file": lambda root: _file(root / "empty.json", b""),
    "a number": lambda root: _file(root / "five.json", b"5"),
    "samples that are text": lambda root: _file(
        root / "text.json",
        json.dumps(
            {
                "schema": 1,
                "results": [{"test": "t", "metric": "m", "unit": "s", "higher_is_better": False, "samples": "x"}],
            }
        ).encode(),
    ),
    "no common metric": lambda root: _disjoint(root),
    "two nodes of one unit each": lambda root: write_nodes(root / "two", [1.0, 0.5]),
    "a missing path": lambda root: root / "nowhere",
    "a unit that disagrees": lambda root: _units_disagree(root),
}


def _made(folder: Path) -> Path:
    folder.mkdir()
    return folder


def _file(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _mixed_singletons(root: Path) -> Path:
    folder = _made(root / "mixed")
    for slug in ("cpu-a", "cpu-b"):
        metrics = {("t.py::test_gemm", "tflops"): [1.0] * 5}
        (folder / f"{slug}.json").write_text(json.dumps(document(slug, metrics, slug=slug)))
    return folder


def _disjoint(root: Path) -> Path:
    folder = _made(root / "disjoint")
    for index in range(4):
        metrics = {(f"t.py::test_{index}", "tflops"): [1.0] * 5}
        (folder / f"n{index}.json").write_text(json.dumps(document(f"n{index}", metrics)))
    return folder


def _units_disagree(root: Path) -> Path:
    folder = write_nodes(root / "units", [1.0, 1.0, 1.0])
    metrics = {("tests/test_acc.py::test_gemm[bf16]", "tflops"): [1.0] * 20}
    (folder / "node-9.json").write_text(json.dumps(document("node-9", metrics, unit="GFLOP/s")))
    return folder


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_bad_input_is_one_line_and_exit_two(case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = REFUSALS[case](tmp_path)
    code, out, err = gpuperf([str(path)], capsys)
    assert code == 2, (case, out, err)
    assert out == "" and err.startswith("gpuperf fleet: error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


def test_refusals_say_what_to_do(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, _, err = gpuperf([str(write_nodes(tmp_path / "one", [1.0]))], capsys)
    assert "only one node (node-1, from " in err and "give every node's results" in err
    _, _, err = gpuperf([str(_disjoint(tmp_path))], capsys)
    assert "no metric was measured on 3 or more units" in err
    _, _, err = gpuperf([str(_made(tmp_path / "empty"))], capsys)
    assert "folder holds no results files" in err
    _, _, err = gpuperf([str(_units_disagree(tmp_path))], capsys)
    assert "is in 'GFLOP/s'" in err


@pytest.mark.parametrize("args", [["--tolerance", "0"], ["--z-threshold", "-1"], ["--alpha", "0.7"]])
def test_bad_options_are_refused(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        cli.main(["fleet", str(write_nodes(tmp_path / "n", [1.0] * 3)), *args])
    assert raised.value.code == 2 and args[0] in capsys.readouterr().err


@pytest.mark.parametrize("option", ["-o", "--html", "--save-spread"])
def test_an_output_in_a_missing_folder_is_refused_before_any_work(
    option: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent"
    code, out, err = gpuperf([str(write_nodes(tmp_path / "n", [1.0] * 3)), option, str(missing / "f")], capsys)
    assert code == 2 and out == "" and err.count("\n") == 1
    assert f"no such folder {missing}; create it" in err and not missing.exists()


# -- the saved spread ------------------------------------------------------------------------------------------------


def test_save_spread_writes_the_key_and_each_metric(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "spread.json"
    code, out, _ = gpuperf(
        [str(write_nodes(tmp_path / "n", [1.0, 1.01, 0.99, 1.0])), "--save-spread", str(target)], capsys
    )
    assert code == 0 and f"saved to {target}" in out
    saved = json.loads(target.read_text())
    assert saved["kind"] == "gpuperf-fleet-spread" and saved["hardware_key"] == SLUG and saved["nodes"] == 4
    assert saved["tool"]["name"] == "pytest-gpuperf" and saved["created"]
    assert {entry["test"] for entry in saved["metrics"]} == {
        "tests/test_acc.py::test_gemm[bf16]",
        "tests/test_acc.py::test_copy",
    }
    assert 0 < saved["pooled"] < 0.05
    spread = read_spread(target)
    assert (
        spread.lookup("tests/test_acc.py::test_gemm[gpu5-bf16]", "tflops")
        == spread.metrics[("tests/test_acc.py::test_gemm[bf16]", "tflops")]
    )
    assert spread.lookup("tests/other.py::test_x", "tflops") == spread.pooled
    # saved among the nodes' results, the next run over the folder leaves it out; named alone, it is refused
    (tmp_path / "n" / "spread.json").write_bytes(target.read_bytes())
    assert gpuperf([str(tmp_path / "n")], capsys)[0] == 0
    code, _, err = gpuperf([str(tmp_path / "n"), str(target)], capsys)
    assert code == 2 and "a fleet spread file (gpuperf fleet --save-spread), not a node's results" in err


def test_save_spread_refuses_two_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_nodes(tmp_path / "a", [1.0] * 3)
    write_nodes(tmp_path / "b", [1.0] * 3, slug="cpu-other", machine=None)
    for path in (tmp_path / "b").iterdir():  # other machines than a/'s
        doc = json.loads(path.read_text())
        doc["fingerprint"]["machine"]["id"] = named_identity("b-" + path.stem).id
        path.write_text(json.dumps(doc))
    code, _, err = gpuperf(
        [str(tmp_path / "a"), str(tmp_path / "b"), "--save-spread", str(tmp_path / "s.json")], capsys
    )
    assert code == 2 and "keeps one hardware key's spread, but 2 keys were judged" in err
    assert not (tmp_path / "s.json").exists()


@pytest.mark.parametrize(
    ("document", "problem"),
    [
        ([], "not a fleet spread file"),
        ({"kind": "gpuperf-fleet-spread", "schema": 2}, "schema 2"),
        ({"kind": "gpuperf-fleet-spread", "schema": 1, "hardware_key": "A B"}, "not a hardware key"),
        ({"kind": "gpuperf-fleet-spread", "schema": 1, "hardware_key": "k", "nodes": 1}, "at least 2 nodes"),
        ({"kind": "gpuperf-fleet-spread", "schema": 1, "hardware_key": "k", "nodes": 2, "pooled": 0}, "'pooled'"),
        (
            {"kind": "gpuperf-fleet-spread", "schema": 1, "hardware_key": "k", "nodes": 2, "pooled": 0.01,
             "metrics": [{"test": "t", "metric": "m", "spread": 2}]},
            "metrics[0] 'spread'",
        ),
    ],
)  # fmt: skip
def test_a_bad_spread_file_is_refused(document: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=r".*") as raised:
        parse_spread(document, "s.json")
    assert problem in str(raised.value)


def test_spread_lookup_falls_back_to_the_pooled_figure() -> None:
    spread = MachineSpread(source="s", hardware_key="k", pooled=0.02, nodes=4, metrics={("t.py::test_a", "m"): 0.05})
    assert spread.lookup("t.py::test_a", "m") == 0.05
    assert spread.lookup("t.py::test_a", "other") == 0.02
    with pytest.raises(SpreadError):
        read_spread(Path("/nonexistent/spread.json"))


# A test of two machines of one key (the MACHINE hook), the baseline saved as node-a, the run as node-b.
PROJECT = """
import os, random, pytest

@pytest.mark.perf
def test_step(perf):
    slow = float(os.environ.get("SLOW", "1.0"))
    samples = [slow * (1 + 0.001 * i + 0.001 * random.random()) for i in range(15)]
    perf.record("step", samples, unit="s", higher_is_better=False)
"""
CONFTEST = """
import os

def pytest_gpuperf_machine(config):
    return os.environ.get("MACHINE")
"""
BASE = ["-p", "no:cacheprovider", "--gpuperf-device", "cpu", "--gpuperf-run-noise", "1"]


@pytest.fixture
def recorded_on_node_a(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> tuple[pytest.Pytester, str]:
    pytester.makepyfile(test_node=PROJECT, conftest=CONFTEST)
    monkeypatch.setenv("MACHINE", "node-a")
    for _ in range(2):
        pytester.runpytest(*BASE, "--gpuperf-save").assert_outcomes(passed=1)
    (folder,) = (pytester.path / "baselines").iterdir()
    monkeypatch.setenv("MACHINE", "node-b")
    monkeypatch.setenv("SLOW", "1.5")
    return pytester, folder.name


def spread_file(path: Path, slug: str, *, pooled: float, step: float | None = None) -> Path:
    metrics = (
        [] if step is None else [{"test": "test_node.py::test_step", "metric": "step", "spread": step, "units": 8}]
    )
    path.write_text(
        json.dumps(
            {"kind": "gpuperf-fleet-spread", "schema": 1, "tool": {"name": "pytest-gpuperf", "version": "0"},
             "created": "2026-12-06T00:00:00+00:00", "hardware_key": slug, "nodes": 8, "units": 8, "pooled": pooled,
             "metrics": metrics}
        )
    )  # fmt: skip
    return path


def verdict_of(pytester: pytest.Pytester) -> dict[str, Any]:
    (result,) = json.loads((pytester.path / "run.json").read_text())["results"]
    return result


def test_a_spread_file_lets_another_machines_baseline_decide(recorded_on_node_a: tuple[pytest.Pytester, str]) -> None:
    pytester, slug = recorded_on_node_a
    spread = spread_file(pytester.path / "spread.json", slug, pooled=0.03)
    result = pytester.runpytest(*BASE, "--gpuperf-results", "run.json", "--gpuperf-machine-noise", str(spread))
    result.assert_outcomes(failed=1)
    judged = verdict_of(pytester)
    assert judged["verdict"] == "REGRESSED"
    document = json.loads((pytester.path / "run.json").read_text())
    assert document["settings"]["machine_spread"] == str(spread) and document["settings"]["machine_noise"] == 0.03


def test_the_metrics_own_spread_comes_before_the_pooled_one(recorded_on_node_a: tuple[pytest.Pytester, str]) -> None:
    pytester, slug = recorded_on_node_a
    # the fleet saw this metric spread by 60% between machines: 1.5x slower on another machine decides nothing
    spread = spread_file(pytester.path / "spread.json", slug, pooled=0.03, step=0.6)
    result = pytester.runpytest(*BASE, "--gpuperf-results", "run.json", "--gpuperf-machine-noise", str(spread))
    result.assert_outcomes(passed=1)
    assert verdict_of(pytester)["verdict"] != "REGRESSED"


def test_a_spread_file_of_another_hardware_key_is_refused(recorded_on_node_a: tuple[pytest.Pytester, str]) -> None:
    pytester, slug = recorded_on_node_a
    spread = spread_file(pytester.path / "spread.json", "gpu-other-key", pooled=0.03)
    result = pytester.runpytest(*BASE, "--gpuperf-machine-noise", str(spread))
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"*--gpuperf-machine-noise: {spread}: the spread was measured on hardware key gpu-other-key, "
            f"but this run's key is {slug}*"
        ]
    )


def test_a_bad_spread_file_or_value_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_node=PROJECT)
    (pytester.path / "bad.json").write_text("{nope")
    result = pytester.runpytest(*BASE, "--gpuperf-machine-noise", "bad.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Invalid value 'bad.json' from --gpuperf-machine-noise: bad.json: not valid JSON*"])
    result = pytester.runpytest(*BASE, "--gpuperf-machine-noise", "no-such-file.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*expected a percentage*or an existing spread file*"])


# -- fuzzed input ------------------------------------------------------------------------------------------------------

ODD_VALUES: list[Any] = [
    None,
    5,
    -1.5,
    True,
    "",
    " ",
    "\x00",
    "\x1b[2J",
    "\udcff",
    "a" * 5000,
    [],
    ["gpu0"],
    {},
    {"id": 1},
]


def test_fuzzed_nodes_never_raise(tmp_path: Path) -> None:
    """Three fair nodes and a fourth that is damaged JSON/XML (the loaders' fuzz shapes) or a fair document with odd
    values where fleet reads beyond the loader: the machine identity and the context's device."""
    import io
    import random
    from contextlib import redirect_stderr, redirect_stdout

    from fuzz_inputs import malformed

    rng = random.Random(36)
    fair = tmp_path / "fair"
    write_nodes(fair, [1.0, 1.0, 1.0])
    key = ("tests/test_acc.py::test_gemm[bf16]", "tflops")
    for case in range(150):
        odd = tmp_path / f"case{case}"
        odd.mkdir()
        if case % 2:
            kind, data = malformed(rng, rng.choice(ODD_VALUES))
            (odd / f"odd.{kind}").write_bytes(data)
        else:
            doc = document("odd", {key: {"gpu0": [1.0] * 20, "gpu1": [0.5] * 20}})
            doc["fingerprint"]["machine"] = rng.choice([*ODD_VALUES, {"id": rng.choice(ODD_VALUES), "host": "h"}])
            doc["results"][rng.randrange(2)]["context"] = {"device": rng.choice(ODD_VALUES)}
            text = json.dumps(doc, ensure_ascii=rng.random() < 0.5)  # escaped, a lone surrogate reaches the names
            (odd / "odd.json").write_text(text, errors="surrogatepass")
        out, err = io.StringIO(), io.StringIO()
        with redirect_stdout(out), redirect_stderr(err):
            code = cli.main(["fleet", str(fair), str(odd), "--format", rng.choice(["table", "json", "html", "md"])])
        assert code in (0, 1, 2), (case, code, err.getvalue())
        if code == 2:
            assert err.getvalue().count("\n") == 1, (case, err.getvalue())
