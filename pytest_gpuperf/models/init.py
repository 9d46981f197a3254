"""Random initial weights that are the same in every torch release and on every device.

Each element's value is a function of (seed, the parameter's name, the element's index) alone: an integer hash of
the index, keyed by the seed and the name, gives a uniform number that the inverse normal CDF turns into a
(truncated) normal one. Integer arithmetic is exact everywhere, so only the last rounding of ``erfinv`` can differ
between builds; keying by name means a new module changes no other module's weights. Why not torch's generators:
docs/design/portable-initial-weights.md.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import torch

_MASK32 = 0xFFFFFFFF
_MIX = 0x45D9F3B  # < 2**27: a 32-bit value times it stays inside int64 on every device
_CHUNK = 1 << 22  # elements hashed at once: bounds the int64/float64 temporaries (~64 MB)


def stream(seed: int, key: str) -> int:
    """The 32-bit stream of one parameter: a digest of the seed and the parameter's name."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{key}".encode()).digest()[:4], "little")


def _hash32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer mixer (xor-shift-multiply, three rounds) on int64 holding values below 2**32."""
    for _ in range(3):
        x = ((x >> 16) ^ x) * _MIX & _MASK32
    return (x >> 16) ^ x


def uniform_open(start: int, count: int, *, seed: int, key: str, device: torch.device) -> torch.Tensor:
    """float64 values in (0, 1) for element indices ``start .. start + count - 1`` of parameter ``key``."""
    index = torch.arange(start, start + count, dtype=torch.int64, device=device)
    bits = _hash32(_hash32((index & _MASK32) ^ stream(seed, key)) ^ (index >> 32))
    return (bits.to(torch.float64) + 0.5) / 2.0**32


def _fill(
    tensor: torch.Tensor, *, seed: int, key: str, transform: Callable[[torch.Tensor], torch.Tensor]
) -> torch.Tensor:
    """Element i of ``tensor`` (in memory order) gets ``transform`` of its uniform number."""
    if not tensor.is_contiguous():
        raise ValueError(f"{key}: stable init needs a contiguous tensor (element order is the memory order)")
    flat = tensor.detach().view(-1)
    with torch.no_grad():
        for start in range(0, flat.numel(), _CHUNK):
            count = min(_CHUNK, flat.numel() - start)
            u = uniform_open(start, count, seed=seed, key=key, device=flat.device)
            flat[start : start + count].copy_(transform(u))
    return tensor


def normal_(tensor: torch.Tensor, *, seed: int, key: str, std: float, truncate: float | None = None) -> torch.Tensor:
    """Fill ``tensor`` with N(0, std²), truncated to ±``truncate`` standard deviations when given."""
    low, high = (
        (-1.0, 1.0) if truncate is None else (-math.erf(truncate / math.sqrt(2)), math.erf(truncate / math.sqrt(2)))
    )

    def transform(u: torch.Tensor) -> torch.Tensor:
        return torch.erfinv(low + u * (high - low)) * (math.sqrt(2) * std)

    return _fill(tensor, seed=seed, key=key, transform=transform)


def uniform_(tensor: torch.Tensor, *, seed: int, key: str, bound: float) -> torch.Tensor:
    """Fill ``tensor`` with U(-bound, bound)."""
    return _fill(tensor, seed=seed, key=key, transform=lambda u: (2 * u - 1) * bound)
