"""Run-to-run determinism: the same callable on the same inputs, compared bit for bit.

The trial engine runs the impl (and the baseline) more than once on each
trial's inputs (``repeats``); :class:`RunToRun` folds every repeat against the
first run, over all trials and outputs, into one class:

* ``bitwise``: every run has the same bits (signed zeros and NaN payloads included);
* ``nan_payloads``: the only differing bits are NaNs against NaNs (a payload
  or sign of NaN, which no comparison can observe);
* ``varying``: some element differs; ``spread`` = max |run_i − run_1| over
  them (``inf`` where one run is NaN or infinite and the other is not; 0 when
  only the sign of a zero differs) and ``differing`` counts them.

The rule (:func:`acceptance.decide.verdict.determinism_criteria`): every
category but ``atomic_add`` must be ``bitwise`` or ``nan_payloads`` unless the
spec says ``deterministic: false`` (:func:`required`).
A baseline that varies is a spec error (the reference must be reproducible);
the runner records it as the case's error.

Reruns (:func:`impl_runs`, :class:`Reruns`): where run-to-run variation is
allowed, the impl runs ``R`` times per trial on the same inputs (the spec's
``reruns``, the run's ``--reruns``, default :data:`DEFAULT_RERUNS`; a case that
must be deterministic runs :data:`DETERMINISM_RUNS` times) and every criterion is
evaluated on one run per trial (:func:`pick`): the median run by
:func:`run_score` (the most non-finite errors, then the largest mean ulp error
at the oracle), unless the worst run is gross against it (more non-finite
errors, or a max ulp error over ``GROSS_FACTOR`` × max(the median run's, 1 ulp)),
then the worst. A whole run, not an element-wise composite: the dual-delta
comparison sets one real run against the baseline's (docs/verdicts.md,
"Stable verdicts for nondeterministic kernels"). The spread recorded is, per element,
``(max_r run_r − min_r run_r) / ulp(oracle)`` (ulp: :func:`acceptance.formats.dtypes.spacing_at`
of the output's dtype at the oracle) maximised over elements, trials and
outputs, with the number of elements whose value differs between any two runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from acceptance.formats import dtypes
from acceptance.numerics.factors import GROSS_FACTOR
from acceptance.records import Determinism

#: Impl runs per trial where variation is allowed and neither the spec nor the run says how many.
DEFAULT_RERUNS = 5
#: Impl runs per trial where the impl must be deterministic (the first run and one to compare it with).
DETERMINISM_RUNS = 2
#: The sequential reruns' cap: a trial whose first R runs straddle a dual-delta allowance (:func:`straddles`)
#: runs again until it has ``RERUN_CAP × R`` runs, and its dual-delta error is the median of them all.
RERUN_CAP = 4

#: A role's run-to-run class (see the module docstring).
Kind = Literal["bitwise", "nan_payloads", "varying"]
KINDS: tuple[Kind, ...] = ("bitwise", "nan_payloads", "varying")


def _bits(t: torch.Tensor) -> torch.Tensor:
    t = t.detach().contiguous()
    return dtypes.bits_view(t) if t.is_floating_point() or t.is_complex() else t


def compare(first: torch.Tensor, again: torch.Tensor) -> tuple[Kind, float, int]:
    """(kind, spread, differing elements) of one output's second run against its first (see the module)."""
    if first.shape != again.shape or first.dtype != again.dtype:
        return "varying", math.inf, max(first.numel(), again.numel())
    a, b = first.detach().cpu(), again.detach().cpu()
    differ = _bits(a) != _bits(b)
    if a.is_complex():
        differ = differ.reshape(*a.shape, -1).any(-1) if differ.dim() > a.dim() else differ
    if not bool(differ.any()):
        return "bitwise", 0.0, 0
    if a.is_floating_point():
        both_nan = torch.isnan(a) & torch.isnan(b)
        differ &= ~both_nan
        if not bool(differ.any()):
            return "nan_payloads", 0.0, 0
        x, y = a[differ].to(torch.float64), b[differ].to(torch.float64)
        gap = torch.nan_to_num((x - y).abs(), nan=math.inf)
        gap = torch.where(x == y, torch.zeros_like(gap), gap)  # +0 against -0, inf against the same inf
        return "varying", float(gap.max()), int(differ.sum())
    gap = (a[differ].to(torch.float64) - b[differ].to(torch.float64)).abs()
    return "varying", float(gap.max()), int(differ.sum())


