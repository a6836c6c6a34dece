"""What both reduction engines read: checked operands, and pieces of bounded size."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TypeGuard, overload

import numpy as np
import numpy.typing as npt
import torch

from acceptance.formats import dtypes

ArrayLike = np.ndarray | torch.Tensor

#: What the metrics take: a torch tensor, or anything ``np.asarray`` reads.
Operand = npt.ArrayLike | torch.Tensor

#: Every torch dtype of the dtype table (this torch build's), and its 8-bit float formats.
TORCH_NUMERIC = frozenset(row.torch for row in dtypes.TABLE.values() if row.torch is not None)
FP8 = tuple(row.torch for row in dtypes.TABLE.values() if row.is_float and row.bits == 8 and row.torch is not None)


def operand(x: Operand, role: str) -> ArrayLike:
    """``x`` as a numpy array or a strided torch tensor of a supported real dtype, else ValueError naming ``role``."""
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise ValueError(f"{role}: {x.layout} tensors are not supported; pass a dense tensor")
        if x.dtype not in TORCH_NUMERIC:
            raise ValueError(f"{role}: dtype {x.dtype} is not supported (real floating, integer or bool only)")
        if x.device.type == "meta":
            raise ValueError(f"{role}: a meta tensor holds no values")
        return x.detach()
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{role}: masked arrays are not supported; fill or compress them first")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{role}: cannot be read as an array: {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{role}: dtype {arr.dtype} is not supported (real floating, integer or bool only)")
    return arr


def is_device(x: ArrayLike) -> TypeGuard[torch.Tensor]:
    """Whether ``x`` is a tensor on a non-CPU device."""
    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


@overload
def blocks(a: np.ndarray, block: int) -> Iterator[np.ndarray]: ...


@overload
def blocks(a: torch.Tensor, block: int) -> Iterator[torch.Tensor]: ...


@overload
def blocks(a: ArrayLike, block: int) -> Iterator[ArrayLike]: ...


def blocks(a: ArrayLike, block: int) -> Iterator[ArrayLike]:
    """Views of ``a`` that cover it in C order, each of at most ``block`` elements.

    A view is a run of whole leading-axis rows (or a 1-D slice), so its C-order
    flattening is a contiguous range of ``a``'s. The cuts depend on the shape
    alone: two arrays of one shape are cut alike whatever their strides.
    """
    shape = tuple(a.shape)
    size = math.prod(shape)
    if size == 0:
        return
    if size <= block:
        yield a
    elif len(shape) == 1:
        for i in range(0, size, block):
            yield a[i : i + block]
    elif size // shape[0] > block:
        for i in range(shape[0]):
            yield from blocks(a[i], block)
    else:
        rows = block // (size // shape[0])
        for i in range(0, shape[0], rows):
            yield a[i : i + rows]
