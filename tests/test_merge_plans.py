"""Merges are complete: each shard names its run's plan, and a merge of missing, duplicated, foreign or
interrupted shards fails naming the problem; --allow-partial merges them as interrupted, never a pass."""

import hashlib
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import acceptance
from acceptance.cli import main
from acceptance.decide.verdict import summarize
from acceptance.session import results as results_mod

SPECS = Path(__file__).parent / "integrity_specs"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """six.yaml (6 cases) run whole and as shards 1/3, 2/3, 3/3; shard 3/3 of another run (the same spec with a
    seventh case)."""
    root = tmp_path_factory.mktemp("plans")
    spec = [SPECS / "six.yaml"]
    acceptance.run(spec, out=root / "whole", isolate=False, jobs=1)
    for k in (1, 2, 3):
        acceptance.run(spec, out=root / f"s{k}", shard=(k, 3), isolate=False, jobs=1)
    (root / "seven").mkdir()
    (root / "seven" / "kernels.py").write_bytes((SPECS / "kernels.py").read_bytes())
    (root / "seven" / "six.yaml").write_text((SPECS / "six.yaml").read_text().replace("{N: 8}]", "{N: 8}, {N: 9}]"))
    acceptance.run([root / "seven" / "six.yaml"], out=root / "foreign", shard=(3, 3), isolate=False, jobs=1)
    return root


def _ids(path):
    return [c["id"] for c in json.loads(Path(path).read_text())["cases"]]


#: The shards of six.yaml by cost, longest first: the cases cost more as N grows (N = 3..8, positions 0..5), so
#: N=8 -> 1, N=7 -> 2, N=6 -> 3, then each next one to the cheapest shard so far: N=5 -> 3 (holding only N=6),
#: N=4 -> 2 (N=7 < N=8), N=3 -> 1.
SIX_SHARDS = {1: [0, 5], 2: [1, 4], 3: [2, 3]}


def test_each_shard_records_the_plan_of_the_whole_run(runs):
    whole = _ids(runs / "whole" / "results.json")
    assert len(whole) == 6
    digest = hashlib.sha256("\n".join(whole).encode()).hexdigest()
    for k in (1, 2, 3):
        data = json.loads((runs / f"s{k}" / "results.json").read_text())
        mine = [whole[i] for i in SIX_SHARDS[k]]
        assert [c["id"] for c in data["cases"]] == mine
        assert data["plan"] == {
            "shard": [k, 3],
            "cases": 6,
            "digest": digest,
            "part_digest": hashlib.sha256("\n".join(mine).encode()).hexdigest(),
            "missing_shards": [],
            "positions": SIX_SHARDS[k],
            "shard_cases": [2, 2, 2],
        }


def test_complete_shards_merge_in_run_order_as_a_pass(runs, tmp_path):
    shards = [runs / f"s{k}" / "results.json" for k in (3, 1, 2)]
    r = invoke("report", *shards, "--merged", tmp_path / "m.json")
    assert r.exit_code == 0, r.output
    merged = json.loads((tmp_path / "m.json").read_text())
    assert [c["id"] for c in merged["cases"]] == _ids(runs / "whole" / "results.json")
    assert merged["summary"]["verdict"] == "pass" and merged["summary"]["total"] == 6
    assert merged["interrupted"] is False and merged["plan"]["shard"] is None


def _shard(runs, k):
    return runs / f"s{k}" / "results.json"


def _interrupted_copy(runs, tmp_path):
    """Shard 3/3 as a run cancelled after its first case would have written it."""
    res = results_mod.load(_shard(runs, 3))
    done = res.cases[:1]
    part = res.model_copy(
        update={
            "cases": done,
            "interrupted": True,
            "not_run": [c.id for c in res.cases[1:]],
            "summary": summarize(done, interrupted=143),
        }
    )
    return results_mod.write(part, tmp_path / "cancelled" / "results.json")


PROBLEMS = {
    "missing": (lambda runs, tmp: [_shard(runs, 1), _shard(runs, 2)], "shard 3/3 missing: 2 of the run's 6 cases"),
    "duplicated": (
        lambda runs, tmp: [_shard(runs, 1), _shard(runs, 2), _shard(runs, 2), _shard(runs, 3)],
        "shard 2/3 given twice",
    ),
    "foreign": (
        lambda runs, tmp: [_shard(runs, 1), _shard(runs, 2), runs / "foreign" / "results.json"],
        "a foreign shard",
    ),
    "interrupted": (
        lambda runs, tmp: [_shard(runs, 1), _shard(runs, 2), _interrupted_copy(runs, tmp)],
        "interrupted (1 cases not run)",
    ),
}


@pytest.mark.parametrize("problem", PROBLEMS)
def test_an_incomplete_merge_fails_naming_the_problem_and_allow_partial_never_passes(runs, tmp_path, problem):
    parts, message = PROBLEMS[problem]
    files = parts(runs, tmp_path)
    r = invoke("report", *files, "--merged", tmp_path / "m.json")
    assert r.exit_code == 2 and message in r.output, r.output
    assert "Traceback" not in r.output and not (tmp_path / "m.json").exists()
    r = invoke("report", *files, "--merged", tmp_path / "m.json", "--allow-partial")
    assert r.exit_code == 0, r.output
    assert message in r.output  # said as a warning
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["summary"]["verdict"] == "interrupted" and merged["interrupted"] is True
    assert merged["summary"]["exit_code"] != 0
    assert "INTERRUPTED" in invoke("report", tmp_path / "m.json").output
    if problem == "missing":
        assert merged["plan"]["missing_shards"] == [3]


def test_a_folder_of_incomplete_shards_is_refused_by_compare(runs, tmp_path):
    folder = tmp_path / "shards"
    for k in (1, 2):
        (folder / f"s{k}").mkdir(parents=True)
        (folder / f"s{k}" / "results.json").write_bytes(_shard(runs, k).read_bytes())
    r = invoke("compare", runs / "whole", folder)
    assert r.exit_code == 2 and "shard 3/3 missing" in r.output


def test_whole_runs_still_merge_as_one(runs, tmp_path):
    """Runs without --shard merge as today: cases by id; an interrupted one is refused like a shard."""
    other = tmp_path / "failing"
    acceptance.run([SPECS / "failing.yaml"], out=other, isolate=False, jobs=1)
    r = invoke("report", runs / "whole" / "results.json", other / "results.json", "--merged", tmp_path / "m.json")
    assert r.exit_code == 0, r.output
    merged = json.loads((tmp_path / "m.json").read_text())
    assert merged["summary"]["total"] == 8 and merged["summary"]["failed"] == 2
    assert merged["summary"]["verdict"] == "fail"
    r = invoke("report", runs / "whole" / "results.json", _shard(runs, 1))
    assert r.exit_code == 2 and "a whole run (no --shard) merged with shards" in r.output
