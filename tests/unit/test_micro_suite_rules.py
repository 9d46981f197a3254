"""The GPU-only rules of the micro suite, checked on CPU: fp8 operand layout for ``torch._scaled_mm``, which GEMM
errors may skip, and which SDPA backend the profiler saw run."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import ModuleType

import pytest

SUITE = Path(__file__).resolve().parents[2] / "pytest_gpuperf" / "suites" / "test_micro.py"


def _load_suite() -> ModuleType:
    # Under its own name: pytest imports the same file as "pytest_gpuperf.suites.test_micro" when it collects the
    # suites. Its marks matter only there; where this run has not loaded the conftest that registers them, they
    # would only warn.
    spec = importlib.util.spec_from_file_location("gpuperf_micro_suite", SUITE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        spec.loader.exec_module(module)
    return module


micro = _load_suite()


@pytest.mark.parametrize("shape", micro.SHAPES)
def test_every_gpu_tier_gemm_shape_is_one_scaled_mm_takes_on_cuda(shape: str) -> None:
    if shape == "square":
        m = k = n = micro.SQUARE["cuda"]
    else:
        m, (k, n) = micro.GEMM_TOKENS["cuda"], micro.LLAMA3_8B[shape]
    micro.check_fp8_shape(m, k, n)  # raises for a K or N that is not a multiple of 16


class _Metric:
    def __init__(self) -> None:
        self.samples = [1.0]
        self.context: dict[str, object] = {}


class _Perf:
    """What measure_gemm asks of the perf fixture: the call it times, kept, and one metric's context."""

    device = "cpu"

    def __init__(self) -> None:
        self.record = _Metric()
        self.work = 0.0
        self.timed: object = None

    def measure(self, name: str, call: object, **options: object) -> None:
        self.timed, self.work = call(), float(options["work"])  # type: ignore[operator,arg-type]

    def metric(self, name: str) -> _Metric:
        return self.record


class _Sizing:
    def measure(self, precision: str, **options: object) -> object:
        return type("Plan", (), {"warmup": 0, "repeats": 1})()

    def annotate(self, record: object) -> None:
        pass

    def for_information(self, record: object, precision: str) -> None:
        pass


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_slowed_gemm_multiplies_more_rows_and_counts_the_nominal_work(precision: str) -> None:
    pytest.importorskip("torch")
    nominal, slowed = _Perf(), _Perf()
    for perf, slowdown in ((nominal, 0.0), (slowed, 0.10)):
        micro.measure_gemm(perf, _Sizing(), None, precision=precision, shape=(64, 32, 48), device="cpu",
                           slowdown=slowdown)  # fmt: skip
    assert tuple(nominal.timed.shape) == (64, 48)  # type: ignore[attr-defined]
    assert tuple(slowed.timed.shape) == (71, 48)  # type: ignore[attr-defined]  # 64 rows + 10%, rounded up
    assert slowed.work == nominal.work == 2 * 64 * 32 * 48 / 1e12
    assert slowed.record.context["injected_slowdown"] == 0.10
    assert slowed.record.context["worked_shape"] == {"m": 71, "k": 32, "n": 48}
    assert "worked_shape" not in nominal.record.context and "injected_slowdown" not in nominal.record.context


def test_a_shape_scaled_mm_refuses_is_named() -> None:
    with pytest.raises(ValueError, match="K=4100 is not a multiple of 16"):
        micro.check_fp8_shape(64, 4100, 4096)


def test_fp8_operands_are_row_major_times_column_major_with_fp32_scalar_scales() -> None:
    torch = pytest.importorskip("torch")
    m, k, n = 32, 64, 48
    a, b, scale = micro.fp8_operands(m, k, n, "cpu", torch.Generator().manual_seed(0))
    assert a.dtype == b.dtype == torch.float8_e4m3fn
    assert a.shape == (m, k) and a.stride() == (k, 1)  # row-major
    assert b.shape == (k, n) and b.stride() == (1, k)  # column-major: what cuBLASLt takes on sm_90
    assert scale.dtype == torch.float32 and scale.numel() == 1  # per-tensor ("tensorwise") scaling
    out = torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
    reference = a.float() @ b.float()
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), reference, rtol=1e-2, atol=1e-1)


