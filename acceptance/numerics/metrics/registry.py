"""The metric registry: every metric declared once, as a function of the reduced partial results.

Both reduction engines (the fused host kernel, :mod:`.host`, and the torch
device path, :mod:`.device`) reduce a pair (e, b) to the same named
quantities, :class:`Reduced`; a metric is a formula over them. ``METRICS``,
the threshold fields a spec accepts, the dual-delta metric names and the
metrics table of the docs all derive from :data:`REGISTRY`, so a metric that
needs only quantities already reduced is added here and nowhere else.

The sums and maxima run over the ``n`` positions compared numerically (both
values finite); all arithmetic is float64 on the exact input values. ``ulp``
is ``min(|e−b| / ulp(b), cap)``: one ulp of the output dtype at the reference
``b`` rounded to that dtype, at most the dtype's ``ulp_cap`` (see the package
docs); ``hyb`` is ``|e−b| / (1 + |b|)``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, NamedTuple


class Reduced(NamedTuple):
    """What the engines reduce a pair (e, b) to. Sums and maxima over the n finite positions."""

    sum_abs: float  # Σ|e−b|
    sum_abs_b: float  # Σ|b|
    sum_sq: float  # Σ(e−b)²
    sum_b2: float  # Σb²
    sum_ulp: float  # Σ ulp_err
    sum_hyb: float  # Σ |e−b|/(1+|b|)
    max_abs: float  # max |e−b|
    max_rel: float  # max |e−b|/|b|  (0/0 = 0, x/0 = inf)
    max_rel_floor: float  # max |e−b|/|b| over |b| > REL_FLOOR
    max_rel_th: float  # max |e−b|/|b| over |b| > th (diff3 m1)
    max_abs_th: float  # max |e−b| over |b| ≤ th (diff3 m2)
    max_ulp: float  # max ulp_err
    max_hyb: float  # max |e−b|/(1+|b|)
    max_e: float  # max |e|
    max_b: float  # max |b|
    n: int  # positions compared numerically (both finite)
    above: int  # positions with e > b (IEEE order; NaN excluded)
    below: int  # positions with e < b
    special: int  # both NaN, or the same-signed Inf
    nan_mismatch: int  # exactly one NaN
    inf_mismatch: int  # no NaN, an Inf on either side, e ≠ b


#: Fields of :class:`Reduced` that are sums, maxima and counts, in the engines' column order.
SUM_FIELDS = Reduced._fields[:6]
MAX_FIELDS = Reduced._fields[6:15]
COUNT_FIELDS = Reduced._fields[15:]

#: |b| floor of ``max_rel_floor``.
REL_FLOOR = 1e-3

Kind = Literal["error", "score", "pair", "direction", "count"]


#: One computed metric value: a number (counts are ints), or a tuple for ``diff3`` (m1, m2) and ``diff4``
#: (p1, p2, n).
Value = float | tuple[float, ...]


@dataclass(frozen=True)
class Metric:
    """One metric.

    ``kind``:
      - ``error``: a number ≥ 0, lower is better; ``inf`` on a NaN/Inf mismatch;
      - ``score``: higher is better (SNR); ``-inf`` on a NaN/Inf mismatch;
      - ``pair``: two errors (diff3's (m1, m2)); ``(inf, inf)`` on a mismatch;
      - ``direction``: diff4's (p1, p2, n), gated by its own rule;
      - ``count``: a count of positions, lower is better.
    ``formula`` and ``units`` are what the docs table shows; ``value`` computes it. ``worst_case``: the
    metric is a maximum over elements (an accuracy floor in max ulp applies to it), not an average.
    """

    name: str
    kind: Kind
    formula: str
    units: str
    source: str
    value: Callable[[Reduced], Value]
    worst_case: bool = False

    @property
    def comparison(self) -> str:
        """How a threshold on it reads: ``>=`` for scores, ``<=`` otherwise."""
        return ">=" if self.kind == "score" else "<="

    def on_mismatch(self) -> Value | None:
        """The value a NaN/Inf mismatch forces: the worst one."""
        if self.kind == "error":
            return math.inf
        if self.kind == "score":
            return -math.inf
        if self.kind == "pair":
            return (math.inf, math.inf)
        return None  # direction and counts keep their value


def round_up_field(precision: int) -> int:
    """The smallest 52-bit float64 fraction field that rounds up into the next binade at ``precision`` bits:
    2^52 - 2^(52-p), the midpoint below the next power of two (a tie rounds up: that power's significand is
    even); 2^52, never reached, where p >= 53. The engines' ULP unit uses it to find the exponent of a float64
    value rounded to the output dtype without rounding it."""
    return (1 << 52) - (1 << (52 - precision)) if precision <= 52 else 1 << 52


def ratio(num: float, den: float) -> float:
    """num / den for num, den ≥ 0, with 0/0 = 0, x/0 = inf and inf/anything = inf."""
    if num == 0.0:
        return 0.0
    if den == 0.0 or math.isinf(num):
        return math.inf
    return num / den


def mean(total: float, n: int) -> float:
    """total / n, 0 when n = 0."""
    return total / n if n else 0.0


def diff4_value(above: int, below: int) -> tuple[float, float, int]:
    """diff4 = (p1, p2, n) from the counts of unequal points: n = above + below, p1 = above/n, p2 = below/n;
    (0, 0, 0) when n = 0. The one place where counts become fractions."""
    n = above + below
    return (above / n, below / n, n) if n else (0.0, 0.0, 0)


def snr_db(r: Reduced) -> float:
    """10·log10(Σb² / Σ(e−b)²) in dB: +inf when the error is 0, −inf when Σb² = 0 < Σ(e−b)²."""
    if r.sum_sq == 0.0:
        return math.inf
    if r.sum_b2 == 0.0:
        return -math.inf
    if math.isinf(r.sum_sq):
        return -math.inf
    if math.isinf(r.sum_b2):
        return math.inf
    return 10.0 * math.log10(r.sum_b2 / r.sum_sq)


_MLU = "MLU-OPS"
#: Every metric, in output order.
REGISTRY: tuple[Metric, ...] = (
    Metric("diff1", "error", "Σ|e−b| / Σ|b|", "ratio", _MLU, lambda r: ratio(r.sum_abs, r.sum_abs_b)),
    Metric("diff2", "error", "sqrt(Σ(e−b)² / Σb²)", "ratio", _MLU, lambda r: math.sqrt(ratio(r.sum_sq, r.sum_b2))),
    Metric(
        "diff3",
        "pair",
        "(max |e−b|/|b| over |b| > th, max |e−b| over |b| ≤ th)",
        "(ratio, data)",
        _MLU,
        lambda r: (r.max_rel_th, r.max_abs_th),
    ),
    Metric("diff3_1", "error", "max |e−b| / |b|", "ratio", _MLU, lambda r: r.max_rel, worst_case=True),
    Metric("diff3_2", "error", "max |e−b|", "data", _MLU, lambda r: r.max_abs, worst_case=True),
    Metric(
        "diff4",
        "direction",
        "(p1, p2, n): fractions of the n unequal points with e > b, e < b",
        "fractions",
        _MLU,
        lambda r: diff4_value(r.above, r.below),
    ),
    Metric("mse", "error", "Σ(e−b)² / n", "data²", "common", lambda r: mean(r.sum_sq, r.n)),
    Metric("nmse", "error", "Σ(e−b)² / Σb²", "ratio", "common (GGML kernels)", lambda r: ratio(r.sum_sq, r.sum_b2)),
    Metric(
        "rms",
        "error",
        "sqrt(Σ(e−b)²) / (sqrt(n) · max(max|e|, max|b|))",
        "ratio",
        "MIOpen",
        lambda r: ratio(math.sqrt(r.sum_sq), math.sqrt(r.n) * max(r.max_e, r.max_b)),
    ),
    Metric("max_abs", "error", "max |e−b|", "data", "common", lambda r: r.max_abs, worst_case=True),
    Metric("mean_abs", "error", "Σ|e−b| / n", "data", "common", lambda r: mean(r.sum_abs, r.n)),
    Metric("max_rel", "error", "max |e−b| / |b|", "ratio", "common", lambda r: r.max_rel, worst_case=True),
    Metric(
        "max_rel_floor",
        "error",
        f"max |e−b| / |b| over |b| > {REL_FLOOR:g}",
        "ratio",
        "common",
        lambda r: r.max_rel_floor,
        worst_case=True,
    ),
    Metric(
        "max_ulp",
        "error",
        "max min(|e−b| / ulp(b), cap)",
        "ulp",
        "maxEpsilonDiff",
        lambda r: r.max_ulp,
        worst_case=True,
    ),
    Metric("mean_ulp", "error", "Σ ulp_err / n", "ulp", "common", lambda r: mean(r.sum_ulp, r.n)),
    Metric("max_hyb", "error", "max |e−b| / (1+|b|)", "ratio", "hybrid error", lambda r: r.max_hyb, worst_case=True),
    Metric("mean_hyb", "error", "Σ |e−b|/(1+|b|) / n", "ratio", "hybrid error", lambda r: mean(r.sum_hyb, r.n)),
    Metric(
        "normwise_rel",
        "error",
        "‖e−b‖₂ / ‖b‖₂ (equal to diff2)",
        "ratio",
        "norm-wise",
        lambda r: ratio(math.sqrt(r.sum_sq), math.sqrt(r.sum_b2)),
    ),
    Metric("snr_db", "score", "10·log10(Σb² / Σ(e−b)²)", "dB", "TorchAO", snr_db),
    Metric(
        "nan_mismatch",
        "count",
        "positions where exactly one of e, b is NaN",
        "count",
        "placement",
        lambda r: r.nan_mismatch,
    ),
    Metric(
        "inf_mismatch",
        "count",
        "positions without NaN where one is ±Inf and e ≠ b",
        "count",
        "placement",
        lambda r: r.inf_mismatch,
    ),
)

BY_NAME: dict[str, Metric] = {m.name: m for m in REGISTRY}

#: Every selectable metric name, in output order.
METRICS: tuple[str, ...] = tuple(BY_NAME)

#: Metrics with one number per comparison where lower is better: usable as a
#: dual-delta error (one number per trial) and gated by ``<=``.
SCALAR_ERRORS: tuple[str, ...] = tuple(m.name for m in REGISTRY if m.kind in ("error", "count"))


def get(name: str) -> Metric:
    """The metric called ``name`` (``KeyError`` when there is none)."""
    return BY_NAME[name]


def finalize(r: Reduced, selected: tuple[str, ...]) -> dict[str, Value]:
    """The selected metric values of ``r``, plus the counts ``n``, ``special_matched``, ``above`` and ``below``.

    A NaN or Inf mismatch forces every error to ``inf`` (scores to ``-inf``),
    so a misplaced NaN never yields a passing number.
    """
    mismatch = bool(r.nan_mismatch or r.inf_mismatch)
    out: dict[str, Value] = {}
    for name in selected:
        metric = BY_NAME[name]
        forced = metric.on_mismatch() if mismatch else None
        out[name] = forced if forced is not None else metric.value(r)
    out["n"] = r.n
    out["special_matched"] = r.special
    out["above"] = r.above
    out["below"] = r.below
    return out
