"""The device engine: the same reductions as the host kernel, with torch float64 ops on the data's device.

Tensors on a CUDA (or other non-CPU) device are reduced there in pieces of
:data:`DEVICE_BLOCK` elements (about ten float64 temporaries of 16 MiB),
never copied whole to the host; a host operand moves to the device piece by
piece and only the 21 reduced numbers come back.
"""

from __future__ import annotations

import numpy as np
import torch

from acceptance.formats.dtypes import DType
from acceptance.numerics.metrics.operands import ArrayLike, blocks, is_device
from acceptance.numerics.metrics.registry import REL_FLOOR, Reduced, round_up_field

#: Elements per piece of device data (16 MiB per float64 temporary).
DEVICE_BLOCK = 1 << 21


def _pow2_t(k: torch.Tensor) -> torch.Tensor:
    """2^k (float64) for an int64 tensor with −1022 ≤ k ≤ 1023, exactly."""
    return ((k + 1023) << 52).view(torch.float64)


def ulp_shift(a: torch.Tensor, fmt: DType) -> torch.Tensor:
    """p - 1 - E (int64) for float64 ``a >= 0``: ``2^-(p-1-E)`` is one ulp of ``fmt`` at ``a`` rounded to it,
    E = min(max(floor(log2 round(a)), emin), emax), as the host kernel's ``_ulp_shift`` computes it."""
    bits = a.view(torch.int64)
    carry = (bits & 0xFFFFFFFFFFFFF) >= round_up_field(fmt.precision)  # rounding carries into the next binade
    ex = ((bits >> 52) & 0x7FF) - 1023 + carry.to(torch.int64)
    return fmt.precision - 1 - ex.clamp_(min=fmt.emin, max=fmt.emax)


def _torch_piece(x: torch.Tensor, y: torch.Tensor, fmt: DType) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sums, maxima and counts (columns _S_*, _M_*, _C_*) of one float64 piece, as :func:`_kernel` defines them."""
    x_nan, y_nan = torch.isnan(x), torch.isnan(y)
    finite = torch.isfinite(x) & torch.isfinite(y)
    counts = torch.stack(
        [
            finite.sum(),
            (x > y).sum(),
            (x < y).sum(),
            ((x_nan & y_nan) | (~finite & (x == y))).sum(),
            (x_nan ^ y_nan).sum(),
            (~finite & ~x_nan & ~y_nan & (x != y)).sum(),
        ]
    )
    zero = x.new_zeros(())
    x = torch.where(finite, x, zero)  # non-finite positions become (0, 0): they add 0 to every sum and maximum
    y = torch.where(finite, y, zero)
    d = (x - y).abs_()
    ax, ay = x.abs_(), y.abs_()
    rel = torch.where(d == 0, zero, d / ay)  # x/0 = inf, 0/0 = 0
    hyb = d / (1.0 + ay)
    if not fmt.is_float:
        ulp = d.clamp(max=fmt.ulp_cap)
    else:  # one ulp at the reference y rounded to fmt, at most the format's cap
        s = ulp_shift(ay, fmt)
        ulp = (d * _pow2_t(s >> 1) * _pow2_t(s - (s >> 1))).clamp_(max=fmt.ulp_cap)
    sums = torch.stack([d.sum(), ay.sum(), (d * d).sum(), (ay * ay).sum(), ulp.sum(), hyb.sum()])
    maxs = torch.stack(
        [
            d.max(),
            rel.max(),
            torch.where(ay > REL_FLOOR, rel, zero).max(),
            torch.where(ay > fmt.diff3_threshold, rel, zero).max(),
            torch.where(ay <= fmt.diff3_threshold, d, zero).max(),
            ulp.max(),
            hyb.max(),
            ax.max(),
            ay.max(),
        ]
    )
    return sums, maxs, counts


def _as_f64(piece: ArrayLike, device: torch.device) -> torch.Tensor:
    """One piece, flattened, as a contiguous float64 tensor on ``device`` (one copy)."""
    if isinstance(piece, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(piece, dtype=np.float64)).to(device).reshape(-1)
    return torch.empty(piece.shape, dtype=torch.float64, device=device).copy_(piece).reshape(-1)


def reduce(e: ArrayLike, b: ArrayLike, fmt: DType, block: int = DEVICE_BLOCK) -> Reduced:
    """Partial results with torch float64 ops on the device of the device operand (CPU when neither has one).

    Pieces of the other operand move to that device one at a time; only the
    final 21 numbers come back to the host. A device without float64 (Apple
    MPS) sends its pieces to the host instead.
    """
    device = e.device if is_device(e) else b.device if is_device(b) else torch.device("cpu")
    if device.type == "mps":
        device = torch.device("cpu")
    sums = torch.zeros(6, dtype=torch.float64, device=device)
    maxs = torch.zeros(9, dtype=torch.float64, device=device)
    counts = torch.zeros(6, dtype=torch.int64, device=device)
    for pe, pb in zip(blocks(e, block), blocks(b, block), strict=True):
        s, m, c = _torch_piece(_as_f64(pe, device), _as_f64(pb, device), fmt)
        sums += s
        maxs = torch.maximum(maxs, m)
        counts += c
    return Reduced(*sums.tolist(), *maxs.tolist(), *counts.tolist())
