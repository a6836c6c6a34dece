"""``acceptance.tune()`` and ``acceptance tune`` give the same proposals for the same arguments, isolated or
not (the in-process path computes with the workers' torch thread count and gives the caller's back); and
``--check`` passes a slice of the shipped library while a copy of its spec with a threshold loosened 100x
fails, naming that threshold."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from click.testing import CliRunner

import acceptance
from acceptance.cli import main

ROOT = Path(__file__).resolve().parent.parent
SUM = ROOT / "operator_specs" / "sum.yaml"
ARGS = {"seeds": 2, "dtypes": ["float16"], "trials": 3}


def cli_table(*extra: str) -> str:
    args = ["tune", str(SUM), "--seeds", "2", "--dtype", "float16", "--trials", "3", "--device", "cpu", *extra]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return res.stdout.split("\nproposal:")[0]


def test_api_and_command_propose_the_same_thresholds():
    api = acceptance.tune([SUM], **ARGS)
    assert api.table().strip() == cli_table().strip()
    own = torch.get_num_threads()
    torch.set_num_threads(2)  # a caller with more threads than a worker
    try:
        in_process = acceptance.tune([SUM], isolate=False, **ARGS)
        assert torch.get_num_threads() == 2  # given back
    finally:
        torch.set_num_threads(own)
    assert in_process.table() == api.table()
    assert cli_table("--no-isolation").strip() == api.table().strip()


def test_check_passes_the_shipped_spec_and_catches_a_threshold_loosened_100x(tmp_path):
    spec = ROOT / "operator_specs" / "softmax.yaml"
    args = ["tune", "--seeds", "1", "--dtype", "float32", "--trials", "3", "--device", "cpu", "--check"]
    shipped = CliRunner().invoke(main, [*args, str(spec)])
    assert shipped.exit_code == 0, shipped.output
    copy = tmp_path / "softmax.yaml"
    shutil.copy(spec, copy)
    for extra in spec.parent.glob("*.py"):
        shutil.copy(extra, tmp_path / extra.name)
    text = copy.read_text(encoding="utf-8")
    copy.write_text(text + "\nthresholds: {float32: {diff1: 0.3}}\n", encoding="utf-8")  # MLU-OPS's 3e-3 x 100
    loosened = CliRunner().invoke(main, [*args, str(copy)])
    assert loosened.exit_code == 1
    assert "softmax float32 diff1: loose: spec threshold 0.3 is" in loosened.output
