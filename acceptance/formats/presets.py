"""Input-range presets and the oracle's own range problems.

:func:`preset` names a distribution the way a spec writes it, so the spec
loader validates it with the same models as a hand-written ``dist:`` mapping
(a loader can accept ``dist: {preset: r1}`` by substituting ``preset("r1",
dtype)``). ``r0``, ``r1``, ``r4``, ``r5`` are the ranges of rocMLIR's float16
accuracy study; the others expose further failures:

========== =========================================== ==============================================
name       distribution                                 what it exposes
========== =========================================== ==============================================
r0         uniform [-1, 1]                              cancellation, results near zero
r1         uniform [-10, 10]                            the same with larger products
r4         uniform [1, 5]                               sums that only grow: accumulation error, overflow
r5         uniform [5, 10]                              faster growth: float16 overflow of long sums
large      uniform [-100, 100]                          float16 overflow of products and short sums
small      uniform [-0.01, 0.01]                        float16 subnormal products (flush-to-zero)
sparse     90 % zeros, the rest uniform [-1, 1]         skipped zero blocks, exact zeros, signed zeros
specials   1 % specials in uniform [-1, 1]              ±0, subnormals, ±inf, NaN, the largest and
                                                        smallest normal values of the test dtype
========== =========================================== ==============================================

:func:`range_counts` and :func:`overflow_report` look at a float64 oracle and
say where the dtype cannot hold it, so a report can blame the inputs' range
rather than the implementation.
"""

from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, NamedTuple, Union

import numpy as np

if TYPE_CHECKING:  # torch loads in the functions that use it, so that loading specs starts without it
    import torch

__all__ = [
    "RANGES",
    "PRESETS",
    "SPARSE_DENSITY",
    "SPECIALS_FRACTION",
    "special_values",
    "preset",
    "RangeCounts",
    "range_counts",
    "overflow_report",
    "range_text",
]

DtypeLike = Union[str, "torch.dtype"]

#: Uniform ranges ``[lo, hi]`` by preset name.
RANGES: dict[str, tuple[float, float]] = {
    "r0": (-1.0, 1.0),
    "r1": (-10.0, 10.0),
    "r4": (1.0, 5.0),
    "r5": (5.0, 10.0),
    "large": (-100.0, 100.0),
    "small": (-0.01, 0.01),
}

#: Probability that an element of ``sparse`` is drawn (else exactly 0).
SPARSE_DENSITY = 0.1

#: Probability that an element of ``specials`` is replaced by a special value.
SPECIALS_FRACTION = 0.01

#: Every preset name.
PRESETS: tuple[str, ...] = (*RANGES, "sparse", "specials")

_FLOAT_DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")


def _dtype(dtype: DtypeLike, where: str) -> torch.dtype:
    import torch

    name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
    if name not in _FLOAT_DTYPES or not hasattr(torch, name):
        allowed = ", ".join(n for n in _FLOAT_DTYPES if hasattr(torch, n))
        raise ValueError(f"{where}: dtype must be a floating-point test dtype ({allowed}), got {name!r}")
    return getattr(torch, name)


def _has_inf(dtype: torch.dtype) -> bool:
    """float8_e4m3fn has no infinity (its overflow saturates or is NaN)."""
    return not str(dtype).endswith("fn")


def special_values(dtype: DtypeLike) -> list[float | str]:
    """The ``specials`` values of ``dtype`` in spec form: ``0.0, -0.0``, then both signs of
    the smallest subnormal (``smallest_normal * eps``), the largest subnormal, the smallest
    normal and the largest finite value, then ``"inf", "-inf"`` (where the dtype has them)
    and ``"nan"``. Every number is a value of ``dtype``, so rounding the draw keeps it."""
    import torch

    dt = _dtype(dtype, "special_values")
    info = torch.finfo(dt)
    tiny = float(info.smallest_normal)
    sub_min = tiny * float(info.eps)
    values: list[float | str] = [0.0, -0.0]
    for v in (sub_min, tiny - sub_min, tiny, float(info.max)):
        values += [v, -v]
    if _has_inf(dt):
        values += ["inf", "-inf"]
    return values + ["nan"]


