"""Thresholds tuned on a legitimate impl against MLU-OPS's defaults: how many of the mutation suite's bugs the
fixed criteria alone (dual-delta off) catch under each.

For every bug spec of ``tests/mutation_specs`` (impl = the bug, baseline = the correct kernel):

1. a legitimate twin: the same spec with a legitimate technique as impl (split-K matmul, shuffled atomics,
   log-sum-exp softmax, flush-to-zero exp; the baseline itself where the suite has no legitimate variant);
2. ``acceptance.tune`` proposals from the twin over seeds 0..S-1 (margin 2, 1-2-5 steps, rounding floor);
3. the bug run with the MLU-OPS default thresholds and with the tuned ones, dual-delta off, seed 1000; the twin
   run with the tuned ones on seed 1000 (fresh seeds: a false alarm shows there).

A bug counts as caught when one of its cases fails. ``threshold`` counts only the diff1/diff2 criteria (the
thresholds that tuning changes); ``fixed`` counts every non-dual-delta criterion (placement, bits, ULP, diff4
rule too). Run: ``python benchmarks/tune_mutations.py [--seeds 3] [--trials 10]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from acceptance import spec  # noqa: E402
from acceptance.decide.proposal import observations, proposals  # noqa: E402
from acceptance.device import resolve_device  # noqa: E402
from acceptance.session.run import run_cases  # noqa: E402

SPECS = ROOT / "tests" / "mutation_specs"
#: baseline -> a legitimate technique for the same function (tests/mutants.py, tests/mutant_kernels.py)
LEGIT = {
    "../mutants.py:matmul": "../mutants.py:matmul_split_k",
    "../mutants.py:index_add": "../mutants.py:index_add_shuffled",
    "../mutants.py:softmax": "../mutants.py:softmax_logsumexp",
    "../mutant_kernels.py:exp": "../mutant_kernels.py:exp_flush_subnormal",
    # the quantized specs' baseline is the float matmul of the dequantized values; the legitimate kernel is the
    # reference q4_0 x q8_1 one (zero point folded through q8_1's fp16 s)
    "../../operator_specs/_ops.py:matmul_nt": "acceptance.formats.quant_kernels:matmul_q4_0_q8_1",
}


def run(s, seed: int, trials: int):
    cases = spec.expand([dataclasses.replace(s, seed=seed, dual_delta={"enabled": False})])
    return run_cases(cases, resolve_device("cpu"), trials=trials, isolate=False)


def caught(results, kinds) -> bool:
    return any(c.passed is False and c.kind in kinds for r in results for c in r.criteria) or any(
        r.verdict == "error" for r in results
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=10)
    args = ap.parse_args()
    rows = []
    totals = {"default_threshold": 0, "default_fixed": 0, "tuned_threshold": 0, "tuned_fixed": 0, "twin_false": 0}
    bugs = sorted(SPECS.glob("bug_*.yaml"))
    for path in bugs:
        bug, problems = spec.load_spec(path)
        assert not problems, problems
        twin = dataclasses.replace(bug, impl=LEGIT.get(bug.baseline, bug.baseline), name=f"{bug.name}_twin")
        tuned_cases = [
            c for k in range(args.seeds) for c in run(dataclasses.replace(twin, thresholds={}), k, args.trials)
        ]
        tuned: dict[str, dict] = {}
        for p in proposals(observations(tuned_cases)):
            tuned.setdefault(p.dtype, {})[p.metric] = p.proposed
        default = run(dataclasses.replace(bug, thresholds={}), 1000, args.trials)
        with_tuned = run(dataclasses.replace(bug, thresholds=tuned), 1000, args.trials)
        twin_fresh = run(dataclasses.replace(twin, thresholds=tuned), 1000, args.trials)
        th, fx = ("threshold",), ("threshold", "placement", "bits", "ulp", "diff4")
        row = (
            path.stem,
            twin.impl.split(":")[1],
            caught(default, th),
            caught(default, fx),
            caught(with_tuned, th),
            caught(with_tuned, fx),
            any(r.verdict != "pass" for r in twin_fresh),
            "; ".join(f"{d}: " + ", ".join(f"{m} <= {v}" for m, v in t.items()) for d, t in tuned.items()),
        )
        rows.append(row)
        for key, hit in zip(totals, row[2:7], strict=False):
            totals[key] += hit
        print(
            f"{row[0]:<28} twin {row[1]:<22} default thr/fixed {row[2]!s:<5}/{row[3]!s:<5} "
            f"tuned thr/fixed {row[4]!s:<5}/{row[5]!s:<5} twin false alarm {row[6]!s:<5} {row[7]}",
            flush=True,
        )
    n = len(bugs)
    print(f"\nbugs caught, dual-delta off, of {n}:")
    print(
        f"  MLU-OPS defaults: {totals['default_threshold']} by diff1/diff2, {totals['default_fixed']} by every "
        "fixed criterion"
    )
    print(
        f"  tuned ({args.seeds} seeds, margin 2): {totals['tuned_threshold']} by diff1/diff2, "
        f"{totals['tuned_fixed']} by every fixed criterion"
    )
    print(f"  legitimate twins failing with the tuned thresholds on a fresh seed: {totals['twin_false']} of {n}")


if __name__ == "__main__":
    main()
