"""Output invariants: properties of a function's result that no rounding can break, checked element by element.

An invariant is declared per spec (``invariants:``) or comes with a built-in function
(:data:`acceptance.spec.defaults.DEFAULT_INVARIANTS`). An output that breaks one fails the case on that alone,
whatever the floors and factors allow (:func:`acceptance.decide.verdict.invariant_criteria`):

* ``range: [lo, hi]``: every finite element satisfies lo <= y <= hi (tanh: [-1, 1]; sigmoid, softmax: [0, 1]).
  A correctly rounded result of a function with that range stays in it (rounding is monotone and lo, hi are
  representable), so no tolerance;
* ``nonnegative``: y >= 0 (-0 allowed);
* ``positive``: y > 0 wherever the oracle is at least the dtype's smallest normal number (a result that is
  a normal number cannot round to 0; below it, a flush to zero is allowed);
* ``sum_to: s`` over ``dim``: |sum_i y_i - s| <= (n + 3) u / (1 - (n + 3) u) = gamma_(n+3) for each slice of
  n elements, u = 2^-p the dtype's unit roundoff (the sum taken in float64). Each output of a softmax computed
  with n - 1 additions and three more rounded operations (exp, the division, the store) carries a relative
  error <= gamma_(n+3) (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., Lemma 3.1 and
  section 3.1), so the sum of outputs that should add to s deviates by at most s * gamma_(n+3); s = 1 here.
  The check is skipped when (n + 3) u >= 1 (no bound);
* ``monotone: increasing | decreasing`` (single-input elementwise specs): over the trial's input x and output
  y of the same shape, x_i < x_j implies y_i <= y_j (increasing; >= decreasing), checked over the elements
  sorted by x. A correctly rounded monotone function is monotone (rounding is monotone); approximations need
  not be, so no built-in function declares it.

NaN elements are left to the NaN placement rule. The first violating element (flat index, value, oracle) is
reported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from acceptance.formats import dtypes

if TYPE_CHECKING:  # the spec loader reads Invariants without torch; the checks import it when they run
    import torch


@dataclass(frozen=True)
class Invariants:
    """The invariants in force for one output (see the module docstring); all off by default."""

    range: tuple[float, float] | None = None
    nonnegative: bool = False
    positive: bool = False
    sum_to: float | None = None
    dim: int | None = -1
    monotone: str | None = None

    def any(self) -> bool:
        """Whether any invariant is declared."""
        return bool(self.range or self.nonnegative or self.positive or self.sum_to is not None or self.monotone)


def sum_tolerance(n: int, dtype: str) -> float | None:
    """gamma_(n+3) = (n + 3) u / (1 - (n + 3) u) for the dtype's unit roundoff u; ``None`` when (n + 3) u >= 1."""
    nu = (n + 3) * dtypes.lookup(dtype).unit_roundoff
    return nu / (1.0 - nu) if nu < 1 else None


def _first(bad: torch.Tensor, y: torch.Tensor, o: torch.Tensor, what: str) -> str | None:
    import torch

    if not bool(bad.any()):
        return None
    i = int(torch.nonzero(bad.reshape(-1))[0])
    return f"{what}: {int(bad.sum())} elements, first at flat index {i}: {float(y.reshape(-1)[i]):.9g} " + (
        f"(oracle {float(o.reshape(-1)[i]):.9g})"
    )


def _sum_violation(inv: Invariants, y: torch.Tensor, dtype: str) -> str | None:
    import torch

    if inv.sum_to is None or y.dim() == 0 or y.numel() == 0:
        return None
    dim = -1 if inv.dim is None else inv.dim
    if not -y.dim() <= dim < y.dim():
        return None
    n = y.shape[dim]
    tol = sum_tolerance(n, dtype)
    if tol is None:
        return None
    sums = torch.nan_to_num(y, nan=inv.sum_to / n).sum(dim=dim)
    gap = (sums - inv.sum_to).abs()
    bad = gap > abs(inv.sum_to) * tol
    if not bool(bad.any()):
        return None
    i = int(torch.nonzero(bad.reshape(-1))[0])
    return (
        f"sum over dim {dim} = {inv.sum_to:g}: {int(bad.sum())} slices off, first (slice {i}) sums to "
        f"{float(sums.reshape(-1)[i]):.9g}, |gap| {float(gap.reshape(-1)[i]):.3g} > gamma_(n+3) = {tol:.3g} (n = {n})"
    )


def _monotone_violation(inv: Invariants, x: torch.Tensor | None, y: torch.Tensor) -> str | None:
    import torch

    if inv.monotone is None or x is None or x.shape != y.shape or y.numel() < 2:
        return None
    xs, order = x.reshape(-1).to(torch.float64).sort()
    ys = y.reshape(-1)[order]
    step = ys[1:] - ys[:-1]
    strict = xs[1:] > xs[:-1]
    bad = strict & ((step < 0) if inv.monotone == "increasing" else (step > 0))
    if not bool(bad.any()):
        return None
    k = int(torch.nonzero(bad)[0])
    return (
        f"monotone {inv.monotone}: {int(bad.sum())} steps reversed, first x = {float(xs[k]):.9g} -> "
        f"{float(ys[k]):.9g}, x = {float(xs[k + 1]):.9g} -> {float(ys[k + 1]):.9g}"
    )


def first_violation(
    inv: Invariants, y: torch.Tensor, oracle: torch.Tensor, dtype: str, x: torch.Tensor | None = None
) -> str | None:
    """The first invariant ``y`` (an impl output) breaks, in words, or ``None``; ``oracle`` is the float64
    oracle of the same shape, ``x`` the single input of an elementwise spec (for ``monotone``)."""
    import torch

    if not y.is_floating_point():
        return None
    y = y.detach().cpu().to(torch.float64)
    o = oracle.detach().cpu().to(torch.float64)
    finite = torch.isfinite(y) | torch.isinf(y)  # NaN left to the placement rule
    if inv.range is not None:
        lo, hi = inv.range
        found = _first(finite & ((y < lo) | (y > hi)), y, o, f"outside the range [{lo:g}, {hi:g}]")
        if found:
            return found
    if inv.nonnegative and (found := _first(finite & (y < 0), y, o, "negative")):
        return found
    tiny = 2.0 ** dtypes.lookup(dtype).emin  # the smallest normal number
    if inv.positive and (found := _first((y <= 0) & (o >= tiny), y, o, "not positive where the oracle is normal")):
        return found
    if o.shape == y.shape and (found := _sum_violation(inv, y, dtype)):
        return found
    return _monotone_violation(inv, None if x is None else x.detach().cpu(), y)
