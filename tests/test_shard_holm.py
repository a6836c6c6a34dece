"""One Holm family wherever a case ran: merged shards decide as the unsharded run (verdicts, adjusted p-values,
reasons, criteria); shards are balanced by cost (estimated, or measured by an earlier run); shards written
before merge with a clear warning."""

import json
import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from statsmodels.stats.multitest import multipletests

from acceptance.cli import main
from acceptance.decide import verdict
from acceptance.decide.verdict import summarize
from acceptance.numerics import stats
from acceptance.records import CaseResult, Environment, MeasuredCase, OutputMeasurement, Results, Timing
from acceptance.session import results as results_mod
from acceptance.session.load import plan_cases
from acceptance.session.options import RunOptions
from acceptance.spec import defaults, load_specs

SPECS = Path(__file__).parent / "shard_holm_specs"
ALPHA = 0.05


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """noisy.yaml (8 cases, 2 dual-delta records each) run whole and as shards 1/4..4/4 (8 trials), then the
    shards merged by ``acceptance report --merged``."""
    root = tmp_path_factory.mktemp("holm")
    common = ["--no-isolation", "-j", "1", "--trials", "8"]
    invoke("run", SPECS / "noisy", "--out", root / "whole", *common)
    for k in (1, 2, 3, 4):
        invoke("run", SPECS / "noisy", "--out", root / f"s{k}", "--shard", f"{k}/4", *common)
    shards = [root / f"s{k}" / "results.json" for k in (4, 2, 1, 3)]
    r = invoke("report", *shards, "--merged", root / "merged.json")
    assert r.exit_code == 0, r.output
    return root


def _load(path) -> dict:
    return json.loads(Path(path).read_text())


def _raw(cases) -> list[float]:
    """Every raw p-value of the records, sign test then worst trial per record, in run order."""
    return [p for c in cases for rec in c["dual_delta"] for p in (rec["p_value"], rec["p_worst"])]


def _adjusted(cases) -> list[float]:
    return [p for c in cases for rec in c["dual_delta"] for p in (rec["p_adjusted"], rec["p_worst_adjusted"])]


def _holm(p: list[float]) -> np.ndarray:
    """Holm's step-down adjusted p-values, written out: sorted ascending, adj_(i) = min(1, max_{j<=i} (m-j+1) p_(j))."""
    p_arr = np.asarray(p, dtype=np.float64)
    order = np.argsort(p_arr)
    m = p_arr.size
    out = np.empty(m)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * p_arr[i])
        out[i] = min(1.0, running)
    return out


def test_merged_shards_decide_as_the_unsharded_run(runs):
    whole = _load(runs / "whole" / "results.json")["cases"]
    merged = _load(runs / "merged.json")
    assert [c["id"] for c in merged["cases"]] == [c["id"] for c in whole]
    for w, m in zip(whole, merged["cases"], strict=True):
        for field in ("verdict", "reasons", "criteria", "dual_delta", "tolerance_to_pass", "metrics"):
            assert m[field] == w[field], (w["id"], field)
    assert merged["summary"] == _load(runs / "whole" / "results.json")["summary"]
    assert results_mod.load(runs / "merged.json").summary.failed == 1  # it reads back: digest and verdicts hold


def test_the_merged_adjusted_p_values_are_holm_over_the_whole_run(runs):
    whole = _load(runs / "whole" / "results.json")["cases"]
    raw = _raw(whole)
    assert len(raw) == 32 and len({round(p, 6) for p in raw}) >= 5  # 8 cases x 2 records x 2 tests, spread
    merged = _adjusted(_load(runs / "merged.json")["cases"])
    np.testing.assert_allclose(merged, _holm(raw), rtol=1e-12)
    _, statsmodels_holm, _, _ = multipletests(raw, alpha=ALPHA, method="holm")
    np.testing.assert_allclose(merged, statsmodels_holm, rtol=1e-12)


def test_per_shard_holm_decided_differently_and_the_merge_undoes_it(runs):
    """Holm over a shard's 8 p-values (not the run's 32) adjusts less: a sign test p = 2^-8 = 0.0039 became
    0.023 or 0.031 in its shard (fail) but is 0.117 over the run (pass)."""
    whole = {c["id"]: c for c in _load(runs / "whole" / "results.json")["cases"]}
    merged = {c["id"]: c for c in _load(runs / "merged.json")["cases"]}
    flipped = []
    for k in (1, 2, 3, 4):
        shard = _load(runs / f"s{k}" / "results.json")["cases"]
        np.testing.assert_allclose(_adjusted(shard), _holm(_raw(shard)), rtol=1e-12)
        for c in shard:
            sign_p = c["dual_delta"][0]["p_value"]
            if c["verdict"] != whole[c["id"]]["verdict"]:
                flipped.append((c["id"], c["dual_delta"][0]["p_adjusted"], merged[c["id"]]["dual_delta"][0]))
                assert sign_p == pytest.approx(2.0**-8)
    assert len(flipped) >= 1
    for _, shard_adjusted, rec in flipped:
        assert shard_adjusted < ALPHA <= rec["p_adjusted"]
        assert rec["p_adjusted"] == pytest.approx(min(1.0, 30 * 2.0**-8))  # after the 2 smaller p_worst of 32
        assert rec["passed"] is True


