"""Per-element diagnostics of one output against its baseline: where the error is, and how it is spread.

For one trial, from ``e`` (impl) and ``b`` (baseline): the element error
``|e − b|`` in float64 on e's device (matched NaN/Inf count as 0, a mismatch
as inf), its relative error ``|e − b| / |b|``, the relative-error buckets
rocMLIR prints, the worst element (largest ``|e − b|``), and the fraction of
elements whose hybrid error ``|e − b| / (1 + |b|)`` exceeds the case's
element tolerance, with where those elements sit ("all 64 in row 63 of dim 0").
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch

from acceptance.formats import dtypes
from acceptance.records import REL_ERROR_BUCKETS, Bias, CriterionWorst, WorstElement


def abs_error(e: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|e - b| in float64 on e's device; matched NaN/Inf -> 0, mismatched -> inf."""
    e64, b64 = e.to(torch.float64), b.to(device=e.device, dtype=torch.float64)
    err = (e64 - b64).abs()
    matched = (torch.isnan(e64) & torch.isnan(b64)) | (torch.isinf(e64) & (e64 == b64))
    err = torch.where(matched, torch.zeros_like(err), err)
    return torch.nan_to_num(err, nan=math.inf, posinf=math.inf)


def rel_error(err: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|e - b| / |b| with 0/0 = 0, x/0 = inf, and inf where the error is inf (a NaN/Inf mismatch)."""
    babs = b.to(device=err.device, dtype=torch.float64).abs()
    rel = torch.nan_to_num(err / babs, nan=math.inf, posinf=math.inf)
    return torch.where(err == 0, torch.zeros_like(rel), rel)


def buckets(rel: torch.Tensor) -> dict[str, int]:
    """Counts of relative errors: exactly 0, then [0, 1e-6), [1e-6, 1e-5), ..., [0.1, 1), and >= 1 (labelled '>1')."""
    edges = torch.tensor([upper for _, upper in REL_ERROR_BUCKETS], dtype=torch.float64, device=rel.device)
    nonzero = rel[rel != 0]
    counts = torch.bincount(torch.bucketize(nonzero, edges, right=True), minlength=len(edges) + 1).tolist()
    labels = [label for label, _ in REL_ERROR_BUCKETS] + [">1"]
    return {"=0": int(rel.numel() - nonzero.numel()), **dict(zip(labels, counts, strict=False))}


def locate(bad: torch.Tensor) -> str | None:
    """Where the bad elements sit, in words: one row, one column, the tail of the last dim, everywhere."""
    if bad.dim() == 0 or not bool(bad.any()):
        return None
    idx = bad.nonzero()
    count, total = idx.shape[0], bad.numel()
    if bad.dim() >= 2:
        rows = torch.unique(idx[:, 0])
        if rows.numel() == 1 and bad.shape[0] > 1:
            return f"all {count} in row {int(rows[0])} of dim 0"
        cols = torch.unique(idx[:, -1])
        if cols.numel() == 1 and bad.shape[-1] > 1:
            return f"all {count} in index {int(cols[0])} of the last dim"
    last = bad.shape[-1]
    cols = torch.unique(idx[:, -1])
    first_bad = int(cols[0])
    if first_bad > 0 and cols.numel() == last - first_bad:  # exactly the columns first_bad..last-1
        return f"all {count} in the tail of the last dim (indices >= {first_bad} of {last})"
    if count == total:
        return "everywhere"
    return None


def spacing(o: torch.Tensor, dtype: str) -> torch.Tensor:
    """One ulp of ``dtype`` at each value ``o`` rounded to ``dtype`` (float64): 2^(E - p + 1) with
    E = min(max(floor(log2|round(o)|), emin), emax), the smallest subnormal where ``o`` rounds to a subnormal or
    zero (:func:`acceptance.formats.dtypes.spacing_at`); 1 for integer dtypes."""
    from acceptance.numerics.metrics import device

    row = dtypes.lookup(dtype)
    if not row.is_float:
        return torch.ones_like(o, dtype=torch.float64)
    shift = device.ulp_shift(o.to(torch.float64).abs(), row)
    one = torch.ones_like(o, dtype=torch.float64)
    return torch.ldexp(torch.ldexp(one, -(shift >> 1)), -(shift - (shift >> 1)))


def ulp_flush(x: torch.Tensor, o: torch.Tensor, dtype: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """``(x', o', subnormal_unit)`` for a ULP comparison of ``x`` with the oracle ``o``, both float64 on ``x``'s
    device: where ``|x|`` is below ``dtype``'s smallest normal and ``o`` rounds to a subnormal or zero (``|o| <
    normal - s/2``, s the smallest subnormal), both are set to 0, so a flush to zero (what GPUs do to
    subnormals) costs nothing. ``subnormal_unit`` counts the other positions where ``o`` rounds to a subnormal or
    zero and ``x`` differs from it: their ulp is the smallest subnormal spacing. Non-float dtypes: unchanged, 0."""
    x64 = x.to(torch.float64)
    o64 = o.to(device=x64.device, dtype=torch.float64)
    row = dtypes.lookup(dtype)
    if not row.is_float:
        return x64, o64, 0
    tiny_o = o64.abs() < row.smallest_normal - row.smallest_subnormal / 2
    both = tiny_o & (x64.abs() < row.smallest_normal)
    zero = torch.zeros((), dtype=torch.float64, device=x64.device)
    count = int((tiny_o & ~both & (x64 != o64)).sum())
    return torch.where(both, zero, x64), torch.where(both, zero, o64), count


def flush_changes_nothing(flat: np.ndarray | None, dtype: str) -> bool:
    """Whether :func:`ulp_flush` would leave every value of the flat float64 host array ``flat`` as it is (but the
    sign of a zero): no nonzero magnitude below ``dtype``'s smallest normal. ``False`` for ``None`` (not known)."""
    if flat is None:
        return False
    magnitude = np.abs(flat)
    return not bool(np.any((magnitude < dtypes.lookup(dtype).smallest_normal) & (magnitude != 0)))


