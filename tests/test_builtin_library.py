"""The built-in spec library passes on the CPU, covers every category, and its reports are written."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.session import results as results_mod
from acceptance.spec import CATEGORIES

LIBRARY = Path(__file__).resolve().parent.parent / "operator_specs"


@pytest.fixture(scope="module")
def library_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("library")
    result = CliRunner().invoke(
        main, ["run", str(LIBRARY), "--out", str(out), "--device", "cpu"], catch_exceptions=False
    )
    return result, out


def test_library_passes_on_cpu(library_run):
    result, out = library_run
    res = results_mod.load(out / "results.json")
    bad = [(c.id, c.reasons) for c in res.cases if c.verdict != "pass"]
    assert not bad
    assert result.exit_code == 0
    assert {c.category for c in res.cases} == set(CATEGORIES)
    assert (out / "junit.xml").stat().st_size > 0 and (out / "report.html").stat().st_size > 0


def test_library_runs_dual_delta_where_rounding_is_expected(library_run):
    _, out = library_run
    res = results_mod.load(out / "results.json")
    for case in res.cases:
        if case.category in ("arithmetic", "pure_io", "quantized"):  # bit exact; gated on NMSE per format
            assert not case.dual_delta
        else:
            assert case.dual_delta and all(len(r.delta_impl) == case.trials for r in case.dual_delta)