@dataclass
class RunToRun:
    """The determinism of one role over a case: the worst class seen, the spread and count of differing
    elements summed over trials and outputs, and how many runs each trial had."""

    kind: Kind = "bitwise"
    spread: float = 0.0
    differing: int = 0
    runs: int = 1

    def add(self, first: tuple, repeats: tuple) -> None:
        """Fold one trial: ``first`` the outputs of the first run, ``repeats`` those of the others."""
        self.runs = max(self.runs, 1 + len(repeats))
        for again in repeats:
            for a, b in zip(first, again, strict=False):
                kind, spread, n = compare(a, b)
                if KINDS.index(kind) > KINDS.index(self.kind):
                    self.kind = kind
                self.spread = max(self.spread, spread)
                self.differing += n


def required(category: str, deterministic: bool | None) -> bool:
    """Whether the impl must be deterministic: the spec's ``deterministic``, else every category but atomic_add."""
    return deterministic if deterministic is not None else category != "atomic_add"


def impl_runs(category: str, deterministic: bool | None, reruns: int | None, atomic_runs: int = 2) -> int:
    """Impl runs per trial: :data:`DETERMINISM_RUNS` where the impl must be deterministic (:func:`required`);
    else ``reruns`` (the run's ``--reruns`` or the spec's ``reruns``) or, unset, the larger of
    :data:`DEFAULT_RERUNS` and the spec's older ``atomic_runs``."""
    if required(category, deterministic):
        return DETERMINISM_RUNS
    return reruns if reruns is not None else max(DEFAULT_RERUNS, atomic_runs)


def _distance(run: torch.Tensor, oracle: torch.Tensor) -> torch.Tensor:
    """|run − oracle| in float64 (complex: the modulus), NaN and ±inf as +inf, 0 where both are the same inf."""
    x = run.detach().cpu().to(torch.complex128 if run.is_complex() else torch.float64)
    o = oracle.detach().cpu().to(x.dtype)
    gap = (x - o).abs()
    gap = torch.where(x == o, torch.zeros_like(gap), gap)
    return torch.nan_to_num(gap, nan=math.inf, posinf=math.inf)