def bit_mismatches(e: torch.Tensor, b: torch.Tensor, r: torch.Tensor | None) -> int:
    """Elements of ``e`` whose bits equal neither ``b``'s nor ``r``'s (the oracle rounded once to the dtype).

    The sign of zero counts; any NaN equals any NaN (payloads are not compared).
    """
    b = b.to(e.device)
    if e.is_floating_point():
        bits = dtypes.bits_view(e)
        same = bits == dtypes.bits_view(b)
        if r is not None:
            same |= bits == dtypes.bits_view(r.to(e.device))
        same |= torch.isnan(e) & torch.isnan(b)
    else:
        same = e == b
        if r is not None:
            same |= e == r.to(device=e.device, dtype=e.dtype)
    return int((~same).sum())


#: Where float64 copies of a trial's tensors may already be: a tensor -> its flat float64 host copy, or
#: ``None`` when there is none (:meth:`acceptance.numerics.metrics.Batch.float64`, whose copies the metrics of the
#: trial made); the element-wise passes then read those instead of widening each tensor again.
Float64 = Callable[[torch.Tensor], np.ndarray | None]


def piece64(x: torch.Tensor, lo: int, f64: Float64 | None = None) -> np.ndarray:
    """Elements ``lo`` to ``lo + DIAGNOSIS_BLOCK`` of the host tensor ``x``, flattened, as float64: ``f64``'s copy
    of ``x`` when ``x`` is that one piece and ``f64`` has one, else a new one (the same values: every format
    widens to float64 exactly)."""
    from acceptance.numerics.metrics import elementwise

    found = f64(x) if f64 is not None and lo == 0 and x.numel() <= DIAGNOSIS_BLOCK else None
    return found if found is not None else elementwise.host_float64(x.reshape(-1)[lo : lo + DIAGNOSIS_BLOCK])


def _on_host(*tensors: torch.Tensor | None) -> bool:
    """Whether every given tensor is on the CPU (then the fused host passes of :mod:`.metrics.elementwise` apply)."""
    return all(t is None or t.device.type == "cpu" for t in tensors)


