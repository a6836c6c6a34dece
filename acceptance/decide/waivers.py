"""What each waiver of a run did: applied, unmatched (no case of the run needed it) or expired.

A waiver (``waivers:`` of a spec, :class:`~acceptance.spec.model.Waiver`)
waives the cases whose id matches its glob and whose verdict is one it
``covers`` (fail, error), through its ``expires`` date. After a run,
:func:`waiver_records` tells, per waiver of the specs run, what it did, so the
reports can list the waivers that matched nothing (candidates for removal)
and those that expired (their failures count again).
"""

from __future__ import annotations

from datetime import date
from typing import Literal

from acceptance.records import CaseResult, WaiverRecord
from acceptance.spec.cases import glob_match
from acceptance.spec.model import OperatorSpec, Waiver

WaiverStatus = Literal["applied", "unmatched", "expired"]


def waiver_records(
    specs: list[OperatorSpec], cases: list[CaseResult], *, today: date | None = None
) -> list[WaiverRecord]:
    """One record per waiver of ``specs``: ``applied`` with the cases it turned into skip, ``expired`` with the
    failed or errored cases it matches, or ``unmatched``. A case is waived by the first active waiver that
    matches it (as :func:`acceptance.spec.expand` picks it). The cases are grouped by spec file once (not at all
    when no spec has a waiver), so the work grows with the cases plus, per waiver, its own spec's cases."""
    today = today or date.today()
    by_file: dict[str, list[CaseResult]] = {}
    if any(spec.waivers for spec in specs):
        for c in cases:
            by_file.setdefault(c.spec_file, []).append(c)
    out = []
    for spec in specs:
        mine = by_file.get(str(spec.path), [])
        for w in spec.waivers:
            matching = [c for c in mine if glob_match(c.id, w.match)]
            if w.expired(today):
                hit = [c.id for c in matching if c.verdict in ("fail", "error")]
                out.append(_record(spec, w, "expired", hit))
                continue
            waived = [c.id for c in matching if c.verdict == "skip" and c.waiver == w.reason]
            out.append(_record(spec, w, "applied" if waived else "unmatched", waived))
    return out


def _record(spec: OperatorSpec, w: Waiver, status: WaiverStatus, cases: list[str]) -> WaiverRecord:
    """The record of waiver ``w`` of ``spec``: its fields, what it did and the cases it concerns."""
    return WaiverRecord(
        spec_file=str(spec.path),
        operator=spec.name,
        match=w.match,
        reason=w.reason,
        covers=list(w.covers),
        expires=w.expires,
        link=w.link,
        status=status,
        cases=cases,
    )


def unmatched(records: list[WaiverRecord]) -> list[WaiverRecord]:
    """The waivers that waived nothing in the run (expired ones included)."""
    return [r for r in records if r.status != "applied"]
