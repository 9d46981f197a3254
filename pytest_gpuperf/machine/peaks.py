"""Vendor peak throughput and HBM bandwidth per accelerator, for "% of peak" and MFU.

Pure data and a name matcher: no torch, no device access. Every figure is the DENSE peak for one GPU in TFLOP/s,
with the vendor document it comes from (NVIDIA's sparse figures halved, and the source says so). For each dtype
it is the best dense rate a GEMM in that dtype can reach on the part (the Tensor/Matrix Core rate where there is
one, the vector rate otherwise). A dtype the part does not run natively has no entry and ``tflops`` answers None;
there is no CPU entry for the same reason. Usage: ``lookup(device_name).tflops("bf16")``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["DTYPES", "DevicePeaks", "Peak", "canonical_dtype", "known_devices", "lookup"]

DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4")
"""The dtype keys of the table, widest first."""

# Spellings a caller is likely to hold: our short names, torch dtype names (with or without the
# "torch." prefix) and the usual long names. fp8 covers both e4m3 and e5m2 (same rate on all parts
# listed); fp4 is the packed e2m1 type torch exposes.
_DTYPE_ALIASES: Mapping[str, str] = {
    "fp64": "fp64",
    "float64": "fp64",
    "double": "fp64",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "tf32": "tf32",
    "tensorfloat32": "tf32",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2fnuz": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "fp4": "fp4",
    "float4_e2m1fn_x2": "fp4",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
    "e2m1": "fp4",
}


def canonical_dtype(dtype: object) -> str:
    """Map a dtype spelling ("bf16", "bfloat16", torch.bfloat16, ...) to a key of DTYPES.

    Raises ValueError naming the value and the accepted keys when it is not a dtype we know.
    """
    text = str(dtype).strip().lower().removeprefix("torch.")
    try:
        return _DTYPE_ALIASES[text]
    except KeyError:
        raise ValueError(
            f"unknown dtype {dtype!r} for a peak lookup; use one of {', '.join(DTYPES)}"
            " (torch dtypes such as torch.bfloat16 are accepted too)"
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class Peak:
    """One dense peak figure and where it comes from."""

    value: float
    """Dense peak in TFLOP/s (for a bandwidth: TB/s), one GPU."""
    source: str
    """Vendor document and what it states, including any halving of a sparse figure."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DevicePeaks:
    """The peak figures of one accelerator model."""

    name: str
    """Canonical model name, e.g. "NVIDIA H100 SXM5"."""
    vendor: str
    """"nvidia" or "amd"."""
    hbm_tbps: float
    """Peak HBM bandwidth in TB/s (10^12 bytes per second)."""
    hbm_source: str
    """Vendor document for hbm_tbps."""
    peaks: Mapping[str, Peak] = field(default_factory=dict)
    """Dense TFLOP/s per DTYPES key; a dtype the part does not run natively is absent."""

    def tflops(self, dtype: object) -> Peak | None:
        """The dense peak for `dtype` (any spelling canonical_dtype accepts), or None when the
        part has no native support for it. An unknown dtype raises ValueError."""
        return self.peaks.get(canonical_dtype(dtype))

    @property
    def hbm(self) -> Peak:
        """hbm_tbps and its source as one Peak (value in TB/s)."""
        return Peak(value=self.hbm_tbps, source=self.hbm_source)


# --- the table --------------------------------------------------------------------------------

_H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet"
_H200_SHEET = "NVIDIA H200 Tensor Core GPU datasheet"
_BLACKWELL_SHEET = "NVIDIA HGX platform specifications (HGX B200 / GB200 NVL72 per-GPU columns)"
_MI300X_SHEET = "AMD Instinct MI300X accelerator data sheet"
_MI325X_SHEET = "AMD Instinct MI325X accelerator data sheet"
_MI355X_SHEET = "AMD Instinct MI355X accelerator data sheet"


def _nv_sparse(sheet: str, column: str, row: str, sparse: float) -> Peak:
    """A Tensor Core figure that NVIDIA prints with sparsity: halve it and say so."""
    return Peak(
        value=sparse / 2,
        source=f"{sheet}, {column}: {row} {sparse:,g} TFLOPS with sparsity; halved to dense",
    )


def _printed(sheet: str, column: str, row: str, value: float, unit: str = "TFLOPS", note: str = "") -> Peak:
    """A figure taken as the vendor prints it (dense already); `note` adds the sparse figure."""
    return Peak(value=value, source=f"{sheet}, {column}: {row} {value:,g} {unit}{note}")


