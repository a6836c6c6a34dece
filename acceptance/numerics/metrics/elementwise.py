"""Per-element passes over host data for the diagnostics, the bias sums and the peer gates, one fused loop each.

:mod:`acceptance.measure.diagnose` and :mod:`acceptance.measure.peers` define their
quantities with torch element-wise ops (about forty small ops per output and
trial); on host data of the sizes most outputs have (1e2 to 1e5 elements)
those ops cost more in dispatch than in arithmetic. The numba loops here
compute the same quantities in one pass each, on flat float64 arrays (every
supported format widens to float64 exactly), with the same IEEE operations
in the same order per element (no fastmath), so every count, index and
element value equals the torch definition's bit for bit:

- ``abs_err(x, y)`` = |x − y|, 0 where both are NaN or both the same
  infinity, ``inf`` where the difference is NaN (a NaN/Inf mismatch);
- the relative error |x − y| / |y|: 0 where that error is 0, ``inf`` where
  the quotient is NaN; counted in the buckets ``=0``, then ``[0, 1e-6)``,
  ..., ``[0.1, 1)`` and ``>= 1`` (an element's bucket is the number of edges
  ≤ it, as ``torch.bucketize(..., right=True)``);
- ulp(o) = 2^(min(max(floor(log2 |round(o)|), emin), emax) − (p − 1)), one
  ulp of the dtype at o rounded to it (the unit of every ULP error, see
  :func:`acceptance.formats.dtypes.spacing_at`), in units of the data;
- sums stay with the caller (torch's summation order is kept there).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from numba import njit

from acceptance.numerics.metrics.host import _pow2, _ulp_shift

#: Upper edges (exclusive) of the relative-error buckets after ``=0``; the last bucket is ``>= 1``.
BUCKET_EDGES = np.array([1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0])


def host_float64(x: torch.Tensor) -> np.ndarray:
    """A CPU tensor, flattened, as a contiguous float64 array (a view when it already is one; exact)."""
    return x.detach().reshape(-1).to(torch.float64).contiguous().numpy()


@njit(inline="always")
def _abs_err(x, y):  # pragma: no cover - compiled
    if (math.isnan(x) and math.isnan(y)) or (math.isinf(x) and x == y):
        return 0.0
    d = abs(x - y)
    return math.inf if math.isnan(d) else d


@njit(nogil=True, cache=True, error_model="numpy")
def diagnosis_pass(e, b, o, has_o, tol, edges, counts, bad):  # pragma: no cover - compiled
    """One pass over ``e``, ``b`` (and the oracle ``o`` when ``has_o``), all flat float64.

    Adds to ``counts`` (int64, 1 + len(edges) + 1 slots: ``=0``, then one per
    bucket) the relative error of each element of e against b; writes
    ``bad[i]`` = abs_err(e, b) / (1 + |b|) > ``tol``. Returns (index, value)
    of the largest score, the first one, a NaN counting as the largest:
    score = abs_err(e, o) / (1 + |o|) with the oracle, else abs_err(e, b);
    (-1, nan) for no element.
    """
    at = -1
    best = math.nan
    k_max = edges.shape[0]
    for i in range(e.shape[0]):
        x = e[i]
        y = b[i]
        err = _abs_err(x, y)
        ay = abs(y)
        if err == 0.0:
            rel = 0.0
        else:
            rel = err / ay
            if math.isnan(rel):
                rel = math.inf
        if rel == 0.0:
            counts[0] += 1
        else:
            k = 0
            while k < k_max and edges[k] <= rel:
                k += 1
            counts[1 + k] += 1
        if has_o:
            z = o[i]
            s = _abs_err(x, z) / (1.0 + abs(z))
        else:
            s = err
        if at < 0 or (not math.isnan(best) and (math.isnan(s) or s > best)):
            at = i
            best = s
        bad[i] = err / (1.0 + ay) > tol
    return at, best


@njit(nogil=True, cache=True, error_model="numpy")
def bias_pass(e, b, o, normal, is_float, ulp_args, clip, out):  # pragma: no cover - compiled
    """The signed errors of e and b against o in units of ulp(o), clipped to ±``clip``, at the kept
    positions (e, b, o finite and not both |e| and |o| below ``normal``), in order.

    Writes rows of ``out`` (float64, 4 × len(e)): 0: (e − o)/u, 1: that × sign(o), 2: (b − o)/u, 3: that ×
    sign(o); returns (kept, flushed) where flushed counts the positions with |e| < normal and |o| < normal.
    u = ulp(o) for a float dtype (see the module docstring; ``ulp_args`` = (precision, emin, emax, round_up) as
    :func:`acceptance.numerics.metrics.host.ulp_args` gives them), 1 otherwise.
    """
    kept = 0
    flushed = 0
    for i in range(e.shape[0]):
        x = e[i]
        y = b[i]
        z = o[i]
        flush = abs(x) < normal and abs(z) < normal
        flushed += flush
        if flush or not (math.isfinite(x) and math.isfinite(y) and math.isfinite(z)):
            continue
        if is_float:
            k = -_ulp_shift(abs(z), ulp_args[0], ulp_args[1], ulp_args[2], ulp_args[3])
            u = _pow2(k >> 1) * _pow2(k - (k >> 1))  # exact in two steps, down to 2^-1074
        else:
            u = 1.0
        sign = 1.0 if z > 0.0 else (-1.0 if z < 0.0 else 0.0)
        se = min(max((x - z) / u, -clip), clip)
        sb = min(max((y - z) / u, -clip), clip)
        out[0, kept] = se
        out[1, kept] = se * sign
        out[2, kept] = sb
        out[3, kept] = sb * sign
        kept += 1
    return kept, flushed


@njit(nogil=True, cache=True, error_model="numpy")
def close_mismatches(e, b, rtol, atol):  # pragma: no cover - compiled
    """Positions failing |e − b| <= atol + rtol·|b| that are not the same infinity (NaN anywhere fails)."""
    count = 0
    for i in range(e.shape[0]):
        x = e[i]
        y = b[i]
        close = abs(x - y) <= atol + rtol * abs(y)
        if not close and not (math.isinf(x) and x == y):
            count += 1
    return count
