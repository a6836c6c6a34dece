"""Contractions (matmul, bmm, linear, conv2d) whose accumulation rounds as a device's does (see the package
docstring)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from acceptance.numerics.emulate.formats import (
    _INPUT_DTYPES,
    _ROUNDINGS,
    DtypeLike,
    Format,
    _check_choice,
    _check_count,
    _describe,
    _dtype_name,
    _format_of,
)
from acceptance.numerics.emulate.rounding import _Rounder, round_float64

#: Largest number of elements in one tensor of products (float64: 2 MiB).
TILE_ELEMENTS = 1 << 18

# --------------------------------------------------------------------------- contractions


def _check_operand(t, where: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in _INPUT_DTYPES:
        raise ValueError(f"{where} must be a float16, bfloat16 or float32 tensor, got {_describe(t)}")
    return t


def _out_dtype(out_dtype: DtypeLike | None, default: torch.dtype, where: str) -> torch.dtype:
    if out_dtype is None:
        return default
    name = _dtype_name(out_dtype)
    allowed = ("float16", "bfloat16", "float32", "float64")
    if name not in allowed:
        raise ValueError(f"{where}: out_dtype must be one of {', '.join(map(repr, allowed))} or None, got {name!r}")
    return getattr(torch, name)


#: A contraction's rounding: one mode for the group sums and the accumulator adds alike, or the two apart as
#: ``{"group": mode, "accumulate": mode}`` (a missing key is "nearest").
Rounding = str | Mapping[str, str]


@dataclass(frozen=True)
class _Scheme:
    fmt: Format
    chunk: int
    group: str
    accumulate: str
    split_k: int
    fused: bool


def _roundings(rounding: object, where: str) -> tuple[str, str]:
    """(group, accumulate) rounding modes of a :data:`Rounding`."""
    if isinstance(rounding, str):
        _check_choice(rounding, _ROUNDINGS, f"{where}: rounding")
        return rounding, rounding
    if not isinstance(rounding, Mapping) or not set(rounding) <= {"group", "accumulate"}:
        raise ValueError(
            f"{where}: rounding must be one of {', '.join(map(repr, _ROUNDINGS))} or a mapping with keys 'group' "
            f"and 'accumulate', got {_describe(rounding)}"
        )
    group = _check_choice(rounding.get("group", "nearest"), _ROUNDINGS, f"{where}: rounding.group")
    return group, _check_choice(rounding.get("accumulate", "nearest"), _ROUNDINGS, f"{where}: rounding.accumulate")


def _scheme(acc_dtype, chunk, rounding, split_k, fused, where: str) -> _Scheme:
    fmt = _format_of(acc_dtype, f"{where}: acc_dtype")
    _check_count(chunk, f"{where}: chunk")
    _check_count(split_k, f"{where}: split_k")
    group, accumulate = _roundings(rounding, where)
    if not isinstance(fused, bool):
        raise ValueError(f"{where}: fused must be True or False, got {fused!r}")
    return _Scheme(fmt, chunk, group, accumulate, split_k, fused)


def _blocks(batch: int, m: int, n: int, chunk: int) -> tuple[int, int]:
    """Batch and row block sizes so that one product tensor (per group) has at most
    ``TILE_ELEMENTS / chunk`` elements (at least one row)."""
    budget = max(1, TILE_ELEMENTS // chunk)
    if m * n <= budget:
        return max(1, min(batch, budget // max(1, m * n))), m
    return 1, max(1, budget // max(1, n))


def _contract_part(a: torch.Tensor, b: torch.Tensor, s: _Scheme, r: _Rounder, add: _Rounder) -> torch.Tensor:
    """Accumulated sum over one K part: ``a`` (B, M, Kp), ``b`` (B, Kp, N) float64 -> (B, M, N)
    values of the accumulator format, from an accumulator of +0, groups in ascending k: each group's exact sum
    rounded by ``r``, added into the accumulator by ``add`` (fused: the group and the accumulator summed exactly
    and rounded once by ``add``)."""
    batch, m, kp = a.shape
    n = b.shape[2]
    c = s.chunk
    groups = -(-kp // c)
    pad = groups * c - kp
    if pad:  # a short last group: zero products leave the exact sum unchanged
        a = F.pad(a, (0, pad))
        b = F.pad(b, (0, 0, 0, pad))
    a = a.reshape(batch, m, groups, c)
    b = b.reshape(batch, groups, c, n)
    acc = torch.zeros(batch, m, n, dtype=torch.float64)
    bb, mb = _blocks(batch, m, n, c)
    for b0 in range(0, batch, bb):
        for m0 in range(0, m, mb):
            a_blk = a[b0 : b0 + bb, m0 : m0 + mb]  # (bb, mb, G, c)
            b_blk = b[b0 : b0 + bb]  # (bb, G, c, n)
            acc_blk = acc[b0 : b0 + bb, m0 : m0 + mb]
            per_group = a_blk.shape[0] * a_blk.shape[1] * n
            tile = 1 if s.fused else max(1, (TILE_ELEMENTS // c) // max(1, per_group))
            for g0 in range(0, groups, tile):
                a_t = a_blk[:, :, g0 : g0 + tile].permute(3, 0, 2, 1)  # (c, bb, T, mb)
                b_t = b_blk[:, g0 : g0 + tile].permute(2, 0, 1, 3)  # (c, bb, T, n)
                products = a_t[..., None] * b_t[:, :, :, None, :]  # (c, bb, T, mb, n)
                if s.fused:
                    acc_blk = add.sum(torch.cat([acc_blk[None], products[:, :, 0]]))
                    continue
                sums = r.sum(products)  # (bb, T, mb, n)
                for t in range(sums.shape[1]):
                    acc_blk = add.add(acc_blk, sums[:, t])
            acc[b0 : b0 + bb, m0 : m0 + mb] = acc_blk
    return acc


def _contract(a: torch.Tensor, b: torch.Tensor, s: _Scheme, where: str) -> torch.Tensor:
    """``a`` (B, M, K) @ ``b`` (B, K, N), float64 inputs, under scheme ``s``: float64 values of
    the accumulator format. Parts of the split are summed in ascending order, each
    addition rounded to nearest-even in the accumulator format (a reduction kernel's add)."""
    k = a.shape[2]
    if s.split_k > max(k, 1):
        raise ValueError(f"{where}: split_k={s.split_k} exceeds K={k}")
    group, add, reducer = _Rounder(s.fmt, s.group), _Rounder(s.fmt, s.accumulate), _Rounder(s.fmt, "nearest")
    first, *rest = (len(part) for part in torch.arange(k).tensor_split(s.split_k))
    out = _contract_part(a[:, :, :first], b[:, :first], s, group, add)
    k0 = first
    for size in rest:
        out = reducer.add(out, _contract_part(a[:, :, k0 : k0 + size], b[:, k0 : k0 + size], s, group, add))
        k0 += size
    return out


def _to_out(acc: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Accumulator values (float64) converted to ``dtype`` with round-to-nearest-even."""
    if dtype != torch.float64:
        acc = round_float64(acc, dtype)
    return acc.to(dtype).to(device)


def _matmul_acc(a: torch.Tensor, b: torch.Tensor, s: _Scheme, where: str) -> torch.Tensor:
    """Shapes as ``torch.matmul`` (1-D operands and broadcast batch dims included); float64
    accumulator values in the result's shape."""
    if a.dim() == 0 or b.dim() == 0:
        raise ValueError(
            f"{where}: operands must have at least one dimension, got shapes {tuple(a.shape)} and {tuple(b.shape)}"
        )
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"{where}: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    try:
        batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"{where}: batch dimensions do not broadcast: a is {tuple(a.shape)}, b is {tuple(b.shape)}"
        ) from None
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    count = math.prod(batch)
    a3 = a2.detach().cpu().to(torch.float64).expand(*batch, m, k).reshape(count, m, k)
    b3 = b2.detach().cpu().to(torch.float64).expand(*batch, k, n).reshape(count, k, n)
    out = _contract(a3, b3, s, where).reshape(*batch, m, n)
    if a.dim() == 1:
        out = out.squeeze(-2)
    if b.dim() == 1:
        out = out.squeeze(-1)
    return out


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    acc_dtype: DtypeLike,
    chunk: int = 1,
    rounding: Rounding = "nearest",
    split_k: int = 1,
    out_dtype: DtypeLike | None = None,
    fused: bool = False,
) -> torch.Tensor:
    """``a @ b`` with emulated accumulation; shapes and broadcasting as ``torch.matmul``.

    For each output element, with ``p_k = a[m, k] * b[k, n]`` (exact) and K
    split into ``split_k`` contiguous parts (``torch.tensor_split`` sizes, the
    first ``K % split_k`` one longer), each part runs

        acc = +0
        for each group G of ``chunk`` consecutive k (the last may be shorter):
            acc = Ra(acc + Rg(sum_{k in G} p_k))    # fused=False
            acc = Ra(acc + sum_{k in G} p_k)        # fused=True

    where every ``sum`` is exact and ``Rg`` (the group sum) and ``Ra`` (the
    add into the accumulator) round to ``acc_dtype``: ``rounding`` is one
    mode for both ("nearest": to nearest, ties to even; "truncate": toward
    zero) or ``{"group": mode, "accumulate": mode}`` for the two apart (a
    missing key is "nearest").
    The parts' results are then added in ascending order, ``r = RN(r + part_i)``
    in ``acc_dtype`` (a split-K reduction kernel's ordinary add), and ``r`` is
    converted to ``out_dtype`` with round-to-nearest-even (default: the
    promoted dtype of ``a`` and ``b``; ``float64`` returns the accumulator
    values exactly).

    Examples: float32 FMA accumulation ``chunk=1, fused=True``; separate
    multiply and add ``chunk=1``; truncation of every step
    ``chunk=4, rounding="truncate"``; rocMLIR's DOT4_F32_F16 (the exact sum
    of 4 products truncated to float32, then added to the float32
    accumulator with round-to-nearest-even) ``chunk=4, rounding={"group":
    "truncate", "accumulate": "nearest"}``; one rounding of the exact dot
    product ``chunk=K``.

    ``a``, ``b``: float16, bfloat16 or float32 (any device; computed on the
    CPU in float64, returned on ``a``'s device). Raises ValueError naming the
    argument for anything else.
    """
    where = "matmul"
    _check_operand(a, f"{where}: a")
    _check_operand(b, f"{where}: b")
    s = _scheme(acc_dtype, chunk, rounding, split_k, fused, where)
    dtype = _out_dtype(out_dtype, torch.promote_types(a.dtype, b.dtype), where)
    return _to_out(_matmul_acc(a, b, s, where), dtype, a.device)


