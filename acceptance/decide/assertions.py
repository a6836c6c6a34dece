"""``assert_accurate``: the gate's fixed criteria as an assertion for hand-written tests. Example::

    from acceptance import assert_accurate

    def test_my_gelu():
        x = torch.randn(4096, dtype=torch.float16)
        assert_accurate(my_gelu(x), torch.nn.functional.gelu(x), oracle=torch.nn.functional.gelu(x.double()),
                        category="activation")

The criteria are those of a spec case of the same category and dtype
(:func:`acceptance.spec.defaults.thresholds_for`, overrides as ``thresholds``),
decided by :mod:`acceptance.decide.verdict` oracle-aware when an oracle is given:
NaN/Inf placement, the fixed thresholds (diff1/diff2 of the category table),
and for bit-exact categories (arithmetic, pure_io) the bits. On failure,
:class:`AccuracyError` (an ``AssertionError``) says which criteria failed with
their values and thresholds, how many elements are over the element tolerance
(hybrid error |e - b| / (1 + |b|) above the smallest diff1/diff2 threshold) and
where they sit, and the worst element: its index and the actual, expected
and oracle values at full precision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy.typing as npt
import torch

from acceptance.decide.verdict import bits_criteria, threshold_criteria
from acceptance.formats import dtypes
from acceptance.measure.diagnose import Diagnosis, bit_mismatches
from acceptance.numerics import metrics
from acceptance.records import MetricValue, OutputMeasurement
from acceptance.spec.defaults import BIT_EXACT_CATEGORIES, Rules, thresholds_for
from acceptance.spec.model import CATEGORIES
from acceptance.wording import criterion_text, fmt, worst_element_text

if TYPE_CHECKING:
    from acceptance.formats.dtypes import DTypeSpec
    from acceptance.numerics.metrics.registry import Value
    from acceptance.spec.overrides import ThresholdOverride

#: What the assertion compares: a tensor, or anything ``torch.as_tensor`` reads (a NumPy array, nested lists).
TensorLike = torch.Tensor | npt.ArrayLike


class AccuracyError(AssertionError):
    """``actual`` is not accurate enough; the message lists the failed criteria and the worst element."""


def _tensor(x: TensorLike, name: str) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    try:
        return torch.as_tensor(x)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise TypeError(f"{name}: expected a tensor or an array, got {type(x).__name__} ({exc})") from None


def _listed(measured: dict[str, Value]) -> dict[str, MetricValue]:
    """Metric values as a record holds them: tuples (diff3, diff4) as lists."""
    return {m: (list(v) if isinstance(v, tuple) else v) for m, v in measured.items()}


def assert_accurate(
    actual: TensorLike,
    expected: TensorLike,
    *,
    oracle: TensorLike | None = None,
    category: str = "composite",
    dtype: DTypeSpec | None = None,
    thresholds: dict[str, ThresholdOverride] | None = None,
) -> None:
    """Raise :class:`AccuracyError` unless ``actual`` passes the fixed criteria of ``category`` against
    ``expected`` (the same-dtype reference), oracle-aware when ``oracle`` (a float64 result) is given.

    ``dtype``: the dtype the criteria are for (a torch dtype or a name such as ``"bfloat16"``; default:
    ``expected``'s dtype). ``thresholds``: overrides as in a spec's ``thresholds.<dtype>``, e.g.
    ``{"diff1": 1e-3, "max_abs": 0.01}``. Raises ``ValueError`` for an unknown category or dtype and
    shapes that differ.

    Like ``torch.testing.assert_close``, the failure points at the caller: pytest hides this frame
    (``__tracebackhide__``) and the error is raised here, after the check returned, without the check's frames
    or a chained exception.
    """
    __tracebackhide__ = True
    message = accuracy_failure(actual, expected, oracle=oracle, category=category, dtype=dtype, thresholds=thresholds)
    if message is not None:
        raise AccuracyError(message) from None


def accuracy_failure(
    actual: TensorLike,
    expected: TensorLike,
    *,
    oracle: TensorLike | None = None,
    category: str = "composite",
    dtype: DTypeSpec | None = None,
    thresholds: dict[str, ThresholdOverride] | None = None,
) -> str | None:
    """The failure message of :func:`assert_accurate` for these arguments, or ``None`` when ``actual`` passes."""
    e, b = _tensor(actual, "actual"), _tensor(expected, "expected")
    if category not in CATEGORIES:
        raise ValueError(f"category: {category!r} is not one of {', '.join(CATEGORIES)}")
    if tuple(e.shape) != tuple(b.shape):
        raise ValueError(f"shape mismatch: actual {tuple(e.shape)}, expected {tuple(b.shape)}")
    name = dtypes.name_of(b.dtype if dtype is None else dtype)
    o = _tensor(oracle, "oracle").to(device=b.device, dtype=torch.float64) if oracle is not None else None
    if o is not None and tuple(o.shape) != tuple(b.shape):
        raise ValueError(f"shape mismatch: oracle {tuple(o.shape)}, expected {tuple(b.shape)}")
    b = b.to(e.device)
    th = thresholds_for(category, name, thresholds)
    bit_exact = category in BIT_EXACT_CATEGORIES and not thresholds
    tolerance = (
        0.0
        if bit_exact
        else min(
            (float(t.value) for t in th if t.metric in ("diff1", "diff2") and not isinstance(t.value, tuple)),
            default=0.0,
        )
    )
    rules = Rules(
        category=category,
        dtype=name,
        thresholds=tuple(th),
        diff4=False,
        dual_delta=None,
        element_tolerance=tolerance,
        bit_exact=bit_exact,
    )
    rounded = None
    if o is not None:
        rounded = dtypes.rounded(o, b.dtype)
        rounded = o if rounded is None else rounded
    output = OutputMeasurement(
        metrics=_listed(metrics.compute(e, b, dtype=name)),
        impl_oracle=_listed(metrics.compute(e, rounded.to(e.device), dtype=name)) if rounded is not None else None,
        baseline_oracle=_listed(metrics.compute(b, rounded.to(b.device), dtype=name)) if rounded is not None else None,
        bit_mismatches=bit_mismatches(e, b, rounded.to(e.device) if rounded is not None else None)
        if bit_exact
        else None,
    )
    criteria = threshold_criteria([output], rules) + bits_criteria([output], rules)
    failed = [c for c in criteria if c.passed is False]
    if not failed:
        return None
    diagnosis = Diagnosis(name)
    diagnosis.add(0, 0, e, b, o, tolerance)
    n = e.numel()
    bad = round(diagnosis.bad_fraction * n)
    lines = [f"Tensor-likes are not accurate ({name} {category})!", "", "Failed criteria:"]
    lines += [f"  {criterion_text(c)}" for c in failed]
    over = (
        f"Mismatched elements: {bad} / {n} ({fmt(100.0 * bad / n if n else 0.0)}%) with hybrid error "
        f"|actual - expected| / (1 + |expected|) > {fmt(tolerance)}"
    )
    lines.append(over + (f"; {diagnosis.bad_where}" if diagnosis.bad_where else ""))
    if diagnosis.worst is not None:
        worst = worst_element_text(diagnosis.worst).replace(" (trial 0)", "")
        lines.append(worst.replace("impl ", "actual ").replace("baseline ", "expected ").capitalize())
    return "\n".join(lines)
