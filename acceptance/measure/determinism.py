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
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from acceptance.formats import dtypes
from acceptance.records import Determinism

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