def bmm(a: torch.Tensor, b: torch.Tensor, **scheme) -> torch.Tensor:
    """Batched ``a @ b`` for 3-D ``a`` (B, M, K) and ``b`` (B, K, N), as ``torch.bmm``;
    keyword arguments as :func:`matmul`."""
    _check_operand(a, "bmm: a")
    _check_operand(b, "bmm: b")
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: a and b must be 3-D with equal batch sizes, got {tuple(a.shape)} and {tuple(b.shape)}")
    return matmul(a, b, **scheme)


def _add_bias(acc: torch.Tensor, bias: torch.Tensor | None, shape: tuple, fmt: Format, where: str) -> torch.Tensor:
    """``RN(acc + bias)`` in ``fmt`` with ``bias`` reshaped to ``shape`` and broadcast (None: ``acc``)."""
    if bias is None:
        return acc
    _check_operand(bias, f"{where}: bias")
    return _Rounder(fmt, "nearest").add(acc, bias.detach().cpu().to(torch.float64).reshape(shape).expand_as(acc))


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    *,
    acc_dtype: DtypeLike,
    chunk: int = 1,
    rounding: Rounding = "nearest",
    split_k: int = 1,
    out_dtype: DtypeLike | None = None,
    fused: bool = False,
) -> torch.Tensor:
    """``x @ weight.T + bias`` as ``F.linear`` (x: (..., in), weight: (out, in), bias: (out,)).

    The contraction is :func:`matmul`'s; ``bias`` is added to the accumulator
    once, ``RN(acc + bias)`` in ``acc_dtype`` (an epilogue add), before the
    conversion to ``out_dtype`` (default: the promoted dtype of x and weight).
    """
    where = "linear"
    _check_operand(x, f"{where}: x")
    _check_operand(weight, f"{where}: weight")
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"{where}: expected x (..., in) and weight (out, in), got {tuple(x.shape)} and {tuple(weight.shape)}"
        )
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (weight.shape[0],)):
        raise ValueError(f"{where}: bias must have shape ({weight.shape[0]},), got {_describe(bias)}")
    s = _scheme(acc_dtype, chunk, rounding, split_k, fused, where)
    dtype = _out_dtype(out_dtype, torch.promote_types(x.dtype, weight.dtype), where)
    acc = _matmul_acc(x, weight.t(), s, where)
    acc = _add_bias(acc, bias, (weight.shape[0],), s.fmt, where)
    return _to_out(acc, dtype, x.device)


