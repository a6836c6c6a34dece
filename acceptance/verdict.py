"""Criteria and verdicts: category thresholds, the diff4 rule, reasons in words.

The default criteria are MLU-OPS's category table (DESIGN.md):

=============================  ============================  =================
category                       float32                       float16
=============================  ============================  =================
convolution                    diff1, diff2 <= 1e-5          diff1, diff2 <= 3e-3
reduction, activation,
composite, atomic_add          diff1, diff2 <= 3e-3          diff1, diff2 <= 3e-3
arithmetic, pure_io            diff3_2 == 0 (bit exact)      diff3_2 == 0
=============================  ============================  =================

Dtypes the table does not name get the threshold of the nearest named dtype
scaled by the ratio of unit roundoffs ``u = 2^-p`` (p = significand bits
incl. the implicit one):

- bfloat16 (u = 2^-8) scales float16's (u = 2^-11) by 8: convolution and the
  rounding categories 2.4e-2.
- float64 (u = 2^-53) scales float32's (u = 2^-24) by 2^-29 ≈ 1.86e-9:
  convolution 1.9e-14, the rounding categories 5.6e-12.

Every category also requires the NaN/Inf placement of the impl to match the
baseline's (``nan_mismatch == 0``, ``inf_mismatch == 0``), and every category
with a rounding tolerance gates diff4 as MLU-OPS's evaluator does: evaluated
only when n >= 100 unequal points (counted over all trials), fails only when
every unequal point lies on one side (p1 == 0 or p2 == 0), skipped when the
baseline's own diff4 against the oracle is one-sided.

Spec ``thresholds`` override or add criteria per dtype; ``diff4: false``
switches the diff4 rule off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Optional

from acceptance.report.text import fmt_value as fmt  # noqa: F401  (one number style)
from acceptance.results import Criterion

BIT_EXACT_CATEGORIES = ("arithmetic", "pure_io")

#: Unit roundoff u = 2^-p of each test dtype.
UNIT_ROUNDOFF: dict[str, float] = {
    "float16": 2.0**-11,
    "bfloat16": 2.0**-8,
    "float32": 2.0**-24,
    "float64": 2.0**-53,
    "float8_e4m3fn": 2.0**-4,
    "float8_e5m2": 2.0**-3,
}

#: MLU-OPS's table: category -> dtype -> diff1/diff2 threshold (the named dtypes).
_TABLE: dict[str, dict[str, float]] = {
    "convolution": {"float32": 1e-5, "float16": 3e-3},
    "reduction": {"float32": 3e-3, "float16": 3e-3},
    "activation": {"float32": 3e-3, "float16": 3e-3},
    "composite": {"float32": 3e-3, "float16": 3e-3},
    "atomic_add": {"float32": 3e-3, "float16": 3e-3},
}

#: For dtypes the table does not name: which named dtype to scale from.
_SCALE_FROM = {
    "bfloat16": "float16",
    "float8_e4m3fn": "float16",
    "float8_e5m2": "float16",
    "float64": "float32",
}

DIFF4_MIN_POINTS = 100


@dataclass(frozen=True)
class Threshold:
    """One threshold in force and where it came from."""

    metric: str
    value: Any  # float, [m1, m2] for diff3
    comparison: str
    source: str


def _scaled_default(category: str, dtype: str) -> tuple[float, str]:
    row = _TABLE[category]
    if dtype in row:
        return row[dtype], f"{dtype} {category} default"
    base = _SCALE_FROM.get(dtype, "float32")
    factor = UNIT_ROUNDOFF.get(dtype, UNIT_ROUNDOFF["float32"]) / UNIT_ROUNDOFF[base]
    return row[base] * factor, f"{dtype} {category} default ({base} x u ratio {factor:.3g})"


def thresholds_for(category: str, dtype: str, overrides: Optional[dict[str, Any]] = None) -> list[Threshold]:
    """The thresholds in force for one (category, dtype), spec overrides applied.

    Overrides replace a default of the same metric or add a criterion; their
    source reads ``"spec override"``. ``diff4`` is handled by :func:`diff4_enabled`.
    """
    overrides = dict(overrides or {})
    overrides.pop("diff4", None)
    found: dict[str, Threshold] = {}
    if category in BIT_EXACT_CATEGORIES:
        found["diff3_2"] = Threshold("diff3_2", 0.0, "==", f"{category} default (bit exact)")
    else:
        value, source = _scaled_default(category, dtype)
        for metric in ("diff1", "diff2"):
            found[metric] = Threshold(metric, value, "<=", source)
    for metric, value in overrides.items():
        comparison = "==" if (value == 0 and category in BIT_EXACT_CATEGORIES) else "<="
        found[metric] = Threshold(metric, value, comparison, "spec override")
    return list(found.values())


def diff4_enabled(category: str, overrides: Optional[dict[str, Any]] = None) -> bool:
    """diff4 applies to the categories with a rounding tolerance unless the spec says ``diff4: false``."""
    if overrides and overrides.get("diff4") is False:
        return False
    return category not in BIT_EXACT_CATEGORIES


def _holds(value: Any, threshold: Any, comparison: str) -> bool:
    """NaN-proof comparison: a NaN value never holds."""
    if isinstance(threshold, (list, tuple)):
        return all(_holds(v, t, comparison) for v, t in zip(value, threshold))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if comparison == "==":
        return value == threshold
    return value <= threshold


def evaluate(worst: list[dict[str, Any]], thresholds: Iterable[Threshold]) -> list[Criterion]:
    """Compare each output's worst-over-trials metrics with every threshold, plus NaN/Inf placement."""
    criteria: list[Criterion] = []
    for out, metrics in enumerate(worst):
        for name in ("nan_mismatch", "inf_mismatch"):
            value = float(metrics.get(name, 0))
            criteria.append(
                Criterion(metric=name, output=out, value=value, threshold=0.0, comparison="==",
                          passed=value == 0, source="NaN/Inf placement must match the baseline")
            )
        for th in thresholds:
            value = metrics.get(th.metric)
            if isinstance(value, tuple):
                value = list(value)
            criteria.append(
                Criterion(metric=th.metric, output=out, value=value,
                          threshold=th.value if not isinstance(th.value, (list, tuple)) else None,
                          comparison=th.comparison, passed=_holds(value, th.value, th.comparison),
                          source=th.source,
                          note=f"threshold {fmt(list(th.value))}" if isinstance(th.value, (list, tuple)) else None)
            )
    return criteria


