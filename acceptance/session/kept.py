"""Measured cases held compactly between the case loop and the decision, and decided in one streaming pass.

A :class:`~acceptance.records.MeasuredCase` as pydantic objects costs about ten times its compact JSON (every
per-output dict, per-trial list and statistic an object of its own), and a run of 20,000 cases held that way
is gigabytes the cyclic garbage collector walks again and again. The session keeps each finished case as its
compact JSON (the bytes the journal wrote) and the p-values Holm needs; the decision then reads one case at a
time back (the JSON round trip is exact: floats in their shortest round-trip form, non-finite ones as strings),
so a case's object graph lives only while it is decided.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence

from acceptance.records import CaseResult, MeasuredCase
from acceptance.spec import Case, rules_for

#: The p-values of one dual-delta record Holm adjusts, and the fields their adjusted values go to.
_ADJUSTED = (("p_value", "p_adjusted"), ("p_worst", "p_worst_adjusted"))


@dataclasses.dataclass(frozen=True, slots=True)
class Kept:
    """One measured case as held until the decision: its id, its compact JSON (``MeasuredCase.model_dump_json``,
    UTF-8), per dual-delta record its sign test's and worst-trial test's p-values (``None``: not tested), and the
    case it measures (whose rules decide it)."""

    id: str
    json: bytes
    p_values: tuple[tuple[float | None, float | None], ...]
    case: Case

    @classmethod
    def of(cls, measured: MeasuredCase, case: Case, compact: bytes | None = None) -> Kept:
        """``measured`` kept compactly; ``compact``: its compact JSON when already made (by the journal)."""
        if compact is None:
            compact = measured.model_dump_json().encode("utf-8", "surrogatepass")
        p_values = tuple((r.p_value, r.p_worst) for r in measured.dual_delta)
        return cls(measured.id, compact, p_values, case)

    def measured(self) -> MeasuredCase:
        """The measured case read back."""
        return MeasuredCase.model_validate_json(self.json)


def decided(kept: Sequence[Kept], *, strict: bool = False) -> Iterator[CaseResult]:
    """Each case of ``kept`` decided, in the order given: Holm over every p-value of every dual-delta record of
    ``kept`` (:func:`acceptance.numerics.stats.holm`: ``p_adjusted`` and ``p_worst_adjusted``, as
    :func:`acceptance.decide.run.decide_all` sets them), then the case's verdict
    (:func:`acceptance.decide.verdict.decide`) by its rules (:func:`acceptance.spec.rules_for`), one case read
    back at a time."""
    from acceptance.decide import verdict
    from acceptance.numerics import stats  # scipy.stats: loaded only to decide

    family = [p for k in kept for pair in k.p_values for p in pair if p is not None]
    adjusted = iter(stats.holm(family).tolist() if family else [])
    for k in kept:
        case = k.measured()
        if case.dual_delta:
            records = []
            for rec, pair in zip(case.dual_delta, k.p_values, strict=True):
                update = {
                    name: float(next(adjusted)) for p, (_, name) in zip(pair, _ADJUSTED, strict=True) if p is not None
                }
                records.append(rec.model_copy(update=update))
            case = case.model_copy(update={"dual_delta": records})
        yield verdict.decide(case, rules_for(k.case), strict=strict)