def run_score(outputs: tuple, oracle: tuple | None) -> tuple[int, float, float]:
    """How far one run's outputs are from the oracle: (elements at an infinite distance (:func:`_distance`: NaN,
    ±inf against a number), the mean over elements of ``|run − oracle| / ulp(oracle)`` summed over the float
    outputs, the max of that ratio over them). ``(0, 0.0, 0.0)`` without an oracle."""
    far, mean, top = 0, 0.0, 0.0
    for k, out in enumerate(outputs):
        o = oracle[k] if oracle is not None and k < len(oracle) else None
        if o is None or not out.is_floating_point() or o.shape != out.shape or not out.numel():
            continue
        dist = _distance(out, o).numpy()
        unit = dtypes.spacing_at(o.detach().cpu().to(torch.float64).numpy(), str(out.dtype).removeprefix("torch."))
        finite = np.isfinite(dist)
        far += int((~finite).sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            ulps = np.where(finite, dist / unit, 0.0)
        mean, top = mean + float(ulps.mean()), max(top, float(ulps.max()))
    return far, mean, top


def choice(scores: list[tuple[int, float, float]]) -> tuple[int, bool]:
    """(the run the criteria see, whether it is the gross worst run), of runs scored by :func:`run_score`: the
    median (the lower one of an even count; ranked by non-finite count, then mean ulp; ties by run order), or
    the worst run where it is gross against the median: more non-finite errors, or a max ulp error over
    ``GROSS_FACTOR`` × max(the median run's, 1)."""
    order = sorted(range(len(scores)), key=lambda r: (scores[r][0], scores[r][1], r))
    median, worst = order[(len(order) - 1) // 2], order[-1]
    (far_m, _, top_m), (far_w, _, top_w) = scores[median], scores[worst]
    gross = far_w > far_m or top_w > GROSS_FACTOR * max(top_m, 1.0)
    return (worst, True) if gross else (median, False)


def pick(scores: list[tuple[int, float, float]]) -> int:
    """The run the criteria see (:func:`choice`)."""
    return choice(scores)[0]


def _as_errors(errors: Sequence[float]) -> np.ndarray:
    """Errors as float64 with NaN as +inf (a NaN is the worst error)."""
    e = np.asarray(errors, dtype=np.float64)
    return np.where(np.isnan(e), np.inf, e)


def straddles(errors: Sequence[float], allowance: float) -> bool:
    """Whether one trial's runs lie on both sides of its dual-delta allowance ``max(factor · δ₂, free)``: some
    run's error ≤ it and some run's > it (NaN counts as above). All R runs on one side bound the median of the
    run-to-run distribution on that side with confidence 1 − 2^(1−R) (the order-statistic interval [min, max]);
    otherwise the trial is not settled and takes more runs (:data:`RERUN_CAP`)."""
    e = _as_errors(errors)
    return bool((e > allowance).any() and (e <= allowance).any())


def typical(errors: Sequence[float]) -> float:
    """The error a trial's dual-delta tests see: the median of its runs' errors (the mean of the two middle
    ones for an even count; NaN as +inf), an estimate of one run's median error whose run-to-run scatter
    shrinks as 1/√runs (≈ 1.25 σ/√runs for a normal scatter σ)."""
    return float(np.median(_as_errors(errors)))


def spread_ulp(runs: list[torch.Tensor], oracle: torch.Tensor | None) -> tuple[float, int]:
    """(max over elements of (max_r run_r − min_r run_r) / ulp(oracle), elements whose value differs between
    any two runs) of one output. A NaN against a number, or different infinities, is an infinite spread; the
    ulp is that of the output's dtype at the oracle (at the first run where there is no oracle)."""
    first = runs[0]
    if len(runs) < 2 or not first.is_floating_point() or any(r.shape != first.shape for r in runs):
        return 0.0, 0
    x = torch.stack([r.detach().cpu().to(torch.float64) for r in runs]).numpy()
    nan = np.isnan(x)
    some_nan = nan.any(0) & ~nan.all(0)
    with np.errstate(invalid="ignore"):
        hi, lo = np.nanmax(np.where(nan, -np.inf, x), 0), np.nanmin(np.where(nan, np.inf, x), 0)
        gap = np.where(hi == lo, 0.0, hi - lo)
    gap = np.where(nan.all(0), 0.0, np.where(some_nan, np.inf, np.nan_to_num(gap, nan=np.inf)))
    varying = int((gap > 0).sum() + ((gap == 0) & ~nan.all(0) & _signs_differ(x)).sum())
    if not gap.size or not bool((gap > 0).any()):
        return 0.0, varying
    ref = oracle.detach().cpu().to(torch.float64).numpy() if oracle is not None else x[0]
    unit = dtypes.spacing_at(ref, str(first.dtype).removeprefix("torch."))
    with np.errstate(invalid="ignore", divide="ignore"):
        ulps = np.where(gap > 0, gap / unit, 0.0)
    return float(np.nan_to_num(ulps, nan=np.inf).max()), varying


def _signs_differ(x: np.ndarray) -> np.ndarray:
    """Where the runs hold zeros of different signs."""
    neg = np.signbit(x)
    return neg.any(0) & ~neg.all(0) & (x == 0).all(0)


@dataclass
class Reruns:
    """The run of each trial the criteria see (:func:`pick`), and the runs' spread over the case."""

    spread_ulp: float = 0.0
    varying: int = 0
    runs: int = 1
    extended: int = 0  # trials that took more runs (sequential reruns)
    gross: bool = False  # whether the last trial's chosen run is the gross worst one

    def chosen(self, impl: tuple, repeats: tuple, oracle: tuple | None) -> tuple:
        """The outputs of the run the criteria see (:func:`choice`), the spread of every run folded in."""
        self.runs = max(self.runs, 1 + len(repeats))
        for k, first in enumerate(impl):
            runs = [first, *(again[k] for again in repeats if k < len(again))]
            o = oracle[k] if oracle is not None and k < len(oracle) else None
            spread, varying = spread_ulp(runs, o)
            self.spread_ulp, self.varying = max(self.spread_ulp, spread), self.varying + varying
        every = (impl, *repeats)
        run, self.gross = choice([run_score(run, oracle) for run in every])
        return every[run]

    def annotate(self, record: Determinism) -> Determinism:
        """``record`` with the spread in ulp, the count of varying elements, the runs the criteria saw and the
        trials extended."""
        update = {"impl_spread_ulp": self.spread_ulp, "impl_varying": self.varying, "chosen_from": self.runs}
        return record.model_copy(update={**update, "extended_trials": self.extended})


def record(impl: RunToRun, baseline: RunToRun, *, must: bool) -> Determinism:
    return Determinism(
        impl=impl.kind,
        impl_spread=impl.spread,
        impl_differing=impl.differing,
        runs=impl.runs,
        baseline=baseline.kind,
        baseline_runs=baseline.runs,
        required=must,
    )


def baseline_error(baseline: RunToRun) -> str | None:
    """The spec error of a baseline that varies run to run, or ``None``."""
    if baseline.kind != "varying":
        return None
    return (
        f"spec error: the baseline is not deterministic ({baseline.differing} elements differ between runs on "
        f"the same inputs, max |run_i - run_1| = {baseline.spread:.6g}); a reference must be reproducible"
    )