def preset(name: str, dtype: DtypeLike) -> dict:
    """The spec-form distribution mapping of preset ``name`` for test dtype ``dtype``.

    ``r0, r1, r4, r5, large, small`` -> ``{"uniform": [lo, hi]}``;
    ``sparse`` -> ``{"sparse": {"density": 0.1, "of": {"uniform": [-1.0, 1.0]}}}``;
    ``specials`` -> ``{"specials": {"fraction": 0.01, "values": special_values(dtype),
    "of": {"uniform": [-1.0, 1.0]}}}`` with infinities and NaN written ``"inf"``,
    ``"-inf"``, ``"nan"`` (what the loader accepts; the mapping is JSON-serialisable).
    A fresh mapping on each call. ValueError for an unknown name or a non-float dtype.
    """
    dt = _dtype(dtype, f"preset {name!r}")
    if name in RANGES:
        lo, hi = RANGES[name]
        return {"uniform": [lo, hi]}
    if name == "sparse":
        return {"sparse": {"density": SPARSE_DENSITY, "of": {"uniform": list(RANGES["r0"])}}}
    if name == "specials":
        return {
            "specials": {
                "fraction": SPECIALS_FRACTION,
                "values": special_values(dt),
                "of": {"uniform": list(RANGES["r0"])},
            }
        }
    raise ValueError(f"unknown preset {name!r}; presets: {', '.join(PRESETS)}")


class RangeCounts(NamedTuple):
    """Where a float64 oracle leaves ``dtype``'s range, counted over ``total`` elements.

    ``overflow``: finite, but rounds past the largest finite value (``|x| >= max + ulp/2``
    under round-to-nearest-even; to ``inf``, or for a format without infinity, beyond
    ``max``); ``underflow``: nonzero, but rounds to zero (``|x| <= smallest_subnormal/2``);
    ``subnormal``: lands among the subnormals (``smallest_subnormal/2 < |x| < smallest_normal``),
    with fewer significant bits than the format has; ``nonfinite``: inf or NaN in the oracle.
    """

    dtype: str
    total: int
    overflow: int
    underflow: int
    subnormal: int
    nonfinite: int


@functools.cache
def _limits(dt: torch.dtype) -> tuple[float, float, float, float]:
    """(largest finite, overflow threshold, smallest normal, smallest subnormal)."""
    import torch

    info = torch.finfo(dt)
    p = round(-math.log2(info.eps)) + 1
    top = float(info.max)
    half_ulp_top = math.ldexp(1.0, math.frexp(top)[1] - 1 - p)  # half the spacing at max
    threshold = top + half_ulp_top if _has_inf(dt) else math.nextafter(top, math.inf)
    sub_min = math.ldexp(float(info.smallest_normal), 1 - p)
    return top, threshold, float(info.smallest_normal), sub_min


def range_counts(oracle: torch.Tensor, dtype: DtypeLike) -> RangeCounts:
    """Count the oracle elements that ``dtype`` cannot hold as they are (see :class:`RangeCounts`)."""
    import torch

    dt = _dtype(dtype, "range_counts")
    if not isinstance(oracle, torch.Tensor) or not oracle.is_floating_point():
        raise ValueError(f"range_counts: oracle must be a floating-point tensor, got {type(oracle).__name__}")
    x = oracle.detach().to(torch.float64)
    name = str(dt).removeprefix("torch.")
    if x.device.type == "cpu" and not x.is_conj() and not x.is_neg():
        return _counts_numpy(x.numpy(), dt, name)
    return _counts_torch(x, dt, name)


def _counts_torch(x: torch.Tensor, dt: torch.dtype, name: str) -> RangeCounts:
    """:func:`range_counts` of a float64 tensor on any device, by the definitions of :class:`RangeCounts`."""
    import torch

    x = x.abs().flatten()
    finite = torch.isfinite(x)
    nonfinite = int((~finite).sum())
    if dt == torch.float64:
        return RangeCounts(name, x.numel(), 0, 0, 0, nonfinite)
    _, threshold, tiny, sub_min = _limits(dt)
    overflow = int((finite & (x >= threshold)).sum())
    underflow = int(((x > 0) & (x <= sub_min / 2)).sum())
    subnormal = int(((x > sub_min / 2) & (x < tiny)).sum())
    return RangeCounts(name, x.numel(), overflow, underflow, subnormal, nonfinite)


