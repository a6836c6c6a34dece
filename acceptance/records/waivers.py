"""What a spec waiver did in a run (applied, unmatched, expired)."""

from __future__ import annotations

from typing import Literal

from acceptance.records.base import Model as _Model


class WaiverRecord(_Model):
    """One waiver of a spec and what it did in a run."""

    spec_file: str
    """The spec that declares it."""
    operator: str
    """Its operator."""
    match: str
    """Its case-id glob."""
    reason: str
    """Why the cases are waived."""
    covers: list[str] = ["fail"]
    """The verdicts it waives: fail, error."""
    expires: str | None = None
    """Last day it applies (ISO date), null for never."""
    link: str | None = None
    """Where its fix is tracked."""
    status: Literal["applied", "unmatched", "expired"]
    """applied: it waived a case of this run; unmatched: no case of this run needed it; expired: past its date,
    it waived nothing."""
    cases: list[str] = []
    """Ids of the cases it waived (applied) or would have waived (expired: the cases that failed or errored)."""
