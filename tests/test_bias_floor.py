"""The material-bias floor scales with the baseline's own error: floor = max(1 ulp, min(m_b, 8 ulp)), m_b the
baseline's mean |b − o| in ulp of float32 at the oracle (docs/verdicts.md, "Material bias"). Synthetic float32
outputs whose shift is exact, the expected decision computed from that formula here; a one-element case decides
nothing on bias or mean."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.decide import verdict
from acceptance.measure.diagnose import BiasSums
from acceptance.records import Diff4Counts

ROOT = Path(__file__).resolve().parents[1]
N = 4000


def _oracle() -> tuple[np.ndarray, np.ndarray]:
    """float32-representable oracle values of both signs, magnitudes in [0.5, 8), and float32's ulp at each."""
    rng = np.random.default_rng(7)
    o = (rng.uniform(0.5, 8.0, N) * rng.choice([-1.0, 1.0], N)).astype(np.float32).astype(np.float64)
    return o, np.spacing(np.abs(o).astype(np.float32)).astype(np.float64)


def _steps(mean: float) -> np.ndarray:
    """Integer ulp steps (floor and ceil of ``mean``, in the proportion that makes the mean exactly ``mean``)."""
    lo = np.floor(mean)
    n_hi = round((mean - lo) * N)
    return np.where(np.arange(N) < n_hi, lo + 1, lo)


def _decide(impl: np.ndarray, base: np.ndarray, o: np.ndarray):
    sums = BiasSums()
    sums.add(torch.from_numpy(impl).float(), torch.from_numpy(base).float(), torch.from_numpy(o), "float32")
    bias = sums.record()
    counts = Diff4Counts(above=int((impl > base).sum()), below=int((impl < base).sum()))
    return bias, verdict.diff4_criterion(0, counts, bias, 1.0)


@pytest.mark.parametrize("k", [1.5, 3.0, 4.3])
@pytest.mark.parametrize("m", [1.0, 5.5, 10.0])
def test_shrunk_by_k_ulp_against_a_baseline_of_mean_error_m(k, m):
    o, u = _oracle()
    impl = o - np.sign(o) * _steps(k) * u  # magnitudes shrunk by exactly k ulp on average (exact in float32)
    alt = np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
    base = o + alt * _steps(m) * u * np.where(np.arange(N) % 4 < 2, 1.0, -1.0)  # mean |error| m, no net shift
    bias, crit = _decide(impl, base, o)
    assert bias.impl_magnitude == pytest.approx(-k, abs=1e-12)
    assert bias.baseline_abs == pytest.approx(m, abs=1e-12)
    floor = max(1.0, min(m, 8.0))
    material = k > abs(bias.baseline_magnitude) + floor
    assert crit.passed is (not material)
    if m >= 5.5:  # an attention-like baseline: the exp2 softmax's 1.3-4.3 ulp shrink is not material
        assert crit.passed is True


@pytest.mark.parametrize("m", [0.0, 0.25, 10.0])
def test_float32_scale_error_of_2_pow_minus_18_is_material(m):
    o, u = _oracle()
    impl = (o * (1 + 2.0**-18)).astype(np.float32).astype(np.float64)  # 32-64 ulp: clipped to 16 in the mean
    alt = np.where(np.arange(N) % 2 == 0, 1.0, -1.0)
    base = o + alt * _steps(m) * u
    bias, crit = _decide(impl, base, o)
    assert bias.impl_magnitude == pytest.approx(16.0)
    assert crit.passed is False and "material magnitude bias" in (crit.note or "")


def test_one_element_case_cannot_fail_on_bias_or_mean(tmp_path):
    """operator_specs exp at N=1 with an impl scaled by (1 + 2^-8), 4-8 ulp too large in float16: the diff4
    rule has 20 elements over 20 trials (< 100) and decides nothing; the mean's allowance is the max's."""
    spec = (ROOT / "operator_specs" / "exp.yaml").read_text(encoding="utf-8")
    kernel = tmp_path / "k.py"
    kernel.write_text("import torch\n\ndef exp(x):\n    return torch.exp(x) * (1 + 2.0 ** -8)\n", encoding="utf-8")
    assert "impl: torch:exp\n" in spec
    spec = spec.replace("impl: torch:exp\n", f"impl: {kernel}:exp\nbaseline: torch:exp\n")
    (tmp_path / "exp.yaml").write_text(spec, encoding="utf-8")
    out = tmp_path / "out"
    args = ["run", str(tmp_path / "exp.yaml"), "--out", str(out), "--no-isolation", "--dtype", "float16"]
    args += ["--only", "exp[float16-N=1-*"]
    CliRunner().invoke(main, args, catch_exceptions=False)
    (case,) = json.loads((out / "results.json").read_text())["cases"]
    kinds = {(c["kind"], c["metric"]): c for c in case["criteria"]}
    assert kinds[("diff4", "diff4")]["passed"] is None
    assert "elements compared with the oracle < 100" in kinds[("diff4", "diff4")]["note"]
    assert case["bias"][0]["impl_magnitude"] > 4.0  # shifted ~6.5 ulp: over 100 elements a material bias
    # one element per trial: the mean's allowance is the max's, so the mean fails only where the max does
    mean, top = kinds[("ulp", "mean_ulp")], kinds[("ulp", "max_ulp")]
    assert mean["threshold"] == top["threshold"] and mean["passed"] is top["passed"]
