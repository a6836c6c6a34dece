"""One pair (e, b) reduced to every metric: :func:`compute`, the entry point the package docs describe
(:mod:`acceptance.numerics.metrics`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from acceptance.formats import dtypes
from acceptance.numerics.metrics.registry import METRICS, Value, finalize

if TYPE_CHECKING:  # the engines (numba, torch) load on the first compute()
    from acceptance.formats.dtypes import DTypeSpec
    from acceptance.numerics.metrics.operands import Operand


def selected(names: Iterable[str] | None) -> tuple[str, ...]:
    if names is None:
        return METRICS
    if isinstance(names, str):
        names = [names]
    try:
        chosen = list(names)
    except TypeError:
        raise ValueError(f"names must be an iterable of metric names, not {type(names).__name__}") from None
    unknown = [name for name in chosen if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric name(s) {', '.join(map(repr, unknown))}; known: {', '.join(METRICS)}")
    return tuple(name for name in METRICS if name in chosen)


def compute(
    evaluated: Operand, baseline: Operand, *, dtype: DTypeSpec | None = None, names: Iterable[str] | None = None
) -> dict[str, Value]:
    """Every metric of ``evaluated`` (e) against ``baseline`` (b), in one pass.

    ``evaluated`` and ``baseline``: numpy arrays or torch tensors (any device;
    floating incl. float16, bfloat16 and float8, integer or bool) of one shape.
    ``dtype``: the output dtype that ULP and the diff3 threshold refer to
    (torch dtype, numpy dtype or a name such as "bfloat16"; default:
    ``evaluated``'s dtype). ``names``: the metrics to return (default all of
    :data:`METRICS`; one name may be given as a string); the cost is the same
    either way.

    Returns a dict: each selected metric (floats; ``diff3`` = (m1, m2),
    ``diff4`` = (p1, p2, n) with n an int; ``nan_mismatch`` and
    ``inf_mismatch`` are ints) and always the counts ``n`` (positions compared
    numerically) and ``special_matched`` (positions left out because both are
    NaN or both the same-signed Inf); these two are not selectable metrics.
    The formulas, units and the treatment of NaN, Inf, zero baselines and
    empty inputs are in the module docstring.

    Tensors on a CUDA device are reduced on that device (a host operand is
    moved there piece by piece); everything else by the fused host kernel.
    Scratch memory is bounded whatever the input size: at most 4 MiB per
    host worker thread, about 160 MiB on a device.

    Raises ValueError on unknown metric names or dtypes, shape mismatches and
    non-numeric inputs (strings, objects, complex), naming the problem.
    """
    from acceptance.numerics.metrics import device, host
    from acceptance.numerics.metrics.operands import is_device, operand

    chosen = selected(names)
    e = operand(evaluated, "evaluated")
    b = operand(baseline, "baseline")
    if tuple(e.shape) != tuple(b.shape):
        raise ValueError(f"shape mismatch: evaluated {tuple(e.shape)} vs baseline {tuple(b.shape)}")
    fmt = dtypes.lookup(e.dtype if dtype is None else dtype)
    engine = device if is_device(e) or is_device(b) else host
    return finalize(engine.reduce(e, b, fmt), chosen)
