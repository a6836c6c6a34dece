"""The progress of a run on standard error, an observer of the case loop: a bar on a terminal, lines in a log
(one every ~5 % of the cases, and at once for every case that errored)."""

from __future__ import annotations

import sys
from types import TracebackType
from typing import TYPE_CHECKING

import click

if TYPE_CHECKING:
    from click._termui_impl import ProgressBar

    from acceptance.records import MeasuredCase
    from acceptance.spec import Case


class Progress:
    """``with Progress(total, label, done) as observer:`` watch a run of ``total`` cases, ``done`` of them finished
    before it started (a resumed run)."""

    def __init__(self, total: int, label: str, done: int = 0):
        self.total, self.label, self.count = total, label, done
        self.step = max(1, total // 20)
        self.bar: ProgressBar[Case | None] | None = None

    def __enter__(self) -> Progress:
        if sys.stderr.isatty():
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

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase:
        self.count += 1
        if self.bar is not None:
            self.bar.update(1, case)
            return result
        from acceptance.wording import safe

        width = len(str(self.total))
        if result.error is not None:
            click.echo(
                f"[{self.count:>{width}}/{self.total}] ERROR {safe(case.id)}: {safe(result.error, 300)}", err=True
            )
        elif self.count % self.step == 0 or self.count == self.total:
            click.echo(f"[{self.count:>{width}}/{self.total}] {safe(case.id)}", err=True)
        return result


def _shown(case: Case | None) -> str:
    """The case a progress bar shows: its id, control characters made visible, at most 80 characters."""
    from acceptance.wording import safe

    return safe(case.id, 80) if case is not None else ""
