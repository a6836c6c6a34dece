"""Accuracy regression: no false regressions between seeds of the same code, an error grown 4x under the threshold
is flagged, verdict changes and waivers that can go, and the CLI (compare, run --compare-to) with its reports."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance import spec
from acceptance.cli import main
from acceptance.decide import regression as compare_mod
from acceptance.decide import verdict
from acceptance.device import resolve_device
from acceptance.records import Results
from acceptance.report import comparison as comparison_report
from acceptance.session import provenance
from acceptance.session.run import run_cases

MUTANTS = Path(__file__).resolve().parent / "mutants.py"

KERNEL = """\
import torch


def exp_perturbed(x, k=8):
    # exp off by k * u * sin(1000 x) relative (u = 2^-24): an error that scales with k, far below 3e-3
    y = torch.exp(x.double())
    return (y * (1 + k * 2.0 ** -24 * torch.sin(1000 * x.double()))).to(x.dtype)


def exp(x, k=8):
    return torch.exp(x)
"""

EXP = """\
name: exp_perturbed
category: composite
impl: kernel.py:exp_perturbed
baseline: kernel.py:exp
dtypes: [float32]
inputs:
  - {name: x, shape: [N], dist: {uniform: [-2, 2]}}
params: {k: 8}
cases:
  - {N: 1}
  - {N: 3}
  - {N: 17}
  - {N: 256}
  - {N: 4096}
trials: 10
seed: 0
thresholds: {float32: {diff4: false}}   # the sine's sample mean is a small bias on 17 elements
dual_delta: {enabled: false}
"""

SPLIT_K = f"""\
name: split_k
category: convolution
impl: {MUTANTS}:matmul_split_k
baseline: {MUTANTS}:matmul
dtypes: [float16]
inputs:
  - {{name: a, shape: [M, K], dist: {{normal: [0, 1]}}}}
  - {{name: b, shape: [K, N], dist: {{normal: [0, 1]}}}}
cases:
  - {{M: 1, N: 1, K: 8}}
  - {{M: 4, N: 4, K: 64}}
  - {{M: 16, N: 16, K: 512}}
