"""Training precisions: what each one means, whether a device can run it, and how a model is prepared for it.

The registry and :func:`unsupported_reason` need no torch at import (collection can skip early); torch and
torchao are imported when a model is prepared.

A precision runs ``native`` when the device's arithmetic works in that format, ``emulated`` when the values
are rounded to the format but the arithmetic is wider (fp8 on a CPU, fp4 everywhere here). The result of a
workload must carry that flag; MFU is only meaningful for native runs with a stated peak
(:attr:`PreparedModel.mfu_peak_dtype`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import torch
    from torch import nn

FP8_DIM_MULTIPLE = 16
"""``torch._scaled_mm`` needs every dimension of its operands to be a multiple of this."""

__all__ = [
    "FP8_DIM_MULTIPLE",
    "PRECISIONS",
    "PrecisionSpec",
    "PrecisionUnsupported",
    "PreparedModel",
    "execution_mode",
    "get_precision",
    "prepare",
    "unsupported_reason",
]

Execution = Literal["native", "emulated"]


@dataclass(frozen=True, kw_only=True, slots=True)
class PrecisionSpec:
    """How a training step computes: matmul format, autocast, loss scaling."""

    name: str
    """Registry name, as given to ``--gpuperf-precisions``."""
    matmul_format: str
    """Format the linear layers' matmuls consume (e.g. ``float8_e4m3fn``, ``mxfp4 e2m1``)."""
    autocast_dtype: str | None
    """torch dtype name of the autocast region around forward (None: no autocast)."""
    loss_scaling: bool = False
    """Scale the loss (``torch.amp.GradScaler``) so fp16 gradients do not underflow."""
    float32_matmul_precision: str | None = None
    """``torch.set_float32_matmul_precision`` inside the step: "highest" for fp32, "high" allows TF32."""
    fp8_recipe: str | None = None
    """torchao float8 training recipe (``tensorwise`` or ``rowwise``); None when not fp8."""
    fp4_block_size: int | None = None
    """Elements sharing one e8m0 scale in the MXFP4 emulation; None when not fp4."""
    peak_dtype: str | None = None
    """Column of the peak-FLOPs table MFU is computed against; None: MFU would mislead (mixed formats)."""
    description: str = ""
    """One line for reports."""


PRECISIONS: dict[str, PrecisionSpec] = {
    p.name: p
    for p in (
        PrecisionSpec(name="fp32", matmul_format="float32", autocast_dtype=None,
                      float32_matmul_precision="highest", peak_dtype="fp32",
                      description="fp32 weights and matmuls, TF32 disabled"),
        PrecisionSpec(name="tf32", matmul_format="tf32", autocast_dtype=None, float32_matmul_precision="high",
                      peak_dtype="tf32", description="fp32 weights, matmuls on TF32 tensor cores"),
        PrecisionSpec(name="bf16", matmul_format="bfloat16", autocast_dtype="bfloat16", peak_dtype="bf16",
                      description="fp32 master weights, bf16 autocast"),
        PrecisionSpec(name="fp16", matmul_format="float16", autocast_dtype="float16", loss_scaling=True,
                      peak_dtype="fp16", description="fp32 master weights, fp16 autocast, dynamic loss scaling"),
        PrecisionSpec(name="fp8", matmul_format="float8_e4m3fn (tensorwise scales)", autocast_dtype="bfloat16",
                      fp8_recipe="tensorwise",
                      description="torchao float8 training, tensorwise recipe; other ops in bf16 autocast"),
        PrecisionSpec(name="fp8-rowwise", matmul_format="float8_e4m3fn (rowwise scales)",
                      autocast_dtype="bfloat16", fp8_recipe="rowwise",
                      description="torchao float8 training, rowwise recipe; other ops in bf16 autocast"),
        PrecisionSpec(name="fp4", matmul_format="mxfp4 (e2m1, e8m0 scale per 32)", autocast_dtype="bfloat16",
                      fp4_block_size=32,
                      description="MXFP4 operands of every linear's three matmuls, emulated by "
                                  "quantise-dequantise; other ops in bf16 autocast"),
    )
}  # fmt: skip


class PrecisionUnsupported(RuntimeError):
    """The device cannot run the precision; the message names both and why."""


def get_precision(name: str) -> PrecisionSpec:
    try:
        return PRECISIONS[name]
    except KeyError:
        raise KeyError(f"unknown precision {name!r}; known: {', '.join(PRECISIONS)}") from None


# -- what a device can do -------------------------------------------------------------------------------