def test_shards_record_positions_and_cover_the_run_once(runs):
    whole = [c["id"] for c in _load(runs / "whole" / "results.json")["cases"]]
    seen: list[int] = []
    for k in (1, 2, 3, 4):
        data = _load(runs / f"s{k}" / "results.json")
        positions = data["plan"]["positions"]
        assert [c["id"] for c in data["cases"]] == [whole[i] for i in positions]
        assert positions == sorted(positions) and data["plan"]["shard_cases"] == [2, 2, 2, 2]
        seen += positions
    assert sorted(seen) == list(range(8))


def test_a_missing_shard_says_how_many_cases_are_missing(runs, tmp_path):
    r = invoke("report", *(runs / f"s{k}" / "results.json" for k in (1, 2, 3)), "--merged", tmp_path / "m.json")
    assert r.exit_code == 2 and "shard 4/4 missing: 2 of the run's 8 cases are in no file given" in r.output


# ------------------------------------------------------------------------------------------ cost balance


def _specs():
    specs, problems = load_specs([SPECS / "costs"])
    assert not problems
    return specs


def _by_hand(case) -> float:
    """The documented cost model: 1e6 + T (1e4 + E (2 + R)/3 M B); activation: deterministic (R = 2), forward
    only (B = 1); M = 300 for the mpmath oracle; T = 10 trials."""
    elements = math.prod(case.shapes[0])
    mpmath = 300.0 if isinstance(case.spec.oracle, dict) else 1.0
    return 1e6 + 10 * (1e4 + elements * (2 + 2) / 3 * mpmath)


def _greedy(costs: list[float], n: int) -> list[int]:
    """Longest first, written out: each case (costliest first, ties in order) to the least loaded shard (ties:
    the lowest)."""
    loads = [0.0] * n
    out = [0] * len(costs)
    for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
        k = min(range(n), key=lambda s: (loads[s], s))
        out[i] = k + 1
        loads[k] += costs[i]
    return out


def test_shards_are_balanced_by_cost(tmp_path):
    specs = _specs()
    planned = [plan_cases(specs, RunOptions(shard=(k, 4))) for k in (1, 2, 3, 4)]
    everything = planned[0].everything
    assert len(everything) == 18
    assert all(p.shards == planned[0].shards for p in planned)  # every shard computes the same assignment
    ids = [c.id for p in planned for c in p.cases]
    assert sorted(ids) == sorted(c.id for c in everything) and len(set(ids)) == len(ids)  # each case once
    costs = [_by_hand(c) for c in everything]
    loads = [sum(costs[i] for i, c in enumerate(everything) if c.id in {x.id for x in p.cases}) for p in planned]
    # longest first: the costliest shard exceeds the cheapest by at most the costliest case, and is within 4/3
    # of the best possible (no shard can do with less than the total / 4 or the costliest case)
    assert max(loads) - min(loads) <= max(costs)
    assert max(loads) <= 4 / 3 * max(sum(costs) / 4, max(costs))
    round_robin = [sum(costs[k::4]) for k in range(4)]
    assert max(loads) < 0.6 * max(round_robin)  # by position, two of the three 3e6..4e6-element cases share one
    assert planned[0].shards == _greedy(costs, 4)


def _environment() -> Environment:
    now = "2026-01-01T00:00:00+00:00"
    fields = ("acceptance", "python", "torch", "numpy", "platform", "host", "device", "device_name")
    return Environment(**{f: "x" for f in fields}, start_time=now, end_time=now)


def test_shard_costs_from_an_earlier_run(tmp_path):
    specs = _specs()
    everything = plan_cases(specs, RunOptions()).everything
    measured = {everything[0].id: 40.0, everything[8].id: 2.0, everything[16].id: 0.5}  # N=8, 4096x1024, mpmath
    cases = [
        CaseResult(
            id=i,
            operator="op",
            category="activation",
            spec_file="x.yaml",
            dtype="float32",
            params={},
            trials=10,
            seed=5,
            verdict="pass",
            timing=Timing(total=t),
        )  # fmt: skip
        for i, t in measured.items()
    ]
    earlier = Results(environment=_environment(), summary=summarize(cases), cases=cases)
    path = results_mod.write(earlier, tmp_path / "earlier" / "results.json")
    estimates = [_by_hand(c) for c in everything]
    scale = sum(measured.values()) / sum(estimates[i] for i in (0, 8, 16))
    costs = [measured.get(c.id, e * scale) for c, e in zip(everything, estimates, strict=True)]
    expected = _greedy(costs, 4)
    for given in (path, path.parent):
        planned = plan_cases(specs, RunOptions(shard=(2, 4), shard_costs=given))
        assert planned.shards == expected
        assert planned.shards != _greedy(estimates, 4)  # the timings changed the assignment
    alone = expected[0]  # the case measured at 40 s: no other case is costlier, it leads its shard
    assert costs[0] == max(c for c, s in zip(costs, expected, strict=True) if s == alone)


