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
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch

from acceptance.records import WorstElement

#: Relative-error buckets, as rocMLIR prints them: label -> upper bound (exclusive).
REL_ERROR_BUCKETS: tuple[tuple[str, float], ...] = (
    ("<1e-6", 1e-6), ("1e-6..1e-5", 1e-5), ("1e-5..1e-4", 1e-4), ("1e-4..1e-3", 1e-3),
    ("1e-3..1e-2", 1e-2), ("1e-2..1e-1", 1e-1), ("1e-1..1", 1.0),
)


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
    return {"=0": int(rel.numel() - nonzero.numel()), **dict(zip(labels, counts))}


def locate(bad: torch.Tensor) -> Optional[str]:
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



@dataclass
class Diagnosis:
    """Diagnostics of one output accumulated over trials: the worst element, the buckets summed, and the
    trial with the largest fraction of elements over tolerance (and where they sit)."""

    worst: Optional[WorstElement] = None
    buckets: dict[str, int] = field(default_factory=dict)
    bad_fraction: float = 0.0
    bad_where: Optional[str] = None

    def add(self, trial: int, out: int, e: torch.Tensor, b: torch.Tensor, tol: float) -> None:
        """Fold in one trial of output ``out``; ``tol`` is the element tolerance on the hybrid error."""
        if e.numel() == 0:
            return
        err = abs_error(e, b)
        b_dev = b.to(err.device)
        rel = rel_error(err, b_dev)
        for k, v in buckets(rel).items():
            self.buckets[k] = self.buckets.get(k, 0) + v
        flat = int(torch.argmax(err))
        worst = float(err.reshape(-1)[flat])
        if self.worst is None or worst > self.worst.abs_error:
            index = [int(i) for i in np.unravel_index(flat, tuple(e.shape))] if e.dim() else []
            self.worst = WorstElement(
                output=out, trial=trial, index=index, evaluated=float(e.reshape(-1)[flat]),
                baseline=float(b.reshape(-1)[flat]), abs_error=worst, rel_error=float(rel.reshape(-1)[flat]),
            )
        bad = err / (1.0 + b_dev.to(torch.float64).abs()) > tol
        fraction = float(bad.sum()) / bad.numel()
        if fraction > self.bad_fraction:
            self.bad_fraction = fraction
            self.bad_where = locate(bad.cpu())
