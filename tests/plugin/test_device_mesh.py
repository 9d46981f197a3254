"""Mesh specs, the --gpuperf-mesh option and the device_mesh fixture, collectives formulas, the training
figures, and the reporting rank under torchrun. Pure functions and in-process pytester runs: no ranks."""

from __future__ import annotations

import json

import pytest

from pytest_gpuperf.distributed.collectives import (
    algbw_gbps,
    bus_factor,
    busbw_gbps,
    largest_fitting,
    message_sizes,
    size_label,
)
from pytest_gpuperf.distributed.mesh import MeshError, MeshSpec, parse_mesh, parse_meshes, unfit_reason
from pytest_gpuperf.distributed.strategies import STRATEGIES, Strategy, get_strategy
from pytest_gpuperf.distributed.training import (
    CombinedRun,
    RankReport,
    TrainJob,
    combine,
    loss_mismatch,
    scaling_efficiency,
    tokens_per_s_per_device,
)

TORCHRUN = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


# --- mesh specs ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, shape, names, label",
    [
        ("2", (2,), None, "2"),
        (" 4 ", (4,), None, "4"),
        ("2x2", (2, 2), None, "2x2"),
        ("2X4", (2, 4), None, "2x4"),
        ("dp=2,tp=2", (2, 2), ("dp", "tp"), "dp=2,tp=2"),
        ("pp=2, dp=1, tp=4", (2, 1, 4), ("pp", "dp", "tp"), "pp=2,dp=1,tp=4"),
    ],
)
def test_mesh_forms(text, shape, names, label):
    spec = parse_mesh(text)
    assert (spec.shape, spec.names, spec.label) == (shape, names, label)
    assert spec.world_size == (shape[0] * (shape[1] if len(shape) > 1 else 1) * (shape[2] if len(shape) > 2 else 1))


def test_several_meshes_by_comma_space_and_semicolon():
    labels = [m.label for m in parse_meshes("1,2,4 2x2; dp=2,tp=2")]
    assert labels == ["1", "2", "4", "2x2", "dp=2,tp=2"]


@pytest.mark.parametrize(
    "text, message",
    [
        ("", "at least one mesh"),
        ("0", "a dimension of 0 ranks"),
        ("2x", "'' is not a whole number"),
        ("two", "'two' is not a whole number"),
        ("dp=2,tp", "expected name=size pairs"),
        ("dp=2,dp=2", "repeat a name"),
        ("2 2", "mesh 2 is given twice"),
        ("1-dp=2", "expected name=size pairs"),
    ],
)
def test_bad_meshes_say_what_is_wrong(text, message):
    with pytest.raises(MeshError, match=message):
        parse_meshes(text)


def test_world_size_mismatch_in_parallel_dims_style():
    with pytest.raises(MeshError, match=r"^dp \* tp != world size \(2 \* 3 != 4\)$"):
        parse_mesh("dp=2,tp=3").check_world_size(4)
    parse_mesh("dp=2,tp=2").check_world_size(4)


def test_naming_an_unnamed_mesh():
    assert parse_mesh("2x2").named(("dp", "tp")) == MeshSpec(shape=(2, 2), names=("dp", "tp"))
    with pytest.raises(MeshError, match=r"mesh 4 has 1 dimension\(s\) but 2 are needed"):
        parse_mesh("4").named(("dp", "tp"))
    with pytest.raises(MeshError, match="has dimensions tp; needed dp"):
        parse_mesh("tp=2").named(("dp",))
    assert parse_mesh("dp=2,tp=4").size("tp") == 4 and parse_mesh("dp=2").size("tp") == 1


def test_a_mesh_larger_than_the_machine_does_not_fit_with_the_numbers():
    assert unfit_reason(parse_mesh("4"), device="cpu", available=4) is None
    reason = unfit_reason(parse_mesh("dp=4,tp=2"), device="cuda", available=2)
    assert reason == "mesh dp=4,tp=2 needs 8 ranks but this machine has 2 visible CUDA/ROCm device(s)"
    assert "8 ranks but this machine has 4 CPU ranks" in unfit_reason(parse_mesh("8"), device="cpu", available=4)
    # under torchrun the job's world size decides, whatever the machine holds
    assert unfit_reason(parse_mesh("dp=2,tp=2"), device="cuda", available=1, job_world_size=4) is None
    assert "(2 * 2 != 8)" in unfit_reason(parse_mesh("dp=2,tp=2"), device="cuda", available=8, job_world_size=8)