def _hopper(
    sheet: str, column: str, *, fp64_tc: float, fp32: float, tf32_sp: float, bf16_sp: float, fp8_sp: float
) -> dict[str, Peak]:
    return {
        "fp64": _printed(sheet, column, "FP64 Tensor Core", fp64_tc),
        "fp32": _printed(sheet, column, "FP32", fp32),
        "tf32": _nv_sparse(sheet, column, "TF32 Tensor Core", tf32_sp),
        "bf16": _nv_sparse(sheet, column, "BF16 Tensor Core", bf16_sp),
        "fp16": _nv_sparse(sheet, column, "FP16 Tensor Core", bf16_sp),
        "fp8": _nv_sparse(sheet, column, "FP8 Tensor Core", fp8_sp),
    }


def _blackwell(
    column: str, *, fp64: float, fp32: float, tf32_sp: float, bf16_sp: float, fp8_sp: float, fp4_sp: float
) -> dict[str, Peak]:
    # The HGX page prints the per-GPU Tensor Core rows in PFLOPS, with sparsity (its footnote);
    # FP32 and FP64 are printed dense in TFLOPS.
    def sparse_pf(row: str, pflops: float) -> Peak:
        return Peak(
            value=pflops * 1000 / 2,
            source=f"{_BLACKWELL_SHEET}, {column}: {row} {pflops:g} PFLOPS with sparsity; halved to dense",
        )

    return {
        "fp64": _printed(_BLACKWELL_SHEET, column, "FP64/FP64 Tensor Core", fp64),
        "fp32": _printed(_BLACKWELL_SHEET, column, "FP32", fp32),
        "tf32": sparse_pf("TF32 Tensor Core", tf32_sp),
        "bf16": sparse_pf("FP16/BF16 Tensor Core", bf16_sp),
        "fp16": sparse_pf("FP16/BF16 Tensor Core", bf16_sp),
        "fp8": sparse_pf("FP8/FP6 Tensor Core", fp8_sp),
        "fp4": sparse_pf("FP4 Tensor Core", fp4_sp),
    }


def _cdna3(sheet: str) -> dict[str, Peak]:
    # MI300X and MI325X share the CDNA 3 die and clocks: AMD prints the same compute figures for both.
    return {
        "fp64": _printed(sheet, "peak", "FP64 Matrix", 163.4),
        "fp32": _printed(sheet, "peak", "FP32 Matrix (same as FP32 Vector)", 163.4),
        "tf32": _printed(sheet, "peak", "TF32 Matrix", 653.7, note=" (dense; 1,307.4 with sparsity)"),
        "bf16": _printed(sheet, "peak", "BF16", 1307.4, note=" (dense; 2,614.9 with sparsity)"),
        "fp16": _printed(sheet, "peak", "FP16", 1307.4, note=" (dense; 2,614.9 with sparsity)"),
        "fp8": _printed(sheet, "peak", "FP8", 2614.9, note=" (dense; 5,229.8 with sparsity)"),
    }


def _cdna4(sheet: str) -> dict[str, Peak]:
    # CDNA 4 has no TF32 (xf32) matrix type, so there is no tf32 entry; FP64 matrix runs at the
    # vector rate on this generation.
    return {
        "fp64": _printed(sheet, "peak", "FP64 Matrix (same as FP64 Vector)", 78.6),
        "fp32": _printed(sheet, "peak", "FP32 Matrix (same as FP32 Vector)", 157.3),
        "bf16": _printed(sheet, "peak", "BF16", 2516.6, note=" (dense; 5,033.2 with sparsity)"),
        "fp16": _printed(sheet, "peak", "FP16", 2516.6, note=" (dense; 5,033.2 with sparsity)"),
        "fp8": _printed(sheet, "peak", "FP8", 5033.2, note=" (dense; 10,066.3 with sparsity)"),
        "fp4": _printed(sheet, "peak", "MXFP4", 10066.3, note=" (dense; 20,132.7 with sparsity)"),
    }


def _entry(name: str, vendor: str, hbm: Peak, peaks: dict[str, Peak]) -> DevicePeaks:
    assert set(peaks) <= set(DTYPES), peaks.keys()
    return DevicePeaks(
        name=name, vendor=vendor, hbm_tbps=hbm.value, hbm_source=hbm.source, peaks=MappingProxyType(peaks)
    )