#: Bucket labels in the order :func:`elementwise.diagnosis_pass` counts them (that of :func:`buckets`).
_BUCKET_LABELS = ("=0", *(label for label, _ in REL_ERROR_BUCKETS), ">1")

#: Elements per piece of :meth:`Diagnosis.add` (each float64 temporary of a piece: 32 MiB).
DIAGNOSIS_BLOCK = 1 << 22

#: Signed errors enter the bias test clipped to +-BIAS_CLIP ulp, so a few near-zero outputs whose ulp is tiny
#: cannot outweigh everything else.
BIAS_CLIP = 16.0


@dataclass
class BiasSums:
    """Running sums of the signed error against the oracle, in ulp of the dtype at the oracle's value (see
    :class:`~acceptance.records.Bias`)."""

    n: int = 0
    flushed: int = 0
    impl_value: float = 0.0
    impl_magnitude: float = 0.0
    baseline_value: float = 0.0
    baseline_magnitude: float = 0.0
    baseline_abs: float = 0.0

    def add(self, e: torch.Tensor, b: torch.Tensor, o: torch.Tensor, dtype: str, f64: Float64 | None = None) -> None:
        """Fold in one trial of one output; ``f64``: where float64 copies of e, b and o may already be (see
        :data:`Float64`)."""
        if not e.is_floating_point() or e.numel() == 0:
            return
        if _on_host(e, b, o) and e.numel() <= DIAGNOSIS_BLOCK:  # bounded scratch, as the pieces of Diagnosis
            self._add_host(e, b, o, dtype, f64)
            return
        o64 = o.to(device=e.device, dtype=torch.float64)
        e64, b64 = e.to(torch.float64), b.to(device=e.device, dtype=torch.float64)
        normal = dtypes.lookup(dtype).smallest_normal
        flush = (e64.abs() < normal) & (o64.abs() < normal)
        keep = torch.isfinite(e64) & torch.isfinite(b64) & torch.isfinite(o64) & ~flush
        u = spacing(o64, dtype)
        sign = torch.sign(o64)
        se = ((e64 - o64) / u).clamp(-BIAS_CLIP, BIAS_CLIP)[keep]
        sb = ((b64 - o64) / u).clamp(-BIAS_CLIP, BIAS_CLIP)[keep]
        self.n += int(keep.sum())
        self.flushed += int(flush.sum())
        self.impl_value += float(se.sum())
        self.impl_magnitude += float((se * sign[keep]).sum())
        self.baseline_value += float(sb.sum())
        self.baseline_magnitude += float((sb * sign[keep]).sum())
        self.baseline_abs += float(sb.abs().sum())

    def _add_host(
        self, e: torch.Tensor, b: torch.Tensor, o: torch.Tensor, dtype: str, f64: Float64 | None = None
    ) -> None:
        """:meth:`add` of host data: the clipped errors in one fused pass (:func:`elementwise.bias_pass`), summed
        by torch as :meth:`add` sums them (the same values in the same order: the same float64 sums)."""
        from acceptance.numerics.metrics import elementwise, host

        row = dtypes.lookup(dtype)
        fe, fb, fo = (piece64(x, 0, f64) for x in (e, b, o))  # one piece: see add
        rows = np.empty((4, fe.shape[0]))
        kept, flush = elementwise.bias_pass(
            fe, fb, fo, row.smallest_normal, row.is_float, host.ulp_args(row)[:4], BIAS_CLIP, rows
        )
        se, se_sign, sb, sb_sign = torch.from_numpy(rows[:, :kept])
        self.n += kept
        self.flushed += flush
        self.impl_value += float(se.sum())
        self.impl_magnitude += float(se_sign.sum())
        self.baseline_value += float(sb.sum())
        self.baseline_magnitude += float(sb_sign.sum())
        self.baseline_abs += float(sb.abs().sum())

    def record(self) -> Bias:
        n = max(self.n, 1)
        return Bias(
            n=self.n,
            flushed=self.flushed,
            impl_value=self.impl_value / n,
            impl_magnitude=self.impl_magnitude / n,
            baseline_value=self.baseline_value / n,
            baseline_magnitude=self.baseline_magnitude / n,
            baseline_abs=self.baseline_abs / n,
        )