# --- collectives formulas -------------------------------------------------------------------------------------


def test_bus_bandwidth_factors_are_those_of_nccl_tests():
    assert bus_factor("all_reduce", 2) == 1.0
    assert bus_factor("all_reduce", 8) == pytest.approx(2 * 7 / 8)
    for op in ("all_gather", "reduce_scatter", "all_to_all"):
        assert bus_factor(op, 4) == pytest.approx(3 / 4)
    with pytest.raises(ValueError, match="needs >= 2 ranks"):
        bus_factor("all_reduce", 1)
    with pytest.raises(ValueError, match="unknown collective 'broadcast'"):
        bus_factor("broadcast", 2)
    # 1 GB in 0.1 s: 10 GB/s algorithm bandwidth, 17.5 GB/s bus bandwidth for an 8-rank all_reduce
    assert algbw_gbps(10**9, 0.1) == pytest.approx(10.0)
    assert busbw_gbps("all_reduce", 8, 10**9, 0.1) == pytest.approx(17.5)


def test_message_sizes_and_labels():
    sizes = message_sizes(4 << 20)
    assert sizes[0] == 1024 and sizes[-1] == 4 << 20 and len(sizes) == 7
    assert [size_label(s) for s in (1024, 4 << 20, 1 << 30, 1536)] == ["1KiB", "4MiB", "1GiB", "1536B"]
    assert largest_fitting(140 << 30, 8) == 8 << 30  # capped
    assert largest_fitting(10 << 30, 8) == 2 << 30  # half the memory, two buffers, a power of two
    with pytest.raises(ValueError, match="no room"):
        largest_fitting(1000, 2)


# --- training figures -----------------------------------------------------------------------------------------


def _report(rank, dp_index, dp_size, losses, seconds, tokens=256):
    return RankReport(
        rank=rank,
        dp_index=dp_index,
        dp_size=dp_size,
        losses=losses,
        step_seconds=seconds,
        tokens_per_step=tokens,
        threads=1,
    )


def test_combine_averages_data_shards_and_takes_the_slowest_rank():
    # 2x2 mesh: ranks 0,1 share shard 0 (tensor parallel pair), ranks 2,3 shard 1
    reports = [
        _report(0, 0, 2, [4.0, 3.0], [0.1, 0.2]),
        _report(1, 0, 2, [4.0, 3.0], [0.3, 0.1]),
        _report(2, 1, 2, [2.0, 1.0], [0.1, 0.1]),
        _report(3, 1, 2, [2.0, 1.0], [0.2, 0.1]),
    ]
    run = combine(reports)
    assert run.losses == [3.0, 2.0]
    assert run.step_seconds == [0.3, 0.2]
    assert run.global_tokens_per_step == 512 and run.world_size == 4
    with pytest.raises(ValueError, match="cover data shards"):
        combine(reports[:2])


def test_throughput_per_device_and_scaling_efficiency():
    single = CombinedRun(
        losses=[0.0] * 5, step_seconds=[9.0, 1.0, 1.0, 1.0, 1.0], global_tokens_per_step=100, world_size=1
    )
    double = CombinedRun(
        losses=[0.0] * 5, step_seconds=[9.0, 0.625, 0.625, 0.625, 0.625], global_tokens_per_step=100, world_size=2
    )
    assert tokens_per_s_per_device(double, warmup_steps=1) == [80.0] * 4
    assert scaling_efficiency(double, single, warmup_steps=1) == [0.8] * 4


def test_loss_mismatch_names_the_step_and_the_tolerance():
    assert loss_mismatch([5.0, 4.0], [5.0, 4.00001], tolerance=1e-4) is None
    message = loss_mismatch([5.0, 4.0, 3.5], [5.0, 4.0, 3.0], tolerance=1e-4, what="ddp on mesh dp=2")
    assert message.startswith("ddp on mesh dp=2 left the single-rank loss curve: at step 2")
    assert "> tolerance 0.0001" in message and "collective" in message


def test_job_needs_timed_steps_and_the_registry_is_complete():
    with pytest.raises(ValueError, match="fewer than 3 timed steps"):
        TrainJob(strategy="ddp", steps=5, warmup_steps=3)
    assert {"ddp", "fsdp", "tp", "fsdp_tp", "zero1", "zero2", "zero3", "zero2_offload"} <= set(STRATEGIES)
    assert get_strategy("fsdp_tp").dims == ("dp", "tp")
    with pytest.raises(KeyError, match="unknown strategy 'pp'"):
        get_strategy("pp")


