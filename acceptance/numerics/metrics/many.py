"""Several pairs of one trial, their operands read once: :class:`Batch` and :func:`compute_many`.

A trial measures each output in up to eight pairs over four tensors (impl e,
baseline b, oracle o, the oracle rounded to the dtype); :func:`compute` alone
would check, convert and cut each operand again for every pair and, for a
small input, spend more on setting up its piece workers than the kernel
spends on the data. A :class:`Batch` converts each host operand of at most
one piece (:data:`~acceptance.numerics.metrics.host.HOST_BLOCK` elements) once, to a
contiguous float64 copy (a view where it already is one), and reduces every
pair of such operands by one call of the fused kernel in the calling thread.

The results are those of :func:`acceptance.numerics.metrics.compute` bit for bit: the
kernel reads every element as the exact float64 of its value whatever the
storage format (float32, 16-bit patterns and integers are widened exactly,
float8 through its value table), so the kernel run on float64 copies does
the same arithmetic in the same order as on the original storage; an input
of one piece is one piece on both paths, and the sums, maxima and counts
start from zero on both. Larger inputs, device tensors and pairs of unequal
shapes go through :func:`~acceptance.numerics.metrics.compute` itself.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from acceptance.formats import dtypes
from acceptance.numerics.metrics import host
from acceptance.numerics.metrics.operands import ArrayLike, Operand, is_device, operand
from acceptance.numerics.metrics.pair import compute, selected
from acceptance.numerics.metrics.registry import Reduced, Value, finalize

if TYPE_CHECKING:
    from acceptance.formats.dtypes import DTypeSpec

__all__ = ["Batch", "compute_many"]

_F64 = np.dtype(np.float64)


class Batch:
    """Metrics of several pairs whose operands are converted once each.

    ``batch.compute(e, b, dtype=..., names=...)`` returns exactly what
    :func:`acceptance.numerics.metrics.compute` returns for the same arguments. An
    operand is recognised by identity (the same tensor or array object), so
    a tensor used in several pairs is checked and widened to float64 once;
    the batch keeps a reference to each operand it has seen, and its float64
    copy (8 bytes per element, at most one piece each), until it is dropped.
    """

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Operand, ArrayLike, np.ndarray | None]] = {}

    def _operand(self, x: Operand, role: str) -> tuple[ArrayLike, np.ndarray | None]:
        """(the checked operand, its flat float64 host copy or ``None`` when the fast path does not apply)."""
        found = self._seen.get(id(x))
        if found is not None and found[0] is x:
            return found[1], found[2]
        checked = operand(x, role)
        flat = None
        if not is_device(checked) and math.prod(tuple(checked.shape)) <= host.HOST_BLOCK:
            flat = _float64(checked)
        self._seen[id(x)] = (x, checked, flat)
        return checked, flat

    def float64(self, x: Operand) -> np.ndarray | None:
        """``x`` (an operand of this batch, or a new one) as its flat float64 host copy; ``None`` for a device
        tensor or one of more than one piece."""
        return self._operand(x, "operand")[1]

    def compute(
        self,
        evaluated: Operand,
        baseline: Operand,
        *,
        dtype: DTypeSpec | None = None,
        names: Iterable[str] | None = None,
    ) -> dict[str, Value]:
        """:func:`acceptance.numerics.metrics.compute` of one pair, with the operands converted at most once per
        batch."""
        chosen = selected(names)
        e, fe = self._operand(evaluated, "evaluated")
        b, fb = self._operand(baseline, "baseline")
        if fe is None or fb is None or tuple(e.shape) != tuple(b.shape):
            return compute(e, b, dtype=dtype, names=names)
        fmt = dtypes.lookup(e.dtype if dtype is None else dtype)
        sums, maxs, counts = np.zeros(6), np.zeros(9), np.zeros(6, dtype=np.int64)
        host._kernel(fe, fb, 0, 0, *host.ulp_args(fmt), not fmt.is_float, fmt.diff3_threshold, sums, maxs, counts)
        return finalize(Reduced(*sums.tolist(), *maxs.tolist(), *counts.tolist()), chosen)


def compute_many(
    pairs: Sequence[tuple[Operand, Operand]], *, dtype: DTypeSpec | None = None, names: Iterable[str] | None = None
) -> list[dict[str, Value]]:
    """``[metrics.compute(e, b, dtype=dtype, names=names) for e, b in pairs]``, each operand converted once.

    ``pairs``: (evaluated, baseline) tuples; an operand given in several
    pairs (the same object) is read once. The values are those of
    :func:`acceptance.numerics.metrics.compute` bit for bit.
    """
    batch = Batch()
    names = None if names is None else ([names] if isinstance(names, str) else list(names))
    return [batch.compute(e, b, dtype=dtype, names=names) for e, b in pairs]


def _float64(x: ArrayLike) -> np.ndarray:
    """Host data of at most one piece as a flat contiguous float64 array: a view when it already is one, else a
    copy widened exactly (16-bit and 8-bit floats through their value tables, as the host engine decodes them)."""
    op = host._host_operand(x)
    return host._kernel_piece(op.data, op, _F64, lambda: np.empty(math.prod(tuple(op.data.shape)), _F64))
