"""The peak table: name matching, units, dtype spellings, and that every figure carries a source."""

from __future__ import annotations

import pytest

from pytest_gpuperf.machine import peaks
from pytest_gpuperf.machine.peaks import DTYPES, canonical_dtype, known_devices, lookup

# Names as NVML / amdsmi / torch.cuda.get_device_name report them, with the entry they must hit.
REPORTED_NAMES = [
    ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5"),
    ("NVIDIA H100 SXM5 80GB", "NVIDIA H100 SXM5"),
    ("NVIDIA H100 PCIe", "NVIDIA H100 PCIe"),
    ("NVIDIA H200", "NVIDIA H200 SXM"),
    ("NVIDIA B200", "NVIDIA B200"),
    ("NVIDIA GB200", "NVIDIA GB200 (one Blackwell GPU)"),
    ("AMD Instinct MI300X", "AMD Instinct MI300X"),
    ("AMD Instinct MI300X VF", "AMD Instinct MI300X"),
    ("AMD Instinct MI325X", "AMD Instinct MI325X"),
    ("AMD Instinct MI355X", "AMD Instinct MI355X"),
    # Case and punctuation do not matter.
    ("nvidia h200", "NVIDIA H200 SXM"),
    ("NVIDIA-H100-PCIe", "NVIDIA H100 PCIe"),
]

# Close to a listed name but a different part (or no part at all): must be None, never a sibling.
NEAR_MISSES = [
    "NVIDIA H100 NVL",
    "NVIDIA H200 NVL",
    "NVIDIA GH200 480GB",
    "NVIDIA H800",
    "NVIDIA H20",
    "NVIDIA H1000",
    "NVIDIA B200A",
    "NVIDIA B300 SXM6 AC",
    "NVIDIA GB300",
    "NVIDIA A100-SXM4-80GB",
    "AMD Instinct MI300A",
    "AMD Instinct MI350X",
    "AMD Instinct MI3000X",
    "cpu",
    "Intel(R) Xeon(R) CPU",
    "",
    None,
]


@pytest.mark.parametrize(("reported", "expected"), REPORTED_NAMES)
def test_reported_names_find_their_entry(reported: str, expected: str) -> None:
    entry = lookup(reported)
    assert entry is not None, reported
    assert entry.name == expected


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_near_misses_and_unknown_names_are_none(name: str | None) -> None:
    assert lookup(name) is None


def test_h100_and_h200_are_told_apart() -> None:
    h100, h200 = lookup("NVIDIA H100 80GB HBM3"), lookup("NVIDIA H200")
    assert h100 is not None and h200 is not None
    assert h100.hbm_tbps == pytest.approx(3.35)
    assert h200.hbm_tbps == pytest.approx(4.8)


def test_every_listed_part_is_in_the_table() -> None:
    names = {entry.name for entry in known_devices()}
    assert names == {expected for _, expected in REPORTED_NAMES}


@pytest.mark.parametrize("entry", known_devices(), ids=lambda e: e.name)
def test_every_figure_is_dense_positive_and_sourced(entry: peaks.DevicePeaks) -> None:
    assert entry.vendor in {"nvidia", "amd"}
    assert 1.0 < entry.hbm_tbps < 20.0  # TB/s, not GB/s
    assert "bandwidth" in entry.hbm_source
    assert entry.hbm.value == entry.hbm_tbps
    assert set(entry.peaks) <= set(DTYPES)
    for key in ("fp32", "bf16", "fp16", "fp8"):
        assert key in entry.peaks, (entry.name, key)
    for key, peak in entry.peaks.items():
        assert peak.value > 0, (entry.name, key)
        assert entry.tflops(key) is peak
        if entry.vendor == "nvidia" and key in {"tf32", "bf16", "fp16", "fp8", "fp4"}:
            # NVIDIA prints Tensor Core figures with sparsity; the table must have halved them.
            assert "halved to dense" in peak.source, peak.source
        assert "sheet" in peak.source or "specifications" in peak.source, peak.source


@pytest.mark.parametrize("entry", known_devices(), ids=lambda e: e.name)
def test_precision_ordering_holds(entry: peaks.DevicePeaks) -> None:
    """Narrower types are never slower than wider ones on these parts (catches a slipped digit)."""
    values = [entry.peaks[k].value for k in DTYPES if k in entry.peaks and k != "tf32"]
    assert values == sorted(values)
    assert entry.peaks["bf16"].value == entry.peaks["fp16"].value


def test_units_are_tflops_with_known_anchor_values() -> None:
    h100 = lookup("NVIDIA H100 80GB HBM3")
    b200 = lookup("NVIDIA B200")
    mi300x = lookup("AMD Instinct MI300X")
    assert h100 is not None and b200 is not None and mi300x is not None
    assert h100.tflops("bf16").value == pytest.approx(989.5)  # 1,979 sparse / 2
    assert h100.tflops("fp8").value == pytest.approx(1979.0)
    assert b200.tflops("fp4").value == pytest.approx(9000.0)  # 18 PFLOPS sparse / 2, in TFLOP/s
    assert mi300x.tflops("bf16").value == pytest.approx(1307.4)  # AMD prints dense


def test_dtypes_a_part_lacks_are_none() -> None:
    h200, mi355x = lookup("NVIDIA H200"), lookup("AMD Instinct MI355X")
    assert h200 is not None and mi355x is not None
    assert h200.tflops("fp4") is None
    assert mi355x.tflops("tf32") is None
    assert mi355x.tflops("fp4") is not None


@pytest.mark.parametrize(
    ("spelling", "key"),
    [
        ("bf16", "bf16"),
        ("bfloat16", "bf16"),
        ("torch.bfloat16", "bf16"),
        ("half", "fp16"),
        ("torch.float8_e4m3fn", "fp8"),
        ("float8_e5m2", "fp8"),
        ("FP32", "fp32"),
        ("torch.float4_e2m1fn_x2", "fp4"),
        ("double", "fp64"),
        ("tf32", "tf32"),
    ],
)
def test_dtype_spellings(spelling: str, key: str) -> None:
    assert canonical_dtype(spelling) == key


def test_unknown_dtype_is_an_error_naming_the_value() -> None:
    entry = lookup("NVIDIA H200")
    assert entry is not None
    with pytest.raises(ValueError, match=r"'int8'.*fp64, fp32"):
        entry.tflops("int8")


def test_peaks_module_does_not_import_torch() -> None:
    assert "torch" not in vars(peaks)
    assert "import torch" not in open(peaks.__file__, encoding="utf-8").read()