def test_a_strategy_whose_package_is_missing_says_how_to_install_it():
    absent = Strategy(name="zero9", dims=("dp",), module="zero", needs="gpuperf_no_such_package")
    assert absent.missing() == (
        "strategy zero9 needs gpuperf_no_such_package, which is not installed "
        "(pip install 'pytest-gpuperf[gpuperf_no_such_package]')"
    )
    assert get_strategy("ddp").missing() is None


# --- option, fixture and reporting rank through pytester -------------------------------------------------------

MESH_TESTS = """
import pytest

def test_default(device_mesh):
    assert device_mesh.backend == "gloo" and device_mesh.device == "cpu"
    assert device_mesh.world_size == device_mesh.shape[0] and device_mesh.names is None

@pytest.mark.parametrize("device_mesh", ["dp=2,tp=2"], indirect=True)
def test_own(device_mesh):
    assert device_mesh.names == ("dp", "tp") and device_mesh.shape == (2, 2)
"""


@pytest.fixture
def mesh_project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in (*TORCHRUN, "GPUPERF_MESH", "GPUPERF_CPU_RANKS"):
        monkeypatch.delenv(name, raising=False)
    pytester.makepyfile(test_mesh=MESH_TESTS)
    return pytester


def test_mesh_option_parametrizes_and_too_large_meshes_skip(mesh_project: pytest.Pytester) -> None:
    result = mesh_project.runpytest("--gpuperf-device", "cpu", "--gpuperf-mesh", "1,2 8", "-v", "-rs")
    result.assert_outcomes(passed=3, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "*test_default?mesh=1? PASSED*",
            "*test_default?mesh=2? PASSED*",
            "*test_own?dp=2,tp=2? PASSED*",
            "*SKIPPED*mesh 8 needs 8 ranks but this machine has 4 CPU ranks allowed (--gpuperf-cpu-ranks)*",
        ]
    )
    # the test's own parametrization is kept, and it too skips when the machine is too small
    small = mesh_project.runpytest("--gpuperf-device", "cpu", "--gpuperf-cpu-ranks", "2", "-rs")
    small.assert_outcomes(passed=1, skipped=1)
    small.stdout.fnmatch_lines(["*mesh dp=2,tp=2 needs 4 ranks but this machine has 2 CPU ranks*"])


def test_bad_mesh_is_a_usage_error_naming_value_and_source(
    mesh_project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result = mesh_project.runpytest("--gpuperf-mesh", "2x0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*Invalid value '2x0' from --gpuperf-mesh: mesh '2x0': a dimension of 0 ranks*"])
    monkeypatch.setenv("GPUPERF_MESH", "dp=2,dp=2")
    result = mesh_project.runpytest()
    result.stderr.fnmatch_lines(["*from environment variable GPUPERF_MESH*repeat a name*"])
    monkeypatch.delenv("GPUPERF_MESH")
    mesh_project.makeini("[pytest]\ngpuperf_mesh = 2 banana\n")
    result = mesh_project.runpytest()
    result.stderr.fnmatch_lines(["*from ini key gpuperf_mesh in*'banana' is not a whole number*"])


RECORDING = """
def test_rate(perf):
    perf.record("rate", [100.0, 101.0, 99.0, 100.5, 99.5], unit="tok/s", higher_is_better=True)
"""


@pytest.mark.parametrize("rank, reports", [("0", True), ("1", False)])
def test_only_rank_0_judges_saves_and_reports_under_torchrun(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, rank: str, reports: bool
) -> None:
    # The environment torchrun gives each pytest process; the test itself launches nothing.
    for name, value in {
        "RANK": rank,
        "LOCAL_RANK": rank,
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": "1",
    }.items():
        monkeypatch.setenv(name, value)
    pytester.makepyfile(test_rank=RECORDING)
    result = pytester.runpytest("--gpuperf-device", "cpu", "--gpuperf-save", "--gpuperf-results", "run.json")
    result.assert_outcomes(passed=1)
    saved = sorted((pytester.path / "baselines").glob("*/*.json"))
    written = pytester.path / "run.json"
    assert bool(saved) is reports and written.exists() is reports
    assert ("baselines saved:" in result.stdout.str()) is reports
    assert ("= gpuperf =" in result.stdout.str()) is reports
    if reports:
        assert json.loads(written.read_text())["results"][0]["metric"] == "rate"