def constant(t: torch.Tensor) -> bool:
    """Whether every element of ``t`` is the same finite value (an empty tensor is not constant)."""
    if t.numel() == 0 or t.dtype == torch.bool:
        return t.numel() > 0 and bool(t.all() == t.any())
    lo, hi = torch.aminmax(t.reshape(-1))
    return bool(lo == hi) and bool(torch.isfinite(lo.to(torch.float64)))


@dataclass
class Diagnosis:
    """Diagnostics of one output accumulated over trials: the worst element, the buckets summed, and the
    trial with the largest fraction of elements over tolerance (and where they sit).

    The worst element is the one furthest from the oracle in hybrid error |e - o| / (1 + |o|) when the
    oracle ran, else the one with the largest |e - b|.
    """

    dtype: str
    worst: WorstElement | None = None
    score: float = -1.0
    buckets: dict[str, int] = field(default_factory=dict)
    bad_fraction: float = 0.0
    bad_where: str | None = None

    def add(
        self,
        trial: int,
        out: int,
        e: torch.Tensor,
        b: torch.Tensor,
        o: torch.Tensor | None,
        tol: float,
        f64: Float64 | None = None,
    ) -> None:
        """Fold in one trial of output ``out``; ``tol`` is the element tolerance on the hybrid error; ``f64``:
        where float64 copies of e, b and o may already be (see :data:`Float64`).

        Pieces of :data:`DIAGNOSIS_BLOCK` elements at a time, so the float64 temporaries stay small whatever
        the output's size; counts, the first largest score and the over-tolerance mask are those of one pass
        over the whole output."""
        if e.numel() == 0:
            return
        flat_e, flat_b = e.reshape(-1), b.reshape(-1)
        flat_o = o.reshape(-1) if o is not None else None
        if _on_host(e, b, o):
            worst, flat, bad = self._scan_host(e, b, o, tol, f64)
        else:
            worst, flat, bad = self._scan(flat_e, flat_b, flat_o, tol)
        self._fold(trial, out, e, flat_e, flat_b, flat_o, worst, flat, bad)

    def _scan_host(
        self, e: torch.Tensor, b: torch.Tensor, o: torch.Tensor | None, tol: float, f64: Float64 | None = None
    ) -> tuple[float, int, torch.Tensor]:
        """:meth:`_scan` of host data: the same pieces, each in one fused pass (:func:`elementwise.diagnosis_pass`),
        combined alike; ``f64``: where float64 copies of e, b and o may already be (:func:`piece64`)."""
        from acceptance.numerics.metrics import elementwise  # numba loads on first use, not with the report's imports

        counts = np.zeros(len(REL_ERROR_BUCKETS) + 2, dtype=np.int64)
        bad = np.empty(e.numel(), dtype=np.bool_)
        worst, flat = math.nan, -1
        for lo in range(0, e.numel(), DIAGNOSIS_BLOCK):
            fe, fb = piece64(e, lo, f64), piece64(b, lo, f64)
            fo = piece64(o, lo, f64) if o is not None else fe[:0]
            at, value = elementwise.diagnosis_pass(
                fe, fb, fo, o is not None, float(tol), elementwise.BUCKET_EDGES, counts, bad[lo : lo + DIAGNOSIS_BLOCK]
            )
            if flat < 0 or value > worst or (math.isnan(value) and not math.isnan(worst)):  # argmax: first max
                worst, flat = value, lo + at
        for k, v in zip(_BUCKET_LABELS, counts.tolist(), strict=False):
            self.buckets[k] = self.buckets.get(k, 0) + v
        return worst, flat, torch.from_numpy(bad)

    def _scan(
        self, flat_e: torch.Tensor, flat_b: torch.Tensor, flat_o: torch.Tensor | None, tol: float
    ) -> tuple[float, int, torch.Tensor]:
        """Add the buckets of one trial; (largest score, its flat index, the over-tolerance mask)."""
        bad = torch.empty(flat_e.numel(), dtype=torch.bool, device=flat_e.device)
        worst, flat = math.nan, -1
        for lo in range(0, flat_e.numel(), DIAGNOSIS_BLOCK):
            piece = slice(lo, lo + DIAGNOSIS_BLOCK)
            err = abs_error(flat_e[piece], flat_b[piece])
            b_dev = flat_b[piece].to(err.device)
            for k, v in buckets(rel_error(err, b_dev)).items():
                self.buckets[k] = self.buckets.get(k, 0) + v
            o_dev = flat_o[piece].to(device=err.device, dtype=torch.float64) if flat_o is not None else None
            score = abs_error(flat_e[piece], o_dev) / (1.0 + o_dev.abs()) if o_dev is not None else err
            at = int(torch.argmax(score))
            value = float(score[at])
            if flat < 0 or value > worst or (math.isnan(value) and not math.isnan(worst)):  # argmax: first max
                worst, flat = value, lo + at
            bad[piece] = err / (1.0 + b_dev.to(torch.float64).abs()) > tol
        return worst, flat, bad

    @property
    def _cap(self) -> float:
        """The largest ULP error of the dtype (:attr:`~acceptance.formats.dtypes.DType.ulp_cap`)."""
        return dtypes.lookup(self.dtype).ulp_cap

    def _fold(
        self,
        trial: int,
        out: int,
        e: torch.Tensor,
        flat_e: torch.Tensor,
        flat_b: torch.Tensor,
        flat_o: torch.Tensor | None,
        worst: float,
        flat: int,
        bad: torch.Tensor,
    ) -> None:
        """Keep the worst element and the largest over-tolerance fraction so far."""
        if worst > self.score:
            self.score = worst
            err = abs_error(flat_e[flat : flat + 1], flat_b[flat : flat + 1])
            rel = rel_error(err, flat_b[flat : flat + 1].to(err.device))
            index = [int(i) for i in np.unravel_index(flat, tuple(e.shape))] if e.dim() else []
            value = float(flat_e[flat])
            oracle = float(flat_o[flat]) if flat_o is not None else None
            self.worst = WorstElement(
                output=out,
                trial=trial,
                index=index,
                evaluated=value,
                baseline=float(flat_b[flat]),
                abs_error=float(err[0]),
                rel_error=float(rel[0]),
                oracle=oracle,
                oracle_error=abs(value - oracle) if oracle is not None else None,
                ulp=min(abs(value - oracle) / float(spacing(torch.tensor(oracle), self.dtype)), self._cap)
                if oracle is not None and math.isfinite(oracle)
                else None,
            )
        fraction = float(bad.sum()) / bad.numel()
        if fraction > self.bad_fraction:
            self.bad_fraction = fraction
            self.bad_where = locate(bad.reshape(e.shape).cpu())


