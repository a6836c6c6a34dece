"""The progress of a run on standard error: a bar on a terminal, lines in a log."""

from __future__ import annotations

import contextlib
import sys

import click


@contextlib.contextmanager
def progress(total: int, label: str, done: int = 0):
    """A progress bar on a terminal; elsewhere (CI logs) a line every ~5 % and at once for every failure."""
    from acceptance.wording import safe

    if sys.stderr.isatty():
        with click.progressbar(
            length=total, label=label, file=sys.stderr, item_show_func=lambda c: safe(c.id, 80) if c else ""
        ) as bar:
            bar.update(done)
            yield lambda case, result: bar.update(1, case)
        return
    click.echo(label, err=True)
    step = max(1, total // 20)
    count = done

    def advance(case, result) -> None:
        nonlocal count
        count += 1
        if result.error is not None:
            click.echo(
                f"[{count:>{len(str(total))}}/{total}] ERROR {safe(case.id)}: {safe(result.error, 300)}", err=True
            )
        elif count % step == 0 or count == total:
            click.echo(f"[{count:>{len(str(total))}}/{total}] {safe(case.id)}", err=True)

    yield advance