trials: 10
seed: 0
dual_delta: {{enabled: false}}
"""


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("specs")
    (folder / "kernel.py").write_text(KERNEL, encoding="utf-8")
    (folder / "exp.yaml").write_text(EXP, encoding="utf-8")
    (folder / "split_k.yaml").write_text(SPLIT_K, encoding="utf-8")
    loaded, problems = spec.load_specs([folder / "exp.yaml", folder / "split_k.yaml"])
    assert problems == []
    return folder, loaded


def run(specs_, seed: int, k: int = 8) -> Results:
    seeded = [
        dataclasses.replace(s, seed=seed, params={**s.params, "k": k} if "k" in s.params else s.params) for s in specs_
    ]
    dev = resolve_device("cpu")
    start = provenance.now()
    cases = run_cases(spec.expand(seeded), dev, isolate=False)
    env = provenance.environment(dev, command_line="", start=start, end=provenance.now())
    return Results(environment=env, summary=verdict.summarize(cases), cases=cases)


@pytest.fixture(scope="module")
def seeds(specs):
    return [run(specs[1], seed) for seed in range(6)]


def test_no_regression_between_seeds_of_the_same_code(seeds):
    assert all(c.verdict == "pass" and c.impl_oracle for r in seeds for c in r.cases)
    flagged = []
    for i, base in enumerate(seeds):
        for new in seeds[i + 1 :]:
            cmp = compare_mod.compare_results(base, new)
            assert all(c.change == "same" for c in cmp.cases)
            flagged += cmp.regressions
    assert flagged == []  # 15 pairs x 8 cases x 4 metrics


def test_an_error_grown_4x_under_the_threshold_is_flagged(specs, seeds):
    grown = run(specs[1], 100, k=32)
    assert all(c.verdict == "pass" for c in grown.cases)  # still under every threshold
    cmp = compare_mod.compare_results(seeds[0], grown)
    assert not cmp.passed
    big = next(c for c in cmp.cases if c.id == "exp_perturbed[float32-N=4096]")
    assert big.grew and big.change == "same"
    r = next(r for r in big.ratios if r.metric == "max_hyb")
    # max |e-o|/(1+|o|) at k: ~ k u |o| / (1 + |o|) + rounding; 32 u vs 8 u gives a ratio near 4
    assert 3.0 < r.ratio < 4.5 and r.grew
    assert any(line.startswith("exp_perturbed[float32-N=4096]: ") and "allowed 2x" in line for line in cmp.regressions)
    assert not any(c.grew for c in cmp.cases if c.operator == "split_k")


def test_verdict_changes_and_waivers_that_can_go(seeds):
    base, new = seeds[0], seeds[1]
    first, second, third = new.cases[0], new.cases[1], new.cases[2]
    cases = [
        first.model_copy(update={"verdict": "fail", "reasons": ["x"]}),
        second.model_copy(update={"waiver": "known issue"}),
        third.model_copy(update={"id": "exp_perturbed[float32-N=5]"}),
    ] + new.cases[3:]
    cmp = compare_mod.compare_results(base, new.model_copy(update={"cases": cases}))
    change = {c.id: c.change for c in cmp.cases}
    assert change[first.id] == "regressed" and change[third.id] == "removed"
    assert change["exp_perturbed[float32-N=5]"] == "new"
    assert cmp.regressions[0] == f"{first.id}: pass -> fail"
    assert cmp.waivers_passing == [second.id]
    md = comparison_report.markdown(cmp)
    assert "REGRESSION" in md and f"| {first.id.replace('[', '[')} | pass | fail | regressed |" in md
    assert "Waivers that can go" in md


def test_cli_compare_and_run_compare_to_gate_and_report(specs, tmp_path):
    folder = specs[0]
    cli = CliRunner()
    base = cli.invoke(
        main, ["run", str(folder / "exp.yaml"), "--out", str(tmp_path / "base"), "--device", "cpu", "--no-isolation"]
    )
    assert base.exit_code == 0, base.output
    text = (folder / "exp.yaml").read_text(encoding="utf-8")
    worse = tmp_path / "worse"
    worse.mkdir()
    (worse / "kernel.py").write_text(KERNEL, encoding="utf-8")
    (worse / "exp.yaml").write_text(text.replace("params: {k: 8}", "params: {k: 32}"), encoding="utf-8")
    new = cli.invoke(
        main,
        [
            "run",
            str(worse / "exp.yaml"),
            "--out",
            str(tmp_path / "new"),
            "--device",
            "cpu",
            "--seed",
            "7",
            "--no-isolation",
            "--compare-to",
            str(tmp_path / "base"),
        ],
    )
    assert new.exit_code == 1, new.output
    data = json.loads((tmp_path / "new" / "results.json").read_text(encoding="utf-8"))
    assert data["summary"]["failed"] == 0 and data["summary"]["verdict"] == "fail"
    assert data["comparison"]["passed"] is False and data["comparison"]["base"] == str(tmp_path / "base")
    html = (tmp_path / "new" / "report.html").read_text(encoding="utf-8")
    assert "Compared with" in html and "exp_perturbed[float32-N=4096]" in html
    out = cli.invoke(
        main,
        [
            "compare",
            str(tmp_path / "base" / "results.json"),
            str(tmp_path / "new"),
            "--markdown",
            str(tmp_path / "cmp.md"),
        ],
    )
    assert out.exit_code == 1
    assert "exp_perturbed[float32-N=4096]" in (tmp_path / "cmp.md").read_text(encoding="utf-8")
    import acceptance

    lib = acceptance.compare(tmp_path / "base", tmp_path / "new")
    assert (
        not lib.passed
        and lib.regressions
        == json.loads((tmp_path / "new" / "results.json").read_text(encoding="utf-8"))["comparison"]["regressions"]
    )
    tuned = acceptance.tune(results=[tmp_path / "base" / "results.json"])
    assert {(p.operator, p.metric) for p in tuned.proposals} == {("exp_perturbed", "diff1"), ("exp_perturbed", "diff2")}
    same = cli.invoke(main, ["compare", str(tmp_path / "base"), str(tmp_path / "base"), "--max-ratio", "1"])
    assert same.exit_code == 2 and "--max-ratio: must be > 1" in same.output