def _pair(v, name: str, minimum: int) -> tuple[int, int]:
    items = (
        (v, v) if isinstance(v, int) and not isinstance(v, bool) else tuple(v) if isinstance(v, (tuple, list)) else None
    )
    if (
        items is None
        or len(items) != 2
        or any(isinstance(i, bool) or not isinstance(i, int) or i < minimum for i in items)
    ):
        raise ValueError(f"conv2d: {name} must be an integer >= {minimum} or a pair of them, got {v!r}")
    return items


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    *,
    acc_dtype: DtypeLike,
    chunk: int = 1,
    rounding: Rounding = "nearest",
    split_k: int = 1,
    out_dtype: DtypeLike | None = None,
    fused: bool = False,
    k_order: str = "chw",
) -> torch.Tensor:
    """2-D cross-correlation as ``F.conv2d`` (x: (N, C, H, W), weight: (O, C/groups, R, S)),
    computed as an implicit GEMM through im2col onto :func:`matmul`'s accumulation.

    For output (n, o, y, x) the reduction runs over K = (C/groups)·R·S terms in
    ``k_order``: ``"chw"`` (channel slowest, then filter row, filter column:
    ``F.unfold``'s order and the loop of rocMLIR's CPU reference for NCHW) or
    ``"hwc"`` (channel fastest, as NHWC implicit-GEMM kernels read it). The
    order decides which terms share a ``chunk`` group and a ``split_k`` part.
    Zero padding enters as zero terms. ``bias`` (O,) is added once, ``RN(acc +
    bias)`` in ``acc_dtype``. ``padding`` takes integers only.
    """
    where = "conv2d"
    _check_operand(x, f"{where}: x")
    _check_operand(weight, f"{where}: weight")
    if x.dim() != 4 or weight.dim() != 4:
        raise ValueError(f"{where}: x and weight must be 4-D, got {tuple(x.shape)} and {tuple(weight.shape)}")
    _check_count(groups, f"{where}: groups")
    _check_choice(k_order, ("chw", "hwc"), f"{where}: k_order")
    n, c, h, w = x.shape
    o, cg, r, sw = weight.shape
    if c != cg * groups or o % groups:
        raise ValueError(
            f"{where}: x has {c} channels and weight {tuple(weight.shape)} with groups={groups}: "
            f"need C = weight.shape[1] * groups and O divisible by groups"
        )
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (o,)):
        raise ValueError(f"{where}: bias must have shape ({o},), got {_describe(bias)}")
    stride, padding, dilation = _pair(stride, "stride", 1), _pair(padding, "padding", 0), _pair(dilation, "dilation", 1)
    ho = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (sw - 1) - 1) // stride[1] + 1
    if ho < 1 or wo < 1:
        raise ValueError(
            f"{where}: the output would be empty ({ho}x{wo}) for input {tuple(x.shape)}"
            f" and weight {tuple(weight.shape)}"
        )
    s = _scheme(acc_dtype, chunk, rounding, split_k, fused, where)
    dtype = _out_dtype(out_dtype, torch.promote_types(x.dtype, weight.dtype), where)

    x64 = x.detach().cpu().to(torch.float64)
    cols = F.unfold(x64, (r, sw), dilation=dilation, padding=padding, stride=stride)  # (N, C*R*S, L), c slowest
    cols = cols.reshape(n, groups, cg, r, sw, ho * wo)
    w64 = weight.detach().cpu().to(torch.float64).reshape(groups, o // groups, cg, r, sw)
    if k_order == "hwc":
        cols = cols.permute(0, 1, 3, 4, 2, 5)
        w64 = w64.permute(0, 1, 3, 4, 2)
    kg = cg * r * sw
    a = w64.reshape(1, groups, o // groups, kg).expand(n, groups, o // groups, kg).reshape(-1, o // groups, kg)
    b = cols.reshape(n * groups, kg, ho * wo)
    acc = _contract(a.contiguous(), b.contiguous(), s, where).reshape(n, o, ho, wo)
    acc = _add_bias(acc, bias, (1, o, 1, 1), s.fmt, where)
    return _to_out(acc, dtype, x.device)