def _counts_numpy(x: np.ndarray, dt: torch.dtype, name: str) -> RangeCounts:
    """:func:`range_counts` of a float64 array in a few NumPy passes over ``a = |x|``, where ``max(a)`` (NaN
    when there is one) decides which counts can be nonzero:
    ``overflow = #(a >= threshold) - #(a = inf)``, ``underflow = #(a <= s/2) - #(a = 0)``,
    ``subnormal = #(a < tiny) - #(a <= s/2)``, ``nonfinite = n - #finite`` (comparisons with NaN are false)."""
    import torch

    n = x.size
    if n == 0:
        return RangeCounts(name, 0, 0, 0, 0, 0)
    a = np.abs(x)
    top = float(a.max())
    finite = math.isfinite(top)
    nonfinite = 0 if finite else n - int(np.count_nonzero(np.isfinite(a)))
    if dt == torch.float64:
        return RangeCounts(name, n, 0, 0, 0, nonfinite)
    _, threshold, tiny, sub_min = _limits(dt)
    overflow = 0
    if not (top < threshold):
        overflow = int(np.count_nonzero(a >= threshold)) - (0 if finite else int(np.count_nonzero(np.isinf(a))))
    underflow = subnormal = 0
    below = int(np.count_nonzero(a < tiny))
    if below:
        zero_or_under = int(np.count_nonzero(a <= sub_min / 2))
        underflow = zero_or_under - int(np.count_nonzero(a == 0.0))
        subnormal = below - zero_or_under
    return RangeCounts(name, n, overflow, underflow, subnormal, nonfinite)


def _fmt(v: float) -> str:
    e = math.frexp(v)[1] - 1
    return f"2**{e}" if v == math.ldexp(1.0, e) else f"{v:g}"


def overflow_report(oracle: torch.Tensor, dtype: DtypeLike) -> str | None:
    """One line saying where the oracle leaves ``dtype``'s range, or None when it does not.

    e.g. ``"oracle exceeds float16 max (65504) at 312 of 4096 elements (|x| >= 65520
    rounds to inf); oracle is subnormal in float16 (|x| < 2**-14) at 3 of 4096 elements"``.
    Overflow and underflow mean the dtype cannot represent the true result, so a
    mismatch there is the inputs' range, not the implementation; subnormal results
    have reduced precision and are flushed by FTZ devices.
    """
    return range_text(range_counts(oracle, dtype))


def range_text(c: RangeCounts) -> str | None:
    """:func:`overflow_report`'s line for counts already taken (e.g. summed over trials), or None."""
    import torch

    dt = getattr(torch, c.dtype)
    of = f"of {c.total} elements"
    parts = []
    if c.overflow:
        top, threshold, _, _ = _limits(dt)
        how = f"|x| >= {threshold:g} rounds to inf" if _has_inf(dt) else f"|x| > {top:g} has no {c.dtype} value"
        parts.append(f"oracle exceeds {c.dtype} max ({top:g}) at {c.overflow} {of} ({how})")
    if c.underflow or c.subnormal:
        _, _, tiny, sub_min = _limits(dt)
        if c.underflow:
            parts.append(
                f"oracle underflows {c.dtype} (nonzero, |x| <= {_fmt(sub_min / 2)}: rounds to 0) at {c.underflow} {of}"
            )
        if c.subnormal:
            parts.append(
                f"oracle is subnormal in {c.dtype} (|x| < {_fmt(tiny)}, reduced precision) at {c.subnormal} {of}"
            )
    if c.nonfinite:
        parts.append(f"oracle is inf or NaN at {c.nonfinite} {of}")
    return "; ".join(parts) if parts else None
