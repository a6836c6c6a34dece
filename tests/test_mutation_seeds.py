"""The mutation suite's verdicts do not depend on the seed: for each of 20 seeds, ``acceptance run
tests/mutation_specs --seed S`` fails every injected bug (``bug_*``) and passes every legitimate variant
(``legit_*``), every case of every spec.

Each seed is one in-process CLI run (click's runner: no process start-up; ``--no-isolation``: the kernels
are the suite's own, and verdicts, not isolation, are under test here) with torch on one thread: the
tensors of a trial are small, and on a loaded 2-core machine OpenMP's second thread costs far more than it
brings.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.session import results as results_mod

SPECS = Path(__file__).parent / "mutation_specs"
SEEDS = range(20)


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # each run's verdicts as on a one-thread worker


def expected(operator: str) -> str:
    return "fail" if operator.startswith("bug_") else "pass"


@pytest.mark.parametrize("seed", SEEDS)
def test_every_bug_fails_and_every_variant_passes(seed, tmp_path):
    result = CliRunner().invoke(
        main, ["run", str(SPECS), "--seed", str(seed), "--out", str(tmp_path), "--no-isolation"], catch_exceptions=False
    )
    res = results_mod.load(tmp_path / "results.json")
    assert result.exit_code == 1  # the bugs fail the run
    assert {c.operator for c in res.cases} == {p.stem for p in SPECS.glob("*.yaml")}
    assert all(c.seed == seed for c in res.cases)
    wrong = [
        f"{c.id}: {c.verdict}, expected {expected(c.operator)}; " + " | ".join(c.reasons[:3])
        for c in res.cases
        if c.verdict != expected(c.operator)
    ]
    assert not wrong, f"seed {seed}:\n" + "\n".join(wrong)
