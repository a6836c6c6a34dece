"""The progress of a run, an observer of the case loop: a bar on standard error on an interactive terminal; in a
log (standard output not a terminal, or ``$CI`` set) one status line per finished case on standard output,
``[k/N] VERDICT <case id> — <first reason>``, flushed as the case finishes."""

from __future__ import annotations

import math
import os
import sys
import time
from types import TracebackType
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

    from acceptance.records import CaseResult, MeasuredCase
    from acceptance.spec import Case


#: Seconds between two status lines in a log (:meth:`Progress.status`): where the run stands, not every change.
STATUS_EVERY_S = 5.0


def interactive() -> bool:
    """Whether a person watches: standard output and standard error are terminals and ``$CI`` is not set (CI
    services set ``CI=true``; empty, ``0`` and ``false`` count as unset)."""
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false")
    return not ci and sys.stdout.isatty() and sys.stderr.isatty()


class Progress:
    """``with Progress(total, label, done) as observer:`` watch a run of ``total`` cases, ``done`` of them finished
    before it started (a resumed run). ``strict``: as the run decides vacuous cases (``--strict``), for the status
    lines."""

    def __init__(self, total: int, label: str, done: int = 0, *, strict: bool = False):
        self.total, self.label, self.count, self.strict = total, label, done, strict
        self.bar: ProgressBar[Case | None] | None = None
        self.said = -math.inf  # when a status line was last written to the log

    def __enter__(self) -> Progress:
        if interactive():
            self.bar = click.progressbar(
                length=self.total,
                label=self.label,
                file=sys.stderr,
                item_show_func=_shown,
            ).__enter__()
            self.bar.update(self.count)
        else:
            click.echo(self.label, err=True)
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self.bar is not None:
            self.bar.__exit__(kind, exc, tb)

    def case_started(self, case: Case) -> None:
        pass

    def status(self, line: str) -> None:
        """Where the run stands beyond the cases (the Ray tasks queued, running and done per node): the bar's
        label on a terminal, a line on standard error in a log."""
        from acceptance.wording import safe

        if self.bar is not None:
            self.bar.label = f"{self.label} [{safe(line, 120)}]"
        elif time.monotonic() - self.said >= STATUS_EVERY_S:
            self.said = time.monotonic()
            click.echo(safe(line, 500), err=True)

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        self.count += 1
        if self.bar is not None:
            self.bar.update(1, case)
        else:
            click.echo(status_line(self.count, self.total, decided_alone(case, result, strict=self.strict)))
        return result


def decided_alone(case: Case, result: MeasuredCase, *, strict: bool = False) -> CaseResult:
    """``result`` decided alone: Holm over its own dual-delta records (the run decides over all of them at the end,
    which can turn a dual-delta fail into a pass, never the reverse)."""
    from acceptance.decide.run import decide_all
    from acceptance.spec import rules_for

    (decided,) = decide_all([(result, rules_for(case))], strict=strict)
    return decided


def status_line(k: int, n: int, case: CaseResult) -> str:
    """``[k/N] VERDICT <id>``, and `` — <first reason>`` unless it passed; the verdict upper-case (PASS, FAIL,
    ERROR, SKIP); a fail decided on dual-delta records alone ends in ``(dual-delta: final after Holm over the
    run)``. Every user string made safe for a log (:func:`acceptance.wording.safe`)."""
    from acceptance.wording import safe

    verdict = (case.verdict or "pass").upper()
    line = f"[{k:>{len(str(n))}}/{n}] {verdict} {safe(case.id)}"
    if case.verdict != "pass" and case.reasons:
        line += f" — {safe(case.reasons[0], 300)}"
    failed = [c for c in case.criteria if c.passed is False]
    if case.verdict == "fail" and failed and all(c.kind == "dual_delta" for c in failed):
        line += " (dual-delta: final after Holm over the run)"
    return line


def _shown(case: Case | None) -> str:
    """The case a progress bar shows: its id, control characters made visible, at most 80 characters."""
    from acceptance.wording import safe

    return safe(case.id, 80) if case is not None else ""
