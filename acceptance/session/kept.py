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
    """Each case of ``kept`` decided, in the order given, one case read back at a time: Holm over the whole run's
    p-values, then each case's verdict by its rules (:func:`acceptance.decide.run.decide_held`)."""
    from acceptance.decide.run import decide_held

    return decide_held([(k.measured, rules_for(k.case), k.p_values) for k in kept], strict=strict)
