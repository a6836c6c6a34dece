"""What well-known gates would have said about a case: advisory columns computed from the same trials.

They never decide; they show a user moving from one of them where and why
the verdicts differ. Each is applied per trial and per output, and passes
when it passes in every one (e = impl, b = baseline, o = float64 oracle):

- ``torch.testing.assert_close`` with its default tolerances for the dtype:
  every element |e - b| <= atol + rtol·|b| (NaN never equal), with
  (rtol, atol) = float16 (1e-3, 1e-5), bfloat16 (1.6e-2, 1e-5), float32
  (1.3e-6, 1e-5), float64 (1e-7, 1e-7), integers and bool exact;
- PyTorch Dynamo's fp64-reference rule (``torch._dynamo.utils.same``):
  ``allclose(b, e, rtol=1e-4, atol=1e-4)``, else
  RMSE(e, o) <= m·RMSE(b, o) + 1e-5 with m = 3 for bfloat16 or fewer than
  1000 elements, else 2 (RMSE = sqrt(mean((x - o)²)));
- FlashAttention's tests: max|e - o| <= 2·max|b - o|.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from acceptance.measure import diagnose
from acceptance.records import Advisory
from acceptance.wording import fmt

#: torch.testing's default (rtol, atol) per dtype (torch/testing/_comparison.py).
ASSERT_CLOSE_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}
DYNAMO_TOL = 1e-4


def _mismatches(e: torch.Tensor, b: torch.Tensor, rtol: float, atol: float, f64: diagnose.Float64 | None = None) -> int:
    """Elements failing |e - b| <= atol + rtol·|b| (NaN anywhere fails; equal infinities pass); counted piece by
    piece (:data:`acceptance.measure.diagnose.DIAGNOSIS_BLOCK` elements), so the float64 temporaries stay small.
    ``f64``: where float64 copies of e and b may already be (:data:`acceptance.measure.diagnose.Float64`)."""
    from acceptance.numerics.metrics import elementwise  # numba loads on first use

    flat_e, flat_b, count = e.reshape(-1), b.reshape(-1), 0
    for lo in range(0, flat_e.numel(), diagnose.DIAGNOSIS_BLOCK):
        piece = slice(lo, lo + diagnose.DIAGNOSIS_BLOCK)
        if diagnose._on_host(e, b):  # one fused pass per piece, the same count
            count += elementwise.close_mismatches(
                diagnose.piece64(e, lo, f64), diagnose.piece64(b, lo, f64), rtol, atol
            )
            continue
        e64, b64 = flat_e[piece].to(torch.float64), flat_b[piece].to(device=e.device, dtype=torch.float64)
        close = (e64 - b64).abs() <= atol + rtol * b64.abs()
        close |= torch.isinf(e64) & (e64 == b64)
        count += int((~close).sum())
    return count


@dataclass
class Peers:
    """The three peer gates of one case, accumulated over trials and outputs."""

    dtype: str
    close_fail: int = 0
    close_worst: int = 0
    elements: int = 0
    dynamo: list[str] = field(default_factory=list)
    flash: list[str] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    """Output names where the spec names them (``grad[x]``; ``""``: by index)."""

    def add(
        self,
        trial: int,
        out: int,
        e: torch.Tensor,
        b: torch.Tensor,
        eo: dict,
        bo: dict,
        f64: diagnose.Float64 | None = None,
    ) -> None:
        """Fold in one trial of one output; ``eo``/``bo`` are the metrics of impl and baseline against the oracle;
        ``f64``: where float64 copies of e and b may already be."""
        name = self.names[out] if out < len(self.names) else ""
        where = f"trial {trial}" + (f", {name}" if name else f", output {out}" if out else "")
        rtol, atol = ASSERT_CLOSE_TOLERANCES.get(self.dtype, (0.0, 0.0))
        bad = _mismatches(e, b, rtol, atol, f64)
        self.close_fail += bad > 0
        self.close_worst = max(self.close_worst, bad)
        self.elements = max(self.elements, e.numel())
        res, ref = math.sqrt(eo["mse"]), math.sqrt(bo["mse"])
        m = 3.0 if self.dtype == "bfloat16" or e.numel() < 1000 else 2.0
        if not res <= m * ref + DYNAMO_TOL / 10 and _mismatches(e, b, DYNAMO_TOL, DYNAMO_TOL, f64):
            self.dynamo.append(f"{where}: RMSE vs fp64 {fmt(res)} > {fmt(m)} x {fmt(ref)} + 1e-5")
        if not eo["max_abs"] <= 2 * bo["max_abs"]:
            self.flash.append(f"{where}: max|e-o| {fmt(eo['max_abs'])} > 2 x {fmt(bo['max_abs'])}")

    def advisories(self, trials: int) -> list[Advisory]:
        rtol, atol = ASSERT_CLOSE_TOLERANCES.get(self.dtype, (0.0, 0.0))
        close = f"rtol {fmt(rtol)}, atol {fmt(atol)}: " + (
            f"fails in {self.close_fail} of {trials} trials, up to {self.close_worst} of {self.elements} elements"
            if self.close_fail
            else "every element within tolerance"
        )
        return [
            Advisory(name="torch.testing.assert_close", passed=not self.close_fail, detail=close),
            Advisory(
                name="dynamo fp64 RMSE",
                passed=not self.dynamo,
                detail=_first(self.dynamo, "RMSE vs fp64 within the multiplier of the baseline's"),
            ),
            Advisory(
                name="FlashAttention 2x max error",
                passed=not self.flash,
                detail=_first(self.flash, "max|e-o| within 2x the baseline's"),
            ),
        ]


def _first(found: list[str], otherwise: str) -> str:
    if not found:
        return otherwise
    return found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else "")