_H100_SXM = _entry(
    "NVIDIA H100 SXM5",
    "nvidia",
    _printed(_H100_SHEET, "H100 SXM", "GPU memory bandwidth", 3.35, "TB/s"),
    _hopper(_H100_SHEET, "H100 SXM", fp64_tc=67, fp32=67, tf32_sp=989, bf16_sp=1979, fp8_sp=3958),
)
_H100_PCIE = _entry(
    "NVIDIA H100 PCIe",
    "nvidia",
    _printed(_H100_SHEET, "H100 PCIe", "GPU memory bandwidth", 2.0, "TB/s"),
    _hopper(_H100_SHEET, "H100 PCIe", fp64_tc=51, fp32=51, tf32_sp=756, bf16_sp=1513, fp8_sp=3026),
)
_H200 = _entry(
    "NVIDIA H200 SXM",
    "nvidia",
    _printed(_H200_SHEET, "H200 SXM", "GPU memory bandwidth", 4.8, "TB/s"),
    _hopper(_H200_SHEET, "H200 SXM", fp64_tc=67, fp32=67, tf32_sp=989, bf16_sp=1979, fp8_sp=3958),
)
_B200 = _entry(
    "NVIDIA B200",
    "nvidia",
    # Earlier DGX B200 material said 8 TB/s per GPU (64 TB/s for 8); the current HGX table says 7.7.
    _printed(_BLACKWELL_SHEET, "HGX B200 per GPU", "GPU memory bandwidth", 7.7, "TB/s"),
    _blackwell("HGX B200 per GPU", fp64=37, fp32=75, tf32_sp=2.2, bf16_sp=4.5, fp8_sp=9, fp4_sp=18),
)
_GB200 = _entry(
    "NVIDIA GB200 (one Blackwell GPU)",
    "nvidia",
    _printed(_BLACKWELL_SHEET, "GB200 NVL72 per GPU", "GPU memory bandwidth", 8.0, "TB/s"),
    _blackwell("GB200 NVL72 per GPU", fp64=40, fp32=80, tf32_sp=2.5, bf16_sp=5, fp8_sp=10, fp4_sp=20),
)
_MI300X = _entry(
    "AMD Instinct MI300X",
    "amd",
    _printed(_MI300X_SHEET, "peak", "HBM3 memory bandwidth", 5.3, "TB/s"),
    _cdna3(_MI300X_SHEET),
)
_MI325X = _entry(
    "AMD Instinct MI325X",
    "amd",
    _printed(_MI325X_SHEET, "peak", "HBM3E memory bandwidth", 6.0, "TB/s"),
    _cdna3(_MI325X_SHEET),
)
_MI355X = _entry(
    "AMD Instinct MI355X",
    "amd",
    _printed(_MI355X_SHEET, "peak", "HBM3E memory bandwidth", 8.0, "TB/s"),
    _cdna4(_MI355X_SHEET),
)

# Product names as NVML, amdsmi and torch.cuda.get_device_name report them, after _normalise (upper
# case, vendor words dropped, punctuation to single spaces). Each pattern must match the WHOLE name,
# so "H100" never matches "H200", "GH200" or "H100 NVL", and a variant we have no figures for
# (H100 NVL, H200 NVL, H800, MI300A, MI350X) is unknown rather than borrowed from a sibling.
_PATTERNS: tuple[tuple[re.Pattern[str], DevicePeaks], ...] = tuple(
    (re.compile(pattern), entry)
    for pattern, entry in (
        (r"H100( SXM5?)?( 80GB)?( HBM3)?", _H100_SXM),  # NVML: "NVIDIA H100 80GB HBM3"
        (r"H100 PCIE( 80GB)?", _H100_PCIE),  # NVML: "NVIDIA H100 PCIe"
        (r"H200( SXM5?)?( 141GB)?( HBM3E)?", _H200),  # NVML: "NVIDIA H200"
        (r"B200( SXM6?)?( 180GB| 192GB)?( HBM3E)?", _B200),  # NVML: "NVIDIA B200"
        (r"GB200", _GB200),  # NVML: "NVIDIA GB200"
        # ROCm guests under SR-IOV report a "VF" suffix; same silicon and clocks.
        (r"MI300X( OAM)?( VF)?", _MI300X),  # "AMD Instinct MI300X"
        (r"MI325X( OAM)?( VF)?", _MI325X),
        (r"MI355X( OAM)?( VF)?", _MI355X),
    )
)

_VENDOR_WORDS = frozenset({"NVIDIA", "AMD", "INSTINCT", "TESLA"})


def _normalise(product_name: str) -> str:
    words = re.sub(r"[^0-9A-Za-z]+", " ", product_name).upper().split()
    return " ".join(word for word in words if word not in _VENDOR_WORDS)


def lookup(product_name: str | None) -> DevicePeaks | None:
    """The peak table entry for a product name as NVML / amdsmi / torch report it, or None.

    None means "no vendor figures for this device" (a CPU, an unlisted GPU, a variant such as
    "NVIDIA H100 NVL" whose figures differ from its sibling's): callers report "% of peak" as
    unavailable instead of guessing.
    """
    if not product_name:
        return None
    name = _normalise(product_name)
    for pattern, entry in _PATTERNS:
        if pattern.fullmatch(name):
            return entry
    return None


def known_devices() -> tuple[DevicePeaks, ...]:
    """Every entry of the table, in table order (for listings and tests)."""
    entries: list[DevicePeaks] = []
    for _, entry in _PATTERNS:
        if not any(entry is seen for seen in entries):
            entries.append(entry)
    return tuple(entries)
