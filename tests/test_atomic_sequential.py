"""Sequential reruns of nondeterministic kernels (acceptance/measure/determinism.py): the per-trial rule, its
false-flip model checked by simulation, and whole-case verdicts of emulated float16 atomics over 20 reruns.

The emulated impl (``tests/atomic_emulation.py``) accumulates every element's updates in a fresh random order
on each call, rounding to float16 after every ``chunk`` updates; the baseline is the library's CPU op, which
accumulates in float32 and rounds once. Which verdict is right is known by construction where the impl's
typical max_hyb ratio to the baseline is far from the factor 2: 32 float16 roundings per element (ratio 4.0–4.6) is
worse than allowed, one rounding (ratio 1) is not.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats as sps

from acceptance.decide.run import decide_all
from acceptance.measure import determinism
from acceptance.measure.case import measure
from acceptance.spec import expand, load_specs
from acceptance.spec.defaults import rules_for

ROOT = Path(__file__).resolve().parents[1]
RERUNS = 20

SPEC = """name: scatter_add
category: atomic_add
impl: {root}/tests/atomic_emulation.py:scatter_add_atomic
baseline: {root}/operator_specs/_ops.py:scatter_add
dtypes: [float16]
inputs:
  - {{name: x, shape: [M, N], dist: {{uniform: [-1, 1]}}}}
  - {{name: index, shape: [K, N], dtype: int64, dist: {{randint: [0, M]}}}}
  - {{name: src, shape: [K, N], dist: {{uniform: [1, 5]}}}}
cases:
{cases}
trials: 10
seed: 0
"""


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # each run's verdicts as on a one-thread worker


def test_straddles_and_typical():
    assert determinism.straddles([1.0, 2.0, 3.0], 2.5)
    assert not determinism.straddles([1.0, 2.0, 2.5], 2.5)  # at the allowance is within it
    assert not determinism.straddles([2.6, 3.0], 2.5)
    assert determinism.straddles([1.0, math.nan], 2.5)  # NaN is above any allowance
    assert determinism.typical([3.0, 1.0, 2.0]) == 2.0
    assert determinism.typical([4.0, 1.0, 2.0, 3.0]) == 2.5  # even count: mean of the two middle values
    assert determinism.typical([1.0, math.nan, math.nan]) == math.inf


def _over_probability(q: float, r: int, cap: int) -> float:
    """P(the rule puts a trial over its allowance) when each run is over with probability q, independently:
    all r runs over, or the r runs straddle and the median of cap * r runs is over (more than half over; the
    mean of the two middle values of an even count is over when both are, and when exactly half are over it is
    over with probability 1/2 for a symmetric scatter, which the simulation below has)."""
    n = cap * r
    straddle = 1 - q**r - (1 - q) ** r
    # pooled: the first r runs straddle (j of them over, 0 < j < r), the other n - r runs are free
    pooled = 0.0
    for j in range(1, r):
        first = sps.binom.pmf(j, r, q) / straddle if straddle > 0 else 0.0
        more_than_half = sps.binom.sf(n // 2 - j, n - r, q)  # total over >= n/2 + 1
        half = sps.binom.pmf(n // 2 - j, n - r, q)
        pooled += first * (more_than_half + 0.5 * half)
    return q**r + straddle * pooled


@pytest.mark.parametrize("d", [0.0, 0.25, 0.5, 1.0, 2.0])
def test_false_flip_model_matches_a_simulation(d):
    """Runs' errors normal(mu, 1) over the run-to-run randomness, allowance mu + d: the rule's chance to put
    the trial over (the minority side, a flip) is the binomial formula above, at q = 1 - Phi(d)."""
    rng = np.random.default_rng(7)
    r, cap, sims = 5, determinism.RERUN_CAP, 8000
    runs = rng.normal(0.0, 1.0, size=(sims, cap * r))
    over = 0
    for row in runs:
        first = row[:r]
        chosen = row if determinism.straddles(first, d) else first
        over += determinism.typical(chosen) > d
    q = float(sps.norm.sf(d))
    model = _over_probability(q, r, cap)
    assert over / sims == pytest.approx(model, abs=4 * math.sqrt(model * (1 - model) / sims) + 1e-3)
    # against one run (the flip probability of a verdict on a single run, q)
    assert model <= q + 1e-12


def _cases(tmp_path: Path, cases: list[str]) -> list:
    path = tmp_path / "scatter_add.yaml"
    path.write_text(SPEC.format(root=ROOT, cases="\n".join(f"  - {c}" for c in cases)), encoding="utf-8")
    specs, problems = load_specs([path])
    assert not problems, problems
    return expand(specs)


def _verdicts(case, reruns: int) -> tuple[list[str], list[float], list[int]]:
    """Verdicts, max_hyb median ratios and extended trials of ``reruns`` independent measurements of one case."""
    verdicts: list[str] = []
    ratios: list[float] = []
    extended: list[int] = []
    for _ in range(reruns):
        (result,) = decide_all([(measure(case, torch.device("cpu"), rules_for(case)), rules_for(case))])
        rec = next(d for d in result.dual_delta if d.metric == "max_hyb")
        assert rec.ratio is not None and result.determinism is not None
        assert result.determinism.extended_trials is not None
        verdicts.append(result.verdict)
        ratios.append(rec.ratio.median)
        extended.append(result.determinism.extended_trials)
    return verdicts, ratios, extended


def test_emulated_atomics_far_from_the_factor_never_flip(tmp_path):
    worse, alike = _cases(
        tmp_path,
        ["{M: 4, N: 16, K: 128, impl_params: {chunk: 1}}", "{M: 4, N: 16, K: 128, impl_params: {chunk: 1000}}"],
    )
    for case, truth in ((worse, "fail"), (alike, "pass")):
        verdicts, ratios, extended = _verdicts(case, RERUNS)
        print(f"{case.id}: {verdicts.count(truth)}/{RERUNS} {truth}, max_hyb ratio {min(ratios):.3g}-{max(ratios):.3g}")
        assert set(verdicts) == {truth}


def test_emulated_float16_atomics_near_the_factor(tmp_path):
    """The H100 case (float16 atomics, ratio ~2.15 against the factor 2): the verdict and its spread over
    reruns are printed; asserted is only that it fails on most reruns (its typical ratio is above 2)."""
    (near,) = _cases(tmp_path, ["{M: 61, N: 127, K: 128, impl_params: {chunk: 1}}"])
    verdicts, ratios, extended = _verdicts(near, RERUNS)
    print(
        f"{near.id}: {verdicts.count('fail')}/{RERUNS} fail, max_hyb ratio {min(ratios):.3g}-{max(ratios):.3g}, "
        f"trials extended {min(extended)}-{max(extended)} of 10"
    )
    assert verdicts.count("fail") > RERUNS // 2