def unsupported_reason(precision: str | PrecisionSpec, device: str | torch.device) -> str | None:
    """Why ``device`` cannot train in ``precision`` (a message naming both), or None when it can."""
    spec = get_precision(precision) if isinstance(precision, str) else precision
    dev = _device_type(device)
    where = f"{spec.name} on {dev}"
    if dev == "cpu":
        if spec.name == "tf32":
            return f"{where}: TF32 is a GPU tensor-core format; CPU matmuls have no TF32 mode to test"
        if spec.name == "fp16" and not _cpu_flags() & {"avx512_fp16", "amx_fp16"}:
            return (f"{where}: this CPU has no native fp16 arithmetic (no avx512_fp16 or amx_fp16 flag); "
                    "run fp16 on a GPU")  # fmt: skip
    elif dev == "cuda":
        import torch

        if not torch.cuda.is_available():
            return f"{where}: torch.cuda.is_available() is False"
        hip = torch.version.hip is not None
        cap = torch.cuda.get_device_capability()
        if spec.name == "tf32" and (hip or cap < (8, 0)):
            what = "ROCm builds of torch" if hip else f"compute capability {cap[0]}.{cap[1]} (needs 8.0+)"
            return f"{where}: TF32 matmuls are not available with {what}"
        if spec.fp8_recipe is not None and not hip:
            need = (9, 0) if spec.fp8_recipe == "rowwise" else (8, 9)
            if cap < need:
                return (f"{where}: torch._scaled_mm {spec.fp8_recipe} needs compute capability "
                        f"{need[0]}.{need[1]}+, this GPU is {cap[0]}.{cap[1]}")  # fmt: skip
    else:
        return f"{where}: only cpu and cuda devices are supported"
    if spec.fp8_recipe is not None and (problem := _torchao_float8_problem()) is not None:
        return f"{where}: fp8 training is torchao's float8 recipe, and {problem}"
    return None


def execution_mode(precision: str | PrecisionSpec, device: str | torch.device) -> Execution:
    """``native`` if the device computes in the format, ``emulated`` if values are rounded to it but the
    arithmetic is wider. Only meaningful when :func:`unsupported_reason` is None."""
    spec = get_precision(precision) if isinstance(precision, str) else precision
    dev = _device_type(device)
    if spec.fp4_block_size is not None:
        return "emulated"  # native MXFP4/NVFP4 training kernels (sm100+) are not wired in: not claimed
    if dev == "cpu":
        if spec.fp8_recipe is not None:
            return "emulated"  # torch._scaled_mm runs on CPU, but no CPU has fp8 matrix units
        if spec.name == "bf16" and not _cpu_flags() & {"avx512_bf16", "amx_bf16"}:
            return "emulated"
        return "native"
    import torch

    if spec.name == "bf16" and torch.version.hip is None and torch.cuda.get_device_capability() < (8, 0):
        return "emulated"
    return "native"


# -- preparing a model ----------------------------------------------------------------------------------