def _element_error(e: torch.Tensor, r: torch.Tensor, relative: bool) -> torch.Tensor:
    """|e - r| (or |e - r| / |r|, 0/0 = 0) per element of float64 ``e`` and ``r``: 0 where both are NaN or the
    same infinity, inf at a NaN/Inf mismatch."""
    same = (e == r) | (torch.isnan(e) & torch.isnan(r))
    d = (e - r).abs()
    if relative:
        d = d / r.abs()
    return torch.where(same, torch.zeros_like(d), torch.nan_to_num(d, nan=math.inf))


def ulp_errors(x: torch.Tensor, o: torch.Tensor, dtype: str) -> torch.Tensor:
    """Per element (flattened, float64, on the CPU): the ULP error of ``x`` against the oracle ``o`` in ulp of the
    dtype at ``o`` rounded to it, a flush forgiven (:func:`ulp_flush`), at most the dtype's ``ulp_cap``; a NaN/Inf
    mismatch counts as the cap."""
    x64 = x.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    o64 = o.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    fx, fo, _ = ulp_flush(x64, o64, dtype)
    cap = dtypes.lookup(dtype).ulp_cap
    return (_element_error(fx, fo, False) / spacing(fo, dtype)).nan_to_num(nan=math.inf).clamp(max=cap)


