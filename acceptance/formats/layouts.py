"""Memory layouts and edge sizes for inputs: the same values, laid out the way kernels get them wrong.

:func:`apply_layout` returns a tensor equal to its input (same values, shape,
dtype and device) whose memory layout is one a kernel may mishandle:

=============== ============================================================== ==================
layout          memory                                                          needs
=============== ============================================================== ==================
contiguous      row-major copy                                                 any tensor
transposed      the last two dims swapped in memory (column-major matrices):  2 or more dims
                ``t.transpose(-1, -2).contiguous().transpose(-1, -2)``
strided         a view of every other element of a buffer twice as long in     1 or more dims
                the last dim (last stride 2)
channels_last   NHWC memory for an NCHW tensor (``torch.channels_last``)       exactly 4 dims
broadcast       stride 0 in every dim of size > 1 along which all values are   such a dim
                equal: one slice read repeatedly, as ``expand`` makes it
offset          row-major, starting one element into its storage (the data    any tensor
                pointer is no longer aligned to 2 or more elements)
=============== ============================================================== ==================

:func:`describe_layout` says in words what layout a tensor has;
:func:`edge_values` proposes the sizes of a shape symbol that break tiling.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from acceptance.formats.roleref import Resolver, RoleRef

if TYPE_CHECKING:  # torch loads in the functions that use it, so that loading specs starts without it
    import torch

__all__ = ["LAYOUTS", "LayoutRef", "apply_layout", "describe_layout", "edge_values", "with_layouts"]

#: Every layout name :func:`apply_layout` knows.
LAYOUTS: tuple[str, ...] = ("contiguous", "transposed", "strided", "channels_last", "broadcast", "offset")


def _impossible(layout: str, t: torch.Tensor, need: str) -> ValueError:
    return ValueError(f"layout {layout!r} needs {need}; got shape {tuple(t.shape)}")


def _constant_dims(t: torch.Tensor) -> list[int]:
    """Dims of size > 1 along which every slice equals the first, bit for bit (NaN included)."""
    if t.numel() == 0:
        return []
    bits = t.detach().contiguous().view(_same_size_int(t.dtype)) if t.is_floating_point() else t.detach()
    return [d for d in range(t.dim()) if t.shape[d] > 1 and bool((bits == bits.narrow(d, 0, 1)).all())]


def _same_size_int(dtype: torch.dtype) -> torch.dtype:
    import torch

    return {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.itemsize]


def apply_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    """``t``'s values and shape in memory layout ``layout`` (see the module table).

    The result never shares memory with ``t``. ValueError naming the layout and
    the shape when the layout does not apply (``transposed`` of a 1-D tensor,
    ``channels_last`` of a 3-D one, ``broadcast`` without a constant dim), and
    for an unknown layout name.
    """
    import torch

    if not isinstance(t, torch.Tensor):
        raise ValueError(f"apply_layout: t must be a tensor, got {type(t).__name__}")
    if layout == "contiguous":
        return t.detach().clone(memory_format=torch.contiguous_format)
    if layout == "transposed":
        if t.dim() < 2:
            raise _impossible(layout, t, "at least 2 dims (it swaps the memory order of the last two)")
        return t.detach().transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "strided":
        if t.dim() < 1:
            raise _impossible(layout, t, "at least 1 dim (it steps by 2 in the last)")
        buf = torch.zeros(*t.shape[:-1], 2 * t.shape[-1], dtype=t.dtype, device=t.device)
        view = buf[..., ::2]
        view.copy_(t.detach())
        return view
    if layout == "channels_last":
        if t.dim() != 4:
            raise _impossible(layout, t, "exactly 4 dims (N, C, H, W)")
        return t.detach().clone(memory_format=torch.channels_last)
    if layout == "broadcast":
        dims = _constant_dims(t)
        if not dims:
            raise _impossible(
                layout, t, "a dim of size > 1 along which all values are equal (the zero-stride view repeats one slice)"
            )
        base = t.detach()
        for d in dims:
            base = base.narrow(d, 0, 1)
        return base.clone().expand(t.shape)
    if layout == "offset":
        buf = torch.zeros(t.numel() + 1, dtype=t.dtype, device=t.device)
        view = buf[1:].view(t.shape)
        view.copy_(t.detach())
        return view
    raise ValueError(f"unknown layout {layout!r}; layouts: {', '.join(LAYOUTS)}")


def describe_layout(t: torch.Tensor) -> str:
    """The layout of ``t`` in words, e.g. ``"shape (4, 5), strides (1, 4), offset 0:
    transposed (last two dims column-major), not contiguous"``.

    Strides and the storage offset are in elements. Named patterns: contiguous,
    channels_last (4-D), transposed (the last two strides swapped relative to
    row-major), zero strides (broadcast dims), a step > 1 in the last dim, a
    non-zero storage offset.
    """
    import torch

    shape, strides, offset = tuple(t.shape), tuple(t.stride()), t.storage_offset()
    words = []
    if t.is_contiguous():
        words.append("contiguous")
    elif t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
        words.append("channels_last (NHWC memory)")
    else:
        zero = [d for d in range(t.dim()) if strides[d] == 0 and shape[d] > 1]
        if zero:
            words.append(f"broadcast (stride 0 in dim{'s' if len(zero) > 1 else ''} {', '.join(map(str, zero))})")
        transposed = t.dim() >= 2 and t.transpose(-1, -2).is_contiguous()
        if transposed:
            words.append("transposed (last two dims column-major)")
        elif t.dim() >= 1 and shape[-1] > 1 and strides[-1] > 1:
            words.append(f"step {strides[-1]} in the last dim")
        words.append("not contiguous")
    if offset:
        words.append(f"storage offset {offset} element{'s' if offset != 1 else ''} ({offset * t.element_size()} bytes)")
    return f"shape {shape}, strides {strides}, offset {offset}: {', '.join(words)}"


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    return all(n % p for p in range(2, math.isqrt(n) + 1))


def _nearest_prime(n: int) -> int:
    """The prime closest to ``n`` (the smaller one on a tie); 2 for ``n <= 2``."""
    for d in range(n + 1):
        if _is_prime(n - d):
            return n - d
        if _is_prime(n + d):
            return n + d
    return 2


def edge_values(symbol_values: Sequence[int], *, max_value: int) -> list[int]:
    """Edge sizes for a shape symbol whose usual values are ``symbol_values``, sorted, each in
    ``[1, max_value]``.

    With ``v`` the median of ``symbol_values`` (the lower one for an even count):

    * ``1`` (degenerate: M=1, N=1, a single channel);
    * the prime nearest ``v`` (no power-of-two factor at all);
    * ``8*(v//8) + 1``, ``16*(v//16) - 1`` and ``32*(v//32) + 3`` (``v//8`` etc.
      at least 1): one past, one short of and three past a multiple of the
      vector and tile widths, so remainder loops run;
    * ``max_value``, the largest size the budget allows (long reductions,
      overflow of accumulators and indices).

    ``max_value`` is the budget: the largest size a case may use.
    """
    if not isinstance(max_value, int) or isinstance(max_value, bool) or max_value < 1:
        raise ValueError(f"edge_values: max_value must be an integer >= 1, got {max_value!r}")
    values = list(symbol_values)
    if not values or any(not isinstance(v, int) or isinstance(v, bool) or v < 1 for v in values):
        raise ValueError(f"edge_values: symbol_values must be a non-empty list of integers >= 1, got {values!r}")
    v = sorted(values)[(len(values) - 1) // 2]
    candidates = {
        1,
        _nearest_prime(v),
        8 * max(1, v // 8) + 1,
        16 * max(1, v // 16) - 1,
        32 * max(1, v // 32) + 3,
        max_value,
    }
    return sorted(c for c in candidates if 1 <= c <= max_value)


def with_layouts(fn: Callable, layouts: Sequence) -> Callable:
    """``fn`` called with input ``i`` in memory layout ``layouts[i]`` (``None``: as given), applied on
    the device the inputs arrive on (a device copy of a strided view would be made contiguous)."""
    import torch

    def laid_out(*args: object, **params: object) -> object:
        args = tuple(
            apply_layout(a, layout) if layout is not None and isinstance(a, torch.Tensor) else a
            for a, layout in zip(args, list(layouts) + [None] * (len(args) - len(layouts)), strict=False)
        )
        return fn(*args, **params)

    laid_out.__name__ = f"laid_out({getattr(fn, '__name__', 'impl')})"
    return laid_out


@dataclass(frozen=True)
class LayoutRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to :func:`with_layouts` of ``inner``'s callable:
    input ``i`` in memory layout ``layouts[i]``."""

    inner: RoleRef
    layouts: tuple[str | None, ...]

    def resolve(self, cached: Resolver) -> Callable:
        return with_layouts(self.inner.resolve(cached), self.layouts)
