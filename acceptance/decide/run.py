"""The run's decision: Holm over every dual-delta record of the run, then each case's verdict
(:func:`acceptance.decide.verdict.decide`); which cases the correction leaves underpowered."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence

from acceptance.decide import verdict
from acceptance.records import CaseResult, MeasuredCase
from acceptance.spec import Rules


def decide_all(measured: list[tuple[MeasuredCase, Rules]], *, strict: bool = False) -> list[CaseResult]:
    """Holm over every dual-delta record of the run, then each case's verdict
    (:func:`acceptance.decide.verdict.decide`).
    Holm's adjusted p-values do not depend on the order of the records, so a run decided in parts' order (shards,
    jobs) decides as one."""
    from acceptance.numerics import stats  # scipy.stats: loaded only to decide

    adjusted = iter(stats.apply_holm([rec for case, _ in measured for rec in case.dual_delta]))
    out = []
    for case, rules in measured:
        if case.dual_delta:
            case = case.model_copy(update={"dual_delta": [next(adjusted) for _ in case.dual_delta]})
        out.append(verdict.decide(case, rules, strict=strict))
    return out


#: A measured case held until the decision: a loader of the case (read back from a compact form), its rules, and
#: per dual-delta record its raw sign-test and worst-trial p-values (Holm needs only these).
Held = tuple[Callable[[], MeasuredCase], Rules, Sequence[tuple[float | None, float | None]]]


def decide_held(held: Sequence[Held], *, strict: bool = False) -> Iterator[CaseResult]:
    """Each held case decided, in the order given, as :func:`decide_all` decides them: Holm over every p-value
    of every record first (:func:`acceptance.numerics.stats.holm_pairs`), then one case loaded and decided at a
    time, so only one case's object graph lives at once."""
    from acceptance.numerics import stats  # scipy.stats: loaded only to decide

    adjusted = iter(stats.holm_pairs([pair for _, _, pairs in held for pair in pairs]))
    for load, rules, pairs in held:
        case = load()
        if case.dual_delta:
            records = [stats.with_adjusted(rec, next(adjusted)) for rec, _ in zip(case.dual_delta, pairs, strict=True)]
            case = case.model_copy(update={"dual_delta": records})
        yield verdict.decide(case, rules, strict=strict)


def redecide_all(results: list[CaseResult]) -> list[CaseResult]:
    """Decided cases decided again as one run (a merge of shards, each decided with Holm over its own cases): Holm
    over every dual-delta record of ``results`` (their raw ``p_value`` and ``p_worst``), then each case with
    records gated again and concluded (:func:`acceptance.decide.verdict.regate`). The same adjusted p-values,
    criteria, verdicts and reasons as :func:`decide_all` gives the measured cases in one run."""
    from acceptance.numerics import stats  # scipy.stats: loaded only to decide

    adjusted = iter(stats.apply_holm([rec for case in results for rec in case.dual_delta]))
    out = []
    for case in results:
        if case.dual_delta:
            case = verdict.regate(case.model_copy(update={"dual_delta": [next(adjusted) for _ in case.dual_delta]}))
        out.append(case)
    return out


def underpowered(results: list[CaseResult]) -> tuple[list[str], int, int]:
    """Cases whose dual-delta sign test cannot reach significance after Holm over the run.

    The smallest p-value of an exact one-sided sign test on n trials is 2^-n;
    Holm compares the smallest of m p-values with alpha/m, so a record can fail
    the sign test only when 2^-n < alpha/m, i.e. n > log2(m/alpha). Returns
    (case ids, m, the smallest sufficient n); such cases can still fail the
    deterministic worst-trial check.
    """
    records = [rec for r in results for rec in r.dual_delta]
    if not records:
        return [], 0, 0
    m = len(records)
    alpha = min(rec.alpha for rec in records)
    needed = math.floor(math.log2(m / alpha)) + 1
    ids = [r.id for r in results if any(rec.trials < needed for rec in r.dual_delta)]
    return ids, m, needed