@pytest.mark.parametrize(
    ("precision", "device", "capability", "hip", "skips"),
    [
        ("fp8", "cuda", (9, 0), False, False),  # H100/H200: an fp8 error is a failure, not a skip
        ("fp16", "cuda", (9, 0), False, False),
        ("bf16", "cuda", (8, 0), False, False),
        ("fp8", "cuda", (8, 9), False, False),  # L4/L40S have fp8 tensor cores
        ("fp8", "cuda", (8, 0), False, True),  # A100 has none
        ("fp8", "cuda", (9, 4), True, True),  # ROCm: float8 flavour per part not tracked
        ("bf16", "cuda", (9, 4), True, False),
        ("fp16", "cpu", None, False, True),
        ("fp8", "cpu", None, False, True),
        ("fp32", "cpu", None, False, False),
    ],
)
def test_gemm_errors_skip_only_where_the_device_lacks_the_path(
    precision: str, device: str, capability: tuple[int, int] | None, hip: bool, skips: bool
) -> None:
    reason = micro.gemm_errors_skip(precision, device, capability, hip)
    assert (reason is not None) == skips
    if reason is not None:
        assert precision in reason


# Profiler keys of a forced SDPA forward: the public op, the backend's op, what it calls underneath.
RECORDED_FORWARD_OPS = {
    "flash": {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_flash_attention",
        "aten::_flash_attention_forward",
        "aten::empty",
        "aten::transpose",
    },
    "efficient": {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_efficient_attention",
        "aten::_efficient_attention_forward",
        "aten::empty",
    },
    "math": {
        "aten::scaled_dot_product_attention",
        "aten::_scaled_dot_product_attention_math",
        "aten::matmul",
        "aten::_softmax",
        "aten::bmm",
    },
    "cudnn": {"aten::scaled_dot_product_attention", "aten::_scaled_dot_product_cudnn_attention", "aten::empty"},
}


@pytest.mark.parametrize("backend", list(RECORDED_FORWARD_OPS))
def test_each_backend_is_told_from_the_others_by_its_op(backend: str) -> None:
    assert micro.sdpa_backends_ran(RECORDED_FORWARD_OPS[backend]) == [backend]


def test_cpu_flash_op_counts_as_flash_and_no_sdpa_op_as_none() -> None:
    assert micro.sdpa_backends_ran({"aten::_scaled_dot_product_flash_attention_for_cpu"}) == ["flash"]
    assert micro.sdpa_backends_ran({"aten::scaled_dot_product_attention", "aten::bmm"}) == []


def test_every_backend_op_exists_in_this_torch() -> None:
    """A renamed op would make every forced run look like a silent fallback."""
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend

    for backend, (member, op) in micro.SDPA_BACKENDS.items():
        assert hasattr(SDPBackend, member), backend
        assert hasattr(torch.ops.aten, op), f"{backend}: aten::{op} is not an op of torch {torch.__version__}"


@pytest.mark.parametrize(("member", "expected"), [("FLASH_ATTENTION", ["flash"]), ("MATH", ["math"])])
def test_the_profiler_sees_the_forced_backend_run_on_cpu(member: str, expected: list[str]) -> None:
    torch = pytest.importorskip("torch")
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.functional import scaled_dot_product_attention

    q, k, v = (torch.randn(1, 2, 32, 16) for _ in range(3))
    with sdpa_kernel([getattr(SDPBackend, member)]):
        ran = micro._forward_ops(lambda: scaled_dot_product_attention(q, k, v, is_causal=True))
    assert micro.sdpa_backends_ran(ran) == expected