def test_shard_costs_errors_are_usage_errors(tmp_path):
    r = invoke("run", SPECS / "costs", "--out", tmp_path / "o", "--shard", "1/2", "--shard-costs", tmp_path / "none")
    assert r.exit_code == 2 and f"--shard-costs: {tmp_path / 'none'}: no such file or directory" in r.output
    assert "Traceback" not in r.output
    r = invoke("run", SPECS / "costs", "--out", tmp_path / "o", "--shard-costs", tmp_path)
    assert r.exit_code == 2 and "only with --shard K/N" in r.output


# ------------------------------------------------------------------------------------------ shards written before


def _old_style_shard(whole: Results, k: int, n: int, path: Path) -> Path:
    """Shard k/n as written before positions: every n-th case, no positions, no waiver facts in the cases; its
    digest over the fields it holds."""
    data = whole.model_dump(mode="json")
    cases = data["cases"][k - 1 :: n]
    for c in cases:
        del c["waiver_covers"], c["expired_waiver"]
    part = [c["id"] for c in cases]
    decided = [CaseResult.model_validate(c) for c in cases]
    data.update(
        cases=cases,
        summary=summarize(decided).model_dump(mode="json"),
        plan={
            "shard": [k, n],
            "cases": len(whole.cases),
            "digest": whole.plan.digest,
            "part_digest": results_mod.ids_digest(part),
            "missing_shards": [],
        },
        digest=None,
    )
    data["digest"] = results_mod.content_digest(Results.model_validate(data), as_read=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))
    return path


def test_shards_written_before_merge_with_a_warning(runs, tmp_path):
    whole = results_mod.load(runs / "whole" / "results.json")
    old = [_old_style_shard(whole, k, 4, tmp_path / f"old{k}" / "results.json") for k in (1, 2, 3, 4)]
    r = invoke("report", *old, "--merged", tmp_path / "m.json")
    assert r.exit_code == 0, r.output
    assert "shards written before a merge re-decided the run as one Holm family" in r.output
    merged = _load(tmp_path / "m.json")
    assert [c["id"] for c in merged["cases"]] == [c.id for c in whole.cases]
    r = invoke("report", old[0], *(runs / f"s{k}" / "results.json" for k in (2, 3, 4)))
    assert r.exit_code == 2 and "a shard written before shards were balanced by cost" in r.output


# ------------------------------------------------------------------------------------------ one decision step


def _measured_with_gate(p_adjusted: float) -> MeasuredCase:
    """A reduction case that passes its fixed thresholds, with one max_hyb record whose impl error is 3x the
    baseline's in all 8 trials (sign test p = 2^-8) and the given Holm-adjusted p."""
    rec = stats.analyze([3e-6] * 8, [1e-6 + 1e-8 * k for k in range(8)], metric="max_hyb", factor=2.0)
    assert rec.p_value == pytest.approx(2.0**-8)
    rec = rec.model_copy(update={"p_adjusted": p_adjusted, "p_worst_adjusted": 1.0})
    metrics = {"diff1": 1e-4, "diff2": 1e-4, "nan_mismatch": 0.0, "inf_mismatch": 0.0}
    return MeasuredCase(
        id="op[float32]", operator="op", category="reduction", spec_file="op.yaml", dtype="float32", params={},
        trials=8, seed=0, outputs=[OutputMeasurement(metrics=metrics)], dual_delta=[rec],
    )  # fmt: skip


@pytest.mark.parametrize(
    "waiver",
    [{}, {"waiver": "known issue #7"}, {"expired_waiver": "waiver 'old' expired on 2020-01-01"}],
    ids=["none", "waived", "expired"],
)
def test_regate_gives_what_decide_gives_with_the_new_adjusted_p(waiver):
    rules = defaults.Rules(
        category="reduction",
        dtype="float32",
        thresholds=tuple(defaults.thresholds_for("reduction", "float32")),
        diff4=False,
        dual_delta=defaults.dual_delta_settings("reduction", None),
        element_tolerance=3e-3,
        bit_exact=False,
        **waiver,
    )
    in_shard = verdict.decide(_measured_with_gate(8 * 2.0**-8), rules)  # Holm over 8: 0.031 < 0.05
    assert in_shard.verdict == ("skip" if "waiver" in waiver else "fail")
    over_run = verdict.decide(_measured_with_gate(30 * 2.0**-8), rules)  # Holm over 32: 0.117
    assert over_run.verdict == "pass" and over_run.reasons == []
    rec = in_shard.dual_delta[0].model_copy(update={"p_adjusted": 30 * 2.0**-8})
    again = verdict.regate(in_shard.model_copy(update={"dual_delta": [rec]}))
    assert again.model_dump() == over_run.model_dump()
    back = verdict.regate(over_run.model_copy(update={"dual_delta": [in_shard.dual_delta[0]]}))
    assert back.model_dump() == in_shard.model_dump()
    if "expired_waiver" in waiver:
        assert in_shard.reasons[-1] == waiver["expired_waiver"]