@dataclass(kw_only=True, slots=True)
class PreparedModel:
    """A model converted for a precision, and the step machinery that precision needs.

    Use as::

        with prepared.autocast():
            loss = spec.loss(prepared.model, x, y)
        prepared.backward_and_step(loss, optimizer)
    """

    model: nn.Module
    """The (in-place converted) model: fp8 / fp4 linears swapped in where the precision asks."""
    precision: PrecisionSpec
    """What was asked for."""
    device: str
    """Device type ("cpu" or "cuda")."""
    execution: Execution
    """``native`` or ``emulated`` (see the module docstring)."""
    converted: tuple[str, ...] = ()
    """Qualified names of the linears converted to fp8 / fp4 (empty for fp32/tf32/bf16/fp16)."""
    scaler: Any = None
    """``torch.amp.GradScaler`` for loss-scaled precisions, else None."""
    notes: tuple[str, ...] = field(default_factory=tuple)
    """Facts a report should show (what was emulated, which layers kept high precision)."""

    @property
    def mfu_peak_dtype(self) -> str | None:
        """Peak-table column for MFU, or None where MFU would mislead (emulated, or mixed fp8/fp4 + bf16)."""
        return self.precision.peak_dtype if self.execution == "native" else None

    @contextlib.contextmanager
    def autocast(self) -> Iterator[None]:
        """Forward-pass context: autocast to the precision's dtype and its fp32 matmul precision."""
        import torch

        previous = torch.get_float32_matmul_precision()
        if self.precision.float32_matmul_precision is not None:
            torch.set_float32_matmul_precision(self.precision.float32_matmul_precision)
        try:
            if self.precision.autocast_dtype is None:
                yield
            else:
                with torch.autocast(self.device, dtype=getattr(torch, self.precision.autocast_dtype)):
                    yield
        finally:
            torch.set_float32_matmul_precision(previous)

    def backward_and_step(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """Backward (scaled when the precision loss-scales), optimizer step, zero the gradients."""
        import torch

        previous = torch.get_float32_matmul_precision()
        if self.precision.float32_matmul_precision is not None:
            torch.set_float32_matmul_precision(self.precision.float32_matmul_precision)
        try:
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.step(optimizer)
                self.scaler.update()
            else:
                loss.backward()
                optimizer.step()
        finally:
            torch.set_float32_matmul_precision(previous)
        optimizer.zero_grad(set_to_none=True)


def prepare(
    model: nn.Module,
    precision: str | PrecisionSpec,
    device: str | torch.device,
    *,
    skip: Callable[[str], bool] | None = None,
) -> PreparedModel:
    """Convert ``model`` in place for ``precision`` on ``device``; raise :class:`PrecisionUnsupported` if it
    cannot run there (check :func:`unsupported_reason` first to skip instead).

    fp8 and fp4 convert every ``nn.Linear`` except the output projection (``output``, kept in high
    precision as torchtitan and Transformer Engine recipes do), those ``skip(fqn)`` rejects and, for fp8,
    those whose dimensions are not multiples of 16 (``torch._scaled_mm`` needs them).
    """
    spec = get_precision(precision) if isinstance(precision, str) else precision
    dev = _device_type(device)
    reason = unsupported_reason(spec, dev)
    if reason is not None:
        raise PrecisionUnsupported(reason)
    import torch

    def keep_high(fqn: str) -> bool:
        # ``output`` in the built-in models, ``lm_head`` in transformers' causal LMs
        return fqn.rsplit(".", 1)[-1] in ("output", "lm_head") or (skip is not None and skip(fqn))

    converted: tuple[str, ...] = ()
    notes: list[str] = []
    if spec.fp8_recipe is not None:
        converted = _convert_fp8(model, spec.fp8_recipe, keep_high)
        if dev == "cpu":
            notes.append(
                "fp8 values and scales are real (torch._scaled_mm), but the CPU multiplies them in wider arithmetic"
            )
    elif spec.fp4_block_size is not None:
        converted = _convert_fp4(model, spec.fp4_block_size, keep_high)
        notes.append(
            f"MXFP4 emulated: operands of forward and both backward matmuls are rounded to e2m1 with an "
            f"e8m0 scale per {spec.fp4_block_size} elements along the reduction dim; arithmetic in fp32"
        )
    if spec.fp8_recipe is not None or spec.fp4_block_size is not None:
        if not converted:
            raise PrecisionUnsupported(f"{spec.name} on {dev}: no linear layer of the model could be converted")
        notes.append("kept in high precision: output projection")
    scaler = torch.amp.GradScaler(dev) if spec.loss_scaling else None
    return PreparedModel(
        model=model,
        precision=spec,
        device=dev,
        execution=execution_mode(spec, dev),
        converted=converted,
        scaler=scaler,
        notes=tuple(notes),
    )


def _convert_fp8(model: nn.Module, recipe: str, keep_high: Callable[[str], bool]) -> tuple[str, ...]:
    from torch import nn
    from torchao.float8 import Float8LinearConfig, convert_to_float8_training

    chosen: list[str] = []

    def accept(module: nn.Module, fqn: str) -> bool:
        # torchao asks about nn.Linear modules only; the check says so to the type checker too
        ok = (
            isinstance(module, nn.Linear)
            and not keep_high(fqn)
            and module.in_features % FP8_DIM_MULTIPLE == 0
            and module.out_features % FP8_DIM_MULTIPLE == 0
        )
        if ok:
            chosen.append(fqn)
        return ok

    convert_to_float8_training(model, module_filter_fn=accept, config=Float8LinearConfig.from_recipe_name(recipe))
    for module in model.modules():
        if hasattr(module, "token_alignment"):  # routes a varying number of tokens into converted linears (MoE)
            setattr(module, "token_alignment", FP8_DIM_MULTIPLE)  # noqa: B010 (nn.Module types its attributes)
    return tuple(chosen)


def _convert_fp4(model: nn.Module, block_size: int, keep_high: Callable[[str], bool]) -> tuple[str, ...]:
    from torch import nn

    from pytest_gpuperf.training.mxfp4 import MXFP4EmulatedLinear

    chosen: list[str] = []
    for fqn, module in list(model.named_modules()):
        if type(module) is nn.Linear and not keep_high(fqn):
            MXFP4EmulatedLinear.convert(module, block_size)
            chosen.append(fqn)
    return tuple(chosen)


# -- helpers --------------------------------------------------------------------------------------------


def _device_type(device: Any) -> str:
    return device if isinstance(device, str) and ":" not in device else str(device).split(":", 1)[0]


@lru_cache(maxsize=1)
def _cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@lru_cache(maxsize=1)
def _torchao_float8_problem() -> str | None:
    """Why ``torchao.float8`` cannot be used here, or None. A torchao built for another torch can fail on import
    with errors other than ImportError (missing operators, C++ symbols): that has to skip fp8, not error the
    collection or the test."""
    try:
        import torchao.float8  # noqa: F401
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.split(".")[0] != "torchao":
            return f"torchao cannot import {error.name!r} ({error}); install what it needs"
        return "torchao is not installed (pip install torchao)"
    except Exception as error:  # noqa: BLE001 - any failure of a third-party import means "cannot use it"
        import torch

        return (
            f"torchao failed to import ({type(error).__name__}: {error}); install a torchao release built for "
            f"torch {torch.__version__}"
        )
    return None
