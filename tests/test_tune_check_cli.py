"""`acceptance tune --check` through the command line: exit 1 naming operator, dtype, criterion and both numbers
for a flaky and for a loose threshold, exit 0 for a threshold that fits, on runs and on results files."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance.cli import main

KERNEL = """\
import torch


def twice(x):
    # every element exactly 2x: impl vs baseline and impl vs the oracle give diff1 = diff2 = 1 exactly
    return x * 2


def same(x):
    return x.clone()
"""

SPEC = """\
name: twice
category: composite
impl: kernel.py:twice
baseline: kernel.py:same
dtypes: [float32]
inputs:
  - {{name: x, shape: [N], dist: {{uniform: [-1, 1]}}}}
cases:
  - {{N: 64}}
  - {{N: 1000}}
trials: 2
seed: 0
dual_delta: {{enabled: false}}
thresholds: {{float32: {{diff1: {diff1}, diff2: {diff2}, diff4: false}}}}
"""


def _spec(folder: Path, diff1: str, diff2: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "kernel.py").write_text(KERNEL, encoding="utf-8")
    path = folder / "twice.yaml"
    path.write_text(SPEC.format(diff1=diff1, diff2=diff2), encoding="utf-8")
    return path


def _tune(*args):
    return CliRunner().invoke(main, ["tune", *args, "--seeds", "2", "--device", "cpu", "--no-isolation", "--check"])


def _problems(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("twice float32 ")]


def test_check_fails_a_flaky_and_a_loose_threshold_naming_both_numbers(tmp_path):
    # observed diff1 = diff2 = 1 (x * 2 against x); diff1 <= 0.5 fails every legitimate run (flaky), diff2 <= 1000
    # is 1000 / 1 = 1000x the observed error, past the default 100x (loose)
    out = _tune(str(_spec(tmp_path / "bad", "0.5", "1000")))
    assert out.exit_code == 1, out.output
    assert _problems(out.output) == [
        "twice float32 diff1: flaky: twice[float32-N=64]: observed 1 > threshold 0.5 (and 1 more case)",
        "twice float32 diff2: loose: spec threshold 1000 is 1000x the impl's largest observed error 1 (> 100x)",
    ]


def test_check_passes_thresholds_that_fit_and_the_slack_factor_is_an_option(tmp_path):
    fits = _tune(str(_spec(tmp_path / "ok", "2", "50")))  # 2x and 50x the observed 1
    assert fits.exit_code == 0, fits.output
    assert _problems(fits.output) == []
    tighter = _tune(str(_spec(tmp_path / "ok", "2", "50")), "--max-slack", "20")  # 50x > 20x: loose now
    assert tighter.exit_code == 1
    assert _problems(tighter.output) == [
        "twice float32 diff2: loose: spec threshold 50 is 50x the impl's largest observed error 1 (> 20x)"
    ]


def test_check_reads_results_files_too(tmp_path):
    spec = _spec(tmp_path / "bad", "0.5", "2")
    run = CliRunner().invoke(
        main, ["run", str(spec), "--out", str(tmp_path / "run"), "--device", "cpu", "--no-isolation"]
    )
    assert run.exit_code == 1  # diff1 1 > 0.5 fails the run itself
    out = CliRunner().invoke(main, ["tune", "--from", str(tmp_path / "run"), "--check"])
    assert out.exit_code == 1
    assert _problems(out.output) == [
        "twice float32 diff1: flaky: twice[float32-N=64]: observed 1 > threshold 0.5 (and 1 more case)"
    ]


@pytest.mark.parametrize("args", [["--max-slack", "0.5"], ["--seeds", "0"]])
def test_bad_check_options_are_usage_errors(tmp_path, args):
    out = CliRunner().invoke(main, ["tune", str(_spec(tmp_path, "2", "2")), "--check", *args])
    assert out.exit_code == 2 and args[0] in out.output