def element_worsts(
    trial: int,
    out: int,
    e: torch.Tensor,
    b: torch.Tensor,
    o: torch.Tensor | None,
    rounded: torch.Tensor | None,
    dtype: str,
) -> dict[str, CriterionWorst]:
    """The worst element of one trial of one output per element measure (see :class:`CriterionWorst`): the
    first largest |e - b|, |e - b| / |b|, the same against ``rounded`` (the oracle rounded to the dtype), the ULP
    error against the oracle ``o`` (flush forgiven, :func:`ulp_flush`; capped at the dtype's ``ulp_cap``) and
    |e - o| / (1 + |o|)."""
    if e.numel() == 0:
        return {}
    e64 = e.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    b64 = b.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
    errors = {"abs": _element_error(e64, b64, False), "rel": _element_error(e64, b64, True)}
    o64 = None
    if o is not None:
        o64 = o.detach().to(device="cpu", dtype=torch.float64).reshape(-1)
        r64 = rounded.detach().to(device="cpu", dtype=torch.float64).reshape(-1) if rounded is not None else o64
        errors["abs_oracle"] = _element_error(e64, r64, False)
        errors["rel_oracle"] = _element_error(e64, r64, True)
        errors["ulp"] = ulp_errors(e64, o64, dtype)
        errors["hyb"] = _element_error(e64, o64, False) / (1.0 + o64.abs().nan_to_num(nan=0.0, posinf=0.0))
    shape = tuple(e.shape)
    found: dict[str, CriterionWorst] = {}
    for measure, err in errors.items():
        at = int(torch.argmax(torch.nan_to_num(err, nan=math.inf)))
        found[measure] = CriterionWorst(
            output=out,
            trial=trial,
            index=[int(i) for i in np.unravel_index(at, shape)] if shape else [],
            impl=float(e64[at]),
            baseline=float(b64[at]),
            oracle=float(o64[at]) if o64 is not None else None,
            error=float(err[at]),
            measure=measure,  # type: ignore[arg-type]  # one of the literal names above
        )
    return found


def ulp_elements_over(
    trial: int, out: int, e: torch.Tensor, b: torch.Tensor, o: torch.Tensor, dtype: str, floor: float | None
) -> tuple[int, CriterionWorst | None]:
    """Elements where the impl has no correct bit and the baseline keeps its leading one, and the largest of
    them by impl ULP error (measure ``ulp_over``): |e - o| >= |o| (a zero, a wrong sign, an error as large as
    the value) while |b - o| < |o| / 2, with a flush forgiven on both sides (:func:`ulp_flush`). In ulp of the
    oracle such a loss costs about 2^(p-1)..2^p whatever |o| is, as much as the baseline's own losses elsewhere
    (a cancelling tail), so the aggregate rule cannot see it; ``floor`` is not needed: no accuracy floor admits
    a lost value."""
    del floor  # a lost value is never within a floor
    if not e.is_floating_point() or e.numel() == 0:
        return 0, None
    fe, fo, _ = ulp_flush(e.detach().cpu().reshape(-1), o.detach().cpu().reshape(-1), dtype)
    fb, fob, _ = ulp_flush(b.detach().cpu().reshape(-1), o.detach().cpu().reshape(-1), dtype)
    lost = (_element_error(fe, fo, False) >= fo.abs()) & (fe != fo)
    kept = (_element_error(fb, fob, False) < fob.abs() / 2) | (fb == fob)
    over = lost & kept & torch.isfinite(fo)
    count = int(over.sum())
    if not count:
        return 0, None
    iu = ulp_errors(e, o, dtype)
    at = int(torch.argmax(torch.where(over, iu, torch.zeros_like(iu))))
    shape = tuple(e.shape)
    return count, CriterionWorst(
        output=out,
        trial=trial,
        index=[int(i) for i in np.unravel_index(at, shape)] if shape else [],
        impl=float(e.detach().reshape(-1)[at]),
        baseline=float(b.detach().reshape(-1)[at]),
        oracle=float(o.detach().reshape(-1)[at]),
        error=float(iu[at]),
        measure="ulp_over",
    )
