"""Dual-delta testing as a library call, without specs. Example::

    res = dual_delta(my_kernel, torch.matmul, None, make_inputs, ["max_hyb", "mean_hyb"], 100,
                     dtype=torch.float16)
    res.passed, res.analysis["max_hyb"].conclusion, res.delta_impl["max_hyb"]

Per trial t, with inputs x_t = ``generate_input(g_t)``:

* delta_1[t] = err(impl(x_t on the impl device), oracle(float64(x_t)))
* delta_2[t] = err(baseline(x_t on the CPU),     oracle(float64(x_t)))
* free[t]    = err(round_dtype(oracle), oracle): the error of the correctly
  rounded result, where round_dtype rounds to the baseline output's dtype.

The trials run in the one trial engine (:mod:`acceptance.measure.engine`). Each
metric (and output) is then analysed by :func:`acceptance.numerics.stats.analyze` with
free = max_t free[t] (the rounding bound; see ``docs/dual-delta.md``), the
p-values of all metrics and outputs of the call are Holm-corrected together,
and :func:`acceptance.decide.verdict.dual_delta_gate` decides each.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np
import torch

from acceptance.decide import verdict
from acceptance.errors import CaseError
from acceptance.measure.engine import Roles, TrialRun, against_oracle, run_trials
from acceptance.numerics import metrics, stats
from acceptance.numerics.factors import DEFAULT_ALPHA, default_factor
from acceptance.numerics.oracle import float64_oracle
from acceptance.records import DualDeltaRecord, Timing

if TYPE_CHECKING:
    from acceptance.protocols import ReferenceSource

ErrorFn = Callable[[torch.Tensor, torch.Tensor], float]
ErrorSpec = str | ErrorFn | Sequence[str | ErrorFn]


class DualDeltaError(ValueError):
    """Bad arguments, or a callable that raised or returned something unusable;
    the message names the role (impl, baseline, oracle, generate_input) and the trial."""


@dataclass(frozen=True)
class DualDeltaResult:
    """Outcome of :func:`dual_delta`.

    Labels are the metric names, suffixed ``[k]`` with the output index when
    the operator has more than one output (``"max_hyb[1]"``).

    Attributes:
        labels: one per analysed (output, metric), in order.
        delta_impl, delta_baseline: label -> float64 array, one error per trial
            (delta_1 = err(impl, oracle), delta_2 = err(baseline, oracle)).
        free: label -> the error always allowed (0 when ``free=0`` or the
            output dtype is float64 or integer).
        records: the analyses, Holm-corrected over this call, in label order.
        timing: seconds per role summed over trials; ``total`` covers the whole
            call, so ``total - impl - baseline - oracle`` is the method's overhead.
        num_tests, seed, impl_device: as run.
    """

    labels: tuple[str, ...]
    delta_impl: dict[str, np.ndarray]
    delta_baseline: dict[str, np.ndarray]
    free: dict[str, float]
    records: tuple[DualDeltaRecord, ...]
    timing: Timing
    num_tests: int
    seed: int
    impl_device: str

    @property
    def analysis(self) -> dict[str, DualDeltaRecord]:
        """label -> its :class:`~acceptance.session.results.DualDeltaRecord`."""
        return dict(zip(self.labels, self.records, strict=False))

    @property
    def passed(self) -> bool:
        """True when every metric passes the non-inferiority gate."""
        return all(r.passed for r in self.records)

    def summary(self) -> str:
        """A table: per label the median errors, their ratio, factor, free, Holm p, verdict, conclusion."""
        head = (
            f"dual-delta: {self.num_tests} trials, seed {self.seed}, impl on {self.impl_device}: "
            f"{'PASS' if self.passed else 'FAIL'}"
        )
        rows = [
            ("metric", "impl median", "base median", "mean ratio", "factor", "free", "p (Holm)", "gate", "conclusion")
        ]
        for label, r in self.analysis.items():
            ratio = stats.mean_ratio(r.delta_impl, r.delta_baseline)
            rows.append(
                (
                    label,
                    f"{r.impl.median:.3g}",
                    f"{r.baseline.median:.3g}",
                    f"{ratio:.3g}" if math.isfinite(ratio) else "-",
                    f"{r.factor:g}",
                    f"{r.free:.3g}",
                    f"{r.p_adjusted if r.p_adjusted is not None else r.p_value:.2g}",
                    "pass" if r.passed else "FAIL",
                    r.conclusion,
                )
            )
        widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
        lines = [head] + [
            "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1] for row in rows
        ]
        lines += [f"  {label}: {why}" for label, r in self.analysis.items() for why in r.reasons]
        return "\n".join(lines)

    def __repr__(self) -> str:
        parts = ", ".join(f"{label}={r.conclusion!r}" for label, r in self.analysis.items())
        return f"DualDeltaResult(passed={self.passed}, trials={self.num_tests}, {parts})"


# ----------------------------------------------------------------------------
# Argument checking
# ----------------------------------------------------------------------------


def _error_functions(get_error: ErrorSpec) -> list[tuple[str, str | ErrorFn]]:
    """(name, metric name or callable) for each requested error."""
    items = [get_error] if isinstance(get_error, str) or callable(get_error) else list(get_error)
    if not items:
        raise DualDeltaError("get_error: no metric given")
    out: list[tuple[str, str | ErrorFn]] = []
    for item in items:
        if isinstance(item, str):
            if item not in metrics.SCALAR_ERRORS:
                known = ", ".join(metrics.SCALAR_ERRORS)
                raise DualDeltaError(f"get_error: {item!r} is not a scalar metric; known: {known}")
            name = item
        elif callable(item):
            name = getattr(item, "__name__", type(item).__name__)
        else:
            raise DualDeltaError(f"get_error: expected a metric name or a callable, got {item!r}")
        if any(name == n for n, _ in out):
            raise DualDeltaError(f"get_error: {name!r} is given twice")
        out.append((name, item))
    return out


def _factors(factor: None | float | Mapping[str, float], names: list[str]) -> dict[str, float]:
    """name -> factor: the per-metric default, one number for all, or a mapping with defaults filling gaps."""
    if factor is None:
        return {n: default_factor(n) for n in names}
    if isinstance(factor, Mapping):
        unknown = sorted(set(factor) - set(names))
        if unknown:
            raise DualDeltaError(f"factor: {', '.join(unknown)} not among the metrics {names}")
        return {n: float(factor[n]) if n in factor else default_factor(n) for n in names}
    return {n: float(factor) for n in names}


def _check_arguments(num_tests: object, alpha: object, free: object, factors: dict[str, float]) -> None:
    if isinstance(num_tests, bool) or not isinstance(num_tests, int) or num_tests < 1:
        raise DualDeltaError(f"num_tests: expected an integer >= 1, got {num_tests!r}")
    if not isinstance(alpha, (int, float)) or not 0 < alpha < 1:
        raise DualDeltaError(f"alpha: expected a number in (0, 1), got {alpha!r}")
    if free != "auto" and not (isinstance(free, (int, float)) and math.isfinite(free) and free >= 0):
        raise DualDeltaError(f"free: expected 'auto' or a finite number >= 0, got {free!r}")
    for name, f in factors.items():
        if not (math.isfinite(f) and f > 0):
            raise DualDeltaError(f"factor for {name!r}: expected a finite number > 0, got {f!r}")


# ----------------------------------------------------------------------------
# Inputs
# ----------------------------------------------------------------------------


def trial_seed(seed: int, trial: int) -> int:
    """Seed of trial ``trial``'s generator: a 64-bit word of SeedSequence([seed, trial]),
    so any trial can be reproduced alone and runs with different seeds do not overlap."""
    return int(np.random.SeedSequence([seed, trial]).generate_state(1, dtype=np.uint64)[0])


def _all_tensors(value: object) -> TypeGuard[tuple[torch.Tensor, ...] | list[torch.Tensor]]:
    """Whether ``value`` is a tuple or list of tensors."""
    return isinstance(value, (tuple, list)) and all(isinstance(a, torch.Tensor) for a in value)


def _inputs(
    generate_input: Callable[[torch.Generator], object], seed: int, trial: int, dtype: torch.dtype | None
) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(trial_seed(seed, trial))
    try:
        raw = generate_input(gen)
    except Exception as exc:
        raise DualDeltaError(f"generate_input raised in trial {trial}: {type(exc).__name__}: {exc}") from exc
    given = (raw,) if isinstance(raw, torch.Tensor) else raw
    if not _all_tensors(given):
        raise DualDeltaError(f"generate_input must return a tensor or a tuple of tensors, got {type(raw).__name__}")
    args = tuple(a.detach().cpu() for a in given)
    if dtype is not None:
        args = tuple(a.to(dtype) if a.is_floating_point() else a for a in args)
    return list(args)


# ----------------------------------------------------------------------------
# The call
# ----------------------------------------------------------------------------


def dual_delta(
    impl: Callable,
    baseline: Callable,
    oracle: Callable | None,
    generate_input: Callable[[torch.Generator], object],
    get_error: ErrorSpec = "max_hyb",
    num_tests: int = 100,
    *,
    dtype: torch.dtype | None = None,
    factor: None | float | Mapping[str, float] = None,
    alpha: float = DEFAULT_ALPHA,
    seed: int = 0,
    free: str | float = "auto",
    impl_device: None | str | torch.device = None,
    params: Mapping[str, object] | None = None,
) -> DualDeltaResult:
    """Measure delta_1 = err(impl, oracle) and delta_2 = err(baseline, oracle) over
    ``num_tests`` trials and gate impl on non-inferiority to the baseline.

    Args:
        impl, baseline: ``fn(*tensors, **params) -> Tensor | tuple[Tensor, ...]``.
            impl gets the inputs on ``impl_device``, baseline on the CPU, both
            in ``dtype``.
        oracle: the same contract on CPU float64 copies of the inputs (integer
            tensors unchanged); ``None`` means the baseline on float64
            (:func:`acceptance.numerics.oracle.float64_oracle`). See also
            :func:`acceptance.numerics.oracle.mpmath_oracle`.
        generate_input: ``gen -> Tensor | tuple[Tensor, ...]`` (CPU), where
            ``gen`` is a ``torch.Generator`` seeded by :func:`trial_seed` (seed, trial).
        get_error: a metric name of :func:`acceptance.numerics.metrics.compute`, a
            callable ``(evaluated, oracle) -> float``, or a list of them.
        num_tests: trials (>= 1; the tests need ~20 to say anything, 100 is a good default).
        dtype: floating inputs are cast to it before any call (None: as generated).
        factor: non-inferiority factor: None (per-metric defaults,
            :data:`acceptance.numerics.factors.DEFAULT_FACTORS`), one number, or a mapping
            metric name -> factor.
        alpha: level of the tests and of the gate (Holm over this call's metrics).
        seed: base seed of the trials.
        free: ``"auto"``: the error of the oracle correctly rounded to the
            output dtype, max over trials, per metric; or a number (0: nothing free).
        impl_device: where impl runs (default ``"cuda"`` when available, else ``"cpu"``).
        params: keyword parameters passed to impl, baseline and oracle.

    Errors of impl are computed on the CPU against the float64 oracle.
    Raises :class:`DualDeltaError` on bad arguments or when a callable fails.
    """
    errors = _error_functions(get_error)
    names = [n for n, _ in errors]
    factors = _factors(factor, names)
    _check_arguments(num_tests, alpha, free, factors)
    device = torch.device(impl_device or ("cuda" if torch.cuda.is_available() else "cpu"))
    roles = Roles(impl, baseline, oracle or float64_oracle(baseline))
    named = [e for _, e in errors if isinstance(e, str)]
    timing = Timing()
    started = time.perf_counter()

    d1: list[list[list[float]]] = []  # [trial][output][error]
    d2: list[list[list[float]]] = []
    fr: list[list[list[float]]] = []
    trials: TrialRun[ReferenceSource] = run_trials(
        roles,
        lambda t: _inputs(generate_input, seed, t, dtype),
        num_tests,
        device=device,
        params=dict(params or {}),
        oracle=True,
        timing=timing,
    )
    try:
        for trial in trials:
            row1: list[list[float]] = []
            row2: list[list[float]] = []
            rowf: list[list[float]] = []
            assert trial.oracle is not None  # the engine runs the oracle when asked (oracle=True)
            for e, b, o in zip(trial.impl, trial.baseline, trial.oracle, strict=True):
                e = e.detach().cpu()
                eo, bo, free_error, rounded = against_oracle(e, b, o, named)
                for row, x, known in ((row1, e, eo), (row2, b, bo), (rowf, rounded, free_error)):
                    row.append(
                        [float(known[fn]) if isinstance(fn, str) else _number(name, fn(x, o)) for name, fn in errors]
                    )
            d1.append(row1)
            d2.append(row2)
            fr.append(rowf)
    except CaseError as exc:
        raise DualDeltaError(str(exc)) from None

    a1, a2, af = np.array(d1), np.array(d2), np.array(fr)  # (trials, outputs, errors)
    n_out = a1.shape[1]
    labels, records, delta_impl, delta_base, frees = [], [], {}, {}, {}
    for k in range(n_out):
        for j, name in enumerate(names):
            label = f"{name}[{k}]" if n_out > 1 else name
            bound = stats.free_bound(af[:, k, j]) if free == "auto" else float(free)
            labels.append(label)
            delta_impl[label], delta_base[label], frees[label] = a1[:, k, j], a2[:, k, j], bound
            records.append(
                stats.analyze(
                    a1[:, k, j], a2[:, k, j], metric=name, output=k, factor=factors[name], alpha=alpha, free=bound
                )
            )
    timing.total = time.perf_counter() - started
    return DualDeltaResult(
        labels=tuple(labels),
        delta_impl=delta_impl,
        delta_baseline=delta_base,
        free=frees,
        records=tuple(verdict.dual_delta_gate(r) for r in stats.apply_holm(records)),
        timing=timing,
        num_tests=num_tests,
        seed=seed,
        impl_device=str(device),
    )


def _number(name: str, value: Any) -> float:  # a seam: a user's get_error return, checked here
    """``value`` as a float: the seam where a user's ``get_error`` return, of any type, is checked."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise DualDeltaError(f"get_error {name!r} returned {value!r}, not a number") from None