def diff4_criterion(out: int, above: int, below: int, base_above: int, base_below: int) -> Criterion:
    """MLU-OPS's diff4 rule over counts summed across trials.

    ``above``/``below``: impl-vs-baseline points with e > b / e < b;
    ``base_above``/``base_below``: the baseline against the oracle, same sense.
    """
    n = above + below
    value = [above / n if n else 0.0, below / n if n else 0.0, float(n)]
    crit = dict(metric="diff4", output=out, value=value, comparison="two-sided",
                source="MLU-OPS diff4 rule (n >= 100, one-sided fails)")
    if n < DIFF4_MIN_POINTS:
        return Criterion(**crit, passed=None, note=f"not evaluated: n = {n} unequal points < {DIFF4_MIN_POINTS}")
    base_n = base_above + base_below
    if base_n >= DIFF4_MIN_POINTS and (base_above == 0 or base_below == 0):
        return Criterion(**crit, passed=None,
                         note="skipped: the baseline's own diff4 against the oracle is one-sided")
    one_sided = above == 0 or below == 0
    return Criterion(**crit, passed=not one_sided,
                     note=("every unequal point lies on one side (systematic bias)" if one_sided else None))


def describe_failure(c: Criterion) -> str:
    """One reason in words, e.g. ``diff1 4.1e-3 > 3e-3 (float16 convolution default)``."""
    where = f" [output {c.output}]" if c.output else ""
    if c.metric == "diff4":
        p1, p2, n = c.value
        return f"diff4{where} one-sided: p1={fmt(p1)}, p2={fmt(p2)} over n={int(n)} unequal points ({c.source})"
    if c.metric in ("nan_mismatch", "inf_mismatch"):
        kind = "NaN" if c.metric == "nan_mismatch" else "Inf"
        return f"{kind} placement differs from the baseline at {int(c.value)} positions{where}"
    op = "!=" if c.comparison == "==" else ">"
    threshold = c.note.removeprefix("threshold ") if c.threshold is None and c.note else fmt(c.threshold)
    return f"{c.metric}{where} {fmt(c.value)} {op} {threshold} ({c.source})"


def tolerance_to_pass(criteria: list[Criterion]) -> dict[str, float]:
    """For each failing ``<=`` criterion, the smallest threshold that would pass: the worst value itself."""
    out: dict[str, float] = {}
    for c in criteria:
        if c.passed is False and c.comparison in ("<=", "==") and isinstance(c.value, (int, float)):
            key = c.metric if not c.output else f"{c.metric}[{c.output}]"
            out[key] = max(out.get(key, 0.0), float(c.value))
    return out
