"""A large results.json made from a real one: its cases replicated under distinct ids with mixed verdicts.

    python benchmarks/scaled_results.py SOURCE/results.json OUT.json --cases 20000

Case ``k`` is a copy of source case ``k mod n`` with the id ``<id>#k``; every 10th copy fails (its first
criterion's value set to three times its threshold), every 25th errors, every 40th is a waived failure (skip),
the rest keep the source's verdict. The summary and digest are recomputed, so ``acceptance report`` accepts
the file. Used by ``benchmarks/report_scale.py`` and the large-report tests.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from acceptance.decide.verdict import summarize
from acceptance.records import CaseResult, Results
from acceptance.session import results as results_io
from acceptance.wording import criterion_text


def _failed(case: CaseResult) -> CaseResult:
    """``case`` with its first numeric criterion failed (value three times the threshold)."""
    criteria = list(case.criteria)
    for i, c in enumerate(criteria):
        if isinstance(c.threshold, float | int) and math.isfinite(c.threshold) and c.comparison == "<=":
            value = 3.0 * c.threshold if c.threshold > 0 else 1.0
            criteria[i] = c.model_copy(update={"value": value, "passed": False})
            reason = criterion_text(criteria[i])
            return case.model_copy(update={"criteria": criteria, "verdict": "fail", "reasons": [reason]})
    return case.model_copy(update={"error": "RuntimeError: no numeric criterion to fail", "verdict": "error"})


def _variant(case: CaseResult, k: int) -> CaseResult:
    case = case.model_copy(update={"id": f"{case.id}#{k}", "seed": case.seed + k})
    if k % 40 == 39:
        return _failed(case).model_copy(update={"verdict": "skip", "waiver": "accepted for this release"})
    if k % 25 == 24:
        return case.model_copy(
            update={"error": f"RuntimeError: kernel launch failed (copy {k})", "verdict": "error", "reasons": []}
        )
    if k % 10 == 9:
        return _failed(case)
    return case


def scaled(source: Results, n: int) -> Results:
    """``n`` cases replicated from ``source`` (see the module docstring)."""
    base = source.cases
    cases = [_variant(base[k % len(base)], k) for k in range(n)]
    return source.model_copy(
        update={"cases": cases, "summary": summarize(cases), "plan": None, "not_run": [], "comparison": None}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--cases", type=int, default=20_000)
    args = parser.parse_args()
    results = scaled(results_io.load(args.source), args.cases)
    results_io.write(results, args.out)
    print(f"wrote {args.out}: {args.cases} cases, {args.out.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
