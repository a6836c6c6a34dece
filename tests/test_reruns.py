"""Reruns of an impl whose run-to-run results vary (atomic_add, ``deterministic: false``): how many runs, the
spread recorded (checked against numpy in float64), which run the criteria see, and verdicts that hold over
reruns of the whole case."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.measure import determinism
from tests.mutant_kernels import index_add_random_order

ROOT = Path(__file__).resolve().parents[1]


def test_runs_per_trial():
    assert determinism.impl_runs("atomic_add", None, None) == 5
    assert determinism.impl_runs("atomic_add", None, None, atomic_runs=8) == 8
    assert determinism.impl_runs("atomic_add", None, 3) == 3
    assert determinism.impl_runs("elementwise", False, None) == 5
    assert determinism.impl_runs("elementwise", None, 7) == 2  # must be deterministic: two runs suffice
    assert determinism.impl_runs("atomic_add", True, 7) == 2


def _runs(r: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    index = torch.randint(0, 64, (4096,), generator=g)
    src = torch.randn(4096, generator=g)
    runs = [index_add_random_order(index, src) for _ in range(r)]
    oracle = torch.zeros(64, dtype=torch.float64).index_add_(0, index, src.double())
    return runs, oracle


def test_spread_against_numpy():
    runs, oracle = _runs(7)
    x = np.stack([r.numpy().astype(np.float64) for r in runs])
    o = oracle.numpy()
    ulp = np.spacing(np.abs(o.astype(np.float32))).astype(np.float64)  # float32 spacing at the rounded oracle
    gap = x.max(0) - x.min(0)
    assert (gap > 0).sum() > 0  # the random order does change the last bits
    spread, varying = determinism.spread_ulp(runs, oracle)
    assert varying == int((gap > 0).sum())
    assert spread == float((gap / ulp).max())


def test_the_median_run_decides_unless_the_worst_is_gross():
    oracle = torch.tensor([1.0, 2.0, 4.0, 8.0], dtype=torch.float64)
    u = np.spacing(np.float32([1.0, 2.0, 4.0, 8.0])).astype(np.float64)  # float32 ulp at each: 2^-23 * 2^k
    exact = oracle.float()

    def off(steps: list[float]) -> torch.Tensor:
        return torch.tensor(oracle.numpy() + np.array(steps) * u, dtype=torch.float32)

    runs = [off([1, 0, 0, 0]), off([0, 3, 0, 0]), off([1, 1, 1, 0])]
    # mean ulp errors 0, 0.25, 0.75, 0.75: ranked exact, runs[0], runs[1], runs[2]; the lower median is runs[0];
    # the worst (max 1 ulp) is not gross against it (50 x max(1, 1) ulp)
    rr = determinism.Reruns()
    (chosen,) = rr.chosen((exact,), tuple((r,) for r in runs), (oracle,))
    assert torch.equal(chosen, runs[0])
    assert rr.runs == 4 and rr.varying == 3 and rr.spread_ulp == 3.0  # elements 0-2 vary; element 1 by 3 ulp
    nan = exact.clone()
    nan[3] = float("nan")
    (chosen,) = determinism.Reruns().chosen((exact,), ((nan,), (runs[1],)), (oracle,))
    assert torch.isnan(chosen[3])  # more non-finite errors than the median run: gross, it decides
    lost, near = off([0, 0, 51, 0]), off([0, 0, 49, 0])  # 51 > 50 x 1 ulp: gross; 49 is not
    (chosen,) = determinism.Reruns().chosen((exact,), ((lost,), (exact,)), (oracle,))
    assert torch.equal(chosen, lost)
    (chosen,) = determinism.Reruns().chosen((exact,), ((near,), (exact,)), (oracle,))
    assert torch.equal(chosen, exact)


def _spec(folder: Path) -> Path:
    folder.mkdir()
    text = (ROOT / "tests" / "mutation_specs" / "legit_random_order_atomics.yaml").read_text(encoding="utf-8")
    text = text.replace("../", f"{ROOT / 'tests'}/").replace("trials: 20", "trials: 12").replace("U: 2048", "U: 512")
    (folder / "s.yaml").write_text(text, encoding="utf-8")
    return folder


def test_reruns_option_and_stable_verdict(tmp_path):
    specs = _spec(tmp_path / "specs")
    verdicts = set()
    for k in range(6):
        out = tmp_path / f"r{k}"
        args = ["run", str(specs), "--out", str(out), "--no-isolation", "--reruns", "4"]
        CliRunner().invoke(main, args, catch_exceptions=False)
        (case,) = json.loads((out / "results.json").read_text())["cases"]
        det = case["determinism"]
        # 4 runs per trial; a trial whose runs straddle a dual-delta allowance takes 3 x 4 more (RERUN_CAP = 4)
        extended = det["extended_trials"]
        assert (det["runs"], det["chosen_from"], det["required"]) == ((16, 16) if extended else (4, 4)) + (False,)
        assert 0 <= extended <= 12
        assert det["impl_spread_ulp"] > 0 and det["impl_varying"] > 0
        verdicts.add(case["verdict"])
    assert verdicts == {"pass"}


_COUNTING = '''
import torch

CALLS = [0]


def exp_counting(x):
    """exp, with element 0 moved up by (calls mod 4) float32 ulps: any 4 consecutive calls differ by 0-3 ulp."""
    CALLS[0] += 1
    y = torch.exp(x).contiguous()
    y.view(torch.int32)[0] += CALLS[0] % 4
    return y
'''


@pytest.mark.parametrize("isolation", [["--no-isolation"], []], ids=["in-process", "worker"])
def test_reported_spread_matches_an_impl_of_known_spread(tmp_path, isolation):
    """4 runs per trial of an impl whose element 0 takes 4 consecutive ulp steps: the record says 3 ulp of the
    oracle (exp(x) in [1.28, 1.42], one binade, so the float32 ulp is 2^-23 throughout) and one varying element
    per trial; the further runs of the sequential reruns come from the impl's worker as from this process."""
    (tmp_path / "counting.py").write_text(_COUNTING, encoding="utf-8")
    spec = (
        "name: exp_counting\ncategory: activation\ndeterministic: false\n"
        f"impl: {tmp_path / 'counting.py'}:exp_counting\nbaseline: torch:exp\ndtypes: [float32]\n"
        "inputs:\n  - {name: x, shape: [64], dist: {uniform: [0.25, 0.35]}}\ncases:\n  - {}\ntrials: 5\nseed: 0\n"
    )
    (tmp_path / "s.yaml").write_text(spec, encoding="utf-8")
    out = tmp_path / "out"
    args = ["run", str(tmp_path / "s.yaml"), "--out", str(out), *isolation, "--reruns", "4"]
    CliRunner().invoke(main, args, catch_exceptions=False)
    (case,) = json.loads((out / "results.json").read_text())["cases"]
    det = case["determinism"]
    x = np.float32([1.284, 1.419])
    assert (np.spacing(x) == 2.0**-23).all()  # one binade: the spread in ulp is the count of steps
    # every trial straddles the max_hyb allowance max(2 x the baseline's error, free), at most ~1 ulp for a
    # correctly rounded exp: a run with element 0 at its own rounding is within it, one 3 ulp off is not; so
    # every trial takes 4 x 4 runs (RERUN_CAP), whose element 0 still takes the same 4 values
    assert (det["runs"], det["chosen_from"], det["impl_varying"], det["impl_spread_ulp"]) == (16, 16, 5, 3.0)
    assert det["extended_trials"] == 5
