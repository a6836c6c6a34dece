"""Reruns of an impl whose run-to-run results vary (atomic_add, ``deterministic: false``): how many runs, the
spread recorded (checked against numpy in float64), which run the criteria see, and verdicts that hold over
reruns of the whole case."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
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
        assert (det["runs"], det["chosen_from"], det["required"]) == (4, 4, False)
        assert det["impl_spread_ulp"] > 0 and det["impl_varying"] > 0
        verdicts.add(case["verdict"])
    assert verdicts == {"pass"}
