"""The built-in atomic_add specs decide the same way on every rerun of an impl whose atomic updates land in a
fresh random order each call (seeded by the operating system, so no runner seed fixes it): 20 reruns of
``index_add`` and ``scatter_add`` on the same seed give one verdict per case."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.session import results as results_mod

ROOT = Path(__file__).resolve().parents[1]
RERUNS = 20


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # each run's verdicts as on a one-thread worker


def _any_order_specs(folder: Path) -> Path:
    """The built-in atomics specs with the impl replaced by its random-order variant (tests/mutant_kernels.py)
    and the baseline kept as the library's callable."""
    folder.mkdir()
    for name in ("index_add", "scatter_add"):
        text = (ROOT / "operator_specs" / f"{name}.yaml").read_text(encoding="utf-8")
        roles = (
            f"impl: {ROOT / 'tests' / 'mutant_kernels.py'}:{name}_any_order\n"
            f"baseline: {ROOT / 'operator_specs' / '_ops.py'}:{name}\n"
        )
        (folder / f"{name}.yaml").write_text(text.replace(f"impl: _ops.py:{name}\n", roles), encoding="utf-8")
    return folder


def test_atomics_verdicts_do_not_flip_between_reruns(tmp_path):
    specs = _any_order_specs(tmp_path / "specs")
    verdicts: dict[str, set[str]] = {}
    why: dict[str, list[str]] = {}
    for rerun in range(RERUNS):
        out = tmp_path / f"run{rerun}"
        args = ["run", str(specs), "--out", str(out), "--no-isolation", "--dtype", "float32", "--device", "cpu"]
        CliRunner().invoke(main, args, catch_exceptions=False)
        for case in results_mod.load(out / "results.json").cases:
            verdicts.setdefault(case.id, set()).add(case.verdict)
            if case.verdict != "pass":
                why.setdefault(case.id, []).append(f"rerun {rerun}: {case.verdict}: {case.reasons[:1]}")
    assert len(verdicts) == 8  # 4 cases x 2 specs, float32
    assert {case: v for case, v in verdicts.items() if v != {"pass"}} == {}, why
