"""Error metrics between an evaluated tensor ``e`` and a baseline ``b``.

One entry point, :func:`compute`, returns the metrics of :data:`METRICS` in a
single fused pass over the data (:func:`compute_many` and :class:`Batch`: the
same for several pairs whose operands are read once); :func:`load_array` reads a saved ``.npy`` or
``.pt`` array for it. Each metric is declared once, with its formula, units
and source, in :mod:`acceptance.numerics.metrics.registry` (the docs table is generated
from it); the engines are :mod:`.host` (numba, host data) and :mod:`.device`
(torch, data on a CUDA device).

Errors and ratios are unitless except ``diff3_2``, ``max_abs``, ``mean_abs``
(units of the data), ``mse`` (units squared) and the ULP metrics (units in the
last place of ``dtype``).

ULP error, in units of one ulp of ``dtype`` at the reference ``b`` rounded
to ``dtype`` (precision p bits including the implicit bit, normal exponents
emin..emax)::

    ulp_err = min(|e − b| / ulp(b), cap)
    ulp(b)  = 2^(min(max(floor(log2 |round(b)|), emin), emax) − (p − 1))

the smallest subnormal 2^(emin − p + 1) only where b rounds to a subnormal or
zero; ``cap`` is the dtype's
:attr:`~acceptance.formats.dtypes.DType.ulp_cap`, the number of finite steps
from −max to +max (float32 4278190078 < 2^32), so no figure exceeds the
largest distance two values of the dtype can have. A zero or a result of the
opposite sign against a normal b costs |e − b| / ulp(b). Integer and bool
dtypes have unit 1 (ulp_err = |e − b|).

Special values:

- a position where both are NaN, or both are the same-signed Inf, is left out
  of every numeric metric and counted in ``special_matched``;
- a position where exactly one is NaN counts in ``nan_mismatch``; one without
  NaN where an Inf meets a different value (Inf vs finite, +Inf vs −Inf)
  counts in ``inf_mismatch``. Either kind of mismatch makes every error metric
  ``inf`` (both sides of ``diff3`` included, whatever ``|b|`` is), so a
  misplaced NaN or Inf never yields a passing number;
- ``diff4`` uses IEEE ordering: Inf mismatches count with their direction
  (+Inf > every finite > −Inf); NaN mismatches have no direction and are left
  out of ``diff4`` (they are counted in ``nan_mismatch``);
- a zero baseline: per element |e−b|/|b| is 0 where e = b = 0 and ``inf``
  where e ≠ 0 = b; the global ratios (diff1, diff2, nmse, normwise_rel, rms)
  likewise give 0 for 0/0 and ``inf`` for x/0;
- n = 0 (empty or 0-element inputs, or every position special-matched):
  every error metric is 0, ``snr_db`` is ``inf`` and ``diff4`` is (0, 0, 0);
  0-d inputs are one element. No warning is raised and no metric is NaN;
- float64 data beyond ~1e154 in magnitude can overflow a sum of squares; the
  metric is then ``inf`` (never NaN);
- integers are compared as float64 (exact up to 2^53).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from acceptance.numerics.metrics.pair import compute
from acceptance.numerics.metrics.registry import (
    BY_NAME,
    METRICS,
    REGISTRY,
    REL_FLOOR,
    SCALAR_ERRORS,
    Metric,
    Reduced,
    diff4_value,
)

if TYPE_CHECKING:  # the engines (numba, torch) load on the first compute(): the registry alone starts without them
    from acceptance.numerics.metrics.operands import ArrayLike

__all__ = [
    "compute",
    "load_array",
    "METRICS",
    "SCALAR_ERRORS",
    "REGISTRY",
    "BY_NAME",
    "Metric",
    "Reduced",
    "REL_FLOOR",
    "diff4_value",
]


def load_array(path: str | Path) -> ArrayLike:
    """Read an array for :func:`compute` from a ``.npy`` file or a ``.pt`` file.

    A ``.pt`` file must hold a tensor, or a dict in which exactly one value is
    a tensor; it is loaded onto the CPU with ``weights_only=True`` (no code
    runs). Raises ValueError naming the file on anything it cannot read or
    that is not a real numeric array.
    """
    import numpy as np
    import torch

    from acceptance.numerics.metrics.operands import operand

    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".pt"):
        raise ValueError(f"{path}: unsupported file type {suffix or '(no suffix)'!r}; expected .npy or .pt")
    try:
        if suffix == ".npy":
            with open(path, "rb") as fh:  # a zip archive named .npy would otherwise stay open as an NpzFile
                value = np.load(fh, allow_pickle=False)
        else:
            value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # the readers raise OSError, ValueError, EOFError, pickle and zip errors, RuntimeError
        raise ValueError(f"{path}: cannot read: {exc}") from None
    if isinstance(value, dict):
        tensors = {k: v for k, v in value.items() if isinstance(v, torch.Tensor)}
        if len(tensors) != 1:
            raise ValueError(
                f"{path}: expected a dict with exactly one tensor, found {len(tensors)}"
                + (f" ({', '.join(map(str, tensors))})" if tensors else "")
            )
        (value,) = tensors.values()
    if not isinstance(value, (np.ndarray, torch.Tensor)):
        raise ValueError(f"{path}: holds a {type(value).__name__}, not an array or tensor")
    return operand(value, str(path))


def __getattr__(name: str) -> Any:  # a seam: a lazily loaded attribute, looked up by name
    """``Batch`` and ``compute_many`` (:mod:`acceptance.numerics.metrics.many`), loaded with the engines on first
    use (typed ``Any``: a lazily loaded attribute, looked up by name)."""
    if name in ("Batch", "compute_many"):
        from acceptance.numerics.metrics import many

        return getattr(many, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
